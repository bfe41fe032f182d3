"""View usage of a multi-vector index: do the views specialise or collapse? (MVR paper §5.2, and more.)

:func:`analyze_index` computes, over the (query, relevant document) pairs of the qrels, with each document's view
scores f_i(q, d) read from the index: Local Variation (paper eq. 9), view perplexity (eq. 10), per-view win counts
for relevant documents and for the top hits of a search, the distribution of views per document and the mean
normalised score of the best, second, ... view. :func:`write_plots` draws them. The command line is
``python -m multiview_plugin.driver.analyze`` (its ``--help`` says what each number means).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from multiview_plugin.atomic import atomic_open
from multiview_plugin.data.readers import load_qrels
from multiview_plugin.encoding.view_info import VIEW_INFO_KEY
from multiview_plugin.errors import ConfigError
from multiview_plugin.scoring import local_variation, view_perplexity

logger = logging.getLogger("multiview_plugin.analyze")


def pair_view_scores(searcher: Any, q_reps: np.ndarray, pairs: list[tuple[int, int]]) -> np.ndarray:
    """(N, max views) view scores of (query row, document index) pairs, ``-inf`` past a document's views."""
    explainer = searcher.explainer
    width = int(explainer.store.doc_views.max()) if len(explainer.store.doc_views) else 1
    out = np.full((len(pairs), width), -np.inf, dtype=np.float64)
    cache: dict[int, np.ndarray] = {}
    for n, (qi, doc) in enumerate(pairs):
        if doc not in cache:
            cache[doc] = explainer.doc_vectors(doc)
        scores = cache[doc] @ q_reps[qi]
        out[n, :len(scores)] = scores
    return out


def view_labels(views: dict | None, width: int) -> list[str]:
    """Axis labels of view indices 0..width-1: the index's labels (viewer tokens, layers) where recorded."""
    views = views or {}
    labels = views.get("labels")
    kind = views.get("kind")
    if labels and len(labels) >= width:
        prefix = {"layer": "layer ", "token": "token "}.get(kind, "")
        return [f"{prefix}{labels[j]}" for j in range(width)]
    name = {"sentence": "sentence", "pseudo_query": "query"}.get(kind, "view")
    return [f"{name} {j}" for j in range(width)]


def analyze_index(
    index_dir: str | os.PathLike,
    topics: str | os.PathLike | dict[str, str],
    qrels: str | os.PathLike | dict[str, dict[str, int]],
    encoder: Any,
    hits: int = 10,
    lv_temperature: float = 1.0,
    aggregation: str | None = None,
    query_batch_size: int | None = None,
) -> dict[str, Any]:
    """The view-usage numbers of an index (see the module docstring) as a JSON-able dict.

    ``topics``/``qrels`` are files or loaded dicts; ``encoder`` a saved model folder or a loaded encoder;
    ``query_batch_size`` None: the searcher's default.
    """
    from multiview_plugin.data.topics import load_topics
    from multiview_plugin.search import MultiVectorSearcher

    searcher = MultiVectorSearcher(index_dir, encoder, aggregation=aggregation,
                                   **({} if query_batch_size is None else {"query_batch_size": query_batch_size}))
    topics = topics if isinstance(topics, dict) else load_topics(str(topics))
    qrels = qrels if isinstance(qrels, dict) else load_qrels(qrels)
    explainer = searcher.explainer
    doc_of = {d: i for i, d in enumerate(searcher.store.docids.tolist())}
    q_ids = [q for q in topics if any(r > 0 and d in doc_of for d, r in qrels.get(q, {}).items())]
    if not q_ids:
        raise ConfigError(f"no topic has a relevant document in {index_dir}: do the topics, qrels and index match?")
    logger.info("%d queries with relevant documents in the index (of %d topics)", len(q_ids), len(topics))
    q_reps = searcher.encode([topics[q] for q in q_ids])
    pairs = [(qi, doc_of[d]) for qi, q in enumerate(q_ids) for d, r in qrels[q].items() if r > 0 and d in doc_of]
    scores = pair_view_scores(searcher, q_reps, pairs)
    width = scores.shape[1]
    valid = np.isfinite(scores)
    winners = np.argmax(np.where(valid, scores, -np.inf), axis=1)
    docs = np.array([d for _, d in pairs])
    multi = width > 1

    # which view wins among the top hits of the index's own ranking
    docids, _ = searcher.search_vectors(q_reps, hits)
    explained = searcher.explain(q_reps, docids)
    top_views = [e.view for row in explained for e in row if e is not None]
    top1 = [row[0].view for row in explained if row and row[0] is not None]

    views_per_doc = np.bincount(explainer.store.doc_views)
    result: dict[str, Any] = {
        "index": str(index_dir),
        "model_name": searcher.meta.model_name,
        "view_kind": (searcher.meta.extra.get(VIEW_INFO_KEY) or {}).get("kind"),
        "view_labels": view_labels(searcher.meta.extra.get(VIEW_INFO_KEY), width),
        "aggregation": searcher.aggregator.name,
        "queries": len(q_ids),
        "pairs": len(pairs),
        "documents_judged": int(len(np.unique(docs))),
        "max_views": width,
        "views_per_document": {str(n): int(c) for n, c in enumerate(views_per_doc) if c},
        "mean_views_per_document": float(explainer.store.doc_views.mean()),
        "relevant_wins": np.bincount(winners, minlength=width).tolist(),
        "relevant_docs_with_view": (valid.sum(axis=0)).astype(int).tolist(),
        "top_hits": hits,
        "top_hit_wins": np.bincount(top_views, minlength=width).tolist(),
        "top1_wins": np.bincount(top1, minlength=width).tolist(),
    }
    if multi and (valid.sum(axis=1) >= 2).any():
        import torch

        t = torch.from_numpy(scores)
        doc_index = torch.from_numpy(docs)
        model_tau = searcher.meta.extra.get("temperature")
        result["local_variation"] = float(local_variation(t, temperature=lv_temperature))
        result["lv_temperature"] = lv_temperature
        if model_tau:
            result["local_variation_model_temperature"] = float(local_variation(t, temperature=model_tau))
            result["model_temperature"] = model_tau
        result["local_variation_raw"] = float(local_variation(t, normalize=False))
        result["view_perplexity"] = float(view_perplexity(t, doc_index))
        counts = np.bincount(docs)
        repeated = torch.from_numpy(counts[docs] >= 2)
        result["documents_with_2plus_queries"] = int((counts >= 2).sum())
        if bool(repeated.any()):
            result["view_perplexity_2plus"] = float(view_perplexity(t[repeated], doc_index[repeated]))
        p = torch.softmax(t / lv_temperature, dim=-1).numpy()
        ranked = -np.sort(-np.where(valid, p, -1.0), axis=1)
        ranked[ranked < 0] = np.nan
        result["mean_sorted_probability"] = np.nanmean(ranked, axis=0).tolist()
        # the same curve if every document's views scored alike (1/k at each rank a k-view document has)
        k = valid.sum(axis=1, keepdims=True).astype(float)
        uniform = np.where(np.arange(width)[None, :] < k, 1.0 / k, np.nan)
        result["mean_uniform_probability"] = np.nanmean(uniform, axis=0).tolist()
        second = np.sort(np.where(valid, scores, -np.inf), axis=1)[:, -2]
        margin = scores.max(axis=1) - second
        result["mean_margin_to_runner_up"] = float(np.mean(margin[np.isfinite(margin)]))
    return result


def write_plots(result: dict[str, Any], output: str | os.PathLike, title: str | None = None) -> Path:
    """Draw the view-usage panels of :func:`analyze_index`'s result into a PNG (written atomically)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401  (matplotlib.ticker below)

    width = result["max_views"]
    labels = result["view_labels"]
    x = np.arange(width)
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    ax = axes[0, 0]
    for offset, key, name in ((-0.2, "relevant_wins", "relevant documents"),
                              (0.2, "top_hit_wins", f"top-{result['top_hits']} hits")):
        counts = np.asarray(result[key], dtype=float)
        ax.bar(x + offset, counts / max(1.0, counts.sum()), width=0.4, label=name)
    ax.set_xticks(x, labels, rotation=45 if width > 6 else 0, ha="right" if width > 6 else "center", fontsize=8)
    ax.set_ylabel("share of wins")
    ax.set_title("Which view wins (arg-max view)")
    ax.legend(fontsize=8)

    ax = axes[0, 1]
    dist = {int(k): v for k, v in result["views_per_document"].items()}
    ax.bar(list(dist), list(dist.values()), color="tab:gray")
    if len(dist) <= 20:
        ax.set_xticks(sorted(dist))
    else:
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.set_xlabel("views (vectors) per document")
    ax.set_ylabel("documents")
    ax.set_title(f"Views per document (mean {result['mean_views_per_document']:.2f})")

    ax = axes[1, 0]
    if "mean_sorted_probability" in result:
        probs = result["mean_sorted_probability"]
        ax.plot(np.arange(1, len(probs) + 1), probs, marker="o")
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        uniform = result.get("mean_uniform_probability", [1.0 / width] * len(probs))
        ax.plot(np.arange(1, len(uniform) + 1), uniform, color="tab:red", linestyle="--", linewidth=1,
                label="if a document's views scored alike (1/k)")
        ax.set_xlabel("view rank within the document (1 = best)")
        ax.set_ylabel(f"mean softmax(f/τ) over views, τ={result['lv_temperature']:g}")
        ax.set_ylim(0, 1.1 * max(max(probs), max(uniform)))  # from 0: collapsed views lie on the uniform line
        ax.set_title(f"Normalised view scores: LV {result['local_variation']:.3g} "
                     f"(raw {result['local_variation_raw']:.3g})")
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "one view per document", ha="center", va="center")
        ax.set_axis_off()

    ax = axes[1, 1]
    relevant = np.asarray(result["relevant_wins"], dtype=float)
    available = np.asarray(result["relevant_docs_with_view"], dtype=float)
    ax.bar(x, np.divide(relevant, available, out=np.zeros_like(relevant), where=available > 0), color="tab:green")
    ax.set_xticks(x, labels, rotation=45 if width > 6 else 0, ha="right" if width > 6 else "center", fontsize=8)
    ax.set_ylabel("wins / pairs whose document has it")
    ppl = result.get("view_perplexity")
    ax.set_title("Win rate where the view exists" + (f" (view PPL {ppl:.2f})" if ppl is not None else ""))

    fig.suptitle(title or f"{result['model_name']}: {result['pairs']} (query, relevant document) pairs, "
                 f"{result['queries']} queries")
    fig.tight_layout()
    output = Path(output)
    with atomic_open(output, "wb") as f:
        fig.savefig(f, format="png", dpi=90)
    plt.close(fig)
    return output
