"""Tests of multiview_plugin/modeling/persistence.py: loading backbones without running a folder's own code
(trust_remote_code=False)."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest

from multiview_plugin.driver.encode import main as encode_main
from multiview_plugin.driver.train import main as train_main
from tests.conftest import one_line, write_topics_corpus

PACKAGE = Path(__file__).resolve().parents[2] / "multiview_plugin"


COMMON = ["--train_group_size", "2", "--per_device_train_batch_size", "4", "--report_to", "none",
          "--query_max_len", "16", "--passage_max_len", "32", "--dataloader_num_workers", "0"]


def _train_args(tiny_bert: Path, train_file: Path, out: Path, *flags: str) -> list[str]:
    return ["--model_name_or_path", str(tiny_bert), "--dataset_path", str(train_file), "--output_dir", str(out),
            *COMMON, *flags]


MARKER_CODE = "from pathlib import Path\nPath(__file__).with_name('CODE_RAN').write_text('ran')\n"


def _custom_code_folder(tiny_bert: Path, folder: Path, variant: str) -> Path:
    """A copy of the tiny BERT whose config (or tokenizer config) maps Auto classes to the folder's own code,
    which would leave a CODE_RAN file if it ever ran."""
    shutil.copytree(tiny_bert, folder)
    for name in ("configuration_custom.py", "modeling_custom.py", "tokenization_custom.py"):
        (folder / name).write_text(MARKER_CODE)
    file = folder / ("tokenizer_config.json" if variant == "tokenizer" else "config.json")
    data = json.loads(file.read_text())
    if variant == "tokenizer":
        data["auto_map"] = {"AutoTokenizer": ["tokenization_custom.CustomTokenizer", None]}
    else:
        data["auto_map"] = {"AutoConfig": "configuration_custom.CustomConfig",
                            "AutoModel": "modeling_custom.CustomModel"}
        if variant == "unknown_type":
            data["model_type"] = "custom_bert"  # transformers has no class of its own: it would prompt
    file.write_text(json.dumps(data))
    return folder


@pytest.mark.parametrize("variant", ["unknown_type", "known_type", "tokenizer"])
@pytest.mark.parametrize("driver", ["train", "encode"])
def test_model_folder_with_custom_code_is_refused_not_prompted(tiny_bert, train_file, tmp_path, capsys, variant,
                                                              driver):
    """main: an unknown model_type printed transformers' 'Do you wish to run the custom code? [y/N]' prompt and
    ended in a ValueError traceback; a known one (or a custom tokenizer) loaded the built-in class in place of the
    folder's code, exit 0: silently another model."""
    folder = _custom_code_folder(tiny_bert, tmp_path / "custom", variant)
    if driver == "train":
        rc = train_main(_train_args(folder, train_file, tmp_path / "out", "--max_steps", "1"))
    else:
        rc = encode_main(["--model_name_or_path", str(folder), "--dataset_path",
                          str(write_topics_corpus(tmp_path / "corpus.jsonl")),
                          "--encode_output_path", str(tmp_path / "c.pkl")])
    captured = capsys.readouterr()
    assert "Do you wish to run the custom code" not in captured.out + captured.err
    assert rc == 2
    one_line(captured.err, "auto_map", "trust_remote_code=False")
    assert not (folder / "CODE_RAN").exists()


def test_every_from_pretrained_call_passes_trust_remote_code_false():
    """Every ``from_pretrained(...)`` call in the package says ``trust_remote_code=False`` (peft's adapters carry no
    code: their calls are exempt)."""
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "from_pretrained"):
                continue
            if "PeftModel" in ast.unparse(node.func.value):
                continue
            if not any(k.arg == "trust_remote_code" and isinstance(k.value, ast.Constant) and k.value.value is False
                       for k in node.keywords):
                missing.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not missing, missing


@pytest.mark.parametrize("options", [None, {}])
def test_load_encoder_names_the_path_and_what_a_model_folder_holds(tmp_path, options):
    """load_encoder on a missing path, a file, an empty folder: hub, JSON or tokenizer errors before."""
    from multiview_plugin.errors import ConfigError
    from multiview_plugin.modeling.persistence import load_encoder

    (tmp_path / "file").write_text("x")
    (tmp_path / "empty").mkdir()
    for name, why in (("missing", "no such folder"), ("file", "is a file"), ("empty", "an empty folder")):
        with pytest.raises(ConfigError, match=f"^{tmp_path / name}(: | ){why}.*multiview_config.json"):
            load_encoder(tmp_path / name, checkpoint_options=options)
