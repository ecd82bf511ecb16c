"""Pure core of the central RCA stream: flags in, verdicts out.

Aligns the published flags of all plants by seq (:class:`FlagAligner`) and feeds
each aligned row, with its time, to the RCA engine, whose verdicts are the
verdicts-topic contract (:class:`fedrca.contracts.Verdict`). Verdict ids are
deterministic (site, root cause, evidence window), and the stage remembers the
ids it emitted, so a replayed or re-processed window never produces a second
verdict.

Each row's published sensor-fault bits go to :class:`~fedrca.rca.sensors.SensorEvents` first:
a row's sensor events (a plant's sensor fault begins or ends) come before its process verdict,
in ``fedrca replay`` as in the stream. The stage counts the rows judged without a plant
because of time (``without``: ``late``, ``clock``) and keeps each plant's latest clock offset.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Mapping
from typing import Any, Protocol

from fedrca.config.limits import MAX_REMEMBERED_VERDICTS
from fedrca.contracts import FlagMessage, Verdict
from fedrca.rca.sensors import SensorEvents
from fedrca.streams.aligner import AlignedRow, FlagAligner

__all__ = ["RCAStage", "StreamEngine"]


class StreamEngine(Protocol):
    """What the stage needs from the RCA engine (:class:`fedrca.rca.RCAEngine`)."""

    def update(
        self, seq: int, flags: dict[str, tuple[int, int]], ts: float = 0.0, levels: Mapping[str, int] | None = None
    ) -> Verdict | None: ...

    def get_state(self) -> dict[str, Any]: ...

    def set_state(self, state: dict[str, Any]) -> None: ...

    def reset(self) -> None: ...


class RCAStage:
    """Flag alignment + RCA engine + verdict contract, with restart-safe state.

    Parameters
    ----------
    site : site name
    plants : plant names
    engine : the RCA engine (``update(seq, flags) -> verdict or None``)
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
        self.consumed += 1
        rows, status = self.aligner.add(flag)
        return self._run(rows), status

    def flush(self) -> list[Verdict]:
        """Release and judge every buffered row (end of a finite stream)."""
        return self._run(self.aligner.flush())

    def _run(self, rows: list[AlignedRow]) -> list[Verdict]:
        verdicts = []
        for row in rows:
            self.rows += 1
            if not row.complete:
                self.incomplete_rows += 1
                for plant in row.missing(self.plants):
                    self.without[(plant, "late")] += 1
            for plant in row.clock:
                self.without[(plant, "clock")] += 1
            self.offsets.update(row.offsets)
            # a plant's sensor fault begins or ends: its event comes before the row's process verdict
            for event in self.sensors.update(row.seq, row.sensor, row.ts):
                if event.id not in self._emitted_set:
                    self.remember([event.id])
                    verdicts.append(event)
            # severity levels only when the plants publish them (FlagMessage.level)
            if row.levels:
                verdict = self.engine.update(row.seq, row.flags, row.ts, levels=row.levels)
            else:
                verdict = self.engine.update(row.seq, row.flags, row.ts)
            if verdict is None or verdict.id in self._emitted_set:
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
