"""fedrca.edge.mqtt against a real Mosquitto broker: JSON tags, Sparkplug B, broker restarts, credentials, floods."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import orjson
import paho.mqtt.client as paho
import pytest

from fedrca.config.edge_protocols import MqttSource, MqttTag, SparkplugSource, SparkplugTag
from fedrca.edge.mqtt import JsonRoute, MqttReader, PendingQueue, ReaderStats, SparkplugReader, json_value
from fedrca.edge.runtime import EdgeRuntime
from fedrca.edge.source import SourceCounters
from fedrca.edge.sparkplug import SparkplugNode, Target, decode_payload
from fedrca.exceptions import ConfigError
from tests.edge.recording import RecordingSink, tags
from tests.edge.support import site, wait_for
from tests.mqtt_broker import MqttBroker, private_mosquitto

pytestmark = pytest.mark.mqtt
GOOD, BAD, STALE, MISSING = 0, 1, 2, 3


def publisher(address: str, client_id: str = "", will: tuple[str, bytes] | None = None) -> paho.Client:
    host, _, port = address.rpartition(":")
    client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id)
    if will is not None:
        client.will_set(will[0], will[1], qos=0)
    client.connect(host, int(port), keepalive=5)
    client.loop_start()
    return client


def publish(client: paho.Client, topic: str, payload: bytes, qos: int = 1) -> None:
    client.publish(topic, payload, qos=qos).wait_for_publish(timeout=10)


def run_with(reader: Any, body: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run ``reader`` into its ``sink`` attribute while ``body`` runs (one event loop), then cancel it."""

    async def main() -> None:
        task = asyncio.create_task(reader.run(reader.sink))
        try:
            await wait_for(lambda: reader.counters.connected, 10, "the reader to connect")
            await body()
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(main())


def json_reader(broker: MqttBroker, *addresses: MqttTag, **settings: Any) -> tuple[MqttReader, RecordingSink]:
    source = MqttSource(kind="mqtt", url=f"mqtt://{broker.address}", **settings)
    reader = MqttReader("broker", source, tags(*addresses))
    reader.sink = RecordingSink()  # type: ignore[attr-defined]
    return reader, reader.sink  # type: ignore[attr-defined]


def sparkplug_reader(source: SparkplugSource, *addresses: SparkplugTag) -> tuple[SparkplugReader, RecordingSink]:
    reader = SparkplugReader("scada", source, tags(*addresses))
    reader.sink = RecordingSink()  # type: ignore[attr-defined]
    return reader, reader.sink  # type: ignore[attr-defined]


# -- plain JSON ------------------------------------------------------------------------------------
def test_json_tags_per_topic_and_from_a_shared_payload(mqtt_broker: MqttBroker) -> None:
    prefix = f"t{os.getpid()}{time.monotonic_ns()}"
    reader, updates = json_reader(
        mqtt_broker,
        MqttTag(topic=f"{prefix}/pressure"),
        MqttTag(topic=f"{prefix}/unit", field="level.pv", scale=2.0, offset=1.0),
        MqttTag(topic=f"{prefix}/unit", field="temp"),
        timestamp_unit="ms",
    )

    async def body() -> None:
        client = publisher(mqtt_broker.address)
        try:
            publish(client, f"{prefix}/pressure", b"2705.5")
            publish(client, f"{prefix}/pressure", b'{"value": 2706, "quality": 192, "timestamp": 1700000000000}')
            publish(client, f"{prefix}/unit", b'{"level": {"pv": 10}, "temp": 120.5}')
            publish(client, f"{prefix}/unit", b'{"level": {"pv": 11}, "temp": null, "quality": "good"}')
            publish(client, f"{prefix}/unit", b'{"level": {"pv": 12}, "temp": 121, "quality": false}')
            await wait_for(lambda: len(updates.all) == 8, 10, "8 updates")
        finally:
            client.loop_stop()
            client.disconnect()

    run_with(reader, body)
    assert updates.of(0) == [(2705.5, GOOD), (2706.0, GOOD)]
    assert [u[3] for u in updates.all if u[0] == 0][1] == 1_700_000_000.0  # the payload's time (ms)
    assert updates.of(1) == [(21.0, GOOD), (23.0, GOOD), (None, BAD)]  # scale 2, offset 1; quality false
    assert updates.of(2) == [(120.5, GOOD), (None, MISSING), (None, BAD)]
    assert updates.refused == [] and reader.stats.connects == 1 and reader.counters.updates == 8


def _hostile_json() -> list[tuple[str, bytes, int, str | None]]:
    """(what, payload, quality reported for the plain tag, counter)"""
    return [
        ("not JSON", b"{oops", BAD, "malformed"),
        ("truncated object", b'{"value": 1', BAD, "malformed"),
        ("binary junk", b"\x00\xff\xfe\x80", BAD, "malformed"),
        ("empty payload", b"", BAD, "malformed"),
        ("huge payload", b"1" * 2_000_000, BAD, "malformed"),
        ("deeply nested", b"[" * 5000 + b"]" * 5000, BAD, "malformed"),
        ("a string", b'"open"', BAD, "wrong-type"),
        ("a huge string", b'"' + b"9" * 100_000 + b'"', BAD, "wrong-type"),
        ("a list", b"[1, 2, 3]", BAD, "wrong-type"),
        ("an object in the value", b'{"value": {"a": 1}}', BAD, "wrong-type"),
        ("a string in the value", b'{"value": "n/a"}', BAD, "wrong-type"),
        ("an int beyond float", b"1" + b"0" * 400, BAD, "malformed"),
        ("NaN as text", b"NaN", BAD, None),
        ("inf as text", b"-Infinity", BAD, None),
        ("NaN in a string", b'"nan"', BAD, None),
        ("1e999", b"1e999", BAD, "malformed"),
        ("null", b"null", MISSING, None),
        ("object without the field", b'{"other": 1}', -1, "malformed"),
        ("bad quality word", b'{"value": 1, "quality": "uncertain"}', BAD, None),
        ("quality of a wrong type", b'{"value": 1, "quality": [1]}', BAD, None),
        ("timestamp that is text", b'{"value": 4, "timestamp": "yesterday"}', GOOD, None),
        ("timestamp far out", b'{"value": 5, "timestamp": 1e300}', GOOD, None),
        ("UTF-8 junk in a field name", b'{"\xc3\x28": 1}', BAD, "malformed"),
    ]


def test_hostile_json_payloads(mqtt_broker: MqttBroker) -> None:
    cases = _hostile_json()
    assert len(cases) >= 20
    prefix = f"h{os.getpid()}{time.monotonic_ns()}"
    reader, updates = json_reader(mqtt_broker, MqttTag(topic=f"{prefix}/x"), MqttTag(topic=f"{prefix}/ok"),
                                  max_payload_bytes=1_000_000)  # fmt: skip
    results: list[tuple[str, list[tuple[float | None, int]], list[tuple[int | None, str, str]]]] = []

    async def body() -> None:
        client = publisher(mqtt_broker.address)
        try:
            for i, (_, payload, _, _) in enumerate(cases):
                refused = len(updates.refused)
                n = len(updates.all)
                publish(client, f"{prefix}/x", payload)
                publish(client, f"{prefix}/ok", str(float(i)).encode())  # a valid value right behind it
                await wait_for(lambda n=n, i=i: (1, float(i), GOOD) in [u[:3] for u in updates.all[n:]], 10, "ok")
                got = [(v, q) for t, v, q, _ in updates.all[n:] if t == 0]
                results.append((cases[i][0], got, updates.refused[refused:]))
        finally:
            client.loop_stop()
            client.disconnect()

    run_with(reader, body)
    for (what, _, quality, reason), (_, got, refused) in zip(cases, results):
        if quality == -1:
            assert got == [], what  # the payload does not carry the tag: no news of it
        else:
            assert [q for _, q in got] == [quality], what
        if reason is not None:
            # refused once, naming the tag's topic, without echoing the input
            assert [(t, r) for t, r, _ in refused] == [(0, reason)], (what, refused)
            assert f"{prefix}/x" in refused[0][2] and len(refused[0][2]) < 400, what
        else:
            assert refused == [], (what, refused)  # plant data (Bad, missing) is not bad input
    # nothing valid lost: every valid value arrived, in order
    assert [v for v, _ in updates.of(1)] == [float(i) for i in range(len(cases))]
    ts = [u[3] for u in updates.all if u[0] == 0 and u[1] in (4.0, 5.0)]
    assert len(ts) == 2 and all(abs(t - time.time()) < 60 for t in ts)  # unusable times: the arrival time


def test_json_value_fields() -> None:
    route = JsonRoute(Target(0), None, ("q",), ("t",), "iso")
    assert json_value({"value": 1, "t": "2024-01-01T00:00:00+00:00"}, route, ("value",)) == (1.0, GOOD, 1704067200.0,
                                                                                             None)  # fmt: skip
    assert json_value({"value": 1, "t": "2024-01-01T00:00:00"}, route, ("value",))[2] is None  # no zone: arrival
    assert json_value(True, route, ("value",)) == (1.0, GOOD, None, None)
    assert json_value({"value": 2, "q": 500}, route, ("value",))[:2] == (None, STALE)


def test_pending_queue_is_bounded_and_conflates_per_topic() -> None:
    async def main() -> None:
        stats, counters = ReaderStats(), SourceCounters()
        refused: list[tuple[int | None, str, str]] = []
        queue = PendingQueue(hard=100, soft=10, max_bytes=10_000, conflate=True, stats=stats, counters=counters,
                             reject=lambda *r: refused.append(r))  # fmt: skip
        for i in range(10):
            queue.put_nowait((f"t{i}", b"x"))  # under the soft bound: all kept
        for i in range(1000):
            queue.put_nowait(("t3", b"%d" % i))  # a flood on one topic: only its newest kept
        queue.put_nowait(("new", b"y" * 20_000))  # over max_bytes: dropped
        for i in range(200):
            queue.put_nowait((f"u{i}", b"z"))  # 90 fit under the hard bound, 110 dropped
        assert queue.qsize() == 100 and counters.conflated == 1000 and stats.dropped == 111
        assert len(refused) == 111 and {r[:2] for r in refused} == {(None, "queue-full")}
        got = queue.drain(1000)
        assert got[3] == ("t3", b"999") and len(got) == 100 and queue.bytes == 0

    asyncio.run(main())


def test_conflated_updates_are_counted_per_source_on_metrics() -> None:
    """A conflated flood is not silent: the runtime exports each source's count as fedrca_edge_conflated_total."""
    config = site("opc.tcp://127.0.0.1:4840", ["a"])
    runtime = EdgeRuntime(config, ["p"])  # its sources are not run: no connection is made
    runtime.start()
    source = runtime.sources[0]
    assert runtime.metrics.value("fedrca_edge_conflated_total", source=source.name) is None
    source.counters.conflated = 7
    runtime.tick()
    assert runtime.metrics.value("fedrca_edge_conflated_total", source=source.name) == 7
    source.counters.conflated = 9
    runtime.tick()
    runtime.tick()  # a count is exported once
    assert runtime.metrics.value("fedrca_edge_conflated_total", source=source.name) == 9


# -- the broker goes away ---------------------------------------------------------------------------
def test_broker_restart_reconnects_and_resubscribes(tmp_path: Path) -> None:
    with private_mosquitto(tmp_path / "mq") as broker:
        reader, updates = json_reader(broker, MqttTag(topic="plant/a"), reconnect_max_delay=0.5)

        async def body() -> None:
            client = publisher(broker.address)
            publish(client, "plant/a", b"1")
            await wait_for(lambda: updates.of(0) == [(1.0, GOOD)], 10, "the first value")
            client.loop_stop()
            client.disconnect()
            down = asyncio.get_running_loop().run_in_executor(None, lambda: broker.tool("restart", "--down", "1"))
            await wait_for(lambda: not reader.counters.connected, 10, "the reader to see the broker gone")
            await down
            await wait_for(lambda: reader.counters.connected, 15, "the reader to reconnect")
            client = publisher(broker.address)
            publish(client, "plant/a", b"2")
            await wait_for(lambda: updates.of(0)[-1:] == [(2.0, GOOD)], 10, "a value after the restart")
            client.loop_stop()
            client.disconnect()

        run_with(reader, body)
        assert reader.counters.reconnects == 1 and reader.stats.connects == 2


def test_wrong_credentials_stop_with_one_clear_line(mqtt_broker: MqttBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"mqtt://{mqtt_broker.auth_address}"
    source = MqttSource(kind="mqtt", url=url, username=mqtt_broker.user, password_env="EDGE_TEST_PASSWORD")
    monkeypatch.setenv("EDGE_TEST_PASSWORD", "not-the-password")
    reader = MqttReader("secured", source, tags(MqttTag(topic="a")))
    with pytest.raises(ConfigError) as refused:
        asyncio.run(asyncio.wait_for(reader.run(RecordingSink()), 20))
    line = str(refused.value)
    assert "refuses user 'fedrca'" in line and "$EDGE_TEST_PASSWORD" in line and "edge.sources.secured" in line
    assert "not-the-password" not in line
    # anonymous on the password listener: refused the same way
    anonymous = MqttReader("anon", MqttSource(kind="mqtt", url=url), tags(MqttTag(topic="a")))
    with pytest.raises(ConfigError, match="refuses an anonymous client"):
        asyncio.run(asyncio.wait_for(anonymous.run(RecordingSink()), 20))
    # the right password connects
    monkeypatch.setenv("EDGE_TEST_PASSWORD", mqtt_broker.password)
    reader = MqttReader("secured", source, tags(MqttTag(topic="a")))
    reader.sink = RecordingSink()  # type: ignore[attr-defined]
    run_with(reader, lambda: asyncio.sleep(0))
    assert reader.stats.connects == 1
    # no password in the environment: a configuration error naming the variable
    monkeypatch.delenv("EDGE_TEST_PASSWORD")
    with pytest.raises(ConfigError, match="EDGE_TEST_PASSWORD"):
        MqttReader("secured", source, tags(MqttTag(topic="a")))


def test_an_unreachable_broker_is_retried_with_one_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="fedrca.edge.mqtt")
    source = MqttSource(kind="mqtt", url="mqtt://127.0.0.1:9", reconnect_max_delay=0.1)  # discard port: refused
    reader = MqttReader("away", source, tags(MqttTag(topic="a")))

    async def main() -> None:
        task = asyncio.create_task(reader.run(RecordingSink()))
        await asyncio.sleep(1.0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "cannot reach 127.0.0.1:9" in lines[0], lines
    assert reader.stats.connects == 0 and not reader.counters.connected and reader.counters.last_error


# -- Sparkplug B through the broker --------------------------------------------------------------------
NODE_SCRIPT = r"""
import sys, time, paho.mqtt.client as paho
from fedrca.edge.sparkplug import SparkplugNode
host, port, group, node_id = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
node = SparkplugNode(group, node_id, ["a", "b"])
client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="node-" + node_id)
client.will_set(node.topic("NDEATH"), node.death(), qos=0)
client.connect(host, port, keepalive=5)
client.loop_start()
client.publish(node.topic("NBIRTH"), node.birth([1.0, 2.0], time.time()), qos=0).wait_for_publish()
print("born", flush=True)
time.sleep(600)
"""


def test_sparkplug_node_death_by_kill_marks_its_tags_stale(mqtt_broker: MqttBroker, tmp_path: Path) -> None:
    group = f"g{os.getpid()}{time.monotonic_ns()}"
    source = SparkplugSource(kind="sparkplug", url=f"mqtt://{mqtt_broker.address}", group=group, node="n1")
    reader, updates = sparkplug_reader(source, SparkplugTag(metric="a"), SparkplugTag(metric="b"))
    script = tmp_path / "node.py"
    script.write_text(NODE_SCRIPT)

    async def body() -> None:
        host, _, port = mqtt_broker.address.rpartition(":")
        cmd = [sys.executable, str(script), host, port, group, "n1"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "born"
            await wait_for(lambda: updates.of(1) == [(2.0, GOOD)], 10, "the birth's values")
            # while the node lives, its tags are vouched for (report by exception: no news is no change)
            await wait_for(lambda: [0, 1] in updates.alive_calls, 10, "a keep-alive of the born node's tags")
            os.kill(proc.pid, signal.SIGKILL)  # no clean disconnect: the broker sends the will (NDEATH)
            await wait_for(lambda: updates.of(1)[-1:] == [(None, STALE)], 20, "the NDEATH")
        finally:
            proc.kill()
            proc.wait()

    run_with(reader, body)
    assert updates.of(0)[-1] == (None, STALE)
    assert reader.host.counters.deaths == 1 and not reader.host.node_online(group, "n1")


def test_sparkplug_gap_asks_a_rebirth_that_the_node_answers(mqtt_broker: MqttBroker) -> None:
    group = f"r{os.getpid()}{time.monotonic_ns()}"
    source = SparkplugSource(kind="sparkplug", url=f"mqtt://{mqtt_broker.address}", group=group, node="n",
                             rebirth_holdoff=0.5)  # fmt: skip
    reader, updates = sparkplug_reader(source, SparkplugTag(metric="a"))
    node = SparkplugNode(group, "n", ["a"])
    commands: list[bytes] = []
    client = publisher(mqtt_broker.address)  # the node, listening to its commands before the host starts
    client.on_message = lambda c, u, m: commands.append(m.payload)
    subscribed = client.subscribe(node.topic("NCMD"), qos=1)
    assert subscribed[0] == paho.MQTT_ERR_SUCCESS
    time.sleep(0.2)

    async def body() -> None:
        try:
            # the host asked every node for a birth when it connected
            await wait_for(lambda: len(commands) == 1, 10, "the rebirth request at connection")
            publish(client, node.topic("NBIRTH"), node.birth([1.0], time.time()), qos=0)
            publish(client, node.topic("NDATA"), node.data([2.0], time.time()), qos=0)
            await wait_for(lambda: updates.of(0) == [(1.0, GOOD), (2.0, GOOD)], 10, "birth and data")
            await asyncio.sleep(0.6)  # past the hold-off
            node.data([0.0], time.time())  # lost
            publish(client, node.topic("NDATA"), node.data([3.0], time.time()), qos=0)
            await wait_for(lambda: len(commands) == 2, 10, "the rebirth request after the gap")
            assert decode_payload(commands[1]).metrics[0].name == "Node Control/Rebirth"
            publish(client, node.topic("NBIRTH"), node.birth([4.0], time.time()), qos=0)
            await wait_for(lambda: updates.of(0)[-1:] == [(4.0, GOOD)], 10, "the rebirth's value")
        finally:
            client.loop_stop()
            client.disconnect()

    run_with(reader, body)
    assert updates.of(0) == [(1.0, GOOD), (2.0, GOOD), (3.0, GOOD), (4.0, GOOD)]
    assert reader.host.counters.sequence_gaps == 1 and reader.host.counters.rebirths_requested == 2
    assert [(t, r) for t, r, _ in updates.refused] == [(None, "sequence-gaps")]


# -- a flood ------------------------------------------------------------------------------------------
def test_a_burst_is_delivered_whole_with_nothing_after_it(mqtt_broker: MqttBroker) -> None:
    # EdgeMqttClient reads many packets per socket read (fedrca/edge/mqtt_client.py; packet by packet:
    # tests/edge/test_mqtt_client.py): the burst's last messages arrive with no later message to wake
    # the reader, every one in order, QoS 1 ones acknowledged
    prefix = f"b{os.getpid()}{time.monotonic_ns()}"
    reader, updates = json_reader(mqtt_broker, MqttTag(topic=f"{prefix}/a"), MqttTag(topic=f"{prefix}/b"))
    qos0 = set(range(0, 400, 3))  # a: QoS 0, b: QoS 1 (a broker keeps the order of one topic and QoS)

    async def body() -> None:
        client = publisher(mqtt_broker.address)
        try:
            infos = [client.publish(f"{prefix}/{'a' if i in qos0 else 'b'}", b"%d" % i, qos=0 if i in qos0 else 1)
                     for i in range(400)]  # fmt: skip
            for info in infos:
                info.wait_for_publish(timeout=10)
            await wait_for(lambda: len(updates.all) == 400, 10, "the burst's 400 updates")
        finally:
            client.loop_stop()
            client.disconnect()

    run_with(reader, body)
    assert [v for v, _ in updates.of(0)] == [float(i) for i in sorted(qos0)]  # all, in order
    assert [v for v, _ in updates.of(1)] == [float(i) for i in range(400) if i not in qos0]
    assert reader.counters.conflated == reader.stats.dropped == 0 and updates.refused == []


def test_flood_of_updates_memory_bounded_nothing_valid_lost(mqtt_broker: MqttBroker) -> None:
    prefix = f"f{os.getpid()}{time.monotonic_ns()}"
    reader, updates = json_reader(mqtt_broker, MqttTag(topic=f"{prefix}/flood"), MqttTag(topic=f"{prefix}/valid"))
    peak = {"pending": 0}

    async def body() -> None:
        client = publisher(mqtt_broker.address)
        queue = reader.link.client._queue  # type: ignore[union-attr]  # the reader's PendingQueue
        queue.hard, queue.soft = 300, 30  # small bounds, so a modest flood crosses them
        original = queue.put_nowait

        def watch(item: Any) -> None:
            original(item)
            peak["pending"] = max(peak["pending"], queue.qsize())

        queue.put_nowait = watch
        try:
            for i in range(4000):
                client.publish(f"{prefix}/flood", b"%d" % i, qos=0)
            publish(client, f"{prefix}/valid", b"42.0")
            await wait_for(lambda: updates.of(1) == [(42.0, GOOD)], 30, "the valid value behind the flood")
            await wait_for(lambda: queue.qsize() == 0, 30, "the queue to drain")
        finally:
            client.loop_stop()
            client.disconnect()

    run_with(reader, body)
    assert peak["pending"] <= 300  # memory bounded: the queue never held more than its hard bound
    flood = [v for v, _ in updates.of(0)]
    # what passed is in order and good; what the bound held back was superseded by a newer value
    assert flood and flood == sorted(flood) and not any(v is None or math.isnan(v) for v in flood)
    assert reader.stats.messages + reader.counters.conflated + reader.stats.dropped <= 4001


def test_sparkplug_primary_host_state_is_retained_online_then_offline(mqtt_broker: MqttBroker) -> None:
    host_id = f"h{os.getpid()}{time.monotonic_ns()}"
    source = SparkplugSource(kind="sparkplug", url=f"mqtt://{mqtt_broker.address}", group="g", node="n",
                             host_id=host_id)  # fmt: skip
    reader, _ = sparkplug_reader(source, SparkplugTag(metric="a"))
    run_with(reader, lambda: asyncio.sleep(0.2))
    states: list[dict[str, Any]] = []
    client = publisher(mqtt_broker.address)
    client.on_message = lambda c, u, m: states.append(orjson.loads(m.payload))
    client.subscribe(f"spBv1.0/STATE/{host_id}", qos=1)
    deadline = time.monotonic() + 10
    while not states and time.monotonic() < deadline:
        time.sleep(0.05)
    client.loop_stop()
    client.disconnect()
    # retained: a node connecting later learns the host's state; a host that stopped says it is offline
    assert states and states[-1]["online"] is False and isinstance(states[-1]["timestamp"], int)
