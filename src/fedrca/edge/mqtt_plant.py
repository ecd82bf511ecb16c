"""A simulated plant publishing its tags to an MQTT broker: plain JSON per tag, or Sparkplug B edge nodes.

``fedrca simulate --to mqtt://HOST:PORT [--sparkplug]`` serves the TEP simulator's tags through
:class:`MqttPlant`; it has the shape of the OPC UA :class:`~fedrca.edge.opcua_server.TagServer`
(``columns``, ``start``, ``stop``, ``write``) so one pacing loop drives either.

* JSON: each column on its own topic ``<prefix>/<column>`` (QoS 0: one TCP stream, no round trip a tag), the payload
  ``{"value": v, "timestamp": <s since the epoch>, "quality": "good"|"bad"}``; a dropped
  sample is no message.
* Sparkplug B: each plant is an edge node ``spBv1.0/<group>/.../<plant>`` on its own MQTT
  connection (the broker sends its NDEATH will when the connection is lost), born at its
  first sample with every metric (aliases 1..N in column order), then one NDATA per sample
  with the values by alias; a Bad value carries the ``Quality`` property 0. It answers the
  host's ``Node Control/Rebirth`` command with a fresh NBIRTH, and a restart is a new
  session (the next ``bdSeq``).

:func:`edge_section` writes the ``edge:`` section that reads it back (``fedrca demo --source
mqtt``, docs/connectors.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import aiomqtt
import orjson

from fedrca.config.edge_protocols import split_url
from fedrca.edge._tahu import Payload
from fedrca.edge.sparkplug import REBIRTH, DataType, SparkplugNode, decode_payload

__all__ = ["DEFAULT_GROUP", "MqttPlant", "edge_section", "topic_prefix"]

log = logging.getLogger("fedrca.edge.mqtt_plant")

#: Sparkplug group id of the simulated plant's nodes.
DEFAULT_GROUP = "fedrca"


def topic_prefix(site: str) -> str:
    """The topic prefix of the simulated plant's JSON tags."""
    return f"{site}/sim"


class MqttPlant:
    """Publishes a plant's samples to an MQTT broker (see the module docstring).

    Parameters
    ----------
    plants : plant -> its columns (every column of ``columns`` in exactly one plant)
    url : ``mqtt://host:port`` of the broker
    site : the site name (the JSON topics' prefix)
    sparkplug : publish as Sparkplug B edge nodes instead of JSON per tag
    group : the Sparkplug group id
    columns : the order of a row's values for a pacing loop (the simulator's columns; default the
        plants' columns in order); a column in no plant is not published
    """

    def __init__(
        self,
        plants: Mapping[str, Sequence[str]],
        url: str,
        site: str,
        sparkplug: bool = False,
        group: str = DEFAULT_GROUP,
        columns: Sequence[str] | None = None,
    ) -> None:
        self.plants = {p: list(c) for p, c in plants.items()}
        served = [c for cols in self.plants.values() for c in cols]
        if len(set(served)) != len(served):
            raise ValueError("a column belongs to one plant")
        self.served = set(served)
        self.columns = list(columns) if columns is not None else served
        self.host, self.port = split_url(url, 1883)
        self.site = site
        self.sparkplug = sparkplug
        self.group = group
        self.prefix = topic_prefix(site)
        self.nodes = {p: SparkplugNode(group, p, cols) for p, cols in self.plants.items()}
        self._clients: dict[str, aiomqtt.Client] = {}
        self._stack: contextlib.AsyncExitStack | None = None
        self._born: set[str] = set()
        self._last: dict[str, list[float | None]] = {p: [None] * len(c) for p, c in self.plants.items()}
        self._listeners: list[asyncio.Task[None]] = []
        self.published = 0
        self.rebirths = 0

    @property
    def url(self) -> str:
        return f"mqtt://{self.host}:{self.port}"

    async def start(self) -> None:
        """Connect (one connection, or one per Sparkplug node with its NDEATH will)."""
        stack = contextlib.AsyncExitStack()
        await stack.__aenter__()
        self._stack = stack
        self._born.clear()
        if not self.sparkplug:
            client = aiomqtt.Client(self.host, self.port, identifier=f"fedrca-sim-{self.site}", keepalive=10)
            client.pending_calls_threshold = 10 * len(self.columns)  # a sample is one publish per column
            self._clients = {"": await stack.enter_async_context(client)}
            return
        self._clients = {}
        for plant, node in self.nodes.items():
            will = aiomqtt.Will(node.topic("NDEATH"), node.death(), qos=0)
            client = aiomqtt.Client(self.host, self.port, identifier=f"fedrca-sim-{self.group}-{plant}",
                                    keepalive=5, will=will)  # fmt: skip
            self._clients[plant] = await stack.enter_async_context(client)
            await self._clients[plant].subscribe(node.topic("NCMD"), qos=0)
            self._listeners.append(asyncio.create_task(self._commands(plant)))

    async def stop(self) -> None:
        """Disconnect; a Sparkplug node announces its death first, and its next start is a new session."""
        for task in self._listeners:
            task.cancel()
        for task in self._listeners:
            with contextlib.suppress(asyncio.CancelledError, aiomqtt.MqttError):
                await task
        self._listeners = []
        if self.sparkplug:
            for plant, node in self.nodes.items():
                with contextlib.suppress(aiomqtt.MqttError, KeyError):
                    await self._clients[plant].publish(node.topic("NDEATH"), node.death(), qos=0)
                node.next_session()
        if self._stack is not None:
            with contextlib.suppress(aiomqtt.MqttError):
                await self._stack.aclose()
            self._stack = None
        self._clients = {}

    async def _commands(self, plant: str) -> None:
        client = self._clients[plant]
        async for message in client.messages:
            try:
                metrics = decode_payload(bytes(message.payload)).metrics
            except ValueError:
                continue
            if any(m.name == REBIRTH and m.boolean_value for m in metrics):
                self.rebirths += 1
                await self._birth(plant, self._last[plant], None)

    async def _birth(self, plant: str, values: Sequence[float | None], ts: float | None) -> None:
        node = self.nodes[plant]
        stamp = ts if ts is not None else time.time()
        await self._clients[plant].publish(node.topic("NBIRTH"), node.birth(values, stamp), qos=0)
        self._born.add(plant)

    async def write(
        self, values: Mapping[str, float | None], ts: float, status: Mapping[str, int] | None = None
    ) -> None:
        """Publish one sample: ``values`` column -> value (a column left out is a dropout), ``status``
        column -> a non-Good code (its value is published as Bad)."""
        bad = set(status or ())
        if not self.sparkplug:
            client = self._clients[""]
            sends = []
            for column, value in values.items():
                if column not in self.served:
                    continue
                good = value is not None and math.isfinite(value) and column not in bad
                doc = {"value": value if good else None, "timestamp": ts, "quality": "good" if good else "bad"}
                sends.append(client.publish(f"{self.prefix}/{column}", orjson.dumps(doc), qos=0))
            await asyncio.gather(*sends)
            self.published += len(sends)
            return
        for plant, columns in self.plants.items():
            present = [i for i, c in enumerate(columns) if c in values]
            last = self._last[plant]
            for i in present:
                last[i] = values[columns[i]]
            if plant not in self._born:
                await self._birth(plant, last, ts)
                continue
            payload = _data(self.nodes[plant], last, ts, present, [i for i in present if columns[i] in bad])
            await self._clients[plant].publish(self.nodes[plant].topic("NDATA"), payload, qos=0)
            self.published += 1

    async def __aenter__(self) -> MqttPlant:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def _data(node: SparkplugNode, values: Sequence[float | None], ts: float, only: list[int], bad: list[int]) -> bytes:
    if not bad:
        return node.data(values, ts, only=only)
    payload = Payload.FromString(node.data(values, ts, only=only))
    for metric in payload.metrics:
        if metric.alias - 1 in bad:
            metric.properties.keys.append("Quality")
            metric.properties.values.add(type=DataType.Int32, int_value=0)
    return bytes(payload.SerializeToString())


def edge_section(
    plants: Mapping[str, Sequence[str]], url: str, site: str, sparkplug: bool = False, group: str = DEFAULT_GROUP,
    **extra: Any,
) -> dict[str, Any]:  # fmt: skip
    """The ``edge:`` section that reads :class:`MqttPlant`'s tags back (``extra``: other keys, e.g. the clock)."""
    if sparkplug:
        source = {"kind": "sparkplug", "url": url, "group": group}
        template: dict[str, Any] = {"metric": "{column}", "node": "{plant}"}
    else:
        source = {"kind": "mqtt", "url": url}
        template = {"topic": topic_prefix(site) + "/{column}"}
    name = "plant-sparkplug" if sparkplug else "plant-mqtt"
    return {
        **extra,
        "sources": {name: source},
        "plants": {plant: {"source": name, "template": dict(template)} for plant in plants},
    }
