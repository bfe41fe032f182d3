"""Where a recipe's data comes from: DPR's release files, Tevatron's hub copies, Anserini's evaluation files (local,
through Pyserini or ir_datasets, or where to download them) and BEIR's data sets. Read by the runner
(``recipes/run.py``) and by the plans (``recipes/plan.py``: what a full-scale run would download), which import
this module and not each other."""

from __future__ import annotations

import argparse
from pathlib import Path

RECIPES = Path(__file__).resolve().parent
# DPR's release names (https://github.com/facebookresearch/DPR, data/download_data.py)
DPR_FILES = {"nq": ("biencoder-nq-train.json", "nq-test.qa.csv"),
             "triviaqa": ("biencoder-trivia-train.json", "trivia-test.qa.csv"),
             "squad": ("biencoder-squad1-train.json", "squad1-test.qa.csv")}
# Tevatron's hub copies of the same data, used when no --data_dir is given (needs network)
TEVATRON_HUB = {"nq": "Tevatron/wikipedia-nq", "triviaqa": "Tevatron/wikipedia-trivia",
                "squad": "Tevatron/wikipedia-squad"}
TEVATRON_CORPUS = {"nq": "Tevatron/wikipedia-nq-corpus", "triviaqa": "Tevatron/wikipedia-trivia-corpus",
                   "squad": "Tevatron/wikipedia-squad-corpus", "msmarco": "Tevatron/msmarco-passage-corpus"}
ANSERINI_DPR_TOPICS = {"nq": "topics.dpr.nq.test.txt", "triviaqa": "topics.dpr.trivia.test.txt",
                       "squad": "topics.dpr.squad.test.txt"}
BEIR_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/{}.zip"
SHARED = RECIPES.parent.parent / "shared" / "data"  # a developer checkout's data folder, used when it exists
ANSERINI_TOPICS_URL = "https://github.com/castorini/anserini-tools/tree/master/topics-and-qrels"
# the evaluation files by Anserini's file name: their symbolic names in Pyserini (get_topics / get_qrels_file) and
# ir_datasets, and their kind (dpr: "question<TAB>[answers]" lines; topics: "qid<TAB>query"; qrels: TREC qrels)
EVAL_SOURCES = {
    "topics.dpr.nq.test.txt": ("dpr", "dpr-nq-test", "dpr-w100/natural-questions/test"),
    "topics.dpr.trivia.test.txt": ("dpr", "dpr-trivia-test", "dpr-w100/trivia-qa/test"),
    "topics.dpr.squad.test.txt": ("dpr", "dpr-squad-test", None),
    "topics.msmarco-passage.dev-subset.txt": ("topics", "msmarco-passage-dev-subset", "msmarco-passage/dev/small"),
    "qrels.msmarco-passage.dev-subset.txt": ("qrels", "msmarco-passage-dev-subset", "msmarco-passage/dev/small"),
    "topics.dl19-passage.txt": ("topics", "dl19-passage", "msmarco-passage/trec-dl-2019/judged"),
    "qrels.dl19-passage.txt": ("qrels", "dl19-passage", "msmarco-passage/trec-dl-2019/judged"),
    "topics.dl20.txt": ("topics", "dl20", "msmarco-passage/trec-dl-2020/judged"),
    "qrels.dl20-passage.txt": ("qrels", "dl20-passage", "msmarco-passage/trec-dl-2020/judged"),
}


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def locate_eval_file(name: str, args: argparse.Namespace) -> tuple[Path | None, str]:
    """Where an evaluation file (Anserini's name) comes from: (local path, "local") from --topics_dir (or a
    developer checkout's shared data folder when it exists); else (None, how to get it): Pyserini's or
    ir_datasets' symbolic name when that package is installed, or where to download it."""
    sub = "qrels" if name.startswith("qrels.") else "topics"
    if args.topics_dir:
        base = Path(args.topics_dir)
        return next((p for p in (base / sub / name, base / name) if p.is_file()), base / sub / name), "local"
    shared = SHARED / "anserini" / sub / name
    if shared.is_file():
        return shared, "local"
    kind, pyserini_name, irds_name = EVAL_SOURCES[name]
    if _installed("pyserini"):
        return None, f"Pyserini {'get_qrels_file' if kind == 'qrels' else 'get_topics'}({pyserini_name!r})"
    if irds_name and _installed("ir_datasets"):
        return None, f"ir_datasets {irds_name!r}"
    return None, (f"not found: pass --topics_dir (a folder with Anserini's topics/ and qrels/, from "
                  f"{ANSERINI_TOPICS_URL}), or pip install pyserini" + (" or ir_datasets" if irds_name else ""))


def eval_files(benchmark: str, args: argparse.Namespace) -> list[dict]:
    """The evaluation files a full-scale run reads, and where each comes from (for the plan's downloads)."""
    names = ([ANSERINI_DPR_TOPICS[benchmark]] if benchmark in ANSERINI_DPR_TOPICS else
             ["topics.msmarco-passage.dev-subset.txt", "qrels.msmarco-passage.dev-subset.txt",
              "topics.dl19-passage.txt", "qrels.dl19-passage.txt", "topics.dl20.txt", "qrels.dl20-passage.txt"])
    if benchmark in ANSERINI_DPR_TOPICS and args.data_dir:
        return []  # DPR's qa.csv in --data_dir
    out = []
    for name in names:
        path, source = locate_eval_file(name, args)
        out.append({"file": name, "what": "test questions" if "dpr" in name else name.split(".")[0],
                    "source": "local" if path is not None else source})
    return out


def beir_names(recipe: dict, args: argparse.Namespace) -> tuple[str | None, list[str]]:
    """(training BEIR folder or name, evaluation folders or names): the flags, else the recipe's defaults
    (``train_beir``, ``beir_datasets``: bare names, downloaded from BEIR's server)."""
    train = args.train_beir_dir or (None if args.checkpoint else recipe.get("train_beir"))
    return train, list(args.beir_dir or recipe.get("beir_datasets", []))
