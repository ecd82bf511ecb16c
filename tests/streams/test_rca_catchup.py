"""A plant catching up leaves nothing behind in the RCA worker (issue 32: the soak's RSS steps at plant kills).

When a plant worker's standby takes over, it publishes the killed worker's backlog, one plant's
partition ahead of the others: the RCA worker's aligner holds the rows that plant runs ahead (up to
the allowed lateness) until the others' flags come, and writes them in its state after every batch.
Held as a dictionary, a tuple and floats per row and flag, 500 rows took a few hundred kilobytes of the
interpreter's small objects, and the state record built a dictionary and a list per row and plant on
top: a peak the small-object allocator keeps as RSS. The aligner holds them in arrays allocated with it
(:class:`fedrca.streams.aligner.FlagAligner`), so holding rows allocates nothing per row, and the state
writes them as a few strings. Measured with tracemalloc (bytes allocated, no time): deterministic.
"""

from __future__ import annotations

import gc
import json
import math
import random
import sys
import tracemalloc
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fedrca.application.site import rca_runtime
from fedrca.config import load_config
from fedrca.contracts import FlagMessage, encode_flags
from fedrca.streams.agents import _json
from fedrca.streams.aligner import AlignedRow, FlagAligner

#: rows streamed before a catch-up: the aligner's memory of released rows full (its 10,000 rows are a few
#: fixed buffers; what grows with it is not what a catch-up holds)
_WARM = 1200


def _flags(site: str, plants: list[str], plant: str, lo: int, hi: int) -> list[FlagMessage]:
    """One plant's flags of rows ``lo:hi``: incidents that come and go, severity levels, sensor faults."""
    m = plants.index(plant)
    return [
        FlagMessage(site, plant, 180.0 * seq, seq, alarm, alarm, math.inf, "v0", level=2 * alarm, sensor_fault=fault)
        for seq in range(lo, hi)
        for alarm in [int((seq // 24) % len(plants) == m and seq % 24 >= 12)]
        for fault in [m == 1 and seq % 300 >= 280]
    ]


def _steady(runtime: Any, plants: list[str], lo: int, hi: int, rows: int = 6) -> None:
    site = runtime.stage.site
    for start in range(lo, hi, rows):
        raws = encode_flags([f for p in plants for f in _flags(site, plants, p, start, min(start + rows, hi))])
        assert not runtime.process_flags(raws)[1]
        _json(runtime.stage.get_state())  # as the worker writes it after every batch


def _ahead(rows: int) -> tuple[int, int, int, int]:
    """The RCA runtime of config/tep.yaml (allowed lateness 1,000) after a steady stream, then the first plant's
    next ``rows`` rows alone (its partition caught up first), in batches of 500 flags, the state written after each.
    Returns what the rows waiting hold: bytes (tracemalloc's current, after against before) and the
    interpreter's small-object blocks (``sys.getallocatedblocks``); the blocks the state written then holds;
    the state record's length."""
    config = load_config("config/tep.yaml")
    plants = list(config.plant_names)
    runtime = rca_runtime(config)
    _steady(runtime, plants, 0, _WARM)
    site, first = runtime.stage.site, plants[0]
    raws = encode_flags(_flags(site, plants, first, _WARM, _WARM + rows))
    gc.collect()
    blocks = sys.getallocatedblocks()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for start in range(0, len(raws), 500):
            assert runtime.process_flags(raws[start : start + 500]) == ([], [])  # the rows wait for the others
            _json(runtime.stage.get_state())
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    gc.collect()
    held_blocks = sys.getallocatedblocks() - blocks
    state = runtime.stage.get_state()
    state_blocks = sys.getallocatedblocks() - blocks - held_blocks
    record = _json(state)
    assert len(state["aligner"]["buffer"]) == rows
    del state
    # the others catch up: every row released and judged, none late
    for plant in plants[1:]:
        flags = encode_flags(_flags(site, plants, plant, _WARM, _WARM + rows))
        for start in range(0, len(flags), 500):
            assert not runtime.process_flags(flags[start : start + 500])[1]
    assert not runtime.stage.get_state()["aligner"]["buffer"] and runtime.stage.rows == _WARM + rows
    return held, held_blocks, state_blocks, len(record)


def test_rows_a_plant_runs_ahead_hold_no_object_per_row() -> None:
    """500 more rows waiting for the other plants (a plant's partition caught up first) hold no more memory and
    no more of the interpreter's small objects (a dictionary, a tuple and floats per row and flag held about
    600 bytes and 9 blocks a row), and the state written with them holds one object (its seq) a row more (a
    dictionary, a list and keys per row and plant: about 9)."""
    few = _ahead(100)
    many = _ahead(600)
    held, held_blocks, state_blocks, record = ((b - a) / 500 for a, b in zip(few, many, strict=True))
    assert held < 16 and held_blocks < 0.1, (few, many)
    assert state_blocks < 1.5, (few, many)
    assert record < 48, (few, many)  # bytes a row (56 as dictionaries)


# -- the ring gives the rows of a dictionary per row -------------------------------------------------------------
class _Reference:
    """The aligner's rules over a dictionary per waiting row (as the aligner held them before its arrays): the
    rows released, their contents and each flag's status, to compare the ring against."""

    def __init__(self, plants: list[str], lateness: int, skew: float) -> None:
        self.plants, self.lateness, self.skew = plants, lateness, skew
        self.buffer: dict[int, dict[str, tuple[int, int]]] = {}
        self.ts: dict[int, float] = {}
        self.own: dict[int, dict[str, float]] = {}
        self.faulty: dict[int, set[str]] = {}
        self.levels: dict[int, dict[str, int]] = {}
        self.released: dict[int, dict[str, tuple[int, int]]] = {}
        self.next: int | None = None
        self.newest = -1

    def add(self, f: FlagMessage) -> tuple[list[AlignedRow], str]:
        if self.next is None or (not self.released and f.seq < self.next):
            self.next = f.seq
        bits = (-1, -1) if f.withheld else (-2, -2) if f.degraded else (f.zc, f.za)
        if f.seq < self.next:
            row = self.released.get(f.seq)
            same = row is not None and row.get(f.plant, (-3, -3)) == bits
            return [], "duplicate" if same else "late"
        row = self.buffer.setdefault(f.seq, {})
        status = "buffered"
        if f.plant in row:
            status = "duplicate" if row[f.plant] == bits else "conflict"
        else:
            row[f.plant] = bits
            if f.ts != self.ts.setdefault(f.seq, f.ts):
                self.own.setdefault(f.seq, {})[f.plant] = f.ts
            if f.sensor_fault and not f.withheld:
                self.faulty.setdefault(f.seq, set()).add(f.plant)
            if f.level is not None and f.evidence:
                self.levels.setdefault(f.seq, {})[f.plant] = f.level
        self.newest = max(self.newest, f.seq)
        return self.release(), status

    def release(self, force: bool = False) -> list[AlignedRow]:
        out = []
        while self.buffer and self.next is not None:
            seq = self.next
            overdue = force or self.newest - seq > self.lateness
            row = self.buffer.get(seq)
            if row is None:
                if not overdue:
                    break
                self.next = min(self.buffer)
                continue
            if len(row) < len(self.plants) and not overdue:
                break
            del self.buffer[seq]
            times = dict.fromkeys(row, self.ts.pop(seq))
            times.update(self.own.pop(seq, {}))
            values = sorted(times.values())
            n = len(values)
            ts = values[n // 2] if n % 2 else 0.5 * (values[n // 2 - 1] + values[n // 2])
            offsets = {p: t - ts for p, t in times.items()}
            off = {p for p, d in offsets.items() if abs(d) > self.skew}
            off = off if n - len(off) >= 2 else set()
            faulty = self.faulty.pop(seq, set())
            out.append(AlignedRow(
                seq, ts, {p: b for p, b in row.items() if b[0] >= 0 and p not in off},
                complete=len(row) == len(self.plants),
                withheld=tuple(p for p in self.plants if row.get(p) == (-1, -1)),
                degraded=tuple(p for p in self.plants if row.get(p) == (-2, -2) and p not in off),
                levels={p: v for p, v in self.levels.pop(seq, {}).items() if p not in off},
                sensor={p: int(p in faulty) for p in row if row[p] != (-1, -1) and p not in off},
                clock=tuple(p for p in self.plants if p in off), offsets=offsets,
            ))  # fmt: skip
            self.released[seq] = row
            self.next = seq + 1
        return out


PLANTS = ["a", "b", "c"]


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(1, 50),
    lateness=st.integers(0, 5),
    jumps=st.integers(0, 3),
    skew=st.sampled_from([math.inf, 0.5]),
    restarts=st.lists(st.integers(0, 300), max_size=2),
)
def test_the_ring_releases_what_a_dictionary_per_row_releases(seed, n, lateness, jumps, skew, restarts):
    """Whatever the stream (plants far ahead of each other, beyond the ring too; seqs jumping ahead and, before
    the first row is out, back; withheld, degraded, late, duplicate and conflicting flags; clocks off; levels
    and sensor faults), the aligner releases the rows, with the contents, and gives each flag the status, of
    the aligner over a dictionary per row; restored from its state (through JSON) at any point, too."""
    rng = random.Random(seed)
    streams: dict[str, list[FlagMessage]] = {p: [] for p in PLANTS}
    seqs = list(range(n))
    for _ in range(jumps):  # a stretch far ahead (beyond any ring), or back before the start
        at = rng.randrange(len(seqs))
        seqs[at:] = [s + rng.choice([-40, 30, 200]) for s in seqs[at:]]
    for seq in seqs:
        for plant in PLANTS:
            roll = rng.random()
            if roll < 0.1:
                continue  # lost
            ts = 10.0 * seq + (rng.choice([0.0, 0.25, 3.0]) if rng.random() < 0.2 else 0.0)
            kind = {"withheld": roll < 0.15, "degraded": 0.15 <= roll < 0.2}
            zc, za = rng.randint(0, 1), rng.randint(0, 1)
            level = rng.choice([None, 0, 1]) if rng.random() < 0.5 else None
            flag = FlagMessage("s", plant, ts, max(seq, 0), zc, za, 1.0, "v", level=level,
                               sensor_fault=rng.random() < 0.2, **kind)  # fmt: skip
            streams[plant].append(flag)
            if rng.random() < 0.1:  # sent again, the same or another pair
                streams[plant].append(FlagMessage("s", plant, ts, max(seq, 0), rng.randint(0, 1), za, 1.0, "v"))
    flags = []
    while any(streams.values()):  # the plants' partitions at random paces: one runs far ahead at times
        plant = rng.choice([p for p in PLANTS if streams[p]])
        k = rng.randint(1, 12)
        flags += streams[plant][:k]
        del streams[plant][:k]
    reference = _Reference(PLANTS, lateness, skew)
    aligner = FlagAligner(PLANTS, allowed_lateness=lateness, max_clock_skew=skew)
    want, got = [], []
    for k, f in enumerate(flags):
        if k in restarts:
            restored = FlagAligner(PLANTS, allowed_lateness=lateness, max_clock_skew=skew)
            restored.set_state(json.loads(json.dumps(aligner.get_state())))
            assert restored.get_state() == aligner.get_state()
            aligner = restored
        rows, status = reference.add(f)
        want.append((rows, status))
        got.append(aligner.add(f))
    want.append((reference.release(force=True), "flush"))
    got.append((aligner.flush(), "flush"))
    assert got == want


# -- earlier states --------------------------------------------------------------------------------------------
def _stream() -> list[FlagMessage]:
    """Rows 0-2 of every plant (released), then rows 3-5 waiting: a withheld and a degraded flag, a plant's own
    time, levels, a sensor fault."""
    flag = FlagMessage
    return [
        *(flag("s", p, float(s), s, 0, 0, 1.0, "v") for s in range(3) for p in PLANTS),
        flag("s", "a", 3.0, 3, 1, 1, 1.0, "v", level=2, sensor_fault=True),
        flag("s", "b", 3.0, 3, 0, 0, 1.0, "v", withheld=True),
        flag("s", "a", 4.0, 4, 0, 0, 1.0, "v"),
        flag("s", "c", 4.5, 4, 0, 0, 1.0, "v", degraded=True),
        flag("s", "b", 5.0, 5, 0, 1, 1.0, "v", level=0),
    ]


#: The rows waiting of :func:`_stream` as the aligner wrote them before its arrays (a dictionary per row and field)
_EARLIER = {
    "buffer": {"3": {"a": [1, 1], "b": [-1, -1]}, "4": {"a": [0, 0], "c": [-2, -2]}, "5": {"b": [0, 1]}},
    "ts": {"3": 3.0, "4": 4.0, "5": 5.0},
    "plant_ts": {"4": {"c": 4.5}},
    "sensor": {"3": ["a"]},
    "levels": {"3": {"a": 2}, "5": {"b": 0}},
}


def test_an_earlier_states_waiting_rows_restore() -> None:
    """A worker restarted on a state its predecessor wrote before the arrays (the rows waiting as dictionaries)
    starts, and releases the rows, and writes the state, of one restored from the state as written now."""
    aligner = FlagAligner(PLANTS, allowed_lateness=5)
    for f in _stream():
        assert aligner.add(f)[1] == "buffered"
    now = json.loads(json.dumps(aligner.get_state()))
    assert now["buffer"] == [3, 4, 5] and now["cells"] == "3w-0-d-1-"
    earlier = {k: v for k, v in now.items() if k not in ("buffer", "cells", "first_ts", "plant_ts", "levels",
                                                         "leveled", "faulty")}  # fmt: skip
    earlier.update(json.loads(json.dumps(_EARLIER)))
    rest = [FlagMessage("s", p, float(s), s, 1, 0, 1.0, "v") for s in range(3, 9) for p in PLANTS]
    outs = []
    for state in (now, earlier):
        restored = FlagAligner(PLANTS, allowed_lateness=5)
        restored.set_state(state)
        assert restored.get_state() == now
        outs.append([(row, status) for f in rest for row, status in [restored.add(f)]] + [restored.flush()])
    assert outs[0] == outs[1]
    rows = [row for out, _ in outs[0][:-1] for row in out]
    assert [r.seq for r in rows] == list(range(3, 9)) and outs[0][-1] == []
    assert (rows[0].flags, rows[0].withheld, rows[0].levels, rows[0].sensor) == (
        {"a": (1, 1), "c": (1, 0)},
        ("b",),
        {"a": 2},
        {"a": 1, "c": 0},
    )
    assert (rows[1].degraded, rows[1].offsets) == (("c",), {"a": 0.0, "b": 0.0, "c": 0.5})
    assert rows[2].levels == {"b": 0}


# -- a catch-up batch ------------------------------------------------------------------------------------------
def _catch_up_peak(rows: int) -> tuple[int, int]:
    """After a steady stream, every plant but the last ``rows`` rows ahead (waiting), then the last plant's ``rows``
    flags in one batch (its partition caught up last): the most bytes the batch held at once beyond what it
    kept (tracemalloc's peak over its end) and the verdicts it issued."""
    config = load_config("config/tep.yaml")
    plants = list(config.plant_names)
    runtime = rca_runtime(config)
    _steady(runtime, plants, 0, _WARM)
    site = runtime.stage.site
    for plant in plants[:-1]:
        raws = encode_flags(_flags(site, plants, plant, _WARM, _WARM + rows))
        for start in range(0, len(raws), 500):
            assert runtime.process_flags(raws[start : start + 500]) == ([], [])
    raws = encode_flags(_flags(site, plants, plants[-1], _WARM, _WARM + rows))
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        verdicts, rejected = runtime.process_flags(raws)
        after, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not rejected and runtime.stage.rows == _WARM + rows
    return peak - max(before, after), len(verdicts)


def test_a_catch_up_batch_holds_one_slice_of_messages_and_two_blocks_of_rows() -> None:
    """The last plant's backlog in one batch completes every row waiting for it: the runtime decodes and aligns it in
    slices of ``chunk_flags`` flags and judges the rows as they fill engine blocks, so 900 rows hold no more at once
    than 300 (decoded in one slice, 900 messages held several hundred bytes each of the interpreter's small objects
    at once, and the 900 rows they completed about as much again)."""
    small, small_verdicts = _catch_up_peak(300)
    large, large_verdicts = _catch_up_peak(900)
    assert large < 1.3 * small, (small, large)
    assert small_verdicts >= 10 and large_verdicts >= 3 * small_verdicts - 10
