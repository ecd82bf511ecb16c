"""Metrics: vectorised definitions against plain loops, and known values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrca.exceptions import DataError
from fedrca.rca.metrics import (
    FaultEvent,
    arl0,
    arl1,
    detection_scores,
    diagnosis_timeline,
    in_control_mask,
    rca_scores,
    run_lengths,
)


def events_strategy(n: int):
    return st.lists(st.tuples(st.integers(0, n - 2), st.integers(1, 15)), max_size=5).map(
        lambda raw: _disjoint([(s, min(s + d, n)) for s, d in sorted(raw)])
    )


def _disjoint(spans):
    out, last = [], -1
    for s, e in spans:
        if s >= last and e > s:
            out.append(FaultEvent(s, e, "p1" if len(out) % 2 == 0 else "p2"))
            last = e
    return out


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_detection_metrics_match_plain_loops(data):
    n = 80
    alarms = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    events = data.draw(events_strategy(n))
    grace = data.draw(st.integers(0, 5))
    mask = in_control_mask(n, events, grace)
    # loop definitions
    starts = [e.start for e in events]
    ends = [min(e.end + grace, nxt, n) for e, nxt in zip(events, [*starts[1:], n])]
    loop_mask = np.ones(n, dtype=bool)
    for s, e in zip(starts, ends):
        loop_mask[s:e] = False
    assert np.array_equal(mask, loop_mask)
    onsets = sum(1 for t in range(n) if alarms[t] and (t == 0 or not alarms[t - 1]) and loop_mask[t])
    expected_arl0 = math.inf if onsets == 0 else loop_mask.sum() / onsets
    assert arl0(alarms, mask) == pytest.approx(expected_arl0)
    rl = run_lengths(alarms, events, grace)
    for i, (s, e) in enumerate(zip(starts, ends)):
        hits = [t for t in range(s, e) if alarms[t]]
        if hits:
            assert rl[i] == hits[0] - s + 1
        else:
            assert math.isnan(rl[i])


def test_known_values():
    alarms = np.zeros(200, dtype=bool)
    alarms[[20, 21, 22, 120]] = True  # two false-alarm onsets
    alarms[52:60] = True  # event 1 detected after 3 samples
    events = [FaultEvent(50, 60, "a"), FaultEvent(150, 160, "b")]  # event 2 missed
    s = detection_scores(alarms, events, grace=10)
    assert s.arl0 == pytest.approx((200 - 40) / 2)
    assert s.arl1 == 3.0 and s.detected == 0.5
    assert s.fdr == pytest.approx(8 / 20) and s.far == pytest.approx(4 / 160)
    assert math.isnan(arl1(np.zeros(200, bool), events))
    with pytest.raises(DataError, match="overlap"):
        in_control_mask(100, [FaultEvent(10, 20, "a"), FaultEvent(15, 30, "b")])


def test_rca_scores_count_verdicts_and_events():
    events = [FaultEvent(100, 110, "a"), FaultEvent(200, 210, "b"), FaultEvent(300, 310, "a")]
    seqs = [50, 103, 105, 107, 204, 206, 215, 305, 400]
    roots = ["a", "a", "b", "a", "a", "b", None, "b", "b"]
    s = rca_scores(seqs, roots, events, 500, ["a", "b"], grace=10)
    # root verdicts: 8; correct: 103, 107 (a in ev1), 206 (b in ev2) = 3
    assert s.n_root_verdicts == 8 and s.n_correct == 3
    assert s.precision == pytest.approx(3 / 8)
    assert s.recall == pytest.approx(2 / 3)
    # majority: ev1 a (2 vs 1), ev2 tie a/b -> earliest issued (a at 204) wrong, ev3 b wrong
    assert s.accuracy == pytest.approx(1 / 3)
    assert s.delay == pytest.approx((3 + 6) / 2)
    assert s.f1 == pytest.approx(2 * (3 / 8) * (2 / 3) / (3 / 8 + 2 / 3))
    assert [e["majority"] for e in s.per_event] == ["a", "a", "b"]


def test_diagnosis_timeline_holds_each_verdict_until_the_next():
    tl = diagnosis_timeline([3, 6, 8], ["b", None, None], ["root_cause", "external_root", "no_anomaly"], ["a", "b"], 10)
    assert tl.tolist() == [-1, -1, -1, 1, 1, 1, -2, -2, -1, -1]
