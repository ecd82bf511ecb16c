"""The simulated plant over MQTT (JSON per tag, Sparkplug B nodes) read back by the edge runtime: rows
equal what was published, sample for sample (real mosquitto, the real runtime; no Kafka needed)."""

from __future__ import annotations

import asyncio
import math
import socket
import threading
import time

import numpy as np
import orjson
import paho.mqtt.client as paho
import pytest
import yaml

from fedrca.cli import main
from fedrca.cli.bundled import bundled_config
from fedrca.config import load_config, parse_config
from fedrca.config.edge import parse_edge
from fedrca.connectors.simulator import SimulationSpec, simulate
from fedrca.datasets.tep import TEP_COLUMNS
from fedrca.edge.modbus_server import edge_section as modbus_edge_section
from fedrca.edge.mqtt_plant import MqttPlant, edge_section
from fedrca.edge.runtime import EdgeRuntime
from fedrca.edge.sparkplug import decode_payload
from tests.edge.support import wait_for
from tests.mqtt_broker import MqttBroker

pytestmark = pytest.mark.mqtt
PLANTS = {"boiler": ["a", "b", "c"], "turbine": ["d", "e"]}
PERIOD = 0.25


def _config(broker: MqttBroker, sparkplug: bool, site: str):
    # a sample's row is set by its source time; the grace lets a write the loaded machine delays by up to a
    # second still reach it (the write is stamped with its intended time, mid-interval)
    edge = edge_section(
        PLANTS, broker.url, site, sparkplug=sparkplug, group=site, staleness_seconds=2 * PERIOD, grace_seconds=1.0
    )
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
                at = (start + k + 0.5) * PERIOD
                await asyncio.sleep(max(0.0, at - time.time()))
                await plant.write(dict(zip(columns, row.tolist())), at)
            last = start + len(samples)
            await wait_for(lambda: all(r and r[-1].seq >= last for r in runtime.rows.values()), 30, "every row")
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


# -- fedrca simulate --to mqtt:// / modbus:// ------------------------------------------------------------
HOURS = "0.2"  # 4 samples
#: a sample every 3 s: the simulator computes each sample live (~0.1 s idle, several times that on a
#: loaded machine) in this process, beside the edge
SPEED = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _simulated_site(edge: dict):
    config = load_config(bundled_config("tep.yaml"))
    return config.model_copy(update={"edge": parse_edge(edge)})


@pytest.mark.exhaustive
@pytest.mark.parametrize("to", ["mqtt", "sparkplug", "modbus"])
def test_simulate_to_a_protocol_gives_the_simulated_samples(mqtt_broker: MqttBroker, tmp_path, to: str) -> None:
    """``fedrca simulate --to mqtt:// [--sparkplug] | modbus://`` read by the edge runtime: its rows are
    the simulator's samples of the same seed, in order, none lost, none changed (Modbus: as float32)."""
    expected = simulate(SimulationSpec(hours=float(HOURS), seed=1)).values
    base = load_config(bundled_config("tep.yaml"))
    plants = {p.name: list(p.sensors) for p in base.plants}
    if to == "modbus":
        url = f"modbus://127.0.0.1:{free_port()}"
        edge = modbus_edge_section(plants, url)
        edge["sources"]["plant-modbus"]["reconnect_max_delay"] = 0.2  # the server starts after the edge
        expected = expected.astype(np.float32).astype(np.float64)
        argv = ["--to", url]
    else:
        url = mqtt_broker.url
        edge = edge_section(plants, url, base.site, sparkplug=to == "sparkplug")
        argv = ["--to", url] + (["--sparkplug"] if to == "sparkplug" else [])
    edge_file = tmp_path / "edge.yaml"
    config = _simulated_site(edge)
    runtime = EdgeRuntime(config, config.plant_names, keep_rows=True, speed=SPEED)
    code: list[int] = []

    async def scenario() -> None:
        done = asyncio.Event()
        run = asyncio.create_task(runtime.run(until=done.is_set))
        while to != "modbus" and not all(s.counters.connected for s in runtime.sources):
            await asyncio.sleep(0.02)
        cli = ["simulate", "--hours", HOURS, "--seed", "1", "--speed", f"x{SPEED:g}", *argv,
               "--edge-config", str(edge_file)]  # fmt: skip
        await asyncio.to_thread(lambda: code.append(main(cli)))
        await asyncio.sleep(3 * runtime.timing.period)
        done.set()
        await run

    asyncio.run(scenario())
    assert code == [0]
    written = yaml.safe_load(edge_file.read_text())["edge"]
    assert written["plants"] == edge["plants"]
    assert [(n, s["kind"], s["url"]) for n, s in written["sources"].items()] == [
        (n, s["kind"], s["url"]) for n, s in edge["sources"].items()
    ]
    for plant in config.plant_names:
        rows = runtime.rows[plant]
        full = [i for i, r in enumerate(rows) if r.usable == len(plants[plant])]
        assert full, plant
        first = full[0]
        got = np.array([r.values for r in rows[first : first + len(expected)]])
        columns = [TEP_COLUMNS.index(c) for c in plants[plant]]
        assert [r.seq for r in rows[first : first + len(expected)]] == list(
            range(rows[first].seq, rows[first].seq + len(expected))
        )
        assert got.tolist() == expected[:, columns].tolist(), plant


@pytest.mark.parametrize("sparkplug", [False, True], ids=["json", "sparkplug"])
def test_simulate_to_mqtt_publishes_the_simulated_samples(mqtt_broker: MqttBroker, sparkplug: bool) -> None:
    """The fast guard of the test above (make test): what ``fedrca simulate --to mqtt://`` publishes is the
    simulator's samples of the same seed, every column, in order (a subscriber decodes them)."""
    expected = simulate(SimulationSpec(hours=0.1, seed=2)).values  # 2 samples
    base = load_config(bundled_config("tep.yaml"))
    seen: dict[str, list[float]] = {}
    host, _, port = mqtt_broker.address.rpartition(":")
    sub = paho.Client(paho.CallbackAPIVersion.VERSION2)

    def on_message(client: paho.Client, userdata: object, message: paho.MQTTMessage) -> None:
        if sparkplug:
            payload = decode_payload(message.payload)
            plant = message.topic.rsplit("/", 1)[1]
            for metric in payload.metrics:
                if metric.name != "bdSeq":
                    column = metric.name or base.plant(plant).sensors[metric.alias - 1]
                    seen.setdefault(column, []).append(metric.double_value)
        else:
            seen.setdefault(message.topic.rsplit("/", 1)[1], []).append(orjson.loads(message.payload)["value"])

    subscribed = threading.Event()
    sub.on_message = on_message
    sub.on_subscribe = lambda *_: subscribed.set()
    sub.connect(host, int(port))
    sub.subscribe("spBv1.0/fedrca/+/+" if sparkplug else f"{base.site}/sim/+", qos=1)
    sub.loop_start()
    assert subscribed.wait(20), "the subscriber's SUBACK"
    try:
        argv = ["simulate", "--hours", "0.1", "--seed", "2", "--speed", "x3600", "--to", mqtt_broker.url]
        assert main(argv + (["--sparkplug"] if sparkplug else [])) == 0
        columns = [c for p in base.plants for c in p.sensors]
        deadline = time.monotonic() + 20
        while sum(len(v) for v in seen.values()) < 2 * len(columns) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        sub.loop_stop()
        sub.disconnect()
    assert sorted(seen) == sorted(columns)
    for column in columns:
        assert seen[column] == expected[:, TEP_COLUMNS.index(column)].tolist(), column
