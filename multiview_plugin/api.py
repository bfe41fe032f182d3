"""The Python API: load a trained model, encode queries and documents, build an index and search it.

A thin layer over the library the drivers use (:func:`~multiview_plugin.modeling.persistence.load_encoder`,
:func:`~multiview_plugin.encoding.encode.encode_to_shard`, :func:`~multiview_plugin.search.build_index`,
:class:`~multiview_plugin.search.MultiVectorSearcher`), for users of sentence-transformers or PyLate::

    from multiview_plugin import MultiViewModel

    model = MultiViewModel.load("runs/mvr")                    # a folder written by driver.train
    queries = model.encode_queries(["who wrote hamlet?"])       # (1, dim) float32
    docs = model.encode_documents(["hamlet is a play by shakespeare"])  # [(views, dim) float32]
    searcher = model.index(["hamlet is a play by shakespeare", "paris is in france"], "indexes/demo")
    hits = searcher.search("who wrote hamlet?", k=2)            # [Hit(docid, score, ...)]

See docs/python-api.md.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from multiview_plugin.modeling.base import MultiViewEncoder
    from multiview_plugin.search import MultiVectorSearcher

logger = logging.getLogger(__name__)


class MultiViewModel:
    """A trained multiview_plugin model (any method) for encoding and search from Python.

    ``encoder``: the loaded :class:`~multiview_plugin.modeling.base.MultiViewEncoder` (``model.encoder``), in
    eval mode on its device.
    """

    def __init__(self, encoder: MultiViewEncoder, path: str | os.PathLike | None = None):
        self.encoder = encoder.eval()
        self.path = Path(path) if path is not None else None

    @classmethod
    def load(cls, path: str | os.PathLike, device: str | None = None, **text_options: Any) -> MultiViewModel:
        """Load a model folder written by ``multiview_plugin.driver.train`` (``multiview_config.json``), or a plain
        Hugging Face / Tevatron checkpoint as a dpr model. ``device``: ``cpu``, ``cuda``, ... (default: cuda if
        any). ``text_options``: shared text options (``normalize=False``, ``query_max_len=64``, ...; see
        :class:`~multiview_plugin.text_options.TextOptions`) overriding the saved model's, as the encode driver's
        flags do."""
        import torch

        from multiview_plugin.modeling.config import is_multiview_model
        from multiview_plugin.modeling.persistence import load_encoder, override_text_options

        given = {k: v for k, v in text_options.items() if v is not None}
        encoder = load_encoder(path, checkpoint_options=given)
        if is_multiview_model(path):
            override_text_options(encoder, given)
        encoder.to(torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu")))
        return cls(encoder, path)

    @property
    def method(self) -> str:
        """The method's registered name (``dpr``, ``mvr``, ...)."""
        return self.encoder.config.model_name

    def encode_queries(self, texts: str | Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Query strings → float32 ``(len(texts), dim)``, one vector each (with the model's query prefix). One
        ``str`` is one query: its vector, ``(dim,)``, as sentence-transformers' ``encode`` returns. Items that are
        not strings are a ``TypeError``; ``batch_size`` < 1 a ``ValueError``."""
        one = isinstance(texts, str)
        vectors = self.encoder.encode_queries(check_texts(texts, "texts"), check_batch_size(batch_size))
        return vectors[0] if one else vectors

    def encode_documents(self, texts: Sequence[str], batch_size: int = 64, ids: Sequence[str] | None = None,
                         pseudo_queries: Mapping[str, Sequence[str]] | None = None) -> list[np.ndarray]:
        """Document texts → one float32 ``(views, dim)`` array per document: the vectors its index entry holds
        (``views`` may differ between documents, e.g. dcsr's sentences; a single-vector model gives one row).
        dce needs each document's ``pseudo_queries`` (``{id: [query, ...]}``, with ``ids``). One ``str`` is one
        document: its ``(views, dim)`` array. Items that are not strings are a ``TypeError``; ``batch_size`` < 1,
        or ``ids`` of another length, a ``ValueError``."""
        from multiview_plugin.encoding.encode import encode_documents

        one = isinstance(texts, str)
        texts = check_texts(texts, "texts")
        if ids is not None:
            ids = check_texts([ids] if isinstance(ids, str) else ids, "ids")
            if len(ids) != len(texts):
                raise ValueError(f"ids: {len(ids)} ids for {len(texts)} texts; give one id per text")
        arrays = encode_documents(self.encoder, texts, ids, check_batch_size(batch_size),
                                  dict(pseudo_queries) if pseudo_queries is not None else None)
        return arrays[0] if one else arrays

    def index(self, documents: Sequence[str] | Mapping[str, str], index_dir: str | os.PathLike,
              index_factory: str | None = None, batch_size: int = 64, overwrite: bool = False,
              pseudo_queries: str | None = None, **searcher_options: Any) -> MultiVectorSearcher:
        """Encode ``documents`` (texts, ids ``"0"``, ``"1"``, ...; or ``{docid: text}``), write a Faiss index
        folder ``index_dir`` (as ``driver.index``; ``index_factory``: any ``faiss.index_factory`` string, None:
        ``driver.index``'s default, exact ``Flat``) and
        return a searcher over it. ``pseudo_queries``: dce's pseudo-query file (as encode's
        ``--pseudo_queries``). ``searcher_options`` go to :meth:`searcher`."""
        from multiview_plugin.encoding.encode import encode_to_shard
        from multiview_plugin.index.build import IndexConfig, build_index

        check_batch_size(batch_size)
        if isinstance(documents, Mapping):
            corpus = dict(zip(check_texts(list(documents), "documents' ids"),
                              check_texts(list(documents.values()), "documents")))
        else:
            corpus = {str(i): t for i, t in enumerate(check_texts(documents, "documents", one=False))}
        index_dir = Path(index_dir)
        index_dir.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".encode-", dir=index_dir.parent) as work:
            corpus_file, shard = Path(work) / "corpus.jsonl", Path(work) / "corpus.pkl"
            with corpus_file.open("w", encoding="utf-8") as f:
                for docid, text in corpus.items():
                    f.write(json.dumps({"docid": str(docid), "text": text}) + "\n")
            encode_to_shard(self.encoder, str(corpus_file), shard, batch_size=batch_size,
                            pseudo_queries=pseudo_queries, model_path=str(self.path) if self.path else None)
            build_index([shard], index_dir, IndexConfig(
                overwrite=overwrite, **({} if index_factory is None else {"index_factory": index_factory})))
        searcher_options.setdefault("corpus", {str(k): v for k, v in corpus.items()})  # for explanations
        return self.searcher(index_dir, **searcher_options)

    def searcher(self, index_dir: str | os.PathLike, **options: Any) -> MultiVectorSearcher:
        """A searcher over an index folder (``driver.index``'s or :meth:`index`'s) that encodes query strings with
        this model; ``options``: :class:`~multiview_plugin.search.MultiVectorSearcher`'s (``aggregation``,
        ``nprobe``, ...)."""
        from multiview_plugin.search import MultiVectorSearcher

        device = str(next(self.encoder.parameters()).device)
        return MultiVectorSearcher(index_dir, self.encoder, device=options.pop("device", device), **options)


def check_texts(texts: Any, what: str, one: bool = True) -> list[str]:
    """``texts`` as a list of strings: one ``str`` is one text (``one``; else refused: a ``str`` is not a list of
    documents, and iterating it would give one per character); any item that is not a ``str`` is a ``TypeError``
    naming its position and type."""
    if isinstance(texts, str):
        if one:
            return [texts]
        raise TypeError(f"{what}: expected a list of strings (or a dict docid -> text), got one str; wrap it in a "
                        "list")
    if isinstance(texts, (bytes, Mapping)) or not isinstance(texts, Sequence | Iterable):
        raise TypeError(f"{what}: expected a str or a list of strings, got {type(texts).__name__}")
    out = list(texts)
    for i, text in enumerate(out):
        if not isinstance(text, str):
            raise TypeError(f"{what}[{i}]: expected a str, got {type(text).__name__} ({text!r:.40})")
    return out


def check_batch_size(batch_size: Any) -> int:
    """``batch_size`` when it is a whole number >= 1: a ``TypeError`` for another type, a ``ValueError`` below 1
    (a batch size of -1 used to encode nothing and return no vectors)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int):
        raise TypeError(f"batch_size: expected an int >= 1, got {type(batch_size).__name__} ({batch_size!r})")
    if batch_size < 1:
        raise ValueError(f"batch_size: expected an int >= 1, got {batch_size}")
    return batch_size

