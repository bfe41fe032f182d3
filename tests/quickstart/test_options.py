"""Tests of multiview_plugin/quickstart/options.py: the quickstart's systems and command line."""

from __future__ import annotations

import pytest

from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.cli import parse_dataclasses
from multiview_plugin.quickstart.options import (
    BM25,
    DATA_DEFAULTS,
    DEFAULT_SYSTEMS,
    DESCRIPTIONS,
    SYSTEMS,
    build_parser,
    train_seed,
)
from multiview_plugin.registry import get_encoder_class


@pytest.mark.parametrize("flags, seed", [("", 42), ("--seed 7", 7), ("--seed 7 --seed=9", 9), ("--seed=3", 3),
                                         ("--mvr_lambda 0.1", 42)])
def test_train_seed_is_the_last_seed_given(flags, seed):
    assert train_seed(flags) == seed


def test_every_system_is_a_registered_method_with_flags_the_train_driver_parses():
    for name, (method, flags, trained) in SYSTEMS.items():
        get_encoder_class(method)  # raises for an unknown method
        model_args, _ = parse_dataclasses((ModelArguments, DataArguments),
                                          ["--model_name", method, "--model_name_or_path", "unused", *flags])
        assert model_args.model_name == method and isinstance(trained, bool), name
    assert set(DEFAULT_SYSTEMS) <= set(SYSTEMS) and set(DESCRIPTIONS) <= set(SYSTEMS)
    assert all(set(d["systems"]) <= set(SYSTEMS) for d in DATA_DEFAULTS.values())
    # every system of the default run says what it computes
    assert set(DEFAULT_SYSTEMS) <= set(DESCRIPTIONS)


def test_systems_steps_and_passage_length_default_per_data_set_and_read_back_from_a_recorded_command():
    """The entity data keeps its old defaults (its records' commands read back as those runs used them); flags
    given win."""
    args = build_parser().parse_args(["--data", "entities"])
    assert (args.systems, args.steps, args.passage_max_len) == \
        (["minilm-zero-shot", "dpr", "dcsr-mean", "mvr-residual"], 40, 128)
    args = build_parser().parse_args(["--steps", "7", "--passage_max_len", "64", "--systems", "dpr"])
    assert (args.data, args.systems, args.steps, args.passage_max_len) == ("squad-slice", ["dpr"], 7, 64)
    assert build_parser().parse_args(["--data", "squad", "--squad_path", "x"]).passage_max_len == 128


def test_the_untrained_segment_views_are_segment_means_with_no_viewer_contribution(tiny_bert):
    """segment-means-zero-shot is untrained mvr in the region form with its viewers off: view i = the mean of the
    i-th of 8 token segments, no viewer tokens and no gates."""
    method, flags, trained = SYSTEMS["segment-means-zero-shot"]
    margs, dargs = parse_dataclasses((ModelArguments, DataArguments),
                                     ["--model_name", method, "--model_name_or_path", str(tiny_bert), *flags])
    model = get_encoder_class(method).build(margs, dargs)
    assert not trained and (model.options.views, model.options.view_init, model.options.num_views,
                            model.options.viewers) == ("region", "segments", 8, "off")
    assert getattr(model, "view_gates", None) is None


def test_the_parser_defaults_and_refuses_unknown_systems(capsys):
    args = build_parser().parse_args([])
    assert args.data == "squad-slice" and args.systems == DEFAULT_SYSTEMS and args.hybrid_alphas[-1] == 1.0
    assert (args.steps, args.passage_max_len) == (DATA_DEFAULTS["squad-slice"]["steps"], 192)
    assert build_parser().parse_args(["--systems", BM25, "dpr"]).systems == [BM25, "dpr"]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--systems", "nonsense"])
    assert "invalid choice: 'nonsense'" in capsys.readouterr().err


def test_num_entities_sizes_the_generated_data_and_is_refused_elsewhere(tmp_path):
    """--num_entities changes the generated corpus and held-out set; with another --data it would do nothing, so
    it is refused; a size the generator cannot make is one line."""
    from multiview_plugin.quickstart.__main__ import main, prepare_data

    def sizes(*flags):
        args = build_parser().parse_args(["--data", "entities", *flags])
        files = prepare_data(args, tmp_path / f"data{len(flags)}-{'-'.join(flags)}")
        lines = {k: sum(1 for _ in files[k].open(encoding="utf-8")) for k in ("corpus", "eval_queries")}
        return lines["corpus"], lines["eval_queries"]

    default, larger = sizes(), sizes("--num_entities", "120")
    assert default == sizes("--num_entities", "60")  # the documented default
    assert larger[0] > default[0] and larger[1] > default[1]
    with pytest.raises(SystemExit, match="not --data squad"):
        main(["--data", "squad", "--num_entities", "30", "--output_dir", str(tmp_path / "x")])
    with pytest.raises(SystemExit, match=r"^error: --num_entities: num_entities must be at least 18"):
        main(["--data", "entities", "--num_entities", "5", "--output_dir", str(tmp_path / "y")])
    with pytest.raises(SystemExit, match="not --data squad-slice"):  # the default data is the SQuAD slice
        main(["--num_entities", "30", "--output_dir", str(tmp_path / "z")])
    assert not any((tmp_path / d).exists() for d in "xyz")
