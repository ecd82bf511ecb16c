"""Fleet peer-to-peer messages over Kafka: one topic per participant (kafka-python).

Participant ``p`` reads only its own topic ``<fleet>.peer.<p>`` (one partition) and
writes each :class:`~fedrca.fleet.consensus.ConsensusMessage` to the topic of
its receiver, keyed by the sender. The bytes are the lossless encoding of
:func:`fedrca.training.messages.pack_arrays` (a JSON header naming session, round,
phase, sender and receiver, then the raw float64 buffers), so a decoded message is
bit-identical to the one sent and is validated again on arrival.

:class:`KafkaPeerTransport` is one participant's end; :func:`run_participant`
drives a participant's protocol generator through it; :func:`kafka_fleet` runs a
whole fleet, one thread per participant, each with its own producer and consumer
(no coordinator: every participant only waits for its neighbours' messages).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterable, Mapping

import numpy as np
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError
from numpy.typing import ArrayLike

from fedrca.connectors.kafka import KafkaOptions, ensure_topics
from fedrca.contracts.binary import pack_arrays, unpack_arrays
from fedrca.contracts.bounds import check_name, short
from fedrca.contracts.deadletter import DeadLetterReason as R
from fedrca.contracts.deadletter import DeadLetterStage, deadletter_record
from fedrca.exceptions import DataError, MessageError
from fedrca.fleet.collabdict import FleetSettings
from fedrca.fleet.consensus import ConsensusMessage, MessageKey, PeerGraph
from fedrca.fleet.model import FleetParticipant, FleetRun, ParticipantResult, Protocol

__all__ = [
    "KafkaPeerTransport",
    "dead_topic",
    "decode_consensus",
    "encode_consensus",
    "ensure_peer_topics",
    "kafka_fleet",
    "peer_topic",
    "run_participant",
]

log = logging.getLogger("fedrca.fleet")

KIND = "fleet-consensus"
#: Largest record on a peer topic (what a participant's consumer fetches from its partition at once).
MAX_PEER_RECORD_BYTES = 16 * 1024 * 1024
#: Largest consensus round number (``consensus.max_rounds`` is at most 10^6, docs/limits.md).
MAX_ROUND = 10**9


def peer_topic(fleet: str, participant: str) -> str:
    """The topic participant ``participant`` of ``fleet`` reads: ``<fleet>.peer.<participant>``."""
    return f"{fleet}.peer.{participant}"


def dead_topic(fleet: str, participant: str) -> str:
    """Where participant ``participant`` puts the records of its topic it refuses: ``<fleet>.dead.<participant>``
    (as long as its peer topic, so every name that makes a peer topic makes this one)."""
    return f"{fleet}.dead.{participant}"


def encode_consensus(msg: ConsensusMessage) -> bytes:
    """Lossless bytes of a consensus message."""
    meta = {
        "session": msg.session,
        "round": msg.round,
        "phase": msg.phase,
        "sender": msg.sender,
        "receiver": msg.receiver,
    }
    return pack_arrays(KIND, meta, {"value": msg.value, "flood": msg.flood})


def decode_consensus(raw: bytes) -> ConsensusMessage:
    """Inverse of :func:`encode_consensus`; MessageError (reason code) on anything malformed.

    Examples
    --------
    >>> m = ConsensusMessage("fit/it0/c1", 3, "average", "a", "b", [1.5, -2.0], [0.25, float("inf")])
    >>> decode_consensus(encode_consensus(m)) == m
    True
    """
    kind, meta, arrays = unpack_arrays(raw, max_bytes=MAX_PEER_RECORD_BYTES, max_depth=4)
    if kind != KIND:
        raise MessageError(R.BAD_TYPE, f"expected a {KIND} message, got {short(kind)}")
    for key in ("session", "round", "phase", "sender", "receiver"):
        if key not in meta:
            raise MessageError(R.BAD_HEADER, f"consensus message lacks '{key}'")
    for key in ("value", "flood"):
        array = arrays.get(key)
        if array is None or array.ndim != 1 or array.dtype.kind not in "iuf":
            raise MessageError(R.BAD_ARRAY, f"consensus message's '{key}' must be a 1-d array of numbers")
    for key in ("session", "sender", "receiver"):
        check_name(meta[key], key)
    if type(meta["round"]) is not int or not 0 <= meta["round"] <= MAX_ROUND:
        raise MessageError(R.BAD_FIELD, f"round must be an integer in 0..{MAX_ROUND}, got {short(meta['round'])}")
    # ConsensusMessage checks the phase, the values and that sender and receiver differ
    return ConsensusMessage(
        meta["session"], meta["round"], meta["phase"], meta["sender"], meta["receiver"], arrays["value"],
        arrays["flood"],
    )  # fmt: skip


def ensure_peer_topics(
    bootstrap: str, fleet: str, names: Iterable[str], timeout: float = 30.0, options: KafkaOptions | None = None
) -> list[str]:
    """Create every participant's topic and dead-letter topic (one partition each) if missing; returns their names.

    Raises
    ------
    DataError
        When the broker cannot be reached or refuses a topic.
    """
    one = {"num_partitions": 1, "replication_factor": 1}
    specs = {topic(fleet, n): one for n in names for topic in (peer_topic, dead_topic)}
    return ensure_topics(
        bootstrap, specs, f"topics of fleet '{fleet}'", timeout, options, client_id="fedrca-fleet-admin"
    )


class KafkaPeerTransport:
    """One participant's end of the fleet on Kafka.

    Parameters
    ----------
    bootstrap : ``host:port`` of a broker
    fleet : the fleet's name (topic prefix)
    me : this participant's name
    timeout : seconds :meth:`collect` waits for its neighbours' messages

    Attributes
    ----------
    sent, received : messages produced and consumed; bytes : value + flood bytes produced
    dead_letters : records of its topic refused (malformed, addressed to another participant, a
        second message for one key): each goes to :func:`dead_topic` with its reason, and the
        participant goes on waiting for the messages it needs
    """

    def __init__(self, bootstrap: str, fleet: str, me: str, timeout: float = 120.0) -> None:
        self.fleet = fleet
        self.me = me
        self.timeout = timeout
        self.sent = 0
        self.received = 0
        self.bytes = 0
        self.dead_letters = 0
        self._buffer: dict[MessageKey, ConsensusMessage] = {}
        try:
            self._producer = KafkaProducer(
                bootstrap_servers=bootstrap, acks=1, linger_ms=0, max_block_ms=int(timeout * 1000)
            )
            self._consumer = KafkaConsumer(
                bootstrap_servers=bootstrap,
                group_id=None,
                enable_auto_commit=False,
                fetch_max_wait_ms=5,
                max_partition_fetch_bytes=MAX_PEER_RECORD_BYTES,
                fetch_max_bytes=64 * 1024 * 1024,
            )
        except KafkaError as exc:
            raise DataError(f"cannot reach the Kafka broker at {bootstrap} ({exc}); is it running?") from None
        tp = TopicPartition(peer_topic(fleet, me), 0)
        self._consumer.assign([tp])
        self._consumer.seek_to_beginning(tp)
        self._key = me.encode()

    def send(self, messages: Iterable[ConsensusMessage]) -> None:
        """Produce each message to its receiver's topic and wait for the broker's acknowledgement."""
        futures = []
        for m in messages:
            if m.sender != self.me:
                raise MessageError(R.BAD_SENDER, f"{self.me} cannot send a message from {m.sender}")
            raw = encode_consensus(m)
            futures.append(self._producer.send(peer_topic(self.fleet, m.receiver), key=self._key, value=raw))
            self.bytes += m.value.nbytes + m.flood.nbytes
        self._producer.flush(timeout=self.timeout)
        for f in futures:
            if f.failed():
                raise DataError(f"{self.me}: a message was not delivered ({f.exception!r}); is the broker running?")
        self.sent += len(futures)

    def collect(self, expected: frozenset[MessageKey]) -> list[ConsensusMessage]:
        """Every expected message (consuming the own topic until they are all in).

        A record that is malformed, addressed to someone else or a second message for one key
        is refused: dead-lettered with its reason (:meth:`_refuse`), never taken.

        Raises
        ------
        DataError
            When they are not all in after ``timeout`` seconds (names what is missing).
        """
        deadline = time.monotonic() + self.timeout
        while not all(k in self._buffer for k in expected):
            if time.monotonic() > deadline:
                missing = sorted(k for k in expected if k not in self._buffer)[:3]
                raise DataError(f"{self.me}: waited {self.timeout:.0f} s for {missing}; is every participant running?")
            for records in self._consumer.poll(timeout_ms=50).values():
                for r in records:
                    try:
                        m = decode_consensus(r.value)
                        if m.receiver != self.me:
                            raise MessageError(R.WRONG_RECEIVER, f"{self.me} got a message for {short(m.receiver)}")
                        if m.key in self._buffer:
                            raise MessageError(R.DUPLICATE, f"{self.me} got {short(m.key, 200)} twice")
                    except MessageError as exc:
                        self._refuse(r.value, exc)
                        continue
                    self._buffer[m.key] = m
                    self.received += 1
        return [self._buffer.pop(k) for k in sorted(expected)]

    def _refuse(self, raw: bytes, error: MessageError) -> None:
        """Dead-letter a refused record of this participant's topic (its reason in the headers)."""
        self.dead_letters += 1
        log.warning("%s: refused a record of %s: %s", self.me, peer_topic(self.fleet, self.me), error)
        value, headers = deadletter_record(raw, error, DeadLetterStage.FLEET, peer_topic(self.fleet, self.me))
        self._producer.send(dead_topic(self.fleet, self.me), key=self._key, value=value, headers=headers)

    def close(self) -> None:
        """Close the producer and the consumer."""
        try:
            self._producer.close(timeout=5)
        finally:
            self._consumer.close()


def run_participant(protocol: Protocol, transport: KafkaPeerTransport) -> ParticipantResult:
    """Drive one participant's protocol over its transport to the end; returns its result."""
    try:
        exchange = next(protocol)
        while True:
            transport.send(exchange.outgoing)
            exchange = protocol.send(transport.collect(exchange.expected))
    except StopIteration as stop:
        result: ParticipantResult = stop.value
        return result


def kafka_fleet(
    bootstrap: str,
    datasets: Mapping[str, ArrayLike],
    settings: FleetSettings,
    graph: PeerGraph | None = None,
    seed: int = 0,
    fleet: str | None = None,
    timeout: float = 120.0,
) -> FleetRun:
    """Run a fleet over Kafka, one thread per participant (same seeds -> same result as in process).

    Parameters
    ----------
    bootstrap : ``host:port`` of the broker
    datasets, settings, graph, seed : as :func:`fedrca.fleet.model.simulate_fleet`
    fleet : topic prefix (default: a fresh ``fleet<hex>`` so runs never share topics)
    timeout : seconds a participant waits for a round's messages

    Raises
    ------
    DataError, MessageError, ModelError
        The first error any participant hit (the others are stopped by their timeouts).
    """
    names = list(datasets)
    graph = graph or PeerGraph.default(len(names))
    name = fleet or f"fleet{uuid.uuid4().hex[:10]}"
    ensure_peer_topics(bootstrap, name, names, timeout=min(timeout, 60.0))
    seeds = np.random.SeedSequence(seed).spawn(len(names))
    participants = [
        FleetParticipant(n, datasets[n], names, graph, settings, seed=int(sq.generate_state(1)[0]))
        for n, sq in zip(names, seeds)
    ]
    transports = {p.name: KafkaPeerTransport(bootstrap, name, p.name, timeout=timeout) for p in participants}
    results: dict[str, ParticipantResult] = {}
    errors: list[BaseException] = []

    def work(p: FleetParticipant) -> None:
        try:
            results[p.name] = run_participant(p.protocol(), transports[p.name])
        except BaseException as exc:  # reported to the caller below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(p,), name=f"fleet-{p.name}", daemon=True) for p in participants]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for tr in transports.values():
            tr.close()
    if errors:
        raise errors[0]
    sent = sum(t.sent for t in transports.values())
    payload = sum(t.bytes for t in transports.values())
    return FleetRun({n: results[n] for n in names}, graph, sent, payload, participants)
