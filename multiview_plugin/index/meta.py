"""An index folder's ``multiview.json`` (:class:`IndexMeta`: dim, counts, views, aggregation, model, the
files' identities) and the records of what the index was built from (the input corpus, the passage shards)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path

from multiview_plugin.encoding.fingerprint import file_identity, sampled_identity
from multiview_plugin.encoding.shard_sets import check_shard_set
from multiview_plugin.encoding.shards import ShardFormatError, read_info
from multiview_plugin.encoding.view_info import VIEW_INFO_KEY, merge_descriptions
from multiview_plugin.errors import ConfigError
from multiview_plugin.index.folder import META_FILE

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
# Default aggregation per model: DCSR ranks passages by HasAns (its paper's eq. 2).
DEFAULT_AGGREGATION = {"dcsr": "hasans"}
DEFAULT_INDEX_FACTORY = "Flat"  # exact inner-product search: build_index, driver.index --index_factory, the API
# --hnsw_ef_construction: the beam an HNSW graph is built with (Faiss's default is 40); construction time grows
# about linearly with it, so a typo of 10**6 would build for days
MAX_EF_CONSTRUCTION = 4096
BACKENDS = ("faiss", "qdrant")  # multiview.json "backend": each a SearchBackend's kind (search/_backend.py)


def check_index_file(folder: str | os.PathLike, meta: IndexMeta, name: str) -> None:
    """Refuse a file of the index folder that is not the one the index was built with (replaced by another of the
    same shape, or edited): its size and sampled SHA-256 must equal what ``multiview.json`` records. Folders
    built before the record are not checked."""
    recorded = (meta.files or {}).get(name)
    path = Path(folder) / name
    if recorded is None or not path.is_file():
        return
    now = sampled_identity(path)
    if now != recorded:
        raise ShardFormatError(f"{path}: not the file this index was built with ({META_FILE} records {recorded}, "
                               f"this file is {now}): it was replaced or edited since; rebuild the index")


@dataclass
class IndexMeta:
    dim: int
    num_docs: int
    num_vectors: int
    max_views: int
    mean_views: float
    views_per_doc: int | str
    aggregation: str = "max"
    model_name: str = ""
    index_factory: str = DEFAULT_INDEX_FACTORY
    metric: str = "inner_product"
    shards: list[str] = field(default_factory=list)
    # model facts searchers use: "temperature" (HasAns' default softmax scale), "sentences" (dcsr counts)
    extra: dict = field(default_factory=dict)
    format_version: int = FORMAT_VERSION
    view_ids: bool | None = None  # docid file lines are docid#j (None in older folders: inferred from counts)
    # the shards' model (encoding/shard_sets.model_identity): query vectors must come from the same one
    model_fingerprint: dict | None = None
    doc_index_factory: str | None = None  # the doc_index file's factory, when there is one
    backend: str = "faiss"  # "qdrant": the vectors live in a Qdrant collection (search/_qdrant.py)
    qdrant: dict | None = None  # backend "qdrant": where the collection lives (search/_qdrant.QdrantSettings)
    # search settings chosen at build time by search/calibrate.py (searchers use them unless told otherwise)
    search_defaults: dict | None = None
    calibration: dict | None = None  # how search_defaults were chosen: target, measured recall, operating points
    # the on-disk copy of the views searchers re-score from: {"file", "dtype" (float16/float32), "rows", "dim"}
    rescore_store: dict | None = None
    # what each file of the folder must be: {name: size and sampled SHA-256 (encoding/fingerprint.sampled_identity)},
    # checked at every load (check_index_file); None in older folders
    files: dict | None = None

    @property
    def multi_vector(self) -> bool:
        if self.view_ids is not None:
            return self.view_ids
        return self.max_views > 1 or self.views_per_doc == "variable"

    @classmethod
    def load(cls, folder: str | os.PathLike) -> IndexMeta:
        """Read ``multiview.json``; anything malformed (bad JSON, unknown or missing fields, wrong types,
        negative counts, a newer format) is a one-line error naming the file and field."""
        path = Path(folder) / META_FILE
        if not path.is_file():
            raise ConfigError(f"{folder} is not a multiview index: {META_FILE} is missing")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as err:
            raise ShardFormatError(f"{path}: not valid JSON ({err})") from None
        if not isinstance(data, dict):
            raise ShardFormatError(f"{path}: expected a JSON object, got {type(data).__name__}")
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ShardFormatError(f"{path}: unknown field {unknown[0]!r} (written by a newer version, or edited?)")
        missing = sorted(f.name for f in fields(cls) if f.name not in data and f.default is MISSING
                         and f.default_factory is MISSING)
        if missing:
            raise ShardFormatError(f"{path}: field {missing[0]!r} is missing")
        for name, value in data.items():
            kinds = _META_TYPES.get(name)
            if kinds is not None and (not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds)):
                raise ShardFormatError(f"{path}: field {name!r}: expected {_META_KIND_NAMES[name]}, got {value!r}")
            if name in _META_COUNTS and value < (1 if name == "dim" else 0):
                least = "positive" if name == "dim" else "non-negative"
                raise ShardFormatError(f"{path}: field {name!r}: expected a {least} number, got {value!r}")
        if isinstance(data.get("views_per_doc"), str) and data["views_per_doc"] != "variable":
            raise ShardFormatError(f"{path}: field 'views_per_doc': expected a number or 'variable', got "
                                   f"{data['views_per_doc']!r}")
        if data.get("backend", "faiss") not in BACKENDS:
            raise ShardFormatError(f"{path}: field 'backend': expected {' or '.join(map(repr, BACKENDS))}, got "
                                   f"{data['backend']!r}")
        if data.get("rescore_store") is not None:
            _check_rescore_record(path, data["rescore_store"])
        if data.get("format_version", FORMAT_VERSION) > FORMAT_VERSION:
            raise ShardFormatError(f"{path}: format_version {data['format_version']} is newer than this version "
                                   f"reads ({FORMAT_VERSION}); upgrade multiview_plugin")
        return cls(**data)


_NONE = type(None)
_META_TYPES: dict[str, tuple[type, ...]] = {
    "dim": (int,), "num_docs": (int,), "num_vectors": (int,), "max_views": (int,), "mean_views": (int, float),
    "views_per_doc": (int, str), "aggregation": (str,), "model_name": (str,), "index_factory": (str,),
    "metric": (str,), "shards": (list,), "extra": (dict,), "format_version": (int,), "view_ids": (bool, _NONE),
    "model_fingerprint": (dict, _NONE), "doc_index_factory": (str, _NONE), "backend": (str,), "qdrant": (dict, _NONE),
    "search_defaults": (dict, _NONE), "calibration": (dict, _NONE), "rescore_store": (dict, _NONE),
    "files": (dict, _NONE)}
_META_KIND_NAMES = {name: " or ".join("null" if t is _NONE else {"int": "an integer", "float": "a number",
                                                                  "str": "a string", "list": "a list",
                                                                  "dict": "an object", "bool": "true/false"}[t.__name__]
                                      for t in kinds) for name, kinds in _META_TYPES.items()}
_META_COUNTS = ("dim", "num_docs", "num_vectors", "max_views", "mean_views")


def _check_rescore_record(path: Path, record: dict) -> None:
    """``rescore_store`` names a file in the folder, a float dtype and non-negative counts (one-line errors)."""
    expected = {"file": "a file name in the index folder", "dtype": "'float16' or 'float32'",
                "rows": "a non-negative integer", "dim": "a positive integer"}
    for key, what in expected.items():
        value = record.get(key)
        ok = {"file": isinstance(value, str) and value not in ("", ".", "..") and Path(value).name == value,
              "dtype": value in ("float16", "float32"),
              "rows": isinstance(value, int) and not isinstance(value, bool) and value >= 0,
              "dim": isinstance(value, int) and not isinstance(value, bool) and value >= 1}[key]
        if not ok:
            raise ShardFormatError(f"{path}: field 'rescore_store.{key}': expected {what}, got {value!r}")


def merge_extra(infos: list) -> dict:
    """Shard sidecar facts for the index: the model temperature (when all shards agree), summed counts."""
    extras = [i.extra for i in infos if i is not None and i.extra]
    out: dict = {}
    temps = {e.get("temperature") for e in extras} - {None}
    if len(temps) == 1:
        out["temperature"] = temps.pop()
    sentence_counts = [e["sentences"] for e in extras if "sentences" in e]
    if sentence_counts:
        out["sentences"] = {k: sum(c.get(k, 0) for c in sentence_counts) for k in sentence_counts[0]}
    views = merge_descriptions([i.extra.get(VIEW_INFO_KEY) if i is not None else None for i in infos])
    if views is not None:
        out[VIEW_INFO_KEY] = views
    corpus = input_record(infos)
    if corpus is not None:
        out[INPUT_KEY] = corpus
    return out


INPUT_KEY = "input"  # multiview.json extra: the corpus the shards were encoded from (see input_record)


def input_record(infos: list) -> dict | None:
    """What the shards' fingerprints record of their corpus, when they all agree: ``{"identity"`` (size and
    SHA-256 of its ends, :func:`~multiview_plugin.encoding.fingerprint.file_identity`), ``"separator"``
    (``--passage_field_separator``), ``"source"`` (its path when encoded)``}``; None when unknown."""
    records = {(i.fingerprint.get("input"), i.fingerprint.get("passage_field_separator"), i.source)
               for i in infos if i is not None and i.fingerprint and i.fingerprint.get("input")}
    if len({r[:2] for r in records}) != 1:
        return None
    identity, separator, source = sorted(records, key=str)[0]
    return {"identity": identity, "separator": separator, "source": source}


def recorded_input(meta: IndexMeta) -> dict | None:
    """The corpus the index was encoded from: recorded in ``multiview.json`` (indexes built since that field),
    else read from the fingerprints of its shards' sidecars when they are still where they were."""
    if meta.extra.get(INPUT_KEY):
        return meta.extra[INPUT_KEY]
    if not meta.shards or not all(Path(p).is_file() for p in meta.shards):
        return None
    try:
        return input_record([read_info(p) for p in meta.shards])
    except ShardFormatError:
        return None


def check_corpus_is_indexed(meta: IndexMeta, corpus_path: str, separator: str | None,
                            flag: str = "--corpus_path", index: str = "the index") -> None:
    """Refuse a corpus other than the one the index's vectors were encoded from (same docids, other texts
    would be written as negatives the model never ranked, or fused with dense hits of other texts), or another
    title/text separator (``separator`` None: not checked). ``flag`` names the corpus in the message, ``index``
    the index (a shard of a sharded search names its folder)."""
    recorded = recorded_input(meta)
    if recorded is None:
        logger.warning("%s records no input fingerprint (built before it was recorded, or from shards without "
                       "sidecars): cannot check that %s is the corpus it was encoded from", index, corpus_path)
        return
    identity = file_identity(corpus_path)
    if identity != recorded["identity"]:
        raise ConfigError(f"{flag} {corpus_path}: not the corpus {index} was encoded from "
                          f"({recorded['source']}: {recorded['identity']}; this file: {identity}); its passage "
                          "texts would not be the ones the index ranks. Pass the encoded corpus, or re-encode and "
                          "re-index")
    if separator is not None and recorded["separator"] is not None and recorded["separator"] != separator:
        raise ConfigError(f"--passage_field_separator {separator!r}: the index was encoded with "
                          f"{recorded['separator']!r}; the written passages would differ from the ranked ones")


def check_shard_paths(shards: Sequence[str | os.PathLike]) -> list[Path]:
    """The shard paths an index is built from: at least one, each an existing file (every backend)."""
    paths = [Path(p) for p in shards]
    if not paths:
        raise ShardFormatError("no shards given")
    for p in paths:
        if not p.is_file():
            raise ShardFormatError(f"shard {p} does not exist")
    return paths


def passage_shard_infos(paths: Sequence[str | os.PathLike], allow_partial: bool = False) -> tuple[list, str]:
    """The shards' sidecar infos (None for a sidecar-less shard) and the model that made them ("" if several or
    unknown), after checking that they are one set of passage shards of one vector dim (what every backend
    indexes)."""
    infos = check_shard_set(paths, allow_partial)
    if any(i is not None and i.is_query for i in infos):
        raise ShardFormatError("query shards cannot be indexed; pass passage shards")
    dims = {i.dim for i in infos if i is not None and i.num_vectors}
    if len(dims) > 1:
        raise ShardFormatError(f"shards disagree on the vector dim: {sorted(dims)}")
    models = {i.model_name for i in infos if i is not None}
    return infos, (models.pop() if len(models) == 1 else "")
