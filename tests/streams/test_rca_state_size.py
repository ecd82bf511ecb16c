"""The RCA worker's state record and streaming memory at their worst, against the bounds ``fedrca run`` refuses by.

``fedrca run`` refuses an ``--allowed-lateness`` (and an ``rca.horizon``) whose state record would not
fit its room in a Kafka record (:func:`fedrca.config.limits.rca_state_bytes`), and a ``--batch-size``
whose streaming state would not fit the memory limit (:func:`fedrca.config.limits.stream_bytes`, whose
terms in the lateness and the aligner's memory are the aligner's). Each bound is checked here against
what the real code writes or holds at its worst, from above and from below: a bound far above the
worst refuses sensible settings, one below it lets a worker write a record the broker refuses.
"""

from __future__ import annotations

import gc
import math
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from fedrca.application.site import rca_runtime
from fedrca.config import SiteConfig, load_config
from fedrca.config.limits import (
    MAX_SEVERITY_LEVELS,
    rca_record_room,
    rca_state_bytes,
    released_rows_bytes,
    waiting_rows_bytes,
)
from fedrca.contracts import FlagMessage, encode_flags
from fedrca.contracts.messages import MAX_SEQ
from fedrca.streams.agents import _json
from fedrca.streams.aligner import FlagAligner
from fedrca.streams.loop import state_record
from fedrca.streams.runtime import RuntimeSettings

REPO = Path(__file__).resolve().parents[2]

#: The longest plant name site ``linear`` takes (``linear.deadletter.<plant>``: a topic of 249 characters)
_NAME = 231
#: The first seq: 16 digits, as many as a flag's seq has (at most MAX_SEQ = 2^53)
_SEQ = 8 * 10**15
#: Rows the aligner remembers (FlagAligner's memory) and the rows its compressed blocks may hold beyond them
_MEMORY, _BLOCK_ROWS = 10_000, 500
#: The largest next offset a state record's head holds (18 digits, fedrca.streams.loop._STATE_HEAD)
_OFFSET = 10**18 - 1
#: How far below its bound the worst record may stay: a bound more than 1/0.9 of the worst is an over-estimate
_RECORD_FACTOR = 0.9
#: The same for the memory the aligner holds (resident bytes in a child process; tracemalloc's for its memory of
#: released rows)
_MEMORY_FACTOR = 0.7


def _long_names_config(tmp_path: Path, horizon: int) -> SiteConfig:
    """config/synthetic_linear.yaml with plant names of ``_NAME`` characters, the most severity levels and an
    evidence window of ``horizon`` rows."""
    names = ["p" * (_NAME - 1) + "1", "p" * (_NAME - 1) + "2"]
    text = (REPO / "config/synthetic_linear.yaml").read_text()
    text = text.replace("plant1", names[0]).replace("plant2", names[1])
    levels = f"    calibration: in-sample\n    severity_levels: {MAX_SEVERITY_LEVELS}\n"
    text = text.replace("    calibration: in-sample\n", levels)
    text += f"\nrca:\n  horizon: {horizon}\n"
    path = tmp_path / "long.yaml"
    path.write_text(text)
    config = load_config(path)
    assert config.plant_names == names and config.severity_levels == MAX_SEVERITY_LEVELS
    return config


def _released_rows(site: str, plants: list[str], rows: int, jump: int, rng: np.random.Generator) -> list[FlagMessage]:
    """Flags of ``rows`` complete rows ``jump`` seqs apart (each its own run of seqs in the aligner's memory), each
    plant's flag at random: a pair of bits with a level and a sensor-fault bit, withheld or degraded."""
    M = len(plants)
    kinds = rng.integers(0, 6, (rows, M))  # 0-3: the pair 2 zc + za, 4: withheld, 5: degraded
    levels = rng.integers(0, MAX_SEVERITY_LEVELS, (rows, M))
    faults = rng.random((rows, M)) < 0.5
    flags = []
    for k in range(rows):
        for m, plant in enumerate(plants):
            kind = int(kinds[k, m])
            pair = kind < 4
            flags.append(
                FlagMessage(
                    site, plant, 180.0 * k, _SEQ + k * jump, kind // 2 if pair else 0, kind % 2 if pair else 0,
                    math.inf, "v0", withheld=kind == 4, degraded=kind == 5,
                    level=int(levels[k, m]) if pair else None, sensor_fault=bool(faults[k, m]) and kind != 4,
                )
            )  # fmt: skip
    return flags


def _waiting_rows(site: str, plants: list[str], first: int, rows: int, rng: np.random.Generator) -> list[FlagMessage]:
    """Flags of ``rows`` rows from seq ``first`` that all wait: every plant's flag of each row but the first, whose
    first plant's flag alone makes every later row wait behind it; each flag with its own time, a level and its
    sensor-fault bit."""
    flags = []
    for j in range(rows):
        bits = rng.integers(0, 2, (len(plants), 2))
        levels = rng.integers(0, MAX_SEVERITY_LEVELS, len(plants))
        for m, plant in enumerate(plants[:1] if j == 0 else plants):
            flags.append(FlagMessage(
                site, plant, 1e7 + 180.0 * j + 0.5 * m, first + j, int(bits[m, 0]), int(bits[m, 1]), math.inf, "v0",
                level=int(levels[m]), sensor_fault=True,
            ))  # fmt: skip
    return flags


def test_the_worst_rca_state_record_is_within_rca_state_bytes_and_near_it(tmp_path: Path) -> None:
    """The RCA's state record at the largest ``--allowed-lateness`` ``fedrca run`` accepts, every term at its worst
    through the real runtime: the longest plant names, 16-digit seqs, every row the lateness allows waiting with
    each plant's own time, level and sensor-fault bit, the aligner's memory full of rows that each skipped samples
    (a run of seqs a row) with random codes in all its blocks, the most severity levels in the engine. Its record
    is within :func:`rca_state_bytes` and above ``_RECORD_FACTOR`` of it."""
    horizon = 1000
    config = _long_names_config(tmp_path, horizon)
    plants = list(config.plant_names)
    room = rca_record_room()
    row = rca_state_bytes(plants, 1, horizon) - rca_state_bytes(plants, 0, horizon)
    most = (room - rca_state_bytes(plants, 0, horizon)) // row  # as fedrca.cli.run.check_run_options
    assert rca_state_bytes(plants, most, horizon) <= room < rca_state_bytes(plants, most + 1, horizon)
    runtime = rca_runtime(config, settings=RuntimeSettings(allowed_lateness=most))
    rng = np.random.default_rng(38)
    # a row a ring (most + 2 rows) past the next one is released as soon as it is complete, on its own
    jump = most + 3
    released = _MEMORY + _BLOCK_ROWS - 1  # the memory full, and the most rows its blocks hold (21 strings)
    flags = _released_rows(config.site, plants, released, jump, rng)
    flags += _waiting_rows(config.site, plants, _SEQ + released * jump, most + 1, rng)
    assert flags[-1].seq <= MAX_SEQ
    raws = encode_flags(flags)
    for lo in range(0, len(raws), 4000):
        assert not runtime.process_flags(raws[lo : lo + 4000])[1]
    state = runtime.stage.get_state()
    aligner = state["aligner"]
    assert len(aligner["buffer"]) == most + 1 and {"plant_ts", "leveled", "levels", "faulty"} <= set(aligner)
    assert len(aligner["released_runs"]) == _MEMORY and len(aligner["released_blocks_z"]) == 21
    assert len(state["engine"]["rows"]) == horizon
    record = state_record(_OFFSET, _json(state))
    bound = rca_state_bytes(plants, most, horizon)
    print(f"lateness {most}: record {len(record):,} B, bound {bound:,} B ({len(record) / bound:.3f}), room {room:,} B")
    assert _RECORD_FACTOR * bound <= len(record) <= bound


def test_a_waiting_row_costs_its_json_in_the_record_whatever_the_plants() -> None:
    """Per waiting row the record grows by what :func:`rca_state_bytes` counts a row, for 2 and 5 plants (the
    difference of two aligners' states, 1,000 and 3,000 rows waiting, all of them at their worst)."""
    for M in (2, 5):
        plants = [f"plant{m}" for m in range(M)]
        sizes = []
        for lateness in (999, 2999):
            aligner = FlagAligner(plants, allowed_lateness=lateness)
            for flag in _waiting_rows("s", plants, _SEQ, lateness + 1, np.random.default_rng(M)):
                aligner.add(flag)
            sizes.append(len(_json(aligner.get_state())))
        per_row = (sizes[1] - sizes[0]) / 2000
        bound = rca_state_bytes(plants, 1, 0) - rca_state_bytes(plants, 0, 0)
        print(f"{M} plants: {per_row:.2f} B a waiting row, bound {bound}")
        assert 0.95 * bound <= per_row <= bound


#: A child process's resident memory over an aligner of lateness L made, filled with L + 1 rows at their worst (fed
#: 1,000 rows at a time: no flag list as long as the rows) and writing its state record as the worker does after a
#: batch while it keeps the previous batch's state and record: VmHWM after less VmRSS before (the peak reset then,
#: /proc/self/clear_refs). Resident bytes, not tracemalloc's: orjson allocates its output's worst-case capacity
#: (several times the JSON it writes) and leaves the pages it does not write untouched.
_CHILD = """
import gc, sys
import numpy as np
from fedrca.streams.agents import _json
from fedrca.streams.aligner import FlagAligner
from fedrca.streams.loop import state_record
from tests.streams.test_rca_state_size import _OFFSET, _SEQ, _waiting_rows

def status(key):
    return next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith(key + ":"))

M, L = int(sys.argv[1]), int(sys.argv[2])
plants = [f"plant{m}" for m in range(M)]
rng = np.random.default_rng(L)
warm = FlagAligner(plants, allowed_lateness=10)  # every code path once: its caches and allocator pools made
for flag in _waiting_rows("s", plants, _SEQ, 1000, rng):
    warm.add(flag)
_json(warm.get_state())
del warm, flag
gc.collect()
with open("/proc/self/clear_refs", "w") as out:
    out.write("5")
before = status("VmRSS")
aligner = FlagAligner(plants, allowed_lateness=L)
for lo in range(0, L + 1, 1000):
    for flag in _waiting_rows("s", plants, _SEQ + lo, min(1000, L + 1 - lo), rng):
        aligner.add(flag)
del flag
gc.collect()
previous = _json(aligner.get_state())
kept = state_record(_OFFSET, previous)
record = state_record(_OFFSET, _json(aligner.get_state()))
assert len(aligner.get_state()["buffer"]) == L + 1 and record == kept
print(status("VmHWM") - before, len(record))
"""


def _resident(M: int, lateness: int) -> tuple[int, int]:
    """``_CHILD``'s resident bytes and record length for M plants and ``lateness``."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(M), str(lateness)], capture_output=True, text=True, cwd=REPO, timeout=600,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    held, record = done.stdout.split()
    return int(held), int(record)


@pytest.mark.parametrize("M", [2, 5])
def test_the_rows_waiting_take_at_most_what_stream_bytes_counts_a_row(M: int) -> None:
    """Per row of allowed lateness, the aligner's ring and the state written from it (resident at the write's peak,
    the previous batch's state and record kept) plus the producer's copy of the record take at most what
    :func:`waiting_rows_bytes` (a term of :func:`stream_bytes`) counts a row, and at least ``_MEMORY_FACTOR`` of it
    (the difference of 5,000 and 25,000 rows, each in a child process)."""
    (few, few_record), (many, many_record) = _resident(M, 4999), _resident(M, 24999)
    held = (many - few) / 20_000
    producer = (many_record - few_record) / 20_000  # a copy of the record in the producer's buffers (not here)
    bound = (waiting_rows_bytes(M, 24999) - waiting_rows_bytes(M, 4999)) / 20_000
    print(f"{M} plants: {held:.1f} B a row resident + {producer:.1f} B the producer's copy, bound {bound:.0f}")
    assert _MEMORY_FACTOR * bound <= held + producer <= bound


@pytest.mark.parametrize("M", [2, 5])
def test_the_memory_of_released_rows_takes_at_most_what_stream_bytes_counts(M: int) -> None:
    """The aligner's memory of its 10,000 released rows, each its own run of seqs (the samples between them
    skipped) with random codes: at most what :func:`released_rows_bytes` (a term of :func:`stream_bytes`) counts,
    at least ``_MEMORY_FACTOR`` of it (tracemalloc's bytes, after against before)."""
    plants = [f"plant{m}" for m in range(M)]
    # as many rows as fill the memory and its blocks, each a ring past the one before (released on its own)
    flags = _released_rows("s", plants, _MEMORY + _BLOCK_ROWS - 1, 20, np.random.default_rng(M))
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        aligner = FlagAligner(plants, allowed_lateness=10)
        for flag in flags:
            aligner.add(flag)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(aligner.get_state()["released_runs"]) == _MEMORY
    bound = released_rows_bytes(M)
    print(f"{M} plants: {held:,} B for {_MEMORY:,} released rows, bound {bound:,}")
    assert _MEMORY_FACTOR * bound <= held <= bound
