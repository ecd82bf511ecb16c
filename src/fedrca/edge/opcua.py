"""OPC UA source of ``fedrca edge`` (asyncua client): one session, one subscription, every tag of the source.

What it does, and the test that guards each (``tests/edge/test_opcua.py``, against a real
asyncua server started in the test process):

* node ids are resolved at every connection: a ``nsu=`` namespace URI through the server's
  namespace array (its index may change when the server restarts), a browse path through
  TranslateBrowsePathsToNodeIds;
* one subscription with a data-change filter on **status and value** (``StatusValue``): a
  status change without a value change is notified (``test_status_only_change``), a value
  stamped again with the same status and value is not (no flood);
* each publish's changes go to the sink as one batch (:meth:`~fedrca.edge.source.TagSink.update_many`):
  the value scaled into the column's unit, the quality from the status code (Good -> good;
  Uncertain and Bad -> bad), the time per ``timestamps`` (source, server or arrival; only that
  timestamp is asked of the server, and a value without it counts from its arrival; every
  timestamp is a date asyncua decodes per change); a value that is not a finite
  number (a string, an array, NaN) is bad, reported once per tag and reason
  (``test_tag_of_the_wrong_type``);
* every publish of the subscription (a change or a keep-alive) vouches for all its tags
  (:meth:`~fedrca.edge.source.TagSink.alive`): an unchanged value stays fresh;
* the watchdog: the session's health is probed every ``watchdog_interval`` (asyncua's
  supervisor), and the subscription must publish within three keep-alive periods; a lost
  session, a subscription the server dropped (``test_subscription_lost``) or a server
  restart (``test_server_restart``) tear everything down and the session, namespaces,
  nodes and subscription are created again, with a back-off up to ``reconnect_max_delay``
  and no operator action;
* at the first connection, nodes the server does not have and credentials it refuses stop
  the process with one line naming them (:class:`~fedrca.exceptions.ConfigError`,
  ``test_unknown_node_ids``, ``test_wrong_credentials``); later (a server that came back
  without a node) the tag is missing and the line is logged.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from asyncua import Client, ua
from asyncua.client.ua_client import UaClientState
from asyncua.common.subscription import Subscription
from asyncua.crypto import security_policies

from fedrca.config.edge import OpcuaSource as OpcuaSettings
from fedrca.config.edge import OpcuaTag, parse_node_id
from fedrca.edge.source import SourceCounters, TagSink
from fedrca.edge.tags import Quality, Tag
from fedrca.exceptions import ConfigError

__all__ = ["OpcuaSource", "quality_of"]

log = logging.getLogger("fedrca.edge.opcua")

_GOOD, _BAD, _MISSING = int(Quality.GOOD), int(Quality.BAD), int(Quality.MISSING)
#: The severity bits of a status code (Part 4, 7.39): 00 good, 01 uncertain, 10 bad.
_SEVERITY = 0xC0000000
#: InfoType DataValue (bit 10) + Overflow (bit 7) of a status code: a monitored item's queue overflowed.
_OVERFLOW = 0x480
#: Largest message the client accepts (a hostile server cannot make it allocate more).
MAX_MESSAGE_BYTES = 16 << 20
#: Status codes of a refused identity or channel: no retry fixes them.
_AUTH_CODES = {
    ua.StatusCodes.BadUserAccessDenied,
    ua.StatusCodes.BadIdentityTokenInvalid,
    ua.StatusCodes.BadIdentityTokenRejected,
    ua.StatusCodes.BadUserSignatureInvalid,
    ua.StatusCodes.BadSecurityPolicyRejected,
    ua.StatusCodes.BadCertificateUntrusted,
    ua.StatusCodes.BadCertificateInvalid,
    ua.StatusCodes.BadSecurityChecksFailed,
}
#: Numeric variant types: their values are numbers (anything else is the wrong type for a column).
_NUMERIC = {
    ua.VariantType.Boolean,
    ua.VariantType.SByte,
    ua.VariantType.Byte,
    ua.VariantType.Int16,
    ua.VariantType.UInt16,
    ua.VariantType.Int32,
    ua.VariantType.UInt32,
    ua.VariantType.Int64,
    ua.VariantType.UInt64,
    ua.VariantType.Float,
    ua.VariantType.Double,
}
_POLICIES: dict[str, type[security_policies.SecurityPolicy]] = {
    "Basic256Sha256": security_policies.SecurityPolicyBasic256Sha256,
    "Aes128Sha256RsaOaep": security_policies.SecurityPolicyAes128Sha256RsaOaep,
    "Aes256Sha256RsaPss": security_policies.SecurityPolicyAes256Sha256RsaPss,
}


def quality_of(status: int) -> int:
    """The quality code of an OPC UA status code: Good -> GOOD, Uncertain or Bad -> BAD.

    Examples
    --------
    >>> quality_of(ua.StatusCodes.Good), quality_of(ua.StatusCodes.BadSensorFailure)
    (0, 1)
    >>> quality_of(ua.StatusCodes.UncertainLastUsableValue)
    1
    """
    return _GOOD if status & _SEVERITY == 0 else _BAD


class _Lost(Exception):
    """The session or the subscription is gone: tear down and connect again."""


class _TagSubscription(Subscription):
    """A subscription whose publishes go straight to the source (no task per notification)."""

    def __init__(self, session: Any, params: ua.CreateSubscriptionParameters, source: OpcuaSource) -> None:
        super().__init__(session, params, handler=None, queue_maxsize=1)
        self._source = source

    async def publish_callback(self, publish_result: ua.PublishResult) -> None:
        self.last_publish_at = time.monotonic()
        message = publish_result.NotificationMessage
        self.last_sequence_number = int(message.SequenceNumber)
        self._source._published(message.NotificationData)


class OpcuaSource:
    """The tags of one OPC UA server (see the module docstring).

    Parameters
    ----------
    name : the source's name in ``edge.sources``
    settings : its settings
    tags : the tags read from it (their addresses are :class:`~fedrca.config.edge.OpcuaTag`)
    clock : seconds since the epoch (the arrival time of an update)
    env : where the password is read (default: the process environment)
    """

    kind = "opcua"

    def __init__(
        self,
        name: str,
        settings: OpcuaSettings,
        tags: Sequence[Tag],
        clock: Callable[[], float] = time.time,
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.settings = settings
        self.tags = list(tags)
        self._by_index = {t.index: t for t in self.tags}
        self.counters = SourceCounters()
        self._clock = clock
        self._env = os.environ if env is None else env
        self._sink: TagSink | None = None
        self._handles: dict[int, Tag] = {}  # client handle -> tag
        self._monitored: list[int] = []  # tag indices with a live monitored item
        self._reported: set[tuple[int, str]] = set()  # (tag, reason) already logged
        self._status_lost: str | None = None
        self._connected_once = False
        self._stamp = settings.timestamps
        for tag in self.tags:
            if not isinstance(tag.address, OpcuaTag):
                raise ConfigError(f"tag {tag.describe()} is not an OPC UA address", key=f"edge.sources.{name}")

    # -- the loop ----------------------------------------------------------------------------
    async def run(self, sink: TagSink) -> None:
        """Read the tags into ``sink`` until cancelled (see the module docstring)."""
        self._sink = sink
        delay = 0.5
        outage_logged = False
        while True:
            client = self._client()
            try:
                await self._secure(client)
                try:
                    await client.connect()
                except ua.UaStatusCodeError as exc:
                    if exc.code in _AUTH_CODES:
                        self._refused(exc)
                    raise
                await self._subscribe(client)
                if self._connected_once:
                    self.counters.reconnects += 1
                    log.warning("%s: connected again to %s", self.name, self.settings.url)
                else:
                    log.info("%s: connected to %s (%d tags)", self.name, self.settings.url, len(self._monitored))
                self._connected_once = True
                self.counters.connected = True
                outage_logged = False
                delay = 0.5
                await self._watch(client)
            except (ConfigError, asyncio.CancelledError):
                raise
            except Exception as exc:  # a server's response no rule foresaw: logged whole, then a new session
                if not isinstance(exc, _Lost | OSError | TimeoutError | ua.UaError | ConnectionError):
                    log.exception("%s: unexpected error from %s; reconnecting", self.name, self.settings.url)
                self._lost(exc, outage_logged)
                outage_logged = True
            finally:
                self.counters.connected = False
                self._monitored = []
                await self._close(client)
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.settings.reconnect_max_delay)

    def _lost(self, exc: BaseException, logged: bool) -> None:
        """One log line per outage (not one per retry)."""
        self.counters.last_error = f"{type(exc).__name__}: {exc}"
        if not logged:
            what = "lost" if self.counters.connected else "cannot reach"
            log.warning(
                "%s: %s %s (%s); reconnecting every <= %g s",
                self.name,
                what,
                self.settings.url,
                self.counters.last_error,
                self.settings.reconnect_max_delay,
            )

    def _client(self) -> Client:
        s = self.settings
        client = Client(s.url, timeout=s.request_timeout, watchdog_intervall=s.watchdog_interval)
        client.max_messagesize = MAX_MESSAGE_BYTES
        client.max_chunkcount = 1024
        client.name = client.description = f"fedrca edge ({self.name})"
        client.application_uri = "urn:fedrca:edge"
        if s.username is not None:
            client.set_user(s.username)
            password = self._env.get(s.password_env)
            if password is None:
                raise ConfigError(
                    f"user '{s.username}' needs the password in the environment variable {s.password_env} "
                    "(never in the file)",
                    key=f"edge.sources.{self.name}.password_env",
                )
            client.set_password(password)
        return client

    async def _secure(self, client: Client) -> None:
        s = self.settings
        if s.security is not None:
            mode = getattr(ua.MessageSecurityMode, s.security.mode)
            await client.set_security(
                _POLICIES[s.security.policy],
                s.security.certificate,
                s.security.private_key,
                server_certificate=s.security.server_certificate,
                mode=mode,
            )
        if s.user_certificate is not None and s.user_private_key is not None:
            await client.load_client_certificate(s.user_certificate)
            await client.load_private_key(Path(s.user_private_key))

    def _refused(self, exc: ua.UaStatusCodeError) -> None:
        """Credentials or security refused: one line, no retry at start (later: logged, retried)."""
        s = self.settings
        who = (
            f"user '{s.username}' (password from ${s.password_env})"
            if s.username
            else ("the user certificate " + str(s.user_certificate) if s.user_certificate else "an anonymous user")
        )
        name = type(exc).__name__
        message = f"{s.url} refused {who}: {name}; check the credentials and the security settings"
        if not self._connected_once:
            raise ConfigError(message, key=f"edge.sources.{self.name}")
        log.error("%s: %s", self.name, message)

    async def _close(self, client: Client) -> None:
        try:
            await asyncio.wait_for(client.disconnect(), timeout=2.0)
        except Exception:  # the transport is gone already: nothing to close cleanly
            client.disconnect_socket()

    # -- subscribe ---------------------------------------------------------------------------
    async def _resolve(self, client: Client) -> tuple[list[tuple[Tag, ua.NodeId]], list[str]]:
        """Every tag's node id on this server; and what could not be resolved (one text each)."""
        namespaces = await client.get_namespace_array()
        default = self.settings.namespace
        found: list[tuple[Tag, ua.NodeId]] = []
        problems: list[str] = []

        def index_of(uri: str | None, tag: Tag) -> int | None:
            if uri is None:
                return 0
            if uri in namespaces:
                return namespaces.index(uri)
            problems.append(f"{tag.describe()}: the server has no namespace '{uri}'")
            return None

        paths: list[tuple[Tag, ua.RelativePath]] = []
        for tag in self.tags:
            address = tag.address
            assert isinstance(address, OpcuaTag)
            if address.node is not None:
                ns, uri, kind, ident = parse_node_id(address.node)
                if ns is None:
                    ns = index_of(uri if uri is not None else default, tag)
                    if ns is None:
                        continue
                found.append((tag, _node_id(ns, kind, ident)))
                continue
            assert address.path is not None
            elements: list[str] = []
            parts = address.path.strip("/").split("/")
            if parts[0] == "Objects":
                parts = parts[1:]  # paths start below the Objects folder
            for part in parts:
                uri, bar, browse = part.rpartition("|")
                index = index_of(uri if bar else default, tag)
                if index is None:
                    break
                elements.append(f"/{index}:{_escape(browse)}")
            else:
                try:
                    paths.append((tag, ua.RelativePath.from_string("".join(elements))))
                except (ValueError, ua.UaError) as exc:
                    problems.append(f"{tag.describe()}: the path is not a browse path ({exc})")
        if paths:
            results = await client.translate_browsepaths(_OBJECTS, [p for _, p in paths])
            for (tag, _), result in zip(paths, results, strict=True):
                if result.StatusCode.is_good() and result.Targets:
                    found.append((tag, result.Targets[0].TargetId))
                else:
                    problems.append(f"{tag.describe()}: no node at this path ({result.StatusCode.name})")
        return found, problems

    async def _subscribe(self, client: Client) -> None:
        found, problems = await self._resolve(client)
        s = self.settings
        keepalive = max(1, math.ceil(s.watchdog_interval / s.publishing_interval))
        params = ua.CreateSubscriptionParameters(
            RequestedPublishingInterval=s.publishing_interval * 1000.0,
            RequestedLifetimeCount=max(10 * keepalive, 30),
            RequestedMaxKeepAliveCount=keepalive,
            MaxNotificationsPerPublish=0,
            PublishingEnabled=True,
            Priority=0,
        )
        sub = _TagSubscription(client.uaclient.session, params, self)
        self._status_lost = None
        await sub.init()
        self._subscription = sub
        # status and value: a status change alone is notified, a new timestamp alone is not
        change = ua.DataChangeFilter(Trigger=ua.DataChangeTrigger.StatusValue)
        requests = []
        self._handles = {}
        for handle, (tag, node) in enumerate(found, start=1):
            self._handles[handle] = tag
            parameters = ua.MonitoringParameters(
                ClientHandle=handle,
                SamplingInterval=s.sampling_interval * 1000.0,
                Filter=change,
                QueueSize=s.queue_size,
                DiscardOldest=True,
            )
            requests.append(
                ua.MonitoredItemCreateRequest(
                    ItemToMonitor=ua.ReadValueId(NodeId=node, AttributeId=ua.AttributeIds.Value),
                    MonitoringMode=ua.MonitoringMode.Reporting,
                    RequestedParameters=parameters,
                )
            )
        results = await self._create_items(client, sub, requests) if requests else []
        monitored = []
        for (tag, node), result in zip(found, results, strict=True):
            if isinstance(result, ua.StatusCode):
                problems.append(f"{tag.describe()}: node {node.to_string()} refused ({result.name})")
            else:
                monitored.append(tag.index)
        if problems:
            if not self._connected_once:
                raise ConfigError(
                    f"{s.url} has no node for {len(problems)} tag(s): " + "; ".join(problems[:5])
                    + ("; ..." if len(problems) > 5 else "") + "; check edge.plants.<plant>.tags",
                    key=f"edge.sources.{self.name}",
                )  # fmt: skip
            for problem in problems:
                self._report(None, "unknown-node", problem)
        self._monitored = monitored
        self._keepalive_seconds = keepalive * s.publishing_interval

    async def _create_items(
        self, client: Client, sub: Subscription, requests: list[ua.MonitoredItemCreateRequest]
    ) -> list[int | ua.StatusCode]:
        """Create the monitored items asking only for the timestamp ``timestamps`` uses (Neither for
        ``receive``): asyncua's ``Subscription.create_monitored_items`` asks for both, and each
        timestamp is a date decoded per notification. The subscription's publishes come to
        :meth:`_published` whatever its own item registry holds."""
        params = ua.CreateMonitoredItemsParameters(
            SubscriptionId=sub.subscription_id,
            TimestampsToReturn=_TIMESTAMPS[self._stamp],
            ItemsToCreate=requests,
        )
        results = await client.uaclient.create_monitored_items(params)
        return [r.MonitoredItemId if r.StatusCode.is_good() else r.StatusCode for r in results]

    async def _watch(self, client: Client) -> None:
        """Return (raise _Lost) when the session or the subscription is gone."""
        s = self.settings
        silent_limit = 3.0 * max(self._keepalive_seconds, s.publishing_interval) + s.watchdog_interval
        while True:
            await asyncio.sleep(min(s.watchdog_interval, silent_limit / 3))
            if client.uaclient.state is not UaClientState.CONNECTED:
                raise _Lost(f"session {client.uaclient.state.value}")
            if self._status_lost is not None:
                raise _Lost(f"subscription status {self._status_lost}")
            last = self._subscription.last_publish_at
            if last is not None and time.monotonic() - last > silent_limit:
                raise _Lost(f"subscription silent for {time.monotonic() - last:.1f} s")

    # -- notifications -----------------------------------------------------------------------
    def _published(self, data: list[Any] | None) -> None:
        sink = self._sink
        assert sink is not None
        if data:
            for notification in data:
                if isinstance(notification, ua.DataChangeNotification):
                    self._changes(notification.MonitoredItems, sink)
                elif isinstance(notification, ua.StatusChangeNotification):
                    status = notification.Status
                    if not status.is_good():
                        self._status_lost = status.name
        sink.alive(self._monitored)

    def _changes(self, items: list[ua.MonitoredItemNotification], sink: TagSink) -> None:
        """One notification's changes to ``sink`` as one batch (:meth:`TagSink.update_many`)."""
        handles = self._handles
        now = self._clock()
        server_time = self._stamp == "server"
        receive = self._stamp == "receive"
        numeric = _NUMERIC
        tags: list[int] = []
        values: list[float] = []
        qualities: list[int] = []
        times: list[float] = []
        for item in items:
            tag = handles.get(item.ClientHandle)
            if tag is None:
                self._report(None, "unknown-handle", f"a notification for client handle {item.ClientHandle}")
                continue
            dv = item.Value
            status = dv.StatusCode.value if dv.StatusCode is not None else 0
            if status & _OVERFLOW == _OVERFLOW:
                # the server's queue of this item overflowed: changes between two publishes were lost
                self._report(tag.index, "queue-overflow", "the server dropped changes (raise queue_size)")
            quality = _GOOD if status & _SEVERITY == 0 else _BAD
            variant = dv.Value
            raw = None if variant is None else variant.Value
            value = math.nan
            if raw is not None:
                if variant.VariantType in numeric and not isinstance(raw, list):
                    number = float(raw)
                    if math.isfinite(number):
                        value = tag.scaled(number)
                        if not math.isfinite(value):
                            value = math.nan
                            self._report(tag.index, "out-of-range", f"{number!r} x scale overflows")
                    else:
                        self._report(tag.index, "non-finite", f"value {number!r}")
                else:
                    what = f"a {variant.VariantType.name}{'[]' if isinstance(raw, list) else ''}"
                    self._report(tag.index, "wrong-type", what)
                if value != value:
                    quality = _BAD
            elif quality == _GOOD:
                quality = _MISSING
            # only the timestamp in use is asked of the server (_create_items); none: the arrival time
            when = None if receive else (dv.ServerTimestamp if server_time else dv.SourceTimestamp)
            try:
                ts = when.timestamp() if when is not None else now
            except (OverflowError, ValueError, OSError):  # a date outside what the platform converts
                ts = now
            tags.append(tag.index)
            values.append(value)
            qualities.append(quality)
            times.append(ts)
        self.counters.updates += len(tags)
        sink.update_many(tags, values, qualities, times)

    def _report(self, tag: int | None, reason: str, detail: str) -> None:
        self.counters.rejected += 1
        self.counters.reasons[reason] = self.counters.reasons.get(reason, 0) + 1
        key = (-1 if tag is None else tag, reason)
        if self._sink is not None:
            self._sink.rejected(tag, reason, detail)
        if key not in self._reported and len(self._reported) < 10_000:
            self._reported.add(key)
            where = f"{self._by_index[tag].describe()}: " if tag is not None else ""
            log.warning("%s: %s%s (%s; logged once per tag and reason)", self.name, where, detail, reason)


#: What each ``timestamps`` setting asks of the server with the monitored items.
_TIMESTAMPS = {
    "source": ua.TimestampsToReturn.Source,
    "server": ua.TimestampsToReturn.Server,
    "receive": ua.TimestampsToReturn.Neither,
}

#: The Objects folder (i=85), where browse paths start.
_OBJECTS = ua.NodeId.from_string(f"i={ua.ObjectIds.ObjectsFolder}")


def _escape(name: str) -> str:
    """A browse name in a relative path string: the reserved characters escaped with ``&`` (Part 4, A.2)."""
    return "".join("&" + c if c in "&/.<>:#!" else c for c in name)


def _node_id(ns: int, kind: str, ident: str) -> ua.NodeId:
    """The node id of a parsed ``ns=<ns>;<kind>=<ident>`` (asyncua's own parser, namespace index resolved)."""
    return ua.NodeId.from_string(f"ns={ns};{kind}={ident}")
