"""Encoders: the base class and one module per method (registered by ``--model_name``), each with its typed
options class; saving and loading in :mod:`multiview_plugin.modeling.persistence`."""

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
