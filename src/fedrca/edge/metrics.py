"""The Prometheus metrics of ``fedrca edge`` (per plant and tag class; per source for connections).

=============================================  =========  ===============================
name                                           type       labels
=============================================  =========  ===============================
``fedrca_edge_updates_total``                  counter    plant, class
``fedrca_edge_rejected_total``                 counter    source, reason
``fedrca_edge_tags``                           gauge      plant, class, quality (in the last row:
                                                          good, bad, stale, missing)
``fedrca_edge_late_updates_total``             counter    plant
``fedrca_edge_reconnects_total``               counter    source
``fedrca_edge_conflated_total``                counter    source (updates superseded unread in a flood)
``fedrca_edge_source_connected``               gauge      source (1 connected, 0 not)
``fedrca_edge_rows_published_total``           counter    plant (acknowledged by the broker)
``fedrca_edge_rows_missed_total``              counter    plant, reason (restart, buffer-full,
                                                          clock-jump)
``fedrca_edge_buffered_rows``                  gauge      plant (waiting or in flight)
``fedrca_edge_last_seq``                       gauge      plant (last row closed)
=============================================  =========  ===============================

Alert rules on them: ``config/prometheus/alerts.yml`` (group ``fedrca-edge``), tested
with ``promtool`` (``tests/deploy``).
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter, Gauge

from fedrca.observability import Metrics

__all__ = ["QUALITY_NAMES", "EdgeMetrics"]

#: Label value of each quality code in ``fedrca_edge_tags``.
QUALITY_NAMES = ("good", "bad", "stale", "missing")


class EdgeMetrics(Metrics):
    """The edge's series in a :class:`~fedrca.observability.Metrics` registry (served by its ``serve``)."""

    def __init__(self, plants: Iterable[str] = ()) -> None:
        super().__init__(plants=plants)
        r = self.registry
        self.edge_updates = Counter(
            "fedrca_edge_updates_total", "Tag updates received, by plant and tag class.", ["plant", "class"],
            registry=r,
        )  # fmt: skip
        self.edge_rejected = Counter(
            "fedrca_edge_rejected_total",
            "Protocol input refused (wrong type, non-finite, unknown node, malformed payload ...), by source, reason.",
            ["source", "reason"],
            registry=r,
        )
        self.edge_tags = Gauge(
            "fedrca_edge_tags",
            "Tags of the last row by quality (good, bad, stale, missing), by plant and tag class.",
            ["plant", "class", "quality"],
            registry=r,
        )
        self.edge_late = Counter(
            "fedrca_edge_late_updates_total", "Updates that arrived after their row was closed.", ["plant"], registry=r
        )
        self.edge_reconnects = Counter(
            "fedrca_edge_reconnects_total", "Sessions created again after a loss, by source.", ["source"], registry=r
        )
        self.edge_conflated = Counter(
            "fedrca_edge_conflated_total",
            "Updates superseded by a newer one of the same tag before they were read (a flood conflated), by source.",
            ["source"],
            registry=r,
        )
        self.edge_connected = Gauge(
            "fedrca_edge_source_connected", "1 while the source's session is up, by source.", ["source"], registry=r
        )
        self.edge_rows = Counter(
            "fedrca_edge_rows_published_total", "Rows the broker acknowledged, by plant.", ["plant"], registry=r
        )
        self.edge_missed = Counter(
            "fedrca_edge_rows_missed_total",
            "Rows never published: edge down (restart), outage buffer full (buffer-full), clock jump, by plant.",
            ["plant", "reason"],
            registry=r,
        )
        self.edge_buffered = Gauge(
            "fedrca_edge_buffered_rows", "Rows waiting for the broker or in flight, by plant.", ["plant"], registry=r
        )
        self.edge_last_seq = Gauge(
            "fedrca_edge_last_seq", "Seq of the last row closed, by plant.", ["plant"], registry=r
        )
