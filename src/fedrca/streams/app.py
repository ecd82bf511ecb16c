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
from dataclasses import dataclass
from pathlib import Path

import faust

from fedrca.config import SiteConfig
from fedrca.exceptions import ConfigError
from fedrca.streams.compat import FETCH_MAX_WAIT, FedrcaApp

__all__ = ["FETCH_MAX_WAIT", "ROLES", "StreamSettings", "app_id", "create_app", "use_uvloop"]

log = logging.getLogger("fedrca.streams")

#: Roles a worker can take: plant processors, the central RCA, parameter reload.
ROLES = ("plants", "rca", "params")


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
    app = FedrcaApp(
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
