"""Faust agents of a site: thin shells over :class:`fedrca.streams.runtime.Runtime`.

* one plant-processor agent per plant: ``<site>.sensors.<plant>`` -> ``<site>.flags``;
* the RCA agent: ``<site>.flags`` -> ``<site>.verdicts``;
* a parameter task tailing the compacted ``<site>.params`` topic (every worker
  reads all of it, outside the consumer group) and a lag timer.

Each agent decodes a batch, calls the core, sends its outputs and waits for the
broker's acknowledgement, and only then records its state in a changelog-backed
table; the batch's offsets are committed after the agent returns. A crash can
therefore only cause redelivery, which the cores recognise (seq at or below the
processed one; verdict ids already emitted) — nothing is lost, nothing is emitted twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import faust

from fedrca.exceptions import FedrcaError, MessageError
from fedrca.streams.messages import deadletter_headers, encode
from fedrca.streams.runtime import Runtime
from fedrca.streams.topics import SiteTopics

__all__ = ["install"]

log = logging.getLogger("fedrca.streams")


async def _send_all(topic: faust.TopicT, items: list[tuple[bytes | None, bytes, Any]]) -> None:
    """Send and wait until the broker acknowledged every message."""
    futures = [await topic.send(key=key, value=value, headers=headers) for key, value, headers in items]
    await asyncio.gather(*futures)


async def _deadletter(topics: SiteTopics, rejected: list[tuple[bytes, MessageError]], stage: str, source: str) -> None:
    if rejected:
        await _send_all(
            topics.deadletter, [(None, raw, deadletter_headers(err, stage, source)) for raw, err in rejected]
        )


def install(
    app: faust.App,
    topics: SiteTopics,
    runtime: Runtime,
    bootstrap: str,
    roles: tuple[str, ...] = ("plants", "rca", "params"),
    read_verdict_ids: Callable[[str, str], list[str]] | None = None,
) -> None:
    """Register the agents, tables and tasks of ``roles`` on ``app``."""
    settings = runtime.settings
    site = runtime.config.site
    plant_state = app.Table(
        f"{site}-plant-state", default=None, key_type=str, key_serializer="json", value_serializer="json"
    )
    rca_state = app.Table(
        f"{site}-rca-state", default=None, partitions=1, key_type=str, key_serializer="json", value_serializer="json"
    )

    if "plants" in roles:
        for plant, topic in topics.sensors.items():
            app.agent(topic, name=f"fedrca.plant.{plant}")(_plant_agent(plant, topics, runtime, plant_state))

    if "rca" in roles:

        async def rca_agent(stream: faust.StreamT) -> AsyncIterator[None]:
            restored = False
            async for events in stream.take_events(settings.batch_size, within=settings.batch_within):
                if not restored:
                    saved = rca_state.get("rca")
                    if saved is not None:
                        runtime.rca.set_state(saved)
                    if read_verdict_ids is not None:
                        ids = await asyncio.get_running_loop().run_in_executor(
                            None, read_verdict_ids, bootstrap, topics.verdicts.get_topic_name()
                        )
                        runtime.rca.remember(ids)
                    restored = True
                verdicts, rejected = runtime.process_flags([e.value for e in events])
                await _deadletter(topics, rejected, "rca", topics.flags.get_topic_name())
                await _send_all(
                    topics.verdicts,
                    [(site.encode(), encode(v), [("fedrca-verdict-id", v["id"].encode())]) for v in verdicts],
                )
                runtime.metrics.record_messages_out("rca", topics.verdicts.get_topic_name(), len(verdicts))
                rca_state["rca"] = runtime.rca.get_state()
                yield None

        app.agent(topics.flags, name="fedrca.rca")(rca_agent)

    if "params" in roles:

        @app.task
        async def tail_parameters() -> None:
            from aiokafka import AIOKafkaConsumer, TopicPartition

            from fedrca.training.artifacts import decode_published_artifact

            consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
            await consumer.start()
            try:
                tp = TopicPartition(topics.params.get_topic_name(), 0)
                consumer.assign([tp])
                await consumer.seek_to_beginning(tp)
                while not app.should_stop:
                    batches = await consumer.getmany(tp, timeout_ms=500)
                    for record in batches.get(tp, []):
                        try:
                            plant, artifact = decode_published_artifact(record.value)
                            runtime.offer_parameters(plant, artifact)
                            log.info("parameters %s offered to plant %s", getattr(artifact, "version", "?"), plant)
                        except FedrcaError as exc:
                            runtime.metrics.record_deadletter("params", "bad-artifact")
                            log.error("refused parameter artifact at offset %s: %s", record.offset, exc)
                            await _deadletter(
                                topics,
                                [(record.value, MessageError("bad-artifact", str(exc)))],
                                "params",
                                topics.params.get_topic_name(),
                            )
            finally:
                await consumer.stop()


def _plant_agent(
    plant: str, topics: SiteTopics, runtime: Runtime, table: faust.Table
) -> Callable[..., AsyncIterator[None]]:
    settings = runtime.settings
    flags_topic = topics.flags
    source = topics.sensors[plant].get_topic_name()

    async def plant_agent(stream: faust.StreamT) -> AsyncIterator[None]:
        restored = False
        async for events in stream.take_events(settings.batch_size, within=settings.batch_within):
            processor = runtime.processors[plant]
            if not restored:
                saved = table.get(plant)
                if saved is not None and int(saved["last_seq"]) > processor.last_seq:
                    processor.set_state(saved)
                    log.info("plant %s resumed after seq %s", plant, processor.last_seq)
                restored = True
            batch = runtime.decode_sensors([e.value for e in events], plant=plant)
            await _deadletter(topics, batch.rejected, "plant", source)
            out = runtime.process_plant(plant, batch.valid)
            await _send_all(flags_topic, [(plant.encode(), encode(f.to_dict()), None) for f in out.flags])
            runtime.metrics.record_messages_out("plant", flags_topic.get_topic_name(), len(out.flags))
            table[plant] = processor.get_state()
            yield None

    plant_agent.__name__ = f"plant_{plant}"
    return plant_agent
