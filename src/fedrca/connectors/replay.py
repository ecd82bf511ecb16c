"""Recorded datasets replayed as live sensor streams.

:func:`replay` writes one sensors message ``{"site","plant","ts","seq","values"}``
per plant and row of a parsed file (:class:`fedrca.datasets.Dataset`, from the one
loader :func:`fedrca.datasets.load_dataset`) to a :class:`Sink`, paced by a
:class:`Pacer` (as fast as possible, real time or x N). Sinks block when their
consumer is behind (Kafka's producer buffer, a bounded queue), so the replay
slows down instead of dropping rows.

Examples
--------
>>> from fedrca.datasets import load_tep_dataset
>>> data = load_tep_dataset("data/tep/d04_te.dat")
>>> sink = ListSink()
>>> stats = replay(data, {"reactor": ["XMEAS(9)", "XMEAS(21)"]}, sink, site="tep", stop=2)
>>> stats.rows, sink.messages[1].seq, len(sink.messages[1].values)
(2, 1, 2)
"""

from __future__ import annotations

import math
import queue
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from fedrca.config import ColumnMatch, group_columns
from fedrca.config.limits import MAX_SPEED, MIN_SPEED
from fedrca.contracts import SensorMessage
from fedrca.datasets.dataset import Dataset
from fedrca.exceptions import ConfigError, DataError

__all__ = [
    "ListSink",
    "Pacer",
    "QueueSink",
    "ReplayStats",
    "Sink",
    "progress_printer",
    "replay",
]


# -- sinks ------------------------------------------------------------------------------------
class Sink(Protocol):
    """Where replayed messages go; ``send`` blocks while the consumer is behind (back-pressure)."""

    def send(self, message: SensorMessage) -> None:
        """Deliver (or queue) one sensors message."""


@dataclass
class ListSink:
    """In-process sink keeping the messages in order (the embedded default, tests)."""

    messages: list[SensorMessage] = field(default_factory=list)

    def send(self, message: SensorMessage) -> None:
        """Append one message."""
        self.messages.append(message)


class QueueSink:
    """A bounded in-process queue: ``send`` blocks while the queue is full (back-pressure)."""

    def __init__(self, maxsize: int, timeout: float | None = None) -> None:
        self.queue: queue.Queue[SensorMessage] = queue.Queue(maxsize=maxsize)
        self.timeout = timeout

    def send(self, message: SensorMessage) -> None:
        """Put one message, waiting for room (DataError after ``timeout`` seconds, if set)."""
        try:
            self.queue.put(message, block=True, timeout=self.timeout)
        except queue.Full:
            raise DataError(f"the consumer took no message for {self.timeout} s; is it still running?") from None


# -- pacing -----------------------------------------------------------------------------------
class Pacer:
    """Releases rows at their recorded time scaled by ``speed`` (None = as fast as possible).

    The schedule is absolute (row time relative to the first row), so time lost while a
    sink blocks is caught up rather than accumulated; rows are never skipped. ``clock``
    and ``sleep`` are injectable for tests.

    Examples
    --------
    >>> now = [0.0]
    >>> pacer = Pacer(60.0, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    >>> pacer.begin(1000.0)
    >>> pacer.wait(1000.0), pacer.wait(1180.0)  # 180 s of data at x60 = 3 s
    (0.0, 3.0)
    """

    def __init__(
        self,
        speed: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if speed is not None and not (speed > 0 and math.isfinite(speed)):
            raise ConfigError(f"replay speed must be a positive factor, got {speed}")
        self.speed = speed
        self._clock = clock
        self._sleep = sleep
        self._t0 = 0.0
        self._w0 = 0.0
        self.slept = 0.0
        self.max_lag = 0.0

    @classmethod
    def from_spec(cls, spec: str | float | None, **kwargs: Any) -> Pacer:
        """``"asap"`` (also ``"max"``), ``"realtime"`` (= ``"x1"``) or ``"xN"`` such as ``"x60"``.

        Examples
        --------
        >>> Pacer.from_spec("x60").speed, Pacer.from_spec("realtime").speed, Pacer.from_spec("asap").speed
        (60.0, 1.0, None)
        """
        if spec is None:
            return cls(None, **kwargs)
        if isinstance(spec, int | float):
            return cls(float(spec), **kwargs)
        text = str(spec).strip().lower()
        if text in ("asap", "max", "fast", "fastest"):
            return cls(None, **kwargs)
        if text in ("realtime", "real-time", "real"):
            return cls(1.0, **kwargs)
        match = re.fullmatch(r"x?(\d+(?:\.\d*)?|\.\d+)x?", text)
        if match is None or float(match.group(1)) <= 0:
            raise ConfigError(f"unknown replay speed '{spec}'; use asap, realtime, or xN such as x60", key="--speed")
        speed = float(match.group(1))
        if not MIN_SPEED <= speed <= MAX_SPEED:
            raise ConfigError(
                f"a speed of x{speed:g} is outside x{MIN_SPEED:g}..x{MAX_SPEED:g} (slower a sample waits days; "
                "faster is asap): give a speed in that range, asap or realtime",
                key="--speed",
            )
        return cls(speed, **kwargs)

    def begin(self, t0: float) -> None:
        """Anchor the schedule: data time ``t0`` is released now."""
        self._t0 = t0
        self._w0 = self._clock()

    def wait(self, t: float) -> float:
        """Sleep until data time ``t`` is due; returns the seconds slept (0 when late or asap)."""
        if self.speed is None:
            return 0.0
        delay = self._w0 + (t - self._t0) / self.speed - self._clock()
        if delay <= 0:
            self.max_lag = max(self.max_lag, -delay)
            return 0.0
        self._sleep(delay)
        self.slept += delay
        return delay


# -- replay -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReplayStats:
    """What one replay sent."""

    rows: int
    messages: int
    first_row: int
    stop_row: int
    seconds: float
    slept: float
    max_lag: float


def replay(
    dataset: Dataset,
    groups: Mapping[str, Sequence[str]] | Mapping[str, ColumnMatch],
    sink: Sink,
    *,
    site: str,
    pacer: Pacer | None = None,
    start: int = 0,
    stop: int | None = None,
    chunk: int = 4096,
    progress: Callable[[int, int], None] | None = None,
) -> ReplayStats:
    """Send rows ``start..stop-1`` as one sensors message per plant and row.

    Parameters
    ----------
    dataset : the loaded file
    groups : plant -> its sensor columns in message order (or plant -> :class:`ColumnMatch` rule)
    sink : receives one :class:`~fedrca.contracts.SensorMessage` per plant and row; ``seq`` is the
        row number in the file, ``ts`` the row's timestamp in seconds; ``flush()`` is called at the end
        when the sink has it (a :class:`~fedrca.connectors.kafka.KafkaSink` then raises if
        anything was not delivered)
    site : the site name written into every message
    pacer : release schedule (default: as fast as possible)
    start, stop : row range (``stop`` None = to the end)
    chunk : rows between two progress reports
    progress : called as ``progress(rows_done, rows_total)`` after each chunk

    Raises
    ------
    DataError
        When a plant's column is not in the file or the row range is empty.
    """
    T = dataset.rows
    stop = T if stop is None else stop
    if not 0 <= start < stop <= T:
        raise DataError(f"{dataset.source}: row range {start}..{stop} is empty or outside the file's 0..{T} rows")
    plants = _plant_columns(dataset, groups)
    pacer = pacer or Pacer(None)
    arrays = {p: dataset.frame[cols].to_numpy(dtype=np.float64) for p, cols in plants.items()}
    ts = dataset.timestamps
    messages = 0
    started = time.perf_counter()
    pacer.begin(float(ts[start]))
    for lo in range(start, stop, chunk):
        hi = min(stop, lo + chunk)
        times = ts[lo:hi].tolist()
        for i, t in enumerate(times):
            pacer.wait(t)
            seq = lo + i
            for plant, values in arrays.items():
                sink.send(SensorMessage(site, plant, t, seq, values[seq]))
            messages += len(arrays)
        if progress is not None:
            progress(hi - start, stop - start)
    flush = getattr(sink, "flush", None)
    if callable(flush):
        flush()
    return ReplayStats(
        rows=stop - start,
        messages=messages,
        first_row=start,
        stop_row=stop,
        seconds=time.perf_counter() - started,
        slept=pacer.slept,
        max_lag=pacer.max_lag,
    )


def _plant_columns(
    dataset: Dataset, groups: Mapping[str, Sequence[str]] | Mapping[str, ColumnMatch]
) -> dict[str, list[str]]:
    if not groups:
        raise DataError("no plants to replay; give at least one plant and its columns")
    rules = {p: g for p, g in groups.items() if isinstance(g, ColumnMatch)}
    resolved = group_columns(dataset.columns, rules) if rules else {}
    out: dict[str, list[str]] = {}
    have = set(dataset.columns)
    for plant, cols in groups.items():
        names = resolved[plant] if plant in rules else [str(c) for c in cols]
        missing = [c for c in names if c not in have]
        if missing:
            raise DataError(
                f"{dataset.source}: plant '{plant}' needs column(s) {', '.join(missing)}, which the file does not "
                "have; check the plant's sensors in the configuration"
            )
        if not names:
            raise DataError(f"plant '{plant}' has no columns to replay")
        out[plant] = names
    return out


def progress_printer(label: str = "replay", stream: Any = None, every: float = 1.0) -> Callable[[int, int], None]:
    """A throttled one-line progress display on stderr."""
    last = [0.0]
    out = stream or sys.stderr

    def show(done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - last[0] < every:
            return
        last[0] = now
        out.write(f"\r{label}: {done}/{total} rows ({100 * done / max(total, 1):.0f}%)")
        if done >= total:
            out.write("\n")
        out.flush()

    return show
