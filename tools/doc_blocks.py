"""Run every command block of README.md and docs/*.md as written (CI: .ci/run; the variables: docs/docs-ci.md).

    python tools/doc_blocks.py                      # every page; exit 1 names each failing page:line
    python tools/doc_blocks.py --page docs/scaling.md --page README.md
    python tools/doc_blocks.py --list               # the blocks, page:line, and which are skipped and why

A block is a fenced ```bash / ```sh / ```shell / ```console (its ``$ `` lines) or ```python block. The blocks of one
page run in order in one scratch working copy of this checkout (its tracked and untracked, not ignored files), so a
page's later blocks see what its earlier ones wrote; each page gets a fresh copy, removed afterwards (--keep keeps
it). Bash blocks run under ``set -euo pipefail`` and pass their exported variables on to the page's next blocks.
A python block whose first line is a comment naming a ``.py`` file of the repository (``# pkg/mod.py ...``) is
source a reader adds to that file: it is appended to it (created if missing) and compiled; any other python block
is run with ``python``.

The environment is a tiny scale of the documented one: ``$DATA`` is a folder of tiny fixture data in the documented
layout (``squad/dev-v1.1.json``: 48 generated articles; ``beir/scifact/``: a generated BEIR folder) and
``$BACKBONE`` a tiny random BERT (4 layers, 32 dims) and ``$DOC2QUERY`` a tiny random T5, all made here in a
temporary folder; pages read them where they train or read data. ``--data DIR`` / ``--backbone NAME`` /
``--doc2query NAME`` use real ones instead.

A block is skipped only when the line right above its fence is ``<!-- docs-ci: skip REASON -->``; the run prints it
as ``SKIPPED page:line: REASON``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LANGUAGES = {"bash": "bash", "sh": "bash", "shell": "bash", "console": "console", "python": "python"}
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+|~~~+)\s*(?P<lang>[\w+-]*)")
SKIP = re.compile(r"^\s*<!--\s*docs-ci:\s*skip\s+(?P<reason>.+?)\s*-->\s*$")
SOURCE_FILE = re.compile(r"^#\s*(?P<path>[\w./-]+\.py)\b")
TAIL_LINES = 40
WORDS = ("the a of in on and to is was who what when where which how city river king queen capital built founded "
         "wrote book play music war science water fire earth moon sun star planet north south east west people "
         "language red green blue large small old new first last").split()


@dataclass
class Block:
    """One command block: its page (relative to the root), the line of its first content line, its language
    (bash, console or python), its text (dedented to the fence) and, when marked, why it is skipped."""

    page: str
    line: int
    lang: str
    text: str
    skip: str | None = None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def first_line(self) -> str:
        return next((s.strip() for s in self.text.splitlines() if s.strip()), "")


def parse_blocks(text: str, page: str) -> list[Block]:
    """The command blocks of a Markdown page, in order (other fenced blocks are output or listings: not run)."""
    lines = text.splitlines()
    blocks, i = [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        fence, indent = match["fence"], len(match["indent"])
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip().startswith(fence)
                    and not lines[j].strip().strip(fence[0])), len(lines))
        lang = LANGUAGES.get(match["lang"].lower())
        if lang:
            body = [s[indent:] if not s[:indent].strip() else s.lstrip() for s in lines[i + 1:end]]
            above = next((s for s in reversed(lines[:i]) if s.strip()), "")
            skip = SKIP.match(above)
            blocks.append(Block(page, i + 2, lang, "\n".join(body) + "\n", skip["reason"] if skip else None))
        i = end + 1
    return blocks


def pages(root: Path = ROOT) -> list[str]:
    """README.md and docs/*.md, relative to ``root``."""
    found = ([root / "README.md"] if (root / "README.md").is_file() else []) + sorted((root / "docs").glob("*.md"))
    return [p.relative_to(root).as_posix() for p in found]


def console_commands(text: str) -> str:
    """The commands of a console transcript: its ``$ `` lines (continuation lines after a trailing backslash)."""
    out, continued = [], False
    for line in text.splitlines():
        if line.startswith("$ ") or continued:
            out.append(line[2:] if line.startswith("$ ") and not continued else line)
            continued = line.rstrip().endswith("\\")
    return "\n".join(out) + "\n"


def copy_checkout(root: Path, dest: Path) -> None:
    """The tracked and untracked, not ignored files of ``root`` (a git checkout; else the whole folder)."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=root, check=True,
                                capture_output=True).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):
        shutil.copytree(root, dest, dirs_exist_ok=True)
        return
    for name in filter(None, listed):
        source = root / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)


def sentence(rng, subject: str, n: int = 6) -> str:
    return f"{subject} " + " ".join(rng.choice(WORDS, n)) + "."


def tiny_squad(path: Path, articles: int = 48, seed: int = 0) -> None:
    """A SQuAD v1.1-format file of ``articles`` generated articles (two paragraphs of three sentences, a question
    each): the converter's default split (train 0-31, eval 32-47) and the quickstart's dev groups find theirs."""
    import numpy as np

    rng = np.random.default_rng(seed)
    data = []
    for a in range(articles):
        paragraphs = []
        for p in range(2):
            facts = [f"entity{a}x{p}x{k}" for k in range(3)]
            context = " ".join(sentence(rng, fact) for fact in facts)
            qas = [{"id": f"q{a}_{p}_{k}", "question": f"which {' '.join(rng.choice(WORDS, 3))} is {facts[k]}?",
                    "answers": [{"text": facts[k], "answer_start": context.index(facts[k])}]} for k in range(p, p + 1)]
            paragraphs.append({"context": context, "qas": qas})
        data.append({"title": f"Article_{a}", "paragraphs": paragraphs})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": "1.1", "data": data}))


def tiny_beir(folder: Path, docs: int = 120, queries: int = 300, seed: int = 0) -> None:
    """A BEIR folder (corpus.jsonl, queries.jsonl, qrels/train.tsv and test.tsv) of generated documents."""
    import numpy as np

    rng = np.random.default_rng(seed)
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    with open(folder / "corpus.jsonl", "w") as f:
        for d in range(docs):
            text = " ".join(sentence(rng, f"claim{d}") for _ in range(3))
            f.write(json.dumps({"_id": f"d{d}", "title": f"Paper {d}", "text": text}) + "\n")
    with open(folder / "queries.jsonl", "w") as f:
        for q in range(queries):
            f.write(json.dumps({"_id": f"q{q}", "text": f"is claim{q % docs} {' '.join(rng.choice(WORDS, 3))}?"})
                    + "\n")
    for split, ids in (("train", range(0, queries - 40)), ("test", range(queries - 40, queries))):
        lines = ["query-id\tcorpus-id\tscore"] + [f"q{q}\td{q % docs}\t1" for q in ids]
        (folder / "qrels" / f"{split}.tsv").write_text("\n".join(lines) + "\n")


def tiny_bert(folder: Path, hidden: int = 32, layers: int = 4, seed: int = 0) -> Path:
    """A random BERT (4 layers, enough for mlr's default layers; 32 dims, 512 positions) with a WordPiece vocabulary
    of common words and characters: nothing is downloaded."""
    if str(ROOT) not in sys.path:  # run as a script (python tools/doc_blocks.py): the repository's tools importable
        sys.path.insert(0, str(ROOT))
    from tools.testing import make_tiny_bert

    return make_tiny_bert(folder, hidden=hidden, layers=layers, seed=seed, positions=512)


def tiny_t5(folder: Path, seed: int = 0) -> Path:
    """A random T5 encoder-decoder (2 + 2 layers, 32 dims) with a word-level tokenizer: a doc2query stand-in."""
    if str(ROOT) not in sys.path:  # run as a script (python tools/doc_blocks.py): the repository's tools importable
        sys.path.insert(0, str(ROOT))
    from tools.testing import make_tiny_t5

    return make_tiny_t5(folder, seq2seq=True, seed=seed)


def prepare(work: Path, args: argparse.Namespace) -> dict[str, str]:
    """The documented variables, pointing at tiny fixtures made under ``work`` unless given."""
    if args.data is None:
        tiny_squad(work / "data" / "squad" / "dev-v1.1.json")
        tiny_beir(work / "data" / "beir" / "scifact")
    return {"DATA": args.data or str(work / "data"),
            "BACKBONE": args.backbone or str(tiny_bert(work / "tiny-bert")),
            "DOC2QUERY": args.doc2query or str(tiny_t5(work / "tiny-doc2query"))}


def block_command(block: Block, clone: Path, state: Path, work: Path) -> list[str]:
    """The process that runs ``block`` in ``clone`` (bash: with the page's exported variables from ``state``)."""
    if block.lang == "python":
        source = SOURCE_FILE.match(block.text)
        if source:
            target = clone / source["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "a") as f:
                f.write(block.text)
            return [sys.executable, "-m", "py_compile", str(target)]
        script = work / f"block-{block.line}.py"
        script.write_text(block.text)
        return [sys.executable, str(script)]
    text = console_commands(block.text) if block.lang == "console" else block.text
    prelude = (f'[ -f "{state}" ] && . "{state}"\n'
               f"trap 'export -p > \"{state}\"' EXIT\nset -euo pipefail\n")
    return ["bash", "-c", prelude + text]


def run_block(block: Block, clone: Path, env: dict[str, str], work: Path, timeout: float,
              groups: list[int]) -> tuple[bool, str]:
    """Runs one block in a process group of its own (recorded in ``groups``: what it leaves running in the
    background is stopped when its page ends); (passed, its combined output)."""
    command = block_command(block, clone, work / "exports.sh", work)
    process = subprocess.Popen(command, cwd=clone, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    groups.append(process.pid)
    try:
        out, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_groups([process.pid])
        out, _ = process.communicate()
        return False, f"{out}\n(timed out after {timeout:.0f} s)"
    return process.returncode == 0, out + ("" if process.returncode == 0 else f"\n(exit status {process.returncode})")


def stop_groups(groups: list[int]) -> None:
    """SIGTERM to the process groups the runner started (background jobs of its blocks), then SIGKILL after 10 s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = []
        for group in groups:
            try:
                os.killpg(group, sig)
                alive.append(group)
            except (ProcessLookupError, PermissionError):
                pass
        for _ in range(20 if alive and sig == signal.SIGTERM else 0):
            time.sleep(0.5)
            alive = [g for g in alive if group_alive(g)]
            if not alive:
                return


def group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def tail(text: str, n: int = TAIL_LINES) -> str:
    return "\n".join("    " + s for s in text.rstrip().splitlines()[-n:])


def run_page(page: str, root: Path, variables: dict[str, str], args: argparse.Namespace) -> list[str]:
    """Runs a page's blocks in order in a fresh scratch copy; the failures as messages (the first failure ends
    the page: its later blocks build on it)."""
    blocks = parse_blocks((root / page).read_text(), page)
    if not blocks:
        return []
    work = Path(tempfile.mkdtemp(prefix=f"doc-blocks-{os.getpid()}-"))
    clone = work / "clone"
    clone.mkdir()
    groups: list[int] = []
    try:
        copy_checkout(root, clone)
        env = {**os.environ, **variables, "PYTHONPATH": str(clone), "HF_HUB_OFFLINE": "1",
               "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "TQDM_DISABLE": "1"}
        for block in blocks:
            if block.skip:
                print(f"SKIPPED {block.where}: {block.skip}", flush=True)
                continue
            print(f"RUN {block.where}: {block.first_line}", flush=True)
            passed, output = run_block(block, clone, env, work, args.timeout, groups)
            if args.verbose:
                print(tail(output, 10**6), flush=True)
            if not passed:
                message = f"FAILED {block.where} (block starting `{block.first_line}`):\n{tail(output)}"
                print(message, flush=True)
                return [message]
        return []
    finally:
        stop_groups(groups)
        if args.keep:
            print(f"kept the scratch copy of {page}: {clone}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None, root: Path = ROOT) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--page", action="append", help="a page to run (repeatable; default: README.md, docs/*.md)")
    parser.add_argument("--list", action="store_true", help="list the blocks and the skipped ones; run nothing")
    parser.add_argument("--data", help="$DATA: a real data folder instead of the tiny fixtures")
    parser.add_argument("--backbone", help="$BACKBONE: a model name or folder instead of the tiny random BERT")
    parser.add_argument("--doc2query", help="$DOC2QUERY: a doc2query model instead of the tiny random T5")
    parser.add_argument("--timeout", type=float, default=600, help="seconds one block may run (default 600)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch copies (their paths are printed)")
    parser.add_argument("--verbose", action="store_true", help="print every block's output")
    args = parser.parse_args(argv)
    chosen = args.page or pages(root)
    missing = [p for p in chosen if not (root / p).is_file()]
    if missing:
        print(f"doc_blocks: no such page: {', '.join(missing)}", file=sys.stderr)
        return 2
    if args.list:
        for page in chosen:
            for b in parse_blocks((root / page).read_text(), page):
                print(f"{b.where}\t{b.lang}\t" + (f"SKIPPED: {b.skip}" if b.skip else b.first_line))
        return 0
    fixtures = Path(tempfile.mkdtemp(prefix=f"doc-blocks-fixtures-{os.getpid()}-"))
    try:
        variables = prepare(fixtures, args)
        failures = [m for page in chosen for m in run_page(page, root, variables, args)]
    finally:
        shutil.rmtree(fixtures, ignore_errors=True)
    if failures:
        print(f"\n{len(failures)} page(s) failed:\n" + "\n".join(failures), file=sys.stderr)
        return 1
    print(f"doc blocks: every block of {len(chosen)} page(s) passed or is marked skipped")
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a terminated run still stops its blocks and cleans up
    sys.exit(main())
