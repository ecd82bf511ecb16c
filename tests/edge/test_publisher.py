"""The Kafka side of fedrca edge: rows on the real broker, the seq read back, the outage buffer's bound.

The broker down for 60 s with rows flowing is ``tools/edge_faults.py --scenarios broker-down``
(a broker of its own); here the bound is checked with no broker reachable at all, and the rows
and the restart's read-back against the session's broker.
"""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from fedrca.config import parse_config
from fedrca.connectors.kafka import ensure_site_topics, read_topic
from fedrca.edge.publisher import RowPublisher, encode_row, last_published
from fedrca.edge.rows import Row
from fedrca.edge.tags import Quality
from tests.kafka_broker import KafkaBroker, wait_until


def site(name: str):
    return parse_config({"site": name, "plants": [{"name": "p", "sensors": ["a", "b"]}]})


def row(seq: int, bad: bool = False) -> Row:
    quality = np.array([Quality.BAD if bad else Quality.GOOD, Quality.GOOD], dtype=np.uint8)
    values = np.array([np.nan if bad else float(seq), 2.0])
    return Row(seq, seq * 1.0, values, quality)


def test_encode_row_is_the_sensor_contract():
    assert json.loads(encode_row("s", "p", row(3))) == {"site": "s", "plant": "p", "ts": 3.0, "seq": 3,
                                                        "values": [3.0, 2.0]}  # fmt: skip
    missing = Row(4, 4.0, np.array([np.nan, 1.0]), np.array([Quality.MISSING, 0], dtype=np.uint8))
    assert json.loads(encode_row("s", "p", missing))["values"] == [None, 1.0]
    assert "quality" not in json.loads(encode_row("s", "p", missing))  # null alone says missing
    assert json.loads(encode_row("s", "p", row(5, bad=True)))["quality"] == [1, 0]


def test_the_outage_buffer_keeps_its_bound_and_reports_the_gap(caplog):
    """No broker at all: rows wait up to the bound, then the oldest are dropped, counted and logged once."""
    publisher = RowPublisher("127.0.0.1:9", site("s"), ["p"], bound=10)  # never connected
    with caplog.at_level(logging.ERROR, logger="fedrca.edge.publisher"):
        for k in range(25):
            publisher.publish("p", [row(k)], [encode_row("s", "p", row(k))])
    buffer = publisher.buffers["p"]
    assert len(buffer.waiting) == 10 and buffer.dropped == 15
    assert [seq for seq, _ in buffer.waiting] == list(range(15, 25))  # the newest kept
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "from seq 0 on" in lines[0]
    assert buffer.gap == [0, 14]


@pytest.mark.kafka
def test_rows_reach_the_topic_in_order_and_the_last_seq_is_read_back(kafka_broker: KafkaBroker):
    from tools.cluster import unique_name

    config = site(unique_name("edge"))
    ensure_site_topics(kafka_broker.bootstrap, config, only=[config.topic("sensors", plant="p")])
    topic = config.topic("sensors", plant="p")
    assert last_published(kafka_broker.bootstrap, topic, "p") is None
    publisher = RowPublisher(kafka_broker.bootstrap, config, ["p"], bound=100)
    publisher.connect()
    rows = [row(k, bad=k == 105) for k in range(100, 120)]
    publisher.publish("p", rows, [encode_row(config.site, "p", r) for r in rows])
    wait_until(lambda: publisher.buffers["p"].published == 20, 60, "20 rows acknowledged")
    publisher.close()
    records = [json.loads(r.value) for r in read_topic(kafka_broker.bootstrap, topic)]
    assert [r["seq"] for r in records] == list(range(100, 120))
    assert records[5]["values"][0] is None and records[5]["quality"] == [1, 0]
    assert last_published(kafka_broker.bootstrap, topic, "p") == 119
    # poison at the end of the topic (issue 34): passed over, never a crash nor a seq out of the contract
    from kafka import KafkaProducer

    raw = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, acks="all", max_request_size=2 << 20)
    for value in (b"[" * 100_000, b'{"plant":"p","seq":' * 30_000, b'["p"]', b'{"plant":"p","seq":true}',
                  b'{"plant":"p","seq":' + b"9" * 5_000 + b"}", b'{"plant":"p","seq":1e300}',
                  b'{"plant":"p","seq":-4}', b'{"plant":"p","seq":9007199254740993}', b"\xff\xfe",
                  b'{"plant":"' + b"x" * 1_000_000 + b'","seq":500}', *[b'{"plant":"q","seq":900}'] * 20):  # fmt: skip
        raw.send(topic, key=b"p", value=value)  # 30 records after the last row: more than the first window
    raw.flush(timeout=60)
    raw.close()
    assert last_published(kafka_broker.bootstrap, topic, "p") == 119
