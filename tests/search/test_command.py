"""search/command.py: the search command's flag checks and helpers, on parsed flags (the searches themselves run
end to end in tests/driver/test_search.py and tests/search/test_sharded.py)."""

from __future__ import annotations

import pytest

from multiview_plugin.driver.search import build_parser
from multiview_plugin.errors import ConfigError
from multiview_plugin.search import command


def parse(*argv: str):
    return build_parser().parse_args(list(argv))


def test_require_positive_refuses_zero_naming_the_flag():
    assert command.require_positive(3, "--hits") == 3
    with pytest.raises(ConfigError, match="--hits must be a positive"):
        command.require_positive(0, "--hits")


def test_given_ray_flags_counts_a_flag_given_at_its_default_value():
    assert command.given_ray_flags(parse("--index", "a")) == []
    default = str(command.RAY_SEARCH_DEFAULTS["ray_max_restarts"])
    assert command.given_ray_flags(parse("--index", "a", "--ray_max_restarts", default)) == ["--ray_max_restarts"]


@pytest.mark.parametrize("argv, expected", [(("--index", "a"), False), (("--index", "a,b"), True),
                                            (("--index", "@list.txt"), True),
                                            (("--index", "a", "--ray_address", "local"), True)])
def test_sharded_means_several_shards_or_ray(argv, expected):
    assert command.sharded(parse(*argv)) is expected


def test_search_depth_caps_hits_and_takes_the_deeper_hybrid_depth():
    args = parse("--index", "a", "--hits", "50", "--hybrid", "bm25", "--hybrid_depth", "80")
    assert command.search_depth(args, 1000) == 80 and args.hits == 50
    args = parse("--index", "a", "--hits", "50")
    assert command.search_depth(args, 10) == 10 and args.hits == 10


def test_aggregation_options_fall_back_to_the_recorded_temperature():
    assert command.aggregation_options(parse("--index", "a"), {"temperature": 0.5})["temperature"] == 0.5
    given = parse("--index", "a", "--hasans_temperature", "2")
    assert command.aggregation_options(given, {"temperature": 0.5})["temperature"] == 2.0


@pytest.mark.parametrize("argv, message", [
    (("--query_reps", "q.pkl", "--hybrid", "bm25"), "--hybrid needs --index"),
    (("--index", "a", "--hybrid", "bm25"), "needs --topics"),
    (("--index", "a", "--topics", "t.tsv", "--hybrid", "bm25"), "needs --bm25_corpus"),
    (("--index", "a", "--topics", "t", "--hybrid", "bm25", "--bm25_corpus", "c", "--explain", "e"), "--explain"),
    (("--index", "a", "--topics", "t", "--hybrid", "bm25", "--bm25_corpus", "c", "--hybrid_depth", "0"),
     "--hybrid_depth"),
])
def test_check_hybrid_refuses_incomplete_combinations(argv, message):
    with pytest.raises(ConfigError, match=message):
        command.check_hybrid(parse(*argv))


def test_sharded_search_refuses_explain_and_ray_flags_without_an_address(tmp_path):
    with pytest.raises(ConfigError, match="--explain"):
        command.sharded_dirs(parse("--index", "a,b", "--output", str(tmp_path / "run"), "--explain", "x"))
    with pytest.raises(ConfigError, match="ray_timeout must|--ray_timeout"):
        command.ray_options(parse("--index", "a,b", "--ray_timeout", "-1"))
