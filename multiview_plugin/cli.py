"""Shared command-line plumbing: argument parsing, logging set-up and clean error exits.

A base-floor module (it imports only base modules: docs/layout.md#floors), so the library's own command-line entry
points (``data/beir.py``, ``data/msmarco.py``, ...) use it as the drivers do.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import logging
import os
import pickle
import sys
import typing
from collections.abc import Callable, Sequence
from typing import Any

from multiview_plugin.errors import ConfigError, MultiViewError, unsafe_weights_message


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


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """``--help``: the description (a module docstring) as written, and each flag's default after its help (not
    None: such a flag's help says what not giving it means)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        return action.help if action.default is None else super()._get_help_string(action)


@functools.cache
def driver_argument_parser() -> type:
    """``DriverArgumentParser``, made on first use: it subclasses transformers' ``HfArgumentParser``, and this
    module (imported by every driver and converter) imports no transformers itself, so a plain argparse
    driver's ``--help`` never loads it."""
    from transformers import HfArgumentParser

    class DriverArgumentParser(HfArgumentParser):
        """``HfArgumentParser`` whose ``--help`` groups the flags: a dataclass may name the group of each of its
        fields with a classmethod ``argument_group(name) -> (title, description) | None`` (None: the dataclass's
        own group, ``_argument_group_name``); and an optional bool (default None: "not given") takes ``--name``,
        ``--name True|False`` and ``--no_name``."""

        def error(self, message: str) -> typing.NoReturn:
            """A bad flag value (``--pooling bogus``): one line, exit status 2 (not argparse's usage block)."""
            self.exit(2, f"error: {message} (see {self.prog} --help)\n")

        def _add_dataclass_arguments(self, dtype: Any) -> None:
            hints = typing.get_type_hints(dtype)
            own = getattr(dtype, "_argument_group_name", None)
            groups: dict[str, Any] = self.__dict__.setdefault("_groups_by_title", {})  # shared by the dataclasses

            def group(title: str | None, description: str | None = None) -> Any:
                if title is None:
                    return self
                if title not in groups:
                    groups[title] = self.add_argument_group(title, description)
                return groups[title]

            chooser = getattr(dtype, "argument_group", None)
            for f in dataclasses.fields(dtype):
                if not f.init:
                    continue
                f.type = hints[f.name]
                chosen = chooser(f.name) if chooser else None
                container = group(*chosen) if chosen else group(own)
                self._parse_dataclass_field(container, f)
                if f.default is None and f.type == bool | None:
                    container.add_argument(f"--no_{f.name}", action="store_false", dest=f.name, default=None,
                                           help=f"--{f.name} False")

    return DriverArgumentParser


def __getattr__(name: str) -> Any:
    if name == "DriverArgumentParser":
        return driver_argument_parser()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build_parser(types: tuple, prog: str | None = None, description: str | None = None,
                 usage: str | None = None) -> Any:
    """The parser of the dataclasses ``types`` (``--help`` grouped, defaults shown); argument classes that take part
    in parsing give the class to parse now (``ModelArguments``: the flags of every method registered now)."""
    types = tuple(t.current() if issubclass(t, ParsedArguments) else t for t in types)
    return driver_argument_parser()(types, prog=prog, description=description, usage=usage,
                                    formatter_class=HelpFormatter)


def parse_dataclasses(types: tuple, argv: Sequence[str] | None = None, driver: str | None = None,
                      ignored: tuple | Callable[[], tuple] = (), prog: str | None = None,
                      description: str | None = None, usage: str | None = None) -> tuple:
    """Parse ``argv`` into the dataclasses; a single ``*.json`` argument is read as a config file.

    ``driver`` ('train', 'encode'): refuse the Tevatron flags that driver does not support, with what to use
    instead. ``ignored``: dataclasses (or a function returning them, called only when flags are left over) whose
    flags are accepted but unused here (logged), as Tevatron's encode accepts every training flag. When the result
    holds model arguments, method options given for a method other than ``--model_name`` are refused
    (``check_argv``: :func:`~multiview_plugin.arguments.refuse_foreign_options`). ``prog``: the usage line's command
    (``python -m multiview_plugin.driver.train``); ``description``: the text ``--help`` shows above the flags;
    ``usage``: a short usage line instead of argparse's list of every flag.
    """
    from multiview_plugin.tevatron_parity import refuse_unsupported

    # ModelArguments with the flags of every method registered now (a plugin may have been loaded since import);
    # the argument classes say so themselves, so this base module never imports the methods
    parser = build_parser(types, prog=prog, description=description, usage=usage)
    argv = list(sys.argv[1:] if argv is None else argv)
    if driver:
        refuse_unsupported(argv, driver)
    if len(argv) == 1 and argv[0].endswith(".json"):
        parsed = tuple(parser.parse_json_file(json_file=os.path.abspath(argv[0])))
    else:
        *parsed, remaining = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
        if remaining and ignored:
            remaining = _drop_ignored(remaining, ignored() if callable(ignored) else ignored)
        if remaining:
            raise ConfigError(f"unrecognised arguments: {' '.join(remaining)} (see --help)")
    for args in parsed:
        if isinstance(args, ParsedArguments):  # ModelArguments: refuse another method's options
            args.check_argv(argv)
    return tuple(parsed)


def _drop_ignored(args: list[str], ignored: tuple) -> list[str]:
    """``args`` without the flags (and values) of the ``ignored`` dataclasses, each logged."""
    from transformers import HfArgumentParser

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
        except pickle.UnpicklingError as err:  # torch.load(weights_only=True) refusing code (e.g. a LoRA adapter)
            if os.environ.get("MULTIVIEW_TRACEBACK") or "GLOBAL" not in str(err):
                raise
            print(f"error: {unsafe_weights_message('a model folder', err)}", file=sys.stderr)
            return 2

    return wrapper


def cap_depth(depth: int, num_docs: int, flag: str) -> int:
    """``depth`` (``--hits``, ``--depth``) capped at the ``num_docs`` documents searched, saying so in a log line:
    a depth past the collection returns no more documents, and would only allocate wider result arrays."""
    if depth < 1:
        raise ConfigError(f"{flag} {depth}: expected a number of documents >= 1")
    if depth > num_docs:
        logging.getLogger("multiview_plugin").info("%s %d exceeds the %d documents searched: at most %d per query",
                                                   flag, depth, num_docs, num_docs)
        return max(1, num_docs)
    return depth
