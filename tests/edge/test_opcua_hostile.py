"""Hostile OPC UA input (issue 31 acceptance 4): one clear log line and a metric per case, no crash,
memory bounded, nothing valid lost. A real asyncua server sends each case to fedrca edge's source
and runtime; a well-behaved tag beside them must keep every value.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from datetime import UTC, datetime

import pytest
from asyncua import ua

from fedrca.edge.opcua import OpcuaSource
from fedrca.edge.opcua_server import TagServer
from fedrca.edge.runtime import EdgeRuntime
from fedrca.edge.tags import Quality, TagMap, TagUpdate
from tests.edge.support import site, wait_for

G, B, M = int(Quality.GOOD), int(Quality.BAD), int(Quality.MISSING)

#: name -> (variant, status code, source time, expected quality, expected reason or None)
CASES = {
    "string": (ua.Variant("12.5", ua.VariantType.String), ua.StatusCodes.Good, None, B, "wrong-type"),
    "huge_string": (ua.Variant("x" * 1_000_000, ua.VariantType.String), ua.StatusCodes.Good, None, B, "wrong-type"),
    "bytes": (ua.Variant(b"\x00\xff" * 100, ua.VariantType.ByteString), ua.StatusCodes.Good, None, B, "wrong-type"),
    "array": (ua.Variant([1.0, 2.0, 3.0], ua.VariantType.Double), ua.StatusCodes.Good, None, B, "wrong-type"),
    "empty_array": (ua.Variant([], ua.VariantType.Double), ua.StatusCodes.Good, None, B, "wrong-type"),
    "nan": (ua.Variant(math.nan, ua.VariantType.Double), ua.StatusCodes.Good, None, B, "non-finite"),
    "inf": (ua.Variant(math.inf, ua.VariantType.Double), ua.StatusCodes.Good, None, B, "non-finite"),
    "minus_inf": (ua.Variant(-math.inf, ua.VariantType.Float), ua.StatusCodes.Good, None, B, "non-finite"),
    "overflow": (ua.Variant(1e308, ua.VariantType.Double), ua.StatusCodes.Good, None, B, "out-of-range"),
    "datetime": (ua.Variant(datetime(2020, 1, 1, tzinfo=UTC), ua.VariantType.DateTime), ua.StatusCodes.Good, None,
                 B, "wrong-type"),
    "guid": (ua.Variant(uuid.uuid4(), ua.VariantType.Guid), ua.StatusCodes.Good, None, B, "wrong-type"),
    "text": (ua.Variant(ua.LocalizedText("5"), ua.VariantType.LocalizedText), ua.StatusCodes.Good, None, B,
             "wrong-type"),
    "qname": (ua.Variant(ua.QualifiedName("q", 1), ua.VariantType.QualifiedName), ua.StatusCodes.Good, None, B,
              "wrong-type"),
    "nodeid": (ua.Variant(ua.NodeId(5, 0), ua.VariantType.NodeId), ua.StatusCodes.Good, None, B, "wrong-type"),
    "null_good": (ua.Variant(None, ua.VariantType.Null), ua.StatusCodes.Good, None, M, None),
    "bad_status": (ua.Variant(7.0, ua.VariantType.Double), ua.StatusCodes.BadSensorFailure, None, B, None),
    "uncertain": (ua.Variant(7.0, ua.VariantType.Double), ua.StatusCodes.UncertainSensorNotAccurate, None, B, None),
    "bad_no_value": (ua.Variant(None, ua.VariantType.Null), ua.StatusCodes.BadCommunicationError, None, B, None),
    "future_stamp": (ua.Variant(3.0, ua.VariantType.Double), ua.StatusCodes.Good, datetime(9999, 12, 31, tzinfo=UTC),
                     G, None),
    "ancient_stamp": (ua.Variant(4.0, ua.VariantType.Double), ua.StatusCodes.Good, datetime(1601, 1, 2, tzinfo=UTC),
                      G, None),
    "bool": (ua.Variant(True, ua.VariantType.Boolean), ua.StatusCodes.Good, None, G, None),
    "uint64_max": (ua.Variant(2**64 - 1, ua.VariantType.UInt64), ua.StatusCodes.Good, None, G, None),
    "int16": (ua.Variant(-5, ua.VariantType.Int16), ua.StatusCodes.Good, None, G, None),
}  # fmt: skip
VALID = "ok"
FLOOD = "flood"
COLUMNS = [VALID, FLOOD, *CASES]


def test_hostile_values_one_line_and_a_metric_each_nothing_valid_lost(caplog):
    assert len(CASES) >= 20

    async def scenario():
        async with TagServer([VALID, FLOOD]) as server:
            folder = server.server.get_node(ua.NodeId("Plant", server.ns, ua.NodeIdType.String))
            for name, (variant, *_) in CASES.items():
                # each case a variable of its own type (a server checks a write against the variable's type)
                node = ua.NodeId(name, server.ns, ua.NodeIdType.String)
                await folder.add_variable(node, name, variant.Value, variant.VariantType)
                server.nodes[name] = node
            # the keep-alive generous: a session lost here must be a case's doing, not a busy machine starving
            # the client (server, client and the 5,000-write flood share one event loop)
            config = site(
                server.url, COLUMNS, {"overflow": {"node": "s=overflow", "scale": 10.0}}, queue_size=5,
                watchdog_interval=5.0, request_timeout=60.0,
            )  # fmt: skip
            runtime = EdgeRuntime(config, ["p"], keep_rows=True)
            tags = TagMap(config, ["p"])
            index = {t.name: t.index for t in tags.tags}
            seen: dict[int, list] = {}
            original_many = runtime.update_many

            def update_many(tags, values, quality, source_ts):  # what the source hands the runtime
                for tag, value, q, ts in zip(tags, values, quality, source_ts, strict=True):
                    seen.setdefault(tag, []).append(TagUpdate(tag, None if math.isnan(value) else value, q, ts))
                original_many(tags, values, quality, source_ts)

            runtime.update_many = update_many  # type: ignore[method-assign]
            source = runtime.sources[0]
            assert isinstance(source, OpcuaSource)
            done = asyncio.Event()
            task = asyncio.create_task(runtime.run(until=done.is_set))
            await wait_for(lambda: source.counters.connected, what="connected")
            iserver = server.server.iserver
            for name, (variant, status, stamp, _, _) in CASES.items():
                dv = ua.DataValue(variant, StatusCode=ua.StatusCode(status), SourceTimestamp=stamp,
                                  ServerTimestamp=datetime.now(UTC))  # fmt: skip
                await iserver.write_attribute_value(server.nodes[name], dv)
            # a flood on one tag: 5,000 changes as fast as the server takes them (the server shares this
            # process's event loop with the client: it yields now and then, as its own process would)
            for k in range(5000):
                await server.write({FLOOD: float(k)}, time.time())
                if k % 50 == 0:
                    await asyncio.sleep(0)
            await wait_for(lambda: seen[index[FLOOD]][-1].value == 4999.0, what="the flood's last value")
            # the valid tag, one value per publish: every one must arrive, in order
            for k in range(20):
                await server.write({VALID: float(k)}, time.time())
                await asyncio.sleep(0.06)
            await wait_for(lambda: [u.value for u in seen.get(index[VALID], [])][-1:] == [19.0], what="the valid tag")
            await wait_for(lambda: all(index[n] in seen for n in CASES), what="every case")
            await wait_for(lambda: seen[index[FLOOD]][-1].value == 4999.0, what="the flood's last value")
            done.set()
            await task
            return runtime, index, seen

    with caplog.at_level(logging.WARNING, logger="fedrca.edge.opcua"):
        runtime, index, seen = asyncio.run(scenario())
    assert runtime.sources[0].counters.reconnects == 0  # no case brought the session down
    values = [u.value for u in seen[index[VALID]]]
    assert values[values.index(0.0) :] == [float(k) for k in range(20)]  # nothing valid lost
    for name, (_, _, _, quality, reason) in CASES.items():
        last = seen[index[name]][-1]
        assert last.quality == quality, name
        if quality != G:  # whatever number came with it, the row holds no value
            assert math.isnan(runtime.rows["p"][-1].values[index[name]]), name
            assert runtime.rows["p"][-1].quality[index[name]] == quality, name
        if reason is not None:
            metric = runtime.metrics.value("fedrca_edge_rejected_total", source="plc", reason=reason)
            assert metric is not None and metric >= 1, name
            lines = [r.getMessage() for r in caplog.records if f"p/{name} " in r.getMessage()]
            assert len(lines) == 1 and reason in lines[0], (name, lines)
    # the future-stamped value counts from its arrival, the ancient one is the value in force
    assert seen[index["future_stamp"]][-1].value == 3.0
    # memory bounded: the flood left at most a few entries per column in the assembler
    assembler = runtime.assemblers["p"]
    assert max(len(e) for e in assembler._entries) <= 3
    # the rows after the flood carry its last value
    rows = runtime.rows["p"]
    assert rows[-1].values[index[FLOOD]] == 4999.0
    assert rows[-1].quality[index["bool"]] == G and rows[-1].values[index["bool"]] == 1.0


@pytest.mark.parametrize("bad_url_key", ["url"])
def test_a_server_that_is_not_there_is_retried_with_one_line(caplog, bad_url_key):
    """Connection refused: one warning per outage (not one per retry), the source keeps trying."""

    async def scenario():
        config = site("opc.tcp://127.0.0.1:9", ["a"])
        source = OpcuaSource("plc", config.edge.sources["plc"], TagMap(config, ["p"]).tags)
        task = asyncio.create_task(source.run(_NullSink()))
        await asyncio.sleep(2.0)  # several back-off periods (0.5 s max in the fast settings)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return source

    with caplog.at_level(logging.WARNING, logger="fedrca.edge.opcua"):
        source = asyncio.run(scenario())
    lines = [r.getMessage() for r in caplog.records if "cannot reach" in r.getMessage()]
    assert len(lines) == 1 and "opc.tcp://127.0.0.1:9" in lines[0]
    assert not source.counters.connected and source.counters.last_error


class _NullSink:
    def update(self, update):
        pass

    def update_many(self, tags, values, quality, source_ts):
        pass

    def alive(self, tags):
        pass

    def rejected(self, tag, reason, detail):
        pass
