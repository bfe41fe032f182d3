"""The quickstart's systems and command line (:mod:`multiview_plugin.quickstart`), apart from the run itself: the
reporting module (:mod:`tools.reporting`) reads a recorded run's settings with this parser, so a table row
cannot claim settings its run did not use. Imports nothing beyond the standard library."""

from __future__ import annotations

import argparse
import shlex

BACKBONE = "sentence-transformers/all-MiniLM-L6-v2"
# MiniLM was trained with cosine similarity: normalised vectors and a small temperature (docs/methods.md).
COSINE = ["--normalize", "--temperature", "0.05"]
SYSTEMS = {
    "minilm-zero-shot": ("dpr", ["--pooling", "mean", *COSINE], False),
    # the same untrained model under the name the default run's table gives it: one mean-pooled vector per passage
    "dpr-zero-shot": ("dpr", ["--pooling", "mean", *COSINE], False),
    # 8 views per passage, untrained and without viewers: view i = the mean of the passage's i-th of 8 contiguous
    # token segments (the region form with its viewers off: segment-views-viewers-off before training)
    "segment-means-zero-shot": ("mvr", ["--mvr_views", "region", "--mvr_view_init", "segments", "--mvr_viewers", "off",
                                        "--pooling", "mean", "--mvr_num_views", "8", "--temperature_schedule", "fixed",
                                        *COSINE], False),
    "dpr": ("dpr", ["--pooling", "mean", *COSINE], True),
    "dpr-cls": ("dpr", ["--pooling", "cls", *COSINE], True),
    "mvr": ("mvr", ["--normalize", "--temperature", "0.1", "--mvr_min_temperature", "0.03",
                    "--mvr_num_views", "8"], True),
    "mvr-distinct": ("mvr", ["--normalize", "--temperature", "0.1", "--mvr_min_temperature", "0.03",
                             "--mvr_num_views", "8", "--mvr_viewer_positions", "distinct"], True),
    # MVR for mean-pooled backbones: dpr's mean-pooled text + gated read-only viewers (starts exactly as dpr)
    "mvr-residual": ("mvr", ["--mvr_views", "residual", "--pooling", "mean", "--mvr_num_views", "8",
                             "--temperature_schedule", "fixed", *COSINE], True),
    # the residual form with segment-mean bases: view i = normalise(mean of segment i + g_i * h(viewer i)), and
    # its ablation without viewers (view i = normalise(mean of segment i)): what the viewers add
    "segment-views-mvr-viewers": ("mvr", ["--mvr_views", "region", "--mvr_view_init", "segments", "--pooling", "mean",
                                          "--mvr_num_views", "8", "--temperature_schedule", "fixed", *COSINE], True),
    "segment-views-viewers-off": ("mvr", ["--mvr_views", "region", "--mvr_view_init", "segments", "--mvr_viewers",
                                          "off", "--pooling", "mean", "--mvr_num_views", "8",
                                          "--temperature_schedule", "fixed", *COSINE], True),
    # MLR on a 6-layer MiniLM: layers 6,5 (BERT-base's 12,10 scaled), last layer first
    "mlr-sc": ("mlr", ["--mlr_pooling", "self_contrastive", "--mlr_layers", "6,5", *COSINE], True),
    "mlr-max": ("mlr", ["--mlr_pooling", "max", "--mlr_layers", "6,5", *COSINE], True),
    # the same with each layer mean-pooled (the paper's T5 form; MiniLM is a mean-pooled backbone)
    "mlr-sc-mean": ("mlr", ["--mlr_pooling", "self_contrastive", "--mlr_layers", "6,5", "--mlr_layer_pooling", "mean",
                            *COSINE], True),
    "mlr-max-mean": ("mlr", ["--mlr_pooling", "max", "--mlr_layers", "6,5", "--mlr_layer_pooling", "mean",
                             *COSINE], True),
    # single vector: a learned softmax mix of the mean-pooled layers 6,5 (ELMo-style, weights saved with the model)
    "mlr-mix-mean": ("mlr", ["--mlr_pooling", "scalar_mix", "--mlr_layers", "6,5", "--mlr_layer_pooling", "mean",
                             *COSINE], True),
    "mebert": ("mebert", ["--mebert_num_vectors", "8", *COSINE], True),
    # DCSR: mean-pooled queries like dpr; 1 in-passage + 1 hard-negative sentence per query (paper best)
    "dcsr": ("dcsr", ["--pooling", "mean", *COSINE], True),
    # DCSR with sentence vectors = mean of each sentence's token states in the passage encoding (no markers),
    # and the no-context baseline (each sentence encoded alone); untrained rows show the zero-shot starting point
    "dcsr-mean": ("dcsr", ["--pooling", "mean", "--dcsr_sentence_pooling", "mean", *COSINE], True),
    "dcsr-independent": ("dcsr", ["--pooling", "mean", "--dcsr_sentence_pooling", "independent", *COSINE], True),
    # dcsr-mean trained on whole passages scored by their best sentence (no guessed positive sentence: for BEIR)
    "dcsr-mean-passage": ("dcsr", ["--pooling", "mean", "--dcsr_sentence_pooling", "mean", "--dcsr_train_unit",
                                   "passage", *COSINE], True),
    # ... plus the whole passage (dpr's mean-pooled vector) as one more view: a passage scores max(passage, sentences)
    "dcsr-mean-passage-pv": ("dcsr", ["--pooling", "mean", "--dcsr_sentence_pooling", "mean", "--dcsr_train_unit",
                                      "passage", "--dcsr_passage_view", *COSINE], True),
    "dcsr-mean-zero-shot": ("dcsr", ["--pooling", "mean", "--dcsr_sentence_pooling", "mean", *COSINE], False),
    "dcsr-independent-zero-shot": ("dcsr", ["--pooling", "mean", "--dcsr_sentence_pooling", "independent",
                                            *COSINE], False),
    # DCE: views E(pseudo-query + d); pseudo-queries = each passage's sentences (no doc2query model offline)
    "dce": ("dce", ["--pooling", "mean", *COSINE], True),
}
# lexical baseline (bm25s), no model
BM25 = "bm25"

#: What each system of the default run computes, for the printed table.
DESCRIPTIONS = {
    "dpr-zero-shot": "1 vector: the mean of the passage's token states, untrained",
    "segment-means-zero-shot": "8 views: the means of the passage's 8 contiguous token segments, untrained, no viewers",
    "dcsr-mean-zero-shot": "1 view per sentence: the mean of its token states in the passage's encoding, untrained",
    "dpr": "1 vector: the mean of the passage's token states, fine-tuned",
    "dcsr-mean": "1 view per sentence: the mean of its token states in the passage's encoding, fine-tuned",
    "minilm-zero-shot": "1 vector: the mean of the passage's token states, untrained",
    "mvr-residual": "8 views: the passage mean + gated read-only viewer tokens (gates 0 at step 0), fine-tuned",
}

#: The data sets (--data) and, per data set, the defaults of --systems, --steps and --passage_max_len.
DATA_DEFAULTS = {
    # the SQuAD v1.1 dev slice shipped with the package: the untrained model as one vector against the same model
    # with several vectors per passage (a few minutes on 2 CPU cores); trained systems (--systems dpr dcsr-mean)
    # get the SQuAD-dev protocol's 100 steps and passage length
    "squad-slice": {"systems": ["dpr-zero-shot", "segment-means-zero-shot", "dcsr-mean-zero-shot"], "steps": 100,
                    "passage_max_len": 192},
    # the generated fictional-entity data (the default before the SQuAD slice)
    "entities": {"systems": ["minilm-zero-shot", "dpr", "dcsr-mean", "mvr-residual"], "steps": 40,
                 "passage_max_len": 128},
    "squad": {"systems": ["minilm-zero-shot", "dpr", "dcsr-mean", "mvr-residual"], "steps": 40,
              "passage_max_len": 128},
    "scifact": {"systems": ["minilm-zero-shot", "dpr", "dcsr-mean", "mvr-residual"], "steps": 40,
                "passage_max_len": 128},
}
DEFAULT_DATA = "squad-slice"
DEFAULT_SYSTEMS = DATA_DEFAULTS[DEFAULT_DATA]["systems"]


def train_seed(train_flags: str) -> int:
    """The training seed of a run: the last ``--seed`` in --train_flags (they come after the default 42)."""
    argv = shlex.split(train_flags)
    seeds = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--seed"]
    seeds += [a.split("=", 1)[1] for a in argv if a.startswith("--seed=")]
    return int(seeds[-1]) if seeds else 42


class _Parser(argparse.ArgumentParser):
    """Fills --systems, --steps and --passage_max_len, where not given, with the chosen data set's defaults
    (:data:`DATA_DEFAULTS`), so a recorded command's settings read back as the run used them."""

    def parse_known_args(self, args=None, namespace=None):
        parsed, rest = super().parse_known_args(args, namespace)
        for key, value in DATA_DEFAULTS[parsed.data].items():
            if getattr(parsed, key, None) is None:
                setattr(parsed, key, list(value) if isinstance(value, list) else value)
        return parsed, rest


def build_parser(description: str | None = None) -> argparse.ArgumentParser:
    """The quickstart's argument parser (``description``: its ``--help`` text)."""
    p = _Parser(prog="python -m multiview_plugin.quickstart", description=description,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", choices=list(DATA_DEFAULTS), default=DEFAULT_DATA,
                   help="'squad-slice' (default): the slice of SQuAD v1.1 dev shipped with the package (6 articles, "
                   "277 paragraphs; 3 articles' questions train, the other 3 articles' 712 questions are held out; "
                   "multiview_plugin/quickstart/data/LICENSE-squad-dev-slice.md); 'entities': a generated dataset "
                   "of fictional entities; 'squad': the SQuAD-dev protocol on the full file (--squad_path); "
                   "'scifact': the SciFact protocol (train on qrels/train.tsv minus a carved dev set, report on "
                   "it); see docs/data-formats.md.")
    p.add_argument("--num_entities", type=int, default=None, help="--data entities: fictional entities to generate "
                   "(default 60: 148 passages, 360 train and 163 held-out questions; 400 gives 996 passages and 1,029 "
                   "held-out questions). Refused with another --data.")
    p.add_argument("--squad_path", help="SQuAD v1.1 dev json for --data squad.")
    p.add_argument("--beir_dir", help="BEIR folder with qrels/train.tsv for --data scifact.")
    p.add_argument("--dev_size", type=int, default=200, help="--data scifact: judged train queries carved out as "
                   "the dev (evaluation) set (default 200).")
    p.add_argument("--dce_max_queries", type=int, default=10, help="dce: pseudo-queries (= views) per passage; "
                   "offline they are the passage's first sentences (default 10, the paper's N).")
    p.add_argument("--output_dir", default="runs/quickstart", help="Where data, models (<dir>/models/<system>, "
                   "loadable with multiview_plugin.MultiViewModel.load), indexes, runs and results.json go "
                   "(default runs/quickstart).")
    p.add_argument("--systems", nargs="+", choices=[BM25, *SYSTEMS], metavar="SYSTEM",
                   help=f"Which systems to run, of {', '.join([BM25, *SYSTEMS])} (default, "
                   f"--data squad-slice: {' '.join(DEFAULT_SYSTEMS)}; other data: "
                   f"{' '.join(DATA_DEFAULTS['squad']['systems'])}).")
    p.add_argument("--backbone", default=BACKBONE, help="Backbone (default all-MiniLM-L6-v2, offline package).")
    p.add_argument("--steps", type=int, help="Training steps per trained system (default: "
                   f"{DATA_DEFAULTS[DEFAULT_DATA]['steps']} with --data squad-slice, 40 otherwise). The default run "
                   "trains nothing; e.g. --systems dpr-zero-shot dcsr-mean-zero-shot dpr dcsr-mean adds dpr and "
                   "dcsr-mean fine-tuned on the slice's training questions (each trained row is tested against dpr).")
    p.add_argument("--batch_size", type=int, default=16, help="Queries per step (each with 1 positive + 1 negative).")
    p.add_argument("--learning_rate", type=float, default=2e-5, help="Learning rate.")
    p.add_argument("--passage_max_len", type=int, help="Passage length (positions; default: "
                   f"{DATA_DEFAULTS[DEFAULT_DATA]['passage_max_len']} with --data squad-slice, 128 otherwise).")
    p.add_argument("--dev_groups", help="--data squad: SQuAD training articles carved out as the model-selection "
                   "dev split, e.g. 28-31 (their questions and paragraphs leave training). Each system is then "
                   "evaluated every --dev_eval_steps on them and the best checkpoint is the one reported.")
    p.add_argument("--dev_eval_steps", type=int, default=100, help="With --dev_groups: steps between dev checks.")
    p.add_argument("--dev_patience", type=int, default=0, help="With --dev_groups: stop a system after this many "
                   "dev checks without improvement (0: train all --steps).")
    p.add_argument("--train_flags", default="", help="Extra train-driver flags for every trained system, as one "
                   "string: --train_flags='--mvr_lambda 0.1' or --train_flags=--mask_duplicate_positives (the = "
                   "form, since the value starts with --). An ablation: combine with --tag.")
    p.add_argument("--tag", default="", help="Suffix of the system names in this run, e.g. --tag=-masked turns "
                   "'dpr' into 'dpr-masked' (the = form: the value may start with -).")
    p.add_argument("--hybrid", action="store_true", help="Also report each dense system fused with BM25 (bm25s): "
                   "'<system>+bm25', min-max normalised score interpolation alpha * dense + (1 - alpha) * BM25 with "
                   "alpha chosen on the dev split (--dev_groups; MRR@10 over --hybrid_alphas), and '<system>+bm25 "
                   "(rrf)', reciprocal rank fusion (k = 60). Both fuse the top 100 of each side.")
    p.add_argument("--hybrid_alphas", type=float, nargs="+", default=[round(0.05 * i, 2) for i in range(21)],
                   help="--hybrid: the alpha grid searched on dev (default 0, 0.05, ..., 1).")
    p.add_argument("--hybrid_alpha", type=float, help="--hybrid without a dev split (e.g. --data scifact, whose "
                   "dev carve is the reported set): the fixed alpha used (default: driver.search's --hybrid_alpha "
                   "default, multiview_plugin.search.hybrid.DEFAULT_ALPHA, equal weights).")
    p.add_argument("--models_from", help="Evaluate the trained systems that an earlier quickstart run saved (its "
                   "--output_dir; <dir>/models/<system>/best where it was dev-selected) instead of training them: "
                   "zero-shot transfer, e.g. SQuAD-trained models on --data scifact. Rows record transfer_from; "
                   "name them apart with --tag (e.g. --tag=-from-squad). --steps should repeat the source run's.")
    p.add_argument("--significance_permutations", type=int, default=10_000, help="Sign flips of the paired "
                   "randomization test of every row's top-1 hits against the run's dpr row of the same training "
                   "(untrained rows: dpr-zero-shot where the run has it) (default 10000, seed 0).")
    return p
