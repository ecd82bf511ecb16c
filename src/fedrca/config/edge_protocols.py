"""The MQTT, Sparkplug B and Modbus TCP sources of the ``edge:`` section (:mod:`fedrca.config.edge`).

Each ``kind`` has a settings model (the connection) and a tag model (one column's address):

==============  ====================  ============================================================
``kind``        source                a tag (``edge.plants.<plant>.tags.<column>``)
==============  ====================  ============================================================
``mqtt``        :class:`MqttSource`   :class:`MqttTag`: ``topic`` (shorthand), ``field`` in a JSON
                                      object, its quality and timestamp fields
``sparkplug``   :class:`SparkplugSource`  :class:`SparkplugTag`: ``metric`` (shorthand), ``node``,
                                      ``device``
``modbus``      :class:`ModbusSource` :class:`ModbusTag`: ``register`` + ``table``, ``type``,
                                      ``word_order``, ``unit``; or the shorthand
                                      ``"holding:100:float32"``
==============  ====================  ============================================================

.. code-block:: yaml

    edge:
      sources:
        broker: {kind: mqtt, url: "mqtt://broker.plant:1883", username: edge}
        scada:  {kind: sparkplug, url: "mqtt://broker.plant:1883", group: plant1, node: reactor}
        plc:    {kind: modbus, url: "modbus://10.0.0.7:502", unit: 1, poll_seconds: 1}
      plants:
        reactor:
          source: broker
          tags:
            "XMEAS(7)": "plant1/reactor/pressure"               # payload: 2705.1 or {"value": 2705.1}
            "XMEAS(8)": {topic: "plant1/reactor/state", field: "level.pv"}
            "XMEAS(9)": {source: scada, metric: "Reactor/Temperature"}
            "XMV(10)": {source: plc, register: 100, type: float32, word_order: little}

Passwords are only read from the environment variable ``password_env``.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from fedrca.config._base import Strict
from fedrca.config.edge import TagAddress

__all__ = [
    "MODBUS_TABLES",
    "MODBUS_TYPES",
    "ModbusSource",
    "ModbusTag",
    "MqttConnection",
    "MqttSource",
    "MqttTag",
    "SparkplugSource",
    "SparkplugTag",
    "split_url",
]

_ENV = r"^[A-Za-z_][A-Za-z0-9_]*$"
#: A Sparkplug id (group, edge node, device): no MQTT separators or wildcards.
_SPARKPLUG_ID = r"^[^/+#\s]+$"
_MQTT_URL = r"^mqtts?://[^/\s:]+(:\d{1,5})?/?$"


def split_url(url: str, default_port: int) -> tuple[str, int]:
    """``scheme://host[:port]`` -> ``(host, port)``.

    Examples
    --------
    >>> split_url("mqtt://broker:1884", 1883), split_url("modbus://10.0.0.7", 502)
    (('broker', 1884), ('10.0.0.7', 502))
    """
    rest = url.split("://", 1)[1].rstrip("/")
    host, _, port = rest.partition(":")
    return host, int(port) if port else default_port


def _valid_topic(topic: str) -> str:
    if "+" in topic or "#" in topic:
        raise ValueError(f"topic {topic!r} has a wildcard; a tag is one topic (write it out)")
    if "\0" in topic or not topic.strip():
        raise ValueError("a topic is a non-empty string without NUL")
    if len(topic.encode()) > 65_535:
        raise ValueError("an MQTT topic is at most 65,535 bytes")
    return topic


# -- MQTT ------------------------------------------------------------------------------------------
class MqttConnection(Strict):
    """What every MQTT-based source has: the broker and the client's identity.

    ``url``: ``mqtt://host[:1883]`` or ``mqtts://host[:8883]`` (TLS; ``ca_file`` to trust a
    private CA, ``cert_file`` + ``key_file`` for a client certificate). ``username`` with the
    password from the environment variable ``password_env``. ``client_id``: default
    ``fedrca-edge-<source>-<pid>``. ``keepalive``: seconds between pings (a broker that stays
    silent for 1.5 x keepalive is gone). ``reconnect_max_delay``: the longest wait between
    two connection attempts (they back off from 0.1 s). ``qos``: of the subscriptions.
    """

    url: str = Field(..., pattern=_MQTT_URL, max_length=2048)
    username: str | None = Field(None, min_length=1, max_length=65_535)
    password_env: str = Field("FEDRCA_MQTT_PASSWORD", pattern=_ENV)
    client_id: str | None = Field(None, min_length=1, max_length=128)
    keepalive: int = Field(10, ge=1, le=65_535)
    reconnect_max_delay: float = Field(5.0, gt=0.0, le=3600.0)
    qos: Literal[0, 1, 2] = 1
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None

    @property
    def tls(self) -> bool:
        return self.url.startswith("mqtts://")

    def address(self) -> tuple[str, int]:
        """``(host, port)`` of the broker."""
        return split_url(self.url, 8883 if self.tls else 1883)

    @model_validator(mode="after")
    def _client_cert(self) -> MqttConnection:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("give both cert_file and key_file (a TLS client certificate), or neither")
        if (self.cert_file or self.ca_file) and not self.tls:
            raise ValueError("ca_file / cert_file need a TLS url: mqtts://host:8883")
        return self


class MqttTag(TagAddress):
    """A column on an MQTT topic carrying JSON: one topic per tag, or one field of a shared payload.

    The payload is a JSON number (``2705.1``), a numeric string, ``true``/``false``, or a JSON
    object. In an object the value is at ``field`` (dots walk nested objects:
    ``level.pv``; default the source's ``value_field``), its quality at ``quality_field``
    and its time at ``timestamp_field`` (defaults from the source; a missing quality is
    good, a missing time is the arrival time). Several columns may share one topic with
    different fields (a payload mapping).
    """

    shorthand: ClassVar[str] = "topic"

    topic: str = Field(..., min_length=1)
    field: str | None = Field(None, min_length=1, max_length=1024)
    quality_field: str | None = Field(None, min_length=1, max_length=1024)
    timestamp_field: str | None = Field(None, min_length=1, max_length=1024)

    @field_validator("topic")
    @classmethod
    def _topic(cls, value: str) -> str:
        return _valid_topic(value)


class MqttSource(MqttConnection):
    """Plain MQTT with JSON payloads (:class:`MqttTag`).

    ``value_field`` / ``quality_field`` / ``timestamp_field``: where an object payload keeps
    them unless a tag says otherwise (``quality_field``: ``true``/``false``, ``good`` /
    ``bad`` / ``uncertain`` / ``stale``, or an OPC quality number, 192..255 good).
    ``timestamp_unit``: ``s`` or ``ms`` since the epoch, or ``iso`` (ISO 8601 text).
    ``report_by_exception``: the devices publish a tag only when it changes, so while the
    broker connection is up its last value still holds (it does not turn stale).
    """

    kind: Literal["mqtt"]
    value_field: str = Field("value", min_length=1, max_length=1024)
    quality_field: str = Field("quality", min_length=1, max_length=1024)
    timestamp_field: str = Field("timestamp", min_length=1, max_length=1024)
    timestamp_unit: Literal["s", "ms", "iso"] = "s"
    report_by_exception: bool = False
    max_payload_bytes: int = Field(1_048_576, ge=64, le=268_435_455)

    tag_model: ClassVar[type[TagAddress]] = MqttTag


# -- Sparkplug B -----------------------------------------------------------------------------------
class SparkplugTag(TagAddress):
    """A column as a Sparkplug B metric: its ``metric`` name as in the birth certificate, on edge
    node ``node`` (default: the source's) of group ``group`` (default: the source's), of device
    ``device`` when it is a device metric (DBIRTH/DDATA), else a node metric."""

    shorthand: ClassVar[str] = "metric"

    metric: str = Field(..., min_length=1, max_length=4096)
    node: str | None = Field(None, pattern=_SPARKPLUG_ID, max_length=256)
    device: str | None = Field(None, pattern=_SPARKPLUG_ID, max_length=256)
    group: str | None = Field(None, pattern=_SPARKPLUG_ID, max_length=256)


class SparkplugSource(MqttConnection):
    """A Sparkplug B host application on an MQTT broker (:class:`SparkplugTag`).

    ``group``: the Sparkplug group id of the tags (unless a tag names another); ``node``: their
    edge node (unless a tag names one). ``host_id``: when set, the edge announces itself as
    that primary host application (a retained ``spBv1.0/STATE/<host_id>`` of Sparkplug 3.0,
    with its will), so edge nodes that wait for their primary host publish.
    ``rebirth_holdoff``: least seconds between two rebirth requests to one node.
    """

    kind: Literal["sparkplug"]
    group: str = Field(..., pattern=_SPARKPLUG_ID, max_length=256)
    node: str | None = Field(None, pattern=_SPARKPLUG_ID, max_length=256)
    host_id: str | None = Field(None, pattern=_SPARKPLUG_ID, max_length=256)
    rebirth_holdoff: float = Field(5.0, gt=0.0, le=3600.0)
    qos: Literal[0, 1, 2] = 0  # Sparkplug sends DATA with QoS 0

    tag_model: ClassVar[type[TagAddress]] = SparkplugTag


# -- Modbus TCP ------------------------------------------------------------------------------------
#: Register tables: holding registers (function 3), input registers (4), coils (1), discrete inputs (2).
MODBUS_TABLES = ("holding", "input", "coil", "discrete")
#: Value types and their size in 16-bit registers.
MODBUS_TYPES: dict[str, int] = {
    "int16": 1, "uint16": 1, "int32": 2, "uint32": 2, "float32": 2,
    "int64": 4, "uint64": 4, "float64": 4, "bool": 0,
}  # fmt: skip
_SHORT_TABLE = {"holding": "holding", "hr": "holding", "input": "input", "ir": "input",
                "coil": "coil", "co": "coil", "discrete": "discrete", "di": "discrete"}  # fmt: skip
_SHORTHAND = re.compile(r"^(?P<table>[a-z]+):(?P<register>\d+)(?::(?P<type>[a-z0-9]+))?$")


class ModbusTag(TagAddress):
    """A column in a Modbus device's registers.

    ``register``: the 0-based protocol address (a device manual's "40101" holding register is
    ``register: 100``); ``table``: holding (default), input, coil or discrete; ``type``:
    int16, uint16, int32, uint32, float32, int64, uint64, float64 (default uint16; coils and
    discrete inputs are bool); ``word_order``: ``big`` (the first register holds the high
    word, "ABCD") or ``little`` ("CDAB"); ``unit``: the unit (slave) id when it is not the
    source's. The shorthand ``"holding:100:float32"`` (or ``hr:100``, ``ir:7:int16``,
    ``coil:3``) stands for ``{table, register, type}``.
    """

    shorthand: ClassVar[str] = "register"

    #: ``register`` in the file (``register`` itself is a name pydantic's model class already has)
    reg: int = Field(..., alias="register", ge=0, le=65_535)
    table: Literal["holding", "input", "coil", "discrete"] = "holding"
    type: Literal["int16", "uint16", "int32", "uint32", "float32", "int64", "uint64", "float64", "bool"] | None = None
    word_order: Literal["big", "little"] = "big"
    unit: int | None = Field(None, ge=0, le=255)

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("register"), str):
            text = data["register"].strip()
            if text.isdigit():
                return {**data, "register": int(text)}
            match = _SHORTHAND.match(text)
            if match is None or match["table"] not in _SHORT_TABLE:
                raise ValueError(
                    f"register {text!r}: write a number (register: 100) or table:register[:type], "
                    "e.g. holding:100:float32, input:7:int16, coil:3"
                )
            out = {**data, "register": int(match["register"]), "table": _SHORT_TABLE[match["table"]]}
            if match["type"] is not None:
                out["type"] = match["type"]
            return out
        return data

    @property
    def value_type(self) -> str:
        """The type read: ``bool`` for coils and discrete inputs, else ``type`` (default uint16)."""
        if self.table in ("coil", "discrete"):
            return "bool"
        return self.type or "uint16"

    @property
    def width(self) -> int:
        """Registers (or bits, for coils and discrete inputs) the value spans."""
        return MODBUS_TYPES[self.value_type] or 1

    @model_validator(mode="after")
    def _fits(self) -> ModbusTag:
        bits = self.table in ("coil", "discrete")
        if bits and self.type not in (None, "bool"):
            raise ValueError(f"a {self.table} is one bit: type must be bool (or left out), not {self.type}")
        if not bits and self.type == "bool":
            raise ValueError("a register is 16 bits: type bool is for table coil or discrete")
        if self.reg + self.width - 1 > 65_535:
            raise ValueError(f"register {self.reg} + {self.width} registers of {self.value_type} is past 65535")
        return self


class ModbusSource(Strict):
    """A Modbus TCP device (or gateway), polled with pymodbus (:class:`ModbusTag`).

    ``url``: ``modbus://host[:502]``; ``unit``: the default unit (slave) id; ``poll_seconds``:
    the polling period (default the edge's sample clock, the plant's rate); ``timeout``: a
    request's timeout, s; ``retries``: retries of a request before its tags turn Bad;
    ``max_registers``: most registers one request reads (the protocol's 125), contiguous
    tags of one table and unit are read together, across holes of at most ``max_gap``
    registers.
    """

    kind: Literal["modbus"]
    url: str = Field(..., pattern=r"^modbus://[^/\s:]+(:\d{1,5})?/?$", max_length=2048)
    unit: int = Field(1, ge=0, le=255)
    poll_seconds: float | None = Field(None, gt=0.0, le=86_400.0)
    timeout: float = Field(1.0, gt=0.0, le=600.0)
    retries: int = Field(1, ge=0, le=10)
    max_registers: int = Field(125, ge=1, le=125)
    max_gap: int = Field(8, ge=0, le=124)
    reconnect_max_delay: float = Field(5.0, gt=0.0, le=3600.0)

    tag_model: ClassVar[type[TagAddress]] = ModbusTag

    def address(self) -> tuple[str, int]:
        """``(host, port)`` of the device."""
        return split_url(self.url, 502)
