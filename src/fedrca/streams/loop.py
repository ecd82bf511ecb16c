"""Exactly-once batch processing of a role's input partitions over Kafka transactions.

Each input partition a worker owns is a *task*: a :class:`PartitionHandler` (the
pure work: a plant processor, the RCA stage) and a transactional producer of its
own. A fetched batch of the partition is processed in one call, and its outputs
(flags or verdicts, dead letters), the handler's state after it (which names the
next input offset) and the consumer group's offset are committed in **one
transaction**.

The invariant that makes it exactly-once
----------------------------------------
*The committed outputs, the committed state and the committed offset of a
partition always describe the same prefix of its input.* They commit or abort
together. A worker that takes a partition (on assignment, or to recover from a
failed transaction) first initialises the partition's producer with its fixed
transactional id (``<prefix>-<partition>``): the broker fences every earlier
producer with that id and aborts its open transaction. Only then does the worker
read the partition's state back (committed records only) and seek the consumer to
the offset the state names. Readers of the outputs (the RCA reads flags, operators
read verdicts) read committed records only. So whatever fails (``kill -9`` of a
worker at any point, a rebalance, a broker restart or pause), every input record
contributes to the committed outputs exactly once, and processing resumes from
exactly the state that produced the last committed outputs. The state is the
authority on offsets: the group's committed offset is kept for lag monitoring.

A producer that is fenced belongs to a worker that lost the partition: its task is
dropped without re-initialising (that would fence the new owner); the group's
next rebalance settles the assignment. ``tests/streams/test_loop.py`` checks the
recovery paths against a scripted broker; ``tests/streams/test_kafka_pipeline.py``
and ``tools/faults.py`` check them against the real one.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import KafkaError, ProducerFenced

__all__ = [
    "InputRecord",
    "LoopSettings",
    "Outgoing",
    "PartitionHandler",
    "Processed",
    "TransactionalLoop",
    "read_state",
    "state_record",
]

log = logging.getLogger("fedrca.streams")


@dataclass(frozen=True)
class InputRecord:
    """One consumed record, as a handler sees it."""

    offset: int
    key: bytes | None
    value: bytes
    timestamp_ms: int


@dataclass(frozen=True)
class Outgoing:
    """One record to produce in the batch's transaction (partition 0 unless given)."""

    topic: str
    value: bytes
    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()
    partition: int = 0


@dataclass(frozen=True)
class Processed:
    """What a handler made of a batch: records to produce and its state after the batch (JSON bytes)."""

    outputs: list[Outgoing] = field(default_factory=list)
    state: bytes = b"null"


class PartitionHandler(Protocol):
    """The work on one input partition; pure (no Kafka), driven by :class:`TransactionalLoop`."""

    def restore(self, state: bytes | None) -> None:
        """Continue from the state of the last committed batch (None: the partition was never processed)."""

    def process(self, records: Sequence[InputRecord]) -> Processed:
        """Process a batch in offset order; return the outputs and the state after it."""


@dataclass(frozen=True)
class LoopSettings:
    """How a loop talks to Kafka.

    Attributes
    ----------
    bootstrap : ``host:port``
    group_id : the consumer group (offsets are committed for it inside the transactions)
    client_id : names the worker in the broker's logs and the group
    max_records : most records taken per fetch (over all partitions)
    fetch_wait : seconds a fetch may wait for records (``getmany``) and the broker may hold a
        fetch without data (``fetch.max.wait.ms``): the batching latency
    session_timeout : seconds after which the broker declares a silent worker dead
    transaction_timeout : seconds before the broker aborts an open transaction of a dead worker
    request_timeout : seconds a broker request may take before it is retried or fails
    restore_timeout : seconds reading a partition's state back may take before the task is retried
    security : extra client keyword arguments (SASL / TLS), the same for every client
    """

    bootstrap: str
    group_id: str
    client_id: str = "fedrca"
    max_records: int = 2000
    fetch_wait: float = 0.02
    session_timeout: float = 10.0
    transaction_timeout: float = 60.0
    request_timeout: float = 30.0
    restore_timeout: float = 60.0
    security: Mapping[str, Any] = field(default_factory=dict)


def state_record(offset: int, state: bytes) -> bytes:
    """The value a task writes to its state topic: the next input offset and the handler's state.

    Examples
    --------
    >>> state_record(12, b'{"a":1}')
    b'{"offset":12,"state":{"a":1}}'
    """
    return b'{"offset":%d,"state":%s}' % (offset, state)


async def read_state(
    bootstrap: str, topic: str, key: bytes, timeout: float, security: Mapping[str, Any] | None = None
) -> tuple[int, bytes] | None:
    """The last committed ``(next offset, handler state)`` under ``key`` in partition 0 of ``topic``.

    Reads committed records only, up to the last stable offset, so a transaction that
    was aborted (or fenced) never comes back as state.

    Raises
    ------
    KafkaError
        When the topic cannot be read within ``timeout`` seconds.
    """
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        **(security or {}),
    )
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        await consumer.seek_to_beginning(tp)
        latest: bytes | None = None
        deadline = time.monotonic() + timeout
        while await consumer.position(tp) < end:
            if time.monotonic() > deadline:
                raise KafkaError(f"reading the state of {topic} took longer than {timeout:.0f} s")
            for record in (await consumer.getmany(tp, timeout_ms=200)).get(tp, []):
                if record.key == key:
                    latest = record.value
        if latest is None:
            return None
        doc = json.loads(latest)
        return int(doc["offset"]), json.dumps(doc["state"], separators=(",", ":")).encode()
    finally:
        await consumer.stop()


@dataclass
class _Task:
    tp: TopicPartition
    handler: PartitionHandler
    producer: AIOKafkaProducer
    state_topic: str
    state_key: bytes
    next_offset: int


class TransactionalLoop:
    """Consume a role's topics in a consumer group; process and commit each partition's batches transactionally.

    Parameters
    ----------
    settings : connection and batching settings
    topics : the input topics (every partition of them is shared among the group's workers)
    handler_for : builds the handler of a partition (called on assignment)
    state_topic_for : the compacted topic (partition 0) a partition's state goes to
    transactional_id_for : the fixed transactional id of a partition (unique in the deployment)
    on_batch : called after every committed batch with (partition, records, seconds from fetch to commit)
    lock : held while a batch is processed and committed and while partitions change hands
        (share it with anything that must not change the handlers inside a batch)
    """

    def __init__(
        self,
        settings: LoopSettings,
        topics: Sequence[str],
        handler_for: Callable[[TopicPartition], PartitionHandler],
        state_topic_for: Callable[[TopicPartition], str],
        transactional_id_for: Callable[[TopicPartition], str],
        on_batch: Callable[[TopicPartition, Sequence[InputRecord], float], None] | None = None,
        lock: asyncio.Lock | None = None,
    ) -> None:
        self.settings = settings
        self.topics = list(topics)
        self._handler_for = handler_for
        self._state_topic_for = state_topic_for
        self._transactional_id_for = transactional_id_for
        self._on_batch = on_batch
        self._tasks: dict[TopicPartition, _Task] = {}
        self._lock = lock or asyncio.Lock()
        self._stopping = asyncio.Event()
        self._consumer: AIOKafkaConsumer | None = None
        self.committed_batches = 0
        self.recoveries = 0
        self.ready = False

    # -- lifecycle ---------------------------------------------------------------------------
    async def run(self) -> None:
        """Consume until :meth:`stop`; every partition's producer is closed on the way out."""
        s = self.settings
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=s.bootstrap,
            group_id=s.group_id,
            client_id=s.client_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            fetch_max_wait_ms=max(1, int(s.fetch_wait * 1000)),
            session_timeout_ms=int(s.session_timeout * 1000),
            heartbeat_interval_ms=max(100, int(s.session_timeout * 1000 / 5)),
            rebalance_timeout_ms=int(max(20.0, 2 * s.session_timeout) * 1000),
            request_timeout_ms=int(s.request_timeout * 1000),
            **s.security,
        )
        self._consumer.subscribe(self.topics, listener=_Listener(self))
        await self._consumer.start()
        try:
            while not self._stopping.is_set():
                batch = await self._consumer.getmany(
                    timeout_ms=max(1, int(s.fetch_wait * 1000)), max_records=s.max_records
                )
                fetched = time.perf_counter()
                for tp, records in batch.items():
                    async with self._lock:
                        await self._process(tp, records, fetched)
        finally:
            async with self._lock:
                await self._drop(list(self._tasks))
            await self._consumer.stop()

    def stop(self) -> None:
        """Ask :meth:`run` to finish after the batch in progress."""
        self._stopping.set()

    @property
    def assignment(self) -> set[TopicPartition]:
        """The partitions this worker currently processes."""
        return set(self._tasks)

    # -- ownership -----------------------------------------------------------------------------
    async def _own(self, tp: TopicPartition) -> None:
        """Take ``tp``: fence earlier producers, restore the committed state, seek to its offset."""
        s = self.settings
        producer = AIOKafkaProducer(
            bootstrap_servers=s.bootstrap,
            client_id=f"{s.client_id}-{tp.topic}-{tp.partition}",
            transactional_id=self._transactional_id_for(tp),
            enable_idempotence=True,
            acks="all",
            linger_ms=0,
            transaction_timeout_ms=int(s.transaction_timeout * 1000),
            request_timeout_ms=int(s.request_timeout * 1000),
            **s.security,
        )
        # InitProducerId: every earlier producer of this id is fenced, its open transaction aborted
        await producer.start()
        try:
            state_topic = self._state_topic_for(tp)
            key = _state_key(tp)
            saved = await read_state(s.bootstrap, state_topic, key, s.restore_timeout, s.security)
            handler = self._handler_for(tp)
            handler.restore(None if saved is None else saved[1])
        except BaseException:
            await producer.stop()
            raise
        assert self._consumer is not None
        if saved is None:
            committed = await self._consumer.committed(tp)
            offset = committed if committed is not None else await self._beginning(tp)
        else:
            offset = saved[0]
        self._consumer.seek(tp, offset)
        self._tasks[tp] = _Task(tp, handler, producer, state_topic, key, offset)
        log.info("%s: resuming at offset %d (%s)", _name(tp), offset, "state restored" if saved else "no state yet")

    async def _beginning(self, tp: TopicPartition) -> int:
        assert self._consumer is not None
        return int((await self._consumer.beginning_offsets([tp]))[tp])

    async def _drop(self, tps: Iterable[TopicPartition]) -> None:
        for tp in list(tps):
            task = self._tasks.pop(tp, None)
            if task is not None:
                try:
                    await task.producer.stop()
                except KafkaError as exc:  # a producer that cannot say goodbye is gone anyway
                    log.warning("%s: closing the producer failed (%s)", _name(tp), exc)

    async def on_assigned(self, tps: Iterable[TopicPartition]) -> None:
        """Own every assigned partition (the rebalance waits for this)."""
        async with self._lock:
            for tp in sorted(tps):
                await self._drop([tp])
                await self._take(tp)
            self.ready = True

    async def on_revoked(self, tps: Iterable[TopicPartition]) -> None:
        """Let go of revoked partitions after the batch in progress (their state is committed)."""
        async with self._lock:
            await self._drop(tps)

    async def _take(self, tp: TopicPartition) -> None:
        """Own ``tp``, retrying on a broker that does not answer yet (restart, pause)."""
        delay = 0.2
        while not self._stopping.is_set():
            try:
                await self._own(tp)
                return
            except ProducerFenced:
                log.warning("%s: fenced while taking it over; the next rebalance decides", _name(tp))
                return
            except KafkaError as exc:
                log.warning("%s: could not take it over yet (%s); retrying in %.1f s", _name(tp), exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                if self._consumer is not None and tp not in self._consumer.assignment():
                    return

    # -- processing ---------------------------------------------------------------------------
    async def _process(self, tp: TopicPartition, records: list[ConsumerRecord], fetched: float) -> None:
        task = self._tasks.get(tp)
        if task is None:
            return  # revoked or fenced meanwhile: the next owner reads it from its committed state
        # a record below the cursor was processed and committed already (a fetch that raced a seek)
        batch = [InputRecord(r.offset, r.key, r.value, r.timestamp) for r in records if r.offset >= task.next_offset]
        if not batch:
            return
        next_offset = batch[-1].offset + 1
        processed = task.handler.process(batch)
        try:
            async with task.producer.transaction():
                outputs = [
                    *processed.outputs,
                    Outgoing(task.state_topic, state_record(next_offset, processed.state), key=task.state_key),
                ]
                futures = await _send(task.producer, outputs)
                await task.producer.send_offsets_to_transaction({tp: next_offset}, self.settings.group_id)
                await asyncio.gather(*futures)
        except ProducerFenced:
            log.warning("%s: fenced (another worker took it over); letting go", _name(tp))
            await self._drop([tp])
            return
        except KafkaError as exc:
            # The outcome of the transaction may be unknown (a commit whose answer was lost):
            # take the partition again from what is committed, exactly as a new owner would.
            self.recoveries += 1
            log.warning(
                "%s: batch at offset %d not committed (%s); taking it over again", _name(tp), batch[0].offset, exc
            )
            await self._drop([tp])
            if self._consumer is not None and tp in self._consumer.assignment():
                await self._take(tp)
            return
        task.next_offset = next_offset
        self.committed_batches += 1
        if self._on_batch is not None:
            self._on_batch(tp, batch, time.perf_counter() - fetched)


class _Listener(ConsumerRebalanceListener):
    def __init__(self, loop: TransactionalLoop) -> None:
        self._loop = loop

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self._loop.on_revoked(revoked)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        await self._loop.on_assigned(assigned)


async def _send(producer: AIOKafkaProducer, outputs: Sequence[Outgoing]) -> list[asyncio.Future[Any]]:
    """Append the outputs to record batches (one per topic-partition, in order) and hand them to the producer."""
    groups: dict[tuple[str, int], list[Outgoing]] = {}
    for out in outputs:
        groups.setdefault((out.topic, out.partition), []).append(out)
    futures = []
    for (topic, partition), items in groups.items():
        batch = producer.create_batch()
        for item in items:
            if batch.append(key=item.key, value=item.value, timestamp=None, headers=list(item.headers)) is None:
                futures.append(await producer.send_batch(batch, topic, partition=partition))
                batch = producer.create_batch()  # an empty batch takes any one record
                batch.append(key=item.key, value=item.value, timestamp=None, headers=list(item.headers))
        futures.append(await producer.send_batch(batch, topic, partition=partition))
    return futures


def _state_key(tp: TopicPartition) -> bytes:
    return f"{tp.topic}:{tp.partition}".encode()


def _name(tp: TopicPartition) -> str:
    return f"{tp.topic}[{tp.partition}]"
