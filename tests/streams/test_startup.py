"""A worker's start: what it does at the same time, what it imports, its timeline.

A worker killed and started again serves nothing until it has taken its partitions over
(docs/streams.md, "A worker started again"). These check the behaviour that keeps that short
without touching exactly-once: the partitions are taken at the same time (each fences its own
producers and reads its own state); the published parameters are read while the group is joined
and the partitions taken, and no batch is processed before they are read (an empty params topic
at once); the heavy parts of scipy are not imported at the start; the start-up timeline.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from aiokafka import TopicPartition
from tools.cluster import site_config

from fedrca.config import load_config
from fedrca.connectors.kafka import ensure_site_topics
from fedrca.connectors.names import SiteNames
from fedrca.streams import agents as agents_module
from fedrca.streams import loop as loop_module
from fedrca.streams.agents import ParamsFollower
from fedrca.streams.app import WARM_UP
from fedrca.streams.loop import (
    LoopSettings,
    StateRecords,
    TransactionalLoop,
)
from fedrca.streams.startup import StartupTimeline, process_started
from tests.kafka_broker import unique_name
from tests.streams.offsets import recording_offsets
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
        paused: set[TopicPartition] = set()

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

            def pause(self, *tps: TopicPartition) -> None:
                paused.update(tps)

            def resume(self, *tps: TopicPartition) -> None:
                paused.difference_update(tps)

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
            # the assignment callback returns at once, the partitions paused; each is resumed once it is taken
            assert not loop.taken.is_set() and paused == set(partitions)
            await asyncio.wait_for(loop.taken.wait(), 10 * TOGETHER)
        assert not paused
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


async def _caught_up(follower: ParamsFollower, timeout: float = 30.0) -> bool:
    """Run ``follower`` until it has caught up with its topics (True) or ``timeout`` s passed (False); then stop it."""
    task = asyncio.ensure_future(follower.run())
    try:
        await asyncio.wait_for(follower.caught_up.wait(), timeout)
    except TimeoutError:
        return False
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return True


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
        return await _caught_up(ParamsFollower(kafka_broker.bootstrap, names, None, None, asyncio.Lock()))

    with mock.patch.object(agents_module, "AIOKafkaConsumer", NoFetch):
        assert asyncio.run(run()), "the empty params topic was read only by a fetch"


@pytest.mark.kafka
def test_the_params_follower_asks_its_offsets_before_it_assigns_its_topics(kafka_broker, tmp_path):
    # Once a consumer's partitions are assigned its fetcher keeps a fetch in flight (fetch.max.wait, 0.5 s, on a
    # topic with nothing new), and a seek_to_beginning or an offsets request waits for it: a plant worker's two
    # topics (params, control) held its join about 1 s back. The follower asks where they begin and end first,
    # then assigns and seeks them (no seek_to_beginning), and is positioned and caught up.
    config = load_config(site_config(tmp_path, unique_name("params")))
    names = SiteNames(config)
    ensure_site_topics(kafka_broker.bootstrap, config, only=[config.topic("params"), names.control])
    asked: list[tuple[str, int]] = []

    class Recording(recording_offsets(agents_module.AIOKafkaConsumer, asked)):  # type: ignore[misc]
        async def seek_to_beginning(self, *partitions: Any) -> Any:
            asked.append(("seek_to_beginning", len(self.assignment())))
            return await super().seek_to_beginning(*partitions)

    # a plant runtime whose plant keeps a history: the follower reads the control topic too
    keeping = mock.Mock(processors={"reactor": mock.Mock(keeper=object())})

    async def run() -> bool:
        follower = ParamsFollower(kafka_broker.bootstrap, names, keeping, None, asyncio.Lock())
        return await _caught_up(follower) and follower.positioned.is_set()

    with mock.patch.object(agents_module, "AIOKafkaConsumer", Recording):
        assert asyncio.run(run()), "the follower did not catch up"
    assert sorted(asked) == [("beginning", 0), ("end", 0)], asked
