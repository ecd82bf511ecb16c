"""The transactional loop against a scripted broker: exactly-once under every failure it must survive.

:class:`fedrca.streams.loop.TransactionalLoop` is driven here against a model of
the Kafka semantics it relies on (the real broker is exercised by
``tests/streams/test_kafka_pipeline.py`` and ``tools/faults.py``):

* a transactional producer's records, its state record and its consumer-group offset
  become visible together at commit or not at all; ``InitProducerId`` (producer
  start) bumps the id's epoch, aborts its open transaction and fences older producers;
* readers (state restore, the check below) see committed records only;
* a consumer delivers records from its position on; a fetch may return records below
  the cursor again (a fetch that raced a seek).

Hypothesis scripts what goes wrong and when: a commit that fails (aborted), a commit
whose answer is lost (applied, but the worker sees an error), a worker killed (every
client of that worker goes silent at once, its transaction stays open) before or
after a commit or while taking a partition, a producer that cannot start, a rebalance
that revokes and re-assigns, re-delivered records. The handler keeps a running sum,
so its outputs check the restored state as well as the offsets. The property: the
committed outputs of every partition are exactly one output per input record, in
order, with the sum of the prefix; for every example.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaError, ProducerFenced
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedrca.streams import loop as loop_module
from fedrca.streams.loop import (
    InputRecord,
    LoopSettings,
    Outgoing,
    Processed,
    StateRecords,
    StateScan,
    TransactionalLoop,
)

#: asyncio.sleep itself: the tests patch asyncio.sleep to one event-loop turn
_REAL_SLEEP = asyncio.sleep

INPUT = "in"
OUTPUT = "out"
STATE = "state"
DEAD = "dead"  # dead letters of input partition p: topic dead<p>
GROUP = "g"

COMMIT_FAULTS = ("ok", "fail", "lost", "crash-before", "crash-after")
# "hang": the transaction's next step (TxnOffsetCommit, else EndTxn) never gets an answer (aiokafka after
# a broker pause); not in the random scripts, as each costs the loop's transaction timeout in real time
FETCH_FAULTS = ("ok", "redeliver", "rebalance", "crash")
START_FAULTS = ("ok", "fail", "crash")
# the group offset with every batch, or only when the input runs dry (a fetch that finds nothing)
OFFSET_INTERVALS = (0.0, 1e9)


class Crash(BaseException):
    """kill -9 of the worker: not an error any code of the worker may catch."""


@dataclass
class Txn:
    entries: list[Entry] = field(default_factory=list)
    dead: list[tuple[int, bytes, Any]] = field(default_factory=list)
    offsets: dict[TopicPartition, int] = field(default_factory=dict)


@dataclass
class Entry:
    """A record in a log: its place is taken when it is sent; it is visible once its transaction commits."""

    key: bytes | None
    value: bytes
    status: str = "open"  # open, committed, aborted


class Model:
    """The broker: committed logs, transactional ids with epochs, the group's offsets, the fault script."""

    def __init__(
        self,
        inputs: dict[int, list[int | str]],
        commits: list[str],
        fetches: list[str],
        starts: list[str],
        delays: list[int] | None = None,
    ):
        self.inputs = {TopicPartition(INPUT, p): values for p, values in inputs.items()}
        self.logs: dict[tuple[str, int], list[Entry]] = {}
        self.epochs: dict[str, int] = {}
        self.open: dict[str, Txn] = {}
        self.group_offsets: dict[TopicPartition, int] = {}
        self.commits, self.fetches, self.starts = list(commits), list(fetches), list(starts)
        self.delays = list(delays or [])  # event-loop turns each Produce / EndTxn round trip takes, in turn
        self.generation = 0  # the live worker; clients of earlier generations were killed
        self.dead: dict[int, list[tuple[bytes, Any]]] = {}  # input partition -> committed dead letters
        self.commits_applied = 0
        self.hangs = 0

    @staticmethod
    def _next(script: list[str]) -> str:
        return script.pop(0) if script else "ok"

    async def round_trip(self, client: Any) -> None:
        """A request's round trip: the worker goes on meanwhile, the next scripted number of turns (default 1)."""
        for _ in range(self.delays.pop(0) if self.delays else 1):
            await asyncio.sleep(0)
            client._alive()

    def kill(self) -> None:
        self.generation += 1
        raise Crash

    async def hang(self) -> None:
        """A request that is never answered: the caller waits until it gives up (it is cancelled)."""
        self.hangs += 1
        await asyncio.Event().wait()

    # -- producer side ---------------------------------------------------------------------------
    def init_producer(self, tid: str) -> int:
        self.epochs[tid] = self.epochs.get(tid, 0) + 1
        self.abort(tid)  # the open transaction of the fenced producer is aborted
        return self.epochs[tid]

    def abort(self, tid: str) -> None:
        txn = self.open.pop(tid, None)
        for entry in [] if txn is None else txn.entries:
            entry.status = "aborted"

    def check_epoch(self, tid: str, epoch: int) -> None:
        if self.epochs[tid] != epoch:
            raise ProducerFenced()

    def commit(self, tid: str) -> None:
        txn = self.open.pop(tid)
        for entry in txn.entries:
            entry.status = "committed"
        self.group_offsets.update(txn.offsets)
        for partition, value, headers in txn.dead:
            self.dead.setdefault(partition, []).append((value, headers))
        self.commits_applied += 1

    def append(self, tid: str, topic: str, partition: int, key: bytes | None, value: bytes) -> None:
        entry = Entry(key, value)
        self.logs.setdefault((topic, partition), []).append(entry)
        self.open[tid].entries.append(entry)

    def committed_log(self, topic: str, partition: int) -> list[tuple[bytes | None, bytes]]:
        """What a read_committed reader sees, in log order (a record's place is where it was sent)."""
        return [(e.key, e.value) for e in self.logs.get((topic, partition), []) if e.status == "committed"]


class FakeBatch:
    def __init__(self) -> None:
        self.items: list[tuple[bytes | None, bytes, Any]] = []

    def append(self, *, key: bytes | None, value: bytes, timestamp: Any, headers: Any) -> object:
        self.items.append((key, value, headers))
        return object()


class FakeProducer:
    def __init__(self, model: Model, **kwargs: Any) -> None:
        self.model = model
        self.generation = model.generation
        self.tid: str = kwargs["transactional_id"]
        self.epoch = 0

    def _alive(self) -> None:
        if self.generation != self.model.generation:
            raise Crash  # a killed worker's client does nothing more

    async def start(self) -> None:
        self._alive()
        fault = Model._next(self.model.starts)
        if fault == "crash":
            self.model.kill()
        if fault == "fail":
            raise KafkaError("InitProducerId: coordinator not available")
        self.epoch = self.model.init_producer(self.tid)

    async def stop(self) -> None:
        return None  # a killed worker's producer simply vanishes; a live one has nothing open here

    async def begin_transaction(self) -> None:
        self._alive()
        self.model.check_epoch(self.tid, self.epoch)
        assert self.tid not in self.model.open, "a producer holds one transaction at a time"
        self.model.open[self.tid] = Txn()

    async def abort_transaction(self) -> None:
        self._alive()
        self.model.check_epoch(self.tid, self.epoch)
        self.model.abort(self.tid)

    async def commit_transaction(self) -> None:
        self._alive()
        self.model.check_epoch(self.tid, self.epoch)
        await self.model.round_trip(self)  # EndTxn
        self.model.check_epoch(self.tid, self.epoch)
        fault = Model._next(self.model.commits)
        if fault == "hang":
            await self.model.hang()
        if fault == "crash-before":
            self.model.kill()
        if fault == "fail":
            self.model.abort(self.tid)
            raise KafkaError("EndTxn failed: the transaction was aborted")
        self.model.commit(self.tid)
        if fault == "crash-after":
            self.model.kill()
        if fault == "lost":
            raise KafkaError("EndTxn: request timed out (the commit went through)")

    def create_batch(self) -> FakeBatch:
        return FakeBatch()

    async def send_batch(self, batch: FakeBatch, topic: str, partition: int) -> asyncio.Future[None]:
        self._alive()
        self.model.check_epoch(self.tid, self.epoch)
        await self.model.round_trip(self)  # Produce
        self.model.check_epoch(self.tid, self.epoch)
        if topic.startswith(DEAD):
            self.model.open[self.tid].dead.extend((int(topic[len(DEAD) :]), v, h) for _, v, h in batch.items)
        else:
            for key, value, _ in batch.items:
                self.model.append(self.tid, topic, partition, key, value)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    async def send_offsets_to_transaction(self, offsets: dict[TopicPartition, int], group_id: str) -> None:
        self._alive()
        self.model.check_epoch(self.tid, self.epoch)
        assert group_id == GROUP
        if self.model.commits[:1] == ["hang"]:
            self.model.commits.pop(0)
            await self.model.hang()
        self.model.open[self.tid].offsets.update(offsets)


@dataclass
class FakeRecord:
    offset: int
    key: bytes | None
    value: bytes
    timestamp: int


class FakeConsumer:
    def __init__(self, model: Model, **kwargs: Any) -> None:
        self.model = model
        self.generation = model.generation
        self.positions: dict[TopicPartition, int] = {}
        self.listener: Any = None
        self._paused: set[TopicPartition] = set()
        assert kwargs["isolation_level"] == "read_committed"
        assert kwargs["enable_auto_commit"] is False

    def _alive(self) -> None:
        if self.generation != self.model.generation:
            raise Crash

    def subscribe(self, topics: Sequence[str], listener: Any) -> None:
        assert list(topics) == [INPUT]
        self.listener = listener

    async def start(self) -> None:
        self._alive()
        await self.listener.on_partitions_assigned(set(self.model.inputs))

    async def stop(self) -> None:
        return None

    def assignment(self) -> set[TopicPartition]:
        return set(self.model.inputs)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.positions[tp] = offset

    def pause(self, *tps: TopicPartition) -> None:
        self._paused.update(tps)

    def resume(self, *tps: TopicPartition) -> None:
        self._paused.difference_update(tps)

    def paused(self) -> set[TopicPartition]:
        return set(self._paused)

    async def committed(self, tp: TopicPartition) -> int | None:
        return self.model.group_offsets.get(tp)

    async def beginning_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return dict.fromkeys(tps, 0)

    async def getmany(self, timeout_ms: int, max_records: int) -> dict[TopicPartition, list[FakeRecord]]:
        await asyncio.sleep(0)
        self._alive()
        fault = Model._next(self.model.fetches)
        if fault == "crash":
            self.model.kill()
        if fault == "rebalance":
            everything = set(self.model.inputs)
            await self.listener.on_partitions_revoked(everything)
            self._paused.clear()  # a new assignment: no partition is paused (aiokafka's state is per assignment)
            await self.listener.on_partitions_assigned(everything)
            return {}
        out: dict[TopicPartition, list[FakeRecord]] = {}
        budget = max_records
        for tp in sorted(self.positions):
            if tp in self._paused:
                continue  # a paused partition hands over nothing
            values = self.model.inputs[tp]
            start = self.positions[tp]
            if fault == "redeliver":
                start = max(0, start - 2)
            taken = values[start : start + budget]
            if taken:
                out[tp] = [FakeRecord(start + i, b"k", str(v).encode(), 0) for i, v in enumerate(taken)]
                self.positions[tp] = max(self.positions[tp], start + len(taken))
                budget -= len(taken)
        return out


class Summer:
    """A stateful handler: one output per input with the running sum and count (its state)."""

    output = OUTPUT  # the topic of its outputs

    def __init__(self, tp: TopicPartition) -> None:
        self.partition = tp.partition
        self.total = 0
        self.count = 0

    def restore(self, state: bytes | None) -> None:
        self.total, self.count = json.loads(state) if state is not None else (0, 0)

    def process(self, records: Sequence[InputRecord]) -> Processed:
        outputs = []
        for r in records:
            self.total += int(r.value)
            self.count += 1
            value = json.dumps([r.offset, self.total, self.count]).encode()
            outputs.append(Outgoing(self.output, value, key=r.key, partition=self.partition))
        return Processed(outputs, json.dumps([self.total, self.count]).encode())


class QuietSummer(Summer):
    """:class:`Summer` that outputs only the records of even value: most of its batches are quiet
    (``LoopSettings.defer_quiet``), and the state (the sum and count of all) still moves with each."""

    def process(self, records: Sequence[InputRecord]) -> Processed:
        out = super().process(records)
        kept = [o for o, r in zip(out.outputs, records, strict=True) if int(r.value) % 2 == 0]
        return Processed(kept, out.state)


async def _read_state(model: Model, bootstrap: str, topic: str, key: bytes, *_: Any) -> StateRecords:
    scan = StateScan()
    for k, v in model.committed_log(topic, 0):
        if k == key:
            scan.add(v)
    return scan.result()


def expected_outputs(values: list[int | str], quiet: bool = False) -> list[list[int]]:
    """One output per input with the running sum and count; a poison record (a text) has none; ``quiet``
    (:class:`QuietSummer`): only the records of even value have one."""
    total, count, out = 0, 0, []
    for i, v in enumerate(values):
        if isinstance(v, str):
            continue
        total += v
        count += 1
        if not quiet or v % 2 == 0:
            out.append([i, total, count])
    return out


def dead_letters(model: Model, partition: int) -> list[tuple[bytes, str]]:
    """(value, reason) of the partition's dead letters."""
    return [(v, dict(h)["fedrca-reason"].decode()) for v, h in model.dead.get(partition, [])]


def done(model: Model, quiet: bool = False) -> bool:
    return all(
        len(model.committed_log(OUTPUT, tp.partition)) + len(model.dead.get(tp.partition, []))
        >= len(expected_outputs(values, quiet)) + sum(isinstance(v, str) for v in values)
        and model.group_offsets.get(tp, 0) == len(values)
        for tp, values in model.inputs.items()
    )


def model_loop(handler: Any = Summer, **settings: Any) -> TransactionalLoop:
    """A loop on the scripted broker: :class:`Summer` over :data:`INPUT`, its state and dead letters.

    The handlers run on the event loop unless ``handler_thread=True`` is given: the scripted round
    trips count event-loop turns, which a handler on its own thread takes in real time.
    """
    settings.setdefault("handler_thread", False)
    return TransactionalLoop(
        LoopSettings(bootstrap="model:9092", group_id=GROUP, **settings),
        [INPUT],
        handler_for=handler,
        state_topic_for=lambda tp: STATE,
        transactional_id_for=lambda tp: f"t-{tp.partition}",
        deadletter_topic_for=lambda tp: f"{DEAD}{tp.partition}",
    )


@dataclass
class Turns:
    """Event-loop turns until a condition holds, the loop's ``task`` still running: at most ``limit`` turns in
    all, then the test fails with ``message()`` (a bound in turns, not in seconds: no timing in the model)."""

    task: asyncio.Future[Any]
    limit: int
    message: Any
    turns: int = 0

    async def until(self, condition: Any) -> None:
        while not condition():
            assert not self.task.done(), self.task.exception()
            await _REAL_SLEEP(0)
            self.turns += 1
            assert self.turns < self.limit, self.message()


@contextmanager
def patched(model: Model, producer: Any = None, sleep: Any = None) -> Iterator[None]:
    """The loop's consumer, producers (``producer``, default :class:`FakeProducer`) and state reader on
    ``model``; ``asyncio.sleep`` as ``sleep`` (default: one event-loop turn, whatever the delay)."""
    make = producer or FakeProducer
    with (
        mock.patch.object(loop_module, "AIOKafkaConsumer", lambda **kw: FakeConsumer(model, **kw)),
        mock.patch.object(loop_module, "AIOKafkaProducer", lambda **kw: make(model, **kw)),
        mock.patch.object(loop_module, "read_state", lambda *a: _read_state(model, *a)),
        mock.patch.object(asyncio, "sleep", sleep or (lambda d, r=None: _REAL_SLEEP(0, r))),
    ):
        yield


async def drive(
    model: Model,
    max_records: int,
    offset_interval: float = 0.0,
    producers: int = 2,
    transaction_timeout: float = 60.0,
    handler_thread: bool = False,
    defer_quiet: float = 0.0,
) -> int:
    """Run worker generations until every input is committed; returns how many workers were started
    (with ``defer_quiet``: :class:`QuietSummer`, its quiet batches deferred)."""
    real_sleep = asyncio.sleep

    async def no_wait(delay: float, result: Any = None) -> Any:
        return await real_sleep(0, result)

    def loop_for(generation: int) -> TransactionalLoop:
        return model_loop(QuietSummer if defer_quiet else Summer, max_records=max_records,
                          offset_interval=offset_interval, producers=producers, defer_quiet=defer_quiet,
                          transaction_timeout=transaction_timeout, handler_thread=handler_thread)  # fmt: skip

    workers = 0
    quiet = defer_quiet > 0
    with patched(model, sleep=no_wait):
        while not done(model, quiet):
            workers += 1
            assert workers <= 200, "the workers never finished the input"
            worker = loop_for(model.generation)
            task = asyncio.ensure_future(worker.run())
            steps = 0
            while not task.done():
                if done(model, quiet):
                    worker.stop()
                await real_sleep(0)
                steps += 1
                assert steps < 200_000, "a worker made no progress"
            try:
                task.result()
            except Crash:
                continue
    return workers


#: input values: numbers, and now and then a record the handler cannot process (``int(b"x")`` raises)
inputs_strategy = st.dictionaries(
    st.integers(0, 2),
    st.lists(st.one_of(st.integers(-5, 9), st.just("x")), min_size=0, max_size=12),
    min_size=1,
    max_size=3,
)


def check(
    inputs: dict[int, list[int | str]],
    commits: list[str],
    fetches: list[str],
    starts: list[str],
    batch: int,
    offset_interval: float = 0.0,
    producers: int = 2,
    delays: list[int] | None = None,
    transaction_timeout: float = 60.0,
    handler_thread: bool = False,
    defer_quiet: float = 0.0,
) -> Model:
    model = Model(inputs, commits, fetches, starts, delays)
    asyncio.run(drive(model, batch, offset_interval, producers, transaction_timeout, handler_thread, defer_quiet))
    for partition, values in inputs.items():
        got = [json.loads(v) for _, v in model.committed_log(OUTPUT, partition)]
        assert got == expected_outputs(values, defer_quiet > 0), f"partition {partition}"
        assert model.group_offsets.get(TopicPartition(INPUT, partition), 0) == len(values)
        # every poison record dead-lettered exactly once, with its reason; nothing else
        poison = [(b"x", "unprocessable") for v in values if isinstance(v, str)]
        assert dead_letters(model, partition) == poison, f"partition {partition}"
    return model


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    inputs=inputs_strategy,
    commits=st.lists(st.sampled_from(COMMIT_FAULTS), max_size=12),
    fetches=st.lists(st.sampled_from(FETCH_FAULTS), max_size=12),
    starts=st.lists(st.sampled_from(START_FAULTS), max_size=6),
    batch=st.integers(1, 5),
    offset_interval=st.sampled_from(OFFSET_INTERVALS),
    producers=st.integers(1, 2),
    delays=st.lists(st.integers(0, 6), max_size=16),
    handler_thread=st.booleans(),
)
def test_every_input_record_is_output_exactly_once_whatever_fails(
    inputs, commits, fetches, starts, batch, offset_interval, producers, delays, handler_thread
):
    check(inputs, commits, fetches, starts, batch, offset_interval, producers, delays, handler_thread=handler_thread)


@pytest.mark.slow
@pytest.mark.exhaustive
@settings(max_examples=20_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    inputs=inputs_strategy,
    commits=st.lists(st.sampled_from(COMMIT_FAULTS), max_size=30),
    fetches=st.lists(st.sampled_from(FETCH_FAULTS), max_size=30),
    starts=st.lists(st.sampled_from(START_FAULTS), max_size=12),
    batch=st.integers(1, 8),
    offset_interval=st.sampled_from(OFFSET_INTERVALS),
    producers=st.integers(1, 2),
    delays=st.lists(st.integers(0, 6), max_size=40),
    handler_thread=st.booleans(),
)
def test_every_input_record_is_output_exactly_once_whatever_fails_many_examples(
    inputs, commits, fetches, starts, batch, offset_interval, producers, delays, handler_thread
):
    check(inputs, commits, fetches, starts, batch, offset_interval, producers, delays, handler_thread=handler_thread)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    inputs=inputs_strategy,
    commits=st.lists(st.sampled_from(COMMIT_FAULTS), max_size=12),
    fetches=st.lists(st.sampled_from(FETCH_FAULTS), max_size=12),
    starts=st.lists(st.sampled_from(START_FAULTS), max_size=6),
    batch=st.integers(1, 5),
    offset_interval=st.sampled_from(OFFSET_INTERVALS),
    producers=st.integers(1, 2),
    delays=st.lists(st.integers(0, 6), max_size=16),
    # quiet batches committed at the next fetch, or after 10 ms of real time (or with a later batch before)
    defer_quiet=st.sampled_from([1e-9, 0.01]),
)
def test_quiet_batches_are_output_exactly_once_whatever_fails(
    inputs, commits, fetches, starts, batch, offset_interval, producers, delays, defer_quiet
):
    # LoopSettings.defer_quiet: a batch with no output is committed by the partition's next transaction
    check(inputs, commits, fetches, starts, batch, offset_interval, producers, delays, defer_quiet=defer_quiet)


def test_quiet_batches_share_a_transaction():
    # ten records, one per batch, only the last with an output: its transaction carries the nine quiet
    # batches' state (without defer_quiet: ten transactions)
    commits = {}
    for defer in (0.0, 1e9):
        model = check({0: [1, 3, 5, 7, 9, 1, 3, 5, 7, 2]} if defer else {0: [2] * 10}, [], [], [], batch=1,
                      defer_quiet=defer)  # fmt: skip
        commits[defer] = sum(1 for k, _ in model.committed_log(STATE, 0))
    assert commits[0.0] == 10
    assert commits[1e9] == 1


def test_a_worker_that_dies_after_a_quiet_batch_committed_resumes_after_it():
    # the first record (odd) is a quiet batch, committed on its own at the next fetch; the worker dies right
    # after that commit: its successor resumes from that state and offset (not from before the quiet batch,
    # which would count the record twice, nor after it with the state before it)
    model = check({0: [1, 2, 3, 4]}, ["crash-after"], [], [], batch=1, defer_quiet=1e-9)
    assert next(json.loads(v) for _, v in model.committed_log(STATE, 0)) == {"offset": 1, "state": [1, 1]}


@pytest.mark.parametrize("commits", [["ok", "fail"], ["lost"]])
def test_a_batch_commits_only_after_the_batch_before_it(commits):
    # Batch n + 1's transaction is sent while batch n's commit is slow (6 turns); n's fails or its
    # answer is lost: n + 1 must not commit on its own (its state would skip or repeat n's outputs).
    check({0: [1, 2, 3, 4, 5]}, commits, [], [], batch=1, delays=[1, 1, 6, 0, 0, 0])


def test_records_that_are_not_the_state_are_dead_lettered_and_the_state_before_them_used():
    # state records written by anyone who can write the state topic: not of the form, nested too deep,
    # a state the handler cannot continue from; the valid one before them is used
    key = b"in:0"
    valid = b'{"offset":1,"state":[1,1]}'
    poison = [
        b"garbage",
        b"",
        b'{"offset":-1,"state":[0,0]}',
        b'{"offset":1,"state":' + b"[" * 100_000,
        b'{"offset":1,"state":' + b"[" * 40 + b"]" * 40 + b"}",
        b'{"offset":1,"state":"not a pair"}',
        b'{"offset":1,"state":[1,1],"extra":1}',
        b'{"offset":1,"state":"' + b"x" * 1_000_000 + b'"}',
    ]
    model = Model({0: [1, 2, 3]}, [], [], [])
    model.logs[(STATE, 0)] = [Entry(key, valid, "committed"), *(Entry(key, p, "committed") for p in poison)]
    # what the valid state's batch wrote
    model.logs[(OUTPUT, 0)] = [Entry(b"k", json.dumps([0, 1, 1]).encode(), "committed")]
    asyncio.run(drive(model, 3))
    assert [json.loads(v) for _, v in model.committed_log(OUTPUT, 0)] == expected_outputs([1, 2, 3])
    dead = dead_letters(model, 0)
    assert sorted(v[:60] for v, _ in dead) == sorted(p[:60] for p in poison)
    assert all(reason in ("bad-state", "too-deep", "malformed-json") for _, reason in dead), dead
    assert all(len(v) <= 1_000_000 for v, _ in dead)


def test_without_a_valid_state_a_partition_starts_from_the_beginning():
    model = Model({0: [4, 5]}, [], [], [])
    model.logs[(STATE, 0)] = [Entry(b"in:0", b'{"offset":9,"state":{"nested":' * 3, "committed")]
    asyncio.run(drive(model, 1))
    assert [json.loads(v) for _, v in model.committed_log(OUTPUT, 0)] == expected_outputs([4, 5])
    assert [reason for _, reason in dead_letters(model, 0)] == ["malformed-json"]


def test_a_lost_commit_answer_is_not_processed_twice():
    # The commit went through but the worker saw an error: it must re-read what is committed
    # (not redo the batch from its in-memory cursor).
    check({0: [1, 2, 3, 4]}, ["lost", "lost"], [], [], batch=2)


@pytest.mark.parametrize("offset_interval", OFFSET_INTERVALS)
def test_a_transaction_step_that_never_answers_is_given_up_and_the_partition_taken_again(offset_interval):
    # After a broker pause aiokafka's send_offsets_to_transaction (or commit) may wait forever
    # (tools/faults.py pause runs): the loop gives the step up after the transaction timeout and takes
    # the partition again from what is committed. Without the bound the worker makes no progress.
    model = check({0: [1, 2, 3, 4]}, ["ok", "hang"], [], [], batch=2, offset_interval=offset_interval,
                  transaction_timeout=0.05)  # fmt: skip
    assert model.hangs == 1


def test_a_kill_between_sending_and_committing_leaves_nothing_visible():
    model = Model({0: [5, 6, 7]}, ["crash-before"], [], [])
    asyncio.run(drive(model, 3))
    assert model.commits_applied == 1  # the killed transaction never committed; the next worker's did
    assert [json.loads(v) for _, v in model.committed_log(OUTPUT, 0)] == expected_outputs([5, 6, 7])


def test_the_model_catches_a_loop_that_commits_offsets_outside_the_transaction():
    # The property can fail: a loop variant whose offsets move before its outputs are committed
    # loses the batch when the worker is killed between the two.
    class Leaky(FakeProducer):
        async def send_offsets_to_transaction(self, offsets: dict[TopicPartition, int], group_id: str) -> None:
            self.model.group_offsets.update(offsets)  # committed at once, outside the transaction

    async def leaky_state(model: Model, *args: Any) -> StateRecords:
        return StateRecords([], [])  # a loop that trusts the group's offset instead of its state

    model = Model({0: [1, 2, 3]}, ["crash-before"], [], [])
    with (
        mock.patch.object(loop_module, "AIOKafkaProducer", lambda **kw: Leaky(model, **kw)),
        mock.patch.object(loop_module, "read_state", lambda *a: leaky_state(model, *a)),
        pytest.raises(AssertionError, match="outputs lost"),
    ):
        asyncio.run(_drive_patched(model))


async def _drive_patched(model: Model) -> None:
    # like drive(), but with the producer and state reader patched by the caller
    real_sleep = asyncio.sleep
    workers = 0
    with (
        mock.patch.object(loop_module, "AIOKafkaConsumer", lambda **kw: FakeConsumer(model, **kw)),
        mock.patch.object(asyncio, "sleep", lambda d, r=None: real_sleep(0, r)),
    ):
        while not done(model):
            workers += 1
            assert workers <= 20, "the workers never finished the input"
            worker = model_loop(max_records=3)
            task = asyncio.ensure_future(worker.run())
            steps = 0
            while not task.done():
                # the leaky loop's group offset says "done" while nothing was output
                if all(model.group_offsets.get(tp, 0) == len(v) for tp, v in model.inputs.items()):
                    worker.stop()
                await real_sleep(0)
                steps += 1
                assert steps < 100_000
            try:
                task.result()
            except Crash:
                continue
            break
    got = [json.loads(v) for _, v in model.committed_log(OUTPUT, 0)]
    assert got == expected_outputs(model.inputs[TopicPartition(INPUT, 0)]), "outputs lost"


def test_an_idle_fetch_does_not_wait_for_the_offsets_it_commits():
    # The group offset goes with the first batch, then only with an idle fetch. After the second
    # batch the input runs dry: the idle fetch starts an offsets-only transaction whose EndTxn takes
    # 500 turns. A record that arrives meanwhile is processed and sent on the partition's other
    # producer long before that answer, and commits after it (in input order). A loop that waited
    # for the offsets before its next fetch would process it only after those 500 turns.
    model = Model({0: [1]}, [], [], [], delays=[1] * 6 + [500])
    tp = TopicPartition(INPUT, 0)

    async def run() -> tuple[int, int]:
        loop = model_loop(offset_interval=1e9, producers=2)
        task = asyncio.ensure_future(loop.run())
        turns = Turns(task, 5_000, lambda: f"no progress: {model.commits_applied} commits, {model.group_offsets}")
        until = turns.until

        await until(lambda: loop.committed_batches == 1)  # the first batch, with its offset
        model.inputs[tp].append(2)
        await until(lambda: loop.committed_batches == 2 and model.open)  # the second; the offsets' transaction open
        assert model.group_offsets[tp] == 1
        model.inputs[tp].append(3)
        await until(lambda: len(model.logs[(OUTPUT, 0)]) == 3)  # record 3 processed and sent
        sent_at, committed_then = turns.turns, model.commits_applied
        await until(lambda: model.group_offsets[tp] == 3 and not model.open)
        loop.stop()
        await task
        return sent_at, committed_then

    with patched(model):
        sent_at, committed_then = asyncio.run(run())
    assert committed_then == 2, "record 3 was processed only after the offsets' transaction committed"
    assert sent_at < 500
    assert [json.loads(v) for _, v in model.committed_log(OUTPUT, 0)] == expected_outputs([1, 2, 3])


def test_a_batch_processed_while_an_earlier_transaction_fails_is_dropped():
    # The handlers run on their own thread: batch 1 (offset 1) is processed while batch 0's EndTxn
    # fails. Its outputs were computed from a state that is not committed: the loop drops them unsent
    # (no transaction of that partition may start after a failed one) and takes the partition over
    # again from what is committed, so every record is output once, in order, and the first batch
    # 1's outputs never reach the log, not even in an aborted transaction.
    failed = threading.Event()

    class Failing(Model):
        def abort(self, tid: str) -> None:
            if tid in self.open:  # a transaction aborted (the scripted failure), not a producer's start
                failed.set()
            super().abort(tid)

    class Slow(Summer):
        blocked = False

        def process(self, records: Sequence[InputRecord]) -> Processed:
            if records and records[0].offset == 1 and not Slow.blocked:
                Slow.blocked = True
                assert failed.wait(10), "batch 0's transaction did not fail while batch 1 was processed"
                self.total += 1000  # what a batch from a state that is not committed would output
            return super().process(records)

    model = Failing({0: [1, 2, 3]}, ["fail"], [], [])
    real_sleep = asyncio.sleep

    async def run() -> None:
        while not done(model):
            loop = model_loop(handler=Slow, max_records=1, handler_thread=True)
            task = asyncio.ensure_future(loop.run())
            for _ in range(100_000):
                if done(model):
                    break
                assert not task.done(), task.exception()
                await real_sleep(0)
            loop.stop()
            await task

    with patched(model):
        asyncio.run(run())
    assert Slow.blocked and failed.is_set()
    assert [json.loads(v) for _, v in model.committed_log(OUTPUT, 0)] == expected_outputs([1, 2, 3])
    sent = [json.loads(e.value) for e in model.logs[(OUTPUT, 0)]]
    assert not [v for v in sent if v[1] >= 1000], f"the dropped batch's outputs were sent: {sent}"


@pytest.mark.parametrize("interval", [0.0, 30.0])
def test_fetch_interval_spaces_the_batches(interval):
    # settings.fetch_interval: after a fetch that returned records the loop waits out the rest of the
    # interval (asyncio.sleep, recorded here and one event-loop turn long) before it fetches again, so
    # records that come one at a time within it would make one batch; 0 (the default) never waits.
    model = Model({0: [1]}, [], [], [])
    tp = TopicPartition(INPUT, 0)
    asked: list[float] = []

    def recorded(delay: float, result: Any = None) -> Any:
        asked.append(delay)
        return _REAL_SLEEP(0, result)

    async def run() -> None:
        loop = model_loop(max_records=10, fetch_interval=interval)
        task = asyncio.ensure_future(loop.run())
        until = Turns(task, 20_000, lambda: f"the batches were not committed: {model.committed_log(OUTPUT, 0)}").until
        for n, value in enumerate([2, 3], start=1):
            await until(lambda n=n: len(model.committed_log(OUTPUT, 0)) == n)
            model.inputs[tp].append(value)
        await until(lambda: done(model))
        loop.stop()
        await task

    with patched(model, sleep=recorded):
        asyncio.run(run())
    assert [json.loads(v) for _, v in model.committed_log(OUTPUT, 0)] == expected_outputs(model.inputs[tp])
    waits = [d for d in asked if d > 0]
    if interval == 0:
        assert waits == [], f"the loop waited between batches without a fetch interval: {waits}"
    else:
        # before each of the two later batches at least once, each time the interval less the few
        # milliseconds since its last batch's fetch began (well under 10 s even on a starved machine)
        assert len(waits) >= 2, f"the loop fetched again without waiting out the interval: {asked}"
        assert all(interval - 10 < d <= interval for d in waits), waits


@pytest.mark.parametrize("handler_thread", [False, True])
def test_a_busy_partition_holds_no_other_back(handler_thread):
    # One producer per partition: partition 0's first EndTxn gets no answer until the test releases
    # it, so its next batch waits. Partition 1's next batches, fetched with it, are processed and
    # committed meanwhile. A loop that waited for every busy partition of a fetch before processing
    # any would leave partition 1 waiting for partition 0's answer.
    model = Model({0: [1], 1: [1]}, [], [], [])
    tp0, tp1 = TopicPartition(INPUT, 0), TopicPartition(INPUT, 1)

    class Stuck(FakeProducer):
        release: asyncio.Event | None = None

        async def commit_transaction(self) -> None:
            if self.tid == "t-0":
                assert Stuck.release is not None
                await Stuck.release.wait()
            await super().commit_transaction()

    async def run() -> None:
        Stuck.release = asyncio.Event()
        loop = model_loop(max_records=10, producers=1, handler_thread=handler_thread)
        task = asyncio.ensure_future(loop.run())
        until = Turns(task, 20_000, lambda: "partition 1 waited for partition 0's transaction").until

        await until(lambda: len(model.committed_log(OUTPUT, 1)) == 1 and model.open)  # p0's first EndTxn waits
        model.inputs[tp0].append(2)
        model.inputs[tp1] += [2, 3]
        await until(lambda: len(model.committed_log(OUTPUT, 1)) == 3)
        assert model.committed_log(OUTPUT, 0) == [], "partition 0's first transaction cannot have committed"
        Stuck.release.set()
        await until(lambda: done(model))
        loop.stop()
        await task

    with patched(model, producer=Stuck):
        asyncio.run(run())
    for tp in (tp0, tp1):
        got = [json.loads(v) for _, v in model.committed_log(OUTPUT, tp.partition)]
        assert got == expected_outputs(model.inputs[tp])
