"""Pure core of the central RCA stream: flags in, verdicts out.

Aligns the published flags of all plants by seq (:class:`FlagAligner`) and hands
the rows a batch of flags completes to the RCA engine in blocks of at most
:data:`~fedrca.rca.engine.BLOCK_ROWS` rows (:meth:`fedrca.rca.RCAEngine.update_block`: the same verdicts
as row by row, at a fraction of the cost; a burst holds no more at once than one block), whose
verdicts are the verdicts-topic contract
(:class:`fedrca.contracts.Verdict`). Verdict ids are deterministic (site, root
cause, evidence window), so a replayed or re-processed window never produces a second
verdict: the stage keeps the seq of the last row it judged (``judged``, in its state) and
emits no verdict of a row at or below it. Every verdict is issued at the row it names (its
``seq``, the last seq of its evidence window, which the id is derived from), and rows are
judged once each in increasing seq (the aligner releases them so and the engine refuses
anything else), so every verdict emitted before is at or below ``judged`` and a new one
above it: one integer in the state stands for every id ever emitted, and the state record
written after every batch is as long after a million verdicts as after one
(``tests/streams/test_rca_memory.py``). The stage also remembers the newest
:data:`~fedrca.config.limits.MAX_REMEMBERED_VERDICTS` ids it emitted in this process, in one
array allocated with the stage, and emits none of them again (ids handed to :meth:`RCAStage.remember`
too); they are not written to the state.

Each row's published sensor-fault bits go to :class:`~fedrca.rca.sensors.SensorEvents` first:
a row's sensor events (a plant's sensor fault begins or ends) come before its process verdict,
in ``fedrca replay`` as in the stream. The stage counts the rows judged without a plant
because of time (``without``: ``late``, ``clock``) and keeps each plant's latest clock offset.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Protocol

import numpy as np
from numpy.typing import ArrayLike

from fedrca.config.limits import MAX_REMEMBERED_VERDICTS
from fedrca.contracts import FlagColumns, FlagMessage, Verdict
from fedrca.exceptions import DataError
from fedrca.rca.engine import BLOCK_ROWS
from fedrca.rca.sensors import SensorEvents
from fedrca.streams.aligner import AlignedRow, FlagAligner

__all__ = ["RCAStage", "StreamEngine", "VerdictIds"]

#: A row's published pair (zc, za) as the engine's state code ``2 zc + za``; an absent plant -1
_ABSENT = (-1, -1)
_PAIR_CODE = {(0, 0): 0, (0, 1): 1, (1, 0): 2, (1, 1): 3, _ABSENT: -1}


#: Characters of a verdict id (:func:`fedrca.contracts.messages.verdict_id`: 16 hex digits)
_ID_CHARS = 16


class VerdictIds:
    """The newest ``capacity`` verdict ids emitted, oldest forgotten first, in fixed arrays.

    A ring of ``capacity`` ids allocated at once, each as its 16 hex digits (``S16``, for :meth:`text`)
    and as their 64-bit value (for lookups), so its memory is the same whether it holds no id or
    ``capacity`` of them: a set of ``str`` filled by a stream grows by 100 to 150 bytes an id until
    it is full (at the soak's verdict rate, for a quarter of an hour; ``tests/streams/test_rca_memory.py``).
    A lookup scans the values (vectorised: verdicts are rare next to rows).

    Parameters
    ----------
    capacity : most ids remembered

    Examples
    --------
    >>> ids = VerdictIds(2)
    >>> ids.add("0" * 16), ids.add("0" * 16), ids.add("1" * 16), ids.add("2" * 16)
    (True, False, True, True)
    >>> "0" * 16 in ids, ids.text() == "1" * 16 + "2" * 16
    (False, True)
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise DataError(f"a memory of verdict ids holds at least 1 id, got {capacity}")
        self.capacity = int(capacity)
        self._hex = np.zeros(self.capacity, dtype=f"S{_ID_CHARS}")
        self._value = np.zeros(self.capacity, dtype=np.uint64)
        self._next = 0  # slot of the next id (the oldest one once full)
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __contains__(self, vid: object) -> bool:
        value = _id_value(vid) if isinstance(vid, str) else None
        if value is None or not self._count:
            return False
        return bool((self._value[: self._count] == value).any())

    def clear(self) -> None:
        """Forget every id."""
        self._next = self._count = 0

    def add(self, vid: str) -> bool:
        """Remember ``vid`` (forgetting the oldest id when full); False when it is remembered already."""
        value = _id_value(vid)
        if value is None:
            raise DataError(f"a verdict id is {_ID_CHARS} hex digits, got {vid!r}")
        if self._count and (self._value[: self._count] == value).any():
            return False
        slot = self._next
        self._hex[slot] = vid.encode("ascii")
        self._value[slot] = value
        self._next = (slot + 1) % self.capacity
        self._count = min(self._count + 1, self.capacity)
        return True

    def load(self, ids: list[str]) -> None:
        """Remember distinct ids in order when none is remembered yet: as :meth:`add` one by one, at once (a
        restored state)."""
        if self._count or len(set(ids)) != len(ids):
            raise DataError("load takes distinct ids into an empty memory; add them one by one")
        kept = ids[len(ids) - self.capacity :] if len(ids) > self.capacity else ids
        values: list[np.uint64] = []
        for vid in ids:  # every id checked, as add would
            value = _id_value(vid)
            if value is None:
                raise DataError(f"a verdict id is {_ID_CHARS} hex digits, got {vid!r}")
            values.append(value)
        n = len(kept)
        self._hex[:n] = [vid.encode("ascii") for vid in kept]
        self._value[:n] = values[len(values) - n :]
        self._count, self._next = n, n % self.capacity

    def text(self) -> str:
        """The ids, oldest first, as one string (16 characters an id)."""
        if self._count < self.capacity:
            return self._hex[: self._count].tobytes().decode("ascii")
        return (self._hex[self._next :].tobytes() + self._hex[: self._next].tobytes()).decode("ascii")

    def ids(self) -> list[str]:
        """The ids, oldest first."""
        text = self.text()
        return [text[k : k + _ID_CHARS] for k in range(0, len(text), _ID_CHARS)]


def _id_value(vid: str) -> np.uint64 | None:
    """The 64-bit value of a verdict id's 16 lowercase hex digits; None for anything else."""
    if len(vid) != _ID_CHARS or vid.strip("0123456789abcdef"):
        return None
    return np.uint64(int(vid, 16))


class StreamEngine(Protocol):
    """What the stage needs from the RCA engine (:class:`fedrca.rca.RCAEngine`)."""

    def update_block(
        self, seqs: ArrayLike, codes: ArrayLike, ts: ArrayLike | None = None, levels: ArrayLike | None = None
    ) -> list[Verdict]: ...

    def get_state(self) -> dict[str, Any]: ...

    def set_state(self, state: dict[str, Any]) -> None: ...

    def reset(self) -> None: ...


class RCAStage:
    """Flag alignment + RCA engine + verdict contract, with restart-safe state.

    Parameters
    ----------
    site : site name
    plants : plant names
    engine : the RCA engine (``update_block(seqs, codes, ts, levels) -> verdicts``)
    allowed_lateness : samples a row may wait for missing plants
    sensor_epsilon : budget of the plants' published sensor-fault bits (their flag epsilon)
    max_clock_skew : seconds a plant's time may differ from its row's (:class:`FlagAligner`)
    """

    def __init__(
        self,
        site: str,
        plants: list[str],
        engine: StreamEngine,
        allowed_lateness: int = 5,
        sensor_epsilon: float = math.inf,
        max_clock_skew: float = math.inf,
    ) -> None:
        self.site = site
        self.plants = list(plants)
        self.engine = engine
        self.aligner = FlagAligner(plants, allowed_lateness=allowed_lateness, max_clock_skew=max_clock_skew)
        self.sensors = SensorEvents(site, plants, sensor_epsilon)
        #: rows judged without a plant because of time, by (plant, reason), since the owner last drained
        #: it (:meth:`fedrca.streams.runtime.RCARuntime.process_flags` exports and clears it); the
        #: plants' clock offsets in their latest row
        self.without: Counter[tuple[str, str]] = Counter()
        self.offsets: dict[str, float] = {}
        self._index = {p: m for m, p in enumerate(self.plants)}
        # the newest ids emitted in this process (not written to the state: `_judged` stands for them there)
        self._emitted = VerdictIds(MAX_REMEMBERED_VERDICTS)
        #: seq of the last row judged (None: none yet): no verdict of a row at or below it is emitted
        self._judged: int | None = None
        self.incomplete_rows = 0
        self.consumed = 0
        self.rows = 0

    def reset(self) -> None:
        """Forget the stream: alignment, engine evidence and emitted ids (a new recording)."""
        self.aligner = FlagAligner(
            self.plants, allowed_lateness=self.aligner.allowed_lateness, max_clock_skew=self.aligner.max_clock_skew
        )
        self.engine.reset()
        self.sensors.reset()
        self.offsets.clear()
        self._emitted.clear()
        self._judged = None
        self.incomplete_rows = self.consumed = self.rows = 0

    def remember(self, ids: list[str]) -> None:
        """Mark verdict ids as already emitted (e.g. read back from the verdicts topic, or an earlier state's
        ids): none of them is emitted again by this stage (the newest
        :data:`~fedrca.config.limits.MAX_REMEMBERED_VERDICTS`; kept in memory, not in the state)."""
        if not len(self._emitted) and len(set(ids)) == len(ids):
            self._emitted.load(ids)  # a restored state: the same ids as one by one, at once
            return
        for vid in ids:
            self._emitted.add(vid)

    def add(self, flag: FlagMessage) -> tuple[list[Verdict], str]:
        """Add one flag; returns the new verdicts and the flag's aligner status."""
        rows, status = self.align(flag)
        return self.judge(rows), status

    def align(self, flag: FlagMessage) -> tuple[list[AlignedRow], str]:
        """Add one flag to the alignment; returns the rows it releases (to :meth:`judge`) and its status."""
        self.consumed += 1
        return self.aligner.add(flag)

    def align_columns(self, flags: FlagColumns) -> list[AlignedRow] | None:
        """Add a batch of plain flags at once (:meth:`FlagAligner.add_columns`); the rows it releases, or None
        when the batch must be aligned flag by flag (:meth:`align`)."""
        rows = self.aligner.add_columns(flags)
        if rows is not None:
            self.consumed += len(flags)
        return rows

    def flush(self) -> list[Verdict]:
        """Release and judge every buffered row (end of a finite stream)."""
        return self.judge(self.aligner.flush())

    def judge(self, rows: list[AlignedRow]) -> list[Verdict]:
        """Judge released rows, in order, in engine blocks of at most :data:`~fedrca.rca.engine.BLOCK_ROWS`
        rows; the verdicts not emitted before.

        Each row's sensor events come before its process verdict, as row by row: the engine's
        verdicts of a block are placed after the sensor events of the row they were issued at. The
        blocks give the verdicts of one block (and of the rows one by one: the engine's
        ``update_block``), and bound what judging holds at once (the rows' codes, levels and events,
        the engine's intermediates) to one block's, however many rows a catch-up burst releases
        (``tests/streams/test_rca_memory.py``)."""
        if len(rows) <= BLOCK_ROWS:
            return self._judge_block(rows)
        out: list[Verdict] = []
        for lo in range(0, len(rows), BLOCK_ROWS):
            out += self._judge_block(rows[lo : lo + BLOCK_ROWS])
        return out

    def _judge_block(self, rows: list[AlignedRow]) -> list[Verdict]:
        """:meth:`judge` of one engine block."""
        if not rows:
            return []
        plants, M = self.plants, len(self.plants)
        without, offsets, sensors = self.without, self.offsets, self.sensors.update
        codes: list[list[int]] = []
        levels: list[list[int]] = []
        published = False
        events: list[list[Verdict]] = []
        self.rows += len(rows)
        for row in rows:
            if not row.complete:
                self.incomplete_rows += 1
                for plant in row.missing(plants):
                    without[(plant, "late")] += 1
            for plant in row.clock:
                without[(plant, "clock")] += 1
            offsets.update(row.offsets)
            # a plant's sensor fault begins or ends: its event comes before the row's process verdict
            events.append(sensors(row.seq, row.sensor, row.ts))
            get = row.flags.get
            try:
                codes.append([_PAIR_CODE[get(plant, _ABSENT)] for plant in plants])
            except KeyError:  # a pair out of the contract's bits: its code, which the engine refuses
                codes.append([2 * pair[0] + pair[1] if (pair := get(plant)) is not None else -1 for plant in plants])
            # severity levels only when the plants publish them (FlagMessage.level)
            if row.levels:
                published = True
                level = row.levels.get
                levels.append([level(plant, -1) for plant in plants])
            else:
                levels.append([-1] * M)
        process = self.engine.update_block(
            np.fromiter((row.seq for row in rows), dtype=np.int64, count=len(rows)),
            np.array(codes, dtype=np.int64),
            np.fromiter((row.ts for row in rows), dtype=np.float64, count=len(rows)),
            np.array(levels, dtype=np.int64) if published else None,
        )
        issued: list[Verdict] = process
        if any(events):  # the sensor events of a row before its process verdict
            issued = []
            k = 0
            for row, row_events in zip(rows, events, strict=True):
                issued += row_events
                while k < len(process) and process[k].seq == row.seq:
                    issued.append(process[k])
                    k += 1
        # a verdict of a row judged before was emitted then (module docstring); the rows came in increasing seq
        # (the engine refused them otherwise)
        judged, add = self._judged, self._emitted.add  # add: False for an id emitted before
        self._judged = rows[-1].seq
        return [verdict for verdict in issued if (judged is None or verdict.seq > judged) and add(verdict.id)]

    def get_state(self) -> dict[str, Any]:
        """JSON-friendly state."""
        return {
            "aligner": self.aligner.get_state(),
            "engine": self.engine.get_state(),
            "sensors": self.sensors.get_state(),
            # stands for every verdict id emitted (module docstring); earlier states listed the newest ids
            # ("emitted": one string of 16-character ids, or a list of ids), which set_state still reads
            "judged": self._judged,
            "incomplete_rows": self.incomplete_rows,
            "consumed": self.consumed,
            "rows": self.rows,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`get_state` output."""
        self.aligner.set_state(state["aligner"])
        self.engine.set_state(state["engine"])
        self.sensors.set_state(state.get("sensors"))
        self._emitted.clear()
        judged = state.get("judged")
        self._judged = None if judged is None else int(judged)
        # an earlier state's ids (it had no `judged`): still none of them emitted again
        emitted = state.get("emitted") or []
        if isinstance(emitted, str):
            emitted = [emitted[k : k + _ID_CHARS] for k in range(0, len(emitted), _ID_CHARS)]
        self.remember([str(vid) for vid in emitted])
        self.incomplete_rows = int(state["incomplete_rows"])
        self.consumed = int(state["consumed"])
        self.rows = int(state["rows"])
