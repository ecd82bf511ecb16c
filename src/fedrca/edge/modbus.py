"""Modbus TCP source of ``fedrca edge`` (``kind: modbus``): registers polled with pymodbus on the plant's clock.

A Modbus device has no subscriptions: the edge polls it. :func:`plan_reads` groups the
tags of one unit and table into as few requests as the protocol allows (contiguous
registers, across holes of at most ``max_gap``, at most ``max_registers`` a request);
:class:`ModbusPoller` sends them every ``poll_seconds`` (default the edge's sample
clock), just before each sample time, and decodes each tag (:func:`decode`: int16 /
uint16 / int32 / uint32 / float32 / int64 / uint64 / float64 in either word order, bits
for coils and discrete inputs; then ``value * scale + offset``).

What the device says goes into the tags' quality, never into a crash:

* an **exception response** (illegal function 1, illegal address 2, illegal value 3,
  device failure 4, busy 6, gateway path unavailable 10, gateway target failed to
  respond 11, ...) makes the request's tags Bad, counted per code and reported to the
  sink as ``modbus-exception-<code>`` (one log line per request and code). An illegal
  address on a request of several tags splits it into one request per tag from then on,
  so one wrong register costs only its own tag;
* a **timeout** (no answer within ``timeout`` after ``retries``) makes the tags Bad,
  counted in ``timeouts`` and reported as ``timeout``;
* a **lost connection** makes every tag Bad and reconnects with a backoff from 0.1 s to
  ``reconnect_max_delay``;
* a reply with the wrong number of registers, or a float that is NaN / inf, is Bad.

Values are stamped with the time the request was sent (the device sampled them between
sending and the answer).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from pymodbus.client import AsyncModbusTcpClient
from pymodbus.exceptions import ConnectionException, ModbusException, ModbusIOException

from fedrca.config.edge_protocols import ModbusSource, ModbusTag
from fedrca.edge.source import SourceCounters, TagSink
from fedrca.edge.tags import Tag, TagUpdate

__all__ = [
    "EXCEPTION_NAMES",
    "ModbusPoller",
    "PollStats",
    "ReadBlock",
    "ReadItem",
    "decode",
    "plan_reads",
]

log = logging.getLogger("fedrca.edge.modbus")

_GOOD, _BAD = 0, 1
#: Modbus exception codes (the protocol's names).
EXCEPTION_NAMES = {
    1: "illegal function", 2: "illegal data address", 3: "illegal data value", 4: "server device failure",
    5: "acknowledge", 6: "server device busy", 7: "negative acknowledge", 8: "memory parity error",
    10: "gateway path unavailable", 11: "gateway target device failed to respond",
}  # fmt: skip
#: Most coils / discrete inputs one request reads (the protocol's bound).
MAX_BITS = 2000

_DATATYPE = AsyncModbusTcpClient.DATATYPE
_TYPES = {
    "int16": _DATATYPE.INT16, "uint16": _DATATYPE.UINT16, "int32": _DATATYPE.INT32, "uint32": _DATATYPE.UINT32,
    "float32": _DATATYPE.FLOAT32, "int64": _DATATYPE.INT64, "uint64": _DATATYPE.UINT64,
    "float64": _DATATYPE.FLOAT64,
}  # fmt: skip


@dataclass(frozen=True)
class ReadItem:
    """One tag of a request: its index, where its value starts in the reply, how to decode it."""

    tag: int
    offset: int
    type: str
    width: int
    word_order: str = "big"
    scale: float = 1.0
    offset_value: float = 0.0
    label: str = ""


@dataclass(frozen=True)
class ReadBlock:
    """One read request: ``count`` registers (or bits) of ``table`` from ``start`` on unit ``unit``."""

    unit: int
    table: str
    start: int
    count: int
    items: tuple[ReadItem, ...]

    def describe(self) -> str:
        return f"unit {self.unit} {self.table} {self.start}..{self.start + self.count - 1}"


def plan_reads(
    tags: Iterable[tuple[int, ModbusTag, str]], default_unit: int, max_registers: int = 125, max_gap: int = 8
) -> list[ReadBlock]:
    """Group tags into requests (see the module docstring).

    Examples
    --------
    >>> tags = [(0, ModbusTag(register=100, type="float32"), "a"), (1, ModbusTag(register=102, type="float32"), "b"),
    ...         (2, ModbusTag(register=400), "c"), (3, ModbusTag(register=5, table="coil"), "d")]
    >>> [(b.table, b.start, b.count, [i.tag for i in b.items]) for b in plan_reads(tags, default_unit=1)]
    [('coil', 5, 1, [3]), ('holding', 100, 4, [0, 1]), ('holding', 400, 1, [2])]
    """
    groups: dict[tuple[int, str], list[tuple[int, ModbusTag, str]]] = {}
    for index, address, label in tags:
        unit = default_unit if address.unit is None else address.unit
        groups.setdefault((unit, address.table), []).append((index, address, label))
    blocks: list[ReadBlock] = []
    for (unit, table), members in sorted(groups.items()):
        limit = MAX_BITS if table in ("coil", "discrete") else max_registers
        members.sort(key=lambda m: (m[1].reg, m[0]))
        current: list[tuple[int, ModbusTag, str]] = []
        start = end = 0
        for member in members:
            address = member[1]
            first, last = address.reg, address.reg + address.width
            if current and (first - end > max_gap or max(end, last) - start > limit):
                blocks.append(_block(unit, table, start, end, current))
                current = []
            if not current:
                start, end = first, last
            current.append(member)
            end = max(end, last)
        if current:
            blocks.append(_block(unit, table, start, end, current))
    return blocks


def _block(unit: int, table: str, start: int, end: int, members: list[tuple[int, ModbusTag, str]]) -> ReadBlock:
    items = tuple(
        ReadItem(
            index,
            address.reg - start,
            address.value_type,
            address.width,
            address.word_order,
            address.scale,
            address.offset,
            label,
        )
        for index, address, label in members
    )
    return ReadBlock(unit, table, start, end - start, items)


def decode(item: ReadItem, words: Sequence[int] | Sequence[bool]) -> float | None:
    """One tag's raw value from a reply (its registers, or its bits); None when it is no finite number.

    Examples
    --------
    >>> decode(ReadItem(0, 0, "int16", 1), [65535]), decode(ReadItem(0, 1, "float32", 2), [0, 0x4049, 0x0FDB])
    (-1.0, 3.1415927410125732)
    >>> decode(ReadItem(0, 0, "float32", 2, word_order="little"), [0x0FDB, 0x4049])
    3.1415927410125732
    """
    if item.type == "bool":
        if item.offset >= len(words):
            return None
        return 1.0 if words[item.offset] else 0.0
    part = words[item.offset : item.offset + item.width]
    if len(part) != item.width:
        return None
    raw = AsyncModbusTcpClient.convert_from_registers(
        [int(w) for w in part],
        _TYPES[item.type],
        word_order=item.word_order,  # type: ignore[arg-type]
    )
    value = float(raw)  # type: ignore[arg-type]
    return value if math.isfinite(value) else None


@dataclass
class PollStats:
    """Details of a :class:`ModbusPoller` beyond its :class:`~fedrca.edge.source.SourceCounters` (cumulative)."""

    polls: int = 0  # completed (every block reported)
    requests: int = 0
    timeouts: int = 0
    malformed: int = 0
    connects: int = 0
    exceptions: Counter[int] = field(default_factory=Counter)


class ModbusPoller:
    """The tags of one ``kind: modbus`` source, polled: a :class:`~fedrca.edge.source.TagSource`.

    Parameters
    ----------
    name : the source's name
    settings : its settings
    tags : the tags read from it (addresses :class:`ModbusTag`)
    period : the polling period, s, unless ``poll_seconds`` is set (the edge's sample clock)
    anchor : a sample time (polls are at ``anchor + k * period - lead``)
    clock : seconds since the epoch
    """

    kind = "modbus"

    def __init__(
        self,
        name: str,
        settings: ModbusSource,
        tags: Sequence[Tag],
        period: float,
        anchor: float = 0.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.name = name
        self.settings = settings
        self.tags = list(tags)
        self.period = settings.poll_seconds or period
        self.anchor = anchor
        # polled a little before each sample time, so the answer is in before the row closes
        self.lead = min(0.1, self.period / 4)
        self.counters = SourceCounters()
        self.stats = PollStats()
        self._sink: TagSink | None = None
        self._clock = clock
        self._reported: set[tuple[str, str]] = set()
        addresses = []
        for tag in self.tags:
            assert isinstance(tag.address, ModbusTag)
            addresses.append((tag.index, tag.address, tag.name))
        self.blocks = plan_reads(addresses, settings.unit, settings.max_registers, settings.max_gap)

    # -- one poll ------------------------------------------------------------------------------------
    def _update(self, tag: int, value: float | None, quality: int, ts: float) -> None:
        self.counters.updates += 1
        if self._sink is not None:
            self._sink.update(TagUpdate(tag, value, quality, ts))

    def _reject(self, block: ReadBlock, reason: str, detail: str) -> None:
        """Count, report and log (once per request and reason) what the device answered instead of values."""
        c = self.counters
        c.rejected += 1
        c.reasons[reason] = c.reasons.get(reason, 0) + 1
        text = f"{block.describe()}: {detail}"
        if self._sink is not None:
            self._sink.rejected(block.items[0].tag, reason, text)
        key = (block.describe(), reason)
        if key not in self._reported and len(self._reported) < 10_000:
            self._reported.add(key)
            log.warning("%s: %s (%s; logged once per request and reason)", self.name, text, reason)

    def _bad(self, block: ReadBlock, ts: float) -> None:
        for item in block.items:
            self._update(item.tag, None, _BAD, ts)

    async def _request(self, client: AsyncModbusTcpClient, block: ReadBlock) -> object:
        read = {
            "holding": client.read_holding_registers,
            "input": client.read_input_registers,
            "coil": client.read_coils,
            "discrete": client.read_discrete_inputs,
        }[block.table]
        self.stats.requests += 1
        return await read(block.start, count=block.count, device_id=block.unit)

    async def poll(self, client: AsyncModbusTcpClient) -> None:
        """Read every block once and report each tag (raises ConnectionException when the link is gone).

        ``stats.polls`` counts the polls that reported every block (a test waiting for two polls then sees
        both polls' reports: ``tests/edge/test_modbus.py``).
        """
        split: list[tuple[ReadBlock, list[ReadBlock]]] = []
        for block in self.blocks:
            ts = self._clock()
            try:
                reply = await self._request(client, block)
            except ConnectionException:
                raise
            except ModbusIOException as exc:
                self.stats.timeouts += 1
                self._reject(block, "timeout", f"no answer ({str(exc)[:200]}); its {len(block.items)} tags are Bad")
                self._bad(block, ts)
                continue
            except ModbusException as exc:
                self.stats.malformed += 1
                self._reject(block, "malformed", f"{str(exc)[:200]}; its {len(block.items)} tags are Bad")
                self._bad(block, ts)
                continue
            if reply.isError():  # type: ignore[attr-defined]
                code = int(getattr(reply, "exception_code", 0))
                self.stats.exceptions[code] += 1
                name = EXCEPTION_NAMES.get(code, "unknown exception")
                self._reject(block, f"modbus-exception-{code}",
                             f"exception {code} ({name}); its {len(block.items)} tags are Bad")  # fmt: skip
                self._bad(block, ts)
                if code == 2 and len(block.items) > 1:
                    split.append((block, [_single(block, item) for item in block.items]))
                continue
            words = reply.bits if block.table in ("coil", "discrete") else reply.registers  # type: ignore[attr-defined]
            expected = block.count
            if len(words) < expected:
                self.stats.malformed += 1
                self._reject(block, "malformed", f"{len(words)} values in the reply, {expected} asked")
            for item in block.items:
                value = decode(item, words)
                if value is not None and (item.scale != 1.0 or item.offset_value != 0.0):
                    value = value * item.scale + item.offset_value
                if value is None or not math.isfinite(value):
                    self._update(item.tag, None, _BAD, ts)
                else:
                    self._update(item.tag, value, _GOOD, ts)
        for block, parts in split:
            log.warning("modbus source '%s' %s: illegal address; reading its %d tags one by one from now on",
                        self.name, block.describe(), len(parts))  # fmt: skip
            at = self.blocks.index(block)
            self.blocks[at : at + 1] = parts
        self.stats.polls += 1

    # -- the loop ------------------------------------------------------------------------------------
    def _next_poll(self, now: float) -> float:
        k = math.floor((now + self.lead - self.anchor) / self.period) + 1
        return self.anchor + k * self.period - self.lead

    async def run(self, sink: TagSink) -> None:
        """Poll into ``sink`` until cancelled; reconnect by itself."""
        self._sink = sink
        host, port = self.settings.address()
        delay, reported = 0.1, False
        logging.getLogger("pymodbus").setLevel(logging.CRITICAL)  # its errors are reported here, once
        while True:
            client = AsyncModbusTcpClient(
                host, port=port, timeout=self.settings.timeout, retries=self.settings.retries,
                reconnect_delay=0,  # reconnection is this loop's (with its backoff and counters)
            )  # fmt: skip
            try:
                if not await client.connect():
                    raise ConnectionException(f"cannot connect to {host}:{port}")
                self.stats.connects += 1
                self.counters.connected = True
                if self.stats.connects == 1:
                    log.info("modbus source '%s': connected to %s:%d, %d requests every %g s", self.name, host,
                             port, len(self.blocks), self.period)  # fmt: skip
                else:
                    self.counters.reconnects += 1
                    log.warning("modbus source '%s': connected again to %s:%d", self.name, host, port)
                delay, reported = 0.1, False
                while True:
                    await asyncio.sleep(max(0.0, self._next_poll(self._clock()) - self._clock()))
                    await self.poll(client)
            except ConnectionException as exc:
                self.counters.last_error = str(exc)[:500]
                if not reported:  # one line an outage, not one a retry
                    log.warning("modbus source '%s': %s:%d unreachable (%s); its tags are Bad, reconnecting",
                                self.name, host, port, str(exc)[:200])  # fmt: skip
                    reported = True
                self.counters.connected = False
                now = self._clock()
                for block in self.blocks:
                    self._bad(block, now)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.settings.reconnect_max_delay)
            finally:
                self.counters.connected = False
                client.close()


def _single(block: ReadBlock, item: ReadItem) -> ReadBlock:
    start = block.start + item.offset
    return ReadBlock(block.unit, block.table, start, item.width, (ReadItem(
        item.tag, 0, item.type, item.width, item.word_order, item.scale, item.offset_value, item.label),))  # fmt: skip
