"""Encoders: the base class and one module per method (registered by ``--model_name``), each with its typed
options class; saving and loading in :mod:`multiview_plugin.modeling.persistence`.

The names below load on first use (PEP 562), so importing one light submodule (``modeling.options``,
``modeling.method_options``: the train driver's ``--help``) does not load torch and every encoder."""

from __future__ import annotations

from typing import TYPE_CHECKING

from multiview_plugin.lazy import lazy_exports

_EXPORTS = {
    "EncoderOutput": "base",
    "MultiViewEncoder": "base",
    "EncoderConfig": "config",
    "DceEncoder": "dce",
    "PairFormatter": "dce",
    "DcsrEncoder": "dcsr",
    "DcsrOptions": "method_options",
    "SentenceFormatter": "dcsr",
    "DprEncoder": "dpr",
    "InputFormatter": "formatting",
    "MebertEncoder": "mebert",
    "MebertOptions": "method_options",
    "MlrEncoder": "mlr",
    "MlrOptions": "method_options",
    "MvrEncoder": "mvr",
    "MvrOptions": "method_options",
    "ViewerFormatter": "mvr",
    "MethodOptions": "options",
    "option": "options",
    "load_encoder": "persistence",
}

if TYPE_CHECKING:
    from multiview_plugin.modeling.base import EncoderOutput, MultiViewEncoder
    from multiview_plugin.modeling.config import EncoderConfig
    from multiview_plugin.modeling.dce import DceEncoder, PairFormatter
    from multiview_plugin.modeling.dcsr import DcsrEncoder, DcsrOptions, SentenceFormatter
    from multiview_plugin.modeling.dpr import DprEncoder
    from multiview_plugin.modeling.formatting import InputFormatter
    from multiview_plugin.modeling.mebert import MebertEncoder, MebertOptions
    from multiview_plugin.modeling.mlr import MlrEncoder, MlrOptions
    from multiview_plugin.modeling.mvr import MvrEncoder, MvrOptions, ViewerFormatter
    from multiview_plugin.modeling.options import MethodOptions, option
    from multiview_plugin.modeling.persistence import load_encoder


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())


__all__ = [
    "EncoderConfig",
    "EncoderOutput",
    "InputFormatter",
    "MethodOptions",
    "MultiViewEncoder",
    "load_encoder",
    "option",
    "DprEncoder",
    "MvrEncoder",
    "MvrOptions",
    "MebertEncoder",
    "MebertOptions",
    "MlrEncoder",
    "MlrOptions",
    "DcsrEncoder",
    "DcsrOptions",
    "DceEncoder",
    "ViewerFormatter",
    "SentenceFormatter",
    "PairFormatter",
]
