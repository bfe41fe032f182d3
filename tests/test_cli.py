"""Tests of multiview_plugin/cli.py: the drivers' argument parsing, one-line errors and depth caps."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from multiview_plugin.cli import cap_depth, cli, parse_dataclasses
from multiview_plugin.errors import ConfigError


def test_cli_turns_our_errors_and_os_errors_into_one_line_and_status_2(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("MULTIVIEW_TRACEBACK", raising=False)

    @cli
    def main(kind: str) -> int | None:
        if kind == "config":
            raise ConfigError("--flag: bad value")
        if kind == "os":
            open(tmp_path / "missing.txt")
        if kind == "bug":
            raise KeyError("a bug is a traceback")
        return None

    assert main("ok") == 0
    assert main("config") == 2
    assert capsys.readouterr().err == "error: --flag: bad value\n"
    assert main("os") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(tmp_path / "missing.txt") in err and err.count("\n") == 1
    with pytest.raises(KeyError):
        main("bug")
    monkeypatch.setenv("MULTIVIEW_TRACEBACK", "1")
    with pytest.raises(ConfigError):
        main("config")


def test_cap_depth_caps_at_the_documents_and_says_so(caplog):
    caplog.set_level(logging.INFO, logger="multiview_plugin")
    assert cap_depth(10, 100, "--hits") == 10 and not caplog.text
    assert cap_depth(5_000_000, 8, "--hits") == 8
    assert "--hits 5000000 exceeds the 8 documents searched: at most 8 per query" in caplog.text
    assert cap_depth(10, 0, "--depth") == 1


@dataclasses.dataclass
class _Options:
    size: int = 3
    name: str = "a"


def test_parse_dataclasses_reads_flags_and_refuses_unknown_ones():
    (options,) = parse_dataclasses((_Options,), ["--size", "7"])
    assert options == _Options(size=7, name="a")
    with pytest.raises(ConfigError, match=r"^unrecognised arguments: --nonsense 1 \(see --help\)$"):
        parse_dataclasses((_Options,), ["--nonsense", "1"])


def test_cap_depth_refuses_a_depth_below_one():
    """search --hits 0 / -1 gave one hit per query (the depth was raised to 1 without a word)."""
    from multiview_plugin.cli import cap_depth
    from multiview_plugin.errors import ConfigError

    for bad in (0, -1):
        with pytest.raises(ConfigError, match=f"--hits {bad}: expected a number of documents >= 1"):
            cap_depth(bad, 10, "--hits")
    assert cap_depth(20, 10, "--hits") == 10 and cap_depth(3, 10, "--hits") == 3
