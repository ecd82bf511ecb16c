"""A Modbus TCP server holding a simulated plant's registers (pymodbus), with injectable faults.

``fedrca simulate --to modbus://HOST:PORT`` serves the TEP simulator's tags from it, and the
tests poll it with the edge (``tests/edge/test_modbus.py``): a real Modbus TCP server, not
a mock. Each unit (slave) id has four tables of ``size`` entries: holding and input
registers, coils and discrete inputs, all 0 at start. :meth:`ModbusPlantServer.write`
stores a value of a type (int16 ... float64, either word order) as a device would;
:meth:`ModbusPlantServer.fail` makes requests touching some registers answer with an
exception code, :meth:`ModbusPlantServer.delay` makes a unit slow (timeouts).

The register image of the simulated plant (:func:`plant_layout`): plant ``p`` (0-based, in
the site's order) is unit ``p + 1``; its column ``i`` is the float32 in holding registers
``2i, 2i + 1`` (big-endian words), the layout :func:`plant_tags` writes as an ``edge:``
tag map.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pymodbus.client import AsyncModbusTcpClient
from pymodbus.constants import ExcCodes
from pymodbus.server import ModbusTcpServer
from pymodbus.simulator import DataType, SimData, SimDevice
from pymodbus.simulator.simutils import SimUtils

__all__ = ["ModbusPlantServer", "ModbusTagServer", "UnitImage", "edge_section", "plant_layout", "plant_tags"]

_TABLE_OF_FUNCTION = {1: "coil", 5: "coil", 15: "coil", 2: "discrete", 3: "holding", 6: "holding", 16: "holding",
                      22: "holding", 23: "holding", 4: "input"}  # fmt: skip
_TYPES = {
    "int16": AsyncModbusTcpClient.DATATYPE.INT16, "uint16": AsyncModbusTcpClient.DATATYPE.UINT16,
    "int32": AsyncModbusTcpClient.DATATYPE.INT32, "uint32": AsyncModbusTcpClient.DATATYPE.UINT32,
    "float32": AsyncModbusTcpClient.DATATYPE.FLOAT32, "int64": AsyncModbusTcpClient.DATATYPE.INT64,
    "uint64": AsyncModbusTcpClient.DATATYPE.UINT64, "float64": AsyncModbusTcpClient.DATATYPE.FLOAT64,
}  # fmt: skip


@dataclass
class UnitImage:
    """The four tables of one unit id."""

    size: int
    holding: list[int] = field(default_factory=list)
    input: list[int] = field(default_factory=list)
    coil: list[bool] = field(default_factory=list)
    discrete: list[bool] = field(default_factory=list)
    #: (table, first, last, exception code) of injected exceptions
    faults: list[tuple[str, int, int, int]] = field(default_factory=list)
    delay: float = 0.0

    def __post_init__(self) -> None:
        self.holding = self.holding or [0] * self.size
        self.input = self.input or [0] * self.size
        self.coil = self.coil or [False] * self.size
        self.discrete = self.discrete or [False] * self.size


class ModbusPlantServer:
    """A pymodbus TCP server over :class:`UnitImage` s (see the module docstring).

    Parameters
    ----------
    units : the unit ids served
    size : entries of each table (bits for coils and discrete inputs)
    host, port : where to listen (port 0: a free one, see :attr:`port` after :meth:`start`)
    """

    def __init__(self, units: Sequence[int], size: int = 1024, host: str = "127.0.0.1", port: int = 0) -> None:
        if not units or any(not 1 <= u <= 247 for u in units):
            raise ValueError("unit ids are 1..247")
        self.images = {unit: UnitImage(size) for unit in units}
        self.size = size
        self.host = host
        self.port = port
        self._server: ModbusTcpServer | None = None
        self._task: asyncio.Task[Any] | None = None

    # -- what the device holds ---------------------------------------------------------------------
    def write(self, unit: int, table: str, register: int, value: float, type: str = "float32",
              word_order: str = "big") -> None:  # fmt: skip
        """Store ``value`` as ``type`` at ``register`` (a bool for coils and discrete inputs).

        A float32 NaN or inf is stored as such (a device reporting an invalid reading).
        """
        image = self.images[unit]
        if table in ("coil", "discrete"):
            getattr(image, table)[register] = bool(value)
            return
        if type.startswith("float"):
            raw: float | int = float(value)
        else:
            if not math.isfinite(value):
                raise ValueError(f"{type} cannot hold {value}")
            raw = round(value)
        words = AsyncModbusTcpClient.convert_to_registers(raw, _TYPES[type], word_order=word_order)  # type: ignore[arg-type]
        getattr(image, table)[register : register + len(words)] = words

    def write_words(self, unit: int, table: str, register: int, words: Sequence[int]) -> None:
        """Store raw 16-bit words."""
        getattr(self.images[unit], table)[register : register + len(words)] = [int(w) & 0xFFFF for w in words]

    def fail(self, unit: int, table: str, first: int, last: int, code: int) -> None:
        """Requests of ``unit`` touching ``table`` registers ``first..last`` answer exception ``code``."""
        self.images[unit].faults.append((table, first, last, code))

    def heal(self, unit: int | None = None) -> None:
        """Remove injected exceptions and delays (of one unit, or all)."""
        for u, image in self.images.items():
            if unit is None or u == unit:
                image.faults.clear()
                image.delay = 0.0

    def delay(self, unit: int, seconds: float) -> None:
        """Answer every request of ``unit`` ``seconds`` late (0: on time)."""
        self.images[unit].delay = seconds

    # -- the pymodbus hook -------------------------------------------------------------------------
    async def _action(self, unit: int, function_code: int, start_address: int, address: int, count: int,
                      registers: list[int], set_values: Any) -> ExcCodes | None:  # fmt: skip
        image = self.images[unit]
        if image.delay > 0:
            await asyncio.sleep(image.delay)
        table = _TABLE_OF_FUNCTION.get(function_code)
        if table is None or set_values is not None:
            return ExcCodes.ILLEGAL_FUNCTION  # a read-only plant image
        bits = table in ("coil", "discrete")
        # for bit tables the runtime hands over the bit address and the count of 16-bit registers
        first = address
        last = address + count * (16 if bits else 1) - 1
        for f_table, f_first, f_last, code in image.faults:
            if f_table == table and f_first <= last and first <= f_last:
                return ExcCodes(code)
        if bits:
            packed = SimUtils.bitsToRegisters(getattr(image, table))
            registers[: len(packed)] = packed
        else:
            offset = address - start_address
            registers[offset : offset + count] = getattr(image, table)[address : address + count]
        return None

    def _device(self, unit: int) -> SimDevice:
        async def action(fc: int, start: int, address: int, count: int, regs: list[int], values: Any) -> Any:
            return await self._action(unit, fc, start, address, count, regs, values)

        words = [SimData(0, count=self.size, values=0, datatype=DataType.REGISTERS)]
        bits = [SimData(0, count=self.size, values=False, datatype=DataType.BITS)]
        return SimDevice(id=unit, simdata=(list(bits), list(bits), list(words), list(words)), action=action)

    # -- serving -----------------------------------------------------------------------------------
    async def start(self) -> None:
        """Listen (the port is known when this returns)."""
        if self.port == 0:
            with contextlib.closing(__import__("socket").socket()) as sock:
                sock.bind((self.host, 0))
                self.port = sock.getsockname()[1]
        self._server = ModbusTcpServer([self._device(u) for u in self.images], address=(self.host, self.port))
        await self._server.serve_forever(background=True)

    async def stop(self) -> None:
        """Close the listener and every connection."""
        if self._server is not None:
            await self._server.shutdown()
            self._server = None


# -- the simulated plant's register map --------------------------------------------------------------
def plant_layout(plants: Sequence[str]) -> dict[str, int]:
    """Plant name -> unit id (1-based, in the site's order)."""
    return {plant: index + 1 for index, plant in enumerate(plants)}


def plant_tags(plants: Mapping[str, Sequence[str]], source: str = "plant") -> dict[str, Any]:
    """The ``edge.plants`` tag map of the simulated plant's registers (float32 at holding 2i)."""
    units = plant_layout(list(plants))
    out: dict[str, Any] = {}
    for plant, columns in plants.items():
        unit = units[plant]
        tags = {column: {"unit": unit, "register": 2 * i, "type": "float32"} for i, column in enumerate(columns)}
        out[plant] = {"source": source, "tags": tags}
    return out


class ModbusTagServer:
    """The simulated plant's registers served with the shape of the OPC UA ``TagServer``
    (``columns``, ``start``, ``stop``, ``write``), so one pacing loop drives either.

    A sample's value goes to its column's float32 (:func:`plant_layout`); a Bad value is
    written as NaN (a device's invalid reading, read back as Bad); a dropped sample leaves
    the register as it was (a register always holds a value).
    """

    def __init__(
        self, plants: Mapping[str, Sequence[str]], host: str = "127.0.0.1", port: int = 0,
        columns: Sequence[str] | None = None,
    ) -> None:  # fmt: skip
        self.plants = {p: list(c) for p, c in plants.items()}
        # the order of a row's values for a pacing loop (default the plants' columns in order)
        self.columns = list(columns) if columns is not None else [c for cols in self.plants.values() for c in cols]
        units = plant_layout(list(self.plants))
        self._where = {c: (units[p], 2 * i) for p, cols in self.plants.items() for i, c in enumerate(cols)}
        size = max(2 * len(c) for c in self.plants.values()) + 2
        self.server = ModbusPlantServer(list(units.values()), size=size, host=host, port=port)
        self._started = False

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def url(self) -> str:
        return f"modbus://{self.server.host}:{self.server.port}"

    async def start(self) -> None:
        """Listen; until its first sample a column holds NaN (read as Bad), not a made-up 0."""
        if not self._started:
            for column in self._where:
                unit, register = self._where[column]
                self.server.write(unit, "holding", register, math.nan, "float32")
            self._started = True
        await self.server.start()

    async def stop(self) -> None:
        await self.server.stop()

    async def write(self, values: dict[str, float | None], ts: float, status: dict[str, int] | None = None) -> None:
        """Store one sample (``ts`` is not kept: a Modbus register has no timestamp)."""
        bad = set(status or ())
        for column, value in values.items():
            if column not in self._where:
                continue  # a column of no plant
            unit, register = self._where[column]
            good = value is not None and math.isfinite(value) and column not in bad
            self.server.write(unit, "holding", register, value if good else math.nan, "float32")  # type: ignore[arg-type]


def edge_section(plants: Mapping[str, Sequence[str]], url: str, **extra: Any) -> dict[str, Any]:
    """The ``edge:`` section that polls :class:`ModbusTagServer`'s registers (``extra``: other keys)."""
    return {**extra, "sources": {"plant-modbus": {"kind": "modbus", "url": url}},
            "plants": plant_tags(plants, source="plant-modbus")}  # fmt: skip
