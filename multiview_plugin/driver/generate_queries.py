"""Generate pseudo-queries for every document with a local seq2seq doc2query model (DCE's views).

    python -m multiview_plugin.driver.generate_queries --model_name_or_path castorini/doc2query-t5-base-msmarco \
        --corpus_path corpus.jsonl --output queries.0.jsonl --num_queries 10 --top_k 10 \
        [--dataset_number_of_shards 4 --dataset_shard_index 0]

Writes jsonl ``{"docid", "queries": [...]}`` in corpus order. Sampling is top-k (k = 10, as docTTTTTquery)
with a seed derived from ``--seed`` and the batch's position, so a run is reproducible and a resumed run
writes what an uninterrupted one would have (keep ``--batch_size``). Lines go to ``<output>.partial``, flushed
after every batch and synced to disk every ``--checkpoint_every`` batches; a rerun resumes after the last complete
batch, and the file is renamed to ``<output>`` only when the shard is complete. Before each batch is appended,
the marker records what the partial file must then hold: its size and SHA-256 so far, and the batch's lines about
to be written; a rerun resumes ``<output>.partial`` only when every byte of it is so described (a marker copied
beside someone's ``.partial`` does not describe it: refused, and never removed, even with ``--overwrite``).

A marker ``<output>.json`` records that this tool writes ``<output>`` and with which settings (model, corpus
identity, sampling, lengths, batch size, shard). A rerun skips a complete output, or resumes ``<output>.partial``,
only when the marker is there and its settings are the same; ``--overwrite`` regenerates one of ours. An
``<output>`` or ``<output>.partial`` without the marker (a user's file, or one written before the marker
existed), or an output changed since it was written, is never replaced: one line says so.
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
