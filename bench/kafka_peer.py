"""The plain kafka-python produce/consume loop: the ceiling the streaming benchmarks compare against.

Two processes, as in a deployment: this one produces JSON sensor messages (the
shape of ``<site>.sensors.<plant>`` records), a spawned consumer process polls and
decodes them. Producer settings match :class:`fedrca.connectors.kafka.KafkaSink`
(``acks=all``, ``linger_ms=5``) so the figures are a fair ceiling.

* **producer rate**: ``messages`` sent as fast as possible with no consumer running,
  until all are acknowledged (the ceiling for a replay into Kafka);
* **throughput**: ``messages`` sent as fast as possible while the consumer process
  reads; messages/s from the first send to the last message decoded by the consumer;
* **latency** at a fixed offered load: ``rate`` messages/s for ``seconds`` seconds,
  paced on an absolute schedule; each message carries its send time
  (``time.time_ns``, one host clock for both processes); p50/p99/max of
  receive - send.

Usage from another benchmark (``bench/`` is on ``sys.path`` under ``bench/run.py``)::

    from kafka_peer import run_peer
    peer = run_peer("127.0.0.1:9092", messages=50_000, rate=1000, seconds=5)
    print(f"fedrca {mine:,.0f} msg/s = {mine / peer.throughput:.2f}x the kafka-python loop")

or by hand: ``python bench/kafka_peer.py 127.0.0.1:9092``.
"""

from __future__ import annotations

import json
import multiprocessing
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["PeerResult", "create_topic", "paced_latency", "run_peer", "sensor_payload"]

VALUES = 12  # sensors of a typical TEP plant (reactor)


@dataclass(frozen=True)
class PeerResult:
    """Figures of one peer run (messages/s, milliseconds)."""

    messages: int
    throughput: float
    produce_rate: float
    offered_rate: float
    latency_messages: int
    latency_p50_ms: float
    latency_p99_ms: float
    latency_max_ms: float
    achieved_rate: float
    latency_p999_ms: float = float("nan")

    def lines(self) -> list[str]:
        """Human-readable summary."""
        return [
            f"kafka-python producer loop alone:     {self.produce_rate:>8,.0f} msg/s "
            f"({self.messages:,} msgs, acks=all)",
            f"kafka-python produce->consume loop:   {self.throughput:>8,.0f} msg/s end to end "
            "(consumer in a second process)",
            f"kafka-python loop latency at {self.offered_rate:,.0f} msg/s offered ({self.achieved_rate:,.0f} "
            f"achieved, {self.latency_messages:,} msgs): p50 {self.latency_p50_ms:.1f} ms, "
            f"p99 {self.latency_p99_ms:.1f} ms, max {self.latency_max_ms:.1f} ms",
        ]


def sensor_payload(seq: int, sent_ns: int, values: list[float]) -> bytes:
    """One sensors-topic-like message carrying its send time."""
    message = {"site": "bench", "plant": "reactor", "ts": seq * 180.0, "seq": seq, "values": values, "sent": sent_ns}
    return json.dumps(message, separators=(",", ":")).encode()


def create_topic(bootstrap: str, partitions: int = 1) -> str:
    """A fresh topic (unique name) with ``partitions`` partitions, ready to use."""
    from kafka import KafkaAdminClient

    name = f"bench.peer.{uuid.uuid4().hex[:12]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="fedrca-bench")
    try:
        admin.create_topics({name: {"num_partitions": partitions, "replication_factor": 1}}, wait_for_metadata=True)
    finally:
        admin.close()
    return name


def _consume(bootstrap: str, topic: str, expected: int, ready: Any, results: Any, timeout: float) -> None:
    """Consumer process: read ``expected`` messages, report receive times and latencies."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    partitions = sorted(consumer.partitions_for_topic(topic) or [])
    tps = [TopicPartition(topic, p) for p in partitions]
    consumer.assign(tps)
    consumer.seek_to_end(*tps)
    for tp in tps:
        consumer.position(tp)  # resolve the start offsets before the producer starts
    ready.set()
    latencies = np.empty(expected, dtype=np.int64)
    n = 0
    first = last = 0
    deadline = time.monotonic() + timeout
    while n < expected and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=100).values():
            now = time.time_ns()
            for record in records:
                message = json.loads(record.value)
                if n < expected:
                    latencies[n] = now - message["sent"]
                    n += 1
            first = first or now
            last = now
    consumer.close()
    results.put({"received": n, "first_ns": first, "last_ns": last, "latencies_ns": latencies[:n].tolist()})


def _produce_only(bootstrap: str, partitions: int, count: int) -> float:
    """Messages/s of the producer loop alone (send ``count`` messages, flush: all acknowledged)."""
    from kafka import KafkaProducer

    topic = create_topic(bootstrap, partitions)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, batch_size=64 * 1024)
    try:
        values = np.round(np.random.default_rng(0).normal(50.0, 20.0, size=VALUES), 5).tolist()  # TEP-like
        started = time.perf_counter()
        for seq in range(count):
            producer.send(topic, key=b"reactor", value=sensor_payload(seq, time.time_ns(), values))
        producer.flush()
        return count / (time.perf_counter() - started)
    finally:
        producer.close()


def _phase(bootstrap: str, partitions: int, count: int, rate: float | None, timeout: float) -> dict[str, Any]:
    """Produce ``count`` messages (paced at ``rate`` msg/s, or as fast as possible) to a consumer process."""
    from kafka import KafkaProducer

    topic = create_topic(bootstrap, partitions)
    ctx = multiprocessing.get_context("spawn")
    ready, results = ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=_consume, args=(bootstrap, topic, count, ready, results, timeout), daemon=True)
    proc.start()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, batch_size=64 * 1024)
    try:
        if not ready.wait(60):
            raise RuntimeError("the peer consumer process did not start within 60 s")
        values = np.round(np.random.default_rng(0).normal(50.0, 20.0, size=VALUES), 5).tolist()  # TEP-like
        start_ns = time.time_ns()
        t0 = time.monotonic()
        for seq in range(count):
            if rate is not None:
                delay = t0 + seq / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            producer.send(topic, key=b"reactor", value=sensor_payload(seq, time.time_ns(), values))
        producer.flush()
        produced_ns = time.time_ns()
        out = results.get(timeout=timeout)
    finally:
        producer.close()
        proc.join(10)
        if proc.is_alive():
            proc.kill()
    out.update(start_ns=start_ns, produced_ns=produced_ns, count=count)
    return out


def run_peer(
    bootstrap: str,
    messages: int = 50_000,
    rate: float = 1000.0,
    seconds: float = 5.0,
    partitions: int = 1,
    timeout: float = 120.0,
) -> PeerResult:
    """Measure the plain kafka-python produce/consume loop on ``bootstrap`` (see the module docstring).

    Raises
    ------
    RuntimeError
        When the consumer did not receive every message (the figures would be meaningless).
    """
    produce_rate = _produce_only(bootstrap, partitions, messages)
    fast = _phase(bootstrap, partitions, messages, None, timeout)
    paced_count = max(1, int(rate * seconds))
    paced = _phase(bootstrap, partitions, paced_count, rate, timeout)
    for phase in (fast, paced):
        if phase["received"] != phase["count"]:
            raise RuntimeError(f"peer consumer received {phase['received']} of {phase['count']} messages")
    lat_ms = np.asarray(paced["latencies_ns"], dtype=np.float64) / 1e6
    span = (paced["produced_ns"] - paced["start_ns"]) / 1e9
    return PeerResult(
        messages=messages,
        throughput=messages / ((fast["last_ns"] - fast["start_ns"]) / 1e9),
        produce_rate=produce_rate,
        offered_rate=rate,
        latency_messages=paced_count,
        latency_p50_ms=float(np.percentile(lat_ms, 50)),
        latency_p99_ms=float(np.percentile(lat_ms, 99)),
        latency_max_ms=float(lat_ms.max()),
        achieved_rate=paced_count / span if span > 0 else float("inf"),
        latency_p999_ms=float(np.percentile(lat_ms, 99.9)),
    )


def paced_latency(
    bootstrap: str, rate: float, seconds: float, partitions: int = 1, timeout: float = 120.0
) -> tuple[float, float, float]:
    """(p50, p99, p99.9) ms of the loop at ``rate`` messages/s offered for ``seconds`` seconds.

    Raises
    ------
    RuntimeError
        When the consumer did not receive every message.
    """
    count = max(1, int(rate * seconds))
    paced = _phase(bootstrap, partitions, count, rate, timeout)
    if paced["received"] != count:
        raise RuntimeError(f"peer consumer received {paced['received']} of {count} messages")
    lat_ms = np.asarray(paced["latencies_ns"], dtype=np.float64) / 1e6
    return float(np.percentile(lat_ms, 50)), float(np.percentile(lat_ms, 99)), float(np.percentile(lat_ms, 99.9))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python bench/kafka_peer.py HOST:PORT")
    for line in run_peer(sys.argv[1]).lines():
        print(line)
