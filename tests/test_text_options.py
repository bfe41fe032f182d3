"""multiview_plugin.text_options: each shared text option's default is written once, in TextOptions; the saved
config, the train flags, the formatter and the encode driver take it from there (the encode driver: None). The
search and Ray options several modules share are written once too, as a constant of the module they belong to
(SOURCE_CONSTANTS); the same scan checks both."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest

from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.driver.encode import EncodeArguments
from multiview_plugin.modeling.config import EncoderConfig
from multiview_plugin.modeling.formatting import InputFormatter
from multiview_plugin.text_options import DEFAULTS, OPTION_NAMES, OTHER_DEFAULTS, SHARED_FIELDS, TextOptions

PACKAGE = Path(__file__).resolve().parents[1] / "multiview_plugin"
SOURCE = PACKAGE / "text_options.py"
# parameters that share a name with a shared option but mean something else
UNRELATED = {
    ("scoring.py", "local_variation", "normalize"),  # Local Variation on raw scores
    ("scoring.py", "local_variation", "temperature"),  # Local Variation's softmax tau (--lv_temperature)
    ("encoding/doc2query.py", "GenerateArguments", "passage_max_len"),  # the doc2query generator's input
    # HasAns' softmax over sentence scores: 1 (raw scores) where the index records no training temperature
    ("search/aggregators.py", "log_one_minus_softmax", "temperature"),
    ("search/aggregators.py", "__init__", "temperature"),
}


def test_the_options():
    assert set(OPTION_NAMES) == {"pooling", "normalize", "query_max_len", "passage_max_len", "query_prefix",
                                 "passage_prefix", "pad_to_multiple_of", "padding_side", "append_eos_token",
                                 "add_special_tokens"}
    assert all(f.metadata["help"] for f in SHARED_FIELDS.values())


def _defaults(cls) -> dict:
    return {f.name: f.default for f in dataclasses.fields(cls) if f.name in OPTION_NAMES}


@pytest.mark.parametrize("cls", [EncoderConfig, ModelArguments, DataArguments])
def test_every_holder_has_the_one_default(cls):
    holder = _defaults(cls)
    assert holder and holder == {k: getattr(DEFAULTS, k) for k in holder}


def test_every_shared_option_is_in_the_config_the_train_flags_and_the_encode_overrides():
    train = set(_defaults(ModelArguments)) | set(_defaults(DataArguments))
    assert set(_defaults(EncoderConfig)) == train == set(OPTION_NAMES)
    assert _defaults(EncodeArguments) == dict.fromkeys(OPTION_NAMES)  # None: not given


def test_the_formatter_takes_its_defaults_from_the_source():
    params = inspect.signature(InputFormatter.__init__).parameters
    assert {n: params[n].default for n in OPTION_NAMES if n in params} == {
        n: getattr(DEFAULTS, n) for n in OPTION_NAMES if n in params}


# the other options several modules share, each written once as a constant of the module it belongs to: the
# option's names (flag and parameter) -> (that module, the constant)
SOURCE_CONSTANTS = {
    ("hybrid_alpha", "alpha"): ("multiview_plugin.search.hybrid", "DEFAULT_ALPHA"),
    ("index_factory",): ("multiview_plugin.index.meta", "DEFAULT_INDEX_FACTORY"),
    ("query_batch_size",): ("multiview_plugin.search._searcher", "DEFAULT_QUERY_BATCH_SIZE"),
    ("ray_max_restarts", "max_restarts"): ("multiview_plugin.ray_runtime", "DEFAULT_MAX_RESTARTS"),
    ("hybrid_depth",): ("multiview_plugin.search.hybrid", "DEFAULT_DEPTH"),
}
# every option whose default is written once: the text options and the other shared defaults of text_options;
# a parameter named ``separator`` is the passage field separator under a shorter name; SOURCE_CONSTANTS' options
CHECKED = {*OPTION_NAMES, *OTHER_DEFAULTS, "separator", *(name for names in SOURCE_CONSTANTS for name in names)}


def literal(node: ast.AST | None) -> bool:
    """A literal default: a constant other than None (a negative number too), also inside ``field(default=...)``
    or text_options' own ``_option(...)``."""
    if isinstance(node, ast.Call) and (getattr(node.func, "id", None) or getattr(node.func, "attr", None)) == "field":
        node = next((k.value for k in node.keywords if k.arg == "default"), None)
    elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "_option" and node.args:
        node = node.args[0]
    if isinstance(node, ast.UnaryOp):
        node = node.operand
    return isinstance(node, ast.Constant) and node.value is not None


class _Finder(ast.NodeVisitor):
    """The literal defaults of the CHECKED options in one module: ``(scope, option, line, what)``, scope being the
    enclosing class or function."""

    def __init__(self) -> None:
        self.scope, self.found = ["<module>"], []

    def hit(self, name: str, value: ast.AST | None, line: int, what: str) -> None:
        if name in CHECKED and literal(value):
            self.found.append((self.scope[-1], name, line, what))

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scope.append(node.name)
        for stmt in node.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                self.hit(stmt.target.id, stmt.value, stmt.lineno, f"{node.name}.{stmt.target.id}")
        self.generic_visit(node)
        self.scope.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        args = node.args.args + node.args.kwonlyargs
        defaults = [None] * (len(node.args.args) - len(node.args.defaults)) + node.args.defaults
        defaults += node.args.kw_defaults
        self.scope.append(node.name)
        for arg, value in zip(args, defaults):
            self.hit(arg.arg, value, node.lineno, f"{node.name}({arg.arg}=...)")
        self.generic_visit(node)
        self.scope.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node: ast.Call) -> None:
        name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
        if (name == "getattr" and len(node.args) == 3 and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)):
            self.hit(node.args[1].value, node.args[2], node.lineno, f"getattr(..., {node.args[1].value!r}, ...)")
        elif name == "add_argument" and node.args and isinstance(node.args[0], ast.Constant):
            flag = str(node.args[0].value)
            default = next((k.value for k in node.keywords if k.arg == "default"), None)
            self.hit(flag.lstrip("-"), default, node.lineno, f"add_argument({flag!r}, default=...)")
        self.generic_visit(node)


def all_literal_defaults(path: Path) -> list[tuple[str, str, int, str]]:
    finder = _Finder()
    finder.visit(ast.parse(path.read_text(encoding="utf-8")))
    return finder.found


def literal_defaults(path: Path, where: str | None = None) -> list[str]:
    """Where ``path`` writes a default of a CHECKED option as a literal: a class attribute (a dataclass field, or
    ``field(default=...)``), a parameter default, an ``add_argument("--option", default=...)`` or
    ``getattr(x, "option", literal)``; UNRELATED ones left out. ``where``: the path's name in UNRELATED."""
    where = where or path.name
    return [f"{where}:{line} {what}" for scope, name, line, what in all_literal_defaults(path)
            if (where, scope, name) not in UNRELATED]


def test_no_module_writes_a_shared_default_again():
    found = [hit for p in sorted(PACKAGE.rglob("*.py")) if p != SOURCE
             for hit in literal_defaults(p, p.relative_to(PACKAGE).as_posix())]
    assert found == []


@pytest.mark.parametrize("where, scope, name", sorted(UNRELATED))
def test_each_exception_is_still_needed(where, scope, name):
    """A stale exception would hide a new duplicate of the same name there."""
    assert (scope, name) in {(s, n) for s, n, _, _ in all_literal_defaults(PACKAGE / where)}


def test_the_check_can_fail(tmp_path):
    fake = tmp_path / "config.py"
    fake.write_text("import argparse\nimport dataclasses\nfrom dataclasses import dataclass, field\n\n"
                    "@dataclass\nclass C:\n    normalize: bool = False\n"
                    "    pooling: str = field(default='cls')\n    temperature: float = dataclasses.field(default=1.0)\n"
                    "    untie_encoder: bool = False\n\n\n"
                    "def f(padding_side='right', separator=' '):\n"
                    "    p = argparse.ArgumentParser()\n    p.add_argument('--passage_field_separator', default=' ')\n"
                    "    return getattr(f, 'query_max_len', 32)\n")
    assert len(literal_defaults(fake)) == 8
    fake.write_text("def build(index_factory='Flat', alpha=0.5, *, max_restarts=3, query_batch_size=64):\n"
                    "    return getattr(build, 'hybrid_alpha', 0.5)\n")
    assert len(literal_defaults(fake)) == 5
    # the one place they are written (pad_to_multiple_of's default is None; the other defaults are constants)
    assert len(literal_defaults(SOURCE)) == len(dataclasses.fields(TextOptions)) - 1


def test_the_other_shared_defaults_come_from_the_source():
    from multiview_plugin.driver.mine_negatives import build_parser
    from multiview_plugin.encoding.doc2query import GenerateArguments

    for cls in (EncoderConfig, ModelArguments, DataArguments, EncodeArguments, GenerateArguments):
        held = {f.name: f.default for f in dataclasses.fields(cls) if f.name in OTHER_DEFAULTS}
        assert held and held == {k: OTHER_DEFAULTS[k] for k in held}, cls
    assert build_parser().get_default("passage_field_separator") == OTHER_DEFAULTS["passage_field_separator"]


def test_the_search_and_ray_defaults_come_from_their_module():
    """Each flag, field and parameter of SOURCE_CONSTANTS' options holds its module's constant."""
    import importlib

    from multiview_plugin.api import MultiViewModel
    from multiview_plugin.driver.index import build_parser as index_parser
    from multiview_plugin.driver.search import RAY_SEARCH_DEFAULTS
    from multiview_plugin.driver.search import build_parser as search_parser
    from multiview_plugin.encoding.ray_encode import RayEncodeOptions
    from multiview_plugin.index.build import IndexConfig
    from multiview_plugin.index.meta import IndexMeta
    from multiview_plugin.quickstart.options import build_parser as quickstart_parser
    from multiview_plugin.search import MultiVectorSearcher
    from multiview_plugin.search.hybrid import HybridSearcher, fuse_lists, fuse_runs
    from multiview_plugin.search.sharded import ShardedSearcher

    const = {names[0]: getattr(importlib.import_module(module), name)
             for names, (module, name) in SOURCE_CONSTANTS.items()}
    assert const == {"hybrid_alpha": 0.5, "index_factory": "Flat", "query_batch_size": 64, "ray_max_restarts": 3,
                     "hybrid_depth": 100}

    def param(fn, name):
        return inspect.signature(fn).parameters[name].default

    assert search_parser().get_default("hybrid_alpha") == const["hybrid_alpha"]
    assert all(param(f, "alpha") == const["hybrid_alpha"] for f in (fuse_lists, fuse_runs, HybridSearcher))
    assert quickstart_parser().get_default("hybrid_alpha") is None  # None: the hybrid module's constant
    assert index_parser().get_default("index_factory") == const["index_factory"] == param(IndexConfig, "index_factory")
    assert {f.name: f.default for f in dataclasses.fields(IndexMeta)}["index_factory"] == const["index_factory"]
    assert param(MultiViewModel.index, "index_factory") is None  # None: build_index's
    assert param(MultiVectorSearcher, "query_batch_size") == param(ShardedSearcher, "query_batch_size") == \
        const["query_batch_size"]
    assert search_parser().get_default("ray_max_restarts") is None  # None: not given, RAY_SEARCH_DEFAULTS' value
    assert {f.name: f.default for f in dataclasses.fields(EncodeArguments)}["ray_max_restarts"] is None  # the same
    assert RAY_SEARCH_DEFAULTS["ray_max_restarts"] == param(ShardedSearcher, "max_restarts") == \
        RayEncodeOptions().max_restarts == const["ray_max_restarts"]
    assert search_parser().get_default("hybrid_depth") == param(HybridSearcher, "depth") == const["hybrid_depth"]
    from multiview_plugin.ray_runtime import DEFAULT_ENCODE_TIMEOUT, DEFAULT_SEARCH_TIMEOUT

    assert RAY_SEARCH_DEFAULTS["ray_timeout"] == param(ShardedSearcher, "timeout") == DEFAULT_SEARCH_TIMEOUT
    assert RayEncodeOptions().timeout == DEFAULT_ENCODE_TIMEOUT
