"""Sparkplug B: the payload codec, an edge node's messages, and the host application's state (pure: no I/O).

Sparkplug B (Eclipse Sparkplug 3.0) puts MQTT topics and a protobuf payload on top of a
broker: ``spBv1.0/<group>/<type>/<edge node>[/<device>]`` with ``type`` one of NBIRTH,
NDATA, NDEATH, NCMD (the node) and DBIRTH, DDATA, DDEATH, DCMD (its devices). The payload
is Eclipse Tahu's ``Payload`` message (:mod:`fedrca.edge._tahu`).

:class:`SparkplugHost` is what ``fedrca edge`` runs for a ``kind: sparkplug`` source: it
reads each message of the nodes it watches and reports the mapped metrics as tag updates.

* A **birth** (NBIRTH, DBIRTH) names every metric with its datatype, its alias and its
  current value: the aliases learnt there resolve the later DATA messages, which
  usually carry aliases only; the values are reported like DATA.
* Every message of a node but NDEATH carries ``seq`` 0..255, one more (mod 256) than the
  node's message before. A **gap** (a message lost between the node and us) is counted and
  logged, the message's values are still used (the aliases are the birth's until the next
  birth), and a **rebirth** is requested: an NCMD with ``Node Control/Rebirth = true``, at
  most one per node every ``rebirth_holdoff`` seconds, answered by a fresh NBIRTH with
  every current value.
* **NDEATH** (the broker's will message when the node's connection is lost) carries the
  ``bdSeq`` of the session it ends: when it matches the node's last NBIRTH, every tag of
  the node and its devices turns stale (quality 2) at once; a death of an older session
  (delivered late) is ignored. DDEATH does the same for one device. DATA from a node that
  is dead or was never born cannot be resolved: it is dropped and a rebirth requested.
* A value is good when it is a finite number of a numeric or boolean datatype. A metric
  with ``is_null`` is missing (quality 3); a NaN or inf, or a ``Quality`` property below
  192 is Bad (quality 1; ``Quality`` 500 is stale, as Ignition writes it); a string, bytes, dataset or template
  for a mapped metric is the wrong type: Bad, counted and logged once per tag.
* Anything malformed (an undecodable payload, one over ``max_payload_bytes``, a topic that
  is not Sparkplug, a DATA without ``seq``, an unknown alias) is counted, one log line per
  kind and node (rate limited), and nothing valid of other messages is lost.

:class:`SparkplugNode` is the other side, the edge node (``fedrca simulate --to mqtt://
--sparkplug`` and the tests): it writes NBIRTH / NDATA / NDEATH payloads with the bdSeq
and seq rules above.

Examples
--------
>>> node = SparkplugNode("plant", "reactor", ["XMEAS(7)", "XMEAS(8)"])
>>> birth = decode_payload(node.birth([2700.5, 75.0], ts=1.0))
>>> [(m.name, m.alias, m.double_value) for m in birth.metrics][1:]
[('XMEAS(7)', 1, 2700.5), ('XMEAS(8)', 2, 75.0)]
>>> data = decode_payload(node.data([2701.0, None], ts=2.0))
>>> data.seq, [(m.alias, m.is_null) for m in data.metrics]
(1, [(1, False), (2, True)])
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import DecodeError

from fedrca.edge._tahu import Payload

__all__ = [
    "BD_SEQ",
    "MAX_PAYLOAD_BYTES",
    "NAMESPACE",
    "REBIRTH",
    "DataType",
    "HostCounters",
    "SparkplugError",
    "SparkplugHost",
    "SparkplugNode",
    "SparkplugTopic",
    "Target",
    "decode_payload",
    "metric_value",
    "parse_topic",
    "rebirth_payload",
]

log = logging.getLogger("fedrca.edge.sparkplug")

#: Topic namespace of Sparkplug B.
NAMESPACE = "spBv1.0"
#: The node control metric a host writes to ask for a new NBIRTH.
REBIRTH = "Node Control/Rebirth"
#: The birth/death session metric.
BD_SEQ = "bdSeq"
#: Largest payload decoded (bytes): a birth of 10,000 metrics with names and properties is
#: ~0.5 MB; anything larger is refused as malformed before protobuf allocates it.
MAX_PAYLOAD_BYTES = 4 * 1024 * 1024
#: Most aliases remembered per node (a birth naming more is refused: memory stays bounded).
MAX_ALIASES = 100_000

_NODE_TYPES = frozenset({"NBIRTH", "NDATA", "NDEATH", "NCMD"})
_DEVICE_TYPES = frozenset({"DBIRTH", "DDATA", "DDEATH", "DCMD"})
_GOOD, _BAD, _STALE, _MISSING = 0, 1, 2, 3


class DataType:
    """Sparkplug B datatype codes (Tahu's ``DataType`` enum)."""

    Unknown = 0
    Int8, Int16, Int32, Int64 = 1, 2, 3, 4
    UInt8, UInt16, UInt32, UInt64 = 5, 6, 7, 8
    Float, Double, Boolean, String, DateTime, Text = 9, 10, 11, 12, 13, 14
    UUID, DataSet, Bytes, File, Template = 15, 16, 17, 18, 19


#: datatype -> (payload field carrying it, bits of a signed integer or 0)
_NUMERIC: dict[int, tuple[str, int]] = {
    DataType.Int8: ("int_value", 8),
    DataType.Int16: ("int_value", 16),
    DataType.Int32: ("int_value", 32),
    DataType.Int64: ("long_value", 64),
    DataType.UInt8: ("int_value", 0),
    DataType.UInt16: ("int_value", 0),
    DataType.UInt32: ("int_value", 0),
    DataType.UInt64: ("long_value", 0),
    DataType.Float: ("float_value", 0),
    DataType.Double: ("double_value", 0),
    DataType.Boolean: ("boolean_value", 0),
}


class SparkplugError(ValueError):
    """A topic or payload that is not valid Sparkplug B (the message says what is wrong)."""


@dataclass(frozen=True)
class SparkplugTopic:
    """A parsed Sparkplug B topic: ``spBv1.0/<group>/<type>/<node>[/<device>]``."""

    group: str
    type: str
    node: str
    device: str | None = None

    def __str__(self) -> str:
        tail = f"/{self.device}" if self.device is not None else ""
        return f"{NAMESPACE}/{self.group}/{self.type}/{self.node}{tail}"


def parse_topic(topic: str) -> SparkplugTopic:
    """Split a Sparkplug B topic.

    Examples
    --------
    >>> parse_topic("spBv1.0/plant/DDATA/reactor/analyser")
    SparkplugTopic(group='plant', type='DDATA', node='reactor', device='analyser')

    Raises
    ------
    SparkplugError
        For a topic outside ``spBv1.0/`` or with a message type that does not fit its length.
    """
    parts = topic.split("/")
    if len(parts) not in (4, 5) or parts[0] != NAMESPACE or not all(parts):
        raise SparkplugError(f"not a Sparkplug B topic ({NAMESPACE}/<group>/<type>/<node>[/<device>])")
    kinds = _NODE_TYPES if len(parts) == 4 else _DEVICE_TYPES
    if parts[2] not in kinds:
        raise SparkplugError(f"message type {parts[2][:20]!r} is not one of {', '.join(sorted(kinds))} here")
    return SparkplugTopic(parts[1], parts[2], parts[3], parts[4] if len(parts) == 5 else None)


def decode_payload(data: bytes) -> Any:
    """A Tahu ``Payload`` from its bytes.

    Raises
    ------
    SparkplugError
        For a payload over :data:`MAX_PAYLOAD_BYTES` or one protobuf cannot parse.
    """
    if len(data) > MAX_PAYLOAD_BYTES:
        raise SparkplugError(f"payload of {len(data)} bytes is over the {MAX_PAYLOAD_BYTES}-byte bound")
    try:
        return Payload.FromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise SparkplugError(f"payload is not a Sparkplug B protobuf ({type(exc).__name__})") from None


def _quality_property(metric: Any) -> int:
    """The quality a metric's ``Quality`` property says (Ignition's codes); good without one."""
    if not metric.HasField("properties"):
        return _GOOD
    props = metric.properties
    for key, value in zip(props.keys, props.values):
        if key.lower() == "quality":
            which = value.WhichOneof("value")
            code = getattr(value, which) if which in ("int_value", "long_value") else None
            if code is None:
                return _BAD
            if code == 500:
                return _STALE
            return _GOOD if 192 <= code <= 255 else _BAD
    return _GOOD


def metric_value(metric: Any, datatype: int | None) -> tuple[float | None, int, str | None]:
    """The value of one metric as ``(value, quality, problem)``.

    ``value`` is a finite float or None; ``quality`` 0 good, 1 bad, 2 stale, 3 missing; ``problem`` names
    what is wrong when the metric is not a number of a numeric datatype (None otherwise).

    Examples
    --------
    >>> m = Payload.Metric(datatype=DataType.Int16, int_value=65535)
    >>> metric_value(m, None)
    (-1.0, 0, None)
    >>> metric_value(Payload.Metric(datatype=DataType.String, string_value="on"), None)
    (None, 1, 'wrong type: String, not a number')
    """
    dtype = metric.datatype if metric.HasField("datatype") else datatype
    if dtype is None:
        return None, _BAD, "no datatype (neither in the metric nor in its birth)"
    if metric.is_null:
        return None, _MISSING, None
    spec = _NUMERIC.get(dtype)
    if spec is None:
        return None, _BAD, f"wrong type: {_type_name(dtype)}, not a number"
    name, bits = spec
    which = metric.WhichOneof("value")
    if which != name:
        return None, _BAD, f"{_type_name(dtype)} metric carries {which or 'no value'}, not {name}"
    raw = getattr(metric, name)
    if bits:
        # a signed integer is sent as its two's complement in an unsigned field; Tahu writes
        # Int8/Int16 as 8/16-bit patterns, other clients sign-extend to 32 bits: the low bits agree
        raw &= (1 << bits) - 1
        if raw >= 1 << (bits - 1):
            raw -= 1 << bits
    value = float(raw)
    if not math.isfinite(value):
        return None, _BAD, None
    return value, _quality_property(metric), None


def _type_name(dtype: int) -> str:
    for key, code in vars(DataType).items():
        if code == dtype and not key.startswith("_"):
            return key
    return f"datatype {dtype}"


def _ms(value: int) -> float:
    return value / 1000.0


def rebirth_payload(ts: float) -> bytes:
    """The NCMD payload asking a node for a new NBIRTH (``Node Control/Rebirth = true``)."""
    payload = Payload(timestamp=int(ts * 1000))
    metric = payload.metrics.add()
    metric.name = REBIRTH
    metric.timestamp = int(ts * 1000)
    metric.datatype = DataType.Boolean
    metric.boolean_value = True
    return bytes(payload.SerializeToString())


# -- the edge node's side ------------------------------------------------------------------------
class SparkplugNode:
    """An edge node publishing ``metrics`` as Doubles: its NBIRTH, NDATA and NDEATH payloads.

    Aliases are 1..N in ``metrics`` order (0 is ``bdSeq``). ``bd_seq`` counts the node's MQTT
    sessions: :meth:`death` gives the will of the next session (register it before
    connecting), :meth:`birth` carries the same ``bdSeq`` and restarts ``seq`` at 0.
    """

    def __init__(self, group: str, node: str, metrics: Sequence[str], bd_seq: int = 0) -> None:
        self.group = group
        self.node = node
        self.metrics = list(metrics)
        self.bd_seq = bd_seq % 256
        self._seq = 0

    def topic(self, kind: str) -> str:
        """The topic of this node's message ``kind`` (NBIRTH, NDATA, NDEATH, NCMD)."""
        return f"{NAMESPACE}/{self.group}/{kind}/{self.node}"

    def _next_seq(self) -> int:
        seq = self._seq
        self._seq = (self._seq + 1) % 256
        return seq

    def death(self) -> bytes:
        """The NDEATH payload of the current session (the MQTT will)."""
        payload = Payload()
        _bd_seq_metric(payload, self.bd_seq)
        return bytes(payload.SerializeToString())

    def birth(self, values: Sequence[float | None], ts: float) -> bytes:
        """The NBIRTH payload: ``bdSeq``, then every metric with name, alias, datatype and value."""
        self._seq = 0
        payload = Payload(timestamp=int(ts * 1000), seq=self._next_seq())
        _bd_seq_metric(payload, self.bd_seq)
        for alias, (name, value) in enumerate(zip(self.metrics, values, strict=True), start=1):
            metric = payload.metrics.add()
            metric.name = name
            metric.alias = alias
            _set_double(metric, value, ts)
        return bytes(payload.SerializeToString())

    def data(self, values: Sequence[float | None], ts: float, only: Iterable[int] | None = None) -> bytes:
        """An NDATA payload of ``values`` (by alias only; ``only``: the metric indices to send)."""
        payload = Payload(timestamp=int(ts * 1000), seq=self._next_seq())
        for index in range(len(self.metrics)) if only is None else only:
            metric = payload.metrics.add()
            metric.alias = index + 1
            _set_double(metric, values[index], ts)
        return bytes(payload.SerializeToString())

    def next_session(self) -> None:
        """A new MQTT session: the next ``bdSeq``."""
        self.bd_seq = (self.bd_seq + 1) % 256


def _bd_seq_metric(payload: Any, bd_seq: int) -> None:
    metric = payload.metrics.add()
    metric.name = BD_SEQ
    metric.datatype = DataType.Int64
    metric.long_value = bd_seq


def _set_double(metric: Any, value: float | None, ts: float) -> None:
    metric.timestamp = int(ts * 1000)
    metric.datatype = DataType.Double
    if value is None or not math.isfinite(value):
        metric.is_null = True
    else:
        metric.double_value = value


# -- the host application's side -----------------------------------------------------------------
@dataclass(frozen=True)
class Target:
    """Where one metric goes: the tag index an update carries, and the tag's ``scale``/``offset``."""

    tag: int
    scale: float = 1.0
    offset: float = 0.0
    label: str = ""


@dataclass
class HostCounters:
    """What a :class:`SparkplugHost` has seen (cumulative; the edge exports them as metrics)."""

    messages: int = 0
    updates: int = 0
    births: int = 0
    deaths: int = 0
    sequence_gaps: int = 0
    rebirths_requested: int = 0
    malformed: int = 0
    wrong_type: int = 0
    unknown_alias: int = 0
    dropped_unborn: int = 0
    stale_deaths: int = 0
    ignored: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))


@dataclass
class _Device:
    targets: dict[str, tuple[Target, ...]]
    aliases: dict[int, str] = field(default_factory=dict)
    datatypes: dict[str, int] = field(default_factory=dict)
    born: bool = False


@dataclass
class _Node:
    group: str
    node: str
    devices: dict[str | None, _Device]
    bd_seq: int | None = None
    seq: int | None = None
    online: bool = False
    rebirth_at: float = -math.inf


Emit = Callable[[int, float | None, int, float], None]
Publish = Callable[[str, bytes], None]
Reject = Callable[[int | None, str, str], None]


class SparkplugHost:
    """The host application's view of the edge nodes one source watches (see the module docstring).

    Parameters
    ----------
    targets : ``(group, node, device or None, metric name) -> targets`` of every mapped metric
    emit : called ``emit(tag, value, quality, source_ts)`` for every tag update (``value`` in
        the column's unit, None unless quality is 0)
    publish : called ``publish(topic, payload)`` for each command (rebirth requests)
    reject : called ``reject(tag or None, reason, detail)`` for each refused input (the edge's
        :meth:`~fedrca.edge.source.TagSink.rejected`); without it the host logs each kind of
        problem of a node once every ``log_every`` seconds itself
    rebirth_holdoff : least time between two rebirth requests to one node, s
    log_every : see ``reject``
    """

    def __init__(
        self,
        targets: Mapping[tuple[str, str, str | None, str], Sequence[Target]],
        emit: Emit,
        publish: Publish,
        reject: Reject | None = None,
        rebirth_holdoff: float = 5.0,
        log_every: float = 30.0,
    ) -> None:
        self._emit = emit
        self._publish = publish
        self._reject = reject
        self.rebirth_holdoff = rebirth_holdoff
        self.log_every = log_every
        self.counters = HostCounters()
        self._nodes: dict[tuple[str, str], _Node] = {}
        for (group, node, device, metric), tags in targets.items():
            state = self._nodes.setdefault((group, node), _Node(group, node, {None: _Device({})}))
            dev = state.devices.setdefault(device, _Device({}))
            dev.targets[metric] = tuple(dev.targets.get(metric, ())) + tuple(tags)
        self._logged: dict[tuple[str, str], float] = {}

    # -- what the transport subscribes to --------------------------------------------------------
    def nodes(self) -> list[tuple[str, str]]:
        """The ``(group, node)`` pairs watched."""
        return list(self._nodes)

    def subscriptions(self) -> list[str]:
        """The MQTT topic filters of every message type of the watched nodes and their devices."""
        out = []
        for group, node in self._nodes:
            out += [f"{NAMESPACE}/{group}/+/{node}", f"{NAMESPACE}/{group}/+/{node}/+"]
        return out

    def born_tags(self) -> list[int]:
        """The tags of every node that is born and not dead, and of its born devices: their last
        values still hold (Sparkplug reports by exception; a death would have said otherwise)."""
        out: list[int] = []
        for state in self._nodes.values():
            if state.online:
                for device in state.devices.values():
                    if device.born:
                        out += [t.tag for targets in device.targets.values() for t in targets]
        return out

    def node_online(self, group: str, node: str) -> bool:
        state = self._nodes.get((group, node))
        return bool(state and state.online)

    # -- problems ----------------------------------------------------------------------------------
    def _problem(self, counter: str, where: str, message: str, now: float, tag: int | None = None) -> None:
        setattr(self.counters, counter, getattr(self.counters, counter) + 1)
        if self._reject is not None:
            self._reject(tag, counter.replace("_", "-"), f"sparkplug {where}: {message}")
            return
        key = (counter, where)
        last = self._logged.get(key)
        if last is None or now - last >= self.log_every:
            if len(self._logged) > 10_000:  # bounded whatever the flood of distinct topics
                self._logged.clear()
            self._logged[key] = now
            total = getattr(self.counters, counter)
            log.warning("sparkplug %s: %s (%s so far: %d)", where, message, counter.replace("_", " "), total)

    def request_rebirths(self, now: float, why: str) -> None:
        """Ask every watched node for a birth (the host (re)connected: it may have missed some)."""
        for state in self._nodes.values():
            self._request_rebirth(state, now, why)

    def _request_rebirth(self, state: _Node, now: float, why: str) -> None:
        if now - state.rebirth_at < self.rebirth_holdoff:
            return
        state.rebirth_at = now
        self.counters.rebirths_requested += 1
        log.info("sparkplug %s/%s: requesting a rebirth (%s)", state.group, state.node, why)
        self._publish(f"{NAMESPACE}/{state.group}/NCMD/{state.node}", rebirth_payload(now))

    # -- messages ----------------------------------------------------------------------------------
    def on_message(self, topic: str, data: bytes, received: float | None = None) -> None:
        """Handle one MQTT message of a watched topic (never raises for bad input)."""
        now = time.time() if received is None else received
        self.counters.messages += 1
        try:
            parsed = parse_topic(topic)
        except SparkplugError as exc:
            self._problem("malformed", topic[:200], str(exc), now)
            return
        state = self._nodes.get((parsed.group, parsed.node))
        if state is None or parsed.type in ("NCMD", "DCMD"):
            self.counters.ignored += 1  # another node's traffic, or commands (ours included)
            return
        where = f"{parsed.group}/{parsed.node}" + (f"/{parsed.device}" if parsed.device else "")
        try:
            payload = decode_payload(data)
        except SparkplugError as exc:
            self._problem("malformed", where, f"{parsed.type}: {exc}", now)
            return
        handler = {
            "NBIRTH": self._nbirth,
            "DBIRTH": self._dbirth,
            "NDATA": self._data,
            "DDATA": self._data,
            "NDEATH": self._ndeath,
            "DDEATH": self._ddeath,
        }[parsed.type]
        handler(state, parsed, payload, where, now)

    def _check_seq(self, state: _Node, payload: Any, kind: str, where: str, now: float) -> bool:
        """Track ``seq``; False when the message has none (malformed)."""
        if not payload.HasField("seq") or payload.seq > 255:
            self._problem("malformed", where, f"{kind} without a seq in 0..255", now)
            return False
        seq = int(payload.seq)
        if state.seq is not None and seq != (state.seq + 1) % 256:
            expected = (state.seq + 1) % 256
            self._problem("sequence_gaps", where, f"{kind} seq {seq}, expected {expected}: messages were lost", now)
            self._request_rebirth(state, now, f"sequence gap at {kind} seq {seq}")
        state.seq = seq
        return True

    def _nbirth(self, state: _Node, topic: SparkplugTopic, payload: Any, where: str, now: float) -> None:
        if not payload.HasField("seq") or payload.seq > 255:
            self._problem("malformed", where, "NBIRTH without a seq in 0..255", now)
            return
        bd_seq = next((m for m in payload.metrics if m.name == BD_SEQ), None)
        if bd_seq is None or bd_seq.WhichOneof("value") not in ("long_value", "int_value"):
            self._problem("malformed", where, "NBIRTH without a bdSeq metric", now)
            return
        state.bd_seq = int(getattr(bd_seq, str(bd_seq.WhichOneof("value"))))
        state.seq = int(payload.seq)
        state.online = True
        state.rebirth_at = -math.inf
        for device in state.devices.values():  # a node's birth ends its devices' sessions too
            device.born = False
            device.aliases.clear()
            device.datatypes.clear()
        self.counters.births += 1
        self._birth(state.devices[None], payload, where, now)

    def _dbirth(self, state: _Node, topic: SparkplugTopic, payload: Any, where: str, now: float) -> None:
        if not state.online:
            self.counters.dropped_unborn += 1
            self._request_rebirth(state, now, "DBIRTH of a node without a birth")
            return
        if not self._check_seq(state, payload, "DBIRTH", where, now):
            return
        device = state.devices.get(topic.device)
        if device is None:
            self.counters.ignored += 1  # a device of the node that nothing maps
            return
        device.aliases.clear()
        device.datatypes.clear()
        self.counters.births += 1
        self._birth(device, payload, where, now)

    def _birth(self, device: _Device, payload: Any, where: str, now: float) -> None:
        if len(payload.metrics) > MAX_ALIASES:
            self._problem("malformed", where, f"birth of {len(payload.metrics)} metrics (most {MAX_ALIASES})", now)
            return
        for metric in payload.metrics:
            if not metric.name:
                self._problem("malformed", where, "a birth metric without a name", now)
                continue
            if metric.HasField("alias"):
                seen = device.aliases.setdefault(int(metric.alias), metric.name)
                if seen != metric.name:
                    self._problem("malformed", where, f"alias {metric.alias} names two metrics in one birth", now)
            if metric.HasField("datatype"):
                device.datatypes[metric.name] = int(metric.datatype)
        device.born = True
        self._values(device, payload, where, now, birth=True)

    def _data(self, state: _Node, topic: SparkplugTopic, payload: Any, where: str, now: float) -> None:
        kind = topic.type
        if not state.online:
            self.counters.dropped_unborn += 1
            self._request_rebirth(state, now, f"{kind} from a node that is not born (dead, or born before we came)")
            return
        if not self._check_seq(state, payload, kind, where, now):
            return
        device = state.devices.get(topic.device)
        if device is None:
            self.counters.ignored += 1
            return
        if not device.born:
            self.counters.dropped_unborn += 1
            self._request_rebirth(state, now, f"{kind} of device '{topic.device}' without its DBIRTH")
            return
        self._values(device, payload, where, now, birth=False)

    def _values(self, device: _Device, payload: Any, where: str, now: float, birth: bool) -> None:
        default_ts = _ms(payload.timestamp) if payload.HasField("timestamp") else now
        emit = self._emit
        for metric in payload.metrics:
            if metric.name:
                name = metric.name
            elif metric.HasField("alias"):
                found = device.aliases.get(int(metric.alias))
                if found is None:
                    self._problem("unknown_alias", where, f"alias {metric.alias} is not in the birth", now)
                    continue
                name = found
            else:
                self._problem("malformed", where, "a metric with neither name nor alias", now)
                continue
            targets = device.targets.get(name)
            if not targets:
                continue
            if metric.is_historical:
                self.counters.ignored += 1  # history back-fill: not the tag's current value
                continue
            value, quality, problem = metric_value(metric, device.datatypes.get(name))
            if problem is not None:
                self._problem("wrong_type", f"{where} metric '{name[:100]}'", problem, now, targets[0].tag)
            ts = _ms(metric.timestamp) if metric.HasField("timestamp") else default_ts
            for target in targets:
                scaled = value
                if value is not None and (target.scale != 1.0 or target.offset != 0.0):
                    scaled = value * target.scale + target.offset
                    if not math.isfinite(scaled):
                        scaled, quality = None, _BAD
                emit(target.tag, scaled if quality == _GOOD else None, quality, ts)
                self.counters.updates += 1

    def _stale(self, device: _Device, ts: float) -> None:
        for targets in device.targets.values():
            for target in targets:
                self._emit(target.tag, None, _STALE, ts)
                self.counters.updates += 1

    def _ndeath(self, state: _Node, topic: SparkplugTopic, payload: Any, where: str, now: float) -> None:
        bd_seq = next((m for m in payload.metrics if m.name == BD_SEQ), None)
        which = bd_seq.WhichOneof("value") if bd_seq is not None else None
        if bd_seq is None or which not in ("long_value", "int_value"):
            self._problem("malformed", where, "NDEATH without a bdSeq metric", now)
            return
        value = int(getattr(bd_seq, str(which)))
        if state.bd_seq is not None and value != state.bd_seq:
            self.counters.stale_deaths += 1  # the will of an older session, delivered late
            log.info("sparkplug %s: NDEATH of bdSeq %d ignored (the node's session is %d)", where, value, state.bd_seq)
            return
        self.counters.deaths += 1
        state.online = False
        state.seq = None
        log.warning("sparkplug %s: NDEATH (bdSeq %d): the node's tags are stale until its next NBIRTH", where, value)
        for device in state.devices.values():
            device.born = False
            self._stale(device, now)

    def _ddeath(self, state: _Node, topic: SparkplugTopic, payload: Any, where: str, now: float) -> None:
        if not state.online or not self._check_seq(state, payload, "DDEATH", where, now):
            return
        device = state.devices.get(topic.device)
        if device is None:
            self.counters.ignored += 1
            return
        self.counters.deaths += 1
        device.born = False
        log.warning("sparkplug %s: DDEATH: the device's tags are stale until its next DBIRTH", where)
        self._stale(device, now)
