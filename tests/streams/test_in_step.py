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
from collections.abc import Sequence

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


async def _work_through(bootstrap: str, prefix: str, flags: str, expected: int) -> list[dict[str, object]]:
    """Run one worker over the plants' backlog until ``expected`` flags are committed; the flags in log order."""
    loop = TransactionalLoop(
        LoopSettings(
            bootstrap=bootstrap, group_id=f"{prefix}-plants", in_step=plant_window(LATENESS), max_records=2_000
        ),
        [f"{prefix}.{p}" for p in [*PLANTS, SILENT]],
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
