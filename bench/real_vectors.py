"""Real MiniLM vectors for the ANN benches: dcsr-mean sentence views, zero-shot (untrained all-MiniLM-L6-v2).

Each passage's sentences (pysbd) are mean-pooled spans of one whole-passage encoding (``--dcsr_sentence_pooling
mean``; queries: mean pooling; both L2-normalised, as MiniLM was trained). Writes passage shards (with
sidecars, so indexes record the model) and a query shard::

    python bench/real_vectors.py squad   --out /tmp/real/squad     # 2,067 SQuAD dev paragraphs, 10,570 questions
    python bench/real_vectors.py scifact --out /tmp/real/scifact --max_passages 1000   # SciFact abstracts

``--method dpr`` (one mean-pooled vector per passage) or ``--method mvr-k8`` (8 segment views per passage) encode
with bench/peers.py's settings of those methods instead (its ``METHODS``: the quickstart's, untrained)::

    python bench/real_vectors.py squad --method mvr-k8 --passage_max_len 192 --out /tmp/real/squad-mvr-k8

The vectors are not committed (``bench/calibration.py`` and ``bench/qdrant.py`` read them from ``--out``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.encoding.shards import ShardInfo, ShardWriter
from multiview_plugin.registry import get_encoder_class

SQUAD = "/work/shared/data/squad/dev-v1.1.json"
SCIFACT = "/work/shared/data/beir/scifact"


def load(name: str, max_queries: int) -> tuple[list[str], list[str], list[str]]:
    if name == "squad":
        data = json.load(open(SQUAD, encoding="utf-8"))["data"]
        paragraphs = [p for article in data for p in article["paragraphs"]]
        texts = [p["context"] for p in paragraphs]
        queries = [qa["question"] for p in paragraphs for qa in p["qas"]]
    else:
        rows = [json.loads(line) for line in open(f"{SCIFACT}/corpus.jsonl", encoding="utf-8")]
        texts = [(r.get("title", "") + ". " + r["text"]).strip() for r in rows]
        queries = [json.loads(line)["text"] for line in open(f"{SCIFACT}/queries.jsonl", encoding="utf-8")]
    return [f"p{i}" for i in range(len(texts))], texts, queries[:max_queries]


def build_model(method: str, passage_max_len: int):
    """The untrained encoder: dcsr-mean as the module docstring says, or bench/peers.py's dpr / mvr-k8."""
    if method == "dcsr-mean":
        return get_encoder_class("dcsr").build(
            ModelArguments(model_name_or_path="sentence-transformers/all-MiniLM-L6-v2", model_name="dcsr",
                           pooling="mean", normalize=True, dcsr_sentence_pooling="mean"),
            DataArguments(passage_max_len=passage_max_len, query_max_len=64, pad_to_multiple_of=None)).eval()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from peers import BACKBONE, METHODS

    from multiview_plugin.cli import parse_dataclasses

    name, flags = METHODS[method]
    margs, dargs = parse_dataclasses((ModelArguments, DataArguments), [
        "--model_name", name, "--model_name_or_path", BACKBONE, "--query_max_len", "64",
        "--passage_max_len", str(passage_max_len), *flags])
    torch.manual_seed(0)
    return get_encoder_class(name).build(margs, dargs).eval()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dataset", choices=["squad", "scifact"])
    p.add_argument("--out", required=True)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--passage_max_len", type=int, default=256)
    p.add_argument("--max_queries", type=int, default=2000)
    p.add_argument("--max_passages", type=int, help="Only the first N passages (encoding time on 2 CPU cores)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--method", default="dcsr-mean", choices=["dcsr-mean", "dpr", "mvr-k8"],
                   help="dcsr-mean: the settings above; dpr, mvr-k8: bench/peers.py's")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model = build_model(args.method, args.passage_max_len)
    docids, texts, queries = load(args.dataset, args.max_queries)
    if args.max_passages:
        docids, texts = docids[:args.max_passages], texts[:args.max_passages]
    start = time.perf_counter()
    registered = args.method.split("-")[0]  # dcsr, dpr, mvr
    info = ShardInfo(model_name=registered, dim=0, views_per_doc=0, dtype="float32", num_items=0, num_vectors=0,
                     shard_index=0, num_shards=1)
    writer = ShardWriter(out / "corpus.0.pkl", info, multi_vector=True)
    formatter = model.formatter
    views = 0
    with torch.inference_mode():
        for i in range(0, len(texts), args.batch_size):
            batch = model.passage_inputs(formatter, docids[i:i + args.batch_size], texts[i:i + args.batch_size])
            reps, mask = model.encode_passage(batch)
            reps = torch.nn.functional.normalize(reps.float(), dim=-1)
            writer.add(docids[i:i + args.batch_size], reps.numpy(), mask.numpy().astype(bool))
            views += int(mask.sum())
    writer.close()
    passages_s = time.perf_counter() - start
    q = model.encode_queries(queries, 128)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    qinfo = ShardInfo(model_name=registered, dim=0, views_per_doc=0, dtype="float32", num_items=0, num_vectors=0,
                      is_query=True)
    qw = ShardWriter(out / "queries.pkl", qinfo, multi_vector=False)
    qw.add([f"q{i}" for i in range(len(q))], q)
    qw.close()
    print(json.dumps({"dataset": args.dataset, "passages": len(texts), "views": views, "queries": len(q),
                      "dim": int(q.shape[1]), "passage_encode_s": round(passages_s, 1),
                      "total_s": round(time.perf_counter() - start, 1)}))


if __name__ == "__main__":
    main()
