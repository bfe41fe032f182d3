"""Ranking metrics: ``ir_measures`` (trec_eval semantics) and an independent numpy cross-check.

Which queries are averaged
--------------------------
Every metric is the mean over **all queries in the qrels** (``trec_eval -c``): a judged query the run
does not answer counts as 0, and so does a judged query without any relevant document. Run queries
without judgments are ignored (with a warning). This is what ``ir_measures.calc_aggregate`` does (it fills
in a 0 for each qrels query its provider does not report) and what MS MARCO's official MRR@10 script
does (it divides by the number of judged queries). Plain ``trec_eval`` without ``-c`` would instead average
over the run's judged queries only; restrict the qrels to the run's queries to get that.

Ranking order
-------------
A :data:`~multiview_plugin.evaluation.runs.Run` is already in rank order, and that order is what gets
evaluated: the documents are handed to ``ir_measures`` with strictly decreasing pseudo-scores. trec_eval
itself would re-sort by score and break ties by reverse docid, and ``ir_measures``' providers do not even
agree among themselves on ties (its MS MARCO provider, which computes ``RR@k``, breaks them by ascending
docid), so tied scores would make the numbers depend on docid spelling. A docid listed twice for a query
keeps its first (best) position.

Relevance
---------
``RR``, ``R``, ``P`` and ``AP`` count a document as relevant when its judgment is ``>= rel_level``
(trec_eval's ``-l``; default 1). ``nDCG`` uses the judgment itself as the gain (trec_eval's ``ndcg_cut``:
negative judgments count as 0), a ``1 / log2(rank + 1)`` discount, and the ideal ranking of all judged
documents of the query; it does not depend on ``rel_level``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence

import ir_measures
import numpy as np

from multiview_plugin.errors import ConfigError
from multiview_plugin.evaluation.runs import Run

logger = logging.getLogger(__name__)

Qrels = Mapping[str, Mapping[str, int]]

DEFAULT_METRICS = ("MRR@10", "R@100", "R@1000", "nDCG@10")
_FRIENDLY = re.compile(r"(?i)(?P<name>mrr|rr|recall|r|ndcg|p|map|ap)(?:@(?P<k>\d+))?")
_NATIVE_NAMES = {"mrr": "RR", "rr": "RR", "recall": "R", "r": "R", "ndcg": "nDCG", "p": "P", "map": "AP",
                 "ap": "AP"}
_NEEDS_CUTOFF = {"R", "P"}
_HAS_REL = {"RR", "R", "P", "AP"}


def to_measure(name: str, rel_level: int = 1) -> ir_measures.Measure:
    """Turn a metric name into an ``ir_measures`` measure.

    Parameters
    ----------
    name : str
        A friendly name -- ``MRR@k`` / ``RR@k`` (reciprocal rank of the first relevant document in the top
        k), ``R@k`` / ``Recall@k``, ``nDCG@k``, ``P@k``, ``MAP`` / ``MAP@k`` (case-insensitive; ``MRR``,
        ``nDCG`` and ``MAP`` also without a cutoff) -- or any native ``ir_measures`` measure string such as
        ``"Success@5"`` or ``"nDCG(judged_only=True)@10"``, used as is.
    rel_level : int
        Minimum judgment that counts as relevant; applied to friendly ``RR``, ``R``, ``P`` and ``MAP`` names.

    Returns
    -------
    ir_measures.Measure

    Raises
    ------
    ConfigError
        An unknown name.
    """
    match = _FRIENDLY.fullmatch(name.strip())
    if match:
        native = _NATIVE_NAMES[match["name"].lower()]
        k = match["k"]
        if k is None and native in _NEEDS_CUTOFF:
            raise ConfigError(f"metric {name!r} needs a cutoff, e.g. {native}@100")
        params = f"(rel={rel_level})" if native in _HAS_REL and rel_level != 1 else ""
        return ir_measures.parse_measure(f"{native}{params}" + (f"@{int(k)}" if k is not None else ""))
    try:
        return ir_measures.parse_measure(name)
    except Exception:  # ir_measures raises NameError / ValueError / SyntaxError for unknown strings
        raise ConfigError(f"unknown metric {name!r}; use e.g. MRR@10, R@100, Recall@1000, nDCG@10, P@5, MAP, "
                          "or a native ir_measures measure such as 'Success@5' or 'RR(rel=2)@10'") from None


def _dedup(ranking: Sequence[tuple[str, float]]) -> list[str]:
    """Docids in rank order, each once (first occurrence kept)."""
    return list(dict.fromkeys(docid for docid, _ in ranking))


def _judged_run(run: Run, qrels: Qrels) -> dict[str, list[str]]:
    """The run restricted to judged queries, deduplicated; logs what is left out."""
    unjudged = [qid for qid in run if qid not in qrels]
    if unjudged:
        if len(unjudged) == len(run):
            logger.warning("none of the run's %d queries is in the qrels (e.g. %s): every metric is 0",
                           len(run), unjudged[:3])
        else:
            logger.warning("%d of the run's %d queries have no judgments and are ignored (e.g. %s)",
                           len(unjudged), len(run), unjudged[:3])
    missing = sum(qid not in run for qid in qrels)
    if missing:
        logger.warning("%d of the %d judged queries are not in the run; they count as 0", missing, len(qrels))
    judged = {}
    duplicates = 0
    for qid, ranking in run.items():
        if qid in qrels:
            judged[qid] = docids = _dedup(ranking)
            duplicates += len(ranking) - len(docids)
    if duplicates:
        logger.warning("the run lists %d docids more than once for the same query; the best rank is kept",
                       duplicates)
    return judged


def evaluate_run(run: Run, qrels: Qrels, metrics: Sequence[str] = DEFAULT_METRICS,
                 rel_level: int = 1) -> dict[str, float]:
    """Evaluate a run with ``ir_measures`` (trec_eval semantics).

    The mean is over **every query in the qrels**: judged queries missing from the run count as 0 (like
    ``trec_eval -c`` and MS MARCO's MRR script), run queries without judgments are ignored; the run's
    list order is the ranking (see the module docstring for ties and duplicates).

    Parameters
    ----------
    run : Run
        ``{qid: [(docid, score)]}`` in rank order.
    qrels : Mapping[str, Mapping[str, int]]
        ``{qid: {docid: relevance}}`` (see :func:`multiview_plugin.data.readers.load_qrels`).
    metrics : Sequence[str]
        Metric names, see :func:`to_measure` (``MRR@10``, ``R@100``, ``nDCG@10``, ``P@5``, ``MAP``, or native
        ``ir_measures`` strings).
    rel_level : int
        Minimum judgment counted as relevant by the friendly ``MRR``/``R``/``P``/``MAP`` names.

    Returns
    -------
    dict[str, float]
        Metric name as given -> value (a fraction, not a percentage).

    Raises
    ------
    ConfigError
        An unknown metric name, or empty qrels.
    """
    if not qrels:
        raise ConfigError("the qrels are empty: nothing to evaluate against")
    measures = {name: to_measure(name, rel_level) for name in metrics}
    judged = _judged_run(run, qrels)
    # strictly decreasing pseudo-scores make every provider rank the documents in list order
    run_dict = {qid: {docid: float(-i) for i, docid in enumerate(docids)} for qid, docids in judged.items()}
    qrels_dict = {qid: {docid: int(rel) for docid, rel in judgments.items()} for qid, judgments in qrels.items()}
    try:
        values = ir_measures.calc_aggregate(list(set(measures.values())), qrels_dict, run_dict)
    except Exception as err:  # an unsupported parameter combination is found only here
        raise ConfigError(f"ir_measures cannot compute {', '.join(map(str, measures.values()))}: {err}") from err
    return {name: float(values[measure]) for name, measure in measures.items()}


def own_metrics(run: Run, qrels: Qrels, ks: Sequence[int] = (10, 100, 1000), rel_level: int = 1) -> dict[str, float]:
    """MRR@k, Recall@k, nDCG@k and P@k with numpy, independently of ``ir_measures`` (a cross-check).

    Same conventions as :func:`evaluate_run`: mean over every query in the qrels, ranking = list order,
    duplicates keep their first position, relevance ``>= rel_level`` for RR/R/P, graded gains for nDCG.

    Parameters
    ----------
    run : Run
        ``{qid: [(docid, score)]}`` in rank order.
    qrels : Mapping[str, Mapping[str, int]]
        ``{qid: {docid: relevance}}``.
    ks : Sequence[int]
        Cutoffs.
    rel_level : int
        Minimum judgment counted as relevant.

    Returns
    -------
    dict[str, float]
        ``MRR@k``, ``R@k``, ``nDCG@k`` and ``P@k`` for each ``k`` in ``ks``.
    """
    if not qrels:
        raise ConfigError("the qrels are empty: nothing to evaluate against")
    ks = sorted({int(k) for k in ks})
    if not ks or ks[0] < 1:
        raise ConfigError(f"cutoffs must be positive integers, got {ks}")
    depth = ks[-1]
    qids = list(qrels)
    n = len(qids)
    # judgments of the retrieved documents: NaN = unjudged or not retrieved
    judgments = np.full((n, depth), np.nan)
    # judgments of each query's documents, best first, for the ideal DCG
    ideal = np.zeros((n, depth))
    num_rel = np.zeros(n)
    for row, qid in enumerate(qids):
        judged = qrels[qid]
        docids = _dedup(run.get(qid, ()))[:depth]
        judgments[row, :len(docids)] = [judged.get(d, np.nan) for d in docids]
        rels = np.fromiter(judged.values(), dtype=float, count=len(judged))
        num_rel[row] = np.count_nonzero(rels >= rel_level)
        best = -np.sort(-rels)[:depth]
        ideal[row, :len(best)] = best
    relevant = judgments >= rel_level  # NaN compares False
    gains = np.clip(np.nan_to_num(judgments, nan=0.0), 0.0, None)
    ideal = np.clip(ideal, 0.0, None)
    discount = 1.0 / np.log2(np.arange(2, depth + 2))
    first_hit = np.where(relevant.any(axis=1), relevant.argmax(axis=1), depth)
    hits_at = np.cumsum(relevant, axis=1)
    dcg_at = np.cumsum(gains * discount, axis=1)
    idcg_at = np.cumsum(ideal * discount, axis=1)
    out: dict[str, float] = {}
    safe_rel = np.maximum(num_rel, 1.0)
    for k in ks:
        rr = np.where(first_hit < k, 1.0 / (first_hit + 1.0), 0.0)
        recall = np.where(num_rel > 0, hits_at[:, k - 1] / safe_rel, 0.0)
        idcg = idcg_at[:, k - 1]
        ndcg = np.divide(dcg_at[:, k - 1], idcg, out=np.zeros(n), where=idcg > 0)
        out[f"MRR@{k}"] = float(rr.mean())
        out[f"R@{k}"] = float(recall.mean())
        out[f"nDCG@{k}"] = float(ndcg.mean())
        out[f"P@{k}"] = float((hits_at[:, k - 1] / k).mean())
    return out
