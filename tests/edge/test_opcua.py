"""The OPC UA source against a real asyncua server in the test process (no mocks).

Server restart, subscription lost, Bad status, status-only change, a tag of the wrong type,
unknown node ids and wrong credentials (issue 31, item 3), plus the runtime's rows and
staleness over the real protocol.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time

import pytest
from asyncua import ua

from fedrca.edge.opcua import OpcuaSource
from fedrca.edge.opcua_server import SIM_NAMESPACE, TagServer
from fedrca.edge.runtime import EdgeRuntime
from fedrca.edge.tags import Quality, TagMap
from fedrca.exceptions import ConfigError
from tests.edge.support import ListSink, site, wait_for

COLUMNS = ["a", "b", "c"]


def source_for(config, env=None) -> OpcuaSource:
    tags = TagMap(config, ["p"])
    return OpcuaSource("plc", config.edge.sources["plc"], tags.tags, env=env)


async def started(source: OpcuaSource, sink: ListSink) -> asyncio.Task:
    task = asyncio.create_task(source.run(sink))
    await wait_for(lambda: source.counters.connected or task.done(), what="the first connection")
    if task.done():
        task.result()
    return task


async def stopped(task: asyncio.Task) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def test_values_status_and_source_timestamps():
    async def scenario():
        async with TagServer(COLUMNS) as server:
            config = site(server.url, COLUMNS, {"c": {"path": "Plant/c", "scale": 2.0, "offset": 1.0}})
            source, sink = source_for(config), ListSink()
            task = await started(source, sink)
            stamp = time.time() - 30.0
            await server.write({"a": 1.5, "b": 2.5, "c": 3.0}, stamp)
            await wait_for(lambda: (sink.last(0) or (0, 0))[1] == 1.5 and (sink.last(2) or (0, 0))[1] == 7.0)
            a = sink.last(0)
            assert a.quality == Quality.GOOD and a.source_ts == pytest.approx(stamp, abs=1e-3)
            assert sink.last(2).value == 7.0  # browse path, scale and offset
            assert sink.alive_calls > 0  # publishes vouch for the tags
            # Bad status: quality bad, no value
            await server.write({"b": 9.0}, time.time(), status={"b": ua.StatusCodes.BadSensorFailure})
            await wait_for(lambda: sink.last(1).quality == Quality.BAD)
            # a value of None (BadNoCommunication) is bad too
            await server.write({"a": None}, time.time())
            await wait_for(lambda: sink.last(0).quality == Quality.BAD)
            await stopped(task)

    asyncio.run(scenario())


def test_status_only_change():
    """Status and value filter: the status alone changing is notified; the same value and status is not."""

    async def scenario():
        async with TagServer(COLUMNS) as server:
            source, sink = source_for(site(server.url, COLUMNS)), ListSink()
            task = await started(source, sink)
            await server.write({"a": 4.0}, time.time())
            await wait_for(lambda: sink.last(0) is not None and sink.last(0).value == 4.0)
            n = len([u for u in sink.updates if u.tag == 0])
            await server.write({"a": 4.0}, time.time(), status={"a": ua.StatusCodes.UncertainLastUsableValue})
            await wait_for(lambda: sink.last(0).quality == Quality.BAD, what="the status-only change")
            await server.write({"a": 4.0}, time.time())
            await wait_for(lambda: sink.last(0).quality == Quality.GOOD, what="good again")
            assert len([u for u in sink.updates if u.tag == 0]) == n + 2
            # same value, same status, a new timestamp: nothing (no flood of unchanged values)
            for _ in range(5):
                await server.write({"a": 4.0}, time.time())
            await asyncio.sleep(0.3)
            assert len([u for u in sink.updates if u.tag == 0]) == n + 2
            await stopped(task)

    asyncio.run(scenario())


def test_tag_of_the_wrong_type(caplog):
    async def scenario():
        async with TagServer(COLUMNS) as server:
            folder = server.server.get_node(ua.NodeId("Plant", server.ns, ua.NodeIdType.String))
            await folder.add_variable(ua.NodeId("text", server.ns, ua.NodeIdType.String), "text", "hello")
            await folder.add_variable(ua.NodeId("arr", server.ns, ua.NodeIdType.String), "arr", [1.0, 2.0])
            await folder.add_variable(ua.NodeId("flag", server.ns, ua.NodeIdType.String), "flag", True)
            config = site(server.url, ["text", "arr", "flag"])
            source, sink = source_for(config), ListSink()
            task = await started(source, sink)
            await wait_for(lambda: all(sink.last(i) is not None for i in range(3)))
            assert sink.last(0).quality == Quality.BAD and sink.last(0).value is None
            assert sink.last(1).quality == Quality.BAD and sink.last(1).value is None
            assert sink.last(2).quality == Quality.GOOD and sink.last(2).value == 1.0  # a digital tag is 0/1
            reasons = sorted((t, r) for t, r, _ in sink.rejections)
            assert reasons == [(0, "wrong-type"), (1, "wrong-type")]
            await stopped(task)

    with caplog.at_level(logging.WARNING, logger="fedrca.edge.opcua"):
        asyncio.run(scenario())
    lines = [r.getMessage() for r in caplog.records if "wrong-type" in r.getMessage()]
    assert len(lines) == 2 and "p/text" in lines[0] and "String" in lines[0]


def test_unknown_node_ids_stop_the_start_with_one_line_naming_them():
    async def scenario():
        async with TagServer(COLUMNS) as server:
            config = site(server.url, COLUMNS, {"b": "s=Nope", "c": "nsu=urn:not:there;s=c"})
            with pytest.raises(ConfigError) as err:
                await source_for(config).run(ListSink())
            return str(err.value)

    text = asyncio.run(scenario())
    assert "\n" not in text and "2 tag(s)" in text
    assert "p/b" in text and "Nope" in text and "urn:not:there" in text


def test_wrong_credentials_stop_the_start_with_one_line():
    async def scenario():
        async with TagServer(COLUMNS, users={"operator": "s3cret"}) as server:
            config = site(server.url, COLUMNS, username="operator", password_env="PLC_PASSWORD")
            with pytest.raises(ConfigError) as err:
                await source_for(config, env={"PLC_PASSWORD": "wrong"}).run(ListSink())
            # the right password connects
            source, sink = source_for(config, env={"PLC_PASSWORD": "s3cret"}), ListSink()
            task = await started(source, sink)
            await stopped(task)
            # no password in the environment: the variable is named
            with pytest.raises(ConfigError, match="PLC_PASSWORD"):
                await source_for(config, env={}).run(ListSink())
            return str(err.value)

    text = asyncio.run(scenario())
    assert "\n" not in text and "operator" in text and "$PLC_PASSWORD" in text and "BadUserAccessDenied" in text


def test_server_restart_recovers_without_operator_action():
    async def scenario():
        server = TagServer(COLUMNS)
        await server.start()
        source, sink = source_for(site(server.url, COLUMNS)), ListSink()
        task = await started(source, sink)
        await server.write({"a": 1.0}, time.time())
        await wait_for(lambda: sink.last(0) is not None and sink.last(0).value == 1.0)
        await server.stop()
        await wait_for(lambda: not source.counters.connected, what="the loss seen")
        await asyncio.sleep(0.5)
        await server.start()  # same port, a new address space (namespace indices resolved again)
        took = await wait_for(lambda: source.counters.connected, timeout=10.0, what="the session back")
        await server.write({"a": 2.0}, time.time())
        await wait_for(lambda: sink.last(0).value == 2.0, what="values after the restart")
        assert source.counters.reconnects == 1 and took < 10.0
        await stopped(task)
        await server.stop()

    asyncio.run(scenario())


def test_subscription_lost_is_created_again():
    """The server drops the subscription (session still up): the watchdog notices the silence and rebuilds."""

    async def scenario():
        async with TagServer(COLUMNS) as server:
            source, sink = source_for(site(server.url, COLUMNS)), ListSink()
            task = await started(source, sink)
            service = server.server.iserver.subscription_service
            await wait_for(lambda: len(service.subscriptions) == 1)
            await service.delete_subscriptions(list(service.subscriptions))
            await wait_for(lambda: source.counters.reconnects == 1, timeout=10.0, what="the subscription rebuilt")
            await server.write({"b": 5.0}, time.time())
            await wait_for(lambda: sink.last(1) is not None and sink.last(1).value == 5.0)
            await stopped(task)

    asyncio.run(scenario())


def test_runtime_rows_over_opcua_and_staleness_when_the_server_goes():
    async def scenario():
        server = TagServer(COLUMNS)
        await server.start()
        config = site(server.url, COLUMNS)
        runtime = EdgeRuntime(config, ["p"], keep_rows=True)
        await server.write({"a": 1.0, "b": 2.0, "c": 3.0}, time.time())
        done = asyncio.Event()
        run = asyncio.create_task(runtime.run(until=done.is_set))
        rows = runtime.rows["p"]
        await wait_for(lambda: any(r.usable == 3 for r in rows), what="a full row")
        full = next(r for r in rows if r.usable == 3)
        assert full.values.tolist() == [1.0, 2.0, 3.0]
        # seq is the clock: consecutive, ts = seq * period
        seqs = [r.seq for r in rows]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
        assert all(math.isclose(r.ts, r.seq * 0.2) for r in rows)
        await server.stop()
        # no keep-alives: the unchanged values go stale after staleness_seconds (1 s)
        await wait_for(lambda: rows[-1].quality.tolist() == [Quality.STALE] * 3, timeout=5.0, what="stale")
        done.set()
        await run

    asyncio.run(scenario())


def test_namespace_index_is_resolved_at_every_connection():
    async def scenario():
        async with TagServer(COLUMNS, namespace="urn:other") as server:
            config = site(server.url, COLUMNS, {"a": "nsu=urn:other;s=a", "b": f"ns={server.ns};s=b"},
                          namespace="urn:other")  # fmt: skip
            source, sink = source_for(config), ListSink()
            task = await started(source, sink)
            await server.write({"a": 1.0, "b": 2.0, "c": 3.0}, time.time())
            await wait_for(lambda: all(sink.last(i) is not None and sink.last(i).value for i in range(3)))
            await stopped(task)
            assert SIM_NAMESPACE != "urn:other"

    asyncio.run(scenario())
