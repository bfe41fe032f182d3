"""User-facing errors: the command-line drivers print their message (no traceback) and exit with status 2."""

from __future__ import annotations


class MultiViewError(Exception):
    """Base of errors caused by input or configuration, not by a bug."""


class ConfigError(MultiViewError, ValueError):
    """An option or option combination the method cannot run with."""


class UnknownNameError(MultiViewError, KeyError):
    """An unregistered model or loss name."""

    def __str__(self) -> str:  # KeyError would print the message in quotes
        return str(self.args[0]) if self.args else ""
