"""View usage on the SQuAD-dev protocol: briefly trained multi-view models, their view-usage plots and explained
DCSR hits for docs/retrieval.md.

    python bench/view_usage.py train   --squad_path $DATA/squad/dev-v1.1.json --output_dir runs/views
    python bench/view_usage.py analyze --output_dir runs/views --readme_block block.md --readme pages/docs/retrieval.md

``train`` converts SQuAD (the SQuAD-dev protocol, docs/data-formats.md) and fine-tunes all-MiniLM-L6-v2 briefly as each
multi-view method (``--steps`` steps of ``--batch_size`` questions, 1 positive + 1 BM25 negative each; 2 shared CPU
cores do not allow more). ``analyze`` encodes the paragraphs of the evaluation articles (a subset of the corpus),
indexes them, runs ``python -m multiview_plugin.driver.analyze`` on each index (plots), and searches a few
questions with the DCSR index with ``--explain`` to print the question, the retrieved passage and its matched
sentence in bold (the block in docs/retrieval.md).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

from multiview_plugin.atomic import write_lines
from multiview_plugin.data.pseudo_queries import write_sentence_queries

BACKBONE = "sentence-transformers/all-MiniLM-L6-v2"
COSINE = ["--normalize", "--temperature", "0.05"]
# method → (model_name, flags); the flags are the quickstart's settings for these methods
TITLES = {"mvr": "MVR, 8 viewers", "mlr": "MLR, max over layers 6,5,4,3", "dcsr": "DCSR, one vector per sentence",
          "dce": "DCE, one view per pseudo-query (the paragraph's sentences)", "mebert": "ME-BERT, first 8 tokens"}
METHODS = {
    "mvr": ("mvr", ["--normalize", "--temperature", "0.1", "--mvr_min_temperature", "0.03", "--mvr_num_views", "8"]),
    "mlr": ("mlr", ["--mlr_pooling", "max", "--mlr_layers", "6,5,4,3", *COSINE]),
    "dcsr": ("dcsr", ["--pooling", "mean", *COSINE]),
    "dce": ("dce", ["--pooling", "mean", *COSINE]),
    "mebert": ("mebert", ["--mebert_num_vectors", "8", *COSINE]),
}
logger = logging.getLogger("view_usage")


def run(cmd: list[str]) -> None:
    logger.info("$ %s", " ".join(cmd))
    subprocess.run(cmd, check=True)


def prepare(args: argparse.Namespace) -> Path:
    data = Path(args.output_dir) / "data"
    if not (data / "train.jsonl").is_file():
        run([sys.executable, "-m", "multiview_plugin.data.squad", "--input", args.squad_path,
             "--output_dir", str(data)])
    return data


def train(args: argparse.Namespace) -> None:
    data = prepare(args)
    for method in args.methods:
        model_name, flags = METHODS[method]
        out = Path(args.output_dir) / "models" / method
        if (out / "multiview_config.json").is_file():
            logger.info("%s is trained; skipping", out)
            continue
        run([sys.executable, "-m", "multiview_plugin.driver.train", "--model_name", model_name,
             "--model_name_or_path", BACKBONE, *flags, "--dataset_path", str(data / "train.jsonl"),
             "--output_dir", str(out), "--overwrite_output_dir", "--max_steps", str(args.steps),
             "--per_device_train_batch_size", str(args.batch_size), "--train_group_size", "2",
             "--query_max_len", "32", "--passage_max_len", str(args.passage_max_len), "--learning_rate", "2e-5",
             "--warmup_ratio", "0.1", "--save_strategy", "no", "--report_to", "none", "--seed", "42",
             "--logging_steps", "10", "--dataloader_num_workers", "0"])


def eval_subset(data: Path) -> Path:
    """The paragraphs of the evaluation articles (the docids' article index in 32-47): every evaluation question's
    gold paragraph and its neighbours, a sixth of the corpus."""
    out = data / "eval_corpus.jsonl"
    if not out.is_file():
        rows = [line for line in (data / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
                if 32 <= int(json.loads(line)["docid"].split("_")[0]) <= 47]
        write_lines(out, rows)
    return out


def analyze(args: argparse.Namespace) -> None:
    data = Path(args.output_dir) / "data"
    corpus = eval_subset(data)
    plots = Path(args.plots_dir)
    for method in args.methods:
        model = Path(args.output_dir) / "models" / method
        shard = Path(args.output_dir) / "emb" / method / "corpus.0.pkl"
        index = Path(args.output_dir) / "indexes" / method
        extra = []
        if method == "dce":  # no doc2query model offline: each paragraph's sentences stand in (as the quickstart)
            queries = data / "eval_sentence_queries.jsonl"
            write_sentence_queries(str(corpus), queries)
            extra = ["--pseudo_queries", str(queries)]
        run([sys.executable, "-m", "multiview_plugin.driver.encode", "--model_name_or_path", str(model),
             "--dataset_path", str(corpus), "--encode_output_path", str(shard), "--per_device_eval_batch_size", "16",
             *extra])
        run([sys.executable, "-m", "multiview_plugin.driver.index", "--passage_reps", str(shard), "--index_dir",
             str(index), "--overwrite"])
        run([sys.executable, "-m", "multiview_plugin.driver.index", "--report", str(index)])
        out = Path(args.output_dir) / "analysis" / method
        run([sys.executable, "-m", "multiview_plugin.driver.analyze", "--index", str(index), "--topics",
             str(data / "eval_queries.jsonl"), "--qrels", str(data / "eval_qrels.tsv"), "--encoder", str(model),
             "--output_dir", str(out), "--title", f"{method}: {TITLES[method]}"])
        plots.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out / "view_usage.png", plots / f"{method}.png")
        shutil.copyfile(out / "analysis.json", plots / f"{method}.json")
    if "dcsr" in args.methods and args.readme_block:
        block = dcsr_examples(args, data)
        Path(args.readme_block).write_text(block, encoding="utf-8")
        logger.info("wrote %s", args.readme_block)
        if args.readme:
            splice(Path(args.readme), block)


def dcsr_examples(args: argparse.Namespace, data: Path) -> str:
    """Markdown: a few evaluation questions, DCSR's top passage and the sentence that matched, in bold."""
    from multiview_plugin.data.readers import load_corpus, load_qrels, load_queries

    index = Path(args.output_dir) / "indexes" / "dcsr"
    topics = Path(args.output_dir) / "explain_topics.tsv"
    queries, qrels = load_queries(data / "eval_queries.jsonl"), load_qrels(data / "eval_qrels.tsv")
    qids = list(queries)[:: max(1, len(queries) // args.examples)][: args.examples]  # spread over the articles
    write_lines(topics, [f"{q}\t{queries[q]}" for q in qids])
    run_file, explained = Path(args.output_dir) / "explain.trec", Path(args.output_dir) / "explain.jsonl"
    run([sys.executable, "-m", "multiview_plugin.driver.search", "--index", str(index), "--topics", str(topics),
         "--encoder", str(Path(args.output_dir) / "models" / "dcsr"), "--output", str(run_file), "--hits", "1",
         "--explain", str(explained)])
    corpus = load_corpus(data / "eval_corpus.jsonl")
    lines = ["<!-- explain:start -->",
             f"Generated by `python bench/view_usage.py analyze ...` (DCSR, {args.steps} steps; HasAns ranking, "
             "top-1 passage; the matched sentence in bold):", ""]
    for record in (json.loads(x) for x in explained.read_text(encoding="utf-8").splitlines()):
        text = corpus[record["docid"]]
        start, end = record["span"]
        gold = "gold passage" if qrels.get(record["qid"], {}).get(record["docid"], 0) > 0 else "not the gold passage"
        runner = record["runner_up_score"]
        lines += [f"- **Q:** {queries[record['qid']]}  ",
                  f"  `{record['docid']}` ({gold}; sentence {record['view'] + 1} of {record['num_views']}, score "
                  f"{record['view_score']:.3f}" + (f" vs runner-up {runner:.3f}" if runner is not None else "") + ")",
                  f"  > {text[:start]}**{text[start:end]}**{text[end:]}", ""]
    lines.append("<!-- explain:end -->")
    return "\n".join(lines) + "\n"


def splice(readme: Path, block: str) -> None:
    """Replace the README's generated block (between the explain markers) with ``block``."""
    text = readme.read_text(encoding="utf-8")
    start, end = text.find("<!-- explain:start -->"), text.find("<!-- explain:end -->")
    if start < 0 or end < 0:
        raise SystemExit(f"{readme} has no <!-- explain:start --> ... <!-- explain:end --> block")
    end += len("<!-- explain:end -->\n")
    write_lines(readme, (text[:start] + block + text[end:]).splitlines())
    logger.info("updated %s", readme)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("stage", choices=["train", "analyze"])
    p.add_argument("--squad_path", default="../shared/data/squad/dev-v1.1.json", help="SQuAD v1.1 dev json.")
    p.add_argument("--output_dir", default="runs/views", help="Data, models, shards, indexes and analyses go here.")
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS), help="Methods to run.")
    p.add_argument("--steps", type=int, default=40, help="Training steps per method.")
    p.add_argument("--batch_size", type=int, default=8, help="Questions per step (1 positive + 1 negative each).")
    p.add_argument("--passage_max_len", type=int, default=128, help="Passage length (positions).")
    p.add_argument("--plots_dir", default="results/plots/views-squad",
                   help="analyze: where <method>.png/.json are copied.")
    p.add_argument("--readme_block", help="analyze: write the DCSR explained-hits Markdown block here.")
    p.add_argument("--readme", help="analyze: also replace the <!-- explain:start/end --> block of this Markdown file "
                   "(docs/retrieval.md).")
    p.add_argument("--examples", type=int, default=4, help="analyze: questions in the DCSR block.")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.stage == "train":
        train(args)
    else:
        analyze(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
