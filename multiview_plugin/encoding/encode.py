"""The encoding loop: one shard of a corpus (or of a query file) through a model into a Tevatron-format shard.

:func:`encode_to_shard` reads the shard's contiguous slice of the input (:func:`shard_bounds`), encodes it in
batches and writes ``(vectors, lookup)`` with its ``.json`` sidecar through
:class:`~multiview_plugin.encoding.shards.ShardWriter`, checkpointing every ``checkpoint_every`` batches so an
interrupted run resumes; a finished shard is skipped. Both only when the run's fingerprint
(:mod:`multiview_plugin.encoding.fingerprint`) matches the recorded one. The encode driver
(:mod:`multiview_plugin.driver.encode`) parses the flags, loads the model and calls it once per shard.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from multiview_plugin.data.readers import iter_corpus, load_queries
from multiview_plugin.encoding.fingerprint import encode_fingerprint
from multiview_plugin.encoding.shards import (
    ShardFormatError,
    ShardInfo,
    ShardWriter,
    check_fingerprint,
    partial_paths,
    read_info,
    remove_shard,
    shard_is_complete,
    sidecar_path,
    written_by_encode,
)
from multiview_plugin.encoding.view_info import VIEW_INFO_KEY, VIEW_INFO_VERSION, ViewRowWriter
from multiview_plugin.errors import ConfigError, MultiViewError
from multiview_plugin.modeling.base import MultiViewEncoder
from multiview_plugin.paths import OutputLock, refuse_output_over_input
from multiview_plugin.text_options import PASSAGE_FIELD_SEPARATOR

logger = logging.getLogger("multiview_plugin.encode")


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


# A record's text is cut at this many characters per token of the max length before tokenizing: WordPiece
# turns a word of more than 100 characters into one [UNK], so the first max_len tokens lie within
# 100 x max_len characters of text unless it holds long runs of spaces; a 512 MiB line then costs its
# read, not gigabytes of tokenizer memory (or a tokenizer abort).
CHARS_PER_TOKEN = 100


def text_limit(max_len: int) -> int:
    """Characters of a record's text read for a model of ``max_len`` tokens (:data:`CHARS_PER_TOKEN`)."""
    return CHARS_PER_TOKEN * max(1, int(max_len))


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
    separator: str = PASSAGE_FIELD_SEPARATOR,
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
        return _encode_to_shard(model, path, output, is_query=is_query, num_shards=num_shards,
                                shard_index=shard_index, batch_size=batch_size, fp16=fp16, separator=separator,
                                overwrite=overwrite, checkpoint_every=checkpoint_every,
                                pseudo_queries=pseudo_queries, model_path=model_path)


def _encode_to_shard(model: MultiViewEncoder, path: str, output: Path, *, is_query: bool, num_shards: int,
                     shard_index: int, batch_size: int, fp16: bool, separator: str, overwrite: bool,
                     checkpoint_every: int, pseudo_queries: str | None, model_path: str | None) -> ShardInfo:
    """:func:`encode_to_shard`'s work, under its output lock: skip a finished shard, else (re)start it, encode its
    remaining items batch by batch, and close it."""
    dtype = "float16" if fp16 else "float32"
    fingerprint = encode_fingerprint(model, path, is_query=is_query, num_shards=num_shards, shard_index=shard_index,
                                     dtype=dtype, separator=separator, pseudo_queries=pseudo_queries)
    finished = _finished_shard(output, fingerprint, overwrite)
    if finished is not None:
        return finished
    start, end, views = _shard_range(path, is_query, separator, num_shards, shard_index, pseudo_queries)
    info = ShardInfo(model_name=model.config.model_name, dim=0, views_per_doc=0,
                     dtype=dtype, num_items=0, num_vectors=0, is_query=is_query, shard_index=shard_index,
                     num_shards=num_shards, source=str(path), fingerprint=fingerprint,
                     model_path=str(Path(model_path).resolve()) if model_path else None)
    if not is_query:
        # searchers read the score scale from here (HasAns' softmax temperature defaults to the model's)
        info.extra["temperature"] = float(model.temperature)
        # what each vector is, for explanations (view_info); DCSR's sentence spans go to <shard>.views.npy
        info.extra[VIEW_INFO_KEY] = describe_shard_views(model, path, separator, pseudo_queries)
    run = _ShardRun(model, path, output, info, views, start, end)
    run.encode(separator, batch_size, checkpoint_every, fp16)
    return run.finish()


def _finished_shard(output: Path, fingerprint: dict, overwrite: bool) -> ShardInfo | None:
    """A complete shard made with the same fingerprint: its info (the shard is skipped); None when it is to be
    encoded (``overwrite`` removes it and every partial file first)."""
    refuse_foreign_output(output, overwrite)
    if overwrite:
        remove_shard(output)
    elif shard_is_complete(output):
        info = read_info(output)
        check_fingerprint(output, info.fingerprint, fingerprint, "skip the finished shard")
        for leftover in partial_paths(output):  # a kill after the sidecar, before the clean-up
            leftover.unlink(missing_ok=True)
        logger.info("%s is complete (%d items); skipping (--overwrite to redo)", output, info.num_items)
        return info
    return None


def _shard_range(path: str, is_query: bool, separator: str, num_shards: int, shard_index: int,
                 pseudo_queries: str | None) -> tuple[int, int, dict[str, Any] | None]:
    """The shard's items (``start``, ``end``) in the file, and dce's pseudo-queries of its documents (else None)."""
    if pseudo_queries and not is_query:
        from multiview_plugin.data.pseudo_queries import load_pseudo_queries

        # the counting pass keeps the docids: aligned .txt query files need the corpus order
        docids = [d for d, _ in iter_items(path, is_query, separator)]
        start, end = shard_bounds(len(docids), num_shards, shard_index)
        return start, end, load_pseudo_queries(pseudo_queries, docids, keep=set(docids[start:end]))
    start, end = shard_bounds(count_items(path, is_query, separator), num_shards, shard_index)
    return start, end, None


class _ShardRun:
    """One shard being encoded: its writers (vectors, view rows), the formatter's running counts (a resumed run's
    included) and the items read only in part (longer than the text limit)."""

    def __init__(self, model: MultiViewEncoder, path: str, output: Path, info: ShardInfo,
                 views: dict[str, Any] | None, start: int, end: int):
        self.model, self.path, self.output, self.views = model, path, output, views
        self.is_query, self.shard_index, self.start, self.end = info.is_query, info.shard_index, start, end
        self.writer = ShardWriter(output, info, multi_vector=not info.is_query and not model.is_single_vector())
        self.row_writer = (ViewRowWriter(output, self.writer.rows_done)
                           if info.extra.get(VIEW_INFO_KEY, {}).get("rows") else None)
        self.device = next(model.parameters()).device
        self.formatter = model.formatter
        self.stats = getattr(self.formatter, "stats", None) if not info.is_query else None  # e.g. dcsr's sentences
        self.resumed_stats = dict(self.writer.info.extra.get("sentences", {}))
        self.max_len = int(model.config.query_max_len if info.is_query else model.config.passage_max_len)
        self.limit, self.cut = text_limit(self.max_len), []

    def stats_total(self) -> dict[str, int]:
        """Counts of a resumed run plus this one's."""
        return {k: int(self.resumed_stats.get(k, 0) + self.stats.get(k, 0)) for k in {*self.resumed_stats,
                                                                                       *self.stats}}

    def batches(self, items: Iterator[tuple[str, str]], skip: int, batch_size: int
                ) -> Iterator[list[tuple[str, str]]]:
        """The shard's items not yet written, ``batch_size`` at a time, each text cut at the limit."""
        batch: list[tuple[str, str]] = []
        for i, item in enumerate(items):
            if i < skip:
                continue
            if i >= self.end:
                break
            if not item[1].strip():
                raise MultiViewError(f"{self.path}: {'query' if self.is_query else 'document'} {item[0]!r} has "
                                     "empty text")
            if len(item[1]) > self.limit:
                self.cut.append(item[0])
                item = (item[0], item[1][:self.limit])
            batch.append(item)
            if len(batch) == batch_size:
                yield batch
                batch = []
        if batch:
            yield batch

    def encode(self, separator: str, batch_size: int, checkpoint_every: int, fp16: bool) -> None:
        """Encode and write the remaining items, checkpointing every ``checkpoint_every`` batches."""
        items = iter_items(self.path, self.is_query, separator)
        skip = self.start + self.writer.docs_done
        progress = tqdm(total=self.end - self.start, initial=self.writer.docs_done,
                        unit="query" if self.is_query else "doc", desc=f"encode {self.output.name}",
                        dynamic_ncols=True)
        autocast = (torch.autocast("cuda", dtype=torch.float16) if fp16 and self.device.type == "cuda"
                    else nullcontext())
        with torch.inference_mode(), autocast:
            for n, batch in enumerate(self.batches(items, skip, batch_size), start=1):
                self._add(batch)
                progress.update(len(batch))
                if n % checkpoint_every == 0:
                    if self.stats is not None:
                        self.writer.info.extra["sentences"] = self.stats_total()
                    if self.row_writer is not None:
                        self.row_writer.flush()  # before the shard's resume point, so resumed rows are never missing
                    self.writer.checkpoint()
        progress.close()

    def _add(self, batch: list[tuple[str, str]]) -> None:
        model, formatter = self.model, self.formatter
        ids = [i for i, _ in batch]
        texts = [t for _, t in batch]
        if self.is_query:
            reps = model.encode_query(_to(formatter.queries(texts), self.device))
            self.writer.add(ids, reps.float().cpu().numpy())
            return
        reps, mask = encode_passage_batch(model, formatter, ids, texts, self.views, self.device)
        self.writer.add(ids, reps.float().cpu().numpy(), mask.cpu().numpy())
        if self.row_writer is not None:
            self.row_writer.add(model.view_rows(formatter, texts, mask.cpu().numpy()))

    def finish(self) -> ShardInfo:
        """Check every item was written, record the counts, close the view rows and then the shard (its sidecar)."""
        path, output, writer, is_query = self.path, self.output, self.writer, self.is_query
        if self.cut:
            logger.info("%s: %d %s longer than %d characters (%d per token of --%s_max_len %d) read only that far "
                        "before tokenizing, e.g. %r", path, len(self.cut), "queries" if is_query else "documents",
                        self.limit, CHARS_PER_TOKEN, "query" if is_query else "passage", self.max_len, self.cut[0])
        if writer.docs_done != self.end - self.start:
            raise MultiViewError(f"{path}: expected {self.end - self.start} items in shard {self.shard_index}, "
                                 f"got {writer.docs_done}; did the file change while encoding?")
        if self.stats is not None:
            writer.info.extra["sentences"] = totals = self.stats_total()
            if totals.get("sentences"):
                logger.info("%s: %d sentences in %d passages (%.2f per passage); %d dropped past --passage_max_len "
                            "(%.2f%%), %d kept but cut short", output, totals["sentences"], totals.get("passages", 0),
                            totals["sentences"] / max(1, totals.get("passages", 0)), totals.get("dropped", 0),
                            100.0 * totals.get("dropped", 0) / totals["sentences"], totals.get("truncated", 0))
        if self.row_writer is not None:
            self.row_writer.close(writer.rows_done)  # before the sidecar: a complete shard has its view rows
        info = writer.close()
        logger.info("wrote %s: %d %s, %d vectors of dim %d (views per item: %s)", output, info.num_items,
                    "queries" if is_query else "documents", info.num_vectors, info.dim, info.views_per_doc)
        return info


def encode_passage_batch(model: MultiViewEncoder, formatter: Any, ids: list[str], texts: list[str],
                         views: dict[str, Any] | None, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """One batch of documents → the vectors that go into the index (B, K, D) and their view mask (B, K)."""
    inputs = model.passage_inputs(formatter, ids, texts, views)
    return model.index_views(*model.encode_passage(_to(inputs, device)))


def encode_documents(model: MultiViewEncoder, texts: Sequence[str], ids: Sequence[str] | None = None,
                     batch_size: int = 64, pseudo_queries: dict[str, list[str]] | None = None) -> list[np.ndarray]:
    """Document texts → one float32 ``(views, dim)`` array each: the vectors an index holds for it (a
    single-vector model: one row). ``ids`` name the documents where the method needs them (dce's
    ``pseudo_queries``, ``{docid: [query, ...]}``); default ``"0"``, ``"1"``, ...."""
    texts = list(texts)
    ids = [str(i) for i in range(len(texts))] if ids is None else [str(i) for i in ids]
    if len(ids) != len(texts):
        raise ConfigError(f"{len(texts)} documents but {len(ids)} ids")
    device, formatter = next(model.parameters()).device, model.formatter
    out: list[np.ndarray] = []
    with torch.inference_mode():
        for i in range(0, len(texts), batch_size):
            reps, mask = encode_passage_batch(model, formatter, ids[i:i + batch_size], texts[i:i + batch_size],
                                              pseudo_queries, device)
            reps, mask = reps.float().cpu().numpy(), mask.cpu().numpy().astype(bool)
            out.extend(r[m] for r, m in zip(reps, mask))
    return out


def refuse_foreign_output(output: Path, overwrite: bool) -> None:
    """An existing ``output`` that encode did not write (:func:`~multiview_plugin.encoding.shards.written_by_encode`)
    is replaced only with ``overwrite``; a folder never. A file at the sidecar's path (``<output>.json``) that is not
    a shard sidecar (:func:`~multiview_plugin.encoding.shards.read_info`: ShardInfo's fields) is someone's: never
    replaced nor removed, even with ``overwrite``."""
    side = sidecar_path(output)
    if os.path.lexists(side):
        if not side.is_file():
            raise ConfigError(f"{side} (the sidecar path of --encode_output_path {output}) exists and is not a file; "
                              "choose another output path")
        try:
            read_info(output)
        except ShardFormatError:
            raise ConfigError(f"{side} (the sidecar path of --encode_output_path {output}) is not a shard sidecar "
                              "written by encode: refusing to replace it, even with --overwrite; move it away or "
                              "choose another output path") from None
    if not os.path.lexists(output):
        return
    if not output.is_file():
        raise ConfigError(f"--encode_output_path {output} exists and is not a file; choose another output path")
    if written_by_encode(output):
        return
    if not overwrite:
        raise ConfigError(f"--encode_output_path {output} exists and was not written by encode (no sidecar "
                          f"{sidecar_path(output).name}, no resume state): refusing to replace it; pass --overwrite "
                          "to replace it, or choose another output path")
    logger.warning("--overwrite: replacing %s, which encode did not write", output)


def describe_shard_views(model: MultiViewEncoder, path: str | Path, separator: str,
                         pseudo_queries: str | None) -> dict:
    """The model's view description plus where the texts are (absolute paths, for explanations)."""
    config = {k: v for k, v in model.config.to_dict().items() if k != "format_version"}
    views = {"version": VIEW_INFO_VERSION, **model.describe_views(), "corpus": os.path.abspath(path),
             "separator": separator, "model": config}
    if views["kind"] == "pseudo_query" and pseudo_queries:
        views["pseudo_queries"] = ",".join(os.path.abspath(p) for p in pseudo_queries.split(","))
    return views


def _to(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device) for k, v in batch.items()}
