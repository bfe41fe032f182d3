"""multiview_plugin: multi-vector ("multi-view") document representations for the Tevatron / Pyserini
dense-retrieval ecosystem (MVR, MLR, DCSR, DCE, ME-BERT and the DPR baseline)."""

from multiview_plugin.registry import (
    get_encoder_class,
    get_loss_class,
    register_encoder,
    register_loss,
)

__version__ = "0.1.0"

__all__ = [
    "MultiViewModel",
    "__version__",
    "get_encoder_class",
    "get_loss_class",
    "load_encoder",
    "register_encoder",
    "register_loss",
]


def __getattr__(name: str):
    # Heavy (torch/transformers) names are imported on first use so `import multiview_plugin` stays cheap.
    if name == "load_encoder":
        from multiview_plugin.modeling import load_encoder

        return load_encoder
    if name == "MultiViewModel":  # the Python API (multiview_plugin.api, docs/python-api.md)
        from multiview_plugin.api import MultiViewModel

        return MultiViewModel
    raise AttributeError(f"module 'multiview_plugin' has no attribute {name!r}")
