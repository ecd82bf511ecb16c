"""The RCA stage's memory and state record do not grow with the rows and verdicts of a long stream (issue 32).

The soak (``tools/soak.py``) replays fault files over and over, seq continuing: the RCA worker issues
a verdict every few dozen rows for an hour. What the stage keeps between batches (the aligner's
memory of released rows, the engine's evidence, the verdict ids it emitted) must be bounded and
reach its size early: the bytes of every object reachable from the stage after one stretch of the
stream and after a second, longer one are the same to a few hundred bytes, however many verdicts
the second stretch issued (a set of the verdict ids, the stage's earlier memory, grew by about
100 bytes a verdict until 13,797 of them). The state record it writes after every batch is as long
too: the last row judged stands for the ids, and a restored stage still emits no verdict twice.

What a batch holds while it is digested does not grow with the batch either: a catch-up burst of
thousands of rows is taken in slices of ``BLOCK_ROWS`` rows of every plant and judged in engine
blocks and passes of ``BLOCK_ROWS`` rows at most (tracemalloc's peak the same for 5,000 rows as for
500), with the verdicts and state of the batch taken whole and of the rows one by one.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import math
import platform
import sys
import tracemalloc
import types
from typing import Any

import numpy as np
import pytest

from fedrca.application.site import rca_runtime
from fedrca.config import load_config
from fedrca.config.limits import MAX_REMEMBERED_VERDICTS
from fedrca.contracts import FlagMessage, Verdict, encode_flags
from fedrca.exceptions import DataError
from fedrca.rca import engine as engine_module
from fedrca.rca.engine import BLOCK_ROWS
from fedrca.rca.table import ROOT_CAUSE
from fedrca.streams import rca_stage
from fedrca.streams import runtime as runtime_module
from fedrca.streams.agents import _json
from fedrca.streams.aligner import FlagAligner
from fedrca.streams.rca_stage import RCAStage, VerdictIds
from fedrca.streams.runtime import RuntimeSettings
from tests.streams.test_rca_batch import CONFIG as BATCH_CONFIG
from tests.streams.test_rca_batch import stream

#: rows of one incident cycle: half quiet, half one plant alarming alone (the root named changes every cycle)
_CYCLE = 24
_SKIP = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)


def _flags(site: str, plants: list[str], lo: int, hi: int) -> list[FlagMessage]:
    out = []
    for seq in range(lo, hi):
        cycle, row = divmod(seq, _CYCLE)
        root = cycle % len(plants) if row >= _CYCLE // 2 else -1
        for m, plant in enumerate(plants):
            pair = (1, 1) if m == root else (0, 0)
            out.append(FlagMessage(site, plant, float(seq), seq, *pair, math.inf, "v0"))
    return out


def _deep_bytes(root: Any) -> int:
    """Bytes of every object reachable from ``root`` (each once; numpy arrays with their data; classes,
    modules and functions left out)."""
    seen: set[int] = set()
    stack = [root]
    total = 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _SKIP):
            continue
        seen.add(id(obj))
        if isinstance(obj, np.ndarray):
            total += sys.getsizeof(obj) + (obj.nbytes if obj.base is not None else 0)
            continue
        total += sys.getsizeof(obj)
        if isinstance(obj, dict):
            stack += [*obj.keys(), *obj.values()]
        elif isinstance(obj, (list, tuple, set, frozenset)) or type(obj).__name__ == "deque":
            stack += list(obj)
        if hasattr(obj, "__dict__"):
            stack.append(vars(obj))
        for slot in getattr(type(obj), "__slots__", ()):
            if hasattr(obj, slot):
                stack.append(getattr(obj, slot))
    return total


def _short_memory_stage() -> tuple[Any, list[str], Any]:
    """The RCA runtime of config/tep.yaml, its plants and its stage, with a memory of 1,000 released rows
    instead of the worker's 10,000 (the tests' time): full after a first stretch of rows."""
    config = load_config("config/tep.yaml")
    runtime = rca_runtime(config)
    stage = runtime.stage
    stage.aligner = FlagAligner(config.plant_names, allowed_lateness=stage.aligner.allowed_lateness, memory=1000)
    return runtime, config.plant_names, stage


def test_a_long_stream_of_incidents_leaves_the_stage_as_large_as_it_was() -> None:
    runtime, plants, stage = _short_memory_stage()
    verdicts = [0, 0]

    def stream(lo: int, hi: int, stretch: int) -> int:
        for start in range(lo, hi, 50):
            issued, rejected = runtime.process_flags(
                encode_flags(_flags(stage.site, plants, start, min(start + 50, hi)))
            )
            assert not rejected
            stage.get_state()  # as the worker does after every batch
            verdicts[stretch] += len(issued)
        return _deep_bytes(stage)

    before = stream(0, 1500, 0)
    after = stream(1500, 9500, 1)
    # the second stretch issued hundreds of verdicts, fewer than the ids remembered ...
    assert 150 <= verdicts[1] < MAX_REMEMBERED_VERDICTS
    assert len(stage._emitted) == sum(verdicts)
    # ... and left the stage as large as it was (the aligner's buffer of codes moves within its allocation)
    assert abs(after - before) < 1024, (after - before, verdicts)


def test_a_burst_of_rows_leaves_the_stage_as_large_as_it_was() -> None:
    """A plant worker that catches up after a restart publishes its backlog at once: the RCA worker
    then takes hundreds of rows per batch instead of a few. The hour's soak (docs/streams.md, "Soak")
    saw the RCA worker's RSS step up at each such burst; what the stage keeps must not, so the steps
    are the allocator's high-water mark, not state that grows with each burst."""
    runtime, plants, stage = _short_memory_stage()

    verdicts = [0]

    def stream(lo: int, hi: int, batch: int) -> int:
        for start in range(lo, hi, batch):
            issued, rejected = runtime.process_flags(
                encode_flags(_flags(stage.site, plants, start, min(start + batch, hi)))
            )
            assert not rejected
            stage.get_state()
            verdicts[0] += len(issued)
        return _deep_bytes(stage)

    sizes = []
    seq = 1200  # the aligner's memory (1,000 rows) full, a whole number of incident cycles
    stream(0, seq, 6)
    for _ in range(3):
        stream(seq, seq + 1200, 600)  # the burst: 600 rows a batch
        sizes.append(stream(seq + 1200, seq + 1488, 6))  # steady again, 6 rows a batch
        seq += 1488
    assert seq % _CYCLE == 0
    assert max(sizes) - min(sizes) < 1024, sizes
    assert sizes[0] > 100_000  # the stage itself was measured, not an empty shell
    assert verdicts[0] >= 100  # the bursts were judged, not only buffered


def test_the_remembered_ids_forget_the_oldest_first() -> None:
    ids = VerdictIds(3)
    names = [f"{k:016x}" for k in range(5)]
    assert [ids.add(v) for v in names[:3]] == [True, True, True]
    assert not ids.add(names[1])
    assert ids.add(names[3]) and ids.add(names[4])
    assert ids.ids() == names[2:] and len(ids) == 3
    assert names[0] not in ids and names[4] in ids
    assert ids.text() == "".join(names[2:])
    with pytest.raises(DataError):
        ids.add("not-a-verdict-id")
    loaded = VerdictIds(3)
    loaded.load(names)  # at once, as one by one
    assert loaded.ids() == names[2:] and names[1] not in loaded and not loaded.add(names[4])
    assert loaded.add(names[0]) and loaded.ids() == [*names[3:], names[0]]


def test_an_earlier_states_ids_read_back_and_the_state_writes_none() -> None:
    config = load_config("config/tep.yaml")
    runtime = rca_runtime(config)
    stage = runtime.stage
    names = [f"{k:016x}" for k in range(MAX_REMEMBERED_VERDICTS + 3)]
    stage.remember(names)
    state = stage.get_state()
    assert "emitted" not in state and state["judged"] is None
    # the one string of ids, then the list of ids, of earlier states: the newest kept, none emitted again
    for emitted in ("".join(names), names):
        stage.set_state({**state, "emitted": emitted})
        assert stage._emitted.ids() == names[3:]
        assert stage.get_state() == state
    stage.set_state(state)
    assert not len(stage._emitted)


def test_the_state_record_is_as_long_whatever_the_verdicts_issued() -> None:
    """The state the RCA worker writes after every batch does not grow with the verdicts it issued: one seq
    (``judged``) stands for every id (16 bytes an id while the ids were written, up to 13,797 of them)."""
    runtime, plants, stage = _short_memory_stage()
    verdicts = [0, 0]
    sizes = []
    # both stretches end at the same point of the incidents' period (5 cycles: every plant root once)
    for stretch, (lo, hi) in enumerate([(0, 1500), (1500, 1500 + 68 * 5 * _CYCLE)]):
        for start in range(lo, hi, 50):
            issued, _ = runtime.process_flags(encode_flags(_flags(stage.site, plants, start, min(start + 50, hi))))
            verdicts[stretch] += len(issued)
        sizes.append(len(_json(stage.get_state())))
    assert verdicts[0] >= 20 and verdicts[1] >= 150, verdicts
    # the counters' digits and the compressed memory of released rows may differ by a few bytes
    assert abs(sizes[1] - sizes[0]) < 256, (sizes, verdicts)
    stage.remember([f"{k:016x}" for k in range(MAX_REMEMBERED_VERDICTS)])
    assert len(_json(stage.get_state())) == sizes[1]


class _Reissuing:
    """An engine that issues a verdict at every row and, with every block, the verdicts of the two rows
    before the block again (as an engine re-issuing the windows of rows it judged would)."""

    def __init__(self, site: str) -> None:
        self.site = site
        self.last: int | None = None

    def update_block(self, seqs: Any, codes: Any, ts: Any = None, levels: Any = None) -> list[Verdict]:
        rows = [int(s) for s in np.asarray(seqs)]
        again = [] if self.last is None else [self.last - 1, self.last]
        self.last = rows[-1]
        return [Verdict(self.site, float(s), s, "a", ("b",), 0.9, (s, s), ROOT_CAUSE) for s in again + rows]

    def get_state(self) -> dict[str, Any]:
        return {"last": self.last}

    def set_state(self, state: dict[str, Any]) -> None:
        self.last = state["last"]

    def reset(self) -> None:
        self.last = None


def test_a_restored_stage_emits_no_verdict_twice_whatever_its_engine_issues_again() -> None:
    """Across a restart (the state through JSON, the flags after it redelivered from before it) every verdict
    is emitted exactly once, as in one uninterrupted stream, though the engine issues earlier rows' verdicts
    again with every block: the restored stage remembers no id, only the last row it judged."""
    plants = ["a", "b"]

    def run(stage: RCAStage, lo: int, hi: int) -> list[Verdict]:
        out: list[Verdict] = []
        for seq in range(lo, hi):
            for plant in plants:
                out += stage.add(FlagMessage("s", plant, float(seq), seq, 0, 0, math.inf, "v0"))[0]
        return out

    def stage() -> RCAStage:
        return RCAStage("s", plants, _Reissuing("s"), allowed_lateness=0)

    straight = stage()
    expected = run(straight, 10, 60)
    assert [v.seq for v in expected] == list(range(10, 60))  # each row's verdict once
    first = stage()
    part = run(first, 10, 35)
    state = json.loads(_json(first.get_state()))
    assert state["judged"] == 34 and "emitted" not in state
    second = stage()
    second.set_state(state)
    rest = run(second, 30, 60)  # rows 30-34 redelivered (duplicates), then the rows after the state
    assert [v.id for v in part + rest] == [v.id for v in expected]


# -- a burst's working memory -------------------------------------------------------------------------------
#: rows streamed in small batches before a burst: the aligner's memory (1,000 rows) full, whole incident cycles
_WARM = 1200


def _burst_flags(site: str, plants: list[str], lo: int, hi: int) -> list[FlagMessage]:
    """:func:`_flags` with each plant's severity level and, in the last third of every 300 rows, a sensor fault of
    the second plant (its events come among the process verdicts, across the blocks a burst is judged in)."""
    return [
        dataclasses.replace(f, level=2 * f.zc, sensor_fault=f.plant == plants[1] and f.seq % 300 >= 200)
        for f in _flags(site, plants, lo, hi)
    ]


def _digest(rows: int, bounded: bool = True, traced: bool = True) -> tuple[int, list[bytes], bytes]:
    """A burst of ``rows`` rows of every plant in one batch of the RCA runtime, after a steady stream: the bytes
    it held at most beyond what is kept after it (tracemalloc's peak over its end: numpy reports its arrays'
    data to tracemalloc too; 0 untraced), its verdicts and the state after it. ``bounded=False``: the batch
    taken whole and judged in one engine block, as before the bound (``RCARuntime.chunk_flags``,
    ``BLOCK_ROWS``)."""
    runtime, plants, stage = _short_memory_stage()
    site = stage.site
    for start in range(0, _WARM, 6):
        runtime.process_flags(encode_flags(_burst_flags(site, plants, start, start + 6)))
    raws = encode_flags(_burst_flags(site, plants, _WARM, _WARM + rows))
    with pytest.MonkeyPatch.context() as patch:
        if not bounded:
            patch.setattr(runtime, "chunk_flags", len(raws))
            patch.setattr(rca_stage, "BLOCK_ROWS", rows)
            patch.setattr(engine_module, "BLOCK_ROWS", rows)
        gc.collect()
        if traced:
            tracemalloc.start()
        try:
            verdicts, rejected = runtime.process_flags(raws)
            kept, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert not rejected
    return peak - kept, [v.encode() for v in verdicts], _json(stage.get_state())


def test_a_burst_is_digested_in_the_working_memory_of_a_few_hundred_rows() -> None:
    """A plant worker that catches up after a restart publishes its backlog at once, and the RCA worker takes
    it in batches of up to ``--batch-size`` flags (more rows than its steady batches hold by a hundredfold).
    The RCA runtime takes a batch in slices of ``BLOCK_ROWS`` rows of every plant and the engine judges at most
    as many rows in a pass, so what a batch holds while it is digested is the same for a burst of 5,000 rows as
    for one of 500: ten times the rows need no more memory at once, so they cannot lift the allocator's
    high-water mark further (docs/streams.md, "Soak").
    The batch taken whole holds several times as much already at 2,000 rows, and gives the same verdicts and
    state."""
    small, _, _ = _digest(500)
    large, verdicts, state = _digest(5000)
    assert large < 1.25 * small, (small, large)
    whole = _digest(2000, bounded=False)[0]
    assert whole > 4 * small, (small, whole)  # what the bound saves (and the measure sees)
    _, whole_verdicts, whole_state = _digest(5000, bounded=False, traced=False)
    assert verdicts == whole_verdicts and state == whole_state
    assert len(verdicts) >= 100 and any(b'"outcome":"sensor_fault"' in v for v in verdicts)


def test_the_stage_judges_many_rows_released_at_once_in_blocks() -> None:
    """Rows released at once beyond ``BLOCK_ROWS`` (the rows of a plant whose flags never came, released at the
    end of a stream or when the lateness runs out) go to the engine in blocks of ``BLOCK_ROWS`` rows at most,
    with the verdicts (sensor events in their place) and state of the rows judged one by one."""
    stages = []
    for _ in range(2):
        runtime, plants, stage = _short_memory_stage()
        flags = [f for f in _burst_flags(stage.site, plants, 0, 2 * BLOCK_ROWS + 88) if f.plant != plants[3]]
        for start in range(0, len(flags), 500):
            assert runtime.process_flags(encode_flags(flags[start : start + 500])) == ([], [])  # rows wait
        stages.append(stage)
    blocks, one_by_one = stages
    rows = blocks.aligner.flush()
    assert len(rows) == 2 * BLOCK_ROWS + 88
    passes: list[int] = []
    update_block = blocks.engine.update_block

    def counted(seqs: Any, *args: Any) -> list[Verdict]:
        passes.append(len(seqs))
        return update_block(seqs, *args)

    blocks.engine.update_block = counted  # type: ignore[method-assign]
    got = blocks.judge(rows)
    want = [v for row in one_by_one.aligner.flush() for v in one_by_one.judge([row])]
    assert passes == [BLOCK_ROWS, BLOCK_ROWS, 88]
    assert [v.encode() for v in got] == [v.encode() for v in want]
    assert len(want) >= 20 and any(v.is_sensor_event for v in want)
    assert _json(blocks.get_state()) == _json(one_by_one.get_state())


def test_a_long_block_takes_passes_of_block_rows() -> None:
    """The engine takes a block longer than ``BLOCK_ROWS`` rows in passes of ``BLOCK_ROWS`` rows at most (its
    intermediates those of one pass), with the verdicts, decision and state of the rows one by one."""
    config = load_config("config/tep.yaml")
    blocks, rows = rca_runtime(config).engine, rca_runtime(config).engine
    plants = list(blocks.plants)
    T = 2 * BLOCK_ROWS + 37
    flags = {(f.seq, f.plant): f for f in _burst_flags(config.site, plants, 0, T)}
    codes = np.array([[2 * flags[t, p].zc + flags[t, p].za for p in plants] for t in range(T)])
    levels = np.array([[flags[t, p].level for p in plants] for t in range(T)])
    seqs, ts = np.arange(T), 180.0 * np.arange(T)
    passes: list[int] = []
    block = blocks._block

    def counted(seqs: Any, *args: Any) -> list[Verdict]:
        passes.append(len(seqs))
        return block(seqs, *args)

    blocks._block = counted  # type: ignore[method-assign]
    got = blocks.update_block(seqs, codes, ts, levels)
    want = rows.update_rows(seqs, codes, ts, levels)
    assert passes == [BLOCK_ROWS, BLOCK_ROWS, 37]
    assert got == want and len(want) >= 20
    assert blocks.get_state() == rows.get_state() and blocks.decision == rows.decision


def test_a_batch_in_slices_gives_what_it_gives_whole() -> None:
    """A batch taken in slices of ``RCARuntime.chunk_flags`` flags gives the verdicts, dead letters and state of
    the batch taken whole, whatever the stream: late, duplicate, withheld, conflicting and malformed flags among
    the plain ones (a slice goes through the batch path or flag by flag on its own), plants drifting apart."""
    raws = stream(11, 300, 0.03, pace=3)
    outs = []
    for chunk in (len(raws), 7, 101):
        runtime = rca_runtime(BATCH_CONFIG, settings=RuntimeSettings(allowed_lateness=8))
        runtime.chunk_flags = chunk
        out: list[Any] = []
        for lo in range(0, len(raws), 400):
            verdicts, rejected = runtime.process_flags(raws[lo : lo + 400])
            out += [[v.encode() for v in verdicts], [(raw, e.reason, e.detail) for raw, e in rejected]]
            out.append(_json(runtime.stage.get_state()))
        outs.append(out)
    assert outs[1] == outs[0] and outs[2] == outs[0]
    assert any(outs[0][0::3]) and any(outs[0][1::3])  # verdicts and dead letters were compared


def test_the_heap_is_trimmed_after_a_batch_of_more_than_one_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    """After a batch larger than one slice (a catch-up burst) the runtime hands the C heap's free pages back
    (``release_free_heap``: glibc keeps them otherwise, and RSS stays at the burst's high-water mark); a
    steady batch is not trimmed."""
    if platform.libc_ver()[0] == "glibc":  # the C library of the workers' images and of CI
        assert runtime_module.release_free_heap()
    calls: list[int] = []
    monkeypatch.setattr(runtime_module, "release_free_heap", lambda: calls.append(1) or True)
    runtime, plants, stage = _short_memory_stage()
    site = stage.site
    for start in range(0, _WARM, 6):
        runtime.process_flags(encode_flags(_burst_flags(site, plants, start, start + 6)))
    assert calls == []
    rows = runtime.chunk_flags // len(plants)
    runtime.process_flags(encode_flags(_burst_flags(site, plants, _WARM, _WARM + rows)))  # one slice
    assert calls == []
    runtime.process_flags(encode_flags(_burst_flags(site, plants, _WARM + rows, _WARM + 2 * rows + 1)))
    assert calls == [1]
