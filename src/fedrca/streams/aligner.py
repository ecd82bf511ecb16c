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
* a second, different flag for a buffered (plant, seq) keeps the first one.

So the released sequence depends only on the flags and the lateness, not on
timing: the same input always yields the same rows and hence the same verdicts.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from fedrca.contracts import FlagMessage, FlagState
from fedrca.exceptions import ConfigError

__all__ = ["AlignedRow", "FlagAligner"]


@dataclass(frozen=True)
class AlignedRow:
    """Flags of one sample: ``flags[plant] = (zc, za)``; absent plants did not report in time."""

    seq: int
    ts: float
    flags: dict[str, tuple[int, int]]
    complete: bool = True
    #: published severity levels of the plants that publish them (FlagMessage.level)
    levels: dict[str, int] = field(default_factory=dict)


class FlagAligner:
    """Orders flags by seq across plants with a bounded lateness (in samples).

    Parameters
    ----------
    plants : every plant that publishes flags
    allowed_lateness : how many samples a row may wait for missing plants
    memory : how many released rows are remembered to recognise duplicates

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

    def __init__(self, plants: list[str], allowed_lateness: int = 5, memory: int = 10_000) -> None:
        if allowed_lateness < 0:
            raise ConfigError(f"allowed lateness must be >= 0 samples, got {allowed_lateness}")
        self.plants = list(plants)
        self.allowed_lateness = allowed_lateness
        self.memory = memory
        self._buffer: dict[int, dict[str, tuple[int, int]]] = {}
        self._ts: dict[int, float] = {}
        self._levels: dict[int, dict[str, int]] = {}
        self._next_seq: int | None = None
        self._max_seq = -1
        self._index = {p: i for i, p in enumerate(self.plants)}
        # Released rows as (seq, one character per plant: "-" absent, else its FlagState): the
        # memory is written to the changelog with every batch, so it is kept compact.
        self._released: deque[tuple[int, str]] = deque(maxlen=memory)

    def add(self, flag: FlagMessage) -> tuple[list[AlignedRow], str]:
        """Add one flag; returns the rows now released and the flag's status.

        Status is ``buffered``, ``duplicate`` (ignored), ``conflict`` (a different
        flag for a buffered (plant, seq); first kept) or ``late`` (dead-letter it).
        """
        if self._next_seq is None or (not self._released and flag.seq < self._next_seq):
            # Until the first row is released, the stream starts at the smallest seq seen.
            self._next_seq = flag.seq
        bits = (flag.zc, flag.za)
        if flag.seq < self._next_seq:
            for seq, code in reversed(self._released):
                if seq == flag.seq:
                    index = self._index.get(flag.plant)
                    same = index is not None and code[index] == str(int(FlagState.of(flag.zc, flag.za)))
                    return [], "duplicate" if same else "late"
                if seq < flag.seq:
                    break
            return [], "late"
        row = self._buffer.setdefault(flag.seq, {})
        status = "buffered"
        if flag.plant in row:
            status = "duplicate" if row[flag.plant] == bits else "conflict"
        else:
            row[flag.plant] = bits
            self._ts.setdefault(flag.seq, flag.ts)
            if flag.level is not None:
                self._levels.setdefault(flag.seq, {})[flag.plant] = flag.level
        self._max_seq = max(self._max_seq, flag.seq)
        return self._release(), status

    def flush(self) -> list[AlignedRow]:
        """Release everything buffered (end of a finite stream)."""
        return self._release(force_all=True)

    def _release(self, force_all: bool = False) -> list[AlignedRow]:
        out: list[AlignedRow] = []
        n_plants = len(self.plants)
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
            out.append(
                AlignedRow(
                    seq, self._ts.pop(seq), dict(row), complete=len(row) == n_plants, levels=self._levels.pop(seq, {})
                )
            )
            self._released.append((seq, self._code(row)))
            self._next_seq = seq + 1
        return out

    def _code(self, row: dict[str, tuple[int, int]]) -> str:
        return "".join(str(int(FlagState.of(*row[p]))) if p in row else "-" for p in self.plants)

    def get_state(self) -> dict[str, Any]:
        """JSON-friendly state."""
        return {
            "buffer": {str(s): {p: list(b) for p, b in row.items()} for s, row in self._buffer.items()},
            "ts": {str(s): t for s, t in self._ts.items()},
            "levels": {str(s): dict(row) for s, row in self._levels.items()},
            "next_seq": self._next_seq,
            "max_seq": self._max_seq,
            "released_seqs": [s for s, _ in self._released],
            "released_codes": "".join(code for _, code in self._released),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`get_state` output."""
        self._buffer = {
            int(s): {p: (int(b[0]), int(b[1])) for p, b in row.items()} for s, row in state["buffer"].items()
        }
        self._ts = {int(s): float(t) for s, t in state["ts"].items()}
        self._levels = {int(s): {p: int(v) for p, v in row.items()} for s, row in state.get("levels", {}).items()}
        self._next_seq = state["next_seq"]
        self._max_seq = int(state["max_seq"])
        width = len(self.plants)
        codes = state["released_codes"]
        self._released = deque(
            ((int(seq), codes[k * width : (k + 1) * width]) for k, seq in enumerate(state["released_seqs"])),
            maxlen=self.memory,
        )
