"""ME-BERT (Luan et al., 2021, "Sparse, Dense, and Attentional Representations for Text Retrieval"): the first k
last-layer token states of a document ([CLS] and the k-1 tokens after it) are its vectors; max-sim score.
The baseline MVR and MLR compare against."""

from __future__ import annotations

import torch

from multiview_plugin.errors import ConfigError
from multiview_plugin.modeling.base import MultiViewEncoder
from multiview_plugin.modeling.config import EncoderConfig
from multiview_plugin.modeling.method_options import MebertOptions
from multiview_plugin.registry import register_encoder


@register_encoder("mebert")
class MebertEncoder(MultiViewEncoder):
    """Document views = last-layer states at positions 0..k-1 (``--mebert_num_vectors``, default 8); a passage
    shorter than k tokens has fewer views (the view mask follows its attention mask). Query = [CLS]."""

    default_loss = "contrastive"
    options_class = MebertOptions

    @property
    def options(self) -> MebertOptions:
        return self.config.options

    @classmethod
    def validate_config(cls, config: EncoderConfig) -> None:
        super().validate_config(config)
        k = config.options.num_vectors
        if k < 1 or k > config.passage_max_len:
            raise ConfigError(f"--mebert_num_vectors must be in [1, --passage_max_len], got {k}")

    def encode_passage(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        k = self.options.num_vectors
        hidden = self._last_hidden(self.p_encoder, batch)[:, :k]
        mask = batch["attention_mask"][:, :k].bool()
        if hidden.shape[1] < k:  # a batch of passages all shorter than k
            pad = k - hidden.shape[1]
            hidden = torch.nn.functional.pad(hidden, (0, 0, 0, pad))
            mask = torch.nn.functional.pad(mask, (0, pad), value=False)
        return self._finish(hidden), mask

    def describe_views(self) -> dict:
        return {"kind": "token", "labels": list(range(self.options.num_vectors))}
