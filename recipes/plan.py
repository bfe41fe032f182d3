"""The resource plan of a full-scale recipe: which index it builds, and the RAM, disk, build time and search
latency that index is projected to need, from the costs ``bench/ann.py`` measured (``bench/ann.json``) scaled
by ``bench/scale_projection.py``'s rules.

The index is chosen among the measured index types whose recall@k of exact max-over-views reached
``MIN_RECALL`` there: exact ``Flat`` when it fits the RAM budget, else the fastest approximate one that fits
(compressed views, IVF+SQ8, or candidates from a document index; not for dcsr, whose HasAns aggregation
normalises over the collection's top sentence vectors, which a document index does not return). A recipe
refuses to start (before any training or encoding) when the plan needs more RAM than the machine has, unless
``--force_plan``.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COSTS = ROOT / "bench" / "ann.json"
MIN_RECALL = 0.98
DEFAULT_BUDGET_GB = 256.0
DIM = 768  # bert-base-uncased, every full-scale recipe's backbone
# full-scale corpora (passages): DPR's Wikipedia split (NQ, TriviaQA, SQuAD) and MS MARCO passage
CORPUS_DOCS = {"nq": 21_015_324, "triviaqa": 21_015_324, "squad": 21_015_324, "msmarco": 8_841_823}
# index vectors per document by method: mvr's viewers; mlr's self-contrastive pooling indexes one vector;
# dcsr: sentences (4.86 per SQuAD dev paragraph, bench/real_vectors.log: 10,046 views / 2,067 paragraphs);
# dce: one view per pseudo-query (the recipe's num_queries)
VIEWS = {"dpr": 1.0, "mlr": 1.0, "mvr": 8.0, "dcsr": 4.86}
# IVF k-means gets at least this many training vectors per list (Faiss warns below 39 per centroid); the plan
# passes the sample size to driver.index's --train_size
MIN_TRAIN_PER_LIST = 39
# peak bytes per index row of loading the row → document map (the docid file) that calibration and search read:
# bench/docid_map_memory.log (2M rows, 8-digit docids, 8 views per document)
DOCID_MAP_BYTES_PER_ROW = 168.5


def _projection():
    spec = importlib.util.spec_from_file_location("scale_projection", ROOT / "bench" / "scale_projection.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def machine_ram_gb() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9


def views_per_doc(method: str, recipe: dict) -> float:
    if method == "dce":
        return float(recipe.get("generate", {}).get("num_queries", 10))
    if method == "mvr":
        return float(recipe.get("train", {}).get("mvr_num_views", VIEWS["mvr"]))
    return VIEWS.get(method, 1.0)


def make_plan(benchmark: str, method: str, recipe: dict, budget_gb: float = DEFAULT_BUDGET_GB,
              costs: Path = COSTS) -> dict | None:
    """The plan (index, factories, ram/disk bytes, build seconds, ms/query, measured recall); None when the
    corpus size is not known in advance (BEIR: the folders given)."""
    if benchmark not in CORPUS_DOCS:
        return None
    proj = _projection()
    measured = json.loads(Path(costs).read_text(encoding="utf-8"))
    margs = measured["args"]
    n_docs, views = CORPUS_DOCS[benchmark], views_per_doc(method, recipe)
    n_vectors = int(n_docs * views)
    system = "dpr" if views == 1 else "mvr"
    options = []
    max_aggregation = method not in ("dcsr",)  # dcsr ranks by HasAns, which a document index cannot serve
    for row in proj.pick_per_index(measured["rows"], system, MIN_RECALL):
        if not row["meets_target"] or ("+doc:" in row["index"] and not max_aggregation):
            continue
        p = proj.project(row, n_vectors, DIM, {**margs, "views": views if views > 1 else margs["views"]},
                         min_train_per_list=MIN_TRAIN_PER_LIST)
        # RAM: the index, the row → document map's load peak and the training sample (an upper bound: the
        # sample is freed before the adds, the map is read after them)
        p["index_ram"] = p["ram"]
        p["ram"] += n_vectors * DOCID_MAP_BYTES_PER_ROW + p["train_bytes"]
        options.append({**p, "measured": row})
    if not options:
        raise SystemExit(f"plan: no index type measured in {costs} reaches recall {MIN_RECALL}")
    fits = [o for o in options if o["ram"] <= budget_gb * 1e9]
    exact = [o for o in fits if o["measured"]["param"] == "exact"]
    pick = exact[0] if exact else (min(fits, key=lambda o: o["latency_ms"]) if fits else
                                   min(options, key=lambda o: o["ram"]))
    main, _, doc = pick["index"].partition("+doc:")
    row = pick["measured"]
    # lossy codes (SQ8, PQ) re-score their candidates from an fp16 copy of the views on disk (driver.index
    # --rescore_store): RAM unchanged, disk + rows x dim x 2 bytes (bench/calibration_rescore_store.log)
    # (max aggregation only: the searcher re-scores for max, never for dcsr's HasAns)
    store = "fp16" if _lossy_codes(main) and max_aggregation else None
    store_bytes = n_vectors * DIM * 2 if store else 0
    return {"index": pick["index"], "index_factory": main, "doc_index_factory": doc or None,
            "rescore_store": store, "store_gb": store_bytes / 1e9,
            "ram_gb": pick["ram"] / 1e9, "disk_gb": (pick["disk"] + store_bytes) / 1e9,
            "build_h": pick["build"] / 3600,
            "ms_per_query": pick["latency_ms"], "recall": row["recall"], "recall_k": margs["k"],
            "index_ram_gb": pick["index_ram"] / 1e9, "docid_map_gb": n_vectors * DOCID_MAP_BYTES_PER_ROW / 1e9,
            "train_size": pick["train_size"], "train_gb": pick["train_bytes"] / 1e9,
            "measured_index": row["index"], "measured_setting": "exact" if row["param"] == "exact" else
            f"{row['param']} {row['value']:g}", "measured_vectors": row["vectors"],
            "fits_budget": pick["ram"] <= budget_gb * 1e9, "budget_gb": budget_gb, "docs": n_docs,
            "views": views, "vectors": n_vectors}


def _lossy_codes(factory: str) -> bool:
    """Whether an index factory stores its vectors in lossy codes (8-bit scalar or product quantisation)."""
    return any(part.startswith(("SQ8", "SQ4", "PQ")) for part in factory.split(","))


def plan_line(plan: dict | None) -> str:
    if plan is None:
        return "plan: corpus size known only once its folders are read (BEIR): Flat index, no projection"
    index = plan["index"] + (f" trained on {plan['train_size']:,} vectors" if plan["train_size"] else "")
    ram = (f"index {plan['index_ram_gb']:.0f} + docid map {plan['docid_map_gb']:.0f}"
           + (f" + training sample {plan['train_gb']:.0f}" if plan["train_size"] else ""))
    measured = (f"recall@{plan['recall_k']} {plan['recall']:.4f} of exact measured by bench/ann.py at "
                f"{plan['measured_index']}, {plan['measured_setting']} on {plan['measured_vectors']:,} synthetic "
                "vectors")
    if plan["index"] != "Flat":
        measured += "; driver.index's calibration sets the real index's search settings"
    if plan.get("rescore_store"):
        index += f", re-scoring store {plan['rescore_store']} on disk {plan['store_gb']:.0f} GB"
    return (f"plan: RAM {plan['ram_gb']:.0f} GB, disk {plan['disk_gb']:.0f} GB, build {plan['build_h']:.1f} h, "
            f"search {plan['ms_per_query']:.1f} ms/query ({index}; RAM {ram} GB; {measured}; {plan['docs']:,} "
            f"passages x {plan['views']:g} views x {DIM} dims; 1 CPU core)")
