"""modeling/method_options.py: the built-in methods' options, importable without torch and the same classes the
encoders use."""

from __future__ import annotations

import subprocess
import sys

import pytest

from multiview_plugin.registry import BUILTIN_OPTIONS, get_encoder_class, get_options_class


def test_importing_the_options_loads_no_torch():
    code = ("import sys\nimport multiview_plugin.modeling.method_options as m\nfrom multiview_plugin.registry import "
            "get_options_class\nget_options_class('mvr')\nprint('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr[-500:]


@pytest.mark.parametrize("name", sorted(BUILTIN_OPTIONS))
def test_each_listed_options_class_is_its_encoders(name):
    assert get_options_class(name) is get_encoder_class(name).options_class


@pytest.mark.parametrize("name", ["dpr", "dce"])
def test_a_builtin_without_options_has_none(name):
    assert get_options_class(name) is None


def test_the_option_flags_and_choices_are_kept():
    from multiview_plugin.modeling.method_options import MlrOptions, MvrOptions

    assert MvrOptions().to_dict()["mvr_num_views"] == 8
    assert "mlr_lambda" in MlrOptions.flags()
    views = next(f for f in MvrOptions.option_fields() if f.name == "views")
    assert views.metadata["choices"] == ("paper", "residual", "region")
