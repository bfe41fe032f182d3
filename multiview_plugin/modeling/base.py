"""The encoder base class every method builds on.

Shape contract (every method):

* :meth:`MultiViewEncoder.encode_query` → ``(B, D)``, one vector per query;
* :meth:`MultiViewEncoder.encode_passage` → ``(B, K, D)`` view vectors and a ``(B, K)`` bool view mask,
  so a method may give documents different numbers of views;
* :meth:`MultiViewEncoder.compute_similarity` → ``(Q, P)`` document scores, max over views by default.

Saving and loading (the model folder's layout, :func:`load_encoder`, LoRA weights when resuming) live in
:mod:`multiview_plugin.modeling.persistence`; a method's flags in its typed options class
(:mod:`multiview_plugin.modeling.options`).
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from multiview_plugin.backbones import resolve_backbone
from multiview_plugin.errors import ConfigError
from multiview_plugin.losses.base import LossOutput, MultiViewLoss
from multiview_plugin.losses.distributed import gather_across_processes
from multiview_plugin.losses.temperature import DEFAULT_ALPHA, MIN_TEMPERATURE, temperature_at
from multiview_plugin.modeling.config import EncoderConfig
from multiview_plugin.modeling.formatting import InputFormatter
from multiview_plugin.modeling.lora import is_lora, wants_lora
from multiview_plugin.modeling.options import MethodOptions
from multiview_plugin.modeling.persistence import T5_MODEL_TYPES, PersistenceMixin, load_backbone, load_tokenizer
from multiview_plugin.registry import get_loss_class
from multiview_plugin.scoring import view_scores
from multiview_plugin.text_options import DEFAULTS, PADDING_SIDES, POOLINGS

logger = logging.getLogger(__name__)



def backbone_options(args: Any) -> dict[str, Any]:
    """``from_pretrained`` keywords from Tevatron's ``--attn_implementation`` and ``--dtype`` (unset: transformers'
    defaults)."""
    options: dict[str, Any] = {}
    if getattr(args, "attn_implementation", None):
        options["attn_implementation"] = args.attn_implementation
    dtype = getattr(args, "dtype", None)
    if dtype:
        if dtype not in ("float32", "float16", "bfloat16"):
            raise ConfigError(f"--dtype must be float32, float16 or bfloat16, got {dtype!r}")
        options["dtype"] = getattr(torch, dtype)
    return options




@dataclass
class EncoderOutput:
    q_reps: torch.Tensor | None = None
    p_reps: torch.Tensor | None = None
    p_mask: torch.Tensor | None = None
    loss: torch.Tensor | None = None
    parts: dict[str, torch.Tensor] = field(default_factory=dict)


class MultiViewEncoder(PersistenceMixin, nn.Module):
    """Base class of all encoders (query encoder + passage encoder + loss).

    Subclasses set :attr:`default_loss`, :attr:`options_class` (the method's typed options, a
    :class:`~multiview_plugin.modeling.options.MethodOptions` dataclass: its flags are added to the parsers and
    saved with the model) and :attr:`formatter_class`, and implement :meth:`encode_passage`
    (and :meth:`encode_query` if queries are not pooled like passages' first token).
    """

    registered_name: ClassVar[str]
    default_loss: ClassVar[str] = "contrastive"
    default_temperature_schedule: ClassVar[str] = "fixed"
    # the flags that set the annealed schedule's (alpha, floor), where the method has them (mvr); None: the
    # schedule uses MVR's eq. 8 values (annealing())
    annealing_flags: ClassVar[tuple[str, str] | None] = None
    options_class: ClassVar[type[MethodOptions]] = MethodOptions
    formatter_class: ClassVar[type[InputFormatter]] = InputFormatter
    # True for methods whose vectors are --pooling ('cls' or 'mean') of last-layer states (dpr, dcsr's queries, dce)
    pools_tokens: ClassVar[bool] = False
    # True where every text is tokenised by InputFormatter alone, so Tevatron's --padding_side,
    # --append_eos_token and --add_special_tokens apply (dpr)
    tevatron_tokenization: ClassVar[bool] = False

    def __init__(
        self,
        config: EncoderConfig,
        query_encoder: PreTrainedModel,
        passage_encoder: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
    ):
        super().__init__()
        self.config = config
        self.query_encoder = query_encoder
        # Tied encoders are one module registered once, so its parameters are updated once.
        self.passage_encoder = passage_encoder if config.untie_encoder else None
        self.tokenizer = tokenizer
        loss_name = config.loss_name or self.default_loss
        self.loss_fn: MultiViewLoss = get_loss_class(loss_name).from_options(config.options)
        self.temperature = config.temperature
        self.negatives_x_device = False
        self._logged_gather = False
        if self.pools_tokens and self.is_t5 and config.pooling in ("cls", "first"):
            raise ConfigError("T5 encoders have no [CLS] token: use --pooling mean")

    # ------------------------------------------------------------------ inputs
    @property
    def p_encoder(self) -> PreTrainedModel:
        return self.passage_encoder if self.passage_encoder is not None else self.query_encoder

    @property
    def formatter(self) -> InputFormatter:
        return self.formatter_for(self.tokenizer, self.config)

    @classmethod
    def formatter_for(cls, tokenizer: PreTrainedTokenizerBase, config: EncoderConfig) -> InputFormatter:
        return cls.formatter_class(
            tokenizer,
            query_max_len=config.query_max_len,
            passage_max_len=config.passage_max_len,
            query_prefix=config.query_prefix,
            passage_prefix=config.passage_prefix,
            pad_to_multiple_of=config.pad_to_multiple_of,
            padding_side=config.padding_side,
            append_eos_token=config.append_eos_token,
            add_special_tokens=config.add_special_tokens,
            **cls.formatter_options(config),
        )

    @classmethod
    def formatter_options(cls, config: EncoderConfig) -> dict[str, Any]:
        """Extra keyword arguments of :attr:`formatter_class` taken from the config."""
        return {}

    # ---------------------------------------------------------------- encoding
    def _last_hidden(self, encoder: PreTrainedModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return encoder(**batch, return_dict=True).last_hidden_state

    def _pool(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        pooling = self.config.pooling
        if pooling in ("cls", "first"):
            return hidden[:, 0]
        if pooling in ("mean", "avg", "average"):
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        if pooling in ("last", "eos"):  # the last real token (Tevatron's decoder-model pooling)
            if bool((attention_mask[:, -1] == 1).all()):  # left-padded (or no padding): the last column
                return hidden[:, -1]
            last = attention_mask.sum(1) - 1
            return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
        raise ValueError(f"unknown pooling {pooling!r}; expected one of {', '.join(POOLINGS)}")

    def _finish(self, reps: torch.Tensor) -> torch.Tensor:
        return F.normalize(reps, dim=-1) if self.config.normalize else reps

    def encode_query(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Query vectors, (B, D)."""
        hidden = self._last_hidden(self.query_encoder, batch)
        return self._finish(self._pool(hidden, batch["attention_mask"]))

    def encode_passage(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Passage view vectors (B, K, D) and view mask (B, K)."""
        raise NotImplementedError

    @torch.inference_mode()
    def encode_queries(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        """Query strings → float32 vectors (N, D), ``batch_size`` at a time, on the model's device."""
        device, formatter = next(self.parameters()).device, self.formatter  # the property builds a new formatter
        out = [self.encode_query({k: v.to(device) for k, v in formatter.queries(texts[i:i + batch_size]).items()})
               .float().cpu().numpy() for i in range(0, len(texts), batch_size)]
        return np.concatenate(out) if out else np.zeros((0, self.query_encoder.config.hidden_size), np.float32)

    def passage_inputs(self, formatter: InputFormatter, docids: list[str], texts: list[str],
                       views: dict[str, Any] | None = None) -> dict[str, torch.Tensor]:
        """Model inputs for a batch of documents at encoding time; ``views`` holds per-document extra inputs
        (DCE's pseudo-queries, by docid). Default: the texts alone."""
        return formatter.passages(texts)

    def is_single_vector(self) -> bool:
        """True when every passage gets exactly one vector in the index: shards then use Tevatron's layout."""
        return False

    def index_views(self, reps: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The views that go into the index (default: all). MLR's self-contrastive pooling keeps one."""
        return reps, mask

    def describe_views(self) -> dict[str, Any]:
        """What view j of any document is, for explanations and reports (stored with shards and indexes).

        ``kind`` names the view ("viewer", "layer", "token", "sentence", "pseudo_query", or "document" for one
        vector); ``labels[j]`` is view j's label where all documents share them. Methods override this.
        """
        return {"kind": "document" if self.is_single_vector() else "view"}

    def view_rows(self, formatter: InputFormatter, texts: list[str], mask: np.ndarray) -> np.ndarray | None:
        """Per-vector facts that differ by document, (mask.sum(), 3) int32 in vector order (see
        :mod:`multiview_plugin.encoding.view_info`), or None (default: nothing per document)."""
        return None

    @property
    def is_t5(self) -> bool:
        return getattr(self.query_encoder.config, "model_type", "") in T5_MODEL_TYPES

    # ----------------------------------------------------------------- scoring
    def compute_view_scores(
        self, q_reps: torch.Tensor, p_reps: torch.Tensor, p_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Per-view scores f_i(q, d), (Q, P, K)."""
        return view_scores(q_reps, p_reps, p_mask)

    def compute_similarity(
        self, q_reps: torch.Tensor, p_reps: torch.Tensor, p_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Document scores f(q, d), (Q, P): max over views."""
        return self.compute_view_scores(q_reps, p_reps, p_mask).max(dim=-1).values

    def compute_loss(
        self, q_reps: torch.Tensor, p_reps: torch.Tensor, p_mask: torch.Tensor, target: torch.Tensor,
        exclude: torch.Tensor | None = None,
    ) -> LossOutput:
        """The loss over per-view scores; ``exclude`` (Q, P) removes candidates from a query's negatives
        (their scores become -inf), see :func:`duplicate_positive_mask`."""
        scores = self.compute_view_scores(q_reps, p_reps, p_mask)
        if exclude is not None:
            scores = scores.masked_fill(exclude.unsqueeze(-1), float("-inf"))
        return self.loss_fn(scores, target, self.temperature)

    def forward(
        self, query: dict[str, torch.Tensor] | None = None, passage: dict[str, torch.Tensor] | None = None,
        passage_keys: torch.Tensor | None = None,
    ) -> EncoderOutput:
        q_reps = self.encode_query(query) if query is not None else None
        p_reps, p_mask = self.encode_passage(passage) if passage is not None else (None, None)
        if q_reps is None or p_reps is None or not self.training:
            return EncoderOutput(q_reps=q_reps, p_reps=p_reps, p_mask=p_mask)
        return self.loss_from_reps(q_reps, p_reps, p_mask, passage_keys=passage_keys)

    def loss_from_reps(self, q_reps: torch.Tensor, p_reps: torch.Tensor, p_mask: torch.Tensor,
                       passage_keys: torch.Tensor | None = None, **inputs: Any) -> EncoderOutput:
        """The training loss from encoded vectors; ``passage_keys`` and ``inputs``: the collator's extra tensors
        (e.g. dcsr's ``sentence_selection``). ``--grad_cache`` calls it on the cached vectors of the whole batch."""
        return self.contrastive_step(q_reps, p_reps, p_mask, passage_keys)

    def contrastive_step(self, q_reps: torch.Tensor, p_reps: torch.Tensor, p_mask: torch.Tensor,
                         keys: torch.Tensor | None = None) -> EncoderOutput:
        """The training loss of queries (B, D) against their candidate groups (B·G, K, D): candidate
        ``i·G`` is query i's positive, every other candidate of the (gathered) batch a negative — except, with
        ``keys`` (B·G,) content hashes (``--mask_duplicate_positives``), candidates identical to the positive."""
        world_size = 1
        if self.negatives_x_device and dist.is_available() and dist.is_initialized():
            world_size = dist.get_world_size()
            q_reps = gather_across_processes(q_reps)
            p_reps, p_mask = gather_across_processes(p_reps, p_mask)
            if keys is not None:
                (keys,) = gather_across_processes(keys)
            if not self._logged_gather:
                logger.info("in-batch negatives gathered across %d processes: %d queries x %d passages per step",
                            world_size, q_reps.shape[0], p_reps.shape[0])
                self._logged_gather = True
        group_size = p_reps.shape[0] // q_reps.shape[0]
        if group_size * q_reps.shape[0] != p_reps.shape[0]:
            raise ValueError(f"{p_reps.shape[0]} passages do not split into groups for {q_reps.shape[0]} queries")
        target = torch.arange(q_reps.shape[0], device=q_reps.device) * group_size
        exclude = duplicate_positive_mask(keys.to(q_reps.device), target) if keys is not None else None
        out = self.compute_loss(q_reps, p_reps, p_mask, target, exclude)
        # Every process computes the loss of the whole gathered batch, but gradients reach only its own
        # slice; DDP averages gradients over processes, so scale back up (as Tevatron does).
        loss = out.loss * world_size
        parts = dict(out.parts)
        if exclude is not None:
            parts["masked_duplicates"] = exclude.sum().float().detach() / q_reps.shape[0]
        return EncoderOutput(q_reps=q_reps, p_reps=p_reps, p_mask=p_mask, loss=loss, parts=parts)

    # ------------------------------------------------------------ training data
    def train_data(self, records: Any, group_size: int, seed: int = 42, positive_no_shuffle: bool = False,
                   negative_no_shuffle: bool = False, num_proc: int = 1) -> tuple[Any, Any]:
        """The training dataset and collator for validated train records (default: passage groups,
        :class:`~multiview_plugin.data.dataset.TrainDataset`). Methods with another training unit override it."""
        from multiview_plugin.data.dataset import TrainDataset

        dataset = TrainDataset(records, group_size=group_size, seed=seed, positive_no_shuffle=positive_no_shuffle,
                               negative_no_shuffle=negative_no_shuffle)
        return dataset, self.train_collator()

    def prepares_data_in_processes(self) -> bool:
        """Whether :meth:`train_data` prepares its records in ``num_proc`` processes (``--num_proc``; default
        no: passage groups need no preparation)."""
        return False

    def train_collator(self) -> Any:
        """Turns passage-group items into model inputs (default: query and passages tokenised separately)."""
        from multiview_plugin.data.dataset import TrainCollator

        return TrainCollator(self.formatter, passage_keys=self.config.mask_duplicate_positives)

    def learning_rate_overrides(self) -> dict[str, float]:
        """``{parameter name: learning rate}`` for parameters that train at their own rate (default: none)."""
        return {}

    # ------------------------------------------------------------ temperature
    def set_epoch(self, epoch: int) -> None:
        """Apply the temperature schedule for ``epoch`` (counted from 0)."""
        alpha, minimum = self.annealing(self.config)
        self.temperature = temperature_at(
            epoch,
            schedule=self.config.temperature_schedule,
            initial=self.config.temperature,
            alpha=alpha,
            minimum=minimum,
        )

    @classmethod
    def annealing(cls, config: EncoderConfig) -> tuple[float, float]:
        """(decay rate alpha, floor) of the annealed temperature schedule: MVR's eq. 8 values; MVR takes them from
        its options (``--mvr_alpha``, ``--mvr_min_temperature``)."""
        return DEFAULT_ALPHA, MIN_TEMPERATURE

    # -------------------------------------------------------- build/save/load
    @classmethod
    def options_from_args(cls, model_args: Any) -> MethodOptions:
        """The method's typed options (:attr:`options_class`) from parsed arguments."""
        return cls.options_class.from_args(model_args)

    @classmethod
    def config_from_args(cls, model_args: Any, data_args: Any) -> EncoderConfig:
        """The :class:`EncoderConfig` the parsed arguments describe (nothing is loaded)."""
        return EncoderConfig(
            model_name=cls.registered_name,
            backbone=model_args.model_name_or_path,
            loss_name=model_args.loss_name,
            pooling=model_args.pooling,
            normalize=model_args.normalize,
            temperature=model_args.temperature,
            temperature_schedule=model_args.temperature_schedule or cls.default_temperature_schedule,
            untie_encoder=model_args.untie_encoder,
            query_max_len=data_args.query_max_len,
            passage_max_len=data_args.passage_max_len,
            query_prefix=data_args.query_prefix,
            passage_prefix=data_args.passage_prefix,
            pad_to_multiple_of=data_args.pad_to_multiple_of,
            mask_duplicate_positives=model_args.mask_duplicate_positives,
            # Tevatron's DataArguments (multiview_plugin.tevatron.train) may lack these: the shared defaults
            padding_side=getattr(data_args, "padding_side", DEFAULTS.padding_side),
            append_eos_token=getattr(data_args, "append_eos_token", DEFAULTS.append_eos_token),
            add_special_tokens=getattr(data_args, "add_special_tokens", DEFAULTS.add_special_tokens),
            options=cls.options_from_args(model_args),
        )

    @classmethod
    def build(cls, model_args: Any, data_args: Any) -> MultiViewEncoder:
        """A fresh model from a backbone, configured by the parsed arguments."""
        config = cls.config_from_args(model_args, data_args)
        cls.validate_config(config)
        tokenizer, query_encoder, passage_encoder = cls.load_pretrained(config, model_args)
        vocabulary = len(tokenizer)
        cls.prepare_backbone(config, tokenizer, query_encoder, passage_encoder)
        model = cls(config, query_encoder, passage_encoder, tokenizer)
        if wants_lora(model_args):  # the tokens prepare_backbone added train as their embedding rows
            from multiview_plugin.modeling.lora import wrap_model

            wrap_model(model, model_args, list(range(vocabulary, len(tokenizer))))
        return model

    @classmethod
    def load_pretrained(cls, config: EncoderConfig, model_args: Any) -> tuple[PreTrainedTokenizerBase,
                                                                              PreTrainedModel, PreTrainedModel]:
        """The tokenizer and the query and passage backbones a fresh model starts from (the same module when
        tied): by default ``--model_name_or_path`` (``--tokenizer_name``, ``--config_name``). MVR's
        ``--mvr_init_from`` takes them from a saved model instead."""
        revision = getattr(model_args, "model_revision", None)
        tokenizer = load_tokenizer(resolve_backbone(model_args.tokenizer_name or model_args.model_name_or_path),
                                   cache_dir=model_args.cache_dir, revision=revision)
        config_name = getattr(model_args, "config_name", None)
        query_encoder = load_backbone(resolve_backbone(model_args.model_name_or_path),
                                      config_name=resolve_backbone(config_name) if config_name else None,
                                      cache_dir=model_args.cache_dir, revision=revision,
                                      **backbone_options(model_args))
        passage_encoder = copy.deepcopy(query_encoder) if config.untie_encoder else query_encoder
        return tokenizer, query_encoder, passage_encoder

    @classmethod
    def validate_config(cls, config: EncoderConfig) -> None:
        """Reject option combinations the method cannot run with (clear errors before any weight loads)."""
        config.check_bounds()  # again: the encode driver sets its overrides on a loaded config
        if config.temperature <= 0:
            raise ConfigError(f"--temperature must be > 0, got {config.temperature}")
        if config.temperature_schedule not in ("fixed", "annealed"):
            raise ConfigError(f"--temperature_schedule must be 'fixed' or 'annealed', "
                             f"got {config.temperature_schedule!r}")
        floor = cls.annealing(config)[1]
        if config.temperature_schedule == "annealed" and config.temperature < floor:
            if cls.annealing_flags:
                flag = cls.annealing_flags[1]
                raise ConfigError(f"--temperature {config.temperature} is below {flag} {floor}: the annealed "
                                  f"schedule never goes below its floor, so training would run at {floor} "
                                  f"throughout; raise --temperature or lower {flag}")
            raise ConfigError(f"--temperature {config.temperature} is below the floor {floor} of "
                              f"{cls.registered_name}'s annealed schedule (MVR eq. 8's value; only mvr sets it, with "
                              f"--mvr_min_temperature), so training would run at {floor} throughout: raise "
                              f"--temperature to at least {floor}, or use --temperature_schedule fixed")
        if cls.pools_tokens and config.pooling not in POOLINGS:
            raise ConfigError(f"{cls.registered_name}: --pooling must be one of {', '.join(POOLINGS)}, "
                              f"got {config.pooling!r}")
        if config.padding_side not in PADDING_SIDES:
            raise ConfigError(f"--padding_side must be one of {', '.join(PADDING_SIDES)}, got {config.padding_side!r}")
        custom = [f"--{name} {getattr(config, name)}" for name in ("padding_side", "append_eos_token",
                                                                  "add_special_tokens")
                  if getattr(config, name) != getattr(DEFAULTS, name)]
        if custom and not cls.tevatron_tokenization:
            raise ConfigError(f"{cls.registered_name} builds its own input sequences: {', '.join(custom)} "
                              "applies to dpr only")

    @classmethod
    def prepare_backbone(
        cls,
        config: EncoderConfig,
        tokenizer: PreTrainedTokenizerBase,
        query_encoder: PreTrainedModel,
        passage_encoder: PreTrainedModel,
    ) -> None:
        """Hook run once on a fresh backbone (e.g. to add special tokens). Default: nothing."""

    @property
    def is_lora(self) -> bool:
        """True when the backbone(s) train LoRA adapters (see :mod:`multiview_plugin.modeling.lora`)."""
        return is_lora(self.query_encoder)

    def activation_checkpointing_enable(self, activation_checkpointing_kwargs: dict | None = None,
                                        every_n_layers: int = 1, offload: bool = False) -> None:
        """``--gradient_checkpointing`` (the Trainer calls this): recompute the backbones' activations in the
        backward pass. LoRA backbones also make their input embeddings require grad (as Tevatron), so gradients
        reach the adapters through checkpointed layers whose frozen inputs need none."""
        for encoder in {id(e): e for e in (self.query_encoder, self.p_encoder)}.values():
            backbone = encoder.get_base_model() if is_lora(encoder) else encoder
            if hasattr(backbone, "activation_checkpointing_enable"):
                backbone.activation_checkpointing_enable(activation_checkpointing_kwargs=activation_checkpointing_kwargs,
                                                         every_n_layers=every_n_layers, offload=offload)
            else:  # older transformers
                backbone.gradient_checkpointing_enable(gradient_checkpointing_kwargs=activation_checkpointing_kwargs)
            if is_lora(encoder):
                backbone.enable_input_require_grads()

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs: dict | None = None, **kwargs: Any) -> None:
        """The name older Trainers call: :meth:`activation_checkpointing_enable`."""
        self.activation_checkpointing_enable(gradient_checkpointing_kwargs, **kwargs)


def duplicate_positive_mask(keys: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """(Q, P) True where candidate p has the same content key as query q's positive but is not that positive:
    an in-batch false negative (e.g. two questions about one SQuAD paragraph in the batch).

    >>> duplicate_positive_mask(torch.tensor([7, 1, 7, 2]), torch.tensor([0, 2])).tolist()
    [[False, False, True, False], [True, False, False, False]]
    """
    same = keys.unsqueeze(0) == keys[target].unsqueeze(1)
    same[torch.arange(len(target), device=keys.device), target] = False
    return same
