"""A worker's start: what it does at the same time, what it reads of its state topic, its timeline.

A worker killed and started again serves nothing until it has taken its partitions over
(docs/streams.md, "A worker started again"). These check the behaviour that keeps that short
without touching exactly-once: the partitions are taken at the same time (each fences its own
producers and reads its own state); the published parameters are read while the group is joined
and the partitions taken, and no batch is processed before they are read; a take-over reads the
newest records of a state topic first and further back only when none of them restores, so it
continues from the same state as reading the whole topic; the start-up timeline.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from aiokafka import TopicPartition
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic
from tools.cluster import site_config

from fedrca.config import load_config
from fedrca.connectors.kafka import ensure_site_topics
from fedrca.connectors.names import SiteNames
from fedrca.streams import agents as agents_module
from fedrca.streams import loop as loop_module
from fedrca.streams.agents import ParamsFollower
from fedrca.streams.app import WARM_UP
from fedrca.streams.loop import (
    STATE_CANDIDATES,
    STATE_TAIL,
    LoopSettings,
    StateRecords,
    StateScan,
    TransactionalLoop,
    read_state,
    state_record,
)
from fedrca.streams.startup import StartupTimeline, process_started
from tests.kafka_broker import unique_name
from tests.streams.test_loop import (
    _REAL_SLEEP,
    DEAD,
    GROUP,
    INPUT,
    OUTPUT,
    STATE,
    FakeConsumer,
    Model,
    Summer,
    Turns,
    dead_letters,
    done,
    expected_outputs,
    patched,
)

#: seconds the fakes below wait for the other partitions' steps to come at the same time
TOGETHER = 2.0
REPO = Path(__file__).resolve().parents[2]


class Meeting:
    """Counts the steps in progress at once; each waits (at most :data:`TOGETHER` s) until ``expected`` are."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.now = 0
        self.most = 0
        self.full = asyncio.Event()

    async def attend(self) -> None:
        self.now += 1
        self.most = max(self.most, self.now)
        if self.now >= self.expected:
            self.full.set()
        try:
            await asyncio.wait_for(self.full.wait(), TOGETHER)
        except TimeoutError:
            pass  # one at a time: the others never come
        finally:
            self.now -= 1


def test_a_worker_takes_its_partitions_at_the_same_time():
    # Five partitions (a plant worker of config/tep.yaml), two producers each: every producer's
    # InitProducerId and every state read is in flight with the others. A loop that took the
    # partitions one after the other would have one step in flight at a time.
    partitions = [TopicPartition(INPUT, p) for p in range(5)]

    async def run() -> tuple[int, int, set[TopicPartition]]:
        fences, reads = Meeting(2 * len(partitions)), Meeting(len(partitions))

        class Producer:
            def __init__(self, **_: Any) -> None:
                pass

            async def start(self) -> None:
                await fences.attend()

            async def stop(self) -> None:
                return None

        async def state(*_: Any) -> StateRecords:
            await reads.attend()
            return StateRecords([], [])

        class Consumer:
            def assignment(self) -> set[TopicPartition]:
                return set(partitions)

            def seek(self, tp: TopicPartition, offset: int) -> None:
                pass

            async def committed(self, tp: TopicPartition) -> int | None:
                return 0

        loop = TransactionalLoop(
            LoopSettings(bootstrap="model:9092", group_id=GROUP, producers=2),
            [INPUT],
            handler_for=Summer,
            state_topic_for=lambda tp: STATE,
            transactional_id_for=lambda tp: f"t-{tp.partition}",
        )
        loop._consumer = Consumer()  # type: ignore[assignment]
        with (
            mock.patch.object(loop_module, "AIOKafkaProducer", Producer),
            mock.patch.object(loop_module, "read_state", state),
        ):
            await loop.on_assigned(partitions)
        assert loop.ready and loop.taken.is_set() and loop.joined_at is not None and loop.taken_at is not None
        return fences.most, reads.most, loop.assignment

    fenced, read, taken = asyncio.run(run())
    assert taken == set(partitions)
    assert fenced == 2 * len(partitions), f"{fenced} producers were starting at once, not all {2 * len(partitions)}"
    assert read == len(partitions), f"{read} states were read at once, not all {len(partitions)}"


class CountingConsumer(FakeConsumer):
    fetches = 0

    async def getmany(self, timeout_ms: int, max_records: int) -> dict[TopicPartition, list[Any]]:
        CountingConsumer.fetches += 1
        return await super().getmany(timeout_ms, max_records)


def test_the_partitions_are_taken_before_the_gate_opens_and_nothing_processed_until_it_does():
    # fedrca.streams.app.Worker gives its loops the reading of the published parameters as their gate:
    # the group is joined and the partitions are taken (producers fenced, state read) while the
    # parameters are read, and the first batch is processed only once they are.
    model = Model({0: [1, 2, 3], 1: [4, 5]}, [], [], [])
    gate = asyncio.Event()
    CountingConsumer.fetches = 0

    async def run() -> None:
        loop = TransactionalLoop(
            LoopSettings(bootstrap="model:9092", group_id=GROUP, producers=2, offset_interval=0.0),
            [INPUT],
            handler_for=Summer,
            state_topic_for=lambda tp: STATE,
            transactional_id_for=lambda tp: f"t-{tp.partition}",
            deadletter_topic_for=lambda tp: f"{DEAD}{tp.partition}",
            start_after=gate.wait,
        )
        task = asyncio.ensure_future(loop.run())
        turns = Turns(task, 20_000, lambda: f"no progress: {model.commits_applied} commits")
        await turns.until(lambda: loop.taken.is_set())
        for _ in range(500):  # the loop is left every chance to fetch and process
            await _REAL_SLEEP(0)
        assert not task.done(), task.exception()
        assert loop.assignment == set(model.inputs)
        assert CountingConsumer.fetches == 0 and model.commits_applied == 0, "processed before the gate opened"
        gate.set()
        await turns.until(lambda: done(model))
        loop.stop()
        await task

    with (
        patched(model),
        mock.patch.object(loop_module, "AIOKafkaConsumer", lambda **kw: CountingConsumer(model, **kw)),
    ):
        asyncio.run(run())
    assert CountingConsumer.fetches > 0
    for partition, values in {0: [1, 2, 3], 1: [4, 5]}.items():
        assert [json.loads(v) for _, v in model.committed_log(OUTPUT, partition)] == expected_outputs(values)


def _state_topic(records: Sequence[tuple[bytes, bytes]]) -> Any:
    """A fake :func:`read_state` over ``records`` (key, value), one offset each; it notes every ``tail`` asked."""
    tails: list[int | None] = []

    async def read(bootstrap: str, topic: str, key: bytes, timeout: float, security: Any = None,
                   tail: int | None = None) -> StateRecords:  # fmt: skip
        tails.append(tail)
        start = 0 if tail is None else max(0, len(records) - tail)
        scan = StateScan()
        for k, value in records[start:]:
            if k == key:
                scan.add(value)
        return scan.result(whole=start == 0)

    read.tails = tails  # type: ignore[attr-defined]
    return read


def test_a_take_over_reads_the_newest_state_records_first_and_further_back_only_when_none_restores():
    # The state topic is shared with another partition, whose records fill its end; partition 0's
    # newest 3 records are of another handler (they do not restore). The newest records read first
    # hold only those 3: the loop reads further back and continues from the newest one that restores,
    # with the 3 dead-lettered, exactly as after reading the whole topic.
    tp = TopicPartition(INPUT, 0)
    mine, other = loop_module._state_key(tp), loop_module._state_key(TopicPartition(INPUT, 1))
    good = [(mine, state_record(0, json.dumps([10 * k, k + 1]).encode())) for k in range(40)]
    filler = [(other, state_record(k, b"[0,0]")) for k in range(2 * STATE_TAIL)]
    bad = [(mine, state_record(0, b'"another handler"')) for _ in range(3)]
    records = good + filler[:STATE_TAIL] + bad + filler[STATE_TAIL : STATE_TAIL + STATE_TAIL // 2]

    def taken_over(read: Any) -> tuple[Any, list[tuple[bytes, str]], int]:
        model = Model({0: [7]}, [], [], [])
        restored: list[Any] = []

        class Noting(Summer):
            def restore(self, state: bytes | None) -> None:
                super().restore(state)
                restored.append(state)

        async def run() -> int:
            loop = TransactionalLoop(
                LoopSettings(bootstrap="model:9092", group_id=GROUP, producers=2),
                [INPUT],
                handler_for=Noting,
                state_topic_for=lambda tp: STATE,
                transactional_id_for=lambda tp: f"t-{tp.partition}",
                deadletter_topic_for=lambda tp: f"{DEAD}{tp.partition}",
            )
            task = asyncio.ensure_future(loop.run())
            await Turns(task, 20_000, lambda: "no progress").until(lambda: done(model))
            offset = loop._tasks[tp].next_offset
            loop.stop()
            await task
            return offset

        with patched(model), mock.patch.object(loop_module, "read_state", read):
            offset = asyncio.run(run())
        outputs = [json.loads(v) for _, v in model.committed_log(OUTPUT, 0)]
        return (restored[-1], outputs, offset), dead_letters(model, 0), len(restored)

    tailed = _state_topic(records)
    (state, outputs, _), letters, _ = taken_over(tailed)
    assert tailed.tails == [STATE_TAIL, 16 * STATE_TAIL], tailed.tails
    assert state == b"[390,40]", state  # the newest record that restores: the 40th
    assert outputs == [[0, 397, 41]], outputs  # offset 0 of the input (the state names offset 40: past it, none)
    whole = _state_topic(records)

    async def whole_read(*args: Any) -> StateRecords:
        return await whole(*args[:5], None)

    (state_whole, outputs_whole, _), letters_whole, _ = taken_over(whole_read)
    assert (state, outputs, letters) == (state_whole, outputs_whole, letters_whole)
    assert [reason for _, reason in letters] == ["bad-state"] * 3


def test_a_take_over_whose_newest_state_restores_reads_only_the_end_of_the_topic():
    tp = TopicPartition(INPUT, 0)
    mine = loop_module._state_key(tp)
    records = [(mine, state_record(0, json.dumps([k, k]).encode())) for k in range(10 * STATE_TAIL)]
    read = _state_topic(records)
    model = Model({0: []}, [], [], [])

    async def run() -> Any:
        loop = TransactionalLoop(
            LoopSettings(bootstrap="model:9092", group_id=GROUP),
            [INPUT],
            handler_for=Summer,
            state_topic_for=lambda tp: STATE,
            transactional_id_for=lambda tp: f"t-{tp.partition}",
        )
        task = asyncio.ensure_future(loop.run())
        await Turns(task, 20_000, lambda: "not taken").until(lambda: loop.taken.is_set())
        handler = loop._tasks[tp].handler
        loop.stop()
        await task
        return handler

    with patched(model), mock.patch.object(loop_module, "read_state", read):
        handler = asyncio.run(run())
    assert read.tails == [STATE_TAIL]
    assert (handler.total, handler.count) == (10 * STATE_TAIL - 1, 10 * STATE_TAIL - 1)


def test_the_read_settles_only_when_a_whole_read_would_decide_the_same():
    partial = StateRecords([(5, 1, b"[1,1]")], [], whole=False)
    assert partial.settles(restored=True)
    assert not partial.settles(restored=False)  # an older candidate may restore
    assert StateRecords([], [], whole=True).settles(restored=False)
    full = StateRecords([(k, k, b"[0,0]") for k in range(STATE_CANDIDATES)], [], whole=False)
    assert full.settles(restored=False)  # a whole read keeps no more candidates than these


@pytest.mark.kafka
def test_reading_the_end_of_a_state_topic_on_the_broker(kafka_broker):
    # committed records only, from inside the log: an aborted transaction's record there is not read
    bootstrap = kafka_broker.bootstrap
    topic = unique_name("statetail")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"cleanup.policy": "compact"})])
    finally:
        admin.close()
    key = b"in:0"
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=unique_name("tail"))
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(topic, key=key, value=b"not a state record")  # refused by a whole read
    producer.commit_transaction()
    for k in range(300):
        producer.begin_transaction()
        producer.send(topic, key=key, value=state_record(k, b"[%d,%d]" % (k, k)))
        producer.commit_transaction()
    producer.begin_transaction()
    producer.send(topic, key=key, value=state_record(999, b"[0,0]"))
    producer.flush()
    producer.abort_transaction()
    producer.close()

    tail = asyncio.run(read_state(bootstrap, topic, key, 60.0, None, STATE_TAIL))
    whole = asyncio.run(read_state(bootstrap, topic, key, 60.0, None))
    assert not tail.whole and whole.whole
    assert tail.candidates[0][1:] == whole.candidates[0][1:] == (299, b"[299,299]")
    # the newest candidates are the same; the refused record at the beginning is read by the whole read only
    assert [c[1:] for c in tail.candidates] == [c[1:] for c in whole.candidates]
    assert tail.refused == [] and len(whole.refused) == 1
    # each transaction is its record and a commit marker: the end holds half as many records as offsets
    assert len(tail.candidates) == STATE_CANDIDATES


def test_the_timeline_counts_from_the_process_start():
    started = process_started()
    assert started is not None  # Linux: /proc
    assert started <= time.time()
    timeline = StartupTimeline()
    assert timeline.origin == pytest.approx(started, abs=1.0)
    timeline.mark("imports", at=timeline.origin + 1.0)
    timeline.mark("parameters read", at=timeline.origin + 3.0)
    timeline.mark("partitions taken", at=timeline.origin + 2.5)  # at the same time as the reading
    timeline.mark("imports", at=timeline.origin + 1.5)  # marked again: the last counts
    assert [(name, round(took, 2), round(at, 2)) for name, took, at in timeline.steps()] == [
        ("imports", 1.5, 1.5),
        ("partitions taken", 1.0, 2.5),
        ("parameters read", 0.5, 3.0),
    ]
    assert timeline.line().startswith("start-up (s since the process started): imports +1.50 = 1.50, ")


def test_a_worker_starts_without_the_heavy_parts_of_scipy():
    # scipy.signal imports scipy.stats and most of scipy: the larger part of a worker's imports. The run
    # command and an RCA worker's runtime import none of them; a plant worker imports scipy.signal on a
    # thread while it joins its groups (fedrca.streams.app.WARM_UP), before its first batch.
    code = (
        "import sys\nfrom fedrca.cli import build_parser\nbuild_parser('run')\n"
        "import fedrca.streams.app\nfrom fedrca.application.site import rca_runtime\n"
        "from fedrca.config import load_config\nrca_runtime(load_config('config/tep.yaml'))\n"
        "print(' '.join(m for m in ('scipy.signal', 'scipy.stats', 'scipy.optimize', 'scipy.ndimage') "
        "if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [], f"imported at a worker's start: {done.stdout}"
    assert WARM_UP["plants"] == ("scipy.signal",)


@pytest.mark.kafka
def test_an_empty_params_topic_is_read_without_a_fetch(kafka_broker, tmp_path):
    # A worker's loops process nothing before its params topic is read to its end; a topic with nothing to read
    # is read at once: its reader does not wait for a fetch (here, one that never returns)
    config = load_config(site_config(tmp_path, unique_name("params")))
    names = SiteNames(config)
    ensure_site_topics(kafka_broker.bootstrap, config, only=[config.topic("params")])

    class NoFetch(agents_module.AIOKafkaConsumer):  # type: ignore[misc]
        async def getmany(self, *args: Any, **kwargs: Any) -> Any:
            await asyncio.Event().wait()

    async def run() -> bool:
        follower = ParamsFollower(kafka_broker.bootstrap, names, None, None, asyncio.Lock())
        task = asyncio.ensure_future(follower.run())
        try:
            await asyncio.wait_for(follower.caught_up.wait(), 30)
        except TimeoutError:
            return False
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        return True

    with mock.patch.object(agents_module, "AIOKafkaConsumer", NoFetch):
        assert asyncio.run(run()), "the empty params topic was read only by a fetch"
