"""Typed per-method options: one dataclass per method (flags, defaults, help), the parser assembled from the
registry, typed options in the saved config, old configs still loading, and another method's options refused."""

import dataclasses
import json
import shutil
import sys
from pathlib import Path

import pytest

from multiview_plugin.arguments import (
    BaseModelArguments,
    DataArguments,
    ModelArguments,
    model_arguments,
    option_owners,
    refuse_foreign_options,
)
from multiview_plugin.driver.train import main as train_main
from multiview_plugin.errors import ConfigError
from multiview_plugin.losses import GlobalLocalLoss, SelfContrastiveLoss
from multiview_plugin.modeling import load_encoder
from multiview_plugin.modeling.config import EncoderConfig
from multiview_plugin.modeling.dcsr import DcsrOptions
from multiview_plugin.modeling.mebert import MebertOptions
from multiview_plugin.modeling.mlr import MlrOptions
from multiview_plugin.modeling.mvr import MvrOptions
from multiview_plugin.modeling.options import MethodOptions
from multiview_plugin.registry import get_encoder_class

OLD_CONFIGS = Path(__file__).resolve().parents[1] / "fixtures" / "old_configs"
OPTIONS = {"mvr": MvrOptions, "mlr": MlrOptions, "dcsr": DcsrOptions, "mebert": MebertOptions}
# one flag of each method, with a valid non-default value
A_FLAG = {"mvr": ("mvr_num_views", "3"), "mlr": ("mlr_pooling", "max"), "dcsr": ("dcsr_marker_init", "cls"),
          "mebert": ("mebert_num_vectors", "4")}


def test_each_method_declares_its_flags_next_to_its_encoder():
    for name, options in OPTIONS.items():
        assert get_encoder_class(name).options_class is options
        assert all(flag.startswith(options.prefix) for flag in options.flags())
    assert get_encoder_class("dpr").options_class is MethodOptions and not MethodOptions.flags()
    assert MvrOptions.flags()["mvr_lambda"] == "lam" and MlrOptions.flags()["mlr_lambda"] == "lam"


def test_model_arguments_are_assembled_from_the_methods_options():
    fields = {f.name: f for f in dataclasses.fields(model_arguments())}
    base = {f.name for f in dataclasses.fields(BaseModelArguments)}
    owners = option_owners()
    # the built-in methods' flags, in --help order (a method registered by another test may follow them)
    method_flags = [name for name in fields if name not in base and owners[name] in OPTIONS]
    # every method option is a flag, with the options class's default and help (one place)
    expected = [flag for options in OPTIONS.values() for flag in options.flags()]
    assert method_flags == expected
    for options in OPTIONS.values():
        for f in options.option_fields():
            flag = fields[options.flag_of(f)]
            assert flag.default == f.default and flag.metadata["help"] == f.metadata["help"]
    assert option_owners()["mvr_alpha"] == "mvr" and option_owners()["dcsr_passage_view"] == "dcsr"
    assert model_arguments() is model_arguments()  # cached while the registry is unchanged
    assert issubclass(ModelArguments, BaseModelArguments) and set(OPTIONS["mvr"].flags()) <= set(
        f.name for f in dataclasses.fields(ModelArguments))  # the class imported at start-up has them too


def test_config_holds_typed_options_and_saves_flag_names(tiny_bert, tmp_path):
    args = ModelArguments(model_name_or_path=str(tiny_bert), model_name="mvr", mvr_num_views=3, mvr_lambda=0.2)
    model = get_encoder_class("mvr").build(args, DataArguments(passage_max_len=32))
    opts = model.config.options
    assert isinstance(opts, MvrOptions) and opts.num_views == 3 and opts.lam == 0.2
    assert model.loss_fn.lam == 0.2  # the loss reads the typed field
    model.save(tmp_path / "m")
    saved = json.loads((tmp_path / "m" / "multiview_config.json").read_text())["options"]
    assert saved == {"mvr_num_views": 3, "mvr_lambda": 0.2, "mvr_alpha": 0.1, "mvr_min_temperature": 0.3,
                     "mvr_viewer_init": "random", "mvr_views": "paper", "mvr_viewers": "on",
                     "mvr_gate_learning_rate": None,
                     "mvr_viewer_positions": "shared", "mvr_balance_weight": 0.0,
                     "mvr_viewer_scope": "full", "mvr_sentence_distill_weight": 0.0, "mvr_view_init": "none",
                     "mvr_init_from": None, "mvr_diversity_weight": 0.0}
    loaded = load_encoder(tmp_path / "m").config.options
    assert loaded == opts and loaded["mvr_num_views"] == 3  # the dict view by flag name still reads
    assert saved == loaded and loaded == saved and loaded != {**saved, "mvr_num_views": 4}  # equal to the dict form
    assert loaded != MlrOptions() and MvrOptions() == MvrOptions() and MvrOptions() != MvrOptions(num_views=2)


def test_options_keep_extra_keys_like_the_lora_record():
    opts = MvrOptions.from_dict({"mvr_num_views": 2, "lora": {"r": 4}})
    assert opts.num_views == 2 and opts.extra == {"lora": {"r": 4}} and "lora" in opts
    assert opts.to_dict()["lora"] == {"r": 4} and opts.pop("lora") == {"r": 4} and "lora" not in opts
    opts["mvr_views"] = "residual"
    assert opts.views == "residual"
    with pytest.raises(KeyError):
        opts.pop("mvr_num_views")


def test_losses_read_their_methods_typed_options():
    assert GlobalLocalLoss.from_options(MvrOptions(lam=0.5)).lam == 0.5
    assert GlobalLocalLoss.from_options(DcsrOptions()).lam == MvrOptions().lam  # another method: the default
    loss = SelfContrastiveLoss.from_options(MlrOptions(lam=0.01, reg_temperature=0.2))
    assert (loss.lam, loss.reg_temperature) == (0.01, 0.2)
    assert GlobalLocalLoss.from_options({"mvr_lambda": 0.5}).lam == 0.5  # the saved dict form too


@pytest.mark.parametrize("name", ["mvr", "mlr", "dcsr", "mebert", "dpr"])
def test_old_configs_still_load(tiny_bert, tmp_path, name):
    """Configs as written before the typed options (and before mvr_views, mlr_layer_pooling, dcsr_sentence_pooling
    and the tokenisation fields existed): the missing options take their defaults, the saved ones are kept."""
    old = json.loads((OLD_CONFIGS / f"{name}.json").read_text())
    options = old["options"]
    args = {k: v for k, v in options.items() if k not in ("mvr_lambda", "mvr_alpha")}
    if name == "mvr":
        args["mvr_lambda"], args["mvr_alpha"] = options["mvr_lambda"], options["mvr_alpha"]
    model = get_encoder_class(name).build(
        ModelArguments(model_name_or_path=str(tiny_bert), model_name=name, **args),
        DataArguments(query_max_len=16, passage_max_len=32))
    folder = tmp_path / name
    model.save(folder)
    shutil.copy(OLD_CONFIGS / f"{name}.json", folder / "multiview_config.json")  # the old file, as it was
    loaded = load_encoder(folder)
    opts = loaded.config.options
    assert isinstance(opts, get_encoder_class(name).options_class)
    assert {k: opts[k] for k in options} == options
    defaults = type(opts)()
    assert all(opts[k] == defaults[k] for k in opts.keys() if k not in options)
    if name == "mvr":
        assert (opts.views, opts.viewer_positions, loaded.loss_fn.lam) == ("paper", "shared", 0.05)
        loaded.set_epoch(2)
        assert loaded.temperature == pytest.approx(max(0.3, 0.6703), abs=1e-3)  # exp(-0.2 * 2): alpha read
    # saved again: every option written, and it loads to the same options
    loaded.save(tmp_path / "again")
    assert load_encoder(tmp_path / "again").config.options == opts
    assert EncoderConfig.load(folder).options == opts


# --------------------------------------------------------------- another method's options are refused
@pytest.mark.parametrize("owner", sorted(A_FLAG))
@pytest.mark.parametrize("chosen", ["dpr", "mvr", "mlr", "dcsr", "mebert", "dce"])
def test_options_of_another_method_are_refused(owner, chosen):
    flag, value = A_FLAG[owner]
    argv = ["--model_name", chosen, "--model_name_or_path", "x", f"--{flag}", value]
    if owner == chosen:
        refuse_foreign_options(argv, chosen)  # its own flag: fine
        return
    with pytest.raises(ConfigError, match=rf"^--{flag} belongs to {owner}, not --model_name {chosen}: drop it"):
        refuse_foreign_options(argv, chosen)


def test_train_driver_refuses_another_methods_option_in_one_line(tiny_bert, train_file, tmp_path, capsys):
    out = tmp_path / "run"
    rc = train_main(["--model_name", "dpr", "--model_name_or_path", str(tiny_bert), "--dataset_path", str(train_file),
                     "--output_dir", str(out), "--mvr_num_views", "8", "--mvr_lambda=0.5", "--max_steps", "1"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and not out.exists()
    assert err == ("error: --mvr_num_views belongs to mvr; --mvr_lambda belongs to mvr, not --model_name dpr: "
                   "drop them or train that method")
    # the same from a .json config, and for a boolean flag given as --no_*
    config = tmp_path / "args.json"
    config.write_text(json.dumps({"model_name": "mvr", "model_name_or_path": str(tiny_bert), "output_dir": str(out),
                                  "dataset_path": str(train_file), "dcsr_passage_view": True}))
    assert train_main([str(config)]) == 2
    assert "--dcsr_passage_view belongs to dcsr, not --model_name mvr" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="--dcsr_passage_view belongs to dcsr"):
        refuse_foreign_options(["--no_dcsr_passage_view"], "mvr")


def test_classes_are_named_after_their_registry_names_with_no_second_name():
    from multiview_plugin import modeling
    from multiview_plugin.modeling import base, persistence

    names = [("mvr", "MvrEncoder", "MultiViewerEncoder"), ("mlr", "MlrEncoder", "MultiLayerEncoder"),
             ("dcsr", "DcsrEncoder", "ContextualSentenceEncoder"), ("dpr", "DprEncoder", "DenseEncoder"),
             ("mebert", "MebertEncoder", "MultiEmbeddingEncoder"), ("dce", "DceEncoder", "DualCrossEncoder")]
    for name, cls_name, old in names:
        cls = get_encoder_class(name)
        assert cls.__name__ == cls_name and getattr(modeling, cls_name) is cls
        assert not hasattr(modeling, old) and not hasattr(sys.modules[cls.__module__], old)  # the earlier names
        assert [n for n, v in vars(sys.modules[cls.__module__]).items() if v is cls] == [cls_name]
    # persistence lives in its own module, imported from there only
    assert not hasattr(base, "load_encoder") and not hasattr(base, "EXTRA_WEIGHTS_NAME")
    assert issubclass(modeling.MultiViewEncoder, persistence.PersistenceMixin)
