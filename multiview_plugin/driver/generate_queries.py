"""Generate pseudo-queries for every document with a local seq2seq doc2query model (DCE's views).

    python -m multiview_plugin.driver.generate_queries --model_name_or_path castorini/doc2query-t5-base-msmarco \
        --corpus_path corpus.jsonl --output queries.0.jsonl --num_queries 10 --top_k 10 \
        [--dataset_number_of_shards 4 --dataset_shard_index 0]

What it writes, how a run resumes and what it never replaces: :mod:`multiview_plugin.encoding.doc2query`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from multiview_plugin.cli import cli, parse_dataclasses, setup_logging
from multiview_plugin.encoding.doc2query import GenerateArguments, generate_queries


@cli
def main(argv: Sequence[str] | None = None) -> int:
    (args,) = parse_dataclasses((GenerateArguments,), argv, prog="python -m multiview_plugin.driver.generate_queries",
                                description=__doc__)
    setup_logging()
    generate_queries(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
