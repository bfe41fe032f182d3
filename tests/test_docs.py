"""The documentation stays current: every package module (and every module of the repository's tools/) is listed
in docs/layout.md, the README stays a short
front door, and its links into docs/ resolve."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "multiview_plugin"
TOOLS = ROOT / "tools"
LAYOUT = ROOT / "docs" / "layout.md"
README_MAX_LINES = 300


def modules() -> set[str]:
    """The package's modules as paths inside it (``index/build.py``), the tools' from the repository root
    (``tools/reporting/prose.py``)."""
    return ({p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")}
            | {p.relative_to(ROOT).as_posix() for p in TOOLS.rglob("*.py")})


def listed(layout: Path = LAYOUT) -> set[str]:
    return set(re.findall(r"^\| `([\w/]+\.py)` \|", layout.read_text(encoding="utf-8"), flags=re.MULTILINE))


def test_layout_lists_every_module_and_no_stale_one():
    missing, stale = sorted(modules() - listed()), sorted(listed() - modules())
    assert not missing, f"docs/layout.md lacks these modules (add a row each): {missing}"
    assert not stale, f"docs/layout.md lists modules that do not exist: {stale}"


def test_layout_lists_each_module_once():
    rows = re.findall(r"^\| `([\w/]+\.py)` \|", LAYOUT.read_text(encoding="utf-8"), flags=re.MULTILINE)
    twice = sorted({r for r in rows if rows.count(r) > 1})
    assert not twice, f"docs/layout.md lists these modules twice: {twice}"


def test_layout_check_can_fail(tmp_path):
    fake = tmp_path / "layout.md"
    fake.write_text(LAYOUT.read_text(encoding="utf-8").replace("| `scoring.py` |", "| scoring |"), encoding="utf-8")
    assert modules() - listed(fake) == {"scoring.py"}


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, \
        f"README.md has {lines} lines (at most {README_MAX_LINES}): move detail into docs/"


def test_relative_links_in_readme_and_docs_resolve():
    broken = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" in target:
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    # pages other helpers own may not exist in this checkout yet
    broken = [b for b in broken if not b.endswith(("reliability.md", "qdrant.md", "hybrid.md"))]
    assert not broken, f"broken links: {broken}"


def test_no_spec_section_references():
    offenders = []
    for path in ROOT.rglob("*"):
        if path.suffix not in {".py", ".md", ".json", ".toml", ".cfg"} or not path.is_file():
            continue
        if any(part.startswith(".") for part in path.relative_to(ROOT).parts) or "results" in path.parts:
            continue
        if "SPEC " + "\u00a7" in path.read_text(encoding="utf-8", errors="replace"):
            offenders.append(str(path.relative_to(ROOT)))
    assert not offenders, f"'SPEC \u00a7' cites a document outside the repository; cite docs/ or the paper: {offenders}"


def test_extending_examples_run(tiny_bert, monkeypatch):
    """The options, encoder and loss examples of docs/extending.md work as written on a tiny backbone, and the
    option's flag reaches the model."""
    import torch

    from multiview_plugin import registry
    from multiview_plugin.arguments import DataArguments, ModelArguments
    from multiview_plugin.cli import parse_dataclasses
    from multiview_plugin.registry import get_encoder_class, get_loss_class

    # the examples register 'firstlast' and 'softmax_mean': only for this test (other tests list the methods)
    monkeypatch.setattr(registry.ENCODERS, "_items", dict(registry.ENCODERS._items))
    monkeypatch.setattr(registry.LOSSES, "_items", dict(registry.LOSSES._items))

    text = (ROOT / "docs" / "extending.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    blocks = [b for b in blocks if "(add this line" not in b.split("\n", 1)[0]]  # the __init__ lines: test_extending
    assert len(blocks) == 3, "docs/extending.md: expected the options, encoder and loss examples"
    namespace: dict = {}
    for block in blocks:  # in page order: the encoder names the options class above it
        exec(compile(block, "docs/extending.md", "exec"), namespace)
    margs, dargs = parse_dataclasses((ModelArguments, DataArguments), [
        "--model_name", "firstlast", "--model_name_or_path", str(tiny_bert), "--passage_max_len", "32",
        "--loss_name", "softmax_mean"])
    model = get_encoder_class("firstlast").build(margs, dargs).eval()
    batch = model.formatter.passages(["a short one", "a somewhat longer passage about the moon and the sun"])
    with torch.no_grad():
        views, mask = model.encode_passage(batch)
        model.config.options.skip_special = True  # --firstlast_skip_special: the last view moves one token left
        skipped, _ = model.encode_passage(batch)
    assert views.shape[:2] == (2, 2) and mask.all()
    assert torch.equal(skipped[:, 0], views[:, 0]) and not torch.equal(skipped[:, 1], views[:, 1])
    last = batch["attention_mask"].sum(1) - 1
    assert not torch.equal(views[0, 1], views[1, 1]) and int(last[0]) < int(last[1])
    scores = torch.tensor([[[2.0, 0.0], [1.0, float("-inf")]]])
    out = get_loss_class("softmax_mean")()(scores, torch.tensor([0]), 1.0)
    assert torch.isclose(out.loss, torch.nn.functional.cross_entropy(torch.tensor([[1.0, 1.0]]), torch.tensor([0])))


def _doc_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_tests_named_in_the_docs_exist():
    """A test named in README or docs/ (`test_...`), or a test file named there (`tests/....py`), exists: moving or
    renaming a test updates the pages that cite it (docs/reliability.md cites one per guarantee)."""
    defined = {m for p in (ROOT / "tests").rglob("test_*.py")
               for m in re.findall(r"^(?:async )?def (test_\w+)", p.read_text(encoding="utf-8"), flags=re.MULTILINE)}
    missing = []
    for page in _doc_pages():
        text = page.read_text(encoding="utf-8")
        missing += [f"{page.relative_to(ROOT)}: {name}" for name in sorted(set(re.findall(r"`(test_\w+)`", text)))
                    if name not in defined]
        paths = sorted(set(re.findall(r"`(tests/[\w/]+\.py)`", text)))
        missing += [f"{page.relative_to(ROOT)}: {path}" for path in paths if not (ROOT / path).is_file()]
    assert not missing, f"the docs name tests that do not exist (moved or renamed?): {missing}"
