"""The drivers' command-line plumbing; it lives in :mod:`multiview_plugin.cli` (re-exported here)."""

import logging

from multiview_plugin.cli import cli, parse_dataclasses, setup_logging

logger = logging.getLogger("multiview_plugin")


def cap_depth(depth: int, num_docs: int, flag: str) -> int:
    """``depth`` (``--hits``, ``--depth``) capped at the ``num_docs`` documents searched, saying so in a log line:
    a depth past the collection returns no more documents, and would only allocate wider result arrays."""
    if depth > num_docs:
        logger.info("%s %d exceeds the %d documents searched: at most %d per query", flag, depth, num_docs,
                    num_docs)
        return max(1, num_docs)
    return depth


__all__ = ["cap_depth", "cli", "parse_dataclasses", "setup_logging"]
