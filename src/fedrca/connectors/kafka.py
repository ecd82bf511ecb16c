"""Kafka adapters (kafka-python): topic creation, a replay sink, topic readers.

The Faust workers use aiokafka through Faust; these synchronous helpers serve
the CLI (``replay-to-kafka``, topic set-up) and the tests.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

from fedrca.config import SiteConfig
from fedrca.exceptions import ConfigError, DataError

__all__ = [
    "KafkaSink",
    "TopicRecord",
    "bootstrap_of",
    "ensure_site_topics",
    "read_topic",
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


def ensure_site_topics(bootstrap: str, config: SiteConfig, partitions: int = 2, timeout: float = 30.0) -> list[str]:
    """Create the site's topics if missing (idempotent); returns their names.

    Sensor topics get ``partitions`` partitions; flags, verdicts and dead letters one
    (the RCA needs a total order); params one, compacted (latest artifact per plant).
    """
    specs = [NewTopic(config.topic("sensors", plant=p), partitions, 1) for p in config.plant_names]
    specs += [NewTopic(config.topic(kind), 1, 1) for kind in ("flags", "verdicts", "deadletter")]
    specs.append(NewTopic(config.topic("params"), 1, 1, topic_configs={"cleanup.policy": "compact"}))
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="fedrca-admin", request_timeout_ms=int(timeout * 1000))
    try:
        existing = set(admin.list_topics())
        missing = [s for s in specs if s.name not in existing]
        if missing:
            try:
                admin.create_topics(missing, timeout_ms=int(timeout * 1000))
            except TopicAlreadyExistsError:
                pass
        deadline = time.monotonic() + timeout
        names = {s.name for s in specs}
        while not names <= set(admin.list_topics()):
            if time.monotonic() > deadline:
                raise DataError(f"topics {sorted(names - set(admin.list_topics()))} did not appear within {timeout} s")
            time.sleep(0.1)
    finally:
        admin.close()
    return sorted(names)


class KafkaSink:
    """Replay sink: one message per plant and row to ``<site>.sensors.<plant>``, keyed by plant.

    ``send`` blocks when the producer's buffer is full (back-pressure: up to
    ``max_block_ms``), so a fast replay never outruns the broker or drops rows.
    """

    def __init__(self, bootstrap: str, config: SiteConfig, max_block_ms: int = 60_000) -> None:
        self.config = config
        self._topics = {p: config.topic("sensors", plant=p) for p in config.plant_names}
        self._producer = KafkaProducer(
            bootstrap_servers=bootstrap,
            acks="all",
            linger_ms=5,
            max_block_ms=max_block_ms,
            key_serializer=str.encode,
            value_serializer=lambda v: json.dumps(v, separators=(",", ":")).encode(),
        )
        self.sent = 0

    def send(self, plant: str, message: dict[str, Any]) -> None:
        """Queue one message (blocks under back-pressure)."""
        try:
            self._producer.send(self._topics[plant], key=plant, value=message)
        except KafkaError as exc:
            raise DataError(f"could not send to {self._topics[plant]}: {exc}") from None
        self.sent += 1

    def send_raw(self, topic: str, key: bytes | None, value: bytes) -> None:
        """Queue raw bytes (for malformed-input tests and tools)."""
        self._producer.send(topic, key=key, value=value, key_serializer=None, value_serializer=None)  # type: ignore[call-arg]

    def flush(self) -> None:
        """Wait until everything queued is acknowledged."""
        self._producer.flush()

    def close(self) -> None:
        """Flush and close."""
        self._producer.flush()
        self._producer.close()


@dataclass(frozen=True)
class TopicRecord:
    """One record read back from a topic."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: dict[str, bytes]


def read_topic(bootstrap: str, topic: str, timeout: float = 10.0, committed_only: bool = True) -> Iterator[TopicRecord]:
    """Every record currently in ``topic`` (all partitions, from the beginning up to the end offsets)."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        isolation_level="read_committed" if committed_only else "read_uncommitted",
        consumer_timeout_ms=int(timeout * 1000),
    )
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        if not tps:
            return
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        end = consumer.end_offsets(tps)
        remaining = {tp for tp in tps if end[tp] > 0}
        deadline = time.monotonic() + timeout
        while remaining and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=200).items():
                for r in records:
                    yield TopicRecord(r.partition, r.offset, r.key, r.value, {k: v for k, v in (r.headers or [])})
                if consumer.position(tp) >= end[tp]:
                    remaining.discard(tp)
    finally:
        consumer.close()


def verdict_ids(bootstrap: str, topic: str) -> list[str]:
    """Ids of the verdicts already in the verdicts topic (read on RCA start-up)."""
    ids = []
    for record in read_topic(bootstrap, topic, timeout=10.0):
        try:
            ids.append(str(json.loads(record.value)["id"]))
        except (ValueError, KeyError, TypeError):
            continue
    return ids
