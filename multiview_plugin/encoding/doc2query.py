"""Generating pseudo-queries for every document with a local seq2seq doc2query model (DCE's views): the
resumable, sharded generation loop behind ``python -m multiview_plugin.driver.generate_queries``.

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

import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

from tqdm import tqdm

from multiview_plugin.atomic import atomic_open
from multiview_plugin.backbones import resolve_backbone
from multiview_plugin.data.pseudo_queries import format_query_record
from multiview_plugin.data.readers import iter_corpus
from multiview_plugin.encoding.fingerprint import describe_differences, file_identity
from multiview_plugin.errors import ConfigError
from multiview_plugin.paths import OutputLock, refuse_output_over_input
from multiview_plugin.text_options import PASSAGE_FIELD_SEPARATOR

logger = logging.getLogger("multiview_plugin.generate_queries")


@dataclass
class GenerateArguments:
    model_name_or_path: str = field(metadata={"help": "Local seq2seq doc2query checkpoint (T5 family, any "
                                              "transformers AutoModelForSeq2SeqLM)."})
    corpus_path: str = field(metadata={"help": "Corpus jsonl ({docid, title?, text}) or DPR psgs tsv."})
    output: str = field(metadata={"help": "Output jsonl of {docid, queries} (one shard)."})
    num_queries: int = field(default=10, metadata={"help": "Queries sampled per document (DCE: 10)."})
    top_k: int = field(default=10, metadata={"help": "Top-k sampling: sample from the k likeliest tokens."})
    max_query_length: int = field(default=64, metadata={"help": "Maximum generated tokens per query."})
    passage_max_len: int = field(default=512, metadata={"help": "Document tokens given to the generator."})
    passage_field_separator: str = field(default=PASSAGE_FIELD_SEPARATOR,
                                         metadata={"help": "Joins a document's title and text."})
    batch_size: int = field(default=16, metadata={"help": "Documents per generate() call."})
    seed: int = field(default=42, metadata={"help": "Sampling seed (with the batch position)."})
    dataset_number_of_shards: int = field(default=1, metadata={"help": "Split the corpus into this many contiguous "
                                          "shards (like the encode driver)."})
    dataset_shard_index: int = field(default=0, metadata={"help": "Which shard this run generates."})
    checkpoint_every: int = field(default=10, metadata={"help": "Sync the partial output to disk (fsync) every N "
                                  "batches; every batch is flushed and recorded in the marker (the resume point)."})
    device: str | None = field(default=None, metadata={"help": "cpu, cuda ... (default: cuda if available)."})
    fp16: bool = field(default=False, metadata={"help": "Generate in float16 on GPU."})
    overwrite: bool = field(default=False, metadata={"help": "Regenerate --output when it is a shard this tool "
                            "wrote (its <output>.json marker) with other settings, or complete; a file this tool "
                            "did not write is never replaced."})


MARKER_TOOL = "multiview_plugin.driver.generate_queries"  # the tool named in markers (kept: older markers)
# settings that decide the generated lines: a rerun resumes or skips only when they are the same
SETTINGS = ("num_queries", "top_k", "max_query_length", "passage_max_len", "passage_field_separator", "batch_size",
            "seed", "dataset_number_of_shards", "dataset_shard_index", "fp16")


def marker_path(output: Path) -> Path:
    """``<output>.json``: the marker saying this tool writes ``output`` (and with which settings)."""
    return output.with_name(output.name + ".json")


def run_settings(args: GenerateArguments) -> dict:
    model = args.model_name_or_path
    return {"model": os.path.abspath(model) if os.path.exists(model) else model,
            "corpus": file_identity(args.corpus_path), **{k: getattr(args, k) for k in SETTINGS}}


MARKER_VERSION = 2
_EMPTY_SHA256 = hashlib.sha256().hexdigest()
# the marker's fields and what each must be (a marker failing these is a one-line error, not a traceback)
_MARKER_FIELDS = {"complete": (bool, "true/false"), "output": ((str, type(None)), "a string or null"),
                  "settings": (dict, "an object"), "partial": ((dict, type(None)), "an object or null")}
_PARTIAL_FIELDS = {"bytes": (int, "a non-negative integer"), "sha256": (str, "a SHA-256 hex digest"),
                   "pending": (str, "a string")}


def _read_marker(marker: Path, output: Path) -> dict | None:
    if not os.path.lexists(marker):
        return None
    try:
        record = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        record = None
    if not isinstance(record, dict) or record.get("written_by") != MARKER_TOOL:
        raise ConfigError(f"{marker} exists and was not written by generate_queries: refusing to replace it; "
                          f"choose another --output than {output}")
    checks = [(name, record.get(name), *rule) for name, rule in _MARKER_FIELDS.items()]
    if isinstance(record.get("partial"), dict):
        checks += [(f"partial.{name}", record["partial"].get(name), *rule) for name, rule in _PARTIAL_FIELDS.items()]
    for name, value, kinds, what in checks:
        if not isinstance(value, kinds) or (isinstance(value, bool) and kinds is not bool) or (
                name == "partial.bytes" and value < 0):
            raise ConfigError(f"{marker}: field {name!r}: expected {what}, got {value!r} (edited, or not written by "
                              f"generate_queries?); move it away or choose another --output than {output}")
    return record


def _write_marker(marker: Path, settings: dict, output: str | None, partial: dict | None = None) -> None:
    """``output``: the complete output's identity (None while generating); ``partial``: what ``<output>.partial``
    must hold (:func:`_partial_record`)."""
    record = {"written_by": MARKER_TOOL, "format_version": MARKER_VERSION, "complete": output is not None,
              "output": output, "settings": settings,
              "partial": partial if partial is not None else _partial_record(0, _EMPTY_SHA256, "")}
    with atomic_open(marker, fsync=True) as f:
        f.write(json.dumps(record, indent=2) + "\n")


def _partial_record(size: int, sha256: str, pending: str) -> dict:
    """The partial file holds ``size`` bytes of SHA-256 ``sha256``, then possibly a prefix of ``pending`` (the
    batch being appended when the marker was written)."""
    return {"bytes": size, "sha256": sha256, "pending": pending}


def verified_partial(partial: Path, record: dict) -> int | None:
    """How many bytes of ``partial`` the marker ``record`` describes as complete lines of this tool's (its
    recorded prefix, plus the pending batch when all of it is there; a torn pending batch is not counted); None
    when the file is not the one the marker describes (or the marker describes none)."""
    state = record.get("partial")
    if not isinstance(state, dict):
        return None
    size, pending = state["bytes"], state["pending"].encode("utf-8")
    digest = hashlib.sha256()
    with partial.open("rb") as f:
        left = size
        while left:
            chunk = f.read(min(left, 1 << 20))
            if not chunk:
                return None  # shorter than recorded
            digest.update(chunk)
            left -= len(chunk)
        tail = f.read(len(pending) + 1)
    if digest.hexdigest() != state["sha256"] or not pending.startswith(tail):
        return None
    return size + (len(pending) if tail == pending else 0)


def claim_output(output: Path, partial: Path, settings: dict, overwrite: bool) -> str:
    """What to do with ``output``: ``"skip"`` (complete, same settings), ``"resume"`` (our ``.partial``, same
    settings) or ``"fresh"`` (the marker is then written); refuses files this tool did not write, and ours made
    with other settings unless ``overwrite``."""
    marker = marker_path(output)
    record = _read_marker(marker, output)
    if os.path.lexists(output) and not output.is_file():
        raise ConfigError(f"--output {output} exists and is not a file; choose another --output")
    for path in (output, partial):
        if record is None and os.path.lexists(path):
            raise ConfigError(f"{path} exists and was not written by generate_queries (no marker {marker.name}; "
                              "or by a version before the marker): refusing to replace or resume it; move or "
                              "delete it, or choose another --output")
    if record is None:
        _write_marker(marker, settings, None)
        return "fresh"
    recorded = record.get("output")
    if record.get("complete") and not output.is_file() and partial.is_file() and file_identity(partial) == recorded:
        os.replace(partial, output)  # killed after the marker said complete, before the rename
    if partial.is_file() and not output.is_file() and verified_partial(partial, record) is None:
        raise ConfigError(f"{partial} is not the partial output its marker {marker.name} describes (its size or "
                          "content differ from what was recorded: not written by this run, or edited): refusing to "
                          "resume, replace or remove it, even with --overwrite; move it away or choose another "
                          "--output")
    if output.is_file() and not (record.get("complete") and file_identity(output) == recorded):
        raise ConfigError(f"--output {output} has changed since generate_queries wrote it (or was not written by "
                          f"this run: {marker.name} does not match it): refusing to replace it; move or delete it, "
                          "or choose another --output")
    differences = describe_differences(record.get("settings") or {}, settings)
    if overwrite or (differences and not output.is_file() and not partial.is_file()):
        output.unlink(missing_ok=True)
        partial.unlink(missing_ok=True)
        _write_marker(marker, settings, None)
        return "fresh"
    if differences:
        raise ConfigError(f"{output if output.is_file() else partial} was generated with a different {differences}; "
                          "pass --overwrite to regenerate it (or choose another --output)")
    if output.is_file():
        return "skip"
    if not partial.is_file():
        _write_marker(marker, settings, None)
        return "fresh"
    return "resume"


def _resume_point(partial: Path, keep: int | None = None) -> tuple[int, int, Any]:
    """Cut ``partial`` to its first ``keep`` bytes (default: its complete lines; a torn last line is cut off) and
    return (lines, bytes, running SHA-256 object) of what stays."""
    if not partial.is_file():
        return 0, 0, hashlib.sha256()
    lines, digest, size = 0, hashlib.sha256(), partial.stat().st_size
    with partial.open("rb") as f:
        if keep is None:
            data = f.read()
            keep = data.rfind(b"\n") + 1
            f.seek(0)
        left = keep
        while left:
            chunk = f.read(min(left, 1 << 20))
            digest.update(chunk)
            lines += chunk.count(b"\n")
            left -= len(chunk)
    if keep != size:
        with partial.open("r+b") as f:
            f.truncate(keep)
    return lines, keep, digest


def _append(out, text: str) -> None:
    """Append one batch's lines (a function of its own: tests tear it)."""
    out.write(text)


def generate_queries(args: GenerateArguments) -> Path:
    """Generate one shard (see the module docstring); returns the output path. One writer per output
    (``<output>.lock``): a second run of the same output is refused in one line while the first runs."""
    with OutputLock(Path(args.output)):
        return _generate_queries(args)


def _generate_queries(args: GenerateArguments) -> Path:
    """:func:`generate_queries`' work, under its output lock."""
    import torch  # here, as the rest: the driver's --help reads GenerateArguments only
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from multiview_plugin.encoding.encode import shard_bounds
    from multiview_plugin.modeling.persistence import from_pretrained

    if args.num_queries < 1 or args.top_k < 1 or args.batch_size < 1:
        raise ConfigError("--num_queries, --top_k and --batch_size must be >= 1")
    output = Path(args.output)
    partial = output.with_name(output.name + ".partial")
    refuse_output_over_input({"--output": output, "--output's .partial": partial,
                              "--output's marker": marker_path(output)}, {"--corpus_path": args.corpus_path})
    output.parent.mkdir(parents=True, exist_ok=True)
    settings = run_settings(args)
    if claim_output(output, partial, settings, args.overwrite) == "skip":
        logger.info("%s is complete; skipping (--overwrite to regenerate)", output)
        return output
    total = sum(1 for _ in iter_corpus(args.corpus_path, args.passage_field_separator))
    start, end = shard_bounds(total, args.dataset_number_of_shards, args.dataset_shard_index)
    record = _read_marker(marker_path(output), output) or {}
    done, size, digest = _resume_point(partial, verified_partial(partial, record) if partial.is_file() else None)
    if done:
        logger.info("resuming %s after %d documents", output, done)
    path = resolve_backbone(args.model_name_or_path)
    tokenizer = from_pretrained(AutoTokenizer, path)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model = from_pretrained(AutoModelForSeq2SeqLM, path).to(device).eval()
    if args.fp16 and device.type == "cuda":
        model = model.half()
    docs = islice(iter_corpus(args.corpus_path, args.passage_field_separator), start + done, end)
    progress = tqdm(total=end - start, initial=done, unit="doc", desc=f"generate {output.name}")
    with partial.open("a", encoding="utf-8") as out, torch.inference_mode():
        batch_no = done // args.batch_size
        while True:
            batch = list(islice(docs, args.batch_size))
            if not batch:
                break
            enc = tokenizer([t for _, t in batch], max_length=args.passage_max_len, truncation=True, padding=True,
                            return_tensors="pt").to(device)
            # the seed depends only on (seed, shard, batch position): reruns and resumed runs sample the same
            torch.manual_seed(args.seed * 1_000_003 + args.dataset_shard_index * 7919 + batch_no)
            generated = model.generate(**enc, do_sample=True, top_k=args.top_k, max_new_tokens=args.max_query_length,
                                       num_return_sequences=args.num_queries)
            texts = tokenizer.batch_decode(generated, skip_special_tokens=True)
            lines = "".join(format_query_record(docid, [q.strip() for q in
                                                        texts[i * args.num_queries:(i + 1) * args.num_queries]])
                            for i, (docid, _) in enumerate(batch))
            out.flush()  # what the marker describes is on disk before it says so
            _write_marker(marker_path(output), settings, None, _partial_record(size, digest.hexdigest(), lines))
            _append(out, lines)
            data = lines.encode("utf-8")
            size += len(data)
            digest.update(data)
            batch_no += 1
            progress.update(len(batch))
            if batch_no % args.checkpoint_every == 0:
                out.flush()
                os.fsync(out.fileno())
        out.flush()
        os.fsync(out.fileno())
    progress.close()
    written = _resume_point(partial)[0]
    if written != end - start:
        raise ConfigError(f"{partial}: expected {end - start} documents, found {written}; did the corpus change?")
    _write_marker(marker_path(output), settings, file_identity(partial))  # then the rename: see claim_output
    os.replace(partial, output)
    logger.info("wrote %s: %d documents x %d queries", output, written, args.num_queries)
    return output
