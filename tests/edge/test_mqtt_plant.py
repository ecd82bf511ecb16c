"""The simulated plant over MQTT (JSON per tag, Sparkplug B nodes) read back by the edge runtime: rows
equal what was published, sample for sample (real mosquitto, the real runtime; no Kafka needed)."""

from __future__ import annotations

import asyncio
import math
import time

import numpy as np
import pytest

from fedrca.config import parse_config
from fedrca.edge.mqtt_plant import MqttPlant, edge_section
from fedrca.edge.runtime import EdgeRuntime
from tests.mqtt_broker import MqttBroker

pytestmark = pytest.mark.mqtt
PLANTS = {"boiler": ["a", "b", "c"], "turbine": ["d", "e"]}
PERIOD = 0.25


def _config(broker: MqttBroker, sparkplug: bool, site: str):
    edge = edge_section(PLANTS, broker.url, site, sparkplug=sparkplug, group=site, staleness_seconds=2 * PERIOD)
    return parse_config({
        "site": site,
        "dataset": {"format": "csv", "columns": [c for cols in PLANTS.values() for c in cols],
                    "sample_seconds": PERIOD},
        "plants": [{"name": p, "sensors": cols} for p, cols in PLANTS.items()],
        "edge": edge,
    })  # fmt: skip


@pytest.mark.parametrize("sparkplug", [False, True], ids=["json", "sparkplug"])
def test_rows_are_the_published_samples(mqtt_broker: MqttBroker, sparkplug: bool) -> None:
    site = f"s{time.monotonic_ns() % 10**9}"
    config = _config(mqtt_broker, sparkplug, site)
    rng = np.random.default_rng(7)
    samples = rng.normal(size=(8, 5)).round(6)
    columns = [c for cols in PLANTS.values() for c in cols]

    async def scenario() -> dict[str, list]:
        plant = MqttPlant(PLANTS, mqtt_broker.url, site, sparkplug=sparkplug, group=site)
        runtime = EdgeRuntime(config, list(PLANTS), keep_rows=True)
        done = asyncio.Event()
        run = asyncio.create_task(runtime.run(until=done.is_set))
        async with plant:
            while not all(s.counters.connected for s in runtime.sources):
                await asyncio.sleep(0.02)
            start = math.ceil(time.time() / PERIOD) + 1
            for k, row in enumerate(samples):
                # in the middle of the edge's sample interval, as fedrca simulate paces it
                await asyncio.sleep(max(0.0, (start + k + 0.5) * PERIOD - time.time()))
                await plant.write(dict(zip(columns, row.tolist())), time.time())
            await asyncio.sleep(2 * PERIOD)
        done.set()
        await run
        return {"start": start, **runtime.rows}

    got = asyncio.run(scenario())
    start = got.pop("start")
    offset = 0
    for plant, cols in PLANTS.items():
        rows = {r.seq: r for r in got[plant]}
        for k in range(len(samples)):
            row = rows[start + k + 1]
            assert row.quality.tolist() == [0] * len(cols), (plant, k)
            assert row.values.tolist() == samples[k, offset : offset + len(cols)].tolist(), (plant, k)
        offset += len(cols)
