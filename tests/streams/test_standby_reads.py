"""What a hot standby reads ahead (``fedrca.streams.app.StandbyReads``, ``fedrca.streams.loop.CompactedCopy``).

A plant's take-over reads its history topic whole; a standby follows that topic while it waits for
its worker's lock, and its take-over reads only what was committed after its copy (docs/streams.md,
"A hot standby"). On the repository's broker: a copy read ahead by the standby's reads, then
advanced once the dead writer's producer is fenced, gives what a read of the whole topic gives —
through an aborted transaction, a transaction committed after the reads stopped, a tombstone, a
refused record and the dead writer's open transaction — and reads only what came after it; a copy
whose position the log does not reach any more is read again whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import pytest
from aiokafka import AIOKafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from fedrca.contracts import DeadLetterReason
from fedrca.exceptions import MessageError
from fedrca.streams.app import StandbyReads
from fedrca.streams.loop import CompactedCopy, Repair, read_compacted_checked
from tests.kafka_broker import unique_name

pytestmark = pytest.mark.kafka

KEYS = 10
REFUSED = b"refused"


def _check(key: bytes, value: bytes) -> None:
    if value == REFUSED:
        raise MessageError(DeadLetterReason.BAD_STATE, "a record the reader refuses")


def _compacted_topic(bootstrap: str) -> str:
    topic = unique_name("history")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"cleanup.policy": "compact"})])
    finally:
        admin.close()
    return topic


def _repairs(repairs: list[Repair]) -> list[tuple[bytes, bytes | None, list[bytes]]]:
    return [(r.key, r.value, [raw for raw, _ in r.refused]) for r in repairs]


async def _until(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def test_a_copy_read_ahead_then_advanced_after_the_fence_is_the_whole_topic(kafka_broker) -> None:
    bootstrap = kafka_broker.bootstrap
    topic = _compacted_topic(bootstrap)
    writer_id = unique_name("history-writer")

    async def run() -> None:
        dead = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=writer_id)
        await dead.start()
        async with dead.transaction():
            for k in range(KEYS):
                await dead.send(topic, b"v1-%d" % k, key=b"k%d" % k)
        await dead.begin_transaction()  # aborted: never in the copy
        await dead.send(topic, b"aborted", key=b"k0")
        await dead.abort_transaction()
        copy = CompactedCopy(topic)
        reads = StandbyReads([copy], bootstrap, {})
        reads.start()
        try:
            # the standby reads ahead what is committed while it waits (its own thread)
            await _until(lambda: len(copy.newest) == KEYS, 60, "the standby to read the first transaction ahead")
        finally:
            assert reads.stop(), "the reads ahead did not stop"
        ahead = copy.read
        assert copy.position >= KEYS and reads.error is None
        # the worker goes on after the reads stopped: a key replaced, one deleted, one added, one refused ...
        async with dead.transaction():
            await dead.send(topic, b"v2-1", key=b"k1")
            await dead.send(topic, None, key=b"k3")
            await dead.send(topic, b"v2-10", key=b"k10")
            await dead.send(topic, REFUSED, key=b"k5")
        # ... and dies in a transaction, its record in the log
        await dead.begin_transaction()
        await (await dead.send(topic, b"open", key=b"k2"))
        # the take-over: its producer fences the dead one (its open transaction aborted), then reads back
        taker = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=writer_id)
        await taker.start()
        try:
            values, repairs = await read_compacted_checked(bootstrap, topic, 60.0, _check, copy=copy)
            whole_values, whole_repairs = await read_compacted_checked(bootstrap, topic, 60.0, _check)
        finally:
            await taker.stop()
            with contextlib.suppress(Exception):  # fenced
                await asyncio.wait_for(dead.stop(), 30)
        assert values == whole_values
        assert _repairs(repairs) == _repairs(whole_repairs) == [(b"k5", b"v1-5", [REFUSED])]
        want = {b"k%d" % k: b"v1-%d" % k for k in range(KEYS) if k != 3} | {b"k1": b"v2-1", b"k10": b"v2-10"}
        assert values == want
        # after the fence only what was committed after the copy was read: the second transaction's four records
        assert ahead == KEYS and copy.read - ahead == 4, (ahead, copy.read)

    asyncio.run(run())


def test_a_copy_the_log_does_not_reach_is_read_again_whole(kafka_broker) -> None:
    bootstrap = kafka_broker.bootstrap
    topic = _compacted_topic(bootstrap)

    async def run() -> None:
        writer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=unique_name("history-writer"))
        await writer.start()
        try:
            async with writer.transaction():
                for k in range(3):
                    await writer.send(topic, b"v%d" % k, key=b"k%d" % k)
        finally:
            await writer.stop()
        # a copy of another life of the topic (deleted and made again): its position is past the log's end
        copy = CompactedCopy(topic)
        copy.newest, copy.position = {b"gone": (4_000, b"x")}, 5_000
        read = await copy.advance(bootstrap, 60.0)
        assert read == 3 and {k: v for k, (_, v) in copy.newest.items()} == {b"k0": b"v0", b"k1": b"v1", b"k2": b"v2"}
        assert copy.position == 4  # three records and the transaction's marker

    asyncio.run(run())
