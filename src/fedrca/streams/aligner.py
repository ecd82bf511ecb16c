"""Align published flags of all plants by sample (seq) before RCA, deterministically.

Flags of one sample arrive from different plant processors in any order. The
aligner releases rows strictly in seq order:

* a row is released as soon as every plant has reported it (and all earlier
  rows are released);
* a row still incomplete when a flag ``allowed_lateness`` samples newer has
  arrived is released with the missing plants absent (the RCA treats a missing
  plant as "no evidence");
* a flag for an already released seq is a *duplicate* (same bits as released:
  ignored, e.g. a redelivery after a restart) or *late* (new information that
  came too late: reported, the caller dead-letters it);
* a second, different flag for a buffered (plant, seq) keeps the first one;
* a *withheld* flag (the plant's privacy budget stopped it publishing) completes its
  row without evidence: the plant is absent from the row's flags, and the row lists it
  in ``withheld``;
* a *degraded* flag (the plant's row had too few usable sensors to be scored) completes
  its row the same way, listed in ``degraded``: no evidence, neither alarm nor clearance;
* every flag but a withheld one carries the plant's sensor-fault bit, released with the row
  (``sensor``);
* a row's time is the median of its plants' times; with ``max_clock_skew`` a plant whose time
  is further from it than that, while at least two plants agree with it, is judged without
  (listed in ``clock``; its evidence and sensor bit left out): its row stands for another moment.

The stream starts at the first row released (before it, at the smallest seq seen): a
flag older than that row that arrives after it is *late*. Past its start, the released
sequence depends only on the flags and the lateness, not on timing: the same input
always yields the same rows and hence the same verdicts
(tests/streams/test_aligner.py::test_any_arrival_order_within_lateness_gives_the_same_rows).
"""

from __future__ import annotations

import base64
import itertools
import math
import zlib
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from fedrca.contracts import FlagColumns, FlagMessage, FlagState
from fedrca.exceptions import ConfigError

__all__ = ["AlignedRow", "FlagAligner"]

#: How the buffer stores a flag without evidence (present for completeness).
_WITHHELD = (-1, -1)
_DEGRADED = (-2, -2)
#: The memory's character of each stored pair (a row's code: one per plant, "-" when absent)
_ABSENT = (-3, -3)
_CHARS = {(zc, za): str(int(FlagState.of(zc, za))) for zc in (0, 1) for za in (0, 1)} | {
    _WITHHELD: "w",
    _DEGRADED: "d",
    _ABSENT: "-",
}
#: Released rows per compressed block of the memory's codes in the state (:meth:`FlagAligner.get_state`)
_BLOCK_ROWS = 500


def _pack(codes: bytes | bytearray) -> str:
    """Codes as the state writes them: zlib (level 1), base64."""
    return base64.b64encode(zlib.compress(codes, 1)).decode("ascii")


def _unpack(text: str) -> bytes:
    return zlib.decompress(base64.b64decode(text))


@dataclass(frozen=True)
class AlignedRow:
    """Flags of one sample: ``flags[plant] = (zc, za)``; absent plants did not report in time."""

    seq: int
    ts: float
    flags: dict[str, tuple[int, int]]
    complete: bool = True
    withheld: tuple[str, ...] = ()
    degraded: tuple[str, ...] = ()
    #: published severity levels of the plants that publish them (FlagMessage.level)
    levels: dict[str, int] = field(default_factory=dict)
    #: published sensor-fault bits of the plants present and not withheld (FlagMessage.sensor_fault)
    sensor: dict[str, int] = field(default_factory=dict)
    #: plants judged without because their time disagreed with the others' (``max_clock_skew``)
    clock: tuple[str, ...] = ()
    #: each present plant's time minus the row's time (seconds)
    offsets: dict[str, float] = field(default_factory=dict)

    def missing(self, plants: list[str]) -> tuple[str, ...]:
        """Plants of ``plants`` whose flag had not come when the row was released (late or lost)."""
        present = set(self.flags) | set(self.withheld) | set(self.degraded) | set(self.clock)
        return tuple(p for p in plants if p not in present)


class FlagAligner:
    """Orders flags by seq across plants with a bounded lateness (in samples).

    Parameters
    ----------
    plants : every plant that publishes flags
    allowed_lateness : how many samples a row may wait for missing plants
    memory : how many released rows are remembered to recognise duplicates
    max_clock_skew : seconds a plant's time may differ from its row's before the row is judged
        without it (inf: never)

    Examples
    --------
    >>> from fedrca.contracts import FlagMessage
    >>> al = FlagAligner(["a", "b"], allowed_lateness=2)
    >>> al.add(FlagMessage("s", "a", 0.0, 0, 1, 1, 1.0, "v"))
    ([], 'buffered')
    >>> rows, status = al.add(FlagMessage("s", "b", 0.0, 0, 0, 0, 1.0, "v"))
    >>> [(r.seq, r.flags) for r in rows], status
    ([(0, {'a': (1, 1), 'b': (0, 0)})], 'buffered')
    """

    def __init__(
        self, plants: list[str], allowed_lateness: int = 5, memory: int = 10_000, max_clock_skew: float = math.inf
    ) -> None:
        if allowed_lateness < 0:
            raise ConfigError(f"allowed lateness must be >= 0 samples, got {allowed_lateness}")
        if not max_clock_skew >= 0:
            raise ConfigError(f"max clock skew must be >= 0 seconds, got {max_clock_skew}")
        self.plants = list(plants)
        self.allowed_lateness = allowed_lateness
        self.memory = memory
        self.max_clock_skew = float(max_clock_skew)
        self._buffer: dict[int, dict[str, tuple[int, int]]] = {}
        self._ts: dict[int, float] = {}
        self._plant_ts: dict[int, dict[str, float]] = {}  # a plant's time when it differs from _ts
        self._sensor: dict[int, list[str]] = {}  # plants whose sensor-fault bit is 1
        self._levels: dict[int, dict[str, int]] = {}
        self._next_seq: int | None = None
        self._max_seq = -1
        self._index = {p: i for i, p in enumerate(self.plants)}
        # Released rows as (seq, one character per plant: "-" absent, else its FlagState). The
        # memory is written with every batch of a worker, so its serialised form is kept up to
        # date as rows come and go: runs of consecutive seqs and the codes as one ASCII buffer, compressed
        # by blocks of _BLOCK_ROWS rows as each fills (once): a batch's state compresses only the rows
        # after the last full block (`_tail` of them); the first block's `_skip` rows are forgotten.
        self._released: deque[tuple[int, str]] = deque(maxlen=memory)
        self._runs: deque[list[int]] = deque()  # [first seq, count]
        self._codes = bytearray()
        self._blocks: deque[str] = deque()
        self._skip = 0
        self._tail = 0

    def add(self, flag: FlagMessage) -> tuple[list[AlignedRow], str]:
        """Add one flag; returns the rows now released and the flag's status.

        Status is ``buffered``, ``duplicate`` (ignored), ``conflict`` (a different
        flag for a buffered (plant, seq); first kept) or ``late`` (dead-letter it).
        """
        seq = flag.seq
        if self._next_seq is None or (not self._released and seq < self._next_seq):
            # Until the first row is released, the stream starts at the smallest seq seen.
            self._next_seq = seq
        next_seq = self._next_seq
        # a withheld sample is stored as (-1, -1), a degraded one as (-2, -2): present for completeness, no evidence
        bits = _WITHHELD if flag.withheld else _DEGRADED if flag.degraded else (flag.zc, flag.za)
        if seq < next_seq:
            for released, code in reversed(self._released):
                if released == seq:
                    index = self._index.get(flag.plant)
                    same = index is not None and code[index] == self._char(bits)
                    return [], "duplicate" if same else "late"
                if released < seq:
                    break
            return [], "late"
        buffer = self._buffer
        row = buffer.get(seq)
        if row is None:
            row = buffer[seq] = {}
        status = "buffered"
        plant = flag.plant
        if plant in row:
            status = "duplicate" if row[plant] == bits else "conflict"
        else:
            row[plant] = bits
            first_ts = self._ts.setdefault(seq, flag.ts)
            if flag.ts != first_ts:
                self._plant_ts.setdefault(seq, {})[plant] = flag.ts
            if flag.sensor_fault and not flag.withheld:
                self._sensor.setdefault(seq, []).append(plant)
            if flag.level is not None and flag.evidence:
                self._levels.setdefault(seq, {})[plant] = flag.level
        if seq > self._max_seq:
            self._max_seq = seq
        head = buffer.get(next_seq)
        if head is not None and len(head) < len(self.plants) and self._max_seq - next_seq <= self.allowed_lateness:
            return [], status  # the next row waits for its plants (what _release finds first)
        return self._release(), status

    def add_columns(self, flags: FlagColumns) -> list[AlignedRow] | None:
        """Add a batch of plain flags (none withheld or degraded) at once when none of them can be late, a
        duplicate or a conflict; returns the rows now released, or None (nothing added: add them one by one
        with :meth:`add`).

        The batch is taken whole when the stream has started, every flag is for a row not released
        yet and not already held for its plant, no (plant, seq) comes twice, no row of the stream
        is missing between the next one to release and the newest (so none is skipped), and each
        flag's row is within the lateness of the newest seq before it (so none was released as
        overdue before it came). Then every flag is ``buffered`` and the rows released, their
        contents and the aligner's state equal those of :meth:`add` flag by flag: completeness and
        the newest seq only grow, so one release after the batch releases what releases after each
        flag would (``tests/streams/test_aligner.py::test_columns_equal_flag_by_flag``).
        """
        seqs, plants = flags.seq, flags.plant
        next_seq, buffer = self._next_seq, self._buffer
        if not seqs:
            return []
        if next_seq is None or not self._released or min(seqs) < next_seq:
            return None
        if len(set(zip(plants, seqs, strict=True))) != len(seqs):
            return None
        if buffer and any(s in buffer and p in buffer[s] for p, s in zip(plants, seqs, strict=True)):
            return None
        held = set(seqs).union(buffer)
        if len(held) != max(held) - next_seq + 1:  # a row missing: it would be skipped
            return None
        lateness = self.allowed_lateness
        newest = itertools.accumulate(seqs, max, initial=self._max_seq)
        if any(s < before - lateness for s, before in zip(seqs, newest, strict=False)):
            return None
        ts_of, plant_ts, levels = self._ts, self._plant_ts, self._levels
        for plant, seq, ts, zc, za, level in zip(plants, seqs, flags.ts, flags.zc, flags.za, flags.level, strict=True):
            row = buffer.get(seq)
            if row is None:
                row = buffer[seq] = {}
            row[plant] = (zc, za)
            first_ts = ts_of.setdefault(seq, ts)
            if ts != first_ts:
                plant_ts.setdefault(seq, {})[plant] = ts
            if level is not None:
                levels.setdefault(seq, {})[plant] = level
        if flags.sensor_fault is not None:  # as add: a plain flag's sensor-fault bit, in arrival order
            sensor = self._sensor
            for plant, seq, fault in zip(plants, seqs, flags.sensor_fault, strict=True):
                if fault:
                    sensor.setdefault(seq, []).append(plant)
        self._max_seq = max(self._max_seq, max(seqs))
        return self._release()

    def flush(self) -> list[AlignedRow]:
        """Release everything buffered (end of a finite stream)."""
        return self._release(force_all=True)

    def _release(self, force_all: bool = False) -> list[AlignedRow]:
        out: list[AlignedRow] = []
        n_plants = len(self.plants)
        new, setattr_ = object.__new__, object.__setattr__
        while self._buffer and self._next_seq is not None:
            seq = self._next_seq
            row = self._buffer.get(seq)
            overdue = force_all or self._max_seq - seq > self.allowed_lateness
            if row is None:
                if not overdue:
                    break
                # Nothing reported for this sample: skip it.
                self._next_seq = min(self._buffer) if self._buffer else seq + 1
                continue
            if len(row) < n_plants and not overdue:
                break
            del self._buffer[seq]
            first_ts = self._ts.pop(seq)
            plant_ts = self._plant_ts.pop(seq, None)
            faulty = self._sensor.pop(seq, ())
            levels = self._levels.pop(seq, {})
            if plant_ts is None and min(row.values()) >= (0, 0):
                # the common row: every plant's flag carries evidence, all at the same time (the median is
                # that time, every offset 0.0, no plant off): what the general path below finds, in fewer
                # steps (tests/streams/test_aligner.py::test_clock_fast_path_equals_the_median)
                sensor = dict.fromkeys(row, 0)
                for plant in faulty:
                    sensor[plant] = 1
                # the frozen row built without its per-field __init__ (half its cost), every field set in the
                # class's order (tests/streams/test_aligner.py::test_a_common_row_is_an_ordinary_row)
                aligned = new(AlignedRow)
                setattr_(aligned, "__dict__", {
                    "seq": seq,
                    "ts": first_ts,
                    "flags": row,  # out of the buffer: the row's own dict (no one else holds it)
                    "complete": len(row) == n_plants,
                    "withheld": (),
                    "degraded": (),
                    "levels": levels,
                    "sensor": sensor,
                    "clock": (),
                    "offsets": dict.fromkeys(row, 0.0),
                })  # fmt: skip
                out.append(aligned)
                self._remember(seq, self._code(row))
                self._next_seq = seq + 1
                continue
            off: set[str]
            if plant_ts is None:
                ts, offsets, off = first_ts, dict.fromkeys(row, 0.0), set()
            else:
                times = dict.fromkeys(row, first_ts)
                times.update(plant_ts)
                ts, offsets, off = self._clock(times)
            evidence = {p: b for p, b in row.items() if b[0] >= 0 and p not in off}
            withheld = tuple(p for p in self.plants if p in row and row[p] == _WITHHELD)
            degraded = tuple(p for p in self.plants if p in row and row[p] == _DEGRADED and p not in off)
            levels = {p: v for p, v in levels.items() if p not in off}
            sensor = {p: int(p in faulty) for p in row if row[p] != _WITHHELD and p not in off}
            out.append(
                AlignedRow(
                    seq,
                    ts,
                    evidence,
                    complete=len(row) == n_plants,
                    withheld=withheld,
                    degraded=degraded,
                    levels=levels,
                    sensor=sensor,
                    clock=tuple(p for p in self.plants if p in off),
                    offsets=offsets,
                )
            )
            self._remember(seq, self._code(row))
            self._next_seq = seq + 1
        return out

    def _clock(self, times: dict[str, float]) -> tuple[float, dict[str, float], set[str]]:
        """The row's time (median of its plants' times), each plant's offset from it, and the plants whose
        time is further than ``max_clock_skew`` from it while at least two plants are within it."""
        values = sorted(times.values())
        n = len(values)
        # the median: the row's time, whatever order the flags came in
        ts = values[n // 2] if n % 2 else 0.5 * (values[n // 2 - 1] + values[n // 2])
        offsets = {p: t - ts for p, t in times.items()}
        if math.isinf(self.max_clock_skew):
            return ts, offsets, set()
        off = {p for p, d in offsets.items() if abs(d) > self.max_clock_skew}
        if n - len(off) < 2:
            off = set()  # no two plants agree: nothing to tell which clock is wrong
        return ts, offsets, off

    def _remember(self, seq: int, code: str) -> None:
        """Append a released row to the memory (and its serialised form), forgetting the oldest when full."""
        if self.memory == 0:
            return
        if len(self._released) == self.memory:
            first = self._runs[0]
            first[0] += 1
            first[1] -= 1
            if first[1] == 0:
                self._runs.popleft()
            del self._codes[: len(self._released[0][1])]
            if self._blocks:  # the oldest row is in the first block
                self._skip += 1
                if self._skip == _BLOCK_ROWS:
                    self._blocks.popleft()
                    self._skip = 0
            else:
                self._tail -= 1
        self._released.append((seq, code))
        last = self._runs[-1] if self._runs else None
        if last is not None and last[0] + last[1] == seq:
            last[1] += 1
        else:
            self._runs.append([seq, 1])
        self._codes += code.encode("ascii")
        self._tail += 1
        if self._tail == _BLOCK_ROWS:
            self._blocks.append(_pack(self._codes[len(self._codes) - _BLOCK_ROWS * len(code) :]))
            self._tail = 0

    @staticmethod
    def _char(bits: tuple[int, int]) -> str:
        char = _CHARS.get(bits)
        return char if char is not None else str(int(FlagState.of(*bits)))

    def _code(self, row: dict[str, tuple[int, int]]) -> str:
        chars = _CHARS
        get = row.get
        try:
            return "".join([chars[get(p, _ABSENT)] for p in self.plants])
        except KeyError:  # a pair outside the table (FlagState.of names the problem)
            return "".join([self._char(bits) if (bits := get(p)) is not None else "-" for p in self.plants])

    def get_state(self) -> dict[str, Any]:
        """JSON-friendly state.

        The memory of released rows is written with every batch of a worker, so it is
        compact: the seqs as runs of consecutive seqs (``[first, count]``; released seqs are
        consecutive but for skipped samples) and the codes zlib-compressed (a nominal
        stream's codes repeat), about 1 kB instead of 110 kB for 10,000 rows of 5 plants
        (``tests/streams/test_aligner.py::test_state_round_trip_keeps_the_memory`` guards
        the round trip). The codes are compressed by blocks of ``_BLOCK_ROWS`` rows, each once
        when it fills, so a batch compresses the rows after the last full block only, not the
        whole memory (``released_skip``: the first block's rows forgotten since).
        """
        tail = self._codes[len(self._codes) - self._tail * len(self.plants) :]
        return {
            "buffer": {str(s): {p: list(b) for p, b in row.items()} for s, row in self._buffer.items()},
            "ts": {str(s): t for s, t in self._ts.items()},
            "plant_ts": {str(s): dict(row) for s, row in self._plant_ts.items()},
            "sensor": {str(s): list(plants) for s, plants in self._sensor.items()},
            "levels": {str(s): dict(row) for s, row in self._levels.items()},
            "next_seq": self._next_seq,
            "max_seq": self._max_seq,
            "released_runs": [list(run) for run in self._runs],
            "released_blocks_z": [*self._blocks, _pack(tail)],
            "released_skip": self._skip,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`get_state` output."""
        self._buffer = {
            int(s): {p: (int(b[0]), int(b[1])) for p, b in row.items()} for s, row in state["buffer"].items()
        }
        self._ts = {int(s): float(t) for s, t in state["ts"].items()}
        self._plant_ts = {int(s): {p: float(t) for p, t in row.items()} for s, row in state.get("plant_ts", {}).items()}
        self._sensor = {int(s): [str(p) for p in plants] for s, plants in state.get("sensor", {}).items()}
        self._levels = {int(s): {p: int(v) for p, v in row.items()} for s, row in state.get("levels", {}).items()}
        self._next_seq = state["next_seq"]
        self._max_seq = int(state["max_seq"])
        width = len(self.plants)
        blocks: list[bytes] | None = None
        if "released_blocks_z" in state:
            seqs = [first + k for first, count in state["released_runs"] for k in range(int(count))]
            blocks = [_unpack(text) for text in state["released_blocks_z"]]
            codes = b"".join(blocks)[int(state["released_skip"]) * width :].decode("ascii")
        elif "released_runs" in state:  # the codes compressed whole (earlier states)
            seqs = [first + k for first, count in state["released_runs"] for k in range(int(count))]
            codes = _unpack(state["released_codes_z"]).decode("ascii")
        else:  # the uncompressed form of earlier states
            seqs, codes = state["released_seqs"], state["released_codes"]
        self._released = deque(maxlen=self.memory)
        self._runs = deque()
        self._codes = bytearray()
        self._blocks = deque()
        self._skip = self._tail = 0
        for k, seq in enumerate(seqs):
            self._remember(int(seq), codes[k * width : (k + 1) * width])
        skip = int(state.get("released_skip", 0))
        if (
            blocks
            and len(seqs) <= self.memory
            and 0 <= skip < _BLOCK_ROWS
            and sum(map(len, blocks)) == (skip + len(seqs)) * width
            and all(len(block) == _BLOCK_ROWS * width for block in blocks[:-1])
            and len(blocks[-1]) < _BLOCK_ROWS * width
        ):
            # the blocks as written (a restarted worker writes the state its predecessor would have); blocks of
            # another size keep the ones just rebuilt
            self._blocks = deque(state["released_blocks_z"][:-1])
            self._skip, self._tail = skip, len(blocks[-1]) // width
