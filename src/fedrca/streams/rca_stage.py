"""Pure core of the central RCA stream: flags in, verdicts out.

Aligns the published flags of all plants by seq (:class:`FlagAligner`) and hands
the rows a batch of flags completes to the RCA engine at once
(:meth:`fedrca.rca.RCAEngine.update_block`: the same verdicts as row by row, at a
fraction of the cost), whose verdicts are the verdicts-topic contract
(:class:`fedrca.contracts.Verdict`). Verdict ids are deterministic (site, root
cause, evidence window), and the stage remembers the ids it emitted, so a replayed
or re-processed window never produces a second verdict.

Each row's published sensor-fault bits go to :class:`~fedrca.rca.sensors.SensorEvents` first:
a row's sensor events (a plant's sensor fault begins or ends) come before its process verdict,
in ``fedrca replay`` as in the stream. The stage counts the rows judged without a plant
because of time (``without``: ``late``, ``clock``) and keeps each plant's latest clock offset.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from typing import Any, Protocol

import numpy as np
from numpy.typing import ArrayLike

from fedrca.config.limits import MAX_REMEMBERED_VERDICTS
from fedrca.contracts import FlagColumns, FlagMessage, Verdict
from fedrca.rca.sensors import SensorEvents
from fedrca.streams.aligner import AlignedRow, FlagAligner

__all__ = ["RCAStage", "StreamEngine"]

#: A row's published pair (zc, za) as the engine's state code ``2 zc + za``; an absent plant -1
_ABSENT = (-1, -1)
_PAIR_CODE = {(0, 0): 0, (0, 1): 1, (1, 0): 2, (1, 1): 3, _ABSENT: -1}


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
        # written with the state after every batch: as many as fit the state record (docs/limits.md)
        self._emitted: deque[str] = deque(maxlen=MAX_REMEMBERED_VERDICTS)
        self._emitted_set: set[str] = set()
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
        self._emitted_set.clear()
        self.incomplete_rows = self.consumed = self.rows = 0

    def remember(self, ids: list[str]) -> None:
        """Mark verdict ids as already emitted (e.g. read back from the verdicts topic on start)."""
        for vid in ids:
            if vid not in self._emitted_set:
                if len(self._emitted) == self._emitted.maxlen:
                    self._emitted_set.discard(self._emitted[0])
                self._emitted.append(vid)
                self._emitted_set.add(vid)

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
        """Judge released rows, in order, in one engine block; the verdicts not emitted before.

        Each row's sensor events come before its process verdict, as row by row: the engine's
        verdicts of the block are placed after the sensor events of the row they were issued at."""
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
        verdicts = []
        for verdict in issued:
            if verdict.id in self._emitted_set:
                continue
            self.remember([verdict.id])
            verdicts.append(verdict)
        return verdicts

    def get_state(self) -> dict[str, Any]:
        """JSON-friendly state."""
        return {
            "aligner": self.aligner.get_state(),
            "engine": self.engine.get_state(),
            "sensors": self.sensors.get_state(),
            "emitted": list(self._emitted),
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
        self._emitted_set.clear()
        self.remember(list(state["emitted"]))
        self.incomplete_rows = int(state["incomplete_rows"])
        self.consumed = int(state["consumed"])
        self.rows = int(state["rows"])
