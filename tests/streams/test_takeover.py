"""A partition's take-over outside aiokafka's assignment callback (``TransactionalLoop``, "Taking a partition over").

aiokafka sends no heartbeat while the callback runs; a take-over inside it that outlasted the session
timeout had the broker expire the member in its own take-over, again and again (docs/streams.md,
"Compacted topics"). The callback now only pauses the partitions and starts their take-overs; the loop
fetches on, and each partition is resumed once its handler is restored. These check, on the scripted
broker of ``tests/streams/test_loop.py``: the loop fetches while a take-over is in progress and handles no
record of that partition before it is over, while another partition is served; a revoke cancels a
take-over in progress and leaves nothing of it; in step, a group waits for its partition being taken over.
On the repository's broker: a take-over of twice the session timeout (at the broker's shortest session)
leaves the member in its group, with one assignment, and every record handled exactly once.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from tools.cluster import group_assignment

from fedrca.connectors.kafka import read_topic
from fedrca.streams import loop as loop_module
from fedrca.streams.loop import (
    BatchTimes,
    InputRecord,
    LoopSettings,
    StateRecords,
    TransactionalLoop,
)
from tests.kafka_broker import unique_name
from tests.streams.test_loop import (
    _REAL_SLEEP,
    INPUT,
    OUTPUT,
    FakeConsumer,
    FakeProducer,
    FakeRecord,
    Model,
    Summer,
    Turns,
    _read_state,
    done,
    expected_outputs,
    model_loop,
    patched,
)

#: event-loop turns the scripted tests leave the loop while a take-over waits (each fetch takes a few)
WAIT_TURNS = 2_000


class Held:
    """A state read that waits, for the partitions named, until :meth:`release` (the first read of each only)."""

    def __init__(self, model: Model, partitions: Sequence[int]) -> None:
        self.model = model
        self.keys = {f"{INPUT}:{p}".encode() for p in partitions}
        self.waiting: set[bytes] = set()
        self.released = asyncio.Event()

    async def read(self, bootstrap: str, topic: str, key: bytes, *rest: Any) -> StateRecords:
        if key in self.keys:
            self.keys.discard(key)
            self.waiting.add(key)
            try:
                await self.released.wait()
            finally:
                self.waiting.discard(key)
        return await _read_state(self.model, bootstrap, topic, key, *rest)

    def release(self) -> None:
        self.released.set()


class CountingConsumer(FakeConsumer):
    """The scripted consumer, counting its fetches."""

    fetches = 0

    async def getmany(self, timeout_ms: int, max_records: int) -> dict[TopicPartition, list[FakeRecord]]:
        CountingConsumer.fetches += 1
        return await super().getmany(timeout_ms, max_records)


@contextmanager
def _scripted(model: Model, consumer: type, held: Any) -> Iterator[None]:
    """The loop on the scripted broker ``model`` with ``consumer``'s class, its state reads held by ``held``."""
    with (
        patched(model),
        mock.patch.object(loop_module, "AIOKafkaConsumer", lambda **kw: consumer(model, **kw)),
        mock.patch.object(loop_module, "read_state", held.read),
    ):
        yield


def test_the_loop_fetches_while_a_partition_is_taken_over_and_handles_none_of_its_records_before():
    # Partition 1's state read waits until the test releases it. Meanwhile the loop goes on fetching (the
    # assignment callback returned), partition 0 (taken over at once) is served, and partition 1 is paused
    # and has nothing committed. In the callback, the take-over held the consumer's start: no fetch at all.
    model = Model({0: [1, 2, 3], 1: [4, 5, 6]}, [], [], [])
    held = Held(model, [1])
    tp1 = TopicPartition(INPUT, 1)
    CountingConsumer.fetches = 0

    async def run() -> None:
        loop = model_loop(max_records=2)
        task = asyncio.ensure_future(loop.run())
        turns = Turns(task, 50_000, lambda: f"no progress: {CountingConsumer.fetches} fetches, {model.logs}")
        await turns.until(lambda: len(model.committed_log(OUTPUT, 0)) == 3)
        fetched = CountingConsumer.fetches
        for _ in range(WAIT_TURNS):
            await _REAL_SLEEP(0)
        assert held.waiting, "partition 1's take-over is not waiting for its state"
        assert CountingConsumer.fetches > fetched, "the loop stopped fetching while a partition was taken over"
        assert model.committed_log(OUTPUT, 1) == [] and tp1 not in loop.assignment
        assert loop._consumer is not None and loop._consumer.paused() == {tp1}
        assert not loop.taken.is_set()
        held.release()
        await turns.until(lambda: done(model))
        assert loop.taken.is_set() and loop._consumer.paused() == set()
        loop.stop()
        await task

    with _scripted(model, CountingConsumer, held):
        asyncio.run(run())
    for partition, values in {0: [1, 2, 3], 1: [4, 5, 6]}.items():
        assert [json.loads(v) for _, v in model.committed_log(OUTPUT, partition)] == expected_outputs(values)


def test_a_revoke_during_a_take_over_cancels_it_and_leaves_nothing_of_it():
    # Partition 0's first take-over waits for its state when the group revokes it: the revoke cancels it and
    # returns (it does not wait for the take-over to end), its producers are closed, no task is made and its
    # handler is never restored. The assignment after it takes the partition over again, and every record is
    # output exactly once. In the callback, the revoke waited for the take-over (the loop's lock).
    class Restored(Summer):
        def __init__(self, tp: TopicPartition) -> None:
            super().__init__(tp)
            self.restored = False
            handlers.append(self)

        def restore(self, state: bytes | None) -> None:
            self.restored = True
            super().restore(state)

    class Closing(FakeProducer):
        def __init__(self, model: Model, **kwargs: Any) -> None:
            super().__init__(model, **kwargs)
            self.closed = False
            producers.append(self)

        async def stop(self) -> None:
            self.closed = True

    model = Model({0: [1, 2, 3]}, [], [], [])
    held = Held(model, [0])
    handlers: list[Restored] = []
    producers: list[Closing] = []
    tp = TopicPartition(INPUT, 0)

    async def run() -> None:
        loop = model_loop(handler=Restored, max_records=2)
        task = asyncio.ensure_future(loop.run())
        turns = Turns(task, 50_000, lambda: f"no progress: {model.logs}")
        await turns.until(lambda: bool(held.waiting))
        first = list(producers)
        assert first and handlers and not any(p.closed for p in first)
        consumer = loop._consumer
        assert isinstance(consumer, FakeConsumer)
        revoke = asyncio.ensure_future(consumer.listener.on_partitions_revoked({tp}))
        await turns.until(revoke.done)
        revoke.result()
        assert all(p.closed for p in first), "the cancelled take-over left a producer open"
        assert loop.assignment == set() and not handlers[0].restored and held.waiting == set()
        consumer.resume(tp)  # a new assignment: its partitions are not paused (aiokafka's state is per assignment)
        await consumer.listener.on_partitions_assigned({tp})
        await turns.until(lambda: done(model))
        loop.stop()
        await task

    with (
        patched(model, producer=Closing),
        mock.patch.object(loop_module, "read_state", held.read),
    ):
        asyncio.run(run())
    assert len(handlers) == 2 and not handlers[0].restored and handlers[1].restored
    assert [json.loads(v) for _, v in model.committed_log(OUTPUT, 0)] == expected_outputs([1, 2, 3])


class StepConsumer(FakeConsumer):
    """The scripted consumer with what a loop in step asks of it (positions, ends, a fetch of some partitions)."""

    async def position(self, tp: TopicPartition) -> int:
        return self.positions.get(tp, 0)

    def last_stable_offset(self, tp: TopicPartition) -> int:
        return len(self.model.inputs[tp])

    def highwater(self, tp: TopicPartition) -> int:
        return len(self.model.inputs[tp])

    async def getmany(  # type: ignore[override]
        self, *partitions: TopicPartition, timeout_ms: int, max_records: int
    ) -> dict[TopicPartition, list[FakeRecord]]:
        await asyncio.sleep(0)
        self._alive()
        out: dict[TopicPartition, list[FakeRecord]] = {}
        budget = max_records
        for tp in sorted(self.positions):
            if tp in self._paused or (partitions and tp not in partitions):
                continue
            start = self.positions[tp]
            taken = self.model.inputs[tp][start : start + budget]
            if taken:
                out[tp] = [FakeRecord(start + i, b"k", str(v).encode(), 0) for i, v in enumerate(taken)]
                self.positions[tp] = start + len(taken)
                budget -= len(taken)
        return out


class Stepper(Summer):
    """:class:`Summer` with a ``progress`` (the offset of its last record) for the loop in step."""

    @property
    def progress(self) -> int | None:
        return self.count - 1 if self.count else None


def test_in_step_a_group_waits_while_one_of_its_partitions_is_taken_over():
    # Two partitions of one step group (window 2); partition 1's state read waits. Partition 0, taken over
    # at once, must not run ahead of a partition whose committed progress is not known yet: it processes
    # nothing until partition 1 is taken over, then both go through in step, every record output once.
    values = {0: list(range(1, 11)), 1: list(range(1, 11))}
    model = Model(values, [], [], [])
    held = Held(model, [1])

    async def run() -> None:
        loop = model_loop(handler=Stepper, max_records=10, in_step=2)
        task = asyncio.ensure_future(loop.run())
        turns = Turns(task, 100_000, lambda: f"no progress: {model.logs}")
        await turns.until(lambda: bool(held.waiting) and TopicPartition(INPUT, 0) in loop.assignment)
        for _ in range(WAIT_TURNS):
            await _REAL_SLEEP(0)
        assert not task.done(), task.exception()
        assert model.committed_log(OUTPUT, 0) == [], "partition 0 ran ahead of its group's partition being taken"
        held.release()
        await turns.until(lambda: done(model))
        loop.stop()
        await task

    with _scripted(model, StepConsumer, held):
        asyncio.run(run())
    for partition, inputs in values.items():
        assert [json.loads(v) for _, v in model.committed_log(OUTPUT, partition)] == expected_outputs(inputs)


# -- on the repository's broker ----------------------------------------------------------------------------

#: the broker's shortest session timeout (``group.min.session.timeout.ms``, Kafka's default 6 s)
SESSION = 6.0
#: how long the test handler's take-over takes: twice the session timeout
TAKE_OVER = 2 * SESSION
#: records sent before the worker starts, during its take-over, and once it serves
BATCH = 50


class SlowToLoad(Summer):
    """A partition's handler whose take-over takes :data:`TAKE_OVER` s: what it keeps beside its state (its
    ``load``, as a plant's history topic) is read that long. One output per record to ``output``: its
    offset, the running sum and count (the state), as :class:`Summer`."""

    def __init__(self, tp: TopicPartition, output: str) -> None:
        super().__init__(tp)
        self.output = output

    async def load(self, bootstrap: str, timeout: float, security: Any = None) -> None:
        await asyncio.sleep(TAKE_OVER)


class CountingAssignments(TransactionalLoop):
    """The loop, counting the assignments its group gave it (each generation of the group gives one)."""

    assignments = 0

    async def on_assigned(self, tps: Any) -> None:
        self.assignments += 1
        await super().on_assigned(tps)


async def _until(condition: Callable[[], bool], seconds: float, what: str, worker: asyncio.Future[None]) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if worker.done():
            worker.result()  # the worker's failure, not a timeout
            pytest.fail(f"the worker stopped before {what}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {seconds:g} s waiting for {what}")
        await asyncio.sleep(0.05)


async def _serve(bootstrap: str, prefix: str) -> tuple[CountingAssignments, list[dict[str, list[int]]] | None]:
    """One worker over ``<prefix>.in``: records sent before it starts, during its take-over and after it."""
    source, output = f"{prefix}.in", f"{prefix}.out"
    group = f"{prefix}-group"
    handled: Counter[int] = Counter()

    def on_batch(tp: TopicPartition, records: Sequence[InputRecord], times: BatchTimes) -> None:
        handled.update(r.offset for r in records)

    loop = CountingAssignments(
        LoopSettings(bootstrap=bootstrap, group_id=group, session_timeout=SESSION),
        [source],
        handler_for=lambda tp: SlowToLoad(tp, output),
        state_topic_for=lambda tp: f"{prefix}.state",
        transactional_id_for=lambda tp: f"{prefix}-{tp.partition}",
        on_batch=on_batch,
    )
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    worker: asyncio.Future[None] | None = None
    try:

        async def send(first: int) -> None:
            for value in range(first, first + BATCH):
                await producer.send(source, str(value).encode(), key=b"k")
            await producer.flush()

        await send(1)
        worker = asyncio.ensure_future(loop.run())
        await _until(lambda: loop.joined_at is not None, 60, "the worker to join its group", worker)
        await send(1 + BATCH)  # during the take-over: they wait for it
        await _until(loop.taken.is_set, 4 * TAKE_OVER, "the take-over", worker)
        assert loop.joined_at is not None and loop.taken_at is not None
        assert loop.taken_at - loop.joined_at > SESSION, "the take-over was not longer than the session timeout"
        await _until(lambda: len(handled) == 2 * BATCH, 4 * TAKE_OVER, "the records sent so far", worker)
        # the broker still has the member, Stable: one expired in its take-over left the group empty, or joining
        members = await asyncio.to_thread(group_assignment, bootstrap, group)
        await send(1 + 2 * BATCH)
        await _until(lambda: len(handled) == 3 * BATCH, 4 * TAKE_OVER, "every record", worker)
        assert set(handled) == set(range(3 * BATCH)) and max(handled.values()) == 1, handled.most_common(3)
    finally:
        await producer.stop()
        loop.stop()
        if worker is not None:
            await worker
    return loop, members


@pytest.mark.kafka
@pytest.mark.slow
def test_a_take_over_longer_than_the_session_timeout_keeps_the_member_in_its_group(kafka_broker) -> None:
    bootstrap = kafka_broker.bootstrap
    prefix = unique_name("takeover")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics(
            [
                NewTopic(f"{prefix}.in", 1, 1),
                NewTopic(f"{prefix}.out", 1, 1),
                NewTopic(f"{prefix}.state", 1, 1, topic_configs={"cleanup.policy": "compact"}),
            ]
        )
    finally:
        admin.close()
    loop, members = asyncio.run(_serve(bootstrap, prefix))
    assert members == [{f"{prefix}.in": [0]}], f"the member left its group during its take-over: {members}"
    assert loop.assignments == 1, f"{loop.assignments} assignments: the member joined its group again"
    outputs = [json.loads(r.value) for r in read_topic(bootstrap, f"{prefix}.out", timeout=30)]
    assert outputs == expected_outputs(list(range(1, 3 * BATCH + 1)))
