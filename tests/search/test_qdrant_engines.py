"""Tests of multiview_plugin/search/_qdrant_engines.py that need no server (the backend end to end:
tests/search/test_qdrant.py, test_qdrant_edge.py, test_qdrant_errors.py)."""

from __future__ import annotations

import numpy as np
import pytest

from multiview_plugin.errors import ConfigError
from multiview_plugin.search._qdrant_engines import check_url, storage_key, vectors_digest


def test_check_url_accepts_rest_endpoints_and_refuses_the_rest_in_one_line():
    assert check_url("http://localhost:6333") == "http://localhost:6333"
    assert check_url("https://qdrant.example.org") == "https://qdrant.example.org"
    for url, needle in [("", "expected a URL such as http://host:6333"),
                        ("http://host :6333", "expected a URL"),
                        ("grpc://host:6334", "scheme 'grpc'; expected http:// or https://"),
                        ("localhost:6333", "expected http:// or https://"),
                        ("http://:6333", "no host"),
                        ("http://host:99999", "not a valid URL")]:
        with pytest.raises(ConfigError, match=needle) as err:
            check_url(url)
        assert str(err.value).startswith(f"--qdrant_url {url!r}: ") and "\n" not in str(err.value)


def test_vectors_digest_changes_with_any_value():
    views, doc = np.eye(2, 4, dtype=np.float32), np.ones(4, dtype=np.float64)
    digest = vectors_digest(views, doc)
    assert len(digest) == 16 and digest == vectors_digest(views.astype(np.float64), doc.astype(np.float32))
    changed = views.copy()
    changed[1, 3] = 1e-3
    assert vectors_digest(changed, doc) != digest
    assert vectors_digest(views, doc * 2) != digest


def test_storage_key_resolves_paths_but_keeps_memory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert storage_key("store") == str(tmp_path.resolve() / "store")
    assert storage_key(":memory:") == ":memory:"
