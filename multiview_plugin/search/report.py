"""What an index folder holds, in words (``python -m multiview_plugin.driver.index --report DIR``)."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import faiss

from multiview_plugin.encoding.shards import VIEW_DELIMITER, read_info
from multiview_plugin.encoding.view_info import VIEW_INFO_KEY
from multiview_plugin.index.faiss_build import hnsw_graphs, read_faiss_index
from multiview_plugin.index.folder import DOCID_FILE, INDEX_FILE
from multiview_plugin.index.meta import IndexMeta


def views_histogram(docid_file: str | os.PathLike, multi_vector: bool) -> Counter:
    """{views: documents}, streamed from the ``docid`` file (a document's rows are contiguous)."""
    hist: Counter = Counter()
    previous, run = None, 0
    with open(docid_file, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            doc = line.rsplit(VIEW_DELIMITER, 1)[0] if multi_vector else line
            if doc != previous and run:
                hist[run] += 1
                run = 0
            previous = doc
            run += 1
    if run:
        hist[run] += 1
    return hist


def _faiss_summary(path: Path) -> str:
    try:
        owner = faiss.read_index(str(path), faiss.IO_FLAG_MMAP)  # the vectors stay on disk
    except RuntimeError:  # index types that cannot be memory-mapped (or a corrupt file: named by the reader)
        owner = read_faiss_index(path)
    index = faiss.downcast_index(owner)  # a view: ``owner`` must stay alive while it is used
    parts = [type(index).__name__, f"{index.ntotal:,} vectors", f"dim {index.d}",
             "inner product" if index.metric_type == faiss.METRIC_INNER_PRODUCT else f"metric {index.metric_type}"]
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None:
        parts.append(f"{ivf.nlist} lists")
    for graph in hnsw_graphs(index):
        parts.append(f"{'quantiser ' if ivf is not None else ''}HNSW M={graph.hnsw.nb_neighbors(1)} "
                     f"(built with efConstruction {graph.hnsw.efConstruction})")
    return ", ".join(parts)


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return str(n)


def index_report(index_dir: str | os.PathLike) -> str:
    """A multi-line description of an index folder: model and options, counts, views per document, DCSR sentence
    counts, dtype, Faiss type and size on disk."""
    folder = Path(index_dir)
    meta = IndexMeta.load(folder)
    views: dict[str, Any] = meta.extra.get(VIEW_INFO_KEY) or {}
    model: dict[str, Any] = views.get("model") or {}
    lines = [f"index            {folder}"]
    lines.append(f"model            {meta.model_name or 'unknown'}"
                 + (f" (backbone {model.get('backbone')}, pooling {model.get('pooling')}, "
                    f"{'cosine' if model.get('normalize') else 'dot product'}, τ {model.get('temperature')}, "
                    f"passage_max_len {model.get('passage_max_len')})" if model else ""))
    if model.get("options"):
        lines.append("method options   " + ", ".join(f"{k}={v}" for k, v in sorted(model["options"].items())))
    lines.append(f"documents        {meta.num_docs:,}")
    lines.append(f"vectors          {meta.num_vectors:,} (dim {meta.dim})")
    lines.append(f"views/document   mean {meta.mean_views:.2f}, max {meta.max_views} ({meta.views_per_doc})")
    hist = views_histogram(folder / DOCID_FILE, meta.multi_vector)
    lines.append("  histogram      " + ", ".join(f"{n} views: {c:,}" for n, c in sorted(hist.items())))
    if views:
        what = views.get("kind", "?")
        if views.get("labels"):
            what += " " + ", ".join(map(str, views["labels"]))
        if views.get("kind") == "sentence":
            what += " (character spans in views.npy)" if views.get("rows") else " (no spans recorded)"
        if views.get("pseudo_queries"):
            what += f" (from {views['pseudo_queries']})"
        lines.append(f"views are        {what}")
    else:
        lines.append("views are        not recorded (index built before view information)")
    sentences = meta.extra.get("sentences")
    if sentences:
        total = max(1, sentences.get("sentences", 0))
        dropped = sentences.get("dropped", 0)
        lines.append(f"sentences        {sentences.get('sentences', 0):,} in {sentences.get('passages', 0):,} "
                     f"passages; {dropped:,} dropped past passage_max_len ({100.0 * dropped / total:.2f}%), "
                     f"{sentences.get('truncated', 0):,} cut short")
    infos = [read_info(s) for s in meta.shards if Path(s).is_file()]
    dtypes = {info.dtype for info in infos if info is not None}
    lines.append(f"dtype            shards {', '.join(sorted(dtypes)) or 'unknown (shards not found)'}; "
                 "Faiss holds float32" + ("" if meta.index_factory == "Flat" else " before its own coding"))
    lines.append(f"aggregation      {meta.aggregation}")
    if meta.backend == "qdrant":
        q = meta.qdrant or {}
        engine = "qdrant-edge (Qdrant's engine in the process)" if q.get("engine") == "edge" else (
            "qdrant-client local mode")
        lines.append(f"qdrant           collection {q.get('collection')!r} "
                     + (f"at {q['url']} (shards {q.get('shard_number') or 'server default'}, replication "
                        f"{q.get('replication_factor') or 1})" if q.get("url") else
                        f"embedded in {q.get('path')}, {engine}")
                     + (", vectors on disk" if q.get("on_disk") else ""))
        lines.append(_qdrant_storage(folder, meta))
    else:
        lines.append(f"faiss            {meta.index_factory}: {_faiss_summary(folder / INDEX_FILE)}")
    if meta.rescore_store:
        r = meta.rescore_store
        lines.append(f"rescore store    {r['file']}: {r['rows']:,} x {r['dim']} {r['dtype']} (candidates re-scored "
                     "from it, memory-mapped)")
    if meta.search_defaults:
        cal = meta.calibration or {}
        lines.append("search defaults  " + ", ".join(f"{k}={v}" for k, v in sorted(meta.search_defaults.items()))
                     + (f" (calibrated: recall@{cal.get('k')} {cal.get('recall')} of exact, target "
                        f"{cal.get('target_recall')})" if cal else ""))
    entries = sorted(folder.iterdir())
    sizes = {p.name + ("/" if p.is_dir() else ""): _tree_size(p) for p in entries}
    lines.append(f"size on disk     {_size(sum(sizes.values()))} (" + ", ".join(f"{n} {_size(b)}" for n, b in
                                                                            sizes.items()) + ")")
    return "\n".join(lines)


def _tree_size(path: Path) -> int:
    """Bytes of a file, or of every file under a folder (links not followed)."""
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _qdrant_storage(folder: Path, meta: IndexMeta) -> str:
    """Where a Qdrant index's vectors live and their bytes on this machine (a server's are not counted)."""
    from multiview_plugin.errors import MultiViewError
    from multiview_plugin.search._qdrant import QdrantSettings

    try:
        settings = QdrantSettings.from_record(meta.qdrant, str(folder / "multiview.json"))
    except MultiViewError as err:
        return f"qdrant storage   unknown ({err})"
    if settings.url:
        return f"qdrant storage   on the server {settings.url} (not counted here)"
    where = settings.storage(folder)
    if where == ":memory:":
        return "qdrant storage   in memory (gone with the process that built it)"
    store = Path(where)
    if not store.exists():
        return f"qdrant storage   {store}: missing"
    total = _tree_size(store)
    inside = store.resolve().is_relative_to(folder.resolve())
    return (f"qdrant storage   {store}: {total:,} bytes ({_size(total)}; "
            + ("inside the index folder, counted in its size below)" if inside else
               "outside the index folder, not counted in its size below)"))
