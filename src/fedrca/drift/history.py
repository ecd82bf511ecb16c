"""A plant's recent rows and their alarm states: bounded, in memory, in chunks that persist one record each.

The history is what a plant re-baselines from (:mod:`fedrca.drift.keeper`). It never leaves
the plant: the streaming runtime keeps it in the plant-private, compacted topic
``<site>.history.<plant>`` (docs/drift.md, "Where the history lives"), one record per
chunk of :data:`CHUNK_ROWS` consecutive sequence numbers, keyed by the chunk's *slot*
(``chunk % slots``): the broker's compaction keeps one record per slot, so the topic holds
at most ``slots`` records however long the plant runs, and a chunk that left the history is
overwritten by a newer one in its slot.

A row is addressed by its ``seq``; chunk ``c`` holds seqs ``[c C, (c + 1) C)``. Rows older
than ``capacity`` seqs behind the newest are dropped (a whole chunk at a time). A record is
JSON with the chunk's present rows as base64 float64 bytes: exact, so a history read back
from the topic is the one that was written, bit for bit.

Examples
--------
>>> import numpy as np
>>> h = RowHistory(n_sensors=2, capacity=200)
>>> h.add(np.arange(150), np.ones((150, 2)), None, np.zeros(150, dtype=bool))
>>> seqs, Y, U, alarm = h.window(end=150, rows=100)
>>> int(seqs[0]), len(Y), U is None
(50, 100, True)
>>> restored = RowHistory(n_sensors=2, capacity=200)
>>> for chunk in sorted(h.take_dirty()):
...     restored.load(h.record(chunk))
>>> bool(np.array_equal(restored.window(150, 100)[1], Y))
True
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedrca.exceptions import DataError

__all__ = ["CHUNK_ROWS", "RowHistory", "history_bytes"]

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]
IntArray = NDArray[np.int64]

#: Consecutive seqs per chunk (and per history record). A batch rewrites the chunks it touched, so a
#: 1 Hz plant's one-row batch writes at most one chunk: 64 rows x D floats (6 kB for 12 sensors).
CHUNK_ROWS = 64


def history_bytes(capacity: int, n_sensors: int, n_inputs: int = 0) -> int:
    """Memory of a history of ``capacity`` rows (its chunks, one chunk of slack), bytes.

    Examples
    --------
    >>> history_bytes(6720, 12)
    664832
    """
    chunks = math.ceil(capacity / CHUNK_ROWS) + 1
    return chunks * CHUNK_ROWS * (8 * (n_sensors + n_inputs) + 2)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


@dataclass
class _Chunk:
    """Rows of seqs ``[index C, (index + 1) C)``: which are present, their values and alarm states."""

    index: int
    present: BoolArray
    Y: FloatArray
    U: FloatArray | None
    alarm: BoolArray

    @classmethod
    def empty(cls, index: int, n_sensors: int, n_inputs: int) -> _Chunk:
        return cls(
            index,
            np.zeros(CHUNK_ROWS, dtype=bool),
            np.zeros((CHUNK_ROWS, n_sensors)),
            np.zeros((CHUNK_ROWS, n_inputs)) if n_inputs else None,
            np.zeros(CHUNK_ROWS, dtype=bool),
        )


@dataclass
class RowHistory:
    """The plant's most recent rows (``capacity`` seqs) with their alarm states.

    Parameters
    ----------
    n_sensors, n_inputs : the plant's row widths
    capacity : seqs kept behind the newest (the history's bound)
    """

    n_sensors: int
    capacity: int
    n_inputs: int = 0
    _chunks: dict[int, _Chunk] = field(default_factory=dict)
    _dirty: set[int] = field(default_factory=set)
    _newest: int = -1

    def __post_init__(self) -> None:
        if self.capacity < 1:
            raise DataError(f"a history keeps at least one row, got capacity {self.capacity}")

    @property
    def slots(self) -> int:
        """Records the history needs at most (one per chunk; one spare while the oldest is dropped)."""
        return math.ceil(self.capacity / CHUNK_ROWS) + 2

    def slot(self, chunk: int) -> int:
        """The record key (slot) of ``chunk``."""
        return chunk % self.slots

    @property
    def newest(self) -> int:
        """The newest seq held (-1: empty)."""
        return self._newest

    def __len__(self) -> int:
        return int(sum(int(c.present.sum()) for c in self._chunks.values()))

    def clear(self) -> None:
        """Forget every row (a new recording starts); every chunk becomes a record to overwrite."""
        self._dirty |= set(self._chunks)
        self._chunks.clear()
        self._newest = -1

    def add(self, seqs: Iterable[int], Y: FloatArray, U: FloatArray | None, alarm: BoolArray) -> None:
        """Append rows (increasing seqs, newer than :attr:`newest`) with their alarm states."""
        seq_arr = np.asarray(list(seqs) if not isinstance(seqs, np.ndarray) else seqs, dtype=np.int64)
        if len(seq_arr) == 0:
            return
        if seq_arr[0] <= self._newest or np.any(np.diff(seq_arr) <= 0):
            raise DataError(f"history rows must come in increasing seqs after {self._newest}, got {seq_arr[:3]}...")
        Y = np.asarray(Y, dtype=np.float64).reshape(len(seq_arr), self.n_sensors)
        alarm = np.asarray(alarm, dtype=bool).reshape(len(seq_arr))
        if self.n_inputs and U is None:
            raise DataError("this history keeps the plant's inputs; give U")
        U_arr = None if not self.n_inputs or U is None else np.asarray(U, dtype=np.float64).reshape(len(seq_arr), -1)
        index = seq_arr // CHUNK_ROWS
        for c in np.unique(index).tolist():
            rows = np.flatnonzero(index == c)
            chunk = self._chunks.get(c)
            if chunk is None:
                chunk = self._chunks[c] = _Chunk.empty(c, self.n_sensors, self.n_inputs)
            at = seq_arr[rows] - c * CHUNK_ROWS
            chunk.present[at] = True
            chunk.Y[at] = Y[rows]
            chunk.alarm[at] = alarm[rows]
            if chunk.U is not None and U_arr is not None:
                chunk.U[at] = U_arr[rows]
            self._dirty.add(c)
        self._newest = int(seq_arr[-1])
        self._evict()

    def _evict(self) -> None:
        oldest = self._newest - self.capacity + 1
        for c in [c for c in self._chunks if (c + 1) * CHUNK_ROWS <= oldest]:
            del self._chunks[c]

    def window(self, end: int, rows: int) -> tuple[IntArray, FloatArray, FloatArray | None, BoolArray]:
        """The rows of seqs ``[end - rows, end)`` that are held, in seq order: (seqs, Y, U, alarm)."""
        lo = end - rows
        # the chunks of seqs [lo, end) in order (not every chunk held: a refresh reads 3 days of 2 weeks)
        span = range(max(lo, 0) // CHUNK_ROWS, (end - 1) // CHUNK_ROWS + 1 if end > 0 else 0)
        chunks = [chunk for c in span if (chunk := self._chunks.get(c)) is not None]
        if not chunks:
            empty_u = np.empty((0, self.n_inputs)) if self.n_inputs else None
            return np.empty(0, dtype=np.int64), np.empty((0, self.n_sensors)), empty_u, np.empty(0, dtype=bool)
        # the chunks side by side: one mask over all their rows
        first = np.array([c.index for c in chunks], dtype=np.int64) * CHUNK_ROWS
        seq = (first[:, None] + np.arange(CHUNK_ROWS)).ravel()
        keep = np.concatenate([c.present for c in chunks])
        keep &= (seq >= lo) & (seq < end) & (seq > self._newest - self.capacity)
        U = None
        if self.n_inputs:
            U = np.concatenate([c.U for c in chunks if c.U is not None])[keep]
        return (
            seq[keep],
            np.concatenate([c.Y for c in chunks])[keep],
            U,
            np.concatenate([c.alarm for c in chunks])[keep],
        )

    # -- persistence ------------------------------------------------------------------------
    def take_dirty(self) -> set[int]:
        """The chunks changed since the last call (their records are to be written)."""
        dirty, self._dirty = self._dirty, set()
        return dirty

    def record(self, chunk: int) -> bytes:
        """The record of ``chunk`` (a chunk no longer held is written empty: its slot's rows are gone)."""
        c = self._chunks.get(chunk)
        if c is None:
            doc: dict[str, Any] = {"kind": "rows", "chunk": chunk, "present": "", "alarm": "", "y": "", "u": None}
            return json.dumps(doc, separators=(",", ":")).encode()
        doc = {
            "kind": "rows",
            "chunk": chunk,
            "present": _b64(np.packbits(c.present).tobytes()),
            "alarm": _b64(np.packbits(c.alarm[c.present]).tobytes()),
            "y": _b64(np.ascontiguousarray(c.Y[c.present]).tobytes()),
            "u": None if c.U is None else _b64(np.ascontiguousarray(c.U[c.present]).tobytes()),
        }
        return json.dumps(doc, separators=(",", ":")).encode()

    def check_record(self, key: bytes, doc: Any, raw: bytes) -> None:
        """Raise (any exception) unless ``raw`` (parsed: ``doc``) is a chunk record of this history kept
        under ``key``: a chunk index >= 0 under its own slot, of this plant's width
        (:meth:`fedrca.drift.keeper.BaselineKeeper.check_record` and ``fedrca train --history`` turn
        the exception into a refusal)."""
        chunk = doc["chunk"] if isinstance(doc, dict) else None
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 0:
            raise ValueError("its chunk is not an index >= 0")
        if key != f"rows/{self.slot(chunk)}".encode():
            raise ValueError(f"chunk {chunk} is kept under rows/{self.slot(chunk)}")
        RowHistory(self.n_sensors, self.capacity, self.n_inputs).load(raw)

    def load(self, raw: bytes, newest: int | None = None) -> None:
        """Take a chunk back from its record (rows above ``newest`` are left out: they were not committed).

        Raises
        ------
        DataError
            For a record that is not a history chunk of this plant's width.
        """
        try:
            doc = json.loads(raw)
            chunk = int(doc["chunk"])
            if not doc["present"]:
                self._chunks.pop(chunk, None)
                return
            present = np.unpackbits(np.frombuffer(_unb64(doc["present"]), dtype=np.uint8))[:CHUNK_ROWS].astype(bool)
            n = int(present.sum())
            alarm = np.unpackbits(np.frombuffer(_unb64(doc["alarm"]), dtype=np.uint8))[:n].astype(bool)
            Y = np.frombuffer(_unb64(doc["y"]), dtype=np.float64).reshape(n, self.n_sensors)
            U = None if doc.get("u") is None else np.frombuffer(_unb64(doc["u"]), dtype=np.float64).reshape(n, -1)
        except (ValueError, KeyError, TypeError) as exc:
            raise DataError(f"not a history record of a {self.n_sensors}-sensor plant ({exc})") from None
        seqs = chunk * CHUNK_ROWS + np.flatnonzero(present)
        if newest is not None:
            keep = seqs <= newest
            seqs, Y, alarm = seqs[keep], Y[keep], alarm[keep]
            U = None if U is None else U[keep]
        fresh = _Chunk.empty(chunk, self.n_sensors, self.n_inputs)
        at = seqs - chunk * CHUNK_ROWS
        fresh.present[at] = True
        fresh.Y[at] = Y
        fresh.alarm[at] = alarm
        if fresh.U is not None and U is not None:
            fresh.U[at] = U
        self._chunks[chunk] = fresh
        if len(seqs):
            self._newest = max(self._newest, int(seqs[-1]))

    def settle(self, newest: int) -> None:
        """After loading: the newest committed seq is ``newest``; chunks out of the bound are dropped."""
        self._newest = newest
        for c in [c for c, ch in self._chunks.items() if c * CHUNK_ROWS > newest]:
            del self._chunks[c]
        self._evict()
        self._dirty.clear()
