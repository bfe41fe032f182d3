"""Model selection on a dev split while training: periodic exact retrieval on a small dev corpus.

Every ``--dev_eval_steps`` the model being trained encodes the dev corpus (all its index views, as the encode
driver would) and the dev queries, ranks every passage by max-sim, and scores ``--dev_metric`` with
``ir_measures``. The best model so far is saved to ``<output_dir>/best``; after ``--dev_patience`` evaluations
without improvement training stops. The curve is kept in ``trainer_state.json``'s log history
(``dev_<metric>`` entries) and in ``<output_dir>/dev_curve.json``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import TrainerCallback

from multiview_plugin.atomic import atomic_open
from multiview_plugin.data.readers import load_corpus, load_qrels, load_queries
from multiview_plugin.errors import ConfigError
from multiview_plugin.evaluation.metrics import evaluate_run, to_measure
from multiview_plugin.text_options import PASSAGE_FIELD_SEPARATOR

logger = logging.getLogger(__name__)

BEST_SUBDIR = "best"
CURVE_NAME = "dev_curve.json"


class DevSet:
    """A dev corpus, queries and qrels held in memory (keep the corpus small: it is encoded at every check)."""

    def __init__(self, corpus_path: str, queries_path: str, qrels_path: str, metric: str = "MRR@10",
                 separator: str = PASSAGE_FIELD_SEPARATOR, pseudo_queries: str | None = None):
        self.corpus = load_corpus(corpus_path, separator)
        # per-document views for models encoded with them (dce), loaded once
        self.views = None
        if pseudo_queries:
            from multiview_plugin.data.pseudo_queries import load_pseudo_queries

            self.views = load_pseudo_queries(pseudo_queries, list(self.corpus))
        qrels = load_qrels(qrels_path)
        queries = load_queries(queries_path)
        self.queries = {q: t for q, t in queries.items() if q in qrels}
        if not self.queries:
            raise ConfigError(f"{queries_path}: no dev query has judgments in {qrels_path}")
        self.qrels = {q: qrels[q] for q in self.queries}
        self.metric = metric
        to_measure(metric)  # an unknown metric fails now, not after the first interval

    @torch.inference_mode()
    def evaluate(self, model: Any, batch_size: int = 64, depth: int = 100) -> float:
        """``metric`` of ``model`` on this dev set (exact max-sim over the model's index views)."""
        was_training = model.training
        model.eval()
        try:
            device = next(model.parameters()).device
            formatter = model.formatter
            docids, texts = list(self.corpus), list(self.corpus.values())
            q_reps = torch.from_numpy(model.encode_queries(list(self.queries.values()), batch_size)).to(device)
            best = torch.full((len(q_reps), len(docids)), float("-inf"), device=device)
            for start in tqdm(range(0, len(texts), batch_size), desc="dev encode", leave=False, disable=None):
                batch = model.passage_inputs(formatter, docids[start:start + batch_size],
                                             texts[start:start + batch_size], self.views)
                reps, mask = model.encode_passage({k: v.to(device) for k, v in batch.items()})
                reps, mask = model.index_views(reps, mask)
                scores = torch.einsum("qd,pkd->qpk", q_reps, reps.float()).masked_fill(~mask[None], float("-inf"))
                best[:, start:start + len(reps)] = scores.max(dim=-1).values
            top = best.topk(min(depth, len(docids)), dim=1)
            run = {qid: [(docids[i], float(s)) for i, s in zip(idx.tolist(), sc.tolist())]
                   for qid, idx, sc in zip(self.queries, top.indices.cpu(), top.values.cpu())}
            return float(evaluate_run(run, self.qrels, [self.metric])[self.metric])
        finally:
            model.train(was_training)


class DevSelectionCallback(TrainerCallback):
    """Evaluates on a :class:`DevSet` every ``eval_steps``, saves the best model, stops after ``patience``
    evaluations without improvement (0: never), and writes the curve."""

    def __init__(self, dev: DevSet, output_dir: str, eval_steps: int, patience: int = 0):
        if eval_steps < 1:
            raise ConfigError(f"--dev_eval_steps must be >= 1, got {eval_steps}")
        if patience < 0:
            raise ConfigError(f"--dev_patience must be >= 0, got {patience}")
        self.dev, self.eval_steps, self.patience = dev, eval_steps, patience
        self.output_dir = Path(output_dir)
        self.curve: list[dict[str, float]] = []
        self.best: float | None = None
        self.best_step = 0
        self.bad = 0

    def _check(self, state, control, model) -> None:
        model = getattr(model, "module", model)  # DDP wraps the encoder
        if not state.is_world_process_zero or any(p["step"] == state.global_step for p in self.curve):
            return
        value = self.dev.evaluate(model)
        key = f"dev_{self.dev.metric}"
        self.curve.append({"step": state.global_step, "epoch": float(state.epoch or 0), key: value})
        state.log_history.append({"step": state.global_step, key: value})
        improved = self.best is None or value > self.best
        logger.info("step %d: %s %.4f%s", state.global_step, key, value,
                    " (best so far: saved)" if improved else f" (best {self.best:.4f} at step {self.best_step})")
        if improved:
            self.best, self.best_step, self.bad = value, state.global_step, 0
            model.save(self.output_dir / BEST_SUBDIR)
        else:
            self.bad += 1
            if self.patience and self.bad >= self.patience:
                logger.info("no dev improvement in %d evaluations: stopping", self.bad)
                control.should_training_stop = True
        with atomic_open(self.output_dir / CURVE_NAME) as f:
            json.dump({"metric": self.dev.metric, "best": self.best, "best_step": self.best_step,
                       "curve": self.curve}, f, indent=1)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        saved = self.output_dir / CURVE_NAME
        if state.global_step > 0 and saved.is_file():  # resumed: keep the curve and the best so far
            data = json.loads(saved.read_text(encoding="utf-8"))
            self.curve = [p for p in data["curve"] if p["step"] <= state.global_step]
            key = f"dev_{self.dev.metric}"
            if self.curve:
                top = max(self.curve, key=lambda p: p[key])
                self.best, self.best_step = top[key], int(top["step"])
        if state.global_step == 0:
            self._check(state, control, model)  # the starting point (zero-shot) is a candidate too

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % self.eval_steps == 0:
            self._check(state, control, model)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        self._check(state, control, model)

