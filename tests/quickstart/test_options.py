"""Tests of multiview_plugin/quickstart/options.py: the quickstart's systems and command line."""

from __future__ import annotations

import pytest

from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.cli import parse_dataclasses
from multiview_plugin.quickstart.options import BM25, DEFAULT_SYSTEMS, SYSTEMS, build_parser, train_seed
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
    assert set(DEFAULT_SYSTEMS) <= set(SYSTEMS)


def test_the_parser_defaults_and_refuses_unknown_systems(capsys):
    args = build_parser().parse_args([])
    assert args.systems == DEFAULT_SYSTEMS and args.steps == 40 and args.hybrid_alphas[-1] == 1.0
    assert build_parser().parse_args(["--systems", BM25, "dpr"]).systems == [BM25, "dpr"]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--systems", "nonsense"])
    assert "invalid choice: 'nonsense'" in capsys.readouterr().err


def test_num_entities_sizes_the_generated_data_and_is_refused_elsewhere(tmp_path):
    """--num_entities changes the generated corpus and held-out set; with another --data it would do nothing, so
    it is refused; a size the generator cannot make is one line."""
    from multiview_plugin.quickstart.__main__ import main, prepare_data

    def sizes(*flags):
        args = build_parser().parse_args(list(flags))
        files = prepare_data(args, tmp_path / f"data{len(flags)}-{'-'.join(flags)}")
        lines = {k: sum(1 for _ in files[k].open(encoding="utf-8")) for k in ("corpus", "eval_queries")}
        return lines["corpus"], lines["eval_queries"]

    default, larger = sizes(), sizes("--num_entities", "120")
    assert default == sizes("--num_entities", "60")  # the documented default
    assert larger[0] > default[0] and larger[1] > default[1]
    with pytest.raises(SystemExit, match="not --data squad"):
        main(["--data", "squad", "--num_entities", "30", "--output_dir", str(tmp_path / "x")])
    with pytest.raises(SystemExit, match=r"^error: --num_entities: num_entities must be at least 18"):
        main(["--num_entities", "5", "--output_dir", str(tmp_path / "y")])
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
