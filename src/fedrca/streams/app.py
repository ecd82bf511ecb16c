"""The Faust application of a site, one per role group, built from its configuration.

Layout follows the Faust examples: ``app`` (this module: the App and its
settings), ``records`` (the typed message records and their validation),
``topics`` (topic declarations), ``agents`` (thin agents that decode, call the
pure cores through :class:`fedrca.streams.runtime.Runtime`, emit).

Each role group is its own Faust app and therefore its own consumer group:
``fedrca-<site>-plants`` reads only the per-plant sensor topics,
``fedrca-<site>-rca`` reads only the flags topic. So the central RCA worker's
consumer group never subscribes to raw sensor data (the privacy contract), and
plant workers scale independently of the single RCA worker. Run several plant
workers with the same configuration to share the sensor partitions::

    fedrca run --config config/tep.yaml --broker kafka://host:9092 --train data/tep/d00.dat --roles plants,params
    fedrca run --config config/tep.yaml --broker kafka://host:9092 --train data/tep/d00.dat --roles rca
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faust
from faust.transport.drivers import aiokafka as faust_aiokafka

from fedrca.config import SiteConfig
from fedrca.exceptions import ConfigError

__all__ = ["FETCH_MAX_WAIT", "ROLES", "StreamSettings", "app_id", "create_app", "use_uvloop"]

log = logging.getLogger("fedrca.streams")

#: Roles a worker can take: plant processors, the central RCA, parameter reload.
ROLES = ("plants", "rca", "params")

#: Longest time (seconds) the broker may hold a worker's fetch request open while none of
#: the fetched partitions has new data (Kafka ``fetch.max.wait.ms``; Faust fixes it at 1.5 s).
FETCH_MAX_WAIT = 0.05


@dataclass(frozen=True)
class StreamSettings:
    """How a worker connects and runs.

    Attributes
    ----------
    broker : ``kafka://host:port``
    partitions : partitions of the per-plant sensor topics (flags and verdicts have one,
        so the RCA sees a total order)
    data_dir : Faust's local state directory (one sub-directory per worker name)
    worker_name : distinguishes the local state of several workers on one machine
    web_port : Faust's own web server port (0 = disabled)
    session_timeout : seconds after which the broker declares a silent worker dead and
        hands its partitions to the others (Kafka consumer ``session.timeout.ms``)
    fetch_max_wait : seconds the broker may hold a fetch without data (see :data:`FETCH_MAX_WAIT`)
    """

    broker: str
    partitions: int = 2
    data_dir: str = ".fedrca-faust"
    worker_name: str = "worker"
    web_port: int = 0
    session_timeout: float = 10.0
    fetch_max_wait: float = FETCH_MAX_WAIT


class _ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """Faust's aiokafka consumer thread with a configurable ``fetch_max_wait_ms``.

    Why it matters: aiokafka keeps one fetch per broker in flight and leaves out the
    partitions whose fetched records the worker has not taken yet. When an agent is busy
    for more than aiokafka's prefetch backoff (0.1 s), the next fetch covers only idle
    partitions (a sensor partition without a plant, Faust's leader topic), and the broker
    holds it for the whole max wait while the busy partitions' new messages wait behind
    it. With Faust's 1.5 s that added up to 1.5 s to every message of a loaded worker
    (measured with ``bench/bench_streams.py``); the short wait bounds the stall.
    """

    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        wait = getattr(self.app, "fedrca_fetch_max_wait", FETCH_MAX_WAIT)
        consumer._fetch_max_wait_ms = int(wait * 1000)  # read by the fetcher when the consumer starts
        return consumer

    async def seek_to_committed(self) -> Mapping[Any, int]:
        return await self.call_thread(self._seek_to_committed)

    async def _seek_to_committed(self) -> Mapping[Any, int]:
        """Seek every stream partition to its committed offset, including a partition without one.

        After a rebalance Faust drops the events it had buffered but not processed and seeks
        back to the committed offsets; aiokafka seeks only to committed offsets above 0, so a
        partition of a new group kept the position its fetcher had reached and the dropped
        events were never delivered again (seen as a lost first flag once fetches got fast).
        Such a partition goes back to its beginning (``consumer_auto_offset_reset="earliest"``);
        changelog partitions are left to Faust's table recovery.
        """
        consumer = self._ensure_consumer()
        committed = await consumer.seek_to_committed()
        if self.app.conf.consumer_auto_offset_reset == "earliest":
            changelogs = self.app.tables.changelog_topics
            fresh = [tp for tp, offset in committed.items() if not offset and tp.topic not in changelogs]
            if fresh:
                for tp in fresh:
                    position = await consumer.position(tp)
                    if position:
                        log.info("rewinding %s (no committed offset) from %s to its beginning", tp, position)
                await consumer.seek_to_beginning(*fresh)
        return dict(committed)


class _Consumer(faust_aiokafka.Consumer):
    """Faust's aiokafka consumer that never commits an event no agent processed.

    While a rebalance is in progress (flow control suspended, or the event fetched in an
    older generation) Faust's streams skip the events they receive and *acknowledge* them
    "so the lag does not grow"; their offsets then get committed and the events are never
    delivered again: a lost sensor reading, hence a lost flag, seen in the kill -9 test
    once fetches got fast. Such acknowledgements are refused here: the event is let go
    (nothing waits for it) but its offset stays uncommitted, so it is delivered again
    after the rebalance and the cores drop it if it was processed after all.
    """

    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)

    def ack(self, message: Any) -> bool:
        app = self.app
        if message.generation_id != app.consumer_generation_id or not app.flow_control.is_active():
            message.acked = True
            self._unacked_messages.discard(message)
            return False
        return bool(super().ack(message))


class _Transport(faust_aiokafka.Transport):
    Consumer = _Consumer


class _App(faust.App):
    """faust.App whose Kafka transport uses :class:`_ConsumerThread`."""

    fedrca_fetch_max_wait: float = FETCH_MAX_WAIT

    def _new_transport(self) -> Any:
        if self.conf.broker_consumer[0].scheme in ("kafka", "aiokafka"):
            return _Transport(self.conf.broker_consumer, self)
        return super()._new_transport()


def app_id(site: str, roles: tuple[str, ...]) -> str:
    """Faust app id (= consumer group) of a role group.

    Examples
    --------
    >>> app_id("tep", ("plants", "params")), app_id("tep", ("rca",))
    ('fedrca-tep-plants', 'fedrca-tep-rca')
    """
    unknown = [r for r in roles if r not in ROLES]
    if unknown or not roles:
        raise ConfigError(f"unknown role(s) {unknown or roles}; roles are {', '.join(ROLES)} (comma separated)")
    consuming = [r for r in ("plants", "rca") if r in roles]
    return f"fedrca-{site}-{'-'.join(consuming) or 'params'}"


def use_uvloop() -> bool:
    """Run the worker's event loops on uvloop when it is installed; True when it is.

    Most of a worker's time per message is Faust's asyncio machinery (tasks, futures,
    callbacks per event); uvloop runs it about a quarter faster (``bench/bench_streams.py``).
    Call it before the Faust worker starts (it sets the event-loop policy).
    """
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    import mode.loop

    mode.loop.use("uvloop")
    return True


def create_app(config: SiteConfig, settings: StreamSettings, roles: tuple[str, ...]) -> faust.App:
    """A configured, agent-less Faust App; :func:`fedrca.streams.agents.install` adds the agents."""
    datadir = Path(settings.data_dir) / settings.worker_name
    datadir.mkdir(parents=True, exist_ok=True)
    app = _App(
        app_id(config.site, roles),
        broker=settings.broker,
        store="memory://",
        datadir=str(datadir),
        # at-least-once delivery; the cores make redelivery harmless (seq and verdict-id dedup)
        processing_guarantee="at_least_once",
        topic_partitions=settings.partitions,
        topic_replication_factor=1,
        consumer_auto_offset_reset="earliest",
        value_serializer="raw",
        key_serializer="raw",
        broker_commit_every=10_000,
        broker_commit_interval=0.5,
        broker_session_timeout=settings.session_timeout,
        broker_heartbeat_interval=max(0.5, settings.session_timeout / 10),
        broker_rebalance_timeout=max(20.0, 2 * settings.session_timeout),
        stream_recovery_delay=0.5,
        producer_linger=0.0,
        web_enabled=bool(settings.web_port),
        web_port=settings.web_port or 6066,
        web_bind="127.0.0.1",
    )
    app.fedrca_fetch_max_wait = settings.fetch_max_wait
    return app
