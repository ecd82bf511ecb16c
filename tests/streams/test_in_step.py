"""A backlog of several plants' partitions is worked through in step (``LoopSettings.in_step``), on a real broker.

Every plant's sensor topic holds a backlog before the worker starts, and one plant falls silent
after a few rows. The flags reach the output topic in the order of the log, as the RCA reads
them; fed in that order to the RCA's aligner (:class:`fedrca.streams.aligner.FlagAligner`), no
flag may come too late to be used (the RCA would dead-letter it as ``late`` and judge its row
without the plant), and the silent plant, caught up at its end, holds nobody back. Without the
window a fetch drains one partition's buffer before the next one's and the flags of one plant ran
``max_records`` rows ahead of another's (docs/streams.md, "Exactly once under a backlog").
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from fedrca.contracts import FlagMessage
from fedrca.streams.aligner import FlagAligner
from fedrca.streams.app import plant_window
from fedrca.streams.loop import InputRecord, LoopSettings, Outgoing, Processed, TransactionalLoop
from tests.kafka_broker import unique_name

# seconds of a real broker's time, and make test has no second to spare: make exhaustive; its fast twins in
# make test are step_allowances' doctests (src/fedrca/streams/loop.py) and bench/run.py --smoke, whose
# streams phase counts any RCA dead letter as a problem
pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.exhaustive]

#: the RCA's allowed lateness in this test (rows); far below a fetch's ``max_records`` (2,000), as the
#: default 1,000 is below what one partition's fetch buffer held in bench_streams' backlog
LATENESS = 200
#: rows of backlog per plant, and the rows the silent plant sends before it falls silent
ROWS = 1_200
SILENT_AFTER = 10
PLANTS = ["a", "b", "c", "d"]
SILENT = "e"


class Plant:
    """A plant's handler: one flag per sensor record (its seq), the last seq as progress and state."""

    def __init__(self, tp: TopicPartition, output: str) -> None:
        self.plant = tp.topic.rsplit(".", 1)[-1]
        self.output = output
        self.progress: int | None = None

    def restore(self, state: bytes | None) -> None:
        self.progress = None if state is None else json.loads(state)

    def process(self, records: Sequence[InputRecord]) -> Processed:
        key = self.plant.encode()
        flags = [b'{"plant":"%s","seq":%s}' % (key, r.value) for r in records]
        if records:
            self.progress = int(records[-1].value)
        return Processed([Outgoing(self.output, f, key=key) for f in flags], json.dumps(self.progress).encode())


#: seconds without a record before the silent plant stops holding the others back (LoopSettings.in_step_idle)
IDLE = 2.0


async def _start(
    bootstrap: str, prefix: str, flags: str, plants: Sequence[str], **settings: Any
) -> tuple[TransactionalLoop, asyncio.Future[None], AIOKafkaConsumer]:
    """A plant worker in step (window: half the lateness) over ``plants``' topics, running, and a read_committed
    reader of its flags from the start."""
    loop = TransactionalLoop(
        LoopSettings(
            bootstrap=bootstrap,
            group_id=f"{prefix}-plants",
            in_step=plant_window(LATENESS),
            max_records=2_000,
            **settings,
        ),
        [f"{prefix}.{p}" for p in plants],
        handler_for=lambda tp: Plant(tp, flags),
        state_topic_for=lambda tp: f"{prefix}.state",
        transactional_id_for=lambda tp: f"{prefix}-{tp.topic}",
        step_group_for=lambda tp: prefix,
    )
    worker = asyncio.ensure_future(loop.run())
    reader = AIOKafkaConsumer(
        flags, bootstrap_servers=bootstrap, isolation_level="read_committed", auto_offset_reset="earliest"
    )
    await reader.start()
    return loop, worker, reader


async def _work_through(bootstrap: str, prefix: str, flags: str, expected: int) -> list[dict[str, object]]:
    """Run one worker over the plants' backlog until ``expected`` flags are committed; the flags in log order."""
    loop, worker, reader = await _start(bootstrap, prefix, flags, [*PLANTS, SILENT], in_step_idle=IDLE)
    out: list[dict[str, object]] = []
    try:
        async with asyncio.timeout(120):
            while len(out) < expected:
                if worker.done():
                    worker.result()  # the worker's failure, not a timeout
                for records in (await reader.getmany(timeout_ms=200)).values():
                    out += [json.loads(r.value) for r in records]
    finally:
        await reader.stop()
        loop.stop()
        await worker
    return out


def test_a_backlog_of_several_plants_reaches_the_rca_in_step(kafka_broker):
    bootstrap = kafka_broker.bootstrap
    prefix = unique_name("instep")
    flags = f"{prefix}.flags"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        topics = [f"{prefix}.{p}" for p in [*PLANTS, SILENT]] + [flags]
        admin.create_topics([NewTopic(t, 1, 1) for t in topics])
        admin.create_topics([NewTopic(f"{prefix}.state", 1, 1, topic_configs={"cleanup.policy": "compact"})])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    for seq in range(ROWS):  # row by row, as the plants' edge publishers send them
        for plant in [*PLANTS, SILENT][: 5 if seq < SILENT_AFTER else 4]:
            producer.send(f"{prefix}.{plant}", key=plant.encode(), value=b"%d" % seq)
    producer.flush()
    producer.close()

    out = asyncio.run(_work_through(bootstrap, prefix, flags, ROWS * len(PLANTS) + SILENT_AFTER))

    # exactly once: every (plant, seq) one flag
    copies = Counter((f["plant"], f["seq"]) for f in out)
    assert len(copies) == ROWS * len(PLANTS) + SILENT_AFTER and set(copies.values()) == {1}
    # in step: no flag comes more than the lateness after a newer one of another plant ...
    newest, lead = -1, 0
    for f in out:
        lead = max(lead, newest - int(f["seq"]))  # type: ignore[call-overload]
        newest = max(newest, int(f["seq"]))  # type: ignore[call-overload]
    assert lead <= LATENESS, f"a plant's flags ran {lead} rows ahead of another's (allowed lateness {LATENESS})"
    # ... so the RCA's aligner uses every flag: none late, every row with all its plants (the silent one's
    # rows once it fell silent are judged without it, as they must be)
    aligner = FlagAligner([*PLANTS, SILENT], allowed_lateness=LATENESS)
    statuses: Counter[str] = Counter()
    rows = []
    for f in out:
        new, status = aligner.add(FlagMessage(prefix, str(f["plant"]), 0.0, int(f["seq"]), 0, 0, 1.0, "v"))  # type: ignore[call-overload]
        statuses[status] += 1
        rows += new
    rows += aligner.flush()
    assert statuses == Counter({"buffered": len(out)}), statuses
    assert [r.seq for r in rows] == list(range(ROWS))
    assert all(r.missing([*PLANTS, SILENT]) == (() if r.seq < SILENT_AFTER else (SILENT,)) for r in rows)


#: rows of the test below: a few all plants send, then a burst one plant's source sends before the others'
FIRST = 10
BURST = 1_000
AHEAD = ["a", "b", "c"]


def _lead(flags: Sequence[dict[str, object]]) -> int:
    """Most rows a flag comes after a newer one in ``flags`` (log order): what the RCA's lateness must cover."""
    newest, lead = -1, 0
    for f in flags:
        lead = max(lead, newest - int(f["seq"]))  # type: ignore[call-overload]
        newest = max(newest, int(f["seq"]))  # type: ignore[call-overload]
    return lead


async def _one_source_ahead(bootstrap: str, prefix: str, flags: str) -> tuple[list[dict[str, object]], int]:
    """A live worker, caught up on every plant; then plant a's source sends a burst the others send only once
    the worker has done what it can with it. The flags in log order, and the furthest a's flags got first."""
    window = plant_window(LATENESS)
    loop, worker, reader = await _start(bootstrap, prefix, flags, AHEAD)
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    out: list[dict[str, object]] = []

    async def read_until(done: Callable[[], bool]) -> None:
        while not done():
            if worker.done():
                worker.result()  # the worker's failure, not a timeout
            for records in (await reader.getmany(timeout_ms=100)).values():
                out.extend(json.loads(r.value) for r in records)

    def send(plants: Sequence[str], seqs: range) -> None:
        for seq in seqs:
            for plant in plants:
                producer.send(f"{prefix}.{plant}", key=plant.encode(), value=b"%d" % seq)
        producer.flush()

    try:
        async with asyncio.timeout(120):
            send(AHEAD, range(FIRST))
            await read_until(lambda: len(out) == FIRST * len(AHEAD))
            send(["a"], range(FIRST, FIRST + BURST))
            # what the worker makes of a's burst alone: a held back a window past the others (paused),
            # or a's every flag committed (nothing held it back)
            a = [tp for tp in loop.assignment if tp.topic.endswith(".a")]
            ran = lambda: max(int(f["seq"]) for f in out if f["plant"] == "a")  # type: ignore[call-overload]  # noqa: E731
            await read_until(
                lambda: ran() == FIRST + BURST - 1 or (ran() >= FIRST + window - 2 and set(a) <= loop.held)
            )
            furthest = ran()
            send(["b", "c"], range(FIRST, FIRST + BURST))
            await read_until(lambda: len(out) == (FIRST + BURST) * len(AHEAD))
    finally:
        producer.close()
        await reader.stop()
        loop.stop()
        await worker
    return out, furthest


def test_a_plant_whose_source_runs_ahead_waits_for_the_others_on_the_flags_topic(kafka_broker):
    """Every plant of the worker holds the others back, caught up or not: the flags of a plant whose
    source sends far ahead of the others' stay within the window of theirs in the log, so the RCA
    uses every flag whatever the timing. Without it a caught-up plant held nobody back (nor did one
    the fetcher believed caught up, its last answer stale: every plant of a busy worker at once) and
    one plant's flags ran a whole burst ahead (issue 32's benchmark: 1,500 rows, 2,338 late flags)."""
    bootstrap = kafka_broker.bootstrap
    prefix = unique_name("ahead")
    flags = f"{prefix}.flags"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(t, 1, 1) for t in [*(f"{prefix}.{p}" for p in AHEAD), flags]])
        admin.create_topics([NewTopic(f"{prefix}.state", 1, 1, topic_configs={"cleanup.policy": "compact"})])
    finally:
        admin.close()

    out, furthest = asyncio.run(_one_source_ahead(bootstrap, prefix, flags))

    copies = Counter((f["plant"], f["seq"]) for f in out)
    assert len(copies) == (FIRST + BURST) * len(AHEAD) and set(copies.values()) == {1}
    window = plant_window(LATENESS)
    # a went a window past the others' committed flags (seq FIRST - 1), no further, before they came
    assert furthest < FIRST - 1 + window + 1, f"plant a ran to seq {furthest} before the others' rows came"
    assert _lead(out) < window, f"a plant's flags ran {_lead(out)} rows ahead of another's (window {window})"
    aligner = FlagAligner(AHEAD, allowed_lateness=LATENESS)
    statuses = Counter(
        aligner.add(FlagMessage(prefix, str(f["plant"]), 0.0, int(f["seq"]), 0, 0, 1.0, "v"))[1] for f in out
    )  # type: ignore[call-overload]
    assert statuses == Counter({"buffered": len(out)}), statuses
