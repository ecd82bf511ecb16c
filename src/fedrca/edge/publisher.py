"""The Kafka side of ``fedrca edge``: rows to ``<site>.sensors.<plant>``, an outage buffered up to a bound.

:class:`RowPublisher` keeps each plant's rows in a buffer of its own until the broker has
acknowledged them (kafka-python, ``acks=all``, idempotent: a retry after a lost
acknowledgement is not written twice). While the broker is away rows wait in the buffer,
at most ``bound`` rows per plant (``edge.buffer_seconds`` of plant time); past it the
oldest waiting rows are dropped, counted in :attr:`PlantBuffer.dropped`, and logged once
per outage with the seqs lost: the gap is explicit, never silent
(``tests/edge/test_publisher.py::test_broker_down_*``).

:func:`last_published` reads back the last ``seq`` on a plant's topic at start, so a
restarted edge continues after it (:meth:`fedrca.edge.rows.RowAssembler.start`): no row is
published twice (``tools/edge_faults.py`` kills it with ``kill -9``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError

from fedrca.config import SiteConfig
from fedrca.connectors.kafka import KafkaOptions
from fedrca.contracts import SensorMessage
from fedrca.contracts.bounds import parse_json
from fedrca.contracts.messages import MAX_SEQ
from fedrca.edge.rows import Row
from fedrca.exceptions import DataError, MessageError

__all__ = ["PlantBuffer", "RowPublisher", "encode_row", "last_published"]

log = logging.getLogger("fedrca.edge.publisher")


def encode_row(site: str, plant: str, row: Row) -> bytes:
    """The sensor message of a row (:class:`~fedrca.contracts.SensorMessage`: ``null`` for a value
    that is not usable, ``quality`` when a code says more than missing).

    Examples
    --------
    >>> import numpy as np
    >>> row = Row(7, 1.5, np.array([2.0, np.nan, np.nan]), np.array([0, 1, 3], dtype=np.uint8))
    >>> encode_row("s", "p", row)
    b'{"site":"s","plant":"p","ts":1.5,"seq":7,"values":[2.0,null,null],"quality":[0,1,3]}'
    """
    return SensorMessage(site, plant, row.ts, row.seq, row.values, row.quality).encode()


def last_published(
    bootstrap: str, topic: str, plant: str, options: KafkaOptions | None = None, timeout: float = 10.0
) -> int | None:
    """The highest ``seq`` of ``plant``'s messages at the end of ``topic`` (None: none there).

    Reads every partition backwards from its end, in growing windows, until one holds a row of
    ``plant`` (a row the edge published is at the end of its plant's partition, unless other
    writers' records or poison follow it), at most 5,120 records back.

    Raises
    ------
    DataError
        When the broker cannot be reached within ``timeout`` seconds.
    """
    try:
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            enable_auto_commit=False,
            group_id=None,
            request_timeout_ms=int(timeout * 1000) + 1000,
            **(options or KafkaOptions()).kafka_python(),
        )
    except KafkaError as exc:
        raise DataError(f"cannot reach the Kafka broker at {bootstrap} ({exc}); is it running?") from None
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        if not tps:
            return None
        ends = consumer.end_offsets(tps)
        deadline = time.monotonic() + timeout
        best: int | None = None
        for tp in tps:
            seq = _last_seq_in(consumer, tp, ends[tp], plant, deadline)
            if seq is not None:
                best = seq if best is None else max(best, seq)
        if time.monotonic() > deadline:
            raise DataError(f"reading the end of {topic} timed out after {timeout:.0f} s; is the broker up?")
        return best
    finally:
        consumer.close()


#: Records read back from a partition's end at first, and at most, for :func:`last_published` (a window
#: grows fourfold while it holds no row of the plant: records of other writers or poison at the end).
_LAST_SEQ_WINDOW, _LAST_SEQ_LOOKBACK = 20, 5_120


def _last_seq_in(consumer: KafkaConsumer, tp: TopicPartition, end: int, plant: str, deadline: float) -> int | None:
    """The highest valid ``seq`` of ``plant`` in the newest window of ``tp`` that holds one (None: none in the
    last :data:`_LAST_SEQ_LOOKBACK` records; ``tests/edge/test_publisher.py``: 30 poison records at the end)."""
    consumer.assign([tp])
    stop, window = end, _LAST_SEQ_WINDOW
    while stop > 0 and end - stop < _LAST_SEQ_LOOKBACK and time.monotonic() < deadline:
        begin = max(0, stop - window, end - _LAST_SEQ_LOOKBACK)
        consumer.seek(tp, begin)
        best: int | None = None
        while consumer.position(tp) < stop and time.monotonic() < deadline:
            for record in consumer.poll(timeout_ms=200).get(tp, ()):
                if record.offset >= stop:
                    continue
                # anyone who can write the topic wrote these: bounded, and only a seq of the contract counts
                # (a record nested 100,000 deep was a RecursionError; tests/edge/test_publisher.py)
                try:
                    data = parse_json(record.value, "a sensor message", max_depth=2)
                except MessageError:
                    continue
                if not isinstance(data, dict) or data.get("plant") != plant:
                    continue
                seq = data.get("seq")
                if type(seq) is int and 0 <= seq <= MAX_SEQ:
                    best = seq if best is None else max(best, seq)
        if best is not None:
            return best
        stop, window = begin, window * 4
    return None


@dataclass
class PlantBuffer:
    """One plant's rows waiting for the broker, and what happened to them."""

    topic: str
    key: bytes
    bound: int
    waiting: deque[tuple[int, bytes]] = field(default_factory=deque)
    in_flight: int = 0
    published: int = 0
    dropped: int = 0
    last_acked: int | None = None
    #: seqs dropped in the current outage (first, last), logged when it ends
    gap: list[int] = field(default_factory=list)


class RowPublisher:
    """Rows of several plants to their sensor topics with a bounded outage buffer (see the module docstring).

    Parameters
    ----------
    bootstrap : ``host:port`` of a broker
    config : the site (topic names)
    plants : the plants this process publishes
    bound : rows per plant kept while the broker is away
    options : Kafka security options (default: the site's ``kafka:`` settings and the environment)
    max_in_flight : rows per plant handed to the producer and not yet acknowledged
    """

    def __init__(
        self,
        bootstrap: str,
        config: SiteConfig,
        plants: Sequence[str],
        bound: int,
        options: KafkaOptions | None = None,
        max_in_flight: int = 1000,
        linger_ms: int = 2,
    ) -> None:
        if bound < 1:
            raise DataError(f"the outage buffer holds at least one row, got {bound}")
        self.bootstrap = bootstrap
        self.config = config
        self.options = options or KafkaOptions.from_settings(config.kafka)
        self.max_in_flight = max_in_flight
        self.linger_ms = linger_ms
        self.buffers: dict[str, PlantBuffer] = {
            p: PlantBuffer(config.topic("sensors", plant=p), p.encode(), bound) for p in plants
        }
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._producer: KafkaProducer | None = None
        self._sender: threading.Thread | None = None
        self._closing = False
        self.failures = 0

    def connect(self, timeout: float = 30.0) -> None:
        """Create the producer (DataError when the broker is not reachable within ``timeout`` s)."""
        try:
            self._producer = KafkaProducer(
                bootstrap_servers=self.bootstrap,
                acks="all",
                enable_idempotence=True,
                linger_ms=self.linger_ms,
                retries=2**31 - 1,
                # a row stays with the producer until the broker takes it: the outage buffer's bound,
                # not a timeout, decides what is dropped (a day covers any buffer_seconds in use)
                delivery_timeout_ms=86_400_000,
                request_timeout_ms=10_000,
                max_block_ms=int(timeout * 1000),
                bootstrap_timeout_ms=int(timeout * 1000),
                reconnect_backoff_max_ms=2000,
                **self.options.kafka_python(),
            )
        except KafkaError as exc:
            raise DataError(f"cannot reach the Kafka broker at {self.bootstrap} ({exc}); is it running?") from None
        # kafka-python's send() may block (metadata of a topic, a full accumulator): never on the caller's
        # thread, whose event loop also serves the protocol sessions
        self._sender = threading.Thread(target=self._send_loop, name="fedrca-edge-sender", daemon=True)
        self._sender.start()

    def _send_loop(self) -> None:
        while True:
            with self._wake:
                if self._closing:
                    return
                self._wake.wait(timeout=0.1)
            self.pump()

    def last_seqs(self, timeout: float = 10.0) -> dict[str, int | None]:
        """The last ``seq`` already on each plant's topic (None: nothing there)."""
        return {p: last_published(self.bootstrap, b.topic, p, self.options, timeout) for p, b in self.buffers.items()}

    def publish(self, plant: str, rows: Sequence[Row], payloads: Sequence[bytes]) -> None:
        """Queue rows of ``plant`` (in seq order) and send what the in-flight limit allows."""
        buffer = self.buffers[plant]
        with self._lock:
            for row, payload in zip(rows, payloads, strict=True):
                buffer.waiting.append((row.seq, payload))
            over = len(buffer.waiting) + buffer.in_flight - buffer.bound
            if over > 0:
                lost = [buffer.waiting.popleft()[0] for _ in range(min(over, len(buffer.waiting)))]
                if lost:
                    buffer.dropped += len(lost)
                    if not buffer.gap:
                        log.error(
                            "%s: the broker at %s has not taken rows for %d rows of plant time; the buffer of %d "
                            "rows is full and the oldest rows are dropped from seq %d on (the gap is reported "
                            "when the broker is back)",
                            plant,
                            self.bootstrap,
                            buffer.bound,
                            buffer.bound,
                            lost[0],
                        )
                        buffer.gap = [lost[0], lost[-1]]
                    else:
                        buffer.gap[1] = lost[-1]
            self._wake.notify()

    def pump(self, plant: str | None = None) -> None:
        """Hand waiting rows to the producer, up to the in-flight limit per plant (the sender thread's work)."""
        producer = self._producer
        if producer is None:
            return
        for name in [plant] if plant is not None else list(self.buffers):
            buffer = self.buffers[name]
            while True:
                with self._lock:
                    if not buffer.waiting or buffer.in_flight >= self.max_in_flight:
                        break
                    seq, payload = buffer.waiting.popleft()
                    buffer.in_flight += 1
                try:
                    future = producer.send(buffer.topic, key=buffer.key, value=payload)
                except KafkaError as exc:  # the producer's own buffer is full or closed: try again later
                    with self._lock:
                        buffer.in_flight -= 1
                        buffer.waiting.appendleft((seq, payload))
                    self.failures += 1
                    log.debug("%s: send deferred (%s)", name, exc)
                    break
                future.add_callback(self._acked, name, seq)
                future.add_errback(self._failed, name, seq, payload)

    def _acked(self, plant: str, seq: int, _metadata: Any) -> None:
        buffer = self.buffers[plant]
        with self._lock:
            buffer.in_flight -= 1
            buffer.published += 1
            buffer.last_acked = seq if buffer.last_acked is None else max(buffer.last_acked, seq)
            gap, buffer.gap = buffer.gap, []
        if gap:
            log.error(
                "%s: the broker is back; rows %d..%d (%d) were dropped while it was away",
                plant,
                gap[0],
                gap[1],
                gap[1] - gap[0] + 1,
            )

    def _failed(self, plant: str, seq: int, payload: bytes, exc: BaseException) -> None:
        """A row the producer gave up on (a fatal error): back to the front of the buffer, in order."""
        buffer = self.buffers[plant]
        with self._lock:
            buffer.in_flight -= 1
            buffer.waiting.appendleft((seq, payload))
        self.failures += 1
        log.warning("%s: row %d not delivered (%s); it waits in the buffer", plant, seq, exc)

    def pending(self) -> int:
        """Rows waiting or in flight, all plants."""
        with self._lock:
            return sum(len(b.waiting) + b.in_flight for b in self.buffers.values())

    def flush(self, timeout: float | None = None) -> None:
        """Send and wait for everything queued (DataError when the broker does not take it in time)."""
        if self._producer is None:
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.pending():
            self.pump()
            with contextlib.suppress(KafkaError):  # not flushed within the second: pump again and check the deadline
                self._producer.flush(timeout=1.0)
            if deadline is not None and time.monotonic() > deadline:
                raise DataError(f"{self.pending()} rows not acknowledged after {timeout:.0f} s")

    def close(self, timeout: float = 10.0) -> None:
        """Flush (best effort within ``timeout``) and close the producer."""
        if self._producer is None:
            return
        try:
            self.flush(timeout)
        except DataError as exc:
            log.error("closing with rows not delivered: %s", exc)
        finally:
            with self._wake:
                self._closing = True
                self._wake.notify()
            if self._sender is not None:
                self._sender.join(timeout=5.0)
            self._producer.close(timeout=max(timeout, 1.0))
            self._producer = None

    def stats(self) -> Mapping[str, PlantBuffer]:
        """Each plant's buffer (read-only use)."""
        return self.buffers
