"""A partition's state read back from the end of its state topic (``fedrca.streams.loop.read_state``).

On the repository's broker: a state topic of a thousand committed state records under the
partition's key (with records of other keys, a refused record and aborted transactions among
them) gives the same candidates and the same refused records after them as a read of the whole
topic, while reading a few dozen records, not the thousand: a take-over costs the same after an
hour as after a minute, whatever the broker's compaction has done yet.
"""

from __future__ import annotations

import asyncio
from unittest import mock

import pytest
from aiokafka import AIOKafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from fedrca.connectors.kafka import read_topic
from fedrca.streams import loop as loop_module
from fedrca.streams.loop import STATE_CANDIDATES, StateScan, read_state, state_record
from tests.kafka_broker import unique_name
from tests.streams.offsets import recording_offsets

pytestmark = pytest.mark.kafka

KEY = b"tep.sensors.reactor-0"
RECORDS = 1000


async def _write(bootstrap: str, topic: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=unique_name("state-writer"))
    await producer.start()
    try:
        for k in range(RECORDS):
            async with producer.transaction():
                await producer.send(topic, state_record(k + 1, b'{"seq":%d}' % k), key=KEY)
                if k % 7 == 0:
                    await producer.send(topic, b"another key's", key=b"other")
            if k == RECORDS - 5:  # a record under the key that is not a state record, near the end
                async with producer.transaction():
                    await producer.send(topic, b'{"not":"a state"}', key=KEY)
            if k % 100 == 0:  # an aborted transaction: never state
                await producer.begin_transaction()
                await producer.send(topic, state_record(10**9, b'{"aborted":true}'), key=KEY)
                await producer.abort_transaction()
    finally:
        await producer.stop()


def _whole(bootstrap: str, topic: str) -> StateScan:
    scan = StateScan()
    for record in read_topic(bootstrap, topic, timeout=30):  # read_committed, from the beginning
        scan.read += 1
        if record.key == KEY:
            scan.add(record.value)
    return scan


def test_the_state_read_from_the_end_is_the_whole_topics_and_reads_a_few_records(kafka_broker) -> None:
    bootstrap = kafka_broker.bootstrap
    topic = unique_name("state")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:  # the broker's defaults: nothing is compacted during the test (one open segment)
        admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"cleanup.policy": "compact"})])
    finally:
        admin.close()
    asyncio.run(_write(bootstrap, topic))
    whole = _whole(bootstrap, topic).result()
    found = asyncio.run(read_state(bootstrap, topic, KEY, 60.0))
    assert whole.read > RECORDS and len(whole.candidates) == STATE_CANDIDATES
    assert [c[1:] for c in found.candidates] == [c[1:] for c in whole.candidates]
    assert found.candidates[0][1:] == (RECORDS, b'{"seq":%d}' % (RECORDS - 1))
    # the refused record newer than the newest candidates' oldest is there, as in the whole read
    newest = found.candidates[-1][0]
    oldest = whole.candidates[-1][0]
    assert [r[1] for r in found.refused if r[0] > newest] == [r[1] for r in whole.refused if r[0] > oldest]
    assert [r[1] for r in found.refused] == [b'{"not":"a state"}']
    assert found.read <= 8 * STATE_CANDIDATES, f"read {found.read} records of {whole.read}"


def test_a_state_topic_with_fewer_records_than_the_window_is_read_whole(kafka_broker) -> None:
    bootstrap = kafka_broker.bootstrap
    topic = unique_name("state")

    async def write_three() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=unique_name("state-writer"))
        await producer.start()
        try:
            for k in range(3):
                async with producer.transaction():
                    await producer.send(topic, state_record(k + 1, b'{"seq":%d}' % k), key=KEY)
        finally:
            await producer.stop()

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"cleanup.policy": "compact"})])
    finally:
        admin.close()
    asyncio.run(write_three())
    found = asyncio.run(read_state(bootstrap, topic, KEY, 60.0))
    assert [c[1] for c in found.candidates] == [3, 2, 1] and found.read == 3


def test_a_compacted_topic_s_offsets_are_asked_before_its_partition_is_assigned(kafka_broker) -> None:
    # Once the partition is assigned the fetcher fetches from its beginning (up to SCAN_FETCH_BYTES, before the
    # seek to the window's start) and the offsets requests wait behind that fetch: a take-over's reads ask first.
    bootstrap = kafka_broker.bootstrap
    topic = unique_name("state")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"cleanup.policy": "compact"})])
    finally:
        admin.close()
    asked: list[tuple[str, int]] = []

    Recording = recording_offsets(loop_module.AIOKafkaConsumer, asked)
    asyncio.run(_write(bootstrap, topic))
    with mock.patch.object(loop_module, "AIOKafkaConsumer", Recording):
        found = asyncio.run(read_state(bootstrap, topic, KEY, 60.0))
    assert found.candidates[0][1] == RECORDS
    assert asked and all(assigned == 0 for _, assigned in asked), asked
