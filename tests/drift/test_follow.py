"""The loop follows drift at a rate and catches up after it fell behind, while faults stay alarms (issue 36).

The settings are the shipped ones' shape (``config/tep-sim.yaml`` ``drift:``): frequent refreshes,
bounds as a rate (``per``), means only (``covariances: false``), each mean the trend of its window
now (``trend``), and a refresh that re-fitted means within the rate must *explain* the alarms to be
taken while the plant alarms (``explain``).
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest

from fedrca.detectors.plant import PlantDetector
from fedrca.drift import BaselineKeeper, KeeperSettings
from tests.drift.conftest import plant_rows

#: a refresh every 200 rows on the last 800; a mean moves at most 1 standard deviation per 400 rows
FOLLOW = KeeperSettings(every=200, window=800, history=1600, guard=20, recent=60, min_rows=200, max_shift=1.0,
                        max_scale=0.25, per=400, covariances=False, trend=True, explain=True)  # fmt: skip


def _alarm(out) -> np.ndarray:  # type: ignore[no-untyped-def]
    return np.asarray(out.zc | out.za)


def test_bounds_are_a_rate() -> None:
    """The bounds of a refresh grow with the time since the baseline in force took effect: after refused
    refreshes a refresh may move as far as the plant may have drifted since; ``per`` None is per refresh."""
    assert FOLLOW.bounds(400) == (1.0, 0.25)
    assert FOLLOW.bounds(200) == (0.5, 0.125)
    assert FOLLOW.bounds(1200) == (3.0, 0.75)
    assert dataclasses.replace(FOLLOW, per=None).bounds(200) == (1.0, 0.25)


@pytest.mark.parametrize("explain", [True, False])
def test_a_loop_behind_drift_catches_up_while_it_alarms(fitted: PlantDetector, explain: bool) -> None:
    """A plant drifting slowly whose baseline fell behind (pinned for 1,600 rows) alarms; once unpinned, a
    refresh whose means explain the alarms within the rate is taken and the alarms stop. Without ``explain``
    every refresh is refused while the plant alarms: the loop is locked out and the plant alarms to the end."""
    n = 4400
    rows = plant_rows(7, n, drift_per_row=0.0004)
    keeper = BaselineKeeper(fitted, dataclasses.replace(FOLLOW, explain=explain))
    keeper.pin(at=0)
    first = keeper.process(rows[:1600], seqs=np.arange(1600))
    assert float(np.mean(_alarm(first)[1200:])) > 0.5  # behind: the plant alarms
    keeper.unpin(at=1600)
    out = keeper.process(rows[1600:], seqs=np.arange(1600, n))
    late = float(np.mean(_alarm(out)[-1200:]))
    after = [r for r in keeper.reports if r.seq >= 1600 and r.outcome != "unpinned"]
    if explain:
        caught = [r for r in after if r.outcome == "applied" and "the alarms are drift" in r.reason]
        assert caught, [r.line() for r in after]
        assert late < 0.05, [r.line() for r in after]
    else:
        assert all(r.outcome == "refused" for r in after), [r.line() for r in after]
        assert late > 0.5


@pytest.mark.parametrize(
    ("fault", "why", "alarming"),
    [
        ("ramp", "drift rate allows", 0.9),  # one sensor drifting out of calibration, far faster than the drift
        ("noise", "still alarm", 0.8),  # one sensor grows noisy: no mean explains it (its rows alarm at random)
    ],
)
def test_a_slow_fault_is_refused_by_the_explaining_refresh(fitted: PlantDetector, fault: str, why: str,
                                                           alarming: float) -> None:  # fmt: skip
    """Issue 36, acceptance 2, with the shipped guards: a fault that alarms when a refresh falls due is not
    taken as drift (too fast for the rate, or not a shift of the means), every refresh while it lasts is
    refused naming why, the baseline stays and the plant alarms to the end."""
    n = 2400
    rows = plant_rows(3, n)
    if fault == "ramp":
        rows[1000:, 2] += np.arange(n - 1000) * 0.004  # +0.4 per 100 rows on sensor 2
    else:
        rows[1000:, 1] += np.random.default_rng(11).normal(scale=1.0, size=n - 1000)  # 5x the noise on sensor 1
    keeper = BaselineKeeper(fitted, FOLLOW)
    out = keeper.process(rows, seqs=np.arange(n))
    during = [r for r in keeper.reports if r.seq >= 1300]
    assert during and all(r.outcome == "refused" for r in during), [r.line() for r in during]
    assert any("not drift" in r.reason and why in r.reason for r in during), [r.line() for r in during]
    assert keeper.baseline.seq <= 1200  # no baseline fitted on the fault
    assert float(np.mean(_alarm(out)[1300:])) > alarming  # never absorbed: the fault alarms to the end


def test_a_trend_follows_drift_closer_than_an_average(fitted: PlantDetector) -> None:
    """The window's average is half a window behind a drift; its trend now is not: with ``trend`` the loop
    alarms less on a plant that drifts steadily (both at the same rate bound)."""
    n = 4000
    rows = plant_rows(9, n, drift_per_row=0.0004)
    fast = dataclasses.replace(FOLLOW, max_shift=10.0)
    alarms = {}
    for trend in (True, False):
        keeper = BaselineKeeper(copy.deepcopy(fitted), dataclasses.replace(fast, trend=trend))
        alarms[trend] = float(np.mean(_alarm(keeper.process(rows, seqs=np.arange(n)))[1600:]))
    assert alarms[True] < 0.05
    assert alarms[True] < alarms[False]
