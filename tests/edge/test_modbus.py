"""fedrca.edge.modbus against a real pymodbus TCP server: types, exceptions, timeouts, restarts, hostile input."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Coroutine
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from fedrca.config import parse_config
from fedrca.config.edge_protocols import ModbusSource, ModbusTag
from fedrca.edge.modbus import EXCEPTION_NAMES, ModbusPoller, plan_reads
from fedrca.edge.modbus_server import ModbusPlantServer, ModbusTagServer
from fedrca.edge.modbus_server import edge_section as modbus_edge_section
from fedrca.edge.runtime import EdgeRuntime
from tests.edge.recording import RecordingSink, tags
from tests.edge.support import wait_for

pytestmark = pytest.mark.modbus
GOOD, BAD = 0, 1


def serve(body: Callable[[ModbusPlantServer], Coroutine[Any, Any, None]], units: tuple[int, ...] = (1, 2)) -> None:
    async def main() -> None:
        server = ModbusPlantServer(units, size=512)
        await server.start()
        try:
            await body(server)
        finally:
            await server.stop()

    asyncio.run(main())


def poller(server: ModbusPlantServer, addresses: list[ModbusTag], **kw: Any) -> tuple[ModbusPoller, RecordingSink]:
    options = {"timeout": 0.3, "retries": 0, **kw}
    source = ModbusSource(kind="modbus", url=f"modbus://127.0.0.1:{server.port}", **options)
    p = ModbusPoller("plc", source, tags(*addresses), period=0.1)
    p.sink = RecordingSink()  # type: ignore[attr-defined]
    return p, p.sink  # type: ignore[attr-defined]


async def running(p: ModbusPoller, body: Callable[[], Coroutine[Any, Any, None]]) -> None:
    task = asyncio.create_task(p.run(p.sink))  # type: ignore[attr-defined]
    try:
        await body()
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


TYPED = [
    ("int16", -1234.0, "big"), ("uint16", 65535.0, "big"), ("int32", -7_000_000.0, "little"),
    ("uint32", 4_000_000_000.0, "big"), ("float32", 2705.5, "little"), ("int64", -2.0**40, "big"),
    ("uint64", 2.0**50, "little"), ("float64", math.pi, "big"),
]  # fmt: skip


def test_every_type_word_order_scale_and_table() -> None:
    async def body(server: ModbusPlantServer) -> None:
        addresses = []
        for i, (kind, value, order) in enumerate(TYPED):
            server.write(1, "holding", 10 * i, value, kind, order)
            addresses.append(ModbusTag(register=10 * i, type=kind, word_order=order))
        server.write(1, "input", 3, 123, "uint16")
        server.write(2, "coil", 17, 1)
        server.write(2, "discrete", 4, 0)
        n = len(addresses)
        addresses += [
            ModbusTag(register="ir:3", scale=0.5, offset=-1.0),
            ModbusTag(register="coil:17", unit=2),
            ModbusTag(register=4, table="discrete", unit=2),
        ]
        p, updates = poller(server, addresses)
        await running(p, lambda: wait_for(lambda: all(updates.last(i) for i in range(n + 3)), 10, "every tag"))
        for i, (kind, value, _) in enumerate(TYPED):
            got = updates.last(i)
            assert got is not None and got[1] == GOOD, kind
            assert got[0] == pytest.approx(value, rel=1e-6), kind
        assert updates.last(n) == (60.5, GOOD)
        assert updates.last(n + 1) == (1.0, GOOD) and updates.last(n + 2) == (0.0, GOOD)

    serve(body)


def test_exception_codes_are_bad_values_counted_per_code() -> None:
    codes = [1, 2, 3, 4, 5, 6, 8, 10, 11]

    async def body(server: ModbusPlantServer) -> None:
        addresses = [ModbusTag(register=20 * i) for i in range(len(codes))] + [ModbusTag(register=400)]
        server.write(1, "holding", 400, 7, "uint16")
        for i, code in enumerate(codes):
            server.fail(1, "holding", 20 * i, 20 * i, code)
        p, updates = poller(server, addresses)
        await running(p, lambda: wait_for(lambda: p.stats.polls >= 2, 10, "two polls"))
        for i, code in enumerate(codes):
            assert updates.last(i) == (None, BAD), code
            assert p.stats.exceptions[code] >= 2, code
            refused = [r for r in updates.refused if r[1] == f"modbus-exception-{code}"]
            # refused at every poll, naming the register and the protocol's name of the code
            assert {r[0] for r in refused} == {i} and len(refused) == p.stats.exceptions[code], code
            assert f"holding {20 * i}..{20 * i}" in refused[0][2] and EXCEPTION_NAMES[code] in refused[0][2]
        assert updates.last(len(codes)) == (7.0, GOOD)  # the healthy register of the same unit is unharmed

    serve(body)


def test_illegal_address_in_a_block_splits_it_so_only_that_tag_is_bad() -> None:
    async def body(server: ModbusPlantServer) -> None:
        server.write(1, "holding", 0, 1.5, "float32")
        server.write(1, "holding", 4, 2.5, "float32")
        server.fail(1, "holding", 2, 3, 2)
        p, updates = poller(server, [ModbusTag(register=r, type="float32") for r in (0, 2, 4)])
        assert len(p.blocks) == 1
        # The split blocks are read one after another in a poll, so wait for the last one's
        # update too: tag 0 alone can be reported before tag 2 is.
        expected = [(1.5, GOOD), (None, BAD), (2.5, GOOD)]
        await running(
            p, lambda: wait_for(lambda: [updates.last(i) for i in range(3)] == expected, 10, "the split reads")
        )
        assert len(p.blocks) == 3

    serve(body)


def test_timeout_then_recovery() -> None:
    async def body(server: ModbusPlantServer) -> None:
        server.write(1, "holding", 0, 5, "uint16")
        p, updates = poller(server, [ModbusTag(register=0)], timeout=0.2)

        async def steps() -> None:
            await wait_for(lambda: updates.last(0) == (5.0, GOOD), 10, "a good value")
            server.delay(1, 0.5)
            await wait_for(lambda: updates.last(0) == (None, BAD), 10, "the timeout")
            assert p.stats.timeouts >= 1 and updates.refused[-1][1] == "timeout"
            server.heal()
            server.write(1, "holding", 0, 6, "uint16")
            await wait_for(lambda: updates.last(0) == (6.0, GOOD), 10, "a good value again")

        await running(p, steps)

    serve(body)


def test_server_down_and_back_reconnects_by_itself() -> None:
    async def body(server: ModbusPlantServer) -> None:
        server.write(1, "holding", 0, 5, "uint16")
        p, updates = poller(server, [ModbusTag(register=0)], reconnect_max_delay=0.2)

        async def steps() -> None:
            await wait_for(lambda: updates.last(0) == (5.0, GOOD), 10, "a good value")
            await server.stop()
            await wait_for(lambda: updates.last(0) == (None, BAD), 10, "the tags Bad while the server is down")
            await asyncio.sleep(0.5)
            await server.start()  # the same port
            server.write(1, "holding", 0, 8, "uint16")
            await wait_for(lambda: updates.last(0) == (8.0, GOOD), 15, "a value after the restart")
            assert p.counters.reconnects >= 1

        await running(p, steps)

    serve(body)


def test_hostile_registers_and_replies() -> None:
    """Values a device may hold or answer that are no reading: each a Bad value, none a crash."""

    async def body(server: ModbusPlantServer) -> None:
        cases: list[tuple[str, ModbusTag, Callable[[], None]]] = [
            ("float32 NaN", ModbusTag(register=0, type="float32"), lambda: server.write(1, "holding", 0, math.nan)),
            ("float32 +inf", ModbusTag(register=2, type="float32"), lambda: server.write(1, "holding", 2, math.inf)),
            ("float32 -inf", ModbusTag(register=4, type="float32"), lambda: server.write(1, "holding", 4, -math.inf)),
            (
                "float64 NaN",
                ModbusTag(register=6, type="float64"),
                lambda: server.write(1, "holding", 6, math.nan, "float64"),
            ),
            (
                "float32 NaN, little",
                ModbusTag(register=10, type="float32", word_order="little"),
                lambda: server.write_words(1, "holding", 10, [0x0000, 0x7FC0]),
            ),
            ("past the device's registers", ModbusTag(register=600), lambda: None),
            ("a value across the end", ModbusTag(register=511, type="float32"), lambda: None),
            ("a unit that does not exist", ModbusTag(register=0, unit=99), lambda: None),
            ("a coil past the end", ModbusTag(register="coil:5000"), lambda: None),
            ("input register past the end", ModbusTag(register="ir:1000:int32"), lambda: None),
            (
                "scale to inf",
                ModbusTag(register=20, type="float32", scale=1e308),
                lambda: server.write(1, "holding", 20, 3.0e38),
            ),
        ]
        for _, _, setup in cases:
            setup()
        server.write(1, "holding", 100, 42, "uint16")
        p, updates = poller(server, [tag for _, tag, _ in cases] + [ModbusTag(register=100)])
        await running(p, lambda: wait_for(lambda: p.stats.polls >= 2, 10, "two polls"))
        for i, (what, _, _) in enumerate(cases):
            assert updates.last(i) == (None, BAD), what
        assert updates.last(len(cases)) == (42.0, GOOD)

    serve(body)


@pytest.mark.parametrize(
    ("address", "message"),
    [
        ({"register": -1}, "greater than or equal to 0"),
        ({"register": 65536}, "less than or equal to 65535"),
        ({"register": 65535, "type": "float32"}, "past 65535"),
        ({"register": 1, "type": "bool"}, "type bool is for table coil"),
        ({"register": 1, "table": "coil", "type": "float32"}, "type must be bool"),
        ({"register": "hr:x"}, "table:register"),
        ({"register": "tank:3"}, "table:register"),
        ({"register": 1, "type": "float16"}, "int16"),
        ({"register": 1, "word_order": "middle"}, "big"),
        ({"register": 1, "unit": 256}, "less than or equal to 255"),
        ({"register": 1, "scale": math.inf}, "finite"),
    ],
)
def test_hostile_tag_addresses_are_refused_with_the_fix(address: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        ModbusTag.model_validate(address)


_tag = st.builds(
    lambda reg, table, kind, unit: ModbusTag(register=min(reg, 65_531), table=table, unit=unit,
                                             type=None if table in ("coil", "discrete") else kind),
    st.integers(0, 65_535), st.sampled_from(["holding", "input", "coil", "discrete"]),
    st.sampled_from(["int16", "uint32", "float32", "float64"]), st.sampled_from([None, 1, 2]),
)  # fmt: skip


@settings(max_examples=40, deadline=None)
@given(st.lists(_tag, max_size=60), st.integers(1, 125), st.integers(0, 20))
def test_plan_reads_covers_every_tag_once_within_the_protocol_bounds(
    tags: list[ModbusTag], max_registers: int, max_gap: int
) -> None:
    tags = [t for t in tags if t.width <= max_registers]
    blocks = plan_reads([(i, t, "") for i, t in enumerate(tags)], 1, max_registers, max_gap)
    seen = sorted(item.tag for b in blocks for item in b.items)
    assert seen == list(range(len(tags)))
    for block in blocks:
        limit = 2000 if block.table in ("coil", "discrete") else max_registers
        assert 1 <= block.count <= limit
        for item in block.items:
            tag = tags[item.tag]
            assert block.start + item.offset == tag.reg and item.offset + item.width <= block.count
            assert block.unit == (1 if tag.unit is None else tag.unit) and block.table == tag.table


def test_runtime_rows_are_the_served_samples_over_modbus() -> None:
    """The simulated plant's registers polled on the sample clock: each sample served shows up, exactly (float32
    on the wire: the values are float32 numbers), in the rows of every plant, in the order served, and every
    full row holds the sample served last before it was polled, never a mix of two.

    Each sample is served once the one before it is in a row of every plant (a condition, not a sleep: a loaded
    machine that polls late makes a sample span more rows, not a different row)."""
    plants = {"boiler": ["a", "b", "c"], "turbine": ["d", "e"]}
    columns = [c for cols in plants.values() for c in cols]
    period = 0.25
    samples = np.random.default_rng(3).normal(size=(6, 5)).astype(np.float32).astype(np.float64)
    parts = {}
    offset = 0
    for plant, cols in plants.items():
        parts[plant] = [tuple(row[offset : offset + len(cols)].tolist()) for row in samples]
        offset += len(cols)

    async def scenario() -> dict[str, list[Any]]:
        server = ModbusTagServer(plants)
        await server.start()
        config = parse_config({
            "site": "s",
            "dataset": {"format": "csv", "columns": columns, "sample_seconds": period},
            "plants": [{"name": p, "sensors": cols} for p, cols in plants.items()],
            "edge": modbus_edge_section(plants, server.url, staleness_seconds=60.0),
        })  # fmt: skip
        runtime = EdgeRuntime(config, list(plants), keep_rows=True)
        done = asyncio.Event()
        run = asyncio.create_task(runtime.run(until=done.is_set))

        def shown(k: int) -> bool:
            return all(any(tuple(r.values.tolist()) == parts[p][k] for r in runtime.rows[p]) for p in plants)

        try:
            for k, row in enumerate(samples):
                await server.write(dict(zip(columns, row.tolist(), strict=True)), time.time())
                await wait_for(lambda k=k: shown(k), timeout=30.0, what=f"sample {k} in a row of every plant")
        finally:
            done.set()
            await run
            await server.stop()
        return runtime.rows

    got = asyncio.run(scenario())
    for plant, cols in plants.items():
        rows = got[plant]
        seqs = [r.seq for r in rows]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), plant  # the clock: consecutive
        full = [r for r in rows if r.quality.tolist() == [GOOD] * len(cols)]
        # from the first sample on, every full row is one of the samples, in the order served, each of them
        index = [parts[plant].index(v) if (v := tuple(r.values.tolist())) in parts[plant] else None for r in full]
        first = next(n for n, k in enumerate(index) if k is not None)
        served = index[first:]
        assert None not in served, (plant, [r.values.tolist() for r in full[first:]])
        assert served == sorted(served) and sorted(set(served)) == list(range(len(samples))), (plant, served)
