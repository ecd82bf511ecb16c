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

The rows waiting for their plants live in preallocated numpy arrays, a ring of ``allowed_lateness + 2``
slots (a row's slot: its seq modulo the ring's size), one byte a plant for its flag, its times, level and
sensor-fault bit: however many rows a plant runs ahead of the others (a plant worker catching up after a
take-over), waiting allocates no Python object per row or flag, so a catch-up's rows leave no small
objects behind in the interpreter's allocator (``tests/streams/test_rca_catchup.py``). The state writes
them as a few strings (:meth:`FlagAligner.get_state`) and reads the dictionaries of earlier states.
"""

from __future__ import annotations

import base64
import math
import zlib
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedrca.contracts import FlagColumns, FlagMessage, FlagState
from fedrca.exceptions import ConfigError, DataError

__all__ = ["AlignedRow", "FlagAligner"]

#: How a released row's flags (and earlier states' rows waiting) hold a flag without evidence, and no flag
_WITHHELD = (-1, -1)
_DEGRADED = (-2, -2)
_ABSENT = (-3, -3)
#: A waiting row's cell (one byte a plant): 0 no flag yet, 1 degraded, 2 withheld, 3 + 2 zc + za a pair; its
#: character in the memory's codes and the state (``_CELL_CHARS[cell]``: "-", "d", "w", else the pair's
#: FlagState) and its pair (``_CELL_PAIRS[cell]``)
_NONE, _DEG, _WH, _PAIR = 0, 1, 2, 3
_CELL_PAIRS: tuple[tuple[int, int], ...] = (_ABSENT, _DEGRADED, _WITHHELD, (0, 0), (0, 1), (1, 0), (1, 1))
_CELL_CHARS = "-dw" + "".join(str(int(FlagState.of(*pair))) for pair in _CELL_PAIRS[_PAIR:])
_CELL_TABLE = np.frombuffer(_CELL_CHARS.encode("ascii"), dtype=np.uint8)
#: Released rows per compressed block of the memory's codes in the state (:meth:`FlagAligner.get_state`)
_BLOCK_ROWS = 500


def _pack(codes: bytes | bytearray) -> str:
    """Codes as the state writes them: zlib (level 1), base64."""
    return base64.b64encode(zlib.compress(codes, 1)).decode("ascii")


def _unpack(text: str) -> bytes:
    return zlib.decompress(base64.b64decode(text))


def _b64(values: np.ndarray, dtype: str) -> str:
    """An array as ``dtype`` (little-endian: ``"<f8"``, ``"<i8"``), its bytes in base64: exact (floats round-trip
    bit for bit, NaN and inf too) and one string, not a list of numbers."""
    return base64.b64encode(np.asarray(values).astype(dtype).tobytes()).decode("ascii")


def _unb64(text: str, dtype: str) -> np.ndarray:
    """:func:`_b64`'s array back (native byte order, writable)."""
    return np.frombuffer(base64.b64decode(text), dtype=dtype).astype(dtype.lstrip("<"))


def _bits(mask: np.ndarray) -> str:
    """A boolean array as ``0``/``1`` characters."""
    return (mask.astype(np.uint8) + np.uint8(ord("0"))).tobytes().decode("ascii")


def _cell(flag: FlagMessage) -> int:
    """A flag's cell (``_NONE`` never): withheld, degraded, or its pair of 0/1 bits."""
    if flag.withheld:
        return _WH
    if flag.degraded:
        return _DEG
    zc, za = flag.zc, flag.za
    if zc in (0, 1) and za in (0, 1):
        return _PAIR + 2 * int(zc) + int(za)
    raise DataError(f"flag of plant '{flag.plant}' seq {flag.seq}: bits ({zc}, {za}) are not two 0/1 bits")


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
    plants : every plant that publishes flags (a flag of another plant is refused: DataError)
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
        self._next_seq: int | None = None
        self._max_seq = -1
        self._index = {p: i for i, p in enumerate(self.plants)}
        # The rows waiting (seqs next_seq .. at most next_seq + ring - 1: a row further ahead makes the rows
        # it makes overdue go first, `_make_room`), each in the slot seq % ring of arrays allocated here.
        self._alloc(allowed_lateness + 2)
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

    def _alloc(self, ring: int) -> None:
        """The arrays of ``ring`` waiting rows, empty."""
        M = len(self.plants)
        self._ring = ring
        self._cells = np.zeros((ring, M), dtype=np.int8)  # each plant's cell (_NONE: no flag yet)
        self._count = np.zeros(ring, dtype=np.int64)  # plants present (0: no row in the slot)
        self._first_ts = np.zeros(ring)  # the time of the row's first flag
        self._plant_ts = np.zeros((ring, M))  # each present plant's time
        self._level = np.zeros((ring, M), dtype=np.int64)
        self._leveled = np.zeros((ring, M), dtype=bool)  # the flag published a level (and carries evidence)
        self._faulty = np.zeros((ring, M), dtype=bool)  # the flag's sensor-fault bit (not withheld)
        self._pending = 0  # rows waiting

    # -- the rows waiting ----------------------------------------------------------------------------------
    def _waiting(self) -> np.ndarray:
        """Seqs of the rows waiting, in increasing order (all within a ring from ``_next_seq``)."""
        if not self._pending or self._next_seq is None:
            return np.zeros(0, dtype=np.int64)
        base = self._next_seq
        start = base % self._ring
        held = np.concatenate((self._count[start:], self._count[:start]))
        return base + np.flatnonzero(held)

    def _first_waiting(self, seq: int) -> int:
        """The smallest seq of a waiting row at or after ``seq`` (one exists; every one within a ring from it)."""
        start = seq % self._ring
        after = np.flatnonzero(self._count[start:])
        if after.size:
            return seq + int(after[0])
        return seq + self._ring - start + int(np.flatnonzero(self._count[:start])[0])

    def _make_room(self, seq: int) -> list[AlignedRow]:
        """Release what a flag of ``seq``, a ring or more past the next row, makes overdue, before it is held.

        The release after the flag would release them (its seq the newest): rows up to ``seq`` less
        the lateness, then complete ones up to ``seq``'s row, which is not waiting (it is further
        than any waiting row) and not overdue; so releasing first gives the same rows, and leaves every
        waiting row within the lateness of ``seq``. With no row waiting the release after it would skip
        the rows between (overdue, none came) to ``seq``.
        """
        if seq < self._next_seq + self._ring:  # type: ignore[operator]
            return []
        self._max_seq = max(self._max_seq, seq)
        out = self._release()
        if seq >= self._next_seq + self._ring:  # type: ignore[operator]
            self._next_seq = seq  # nothing waits
        return out

    def add(self, flag: FlagMessage) -> tuple[list[AlignedRow], str]:
        """Add one flag; returns the rows now released and the flag's status.

        Status is ``buffered``, ``duplicate`` (ignored), ``conflict`` (a different
        flag for a buffered (plant, seq); first kept) or ``late`` (dead-letter it).
        """
        seq = flag.seq
        if self._next_seq is None or (not self._released and seq < self._next_seq):
            # Until the first row is released, the stream starts at the smallest seq seen.
            if self._next_seq is not None and self._max_seq - seq >= self._ring:
                return self._lone(flag), "buffered"
            self._next_seq = seq
        next_seq = self._next_seq
        cell = _cell(flag)
        if seq < next_seq:
            for released, code in reversed(self._released):
                if released == seq:
                    index = self._index.get(flag.plant)
                    same = index is not None and code[index] == _CELL_CHARS[cell]
                    return [], "duplicate" if same else "late"
                if released < seq:
                    break
            return [], "late"
        m = self._index.get(flag.plant)
        if m is None:
            raise DataError(f"flag of plant '{flag.plant}', which is not one of {', '.join(self.plants)}")
        out = self._make_room(seq)
        slot = seq % self._ring
        held = int(self._cells[slot, m])
        status = "buffered"
        if held:
            status = "duplicate" if held == cell else "conflict"
        else:
            if not self._count[slot]:
                self._first_ts[slot] = flag.ts
                self._pending += 1
            self._count[slot] += 1
            self._cells[slot, m] = cell
            self._plant_ts[slot, m] = flag.ts
            if flag.sensor_fault and not flag.withheld:
                self._faulty[slot, m] = True
            if flag.level is not None and flag.evidence:
                self._level[slot, m] = flag.level
                self._leveled[slot, m] = True
        if seq > self._max_seq:
            self._max_seq = seq
        next_seq = self._next_seq
        head = int(self._count[next_seq % self._ring])
        if head and head < len(self.plants) and self._max_seq - next_seq <= self.allowed_lateness:
            return out, status  # the next row waits for its plants (what _release finds first)
        return out + self._release(), status

    def _lone(self, flag: FlagMessage) -> list[AlignedRow]:
        """A flag more than a ring older than the newest seq, before the stream started: the stream now starts at
        its row, which is overdue at once and goes alone (the rows waiting stay, the next one first)."""
        cell = _cell(flag)
        m = self._index.get(flag.plant)
        if m is None:
            raise DataError(f"flag of plant '{flag.plant}', which is not one of {', '.join(self.plants)}")
        M = len(self.plants)
        cells = [_NONE] * M
        cells[m] = cell
        times = [0.0] * M
        times[m] = flag.ts
        levels: list[int | None] = [None] * M
        if flag.level is not None and flag.evidence:
            levels[m] = flag.level
        faulty = [False] * M
        faulty[m] = bool(flag.sensor_fault and not flag.withheld)
        first = self._first_waiting(self._next_seq) if self._pending else flag.seq + 1  # type: ignore[arg-type]
        row, code = self._row(flag.seq, cells, flag.ts, times, levels, faulty)
        self._remember(flag.seq, code)
        self._next_seq = first
        return [row, *self._release()]

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
        flag would (``tests/streams/test_aligner.py::test_columns_equal_flag_by_flag``); a batch whose
        rows reach a ring past the next row is held in parts, each after the release its first flag
        makes due (:meth:`_make_room`).
        """
        next_seq = self._next_seq
        if not flags.seq:
            return []
        if next_seq is None or not self._released or min(flags.seq) < next_seq:
            return None
        index = self._index
        try:
            cols = np.array([index[p] for p in flags.plant], dtype=np.intp)
            seqs = np.array(flags.seq, dtype=np.int64)
            zc = np.array(flags.zc, dtype=np.int64)
            za = np.array(flags.za, dtype=np.int64)
        except (KeyError, OverflowError, TypeError, ValueError):
            return None  # another plant, or numbers no flag has: flag by flag names the problem
        if ((zc | za) & ~1).any():
            return None
        M, ring = len(self.plants), self._ring
        if np.unique((seqs - next_seq) * M + cols).size != seqs.size:
            return None  # a (plant, seq) twice
        near = seqs < next_seq + ring
        if self._pending and (self._cells[seqs[near] % ring, cols[near]] != _NONE).any():
            return None  # a flag held already for its plant
        held = np.union1d(seqs, self._waiting())
        if held.size != held[-1] - next_seq + 1:  # a row missing: it would be skipped
            return None
        newest = np.maximum.accumulate(np.concatenate(([self._max_seq], seqs)))[:-1]
        if (seqs < newest - self.allowed_lateness).any():
            return None
        ts = np.array(flags.ts, dtype=np.float64)
        cells = (_PAIR + 2 * zc + za).astype(np.int8)
        leveled = None
        levels = np.zeros(seqs.size, dtype=np.int64)
        if any(x is not None for x in flags.level):
            leveled = np.array([x is not None for x in flags.level])
            levels[:] = [0 if x is None else x for x in flags.level]
        faulty = None if flags.sensor_fault is None else np.array(flags.sensor_fault, dtype=bool)
        out: list[AlignedRow] = []
        lo = 0
        if held[-1] >= next_seq + ring:  # rows beyond the ring: held in parts (a long catch-up in one batch)
            for k, seq in enumerate(flags.seq):
                if seq >= self._next_seq + ring:  # type: ignore[operator]
                    self._hold(seqs, cols, ts, cells, levels, leveled, faulty, lo, k)
                    lo = k
                    out += self._make_room(seq)
        self._hold(seqs, cols, ts, cells, levels, leveled, faulty, lo, seqs.size)
        self._max_seq = max(self._max_seq, int(seqs.max()))
        return out + self._release()

    def _hold(
        self,
        seqs: np.ndarray,
        cols: np.ndarray,
        ts: np.ndarray,
        cells: np.ndarray,
        levels: np.ndarray,
        leveled: np.ndarray | None,
        faulty: np.ndarray | None,
        lo: int,
        hi: int,
    ) -> None:
        """Hold flags ``lo:hi`` of a batch :meth:`add_columns` takes (none held already, all within a ring)."""
        if hi <= lo:
            return
        seq, col = seqs[lo:hi], cols[lo:hi]
        slot = seq % self._ring
        rows, first, counts = np.unique(seq, return_index=True, return_counts=True)
        at = rows % self._ring
        new = self._count[at] == 0
        # a new row's time is its first flag's (add's setdefault)
        self._first_ts[at[new]] = ts[lo:hi][first[new]]
        self._pending += int(new.sum())
        self._count[at] += counts
        self._cells[slot, col] = cells[lo:hi]
        self._plant_ts[slot, col] = ts[lo:hi]
        if leveled is not None:
            pick = leveled[lo:hi]
            self._level[slot[pick], col[pick]] = levels[lo:hi][pick]
            self._leveled[slot[pick], col[pick]] = True
        if faulty is not None:
            pick = faulty[lo:hi]
            self._faulty[slot[pick], col[pick]] = True

    def flush(self) -> list[AlignedRow]:
        """Release everything buffered (end of a finite stream)."""
        return self._release(force_all=True)

    def _release(self, force_all: bool = False) -> list[AlignedRow]:
        if not self._pending or self._next_seq is None:
            return []
        count, ring, n_plants = self._count, self._ring, len(self.plants)
        lateness, newest = self.allowed_lateness, self._max_seq
        seq = self._next_seq
        left = self._pending
        seqs: list[int] = []
        while left:
            present = int(count[seq % ring])
            overdue = force_all or newest - seq > lateness
            if not present:
                if not overdue:
                    break
                # Nothing reported for this sample: skip it.
                seq = self._first_waiting(seq)
                continue
            if present < n_plants and not overdue:
                break
            seqs.append(seq)
            left -= 1
            seq += 1
        self._next_seq = seq
        return self._emit(seqs) if seqs else []

    def _emit(self, seqs: list[int]) -> list[AlignedRow]:
        """The rows of ``seqs`` (waiting, in order), out of the ring and into the memory."""
        slots = np.array(seqs, dtype=np.int64) % self._ring
        cells = self._cells[slots]
        first = self._first_ts[slots]
        times = self._plant_ts[slots]
        leveled = self._leveled[slots]
        faulty = self._faulty[slots]
        # a row whose plants' times all equal its first flag's, every flag with evidence: the common row
        present = cells != _NONE
        odd = ((times != first[:, None]) & present).any(axis=1) | ((cells == _WH) | (cells == _DEG)).any(axis=1)
        codes = _CELL_TABLE[cells].tobytes().decode("ascii")
        levels = self._level[slots].tolist() if leveled.any() else None
        has_level = leveled.tolist() if levels is not None else None
        faults = faulty.tolist() if faulty.any() else None
        self._cells[slots] = _NONE
        self._count[slots] = 0
        self._leveled[slots] = False
        self._faulty[slots] = False
        self._pending -= len(seqs)
        M, plants, pairs = len(self.plants), self.plants, _CELL_PAIRS
        new, setattr_ = object.__new__, object.__setattr__
        out: list[AlignedRow] = []
        rows = zip(seqs, cells.tolist(), first.tolist(), odd.tolist(), strict=True)
        for k, (seq, row, ts, unusual) in enumerate(rows):
            code = codes[k * M : (k + 1) * M]
            if unusual:
                published: list[int | None] = [None] * M
                if levels is not None and has_level is not None:
                    published = [v if has else None for v, has in zip(levels[k], has_level[k], strict=True)]
                bits = faults[k] if faults is not None else [False] * M
                aligned, _ = self._row(seq, row, ts, times[k].tolist(), published, bits)
                out.append(aligned)
                self._remember(seq, code)
                continue
            # the common row: every plant's flag carries evidence, all at the same time (the median is
            # that time, every offset 0.0, no plant off): what the general path finds, in fewer
            # steps (tests/streams/test_aligner.py::test_clock_fast_path_equals_the_median)
            flags = {p: pairs[c] for p, c in zip(plants, row, strict=True) if c}
            sensor = dict.fromkeys(flags, 0)
            if faults is not None:
                for p, c, bit in zip(plants, row, faults[k], strict=True):
                    if bit and c:
                        sensor[p] = 1
            row_levels: dict[str, int] = {}
            if levels is not None and has_level is not None:
                row_levels = {p: v for p, v, has in zip(plants, levels[k], has_level[k], strict=True) if has}
            # the frozen row built without its per-field __init__ (half its cost), every field set in the
            # class's order (tests/streams/test_aligner.py::test_a_common_row_is_an_ordinary_row)
            aligned = new(AlignedRow)
            setattr_(aligned, "__dict__", {
                "seq": seq,
                "ts": ts,
                "flags": flags,
                "complete": len(flags) == M,
                "withheld": (),
                "degraded": (),
                "levels": row_levels,
                "sensor": sensor,
                "clock": (),
                "offsets": dict.fromkeys(flags, 0.0),
            })  # fmt: skip
            out.append(aligned)
            self._remember(seq, code)
        return out

    def _row(
        self,
        seq: int,
        cells: list[int],
        first_ts: float,
        times: list[float],
        levels: list[int | None],
        faulty: list[bool],
    ) -> tuple[AlignedRow, str]:
        """A released row from its cells (plants' order), its first flag's time, each plant's time, level
        (None: none published) and sensor-fault bit; and its memory code."""
        plants = self.plants
        present = [(p, c, t) for p, c, t in zip(plants, cells, times, strict=True) if c != _NONE]
        if any(t != first_ts for _, _, t in present):
            # a plant's own time where it differs from the row's first flag's (NaN differs from itself)
            ts, offsets, off = self._clock({p: (t if t != first_ts else first_ts) for p, _, t in present})
        else:
            ts, offsets, off = first_ts, {p: 0.0 for p, _, _ in present}, set()
        status = dict(zip(plants, cells, strict=True))
        row = AlignedRow(
            seq,
            ts,
            {p: _CELL_PAIRS[c] for p, c, _ in present if c >= _PAIR and p not in off},
            complete=len(present) == len(plants),
            withheld=tuple(p for p in plants if status[p] == _WH),
            degraded=tuple(p for p in plants if status[p] == _DEG and p not in off),
            levels={p: v for p, v in zip(plants, levels, strict=True) if v is not None and p not in off},
            sensor={p: int(bit) for p, bit in zip(plants, faulty, strict=True) if status[p] not in (_NONE, _WH)
                    and p not in off},
            clock=tuple(p for p in plants if p in off),
            offsets=offsets,
        )  # fmt: skip
        return row, "".join(_CELL_CHARS[c] for c in cells)

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

    def get_state(self) -> dict[str, Any]:
        """JSON-friendly state.

        The rows waiting are written as a few strings, not an object per row: ``buffer`` their
        seqs, ``cells`` one character per row and plant (plants' order; ``-`` no flag yet, ``d``
        degraded, ``w`` withheld, else the pair's :class:`~fedrca.contracts.FlagState`),
        ``first_ts`` each row's first flag's time (float64, base64), and only when any is set
        ``plant_ts`` each plant's time (0 where absent), ``leveled`` (``1`` where the plant published a
        level) with ``levels`` (those levels, int64, base64) and ``faulty`` (``1`` where its sensor-fault
        bit is set). Earlier states (a dictionary per row) still restore
        (``tests/streams/test_rca_catchup.py::test_an_earlier_states_waiting_rows_restore``).

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
        seqs = self._waiting()
        slots = seqs % self._ring
        cells = self._cells[slots]
        present = cells != _NONE
        first = self._first_ts[slots]
        waiting: dict[str, Any] = {
            "buffer": seqs.tolist(),
            "cells": _CELL_TABLE[cells].tobytes().decode("ascii"),
            "first_ts": _b64(first, "<f8"),
        }
        times = self._plant_ts[slots]
        if ((times != first[:, None]) & present).any():
            waiting["plant_ts"] = _b64(np.where(present, times, 0.0), "<f8")
        leveled = self._leveled[slots]
        if leveled.any():
            waiting["leveled"] = _bits(leveled)
            waiting["levels"] = _b64(self._level[slots][leveled], "<i8")  # the published ones, row by row
        faulty = self._faulty[slots]
        if faulty.any():
            waiting["faulty"] = _bits(faulty)
        return {
            **waiting,
            "next_seq": self._next_seq,
            "max_seq": self._max_seq,
            "released_runs": [list(run) for run in self._runs],
            "released_blocks_z": [*self._blocks, _pack(tail)],
            "released_skip": self._skip,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`get_state` output (or an earlier state's: the rows waiting as dictionaries)."""
        self._next_seq = state["next_seq"]
        self._max_seq = int(state["max_seq"])
        self._restore_waiting(state)
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

    def _restore_waiting(self, state: dict[str, Any]) -> None:
        """The rows waiting of a state, into a ring large enough for them (one of a worker that allowed more
        lateness may span more than this one's ring: the ring grows to hold them)."""
        M = len(self.plants)
        buffer = state["buffer"]
        if isinstance(buffer, dict):  # earlier states: {seq: {plant: [zc, za]}} and a dictionary per field
            seqs = sorted(int(s) for s in buffer)
            rows = [buffer[str(s)] if str(s) in buffer else buffer[s] for s in seqs]
            cells = np.zeros((len(seqs), M), dtype=np.int8)
            for k, row in enumerate(rows):
                for plant, bits in row.items():
                    pair = (int(bits[0]), int(bits[1]))
                    cells[k, self._column(plant)] = (
                        _WH if pair == _WITHHELD else _DEG if pair == _DEGRADED else _CELL_PAIRS.index(pair)
                    )
            ts, plant_ts = state["ts"], state.get("plant_ts", {})
            first = np.array([float(ts[str(s)]) for s in seqs], dtype=np.float64)
            times = np.repeat(first[:, None], M, axis=1)
            levels = np.zeros((len(seqs), M), dtype=np.int64)
            leveled = np.zeros((len(seqs), M), dtype=bool)
            faulty = np.zeros((len(seqs), M), dtype=bool)
            for k, s in enumerate(seqs):
                for plant, t in plant_ts.get(str(s), {}).items():
                    times[k, self._column(plant)] = float(t)
                for plant, v in state.get("levels", {}).get(str(s), {}).items():
                    levels[k, self._column(plant)] = int(v)
                    leveled[k, self._column(plant)] = True
                for plant in state.get("sensor", {}).get(str(s), []):
                    faulty[k, self._column(plant)] = True
        else:
            seqs = [int(s) for s in buffer]
            shape = (len(seqs), M)
            table = np.full(256, -1, dtype=np.int16)
            table[_CELL_TABLE] = np.arange(len(_CELL_CHARS))
            read = table[np.frombuffer(state["cells"].encode("ascii"), dtype=np.uint8)].reshape(shape)
            if (read < 0).any():
                raise DataError("the aligner's state has a cell character other than " + _CELL_CHARS)
            cells = read.astype(np.int8)
            first = _unb64(state["first_ts"], "<f8").reshape(len(seqs))
            times = (
                _unb64(state["plant_ts"], "<f8").reshape(shape)
                if "plant_ts" in state
                else np.repeat(first[:, None], M, axis=1)
            )
            leveled = (
                np.frombuffer(state["leveled"].encode("ascii"), dtype=np.uint8).reshape(shape) == ord("1")
                if "leveled" in state
                else np.zeros(shape, dtype=bool)
            )
            levels = np.zeros(shape, dtype=np.int64)
            if "leveled" in state:
                levels[leveled] = _unb64(state["levels"], "<i8")
            faulty = (
                np.frombuffer(state["faulty"].encode("ascii"), dtype=np.uint8).reshape(shape) == ord("1")
                if "faulty" in state
                else np.zeros(shape, dtype=bool)
            )
        present = cells != _NONE
        if seqs and (self._next_seq is None or seqs[0] < self._next_seq or not present.any(axis=1).all()):
            raise DataError("the aligner's state has a waiting row before its next row, or one without a flag")
        span = seqs[-1] - self._next_seq + 1 if seqs else 0  # type: ignore[operator]
        self._alloc(max(self.allowed_lateness + 2, span))
        slots = np.array(seqs, dtype=np.int64) % self._ring
        self._cells[slots] = cells
        self._count[slots] = present.sum(axis=1)
        self._first_ts[slots] = first
        self._plant_ts[slots] = np.where(present, times, first[:, None])
        self._level[slots] = np.where(leveled, levels, 0)
        self._leveled[slots] = leveled & present
        self._faulty[slots] = faulty & present
        self._pending = len(seqs)

    def _column(self, plant: str) -> int:
        m = self._index.get(plant)
        if m is None:
            raise DataError(f"the aligner's state has a flag of plant '{plant}', not one of {', '.join(self.plants)}")
        return m
