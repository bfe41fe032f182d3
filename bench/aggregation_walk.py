"""Max aggregation of fetched hits: walked in Python against vectorised in numpy, by batch size.

The searcher's max aggregation (``multiview_plugin.search.aggregators.MaxAggregator``) walks batches of up to
``WALK_MAX_HITS`` fetched hits (queries x depth) in Python's dicts and vectorises larger ones: numpy's fixed cost
per call outweighs a short walk. This bench times both on the same hits for a range of batch shapes, so that the
threshold is read off a measurement: median microseconds per aggregation, and their ratio.

Hits are drawn as a multi-vector search returns them: each row's scores descending, each document's views
(``--views`` per document, 8 as mvr k = 8) scattered through the row, k = 10.

    python bench/aggregation_walk.py > bench/aggregation_walk.log

Benches are not mirrored under tests/.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from multiview_plugin.search.aggregators import (  # noqa: E402
    WALK_MAX_HITS,
    first_hits_walked,
    first_occurrences,
    take_ranked,
)

SHAPES = ((1, 10), (1, 40), (1, 80), (1, 160), (1, 320), (1, 640), (2, 160), (4, 80), (4, 160), (8, 80),
          (8, 256), (32, 128), (128, 128))


def median_us(fn, hits: int, repeats: int = 7) -> float:
    """Median over ``repeats`` of the mean microseconds per call, each over about 20,000 hits' worth of calls."""
    calls = max(20, 20_000 // hits)
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return float(np.median(times))


def hits(rng: np.random.Generator, n_q: int, depth: int, views: int) -> tuple[np.ndarray, np.ndarray]:
    """(scores descending, docs) of ``n_q`` rows: ``depth // views`` documents' views each, in a random order."""
    docs = np.stack([rng.permutation(np.repeat(rng.choice(100_000, max(1, depth // views), replace=False),
                                               views))[:depth] for _ in range(n_q)])
    if docs.shape[1] < depth:  # fewer views than the depth: pad the row with more documents
        docs = np.concatenate([docs, rng.integers(100_000, 200_000, (n_q, depth - docs.shape[1]))], axis=1)
    scores = -np.sort(-rng.standard_normal((n_q, depth)).astype(np.float32), axis=1)
    return scores, docs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--views", type=int, default=8)
    parser.add_argument("--k", type=int, default=10)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"max aggregation, k={args.k}, {args.views} views per document; the searcher walks up to "
          f"{WALK_MAX_HITS} hits")
    for n_q, depth in SHAPES:
        scores, docs = hits(rng, n_q, depth, args.views)
        walked = first_hits_walked(scores, docs, args.k)
        vectorised = take_ranked(first_occurrences(docs), docs, scores, args.k)
        same = all(np.array_equal(a, b) for a, b in zip(walked, vectorised))
        t_walk = median_us(lambda s=scores, d=docs: first_hits_walked(s, d, args.k), n_q * depth)
        t_vec = median_us(lambda s=scores, d=docs: take_ranked(first_occurrences(d), d, s, args.k), n_q * depth)
        print(f"  {n_q:4d} queries x {depth:4d} hits = {n_q * depth:6d}: walked {t_walk:8.1f} us, vectorised "
              f"{t_vec:7.1f} us, walked / vectorised {t_walk / t_vec:5.2f}, same output {same}")


if __name__ == "__main__":
    main()
