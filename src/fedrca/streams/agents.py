"""The agents of a site's workers: thin handlers between the transactional loop and the runtimes.

* :class:`PlantAgent` (one per plant a worker serves): a sensor batch in, the plant's
  published flags out to ``<site>.flags``, its dead letters to the plant's own
  ``<site>.deadletter.<plant>`` (they hold raw bytes: plant-private), its detector state
  to ``<site>.state.<plant>``; with ``drift.enabled`` the history rows and baselines its
  re-baselining loop changed to the plant's own ``<site>.history.<plant>``, in the same
  transaction, and an operator's pending command applied at the batch's start;
* :class:`RCAAgent`: a flags batch in, verdicts out to ``<site>.verdicts``, dead letters
  (flags: published bits only) to ``<site>.deadletter``, the RCA state to
  ``<site>.state.rca``;
* :class:`ParamsFollower`: tails the compacted ``<site>.params`` topic and offers every
  new artifact to the runtimes (plants hot-swap Theta, the RCA rebuilds its graph and
  flag rates), between two batches; a refused artifact is counted, logged and
  dead-lettered (to the plant's own topic when it is addressed to a plant this worker
  serves, else by the RCA to the site's). With ``drift.enabled`` it also tails
  ``<site>.control`` and hands each plant's newest operator command to the plant runtime.

Each agent is what the loop (:mod:`fedrca.streams.loop`) drives; the work itself is in
:mod:`fedrca.streams.runtime` and the pure cores.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from fedrca.connectors.names import SiteNames
from fedrca.contracts import (
    SERVER,
    BaselineCommand,
    DeadLetterReason,
    DeadLetterStage,
    decode_published_artifact,
    encode_flags,
)
from fedrca.contracts.bounds import short
from fedrca.contracts.deadletter import deadletter_record
from fedrca.exceptions import FedrcaError, MessageError
from fedrca.streams.loop import InputRecord, Outgoing, Processed, read_compacted_checked
from fedrca.streams.runtime import PlantRuntime, RCARuntime

__all__ = ["ParamsFollower", "PlantAgent", "RCAAgent"]

log = logging.getLogger("fedrca.streams")


def _json(state: Any) -> bytes:
    """A handler's state as the JSON of its state record, written with every batch.

    orjson writes the floats of a plant's state (its filter estimate, last sample and EWMA
    memories: a few hundred) in a tenth of the time of the standard library's encoder, the
    largest part of a 1 Hz plant's handler otherwise. It writes NaN and inf as ``null``, so a
    state holding one (or anything else orjson refuses) goes through the standard library's
    encoder, whose ``NaN`` / ``Infinity`` read back as they were
    (``tests/streams/test_agents_state.py``).
    """
    if _finite(state):
        try:
            return orjson.dumps(state)
        except TypeError:  # e.g. an integer beyond 64 bits
            pass
    return json.dumps(state, separators=(",", ":")).encode()


def _finite(obj: Any) -> bool:
    """No NaN or inf anywhere in a JSON-like value (a list of numbers is checked by its sum: a finite
    sum has finite terms; a sum that overflows, or NaN from inf - inf, sends the list to the check of
    each item, which only costs speed)."""
    kind = type(obj)
    if kind is list:
        try:
            if math.isfinite(sum(obj)):
                return True
        except (TypeError, OverflowError):  # not all numbers; an integer beyond the floats
            pass
        return all(map(_finite, obj))
    if kind is dict:
        return all(map(_finite, obj.values()))
    if kind is float:
        return math.isfinite(obj)
    return True


def _dead_letter(raw: bytes, error: MessageError, stage: DeadLetterStage, source: str, topic: str) -> Outgoing:
    """A refused record as a dead letter on ``topic`` (within one Kafka record, its reason in the headers)."""
    value, headers = deadletter_record(raw, error, stage, source)
    return Outgoing(topic, value, headers=tuple(headers))


def _state_object(state: bytes) -> dict[str, Any]:
    """A handler's state record as the object every handler writes (a list, null or a number is not one)."""
    value = json.loads(state)
    if not isinstance(value, dict):
        raise MessageError(DeadLetterReason.BAD_STATE, f"a state is an object, got {type(value).__name__}")
    return value


class PlantAgent:
    """The handler of one plant's sensor partition (see the module docstring)."""

    def __init__(self, runtime: PlantRuntime, plant: str, names: SiteNames) -> None:
        self.runtime = runtime
        self.plant = plant
        self.key = plant.encode()
        self.source = names.sensors(plant)
        self.flags_topic = names.config.topic("flags")
        self.deadletter_topic = names.plant_deadletter(plant)
        self.history_topic = names.history(plant)
        self._history: dict[bytes, bytes] = {}
        self._repairs: list[Outgoing] = []  # a refused history record's dead letter and re-write (load)

    @property
    def keeper(self) -> Any:
        """The plant's re-baselining loop (None without ``drift.enabled``)."""
        return self.runtime.processors[self.plant].keeper

    async def load(self, bootstrap: str, timeout: float, security: Mapping[str, Any] | None = None) -> None:
        """Read the plant's history topic back (committed records): its rows and baselines (drift only).

        A record the loop could not take back (:meth:`~fedrca.drift.keeper.BaselineKeeper.check_record`)
        is never taken: the newest valid record under its key before it is (or none), and the
        plant's first batch dead-letters it (``bad-state``, stage ``state``) and writes that
        record again, so the refused one is dead-lettered once and compacted away.
        """
        keeper = self.keeper
        self._repairs = []
        if keeper is None:
            self._history = {}
            return
        self._history, repairs = await read_compacted_checked(
            bootstrap, self.history_topic, timeout, keeper.check_record, security
        )
        for repair in repairs:
            for _, error in repair.refused:
                self.runtime.metrics.record_deadletter(DeadLetterStage.STATE, error.reason)
            log.error("%s: %d record(s) under %s refused: %s", self.history_topic, len(repair.refused),
                      short(repair.key), short(str(repair.refused[-1][1]), 300))  # fmt: skip
            self._repairs += [
                _dead_letter(raw, error, DeadLetterStage.STATE, self.history_topic, self.deadletter_topic)
                for raw, error in repair.refused
            ]
            self._repairs.append(Outgoing(self.history_topic, repair.value, key=repair.key))

    @property
    def progress(self) -> int | None:
        """The plant's last processed seq (None: none yet): the loop keeps a site's plants in step by it
        (:class:`~fedrca.streams.loop.TransactionalLoop`, "In step")."""
        processor = self.runtime.processors.get(self.plant)
        seq = -1 if processor is None else processor.last_seq
        return seq if seq >= 0 else None

    def restore(self, state: bytes | None) -> None:
        """The processor continues from the last committed batch (its initial state when there is none).

        A state that is not the processor's (not an object of its keys) raises: the loop then
        refuses the record and tries the one before it (:meth:`TransactionalLoop._own`).
        """
        saved = None if state is None else _state_object(state)
        keeper = self.keeper
        if keeper is not None:
            keeper.restore_records(self._history, -1 if saved is None else int(saved["last_seq"]))
        self.runtime.start_plant(self.plant, saved)

    def process(self, records: Sequence[InputRecord]) -> Processed:
        """Decode, detect, publish; messages not keyed by the plant are dead-lettered (wrong producer)."""
        runtime, key = self.runtime, self.key
        runtime.apply_command(self.plant)
        keyed = [r.value for r in records if r.key == key]
        batch = runtime.decode_sensors(keyed, plant=self.plant)
        for r in records:
            if r.key != key:
                error = MessageError(
                    DeadLetterReason.BAD_KEY,
                    f"sensor messages of plant '{self.plant}' must be keyed by the plant name, got {r.key!r}",
                )
                runtime.reject(batch, r.value, error)
        out = runtime.process_plant(self.plant, batch.valid, batch)
        topic = self.flags_topic
        flags = [Outgoing(topic, value, key) for value in encode_flags(out.flags)]
        dead = [
            _dead_letter(raw, err, DeadLetterStage.PLANT, self.source, self.deadletter_topic)
            for raw, err in batch.rejected
        ]
        runtime.metrics.record_messages_out("plant", self.flags_topic, len(flags))
        keeper = self.keeper
        history = [] if keeper is None else [
            Outgoing(self.history_topic, value, key=k) for k, value in keeper.pending_records()
        ]  # fmt: skip
        state = runtime.processors[self.plant].get_state(copy_state=False)
        # the repairs go before this batch's history records (a chunk re-written by the batch wins)
        repairs, self._repairs = self._repairs, []
        return Processed([*flags, *dead, *repairs, *history], _json(state))


class RCAAgent:
    """The handler of the flags partition (see the module docstring)."""

    def __init__(self, runtime: RCARuntime, names: SiteNames) -> None:
        self.runtime = runtime
        config = names.config
        self.source = config.topic("flags")
        self.verdicts_topic = config.topic("verdicts")
        self.deadletter_topic = config.topic("deadletter")
        self.key = config.site.encode()

    def restore(self, state: bytes | None) -> None:
        """Alignment and evidence continue from the last committed batch (a fresh stream when there is none)."""
        if state is None:
            self.runtime.stage.reset()
        else:
            self.runtime.stage.set_state(_state_object(state))

    def process(self, records: Sequence[InputRecord]) -> Processed:
        """Align, judge, publish verdicts; invalid or late flags are dead-lettered."""
        verdicts, rejected = self.runtime.process_flags([r.value for r in records])
        out = [
            Outgoing(self.verdicts_topic, v.encode(), key=self.key, headers=(("fedrca-verdict-id", v.id.encode()),))
            for v in verdicts
        ]
        out += [
            _dead_letter(raw, err, DeadLetterStage.RCA, self.source, self.deadletter_topic) for raw, err in rejected
        ]
        self.runtime.metrics.record_messages_out("rca", self.verdicts_topic, len(verdicts))
        return Processed(out, _json(self.runtime.stage.get_state()))


class ParamsFollower:
    """Tails ``<site>.params`` and offers new artifacts to the runtimes (see the module docstring).

    Parameters
    ----------
    bootstrap : ``host:port``
    names : the site's names
    plants : the plant runtime of this worker (None: no plant role)
    rca : the RCA runtime of this worker (None: no RCA role)
    lock : held while an artifact is applied, so a switch never falls inside a batch
    security : aiokafka keyword arguments (SASL / TLS)
    """

    def __init__(
        self,
        bootstrap: str,
        names: SiteNames,
        plants: PlantRuntime | None,
        rca: RCARuntime | None,
        lock: asyncio.Lock,
        security: Mapping[str, Any] | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.names = names
        self.plants = plants
        self.rca = rca
        self.lock = lock
        self.security = dict(security or {})
        self.topic = names.config.topic("params")
        self._stopping = asyncio.Event()
        self.caught_up = asyncio.Event()
        # the topics' end offsets are known: a record after them is new (dead-lettered when refused)
        self.positioned = asyncio.Event()
        self.refused = 0  # records of the params topic refused since the start

    def stop(self) -> None:
        """Ask :meth:`run` to finish."""
        self._stopping.set()

    async def run(self) -> None:
        """Apply what is published (no dead letters for it: they were sent when it was new), then follow."""
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=None,
            enable_auto_commit=False,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            **self.security,
        )
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all", **self.security)
        # both connect at once (a worker's start: docs/streams.md, "A worker started again")
        results = await asyncio.gather(consumer.start(), producer.start(), return_exceptions=True)
        errors = [result for result in results if isinstance(result, BaseException)]
        if errors:
            for client, result in zip((consumer, producer), results, strict=True):
                if not isinstance(result, BaseException):
                    await client.stop()
            raise errors[0]
        try:
            tp = TopicPartition(self.topic, 0)
            # the operators' commands to the plants' loops (drift.enabled)
            control = None
            if self.plants is not None and any(p.keeper is not None for p in self.plants.processors.values()):
                control = TopicPartition(self.names.control, 0)
            partitions = [tp] if control is None else [tp, control]
            # where to read from and to, asked before the partitions are assigned: once they are, the fetcher keeps
            # a fetch in flight (up to fetch.max.wait, 0.5 s, on a topic with nothing new), and an offsets request or
            # a seek_to_beginning waited for it, one wait per topic (a plant worker follows two) before the loops join
            # (docs/streams.md, "A hot standby"; tests/streams/test_startup.py)
            beginnings = await consumer.beginning_offsets(partitions)
            ends = await consumer.end_offsets(partitions)
            consumer.assign(partitions)
            for part in partitions:
                consumer.seek(part, beginnings[part])
            end = ends[tp]
            # from here on a refused record is dead-lettered when it is read: the loops join their groups now
            self.positioned.set()
            while not self._stopping.is_set():
                # before a fetch too: an empty topic is read at once, not after a fetch's wait
                if not self.caught_up.is_set():
                    positions = [await consumer.position(part) for part in partitions]
                    if all(at >= ends[part] for at, part in zip(positions, partitions, strict=True)):
                        self.caught_up.set()
                batches = await consumer.getmany(*partitions, timeout_ms=500)
                for record in batches.get(tp, []):
                    await self._offer(record.key, record.value, record.offset, producer, new=record.offset >= end)
                for record in [] if control is None else batches.get(control, []):
                    await self._command(
                        record.key, record.value, record.offset, producer, new=record.offset >= ends[control]
                    )
        except KafkaError as exc:
            log.error("the parameter follower stopped (%s); artifacts published from now on are not applied", exc)
            raise
        finally:
            await producer.stop()
            await consumer.stop()

    async def _command(self, key: bytes | None, raw: bytes, offset: int, producer: AIOKafkaProducer, new: bool) -> None:
        """Hand an operator's command to the plant runtime (applied at the plant's next batch).

        A record that is not a command of this site is refused, never raised: counted, logged
        and, when it arrives while the worker runs, dead-lettered once (``control`` stage) to
        the dead-letter topic of the plant it is keyed by, by the worker serving that plant; a
        record keyed by no plant of the site, by the worker serving the site's first plant
        (``tests/streams/test_drift_kafka.py``).
        """
        plants = self.plants
        assert plants is not None
        try:
            command = BaselineCommand.decode(raw, self.names.site, self.names.config.plant_names)
        except Exception as exc:  # decoding is total (MessageError); anything else: the same
            error = exc if isinstance(exc, MessageError) else MessageError(
                DeadLetterReason.UNPROCESSABLE, f"not a command ({type(exc).__name__}: {short(str(exc), 200)})"
            )  # fmt: skip
            log.error("refused the command at offset %d of %s: %s", offset, self.names.control, short(str(error), 300))
            plant = None if key is None else key.decode(errors="replace")
            if plant not in self.names.config.plant_names:
                plant = self.names.config.plant_names[0]
            if plant not in plants.processors:
                return  # another worker serves that plant: it counts and dead-letters the record
            plants.metrics.record_deadletter(DeadLetterStage.CONTROL, error.reason)
            if new:  # the ones read back at start were dead-lettered when they were new
                value, headers = deadletter_record(raw, error, DeadLetterStage.CONTROL, self.names.control)
                await (await producer.send(self.names.plant_deadletter(plant), value, headers=headers))
            return
        if command.plant in plants.processors:
            plants.offer_command(command)

    async def _offer(self, key: bytes | None, raw: bytes, offset: int, producer: AIOKafkaProducer, new: bool) -> None:
        """Apply one record of the params topic; anything wrong with it is refused (:meth:`_refuse`), never raised.

        The runtimes check an artifact whole before they swap it in (a plant's arrays against its
        detector's, the RCA's engine built before it replaces the running one), so a refused record
        changes nothing.
        """
        plant = None if key is None else key.decode(errors="replace")
        mine = self.plants is not None and plant in self.plants.processors
        try:
            name, artifact = decode_published_artifact(raw)
        except Exception as exc:  # decoding is total (MessageError/ArtifactError); anything else: the same
            await self._refuse(plant, raw, exc, offset, producer, new, mine)
            return
        async with self.lock:
            try:
                if self.plants is not None and name in self.plants.processors:
                    self.plants.offer_parameters(name, artifact)
                if self.rca is not None and (name == SERVER or name in self.names.config.plant_names):
                    self.rca.offer_artifact(name, artifact)
            except Exception as exc:
                await self._refuse(plant, raw, exc, offset, producer, new, mine)

    async def _refuse(
        self,
        plant: str | None,
        raw: bytes,
        exc: Exception,
        offset: int,
        producer: AIOKafkaProducer,
        new: bool,
        mine: bool,
    ) -> None:
        detail = str(exc) if isinstance(exc, FedrcaError) else f"it could not be applied ({type(exc).__name__}: {exc})"
        log.error("refused the parameter artifact at offset %d of %s: %s", offset, self.topic, short(detail, 300))
        self.refused += 1
        runtime = self.plants if mine or self.rca is None else self.rca
        if runtime is None:
            return
        runtime.metrics.record_deadletter(DeadLetterStage.PARAMS, DeadLetterReason.BAD_ARTIFACT)
        if not new:
            return
        if mine and plant is not None:
            topic = self.names.plant_deadletter(plant)
        elif self.rca is not None:
            topic = self.names.config.topic("deadletter")
        else:
            return  # addressed to a plant another worker serves: that worker dead-letters it
        error = MessageError(DeadLetterReason.BAD_ARTIFACT, detail)
        value, headers = deadletter_record(raw, error, DeadLetterStage.PARAMS, self.topic)
        await (await producer.send(topic, value, headers=headers))


class Heartbeat:
    """The event loop's pulse, for the liveness probe: a worker whose loop is stuck is not alive."""

    def __init__(self, every: float = 1.0) -> None:
        self.every = every
        self.last = time.monotonic()

    async def run(self) -> None:
        """Beat until cancelled."""
        while True:
            self.last = time.monotonic()
            await asyncio.sleep(self.every)

    def age(self) -> float:
        """Seconds since the last beat."""
        return time.monotonic() - self.last
