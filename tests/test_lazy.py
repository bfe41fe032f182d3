"""multiview_plugin.lazy: a package's public names load from their submodules on first use, once."""

import sys

import pytest

from multiview_plugin.lazy import lazy_exports


def test_a_name_loads_on_first_use_and_is_kept():
    namespace: dict = {}
    getattr_, dir_ = lazy_exports("os", {"join": "path"}, namespace)
    assert "join" in dir_() and "join" not in namespace
    assert getattr_("join") is sys.modules["os.path"].join and namespace["join"] is getattr_("join")
    with pytest.raises(AttributeError, match="module 'os' has no attribute 'nope'"):
        getattr_("nope")


def test_the_packages_export_their_names_lazily():
    import multiview_plugin.index as index
    import multiview_plugin.modeling as modeling
    import multiview_plugin.search as search

    assert index.IndexConfig.__module__ == "multiview_plugin.index.build"
    assert modeling.load_encoder.__module__ == "multiview_plugin.modeling.persistence"
    assert search.build_index is index.build_index
    assert {"IndexConfig", "build_index"} <= set(dir(index))
