"""Kafka adapters (kafka-python): topic creation, a replay sink, topic readers.

The Faust workers use aiokafka through Faust; these synchronous helpers serve
the CLI (``replay-to-kafka``, topic set-up) and the tests.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka import errors as kafka_errors
from kafka.errors import KafkaError, TopicAlreadyExistsError

from fedrca.config import SiteConfig
from fedrca.contracts import SensorMessage
from fedrca.exceptions import ConfigError, DataError

__all__ = [
    "KafkaSink",
    "TopicRecord",
    "bootstrap_of",
    "ensure_site_topics",
    "read_topic",
    "site_topic_specs",
    "verdict_ids",
]


def bootstrap_of(broker: str) -> str:
    """``kafka://host:port`` (Faust style) or ``host:port`` -> ``host:port``.

    Examples
    --------
    >>> bootstrap_of("kafka://127.0.0.1:9092")
    '127.0.0.1:9092'
    """
    address = broker.removeprefix("kafka://")
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"broker '{broker}' must look like kafka://host:port")
    return address


def site_topic_specs(config: SiteConfig, partitions: int = 2) -> dict[str, dict[str, Any]]:
    """The site's topics and how they are created (kafka-python ``create_topics`` dict form).

    Sensor topics get ``partitions`` partitions; flags, verdicts and dead letters one
    (the RCA needs a total order); params one, compacted (latest artifact per plant).

    Examples
    --------
    >>> from fedrca.config import load_config
    >>> specs = site_topic_specs(load_config("config/tep.yaml"), partitions=3)
    >>> specs["tep.sensors.reactor"]["num_partitions"], specs["tep.params"]["configs"]
    (3, {'cleanup.policy': 'compact'})
    """
    if partitions < 1:
        raise ConfigError(f"partitions must be at least 1, got {partitions}")
    specs: dict[str, dict[str, Any]] = {
        config.topic("sensors", plant=p): {"num_partitions": partitions, "replication_factor": 1}
        for p in config.plant_names
    }
    for kind in ("flags", "verdicts", "deadletter"):
        specs[config.topic(kind)] = {"num_partitions": 1, "replication_factor": 1}
    specs[config.topic("params")] = {
        "num_partitions": 1,
        "replication_factor": 1,
        "configs": {"cleanup.policy": "compact"},
    }
    return specs


def ensure_site_topics(bootstrap: str, config: SiteConfig, partitions: int = 2, timeout: float = 30.0) -> list[str]:
    """Create the site's topics if missing (idempotent); returns their names, sorted.

    Topics that already exist are left as they are. Returns once every topic has a
    leader for each partition. See :func:`site_topic_specs` for partitions and configs.

    Raises
    ------
    DataError
        When the broker cannot be reached or refuses a topic (the reason is named).
    """
    specs = site_topic_specs(config, partitions)
    try:
        admin = KafkaAdminClient(
            bootstrap_servers=bootstrap,
            client_id="fedrca-admin",
            request_timeout_ms=int(timeout * 1000),
            bootstrap_timeout_ms=int(timeout * 1000),
        )
    except KafkaError as exc:
        raise DataError(f"cannot reach the Kafka broker at {bootstrap} ({exc}); is it running?") from None
    try:
        existing = set(admin.list_topics())
        missing = {name: spec for name, spec in specs.items() if name not in existing}
        if missing:
            result = admin.create_topics(missing, timeout_ms=int(timeout * 1000), raise_errors=False)
            for topic in result.get("topics", []):
                code = topic.get("error_code", 0)
                if code and code != TopicAlreadyExistsError.errno:  # created concurrently by another client
                    raise DataError(
                        f"the broker refused to create topic {topic.get('name')}: "
                        f"{topic.get('error_message') or kafka_errors.for_code(code).__name__}"
                    )
        admin.wait_for_topics(sorted(specs), timeout_ms=int(timeout * 1000))
    except KafkaError as exc:
        raise DataError(f"topics of site '{config.site}' not ready on {bootstrap}: {exc}") from None
    finally:
        admin.close()
    return sorted(specs)


class KafkaSink:
    """Replay sink: one message per plant and row to ``<site>.sensors.<plant>``, keyed by plant.

    Messages are encoded as compact JSON (NaN/inf refused). Back-pressure: at most
    ``max_pending_bytes`` of messages may be unacknowledged; beyond that ``send`` blocks
    until the broker has acknowledged the oldest half (kafka-python 3 has no bounded
    producer buffer of its own), failing with :class:`DataError` after ``max_block_ms``
    without progress. Every delivery is checked: a failed one raises :class:`DataError`
    at the next ``send`` / :meth:`flush` / :meth:`close`, so nothing is lost silently.

    Parameters
    ----------
    bootstrap : ``host:port`` of a broker
    config : the site (topic names per plant)
    max_block_ms : longest a ``send`` waits for metadata or for acknowledgements
    max_pending_bytes : unacknowledged bytes (keys + values) before ``send`` blocks
    linger_ms, batch_size : producer batching (kafka-python settings)
    """

    def __init__(
        self,
        bootstrap: str,
        config: SiteConfig,
        max_block_ms: int = 60_000,
        max_pending_bytes: int = 8 * 1024 * 1024,
        linger_ms: int = 5,
        batch_size: int = 64 * 1024,
    ) -> None:
        if max_pending_bytes < 1:
            raise ConfigError(f"max_pending_bytes must be positive, got {max_pending_bytes}")
        self.config = config
        self.max_block_ms = max_block_ms
        self.max_pending_bytes = max_pending_bytes
        self._topics = {p: config.topic("sensors", plant=p) for p in config.plant_names}
        self._keys = {p: p.encode() for p in self._topics}
        try:
            self._producer = KafkaProducer(
                bootstrap_servers=bootstrap,
                acks="all",
                linger_ms=linger_ms,
                batch_size=batch_size,
                max_block_ms=max_block_ms,
                bootstrap_timeout_ms=max_block_ms,
            )
        except KafkaError as exc:
            raise DataError(f"cannot reach the Kafka broker at {bootstrap} ({exc}); is it running?") from None
        self._pending: deque[tuple[Any, int, str]] = deque()
        self.pending_bytes = 0
        self.sent = 0
        self.acked = 0
        self.waits = 0

    def _settle(self) -> None:
        future, size, topic = self._pending.popleft()
        self.pending_bytes -= size
        if future.failed():
            raise DataError(
                f"a message to {topic} was not delivered ({future.exception!r}); {self.acked} of {self.sent} "
                "messages are acknowledged; check the broker and the topics, then replay again"
            )
        self.acked += 1

    def _wait_for(self, target_bytes: int) -> None:
        """Block until at most ``target_bytes`` are unacknowledged."""
        while self._pending and self.pending_bytes > target_bytes:
            future = self._pending[0][0]
            if not future.is_done:
                try:
                    future.get(timeout=self.max_block_ms / 1000)
                except KafkaError:
                    if not future.is_done:
                        raise DataError(
                            f"the broker acknowledged nothing for {self.max_block_ms / 1000:.0f} s "
                            f"({len(self._pending)} messages pending); is it still running?"
                        ) from None
            self._settle()

    def _queue(self, topic: str, key: bytes | None, value: bytes, headers: list[tuple[str, bytes]] | None) -> None:
        try:
            future = self._producer.send(topic, key=key, value=value, headers=headers)
        except KafkaError as exc:
            raise DataError(f"could not send to {topic}: {exc}; is the broker running and the topic created?") from None
        self._pending.append((future, len(value) + len(key or b""), topic))
        self.pending_bytes += self._pending[-1][1]
        self.sent += 1
        # settle what is already acknowledged (cheap), then block while over the limit
        while self._pending and self._pending[0][0].is_done:
            self._settle()
        if self.pending_bytes > self.max_pending_bytes:
            self.waits += 1
            self._wait_for(self.max_pending_bytes // 2)

    def send(self, message: SensorMessage) -> None:
        """Queue one sensors message (blocks under back-pressure).

        Raises
        ------
        DataError
            For a plant the site does not have, values that are not finite, or a failed delivery.
        """
        topic = self._topics.get(message.plant)
        if topic is None:
            raise DataError(f"unknown plant '{message.plant}'; plants are {', '.join(self._topics)}")
        self._queue(topic, self._keys[message.plant], message.encode(), None)

    def send_raw(
        self, topic: str, key: bytes | None, value: bytes, headers: list[tuple[str, bytes]] | None = None
    ) -> None:
        """Queue raw bytes to any topic (malformed-input tests and tools)."""
        self._queue(topic, key, value, headers)

    def flush(self, timeout: float | None = None) -> None:
        """Wait until everything queued is acknowledged.

        Raises
        ------
        DataError
            When a message was not delivered or the flush timed out.
        """
        try:
            self._producer.flush(timeout=timeout)
        except KafkaError as exc:
            raise DataError(f"flush did not complete: {exc}; {len(self._pending)} messages pending") from None
        self._wait_for(0)

    def close(self) -> None:
        """Flush (raising on undelivered messages) and close."""
        try:
            self.flush()
        finally:
            self._producer.close()

    def __enter__(self) -> KafkaSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class TopicRecord:
    """One record read back from a topic."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: dict[str, bytes]


def read_topic(bootstrap: str, topic: str, timeout: float = 10.0, committed_only: bool = True) -> Iterator[TopicRecord]:
    """Every record currently in ``topic``: all partitions, from the beginning to the end offsets
    taken when reading starts (records produced later are not waited for).

    Yields records partition by partition as they arrive (offset order within a partition).
    A missing topic yields nothing.

    Raises
    ------
    DataError
        When the end offsets are not reached within ``timeout`` seconds (no silent partial read).
    """
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        group_id=None,
        isolation_level="read_committed" if committed_only else "read_uncommitted",
    )
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        if not tps:
            return
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        end = consumer.end_offsets(tps)
        deadline = time.monotonic() + timeout
        remaining = {tp for tp in tps if consumer.position(tp) < end[tp]}
        while remaining:
            if time.monotonic() > deadline:
                where = ", ".join(f"{tp.partition}: {consumer.position(tp)}/{end[tp]}" for tp in sorted(remaining))
                raise DataError(f"reading {topic} timed out after {timeout} s (partition: offset/end {where})")
            for tp, records in consumer.poll(timeout_ms=200).items():
                for r in records:
                    if r.offset < end[tp]:
                        headers = {k: v for k, v in (r.headers or [])}
                        yield TopicRecord(r.partition, r.offset, r.key, r.value, headers)
            remaining = {tp for tp in remaining if consumer.position(tp) < end[tp]}
    finally:
        consumer.close()


def verdict_ids(bootstrap: str, topic: str, timeout: float = 10.0) -> list[str]:
    """Ids of the verdicts already in the verdicts topic, in topic order (read on RCA start-up).

    Records that are not JSON objects with an ``id`` are skipped.
    """
    ids = []
    for record in read_topic(bootstrap, topic, timeout=timeout):
        try:
            ids.append(str(json.loads(record.value)["id"]))
        except (ValueError, KeyError, TypeError):
            continue
    return ids
