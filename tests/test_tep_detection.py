"""Acceptance of the detection core on the real TEP benchmark (config/tep.yaml, trained on d00.dat).

Bars of issue 13 (tighter than the foundation issue's 5% and 35%): false-alarm rate (any plant,
Z_c or Z_a) on d00_te.dat at most 2%; detection rate on samples 161..960 of faults 01, 04, 06 at
least 99%, fault 05 at least 90%.
"""

from __future__ import annotations

import numpy as np
import pytest

from fedrca.application.site import build_detectors, run_detectors
from fedrca.config import load_config
from fedrca.datasets.loader import load_frame, plant_frames


@pytest.fixture(scope="module")
def site(repo):
    config = load_config(repo / "config" / "tep.yaml")
    return config, build_detectors(config, load_frame(config, repo / "data/tep/d00.dat"))


def any_plant_flags(site, path):
    config, detectors = site
    for det in detectors.values():
        det.reset()
    results = run_detectors(detectors, plant_frames(config, load_frame(config, path)))
    return np.any([r.zc | r.za for r in results.values()], axis=0), results


def test_false_alarm_rate_on_nominal_test_data(site, tep_dir):
    flags, _ = any_plant_flags(site, tep_dir / "d00_te.dat")
    assert flags.mean() <= 0.02


@pytest.mark.parametrize(
    ("fault", "bar", "origin"),
    [("01", 0.99, "feed"), ("04", 0.99, "reactor"), ("05", 0.90, "separator"), ("06", 0.99, "feed")],
)
def test_fault_detection_rate(site, tep_dir, fault, bar, origin):
    flags, results = any_plant_flags(site, tep_dir / f"d{fault}_te.dat")
    assert flags[160:].mean() >= bar
    # the unit where the fault originates is among the plants that see it
    assert results[origin].zc[160:].mean() > 0.5
