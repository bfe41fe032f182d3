"""Shared command-line plumbing: argument parsing, logging set-up and clean error exits.

A base-floor module (it imports only base modules: docs/layout.md#floors), so the library's own command-line entry
points (``data/beir.py``, ``data/msmarco.py``, ...) use it as the drivers do.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from collections.abc import Callable, Sequence

from transformers import HfArgumentParser

from multiview_plugin.errors import ConfigError, MultiViewError


class ParsedArguments:
    """A base of argument dataclasses that take part in their parsing (``ModelArguments``, whose flags come from the
    registered methods): :func:`parse_dataclasses` parses the class :meth:`current` gives, then calls
    :meth:`check_argv` with the command line."""

    @classmethod
    def current(cls) -> type:
        """The class to parse now."""
        return cls

    def check_argv(self, argv: Sequence[str]) -> None:
        """Refuse, with a ``ConfigError``, what the command line asked that these values cannot express."""


def parse_dataclasses(types: tuple, argv: Sequence[str] | None = None, driver: str | None = None,
                      ignored: tuple = ()) -> tuple:
    """Parse ``argv`` into the dataclasses; a single ``*.json`` argument is read as a config file.

    ``driver`` ('train', 'encode'): refuse the Tevatron flags that driver does not support, with what to use
    instead. ``ignored``: dataclasses whose flags are accepted but unused here (logged), as Tevatron's encode
    accepts every training flag. When the result holds model arguments, method options given for a method other
    than ``--model_name`` are refused (``check_argv``: :func:`~multiview_plugin.arguments.refuse_foreign_options`).
    """
    from multiview_plugin.tevatron_parity import refuse_unsupported

    # ModelArguments with the flags of every method registered now (a plugin may have been loaded since import);
    # the argument classes say so themselves, so this base module never imports the methods
    types = tuple(t.current() if issubclass(t, ParsedArguments) else t for t in types)
    parser = HfArgumentParser(types)
    argv = list(sys.argv[1:] if argv is None else argv)
    if driver:
        refuse_unsupported(argv, driver)
    if len(argv) == 1 and argv[0].endswith(".json"):
        parsed = tuple(parser.parse_json_file(json_file=os.path.abspath(argv[0])))
    else:
        *parsed, remaining = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
        if remaining and ignored:
            remaining = _drop_ignored(remaining, ignored)
        if remaining:
            raise ConfigError(f"unrecognised arguments: {' '.join(remaining)} (see --help)")
    for args in parsed:
        if isinstance(args, ParsedArguments):  # ModelArguments: refuse another method's options
            args.check_argv(argv)
    return tuple(parsed)


def _drop_ignored(args: list[str], ignored: tuple) -> list[str]:
    """``args`` without the flags (and values) of the ``ignored`` dataclasses, each logged."""
    from multiview_plugin.tevatron_parity import flag_name

    parser = HfArgumentParser(ignored)
    for action in parser._actions:
        action.required = False  # only recognising them here
    _, rest = parser.parse_known_args(args)
    dropped = [flag_name(t) for t in args if flag_name(t) and t not in rest]
    if dropped:
        logging.getLogger("multiview_plugin").warning(
            "ignored here (training flags; Tevatron's encode ignores them too): %s",
            " ".join(f"--{name}" for name in dropped))
    return rest


def setup_logging(level: int = logging.INFO) -> None:
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S", level=level)


def cli(main: Callable[..., int | None]) -> Callable[..., int]:
    """Run ``main``; input and configuration errors, and file-system errors (a missing file, a read-only
    folder, a full disk: the message names the path), become one ``error: ...`` line and exit status 2.

    Set ``MULTIVIEW_TRACEBACK=1`` to see the full traceback instead.
    """

    @functools.wraps(main)
    def wrapper(*args, **kwargs) -> int:
        try:
            return main(*args, **kwargs) or 0
        except (MultiViewError, OSError) as err:
            if os.environ.get("MULTIVIEW_TRACEBACK"):
                raise
            print(f"error: {err}", file=sys.stderr)
            return 2

    return wrapper
