"""Kafka adapters: connection options, topic creation, a replay sink, topic readers.

:class:`KafkaOptions` turns a site's ``kafka:`` settings and the environment into
the keyword arguments of both clients (kafka-python here, aiokafka in the workers).
The synchronous helpers (kafka-python) serve the CLI (``replay-to-kafka``,
``publish-params``, topic set-up) and the tests.
"""

from __future__ import annotations

import logging
import os
import ssl
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka import errors as kafka_errors
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.errors import KafkaError, TopicAlreadyExistsError

from fedrca.config import KafkaSettings, SiteConfig
from fedrca.connectors.names import topic_specs
from fedrca.contracts import SensorMessage
from fedrca.exceptions import ConfigError, DataError

__all__ = [
    "AT_MOST",
    "KafkaOptions",
    "KafkaSink",
    "TopicRecord",
    "bootstrap_of",
    "ensure_site_topics",
    "ensure_topics",
    "read_topic",
]

#: Environment variables that override a site's ``kafka:`` settings (docs/deploy.md).
ENV_PREFIX = "FEDRCA_KAFKA_"

log = logging.getLogger("fedrca.connectors")

#: A compacted topic's settings whose smaller value is the stricter one (a segment closes sooner, the
#: cleaner takes the topic sooner): :func:`ensure_topics` brings an existing topic whose value is larger
#: down to its spec's (``fedrca.connectors.names.COMPACTED``) and keeps a smaller one an operator set.
AT_MOST = ("segment.bytes", "segment.ms", "min.cleanable.dirty.ratio")


@dataclass(frozen=True)
class KafkaOptions:
    """Security options of every Kafka client of a worker or a tool.

    Built by :meth:`from_settings` from the ``kafka:`` section and the environment
    (``FEDRCA_KAFKA_*`` overrides; the SASL password only ever from the environment).

    Examples
    --------
    >>> KafkaOptions().kafka_python()
    {}
    >>> opts = KafkaOptions("SASL_SSL", "SCRAM-SHA-512", "p1", "secret")
    >>> sorted(opts.kafka_python())
    ['sasl_mechanism', 'sasl_plain_password', 'sasl_plain_username', 'security_protocol']
    """

    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None

    @classmethod
    def from_settings(cls, settings: KafkaSettings, env: Mapping[str, str] | None = None) -> KafkaOptions:
        """The options of ``settings`` with the environment's overrides.

        Raises
        ------
        ConfigError
            When SASL is on but no password is in the environment, or a TLS file is missing.
        """
        environ = os.environ if env is None else env

        def pick(name: str, value: str | None) -> str | None:
            return environ.get(ENV_PREFIX + name.upper()) or value

        protocol = pick("security_protocol", settings.security_protocol) or "PLAINTEXT"
        options = cls(
            security_protocol=protocol,
            sasl_mechanism=pick("sasl_mechanism", settings.sasl_mechanism),
            sasl_username=pick("sasl_username", settings.sasl_username),
            sasl_password=environ.get(settings.sasl_password_env) if protocol.startswith("SASL") else None,
            ssl_cafile=pick("ssl_cafile", settings.ssl_cafile),
            ssl_certfile=pick("ssl_certfile", settings.ssl_certfile),
            ssl_keyfile=pick("ssl_keyfile", settings.ssl_keyfile),
        )
        if protocol.startswith("SASL") and not options.sasl_password:
            raise ConfigError(
                f"SASL needs the password in the environment variable {settings.sasl_password_env} "
                "(a Secret in a pod); it is never read from the configuration file",
                key="kafka.sasl_password_env",
            )
        for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            path = getattr(options, key)
            if path is not None and not os.path.isfile(path):
                raise ConfigError(f"no such file {path}", key=f"kafka.{key}")
        return options

    @property
    def tls(self) -> bool:
        """True when the connection is encrypted."""
        return self.security_protocol in ("SSL", "SASL_SSL")

    def _common(self) -> dict[str, Any]:
        """The keyword arguments both client libraries spell the same: protocol and SASL."""
        out: dict[str, Any] = {}
        if self.security_protocol != "PLAINTEXT":
            out["security_protocol"] = self.security_protocol
        if self.security_protocol.startswith("SASL"):
            out.update(
                sasl_mechanism=self.sasl_mechanism,
                sasl_plain_username=self.sasl_username,
                sasl_plain_password=self.sasl_password,
            )
        return out

    def kafka_python(self) -> dict[str, Any]:
        """Keyword arguments for kafka-python clients (nothing for a plaintext broker)."""
        out = self._common()
        if self.tls:
            out.update({k: v for k in ("ssl_cafile", "ssl_certfile", "ssl_keyfile") if (v := getattr(self, k))})
        return out

    def aiokafka(self) -> dict[str, Any]:
        """Keyword arguments for aiokafka clients (the workers)."""
        out = self._common()
        if self.tls:
            context = ssl.create_default_context(cafile=self.ssl_cafile)
            if self.ssl_certfile:
                context.load_cert_chain(self.ssl_certfile, self.ssl_keyfile)
            out["ssl_context"] = context
        return out


def bootstrap_of(broker: str, key: str = "--broker") -> str:
    """``kafka://host:port`` (Faust style) or ``host:port`` -> ``host:port``.

    Any other scheme (``http://``, ``https://``, ``tcp://`` ...) is refused at once (a client would
    otherwise try to reach a host called ``http`` until its timeout), so are an empty host, a
    port outside 1..65535 and characters no host name has.

    Examples
    --------
    >>> bootstrap_of("kafka://127.0.0.1:9092")
    '127.0.0.1:9092'
    >>> try:
    ...     bootstrap_of("http://127.0.0.1:9092")
    ... except ConfigError as exc:
    ...     print(exc)
    --broker: 'http://127.0.0.1:9092' has the scheme 'http'; a Kafka broker is kafka://host:port or host:port
    """
    scheme, sep, rest = broker.partition("://")
    if sep and scheme != "kafka":
        raise ConfigError(
            f"'{broker}' has the scheme '{scheme}'; a Kafka broker is kafka://host:port or host:port", key=key
        )
    address = rest if sep else broker
    host, _, port = address.rpartition(":")
    host_ok = bool(host) and all(c.isalnum() or c in "-._[]:" for c in host) and len(host) <= 253
    if not host_ok or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"'{broker}' must look like kafka://host:port (port 1..65535)", key=key)
    return address


def ensure_site_topics(
    bootstrap: str,
    config: SiteConfig,
    timeout: float = 30.0,
    options: KafkaOptions | None = None,
    only: Iterable[str] | None = None,
) -> list[str]:
    """Create the site's topics if missing (idempotent); returns their names, sorted.

    A compacted topic that already exists gets fedrca's segment and cleaner settings where its
    own are laxer (:func:`ensure_topics`); nothing else of an existing topic changes. Returns
    once every topic has a leader for each partition. See :func:`fedrca.connectors.names.topic_specs` for the topics.
    ``only`` restricts it to the topics a process uses (a principal under ACLs sees and may
    create no other; on a cluster whose topics an operator such as Strimzi manages, they exist).

    Raises
    ------
    DataError
        When the broker cannot be reached or refuses a topic (the reason is named).
    """
    specs = topic_specs(config)
    if only is not None:
        wanted = set(only)
        unknown = sorted(wanted - set(specs))
        if unknown:
            raise ConfigError(f"not topics of site '{config.site}': {', '.join(unknown)}")
        specs = {name: spec for name, spec in specs.items() if name in wanted}
    return ensure_topics(bootstrap, specs, f"topics of site '{config.site}'", timeout, options)


def ensure_topics(
    bootstrap: str,
    specs: Mapping[str, Mapping[str, Any]],
    what: str,
    timeout: float = 30.0,
    options: KafkaOptions | None = None,
    client_id: str = "fedrca-admin",
) -> list[str]:
    """Create the topics of ``specs`` (name -> ``create_topics`` spec) if missing; returns their names, sorted.

    Returns once every topic has a leader for each partition; a topic created
    concurrently by another client counts as created. A topic that existed and whose spec
    sets one of :data:`AT_MOST` gets the spec's value where its own is larger (an incremental
    alter of that key alone; a topic created by an earlier fedrca kept the broker's 1 GiB,
    7-day segments, which a take-over reads whole: docs/streams.md, "Compacted topics"),
    with one warning per topic naming each change. A smaller value is kept. A broker that
    refuses the change (ACLs) gets a warning naming the topic, the keys and the command
    that sets them; a principal that may not read a topic's configs (``DescribeConfigs``)
    leaves them unchecked (an info line): neither stops the caller.

    Raises
    ------
    DataError
        When the broker cannot be reached or refuses a topic (the reason is named; ``what``
        names the topics in the message).
    """
    try:
        admin = KafkaAdminClient(
            bootstrap_servers=bootstrap,
            client_id=client_id,
            request_timeout_ms=int(timeout * 1000),
            bootstrap_timeout_ms=int(timeout * 1000),
            **(options or KafkaOptions()).kafka_python(),
        )
    except KafkaError as exc:
        raise DataError(f"cannot reach the Kafka broker at {bootstrap} ({exc}); is it running?") from None
    try:
        try:
            existing = set(admin.list_topics())
            missing = {name: dict(spec) for name, spec in specs.items() if name not in existing}
            if missing:
                result = admin.create_topics(missing, timeout_ms=int(timeout * 1000), raise_errors=False)
                for topic in result.get("topics", []):
                    code = topic.get("error_code", 0)
                    if code and code != TopicAlreadyExistsError.errno:  # created concurrently by another client
                        raise DataError(
                            f"the broker refused to create topic {topic.get('name')}: "
                            f"{topic.get('error_message') or kafka_errors.for_code(code).__name__}"
                        )
            admin.wait_for_topics(sorted(specs), timeout_ms=int(timeout * 1000))
        except KafkaError as exc:
            raise DataError(f"{what} not ready on {bootstrap}: {exc}") from None
        _tighten(admin, bootstrap, {name: spec for name, spec in specs.items() if name in existing})
    finally:
        admin.close()
    return sorted(specs)


def _stricter_or_equal(value: str | None, bound: str) -> bool:
    """True when a topic's ``value`` of an :data:`AT_MOST` key is at most ``bound`` (an unreadable one is not).

    Examples
    --------
    >>> _stricter_or_equal("1073741824", "16777216"), _stricter_or_equal("0.05", "0.1"), _stricter_or_equal(None, "1")
    (False, True, False)
    """
    try:
        return value is not None and float(value) <= float(bound)
    except ValueError:
        return False


def _tighten(admin: KafkaAdminClient, bootstrap: str, specs: Mapping[str, Mapping[str, Any]]) -> None:
    """Bring the :data:`AT_MOST` settings of the existing topics of ``specs`` down to their specs' (see
    :func:`ensure_topics`); warns, never raises, when the broker refuses.

    ``tests/connectors/test_topic_configs.py`` runs it on the real broker, with and without ACLs.
    """
    wanted = {
        name: bounds
        for name, spec in specs.items()
        if (bounds := {key: str(v) for key, v in (spec.get("configs") or {}).items() if key in AT_MOST})
    }
    if not wanted:
        return
    fix = (
        f"kafka-configs.sh --bootstrap-server {bootstrap} --alter --entity-type topics --entity-name {{topic}} "
        "--add-config {configs} as a principal allowed AlterConfigs on it (on Strimzi: in its KafkaTopic, "
        "tools/sync-k8s.py); a take-over reads a compacted topic whole (docs/streams.md, 'Compacted topics')"
    )
    try:
        # config_filter "all": a key the topic leaves at the broker's default is listed too
        described = admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, name, list(bounds)) for name, bounds in wanted.items()],
            config_filter="all",
        ).get("topic", {})
    except KafkaError as exc:
        log.warning("the segment settings of %s not checked: reading their configs failed (%s)", ", ".join(wanted), exc)
        return
    changes: dict[str, dict[str, tuple[str, str]]] = {}
    unread = []
    for name, bounds in wanted.items():
        current = described.get(name, {})
        if not all(key in current for key in bounds):
            # the broker lists no config of a topic the principal may not DescribeConfigs
            unread.append(name)
            continue
        laxer = {
            key: (str(current[key].get("value")), bound)
            for key, bound in bounds.items()
            if not _stricter_or_equal(current[key].get("value"), bound)
        }
        if laxer:
            changes[name] = laxer
    if unread:
        log.info(
            "the configs of %s are not readable here (DescribeConfigs): their segment settings not checked",
            ", ".join(unread),
        )
    if not changes:
        return
    resources = [
        ConfigResource(ConfigResourceType.TOPIC, name, {key: new for key, (_, new) in laxer.items()})
        for name, laxer in changes.items()
    ]
    try:
        # incremental: only these keys change (a plain AlterConfigs resets every key it omits)
        outcome = admin.alter_configs(resources, raise_on_unknown=False, incremental=True).get("topic", {})
    except KafkaError as exc:
        outcome = {name: str(exc) for name in changes}
    for name, laxer in changes.items():
        said = ", ".join(f"{key} {old} -> {new}" for key, (old, new) in laxer.items())
        result = outcome.get(name, "no answer")
        if result == "OK":
            log.warning("topic %s: %s (fedrca's compacted-topic settings; a smaller value is kept)", name, said)
        else:
            configs = ",".join(f"{key}={new}" for key, (_, new) in laxer.items())
            kept = ", ".join(f"{key}={old}" for key, (old, _) in laxer.items())
            log.warning(
                "topic %s keeps %s: the broker refused to change it (%s); set it with %s",
                name,
                kept,
                result,
                fix.format(topic=name, configs=configs),
            )


class KafkaSink:
    """Replay sink: one message per plant and row to ``<site>.sensors.<plant>``, keyed by plant.

    Messages are encoded as compact JSON (NaN/inf refused). Back-pressure: at most
    ``max_pending_bytes`` of messages may be unacknowledged; beyond that ``send`` blocks
    until the broker has acknowledged the oldest half (kafka-python 3 has no bounded
    producer buffer of its own), failing with :class:`DataError` after ``max_block_ms``
    without progress. Every delivery is checked: a failed one raises :class:`DataError`
    at the next ``send`` / :meth:`flush` / :meth:`close`, so nothing is lost silently.

    Parameters
    ----------
    bootstrap : ``host:port`` of a broker
    config : the site (topic names per plant)
    max_block_ms : longest a ``send`` waits for metadata or for acknowledgements
    max_pending_bytes : unacknowledged bytes (keys + values) before ``send`` blocks
    linger_ms, batch_size : producer batching (kafka-python settings)
    options : security options (default: the site's ``kafka:`` settings and the environment)
    """

    def __init__(
        self,
        bootstrap: str,
        config: SiteConfig,
        max_block_ms: int = 60_000,
        max_pending_bytes: int = 8 * 1024 * 1024,
        linger_ms: int = 5,
        batch_size: int = 64 * 1024,
        options: KafkaOptions | None = None,
    ) -> None:
        if max_pending_bytes < 1:
            raise ConfigError(f"max_pending_bytes must be positive, got {max_pending_bytes}")
        self.config = config
        self.max_block_ms = max_block_ms
        self.max_pending_bytes = max_pending_bytes
        self._topics = {p: config.topic("sensors", plant=p) for p in config.plant_names}
        self._keys = {p: p.encode() for p in self._topics}
        try:
            self._producer = KafkaProducer(
                bootstrap_servers=bootstrap,
                acks="all",
                linger_ms=linger_ms,
                batch_size=batch_size,
                max_block_ms=max_block_ms,
                bootstrap_timeout_ms=max_block_ms,
                **(options or KafkaOptions.from_settings(config.kafka)).kafka_python(),
            )
        except KafkaError as exc:
            raise DataError(f"cannot reach the Kafka broker at {bootstrap} ({exc}); is it running?") from None
        self._pending: deque[tuple[Any, int, str]] = deque()
        self.pending_bytes = 0
        self.sent = 0
        self.acked = 0
        self.waits = 0

    def _settle(self) -> None:
        future, size, topic = self._pending.popleft()
        self.pending_bytes -= size
        if future.failed():
            raise DataError(
                f"a message to {topic} was not delivered ({future.exception!r}); {self.acked} of {self.sent} "
                "messages are acknowledged; check the broker and the topics, then replay again"
            )
        self.acked += 1

    def _wait_for(self, target_bytes: int) -> None:
        """Block until at most ``target_bytes`` are unacknowledged."""
        while self._pending and self.pending_bytes > target_bytes:
            future = self._pending[0][0]
            if not future.is_done:
                try:
                    future.get(timeout=self.max_block_ms / 1000)
                except KafkaError:
                    if not future.is_done:
                        raise DataError(
                            f"the broker acknowledged nothing for {self.max_block_ms / 1000:.0f} s "
                            f"({len(self._pending)} messages pending); is it still running?"
                        ) from None
            self._settle()

    def _queue(self, topic: str, key: bytes | None, value: bytes, headers: list[tuple[str, bytes]] | None) -> None:
        try:
            future = self._producer.send(topic, key=key, value=value, headers=headers)
        except KafkaError as exc:
            raise DataError(f"could not send to {topic}: {exc}; is the broker running and the topic created?") from None
        self._pending.append((future, len(value) + len(key or b""), topic))
        self.pending_bytes += self._pending[-1][1]
        self.sent += 1
        # settle what is already acknowledged (cheap), then block while over the limit
        while self._pending and self._pending[0][0].is_done:
            self._settle()
        if self.pending_bytes > self.max_pending_bytes:
            self.waits += 1
            self._wait_for(self.max_pending_bytes // 2)

    def send(self, message: SensorMessage) -> None:
        """Queue one sensors message (blocks under back-pressure).

        Raises
        ------
        DataError
            For a plant the site does not have, values that are not finite, or a failed delivery.
        """
        topic = self._topics.get(message.plant)
        if topic is None:
            raise DataError(f"unknown plant '{message.plant}'; plants are {', '.join(self._topics)}")
        self._queue(topic, self._keys[message.plant], message.encode(), None)

    def send_raw(
        self, topic: str, key: bytes | None, value: bytes, headers: list[tuple[str, bytes]] | None = None
    ) -> None:
        """Queue raw bytes to any topic (malformed-input tests and tools)."""
        self._queue(topic, key, value, headers)

    def flush(self, timeout: float | None = None) -> None:
        """Wait until everything queued is acknowledged.

        Raises
        ------
        DataError
            When a message was not delivered or the flush timed out.
        """
        try:
            self._producer.flush(timeout=timeout)
        except KafkaError as exc:
            raise DataError(f"flush did not complete: {exc}; {len(self._pending)} messages pending") from None
        self._wait_for(0)

    def close(self) -> None:
        """Flush (raising on undelivered messages) and close."""
        try:
            self.flush()
        finally:
            self._producer.close()

    def __enter__(self) -> KafkaSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class TopicRecord:
    """One record read back from a topic."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: dict[str, bytes]


def read_topic(
    bootstrap: str,
    topic: str,
    timeout: float = 10.0,
    committed_only: bool = True,
    options: KafkaOptions | None = None,
) -> Iterator[TopicRecord]:
    """Every record currently in ``topic``: all partitions, from the beginning to the end offsets
    taken when reading starts (records produced later are not waited for).

    Yields records partition by partition as they arrive (offset order within a partition).
    A missing topic yields nothing.

    Raises
    ------
    DataError
        When the end offsets are not reached within ``timeout`` seconds (no silent partial read).
    """
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        group_id=None,
        isolation_level="read_committed" if committed_only else "read_uncommitted",
        **(options or KafkaOptions()).kafka_python(),
    )
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        if not tps:
            return
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        end = consumer.end_offsets(tps)
        deadline = time.monotonic() + timeout
        remaining = {tp for tp in tps if consumer.position(tp) < end[tp]}
        while remaining:
            if time.monotonic() > deadline:
                where = ", ".join(f"{tp.partition}: {consumer.position(tp)}/{end[tp]}" for tp in sorted(remaining))
                raise DataError(f"reading {topic} timed out after {timeout} s (partition: offset/end {where})")
            for tp, records in consumer.poll(timeout_ms=200).items():
                for r in records:
                    if r.offset < end[tp]:
                        headers = {k: v for k, v in (r.headers or [])}
                        yield TopicRecord(r.partition, r.offset, r.key, r.value, headers)
            remaining = {tp for tp in remaining if consumer.position(tp) < end[tp]}
    finally:
        consumer.close()
