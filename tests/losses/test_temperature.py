"""Temperature schedules (losses/temperature.py): MVR's annealing (eq. 8) at the paper's values."""

import math

import pytest

from multiview_plugin.losses.temperature import temperature_at


def test_annealed_temperature_paper_values():
    assert temperature_at(0, "annealed") == pytest.approx(1.0)
    assert temperature_at(5, "annealed") == pytest.approx(0.607, abs=5e-4)
    assert temperature_at(20, "annealed") == pytest.approx(0.3)
    assert temperature_at(7, "fixed", initial=0.05) == 0.05
    # generalised start and floor (the cosine-similarity runs of docs/results.md)
    assert temperature_at(3, "annealed", initial=0.1, minimum=0.03) == pytest.approx(0.1 * math.exp(-0.3))
    with pytest.raises(ValueError, match="unknown temperature schedule"):
        temperature_at(0, "cosine")
