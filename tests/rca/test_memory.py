"""Verdicts that do not forget (rca/memory.py): the incident's memory and what the engine makes of it.

The incident of issue 35, on a synthetic network of seven units with the flowsheet declared as
the graph and the unmeasured entry declared: a disturbance enters through the intake and alarms
there first, in bursts (a daily cycle); hours later the units downstream alarm continuously.
Without the memory the engine's window sees the downstream units persist and the intake come and
go, and names the heater; the declared graph cannot make the heater the root of what alarmed
earlier at the intake.
"""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrca.config import RCASettings
from fedrca.rca import InterdependencyGraph, engine_for
from fedrca.rca.memory import IncidentMemory

PLANTS = ["intake", "heater", "reactor", "flash", "column", "recycle", "product"]
EDGES = [
    ("intake", "heater"),
    ("heater", "reactor"),
    ("reactor", "flash"),
    ("flash", "column"),
    ("flash", "recycle"),
    ("recycle", "reactor"),
    ("column", "product"),
]
#: rows: the disturbance from START, a burst of ON rows every PERIOD; the downstream units alarm from LATE
START, PERIOD, ON, LATE, T = 200, 96, 30, 500, 800


def intermittent_incident(seed: int, false_alarm: float = 0.005) -> np.ndarray:
    """Published flag pairs (T, 7, 2) of the incident (untrained plants: Z_a = Z_c)."""
    rng = np.random.default_rng(seed)
    alarm = rng.random((T, len(PLANTS))) < false_alarm
    t = np.arange(T)
    burst = (t >= START) & ((t - START) % PERIOD < ON)
    alarm[:, 0] |= burst & (rng.random(T) < 0.8)
    for m in (1, 2, 3):  # heater, reactor, flash: continuously, one after the other
        alarm[:, m] |= (t >= LATE + 4 * (m - 1)) & (rng.random(T) < 0.95)
    return np.repeat(alarm[:, :, None], 2, axis=2).astype(np.int64)


def roots(flags: np.ndarray, **options) -> tuple[Counter, Counter]:
    """The roots named before and after the downstream units start alarming."""
    engine = engine_for(
        PLANTS,
        InterdependencyGraph.from_edges(PLANTS, EDGES),
        settings=RCASettings(unobserved_entry=["intake"], **options),
    )
    verdicts = engine.run(np.arange(len(flags)), flags)
    early = Counter(v.root_cause for v in verdicts if START <= v.seq < LATE and v.root_cause)
    late = Counter(v.root_cause for v in verdicts if v.seq >= LATE and v.root_cause)
    return early, late


@pytest.mark.parametrize(
    "seed", [0, pytest.param(1, marks=pytest.mark.exhaustive), pytest.param(2, marks=pytest.mark.exhaustive)]
)
def test_an_intermittent_entry_keeps_its_verdict_when_its_effects_alarm_continuously(seed):
    flags = intermittent_incident(seed)
    early, late = roots(flags)
    assert set(early) == {"intake"} and set(late) == {"intake"}, (early, late)
    # without the memory (a history no plant reaches) the downstream heater takes over: the test can fail
    early, forgetful = roots(flags, incident_rows=10**9)
    assert forgetful["heater"] > forgetful["intake"], forgetful


def test_separate_incidents_are_not_confused():
    """A second, unrelated fault downstream after the first incident ended (quiet longer than incident_gap) is
    named where it is: the memory of the first is gone."""
    flags = np.zeros((900, len(PLANTS), 2), dtype=np.int64)
    flags[100:160, 0] = 1  # the intake alarms, then stops
    flags[500:560, 2:4] = 1  # the reactor and the flash, 340 rows later
    flags[500:503, 3] = 0  # the reactor first
    engine = engine_for(
        PLANTS,
        InterdependencyGraph.from_edges(PLANTS, EDGES),
        settings=RCASettings(unobserved_entry=["intake"], incident_gap=240),
    )
    named = Counter(v.root_cause for v in engine.run(np.arange(900), flags) if v.seq >= 500 and v.root_cause)
    assert set(named) == {"reactor"}, named


def test_a_false_alarm_long_past_is_forgotten():
    memory = IncidentMemory(2, gap=100, min_rows=5, forget=10)
    on, off = np.array([True, False]), np.array([False, False])
    memory.update(0, on, np.array([0, -1]))
    for seq in range(1, 12):
        memory.update(seq, off, np.array([-1, -1]))
    assert memory.first.tolist() == [-1, -1] and memory.active  # the incident is open, the false alarm gone
    for seq in range(12, 20):
        memory.update(seq, np.array([False, True]), np.array([-1, 12]))
    assert memory.first.tolist() == [-1, 12] and memory.started(0).tolist() == [False, True]


def test_an_incident_ends_after_its_quiet_gap():
    memory = IncidentMemory(1, gap=5, min_rows=1)
    memory.update(0, np.array([True]), np.array([0]))
    for seq in range(1, 6):
        memory.update(seq, np.array([False]), np.array([-1]))
    assert not memory.active and memory.first.tolist() == [-1]


def test_the_penalty_needs_an_unreachable_plant_that_started_earlier_and_alarms_in_this_episode():
    memory = IncidentMemory(3, gap=100, min_rows=3)
    reach = np.array([[False, True, True], [False, False, True], [False, False, False]])  # a chain 0 > 1 > 2
    for seq in range(10):
        alarmed = np.array([True, seq >= 4, seq >= 6])
        memory.update(seq, alarmed, np.where(alarmed, [0, 4, 6], -1))
    covered = np.zeros((3, 3), dtype=bool)
    penalty = memory.penalty(reach, 0, np.log(0.01), covered)
    # root 0 reaches both; root 1 cannot reach 0, which started first; root 2 cannot reach 0 or 1
    assert penalty.tolist() == pytest.approx([0.0, np.log(0.01), 2 * np.log(0.01)])
    # what the window's order evidence already counts is not counted twice
    assert memory.penalty(reach, 0, np.log(0.01), ~covered).tolist() == [0.0, 0.0, 0.0]
    # a complete graph: nothing is unreachable
    assert memory.penalty(np.ones((3, 3), dtype=bool), 0, np.log(0.01), covered).tolist() == [0.0, 0.0, 0.0]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.booleans(), min_size=3, max_size=3), min_size=1, max_size=60))
def test_the_memory_survives_a_restart(rows):
    """get_state / set_state mid-stream give the same memory as one uninterrupted run, whatever the alarms."""
    whole, first, second = (IncidentMemory(3, gap=7, min_rows=2, forget=4) for _ in range(3))
    half = len(rows) // 2
    for seq, row in enumerate(rows):
        alarmed = np.array(row)
        onset = np.where(alarmed, seq, -1)
        whole.update(seq, alarmed, onset)
        (first if seq < half else second).update(seq, alarmed, onset)
        if seq == half - 1:
            second.set_state(first.get_state())
    if half:
        assert second.get_state() == whole.get_state()


def test_the_engine_state_carries_the_memory():
    flags = intermittent_incident(0)
    plants, graph = PLANTS, InterdependencyGraph.from_edges(PLANTS, EDGES)
    settings_ = RCASettings(unobserved_entry=["intake"])
    whole = engine_for(plants, graph, settings=settings_).run(np.arange(T), flags)
    first = engine_for(plants, graph, settings=settings_)
    head = first.run(np.arange(LATE + 50), flags[: LATE + 50])
    second = engine_for(plants, graph, settings=settings_)
    second.set_state(first.get_state())
    tail = second.run(np.arange(LATE + 50, T), flags[LATE + 50 :])
    assert [v.to_dict() for v in head + tail] == [v.to_dict() for v in whole]


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(
    rows=st.lists(st.lists(st.booleans(), min_size=3, max_size=3), min_size=0, max_size=50),
    shape=st.tuples(st.integers(1, 8), st.integers(1, 4), st.integers(1, 6)),
    cuts=st.lists(st.integers(0, 50), max_size=4),
)
def test_run_equals_update_row_by_row(rows, shape, cuts):
    """IncidentMemory.run (the block path, in plain ints) gives update's memory after every row, block after block."""
    gap, min_rows, forget = shape
    stepped, blocked = (IncidentMemory(3, gap=gap, min_rows=min_rows, forget=forget) for _ in range(2))
    alarmed = np.array(rows, dtype=bool).reshape(len(rows), 3)
    # onsets: where each plant's current alarm run started (seqs skip, as released rows may)
    seqs = np.cumsum(1 + np.arange(len(rows)) % 3).astype(np.int64)
    onset = np.full((len(rows), 3), -1, dtype=np.int64)
    for t in range(len(rows)):
        onset[t] = np.where(alarmed[t], np.where(t and alarmed[t - 1], onset[t - 1], seqs[t]), -1)
    expected = []
    for t in range(len(rows)):
        stepped.update(int(seqs[t]), alarmed[t], onset[t])
        expected.append((stepped.first.tolist(), stepped.rows.tolist(), stepped.episode_rows.tolist(), stepped.active))
    got = []
    for lo, hi in itertools.pairwise([0, *sorted(c for c in cuts if c < len(rows)), len(rows)]):
        out = blocked.run(seqs[lo:hi], alarmed[lo:hi], onset[lo:hi])
        got += [
            (out.first[i].tolist(), out.rows[i].tolist(), out.episode_rows[i].tolist(), bool(out.active[i]))
            for i in range(hi - lo)
        ]
    assert got == expected
    assert blocked.get_state() == stepped.get_state()
