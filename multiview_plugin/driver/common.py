"""The drivers' command-line plumbing; it lives in :mod:`multiview_plugin.cli` (re-exported here)."""

from multiview_plugin.cli import cli, parse_dataclasses, setup_logging

__all__ = ["cli", "parse_dataclasses", "setup_logging"]
