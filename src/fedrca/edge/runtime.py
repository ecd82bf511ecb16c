"""The ``fedrca edge`` process: sources -> row assemblers -> publisher, on the plants' sample clock.

:class:`EdgeRuntime` serves a group of plants: it builds their :class:`~fedrca.edge.tags.TagMap`,
one :class:`~fedrca.edge.rows.RowAssembler` per plant and one source per connection
(:func:`build_sources`), and runs them in one asyncio loop. The sources call it as their
:class:`~fedrca.edge.source.TagSink`; every sample period it closes the rows that are due,
hands them to the :class:`~fedrca.edge.publisher.RowPublisher` and updates the metrics.

Time: the rows' clock is the wall clock (``time.time()``, seconds since the epoch), the sample
period the plant's ``sample_seconds`` divided by ``speed`` (``--speed x60`` for a simulated plant
run 60 times faster than real time: ``fedrca simulate --to opcua:// --speed x60``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from fedrca.config import SiteConfig
from fedrca.config.edge import OpcuaSource as OpcuaSettings
from fedrca.config.edge_protocols import ModbusSource, MqttSource, SparkplugSource
from fedrca.edge.metrics import QUALITY_NAMES, EdgeMetrics
from fedrca.edge.modbus import ModbusPoller
from fedrca.edge.mqtt import MqttReader, SparkplugReader
from fedrca.edge.opcua import OpcuaSource
from fedrca.edge.publisher import RowPublisher, encode_row
from fedrca.edge.rows import Row, RowAssembler
from fedrca.edge.source import TagSource
from fedrca.edge.tags import TagMap, TagUpdate
from fedrca.exceptions import ConfigError

__all__ = ["EdgeRuntime", "EdgeTiming", "build_sources", "run_loop"]

log = logging.getLogger("fedrca.edge")

T = TypeVar("T")
#: batches of fewer updates go one by one (EdgeRuntime.updates)
_SMALL_BATCH = 16


def run_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on uvloop when it is installed (a dependency on POSIX), else on asyncio.

    The edge's loop wakes for every protocol packet read (paho reads one MQTT packet per wake-up);
    uvloop's wake-up is C where asyncio's is Python (``bench/bench_edge.py`` measures the edge on it).
    """
    try:
        import uvloop
    except ImportError:  # pragma: no cover - Windows: uvloop is not built there
        return asyncio.run(main)
    return uvloop.run(main)


@dataclass(frozen=True)
class EdgeTiming:
    """The clock of an edge process, s: ``period`` of the rows, ``staleness``, ``grace``, ``anchor``
    (time of seq 0), and the outage buffer in rows per plant.

    Examples
    --------
    >>> from fedrca.config import load_config
    >>> EdgeTiming.of(load_config("config/tep.yaml"), speed=60.0)
    EdgeTiming(period=3.0, staleness=9.0, grace=0.25, anchor=0.0, buffer_rows=20)
    """

    period: float
    staleness: float
    grace: float
    anchor: float
    buffer_rows: int

    @classmethod
    def of(cls, config: SiteConfig, speed: float = 1.0) -> EdgeTiming:
        """The timing of ``config``'s ``edge:`` section for a plant run ``speed`` times real time."""
        edge = config.edge
        if edge is None:
            raise ConfigError("the site has no edge: section (docs/connectors.md)", source=config.source, key="edge")
        if not (math.isfinite(speed) and speed > 0):
            raise ConfigError(f"speed must be a positive factor, got {speed}", key="--speed")
        sample = edge.sample_seconds or config.dataset.sample_seconds
        staleness = edge.staleness_seconds if edge.staleness_seconds is not None else 3 * sample
        return cls(
            period=sample / speed,
            staleness=staleness / speed,
            grace=edge.grace_seconds,
            anchor=edge.anchor,
            buffer_rows=max(1, math.ceil(edge.buffer_seconds / sample)),
        )


def build_sources(
    tags: TagMap, clock: Callable[[], float] = time.time, timing: EdgeTiming | None = None
) -> list[TagSource]:
    """One source per connection the tags use (its kind's client); ``timing`` paces polled sources."""
    sources: list[TagSource] = []
    for name in tags.sources():
        settings = tags.settings.sources[name]
        of = tags.of_source(name)
        if isinstance(settings, OpcuaSettings):
            sources.append(OpcuaSource(name, settings, of, clock=clock))
        elif isinstance(settings, MqttSource):
            sources.append(MqttReader(name, settings, of, clock=clock))
        elif isinstance(settings, SparkplugSource):
            sources.append(SparkplugReader(name, settings, of, clock=clock))
        elif isinstance(settings, ModbusSource):
            period, anchor = (timing.period, timing.anchor) if timing is not None else (1.0, 0.0)
            sources.append(ModbusPoller(name, settings, of, period=period, anchor=anchor, clock=clock))
        else:  # pragma: no cover - a kind registered in config without a client here
            raise ConfigError(f"source '{name}': no client for kind {settings.kind!r}", key=f"edge.sources.{name}")
    return sources


class EdgeRuntime:
    """One edge process (see the module docstring).

    Parameters
    ----------
    config : the site
    plants : the plants it serves
    publisher : where rows go (None: kept in :attr:`rows` only, for tests)
    metrics : its Prometheus series (a fresh :class:`EdgeMetrics` by default)
    speed : how much faster than real time the plant runs
    clock : seconds since the epoch
    sources : the protocol clients (default: :func:`build_sources`)
    """

    def __init__(
        self,
        config: SiteConfig,
        plants: Sequence[str],
        publisher: RowPublisher | None = None,
        metrics: EdgeMetrics | None = None,
        speed: float = 1.0,
        clock: Callable[[], float] = time.time,
        sources: Sequence[TagSource] | None = None,
        keep_rows: bool = False,
    ) -> None:
        self.config = config
        self.tags = TagMap(config, plants)
        self.timing = EdgeTiming.of(config, speed)
        self.publisher = publisher
        self.metrics = metrics if metrics is not None else EdgeMetrics(plants)
        self.clock = clock
        t = self.timing
        self.assemblers = {
            # a jump of the clock (a suspended process) closes at most an hour of rows (or the buffer's worth)
            p: RowAssembler(
                self.tags.width[p],
                t.period,
                t.staleness,
                t.grace,
                t.anchor,
                max_behind=max(t.buffer_rows, math.ceil(3600.0 / t.period)),
            )
            for p in self.tags.plants
        }
        # tag index -> (assembler, column, counter slot)
        classes = {p: self.tags.classes(p) for p in self.tags.plants}
        self._slots = [(p, c) for p in self.tags.plants for c in classes[p]]
        slot_of = {pc: i for i, pc in enumerate(self._slots)}
        self._route = [(self.assemblers[t.plant], t.column, slot_of[(t.plant, t.tag_class)]) for t in self.tags.tags]
        # the same routes as arrays, for batches (update_many()): tag index -> plant number, column, counter slot
        plant_number = {p: i for i, p in enumerate(self.tags.plants)}
        self._by_number = [self.assemblers[p] for p in self.tags.plants]
        self._tag_plant = np.array([plant_number[t.plant] for t in self.tags.tags], dtype=np.intp)
        self._tag_column = np.array([t.column for t in self.tags.tags], dtype=np.intp)
        self._tag_slot = np.array([slot_of[(t.plant, t.tag_class)] for t in self.tags.tags], dtype=np.intp)
        self._class_columns = {
            (p, c): np.array([t.column for t in self.tags.of_plant(p) if t.tag_class == c]) for p, c in self._slots
        }
        self._counts = np.zeros(len(self._slots), dtype=np.int64)
        self._late_seen = dict.fromkeys(self.tags.plants, 0)
        self._skipped_seen = dict.fromkeys(self.tags.plants, 0)
        self._dropped_seen = dict.fromkeys(self.tags.plants, 0)
        self._published_seen = dict.fromkeys(self.tags.plants, 0)
        self._reconnects_seen: dict[str, int] = {}
        self._conflated_seen: dict[str, int] = {}
        self.sources: list[TagSource] = (
            list(sources) if sources is not None else build_sources(self.tags, clock, self.timing)
        )
        self._source_of_tag = {t.index: t.source for t in self.tags.tags}
        self.keep_rows = keep_rows
        self.rows: dict[str, list[Row]] = {p: [] for p in self.tags.plants}
        self.gaps: dict[str, int] = dict.fromkeys(self.tags.plants, 0)
        self.closed = 0
        self.started = False

    # -- TagSink -----------------------------------------------------------------------------
    def update(self, update: TagUpdate) -> None:
        """A source's update: into its plant's assembler (arrival time: now)."""
        assembler, column, slot = self._route[update.tag]
        assembler.update(column, update.value, update.quality, update.source_ts, self.clock())
        self._counts[slot] += 1

    def update_many(
        self, tags: Sequence[int], values: Sequence[float], quality: Sequence[int], source_ts: Sequence[float]
    ) -> None:
        """A source's batch of updates (parallel sequences; NaN: no value): into their plants' assemblers,
        arrival time now, one call per plant (:meth:`~fedrca.edge.rows.RowAssembler.update_many`)."""
        n = len(tags)
        if n < _SMALL_BATCH:  # below it, numpy's fixed cost per call is more than the loop's
            for tag, value, q, t in zip(tags, values, quality, source_ts, strict=True):
                self.update(TagUpdate(tag, None if value != value else value, q, t))
            return
        now = self.clock()
        index = np.asarray(tags, dtype=np.intp)
        values_ = np.asarray(values, dtype=np.float64)
        quality_ = np.asarray(quality, dtype=np.uint8)
        ts = np.asarray(source_ts, dtype=np.float64)
        columns = self._tag_column[index]
        self._counts += np.bincount(self._tag_slot[index], minlength=len(self._counts))
        if len(self._by_number) == 1:
            self._by_number[0].update_many(columns, values_, quality_, ts, now)
            return
        plants = self._tag_plant[index]
        for number in np.unique(plants).tolist():
            mine = plants == number
            self._by_number[number].update_many(columns[mine], values_[mine], quality_[mine], ts[mine], now)

    def alive(self, tags: Sequence[int]) -> None:
        """A source's keep-alive for ``tags``."""
        now = self.clock()
        route = self._route
        for tag in tags:
            assembler, column, _ = route[tag]
            if now > assembler._heard[column]:
                assembler._heard[column] = now

    def rejected(self, tag: int | None, reason: str, detail: str) -> None:
        """A source refused input: counted by source and reason (the source logs the line)."""
        source = self._source_of_tag.get(tag, "?") if tag is not None else self._current_source(detail)
        self.metrics.edge_rejected.labels(source, reason).inc()

    def _current_source(self, detail: str) -> str:
        return self.sources[0].name if len(self.sources) == 1 else "?"

    # -- the clock ---------------------------------------------------------------------------
    def start(self, last: dict[str, int | None] | None = None) -> dict[str, int]:
        """Anchor every plant's rows at now, after the last seq already published (``last``).

        Returns the rows each plant missed since then (the restart's gap), logged and counted.
        """
        now = self.clock()
        for plant, assembler in self.assemblers.items():
            after = None if last is None else last.get(plant)
            gap = assembler.start(now, after)
            self.gaps[plant] = gap
            if gap:
                self.metrics.edge_missed.labels(plant, "restart").inc(gap)
                log.warning(
                    "%s: rows %d..%d (%d, %.0f s of plant time) were not made while the edge was down",
                    plant, after + 1 if after is not None else 0, assembler.next_seq - 1 if assembler.next_seq else 0,
                    gap, gap * self.timing.period,
                )  # fmt: skip
            elif after is not None:
                log.info("%s: continuing after seq %d", plant, after)
        self.started = True
        return dict(self.gaps)

    def tick(self) -> list[tuple[str, Row]]:
        """Close the rows that are due, publish them and refresh the metrics; returns them."""
        now = self.clock()
        out: list[tuple[str, Row]] = []
        for plant, assembler in self.assemblers.items():
            rows = assembler.due(now)
            if not rows:
                continue
            out += [(plant, r) for r in rows]
            if self.publisher is not None:
                site = self.config.site
                self.publisher.publish(plant, rows, [encode_row(site, plant, r) for r in rows])
            if self.keep_rows:
                self.rows[plant] += rows
            self.closed += len(rows)
            last = rows[-1]
            self.metrics.edge_last_seq.labels(plant).set(last.seq)
            for (p, c), columns in self._class_columns.items():
                if p != plant:
                    continue
                counts = np.bincount(last.quality[columns], minlength=4)
                for code, name in enumerate(QUALITY_NAMES):
                    self.metrics.edge_tags.labels(plant, c, name).set(int(counts[code]))
        self._refresh()
        return out

    def _refresh(self) -> None:
        m = self.metrics
        for i, (plant, tag_class) in enumerate(self._slots):
            if self._counts[i]:
                m.edge_updates.labels(plant, tag_class).inc(int(self._counts[i]))
                self._counts[i] = 0
        for plant, assembler in self.assemblers.items():
            if assembler.late > self._late_seen[plant]:
                m.edge_late.labels(plant).inc(assembler.late - self._late_seen[plant])
                self._late_seen[plant] = assembler.late
            if assembler.skipped > self._skipped_seen[plant]:
                m.edge_missed.labels(plant, "clock-jump").inc(assembler.skipped - self._skipped_seen[plant])
                log.error("%s: the clock jumped; %d rows skipped", plant, assembler.skipped - self._skipped_seen[plant])
                self._skipped_seen[plant] = assembler.skipped
        if self.publisher is not None:
            for plant, buffer in self.publisher.buffers.items():
                if buffer.dropped > self._dropped_seen[plant]:
                    m.edge_missed.labels(plant, "buffer-full").inc(buffer.dropped - self._dropped_seen[plant])
                    self._dropped_seen[plant] = buffer.dropped
                if buffer.published > self._published_seen[plant]:
                    m.edge_rows.labels(plant).inc(buffer.published - self._published_seen[plant])
                    self._published_seen[plant] = buffer.published
                m.edge_buffered.labels(plant).set(len(buffer.waiting) + buffer.in_flight)
        for source in self.sources:
            seen = self._reconnects_seen.get(source.name, 0)
            if source.counters.reconnects > seen:
                m.edge_reconnects.labels(source.name).inc(source.counters.reconnects - seen)
                self._reconnects_seen[source.name] = source.counters.reconnects
            seen = self._conflated_seen.get(source.name, 0)
            if source.counters.conflated > seen:
                m.edge_conflated.labels(source.name).inc(source.counters.conflated - seen)
                self._conflated_seen[source.name] = source.counters.conflated
            m.edge_connected.labels(source.name).set(1 if source.counters.connected else 0)

    def ready(self) -> tuple[bool, str]:
        """Readiness: every source connected."""
        down = [s.name for s in self.sources if not s.counters.connected]
        return (not down, "ok" if not down else f"not connected: {', '.join(down)}")

    async def run(self, until: Callable[[], bool] | None = None) -> None:
        """Run the sources and the clock until cancelled (or ``until()`` is true).

        Raises
        ------
        ConfigError
            When a source finds at its first connection what no retry fixes.
        """
        if not self.started:
            self.start()
        tasks = [asyncio.create_task(s.run(self), name=f"edge-source-{s.name}") for s in self.sources]
        period = self.timing.period
        try:
            while until is None or not until():
                for task in tasks:
                    if task.done():
                        task.result()  # a source's ConfigError ends the process with its line
                self.tick()
                # wake at the next row's closing time (at most a second apart: metrics and publisher stay fresh)
                now = self.clock()
                due = min(
                    (
                        a.time_of(a.next_seq) + self.timing.grace
                        for a in self.assemblers.values()
                        if a.next_seq is not None
                    ),
                    default=now + period,
                )
                await asyncio.sleep(min(max(due - now, 0.0) + 1e-4, 1.0))
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
