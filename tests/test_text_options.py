"""multiview_plugin.text_options: each shared text option's default is written once, in TextOptions; the saved
config, the train flags, the formatter and the encode driver take it from there (the encode driver: None)."""

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
from multiview_plugin.text_options import DEFAULTS, OPTION_NAMES, SHARED_FIELDS, TextOptions

PACKAGE = Path(__file__).resolve().parents[1] / "multiview_plugin"
SOURCE = PACKAGE / "text_options.py"
# parameters that share a name with a shared option but mean something else
UNRELATED = {("scoring.py", "local_variation", "normalize"),  # Local Variation on raw scores
             ("doc2query.py", "GenerateArguments", "passage_max_len")}  # the doc2query generator's input


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


def literal_defaults(path: Path) -> list[str]:
    """Where ``path`` writes a default of a shared option as a literal: a class attribute (a dataclass field, or
    ``field(default=...)``), a parameter default, or ``getattr(x, "option", literal)``."""
    found = []

    def literal(node: ast.AST | None) -> bool:
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "field":
            node = next((k.value for k in node.keywords if k.arg == "default"), None)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "_option" and node.args:
            node = node.args[0]  # text_options' own field helper
        return isinstance(node, ast.Constant) and node.value is not None

    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                        and stmt.target.id in OPTION_NAMES and literal(stmt.value)
                        and (path.name, node.name, stmt.target.id) not in UNRELATED):
                    found.append(f"{path.name}:{stmt.lineno} {node.name}.{stmt.target.id}")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args.args + node.args.kwonlyargs
            defaults = [None] * (len(node.args.args) - len(node.args.defaults)) + node.args.defaults
            defaults += node.args.kw_defaults
            for arg, value in zip(args, defaults):
                if (arg.arg in OPTION_NAMES and literal(value)
                        and (path.name, node.name, arg.arg) not in UNRELATED):
                    found.append(f"{path.name}:{node.lineno} {node.name}({arg.arg}=...)")
        elif (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr" and len(node.args) == 3
              and isinstance(node.args[1], ast.Constant) and node.args[1].value in OPTION_NAMES
              and literal(node.args[2])):
            found.append(f"{path.name}:{node.lineno} getattr(..., {node.args[1].value!r}, ...)")
    return found


def test_no_module_writes_a_shared_default_again():
    found = [hit for p in sorted(PACKAGE.rglob("*.py")) if p != SOURCE for hit in literal_defaults(p)]
    assert found == []


def test_the_check_can_fail(tmp_path):
    fake = tmp_path / "config.py"
    fake.write_text("from dataclasses import dataclass, field\n\n@dataclass\nclass C:\n    normalize: bool = False\n"
                    "    pooling: str = field(default='cls')\n\n\ndef f(padding_side='right'):\n"
                    "    return getattr(f, 'query_max_len', 32)\n")
    assert len(literal_defaults(fake)) == 4
    # the one place they are written (pad_to_multiple_of's default is None)
    assert len(literal_defaults(SOURCE)) == len(dataclasses.fields(TextOptions)) - 1
