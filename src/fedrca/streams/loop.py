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
import contextvars
import json
import logging
import math
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import KafkaError, KafkaTimeoutError, ProducerFenced

from fedrca.contracts.bounds import parse_json, short
from fedrca.contracts.deadletter import DeadLetterReason, DeadLetterStage, deadletter_record
from fedrca.exceptions import MessageError

__all__ = [
    "BatchTimes",
    "InputRecord",
    "LoopSettings",
    "Outgoing",
    "PartitionHandler",
    "Processed",
    "Repair",
    "StateRecords",
    "StateScan",
    "TransactionalLoop",
    "leave_on_stop",
    "parse_state_record",
    "read_compacted_checked",
    "read_state",
    "state_record",
    "step_allowances",
    "within_allowance",
]

log = logging.getLogger("fedrca.streams")

_T = TypeVar("_T")
_K = TypeVar("_K")


#: Turns of the event loop between the handlers of two partitions of a fetch (see TransactionalLoop.run)
IO_TURNS = 4


def step_allowances(
    progress: Mapping[_K, int | None],
    groups: Mapping[_K, Hashable],
    waiting: Iterable[_K],
    window: int,
    behind: Mapping[_K, int | None] | None = None,
) -> dict[_K, int | None]:
    """How many records each partition may take in the next fetch to stay within ``window`` of its group.

    ``progress`` is each partition's position in the unit its outputs are aligned by downstream (a
    plant's last processed seq; None: not known yet), ``groups`` puts the partitions whose outputs
    meet downstream together (a site's plants), ``waiting`` are the partitions that count as a
    reference (:class:`TransactionalLoop`: every one that is not idle), ``behind`` (default:
    ``progress``) what a partition counts as when it is the reference (what its committed outputs
    reached). A group's reference is the least of ``behind`` among its waiting partitions; a
    partition may get at most ``window`` past it:

        allowance[p] = reference(group(p)) + window - progress[p]

    (<= 0: the partition waits). A partition that is not waiting holds nobody back; every partition
    of a group without a reference is unbounded (None). One whose progress is not known yet
    (nothing processed) is no reference either and takes at most ``window`` records, as the
    reference itself may. While a waiting partition has processed records but has none committed
    yet (``behind`` None: its first transaction is in flight) its group's reference is not known:
    the partitions of known progress wait (0) until it is.

    Examples
    --------
    >>> step_allowances({"a": 900, "b": 100, "c": 350, "d": None}, dict.fromkeys("abcd", 0), "abcd", 500)
    {'a': -300, 'b': 500, 'c': 250, 'd': 500}
    >>> step_allowances({"a": 900, "b": 100}, {"a": 0, "b": 0}, ["a"], 500)  # b is idle: a is the reference
    {'a': 500, 'b': 1300}
    >>> step_allowances({"a": 900, "b": 100}, {"a": 0, "b": 1}, "ab", 500)  # two groups: each its own reference
    {'a': 500, 'b': 500}
    >>> step_allowances({"a": 900, "b": None}, {"a": 0, "b": 0}, [], 500)  # all idle: no bound but the first
    {'a': None, 'b': 500}
    >>> step_allowances({"a": 90, "b": 20, "c": None}, dict.fromkeys("abc", 0), "abc", 500, {"a": 80, "b": None})
    {'a': 0, 'b': 0, 'c': 500}
    """
    reference: dict[Hashable, int] = {}
    pending: set[Hashable] = set()
    behind = progress if behind is None else behind
    for key in waiting:
        at = behind.get(key)
        group = groups[key]
        if at is not None:
            if group not in reference or at < reference[group]:
                reference[group] = at
        elif progress.get(key) is not None:
            pending.add(group)
    out: dict[_K, int | None] = {}
    for key, at in progress.items():
        if groups[key] in pending:
            out[key] = window if at is None else 0
            continue
        ref = reference.get(groups[key])
        # allowance = reference + window - progress: how far it may go before it is window ahead
        out[key] = window if at is None else None if ref is None else ref + window - at
    return out


def within_allowance(records: list[_T], allowance: int | None) -> list[_T]:
    """The records of one partition's fetch that its allowance lets it take (None: all; <= 0: none).

    The fetcher hands over what it buffered, up to ``max.partition.fetch.bytes`` per partition, which
    in a backlog is far more rows than a window; a partition never takes more than its allowance in
    one fetch, whatever the fetcher had (:meth:`TransactionalLoop._within` seeks back to the first
    record not taken).

    Examples
    --------
    >>> within_allowance([10, 11, 12, 13], 2)
    [10, 11]
    >>> within_allowance([10, 11], 5), within_allowance([10, 11], None), within_allowance([10, 11], 0)
    ([10, 11], [10, 11], [])
    """
    if allowance is None or len(records) <= allowance:
        return records
    return records[: max(0, allowance)]


class InputRecord(NamedTuple):
    """One consumed record, as a handler sees it (a named tuple: one is built per record of every batch)."""

    offset: int
    key: bytes | None
    value: bytes
    timestamp_ms: int


class Outgoing(NamedTuple):
    """One record to produce in the batch's transaction (partition 0 unless given; a named tuple: a plant worker
    builds one per flag)."""

    topic: str
    value: bytes | None  # None: a tombstone (a compacted topic's key deleted)
    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()
    partition: int = 0


@dataclass(frozen=True)
class Processed:
    """What a handler made of a batch: records to produce and its state after the batch (JSON bytes)."""

    outputs: list[Outgoing] = field(default_factory=list)
    state: bytes = b"null"


@dataclass(frozen=True)
class BatchTimes:
    """When a committed batch passed the points of its way (wall clock, seconds since the epoch).

    Attributes
    ----------
    fetched : the fetch that returned the batch completed
    processed : the handler returned its outputs
    committed : the batch's transaction committed
    quiet : the batch had no output: its state was committed by a later batch's transaction
        (``LoopSettings.defer_quiet``), at ``committed``
    """

    fetched: float
    processed: float
    committed: float
    quiet: bool = False


class PartitionHandler(Protocol):
    """The work on one input partition; pure (no Kafka), driven by :class:`TransactionalLoop`."""

    def restore(self, state: bytes | None) -> None:
        """Continue from the state of the last committed batch (None: the partition was never processed)."""

    def process(self, records: Sequence[InputRecord]) -> Processed:
        """Process a batch in offset order; return the outputs and the state after it."""


# A handler may also have ``async def load(bootstrap, timeout, security) -> None``: the loop awaits it
# after fencing the partition's producers and before ``restore``, so a handler whose state spans
# more than one record (a plant's history, fedrca.streams.agents.PlantAgent) reads its other
# committed records back exactly when it reads its state.
# And a ``progress`` attribute (int | None, read after restore and after every batch): how far the
# partition's outputs have got in the unit they are aligned by downstream (PlantAgent: the plant's
# last processed seq), which ``LoopSettings.in_step`` keeps the partitions of a group within.


@dataclass(frozen=True)
class LoopSettings:
    """How a loop talks to Kafka: connection, and the latency/throughput policy.

    The policy is explicit rather than the clients' defaults (which are tuned for
    throughput): a fetch returns as soon as any record is there (``fetch.min.bytes``
    1), and a partition's outputs leave in one transaction as soon as its batch is
    processed (producer ``linger.ms`` 0: the batch *is* the linger). A batch is what
    one fetch returned, up to ``max_records`` over all partitions and
    ``max_partition_bytes`` per partition, so batches grow with the backlog (fewer
    transactions per message under load) and stay small when records trickle in
    (each is committed at once). The transactions of the partitions of one fetch are
    committed concurrently (each partition has its own producer), so a fetch costs
    about one transaction's round trips however many partitions it holds.

    Attributes
    ----------
    bootstrap : ``host:port``
    group_id : the consumer group (offsets are committed for it inside the transactions)
    client_id : names the worker in the broker's logs and the group
    max_records : most records taken per fetch (over all partitions)
    max_partition_bytes : most bytes a fetch takes from one partition (``max.partition.fetch.bytes``)
    in_step : with handlers that report their ``progress``, most the partitions of a step group may be
        apart (in the handlers' unit: a plant's seq) before the one ahead waits (None: no bound); see
        :class:`TransactionalLoop`, "In step"
    in_step_idle : seconds a partition may go without its fetch position moving (while it is not held
        back) before it stops holding the others of its group back: its source is silent, or its records
        cannot be read; it holds them back again once its position moves
    fetch_wait : seconds a fetch may wait when no record is there (``getmany`` and the broker's
        ``fetch.max.wait.ms``); it bounds the idle polling, not the latency of a record that is there
    linger : seconds a producer waits to fill a record batch (``linger.ms``; 0: the batch is sent
        when the transaction commits)
    fetch_interval : least seconds between the starts of two fetches that returned records: records that
        arrive sooner wait in the fetcher for the next batch (0: a fetch as soon as the batch before it is
        handed to its transactions). Records that trickle in then make fewer, larger batches, and each
        batch is a transaction per partition: fewer transactions cost the worker and the broker less CPU,
        and each record waits up to this long more (docs/streams.md, "Batch size, transaction rate and
        latency"; ``tests/streams/test_loop.py::test_fetch_interval_spaces_the_batches``)
    retry_backoff : seconds a client waits before retrying a request the broker could not serve
        yet (``retry.backoff.ms``; the library's 0.1 s would land in the latency's tail)
    session_timeout : seconds after which the broker declares a silent worker dead
    group_instance_id : the member's static name in its group (KIP-345; None: a dynamic member). A
        member started again under the same name within the session timeout takes its partitions back
        at once, without waiting for the broker to declare the dead one gone and without a rebalance of
        the others; a member that stops (cleanly or by an error) leaves the group as a dynamic one does
        (:func:`leave_on_stop`). Two live members of one name are refused: the broker fences the older
        (``FENCED_INSTANCE_ID``), so the name must be unique in the group (``tests/streams/test_static_member.py``)
    transaction_timeout : seconds before the broker aborts an open transaction of a dead worker
    request_timeout : seconds a broker request may take before it is retried or fails
    restore_timeout : seconds reading a partition's state back may take before the task is retried
    offset_interval : seconds between two commits of a partition's consumer-group offset inside its
        batches' transactions (0: with every batch). The offset is for lag monitoring only (the state
        names where to resume), and committing it costs a transaction two more round trips
        (``AddOffsetsToTxn``, ``TxnOffsetCommit``); a fetch that finds no record commits whatever
        offsets are still pending, so an idle group's offsets are exact
    producers : transactional producers per partition, used in turn (see :class:`TransactionalLoop`)
    defer_quiet : seconds a partition's batches that produced no output (no record but the state) may wait
        uncommitted, their state carried by the partition's next transaction (0: every batch commits at
        once); see :class:`TransactionalLoop`, "Quiet batches"
    handler_thread : run the handlers on a thread of their own (one at a time, in the same order), so the
        event loop keeps the transactions in flight moving with the broker while a batch is processed
        (see :class:`TransactionalLoop`, "Handlers off the event loop"); False (the default): on the
        event loop. Off by default: alone on 2 cores the thread gave the same produce -> verdict p99 and
        cost the plant worker about 19 % more CPU per message (docs/streams.md, the A/B of
        ``python bench/run.py --repeat 3 streams``); on a CPU-starved host it halved a transaction's time
    security : extra client keyword arguments (SASL / TLS), the same for every client
    """

    bootstrap: str
    group_id: str
    client_id: str = "fedrca"
    max_records: int = 10_000
    max_partition_bytes: int = 1 << 20
    fetch_wait: float = 0.02
    linger: float = 0.0
    fetch_interval: float = 0.0
    retry_backoff: float = 0.02
    session_timeout: float = 10.0
    group_instance_id: str | None = None
    transaction_timeout: float = 60.0
    request_timeout: float = 30.0
    restore_timeout: float = 60.0
    offset_interval: float = 1.0
    producers: int = 2
    defer_quiet: float = 0.0
    handler_thread: bool = False
    in_step: int | None = None
    in_step_idle: float = 30.0
    security: Mapping[str, Any] = field(default_factory=dict)


def state_record(offset: int, state: bytes) -> bytes:
    """The value a task writes to its state topic: the next input offset and the handler's state.

    Examples
    --------
    >>> state_record(12, b'{"a":1}')
    b'{"offset":12,"state":{"a":1}}'
    """
    return b'{"offset":%d,"state":%s}' % (offset, state)


#: The head of every state record a task writes (:func:`state_record`).
_STATE_HEAD = re.compile(rb'\{"offset":([0-9]{1,18}),"state":')
#: State records of a key kept as candidates while a state topic is read (newest last): when the newest
#: cannot be restored, the one before it is tried.
STATE_CANDIDATES = 16
#: Deepest JSON nesting of a state record (a handler's state: detector, filter, scorers, window).
STATE_DEPTH = 32


@dataclass(frozen=True)
class StateRecords:
    """What a partition's state topic holds for its key.

    Attributes
    ----------
    candidates : (position, next offset, handler state JSON) of the newest records that have the
        form of a state record, newest first (at most :data:`STATE_CANDIDATES`); position counts
        the key's records read from 0, oldest first
    refused : (position, raw value, why) of the records read under the key that are not state records
    read : records of the topic read to find them (every key's)
    """

    candidates: list[tuple[int, int, bytes]]
    refused: list[tuple[int, bytes, MessageError]]
    read: int = 0

    def refused_after(self, position: int) -> list[tuple[bytes, MessageError]]:
        """The refused records newer than ``position`` (the state a task continues from, -1: none).

        Older ones were refused when the task was taken over after them (a rebalance reads the
        topic again): they are dead-lettered once, by the first owner that read them.
        """
        return [(raw, exc) for at, raw, exc in self.refused if at > position]


def parse_state_record(raw: bytes) -> tuple[int, bytes]:
    """``(next offset, handler state JSON)`` of a state record; :class:`MessageError` (``bad-state``, ...) otherwise.

    Examples
    --------
    >>> parse_state_record(state_record(12, b'{"a":1}'))
    (12, b'{"a":1}')
    >>> parse_state_record(b'{"offset":"x"}')
    Traceback (most recent call last):
    ...
    fedrca.exceptions.MessageError: bad-state: not a state record (it starts with b'{"offset":"x"}')
    """
    if not isinstance(raw, bytes) or not _STATE_HEAD.match(raw):
        head = raw[:40] if isinstance(raw, bytes) else type(raw).__name__
        raise MessageError(DeadLetterReason.BAD_STATE, f"not a state record (it starts with {head!r})")
    doc = parse_json(raw, "a state record", max_depth=STATE_DEPTH)
    if not isinstance(doc, dict) or set(doc) != {"offset", "state"} or type(doc["offset"]) is not int:
        raise MessageError(DeadLetterReason.BAD_STATE, "a state record is an object of 'offset' and 'state' only")
    return doc["offset"], json.dumps(doc["state"], separators=(",", ":")).encode()


class StateScan:
    """The state records of one key, read oldest first: :meth:`add` each, then :meth:`result`.

    Memory stays bounded however long the topic is: a record of the state's form is only
    kept among the newest :data:`STATE_CANDIDATES`; the newest are parsed whole at the end.
    """

    def __init__(self) -> None:
        self._kept: deque[tuple[int, bytes]] = deque(maxlen=STATE_CANDIDATES)
        self._refused: list[tuple[int, bytes, MessageError]] = []
        self._position = -1
        self.read = 0  # records of the topic seen (every key's), counted by the reader

    @property
    def full(self) -> bool:
        """Whether :data:`STATE_CANDIDATES` records of the state's form were read: older ones change no result."""
        return len(self._kept) == self._kept.maxlen

    def add(self, value: bytes | None) -> None:
        """One record under the key (a tombstone's value is None)."""
        self._position += 1
        if isinstance(value, bytes) and _STATE_HEAD.match(value):
            self._kept.append((self._position, value))  # the form only (cheap); parsed whole in result()
            return
        try:
            parse_state_record(value)  # type: ignore[arg-type]
        except MessageError as exc:
            self._refused.append((self._position, value or b"", exc))

    def result(self) -> StateRecords:
        """The candidates, newest first, and every refused record."""
        candidates = []
        refused = list(self._refused)
        for position, raw in reversed(self._kept):
            try:
                candidates.append((position, *parse_state_record(raw)))
            except MessageError as exc:
                refused.append((position, raw, exc))
        return StateRecords(candidates, sorted(refused, key=lambda r: r[0]), self.read)


#: Offsets from its end a state topic is first read back over (:func:`read_state`), four times more each
#: time it holds fewer than :data:`STATE_CANDIDATES` state records of the key
STATE_WINDOW = 4 * STATE_CANDIDATES

#: Bytes a read of a state or history topic takes per fetch (``max.partition.fetch.bytes``; the clients' 1 MiB
#: default makes a take-over one round trip per MiB of the uncleaned segments it reads back).
SCAN_FETCH_BYTES = 4 << 20


async def read_state(
    bootstrap: str, topic: str, key: bytes, timeout: float, security: Mapping[str, Any] | None = None
) -> StateRecords:
    """The committed state records under ``key`` in partition 0 of ``topic``: candidates and refused ones.

    Reads committed records only, up to the last stable offset, so a transaction that
    was aborted (or fenced) never comes back as state. A record under the key that does
    not have the form of a state record (:func:`parse_state_record`; anyone who can write
    the topic can write one) is refused, never used: the one before it is.

    Reads from the end back: the last :data:`STATE_WINDOW` offsets first, four times as many
    each time they hold fewer than :data:`STATE_CANDIDATES` records of the state's form, the
    whole topic at most. The candidates are those of a read of the whole topic, and so is every
    refused record newer than the oldest candidate, however long the topic is: a take-over reads
    a few records, not every state the partition's owners ever wrote (Kafka compacts only closed
    segments, ``fedrca.connectors.names.COMPACTED``; ``tests/streams/test_state_read.py``). The
    refused records older than every candidate are those a first owner read already.

    Raises
    ------
    KafkaError
        When the topic cannot be read within ``timeout`` seconds.
    """
    window = STATE_WINDOW
    deadline = time.monotonic() + timeout
    while True:
        scan = StateScan()

        def visit(record: ConsumerRecord, scan: StateScan = scan) -> None:
            scan.read += 1
            if record.key == key:
                scan.add(record.value)

        whole = await _scan_committed(
            bootstrap, topic, max(0.0, deadline - time.monotonic()), security, visit, f"the state of {topic}", window
        )
        if whole or scan.full:
            return scan.result()
        window *= 4


@dataclass(frozen=True)
class Repair:
    """A key of a compacted topic whose newest value(s) a reader refused: what to dead-letter and re-write.

    ``value`` is the newest value before them that the reader takes (None: none, the key is
    deleted); writing it under ``key`` again makes it the newest, so the refused records are
    dead-lettered once and compaction removes them.
    """

    key: bytes
    value: bytes | None
    refused: tuple[tuple[bytes, MessageError], ...]


async def read_compacted_checked(
    bootstrap: str,
    topic: str,
    timeout: float,
    check: Callable[[bytes, bytes], None],
    security: Mapping[str, Any] | None = None,
) -> tuple[dict[bytes, bytes], list[Repair]]:
    """The newest committed value of every key of a compacted ``topic`` that ``check(key, value)`` accepts.

    Reads committed records only, up to the last stable offset (keys without a value, or whose
    newest value is a tombstone, are left out). A value ``check`` refuses (it raises
    :class:`~fedrca.exceptions.MessageError`; any other exception counts the same) is never
    taken: the newest accepted value before it is, read in a second pass over the refused
    keys only (memory: one value per key, not every version). Returns the values and one
    :class:`Repair` per key with refused values, oldest first
    (``tests/streams/test_drift_kafka.py``: a history topic's poison).

    Raises
    ------
    KafkaError
        When the topic cannot be read within ``timeout`` seconds.
    """

    def judged(key: bytes, value: bytes) -> MessageError | None:
        try:
            check(key, value)
        except MessageError as exc:
            return exc
        except Exception as exc:  # a check is total by contract; anything else refuses the record as well
            return MessageError(DeadLetterReason.UNPROCESSABLE, f"it cannot be read ({_described(exc)})")
        return None

    newest: dict[bytes, tuple[int, bytes | None]] = {}

    def first(record: ConsumerRecord) -> None:
        if record.key is not None:
            newest[record.key] = (record.offset, record.value)

    await _scan_committed(bootstrap, topic, timeout, security, first, topic)
    values: dict[bytes, bytes] = {}
    bad: dict[bytes, int] = {}
    for key, (offset, value) in newest.items():
        if value is None:
            continue
        if judged(key, value) is None:
            values[key] = value
        else:
            bad[key] = offset
    if not bad:
        return values, []
    # per refused key: the newest accepted value below its newest offset, and every refused one after it
    taken: dict[bytes, bytes | None] = dict.fromkeys(bad)
    since: dict[bytes, list[tuple[bytes, MessageError]]] = {key: [] for key in bad}

    def second(record: ConsumerRecord) -> None:
        key = record.key
        if key not in bad or record.offset > bad[key]:
            return
        if record.value is None:
            taken[key], since[key] = None, []
            return
        error = judged(key, record.value)
        if error is None:
            taken[key], since[key] = record.value, []
        else:
            since[key].append((record.value, error))

    await _scan_committed(bootstrap, topic, timeout, security, second, topic)
    repairs = []
    for key in sorted(bad):
        value = taken[key]
        if value is not None:
            values[key] = value
        repairs.append(Repair(key, value, tuple(since[key])))
    return values, repairs


async def _scan_committed(
    bootstrap: str,
    topic: str,
    timeout: float,
    security: Mapping[str, Any] | None,
    visit: Callable[[ConsumerRecord], None],
    what: str,
    last: int | None = None,
) -> bool:
    """Hand every committed record of partition 0 of ``topic``, oldest first up to the last stable
    offset, to ``visit`` (with ``last``, those of the ``last`` offsets before it only); whether the
    topic was read from its beginning. :class:`KafkaError` naming ``what`` after ``timeout`` seconds."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=SCAN_FETCH_BYTES,
        **(security or {}),
    )
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        # the offsets before the partition is assigned: once it is, the fetcher fetches from its beginning (up to
        # SCAN_FETCH_BYTES, before the seek below) and the offsets requests wait behind that fetch
        end = (await consumer.end_offsets([tp]))[tp]
        beginning = (await consumer.beginning_offsets([tp]))[tp]
        consumer.assign([tp])
        start = beginning if last is None else max(beginning, end - last)
        consumer.seek(tp, start)
        deadline = time.monotonic() + timeout
        while await consumer.position(tp) < end:
            if time.monotonic() > deadline:
                raise KafkaError(f"reading {what} took longer than {timeout:.0f} s")
            for record in (await consumer.getmany(tp, timeout_ms=200)).get(tp, []):
                visit(record)
    finally:
        await consumer.stop()
    return start <= beginning


@dataclass
class _Commit:
    """One batch's transaction in flight: ``sent`` resolves when its records are in the logs (or it gave
    up before), ``done`` with whether it committed."""

    sent: asyncio.Future[bool]
    done: asyncio.Future[bool]


@dataclass(frozen=True)
class _Claim:
    """A partition's take-over before its handler is restored (:meth:`TransactionalLoop._claim`): its producers
    fenced, its state records and what its handler keeps beside them read back."""

    tp: TopicPartition
    handler: PartitionHandler
    producers: list[AIOKafkaProducer]
    state_topic: str
    key: bytes
    found: StateRecords
    first: int | None  # where it starts without a state record (its group's offset, else its beginning)
    # wall-clock times (s since the epoch) the take-over began, its producers were fenced, its state and the
    # handler's other records were read: logged when it resumes (docs/streams.md, "A hot standby")
    times: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)


@dataclass
class _Task:
    tp: TopicPartition
    handler: PartitionHandler
    producers: list[AIOKafkaProducer]
    state_topic: str
    state_key: bytes
    next_offset: int  # the next input offset to process: everything below is committed or in flight
    turn: int = 0  # the producer of the next transaction
    offset_pending: bool = False  # next_offset is not yet the group's committed offset
    offset_committed: float = -math.inf  # time.monotonic() of the last offset commit
    inflight: deque[_Commit] = field(default_factory=deque)  # oldest first, at most one per producer
    # the handler's state after the last batch handed to a transaction (None: never processed); a batch
    # whose handler raised is processed again record by record from it (_isolate)
    state: bytes | None = None
    broken: bool = False  # a transaction failed: the partition is taken over again, later ones give up
    # the handler's progress after the last batch whose transaction committed (LoopSettings.in_step)
    committed: int | None = None
    # quiet batches processed and not yet committed (LoopSettings.defer_quiet), oldest first, with their
    # times (fetched, processed), and time.monotonic() when the first of them was processed
    quiet: list[tuple[Sequence[InputRecord], float, float]] = field(default_factory=list)
    quiet_since: float = math.inf

    def settle(self) -> None:
        """Forget the commits that are over."""
        while self.inflight and self.inflight[0].done.done():
            self.inflight.popleft()

    @property
    def busy(self) -> bool:
        """Every producer holds a transaction in flight."""
        self.settle()
        return len(self.inflight) >= len(self.producers)


class TransactionalLoop:
    """Consume a role's topics in a consumer group; process and commit each partition's batches transactionally.

    Parameters
    ----------
    settings : connection and batching settings
    topics : the input topics (every partition of them is shared among the group's workers)
    handler_for : builds the handler of a partition (called on assignment)
    state_topic_for : the compacted topic (partition 0) a partition's state goes to
    transactional_id_for : the fixed transactional id of a partition (unique in the deployment)
    on_batch : called after every committed batch with (partition, records, :class:`BatchTimes`)
    lock : held while a batch is processed and committed, while partitions are let go and while a
        partition taken over has its handler restored and becomes a task (not while its state is read
        back); share it with anything that must not change the handlers inside a batch
    deadletter_topic_for : where a partition's refused records go: state records that are not the
        task's (:func:`read_state`) and input records whose processing failed (None: logged only)
    stage : the :class:`~fedrca.contracts.DeadLetterStage` of those dead letters
    on_refused : called with (partition, stage, error) for every record refused here (metrics)
    step_group_for : the step group of a partition (``settings.in_step``; None: all partitions are one group)
    start_after : awaited before the first fetch (None: nothing): the loop joins its group and takes its
        partitions meanwhile, and processes nothing before it is over (the worker's published parameters
        are read, :class:`fedrca.streams.app.Worker`)

    A batch whose handler raises is not the end of the worker: the handler is restored to the
    state of the last committed batch and the batch is processed again record by record; a record
    that still fails is dead-lettered (``unprocessable``, the exception named) and the others are
    processed as they would have been (``tests/streams/test_loop.py``).

    In step
    -------
    With ``settings.in_step`` (a window ``W``) the partitions of one step group
    (``step_group_for``: a site's plants, whose flags the RCA aligns) are kept in step by flow
    control at the consumer: before each fetch the loop reads every handler's ``progress`` and asks
    :func:`step_allowances` how many records each partition may take to stay within ``W`` of the
    *committed* progress of the group's furthest-behind partition (the progress after its last
    committed batch). Every partition of the group is a reference, caught up or not, unless its
    fetch position has not moved for ``in_step_idle`` seconds while it may go (a silent source:
    compare Kafka Streams' ``max.task.idle.ms``). A partition with no allowance is paused
    (``AIOKafkaConsumer.pause``: the fetcher asks the broker nothing for it) until it is ``W / 2``
    behind the window's edge again; the others take at most their allowance in this fetch,
    furthest behind first, and never more (:func:`within_allowance`: what the fetcher handed over
    beyond it is given back by a seek). So a flag of seq ``s`` is processed only once every
    partition of its group that is not idle has committed its flags up to ``s - W`` or further:
    in the output topic's log order (what a ``read_committed`` reader sees) no flag of the group
    comes more than ``W`` rows after a newer one, whatever the order in which the transactions
    reach the log, and through aborted ones (a partition taken over again resumes from what it
    committed). When no partition is paused and every one has less left to read than its allowance
    as far as the fetcher knows (the live stream: the usual case) the fetch is the one ``getmany``;
    the work is per fetch and per partition, never per record: the batches stay whole and the
    handlers vectorised.

    Without it a fetch takes what the fetcher buffered, partition by partition, and the
    transactions of different partitions reach the output topic in any order: under a backlog one
    plant's flags ran thousands of rows ahead of another's and the RCA judged those rows without
    the plants behind (``tests/streams/test_in_step.py``).

    Handlers off the event loop
    ---------------------------
    A batch's transaction is a chain of requests, each sent when the broker answered the one
    before (``AddPartitionsToTxn``, ``Produce``, ``EndTxn``), and the answers are read by the event
    loop. A handler is synchronous: while the handlers of a fetch ran on the event loop (a few
    milliseconds each, tens when a plant re-baselines) every transaction in flight waited for them
    at each of its steps, and the next fetch waited for those transactions. With
    ``settings.handler_thread`` the handlers run on one thread of their own, one batch at a time and
    in the same order (the loop awaits each one, holding ``lock``), while the event loop reads the
    broker's answers and sends the next requests. Nothing else changes: a batch is processed from
    the state its predecessor left, its transaction is started when its handler returned, and a
    partition whose earlier transaction failed while its batch was processed has that batch
    dropped uncommitted (it is taken over again from what is committed, as before)
    (``tests/streams/test_loop.py::test_a_batch_processed_while_an_earlier_transaction_fails_is_dropped``).

    Quiet batches
    -------------
    Most batches of the RCA's flags release no verdict: their only output would be the state record,
    and a transaction costs the worker and the broker the same whatever it carries (at 1,000 sensor
    messages/s about a hundred a second, most of them holding nothing but the state). With
    ``settings.defer_quiet`` a batch whose handler returned no output is not committed at once: the
    partition's next transaction carries its state (the state after every batch processed), and its
    offset. The committed outputs, state and offset still describe one prefix of the input: the
    quiet batches added nothing to the outputs, and a worker that dies or loses the partition before
    they are committed leaves a state before them, from which they are processed again, to nothing
    again. A quiet batch waits at most ``defer_quiet`` seconds, idle or not (then its state commits on
    its own), so a restart processes at most that much again; a fetch that finds no record is no reason
    to commit earlier: between two plants' transactions the RCA's fetches often find none
    (``tests/streams/test_loop.py::test_quiet_batches_are_output_exactly_once_whatever_fails``).

    Taking a partition over
    -----------------------
    aiokafka sends no heartbeat while its assignment callback runs (``GroupCoordinator._on_join_complete``
    awaits it before the heartbeat task starts again), and a take-over may outlast the session timeout
    (the state and history read back an hour into a soak did): the broker expired
    the member in its own take-over, it joined again and took its partitions over again, and so on
    (docs/streams.md, "Compacted topics"). So the callback (:meth:`on_assigned`) only pauses the assigned
    partitions (``AIOKafkaConsumer.pause``), starts a task per partition that takes it over
    (:meth:`_own`: its producers fenced, its state and history read back; then, holding ``lock``, its
    handler restored, the consumer sought to the offset its state names, its task made and the partition
    resumed) and returns. The loop fetches on meanwhile (the heartbeats and the fetches that
    ``max.poll.interval`` counts go on); a paused partition hands over no record, and a record of a
    partition without a task is never handled, so no record is processed before its partition's
    take-over is over, and each partition is served as soon as its own take-over is. A revoke cancels
    the take-overs of the revoked partitions and waits for them: a cancelled take-over closes the
    producers it started and made no task (the fencing it did is what any take-over does). In step, a
    group waits while one of its partitions is being taken over (its committed progress is not known
    yet). A partition whose transaction failed is taken over again the same way
    (``tests/streams/test_takeover.py``: a take-over of twice the session timeout leaves the member in
    its group, with one assignment, and every record handled once).
    """

    def __init__(
        self,
        settings: LoopSettings,
        topics: Sequence[str],
        handler_for: Callable[[TopicPartition], PartitionHandler],
        state_topic_for: Callable[[TopicPartition], str],
        transactional_id_for: Callable[[TopicPartition], str],
        on_batch: Callable[[TopicPartition, Sequence[InputRecord], BatchTimes], None] | None = None,
        lock: asyncio.Lock | None = None,
        deadletter_topic_for: Callable[[TopicPartition], str] | None = None,
        stage: DeadLetterStage = DeadLetterStage.PLANT,
        on_refused: Callable[[TopicPartition, DeadLetterStage, MessageError], None] | None = None,
        step_group_for: Callable[[TopicPartition], Hashable] | None = None,
        start_after: Callable[[], Awaitable[Any]] | None = None,
    ) -> None:
        self.settings = settings
        self.topics = list(topics)
        self._handler_for = handler_for
        self._state_topic_for = state_topic_for
        self._transactional_id_for = transactional_id_for
        self._on_batch = on_batch
        self._deadletter_topic_for = deadletter_topic_for
        self._stage = stage
        self._on_refused = on_refused
        self._step_group_for = step_group_for or (lambda tp: None)
        # in step: the partitions paused, and each partition's fetch position with when it last moved
        self._held: set[TopicPartition] = set()
        self._moved: dict[TopicPartition, tuple[int, float]] = {}
        self._tasks: dict[TopicPartition, _Task] = {}
        # the take-overs in progress (class docstring, "Taking a partition over"), and what ended one that
        # no retry handles (a bug, a killed worker), raised by run()
        self._takeovers: dict[TopicPartition, asyncio.Task[None]] = {}
        self._takeover_errors: list[BaseException] = []
        self._commits: list[asyncio.Future[bool]] = []  # the transactions started and not yet looked at
        self._lock = lock or asyncio.Lock()
        self._stopping = asyncio.Event()
        self._batch_fetched = -math.inf  # time.monotonic() when the last fetch that returned records began
        self._consumer: AIOKafkaConsumer | None = None
        self._executor: ThreadPoolExecutor | None = None  # the handlers' thread (settings.handler_thread)
        self.committed_batches = 0
        self.recoveries = 0
        self.ready = False
        # start-up (fedrca.streams.startup): wall-clock times the first assignment began and was taken over
        self.joined_at: float | None = None
        self.taken_at: float | None = None
        self.taken = asyncio.Event()
        self._start_after = start_after

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
            fetch_min_bytes=1,
            max_partition_fetch_bytes=s.max_partition_bytes,
            retry_backoff_ms=max(1, int(s.retry_backoff * 1000)),
            session_timeout_ms=int(s.session_timeout * 1000),
            heartbeat_interval_ms=max(100, int(s.session_timeout * 1000 / 5)),
            rebalance_timeout_ms=int(max(20.0, 2 * s.session_timeout) * 1000),
            request_timeout_ms=int(s.request_timeout * 1000),
            group_instance_id=s.group_instance_id,
            **s.security,
        )
        self._consumer.subscribe(self.topics, listener=_Listener(self))
        if s.handler_thread:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fedrca-handler")
        try:
            await self._run()
        finally:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None

    async def _run(self) -> None:
        assert self._consumer is not None
        await self._consumer.start()
        try:
            if self._start_after is not None:
                # the group is joined and the partitions taken meanwhile (the coordinator's rebalance)
                await _until_either(self._start_after(), self._stopping.wait())
            while not self._stopping.is_set():
                self._raise_failed_commits()
                self._raise_failed_takeovers()
                began = time.monotonic()
                if (rest := self._batch_fetched + self.settings.fetch_interval - began) > 0:
                    # settings.fetch_interval: what arrives meanwhile goes in the next batch (the event loop
                    # keeps the transactions in flight moving with the broker)
                    await asyncio.sleep(rest)
                    began = time.monotonic()
                batch, drawn = await self._fetch()
                # the tasks the records were fetched for (a task taken over again seeks: its records come anew)
                owners = {tp: drawn[tp] if tp in drawn else self._tasks.get(tp) for tp in batch}
                if not batch:
                    # nothing arrived for fetch_wait: commit the offsets the batches left pending (in
                    # the background: the next fetch does not wait for it)
                    async with self._lock:
                        self._commit_quiet(time.monotonic() - self.settings.defer_quiet)
                        self._commit_pending_offsets()
                    continue
                fetched = time.time()
                self._batch_fetched = began
                waiting = self._behind_first(batch)
                while waiting:
                    # a partition whose producers all hold a transaction in flight takes its next batch
                    # when the oldest of them is over (the transactions of a partition commit in input
                    # order); the partitions of the fetch that are free meanwhile do not wait for it
                    # (tests/streams/test_loop.py::test_a_busy_partition_holds_no_other_back).
                    # The wait is outside the lock: a failed transaction takes the lock to take its
                    # partition over again
                    free = [(tp, r) for tp, r in waiting if (owner := owners[tp]) is None or not owner.busy]
                    if not free:
                        busy = [owner.inflight[0].done for tp, _ in waiting if (owner := owners[tp]) is not None]
                        await asyncio.wait(busy, return_when=asyncio.FIRST_COMPLETED)
                        continue
                    waiting = [(tp, r) for tp, r in waiting if (owner := owners[tp]) is not None and owner.busy]
                    async with self._lock:
                        # the handlers run one after the other; each batch's transaction goes on in the
                        # background while the next is processed. Between two partitions the event loop
                        # takes a few turns: the transactions in flight make their next step with the
                        # broker (each answer is a few turns from the socket to the next request)
                        for tp, records in free:
                            task = owners[tp]
                            if task is not None and self._tasks.get(tp) is task and not task.broken and not task.busy:
                                await self._start(task, records, fetched)
                                for _ in range(IO_TURNS):
                                    await asyncio.sleep(0)
                if self.settings.defer_quiet > 0:
                    async with self._lock:
                        self._commit_quiet(time.monotonic() - self.settings.defer_quiet)
            # a clean stop: the quiet batches' state is committed, so whoever takes the partitions does not
            # process them again (the transactions are awaited below)
            async with self._lock:
                self._commit_quiet(math.inf)
        finally:
            self._stopping.set()  # no take-over starts from here on (a transaction that fails meanwhile)
            await self._cancel_takeovers(list(self._takeovers))
            await self._settle(list(self._tasks.values()))
            for commit in self._commits:  # what ended the run was raised; the rest is over with it
                if commit.done() and not commit.cancelled():
                    commit.exception()
            async with self._lock:
                await self._drop(list(self._tasks))
            leave_on_stop(self._consumer)  # a static member that stops leaves its group too
            await self._consumer.stop()

    async def _fetch(
        self,
    ) -> tuple[dict[TopicPartition, list[ConsumerRecord]], dict[TopicPartition, _Task | None]]:
        """The next batch: whatever the fetcher has, up to ``max_records``; in step, within each partition's
        allowance (see the class docstring, "In step"). With it, the task each partition's records were
        drawn for, taken right after its draw: a later draw can wait for a rebalance, which takes the
        partitions over again and seeks them, and the records drawn before are then not the new task's
        (it is not their owner: they are left, and come again from where it seeked)."""
        assert self._consumer is not None
        consumer, s = self._consumer, self.settings
        wait = max(1, int(s.fetch_wait * 1000))
        if s.in_step is None:
            return await consumer.getmany(timeout_ms=wait, max_records=s.max_records), {}
        window = max(1, s.in_step)
        allowance, left = await self._allowances(window)
        # pause what has no allowance, resume what is half a window inside it again (hysteresis: a
        # partition is not paused and resumed for a few records at a time)
        held = {
            tp for tp, a in allowance.items() if a is not None and (a <= 0 or (tp in self._held and 2 * a < window))
        }
        # a partition without a task is paused until its take-over is over, which resumes it (on_assigned)
        paused = (consumer.paused() & set(allowance)) - set(self._takeovers)
        if held - paused:
            consumer.pause(*(held - paused))
        if paused - held:
            consumer.resume(*(paused - held))
        self._held = held
        active = [tp for tp in allowance if tp not in held]
        bounded = {tp: a for tp, a in allowance.items() if a is not None and tp not in held}
        if not held and all((n := left[tp]) is not None and n <= a for tp, a in bounded.items()):
            # the live stream: every partition has less to read than it may take, as far as the fetcher
            # knows (its last stable offsets are those of its last answers: records that came since can
            # be in this getmany), so what a partition got beyond its allowance is given back, and all that a
            # partition taken over meanwhile got (it had no allowance yet: the next fetch gives it one)
            got = await consumer.getmany(timeout_ms=wait, max_records=s.max_records)
            return self._within(got, {**bounded, **{tp: 0 for tp in got if tp not in allowance}}), {}
        # a backlog: each partition takes what it has within its allowance, furthest behind first (one
        # call per partition: the fetcher keeps the rest buffered), and the fetch waits only when none has any
        batch: dict[TopicPartition, list[ConsumerRecord]] = {}
        drawn: dict[TopicPartition, _Task | None] = {}
        budget = s.max_records
        for tp in sorted(active, key=lambda tp: -(bounded.get(tp) or 0)):
            if budget <= 0:
                break
            take = min(budget, bounded.get(tp, budget))
            records = (await consumer.getmany(tp, timeout_ms=0, max_records=take)).get(tp)
            if records:
                batch[tp] = records
                drawn[tp] = self._tasks.get(tp)
                budget -= len(records)
        if batch:
            return batch, drawn
        if not active:
            # everything is held or being taken over: a fetch of nothing (they are all paused; what a partition
            # resumed meanwhile hands over is given back) waits fetch_wait, and it is the poll that
            # max.poll.interval counts, which a take-over may outlast (class docstring, "Taking a partition over")
            idle = await consumer.getmany(timeout_ms=wait, max_records=s.max_records)
            return self._within(idle, dict.fromkeys(idle, 0)), {}
        most = min([s.max_records, *bounded.values()])
        return await consumer.getmany(*active, timeout_ms=wait, max_records=max(1, most)), {}

    def _within(
        self, batch: dict[TopicPartition, list[ConsumerRecord]], allowance: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """``batch`` with every partition cut to its allowance; a partition that was cut seeks back to its
        first record not taken (the fetcher drops what it buffered and fetches it again)."""
        assert self._consumer is not None
        out = {}
        for tp, records in batch.items():
            taken = within_allowance(records, allowance.get(tp))
            if len(taken) < len(records):
                self._consumer.seek(tp, records[len(taken)].offset)
            if taken:
                out[tp] = taken
        return out

    async def _allowances(
        self, window: int
    ) -> tuple[dict[TopicPartition, int | None], dict[TopicPartition, int | None]]:
        """Each task's allowance (:func:`step_allowances`) and how many records it has left to read (None: unknown).

        Every partition of a group is a reference, with what its *committed* outputs have reached
        (``_Task.committed``), unless its fetch position has not moved for ``in_step_idle`` seconds
        (while it may go: a held partition waits because it is ahead); a partition ahead is measured
        by what it has processed (what it will send). So a flag is only processed while every
        partition of its group that is not idle has committed its flags to within the window below
        it, whatever the order in which transactions reach the log, whatever the fetcher knows of the
        partitions' ends, and through aborted transactions (a partition taken over again resumes from
        what it committed) (``tests/streams/test_in_step.py``). While a partition of a group is being taken
        over its committed progress is not known yet: every partition of the group waits (allowance 0) until
        it is (``tests/streams/test_takeover.py``)."""
        assert self._consumer is not None
        consumer = self._consumer
        assigned = consumer.assignment()
        now = time.monotonic()
        progress: dict[TopicPartition, int | None] = {}
        groups: dict[TopicPartition, Hashable] = {}
        left: dict[TopicPartition, int | None] = {}
        committed: dict[TopicPartition, int | None] = {}
        playing = []
        moved = {}
        for tp, task in list(self._tasks.items()):  # a take-over may install a task meanwhile
            if tp not in assigned:
                continue
            at = getattr(task.handler, "progress", None)
            progress[tp] = at if isinstance(at, int) and at >= 0 else None
            committed[tp] = task.committed if task.committed is not None and task.committed >= 0 else None
            groups[tp] = self._step_group_for(tp)
            position = await consumer.position(tp)
            # read_committed: the last stable offset of the fetcher's last answer (the high watermark
            # before the first answer gave it; None before any answer). A hint of what a fetch can
            # take at once, never what decides who is a reference: an answer is stale as soon as a
            # partition has taken what it held, so every partition of a busy group looked caught up at
            # once and none held the others back (issue 32's lead of 1,500 rows)
            end = consumer.last_stable_offset(tp)
            if end is None or end < 0:
                end = consumer.highwater(tp)
            left[tp] = None if end is None else max(0, end - position)
            before = self._moved.get(tp)
            # a paused partition's position does not move because it waits: its clock starts when it may go
            since = now if before is None or before[0] != position or tp in self._held else before[1]
            moved[tp] = (position, since)
            if tp in self._held or now - since < self.settings.in_step_idle:
                playing.append(tp)
        self._moved = moved
        allowance = step_allowances(progress, groups, playing, window, committed)
        taking = {self._step_group_for(tp) for tp in self._takeovers}
        if taking:
            allowance = {tp: 0 if groups[tp] in taking else a for tp, a in allowance.items()}
        return allowance, left

    def _behind_first(
        self, batch: Mapping[TopicPartition, list[ConsumerRecord]]
    ) -> list[tuple[TopicPartition, list[ConsumerRecord]]]:
        """The partitions of a fetch in the order their handlers run: in step, the furthest behind first
        (its outputs reach the log first), else as fetched."""
        if self.settings.in_step is None or len(batch) < 2:
            return list(batch.items())

        def progress(item: tuple[TopicPartition, list[ConsumerRecord]]) -> int:
            task = self._tasks.get(item[0])
            at = None if task is None else getattr(task.handler, "progress", None)
            return at if isinstance(at, int) else -1

        return sorted(batch.items(), key=progress)

    def stop(self) -> None:
        """Ask :meth:`run` to finish after the batch in progress."""
        self._stopping.set()

    @property
    def assignment(self) -> set[TopicPartition]:
        """The partitions this worker currently processes."""
        return set(self._tasks)

    @property
    def held(self) -> set[TopicPartition]:
        """The partitions paused to keep their group in step (``settings.in_step``)."""
        return set(self._held)

    # -- ownership -----------------------------------------------------------------------------
    async def _own(self, tp: TopicPartition) -> None:
        """Take ``tp``: fence earlier producers and read back what it committed (:meth:`_claim`), then, holding
        the lock, restore its handler, seek to its offset, make it a task and resume it (:meth:`_install`)."""
        claim = await self._claim(tp)
        try:
            async with self._lock:
                installed = await self._install(claim)
        except BaseException:
            await self._close(tp, claim.producers)
            raise
        if not installed:
            await self._close(tp, claim.producers)

    async def _claim(self, tp: TopicPartition) -> _Claim:
        """Fence ``tp``'s earlier producers, then read back its state and what its handler keeps beside it."""
        s = self.settings
        transactional_id = self._transactional_id_for(tp)
        producers = [
            AIOKafkaProducer(
                bootstrap_servers=s.bootstrap,
                client_id=f"{s.client_id}-{tp.topic}-{tp.partition}" + (f".{k}" if k else ""),
                transactional_id=transactional_id + (f".{k}" if k else ""),
                enable_idempotence=True,
                acks="all",
                linger_ms=int(s.linger * 1000),
                retry_backoff_ms=max(1, int(s.retry_backoff * 1000)),
                transaction_timeout_ms=int(s.transaction_timeout * 1000),
                request_timeout_ms=int(s.request_timeout * 1000),
                **s.security,
            )
            for k in range(max(1, s.producers))
        ]
        began = time.time()
        try:
            # InitProducerId: every earlier producer of each id is fenced, its open transaction aborted (a
            # decided one completed), before anything is read back; the partition's producers fence at once
            await _together(*(producer.start() for producer in producers))
            fenced = time.time()
            state_topic = self._state_topic_for(tp)
            key = _state_key(tp)
            handler = self._handler_for(tp)
            load = getattr(handler, "load", None)
            # what the handler keeps beside its state (a plant's history topic) is read with the
            # state, before the state is restored
            (found, read), (_, loaded) = await _together(
                _ended(lambda: read_state(s.bootstrap, state_topic, key, s.restore_timeout, s.security)),
                _ended(lambda: load(s.bootstrap, s.restore_timeout, s.security) if load is not None else _nothing()),
            )
            first = None if found.candidates else await self._first_offset(tp)
        except BaseException:
            # a failure or a cancel (a revoke): every producer is closed, one that started halfway as well
            await self._close(tp, producers)
            raise
        return _Claim(tp, handler, producers, state_topic, key, found, first, (began, fenced, read, loaded))

    async def _install(self, claim: _Claim) -> bool:
        """Restore a claimed partition's handler, seek to the offset its state names, make it a task and
        resume it (the caller holds the lock); False, with nothing done, when it is no longer assigned."""
        tp, handler, found = claim.tp, claim.handler, claim.found
        assert self._consumer is not None
        if tp not in self._consumer.assignment():
            return False
        saved, failed = _restore(handler, found)
        refused = [
            (raw, exc, DeadLetterStage.STATE)
            for raw, exc in [*found.refused_after(-1 if saved is None else saved[0]), *failed]
        ]
        if saved is not None:
            offset = saved[1]
        else:  # no state record, or none the handler can continue from (then read now)
            offset = claim.first if claim.first is not None else await self._first_offset(tp)
            if tp not in self._consumer.assignment():
                return False
        # nothing is awaited from here on: the partition is sought, becomes a task and is resumed at once
        self._consumer.seek(tp, offset)
        # offset_pending: the group's offset may lag the state's (an idle fetch commits it)
        task = _Task(tp, handler, claim.producers, claim.state_topic, claim.key, offset, offset_pending=True)
        task.state = None if saved is None else saved[2]
        progress = getattr(handler, "progress", None)
        task.committed = progress if isinstance(progress, int) else None  # what the committed state reached
        self._tasks[tp] = task
        self._consumer.resume(tp)
        began, fenced, read, loaded = claim.times
        log.info(
            "%s: resuming at offset %d (%s; taken over in %.2f s: producers fenced after %.2f s, state read after "
            "%.2f s, the handler's other records after %.2f s)",
            _name(tp), offset, "state restored" if saved else "no state yet", time.time() - began, fenced - began,
            read - began, loaded - began,
        )  # fmt: skip
        if refused:
            log.error("%s: %d record(s) of %s are not its state; skipped", _name(tp), len(refused), claim.state_topic)
            # the partition's first transaction (nothing is in flight yet): later ones follow it
            self._schedule(task, self._dead_letters(tp, claim.state_topic, refused), None, (), 0.0, 0.0)
        return True

    def _dead_letters(
        self, tp: TopicPartition, source: str, refused: Sequence[tuple[bytes, MessageError, DeadLetterStage]]
    ) -> list[Outgoing]:
        """The dead letters of records refused by the loop itself (counted by ``on_refused``)."""
        out = []
        for raw, error, stage in refused:
            if self._on_refused is not None:
                self._on_refused(tp, stage, error)
            if self._deadletter_topic_for is not None:
                value, headers = deadletter_record(raw, error, stage, source)
                out.append(Outgoing(self._deadletter_topic_for(tp), value, headers=tuple(headers)))
        return out

    async def _first_offset(self, tp: TopicPartition) -> int:
        """Where a partition without a state it can continue from starts: its group's offset, else its beginning."""
        assert self._consumer is not None
        committed = await self._consumer.committed(tp)
        return committed if committed is not None else await self._beginning(tp)

    async def _beginning(self, tp: TopicPartition) -> int:
        assert self._consumer is not None
        return int((await self._consumer.beginning_offsets([tp]))[tp])

    async def _drop(self, tps: Iterable[TopicPartition]) -> None:
        for tp in list(tps):
            task = self._tasks.pop(tp, None)
            if task is not None:
                await self._close(tp, task.producers)

    async def _close(self, tp: TopicPartition, producers: Iterable[AIOKafkaProducer]) -> None:
        for producer in producers:
            try:
                await _bounded(producer.stop(), self.settings.request_timeout, "closing its producer")
            except KafkaError as exc:  # a producer that cannot say goodbye is gone anyway
                log.warning("%s: closing a producer failed (%s)", _name(tp), exc)

    async def on_assigned(self, tps: Iterable[TopicPartition]) -> None:
        """Start taking every assigned partition over, and return: the rebalance waits for this call, and
        aiokafka sends no heartbeat meanwhile (class docstring, "Taking a partition over").

        The partitions are taken at the same time: each fences its own producers and reads its own
        state, so a worker of five plants takes them in about the time of one
        (``tests/streams/test_startup.py``)."""
        if self.joined_at is None:
            self.joined_at = time.time()
        assigned = sorted(tps)
        assert self._consumer is not None
        # before anything is awaited: the fetcher asks nothing for them and hands over nothing it holds of them
        self._consumer.pause(*assigned)
        await self._cancel_takeovers([tp for tp in self._takeovers if tp not in assigned])
        await self._settle([task for tp in assigned if (task := self._tasks.get(tp)) is not None])
        async with self._lock:
            await self._drop(assigned)
            for tp in assigned:
                await self._take(tp)
        if not self._takeovers:
            self._taken_all()

    async def on_revoked(self, tps: Iterable[TopicPartition]) -> None:
        """Let go of revoked partitions: their take-overs in progress are cancelled (each closes the producers
        it started and makes no task), their tasks dropped once their transactions in flight are over
        (committed or not)."""
        revoked = list(tps)
        await self._cancel_takeovers(revoked)
        await self._settle([task for tp in revoked if (task := self._tasks.get(tp)) is not None])
        async with self._lock:
            await self._drop(revoked)

    async def _take(self, tp: TopicPartition) -> None:
        """Start taking ``tp`` over (it has no task; the caller holds the lock): pause it and own it in a task
        of its own (:meth:`_take_over`), which resumes it once its handler is restored. Returns at once."""
        await self._cancel_takeovers([tp])
        if self._stopping.is_set() or self._consumer is None or tp not in self._consumer.assignment():
            return
        self._consumer.pause(tp)
        self._takeovers[tp] = asyncio.create_task(self._take_over(tp), name=f"fedrca: taking {_name(tp)} over")

    async def _take_over(self, tp: TopicPartition) -> None:
        """Own ``tp`` (:meth:`_own`), retrying on a broker that does not answer yet (restart, pause): the task
        :meth:`_take` starts. What ends it otherwise (a bug, a killed worker) is raised by :meth:`run`."""
        me = asyncio.current_task()
        delay = 0.2
        try:
            while not self._stopping.is_set():
                try:
                    await self._own(tp)
                    break
                except ProducerFenced:
                    log.warning("%s: fenced while taking it over; the next rebalance decides", _name(tp))
                    break
                except (KafkaError, AssertionError) as exc:
                    # aiokafka 0.14 asserts "Did we not perform bootstrap?" when a producer starts while
                    # its client knows no broker (metadata emptied by a paused broker): retry it like a
                    # broker that does not answer (tools/faults.py, pause runs); any other assertion is a bug
                    if isinstance(exc, AssertionError) and "bootstrap" not in str(exc):
                        raise
                    log.warning("%s: could not take it over yet (%s); retrying in %.1f s", _name(tp), exc, delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 5.0)
                    if self._consumer is not None and tp not in self._consumer.assignment():
                        break
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self._takeover_errors.append(exc)
            return
        finally:
            if self._takeovers.get(tp) is me:
                del self._takeovers[tp]
        if not self._takeovers:
            self._taken_all()

    async def _cancel_takeovers(self, tps: Iterable[TopicPartition]) -> None:
        """Cancel the take-overs of ``tps`` in progress and wait until they are over (:meth:`on_revoked`)."""
        cancelled = [task for tp in list(tps) if (task := self._takeovers.pop(tp, None)) is not None]
        for task in cancelled:
            task.cancel()
        if cancelled:
            await asyncio.gather(*cancelled, return_exceptions=True)

    def _taken_all(self) -> None:
        """No take-over is in progress: the loop is ready; the first time, its partitions are ``taken``."""
        self.ready = True
        if self.taken_at is None:
            self.taken_at = time.time()
            self.taken.set()

    def _raise_failed_takeovers(self) -> None:
        """A take-over that ended with an exception no retry handles (a bug, a killed worker) ends the run."""
        if self._takeover_errors:
            raise self._takeover_errors.pop(0)

    # -- processing ---------------------------------------------------------------------------
    async def _start(self, task: _Task, records: list[ConsumerRecord], fetched: float) -> None:
        """Process a batch and start its transaction on the partition's next producer."""
        # a record below the cursor was processed already (a fetch that raced a seek)
        batch = [InputRecord(r.offset, r.key, r.value, r.timestamp) for r in records if r.offset >= task.next_offset]
        if not batch:
            return
        next_offset = batch[-1].offset + 1
        if self._executor is None:
            processed = self._process(task, batch)
        else:
            # on the handlers' thread: the event loop moves the transactions in flight meanwhile
            context = contextvars.copy_context()
            run = asyncio.get_running_loop().run_in_executor
            processed = await run(self._executor, context.run, self._process, task, batch)
            if task.broken or self._tasks.get(task.tp) is not task:
                # an earlier transaction of the partition failed meanwhile: it is taken over again from
                # what is committed, and this batch comes again
                return
        done = time.time()
        task.next_offset = next_offset
        task.state = processed.state
        now = time.monotonic()
        if not processed.outputs and now - min(task.quiet_since, now) < self.settings.defer_quiet:
            # a quiet batch: its state goes with the partition's next transaction (class docstring, "Quiet batches")
            task.quiet.append((batch, fetched, done))
            task.quiet_since = min(task.quiet_since, now)
            return
        outputs = [
            *processed.outputs,
            Outgoing(task.state_topic, state_record(next_offset, processed.state), key=task.state_key),
        ]
        with_offset = now - task.offset_committed >= self.settings.offset_interval
        self._schedule(task, outputs, next_offset if with_offset else None, batch, fetched, done)

    def _process(self, task: _Task, batch: Sequence[InputRecord]) -> Processed:
        """The handler's outputs and state for ``batch`` (a batch that raises goes record by record)."""
        try:
            return task.handler.process(batch)
        except Exception as exc:
            return self._isolate(task, batch, exc)

    def _schedule(
        self,
        task: _Task,
        outputs: Sequence[Outgoing],
        offset: int | None,
        batch: Sequence[InputRecord],
        fetched: float,
        done: float,
    ) -> None:
        """Start a transaction of ``task`` after the ones in flight (its producer must be free: not ``busy``)."""
        previous = task.inflight[-1] if task.inflight else None
        producer = task.producers[task.turn]
        task.turn = (task.turn + 1) % len(task.producers)
        sent: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        # the quiet batches before this one are committed with it (their state is in this one's)
        quiet, task.quiet, task.quiet_since = task.quiet, [], math.inf
        head = quiet[0][0] if quiet else batch
        first = head[0].offset if head else offset if offset is not None else task.next_offset
        commit = asyncio.ensure_future(self._commit(task, producer, previous, sent, outputs, offset, first))
        task.inflight.append(_Commit(sent, commit))
        if batch and self.settings.in_step is not None:
            progress = getattr(task.handler, "progress", None)
            commit.add_done_callback(lambda f: self._reached(task, f, progress))
        self._commits.append(commit)
        for records, at, processed in quiet:
            commit.add_done_callback(
                lambda f, r=records, t=BatchTimes(at, processed, 0.0, quiet=True): self._committed(task, f, r, t)  # type: ignore[misc]
            )
        if batch:
            commit.add_done_callback(lambda f: self._committed(task, f, batch, BatchTimes(fetched, done, 0.0)))

    @staticmethod
    def _reached(task: _Task, commit: asyncio.Future[bool], progress: Any) -> None:
        """A batch's transaction committed: its partition's committed outputs reached ``progress``."""
        if not commit.cancelled() and commit.exception() is None and commit.result() and isinstance(progress, int):
            task.committed = progress

    def _committed(
        self, task: _Task, commit: asyncio.Future[bool], batch: Sequence[InputRecord], times: BatchTimes
    ) -> None:
        if commit.cancelled() or commit.exception() is not None or not commit.result():
            return
        self.committed_batches += 1
        if self._on_batch is not None:
            self._on_batch(task.tp, batch, BatchTimes(times.fetched, times.processed, time.time(), times.quiet))

    def _raise_failed_commits(self) -> None:
        """A transaction that ended with an exception no recovery handles (a bug, a cancelled worker) ends the run."""
        running = []
        for commit in self._commits:
            if not commit.done():
                running.append(commit)
            elif not commit.cancelled() and commit.exception() is not None:
                raise commit.exception()  # type: ignore[misc]
        self._commits = running

    async def _settle(self, tasks: Sequence[_Task]) -> None:
        """Wait until the transactions in flight of ``tasks`` are over."""
        pending = [c.done for task in tasks for c in task.inflight if not c.done.done()]
        if pending:
            await asyncio.wait(pending)

    def _isolate(self, task: _Task, batch: Sequence[InputRecord], exc: Exception) -> Processed:
        """Process a batch whose handler raised record by record, from the last committed state.

        A record that raises on its own is dead-lettered (``unprocessable``) and the handler goes
        back to the state before it; every other record is processed as in a batch of its own.
        """
        log.error("%s: the batch at offset %d failed (%s); processing it record by record",
                  _name(task.tp), batch[0].offset, _described(exc))  # fmt: skip
        handler, state = task.handler, task.state
        handler.restore(state)
        outputs: list[Outgoing] = []
        refused: list[tuple[bytes, MessageError, DeadLetterStage]] = []
        for record in batch:
            try:
                one = handler.process([record])
            except Exception as failure:
                handler.restore(state)
                error = MessageError(DeadLetterReason.UNPROCESSABLE, f"processing it failed ({_described(failure)})")
                refused.append((record.value, error, self._stage))
                continue
            outputs += one.outputs
            state = one.state
        outputs += self._dead_letters(task.tp, task.tp.topic, refused)
        return Processed(outputs, handler.process([]).state if state is None else state)

    def _commit_quiet(self, before: float) -> None:
        """Start a transaction with the state of every partition whose quiet batches are waiting since
        ``before`` (``time.monotonic()``) or longer and whose producers are not all busy (a later turn looks
        again); it commits the group offset too."""
        for task in list(self._tasks.values()):
            if task.quiet and task.quiet_since <= before and not task.broken and not task.busy:
                assert task.state is not None  # a quiet batch was processed
                state = Outgoing(task.state_topic, state_record(task.next_offset, task.state), key=task.state_key)
                self._schedule(task, [state], task.next_offset, (), 0.0, 0.0)

    def _commit_pending_offsets(self) -> None:
        """Start an offsets-only transaction for every partition whose batches left its group offset behind.

        Only a partition with no transaction in flight is looked at (whether its offset is pending is
        known once its transactions are over; a later idle fetch looks again), and nothing is awaited:
        the fetch loop goes on at once, so records that arrive meanwhile are not held up behind the
        offsets (a batch that comes takes the partition's other producer, pipelined after it).
        """
        for task in list(self._tasks.values()):
            task.settle()
            # a partition with quiet batches waiting is left to _commit_quiet, which commits their state with
            # the offset: an offsets-only transaction would take them as committed without it, and the group
            # would be past records no state record covers (tests/cli/test_limits.py::
            # test_run_rca_worker_at_its_largest_lateness_and_batch: every row pending, every batch quiet)
            if task.offset_pending and not task.inflight and not task.broken and not task.quiet:
                self._schedule(task, [], task.next_offset, (), 0.0, 0.0)

    async def _commit(
        self,
        task: _Task,
        producer: AIOKafkaProducer,
        previous: _Commit | None,
        sent: asyncio.Future[bool],
        outputs: Sequence[Outgoing],
        offset: int | None,
        first: int,
    ) -> bool:
        """Produce ``outputs`` (and commit the group offset ``offset``, unless None) in one transaction,
        after the partition's transaction before it (``previous``).

        A partition's transactions alternate between its producers. A producer's next transaction
        would otherwise wait for the broker to finish writing the markers of its last one (the
        coordinator answers ``CONCURRENT_TRANSACTIONS`` until then, and the client backs off:
        KAFKA-5477); the other producer's starts at once. They are pipelined, never reordered:
        a transaction sends its records once the previous one's are in the logs (so the outputs
        and the state records keep the input order), and commits once the previous one committed
        (so the committed outputs, state and offset always describe a prefix of the input); when
        the previous one did not commit, this one gives up uncommitted (the partition is being
        taken over again from what is committed, which fences this producer and aborts its
        transaction). False when it did not commit: the partition was let go (fenced) or is taken
        over again (a transaction whose outcome is unknown).
        """
        tp = task.tp
        # Every step with the broker is bounded by the transaction timeout: the broker aborts a
        # transaction open longer than that, so a step still waiting then waits for an answer about
        # a transaction that no longer exists. aiokafka's steps can wait forever after a broker
        # pause (send_offsets_to_transaction, as KAFKA-10309 fixed in the Java client); the step
        # that times out is a failed transaction of unknown outcome, handled below like any other
        # (tests/streams/test_loop.py:
        # test_a_transaction_step_that_never_answers_is_given_up_and_the_partition_taken_again).
        bound = self.settings.transaction_timeout
        began = False
        try:
            try:
                if previous is not None and not await previous.sent:
                    return False
                await _bounded(producer.begin_transaction(), bound, "BeginTxn")
                began = True
                futures = await _bounded(_send(producer, outputs), bound, "appending the records")
                await _bounded(asyncio.gather(*futures), bound, "Produce")
            finally:
                if not sent.done():
                    sent.set_result(began and not task.broken)
            if previous is not None and not await previous.done:
                return False  # not committed: the partition is taken over again from what is
            if offset is not None:
                offsets = producer.send_offsets_to_transaction({tp: offset}, self.settings.group_id)
                await _bounded(offsets, bound, "TxnOffsetCommit")
            await _bounded(producer.commit_transaction(), bound, "EndTxn")
        except Exception as exc:
            if task.broken or self._tasks.get(tp) is not task:
                return False  # a transaction before this one failed, or the partition was let go: nothing to do
            task.broken = True
            if isinstance(exc, ProducerFenced):
                log.warning("%s: fenced (another worker took it over); letting go", _name(tp))
                async with self._lock:
                    if self._tasks.get(tp) is task:
                        await self._drop([tp])
                return False
            if not isinstance(exc, KafkaError):
                raise
            # The outcome of the transaction may be unknown (a commit whose answer was lost):
            # take the partition again from what is committed, exactly as a new owner would.
            self.recoveries += 1
            log.warning("%s: batch at offset %d not committed (%s); taking it over again", _name(tp), first, exc)
            async with self._lock:
                if self._tasks.get(tp) is task:
                    await self._drop([tp])
                    if self._consumer is not None and tp in self._consumer.assignment():
                        await self._take(tp)
            return False
        if offset is not None:
            task.offset_committed = time.monotonic()
        task.offset_pending = offset is None
        return True


class _Listener(ConsumerRebalanceListener):
    def __init__(self, loop: TransactionalLoop) -> None:
        self._loop = loop

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self._loop.on_revoked(revoked)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        await self._loop.on_assigned(assigned)


async def _together(*steps: Awaitable[Any]) -> list[Any]:
    """Await ``steps`` at the same time and return their results in order; the first that fails (or a
    cancel) cancels the others, waits for them to end, and is raised."""
    tasks = [asyncio.ensure_future(step) for step in steps]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def _until_either(*steps: Awaitable[Any]) -> None:
    """Await until one of ``steps`` is over (the first to fail raises); the others are cancelled."""
    tasks = [asyncio.ensure_future(step) for step in steps]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _nothing() -> None:
    """A step with nothing to do."""


async def _ended(step: Callable[[], Awaitable[_T]]) -> tuple[_T, float]:
    """The result of the step ``step()`` starts and the wall-clock time (s since the epoch) it was over (the step
    is made when this is awaited: one cancelled before it starts leaves no coroutine never awaited)."""
    return await step(), time.time()


def _restore(
    handler: PartitionHandler, found: StateRecords
) -> tuple[tuple[int, int, bytes] | None, list[tuple[bytes, MessageError]]]:
    """Restore ``handler`` from the newest of ``found``'s candidates it can continue from (from the start when
    none); returns that candidate (None: none) and those newer than it that it could not continue from."""
    failed: list[tuple[bytes, MessageError]] = []
    for position, offset, state in found.candidates:
        try:
            handler.restore(state)
        except Exception as exc:  # a record of the state's form the handler cannot continue from
            error = MessageError(DeadLetterReason.BAD_STATE, f"the handler cannot continue from it ({_described(exc)})")
            failed.append((state_record(offset, state), error))
            continue
        return (position, offset, state), failed
    handler.restore(None)
    return None, failed


async def _bounded(step: Awaitable[_T], seconds: float, what: str) -> _T:
    """Await a step with the broker for at most ``seconds``; :class:`KafkaTimeoutError` names it after that.

    The step is awaited in the calling task under a deadline (``asyncio.timeout``), not wrapped in a
    task of its own as ``asyncio.wait_for`` does on Python 3.11: a transaction takes four such steps,
    and a plant worker makes hundreds of transactions a second.
    """
    try:
        async with asyncio.timeout(seconds):
            return await step
    except TimeoutError:
        raise KafkaTimeoutError(f"{what} had no answer within {seconds:g} s") from None


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


def leave_on_stop(consumer: AIOKafkaConsumer) -> None:
    """Make ``consumer.stop()`` send ``LeaveGroup`` for a static member too (``LoopSettings.group_instance_id``).

    aiokafka's coordinator leaves the group on close only when it has no ``group_instance_id``
    (``GroupCoordinator._maybe_leave_group``, aiokafka 0.12-0.14; :mod:`fedrca.streams.compat`).
    The id has served its purpose once the member has joined, so clearing it on the way out
    leaves the group by member id, which the broker accepts for a static member
    (``tests/streams/test_static_member.py::test_a_named_worker_that_stops_leaves_its_group_at_once``).
    """
    coordinator = getattr(consumer, "_coordinator", None)
    if coordinator is not None and hasattr(coordinator, "_group_instance_id"):
        coordinator._group_instance_id = None


def _state_key(tp: TopicPartition) -> bytes:
    return f"{tp.topic}:{tp.partition}".encode()


def _described(exc: BaseException) -> str:
    """``TypeName: message`` of an exception, short enough for a log line or a dead letter's detail."""
    return f"{type(exc).__name__}: {short(str(exc), 200)}"


def _name(tp: TopicPartition) -> str:
    return f"{tp.topic}[{tp.partition}]"
