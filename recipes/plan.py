"""The resource plan of a full-scale recipe, stage by stage, for a machine the user states.

``make_plan`` chooses the index and projects its RAM, disk, build time and search latency; ``pipeline_stages``
adds every other stage (downloads, training, pseudo-query generation, encoding, the shard disk the build reads,
calibration, search). Every figure names the committed log or record it comes from:

- index RAM / disk / latency: ``bench/ann.py``'s costs (``bench/ann.json``) scaled by
  ``bench/scale_projection.py``'s rules; an IVF index's search is priced instead from its parts measured at the
  plans' dim and lists by ``bench/ivf_search_rates.py`` (``bench/ivf_search_rates.json``: the HNSW quantiser, the
  codes scanned, the re-scoring, the searcher's own ranking) at the recipe's hits and the searcher's default knobs;
  an IVF index is built the measured fast way (two-level k-means,
  ``--ivf_training two_level``, and an HNSW coarse quantiser, ``IVF<n>_HNSW32``), whose held-out recall and bytes
  come from ``bench/ivf_build.py`` (``bench/ivf_build.json``) and whose build time is vectors x the cost of adding
  one plus the training, both measured at the plans' dim and lists by ``bench/ivf_rates.py``
  (``bench/ivf_rates.json``; lists past those measured fall back on ``bench/ivf_build.json``'s dim-64 fit, named
  as such);
- training, encoding and pseudo-query generation: ``bench/throughput.py``'s rates (``bench/throughput.json``),
  measured at each recipe's shapes with randomly initialised bert-base / T5-base on the hardware that JSON names
  (CPU, one torch thread); on GPUs, the rates of ``bench/throughput_gpu.json`` (``bench/throughput.py --device
  cuda``) where a session with a GPU measured them and the stated ``--gpu_name`` is the GPU measured, one GPU's rate
  x ``gpus``; a device not measured is printed as "not measured", with the stage's FLOPs (6 x params x tokens for
  training, 2 x for a forward pass) for the reader's own device, never a rate carried across models or devices by
  a ratio;
- calibration: the exact scan over the corpus (``calibrate.DEFAULT_QUERIES`` queries) at ``bench/ann.json``'s
  measured Flat rate.

Machine: ``cores`` per node (CPU stages divide by it: one thread's measured rate x cores, data-parallel, not
measured beyond one thread; the index build by the speed-up ``bench/build_scaling.py`` measured at the most
threads <= cores, never extrapolated past the largest thread count measured), ``gpus`` (the commands run
training and encoding under torchrun),
``nodes`` (the corpus is split into one shard index per node, built and searched in parallel: each node holds
1/nodes of the vectors), ``budget_gb`` of RAM per node. The index is chosen among the measured index types whose
recall reached ``MIN_RECALL``: exact ``Flat`` when it fits the budget, else the fastest approximate one that fits
(not the document-index kinds for dcsr, whose HasAns aggregation normalises over the collection's top sentence
vectors, which a document index does not return); when none fits, ``PlanRefused`` says which would fit on more
nodes.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from sources import BEIR_URL, TEVATRON_CORPUS, TEVATRON_HUB, beir_names, eval_files

ROOT = Path(__file__).resolve().parent.parent
COSTS = ROOT / "bench" / "ann.json"
IVF_BUILD = ROOT / "bench" / "ivf_build.json"
IVF_RATES = ROOT / "bench" / "ivf_rates.json"  # bench/ivf_rates.py: the build's adds and training at DIM and the lists
IVF_SEARCH = ROOT / "bench" / "ivf_search_rates.json"  # bench/ivf_search_rates.py: the IVF search's parts at DIM
RESCORE_COLD = ROOT / "bench" / "rescore_cold.json"  # bench/rescore_cold.py: re-scoring from a store not in memory
THROUGHPUT = ROOT / "bench" / "throughput.json"
THROUGHPUT_GPU = ROOT / "bench" / "throughput_gpu.json"  # bench/throughput.py --device cuda, where a GPU was measured
BUILD_SCALING = ROOT / "bench" / "build_scaling_768.json"  # bench/build_scaling.py --dim 768: the plans' dim
MIN_RECALL = 0.98
DEFAULT_BUDGET_GB = 256.0
DIM = 768  # bert-base-uncased, every full-scale recipe's backbone
# full-scale corpora (passages): DPR's Wikipedia split (NQ, TriviaQA, SQuAD) and MS MARCO passage
CORPUS_DOCS = {"nq": 21_015_324, "triviaqa": 21_015_324, "squad": 21_015_324, "msmarco": 8_841_823}
# BEIR corpora (documents), Thakur et al. 2021 (BEIR), Table 1; a local folder is counted instead
BEIR_DOCS = {"scifact": 5_183, "nfcorpus": 3_633, "fiqa": 57_638, "arguana": 8_674, "scidocs": 25_657,
             "trec-covid": 171_332, "nq": 2_681_468, "hotpotqa": 5_233_329, "quora": 522_931,
             "dbpedia-entity": 4_635_922, "fever": 5_416_568, "climate-fever": 5_416_593,
             "webis-touche2020": 382_545, "msmarco": 8_841_823}
# training questions: papers/mlr (Table 6: NQ / TriviaQA / SQuAD filtered; MS MARCO's 502,939 training queries)
TRAIN_QUESTIONS = {"nq": 58_880, "triviaqa": 60_413, "squad": 70_096, "msmarco": 502_939}
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
MAX_NODES = 256  # the most nodes a plan considers
MAX_CORES, MAX_GPUS = 1024, 64  # the most cores per node and GPUs a plan divides over (run.py refuses more)
CALIBRATION_QUERIES = 200  # multiview_plugin.search.calibrate.DEFAULT_QUERIES: exact scan of the corpus for each
# the searcher's defaults (multiview_plugin.search._searcher.ApproximateSearch, aggregators.HasAns): the first fetch
# is hits (HasAns: at least 100 documents) x views per document x over-fetch 2, and an IVF index probes at least
# the lists that hold 32 x that fetch on average (nprobe_floor)
SEARCH_OVERFETCH, PROBE_FACTOR, HASANS_FETCH_DOCS = 2.0, 32.0, 100


class PlanRefused(SystemExit):
    """No index type fits the RAM budget per node; the message says what would fit."""


def _projection():
    spec = importlib.util.spec_from_file_location("scale_projection", ROOT / "bench" / "scale_projection.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _json(path: Path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def machine_ram_gb() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9


def views_per_doc(method: str, recipe: dict) -> float:
    if method == "dce":
        return float(recipe.get("generate", {}).get("num_queries", 10))
    if method == "mvr":
        return float(recipe.get("train", {}).get("mvr_num_views", VIEWS["mvr"]))
    return VIEWS.get(method, 1.0)


def corpus_docs(benchmark: str, recipe: dict, beir_dirs: list[str] | None = None) -> dict[str, int] | None:
    """Documents per corpus the recipe indexes: one full-scale corpus, or each BEIR dataset (a local folder's
    corpus.jsonl is counted; a bare name is looked up in ``BEIR_DOCS``); None when a BEIR name is unknown."""
    if benchmark in CORPUS_DOCS:
        return {"corpus": CORPUS_DOCS[benchmark]}
    out = {}
    for d in beir_dirs or recipe.get("beir_datasets", []):
        path = Path(d) / "corpus.jsonl"
        if path.is_file():
            with path.open("rb") as f:
                out[Path(d).name] = sum(1 for _ in f)
        elif Path(d).name in BEIR_DOCS:
            out[Path(d).name] = BEIR_DOCS[Path(d).name]
        else:
            return None
    return out or None


# ----------------------------------------------------------------------------- the index


def ivf_build(path: Path | None = None) -> dict:
    """bench/ivf_build.json: per way (flat, fast, fast-fp16) the measured rows, fitted exponents, held-out recall."""
    return _json(Path(path or IVF_BUILD))


def ivf_build_seconds(bench: dict, way: str, n: int, dim: int, dim_exponent: float | None = None,
                      dim_factor: dict | None = None) -> tuple[float, float]:
    """(train, add) seconds on one core for ``way`` at ``n`` vectors of ``dim``: the fast way's largest measured
    size scaled by the measured exponents of N (train and add fitted separately) and by dim, times the measured
    cost of ``way``'s codes against SQ8's (the same run, same size) for fast-pq / fast-fp16. Dim: ``dim_factor``
    ({"train": x, "add": y}, measured from the rows' dim to ``dim``) where given, else (dim / measured dim) to the
    power ``dim_exponent`` (default: the dim sweep's exponent, floored at linear)."""
    proj = bench["projection"]["fast" if way.startswith("fast") else way]
    base = "fast" if way.startswith("fast") else way
    row = max((r for r in bench["rows"] if r["way"] == base), key=lambda r: r["vectors"])
    exponent = max(1.0, proj["dim_exponent"]) if dim_exponent is None else dim_exponent
    scale_t = scale_a = (dim / row["dim"]) ** exponent
    if dim_factor is not None:
        scale_t, scale_a = dim_factor["train"], dim_factor["add"]
    s = n / row["vectors"]
    train = row["train_s"] * s ** proj["train_exponent"] * scale_t
    add = row["add_s"] * s ** proj["add_exponent"] * scale_a
    if way != base:  # the codes' own cost, measured beside the fast SQ8 way in one run at one size
        mine = next(r for r in bench["rows"] if r["way"] == way)
        ref = next(r for r in bench["rows"] if r["way"] == base and r["vectors"] == mine["vectors"])
        train *= mine["train_s"] / max(ref["train_s"], 1e-9)
        add *= mine["add_s"] / max(ref["add_s"], 1e-9)
    return train, add


def ivf_rates(path: Path | None = None) -> dict | None:
    """bench/ivf_rates.json when it measured the plans' dim (else None: the plans fall back on bench/ivf_build.json)."""
    path = Path(path or IVF_RATES)
    rates = _json(path) if path.is_file() else None
    return rates if rates and rates.get("dim") == DIM else None


def _interpolated_us(rows: list[dict], nlist: int) -> tuple[float, str] | None:
    """us per added vector at ``nlist`` lists: as measured, or linear in log2(lists) between the measured lists on
    either side; below the fewest measured, their rate; above the most, None (not measured)."""
    if not rows or nlist > rows[-1]["lists"]:
        return None
    if nlist < rows[0]["lists"]:
        return rows[0]["us_per_vector"], f"fewer lists not measured: the rate at {rows[0]['lists']:,}"
    hi = next(i for i, r in enumerate(rows) if r["lists"] >= nlist)
    a, b = rows[max(0, hi - 1)], rows[hi]
    if b["lists"] == nlist:
        return b["us_per_vector"], "measured"
    t = (math.log2(nlist) - math.log2(a["lists"])) / (math.log2(b["lists"]) - math.log2(a["lists"]))
    return (a["us_per_vector"] + t * (b["us_per_vector"] - a["us_per_vector"]),
            f"interpolated between {a['lists']:,} and {b['lists']:,} lists")


def _training_seconds(rates: dict, nlist: int) -> tuple[float, str]:
    """Two-level training on 39 x nlist vectors: the fitted a · nlist^b within the measured lists; past them, the
    larger of the fit and the k-means FLOPs (which grow as nlist^1.5: the sample and the centroids each vector meets
    both grow) at the best FLOP rate measured, for the fit's exponent sits below 1.5 while the FLOP rate still climbs
    toward the core's peak."""
    fit, rows = rates["train_fit"], rates["train"]
    train = fit["a"] * nlist ** fit["b"]
    lists = [r["lists"] for r in rows]
    how = f"{fit['a']:.3g} x nlist^{fit['b']:.2f} fitted at {min(lists):,}-{max(lists):,} lists"
    if nlist <= max(lists):
        return train, how
    top = max(rows, key=lambda r: r["lists"])
    best = max(r["gflops_achieved"] for r in rows)
    gflop = top["kmeans_gflop"] * (nlist / top["lists"]) ** 1.5
    if gflop / best <= train:
        return train, f"{how}, carried {nlist / max(lists):g}x past the most"
    return gflop / best, (f"k-means {gflop:,.0f} GFLOP at {best:.1f} GFLOP/s, "
                     f"the best rate measured at {min(lists):,}-{max(lists):,} lists (the fit, nlist^{fit['b']:.2f}, "
                     f"gives {train / 3600:.2f} h)")


def measured_build_seconds(rates: dict, code: str, nlist: int, n: int) -> tuple[float, float, str] | None:
    """(train, add, source) seconds on one core of an ``IVF<nlist>_HNSW32,<code>`` build of ``n`` vectors at the
    plans' dim from bench/ivf_rates.json: n x the measured us per added vector at these lists (each vector is added
    on its own) and the two-level training (:func:`_training_seconds`); None where the lists exceed those measured."""
    rows = sorted((r for r in rates["add_rates"] if r["code"] == code), key=lambda r: r["lists"])
    at = _interpolated_us(rows, nlist)
    if at is None:
        return None
    us, how = at
    train, train_how = _training_seconds(rates, nlist)
    source = (f"bench/ivf_rates.json (dim {rates['dim']}, one core): adds {n:,} x {us:.1f} us per vector ({code}, "
              f"{nlist:,} lists: {how}); training {train / 3600:.2f} h (two-level k-means on 39 x {nlist:,} vectors: "
              f"{train_how})")
    return train, n * us / 1e6, source


def ivf_search_rates(path: Path | None = None) -> dict | None:
    """bench/ivf_search_rates.json when it measured the plans' dim (else None: IVF search keeps bench/ann.json's
    projection)."""
    path = Path(path or IVF_SEARCH)
    rates = _json(path) if path.is_file() else None
    return rates if rates and rates.get("dim") == DIM else None


def search_fetch(hits: int, views: float, max_aggregation: bool) -> int:
    """The searcher's first fetch of vectors for ``hits`` documents (its default over-fetch, an approximate index)."""
    docs = hits if max_aggregation else max(hits, HASANS_FETCH_DOCS)
    return math.ceil(max(docs, math.ceil(docs * views)) * SEARCH_OVERFETCH)


def _between(points: list[tuple[float, float]], x: float, log: bool = True) -> float | None:
    """y at ``x`` from measured (x, y) points: linear (in log x where ``log``) between the two on either side; below
    the first, the first's y; above the last, None (not measured)."""
    points = sorted(points)
    if x > points[-1][0]:
        return None
    f = math.log if log else float
    xs, ys = [f(p) for p, _ in points], [y for _, y in points]
    if f(x) <= xs[0]:
        return ys[0]
    hi = next(i for i, v in enumerate(xs) if v >= f(x))
    t = (f(x) - xs[hi - 1]) / (xs[hi] - xs[hi - 1])
    return ys[hi - 1] + t * (ys[hi] - ys[hi - 1])


def search_parts(rates: dict, code: str, nlist: int, nprobe: int, fetch: int, codes: float,
                 rescored_docs: float) -> dict[str, float] | None:
    """ms of each part of one query from bench/ivf_search_rates.json: ``coarse_ms``, the HNSW quantiser's search
    for ``nprobe`` lists at ``nlist`` lists (in log nprobe, then log lists, between those measured); ``scan_ms``,
    ``codes`` codes of ``code`` scanned at the fetch depth (its rate and per-query rest, linear in fetch);
    ``rescore_ms``, ``rescored_docs`` documents of the bench's views re-scored (between the widths measured). None
    where the nprobe, fetch, codes or width exceed those measured."""
    by_lists: dict[int, list[tuple[float, float]]] = {}
    for r in rates["coarse"]:
        by_lists.setdefault(r["lists"], []).append((r["nprobe"], r["ms_per_query"]))
    at_lists = [(lists, _between(pts, nprobe)) for lists, pts in by_lists.items()]
    coarse = None if any(ms is None for _, ms in at_lists) else _between(at_lists, nlist)
    scan_rows = [r for r in rates["scan"] if r["code"] == code]
    us_code = _between([(r["fetch"], r["us_per_code"]) for r in scan_rows], fetch, log=False) if scan_rows else None
    rest = _between([(r["fetch"], r["intercept_ms"]) for r in scan_rows], fetch, log=False) if scan_rows else None
    widths = [(0, 0.0)] + [(p["candidates"], p["ms_per_query"]) for p in rates["rescore"]["points"]]
    rescore = _between(widths, rescored_docs, log=False)
    if coarse is None or us_code is None or rest is None or rescore is None:
        return None
    return {"coarse_ms": coarse, "scan_ms": rest + codes * us_code / 1000, "rescore_ms": rescore}


def ivf_search_ms(rates: dict, code: str, nlist: int, n_vectors: int, views: float, hits: int,
                  max_aggregation: bool, rescored: bool) -> tuple[float, str, dict] | None:
    """ms per query on one thread of the searcher over ``IVF<nlist>_HNSW32,<code>`` holding ``n_vectors``: the
    parts (:func:`search_parts`) at the searcher's floor of nprobe (the lists holding 32 x the fetch), the codes in
    those lists and (``rescored``) every candidate document re-scored from the fp16 store, at most one per fetched
    vector, plus the searcher's own rest (aggregation, ranking) measured at the fetch depth on the bench's real
    folder; its source; and the re-scoring part (``docs``: candidate documents in the bench's views, ``ms``, the
    store's ``bytes`` read per query). None where the lists, nprobe or fetch exceed those measured."""
    fetch = search_fetch(hits, views, max_aggregation)
    nprobe = min(nlist, max(1, math.ceil(PROBE_FACTOR * fetch * nlist / n_vectors)))
    codes = nprobe * n_vectors / nlist
    cands = min(fetch, math.ceil(n_vectors / views))
    # re-scoring priced in documents of the bench's views (a document's cost ∝ its views)
    parts = search_parts(rates, code, nlist, nprobe, fetch, codes, cands * views / rates["views"] if rescored else 0)
    own = _between([(r["fetch"], r["searcher_rest_ms"]) for r in rates["checks"]], fetch, log=False)
    if parts is None or own is None:
        return None
    coarse, scan, rescore = parts["coarse_ms"], parts["scan_ms"], parts["rescore_ms"]
    source = (f"bench/ivf_search_rates.json (dim {rates['dim']}, one thread): the HNSW quantiser's search for "
              f"nprobe {nprobe} at {nlist:,} lists {coarse:.2f} ms (nprobe: the searcher's floor, the lists holding "
              f"{PROBE_FACTOR:g} x its fetch of {fetch:,} vectors; calibration may raise it) + {codes:,.0f} {code} "
              f"codes scanned {scan:.1f} ms + the searcher's own ranking {own:.1f} ms")
    if rescored:
        source += (f" + at most {cands:,} candidate documents x {views:g} views re-scored from the fp16 store "
                   f"{rescore:.1f} ms (its pages in memory)")
    docs = cands * views / rates["views"] if rescored else 0.0
    return coarse + scan + own + rescore, source, {"docs": docs, "ms": rescore, "bytes": cands * views * DIM * 2}


def _ivf_recall(bench: dict, way: str, rescored: bool) -> dict | None:
    rows = [r for r in bench["recall"] if r["way"] == way and (r["rescore_store"] == "fp16") == rescored]
    return max(rows, key=lambda r: r["vectors"]) if rows else None


# the fast IVF ways: (codes, code bytes per dim, searched with the fp16 re-scoring store?)
FAST_WAYS = {"fast": ("SQ8", 1.0), "fast-pq": (f"PQ{DIM // 8}", 1 / 8), "fast-fp16": ("SQfp16", 2.0)}


@dataclass(frozen=True)
class Measured:
    """The committed measurements an index plan reads, read once per plan (:func:`read_measurements`)."""
    proj: ModuleType  # bench/scale_projection.py: the projection rules
    costs: dict  # bench/ann.json
    bench: dict | None  # bench/ivf_build.json
    rates: dict | None  # bench/ivf_rates.json at DIM
    search: dict | None  # bench/ivf_search_rates.json at DIM
    cold: dict | None  # bench/rescore_cold.json at DIM


def read_measurements(costs: Path = COSTS, ivf_bench: Path | None = None) -> Measured:
    """Reads the files :class:`Measured` names (``costs`` and ``ivf_bench`` in place of the committed ones)."""
    ivf_bench = Path(ivf_bench or IVF_BUILD)
    return Measured(_projection(), _json(costs), ivf_build(ivf_bench) if ivf_bench.is_file() else None,
                    ivf_rates(), ivf_search_rates(), rescore_cold())


def index_options(n_vectors: int, views: float, max_aggregation: bool, costs: Path = COSTS,
                  ivf_bench: Path | None = None, hits: int = 100, read: Measured | None = None) -> list[dict]:
    """Every index type measured to reach ``MIN_RECALL``, projected to ``n_vectors`` (one node's share). IVF types
    are built the measured fast way (bench/ivf_build.py): SQ8 or PQ codes re-scored from an fp16 store for max
    aggregation; for dcsr's HasAns, which never re-scores, the codes alone must keep the recall (SQ8 or SQfp16).
    ``read``: the measurements already read (else read here, from ``costs`` and ``ivf_bench``)."""
    read = read or read_measurements(costs, ivf_bench)
    proj, bench, rates, search = read.proj, read.bench, read.rates, read.search
    margs = read.costs["args"]
    system = "dpr" if views == 1 else "mvr"
    options = []
    for row in proj.pick_per_index(read.costs["rows"], system, MIN_RECALL):
        if not row["meets_target"] or ("+doc:" in row["index"] and not max_aggregation):
            continue
        p = proj.project(row, n_vectors, DIM, {**margs, "views": views if views > 1 else margs["views"]},
                         min_train_per_list=MIN_TRAIN_PER_LIST)
        setting = "exact" if row["param"] == "exact" else f"{row['param']} {row['value']:g}"
        p.update(index_ram=p["ram"], measured=row, recall=row["recall"], recall_k=margs["k"],
                 recall_source=f"bench/ann.py at {row['index']}, {setting} on {row['vectors']:,} synthetic vectors",
                 ivf_training=None, build_source="bench/ann.json (bench/scale_projection.py rules)",
                 latency_source="bench/ann.json projection (bench/scale_projection.py rules), single-thread latency")
        if not (p["index"].startswith("IVF") and bench is not None):
            options.append(p)
            continue
        # the IVF rows stand for the fast ways with their codes
        for way in [w for w, (codes, _) in FAST_WAYS.items() if p["index"].endswith("," + codes)
                    or (codes.startswith("PQ") and p["index"].endswith(",SQ8"))]:
            rec = _ivf_recall(bench, way, rescored=max_aggregation and way != "fast-fp16")
            if rec and rec["held_out_recall"] >= MIN_RECALL:
                option = {**p, **_fast_ivf(p, way, bench, rates, n_vectors, rec)}
                if search is not None:
                    option.update(_ivf_latency(option, way, search, bench, rec, n_vectors, views, hits,
                                               max_aggregation))
                options.append(option)
    return options


def _fast_ivf(p: dict, way: str, bench: dict, rates: dict | None, n_vectors: int, rec: dict) -> dict:
    """An IVF option built the measured fast way: ``IVF<n>_HNSW32`` quantiser, two-level k-means, ``way``'s codes
    (SQ8, PQ dim/8 or SQfp16), with its held-out recall ``rec`` (re-scored from fp16 or codes alone); its build time
    from ``rates`` (bench/ivf_rates.json, read once by :func:`index_options`) where they cover its lists."""
    nlist = p["nlist"]
    codes, per_dim = FAST_WAYS[way]
    measured = measured_build_seconds(rates, codes, nlist, n_vectors) if rates else None
    train_s, add_s = measured[:2] if measured else ivf_build_seconds(bench, way, n_vectors, DIM)
    row = next(r for r in bench["rows"] if r["way"] == way)
    # bytes per vector: the measured index bytes, its codes rescaled from the measured dim to DIM, + the
    # searcher's 8-byte row map (as bench/ann.json counts it)
    per_vector = row["bytes_per_vector"] - per_dim * row["dim"] + per_dim * DIM + 8
    latency = p["latency_ms"]
    if way == "fast-pq":
        latency *= _pq_over_sq8(bench, rec) or 1.0
    how = "re-scored from fp16" if rec["rescore_store"] == "fp16" else "codes alone (no re-scoring)"
    return {"index": f"IVF{nlist}_HNSW32,{codes}", "ram": n_vectors * per_vector,
            "index_ram": n_vectors * per_vector, "build": train_s + add_s,
            "disk": n_vectors * (per_vector - 8) + n_vectors * (len(str(n_vectors)) + 3),  # + "docid#j" lines
            "latency_ms": latency, "ivf_training": "two_level", "recall": rec["held_out_recall"], "recall_k": rec["k"],
            "recall_source": f"bench/ivf_build.py: {rec['factory']} (two-level k-means, HNSW quantiser) at "
            f"{rec['vectors']:,} synthetic vectors, nprobe {rec['nprobe']} calibrated on other queries, {how}",
            "build_source": measured[2] if measured else _fit_source(bench)}


def _ivf_latency(option: dict, way: str, search: dict, bench: dict, rec: dict, n_vectors: int, views: float,
                 hits: int, max_aggregation: bool) -> dict:
    """The fast IVF option's latency from bench/ivf_search_rates.json where it measured the option's codes, lists
    and fetch (PQ: SQ8's times PQ's re-scored search over SQ8's, measured in one run by bench/ivf_build.py); {}
    (bench/ann.json's projection stays) elsewhere."""
    codes = "SQ8" if way == "fast-pq" else FAST_WAYS[way][0]
    priced = ivf_search_ms(search, codes, option["nlist"], n_vectors, views, hits,
                           max_aggregation, rescored=rec["rescore_store"] == "fp16")
    if priced is None:
        return {}
    ms, source, rescore = priced
    if way == "fast-pq":
        ratio = _pq_over_sq8(bench, rec)
        if ratio is None:
            return {}
        ms *= ratio
        source += f"; x {ratio:.2f}, PQ's search over SQ8's (bench/ivf_build.json)"
    return {"latency_ms": ms, "latency_source": source, "rescore": rescore if rescore["docs"] else None}


def rescore_cold(path: Path | None = None) -> dict | None:
    """bench/rescore_cold.json when it measured the plans' dim (else None: a store larger than the RAM left is
    priced as if in memory, and said to be not measured)."""
    path = Path(path or RESCORE_COLD)
    bench = _json(path) if path.is_file() else None
    return bench if bench and bench.get("dim") == DIM else None


def cold_store(option: dict, n_vectors: int, budget_gb: float, cold: dict | None) -> dict:
    """The re-scored option's search where its fp16 store does not fit the RAM left beside the index and the row
    map: that share of the store's reads (candidates spread evenly over it) priced at bench/rescore_cold.json's
    re-scoring from a store not in memory (the searcher's prefetch), the rest as in memory. {} where it fits."""
    rescore = option.get("rescore")
    if not rescore:
        return {}
    store = n_vectors * DIM * 2
    left = max(0.0, budget_gb * 1e9 - option["index_ram"] - n_vectors * DOCID_MAP_BYTES_PER_ROW)
    share = max(0.0, 1.0 - left / store)
    if share == 0:
        return {}
    what = (f"; the fp16 store ({store / 1e9:.0f} GB) exceeds the {left / 1e9:.0f} GB of RAM left beside the index "
            f"and the row map: {share:.0%} of its reads from disk")
    points = [(p["candidates"], p["ms"]["random+prefetch"]) for p in cold["points"]] if cold else None
    cold_ms = _between(points, rescore["docs"], log=False) if points else None
    if cold_ms is None:
        return {"latency_source": option["latency_source"] + what + f" ({rescore['bytes'] / 1e6:.0f} MB per query "
                "at most): not measured"}
    disk = cold["disk"]
    ms = option["latency_ms"] + share * (cold_ms - rescore["ms"])
    return {"latency_ms": ms, "latency_source": option["latency_source"] + what + (
        f", re-scored in {cold_ms:.1f} ms where none is in memory (bench/rescore_cold.json: a store evicted from the "
        f"page cache, the searcher's prefetch, one thread; disk {disk['device']}, read_ahead_kb "
        f"{disk['read_ahead_kb']}): {share:.2f} x {cold_ms:.1f} + {1 - share:.2f} x {rescore['ms']:.1f} ms")}


def _pq_over_sq8(bench: dict, rec: dict) -> float | None:
    """PQ's re-scored search time over SQ8's (``rec``: PQ's recall row), measured in one run at one size by
    bench/ivf_build.py; None where SQ8's was not measured."""
    sq = _ivf_recall(bench, "fast", rescored=True)
    return rec["ms_per_query"] / sq["ms_per_query"] if sq and sq["ms_per_query"] else None


def _fit_source(bench: dict) -> str:
    """Where a build figure carried from bench/ivf_build.json's dim-64 fit comes from (no bench/ivf_rates.json)."""
    fast = bench["projection"]["fast"]
    sizes = [r["vectors"] for r in bench["rows"]]
    return (f"bench/ivf_build.json (measured {min(sizes):,}-{max(sizes):,} vectors: train N^"
            f"{fast['train_exponent']:.2f}, add N^{fast['add_exponent']:.2f}, dim^{max(1.0, fast['dim_exponent']):.2f}"
            + (f" (measured dim^{fast['dim_exponent']:.2f}, floored at linear)" if fast["dim_exponent"] < 1 else "")
            + ")")


def _lossy_codes(factory: str) -> bool:
    """Whether an index factory stores its vectors in lossy codes (8-bit scalar or product quantisation)."""
    return any(part.startswith(("SQ8", "SQ4", "PQ")) for part in factory.split(","))


def make_plan(benchmark: str, method: str, recipe: dict, budget_gb: float = DEFAULT_BUDGET_GB,
              costs: Path = COSTS, nodes: int | None = None, cores: int = 1, n_docs: int | None = None,
              ivf_bench: Path | None = None, max_ms: float | None = None) -> dict | None:
    """The index plan (index, factories, RAM / disk per node, build hours on ``cores`` cores per node, ms/query,
    measured recall) for one corpus of ``n_docs`` (default: the benchmark's full-scale corpus) split over
    ``nodes`` (None: the fewest nodes on which an index fits ``budget_gb`` each); None when the corpus size is
    unknown (a BEIR folder not given). Raises :class:`PlanRefused` when no measured index type fits ``budget_gb``
    per node on the ``nodes`` given, naming what would (more nodes, or the smallest index's RAM). ``max_ms``: a
    search latency budget (ms/query, one thread, as projected): exact Flat is preferred only within it; otherwise,
    or when no budget is given and Flat does not fit, the fastest index that fits is chosen; with ``nodes`` None,
    more nodes are taken where none of the fewest that fit meets it (each node's share smaller: its re-scoring
    store kept in memory, or a Flat scan shorter), up to the fewest on which an index does."""
    n_docs = n_docs if n_docs is not None else CORPUS_DOCS.get(benchmark)
    if n_docs is None:
        return None
    views = views_per_doc(method, recipe)
    n_vectors = int(n_docs * views)
    max_aggregation = method not in ("dcsr",)  # dcsr ranks by HasAns, which a document index cannot serve
    hits = recipe.get("search", {}).get("hits", 1000)  # the recipe's search depth (recipes/run.py's default)

    read = read_measurements(costs, ivf_bench)

    def options_at(n: int) -> list[dict]:
        out = []
        for o in index_options(n, views, max_aggregation, hits=hits, read=read):
            o.update(cold_store(o, n, budget_gb, read.cold))
            # RAM: the index, the row → document map's load peak and the training sample (an upper bound: the
            # sample is freed before the adds, the map is read after them)
            o["ram"] = o["index_ram"] + n * DOCID_MAP_BYTES_PER_ROW + o["train_bytes"]
            out.append(o)
        return out

    counts = [nodes] if nodes else range(1, MAX_NODES + 1)  # nodes=None: the fewest that fit the budget
    for k in counts:
        per_node = math.ceil(n_vectors / k)
        options = options_at(per_node)
        if not options:
            raise SystemExit(f"plan: no index type measured in {costs} reaches recall {MIN_RECALL}")
        fits = [o for o in options if o["ram"] <= budget_gb * 1e9]
        if fits:
            break
    else:
        raise PlanRefused(_refusal(benchmark, method, options_at(math.ceil(n_vectors / (nodes or 1))), budget_gb,
                                   nodes or 1, n_vectors, options_at))
    nodes, for_latency = k, False
    if max_ms is not None and len(counts) > 1 and all(o["latency_ms"] > max_ms for o in fits):
        more = _fewest_nodes_within(k, n_vectors, budget_gb, max_ms, options_at)
        if more is not None:  # more nodes: a smaller share each, whose store (or Flat scan) meets the budget
            (nodes, fits), for_latency = more, True
            per_node = math.ceil(n_vectors / nodes)
    exact = [o for o in fits if o["measured"]["param"] == "exact" and (max_ms is None or o["latency_ms"] <= max_ms)]
    pick = exact[0] if exact else min(fits, key=lambda o: o["latency_ms"])
    main, _, doc = pick["index"].partition("+doc:")
    # lossy codes (SQ8, PQ) re-score their candidates from an fp16 copy of the views on disk (driver.index
    # --rescore_store): RAM unchanged, disk + rows x dim x 2 bytes (bench/calibration_rescore_store.log)
    # (max aggregation only: the searcher re-scores for max, never for dcsr's HasAns)
    store = "fp16" if _lossy_codes(main) and max_aggregation else None
    store_bytes = per_node * DIM * 2 if store else 0
    row = pick["measured"]
    return {"index": pick["index"], "index_factory": main, "doc_index_factory": doc or None,
            "ivf_training": pick["ivf_training"], "rescore_store": store, "store_gb": store_bytes / 1e9,
            "ram_gb": pick["ram"] / 1e9, "disk_gb": (pick["disk"] + store_bytes) / 1e9,
            "build_h_1core": pick["build"] / 3600, "build_h": pick["build"] / 3600 / build_speedup(cores)[0],
            "build_source": pick["build_source"], "cores": cores, "nodes": nodes,
            "ms_per_query": pick["latency_ms"], "latency_source": pick["latency_source"], "hits": hits,
            "recall": pick["recall"], "recall_k": pick["recall_k"],
            "recall_source": pick["recall_source"],
            "index_ram_gb": pick["index_ram"] / 1e9, "docid_map_gb": per_node * DOCID_MAP_BYTES_PER_ROW / 1e9,
            "train_size": pick["train_size"], "train_gb": pick["train_bytes"] / 1e9,
            "measured_index": row["index"], "measured_setting": "exact" if row["param"] == "exact" else
            f"{row['param']} {row['value']:g}", "measured_vectors": row["vectors"],
            "fits_budget": True, "budget_gb": budget_gb, "max_ms": max_ms, "docs": n_docs,
            "nodes_chosen": len(counts) > 1, "nodes_for_latency": for_latency,
            "views": views, "vectors": n_vectors, "vectors_per_node": per_node}


def _fewest_nodes_within(fewest: int, n_vectors: int, budget_gb: float, max_ms: float,
                         options_at) -> tuple[int, list[dict]] | None:
    """The fewest nodes past ``fewest`` on which an index both fits ``budget_gb`` and meets ``max_ms``, with the
    options that fit there; None where no count up to :data:`MAX_NODES` does."""
    for more in range(fewest + 1, MAX_NODES + 1):
        fits = [o for o in options_at(math.ceil(n_vectors / more)) if o["ram"] <= budget_gb * 1e9]
        if any(o["latency_ms"] <= max_ms for o in fits):
            return more, fits
    return None


def _refusal(benchmark: str, method: str, options: list[dict], budget_gb: float, nodes: int, n_vectors: int,
             options_at) -> str:
    smallest = min(options, key=lambda o: o["ram"])
    for more in range(nodes + 1, MAX_NODES + 1):
        at = [o for o in options_at(math.ceil(n_vectors / more)) if o["ram"] <= budget_gb * 1e9]
        if at:
            best = min(at, key=lambda o: o["latency_ms"])
            return (f"plan: {benchmark}/{method} fits no index in {budget_gb:g} GB of RAM per node on {nodes} "
                    f"node(s) (smallest measured: {smallest['index']}, {smallest['ram'] / 1e9:.0f} GB per node); "
                    f"what fits {budget_gb:g} GB: --nodes {more} with {best['index']} ({best['ram'] / 1e9:.0f} GB "
                    f"per node), or a node with --ram_budget_gb {math.ceil(smallest['ram'] / 1e9)}")
    return (f"plan: {benchmark}/{method} fits no index in {budget_gb:g} GB of RAM per node even on {MAX_NODES} nodes; "
            f"smallest measured: {smallest['index']}, {smallest['ram'] / 1e9:.0f} GB on {nodes} node(s)")


def plan_line(plan: dict | None) -> str:
    if plan is None:
        return "plan: corpus size known only once its folders are read (BEIR): Flat index, no projection"
    index = plan["index"] + (f" trained on {plan['train_size']:,} vectors" if plan["train_size"] else "")
    if plan.get("ivf_training") == "two_level":
        index += " (two-level k-means)"
    ram = (f"index {plan['index_ram_gb']:.0f} + docid map {plan['docid_map_gb']:.0f}"
           + (f" + training sample {plan['train_gb']:.0f}" if plan["train_size"] else ""))
    measured = f"recall@{plan['recall_k']} {plan['recall']:.4f} of exact measured by {plan['recall_source']}"
    if plan["index"] != "Flat":
        measured += "; driver.index's calibration sets the real index's search settings"
    if plan.get("rescore_store"):
        index += f", re-scoring store {plan['rescore_store']} on disk {plan['store_gb']:.0f} GB"
    where = f"{plan['cores']} CPU core{'s' if plan['cores'] > 1 else ''}" + (
        f" per node, {plan['nodes']} nodes each holding 1/{plan['nodes']}" if plan["nodes"] > 1 else "") + (
        f" (the fewest nodes on which an index fits {plan['budget_gb']:g} GB"
        + (f" and the latency budget of {plan['max_ms']:g} ms/query" if plan.get("nodes_for_latency") else "")
        + ")" if plan["nodes_chosen"] and plan["nodes"] > 1 else "")
    per_node = " per node" if plan["nodes"] > 1 else ""
    if plan.get("max_ms") is not None:
        over = plan["ms_per_query"] > plan["max_ms"]
        measured += (f"; over the latency budget of {plan['max_ms']:g} ms/query: the fastest index that fits"
                     if over else f"; within the latency budget of {plan['max_ms']:g} ms/query")
    return (f"plan: RAM {plan['ram_gb']:.0f} GB{per_node}, disk {plan['disk_gb']:.0f} GB{per_node}, build "
            f"{_hours(plan['build_h'])}, search {plan['ms_per_query']:.1f} ms/query ({index}; RAM {ram} GB; "
            f"{measured}; {plan['docs']:,} passages x {plan['views']:g} views x {DIM} dims; {where})")


# ----------------------------------------------------------------------------- the other stages


def throughput(path: Path = THROUGHPUT) -> dict:
    """bench/throughput.json: the measured rates per stage and shape, and the hardware they were measured on."""
    return _json(path)


def gpu_throughput(path: Path | None = None) -> dict | None:
    """bench/throughput_gpu.json (``bench/throughput.py --device cuda``) where a session with a GPU measured one;
    None where none did (the GPU side of every stage then prints "not measured")."""
    path = Path(path or THROUGHPUT_GPU)
    return _json(path) if path.is_file() else None


RATES = {"train": ("examples_per_s", "examples"), "encode": ("passages_per_s", "passages"),
         "generate": ("queries_per_s", "queries")}


def _rate(bench: dict, stage: str, source: str = "bench/throughput.json", **shape) -> dict:
    """The measured row of ``stage`` at ``shape``; a shape the bench did not measure is an error naming it."""
    for row in bench["rows"]:
        if row["stage"] == stage and all(row.get(k) == v for k, v in shape.items()):
            return row
    raise SystemExit(f"plan: {source} has no {stage} rate at {shape}: rerun bench/throughput.py "
                     "(it measures every recipe's shapes)")


def build_speedup(cores: int, path: Path = BUILD_SCALING) -> tuple[float, int, int]:
    """(speed-up of the index build over one thread, the thread count it was measured at, the largest measured):
    the best measured at <= ``cores`` threads (``bench/build_scaling_768.json``); past the largest count measured
    nothing is extrapolated."""
    curve = _json(path)["curve"]
    usable = [c for c in curve if c["threads"] <= cores] or [min(curve, key=lambda c: c["threads"])]
    best = max(usable, key=lambda c: c["speedup"])
    return max(1.0, best["speedup"]), best["threads"], max(c["threads"] for c in curve)


def _on_gpu(gpus: int, gpu_name: str, bench: dict, gpu_bench: dict | None, stage: str, shape: dict, items: float,
            per_item: float) -> str:
    """The GPU side of a stage: priced from bench/throughput_gpu.json's rate at this shape where the GPU it measured
    is the one stated (``--gpu_name``), one GPU's rate x ``gpus``; else "not measured" with the reason and the
    stage's FLOPs, ``items`` x ``per_item`` (no rate is carried to another GPU or from the CPU)."""
    flops = items * per_item
    if gpus == 0:
        return "no GPU stated (--gpus 0)"
    where = f"on {gpus} GPU{'s' if gpus > 1 else ''} ({gpu_name})"
    if gpu_bench is None:
        return f"{where}: {bench['gpu']}; the stage is {flops:.2g} FLOPs"
    measured = gpu_bench["hardware"]["name"]
    if gpu_name.lower() not in measured.lower():
        return (f"{where}: not measured (bench/throughput_gpu.json measured {measured}, not carried to another GPU); "
                f"the stage is {flops:.2g} FLOPs")
    row = _rate(gpu_bench, stage, "bench/throughput_gpu.json", **shape)
    key, unit = RATES[stage]
    return (f"{where}: {_hours(items / row[key] / gpus / 3600)} ({row[key]:,.1f} {unit}/s on one {measured}, "
            f"x {gpus} (data-parallel, not measured beyond 1 GPU)) [bench/throughput_gpu.log: "
            f"{gpu_bench['hardware'].get('amp', 'none')} autocast, {row['gflops_per_s']:,.0f} GFLOP/s achieved]")


def _hours(h: float) -> str:
    if h < 1:
        return f"{h:.2f} h"
    return f"{h:,.1f} h" if h < 48 else f"{h:,.0f} h ({h / 24:,.1f} days)"


def downloads(benchmark: str, method: str, recipe: dict, args) -> list[str]:
    """Everything the recipe would fetch, with where from (what --data_dir / --topics_dir / --checkpoint
    already provide is left out)."""
    out = []
    checkpoint = getattr(args, "checkpoint", None)
    backbone = recipe.get("train", {}).get("model_name_or_path")
    if backbone and not checkpoint and not Path(backbone).exists():
        out.append(f"backbone {backbone} (Hugging Face hub model)")
    gen = recipe.get("generate", {}).get("model_name_or_path")
    if gen and not checkpoint and not Path(gen).exists():
        out.append(f"doc2query model {gen} (Hugging Face hub model)")
    elif gen and checkpoint and not getattr(args, "pseudo_queries", None):
        out.append(f"doc2query model {gen} (Hugging Face hub model; or pass --pseudo_queries)")
    data_dir = getattr(args, "data_dir", None)
    if benchmark in ("nq", "triviaqa", "squad", "msmarco") and not data_dir:
        train = TEVATRON_HUB.get(benchmark, "Tevatron/msmarco-passage")
        if not checkpoint:
            out.append(f"training set {train} (Hugging Face hub dataset)")
        out.append(f"corpus {TEVATRON_CORPUS[benchmark]} (Hugging Face hub dataset)")
    if benchmark in ("nq", "triviaqa", "squad", "msmarco"):
        for ev in eval_files(benchmark, args):
            if ev["source"] != "local":
                out.append(f"{ev['what']} {ev['file']} ({ev['source']})")
    if benchmark == "beir":
        train, evals = beir_names(recipe, args)
        for name in dict.fromkeys(([train] if train and not checkpoint else []) + evals):
            if not Path(name).is_dir():
                out.append(f"BEIR dataset {name} ({BEIR_URL.format(name)})")
    return out


def pipeline_stages(benchmark: str, method: str, recipe: dict, args, plans: dict[str, dict | None]) -> list[str]:
    """One line per stage (downloads, training, generation, encoding, shard disk, index build, calibration,
    search), each with the measurement it comes from. ``plans``: the index plan per corpus."""
    cores, gpus = args.cores, args.gpus
    nodes = max((p["nodes"] for p in plans.values() if p), default=1)
    bench, gpu_bench = throughput(), gpu_throughput()
    hw = bench["hardware"]
    cpu = f"{hw['name']}, {hw['torch_threads']} torch thread"
    per_core = f"x {cores} core{'s' if cores > 1 else ''} (data-parallel, not measured beyond 1 thread)"

    def on_gpu(stage: str, shape: dict, items: float, per_item: float) -> str:
        return _on_gpu(gpus, args.gpu_name, bench, gpu_bench, stage, shape, items, per_item)

    lines = []
    dl = downloads(benchmark, method, recipe, args)
    lines.append("downloads: " + ("; ".join(dl) if dl else "none (everything given locally)"))
    train = recipe.get("train", {})
    length, q_len = int(train.get("passage_max_len", 256)), int(train.get("query_max_len", 32))
    if getattr(args, "checkpoint", None):
        lines.append("training: none (--checkpoint given)")
    else:
        examples = []
        group = int(train.get("train_group_size", 2))
        if benchmark in TRAIN_QUESTIONS:
            examples.append(("fine-tune", TRAIN_QUESTIONS[benchmark] * float(train.get("num_train_epochs", 1)),
                             f"{TRAIN_QUESTIONS[benchmark]:,} questions (papers/mlr) x "
                             f"{float(train.get('num_train_epochs', 1)):g} epochs", group))
        elif benchmark == "beir":
            docs = corpus_docs("beir", recipe, [beir_names(recipe, args)[0]]) or {}
            n_train = sum(docs.values())  # upper bound: a BEIR train split has at most one question per document
            examples.append(("fine-tune", n_train * float(train.get("num_train_epochs", 1)),
                             f"<= {n_train:,} questions (the training corpus's documents) x "
                             f"{float(train.get('num_train_epochs', 1)):g} epochs", group))
        if "warmup" in recipe:
            n_pseudo = CORPUS_DOCS.get(benchmark, 0) * views_per_doc(method, recipe)
            ep = float(recipe["warmup"].get("num_train_epochs", 1))
            examples.append(("warm-up", n_pseudo * ep, f"{n_pseudo:,.0f} pseudo-queries x {ep:g} epochs",
                             int(recipe["warmup"].get("train_group_size", group))))
        parts = []
        for name, n, what, g in examples:
            shape = {"query_len": q_len, "passage_len": length, "group": g}
            row = _rate(bench, "train", **shape)
            cpu_h = n / row["examples_per_s"] / 3600
            parts.append(f"{name} {what}: on CPU {_hours(cpu_h / cores)} on {cores} core{'s' if cores > 1 else ''} "
                         f"({row['examples_per_s']:.3f} examples/s per thread {per_core}); "
                         f"{on_gpu('train', shape, n, row['flops_per_example'])} [bench/throughput.log: bert-base "
                         f"{row['shape']} on {cpu}, {row['gflops_per_s']:.0f} GFLOP/s achieved]")
        lines.append("training: " + "; ".join(parts))
    all_docs = sum(p["docs"] for p in plans.values() if p) if any(plans.values()) else 0
    if "generate" in recipe:
        if getattr(args, "pseudo_queries", None):
            lines.append("generation: none (--pseudo_queries given)")
        else:
            gen = recipe["generate"]
            n_q, gen_len = int(gen.get("num_queries", 10)), int(gen.get("max_query_length", 64))
            shape = {"num_queries": n_q, "gen_len": gen_len}
            row = _rate(bench, "generate", **shape)
            queries = all_docs * n_q
            g = queries / row["queries_per_s"] / 3600
            lines.append(f"generation ({n_q} pseudo-queries per passage, {gen.get('model_name_or_path')}): "
                         f"{queries:,} queries: on CPU {g:,.0f} core-hours, {_hours(g / cores)} on {cores} "
                         f"core{'s' if cores > 1 else ''} ({row['queries_per_s']:.2f} queries/s per thread); "
                         f"{on_gpu('generate', shape, queries, row['flops_per_query'])} [bench/throughput.log: "
                         f"T5-base {row['shape']} on {cpu}, every query at its full length: an upper bound]")
    passes = views_per_doc(method, recipe) if method == "dce" else 1.0  # dce encodes (pseudo-query, passage) pairs
    vectors = sum(p["vectors"] for p in plans.values() if p)
    row = _rate(bench, "encode", passage_len=length)
    encode_on_gpu = on_gpu("encode", {"passage_len": length}, all_docs * passes, row["flops_per_passage"])
    enc_cpu_h = all_docs * passes / row["passages_per_s"] / 3600
    lines.append(f"encoding: {all_docs:,} passages -> {vectors:,} vectors"
                 + (f" ({passes:g} encoder passes per passage)" if passes > 1 else "")
                 + f": on CPU {_hours(enc_cpu_h / cores)} on {cores} core{'s' if cores > 1 else ''} "
                 f"({row['passages_per_s']:.2f} passages/s per thread {per_core}); "
                 f"{encode_on_gpu} [bench/throughput.log: "
                 f"bert-base {row['shape']} on {cpu}, {row['gflops_per_s']:.0f} GFLOP/s achieved]")
    shard_gb = vectors * DIM * 2 / 1e9
    lines.append(f"shard disk: {shard_gb:,.0f} GB of fp16 shards (encode --fp16: {vectors:,} vectors x {DIM} dims x "
                 "2 bytes, plus docids) read by the index build and by calibration"
                 + (f"; {shard_gb / nodes:,.0f} GB per node" if nodes > 1 else ""))
    builds = [(name, p) for name, p in plans.items() if p]
    total_build = sum(p["build_h"] for _, p in builds)
    detail = "; ".join(f"{name}: {p['index']}" + (" --ivf_training two_level" if p.get("ivf_training") else "")
                       + f" {p['build_h_1core']:,.1f} h on 1 core" for name, p in builds)
    src = sorted({p["build_source"] for _, p in builds})
    speedup, at, most = build_speedup(cores)
    scaling = _json(BUILD_SCALING)
    on_cores = f"{cores} core{'s' if cores > 1 else ''}"
    lines.append(f"index build: {_hours(total_build)} on {on_cores}"
                 + (f" per node ({nodes} nodes build their shards at once)" if nodes > 1 else "")
                 + f" ({detail}) [{'; '.join(src)}; {on_cores}: the one-core time / {speedup:.2f}, the speed-up "
                 f"bench/build_scaling_768.log measured at {at} thread{'s' if at > 1 else ''} on {scaling['hardware']} "
                 f"(measured up to {most} threads: more cores are not credited); shard reading not counted]")
    calib_h = 0.0
    measured = _json(COSTS)
    flat = next(r for r in measured["rows"] if r["system"] == "mvr" and r["index"] == "Flat")
    per_vec_dim_ms = flat["batched_ms"] / (flat["vectors"] * measured["args"]["dim"])
    for _, p in builds:
        if p["index"] != "Flat":
            calib_h += CALIBRATION_QUERIES * per_vec_dim_ms * p["vectors_per_node"] * DIM / 1000 / 3600
    lines.append(f"calibration: {_hours(calib_h / cores)} on {cores} core{'s' if cores > 1 else ''}"
                 + (" per node" if nodes > 1 else "") + f" ({CALIBRATION_QUERIES} sampled queries scanned exactly "
                 f"over every vector, at bench/ann.json's measured Flat rate {flat['batched_ms']:.1f} ms/query per "
                 f"{flat['vectors']:,} x {measured['args']['dim']} on one thread, x cores: not measured beyond one "
                 "thread; nothing for a Flat index)")
    lat = max((p["ms_per_query"] for _, p in builds), default=0.0)
    hits = next((p["hits"] for _, p in builds), None)
    lines.append(f"search: {lat:.1f} ms/query on 1 core" + (f" at {hits:,} hits" if hits else "")
                 + (f" per node ({nodes} shard indexes searched at once, top-k merged)" if nodes > 1 else "")
                 + f" [{'; '.join(sorted({p['latency_source'] for _, p in builds}))}]")
    ram = max((p["ram_gb"] for _, p in builds), default=0.0)
    disk = sum(p["disk_gb"] for _, p in builds)
    if nodes > 1:
        lines.append(f"nodes: {nodes}, one shard index each: node k encodes its 1/{nodes} of the shards into "
                     "emb/<corpus>/node<k>/ and builds index/<corpus>/node<k> from them (the commands below, one "
                     "index command per node); the search is one sharded search over every node's index on a Ray "
                     "cluster (driver.search --index node0,node1,... --ray_address), merging the nodes' top-k")
    lines.append(f"totals: RAM {ram:.0f} GB per node (budget {args.ram_budget_gb:g}), disk "
                 f"{disk + shard_gb / nodes:,.0f} GB per node (index {disk:,.0f} + shards {shard_gb / nodes:,.0f}), "
                 f"index build {_hours(total_build)} on {cores} core{'s' if cores > 1 else ''}"
                 + (f" per node, {nodes} nodes (one shard index each)" if nodes > 1 else ""))
    return lines


