"""The built-in methods' typed options, the ``--mvr_*``, ``--mlr_*``, ``--mebert_*`` and ``--dcsr_*`` flags, apart
from their encoders: this module imports no torch, so the train driver's ``--help`` lists every method's flags
without loading a model (``registry.BUILTIN_OPTIONS`` names these classes). Each encoder module imports its class
from here and names it in ``options_class``; the choices below are the values the encoders check saved configs
against."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from multiview_plugin.bounds import MAX_PER_ITEM
from multiview_plugin.modeling.options import MethodOptions, option
from multiview_plugin.text_options import DEFAULT_ALPHA, MIN_TEMPERATURE

# mvr
VIEW_FORMS = ("paper", "residual", "region")
RESIDUAL_FORMS = ("residual", "region")  # text encoded as dpr encodes it, read-only viewers, gated residual views
REGION_INITS = ("sentences", "segments", "kmeans")
VIEWERS = ("on", "off")
VIEWER_SCOPES = ("full", "segments")
VIEW_INITS = ("none", "sentences", "segments", "kmeans")
DEFAULT_GATE_LEARNING_RATE = 1e-3


@dataclass(eq=False)
class MvrOptions(MethodOptions):
    """MVR's options, the ``--mvr_*`` flags (Zhang et al., 2022)."""

    prefix: ClassVar[str] = "mvr_"
    num_views: int = option(8, "MVR: number k of document viewer tokens [VIE1]..[VIEk] (paper best: 8).",
                            bounds=(1, MAX_PER_ITEM))
    lam: float = option(0.01, "MVR: weight lambda of the local uniformity loss (paper: 0.01).", flag="mvr_lambda",
                        bounds=(0.0, None))
    alpha: float = option(DEFAULT_ALPHA, "Annealed temperature: decay rate alpha per epoch (MVR paper: 0.1).",
                          bounds=(0.0, None))
    min_temperature: float = option(MIN_TEMPERATURE, "Annealed temperature: floor of tau (MVR paper: 0.3).")
    viewer_init: str = option(
        "random",
        "MVR: how new viewer-token embeddings start: 'random' (the paper: initialised like "
        "the backbone's embeddings) or 'cls' (copies of the [CLS] embedding).",
        choices=("random", "cls"))
    views: str = option(
        "paper",
        "MVR: what a document view is. 'paper': the last-layer state of viewer token i (eq. 3). "
        "'residual' (for mean-pooled backbones such as all-MiniLM-L6-v2): the document text is encoded "
        "exactly as dpr encodes it (the viewers are appended as read-only tokens: they attend to the text, "
        "the text does not attend to them), and view i = pool(text) + g_i * h(viewer i) with a learned gate "
        "g_i that starts at 0, so an untrained model scores exactly like dpr with the same --pooling; "
        "queries are pooled like dpr's. 'region': the residual form with region bases, named for what it "
        "computes (needs --mvr_view_init segments, sentences or kmeans; with segments: 'segment views + MVR "
        "viewers', view i = normalise(mean of segment i + g_i * h(viewer i))): region pooling with a gated viewer "
        "residual, not the paper's MVR; the same model as 'residual' with that --mvr_view_init.",
        choices=VIEW_FORMS)
    viewers: str = option(
        "on",
        "MVR --mvr_views region: 'on' (default): view i = normalise(b_i + g_i * h(viewer i)), the region mean "
        "plus the gated viewer residual. 'off': the ablation without viewers: no viewer tokens are read and no "
        "gates exist, view i = normalise(b_i), the mean of region i's text token states (what the viewers add "
        "is the difference between the two).",
        choices=VIEWERS)
    gate_learning_rate: float | None = option(
        None,
        "MVR --mvr_views residual: learning rate of the view gates g_i (default 1e-3: at the "
        "backbone's 2e-5 they barely leave 0 within a few thousand steps, so the views never diverge).",
        bounds=(0.0, None))
    viewer_positions: str = option(
        "shared",
        "MVR: 'shared' (the paper: every viewer at position id 0, text from 1) or 'distinct' "
        "(viewers at 0..k-1, text from k). Backbones whose position 0 is an attention sink (e.g. "
        "all-MiniLM-L6-v2) map all shared-position viewers to one state (Local Variation ~ 0); "
        "'distinct' keeps the views apart.",
        choices=("shared", "distinct"))
    balance_weight: float = option(
        0.0,
        "MVR: weight of a load-balancing term on the view assignment, as in mixture-of-experts routing (Switch "
        "Transformer, Fedus et al. 2021): k * sum_i f_i * P_i over the batch's queries, with P_i the mean softmax "
        "probability of view i over the positive passage's views (at the loss's temperature) and f_i the "
        "fraction of queries whose best view is i. 1 when the views share the queries evenly, up to k when one "
        "view takes every query. Default 0: the paper's loss, unchanged.")
    viewer_scope: str = option(
        "full",
        "MVR --mvr_views residual: what each read-only viewer attends to. 'full' (default): the whole passage "
        "text. 'segments': the passage's real tokens ([CLS] and [SEP] included) are cut into k contiguous, "
        "near-equal segments, floor(i*n/k) .. floor((i+1)*n/k) - 1 for viewer i (0-based), and viewer i attends "
        "only to its own segment and itself (a passage of fewer than k tokens: a viewer whose segment is empty "
        "attends to the whole text). The text never attends to the viewers either way, so an untrained model "
        "still scores exactly like dpr.",
        choices=VIEWER_SCOPES)
    sentence_distill_weight: float = option(
        0.0,
        "MVR --mvr_views residual: weight w of a sentence-coverage term distilling the views toward the passage's "
        "sentence views: w * mean_j (1 - max_i cos(v_i, s_j)) over each training passage, with s_j the mean of "
        "sentence j's text token states from the same forward pass (as --dcsr_sentence_pooling mean forms its "
        "sentence views), finished like the views and detached (a teacher). Every sentence should be covered by "
        "some view, which pushes the views apart toward distinct sentences. Logged as loss_distill; training "
        "only (encoding is unchanged). Default 0: off.")
    view_init: str = option(
        "none",
        "MVR --mvr_views residual: what view i is before its viewer adds anything (its base b_i; view i = b_i + "
        "g_i * h(viewer i), the gates g_i start at 0, so at step 0 view i is b_i). 'none' (default): every b_i is "
        "pool(text), dpr's passage vector (the k views start identical). 'sentences': b_i is the mean of sentence "
        "i's text token states (dcsr's --dcsr_sentence_pooling mean sentence view); a passage of more than k "
        "sentences gives the last view sentences k..S together, one of fewer gives its spare views pool(text); "
        "the sentences are found at encoding too. 'segments': b_i is the mean of the i-th of k contiguous "
        "near-equal token segments (--mvr_viewer_scope segments' segments). 'kmeans': b_i is the mean of the "
        "token states of cluster i of a spherical k-means of the passage's token states (initialised from the "
        "segments, a few deterministic iterations without gradient; an empty cluster gives pool(text)). Not the "
        "viewer-token embeddings: that is --mvr_viewer_init.",
        choices=VIEW_INITS)
    init_from: str | None = option(
        None,
        "MVR: a model folder saved by this package (e.g. a trained dcsr --dcsr_sentence_pooling mean model, or a "
        "dpr --pooling cls model for --mvr_views paper) whose backbone and tokenizer this model starts from "
        "instead of --model_name_or_path's (the viewer tokens are added to them); a staged start. Its "
        "--untie_encoder must match; a folder that is not such a model is refused. Only the path is saved.")
    diversity_weight: float = option(
        0.0,
        "MVR: weight w of a diversity term between each training passage's views: w * the mean pairwise cosine "
        "of its k views (off the diagonal), averaged over the batch's passages (positives and negatives), "
        "logged as loss_diversity. Pushes a passage's views apart. Default 0: off.")


# mlr
POOLINGS = ("max", "self_contrastive", "average", "scalar_mix")


@dataclass(eq=False)
class MlrOptions(MethodOptions):
    """MLR's options, the ``--mlr_*`` flags."""

    prefix: ClassVar[str] = "mlr_"
    layers: str | None = option(
        None,
        "MLR: comma-separated 1-based layers (0 = embeddings), must include the last; default "
        "scaled to the depth n: last four for --mlr_pooling max (BERT-base 12,11,10,9), n and "
        "round(10n/12) for the single-vector poolings (BERT-base 12,10).")
    pooling: str = option(
        "self_contrastive",
        "MLR: 'max' (multi-vector, every layer indexed), 'self_contrastive' (single-vector, "
        "the paper's best: last layer indexed), 'average' or 'scalar_mix' (learned layer weights).",
        choices=POOLINGS)
    layer_pooling: str = option(
        "cls",
        "MLR: how a layer's vector is read from its token states (queries: the last layer, the "
        "same way): 'cls' (the first token, the paper for BERT) or 'mean' (masked mean: the paper's form "
        "for T5, and the one to use for mean-pooled backbones such as all-MiniLM-L6-v2). T5 is always "
        "'mean'.",
        choices=("cls", "mean"))
    lam: float = option(
        1.0, "MLR self-contrastive: weight of the regulariser (paper: 1.0 for NQ/TriviaQA/SQuAD, 0.01 for MS MARCO).",
        flag="mlr_lambda", bounds=(0.0, None))
    reg_temperature: float | None = option(
        None, "MLR self-contrastive: regulariser temperature (default: --temperature).")


@dataclass(eq=False)
class MebertOptions(MethodOptions):
    """ME-BERT's options, the ``--mebert_*`` flags."""

    prefix: ClassVar[str] = "mebert_"
    num_vectors: int = option(8, "ME-BERT: number k of leading last-layer token states per document.",
                              bounds=(1, MAX_PER_ITEM))


# dcsr
SENTENCE_POOLINGS = ("marker", "mean", "independent")
TRAIN_UNITS = ("sentence", "passage")


@dataclass(eq=False)
class DcsrOptions(MethodOptions):
    """DCSR's options, the ``--dcsr_*`` flags (Wu et al., 2022)."""

    prefix: ClassVar[str] = "dcsr_"
    in_passage_negatives: int = option(
        1,
        "DCSR: in-passage negatives per query, sentences of the positive passage without an "
        "answer (a hard-negative passage's sentences stand in when there are too few). Paper: 1.",
        bounds=(0, MAX_PER_ITEM))
    bm25_negatives: int = option(
        1,
        "DCSR: hard-negative sentences per query, one random sentence from each of this many "
        "hard-negative passages of the train file (paper: 1; Table 4 also tries 2 with no in-passage). "
        "Positives are answer sentences; for datasets without answers (MS MARCO, BEIR) the sentence "
        "sharing the most content words with the query. --train_group_size is not used by dcsr's sentence "
        "training (it is by --dcsr_train_unit passage).",
        bounds=(0, MAX_PER_ITEM))
    marker_init: str = option(
        "random",
        "DCSR: how the new <sent> marker embedding starts: 'random' (at the backbone's "
        "embedding scale) or 'cls' (a copy of the [CLS] embedding).",
        choices=("random", "cls"))
    sentence_pooling: str = option(
        "marker",
        "DCSR: what a sentence vector is. 'marker' (the paper): the state of the <sent> marker "
        "put before the sentence in the whole-passage encoding. 'mean': the masked mean of the sentence's "
        "own token states in the whole-passage encoding, without markers (so an untrained mean-pooled "
        "backbone such as all-MiniLM-L6-v2 already gives good sentence vectors). 'independent' (a "
        "baseline without context): each sentence encoded alone and mean-pooled.",
        choices=SENTENCE_POOLINGS)
    train_unit: str = option(
        "sentence",
        "DCSR: what a training example ranks. 'sentence' (the paper): each query's positive "
        "sentence against its sentence negatives (--dcsr_in_passage_negatives, --dcsr_bm25_negatives) and "
        "the batch's other selected sentences. 'passage': whole passages, each scored by its best sentence "
        "(max over its sentence vectors), against the batch's other passages and --train_group_size - 1 "
        "hard-negative passages per query; no positive sentence has to be guessed, so use it where the "
        "data has no answer strings (BEIR, MS MARCO), where the best-overlap sentence is a noisy label. "
        "The two sentence-negative options do not apply to 'passage' and must stay at their defaults.",
        choices=("sentence", "passage"))
    passage_view: bool = option(
        False,
        "DCSR (a variant, not the paper): also index the whole passage as one more view, pooled by "
        "--pooling from the same encoding and placed after the passage's sentence views, so a passage "
        "scores max(its passage vector, its best sentence). With --pooling mean the untrained model "
        "already holds dpr's vector beside the sentences. Not with --dcsr_sentence_pooling independent.")
