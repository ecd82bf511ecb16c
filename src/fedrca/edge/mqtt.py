"""MQTT sources of ``fedrca edge``: plain JSON per tag (``kind: mqtt``) and Sparkplug B (``kind: sparkplug``).

Both run on aiomqtt (asyncio, over paho-mqtt) through one connection loop, :class:`MqttLink`:
connect, subscribe, read, and on any loss of the broker reconnect with a backoff from 0.1 s
to ``reconnect_max_delay`` without operator action (counted in ``reconnects``; every
subscription is made again, so a broker restart loses no tag). While the broker is away
no update arrives: the row assembler turns the tags stale after its bound.

Incoming messages wait in a :class:`PendingQueue` bounded in messages and bytes, so a
flood cannot grow the process: past ``soft`` pending messages a JSON source keeps only the
newest pending message of each topic (a tag's older value would be superseded anyway;
counted in the source's ``counters.conflated``, exported as ``fedrca_edge_conflated_total``),
and at the hard bound a message is dropped (refused as ``queue-full``). A Sparkplug source
never conflates (its messages are numbered): a drop shows as a sequence gap, and the rebirth
it triggers brings every value back.

Both implement :class:`~fedrca.edge.source.TagSource`: updates, keep-alives and refused
input go to the :class:`~fedrca.edge.source.TagSink` (which logs one line per tag and
reason and counts it); credentials the broker refuses at the first connection are a
:class:`~fedrca.exceptions.ConfigError` (the process stops with that line), later they
are retried like any outage.

JSON payloads (:func:`json_value`): a number, a numeric string, ``true``/``false``, or an
object holding the value, its quality and its time at configurable fields. A payload that
is not JSON, too large, or has no number where the tag's value should be, is refused
(``malformed``, ``wrong-type``) and reported as a Bad value of its tags; ``null`` is a
missing value; NaN / inf are Bad. Nothing of other messages is lost. A JSON source whose
devices publish only on change sets ``report_by_exception``: then the connection vouches
for its tags' last values while it is up (:meth:`~fedrca.edge.source.TagSink.alive`); a
Sparkplug source always does, for the tags of every node that is born and not dead.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
import os
import ssl
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import aiomqtt
import orjson

from fedrca.config.edge_protocols import MqttConnection, MqttSource, MqttTag, SparkplugSource, SparkplugTag
from fedrca.edge.mqtt_client import EdgeMqttClient
from fedrca.edge.source import SourceCounters, TagSink
from fedrca.edge.sparkplug import SparkplugHost, Target
from fedrca.edge.tags import Tag, TagUpdate
from fedrca.exceptions import ConfigError

__all__ = [
    "JsonRoute",
    "MqttLink",
    "MqttReader",
    "PendingQueue",
    "ReaderStats",
    "Reporter",
    "SparkplugReader",
    "json_value",
    "quality_of",
]

log = logging.getLogger("fedrca.edge.mqtt")

_GOOD, _BAD, _STALE, _MISSING = 0, 1, 2, 3
#: Longest numeric string converted (longer text is not a reading; float() of megabytes is slow).
_MAX_NUMBER_TEXT = 64
#: MQTT CONNACK codes no retry fixes: bad user name or password, not authorised (3.1.1: 4, 5; 5.0: 134, 135).
_REFUSED = frozenset({4, 5, 134, 135})

Reject = Callable[[int | None, str, str], None]


@dataclass
class ReaderStats:
    """Details of an MQTT source beyond its :class:`~fedrca.edge.source.SourceCounters` (cumulative)."""

    messages: int = 0
    dropped: int = 0
    connects: int = 0


class Reporter:
    """A source's side of its :class:`~fedrca.edge.source.TagSink`: updates, keep-alives, refusals, counters.

    A refusal is counted, handed to the sink (its metric) and logged once per tag and reason
    (a flood of one problem is one line and a count). What happens before :meth:`bind` (no
    sink yet) is counted and not delivered. Inside :meth:`batch` the updates are collected and
    handed over in one :meth:`~fedrca.edge.source.TagSink.update_many` call when it ends (a batch
    of messages is one call of the sink, not one per value).
    """

    def __init__(self, counters: SourceCounters, name: str, labels: dict[int, str] | None = None) -> None:
        self.counters = counters
        self.name = name
        self.labels = labels or {}
        self.sink: TagSink | None = None
        self._reported: set[tuple[int, str]] = set()
        self._open = False
        self._tags: list[int] = []
        self._values: list[float] = []
        self._quality: list[int] = []
        self._times: list[float] = []

    def bind(self, sink: TagSink) -> None:
        self.sink = sink

    def update(self, tag: int, value: float | None, quality: int, source_ts: float) -> None:
        self.counters.updates += 1
        if self.sink is None:
            return
        if not self._open:
            self.sink.update(TagUpdate(tag, value, quality, source_ts))
            return
        self._tags.append(tag)
        self._values.append(math.nan if value is None else value)
        self._quality.append(quality)
        self._times.append(source_ts)

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Collect the updates made inside, hand them to the sink in one call at the end (in order)."""
        self._open = True
        try:
            yield
        finally:
            self._open = False
            if self._tags and self.sink is not None:
                batch = self._tags, self._values, self._quality, self._times
                self._tags, self._values, self._quality, self._times = [], [], [], []
                self.sink.update_many(*batch)

    def alive(self, tags: Sequence[int]) -> None:
        if self.sink is not None and tags:
            self.sink.alive(tags)

    def reject(self, tag: int | None, reason: str, detail: str) -> None:
        c = self.counters
        c.rejected += 1
        c.reasons[reason] = c.reasons.get(reason, 0) + 1
        if self.sink is not None:
            self.sink.rejected(tag, reason, detail)
        key = (-1 if tag is None else tag, reason)
        if key not in self._reported and len(self._reported) < 10_000:
            self._reported.add(key)
            where = f"{self.labels[tag]}: " if tag in self.labels else ""
            log.warning("%s: %s%s (%s; logged once per tag and reason)", self.name, where, detail, reason)


# -- the bounded queue of incoming messages ----------------------------------------------------
class PendingQueue(asyncio.Queue[Any]):
    """aiomqtt's incoming queue, bounded in messages and payload bytes (see the module docstring).

    Its items are ``(topic, payload)`` pairs (:class:`~fedrca.edge.mqtt_client.EdgeMqttClient`
    queues those instead of aiomqtt's messages). ``put_nowait`` never raises: past ``soft``
    messages it conflates per topic when ``conflate``; at ``hard`` messages or ``max_bytes`` it
    drops the pair and refuses it as ``queue-full``. Built through :meth:`factory` (aiomqtt
    instantiates its ``queue_type``).
    """

    def __init__(
        self,
        maxsize: int = 0,
        *,
        hard: int = 100_000,
        soft: int = 10_000,
        max_bytes: int = 256 * 1024 * 1024,
        conflate: bool = False,
        stats: ReaderStats | None = None,
        reject: Reject | None = None,
        counters: SourceCounters | None = None,
    ) -> None:
        super().__init__(maxsize=0)
        self.hard = hard
        self.soft = soft
        self.max_bytes = max_bytes
        self.conflate = conflate
        self.stats = stats if stats is not None else ReaderStats()
        self.counters = counters if counters is not None else SourceCounters()
        self.reject = reject
        self.bytes = 0
        self._latest: dict[str, list[Any]] = {}

    @classmethod
    def factory(cls, **options: Any) -> Callable[..., PendingQueue]:
        """A ``queue_type`` for :class:`aiomqtt.Client` with these bounds."""

        def make(maxsize: int = 0) -> PendingQueue:
            return cls(maxsize, **options)

        return make

    # asyncio.Queue keeps its items through _init / _put / _get: entries are [topic, payload]
    def _init(self, maxsize: int) -> None:
        self._queue: collections.deque[list[Any]] = collections.deque()

    def _put(self, item: list[Any]) -> None:
        self._queue.append(item)

    def _get(self) -> tuple[str, Any]:
        entry = self._queue.popleft()
        topic, payload = entry
        if self._latest.get(topic) is entry:
            del self._latest[topic]
        self.bytes -= len(payload)
        return topic, payload

    def put_nowait(self, item: tuple[str, Any]) -> None:
        topic, payload = item
        size = len(payload)
        pending = len(self._queue)
        if self.conflate and pending >= self.soft:
            entry = self._latest.get(topic)
            if entry is not None:
                self.bytes += size - len(entry[1])
                entry[1] = payload
                self.counters.conflated += 1
                return
        if pending >= self.hard or self.bytes + size > self.max_bytes:
            self.stats.dropped += 1
            if self.reject is not None:
                self.reject(None, "queue-full", f"{pending} messages ({self.bytes} bytes) wait to be read: dropped one")
            return
        entry = [topic, payload]
        self._latest[topic] = entry
        self.bytes += size
        # asyncio.Queue.put_nowait without its bound check (there is none: maxsize 0) and its
        # join() bookkeeping (nothing joins this queue): one append and a getter woken, per message
        self._queue.append(entry)
        if self._getters:  # type: ignore[attr-defined]
            self._wakeup_next(self._getters)  # type: ignore[attr-defined]

    def drain(self, most: int) -> list[tuple[str, Any]]:
        """Up to ``most`` waiting ``(topic, payload)`` pairs, without waiting."""
        out: list[tuple[str, Any]] = []
        while len(out) < most and self._queue:
            out.append(self._get())
        return out


# -- the connection loop -----------------------------------------------------------------------
def _password(settings: MqttConnection, name: str) -> str | None:
    if settings.username is None:
        return None
    password = os.environ.get(settings.password_env)
    if password is None:
        raise ConfigError(
            f"user '{settings.username}' needs a password: set the environment variable {settings.password_env}",
            key=f"edge.sources.{name}.password_env",
        )
    return password


def _tls(settings: MqttConnection) -> ssl.SSLContext | None:
    if not settings.tls:
        return None
    context = ssl.create_default_context(cafile=settings.ca_file)
    if settings.cert_file is not None:
        context.load_cert_chain(settings.cert_file, settings.key_file)
    return context


def _code(exc: aiomqtt.MqttError) -> int | None:
    rc = getattr(exc, "rc", None)
    value = getattr(rc, "value", rc)
    return value if isinstance(value, int) else None


class MqttLink:
    """One MQTT connection that comes back by itself (see the module docstring).

    Parameters
    ----------
    settings : the source's connection settings
    name : the source's name (log lines, client id)
    subscriptions : topic filters to subscribe to at every connection
    handle : called with each batch of messages (``list[aiomqtt.Message]``)
    counters, stats : where the connection counts what it does
    reject : where dropped messages are refused
    queue : the bounds of the incoming queue (:class:`PendingQueue` options)
    on_connect : awaited with the client after each (re)connection and subscription
    on_close : awaited with the client when the link is cancelled while connected (a clean goodbye)
    will : the MQTT will of the connection (Sparkplug's STATE)
    """

    #: most messages handed to ``handle`` at once. A batch must take what the client reads while
    #: the last one was handled and while it waits (a read brings up to 8 KiB: hundreds of small
    #: messages, and a batch's wait spans a few passes of the event loop); at 512 a stream the
    #: process keeps up with piled up in the queue until it conflated (``python bench/bench_edge.py
    #: --source mqtt --part throughput``: its publisher offers more than one core takes)
    BATCH = 4096
    #: how long a batch waits for more messages after its first, s: one wake-up of the reader for
    #: many messages instead of one each (as Kafka's linger.ms); small beside any sample period
    LINGER = 0.005

    def __init__(
        self,
        settings: MqttConnection,
        name: str,
        subscriptions: Sequence[str],
        handle: Callable[[list[Any]], None],
        counters: SourceCounters,
        stats: ReaderStats,
        reject: Reject,
        queue: dict[str, Any] | None = None,
        on_connect: Callable[[aiomqtt.Client], Awaitable[None]] | None = None,
        will: aiomqtt.Will | None = None,
        on_close: Callable[[aiomqtt.Client], Awaitable[None]] | None = None,
    ) -> None:
        self.settings = settings
        self.on_close = on_close
        self.name = name
        self.subscriptions = list(subscriptions)
        self.handle = handle
        self.counters = counters
        self.stats = stats
        self.on_connect = on_connect
        self.will = will
        self.client: aiomqtt.Client | None = None
        self._queue_options = {"stats": stats, "counters": counters, "reject": reject, **(queue or {})}
        self._password = _password(settings, name)
        self._tls = _tls(settings)
        self._client_id = settings.client_id or f"fedrca-edge-{name}-{os.getpid()}"

    def _client(self, host: str, port: int) -> EdgeMqttClient:
        return EdgeMqttClient(
            host, port,
            identifier=self._client_id,
            username=self.settings.username, password=self._password,
            keepalive=self.settings.keepalive,
            tls_context=self._tls,
            will=self.will,
            clean_session=True,
            queue_type=PendingQueue.factory(**self._queue_options),
            timeout=10.0,
        )  # fmt: skip

    async def run(self) -> None:
        """Connect, subscribe and read until cancelled; reconnect on every loss.

        Raises
        ------
        ConfigError
            When the broker refuses the credentials at the first connection.
        """
        host, port = self.settings.address()
        delay = 0.1
        outage: float | None = None  # when the broker was last reported unreachable
        attempts = 0
        while True:
            try:
                client = self._client(host, port)
                attempts += 1
                async with client:
                    self.client = client
                    queue: PendingQueue = client._queue  # type: ignore[assignment]
                    await client.subscribe([(topic, int(self.settings.qos)) for topic in self.subscriptions])
                    self.stats.connects += 1
                    self.counters.connected = True
                    if self.stats.connects == 1:
                        log.info("mqtt source '%s': connected to %s:%d, %d subscriptions", self.name, host, port,
                                 len(self.subscriptions))  # fmt: skip
                    else:
                        self.counters.reconnects += 1
                        log.warning("mqtt source '%s': connected again to %s:%d", self.name, host, port)
                    delay, outage, attempts = 0.1, None, 0
                    if self.on_connect is not None:
                        await self.on_connect(client)
                    try:
                        async for message in client.messages:  # a (topic, payload) pair (EdgeMqttClient)
                            if queue.qsize() < self.BATCH - 1:
                                await asyncio.sleep(self.LINGER)
                            batch = [message, *queue.drain(self.BATCH - 1)]
                            self.handle(batch)
                    except asyncio.CancelledError:
                        if self.on_close is not None:
                            with contextlib.suppress(aiomqtt.MqttError, asyncio.TimeoutError):
                                await asyncio.wait_for(self.on_close(client), 2.0)
                        raise
            except aiomqtt.MqttError as exc:
                self.client = None
                self.counters.last_error = str(exc)[:500]
                if self.stats.connects == 0 and _code(exc) in _REFUSED:
                    who = f"user '{self.settings.username}'" if self.settings.username else "an anonymous client"
                    raise ConfigError(
                        f"the broker {host}:{port} refuses {who} ({exc}); check username and the password in "
                        f"${self.settings.password_env}",
                        key=f"edge.sources.{self.name}.username",
                    ) from None
                now = time.monotonic()
                if self.counters.connected:
                    log.warning("mqtt source '%s': lost the broker %s:%d (%s); reconnecting", self.name, host, port,
                                exc)  # fmt: skip
                    outage = now
                elif outage is None or now - outage >= 60.0:
                    again = f" (still, after {attempts} attempts)" if outage is not None else ""
                    log.warning("mqtt source '%s': cannot reach %s:%d (%s)%s; retrying every %.1f s at most",
                                self.name, host, port, exc, again, self.settings.reconnect_max_delay)  # fmt: skip
                    outage = now
                self.counters.connected = False
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.settings.reconnect_max_delay)
            finally:
                self.counters.connected = False
                self.client = None

    async def publish(self, topic: str, payload: bytes, qos: int = 0, retain: bool = False) -> bool:
        """Publish when connected; False (nothing sent) while the broker is away."""
        client = self.client
        if client is None:
            return False
        try:
            await client.publish(topic, payload, qos=qos, retain=retain)
        except aiomqtt.MqttError:
            return False
        return True


async def _vouch(link: MqttLink, reporter: Reporter, tags: Callable[[], list[int]], every: float) -> None:
    """While the link is up, say every ``every`` seconds that ``tags()`` still hold their last values."""
    while True:
        await asyncio.sleep(every)
        if link.counters.connected:
            reporter.alive(tags())


# -- plain JSON -----------------------------------------------------------------------------------
def quality_of(raw: Any) -> int:
    """A quality code from a payload's quality field.

    ``true``/``false``; ``good``/``bad``/``uncertain``/``stale`` (any case); a number as OPC
    quality (192..255 good, 500 stale as Ignition writes it, else bad).

    Examples
    --------
    >>> quality_of(True), quality_of("Good"), quality_of("uncertain"), quality_of(192), quality_of(0)
    (0, 0, 1, 0, 1)
    """
    if isinstance(raw, bool):
        return _GOOD if raw else _BAD
    if isinstance(raw, int):
        if raw == 500:
            return _STALE
        return _GOOD if 192 <= raw <= 255 else _BAD
    if isinstance(raw, str):
        word = raw.strip().lower()
        if word == "good":
            return _GOOD
        if word == "stale":
            return _STALE
    return _BAD


def _walk(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return _ABSENT
        obj = obj.get(key, _ABSENT)
        if obj is _ABSENT:
            return obj
    return obj


_ABSENT = object()


def _number(raw: Any) -> tuple[float | None, int, str | None]:
    """A JSON value as ``(value, quality, problem)``."""
    if raw is None:
        return None, _MISSING, None
    if isinstance(raw, bool):
        return float(raw), _GOOD, None
    if isinstance(raw, int | float):
        try:
            value = float(raw)
        except OverflowError:
            return None, _BAD, "an integer beyond the float range"
        return (value, _GOOD, None) if math.isfinite(value) else (None, _BAD, None)
    if isinstance(raw, str):
        if len(raw) > _MAX_NUMBER_TEXT:
            return None, _BAD, f"a string of {len(raw)} characters, not a number"
        try:
            value = float(raw)
        except ValueError:
            return None, _BAD, "a string that is not a number"
        return (value, _GOOD, None) if math.isfinite(value) else (None, _BAD, None)
    return None, _BAD, f"a JSON {type(raw).__name__}, not a number"


def _timestamp(raw: Any, unit: str) -> float | None:
    if unit == "iso":
        if not isinstance(raw, str) or len(raw) > 64:
            return None
        try:
            stamp = datetime.fromisoformat(raw)
        except ValueError:
            return None
        return stamp.timestamp() if stamp.tzinfo is not None else None
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        return None
    seconds = raw / 1000.0 if unit == "ms" else float(raw)
    return seconds if math.isfinite(seconds) and 0 <= seconds < 1e11 else None


_NON_JSON_WORDS = frozenset({b"nan", b"-nan", b"inf", b"+inf", b"-inf", b"infinity", b"-infinity", b"+infinity"})


@dataclass(frozen=True)
class JsonRoute:
    """Where one tag is in its topic's payloads (see :func:`json_value`)."""

    target: Target
    field: tuple[str, ...] | None
    quality: tuple[str, ...]
    timestamp: tuple[str, ...]
    unit: str = "s"
    label: str = ""


def _path(text: str | None) -> tuple[str, ...] | None:
    return None if text is None else tuple(text.split("."))


def json_value(
    doc: Any, route: JsonRoute, value_field: tuple[str, ...]
) -> tuple[float | None, int, float | None, str | None]:
    """One tag's ``(value, quality, source_ts or None, problem)`` from a parsed JSON payload.

    A scalar payload is the value (with no field configured); an object holds it at the
    route's ``field`` (else ``value_field``), its quality and time beside it.

    Examples
    --------
    >>> r = JsonRoute(Target(0), ("pv",), ("q",), ("t",), "ms")
    >>> json_value({"pv": 2.5, "q": 192, "t": 1700000000000}, r, ("value",))
    (2.5, 0, 1700000000.0, None)
    >>> json_value({"pv": "open"}, r, ("value",))[1:]
    (1, None, 'a string that is not a number')
    """
    if not isinstance(doc, dict):
        if route.field is not None:
            return None, _BAD, None, "the payload is not a JSON object with the tag's field"
        value, quality, problem = _number(doc)
        return value, quality, None, problem
    raw = _walk(doc, route.field or value_field)
    if raw is _ABSENT:
        return None, _MISSING, None, "the tag's field is not in the payload"
    value, quality, problem = _number(raw)
    stated = _walk(doc, route.quality)
    if stated is not _ABSENT and quality == _GOOD:
        quality = quality_of(stated)
        if quality != _GOOD:
            value = None
    ts = _walk(doc, route.timestamp)
    return value, quality, (None if ts is _ABSENT else _timestamp(ts, route.unit)), problem


class MqttReader:
    """The tags of one ``kind: mqtt`` source (plain JSON): a :class:`~fedrca.edge.source.TagSource`.

    Parameters
    ----------
    name : the source's name
    settings : its settings
    tags : the tags read from it (addresses :class:`MqttTag`)
    clock : seconds since the epoch (arrival times)
    """

    kind = "mqtt"

    def __init__(
        self, name: str, settings: MqttSource, tags: Sequence[Tag], clock: Callable[[], float] = time.time
    ) -> None:
        self.name = name
        self.settings = settings
        self.tags = list(tags)
        self.counters = SourceCounters()
        self.stats = ReaderStats()
        self.report = Reporter(self.counters, name, {t.index: t.describe() for t in self.tags})
        self._clock = clock
        self._value_field = tuple(settings.value_field.split("."))
        self.routes: dict[str, list[JsonRoute]] = {}
        for tag in self.tags:
            address = tag.address
            assert isinstance(address, MqttTag)
            route = JsonRoute(
                Target(tag.index, address.scale, address.offset, tag.name),
                _path(address.field),
                _path(address.quality_field or settings.quality_field) or (),
                _path(address.timestamp_field or settings.timestamp_field) or (),
                settings.timestamp_unit,
                tag.name,
            )
            self.routes.setdefault(address.topic, []).append(route)
        self.link = MqttLink(
            settings, name, list(self.routes), self.handle, self.counters, self.stats, self.report.reject,
            queue={"conflate": True, "max_bytes": 64 * settings.max_payload_bytes + 64 * 1024 * 1024},
        )  # fmt: skip

    async def run(self, sink: TagSink) -> None:
        """Read into ``sink`` until cancelled (reconnecting by itself)."""
        self.report.bind(sink)
        if not self.settings.report_by_exception:
            await self.link.run()
            return
        indices = [t.index for t in self.tags]
        vouch = asyncio.create_task(_vouch(self.link, self.report, lambda: indices, self.settings.keepalive / 2))
        try:
            await self.link.run()
        finally:
            vouch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await vouch

    def handle(self, messages: list[tuple[str, bytes]]) -> None:
        """Turn a batch of ``(topic, payload)`` messages into tag updates, handed to the sink as one batch
        (never raises for bad input)."""
        now = self._clock()
        self.stats.messages += len(messages)
        routes_of = self.routes
        with self.report.batch():
            for topic, payload in messages:
                routes = routes_of.get(topic)
                if routes is None:
                    continue  # a retained message of a filter we no longer hold
                self.on_payload(topic, payload, routes, now)

    def on_payload(self, topic: str, payload: Any, routes: list[JsonRoute], now: float) -> None:
        """One message of ``topic`` (its tags' ``routes``) arrived at ``now``."""
        update, reject = self.report.update, self.report.reject
        if not isinstance(payload, bytes | bytearray):
            payload = b"" if payload is None else str(payload).encode()
        if len(payload) > self.settings.max_payload_bytes:
            self._bad(routes, now, "malformed", f"topic '{topic[:200]}': payload of {len(payload)} bytes is over "
                                                f"max_payload_bytes {self.settings.max_payload_bytes}")  # fmt: skip
            return
        try:
            doc = orjson.loads(payload)
        except orjson.JSONDecodeError:
            if payload.strip().lower() in _NON_JSON_WORDS:  # a device writing NaN / inf as text: a Bad value
                for route in routes:
                    update(route.target.tag, None, _BAD, now)
                return
            self._bad(routes, now, "malformed", f"topic '{topic[:200]}': payload is not JSON")
            return
        for route in routes:
            value, quality, ts, problem = json_value(doc, route, self._value_field)
            target = route.target
            if problem is not None:
                if quality == _MISSING:  # this payload does not carry the tag: no news of it
                    reject(target.tag, "malformed", f"topic '{topic[:200]}': {problem}")
                    continue
                reject(target.tag, "wrong-type", f"topic '{topic[:200]}': {problem}")
            if value is not None and (target.scale != 1.0 or target.offset != 0.0):
                value = value * target.scale + target.offset
                if not math.isfinite(value):
                    value, quality = None, _BAD
            update(target.tag, value, quality, now if ts is None else ts)

    def _bad(self, routes: list[JsonRoute], now: float, reason: str, detail: str) -> None:
        self.report.reject(routes[0].target.tag if len(routes) == 1 else None, reason, detail)
        for route in routes:
            self.report.update(route.target.tag, None, _BAD, now)


# -- Sparkplug B ----------------------------------------------------------------------------------
@dataclass
class _Commands:
    pending: collections.deque[tuple[str, bytes]] = field(default_factory=lambda: collections.deque(maxlen=1000))
    wake: asyncio.Event = field(default_factory=asyncio.Event)


class SparkplugReader:
    """The tags of one ``kind: sparkplug`` source: a Sparkplug B host application (:class:`SparkplugHost`)
    and a :class:`~fedrca.edge.source.TagSource`.

    Parameters are those of :class:`MqttReader`; the tags' addresses are :class:`SparkplugTag`.
    ``alive_every``: how often the tags of born nodes are vouched for, s.
    """

    kind = "sparkplug"

    def __init__(
        self,
        name: str,
        settings: SparkplugSource,
        tags: Sequence[Tag],
        clock: Callable[[], float] = time.time,
        alive_every: float = 1.0,
    ) -> None:
        self.name = name
        self.settings = settings
        self.tags = list(tags)
        self.counters = SourceCounters()
        self.stats = ReaderStats()
        self.report = Reporter(self.counters, name, {t.index: t.describe() for t in self.tags})
        self.alive_every = alive_every
        self._clock = clock
        targets: dict[tuple[str, str, str | None, str], list[Target]] = {}
        for tag in self.tags:
            address = tag.address
            assert isinstance(address, SparkplugTag)
            node = address.node or settings.node
            if node is None:
                raise ConfigError(
                    f"tag {tag.describe()}: which edge node? set node on the tag or edge.sources.{name}.node",
                    key=f"edge.sources.{name}.node",
                )
            key = (address.group or settings.group, node, address.device, address.metric)
            targets.setdefault(key, []).append(Target(tag.index, address.scale, address.offset, tag.name))
        self._commands = _Commands()
        self.host = SparkplugHost(targets, self.report.update, self._queue_command, self.report.reject,
                                  rebirth_holdoff=settings.rebirth_holdoff)  # fmt: skip
        will = None
        if settings.host_id is not None:
            will = aiomqtt.Will(self.state_topic, self._state(False), qos=1, retain=True)
        self.link = MqttLink(
            settings, name, self.host.subscriptions(), self.handle, self.counters, self.stats, self.report.reject,
            queue={"conflate": False}, on_connect=self._connected, will=will,
            on_close=self._closing if settings.host_id is not None else None,
        )  # fmt: skip

    @property
    def state_topic(self) -> str:
        return f"spBv1.0/STATE/{self.settings.host_id}"

    def _state(self, online: bool) -> bytes:
        return orjson.dumps({"online": online, "timestamp": int(self._clock() * 1000)})

    def _queue_command(self, topic: str, payload: bytes) -> None:
        self._commands.pending.append((topic, payload))
        self._commands.wake.set()

    async def _connected(self, client: aiomqtt.Client) -> None:
        if self.settings.host_id is not None:
            await client.publish(self.state_topic, self._state(True), qos=1, retain=True)
        # births sent while we were away are lost to us (they are not retained): ask again
        self.host.request_rebirths(self._clock(), "the host connected")

    async def _closing(self, client: aiomqtt.Client) -> None:
        # a clean stop sends no will: say offline ourselves (Sparkplug 3.0 host STATE)
        await client.publish(self.state_topic, self._state(False), qos=1, retain=True)

    async def _send_commands(self) -> None:
        while True:
            await self._commands.wake.wait()
            self._commands.wake.clear()
            while self._commands.pending:
                topic, payload = self._commands.pending[0]
                if not await self.link.publish(topic, payload, qos=0):
                    break  # the broker is away: the connection's own rebirth requests make up for it
                self._commands.pending.popleft()

    async def run(self, sink: TagSink) -> None:
        """Read into ``sink`` until cancelled (reconnecting by itself); rebirth requests go out as they
        arise, and the tags of born nodes are vouched for every ``alive_every`` seconds."""
        self.report.bind(sink)
        helpers = [
            asyncio.create_task(self._send_commands()),
            asyncio.create_task(_vouch(self.link, self.report, self.host.born_tags, self.alive_every)),
        ]
        try:
            await self.link.run()
        finally:
            for task in helpers:
                task.cancel()
            for task in helpers:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def handle(self, messages: list[tuple[str, bytes]]) -> None:
        """Hand a batch of ``(topic, payload)`` messages to the host (never raises for bad input)."""
        now = self._clock()
        host = self.host
        with self.report.batch():
            for topic, payload in messages:
                self.stats.messages += 1
                host.on_message(topic, payload, now)
