"""The Faust application: one per site, built from its configuration.

Layout follows the Faust examples: ``app`` (this module: the App and its
settings), ``topics`` (topic declarations), ``agents`` (thin agents that decode,
call the pure cores through :class:`fedrca.streams.runtime.Runtime`, emit).

Start a worker with ``fedrca run --config config/tep.yaml --broker kafka://host:port
--train data/tep/d00.dat``; run several with the same config to share the
partitions (same consumer group ``fedrca-<site>``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faust

from fedrca.config import SiteConfig

__all__ = ["StreamSettings", "create_app"]


@dataclass(frozen=True)
class StreamSettings:
    """How a worker connects and runs.

    Attributes
    ----------
    broker : ``kafka://host:port``
    partitions : partitions of the per-plant sensor topics (flags/verdicts use 1 so the
        RCA sees a total order)
    data_dir : Faust's local state directory
    web_port : Faust's own web server port (0 = disabled)
    metrics_port : Prometheus exporter port (None = no exporter, 0 = any free port)
    guarantee : Faust processing guarantee
    """

    broker: str
    partitions: int = 2
    data_dir: str = ".fedrca-faust"
    web_port: int = 0
    metrics_port: int | None = None
    guarantee: str = "at_least_once"
    worker_name: str = "worker"


def create_app(config: SiteConfig, settings: StreamSettings) -> faust.App:
    """A configured (agent-less) Faust App for the site; see :func:`fedrca.streams.agents.install`."""
    web: dict[str, Any] = {"web_enabled": False}
    if settings.web_port:
        web = {"web_enabled": True, "web_port": settings.web_port, "web_bind": "127.0.0.1"}
    return faust.App(
        f"fedrca-{config.site}",
        broker=settings.broker,
        store="memory://",
        datadir=str(Path(settings.data_dir) / settings.worker_name),
        processing_guarantee=settings.guarantee,
        topic_partitions=settings.partitions,
        topic_replication_factor=1,
        consumer_auto_offset_reset="earliest",
        value_serializer="raw",
        key_serializer="raw",
        broker_commit_every=1000,
        broker_commit_interval=0.5,
        table_cleanup_interval=3600.0,
        producer_linger=0.0,
        **web,
    )
