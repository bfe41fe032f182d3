"""MLR: multi-layer representations (papers/mlr_*). A document's vectors are its [CLS] states at several
encoder layers (T5: the masked mean of each layer's token states, as T5 has no [CLS]); the query is the
last layer's. Four poolings (``--mlr_pooling``):

* ``max`` — multi-vector: every layer vector is indexed, score = max over layers (eq. 2), contrastive loss;
* ``self_contrastive`` — single-vector (the paper's best): training scores positives with the last layer and
  negatives with their max over layers, plus a regulariser (eqs. 5-7); only the last-layer vector is indexed,
  so index size and search cost equal a plain dual encoder's;
* ``average`` — the mean of the layer vectors, in training and in the index;
* ``scalar_mix`` — ``sum_l softmax(w)_l h_l`` with learnable weights w (ELMo-style, eq. 8), saved with the model.

``--mlr_layers`` lists 1-based transformer layers (0 = the embedding output), the last layer always included
and listed first. Defaults, scaled to the backbone's depth n: ``max`` uses the last four layers (BERT-base:
12,11,10,9); the single-vector poolings use n and round(10n/12) (BERT-base: 12,10; MiniLM-L6: 6,5).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from multiview_plugin.errors import ConfigError
from multiview_plugin.modeling.base import MultiViewEncoder
from multiview_plugin.modeling.config import EncoderConfig
from multiview_plugin.modeling.method_options import POOLINGS, MlrOptions
from multiview_plugin.registry import register_encoder


def default_layers(num_layers: int, pooling: str) -> list[int]:
    if pooling == "max":
        return [num_layers - i for i in range(min(4, num_layers))]
    second = round(10 * num_layers / 12)
    return [num_layers] + ([second] if 0 < second < num_layers else [])


def parse_layers(spec: str | list[int] | None, num_layers: int, pooling: str) -> list[int]:
    """Validated layer list, last layer first."""
    if spec in (None, "", []):
        return default_layers(num_layers, pooling)
    layers = [int(x) for x in spec.split(",")] if isinstance(spec, str) else [int(x) for x in spec]
    bad = [x for x in layers if not 0 <= x <= num_layers]
    if bad:
        raise ConfigError(f"--mlr_layers {bad} outside the backbone's layers 0..{num_layers}")
    if len(set(layers)) != len(layers):
        raise ConfigError(f"--mlr_layers has duplicates: {layers}")
    if num_layers not in layers:
        raise ConfigError(f"--mlr_layers must include the last layer ({num_layers}), got {layers}")
    return [num_layers] + [x for x in layers if x != num_layers]


@register_encoder("mlr")
class MlrEncoder(MultiViewEncoder):
    """Options (:class:`MlrOptions`): ``mlr_layers``, ``mlr_pooling``, ``mlr_lambda`` (self-contrastive regulariser
    weight, 1.0), ``mlr_reg_temperature`` (its temperature; default: the contrastive one), ``mlr_layer_pooling``
    ('cls' or 'mean': how each layer's vector, and the query's, is read; T5 always 'mean')."""

    default_loss = "contrastive"
    options_class = MlrOptions

    def __init__(self, config: EncoderConfig, *args: Any, **kwargs: Any):
        if config.loss_name is None and config.options.pooling == "self_contrastive":
            config.loss_name = "mlr_self_contrastive"
        super().__init__(config, *args, **kwargs)
        num_layers = self.p_encoder.config.num_hidden_layers if hasattr(self.p_encoder.config, "num_hidden_layers") \
            else self.p_encoder.config.num_layers
        self.layers = parse_layers(self.options.layers, num_layers, self.options.pooling)
        self.options.layers = ",".join(map(str, self.layers))  # saved resolved
        if self.options.pooling == "scalar_mix":
            self.mix_weights = nn.Parameter(torch.zeros(len(self.layers)))

    @property
    def options(self) -> MlrOptions:
        return self.config.options

    @classmethod
    def validate_config(cls, config: EncoderConfig) -> None:
        super().validate_config(config)
        opts: MlrOptions = config.options
        if opts.pooling not in POOLINGS:
            raise ConfigError(f"--mlr_pooling must be one of {', '.join(POOLINGS)}, got {opts.pooling!r}")
        if opts.layer_pooling not in ("cls", "mean"):
            raise ConfigError(f"--mlr_layer_pooling must be 'cls' or 'mean', got {opts.layer_pooling!r}")

    @property
    def pooling_mode(self) -> str:
        return self.options.pooling

    def is_single_vector(self) -> bool:
        return self.pooling_mode != "max"

    @property
    def layer_pooling(self) -> str:
        return "mean" if self.is_t5 else self.options.layer_pooling

    def _layer_vector(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        if self.layer_pooling == "mean":
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return hidden[:, 0]

    def encode_query(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        hidden = self._last_hidden(self.query_encoder, batch)
        return self._finish(self._layer_vector(hidden, batch["attention_mask"]))

    def layer_vectors(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """(B, L, D) un-normalised layer vectors, last layer first."""
        states = self.p_encoder(**batch, output_hidden_states=True, return_dict=True).hidden_states
        num_layers = len(states) - 1
        if self.is_t5:
            # T5's last hidden state has passed the encoder's final layer norm, the others have not: normalise
            # them the same way so max pooling compares vectors of one scale
            final_norm = self.p_encoder.encoder.final_layer_norm
            states = tuple(h if i == num_layers else final_norm(h) for i, h in enumerate(states))
        return torch.stack([self._layer_vector(states[layer], batch["attention_mask"]) for layer in self.layers], 1)

    def encode_passage(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        vectors = self.layer_vectors(batch)
        if self.pooling_mode == "average":
            vectors = vectors.mean(dim=1, keepdim=True)
        elif self.pooling_mode == "scalar_mix":
            weights = torch.softmax(self.mix_weights, dim=0).to(vectors.dtype)
            vectors = torch.einsum("l,bld->bd", weights, vectors).unsqueeze(1)
        reps = self._finish(vectors)
        return reps, torch.ones(reps.shape[:2], dtype=torch.bool, device=reps.device)

    def index_views(self, reps: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # Self-contrastive pooling indexes only the last layer (eq. 4), like a plain dual encoder.
        if self.pooling_mode == "self_contrastive":
            return reps[:, :1], mask[:, :1]
        return reps, mask

    def describe_views(self) -> dict[str, Any]:
        if self.pooling_mode == "max":
            return {"kind": "layer", "labels": list(self.layers)}
        if self.pooling_mode == "self_contrastive":
            return {"kind": "layer", "labels": self.layers[:1]}
        return {"kind": "document", "layers": list(self.layers), "pooling": self.pooling_mode}
