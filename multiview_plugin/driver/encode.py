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
(``--overwrite`` re-encodes it); an interrupted one resumes after its last flushed batch. Both only when the
run's fingerprint (model weights, dtype, lengths, shard, input file; see ``multiview_plugin.encoding.fingerprint``)
matches the recorded one: otherwise the run stops and names what differs.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch
from tqdm import tqdm

from multiview_plugin.data.readers import iter_corpus, load_queries
from multiview_plugin.driver.common import cli, parse_dataclasses, setup_logging
from multiview_plugin.encoding.fingerprint import encode_fingerprint
from multiview_plugin.encoding.parallel import launch_rank, rank_shards, shard_output_path
from multiview_plugin.encoding.shards import (
    ShardInfo,
    ShardWriter,
    check_fingerprint,
    partial_paths,
    read_info,
    remove_shard,
    shard_is_complete,
    sidecar_path,
)
from multiview_plugin.encoding.view_info import VIEW_INFO_KEY, VIEW_INFO_VERSION, ViewRowWriter
from multiview_plugin.errors import ConfigError, MultiViewError
from multiview_plugin.modeling.base import MultiViewEncoder, load_encoder
from multiview_plugin.paths import OutputLock, refuse_output_over_input

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
    query_max_len: int | None = field(default=None, metadata={"help": "Override the model's query length."})
    passage_max_len: int | None = field(default=None, metadata={"help": "Override the model's passage length."})
    passage_field_separator: str = field(default=" ", metadata={"help": "Joins a passage's title and text."})
    per_device_eval_batch_size: int = field(default=64, metadata={"help": "Texts per forward pass."})
    fp16: bool = field(default=False, metadata={"help": "Store float16 vectors (and autocast on GPU)."})
    bf16: bool = field(default=False, metadata={"help": "Compute in bfloat16 (weights cast; autocast on GPU); "
                                                "vectors are stored as float32 (numpy has no bfloat16)."})
    dataset_split: str = field(default="train", metadata={"help": "Split to read (local json files: 'train')."})
    # None below: the saved model's own setting (a plain checkpoint: Tevatron's default, shown in brackets)
    pooling: str | None = field(default=None, metadata={"help": "Pooling (cls, first, mean, avg, average, last, "
                                "eos): the model's [cls]."})
    normalize: bool = field(default=False, metadata={"help": "L2-normalise vectors (unset: the model's [False])."})
    query_prefix: str | None = field(default=None, metadata={"help": "Prepended to queries: the model's ['']."})
    passage_prefix: str | None = field(default=None, metadata={"help": "Prepended to passages: the model's ['']."})
    padding_side: str | None = field(default=None, metadata={"help": "dpr: 'right' or 'left': the model's [right]."})
    append_eos_token: bool = field(default=False, metadata={"help": "dpr: end texts with eos (unset: the model's "
                                   "[False])."})
    add_special_tokens: bool = field(default=True, metadata={"help": "dpr: the tokenizer's special tokens; "
                                     "--no_add_special_tokens drops them (unset: the model's [True])."})
    pad_to_multiple_of: int | None = field(default=None, metadata={"help": "Pad lengths to a multiple: the "
                                           "model's [16 on GPU, none on CPU]."})
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
                            "shard and input."})
    checkpoint_every: int = field(default=50, metadata={"help": "Flush to disk every N batches (resume point)."})
    pseudo_queries: str | None = field(
        default=None, metadata={"help": "dce: the documents' pseudo-queries, one view each: jsonl {docid, queries} "
                                "(from multiview_plugin.driver.generate_queries) or docTTTTTquery-style .txt "
                                "predictions aligned by line to the corpus (comma-separate several files)."})


def shard_bounds(total: int, num_shards: int, index: int) -> tuple[int, int]:
    """[start, end) of contiguous shard ``index`` of ``total`` items (datasets' contiguous sharding)."""
    if num_shards < 1 or not 0 <= index < num_shards:
        raise ConfigError(f"--dataset_shard_index {index} is not in [0, --dataset_number_of_shards {num_shards})")
    div, mod = divmod(total, num_shards)
    start = div * index + min(index, mod)
    return start, start + div + (1 if index < mod else 0)


def iter_items(path: str, is_query: bool, separator: str) -> Iterator[tuple[str, str]]:
    if is_query:
        yield from load_queries(path).items()
    else:
        yield from iter_corpus(path, separator)


def count_items(path: str, is_query: bool, separator: str) -> int:
    return sum(1 for _ in iter_items(path, is_query, separator))


def encode_to_shard(
    model: MultiViewEncoder,
    path: str,
    output: str | Path,
    *,
    is_query: bool = False,
    num_shards: int = 1,
    shard_index: int = 0,
    batch_size: int = 64,
    fp16: bool = False,
    separator: str = " ",
    overwrite: bool = False,
    checkpoint_every: int = 50,
    pseudo_queries: str | None = None,
    model_path: str | None = None,
) -> ShardInfo:
    """Encode one shard of ``path`` into ``output``; returns its sidecar info.

    ``output`` may not be one of the inputs, and only one process may write it at a time (``<output>.lock``,
    :class:`~multiview_plugin.paths.OutputLock`). Skips a complete shard and resumes an interrupted one, each
    only when made with the same fingerprint (else :class:`~multiview_plugin.encoding.shards.ShardFormatError`
    names the difference); ``overwrite`` deletes the shard and every partial file first.
    """
    output = Path(output)
    refuse_output_over_input(
        {"--encode_output_path": output, "its sidecar": sidecar_path(output), "its view rows": f"{output}.views.npy"},
        {"--dataset_path": path, "--pseudo_queries": (pseudo_queries or "").split(",")})
    with OutputLock(output):  # one writer per shard: a second encode of the same path is refused while this runs
        dtype = "float16" if fp16 else "float32"
        fingerprint = encode_fingerprint(model, path, is_query=is_query, num_shards=num_shards, shard_index=shard_index,
                                         dtype=dtype, separator=separator, pseudo_queries=pseudo_queries)
        if overwrite:
            remove_shard(output)
        elif shard_is_complete(output):
            info = read_info(output)
            check_fingerprint(output, info.fingerprint, fingerprint, "skip the finished shard")
            for leftover in partial_paths(output):  # a kill after the sidecar, before the clean-up
                leftover.unlink(missing_ok=True)
            logger.info("%s is complete (%d items); skipping (--overwrite to redo)", output, info.num_items)
            return info
        views = None
        if pseudo_queries and not is_query:
            from multiview_plugin.data.pseudo_queries import load_pseudo_queries

            # the counting pass keeps the docids: aligned .txt query files need the corpus order
            docids = [d for d, _ in iter_items(path, is_query, separator)]
            start, end = shard_bounds(len(docids), num_shards, shard_index)
            views = load_pseudo_queries(pseudo_queries, docids, keep=set(docids[start:end]))
        else:
            start, end = shard_bounds(count_items(path, is_query, separator), num_shards, shard_index)
        multi = not is_query and not model.is_single_vector()
        info = ShardInfo(model_name=model.config.model_name, dim=0, views_per_doc=0,
                         dtype=dtype, num_items=0, num_vectors=0, is_query=is_query, shard_index=shard_index,
                         num_shards=num_shards, source=str(path), fingerprint=fingerprint,
                         model_path=str(Path(model_path).resolve()) if model_path else None)
        if not is_query:
            # searchers read the score scale from here (HasAns' softmax temperature defaults to the model's)
            info.extra["temperature"] = float(model.temperature)
            # what each vector is, for explanations (view_info); DCSR's sentence spans go to <shard>.views.npy
            info.extra[VIEW_INFO_KEY] = describe_shard_views(model, path, separator, pseudo_queries)
        writer = ShardWriter(output, info, multi_vector=multi)
        row_writer = ViewRowWriter(output, writer.rows_done) if info.extra.get(VIEW_INFO_KEY, {}).get("rows") else None
        device = next(model.parameters()).device
        formatter = model.formatter
        stats = getattr(formatter, "stats", None) if not is_query else None  # e.g. dcsr's sentence counts
        resumed_stats = dict(writer.info.extra.get("sentences", {}))

        def stats_total() -> dict[str, int]:  # counts of a resumed run plus this one's
            return {k: int(resumed_stats.get(k, 0) + stats.get(k, 0)) for k in {*resumed_stats, *stats}}
        items = iter_items(path, is_query, separator)
        skip = start + writer.docs_done
        progress = tqdm(total=end - start, initial=writer.docs_done, unit="query" if is_query else "doc",
                        desc=f"encode {output.name}", dynamic_ncols=True)
        autocast = torch.autocast("cuda", dtype=torch.float16) if fp16 and device.type == "cuda" else nullcontext()

        def batches() -> Iterator[list[tuple[str, str]]]:
            batch: list[tuple[str, str]] = []
            for i, item in enumerate(items):
                if i < skip:
                    continue
                if i >= end:
                    break
                if not item[1].strip():
                    raise MultiViewError(f"{path}: {'query' if is_query else 'document'} {item[0]!r} has empty text")
                batch.append(item)
                if len(batch) == batch_size:
                    yield batch
                    batch = []
            if batch:
                yield batch

        with torch.inference_mode(), autocast:
            for n, batch in enumerate(batches(), start=1):
                ids = [i for i, _ in batch]
                texts = [t for _, t in batch]
                if is_query:
                    reps = model.encode_query(_to(formatter.queries(texts), device))
                    writer.add(ids, reps.float().cpu().numpy())
                else:
                    inputs = model.passage_inputs(formatter, ids, texts, views)
                    reps, mask = model.index_views(*model.encode_passage(_to(inputs, device)))
                    writer.add(ids, reps.float().cpu().numpy(), mask.cpu().numpy())
                    if row_writer is not None:
                        row_writer.add(model.view_rows(formatter, texts, mask.cpu().numpy()))
                progress.update(len(batch))
                if n % checkpoint_every == 0:
                    if stats is not None:
                        writer.info.extra["sentences"] = stats_total()
                    if row_writer is not None:
                        row_writer.flush()  # before the shard's resume point, so resumed rows are never missing
                    writer.checkpoint()
        progress.close()
        if writer.docs_done != end - start:
            raise MultiViewError(f"{path}: expected {end - start} items in shard {shard_index}, got "
                                 f"{writer.docs_done}; did the file change while encoding?")
        if stats is not None:
            writer.info.extra["sentences"] = totals = stats_total()
            if totals.get("sentences"):
                logger.info("%s: %d sentences in %d passages (%.2f per passage); %d dropped past --passage_max_len "
                            "(%.2f%%), %d kept but cut short", output, totals["sentences"], totals.get("passages", 0),
                            totals["sentences"] / max(1, totals.get("passages", 0)), totals.get("dropped", 0),
                            100.0 * totals.get("dropped", 0) / totals["sentences"], totals.get("truncated", 0))
        if row_writer is not None:
            row_writer.close(writer.rows_done)  # before the sidecar: a complete shard has its view rows
        info = writer.close()
        logger.info("wrote %s: %d %s, %d vectors of dim %d (views per item: %s)", output, info.num_items,
                    "queries" if is_query else "documents", info.num_vectors, info.dim, info.views_per_doc)
        return info


def describe_shard_views(model: MultiViewEncoder, path: str | Path, separator: str,
                         pseudo_queries: str | None) -> dict:
    """The model's view description plus where the texts are (absolute paths, for explanations)."""
    config = {k: v for k, v in asdict(model.config).items() if k != "format_version"}
    views = {"version": VIEW_INFO_VERSION, **model.describe_views(), "corpus": os.path.abspath(path),
             "separator": separator, "model": config}
    if views["kind"] == "pseudo_query" and pseudo_queries:
        views["pseudo_queries"] = ",".join(os.path.abspath(p) for p in pseudo_queries.split(","))
    return views


def _to(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device) for k, v in batch.items()}


# Flags that override the saved model's config (and configure a plain checkpoint loaded as dpr).
CONFIG_OVERRIDES = ("pooling", "normalize", "query_prefix", "passage_prefix", "padding_side", "append_eos_token",
                    "add_special_tokens", "pad_to_multiple_of", "query_max_len", "passage_max_len")


def load_model(args: EncodeArguments) -> MultiViewEncoder:
    """The model to encode with: a saved multiview model (flags override its config) or a plain checkpoint as dpr."""
    from multiview_plugin.modeling.base import backbone_options

    unset = {f.name: f.default for f in fields(EncodeArguments)}  # None, or a bool flag's Tevatron default
    overrides = {name: getattr(args, name) for name in CONFIG_OVERRIDES if getattr(args, name) != unset[name]}
    model = load_encoder(args.model_name_or_path, checkpoint_options=overrides, **backbone_options(args))
    for name, value in overrides.items():
        if getattr(model.config, name) != value:
            logger.info("--%s %s overrides the model's %r", name, value, getattr(model.config, name))
            setattr(model.config, name, value)
    type(model).validate_config(model.config)
    if args.lora_name_or_path:
        merge_lora(model, args.lora_name_or_path)
    return model


def merge_lora(model: MultiViewEncoder, adapter: str) -> None:
    """Merge a peft LoRA adapter into the model's (tied) encoder, as Tevatron's ``DenseModel.load`` does.
    ``adapter``: a peft adapter folder or hub id, or one of our LoRA-trained folders (its ``lora_adapter/``)."""
    from multiview_plugin.modeling.lora import OPTION, adapter_folder, require_peft

    peft = require_peft()
    if OPTION in model.config.options:
        raise ConfigError("--lora_name_or_path: this model was trained with --lora and its folder already holds "
                          "the merged weights: encode it without --lora_name_or_path")
    if model.passage_encoder is not None:
        raise ConfigError("--lora_name_or_path: the model has untied encoders; merge an adapter into each first")
    adapted = peft.PeftModel.from_pretrained(model.query_encoder, adapter_folder(adapter))
    model.query_encoder = adapted.merge_and_unload()
    logger.info("merged the LoRA adapter %s", adapter)


@cli
def main(argv: Sequence[str] | None = None) -> int:
    from multiview_plugin.arguments import DataArguments, ModelArguments, MultiViewTrainingArguments

    (args,) = parse_dataclasses((EncodeArguments,), argv, driver="encode",
                                ignored=(ModelArguments, DataArguments, MultiViewTrainingArguments))
    setup_logging()
    if not args.encode_output_path:
        raise ConfigError("--encode_output_path is required")
    if args.dataset_name != "json":
        from multiview_plugin.data.hub import export_dataset

        args.dataset_path = str(export_dataset(args.dataset_name, args.dataset_config, args.dataset_path,
                                               args.dataset_split, args.dataset_cache_dir,
                                               f"{args.encode_output_path}.input.jsonl"))
    elif not args.dataset_path:
        raise ConfigError("--dataset_path is required with --dataset_name json")
    elif args.dataset_split != "train":
        raise ConfigError(f"--dataset_split {args.dataset_split}: local json files have only the 'train' split")
    if args.fp16 and args.bf16:
        raise ConfigError("--fp16 and --bf16 exclude each other")
    model = load_model(args)
    launch = launch_rank()
    if launch.parallel:
        if args.dataset_shard_index:
            raise ConfigError("under torchrun each process picks its shards: drop --dataset_shard_index")
        if args.device is None and torch.cuda.is_available():
            args.device = f"cuda:{launch.local_rank % torch.cuda.device_count()}"
        jobs = [(i, shard_output_path(args.encode_output_path, i))
                for i in rank_shards(args.dataset_number_of_shards, launch)]
        logger.info("process %d of %d encodes shards %s", launch.rank, launch.world_size, [i for i, _ in jobs])
    else:
        jobs = [(args.dataset_shard_index, args.encode_output_path)]
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model.to(device).eval()
    if args.bf16:
        model.to(torch.bfloat16)
    for shard_index, output in jobs:
        encode_to_shard(model, args.dataset_path, output, is_query=args.encode_is_query,
                        num_shards=args.dataset_number_of_shards, shard_index=shard_index,
                        batch_size=args.per_device_eval_batch_size, fp16=args.fp16,
                        separator=args.passage_field_separator, overwrite=args.overwrite,
                        checkpoint_every=args.checkpoint_every, pseudo_queries=args.pseudo_queries,
                        model_path=args.model_name_or_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
