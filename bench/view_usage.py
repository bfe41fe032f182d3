"""View usage on the SQuAD-dev protocol: briefly trained multi-view models, their view-usage plots and explained
DCSR hits for the README.

    python bench/view_usage.py train   --squad_path ../shared/data/squad/dev-v1.1.json --output_dir runs/views
    python bench/view_usage.py analyze --output_dir runs/views --plots_dir results/plots --readme_block block.md

``train`` converts SQuAD (the README's SQuAD-dev protocol) and fine-tunes all-MiniLM-L6-v2 briefly as each
multi-view method (``--steps`` steps of ``--batch_size`` questions, 1 positive + 1 BM25 negative each; 2 shared CPU
cores do not allow more). ``analyze`` encodes the paragraphs of the evaluation articles (a subset of the corpus),
indexes them, runs ``python -m multiview_plugin.driver.analyze`` on each index (plots), and searches a few
questions with the DCSR index with ``--explain`` to print the question, the retrieved passage and its matched
sentence in bold (the README block).
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
from pathlib import Path

BACKBONE = "sentence-transformers/all-MiniLM-L6-v2"
COSINE = ["--normalize", "--temperature", "0.05"]
# method → (model_name, flags); the flags are the quickstart's settings for these methods
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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("stage", choices=["train", "analyze"])
    p.add_argument("--squad_path", default="../shared/data/squad/dev-v1.1.json", help="SQuAD v1.1 dev json.")
    p.add_argument("--output_dir", default="runs/views", help="Data, models, shards, indexes and analyses go here.")
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS), help="Methods to run.")
    p.add_argument("--steps", type=int, default=40, help="Training steps per method.")
    p.add_argument("--batch_size", type=int, default=8, help="Questions per step (1 positive + 1 negative each).")
    p.add_argument("--passage_max_len", type=int, default=128, help="Passage length (positions).")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.stage == "train":
        train(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
