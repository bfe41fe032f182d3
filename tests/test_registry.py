"""A third-party method installed as a package with a ``multiview_plugin.encoders`` entry point brings its own
flag: the train driver accepts it, the model trains with it, and it is saved in multiview_config.json."""

import json
import sys
import textwrap

import pytest
import torch

from multiview_plugin import registry
from multiview_plugin.arguments import model_arguments, option_owners
from multiview_plugin.driver.train import main as train_main
from multiview_plugin.errors import ConfigError
from multiview_plugin.modeling import load_encoder

PLUGIN = '''
"""A toy method: dpr whose passage vectors are scaled by --toy_scale (so the flag changes every score)."""
from dataclasses import dataclass
from typing import ClassVar

from multiview_plugin.errors import ConfigError
from multiview_plugin.modeling.dpr import DprEncoder
from multiview_plugin.modeling.options import MethodOptions, option


@dataclass
class ToyOptions(MethodOptions):
    prefix: ClassVar[str] = "toy_"
    scale: float = option(1.0, "Toy: factor applied to every passage vector.")


class ToyEncoder(DprEncoder):
    options_class = ToyOptions

    @classmethod
    def validate_config(cls, config):
        super().validate_config(config)
        if config.options.scale <= 0:
            raise ConfigError(f"--toy_scale must be > 0, got {config.options.scale}")

    def encode_passage(self, batch):
        reps, mask = super().encode_passage(batch)
        return reps * self.config.options.scale, mask
'''


@pytest.fixture
def toy_plugin(tmp_path, monkeypatch):
    """Install the toy method as a package with a dist-info entry point on a temporary sys.path entry."""
    site = tmp_path / "site"
    (site / "toy_method").mkdir(parents=True)
    (site / "toy_method" / "__init__.py").write_text(PLUGIN)
    info = site / "toy_method-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-method\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent("""\
        [multiview_plugin.encoders]
        toy = toy_method:ToyEncoder
        """))
    monkeypatch.syspath_prepend(str(site))
    # a fresh look at the entry points, and the registry restored afterwards
    monkeypatch.setattr(registry.ENCODERS, "_items", dict(registry.ENCODERS._items))
    monkeypatch.setattr(registry.ENCODERS, "_entry_points_loaded", False)
    yield "toy"
    sys.modules.pop("toy_method", None)


def test_an_entry_point_method_brings_its_flag_trains_and_saves_it(toy_plugin, tiny_bert, train_file, tmp_path):
    assert "toy" in registry.ENCODERS.names()
    assert option_owners()["toy_scale"] == "toy"
    fields = model_arguments().__dataclass_fields__
    assert fields["toy_scale"].default == 1.0 and "factor applied" in fields["toy_scale"].metadata["help"]

    runs = {}
    for scale in ("1.0", "3.0"):
        out = tmp_path / f"toy{scale}"
        rc = train_main(["--model_name", "toy", "--model_name_or_path", str(tiny_bert), "--toy_scale", scale,
                         "--dataset_path", str(train_file), "--output_dir", str(out), "--max_steps", "3",
                         "--per_device_train_batch_size", "4", "--train_group_size", "2", "--report_to", "none",
                         "--save_strategy", "no", "--seed", "7", "--dataloader_num_workers", "0",
                         "--query_max_len", "16", "--passage_max_len", "32", "--logging_steps", "1"])
        assert rc == 0
        saved = json.loads((out / "multiview_config.json").read_text())
        assert saved["model_name"] == "toy" and saved["options"] == {"toy_scale": float(scale)}
        runs[scale] = out
    # the flag took effect in training (another loss from the same seed and data) and in the saved model
    first_loss = {s: json.loads((o / "trainer_state.json").read_text())["log_history"][0]["loss"]
                  for s, o in runs.items()}
    assert first_loss["1.0"] != pytest.approx(first_loss["3.0"], rel=1e-3)
    model = load_encoder(runs["3.0"]).eval()
    assert type(model).__name__ == "ToyEncoder" and model.config.options.scale == 3.0
    batch = model.formatter.passages(["paris is the capital of france"])
    with torch.no_grad():
        scaled, _ = model.encode_passage(batch)
        model.config.options.scale = 1.0
        plain, _ = model.encode_passage(batch)
    torch.testing.assert_close(scaled, 3.0 * plain)


def test_an_entry_point_methods_flag_is_refused_for_another_method(toy_plugin):
    from multiview_plugin.arguments import refuse_foreign_options

    registry.ENCODERS.names()
    with pytest.raises(ConfigError, match="--toy_scale belongs to toy, not --model_name mvr"):
        refuse_foreign_options(["--model_name", "mvr", "--toy_scale", "2"], "mvr")


def test_the_builtins_are_listed_as_they_register_themselves():
    """registry.py lists each built-in as "module:Class"; that class registers itself under the listed name, and
    every @register_* in the package is listed."""
    import importlib
    import re
    from pathlib import Path

    for table, builtins in ((registry.ENCODERS, registry.BUILTIN_ENCODERS), (registry.LOSSES, registry.BUILTIN_LOSSES)):
        for name, target in builtins.items():
            module, _, attribute = target.partition(":")
            cls = getattr(importlib.import_module(module), attribute)
            assert table.get(name) is cls and cls.registered_name == name
    package = Path(registry.__file__).parent
    names = set(re.findall(r'@register_(?:encoder|loss)\("(\w+)"\)',
                           "".join(p.read_text(encoding="utf-8") for p in package.rglob("*.py"))))
    assert names == set(registry.BUILTIN_ENCODERS) | set(registry.BUILTIN_LOSSES)


def test_a_lookup_loads_a_builtin_method_without_importing_modeling_first():
    """Only the registry imported: a lookup by name imports the method's module, as an entry point's."""
    import subprocess

    code = ("import sys\nfrom multiview_plugin.registry import get_encoder_class, get_loss_class\n"
            "assert 'multiview_plugin.modeling' not in sys.modules and 'multiview_plugin.losses' not in sys.modules\n"
            "print(get_encoder_class('mvr').__name__, get_loss_class('mlr_self_contrastive').__name__)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["MvrEncoder", "SelfContrastiveLoss"]
