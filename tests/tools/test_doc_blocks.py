"""tools/doc_blocks.py: the runner of README/docs command blocks finds the blocks, honours the skip marker, runs a
page's blocks in order in one scratch copy, and fails naming page:line with the failing command's output."""

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("doc_blocks", ROOT / "tools" / "doc_blocks.py")
doc_blocks = importlib.util.module_from_spec(spec)
sys.modules["doc_blocks"] = doc_blocks
spec.loader.exec_module(doc_blocks)

PAGE = """# A page

```bash
echo one > made.txt
export GREETING=hello
```

Some prose.

```text
not run
```

<!-- docs-ci: skip downloads the whole web -->
```bash
exit 3
```

- a list item with an indented block:
  ```python
  for line in open("made.txt"):
      print(line.strip())
  ```

```console
$ cat made.txt && test "$GREETING" = hello
one
```
"""


def make_repo(tmp_path: Path, page: str = PAGE) -> Path:
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / "docs" / "page.md").write_text(page)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    return repo


def run(repo: Path, *args: str) -> int:
    fixtures = ["--backbone", "unused", "--data", "unused", "--doc2query", "unused"]
    return doc_blocks.main(["--page", "docs/page.md", *fixtures, *args], root=repo)


def test_parse_blocks_lines_languages_and_skips():
    blocks = doc_blocks.parse_blocks(PAGE, "docs/page.md")
    assert [(b.line, b.lang) for b in blocks] == [(4, "bash"), (16, "bash"), (21, "python"), (26, "console")]
    assert blocks[1].skip == "downloads the whole web"
    assert blocks[2].text == 'for line in open("made.txt"):\n    print(line.strip())\n'  # dedented to its fence
    assert doc_blocks.console_commands(blocks[3].text) == 'cat made.txt && test "$GREETING" = hello\n'


def test_a_page_runs_in_order_in_one_scratch_copy(tmp_path, capsys):
    repo = make_repo(tmp_path)
    assert run(repo) == 0
    out = capsys.readouterr().out
    assert "SKIPPED docs/page.md:16: downloads the whole web" in out
    assert "RUN docs/page.md:26" in out
    assert not (repo / "made.txt").exists()  # the blocks wrote into the scratch copy, not the checkout


def test_a_broken_block_fails_naming_page_line_and_output(tmp_path, capsys):
    page = PAGE.replace('for line in open("made.txt"):\n      print(line.strip())', 'print("about to fail")\n  1 / 0')
    repo = make_repo(tmp_path, page)
    assert run(repo) == 1
    err = capsys.readouterr().err
    assert "FAILED docs/page.md:21 (block starting `print(\"about to fail\")`)" in err
    assert "about to fail" in err and "ZeroDivisionError" in err
    assert "docs/page.md:26" not in err  # the page stops at its first failure


def test_a_failing_command_inside_a_bash_block_fails_it(tmp_path, capsys):
    repo = make_repo(tmp_path, "```bash\nfalse --flag\necho never\n```\n")
    assert run(repo) == 1
    assert "FAILED docs/page.md:2" in capsys.readouterr().err


def test_source_blocks_are_appended_to_their_file(tmp_path):
    page = ("```python\n# pkg/mod.py\nX = 1\n```\n\n```python\n# pkg/mod.py (continued)\nY = X + 1\n```\n\n"
            "```bash\npython -c 'import sys; sys.path.insert(0, \"pkg\"); import mod; assert mod.Y == 2'\n```\n")
    repo = make_repo(tmp_path, page)
    assert run(repo) == 0


def test_list_and_unknown_page(tmp_path, capsys):
    repo = make_repo(tmp_path)
    assert run(repo, "--list") == 0
    assert "docs/page.md:16\tbash\tSKIPPED: downloads the whole web" in capsys.readouterr().out
    assert doc_blocks.main(["--page", "docs/none.md"], root=repo) == 2


def test_the_tiny_fixtures_have_the_documented_layout(tmp_path):
    doc_blocks.tiny_squad(tmp_path / "squad" / "dev-v1.1.json")
    doc_blocks.tiny_beir(tmp_path / "beir" / "scifact")
    from multiview_plugin.data.squad import main as squad_main

    squad_main(["--input", str(tmp_path / "squad" / "dev-v1.1.json"), "--output_dir", str(tmp_path / "out")])
    assert (tmp_path / "out" / "train.jsonl").read_text().count("\n") == 32 * 2
    assert (tmp_path / "beir" / "scifact" / "qrels" / "test.tsv").is_file()


def test_what_a_page_leaves_running_is_stopped_when_it_ends(tmp_path):
    import os

    pid_file = tmp_path / "background.pid"
    repo = make_repo(tmp_path, f"```bash\nsleep 300 > /dev/null 2>&1 &\necho $! > {pid_file}\n```\n")
    assert run(repo) == 0
    pid = int(pid_file.read_text())
    try:
        os.kill(pid, 0)
        alive = True
    except ProcessLookupError:
        alive = False
    assert not alive, "the background job of the page's block outlived its page"
