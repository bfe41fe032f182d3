"""docs/extending.md runs as written for a method added inside the repository: its code blocks are written into a
copy of the package at the files their first comment names (a new file, or a line added to an existing
``__init__.py``), and the method then trains for a step through the train driver with its flag and its loss, is
loaded back, and gives its two views per passage."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "extending.md"
BLOCK = re.compile(r"^( *)```python\n(.*?)^\1```", re.S | re.M)
TARGET = re.compile(r"# (multiview_plugin/\S+\.py)( \((continued|add this line[^)]*)\))?\n")


def doc_blocks(text: str) -> list[tuple[str, str, str]]:
    """``(file, mode, code)`` of every python block that names its file: mode '' (a new file), 'continued' or
    'add' (a line added to an existing module)."""
    out = []
    for indent, body in BLOCK.findall(text):
        body = "".join(line[len(indent):] + "\n" for line in body.splitlines())
        match = TARGET.match(body)
        if match:
            mode = (match.group(3) or "").split(" ")[0]
            out.append((match.group(1), mode, body[match.end():]))
    return out


def apply_blocks(blocks: list[tuple[str, str, str]], root: Path) -> list[str]:
    """Write the blocks into the package copy under ``root``: new files, continued files, added imports (put
    first in the ``__init__``, the worst place for a circular import). Returns the files written."""
    written: list[str] = []
    for name, mode, code in blocks:
        path = root / name
        if mode == "add":
            assert path.is_file(), f"{name}: the page adds a line to a file that does not exist"
            text = path.read_text(encoding="utf-8")
            doc, sep, rest = text.partition('"""\n\n') if text.startswith('"""') else ("", "", text)
            future = "from __future__ import annotations\n\n"
            if rest.startswith(future):  # a __future__ import stays first
                doc, sep, rest = doc + sep + future, "", rest[len(future):]
            path.write_text(doc + sep + code + rest, encoding="utf-8")
        elif mode == "continued":
            assert name in written, f"{name}: continued before it was started"
            path.write_text(path.read_text(encoding="utf-8") + "\n\n" + code, encoding="utf-8")
        else:
            assert not path.exists(), f"{name}: the example would overwrite a module of the package"
            path.write_text(code, encoding="utf-8")
        written.append(name)
    return written


def test_the_page_names_a_file_for_each_example_block():
    blocks = doc_blocks(DOC.read_text(encoding="utf-8"))
    files = [name for name, _, _ in blocks]
    assert files == ["multiview_plugin/modeling/firstlast.py", "multiview_plugin/modeling/firstlast.py",
                     "multiview_plugin/modeling/__init__.py", "multiview_plugin/losses/softmax_mean.py",
                     "multiview_plugin/losses/__init__.py"]
    text = DOC.read_text(encoding="utf-8")
    assert "FirstLast" not in text  # one spelling of the class name
    assert "from multiview_plugin.modeling import MultiViewEncoder`)" in text  # named only as what not to do


def test_the_examples_run_as_written_inside_the_repository(tiny_bert, train_file, tmp_path):
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "multiview_plugin", copy / "multiview_plugin",
                    ignore=shutil.ignore_patterns("__pycache__"))
    apply_blocks(doc_blocks(DOC.read_text(encoding="utf-8")), copy)
    out = tmp_path / "out"
    script = f"""
import json, sys
import torch
import multiview_plugin
assert multiview_plugin.__file__.startswith({str(copy)!r}), multiview_plugin.__file__
from multiview_plugin.driver.train import main
from multiview_plugin.modeling import load_encoder
rc = main(["--model_name", "firstlast", "--firstlast_skip_special", "--loss_name", "softmax_mean",
           "--model_name_or_path", {str(tiny_bert)!r}, "--dataset_path", {str(train_file)!r},
           "--output_dir", {str(out)!r}, "--max_steps", "1", "--per_device_train_batch_size", "2",
           "--train_group_size", "2", "--query_max_len", "16", "--passage_max_len", "24", "--report_to", "none",
           "--dataloader_num_workers", "0"])
assert rc == 0, rc
model = load_encoder({str(out)!r}).eval()
batch = model.formatter.passages(["paris is the capital of france", "a short one"])
with torch.no_grad():
    views, mask = model.encode_passage(batch)
print(json.dumps({{"class": type(model).__name__, "views": list(views.shape[:2]), "mask": mask.tolist(),
                  "labels": model.describe_views()["labels"]}}))
"""
    env = {**os.environ, "PYTHONPATH": str(copy), "MULTIVIEW_TRACEBACK": "1"}
    done = subprocess.run([sys.executable, "-c", script], cwd=copy, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"class": "FirstlastEncoder", "views": [2, 2], "mask": [[True, True], [True, True]],
                      "labels": ["first", "last"]}
    saved = json.loads((out / "multiview_config.json").read_text())
    assert saved["model_name"] == "firstlast" and saved["loss_name"] == "softmax_mean"
    assert saved["options"]["firstlast_skip_special"] is True


def test_the_check_sees_a_circular_import(tiny_bert, tmp_path):
    """The page's old import (``from multiview_plugin.modeling import ...`` inside the repository) fails in the
    copy: the test above would catch a page that brings it back."""
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "multiview_plugin", copy / "multiview_plugin",
                    ignore=shutil.ignore_patterns("__pycache__"))
    text = DOC.read_text(encoding="utf-8").replace("from multiview_plugin.modeling.options import",
                                                   "from multiview_plugin.modeling import")
    apply_blocks(doc_blocks(text), copy)
    done = subprocess.run([sys.executable, "-c", "import multiview_plugin.modeling"], cwd=copy,
                          env={**os.environ, "PYTHONPATH": str(copy)}, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "circular import" in done.stderr
