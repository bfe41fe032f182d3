"""Encode a corpus (or queries) shard with any saved multiview model, Tevatron style.

    python -m multiview_plugin.driver.encode --model_name_or_path runs/mvr --dataset_path corpus.jsonl \
        --dataset_number_of_shards 4 --dataset_shard_index 0 --encode_output_path emb/corpus.0.pkl

    python -m multiview_plugin.driver.encode --model_name_or_path runs/mvr --encode_is_query \
        --dataset_path queries.tsv --encode_output_path emb/queries.pkl

    torchrun --nproc_per_node 4 -m multiview_plugin.driver.encode --model_name_or_path runs/mvr \
        --dataset_path corpus.jsonl --dataset_number_of_shards 4 --encode_output_path emb/corpus.pkl

(the last: 4 processes, one per device, process r writes ``emb/corpus.r.pkl``; see
:mod:`multiview_plugin.encoding.parallel`). Writes Tevatron's ``(ndarray, lookup)`` pickle (multi-vector
models: one row per view, lookup ``docid#j``) plus a ``.json`` sidecar. A finished shard is skipped on rerun
(``--overwrite`` re-encodes it); an interrupted one resumes after its last flushed batch; a file at the output path
that encode did not write is replaced only with ``--overwrite``. Both only when the
run's fingerprint (model weights, dtype, lengths, shard, input file; see ``multiview_plugin.encoding.fingerprint``)
matches the recorded one: otherwise the run stops and names what differs.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from multiview_plugin.cli import cli, parse_dataclasses, setup_logging
from multiview_plugin.encoding.command import (
    check_encode_input,
    encode_here,
    encode_ray,
    refuse_ray_flags,
)
from multiview_plugin.ray_runtime import DEFAULT_ENCODE_TIMEOUT, DEFAULT_MAX_RESTARTS
from multiview_plugin.text_options import (
    OPTION_NAMES,
    PASSAGE_FIELD_SEPARATOR,
    TEXT_GROUP_DESCRIPTION,
    override_field,
)

# torch, transformers' models and the library are imported after the arguments are parsed (``--help`` stays fast);
# what encode does with them is in multiview_plugin.encoding.command

logger = logging.getLogger("multiview_plugin.encode")


@dataclass
class EncodeArguments:
    model_name_or_path: str = field(
        metadata={"help": "A saved multiview model folder (multiview_config.json), or a plain Hugging Face / "
                  "Tevatron checkpoint, encoded as a dpr model with --pooling and --normalize (as Tevatron)."})
    dataset_path: str | None = field(
        default=None,
        metadata={"help": "Corpus jsonl ({docid|_id, title?, text|document_text}) or DPR psgs tsv; with "
                  "--encode_is_query, queries as jsonl ({query_id, query|query_text}, BEIR {_id,text}) or "
                  "qid<TAB>text. .gz accepted."})
    encode_output_path: str | None = field(
        default=None, metadata={"help": "Where to write the shard pickle (sidecar: <path>.json). Required."})
    dataset_name: str = field(default="json", metadata={"help": "'json': local files read directly; otherwise "
                              "a datasets.load_dataset name (hub dataset, or a builder such as 'parquet' over "
                              "--dataset_path), exported once to <encode_output_path>.input.jsonl."})
    dataset_config: str | None = field(default=None, metadata={"help": "Config of a --dataset_name dataset."})
    dataset_cache_dir: str | None = field(default=None, metadata={"help": "Cache folder for --dataset_name."})
    dataset_number_of_shards: int = field(default=1, metadata={"help": "Split the input into this many "
                                          "contiguous shards (like datasets.Dataset.shard)."})
    dataset_shard_index: int = field(default=0, metadata={"help": "Which shard (0-based) this run encodes. Under "
                                     "torchrun (WORLD_SIZE > 1) leave it 0: process r encodes shards r, r+W, ... "
                                     "into <encode_output_path stem>.<shard><suffix>."})
    encode_is_query: bool = field(default=False, metadata={"help": "Encode queries (one vector each)."})
    passage_field_separator: str = field(default=PASSAGE_FIELD_SEPARATOR,
                                         metadata={"help": "Joins a passage's title and text."})
    per_device_eval_batch_size: int = field(default=64, metadata={"help": "Texts per forward pass."})
    fp16: bool = field(default=False, metadata={"help": "Store float16 vectors (and autocast on GPU)."})
    bf16: bool = field(default=False, metadata={"help": "Compute in bfloat16 (weights cast; autocast on GPU); "
                                                "vectors are stored as float32 (numpy has no bfloat16)."})
    dataset_split: str = field(default="train", metadata={"help": "Split to read (local json files: 'train')."})
    attn_implementation: str | None = field(default=None, metadata={"help": "eager, sdpa or flash_attention_2 "
                                            "(default: transformers' choice)."})
    dtype: str | None = field(default=None, metadata={"help": "Load weights in float32, float16 or bfloat16."})
    lora_name_or_path: str | None = field(
        default=None, metadata={"help": "A LoRA adapter (e.g. Tevatron --lora training's output) merged into the "
                                "--model_name_or_path checkpoint before encoding, as Tevatron's encode (needs peft)."})
    output_dir: str | None = field(default=None, metadata={"help": "Unused (Tevatron's encode requires it from "
                                   "TrainingArguments); the output is --encode_output_path."})
    device: str | None = field(default=None, metadata={"help": "cpu, cuda, cuda:1 ... (default: cuda if any)."})
    overwrite: bool = field(default=False, metadata={"help": "Delete the shard, its sidecar and any partial files "
                            "of an interrupted run, then encode afresh. Without it a complete shard is skipped and "
                            "an interrupted one resumes, both only if made by the same model, dtype, lengths, "
                            "shard and input; and an existing file that encode did not write (no sidecar of ours, "
                            "e.g. a plain Tevatron pickle) is refused, not replaced."})
    checkpoint_every: int = field(default=50, metadata={"help": "Flush to disk every N batches (resume point)."})
    # The shared text options (multiview_plugin.text_options): None, "not given", is the saved model's own
    # setting (a plain checkpoint: the shared default); any value given overrides the saved model's.
    pooling: str | None = override_field("pooling")
    normalize: bool | None = override_field("normalize")
    query_max_len: int | None = override_field("query_max_len")
    passage_max_len: int | None = override_field("passage_max_len")
    query_prefix: str | None = override_field("query_prefix")
    passage_prefix: str | None = override_field("passage_prefix")
    pad_to_multiple_of: int | None = override_field("pad_to_multiple_of")
    padding_side: str | None = override_field("padding_side")
    append_eos_token: bool | None = override_field("append_eos_token")
    add_special_tokens: bool | None = override_field("add_special_tokens")
    ray_address: str | None = field(
        default=None, metadata={"help": "Encode every shard of --dataset_number_of_shards on a Ray cluster "
                                "(pip install 'multiview-plugin[ray]'): 'auto' (the cluster this machine joined with "
                                "`ray start`), host:port of its head, ray://host:10001 (Ray Client) or 'local' (a "
                                "one-machine Ray instance). One model per worker; shard i goes to <encode_output_path "
                                "stem>.<i><suffix>, byte-identical to a sequential --dataset_shard_index i run, "
                                "resumable the same way. Paths must be the same on every node (shared file system). "
                                "See docs/scaling.md."})
    # the --ray_* flags below are None when not given (their defaults: RayEncodeOptions), so a flag given
    # without --ray_address is refused even at its default value
    ray_workers: int | None = field(default=None, metadata={"help": "Ray encode workers (models) to start; 0 (the "
                                    "default): as many as the cluster's GPUs (or CPUs, for CPU workers) hold, at "
                                    "most one per shard."})
    ray_cpus_per_worker: float | None = field(default=None, metadata={"help": "CPUs each Ray encode worker reserves "
                                              "(default 1)."})
    ray_gpus_per_worker: float | None = field(default=None, metadata={"help": "GPUs each Ray encode worker "
                                              "reserves (default: 1 when the cluster has GPUs, else 0)."})
    ray_max_restarts: int | None = field(default=None, metadata={
        "help": "A lost Ray worker (process killed, node lost) is restarted and its shard encoded again (resuming) at "
                f"most this many times; then the run stops with one error line naming the shard (default "
                f"{DEFAULT_MAX_RESTARTS})."})
    ray_timeout: float | None = field(default=None, metadata={"help": "Seconds to wait for a shard (or a restarting "
                                      "worker) before the Ray encode stops naming the shard (no node can hold the "
                                      f"worker?) (default {DEFAULT_ENCODE_TIMEOUT:g})."})
    pseudo_queries: str | None = field(
        default=None, metadata={"help": "dce: the documents' pseudo-queries, one view each: jsonl {docid, queries} "
                                "(from multiview_plugin.driver.generate_queries) or docTTTTTquery-style .txt "
                                "predictions aligned by line to the corpus (comma-separate several files)."})

    @classmethod
    def argument_group(cls, name: str) -> tuple[str, str] | None:
        """--help: the shared text options in their own group (the others: the main one)."""
        if name in OPTION_NAMES:
            return ("text options (not given: the saved model's own; given: overrides it)", TEXT_GROUP_DESCRIPTION)
        return None


@cli
def main(argv: Sequence[str] | None = None) -> int:
    def ignored() -> tuple:  # imported only when there are flags left to check against them
        from multiview_plugin.arguments import DataArguments, ModelArguments, MultiViewTrainingArguments

        return ModelArguments, DataArguments, MultiViewTrainingArguments

    (args,) = parse_dataclasses((EncodeArguments,), argv, driver="encode", ignored=ignored,
                                prog="python -m multiview_plugin.driver.encode", description=__doc__)
    setup_logging()
    check_encode_input(args)
    if args.ray_address:
        return encode_ray(args)
    refuse_ray_flags(args)
    encode_here(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
