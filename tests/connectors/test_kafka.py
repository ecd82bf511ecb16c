"""fedrca.connectors.kafka against the real broker: topics, the replay sink, topic readers."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import yaml
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType

from fedrca.config import SiteConfig, parse_config
from fedrca.connectors.kafka import KafkaSink, ensure_site_topics, read_topic
from fedrca.connectors.names import COMPACTED
from fedrca.contracts import SensorMessage
from fedrca.exceptions import DataError
from tests.kafka_broker import unique_name, wait_until

pytestmark = pytest.mark.kafka

REPO = Path(__file__).resolve().parents[2]


def site_config(site: str) -> SiteConfig:
    data = yaml.safe_load((REPO / "config" / "tep.yaml").read_text())
    data["site"] = site
    return parse_config(data, source=f"tep.yaml as {site}")


def describe(bootstrap: str, topics: list[str]) -> tuple[dict[str, int], dict[str, str | None]]:
    """Partition count per topic and cleanup.policy per topic, as the broker reports them."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        partitions = {t["name"]: len(t["partitions"]) for t in admin.describe_topics(topics)}
        configs = admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, t) for t in topics], config_filter="all"
        )["topic"]
        policy = {t: configs[t].get("cleanup.policy", {}).get("value") for t in topics}
        # how a compacted topic's segments close and when the cleaner takes it (fedrca.connectors.names.COMPACTED)
        for t in topics:
            if policy[t] == "compact":
                policy[t] += "," + ",".join(
                    f"{key}={configs[t].get(key, {}).get('value')}"
                    for key in sorted(COMPACTED)
                    if key != "cleanup.policy"
                )
    finally:
        admin.close()
    return partitions, policy


def test_site_topics_are_created_once_with_their_partitions_and_cleanup(kafka_broker):
    site = unique_name("topics")
    cfg = site_config(site)
    names = ensure_site_topics(kafka_broker.bootstrap, cfg)
    plants = cfg.plant_names
    assert cfg.drift.enabled  # config/tep.yaml re-baselines: each plant's history and the operators' control topic
    per_plant = [f"{site}.{kind}.{p}" for p in plants for kind in ("sensors", "deadletter", "state", "history")]
    shared = [f"{site}.{k}" for k in ("flags", "verdicts", "deadletter", "params", "state.rca", "control")]
    assert names == sorted(per_plant + shared)
    partitions, policy = describe(kafka_broker.bootstrap, names)
    assert set(partitions.values()) == {1}  # a plant's stream is one ordered partition; the RCA sees one order
    # a segment closes at 16 MiB or after a minute, so compaction keeps a take-over's read short
    closing = "compact,min.cleanable.dirty.ratio=0.1,segment.bytes=16777216,segment.ms=60000"
    compacted = {t for t, p in policy.items() if p == closing}
    assert all(p in (closing, "delete") for p in policy.values()), policy
    kept = {f"{site}.{kind}.{p}" for p in plants for kind in ("state", "history")}
    assert compacted == {f"{site}.params", f"{site}.state.rca", f"{site}.control"} | kept
    # idempotent: a second call changes nothing
    assert ensure_site_topics(kafka_broker.bootstrap, cfg) == names
    assert describe(kafka_broker.bootstrap, names) == (partitions, policy)


def _broker(command: str) -> None:
    """``tools/kafka/broker.py pause|resume`` on the session's broker (SIGSTOP / SIGCONT)."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "tools" / "kafka" / "broker.py"), command],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"tools/kafka/broker.py {command} failed: {proc.stderr.strip()}", pytrace=False)


def test_sink_delivers_every_message_in_order_under_back_pressure(kafka_broker):
    cfg = site_config(unique_name("sink"))
    ensure_site_topics(kafka_broker.bootstrap, cfg)
    n = 20_000
    limit = 64 * 1024
    sink = KafkaSink(kafka_broker.bootstrap, cfg, max_pending_bytes=limit, batch_size=16 * 1024)
    for plant in ("feed", "reactor"):  # the topics' metadata is known before the broker is frozen
        sink.send(SensorMessage(cfg.site, plant, 0.0, 0, np.array([0.0, -0.0])))
    sink.flush()
    most_pending = 0
    failures: list[BaseException] = []

    def produce() -> None:
        nonlocal most_pending
        try:
            for seq in range(1, n):
                for plant in ("feed", "reactor"):
                    sink.send(SensorMessage(cfg.site, plant, seq * 180.0, seq, np.array([seq, -seq], dtype=float)))
                    most_pending = max(most_pending, sink.pending_bytes)
        except BaseException as exc:
            failures.append(exc)

    # A frozen broker acknowledges nothing, so ~3.5 MB cannot pass a 64 KiB window without
    # send blocking; it must wait, never exceeding the window, and deliver all once resumed.
    _broker("pause")
    try:
        producer = threading.Thread(target=produce)
        producer.start()
        wait_until(lambda: sink.waits > 0 or not producer.is_alive(), 60, "send to block on the full window")
        assert sink.waits > 0 and producer.is_alive()
        # blocked on the message that took it over the window (one message of about 60 bytes)
        assert limit < sink.pending_bytes <= limit + 200
    finally:
        _broker("resume")
    producer.join(timeout=300)
    assert not failures, failures
    assert sink.sent == 2 * n
    assert 0 < most_pending <= limit
    sink.close()
    assert (sink.acked, sink.pending_bytes) == (2 * n, 0)
    for plant in ("feed", "reactor"):
        records = list(read_topic(kafka_broker.bootstrap, cfg.topic("sensors", plant=plant), timeout=60))
        assert {r.key for r in records} == {plant.encode()}
        # one key per topic -> one partition, offsets in send order
        assert len({r.partition for r in records}) == 1
        messages = [json.loads(r.value) for r in records]
        assert [m["seq"] for m in messages] == list(range(n))
        assert all(m["values"] == [m["seq"], -m["seq"]] and m["plant"] == plant for m in messages)


def test_sink_errors_are_clear(kafka_broker):
    cfg = site_config(unique_name("missing"))  # topics never created; the broker does not auto-create
    sink = KafkaSink(kafka_broker.bootstrap, cfg, max_block_ms=1500)
    with pytest.raises(DataError, match=rf"could not send to {cfg.site}.sensors.feed: .*is the broker running"):
        sink.send(SensorMessage(cfg.site, "feed", 0.0, 0, np.zeros(2)))
    with pytest.raises(DataError, match="unknown plant 'boiler'; plants are feed, reactor"):
        sink.send(SensorMessage(cfg.site, "boiler", 0.0, 0, np.zeros(2)))
    with pytest.raises(DataError, match="non-finite: plant 'feed' seq 1: infinite values cannot be sent"):
        sink.send(SensorMessage(cfg.site, "feed", 0.0, 1, np.array([np.inf, 0.0])))
    sink.close()


def test_read_topic_returns_raw_bytes_keys_and_headers(kafka_broker):
    cfg = site_config(unique_name("raw"))
    ensure_site_topics(kafka_broker.bootstrap, cfg)
    topic = cfg.topic("deadletter")
    payloads = [b"{not json", b"\xff\xfe", b'{"ok":1}']
    with KafkaSink(kafka_broker.bootstrap, cfg) as sink:
        for i, value in enumerate(payloads):
            sink.send_raw(topic, f"k{i}".encode(), value, headers=[("fedrca-reason", b"malformed-json")])
    records = list(read_topic(kafka_broker.bootstrap, topic))
    assert [(r.partition, r.offset) for r in records] == [(0, 0), (0, 1), (0, 2)]
    assert [r.value for r in records] == payloads
    assert [r.key for r in records] == [b"k0", b"k1", b"k2"]
    assert all(r.headers == {"fedrca-reason": b"malformed-json"} for r in records)
    assert list(read_topic(kafka_broker.bootstrap, unique_name("nosuchtopic"), timeout=5)) == []


def test_unreachable_broker_is_a_clear_error_within_the_timeout():
    cfg = site_config("nobroker")
    with pytest.raises(DataError, match=r"cannot reach the Kafka broker at 127\.0\.0\.1:1 .*is it running\?"):
        ensure_site_topics("127.0.0.1:1", cfg, timeout=1.0)
    with pytest.raises(DataError, match=r"cannot reach the Kafka broker at 127\.0\.0\.1:1"):
        KafkaSink("127.0.0.1:1", cfg, max_block_ms=1000)
