"""The README's results tables are exactly what bench/results.py renders from the committed run records."""

import importlib.util
import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("bench_results", ROOT / "bench" / "results.py")
results = importlib.util.module_from_spec(spec)
spec.loader.exec_module(results)


def test_readme_tables_are_in_sync_with_results(tmp_path):
    readme = tmp_path / "README.md"
    shutil.copy(ROOT / "README.md", readme)
    results.render(readme)
    assert readme.read_text(encoding="utf-8") == (ROOT / "README.md").read_text(encoding="utf-8"), \
        "README results are stale: run python bench/results.py render"


def test_settings_come_from_the_recorded_command():
    s = results.quickstart_settings("python -m multiview_plugin.quickstart --data scifact --beir_dir x --steps 7 "
                                    "--batch_size 8")
    assert (s.data, s.steps, s.batch_size, s.learning_rate) == ("scifact", 7, 8, 2e-5)
    for record in (ROOT / "results").glob("*/*.json"):
        assert results.quickstart_settings(json.loads(record.read_text())["command"])
