"""Encoders: the base class and one module per method (registered by ``--model_name``)."""

from multiview_plugin.modeling.base import EncoderOutput, MultiViewEncoder, load_encoder
from multiview_plugin.modeling.config import EncoderConfig
from multiview_plugin.modeling.dce import DualCrossEncoder, PairFormatter
from multiview_plugin.modeling.dcsr import ContextualSentenceEncoder, SentenceFormatter
from multiview_plugin.modeling.dpr import DenseEncoder
from multiview_plugin.modeling.formatting import InputFormatter
from multiview_plugin.modeling.mebert import MultiEmbeddingEncoder
from multiview_plugin.modeling.mlr import MultiLayerEncoder
from multiview_plugin.modeling.mvr import MultiViewerEncoder, ViewerFormatter

__all__ = [
    "EncoderConfig",
    "EncoderOutput",
    "InputFormatter",
    "MultiViewEncoder",
    "load_encoder",
    "DenseEncoder",
    "MultiViewerEncoder",
    "MultiEmbeddingEncoder",
    "MultiLayerEncoder",
    "ViewerFormatter",
    "ContextualSentenceEncoder",
    "SentenceFormatter",
    "DualCrossEncoder",
    "PairFormatter",
]
