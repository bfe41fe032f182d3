"""Evaluation (docs/retrieval.md): run files, ranking metrics and DPR top-k answer accuracy."""

from multiview_plugin.data.answers import has_answer, load_answers, load_qa, normalize_answer, tokenize
from multiview_plugin.evaluation.answers import (
    build_retrieval,
    retrieval_accuracy,
    topk_accuracy,
    write_retrieval_json,
)
from multiview_plugin.evaluation.metrics import DEFAULT_METRICS, evaluate_run, own_metrics, to_measure
from multiview_plugin.evaluation.runs import RUN_FORMATS, Run, atomic_open, detect_run_format, read_run, write_run

__all__ = [
    "DEFAULT_METRICS",
    "RUN_FORMATS",
    "Run",
    "atomic_open",
    "build_retrieval",
    "detect_run_format",
    "evaluate_run",
    "has_answer",
    "load_answers",
    "load_qa",
    "normalize_answer",
    "own_metrics",
    "read_run",
    "retrieval_accuracy",
    "to_measure",
    "tokenize",
    "topk_accuracy",
    "write_retrieval_json",
    "write_run",
]
