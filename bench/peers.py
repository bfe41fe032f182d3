"""Side-by-side speed and size against the peers a multi-vector user would pick (issue #38 item 4).

Same corpus, questions and machine in one run: the project's dpr (one vector per passage), dcsr-mean (one
vector per sentence: span means of the passage's token states) and mvr with k = 8 views (``--mvr_views
region --mvr_view_init segments``), each built untrained from all-MiniLM-L6-v2 with the project's own encoders
(``--mvr_views region``: segment views + MVR viewers; untrained, its gates are 0, so the views are the 8
segment means) (``get_encoder_class(name).build``, as the quickstart builds untrained systems), encoded with
``encode_to_shard``, indexed with ``build_index`` and searched with ``MultiVectorSearcher`` (Faiss ``Flat``:
exact; ``HNSW32``: approximate, its ``ef_search`` x ``overfetch`` tuned for single-query latency: of the settings
whose recall on the tuning questions reaches 0.995 of the method's own exact top-10, the one with the lowest
single-query CPU time there (``fastest``), timed on held-out questions); beside a ColBERT peer: MiniLM's token
states (every attended token of the passage, [CLS]/[SEP] included; queries: their own tokens, no [MASK]
expansion), projected to 128-d by a fixed random
Gaussian matrix (seed 0; ColBERT's dimension, untrained like the others) and L2-normalised, searched by (a) exact
MaxSim (torch brute force over every token vector) and (b) Voyager's HNSW over the token vectors (candidate
documents from each query token's nearest token vectors, then exact MaxSim re-ranking, as PLAID-style engines
do; the per-token neighbour count tuned to recall >= 0.99 of exact MaxSim's top-10).

PLAID: ``--plaid_python PATH`` (the python of a virtualenv with fast-plaid 1.7 and the torch 2.11.0 it pins,
which the registry has only as the multi-GB CUDA build; fast-plaid segfaults on this project's torch 2.13) runs
``bench/plaid_peer.py`` in this run on the ColBERT peer's own token vectors: fast-plaid, the engine of PyLate's
PLAID index, on the CPU (``--plaid_nbits`` residual bits, fast-plaid's default 4), tuned like the others to recall
>= 0.99 of exact MaxSim's top-10 (a ``colbert-plaid`` row, its index in the approximate column).
``--compressed FACTORY`` (e.g. ``IVF64,PQ48``) indexes dcsr-mean's same vectors compressed, ``nprobe`` tuned the
same way (below the target, at the cheapest setting of its plateau, as PLAID): a ``dcsr-mean-compressed`` row and
its goal line against PLAID's bytes. ``--doc_graph_methods mvr-k8`` also searches those methods' vectors
through a graph over documents instead of views (Flat views + ``--doc_index_factory HNSW32``: one graph node per
document, as dpr's; the graph's top candidates re-scored exactly over all views, their number tuned the same way):
a ``<method>-docgraph`` row, and for mvr-k8 the goal line against dpr's HNSW. Only for methods that rank by max
over views: the searcher takes no candidates from a document index for dcsr's HasAns aggregation.
``--hnsw_ef_construction N`` builds every HNSW graph of the project's rows (dpr's included) with construction beam
N instead of Faiss's 40.

Per method: encode docs/s (wall, this CPU), index bytes on disk, build seconds, single-query latency p50/p95
(1 thread and the default thread count; wall and CPU time per query), the recall of the timed index against the
method's exact top-10, and the top-1 on SQuAD-dev questions in this untrained setting (gold-passage R@1 and DPR
answer accuracy @1). The goal lines of the issue are printed as measured / not met. Timings on a shared machine:
record ``uptime`` beside the log; per-query CPU time is the figure load disturbs least.

The corpora (each part optional): ``--squad_path``: by default the paragraphs of SQuAD-dev articles 32-39 (354)
with 1,000 of their questions (seed 0); ``--articles all``: every paragraph (2,067) against 1,000 of the protocol's
held-out questions (articles 32-47). ``--beir_dir``: BEIR SciFact, all 5,183 abstracts against the protocol's 200
held-out queries (the quickstart's ``--data scifact`` split: 200 judged train queries, seed 42), quality as success@1
(``R@1``: a relevant abstract first) and nDCG@10. Then (``--synthetic_docs N``, 0: skip) a synthetic scale-up:
clustered 384-d vectors (tools/synthetic_vectors.py) at each method's measured views per document (the first
corpus's), through the same build_index / searcher (Flat, HNSW32 and, with ``--synthetic_ivf FACTORY``, an IVF
index, ``nprobe`` tuned), written and indexed block by block so that 1M documents fit (``--synthetic_exact_queries``
times exact search on fewer queries there); the ColBERT peer as 128-d token vectors at its measured tokens per
passage, exact MaxSim only, skipped with its size said past ``--synthetic_colbert_max_gb``.
``--quick``: a smoke run on article 32, 300 SciFact abstracts and their judged
ones, and 500 synthetic documents (nothing to record). Benches are not mirrored under tests/; ``--quick`` is the
smoke test. ``--json`` writes the rows by corpus (``{"squad": {...}, "scifact": {...}}``); ``--rows`` re-prints
the tables from such a file (or from the older SQuAD-only rows).

    PYTHONPATH=. HF_HUB_OFFLINE=1 TQDM_DISABLE=1 python bench/peers.py --squad_path $DATA/squad/dev-v1.1.json \
        --articles all --beir_dir $DATA/beir/scifact --json bench/peers.json > bench/peers.log
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools/ (not installed) from the repository root

# name -> (registered method, flags), the quickstart's own settings (multiview_plugin/quickstart/options.py)
COSINE = ["--normalize", "--temperature", "0.05"]
METHODS = {
    "dpr": ("dpr", ["--pooling", "mean", *COSINE]),
    "dcsr-mean": ("dcsr", ["--pooling", "mean", "--dcsr_sentence_pooling", "mean", *COSINE]),
    "mvr-k8": ("mvr", ["--mvr_views", "region", "--mvr_view_init", "segments", "--pooling", "mean",
                       "--mvr_num_views", "8", "--temperature_schedule", "fixed", *COSINE]),
}
BACKBONE = "sentence-transformers/all-MiniLM-L6-v2"
COLBERT_DIM = 128
K = 10
TARGET = 0.99
TUNE_MARGIN = 0.005  # the tuning questions must reach TARGET + this, so that held-out ones keep TARGET (--tune_margin)
OVERFETCH_GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256)  # the top two: clustered synthetic sets of 1M documents
EF_GRID = (4, 8, 16, 32, 64, 128, 256)
# the project's HNSW rows: (beam lower bound, walked knob), tuned for single-query latency (fastest())
VIEW_GRID = {"ef_search": (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512),
             "overfetch": (0.5, 0.75, 1, 1.5, 2, 3, 4, 6, 8, 12, 16, 32, 64)}
DOC_GRID = {"ef_search": (16, 32, 64, 128, 256),
            "min_doc_candidates": (10, 20, 30, 50, 70, 100, 140, 200, 280, 400, 560, 800, 1600)}
NPROBE_GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


HNSW_BEAM: int | None = None  # --hnsw_ef_construction: every HNSW graph the project's rows build (None: Faiss's 40)


def beam(factory: str) -> dict:
    """``build_index``'s option for ``--hnsw_ef_construction`` where ``factory`` has a graph."""
    return {"hnsw_ef_construction": HNSW_BEAM} if HNSW_BEAM is not None and "HNSW" in factory else {}


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def recall(found: np.ndarray, exact: np.ndarray) -> float:
    """Mean fraction of the exact top-k found in the approximate top-k."""
    return float(np.mean([len(set(a.tolist()) & set(b.tolist())) / len(b) for a, b in zip(found, exact)]))


def latencies(fn, queries: list, threads: int) -> dict:
    """Single-query wall and CPU time (ms), p50 / p95, with ``threads`` Faiss / torch threads."""
    import faiss

    old_f, old_t = faiss.omp_get_max_threads(), torch.get_num_threads()
    faiss.omp_set_num_threads(threads)
    torch.set_num_threads(threads)
    fn(queries[0])  # warm-up
    wall, cpu = [], []
    for q in queries:
        w, c = time.perf_counter(), time.process_time()
        fn(q)
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
    faiss.omp_set_num_threads(old_f)
    torch.set_num_threads(old_t)
    w, c = np.array(wall) * 1e3, np.array(cpu) * 1e3
    return {"p50": float(np.median(w)), "p95": float(np.percentile(w, 95)), "cpu_p50": float(np.median(c))}


def timed(searcher, q: np.ndarray, threads: int) -> dict:
    """Single-query latencies of a project searcher, 1 thread and ``threads``."""
    def one(x: np.ndarray) -> None:
        searcher.search_vectors(x, K)

    return {f"t{t}": latencies(one, [q[i:i + 1] for i in range(len(q))], t) for t in (1, threads)}


def load_squad(path: str, n_questions: int, articles: range | None, seed: int) -> tuple:
    """The SQuAD-dev protocol's held-out questions (articles 32-47) against every paragraph, or (``articles``)
    a slice: the paragraphs of those articles only, with their questions."""
    from multiview_plugin.data.readers import format_passage
    from multiview_plugin.data.squad import convert_squad

    split = convert_squad(path, num_negatives=0, negatives_from="random")
    corpus = {d: format_passage(p["title"], p["text"]) for d, p in split.corpus.items()}
    qids = sorted(split.eval_queries)
    if articles is not None:
        corpus = {d: t for d, t in corpus.items() if int(d.split("_")[0]) in articles}
        qids = [q for q in qids if next(iter(split.eval_qrels[q])) in corpus]
    rng = np.random.default_rng(seed)
    qids = [qids[i] for i in sorted(rng.choice(len(qids), min(n_questions, len(qids)), replace=False))]
    gold = {q: next(iter(split.eval_qrels[q])) for q in qids}
    titled = {d: (p["title"], p["text"]) for d, p in split.corpus.items()}
    return corpus, {q: split.eval_queries[q] for q in qids}, gold, {q: split.eval_answers[q] for q in qids}, titled


def load_scifact(beir_dir: str, seed: int = 42, dev_size: int = 200) -> tuple:
    """The SciFact protocol's held-out queries (the quickstart's: ``dev_size`` judged train queries sampled with
    ``seed``, data/beir.py's convert_beir) against the whole corpus; their qrels."""
    import random

    from multiview_plugin.data.readers import load_beir

    corpus, queries, qrels = load_beir(beir_dir, "train")
    judged = [q for q in queries if any(r > 0 for r in qrels[q].values())]
    dev = set(random.Random(seed).sample(judged, dev_size))
    qids = [q for q in queries if q in dev]
    return corpus, {q: queries[q] for q in qids}, {q: qrels[q] for q in qids}


def beir_quality(ranked: dict, qrels: dict) -> dict:
    """Success@1 (a relevant document first) and nDCG@10 of ``{qid: [docid, ...]}``."""
    from multiview_plugin.evaluation.metrics import evaluate_run

    run = {q: [(d, 1.0 / (i + 1)) for i, d in enumerate(ds)] for q, ds in ranked.items()}
    r1 = float(np.mean([qrels[q].get(ds[0], 0) > 0 for q, ds in ranked.items()]))
    return {"r@1": r1, "nDCG@10": evaluate_run(run, qrels, ["nDCG@10"])["nDCG@10"]}


def top1(ranked: dict, questions: dict, gold: dict, answers: dict, titled: dict) -> dict:
    """Gold-passage R@1 and DPR answer accuracy @1 of ``{qid: [docid, ...]}``."""
    from multiview_plugin.evaluation.answers import build_retrieval, retrieval_accuracy

    r1 = float(np.mean([ranked[q][0] == gold[q] for q in ranked]))
    run = {q: [(d, 1.0 / (i + 1)) for i, d in enumerate(ranked[q])] for q in ranked}
    ret = build_retrieval(run, {q: questions[q] for q in ranked}, {q: answers[q] for q in ranked}, titled,
                          depth=1, store_text=False)
    return {"r@1": r1, "answer@1": next(iter(retrieval_accuracy(ret, ks=(1,)).values())) / 100.0}


def fastest(searcher, grid: dict, q: np.ndarray, exact: np.ndarray, split: int, threads: int) -> dict:
    """The searcher's settings tuned for single-query latency at equal recall: for each value of ``grid``'s first
    knob, the second knob walked upwards to its first value whose recall on the tuning questions ``q[:split]``
    reaches TARGET + TUNE_MARGIN; of those settings, the one with the lowest single-query CPU p50 on the tuning
    questions (1 thread); recall and latency then measured on the rest. Where no setting reaches it: the
    highest-recall one, ``reached`` False. (The library's calibration, with its stricter aim on the recall's lower
    bound and its batch-time ranking, chose slower single queries here: ``bench/peers_calibrated.log``.)"""
    outer, walked = list(grid)
    points, passing = [], []
    for o in grid[outer]:
        value, reached, tuned = sweep(grid[walked], lambda w, o=o: recall(
            apply(searcher, {outer: o, walked: w}).search_vectors(q[:split], K)[0], exact[:split]), TUNE_MARGIN, False)
        points += [({outer: o, walked: w}, r) for w, r in zip(grid[walked], tuned)]
        passing += [{outer: o, walked: value}] if reached else []
    tuning = [q[i:i + 1] for i in range(split)]
    cost = [latencies(lambda x, s=s: apply(searcher, s).search_vectors(x, K), tuning, 1)["cpu_p50"] for s in passing]
    best = passing[int(np.argmin(cost))] if passing else max(points, key=lambda p: p[1])[0]
    ids, _ = apply(searcher, best).search_vectors(q[split:], K)
    cpu = dict(zip(map(knob_label, passing), cost))
    tried = [{"settings": s, "tuning_recall": r, "tuning_cpu_p50": cpu.get(knob_label(s))} for s, r in points]
    return {"settings": best, "reached": bool(passing), "tried": tried, "recall": recall(ids, exact[split:]),
            **timed(searcher, q[split:], threads)}


def apply(searcher, settings: dict) -> object:
    """``searcher`` with its approximate search's knobs at ``settings``."""
    for knob, value in settings.items():
        set_knob(searcher, knob, value)
    return searcher


def knob_label(settings: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in settings.items())


def project_method(name: str, corpus: dict, questions: dict, work: Path, split: int, args) -> tuple[dict, dict]:
    """Encode, index (Flat, HNSW32) and time one of the project's methods; returns its row and exact ranking."""
    from multiview_plugin.arguments import DataArguments, ModelArguments
    from multiview_plugin.cli import parse_dataclasses
    from multiview_plugin.encoding.encode import encode_to_shard
    from multiview_plugin.index.meta import DEFAULT_AGGREGATION
    from multiview_plugin.registry import get_encoder_class
    from multiview_plugin.search import MultiVectorSearcher, build_index

    method, flags = METHODS[name]
    margs, dargs = parse_dataclasses((ModelArguments, DataArguments), [
        "--model_name", method, "--model_name_or_path", BACKBONE, "--query_max_len", "32",
        "--passage_max_len", str(args.passage_max_len), *flags])
    torch.manual_seed(0)
    encoder = get_encoder_class(method).build(margs, dargs).eval()
    corpus_file = work / "corpus.jsonl"
    shard = work / f"{name}.pkl"
    start, cpu = time.perf_counter(), time.process_time()
    encode_to_shard(encoder, str(corpus_file), shard, batch_size=32)
    encode_s, encode_cpu = time.perf_counter() - start, time.process_time() - cpu
    q = encoder.encode_queries(list(questions.values()), 64).astype(np.float32)
    row: dict = {"method": name, "docs": len(corpus), "encode_docs_per_s": len(corpus) / encode_s,
                 "encode_docs_per_cpu_s": len(corpus) / encode_cpu}
    ranked_exact = None
    for factory in ("Flat", "HNSW32"):
        index_dir = work / f"{name}-{factory}"
        start = time.perf_counter()
        meta = build_index([shard], index_dir, index_factory=factory, **beam(factory))
        build_s = time.perf_counter() - start
        searcher = MultiVectorSearcher(index_dir, None)
        vectors = int(meta.num_vectors)
        if factory == "Flat":
            exact_ids, _ = searcher.search_vectors(q, K)
            ranked_exact = exact_ids
            row.update(vectors=vectors, flat_bytes=folder_bytes(index_dir), flat_build_s=build_s)
            row["flat"] = {"recall": 1.0, **timed(searcher, q[split:], args.threads)}
        else:
            row.update(hnsw_bytes=folder_bytes(index_dir), hnsw_build_s=build_s)
            row["hnsw"] = fastest(searcher, VIEW_GRID, q, ranked_exact, split, args.threads)
            beam_name = f"efConstruction {HNSW_BEAM}, " if HNSW_BEAM is not None else ""
            row["approx_name"] = f"HNSW ({beam_name}{knob_label(row['hnsw']['settings'])})"
    res: dict = {"ids": ranked_exact, "extra": []}  # extra: (row, ranking) of other indexes of the same vectors
    if args.compressed and name in args.compressed_methods.split(","):
        from multiview_plugin.errors import ConfigError

        try:
            res["extra"].append(compressed_row(name, row, shard, q, ranked_exact, split, work, args))
        except ConfigError as err:  # e.g. --quick's 21 passages: too few vectors to train PQ's 256 centroids
            print(f"# {name}-compressed not built: {err}", flush=True)
    if name in args.doc_graph_methods.split(","):
        aggregation = DEFAULT_AGGREGATION.get(method, "max")
        if aggregation == "max":
            res["extra"].append(doc_graph_row(name, row, shard, q, ranked_exact, split, work, args))
        else:  # the searcher takes candidates from a document index only for max-over-views scores
            print(f"# {name}-docgraph not run: {name} ranks by {aggregation} aggregation, which a document index "
                  "does not serve (its searcher would scan every view)", flush=True)
    return row, res


def doc_graph_row(name: str, row: dict, shard: Path, q: np.ndarray, exact: np.ndarray, split: int, work: Path,
                  args) -> tuple[dict, np.ndarray]:
    """The same vectors searched through a graph over documents, not views (``--doc_graph_methods``): a ``Flat``
    index of the views plus ``--doc_index_factory HNSW32`` (one node per document: its views' normalised mean);
    the graph's top ``min_doc_candidates`` documents are re-scored exactly, max over all their views. The
    candidates and the graph's beam are tuned like the views' HNSW (:func:`fastest` over DOC_GRID; marked below
    where none reaches the target). Its row (index in the approximate column) and its ranking of every question."""
    from multiview_plugin.search import MultiVectorSearcher, build_index

    index_dir = work / f"{name}-docgraph"
    start = time.perf_counter()
    build_index([shard], index_dir, index_factory="Flat", doc_index_factory="HNSW32", **beam("HNSW32"))
    build_s = time.perf_counter() - start
    searcher = MultiVectorSearcher(index_dir, None, doc_candidates=1.0)  # the depth is min_doc_candidates
    lat = fastest(searcher, DOC_GRID, q, exact, split, args.threads)
    ids, _ = searcher.search_vectors(q, K)
    out = index_row(row, index_dir, build_s, lat)
    chosen, ef, reached = lat["settings"]["min_doc_candidates"], lat["settings"]["ef_search"], lat["reached"]
    label = (f"Flat + doc:HNSW32{'' if HNSW_BEAM is None else f' efConstruction {HNSW_BEAM}'} ({chosen} candidates, "
             f"ef_search {ef}{'' if reached else ', below 0.99'})")
    return {"method": f"{name}-docgraph", "approx_name": label, **out}, ids


def compressed_row(name: str, row: dict, shard: Path, q: np.ndarray, exact: np.ndarray, split: int, work: Path,
                   args) -> tuple[dict, np.ndarray]:
    """The same vectors in a compressed index (``--compressed``, e.g. ``IVF64,PQ48``: 48 bytes a vector): its
    ``nprobe`` tuned like PLAID's settings (the cheapest reaching recall TARGET + margin on the tuning questions,
    else the cheapest within 0.001 of the best recall it levels off at: PQ scores are approximate, as PLAID's
    residuals are); its row (index in the approximate column, as PLAID's) and its own ranking of every question."""
    from multiview_plugin.search import MultiVectorSearcher, build_index

    index_dir = work / f"{name}-compressed"
    start = time.perf_counter()
    build_index([shard], index_dir, index_factory=args.compressed)
    build_s = time.perf_counter() - start
    searcher = MultiVectorSearcher(index_dir, None)
    out, ids = tuned_row(row, index_dir, build_s, searcher, "nprobe", NPROBE_GRID, True, q, exact, split, args.threads)
    probed = probed_lists(searcher)  # the last searches ran at the chosen nprobe
    out["hnsw"]["probed"] = probed
    return {"method": f"{name}-compressed", "approx_name": f"{args.compressed} ({probed} lists probed)", **out}, ids


def tuned_row(row: dict, index_dir: Path, build_s: float, searcher, knob: str, grid: tuple, plateau: bool,
              q: np.ndarray, exact: np.ndarray, split: int, threads: int) -> tuple[dict, np.ndarray]:
    """Another index of ``row``'s vectors (``index_dir``, searched by ``searcher``): ``knob`` tuned over ``grid`` by
    :func:`sweep` on the tuning questions ``q[:split]``, every question ranked at the chosen setting, timed on the
    rest; the row's fields (the encode figures copied from ``row``, the index in the approximate column) and the
    ranking."""
    chosen, reached, tuned = sweep(grid, lambda v: recall(set_knob(searcher, knob, v).search_vectors(
        q[:split], K)[0], exact[:split]), TUNE_MARGIN, plateau)
    ids, _ = set_knob(searcher, knob, chosen).search_vectors(q, K)
    return index_row(row, index_dir, build_s, {knob: chosen, "reached": reached, "tuning_recalls": tuned,
                                               "recall": recall(ids[split:], exact[split:]),
                                               **timed(searcher, q[split:], threads)}), ids


def index_row(row: dict, index_dir: Path, build_s: float, lat: dict) -> dict:
    """The fields of a row for another index of ``row``'s vectors: its encode figures copied, the index's bytes and
    build time, and its tuned search ``lat`` in the approximate column."""
    out = {key: row[key] for key in ("docs", "vectors", "encode_docs_per_s", "encode_docs_per_cpu_s")}
    out.update(hnsw_bytes=folder_bytes(index_dir), hnsw_build_s=build_s, hnsw=lat)
    return out


class ColbertEncoder:
    """MiniLM's token states, projected to 128-d by a fixed random matrix (seed 0) and L2-normalised."""

    def __init__(self, passage_max_len: int, query_max_len: int = 32):
        from transformers import AutoModel, AutoTokenizer

        from multiview_plugin.backbones import resolve_backbone

        path = resolve_backbone(BACKBONE)
        self.tok = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path).eval()
        gen = torch.Generator().manual_seed(0)
        self.proj = torch.randn(self.model.config.hidden_size, COLBERT_DIM, generator=gen) / COLBERT_DIM ** 0.5
        self.lens = {False: passage_max_len, True: query_max_len}

    @torch.inference_mode()
    def encode(self, texts: list[str], is_query: bool, batch_size: int = 32) -> list[np.ndarray]:
        out = []
        for s in range(0, len(texts), batch_size):
            batch = self.tok(texts[s:s + batch_size], padding=True, truncation=True,
                             max_length=self.lens[is_query], return_tensors="pt")
            states = self.model(**batch).last_hidden_state @ self.proj
            states = torch.nn.functional.normalize(states, dim=-1)
            for st, m in zip(states, batch["attention_mask"].bool()):
                out.append(st[m].numpy().astype(np.float32))
        return out


class ColbertIndex:
    """Every token vector of every passage, row -> document, with exact MaxSim."""

    def __init__(self, doc_embs: list[np.ndarray]):
        self.vectors = torch.from_numpy(np.concatenate(doc_embs))
        counts = np.array([len(e) for e in doc_embs])
        self.row_doc = torch.from_numpy(np.repeat(np.arange(len(doc_embs)), counts))
        self.starts = np.concatenate([[0], np.cumsum(counts)])
        self.n_docs = len(doc_embs)

    @torch.inference_mode()
    def maxsim(self, q: np.ndarray) -> torch.Tensor:
        sim = torch.from_numpy(q) @ self.vectors.T  # (q tokens, rows)
        best = torch.full((len(q), self.n_docs), -torch.inf)
        best.scatter_reduce_(1, self.row_doc.expand(len(q), -1), sim, reduce="amax")
        return best.sum(0)

    def exact(self, q: np.ndarray, k: int = K) -> np.ndarray:
        return self.maxsim(q).topk(min(k, self.n_docs)).indices.numpy()

    @torch.inference_mode()
    def rerank(self, q: np.ndarray, docs: np.ndarray, k: int = K) -> np.ndarray:
        qt = torch.from_numpy(q)
        scores = np.empty(len(docs), dtype=np.float32)
        for i, d in enumerate(docs):
            scores[i] = float((qt @ self.vectors[self.starts[d]:self.starts[d + 1]].T).amax(1).sum())
        return docs[np.argsort(-scores, kind="stable")[:k]]


def colbert(corpus: dict, questions: dict, work: Path, split: int, args) -> tuple[dict, dict]:
    from voyager import Index, Space

    enc = ColbertEncoder(args.passage_max_len)
    start, cpu = time.perf_counter(), time.process_time()
    doc_embs = enc.encode(list(corpus.values()), is_query=False)
    encode_s, encode_cpu = time.perf_counter() - start, time.process_time() - cpu
    qs = enc.encode(list(questions.values()), is_query=True)
    index = ColbertIndex(doc_embs)
    start = time.perf_counter()
    np.save(work / "colbert_vectors.npy", index.vectors.numpy())
    np.save(work / "colbert_offsets.npy", index.starts)
    flat_build_s = time.perf_counter() - start
    flat_bytes = (work / "colbert_vectors.npy").stat().st_size + (work / "colbert_offsets.npy").stat().st_size
    exact = np.stack([index.exact(q) for q in qs])
    row: dict = {"method": "colbert", "docs": len(corpus), "encode_docs_per_s": len(corpus) / encode_s,
                 "encode_docs_per_cpu_s": len(corpus) / encode_cpu,
                 "vectors": int(len(index.vectors)), "flat_bytes": flat_bytes, "flat_build_s": flat_build_s}
    lat_q = qs[split:split + args.colbert_latency_queries]
    row["flat"] = {"recall": 1.0, **{f"t{t}": latencies(index.exact, lat_q, t) for t in (1, args.threads)}}
    start = time.perf_counter()
    hnsw = Index(Space.InnerProduct, num_dimensions=COLBERT_DIM, M=12, ef_construction=100)
    hnsw.add_items(index.vectors.numpy())
    hnsw.save(str(work / "colbert.voyager"))
    hnsw_build_s = time.perf_counter() - start
    row_doc = index.row_doc.numpy()

    def approx(q: np.ndarray, ef: int) -> np.ndarray:
        rows, _ = hnsw.query(q, k=ef, num_threads=torch.get_num_threads(), query_ef=max(ef, 16))
        return index.rerank(q, np.unique(row_doc[rows.ravel()]))

    chosen = None
    for ef in EF_GRID:
        if recall([approx(q, ef) for q in qs[:split]], exact[:split]) >= TARGET + TUNE_MARGIN:
            chosen = ef
            break
    row.update(hnsw_bytes=(work / "colbert.voyager").stat().st_size + flat_bytes, hnsw_build_s=hnsw_build_s)
    if chosen is None:
        row["hnsw"] = {"reached": False}
    else:
        row["hnsw"] = {"tokens_per_query_token": chosen,
                       "recall": recall([approx(q, chosen) for q in qs[split:]], exact[split:]),
                       **{f"t{t}": latencies(lambda x: approx(x, chosen), lat_q, t) for t in (1, args.threads)}}
    return row, {"ids": exact, "doc_embs": doc_embs, "queries": qs}


def export_colbert(folder: Path, res: dict, qids: list, docids: list, relevant: dict, split: int) -> None:
    """The ColBERT peer's token vectors, query vectors, exact MaxSim top-10 and judgments, for bench/plaid_peer.py
    (PLAID runs in its own virtualenv: fast-plaid pins another torch)."""
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "doc_vectors.npy", np.concatenate(res["doc_embs"]).astype(np.float16))
    np.save(folder / "doc_lengths.npy", np.array([len(e) for e in res["doc_embs"]]))
    np.save(folder / "query_vectors.npy", np.concatenate(res["queries"]).astype(np.float16))
    np.save(folder / "query_lengths.npy", np.array([len(e) for e in res["queries"]]))
    np.save(folder / "exact_top10.npy", res["ids"])
    index = {d: i for i, d in enumerate(docids)}
    judged = [{str(index[d]): r for d, r in relevant[q].items() if d in index} for q in qids]
    (folder / "meta.json").write_text(json.dumps({"split": split, "k": K, "relevant": judged}), encoding="utf-8")


def plaid_row(args, export: Path, label: str, colbert_row: dict, docids: list, qids: list) -> tuple[dict, dict]:
    """ColBERT's PLAID engine on the ColBERT peer's own token vectors: bench/plaid_peer.py under ``--plaid_python``
    (fast-plaid's virtualenv), in this run; its row shaped like the others (its index in the approximate column)."""
    import subprocess

    out = export / f"plaid-{label}.json"
    subprocess.run([args.plaid_python, str(Path(__file__).with_name("plaid_peer.py")), "--export", str(export),
                    "--only", label, "--threads", str(args.threads), "--nbits", str(args.plaid_nbits),
                    "--json", str(out)], check=True)
    p = json.loads(out.read_text(encoding="utf-8"))[label]
    row = {"method": "colbert-plaid", "approx_name": f"PLAID {args.plaid_nbits}-bit", "docs": p["docs"],
           "vectors": p["vectors"], "encode_docs_per_s": colbert_row["encode_docs_per_s"],
           "encode_docs_per_cpu_s": colbert_row["encode_docs_per_cpu_s"], "hnsw_bytes": p["plaid_bytes"],
           "hnsw_build_s": p["plaid_build_s"], "hnsw": p["plaid"], "plaid_version": p.get("version")}
    return row, {q: [docids[i] for i in ids] for q, ids in zip(qids, p["ranked"])}


def write_shard(path: Path, docs: np.ndarray, first: int = 0, shard: tuple[int, int] = (0, 1)) -> Path:
    """A synthetic encode shard (every document ``views`` vectors; docids from ``d{first}``; ``shard``: its
    index and the set's size) for ``build_index``."""
    from multiview_plugin.encoding.shards import ShardInfo, ShardWriter

    info = ShardInfo(model_name="synthetic", dim=0, views_per_doc=0, dtype="float32", num_items=0, num_vectors=0,
                     shard_index=shard[0], num_shards=shard[1], source="synthetic")
    w = ShardWriter(path, info, multi_vector=True)
    for a in range(0, len(docs), 8192):
        chunk = docs[a:a + 8192]
        w.add([f"d{first + i}" for i in range(a, a + len(chunk))], chunk, np.ones(chunk.shape[:2], dtype=bool))
    w.close()
    return path


def synthetic_shards(name: str, views: int, n_docs: int, n_queries: int, work: Path) -> tuple[list[Path], np.ndarray]:
    """Clustered synthetic 384-d documents written block by block, one shard per block (memory bounded by a
    block, not the set: mvr-k8 at 1M documents is 12 GB of float32), and the queries near their views."""
    from tools.synthetic_vectors import iter_clustered_documents, queries_near, query_picks

    rng, pick_doc, pick_view = query_picks(n_docs, views, n_queries)
    bases = np.empty((n_queries, 384), dtype=np.float32)
    shards, block_docs = [], 65_536
    count = -(-n_docs // block_docs)
    for start, block in iter_clustered_documents(n_docs, views, 384, clusters=1000, seed=0, chunk=block_docs):
        here = (pick_doc >= start) & (pick_doc < start + len(block))
        bases[here] = block[pick_doc[here] - start, pick_view[here]]
        shards.append(write_shard(work / f"syn-{name}-{len(shards):04d}.pkl", block, start, (len(shards), count)))
    return shards, queries_near(bases, rng)


def sweep(grid: tuple, recall_at, margin: float, plateau: bool) -> tuple:
    """Walk ``grid`` (cheapest first), ``recall_at(value)`` the tuning recall there: the first value reaching
    TARGET + ``margin``, reached True. Where none does: ``plateau`` False, the widest value; True (an index that
    scores approximately: PLAID, PQ), the walk stops where the last 3 recalls rose by < 0.001 and takes the cheapest
    value within 0.001 of the best recall. Returns ``(value, reached, tuning recalls)``."""
    tuned = []
    for value in grid:
        tuned.append(recall_at(value))
        if tuned[-1] >= TARGET + margin:
            return value, True, tuned
        if plateau and len(tuned) >= 3 and tuned[-1] - tuned[-3] < 0.001:
            break
    if not plateau:
        return grid[-1], False, tuned
    return grid[next(i for i, r in enumerate(tuned) if r >= max(tuned) - 0.001)], False, tuned


def set_knob(searcher, knob: str, value) -> object:
    """``searcher`` with its approximate search's ``knob`` (``overfetch`` / ``nprobe``) at ``value``."""
    setattr(searcher.store.approximate, knob, value)
    return searcher


def probed_lists(searcher) -> int:
    """The IVF lists the searcher's last search probed (its probe floor for the fetch depth included)."""
    import faiss

    return int(faiss.extract_index_ivf(searcher.store.index).nprobe)


def tune(searcher, knob: str, grid: tuple, q: np.ndarray, exact: np.ndarray, split: int, threads: int) -> dict:
    """The cheapest ``knob`` setting (``overfetch`` / ``nprobe`` of the searcher's approximate search) whose recall
    on the tuning queries ``q[:split]`` reaches TARGET + TUNE_MARGIN, timed on the rest; where none does, the
    widest setting, timed and marked ``reached: False`` (its recall below TARGET said in the table); the recalls of
    the settings tried, in ``tuning_recalls``."""
    value, reached, tuned = sweep(grid, lambda v: recall(set_knob(searcher, knob, v).search_vectors(q[:split], K)[0],
                                                         exact[:split]), TUNE_MARGIN, plateau=False)
    ids, _ = set_knob(searcher, knob, value).search_vectors(q[split:], K)
    return {knob: value, "reached": reached, "tuning_recalls": tuned, "recall": recall(ids, exact[split:]),
            **timed(searcher, q[split:], threads)}


def synthetic_method(name: str, views: int, n_docs: int, n_queries: int, split: int, work: Path,
                     threads: int, exact_timed: int | None = None, ivf: str | None = None) -> dict:
    """One method's vectors as clustered synthetic 384-d vectors at its views per document through the project's
    build_index / MultiVectorSearcher: Flat (exact; timed on the first ``exact_timed`` held-out queries, None:
    all), HNSW32 (``overfetch`` tuned to recall >= 0.99) and, given ``ivf`` (a factory such as ``IVF1024,Flat``),
    an IVF index (``nprobe`` tuned). One index in memory at a time: at 1M documents mvr-k8's is 12 GB."""
    import gc

    from multiview_plugin.errors import ConfigError
    from multiview_plugin.search import MultiVectorSearcher, build_index

    shards, q = synthetic_shards(name, views, n_docs, n_queries, work)
    row: dict = {"method": name, "docs": n_docs, "vectors": n_docs * views}
    exact = None
    for key, factory in (("flat", "Flat"), ("hnsw", "HNSW32"), ("ivf", ivf)):
        if factory is None:
            continue
        index_dir = work / f"syn-{name}-{key}"
        start = time.perf_counter()
        try:
            build_index(shards, index_dir, index_factory=factory, **beam(factory))
        except ConfigError as err:  # e.g. --quick's 500 documents for IVF1024's 1024 lists
            print(f"# synthetic {name} {factory} not built: {err}", flush=True)
            continue
        row.update({f"{key}_bytes": folder_bytes(index_dir), f"{key}_build_s": time.perf_counter() - start})
        searcher = MultiVectorSearcher(index_dir, None)
        if key == "flat":
            exact, _ = searcher.search_vectors(q, K)
            held = q[split:] if exact_timed is None else q[split:split + exact_timed]
            row["flat"] = {"recall": 1.0, "timed_queries": len(held), **timed(searcher, held, threads)}
        elif key == "hnsw":
            row["hnsw"] = tune(searcher, "overfetch", OVERFETCH_GRID, q, exact, split, threads)
        else:
            row["ivf"] = {"factory": factory, **tune(searcher, "nprobe", NPROBE_GRID, q, exact, split, threads),
                          "probed": probed_lists(searcher)}
        del searcher  # before the next build: two 1M-document indexes at once would not fit
        gc.collect()
        shutil.rmtree(index_dir, ignore_errors=True)
    for shard in shards:
        shard.unlink()
    return row


def synthetic_colbert(tokens: int, n_docs: int, n_queries: int, q_tokens: int, threads: int, work: Path) -> dict:
    """The ColBERT peer on synthetic 128-d token vectors (``tokens`` per document; queries: ``q_tokens`` vectors
    near tokens of one document): exact MaxSim only (an HNSW over every token vector does not build in time here)."""
    from tools.synthetic_vectors import clustered_documents

    docs = clustered_documents(n_docs, tokens, COLBERT_DIM, clusters=1000, seed=0)
    rng = np.random.default_rng(1)
    picks = rng.integers(0, n_docs, n_queries)
    qs = []
    for d in picks:
        base = docs[d, rng.integers(0, tokens, q_tokens)]
        noisy = base + 0.5 / np.sqrt(COLBERT_DIM) * rng.standard_normal(base.shape, dtype=np.float32)
        qs.append((noisy / np.linalg.norm(noisy, axis=1, keepdims=True)).astype(np.float32))
    index = ColbertIndex(list(docs))
    del docs
    np.save(work / "syn_colbert.npy", index.vectors.numpy())
    flat_bytes = (work / "syn_colbert.npy").stat().st_size + index.starts.nbytes
    (work / "syn_colbert.npy").unlink()
    return {"method": "colbert", "docs": n_docs, "vectors": int(len(index.vectors)), "flat_bytes": flat_bytes,
            "flat": {"recall": 1.0, **{f"t{t}": latencies(index.exact, qs, t) for t in (1, threads)}}}


def synthetic_index_name(lat: dict, kind: str) -> str:
    """exact, ``HNSW (overfetch 8)``, ``IVF1024,Flat (2 lists probed)``; a setting that never reached the target on
    the tuning queries: ``widest tried, below 0.99``."""
    if kind == "flat":
        return "exact"
    short = "" if lat.get("reached", True) else f", widest tried, below {TARGET}"
    if kind == "hnsw":
        return f"HNSW (overfetch {lat['overfetch']}{short})" if "overfetch" in lat else "HNSW"
    return f"{lat['factory']} ({lat.get('probed', lat['nprobe'])} lists probed{short})"


def synthetic_report(rows: dict) -> list[str]:
    lines = [f"| method | index | vectors/doc | index MiB | build s | recall@{K} | p50 ms 1 thr | p95 ms 1 thr | "
             f"CPU p50 ms 1 thr | p50 ms {ARGS_THREADS} thr | CPU p50 / dpr's | CPU p50 / colbert's | "
             "p50 / colbert's | bytes / colbert's |", "|" + "---|" * 14]
    c = rows.get("colbert", {})
    ran = "flat" in c
    for r in rows.values():
        if "skipped" in r:
            lines.append(f"| {r['method']} | not run: {r['skipped']} |")
            continue
        for kind in ("flat", "hnsw", "ivf"):
            lat = r.get(kind, {})
            if "t1" not in lat:
                if kind in r:
                    lines.append(f"| {r['method']} | {kind.upper()} | not reached |")
                continue
            d = rows["dpr"].get(kind, {})
            dp = f"{lat['t1']['cpu_p50'] / d['t1']['cpu_p50']:.2f}" if "t1" in d else "-"
            cp = (f"{lat['t1']['cpu_p50'] / c['flat']['t1']['cpu_p50']:.4f} | "
                  f"{lat['t1']['p50'] / c['flat']['t1']['p50']:.4f}") if ran else "- | -"
            b = r[f"{kind}_bytes"]
            build = f"{r[f'{kind}_build_s']:.2f}" if f"{kind}_build_s" in r else "-"
            cb = f"{b / c['flat_bytes']:.4f}" if ran else "-"
            lines.append(f"| {r['method']} | {synthetic_index_name(lat, kind)} | {r['vectors'] / r['docs']:.0f} "
                         f"| {b / 2 ** 20:.1f} | {build} | {lat['recall']:.4f} | {lat['t1']['p50']:.3f} | "
                         f"{lat['t1']['p95']:.3f} | {lat['t1']['cpu_p50']:.3f} | "
                         f"{lat[f't{ARGS_THREADS}']['p50']:.3f} | "
                         f"{dp} | {cp} | {cb} |")
    return lines


def run_synthetic(args, views: dict[str, int]) -> None:
    n_q = args.synthetic_queries
    split = n_q // 2
    print(f"# synthetic clustered vectors (tools/synthetic_vectors.py, 1000 clusters): {args.synthetic_docs} "
          f"documents; views/doc ({views}: the SQuAD run's, rounded); 384-d (colbert 128-d, "
          f"{args.colbert_q_tokens} query tokens, exact MaxSim on {args.colbert_latency_queries // 4} queries); "
          f"{n_q} queries, HNSW tuned on "
          f"{split}, recall and latency on the other {n_q - split}"
          + (f" (exact search timed on {args.synthetic_exact_queries} of them)" if args.synthetic_exact_queries
             else ""), flush=True)
    rows: dict = {}
    work = Path(tempfile.mkdtemp(prefix=f"peers-syn-{os.getpid()}-"))
    try:
        for name, v in views.items():
            start = time.perf_counter()
            gb = args.synthetic_docs * v * COLBERT_DIM * 4 / 1e9  # the ColBERT peer's float32 token vectors
            if name == "colbert" and gb > args.synthetic_colbert_max_gb:
                rows[name] = {"method": name, "docs": args.synthetic_docs, "vectors": args.synthetic_docs * v,
                              "skipped": f"{args.synthetic_docs * v:,} token vectors, {gb:.1f} GB of float32 "
                                         f"(over --synthetic_colbert_max_gb {args.synthetic_colbert_max_gb:g})"}
            elif name == "colbert":
                rows[name] = synthetic_colbert(v, args.synthetic_docs, args.colbert_latency_queries // 4,
                                               args.colbert_q_tokens, args.threads, work)
            else:
                rows[name] = synthetic_method(name, v, args.synthetic_docs, n_q, split, work, args.threads,
                                              args.synthetic_exact_queries, args.synthetic_ivf or None)
            print(f"# synthetic {name} done in {time.perf_counter() - start:.0f} s; load {os.getloadavg()}; "
                  + json.dumps(rows[name]), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\n".join(synthetic_report(rows)), flush=True)


# ratios to a missing ColBERT row print as nan
EMPTY_PEER = {"r@1": float("nan"), "flat_bytes": float("nan"), "hnsw_bytes": float("nan"),
              **{k: {"t1": {"p50": float("nan"), "cpu_p50": float("nan")}} for k in ("flat", "hnsw")}}


def index_name(r: dict, kind: str) -> str:
    return "exact" if kind == "flat" else r.get("approx_name", "HNSW")


def fmt_row(r: dict, kind: str) -> str:
    lat = r.get(kind, {})
    if "t1" not in lat:
        return f"| {r['method']} | {kind} | not reached |"
    bytes_ = r["flat_bytes"] if kind == "flat" else r["hnsw_bytes"]
    build = r["flat_build_s"] if kind == "flat" else r["hnsw_build_s"]
    t = lat[f"t{ARGS_THREADS}"]
    return (f"| {r['method']} | {index_name(r, kind)} | {r['vectors'] / r['docs']:.2f} | "
            f"{r['encode_docs_per_s']:.1f} | {r['encode_docs_per_cpu_s']:.1f} | {bytes_ / 2 ** 20:.2f} | "
            f"{build:.2f} | {lat['recall']:.4f} | "
            f"{lat['t1']['p50']:.3f} | {lat['t1']['p95']:.3f} | {lat['t1']['cpu_p50']:.3f} | "
            f"{t['p50']:.3f} | {t['p95']:.3f} | {r['r@1']:.4f} | {r[second(r)]:.4f} |")


def second(r: dict) -> str:
    """The second quality column: SQuAD's answer accuracy @1, or BEIR's nDCG@10."""
    return "answer@1" if "answer@1" in r else "nDCG@10"


ARGS_THREADS = 2


def report(rows: dict) -> list[str]:
    lines = [f"| method | index | vectors/doc | encode docs/s | docs/CPU-s | index MiB | build s | recall@{K} | "
             f"p50 ms 1 thr | p95 ms 1 thr | CPU p50 ms 1 thr | p50 ms {ARGS_THREADS} thr | "
             f"p95 ms {ARGS_THREADS} thr | R@1 | {second(rows['dpr'])} |", "|" + "---|" * 15]
    for r in rows.values():
        for kind in ("flat", "hnsw"):
            if kind in r:
                lines.append(fmt_row(r, kind))
    lines.append("")
    lines.append("Ratios (1 thread p50 wall; bytes on disk; exact = Flat / exact MaxSim, "
                 "HNSW at recall >= 0.99):")
    lines.append("| method | index | p50 / dpr's | p50 / colbert's | CPU p50 / dpr's | CPU p50 / colbert's | "
                 "bytes / dpr's | bytes / colbert's | R@1 - colbert's |")
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for r in rows.values():
        for kind in ("flat", "hnsw"):
            if "t1" not in r.get(kind, {}):
                continue
            d, c = rows["dpr"], rows.get("colbert") or EMPTY_PEER
            p, cp = r[kind]["t1"]["p50"], r[kind]["t1"]["cpu_p50"]
            b = r["flat_bytes" if kind == "flat" else "hnsw_bytes"]
            lines.append(
                f"| {r['method']} | {index_name(r, kind)} | {p / d[kind]['t1']['p50']:.2f} | "
                f"{p / c[kind]['t1']['p50']:.3f} | {cp / d[kind]['t1']['cpu_p50']:.2f} | "
                f"{cp / c[kind]['t1']['cpu_p50']:.3f} | "
                f"{b / d['flat_bytes' if kind == 'flat' else 'hnsw_bytes']:.2f} | "
                f"{b / c['flat_bytes' if kind == 'flat' else 'hnsw_bytes']:.4f} | {r['r@1'] - c['r@1']:+.4f} |")
    return lines


def versus(ours: dict, peer: dict, kind: str) -> tuple[float, float, float]:
    """How many times lower ``ours``'s 1-thread p50 and CPU p50 are than ``peer``'s, and its share of the peer's
    bytes, both searched with index ``kind`` (``flat`` / ``hnsw``)."""
    a, b = ours[kind]["t1"], peer[kind]["t1"]
    return b["p50"] / a["p50"], b["cpu_p50"] / a["cpu_p50"], ours[f"{kind}_bytes"] / peer[f"{kind}_bytes"]


PLATEAU = ", PLAID below the target on its tuning queries: timed at its plateau"


def goals(rows: dict) -> list[str]:
    out = []
    d, m, s = rows["dpr"], rows["mvr-k8"], rows["dcsr-mean"]
    for kind in ("flat", "hnsw"):
        if "t1" in m.get(kind, {}) and "t1" in d.get(kind, {}):
            for what in ("p50", "cpu_p50"):
                ratio = m[kind]["t1"][what] / d[kind]["t1"][what]
                out.append(f"goal mvr k=8 {what} <= 1.2x dpr ({kind}, 1 thread, recall >= {TARGET} of own exact "
                           f"top-{K}: mvr {m[kind]['recall']:.4f}, dpr {d[kind]['recall']:.4f}): {ratio:.2f}x -> "
                           f"{'met' if ratio <= 1.2 else 'NOT met'}")
    g = rows.get("mvr-k8-docgraph", {})
    if "t1" in g.get("hnsw", {}) and "t1" in d.get("hnsw", {}):
        below = "" if g["hnsw"]["reached"] else f", below {TARGET} on its tuning questions: not equal recall"
        for what in ("p50", "cpu_p50"):
            ratio = g["hnsw"]["t1"][what] / d["hnsw"]["t1"][what]
            out.append(f"goal mvr k=8 {what} <= 1.2x dpr (mvr {g['approx_name']} vs dpr HNSW, 1 thread, recall of "
                       f"own exact top-{K}: mvr {g['hnsw']['recall']:.4f}{below}, dpr {d['hnsw']['recall']:.4f}): "
                       f"{ratio:.2f}x -> {'met' if ratio <= 1.2 and g['hnsw']['reached'] else 'NOT met'}")
    if "colbert" not in rows:
        return [*out, "goal dcsr-mean vs colbert: not measured (the colbert row did not finish)"]
    c = rows["colbert"]
    ok_top1 = s["r@1"] >= c["r@1"]
    speed, cpu, bytes_ratio = versus(s, c, "flat")
    out.append(f"goal dcsr-mean vs colbert (exact both): R@1 {s['r@1']:.4f} vs {c['r@1']:.4f} -> "
               f"{'met' if ok_top1 else 'NOT met'}; bytes {bytes_ratio:.4f} of colbert's (goal <= 0.05) -> "
               f"{'met' if bytes_ratio <= 0.05 else 'NOT met'}; p50 {speed:.1f}x lower, CPU p50 {cpu:.1f}x lower "
               f"(goal >= 5x) -> {'met' if min(speed, cpu) >= 5 else 'NOT met'}")
    if "t1" in s.get("hnsw", {}) and "t1" in c.get("hnsw", {}):
        speed, cpu, bytes_ratio = versus(s, c, "hnsw")
        out.append(f"goal dcsr-mean HNSW vs colbert Voyager (recall >= {TARGET}): bytes {bytes_ratio:.4f} -> "
                   f"{'met' if bytes_ratio <= 0.05 else 'NOT met'}; p50 {speed:.1f}x lower, CPU p50 {cpu:.1f}x "
                   f"lower -> {'met' if min(speed, cpu) >= 5 else 'NOT met'}")
    pl = rows.get("colbert-plaid", {})
    if "t1" in s.get("hnsw", {}) and "t1" in pl.get("hnsw", {}):
        out.append(f"goal dcsr-mean HNSW vs colbert {pl['approx_name']} (recall of own exact top-{K}: "
                   f"{s['hnsw']['recall']:.4f} vs {pl['hnsw']['recall']:.4f}"
                   f"{'' if pl['hnsw'].get('reached', True) else PLATEAU}): {plaid_verdict(s, pl)}")
    z = rows.get("dcsr-mean-compressed", {})
    if "t1" in z.get("hnsw", {}) and "t1" in pl.get("hnsw", {}):
        below = "" if z["hnsw"]["reached"] else f", below {TARGET} on its tuning questions: timed at its plateau"
        out.append(f"goal dcsr-mean {z['approx_name']} vs colbert {pl['approx_name']} (recall of own exact top-{K}: "
                   f"{z['hnsw']['recall']:.4f}{below} vs {pl['hnsw']['recall']:.4f}): {plaid_verdict(z, pl)}")
    return out


def plaid_verdict(ours: dict, pl: dict) -> str:
    """The goal's three tests of ``ours``'s approximate index against PLAID's: R@1, <= 1/20 of the bytes, >= 5x
    lower p50."""
    speed, cpu, bytes_ratio = versus(ours, pl, "hnsw")
    return (f"R@1 {ours['r@1']:.4f} vs {pl['r@1']:.4f} -> {'met' if ours['r@1'] >= pl['r@1'] else 'NOT met'}; "
            f"bytes {bytes_ratio:.4f} -> {'met' if bytes_ratio <= 0.05 else 'NOT met'}; p50 {speed:.1f}x lower, "
            f"CPU p50 {cpu:.1f}x lower -> {'met' if min(speed, cpu) >= 5 else 'NOT met'}")


def squad_rows(args) -> dict:
    """The SQuAD-dev part: paragraphs of ``--articles`` against their sampled questions."""
    articles = None
    if args.articles != "all":
        first, last = (int(x) for x in args.articles.split("-"))
        articles = range(first, last + 1)
    corpus, questions, gold, answers, titled = load_squad(args.squad_path, args.questions, articles, 0)
    split = min(args.tune_questions, len(questions) // 2)
    print(f"# SQuAD v1.1 dev, articles {args.articles}: {len(corpus)} passages, {len(questions)} sampled eval "
          f"questions (seed 0); approximate search tuned on the first {split}, recall and latency on the other "
          f"{len(questions) - split} (colbert: latency on "
          f"{min(args.colbert_latency_queries, len(questions) - split)} of them)", flush=True)
    docs = [{"docid": d, "title": titled[d][0], "text": titled[d][1]} for d in corpus]
    return run_corpus("squad", corpus, docs, questions, split, args,
                      lambda ranked: top1(ranked, questions, gold, answers, titled), {q: {gold[q]: 1} for q in gold})


def scifact_rows(args) -> dict:
    """The SciFact part: the whole corpus against the protocol's 200 held-out queries."""
    corpus, questions, qrels = load_scifact(args.beir_dir)
    if args.quick:
        keep = {d for q in qrels for d in qrels[q]} | set(list(corpus)[:300])
        corpus = {d: t for d, t in corpus.items() if d in keep}
    split = len(questions) // 2
    print(f"# BEIR SciFact: {len(corpus)} abstracts, the protocol's {len(questions)} held-out queries; approximate "
          f"search tuned on the first {split}, recall and latency on the other {len(questions) - split}", flush=True)
    docs = [{"docid": d, "text": t} for d, t in corpus.items()]
    return run_corpus("scifact", corpus, docs, questions, split, args, lambda ranked: beir_quality(ranked, qrels),
                      qrels)


def run_corpus(label: str, corpus: dict, docs: list[dict], questions: dict, split: int, args, quality,
               relevant: dict) -> dict:
    """Every method on one corpus: rows by method name, printed as they finish, then the tables and goals."""
    qids, docids = list(questions), list(corpus)
    rows: dict = {}
    work = Path(tempfile.mkdtemp(prefix=f"peers-{label}-{os.getpid()}-"))
    try:
        with (work / "corpus.jsonl").open("w", encoding="utf-8") as f:
            for d in docs:
                f.write(json.dumps(d) + "\n")
        for name in [m for m in [*METHODS, "colbert"] if m in args.methods.split(",")]:
            start = time.perf_counter()
            if name == "colbert":
                row, res = colbert(corpus, questions, work, split, args)
                ranked = {q: [docids[i] for i in ids] for q, ids in zip(qids, res["ids"])}
            else:
                row, res = project_method(name, corpus, questions, work, split, args)
                ranked = {q: list(ids) for q, ids in zip(qids, res["ids"])}
            rows[name] = {**row, **quality(ranked)}
            print(f"# {label} {name} done in {time.perf_counter() - start:.0f} s; load {os.getloadavg()}; "
                  + json.dumps(rows[name]), flush=True)
            for extra, ids in res.get("extra", []):
                rows[extra["method"]] = {**extra, **quality({q: list(d) for q, d in zip(qids, ids)})}
                print(f"# {label} {extra['method']}: " + json.dumps(rows[extra["method"]]), flush=True)
            if name == "colbert" and (args.export_colbert or args.plaid_python):
                export = Path(args.export_colbert or work / "export")
                export_colbert(export / label, res, qids, docids, relevant, split)
            if name == "colbert" and args.plaid_python:
                start = time.perf_counter()
                row, ranked = plaid_row(args, export, label, row, docids, qids)
                rows["colbert-plaid"] = {**row, **quality(ranked)}
                print(f"# {label} colbert-plaid done in {time.perf_counter() - start:.0f} s; load "
                      f"{os.getloadavg()}; " + json.dumps(rows["colbert-plaid"]), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if {"dpr", "dcsr-mean", "mvr-k8"} <= set(rows):  # the tables compare with dpr; a --methods subset prints rows only
        print(f"## {label}")
        print("\n".join(report(rows)))
        print("\n".join(goals(rows)), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    global ARGS_THREADS, TUNE_MARGIN, HNSW_BEAM
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--squad_path", help="SQuAD v1.1 dev (dev-v1.1.json); without it, no SQuAD part")
    parser.add_argument("--beir_dir", help="BEIR SciFact folder; without it, no SciFact part")
    parser.add_argument("--methods", default=",".join([*METHODS, "colbert"]), help="which methods to run")
    parser.add_argument("--export_colbert", help="write the ColBERT peer's vectors here, per corpus, for "
                                                 "bench/plaid_peer.py")
    parser.add_argument("--plaid_python", help="fast-plaid's virtualenv python: run bench/plaid_peer.py on the ColBERT "
                                               "peer's vectors in this run (a colbert-plaid row)")
    parser.add_argument("--plaid_nbits", type=int, default=4)
    parser.add_argument("--compressed", default="",
                        help="also index --compressed_methods' vectors with this compressed Faiss factory (e.g. "
                             "IVF64,PQ48), nprobe tuned; a '<method>-compressed' row beside PLAID's")
    parser.add_argument("--compressed_methods", default="dcsr-mean")
    parser.add_argument("--doc_graph_methods", default="",
                        help="comma-separated methods ranked by max over views (e.g. mvr-k8) also searched "
                             "through a graph over documents: Flat views + --doc_index_factory HNSW32, candidates "
                             "tuned (a "
                             "'<method>-docgraph' row and, for mvr-k8, a goal line against dpr)")
    parser.add_argument("--hnsw_ef_construction", type=int, default=None,
                        help="build every HNSW graph of the project's rows with this beam (default: Faiss's 40)")
    parser.add_argument("--questions", type=int, default=1000, help="sampled SQuAD-dev eval questions")
    parser.add_argument("--tune_questions", type=int, default=200, help="of them, used to tune approximate search")
    parser.add_argument("--colbert_latency_queries", type=int, default=200)
    parser.add_argument("--passage_max_len", type=int, default=192)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--articles", default="32-39",
                        help="SQuAD-dev articles whose paragraphs form the corpus (their questions are the queries); "
                             "'all': every paragraph against the protocol's held-out questions (articles 32-47)")
    parser.add_argument("--quick", action="store_true", help="smoke test: article 32 only, 40 questions")
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--synthetic_docs", type=int, default=5_000,
                        help="synthetic documents per method (0: skip the synthetic part)")
    parser.add_argument("--synthetic_queries", type=int, default=400)
    parser.add_argument("--synthetic_exact_queries", type=int, default=None,
                        help="time exact search on this many of the held-out synthetic queries (default: all; "
                             "at 1M documents one exact query scans GBs)")
    parser.add_argument("--synthetic_ivf", default="",
                        help="also an IVF index of the synthetic vectors, nprobe tuned (a factory, e.g. IVF1024,Flat)")
    parser.add_argument("--synthetic_colbert_max_gb", type=float, default=8.0,
                        help="skip the synthetic ColBERT peer (and say so) when its float32 token vectors exceed this")
    parser.add_argument("--colbert_q_tokens", type=int, default=16, help="synthetic ColBERT query vectors")
    parser.add_argument("--tune_margin", type=float, default=TUNE_MARGIN,
                        help="approximate search: recall the tuning questions must reach above 0.99")
    parser.add_argument("--rows", help="only re-print the SQuAD tables and goal lines from a --json file")
    parser.add_argument("--synthetic_only", action="store_true",
                        help="skip SQuAD; views/doc from --synthetic_views")
    parser.add_argument("--synthetic_views", default="dpr=1,dcsr-mean=6,mvr-k8=8,colbert=155")
    args = parser.parse_args(argv)
    ARGS_THREADS, TUNE_MARGIN, HNSW_BEAM = args.threads, args.tune_margin, args.hnsw_ef_construction
    if args.quick:
        args.articles, args.questions, args.tune_questions, args.colbert_latency_queries = "32-32", 40, 20, 20
        args.synthetic_docs, args.synthetic_queries = min(args.synthetic_docs, 500), 40
    if args.rows:
        every = json.loads(Path(args.rows).read_text(encoding="utf-8"))
        for label, rows in ({"squad": every} if "dpr" in every else every).items():
            print("\n".join([f"## {label}", *report(rows), *goals(rows)]))
        return 0
    if args.synthetic_only:
        ARGS_THREADS = args.threads
        run_synthetic(args, {k: int(v) for k, v in (p.split("=") for p in args.synthetic_views.split(","))})
        return 0
    import faiss

    print(f"# cpu: {cpu_name()}; threads default {args.threads}; faiss {faiss.__version__}; torch "
          f"{torch.__version__}; voyager {voyager_version()}; load at start: {os.getloadavg()}", flush=True)
    every: dict = {}
    if args.squad_path:
        every["squad"] = squad_rows(args)
    if args.beir_dir:
        every["scifact"] = scifact_rows(args)
    if args.json:
        Path(args.json).write_text(json.dumps(every, indent=1) + "\n", encoding="utf-8")
    if args.synthetic_docs and every and {"dpr", "dcsr-mean", "mvr-k8"} <= set(next(iter(every.values()))):
        rows = next(iter(every.values()))
        run_synthetic(args, {name: max(1, round(r["vectors"] / r["docs"])) for name, r in rows.items()
                             if name in (*METHODS, "colbert")})  # not the rows of other indexes (PLAID, compressed)
    print(f"# load at end: {os.getloadavg()}")
    return 0


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def voyager_version() -> str:
    from importlib.metadata import version

    return version("voyager")


if __name__ == "__main__":
    sys.exit(main())
