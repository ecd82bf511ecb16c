"""The protocol path of ``fedrca demo --source opcua|mqtt``: recorded rows -> a plant's protocol -> ``fedrca edge``
-> Kafka.

:func:`through_opcua` serves a file's rows from a real asyncua server (:class:`~fedrca.edge.opcua_server.TagServer`,
one row every ``period`` seconds), :func:`through_mqtt` publishes them to an MQTT broker (JSON per tag, or
Sparkplug B nodes: :class:`~fedrca.edge.mqtt_plant.MqttPlant`); either is read by the edge runtime (the real
protocol client, the row assembler on the same clock, the Kafka publisher to a fresh site's sensor topics)
and the rows are read back from the topics: what the plant workers would consume. The demo then runs the
same plant processors and RCA stage on them as on the file, and compares the verdicts.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedrca.config import SiteConfig
from fedrca.config.edge import EdgeSettings, parse_edge
from fedrca.connectors.kafka import KafkaOptions, ensure_site_topics, read_topic
from fedrca.edge.metrics import EdgeMetrics
from fedrca.edge.mqtt_plant import MqttPlant, edge_section
from fedrca.edge.opcua_server import TagServer, serve_rows
from fedrca.edge.publisher import RowPublisher
from fedrca.edge.runtime import EdgeRuntime
from fedrca.exceptions import DataError

__all__ = ["ProtocolRun", "through_mqtt", "through_opcua"]


@dataclass(frozen=True)
class ProtocolRun:
    """A file's rows after the protocol path: per plant (T, D) values read back from its topic."""

    values: dict[str, NDArray[np.float64]]
    site: str
    rows_published: int
    first_seq: int
    late_updates: int
    seconds: float


def through_opcua(
    config: SiteConfig,
    columns: Sequence[str],
    rows: NDArray[np.float64],
    bootstrap: str,
    period: float,
    progress: Callable[[int, int], None] | None = None,
) -> ProtocolRun:
    """Serve ``rows`` (T, len(columns)) over OPC UA, read them with the edge into Kafka, read them back.

    ``config`` is the site (its ``edge:`` section names the columns' node ids); the run uses a
    fresh site name (fresh topics). Raises :class:`DataError` when a row did not come back.
    """
    edge = config.edge
    if edge is None:
        raise DataError("the demo's site has no edge: section")
    server = TagServer(list(columns), folder="TEP")

    def edge_at(site: str) -> EdgeSettings:
        # the source at this server, changes published twice a period
        sources = {
            name: s.model_copy(update={"url": server.url, "publishing_interval": max(0.01, period / 2)})
            for name, s in edge.sources.items()
        }
        return edge.model_copy(update={"sources": sources})

    return _through(config, server, edge_at, rows, bootstrap, period, progress)


def through_mqtt(
    config: SiteConfig,
    columns: Sequence[str],
    rows: NDArray[np.float64],
    bootstrap: str,
    period: float,
    broker: str,
    sparkplug: bool = False,
    progress: Callable[[int, int], None] | None = None,
    grace: float | None = None,
) -> ProtocolRun:
    """Publish ``rows`` (T, len(columns)) to the MQTT broker ``broker`` (``mqtt://host:port``) as JSON per tag
    or Sparkplug B nodes, read them with the edge into Kafka, read them back (see :func:`through_opcua`).

    The site's plants are served with the tag map :func:`~fedrca.edge.mqtt_plant.edge_section` writes
    (topics and Sparkplug group named after the run's fresh site), the rest of its ``edge:`` section kept.
    ``grace``: how long a row waits for late updates, s (default 100 periods, at least 2 s).
    """
    edge = config.edge or EdgeSettings()
    plants = {p.name: list(p.sensors) for p in config.plants}
    holder: dict[str, MqttPlant] = {}

    def edge_at(site: str) -> EdgeSettings:
        parsed = parse_edge(edge_section(plants, broker, site, sparkplug=sparkplug, group=site))
        return edge.model_copy(update={"sources": parsed.sources, "plants": parsed.plants, "groups": {}})

    def server_for(site: str) -> MqttPlant:
        holder["plant"] = MqttPlant(plants, broker, site, sparkplug=sparkplug, group=site, columns=columns)
        return holder["plant"]

    return _through(config, server_for, edge_at, rows, bootstrap, period, progress, grace)


def _through(
    config: SiteConfig,
    server: Any,
    edge_at: Callable[[str], EdgeSettings],
    rows: NDArray[np.float64],
    bootstrap: str,
    period: float,
    progress: Callable[[int, int], None] | None,
    grace: float | None = None,
) -> ProtocolRun:
    """Serve ``rows`` from ``server`` (a tag server, or a function of the run's site that makes one), read
    them with an edge configured by ``edge_at(site)`` into Kafka, and read them back."""
    began = time.perf_counter()
    site = f"{config.site}-demo-{uuid.uuid4().hex[:8]}"
    if callable(server) and not hasattr(server, "write"):
        server = server(site)
    T = len(rows)

    async def run() -> tuple[int, int, int]:
        await server.start()
        # a row waits ``grace`` (default 100 periods, at least 2 s) for late updates: server and edge share
        # this process and its event loop, which a loaded machine can hold up for a second or more (a late
        # update would land in the next row)
        wait = grace if grace is not None else max(2.0, 100 * period)
        site_config = config.model_copy(
            update={"site": site, "edge": edge_at(site).model_copy(update={"grace_seconds": wait})}
        )
        options = KafkaOptions.from_settings(site_config.kafka)
        plants = site_config.plant_names
        ensure_site_topics(bootstrap, site_config, options=options,
                           only=[site_config.topic("sensors", plant=p) for p in plants])  # fmt: skip
        assert site_config.edge is not None
        sample = site_config.edge.sample_seconds or config.dataset.sample_seconds
        runtime = EdgeRuntime(site_config, plants, metrics=EdgeMetrics(plants), speed=sample / period)
        publisher = RowPublisher(bootstrap, site_config, plants, bound=10 * T + 100, options=options)
        runtime.publisher = publisher
        publisher.connect()
        runtime.start()
        served: dict[str, int] = {}
        finished = asyncio.Event()

        async def feed() -> None:
            try:
                # the first row is written once the edge has subscribed (a row before that has no reader)
                while not all(s.counters.connected for s in runtime.sources):
                    await asyncio.sleep(0.05)
                await asyncio.sleep(5 * period)
                result = await serve_rows(
                    server, enumerate(rows), period,
                    on_row=(lambda k: progress(k + 1, T)) if progress else None,
                )  # fmt: skip
                assert result.first_slot is not None
                served["first"] = result.first_slot + 1
                # every row closed: the clock passed the last one plus the grace
                last = served["first"] + T - 1
                while any((a.next_seq or 0) <= last for a in runtime.assemblers.values()):
                    await asyncio.sleep(period)
            finally:
                finished.set()

        feeder = asyncio.create_task(feed())
        try:
            await runtime.run(until=finished.is_set)
            await feeder
        finally:
            await server.stop()
            publisher.close(timeout=60.0)
        late = sum(a.late for a in runtime.assemblers.values())
        return served["first"], sum(b.published for b in publisher.buffers.values()), late

    first, published, late = asyncio.run(run())
    values: dict[str, NDArray[np.float64]] = {}
    for plant in config.plant_names:
        width = len(config.plant(plant).sensors)
        out = np.full((T, width), np.nan)
        seen = np.zeros(T, dtype=bool)
        topic = config.model_copy(update={"site": site}).topic("sensors", plant=plant)
        for record in read_topic(bootstrap, topic, timeout=60.0):
            message = json.loads(record.value)
            k = int(message["seq"]) - first
            if 0 <= k < T:
                out[k] = [np.nan if v is None else v for v in message["values"]]
                seen[k] = True
        if not seen.all():
            raise DataError(f"{plant}: {int((~seen).sum())} of {T} rows did not come back from {topic}")
        values[plant] = out
    return ProtocolRun(values, site, published, first, late, time.perf_counter() - began)
