"""Calibrating an approximate index's search settings at build time, on the corpus's own views.

Approximate search (HNSW's beam, IVF's probed lists, the over-fetch of view rows, the document-vector candidates
of a ``doc_index`` or of the Qdrant backend) trades recall for speed, and the trade depends on the data: settings
tuned on one distribution lose recall on another. So the index is calibrated on itself, after the model of
Faiss's auto-tuning (``faiss.ParameterSpace.explore`` and ``OperatingPoints``; Johnson, Douze and Jégou,
"Billion-scale similarity search with GPUs", 2019, and the Faiss wiki's "Index IO, cloning and hyper parameter
tuning"): every setting tried is an *operating point* (recall, time per query), only those no other beats on both
are kept (the Pareto frontier), and the fastest one that reaches the target is chosen.

* **Queries:** ``n_queries`` documents sampled uniformly; by default (``mixed``) half of them give one random
  view as a query vector, with the source document left out of both rankings (it trivially holds the query), and
  half give the midpoint of a random view and a random view of another random document, which sits between
  documents as real queries do (where a document's views are near-copies, a sampled view's neighbourhood is far
  easier to search than a real query's: :func:`sample_calibration_queries`). Each half must reach the aim on its
  own. With real query vectors at hand (encoded dev queries: ``driver.index --calibration_query_reps``), a sample
  of them is used instead; without them, views whose mean within-document cosine exceeds 0.99 log a warning.
* **Ground truth:** exact max over views, computed by streaming the shards the index was built from (memory: one
  chunk of one shard at a time).
* **Recall:** |approximate top-k documents ∩ exact top-k| / k, averaged over queries (k = 10 by default). A
  setting counts when the one-sided 95% lower confidence bound of that mean (normal approximation over the
  sampled queries), not just the sample mean, reaches the *aim*: on sampled views, the target with a margin for
  the shift to real queries, which sit farther from every view and miss more (:func:`calibration_aim`: half the
  misses the target allows, 0.99 for a target of 0.98); on given query vectors, the target itself.
* **Search:** per knob grid (below), the cheaper knob is walked upwards until the target is reached, for each
  value of the other knob; points past the first one reaching the aim are not measured (they only cost more).
  The grid doubles its values, so the setting chosen is then refined: each knob bisected twice between its chosen
  value and the grid's next smaller one (:func:`refine`; ``refine_steps=0`` keeps the grid's values).
* **Depth:** given query vectors and midpoints are searched at k, the depth users search at; sampled views at
  k + 1, their own document being left out of their ranking.

Knobs: HNSW (``overfetch`` × ``ef_search`` lower bound), IVF (``nprobe`` lower bound × ``overfetch``), other
approximate Faiss indexes (``overfetch``), a ``doc_index`` or Qdrant (``min_doc_candidates``: the candidate
documents at small k). The result is written to ``multiview.json`` (``search_defaults`` and ``calibration``);
searchers use it unless a setting is given explicitly. Failure mode: the sample's queries are corpus views, not
queries of the query encoder; real queries farther from every view may need more (``bench/calibration.py``
checks held-out synthetic queries).

**Below target:** where even the best setting's lower bound stays below the target (lossy SQ8 / PQ codes bound
the recall whatever is probed: ``IVF64,SQ8`` on an anisotropic set keeps ~0.977), ``refuse_below_target``
(``driver.index``'s default; ``--allow_below_target`` opts out) refuses the index with one line naming what
reaches the target: a re-scoring store where one measured on the same queries does (:func:`store_trial`), and
``Flat`` (exact) always.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from multiview_plugin.atomic import atomic_open
from multiview_plugin.encoding.shards import read_shard, split_lookup
from multiview_plugin.errors import ConfigError
from multiview_plugin.index.adds import contiguous_docs
from multiview_plugin.index.folder import META_FILE
from multiview_plugin.index.meta import MAX_EF_CONSTRUCTION, IndexMeta
from multiview_plugin.search._backend import SearchBackend
from multiview_plugin.search.aggregators import MaxAggregator

logger = logging.getLogger(__name__)

DEFAULT_TARGET = 0.98
DEFAULT_QUERIES = 200
DEFAULT_K = 10
CHUNK_ROWS = 65_536
# On sampled views the lower bound must reach 1 - MISS_SHARE x (1 - target): held-out queries missed 1.0-3.7x
# what the sampled views missed (bench/calibration.log, before this margin: SciFact's real questions on
# IVF16,SQfp16 missed 0.023 where the views missed 0.014, and fell below 0.98)
MISS_SHARE = 0.5
# the re-scoring store is tried in memory (fp16, rows x dim x 2 bytes) to name it as a remedy only up to this size
STORE_TRIAL_BYTES = 1 << 30
# bisections per knob between the chosen grid setting and the grid's next smaller value (:func:`refine`)
REFINE_STEPS = 2


class BelowTargetError(ConfigError):
    """An index whose calibrated recall stays below ``--target_recall`` (refused unless the user opts out)."""


def calibration_aim(target: float, views_as_queries: bool = True) -> float:
    """The recall the calibration sample's lower bound must reach so that unseen queries keep ``target``: with
    sampled corpus views as queries, a margin for the shift to real queries (half the misses ``target`` allows:
    0.98 -> 0.99, 0.99 -> 0.995); with real query vectors, ``target`` itself."""
    return 1 - MISS_SHARE * (1 - target) if views_as_queries else target


SAMPLERS = ("views", "midpoints", "mixed")
DEFAULT_SAMPLER = "mixed"
# mean cosine of a document's views above which its views are near-copies of each other (mvr-residual SQuAD views:
# 0.9992; dcsr-mean sentence views: 0.73-0.77): sampled views then calibrate HNSW far too optimistically
NEAR_DUPLICATE_COSINE = 0.99


def _read_rows(meta: IndexMeta, rows: np.ndarray, n_rows: int, unsafe_pickle: bool) -> np.ndarray:
    """The vectors of the given global rows (any order, repeats allowed), streaming the index's shards."""
    out = np.empty((len(rows), meta.dim), dtype=np.float32)
    offset = 0
    for path in _shards(meta):
        reps = read_shard(path, unsafe_pickle)[0]
        mine = (rows >= offset) & (rows < offset + len(reps))
        out[mine] = np.asarray(reps[rows[mine] - offset], dtype=np.float32)
        offset += len(reps)
    if offset != n_rows:
        raise ConfigError(f"{meta.shards[0] if meta.shards else 'shards'}...: the shards hold {offset} vectors, the "
                          f"index {n_rows}: calibration needs the shards the index was built from")
    return out


def within_doc_cosine(vectors: np.ndarray, doc: np.ndarray) -> float | None:
    """Mean cosine between two different views of one document, over the documents with >= 2 views (``doc``: the
    document of each row); None when none has two."""
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    _, inv = np.unique(doc, return_inverse=True)
    sums = np.zeros((inv.max() + 1, unit.shape[1]))
    np.add.at(sums, inv, unit)
    counts = np.bincount(inv)
    multi = counts > 1
    if not multi.any():
        return None
    pair = ((sums[multi] ** 2).sum(1) - counts[multi]) / (counts[multi] * (counts[multi] - 1))
    return float(pair.mean())


def sample_calibration_queries(index_dir: Path, meta: IndexMeta, n_queries: int, seed: int,
                               unsafe_pickle: bool = False, sampler: str = DEFAULT_SAMPLER
                               ) -> tuple[np.ndarray, np.ndarray, float | None]:
    """(query vectors (Q, D), the document left out of each query's rankings (-1: none), the sampled documents'
    mean within-document view cosine), read from the shards the index was built from.

    ``views``: one random view of each of ``n_queries`` sampled documents, its document left out. ``midpoints``:
    the midpoint of that view and a random view of another random document, which sits between documents, as
    real queries do (a corpus view sits on top of its document's other views, and where those are near-copies
    the search for its neighbours is easier than a real query's); nothing left out. ``mixed``: the first half
    views, the second half midpoints."""
    if sampler not in SAMPLERS:
        raise ConfigError(f"calibration sampler must be one of {', '.join(SAMPLERS)}, got {sampler!r}")
    lookup = (index_dir / "docid").read_text(encoding="utf-8").splitlines()
    docids, row_doc = contiguous_docs(split_lookup(lookup, meta.multi_vector), str(index_dir / "docid"))
    counts = np.bincount(row_doc, minlength=len(docids))
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rng = np.random.default_rng(seed)
    src = np.sort(rng.choice(len(docids), min(n_queries, len(docids)), replace=False))
    rows = starts[src] + rng.integers(0, counts[src])
    other = (src + rng.integers(1, len(docids), len(src))) % len(docids)  # another document, uniformly
    other_rows = starts[other] + rng.integers(0, counts[other])
    # every view of (up to 50 of) the sampled documents, for the near-duplicate check
    check = src[:50]
    check_rows = np.concatenate([np.arange(starts[d], starts[d] + counts[d]) for d in check])
    vecs = _read_rows(meta, np.concatenate([rows, other_rows, check_rows]), len(row_doc), unsafe_pickle)
    q, partner, views = vecs[:len(rows)], vecs[len(rows):2 * len(rows)], vecs[2 * len(rows):]
    cosine = within_doc_cosine(views, np.repeat(check, counts[check]))
    first = {"views": len(q), "midpoints": 0, "mixed": len(q) // 2}[sampler]
    q[first:] = (q[first:] + partner[first:]) / 2  # inner-product rankings ignore the query's scale
    src = src.copy()
    src[first:] = -1
    return np.ascontiguousarray(q), src, cosine


def _shards(meta: IndexMeta) -> list[str]:
    missing = [s for s in meta.shards if not Path(s).is_file()]
    if missing or not meta.shards:
        raise ConfigError(f"calibration reads the shards the index was built from; missing: {missing[:3]} (pass "
                          "--target_recall 0 to skip it)")
    return list(meta.shards)


def exact_top_docs(meta: IndexMeta, q: np.ndarray, src: np.ndarray, k: int, unsafe_pickle: bool = False
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Exact max-over-views top-k document indices (Q, k) by streaming the shards, each query's source document
    excluded; and per query whether its k-th and (k+1)-th scores tie (which documents make its top k is then
    arbitrary: recall by document cannot be measured there)."""
    k_all, k = k, k + 1
    n_q = len(q)
    best_s = np.full((n_q, k), -np.inf, dtype=np.float32)
    best_d = np.full((n_q, k), -1, dtype=np.int64)
    doc_offset = 0
    for path in tqdm(_shards(meta), desc="calibration: exact", unit="shard", leave=False):
        reps, lookup, info = read_shard(path, unsafe_pickle)
        if not len(reps):
            continue
        multi = info.multi_vector if info is not None else meta.multi_vector
        _, row_doc = contiguous_docs(split_lookup(lookup, multi), str(path))
        starts = np.flatnonzero(np.r_[True, row_doc[1:] != row_doc[:-1]])
        lo = 0
        while lo < len(starts):  # chunks of whole documents
            hi = int(np.searchsorted(starts, starts[lo] + CHUNK_ROWS, side="left"))
            hi = max(hi, lo + 1)
            r0, r1 = int(starts[lo]), int(starts[hi]) if hi < len(starts) else len(row_doc)
            sims = np.asarray(reps[r0:r1], dtype=np.float32) @ q.T  # (rows, Q)
            doc_scores = np.maximum.reduceat(sims, starts[lo:hi] - r0, axis=0).T  # (Q, docs)
            doc_ids = doc_offset + np.arange(lo, hi)
            doc_scores[doc_ids[None, :] == src[:, None]] = -np.inf
            all_s = np.concatenate([best_s, doc_scores], axis=1)
            all_d = np.concatenate([best_d, np.broadcast_to(doc_ids, doc_scores.shape)], axis=1)
            top = np.argpartition(-all_s, k - 1, axis=1)[:, :k] if all_s.shape[1] > k else np.arange(
                all_s.shape[1])[None].repeat(n_q, 0)
            best_s, best_d = np.take_along_axis(all_s, top, 1), np.take_along_axis(all_d, top, 1)
            lo = hi
        doc_offset += len(starts)
    order = np.argsort(-best_s, axis=1, kind="stable")
    best_s, best_d = np.take_along_axis(best_s, order, 1), np.take_along_axis(best_d, order, 1)
    tied = np.isfinite(best_s[:, k_all]) & (best_s[:, k_all - 1] == best_s[:, k_all]) if best_s.shape[1] > k_all \
        else np.zeros(n_q, dtype=bool)
    return best_d[:, :k_all], tied


def per_query_recall(found: np.ndarray, exact: np.ndarray) -> np.ndarray:
    return np.array([len(set(a) & set(b) - {-1}) / max(1, len(set(b) - {-1}))
                     for a, b in zip(found.tolist(), exact.tolist())])


def lower_bound(recalls: np.ndarray, z: float = 1.645) -> float:
    """One-sided 95% lower confidence bound of the mean recall (normal approximation over queries)."""
    if len(recalls) < 2:
        return float(recalls.mean()) if len(recalls) else 0.0
    return float(recalls.mean() - z * recalls.std(ddof=1) / np.sqrt(len(recalls)))


def calibrate_store(store: SearchBackend, q: np.ndarray, src: np.ndarray, exact: np.ndarray, target: float, k: int,
                    aim: float | None = None, refine_steps: int = REFINE_STEPS) -> dict | None:
    """Explore the store's knob grid (its :meth:`~SearchBackend.calibration_grid`, module docstring) for the
    fastest setting whose recall's lower bound reaches ``aim`` (default: ``calibration_aim(target)``); else the
    highest-recall setting, ``reached`` saying whether its lower bound still reaches ``target``. Where some queries
    are views (``src`` >= 0) and others are not (midpoints), the lower bound is the smaller of the two groups' own,
    so neither dilutes the other's misses. The chosen setting is then refined between the grid's steps
    (:func:`refine`, ``refine_steps`` bisections per knob; 0: the grid's values only).
    Returns the calibration record, None when exact."""
    aim = calibration_aim(target) if aim is None else aim
    grid = store.calibration_grid()
    if grid is None:
        return None
    kind, knobs = grid
    names = list(knobs)
    walked = names[-1]
    outer_values = [dict(zip(names[:-1], combo)) for combo in _product([knobs[n] for n in names[:-1]])]
    points: list[dict] = []

    def measure(settings: dict) -> dict:
        points.append(operating_point(store, settings, q, src, exact, k, kind))
        return points[-1]

    for fixed in outer_values:
        for value in knobs[walked]:
            if measure({**fixed, walked: value})["recall_lower95"] >= aim:
                break  # the walked knob's larger values only cost more
    aimed = [p for p in points if p["recall_lower95"] >= aim]
    best = min(aimed, key=lambda p: p["ms_per_query"]) if aimed else max(points, key=lambda p: p["recall"])
    coarse = best["settings"]
    if aimed:
        best = refine(measure, knobs, best, aim, refine_steps)
    reached = best["recall_lower95"] >= target
    if not aimed:
        logger.warning("calibration: no setting tried reached recall@%d %.4f of exact (target %.3f with its margin); "
                       "using the best, %s (%.4f, lower bound %.4f: %s the target)", k, aim, target,
                       best["settings"], best["recall"], best["recall_lower95"], "reaches" if reached else "BELOW")
    for name, v in best["settings"].items():
        store.set_search_knob(name, v)
    frontier = [p for p in points if not any(o["recall"] >= p["recall"] and o["ms_per_query"] < p["ms_per_query"]
                                             for o in points)]
    return {"kind": kind, "target_recall": target, "aim": round(aim, 6), "k": k, "queries": int(len(q)),
            "reached": bool(reached), "aim_reached": bool(aimed),
            "recall": best["recall"], "recall_lower95": best["recall_lower95"],
            "ms_per_query": best["ms_per_query"], "settings": best["settings"],
            "grid_settings": coarse, "refine_steps": refine_steps,
            "operating_points": sorted(frontier, key=lambda p: p["ms_per_query"]), "tried": len(points)}


def operating_point(store: SearchBackend, settings: dict, q: np.ndarray, src: np.ndarray, exact: np.ndarray, k: int,
                    kind: str) -> dict:
    """One setting measured on the calibration queries: its recall@k, the recall's 95% lower bound (the smaller of
    the view queries' and the others', module docstring) and its time per query (a batch search)."""
    for name, v in settings.items():
        store.set_search_knob(name, v)
    found = np.full((len(q), k), -1, dtype=np.int64)
    start = time.perf_counter()
    # a view's own document is left out of its ranking, so views search one deeper; other queries search at k, the
    # depth users search at (a deeper search fetches more rows and would calibrate optimistically)
    for group, depth in ((src >= 0, k + 1), (src < 0, k)):
        if group.any():
            rows = store.search(q[group], depth, MaxAggregator())[0]
            found[group] = [([d for d in row if d != s] + [-1] * k)[:k] for row, s in zip(rows.tolist(),
                                                                                      src[group].tolist())]
    ms = 1000 * (time.perf_counter() - start) / max(1, len(q))
    recalls = per_query_recall(found, exact)
    # views (src >= 0) and other queries (midpoints, given vectors) must each reach the aim on their own
    rec, low = float(recalls.mean()), min(lower_bound(recalls[g]) for g in (src >= 0, src < 0) if g.any())
    logger.info("calibration %s: %s recall@%d %.4f (95%% lower bound %.4f), %.3f ms/query", kind, settings, k, rec,
                low, ms)
    return {"settings": settings, "recall": round(rec, 4), "recall_lower95": round(low, 4),
            "ms_per_query": round(ms, 3)}


def between(lo: Any, hi: Any) -> int | float | None:
    """The geometric midpoint of two positive grid values (a whole number where both are), or None where no such
    value lies strictly between them (or they are not numbers)."""
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in (lo, hi)):
        return None
    mid = math.sqrt(lo * hi)
    mid = round(mid) if isinstance(lo, int) and isinstance(hi, int) else round(mid, 4)
    return mid if lo < mid < hi else None


def refine(measure: Callable[[dict], dict], knobs: dict[str, Sequence[Any]], best: dict, aim: float, steps: int
           ) -> dict:
    """The grid doubles its values, so the chosen setting can cost up to twice what the aim needs. Each knob in turn
    (the walked one first) is bisected ``steps`` times between the chosen value and the grid's next smaller one,
    the others held; a value whose lower bound still reaches ``aim`` replaces the chosen one. Every knob costs more
    as it grows (more fetched rows, a wider beam, more probed lists or candidates), so each replacement is cheaper
    by construction, not by a timing that noise could reorder. ``measure(settings)`` measures and records one
    operating point."""
    for name in reversed(list(knobs)):
        lower = [v for v in knobs[name] if between(v, best["settings"][name]) is not None]
        if not lower:
            continue
        lo, hi = max(lower), best["settings"][name]
        for _ in range(steps):
            mid = between(lo, hi)
            if mid is None:
                break
            point = measure({**best["settings"], name: mid})
            if point["recall_lower95"] >= aim:
                best, hi = point, mid
            else:
                lo = mid
    return best


def _product(lists: list[Sequence]) -> list[tuple]:
    out: list[tuple] = [()]
    for values in lists:
        out = [o + (v,) for o in out for v in values]
    return out


def store_trial(store: SearchBackend, meta: IndexMeta, q: np.ndarray, src: np.ndarray, exact: np.ndarray,
                target: float, k: int, aim: float, unsafe_pickle: bool = False) -> dict | None:
    """The calibration of the same index with an fp16 re-scoring store (``--rescore_store fp16``), held in
    memory for the trial, on the same queries; None where it cannot be tried (not a Faiss index, a store already
    there, or larger than :data:`STORE_TRIAL_BYTES`)."""
    from multiview_plugin.search._searcher import ApproximateSearch, FaissStore

    if not isinstance(store, FaissStore) or store.rescore_views is not None or store.doc_index is not None:
        return None
    rows, dim = int(store.index.ntotal), int(store.index.d)
    if rows * dim * 2 > STORE_TRIAL_BYTES:
        logger.info("calibration: a re-scoring store (%d x %d fp16) is too large to try in memory", rows, dim)
        return None
    views = np.empty((rows, dim), dtype=np.float16)
    at = 0
    for path in _shards(meta):
        reps = read_shard(path, unsafe_pickle)[0]
        if at + len(reps) > rows:
            return None  # the shards changed since the build: no trial
        views[at:at + len(reps)] = reps
        at += len(reps)
    if at != rows:
        return None
    trial = FaissStore(store.index, store.docids, store.row_doc, store.mean_views, ApproximateSearch(),
                       rescore_views=views)
    return calibrate_store(trial, q, src, exact, target, k, aim)


def wider_beam(store: SearchBackend) -> int | None:
    """The construction beam to suggest for a store's HNSW graphs (their narrowest beam doubled, at least 200, at
    most ``MAX_EF_CONSTRUCTION``); None without a graph or when it is already that wide."""
    beam = store.construction_beam()
    if beam is None:
        return None
    wider = min(MAX_EF_CONSTRUCTION, max(200, 2 * beam))
    return wider if wider > beam else None


def below_target_line(meta: IndexMeta, record: dict, trial: dict | None, beam: int | None = None) -> str:
    """The one line refusing an index below target, naming what reaches it (measured, or exact search); for an
    HNSW graph also ``beam``, a wider construction beam to try (not measured here: it needs a rebuild)."""
    settings = ", ".join(f"{n}={v}" for n, v in record["settings"].items())
    reach = []
    if trial is not None and trial["reached"]:
        reach.append(f"--rescore_store fp16 (recall@{record['k']} {trial['recall']:.4f}, lower bound "
                     f"{trial['recall_lower95']:.4f}, measured on the same queries)")
    reach.append("search with --qdrant_exact (exact)" if meta.backend == "qdrant" else
                 "--index_factory Flat (exact search)")
    what = "--backend qdrant" if meta.backend == "qdrant" else f"--index_factory {meta.index_factory}"
    return (f"{what}: its best setting ({settings}) keeps recall@{record['k']} "
            f"{record['recall']:.4f} of exact (95% lower bound {record['recall_lower95']:.4f}, {record['queries']} "
            f"queries from {record['queries_from']}), below --target_recall {record['target_recall']}; reaches it: "
            f"{' or '.join(reach)}; or pass --allow_below_target to keep this index"
            + (f"; not tried here: rebuilding the graph with a wider beam (--hnsw_ef_construction {beam})"
               if beam is not None else ""))


def calibrate_index(index_dir: str | os.PathLike, target_recall: float = DEFAULT_TARGET,
                    n_queries: int = DEFAULT_QUERIES, k: int = DEFAULT_K, seed: int = 0,
                    unsafe_pickle: bool = False, queries: np.ndarray | None = None,
                    queries_from: str | None = None, sampler: str = DEFAULT_SAMPLER,
                    refuse_below_target: bool = False, refine_steps: int = REFINE_STEPS) -> dict | None:
    """Calibrate an index folder's search settings (module docstring) and record them in its ``multiview.json``.

    ``queries``: real query vectors (e.g. encoded dev queries, ``queries_from`` names them) to calibrate on
    instead of sampled corpus views (``n_queries`` of them, sampled); nothing is then left out of the rankings.
    ``sampler``: how queries are drawn from the corpus without them (:func:`sample_calibration_queries`).
    ``refuse_below_target``: raise :class:`BelowTargetError` (one line naming what reaches the target, module
    docstring) instead of recording settings whose lower bound stays below ``target_recall``; ``multiview.json``
    is then left as it was. ``refine_steps``: bisections per knob between the grid's steps (:func:`refine`).
    Returns the calibration record (None for exact indexes, which need none)."""
    from multiview_plugin.search._searcher import MultiVectorSearcher

    if not 0 < target_recall <= 1:
        raise ConfigError(f"--target_recall must be in (0, 1], got {target_recall}")
    index_dir = Path(index_dir)
    meta = IndexMeta.load(index_dir)
    if meta.aggregation != "max":
        logger.info("calibration skipped: it measures max-over-views recall, the index aggregates by %s",
                    meta.aggregation)
        return None
    searcher = MultiVectorSearcher(index_dir, aggregation="max")
    if searcher.store.calibration_grid() is None:
        logger.info("calibration skipped: %s searches exactly", meta.index_factory)
        return None
    if meta.num_docs <= k + 1:
        logger.info("calibration skipped: %d documents", meta.num_docs)
        return None
    cosine = None
    if queries is not None:
        queries = np.asarray(queries, dtype=np.float32)
        if queries.ndim != 2 or queries.shape[1] != meta.dim or not len(queries):
            raise ConfigError(f"calibration queries have shape {queries.shape}, the index expects (N, {meta.dim})")
        pick = np.sort(np.random.default_rng(seed).choice(len(queries), min(n_queries, len(queries)), replace=False))
        q, src = np.ascontiguousarray(queries[pick]), np.full(len(pick), -1, dtype=np.int64)
    else:
        q, src, cosine = sample_calibration_queries(index_dir, meta, n_queries, seed, unsafe_pickle, sampler)
        if cosine is not None and cosine > NEAR_DUPLICATE_COSINE:
            logger.warning("calibration: the corpus's views are near-duplicates of each other (mean within-document "
                           "cosine %.4f > %.2f), so queries drawn from the corpus may calibrate too optimistically; "
                           "pass encoded real queries with --calibration_query_reps", cosine, NEAR_DUPLICATE_COSINE)
    exact, tied = exact_top_docs(meta, q, src, k, unsafe_pickle)
    aim = calibration_aim(target_recall, views_as_queries=queries is None)
    record = calibrate_store(searcher.store, q, src, exact, target_recall, k, aim, refine_steps)
    if record is None:
        return None
    record["tied_queries"] = int(tied.sum())  # exact top-k ties at its cut-off: recall there is not measurable
    record["queries_from"] = queries_from or ("given query vectors" if queries is not None else f"corpus {sampler}")
    if refuse_below_target and not record["reached"] and not tied.all():
        trial = store_trial(searcher.store, meta, q, src, exact, target_recall, k, aim, unsafe_pickle)
        raise BelowTargetError(below_target_line(meta, record, trial, wider_beam(searcher.store)))
    if tied.any():
        logger.warning("calibration: %d of %d queries' exact scores tie at the top-%d cut-off (equal scores: "
                       "constant or duplicate vectors?), so which documents are their top %d is arbitrary and "
                       "recall by document cannot reach the target there", int(tied.sum()), len(q), k, k)
    record["seed"] = seed
    if queries is None:
        record["within_doc_cosine"] = None if cosine is None else round(cosine, 4)
    defaults = {n: v for n, v in record["settings"].items() if v is not None}
    meta.search_defaults, meta.calibration = defaults, record
    with atomic_open(index_dir / META_FILE) as f:  # a temporary file of this run's, renamed into place
        f.write(json.dumps(asdict(meta), indent=2) + "\n")
    logger.info("calibrated %s: %s → recall@%d %.4f of exact (target %.3f, aim %.4f, %d queries), %.3f ms/query",
                index_dir, defaults, k, record["recall"], target_recall, record["aim"], len(q), record["ms_per_query"])
    return record
