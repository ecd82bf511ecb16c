"""The second false-alarm definition of ``bench/bench_drift.py``: a fault's effect measured on a fault-free twin.

The figure beside the benchmark's own (a fault's window and ``RECOVERY_H`` after it) counts a row as
the fault's effect while the faulted run's process is off the same seed's run without faults
(docs/drift.md, *Measured*). Pure numpy on synthetic rows: no simulation.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import bench_drift as bd
import drift_scenario as scenario

H = bd.SAMPLES_PER_H
OFFSET = int(scenario.TRAIN_H * H)


def _pair(tail_h: float, size: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A twin (noise only) and a faulted run that is ``size`` sd off from IDV 1's onset to ``tail_h`` after
    its end, in one of two sensors."""
    rng = np.random.default_rng(0)
    n = int(scenario.HOURS * H)
    twin = rng.normal(size=(n, 2))
    faulted = twin.copy()
    on, off = (int(h * H) for h in scenario.FAULTS[0][2:])
    faulted[on : off + int(tail_h * H), 1] += size
    return pd.DataFrame(faulted), pd.DataFrame(twin)


def test_the_effect_lasts_until_the_process_is_back_within_the_band() -> None:
    faulted, twin = _pair(tail_h=30.0, size=2.0)
    off = bd.twin_aftermath(faulted, twin, OFFSET, band=0.5)
    n = len(off) - OFFSET
    mask, settled = bd.twin_nominal_mask(off, OFFSET, n)
    assert settled["IDV 1"] == pytest.approx(30.0)
    # nominal again from the row the process is back, not from RECOVERY_H (24 h) after the end
    back = int((scenario.FAULTS[0][3] + 30.0) * H) - OFFSET
    assert not mask[back - 1] and mask[back]
    recovery = bd.nominal_mask(n, OFFSET, True)
    first = int((scenario.FAULTS[0][3] + scenario.RECOVERY_H) * H) - OFFSET
    assert not recovery[first - 1] and recovery[first] and not mask[first]
    # a fault whose process never left the band covers its own window only
    assert settled["IDV 13"] == 0.0


def test_a_shift_inside_the_band_is_not_the_faults() -> None:
    faulted, twin = _pair(tail_h=30.0, size=0.3)
    off = bd.twin_aftermath(faulted, twin, OFFSET, band=0.5)
    assert not off.any()


def test_runs_that_are_not_twins_are_refused() -> None:
    faulted, twin = _pair(tail_h=0.0, size=1.0)
    twin.iloc[10, 0] += 1.0
    with pytest.raises(SystemExit, match="not twins"):
        bd.twin_aftermath(faulted, twin, OFFSET, band=0.5)
