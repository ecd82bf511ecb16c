"""Faust agents of a site: thin shells over :class:`~fedrca.streams.runtime.PlantRuntime` and
:class:`~fedrca.streams.runtime.RCARuntime`.

* one plant-processor agent per plant: ``<site>.sensors.<plant>`` -> ``<site>.flags``;
* the RCA agent: ``<site>.flags`` -> ``<site>.verdicts``;
* a parameter task tailing the compacted ``<site>.params`` topic (every worker
  reads all of it, outside the consumer group).

Each agent takes a batch of events, decodes it, calls the core, sends its
outputs and waits for the broker's acknowledgements, and only then writes its
state to a changelog-backed Faust table; the batch's offsets are acknowledged
after that. A crash can therefore only cause redelivery, which the cores
recognise (a seq at or below the processed one; a verdict id already emitted):
nothing is lost, nothing is emitted twice. The state also holds the last offset
processed per partition, so records the consumer skipped in a rebalance are
noticed and read again (:mod:`fedrca.streams.delivery`).

State is re-read from the table at every batch when it is ahead of the
in-memory core, which is what happens after a restart or when a rebalance hands
a plant to this worker that another worker had been processing.

Why the tables use the key partitioner: Faust derives a table write's changelog
partition from the *current event*, which ``take_events`` batches do not set.
Keying the state by the plant name (raw bytes, exactly as producers key the
sensor messages) lets Kafka's partitioner put it in the changelog partition
with the number of the plant's sensor partition, which is the one this worker
owns.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import faust
from faust.types import TP, EventT
from faust.types.enums import ProcessingGuarantee

from fedrca.contracts import DeadLetterReason, DeadLetterStage, deadletter_headers, encode_flags
from fedrca.exceptions import FedrcaError, MessageError
from fedrca.streams.delivery import OffsetGuard
from fedrca.streams.runtime import PlantRuntime, RCARuntime
from fedrca.streams.topics import SiteTopics

__all__ = ["RCA_STATE_KEY", "install", "plant_state_table"]

log = logging.getLogger("fedrca.streams")

#: Table key of the RCA stage's state.
RCA_STATE_KEY = b"rca"

Outgoing = list[tuple[bytes | None, bytes, list[tuple[str, bytes]] | None]]


async def _send_all(topic: faust.TopicT, items: Outgoing) -> None:
    """Send and wait until the broker acknowledged every message."""
    futures = [await topic.send(key=key, value=value, headers=headers) for key, value, headers in items]
    if futures:
        await asyncio.gather(*futures)


async def _send_keyed(app: faust.App, topic: faust.TopicT, key: bytes, values: list[bytes]) -> None:
    """Send ``values`` under one ``key`` to ``topic`` and wait until the broker acknowledged all of them.

    The same records, in the same order and partition, as one ``topic.send`` per value, but
    appended to Kafka record batches directly (aiokafka's batch API): a flag costs one append
    instead of a Faust future message, an aiokafka send and an acknowledgement future each,
    which was the largest share of a plant worker's time per sensor message.
    """
    if not values:
        return
    producer = await app.maybe_start_producer()
    ensure = getattr(producer, "_ensure_producer", None)
    if ensure is None or app.conf.processing_guarantee != ProcessingGuarantee.AT_LEAST_ONCE:
        await _send_all(topic, [(key, value, None) for value in values])  # another transport or transactions
        return
    client = ensure()
    name = topic.get_topic_name()
    await client.partitions_for(name)  # waits for the topic's metadata (needed by the partitioner)
    partition = producer.key_partition(name, key).partition
    futures = []
    batch = client.create_batch()
    for value in values:
        if batch.append(key=key, value=value, timestamp=None) is None:
            # full: ship it and start the next (an empty batch takes any one message)
            futures.append(await client.send_batch(batch, name, partition=partition))
            batch = client.create_batch()
            batch.append(key=key, value=value, timestamp=None)
    futures.append(await client.send_batch(batch, name, partition=partition))
    await asyncio.gather(*futures)


async def _deadletter(
    topics: SiteTopics, rejected: list[tuple[bytes, MessageError]], stage: DeadLetterStage, source: str
) -> None:
    await _send_all(topics.deadletter, [(None, raw, deadletter_headers(err, stage, source)) for raw, err in rejected])


def _record_lag(app: faust.App, runtime: PlantRuntime | RCARuntime, stage: str, events: Sequence[EventT]) -> None:
    """Consumer lag of the partition of the batch's last event (messages not yet consumed)."""
    message = events[-1].message
    highwater = app.consumer.highwater(message.tp)
    if highwater is not None:
        lag = max(0, highwater - message.offset - 1)
        runtime.metrics.set_consumer_lag(stage, message.topic, message.partition, lag)


async def _admit(
    app: faust.App, guard: OffsetGuard, topic: str, fetched: list[EventT], saved: dict[str, Any] | None
) -> tuple[list[EventT], dict[str, int]] | None:
    """The events of a batch to process and the offset cursor after them (see :mod:`fedrca.streams.delivery`).

    Seeks the consumer back when the batch shows that records were skipped. None when the
    batch changes nothing (every event dropped, cursor as saved): no output, no state write.
    """
    saved_cursor = None if saved is None else saved.get("offsets")
    admission = guard.admit(
        [(e.message.partition, e.message.offset, e.message.generation_id) for e in fetched], saved_cursor
    )
    for partition, offset in admission.seeks.items():
        await app.consumer.seek(TP(topic, partition), offset)
    if not admission.keep and saved is not None and admission.cursor == saved_cursor:
        return None
    return [fetched[i] for i in admission.keep], admission.cursor


def plant_state_table(site: str, plant: str) -> str:
    """Name of a plant's state table; its changelog topic is ``fedrca-<site>-plants-<name>-changelog``.

    Examples
    --------
    >>> plant_state_table("tep", "reactor")
    'tep-state-reactor'
    """
    return f"{site}-state-{plant}"


def install(
    app: faust.App,
    topics: SiteTopics,
    plants: PlantRuntime | None,
    rca: RCARuntime,
    bootstrap: str,
    roles: tuple[str, ...],
    partitions: int,
    read_verdict_ids: Callable[[str, str], list[str]] | None = None,
) -> None:
    """Register the agents, tables and tasks of ``roles`` on ``app`` (``plants`` is None for an RCA-only worker)."""
    site = rca.config.site
    if plants is not None and "plants" in roles:
        for plant, topic in topics.sensors.items():
            # One table per plant: its changelog holds that plant's filter state (derived from its
            # raw data), so it is as private as the plant's sensor topic and gets the same ACLs.
            plant_state = app.Table(
                plant_state_table(site, plant),
                default=None,
                partitions=partitions,
                use_partitioner=True,
                key_type=bytes,  # raw plant-name keys, partitioned like the sensor messages; JSON values
            )
            app.agent(topic, name=f"fedrca.plant.{plant}")(_plant_agent(app, plant, topics, plants, plant_state))
    if "rca" in roles:
        rca_state = app.Table(f"{site}-rca-state", default=None, partitions=1, use_partitioner=True, key_type=bytes)
        app.agent(topics.flags, name="fedrca.rca")(_rca_agent(app, topics, rca, rca_state, bootstrap, read_verdict_ids))
    if plants is not None and "params" in roles:
        app.task(_params_task(app, topics, plants, bootstrap))


def _plant_agent(
    app: faust.App, plant: str, topics: SiteTopics, runtime: PlantRuntime, table: Any
) -> Callable[[faust.StreamT], AsyncIterator[None]]:
    settings = runtime.settings
    source = topics.sensors[plant].get_topic_name()
    key = plant.encode()

    guard = OffsetGuard(source)

    async def plant_agent(stream: faust.StreamT) -> AsyncIterator[None]:
        batches = stream.take_events(settings.batch_size, within=settings.batch_within)  # type: ignore[attr-defined]
        async for fetched in batches:
            processor = runtime.processors[plant]
            saved = table.get(key)
            if saved is not None and int(saved["last_seq"]) > processor.last_seq:
                runtime.resume_plant(plant, saved)
                log.info("plant %s resumed after seq %s", plant, processor.last_seq)
            admitted = await _admit(app, guard, source, fetched, saved)
            if admitted is None:
                yield None
                continue
            events, cursor = admitted
            keyed = [e.value for e in events if e.key == key]
            batch = runtime.decode_sensors(keyed, plant=plant)
            for e in events:
                if e.key != key:
                    error = MessageError(
                        DeadLetterReason.BAD_KEY,
                        f"sensor messages of plant '{plant}' must be keyed by the plant name, got {e.key!r}",
                    )
                    runtime.reject(batch, e.value, error)
            out = runtime.process_plant(plant, batch.valid)
            await _deadletter(topics, batch.rejected, DeadLetterStage.PLANT, source)
            await _send_keyed(app, topics.flags, key, encode_flags(out.flags))
            runtime.metrics.record_messages_out("plant", topics.flags.get_topic_name(), len(out.flags))
            # The table serialises the value into its changelog message right here, and reads its
            # in-memory copy back only when it is ahead of the processor (a restore), so the
            # detector state needs no defensive deep copy.
            table[key] = {**processor.get_state(copy_state=False), "offsets": cursor}
            _record_lag(app, runtime, "plant", fetched)
            yield None

    plant_agent.__name__ = f"plant_{plant}"
    return plant_agent


def _rca_agent(
    app: faust.App,
    topics: SiteTopics,
    runtime: RCARuntime,
    table: Any,
    bootstrap: str,
    read_verdict_ids: Callable[[str, str], list[str]] | None,
) -> Callable[[faust.StreamT], AsyncIterator[None]]:
    settings = runtime.settings
    verdicts_topic = topics.verdicts.get_topic_name()
    flags_topic = topics.flags.get_topic_name()
    guard = OffsetGuard(flags_topic)
    resumed = False

    async def rca_agent(stream: faust.StreamT) -> AsyncIterator[None]:
        nonlocal resumed
        batches = stream.take_events(settings.batch_size, within=settings.batch_within)  # type: ignore[attr-defined]
        async for fetched in batches:
            saved = table.get(RCA_STATE_KEY)
            if saved is not None and int(saved["consumed"]) > runtime.stage.consumed:
                runtime.stage.set_state(saved)
                resumed = False
            if not resumed and read_verdict_ids is not None:
                # Verdicts emitted after the saved state (crash between send and table write).
                ids = await asyncio.get_running_loop().run_in_executor(
                    None, read_verdict_ids, bootstrap, verdicts_topic
                )
                runtime.stage.remember(ids)
                resumed = True
            admitted = await _admit(app, guard, flags_topic, fetched, saved)
            if admitted is None:
                yield None
                continue
            events, cursor = admitted
            verdicts, rejected = runtime.process_flags([e.value for e in events])
            await _deadletter(topics, rejected, DeadLetterStage.RCA, flags_topic)
            await _send_all(
                topics.verdicts,
                [(runtime.config.site.encode(), v.encode(), [("fedrca-verdict-id", v.id.encode())]) for v in verdicts],
            )
            runtime.metrics.record_messages_out("rca", verdicts_topic, len(verdicts))
            table[RCA_STATE_KEY] = {**runtime.stage.get_state(), "offsets": cursor}
            _record_lag(app, runtime, "rca", fetched)
            yield None

    return rca_agent


def _params_task(app: faust.App, topics: SiteTopics, runtime: PlantRuntime, bootstrap: str) -> Callable[[], Any]:
    params_topic = topics.params.get_topic_name()

    async def tail_parameters() -> None:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
        await consumer.start()
        try:
            tp = TopicPartition(params_topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            while not app.should_stop:
                batches = await consumer.getmany(tp, timeout_ms=500)
                for record in batches.get(tp, []):
                    try:
                        runtime.offer_published_artifact(record.value)
                    except FedrcaError as exc:
                        log.error("refused parameter artifact at offset %s: %s", record.offset, exc)
                        error = MessageError(DeadLetterReason.BAD_ARTIFACT, str(exc))
                        await _deadletter(topics, [(record.value, error)], DeadLetterStage.PARAMS, params_topic)
        finally:
            await consumer.stop()

    return tail_parameters
