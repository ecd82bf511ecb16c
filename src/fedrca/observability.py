"""Prometheus exporter of a fedrca worker (built on ``prometheus_client``).

One :class:`Metrics` object owns its own :class:`~prometheus_client.CollectorRegistry`,
so several workers, runtimes or tests in one process never collide with each
other or with the library's global registry. The exposition format is always
produced by ``prometheus_client`` (:func:`~prometheus_client.generate_latest`
and its HTTP server), never by hand.

Metrics (all prefixed ``fedrca_``)
-----------------------------------
=============================================  =========  ==========================
name                                           type       labels
=============================================  =========  ==========================
``fedrca_messages_in_total``                   counter    stage, plant
``fedrca_messages_out_total``                  counter    stage, topic
``fedrca_deadletters_total``                   counter    stage, reason
``fedrca_d2``                                  histogram  plant, kind (``c`` / ``a``)
``fedrca_d2_dropped_total``                    counter    plant, kind
``fedrca_flags_total``                         counter    plant, kind (zc, za, zc_pub, za_pub)
``fedrca_verdicts_total``                      counter    root_cause (``none`` = no root cause)
``fedrca_processing_latency_seconds``          histogram  stage
``fedrca_stage_latency_seconds``               histogram  stage (consume, flags, aligned, verdict)
``fedrca_consumer_lag``                        gauge      stage, topic, partition
``fedrca_parameter_version``                   gauge      plant
``fedrca_parameter_info``                      gauge      plant, version (always 1)
``fedrca_parameter_loaded_timestamp_seconds``  gauge      plant
``fedrca_rca_parameter_version``               gauge      (none)
``fedrca_rca_reloads_total``                   counter    (none)
``fedrca_privacy_epsilon_spent``               gauge      plant, mechanism (gaussian, randomized_response, all)
``fedrca_privacy_epsilon_budget``              gauge      plant
``fedrca_plant_anomalous``                     gauge      plant
``fedrca_root_cause``                          gauge      plant

The sensor metrics (docs/sensors.md): a plant worker exports how many of its tags each check
holds faulty (``fedrca_sensor_faulty_tags``, never which tag) and the episodes begun; the RCA
exports ``fedrca_sensor_fault`` (1 while it reports a sensor fault of the plant: a sensor event,
never a root cause). ``fedrca_rows_without_plant_total`` counts rows judged without a plant
because of time (docs/streams.md): ``skipped`` (the plant's row came after a later one and was
published degraded), ``late`` (the RCA released the row before the plant's flag came), ``clock``
(the plant's time disagreed with the others' beyond ``rca.max_clock_skew``);
``fedrca_clock_offset_seconds`` is the plant's time minus the median of the plants' times of its
latest row.
=======
``fedrca_root_probability``                    gauge      plant
``fedrca_root_candidate``                      gauge      plant
``fedrca_alarm_onset_rows``                    gauge      plant
``fedrca_verdict_calibrated``                  gauge      (none)
``fedrca_verdict_margin_nats``                 gauge      (none)
``fedrca_verdict_reason_info``                 gauge      plant, pair, state, table, link (always 1)
``fedrca_verdict_change_info``                 gauge      root_cause, runner_up, change (always 1)
``fedrca_sensor_faulty_tags``                  gauge      plant, check (stale, bad, stuck, flatline, range)
``fedrca_sensor_fault_episodes_total``         counter    plant, check
``fedrca_sensor_fault``                        gauge      plant
``fedrca_rows_without_plant_total``            counter    plant, reason (skipped, late, clock)
``fedrca_clock_offset_seconds``                gauge      plant
=============================================  =========  ===================
Why ``fedrca_d2`` is a custom collector
---------------------------------------
A plant processor scores every sample of a batch (hundreds to thousands of
Mahalanobis distances per batch, two kinds per plant). ``prometheus_client``'s
:class:`~prometheus_client.Histogram` only has a per-value ``observe`` that
takes a lock and walks the bucket list in Python for each value, which would
cost more than the detection itself. :class:`Metrics` therefore keeps the d2
histograms in a small collector of its own: a batch is bucketed at once with
:func:`numpy.searchsorted` + :func:`numpy.bincount` (Prometheus ``le``
semantics: a value equal to a bound falls in that bound's bucket, which
:func:`numpy.histogram`'s half-open bins would get wrong) and exposed through
the library's :class:`~prometheus_client.core.HistogramMetricFamily`. Non-finite
distances (NaN, inf) are not observed — a single inf would make ``_sum``
infinite forever and break every ``rate(_sum)/rate(_count)`` — they are counted
in ``fedrca_d2_dropped_total`` instead. The latency histogram receives one
value per batch, so it uses the library's Histogram directly.

Examples
--------
>>> import numpy as np
>>> m = Metrics()
>>> m.observe_d2("reactor", "c", np.array([0.7, 3.0, 3.0, 2500.0]))
4
>>> m.value("fedrca_d2_count", plant="reactor", kind="c")
4.0
>>> m.record_verdict("reactor", plants=["reactor", "separator"])
>>> m.value("fedrca_root_cause", plant="separator")
0.0
>>> b"fedrca_verdicts_total" in m.render()
True
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any, Final, Protocol
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import numpy as np
from numpy.typing import ArrayLike, NDArray
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, make_wsgi_app
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.metrics_core import Metric as PrometheusMetric
from prometheus_client.utils import floatToGoString

from fedrca.exceptions import ConfigError, FedrcaError

#: A probe behind ``/healthz`` or ``/readyz``: returns (ok, one-line detail).
Probe = Callable[[], tuple[bool, str]]


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    """One thread per request: a slow scrape never blocks a probe."""

    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    """No access log on stderr (probes every few seconds would drown the worker's log)."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


if TYPE_CHECKING:
    from prometheus_client.context_managers import Timer
    from prometheus_client.metrics_core import Metric

    from fedrca.contracts import Verdict

__all__ = [
    "D2_BUCKETS",
    "D2_KINDS",
    "FLAG_KINDS",
    "LATENCY_BUCKETS",
    "NO_ROOT_CAUSE",
    "STAGES",
    "STAGE_LATENCY_BUCKETS",
    "TIME_REASONS",
    "DetectionLike",
    "Metrics",
    "SiteMetrics",
    "numeric_version",
]

#: Upper bounds of the ``fedrca_d2`` buckets: 23 log-spaced bounds from 0.5 to 1000
#: (ratio ~1.41, rounded to 3 significant digits). A chi-square d2 of a nominal
#: plant with d sensors sits around d; faults drive it to hundreds or more.
D2_BUCKETS: Final[tuple[float, ...]] = tuple(float(f"{b:.3g}") for b in np.geomspace(0.5, 1000.0, 23))

#: Upper bounds of ``fedrca_processing_latency_seconds`` (0.5 ms .. 5 s, 1-2.5-5 steps).
LATENCY_BUCKETS: Final[tuple[float, ...]] = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
)

#: Upper bounds of ``fedrca_stage_latency_seconds`` (1 ms .. 10 s): fine between 5 and 200 ms,
#: where the p99 of a healthy pipeline lies (a p99 target of 100 ms needs bounds around it).
STAGE_LATENCY_BUCKETS: Final[tuple[float, ...]] = (
    0.001,
    0.002,
    0.005,
    0.0075,
    0.01,
    0.015,
    0.02,
    0.03,
    0.04,
    0.05,
    0.06,
    0.075,
    0.1,
    0.125,
    0.15,
    0.2,
    0.3,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)

#: ``stage`` label values of ``fedrca_stage_latency_seconds``, in pipeline order: ``consume`` =
#: sensor reading created -> fetched by the plant worker; ``flags`` = sensor reading created -> its
#: flag committed; ``aligned`` = published flag created -> aligned and judged by the RCA worker;
#: ``verdict`` = published flag created -> the verdicts of its batch committed.
STAGES: Final[tuple[str, ...]] = ("consume", "flags", "aligned", "verdict")

#: ``kind`` label values of ``fedrca_d2``: proprietary (``c``) and augmented (``a``) model.
D2_KINDS: Final[tuple[str, ...]] = ("c", "a")

#: ``kind`` label values of ``fedrca_flags_total``: raw and published (privatised) flags.
FLAG_KINDS: Final[tuple[str, ...]] = ("zc", "za", "zc_pub", "za_pub")

#: ``root_cause`` label of ``fedrca_verdicts_total`` for a verdict that names no plant.
NO_ROOT_CAUSE: Final[str] = "none"

#: ``reason`` label values of ``fedrca_rows_without_plant_total``.
TIME_REASONS: Final[tuple[str, ...]] = ("skipped", "late", "clock")

_TRAILING_INT = re.compile(r"(\d+)$")


class DetectionLike(Protocol):
    """What :meth:`Metrics.record_detection` reads from a detection result.

    :class:`fedrca.detectors.base.DetectionResult` satisfies it.
    """

    @property
    def d2_c(self) -> NDArray[Any]:
        """(T,) d2 of the proprietary model."""

    @property
    def d2_a(self) -> NDArray[Any]:
        """(T,) d2 of the augmented model."""

    @property
    def zc(self) -> NDArray[Any]:
        """(T,) raw proprietary flags."""

    @property
    def za(self) -> NDArray[Any]:
        """(T,) raw augmented flags."""

    @property
    def zc_pub(self) -> NDArray[Any]:
        """(T,) published proprietary flags."""

    @property
    def za_pub(self) -> NDArray[Any]:
        """(T,) published augmented flags."""


def numeric_version(version: str | float) -> float:
    """Map a parameter version to the number exported by ``fedrca_parameter_version``.

    Parameters
    ----------
    version : str or float
        A number is used as is. A string is parsed as a number if it is one,
        otherwise its trailing integer is used (``"v12"`` -> 12,
        ``"round-3"`` -> 3). A string without one (``"proprietary"``, the
        plant's own parameters, or ``"trained"``) maps to 0; the exact string
        is still exported by ``fedrca_parameter_info``.

    Returns
    -------
    float
        The numeric version.

    Examples
    --------
    >>> numeric_version(7), numeric_version("3.5"), numeric_version("v12"), numeric_version("proprietary")
    (7.0, 3.5, 12.0, 0.0)
    """
    if not isinstance(version, str):
        return float(version)
    try:
        value = float(version)
    except ValueError:
        match = _TRAILING_INT.search(version.strip())
        return float(match.group(1)) if match else 0.0
    return value if math.isfinite(value) else 0.0


class _BatchHistogram:
    """Labelled histogram that buckets whole numpy batches at once (see module docstring).

    State per label tuple: non-cumulative bucket counts (last slot = above the
    highest bound, i.e. only in ``+Inf``) and the sum of observed values.
    """

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float]) -> None:
        bounds = np.asarray(buckets, dtype=np.float64)
        if bounds.ndim != 1 or bounds.size == 0 or not np.all(np.diff(bounds) > 0) or not np.all(np.isfinite(bounds)):
            raise ConfigError("buckets must be a non-empty, strictly increasing sequence of finite bounds")
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._bounds = bounds
        self._le = [floatToGoString(b) for b in bounds] + ["+Inf"]
        self._state: dict[tuple[str, ...], tuple[NDArray[np.int64], float]] = {}
        self._lock = threading.Lock()

    def observe(self, labelvalues: tuple[str, ...], values: NDArray[np.float64]) -> None:
        """Add a 1-D batch of finite values to the series ``labelvalues``."""
        idx = np.searchsorted(self._bounds, values, side="left")  # bounds[i-1] < v <= bounds[i]
        counts = np.bincount(idx, minlength=self._bounds.size + 1).astype(np.int64)
        total = float(values.sum())
        with self._lock:
            old_counts, old_sum = self._state.get(labelvalues, (np.zeros(self._bounds.size + 1, np.int64), 0.0))
            self._state[labelvalues] = (old_counts + counts, old_sum + total)

    def _family(self) -> HistogramMetricFamily:
        return HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def describe(self) -> Iterator[Metric]:
        """Name and type only (lets the registry detect name clashes)."""
        yield self._family()

    def collect(self) -> Iterator[Metric]:
        """One histogram family with cumulative buckets, ``_count`` and ``_sum`` per series."""
        with self._lock:
            snapshot = [(labels, counts.copy(), total) for labels, (counts, total) in self._state.items()]
        family = self._family()
        for labels, counts, total in snapshot:
            cumulative = np.cumsum(counts)
            family.add_metric(list(labels), list(zip(self._le, cumulative.astype(float).tolist())), total)
        yield family


class _Exposition:
    """``/metrics`` of a registry and the ``/healthz`` / ``/readyz`` probes over HTTP (:meth:`serve`)."""

    registry: CollectorRegistry

    def __init__(self) -> None:
        self._server: Any = None
        self._server_thread: threading.Thread | None = None
        self._probes: dict[str, Probe | None] = {}

    def set_probes(self, live: Probe | None = None, ready: Probe | None = None) -> None:
        """The checks behind ``/healthz`` (liveness) and ``/readyz`` (readiness) of :meth:`serve`.

        A probe returns ``(ok, detail)``; without one the endpoint answers 200 while the
        server runs.
        """
        self._probes = {"/healthz": live, "/readyz": ready}

    def serve(self, port: int = 0, addr: str = "127.0.0.1") -> int:
        """Serve ``/metrics``, ``/healthz`` and ``/readyz`` over HTTP from a daemon thread.

        ``/metrics`` is ``prometheus_client``'s exposition of this registry; the probes
        answer 200 or 503 with a one-line reason (:meth:`set_probes`), for a
        Kubernetes liveness and readiness check on the same port.

        Parameters
        ----------
        port : int, default 0
            TCP port; 0 picks a free one.
        addr : str, default "127.0.0.1"
            Address to bind (``"0.0.0.0"`` for every interface, e.g. in a pod).

        Returns
        -------
        int
            The port actually bound.

        Raises
        ------
        FedrcaError
            If this object is already serving.
        OSError
            If the address cannot be bound.
        """
        if self._server is not None:
            raise FedrcaError(f"metrics already served on port {self.port}; call close() first")
        metrics_app = make_wsgi_app(self.registry)

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            path = environ.get("PATH_INFO", "/")
            if path in ("/healthz", "/readyz"):
                probe = self._probes.get(path)
                ok, detail = (True, "ok") if probe is None else probe()
                start_response("200 OK" if ok else "503 Service Unavailable", [("Content-Type", "text/plain")])
                return [detail.encode() + b"\n"]
            if path in ("/", "/metrics"):
                return list(metrics_app(environ, start_response))
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found: /metrics, /healthz, /readyz\n"]

        server = make_server(addr, port, app, server_class=_ThreadingServer, handler_class=_QuietHandler)
        thread = threading.Thread(target=server.serve_forever, name="fedrca-metrics", daemon=True)
        thread.start()
        self._server, self._server_thread = server, thread
        return int(server.server_port)

    @property
    def port(self) -> int | None:
        """Port served by :meth:`serve`, or None when not serving."""
        return None if self._server is None else int(self._server.server_port)

    def close(self) -> None:
        """Stop the HTTP server started by :meth:`serve` (no-op when not serving)."""
        server, thread = self._server, self._server_thread
        self._server, self._server_thread = None, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(timeout=5)


class Metrics(_Exposition):
    """The Prometheus metrics of one fedrca worker, in a registry of its own.

    Parameters
    ----------
    plants : sequence of str, optional
        Plant names known up front. ``fedrca_root_cause`` is set to 0 for every
        known plant not named by a verdict; plants seen by any plant-labelled
        method are added automatically.
    registry : CollectorRegistry, optional
        Registry to register into; a fresh one by default (never the global one).

    Attributes
    ----------
    registry : CollectorRegistry
        The registry holding every metric of this object.

    Examples
    --------
    >>> m = Metrics(plants=["reactor", "separator"])
    >>> m.record_messages_in("plant", "reactor", 3)
    >>> m.value("fedrca_messages_in_total", stage="plant", plant="reactor")
    3.0
    >>> m.set_privacy("reactor", spent=1.5, budget=4.0)
    >>> m.value("fedrca_privacy_epsilon_budget", plant="reactor")
    4.0
    """

    def __init__(self, plants: Iterable[str] = (), registry: CollectorRegistry | None = None) -> None:
        super().__init__()
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self._lock = threading.Lock()
        self._plants: dict[str, None] = {}  # insertion-ordered set
        self._versions: dict[str, str] = {}
        self._children: dict[tuple[Any, tuple[str, ...]], Any] = {}

        self.messages_in = Counter(
            "fedrca_messages_in_total",
            "Valid input messages consumed, by processing stage (plant, rca) and plant (rca stage: 'all').",
            ["stage", "plant"],
            registry=r,
        )
        self.messages_out = Counter(
            "fedrca_messages_out_total",
            "Messages produced, by processing stage and destination topic.",
            ["stage", "topic"],
            registry=r,
        )
        self.deadletters = Counter(
            "fedrca_deadletters_total",
            "Input messages rejected to the dead-letter topic, by stage and machine-friendly reason.",
            ["stage", "reason"],
            registry=r,
        )
        self._d2 = _BatchHistogram(
            "fedrca_d2",
            "Mahalanobis distance d2 of each scored sample, by plant and model kind "
            "(c = proprietary model, a = augmented model).",
            ["plant", "kind"],
            D2_BUCKETS,
        )
        r.register(self._d2)
        self._stage = _BatchHistogram(
            "fedrca_stage_latency_seconds",
            "Seconds from an input record's creation (Kafka create time) to a point of its processing, per record, "
            "by stage: consume = sensor reading -> fetched by the plant worker, flags = sensor reading -> its flag "
            "committed, aligned = published flag -> aligned and judged by the RCA, verdict = published flag -> the "
            "verdicts of its batch committed.",
            ["stage"],
            STAGE_LATENCY_BUCKETS,
        )
        r.register(self._stage)
        self.d2_dropped = Counter(
            "fedrca_d2_dropped_total",
            "Non-finite d2 values (NaN/inf) left out of fedrca_d2, by plant and model kind.",
            ["plant", "kind"],
            registry=r,
        )
        self.degraded = Counter(
            "fedrca_degraded_rows_total",
            "Rows a plant could not score (fewer usable sensors than scoring.min_sensors) and published as "
            "degraded flags, by plant (docs/missing.md).",
            ["plant"],
            registry=r,
        )
        self.flags = Counter(
            "fedrca_flags_total",
            "Raised anomaly flags, by plant and kind (zc/za = raw proprietary/augmented flags, "
            "zc_pub/za_pub = the flags as published after randomized response).",
            ["plant", "kind"],
            registry=r,
        )
        self.verdicts = Counter(
            "fedrca_verdicts_total",
            "Root-cause verdicts emitted by the central RCA stage, by named root-cause plant ('none' = no plant).",
            ["root_cause"],
            registry=r,
        )
        self.latency = Histogram(
            "fedrca_processing_latency_seconds",
            "Wall-clock time to process one batch, by stage.",
            ["stage"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.consumer_lag = Gauge(
            "fedrca_consumer_lag",
            "Messages between the committed consumer offset and the end of the partition.",
            ["stage", "topic", "partition"],
            registry=r,
        )
        self.parameter_version = Gauge(
            "fedrca_parameter_version",
            "Numeric version of the detector parameters a plant currently uses (0 = proprietary/unnumbered).",
            ["plant"],
            registry=r,
        )
        self.parameter_info = Gauge(
            "fedrca_parameter_info",
            "Always 1; the version label carries the exact parameter version string a plant currently uses.",
            ["plant", "version"],
            registry=r,
        )
        self.parameter_loaded = Gauge(
            "fedrca_parameter_loaded_timestamp_seconds",
            "Unix time at which a plant's current detector parameters were loaded (or created).",
            ["plant"],
            registry=r,
        )
        self.rca_parameter_version = Gauge(
            "fedrca_rca_parameter_version",
            "Numeric version of the server artifact (learned graph) the RCA engine is built from (0 = none).",
            registry=r,
        )
        self.rca_reloads = Counter(
            "fedrca_rca_reloads_total",
            "Times the RCA engine was rebuilt from newly published artifacts without a restart.",
            registry=r,
        )
        self.epsilon_spent = Gauge(
            "fedrca_privacy_epsilon_spent",
            "Epsilon a plant has spent: its training releases (gaussian), the flags of the privacy window "
            "(randomized_response) and both composed (all).",
            ["plant", "mechanism"],
            registry=r,
        )
        self.epsilon_budget = Gauge(
            "fedrca_privacy_epsilon_budget",
            "Differential-privacy budget (epsilon) a plant may spend in total (+Inf = unlimited).",
            ["plant"],
            registry=r,
        )
        self.baseline_version = Gauge(
            "fedrca_baseline_version",
            "The baseline a plant is scored against: 0 = as fitted, n = its n-th re-baseline (docs/drift.md).",
            ["plant"],
            registry=r,
        )
        self.baseline_age = Gauge(
            "fedrca_baseline_age_seconds",
            "Sample time since a plant's baseline in force was made (samples x dataset.sample_seconds).",
            ["plant"],
            registry=r,
        )
        self.baseline_pinned = Gauge(
            "fedrca_baseline_pinned",
            "1 while an operator holds a plant's baseline (scheduled refreshes skipped), else 0.",
            ["plant"],
            registry=r,
        )
        self.baseline_refused = Gauge(
            "fedrca_baseline_refused_streak",
            "Scheduled refreshes of a plant's baseline refused in a row (the plant alarmed, or too few nominal rows).",
            ["plant"],
            registry=r,
        )
        self.refreshes = Counter(
            "fedrca_baseline_refreshes",
            "A plant's baseline refreshes by outcome: applied, limited, refused, pinned, unpinned, rollback, forced.",
            ["plant", "outcome"],
            registry=r,
        )
        self.plant_anomalous = Gauge(
            "fedrca_plant_anomalous",
            "1 while the latest published flags of a plant say anomalous (zc_pub or za_pub), else 0.",
            ["plant"],
            registry=r,
        )
        self.root_cause = Gauge(
            "fedrca_root_cause",
            "1 for the plant named root cause by the latest verdict, 0 for every other known plant.",
            ["plant"],
            registry=r,
        )
        self.sensor_faulty_tags = Gauge(
            "fedrca_sensor_faulty_tags",
            "Tags of a plant a sensor check holds faulty (excluded from its statistics), by check "
            "(stale, bad, stuck, flatline, range); exported by the plant's own worker, never naming the tag.",
            ["plant", "check"],
            registry=r,
        )
        self.sensor_episodes = Counter(
            "fedrca_sensor_fault_episodes_total",
            "Sensor-fault episodes begun (a tag found faulty by a check), by plant and check.",
            ["plant", "check"],
            registry=r,
        )
        self.sensor_fault = Gauge(
            "fedrca_sensor_fault",
            "1 while the RCA reports a sensor fault of the plant (a sensor event, not a process root cause), else 0.",
            ["plant"],
            registry=r,
        )
        self.rows_without_plant = Counter(
            "fedrca_rows_without_plant_total",
            "Rows the RCA judged without a plant's evidence because of time, by reason: skipped (the plant's "
            "row came after a later one), late (its flag came after the row was released), clock (its time "
            "disagreed with the other plants' beyond rca.max_clock_skew).",
            ["plant", "reason"],
            registry=r,
        )
        self.clock_offset = Gauge(
            "fedrca_clock_offset_seconds",
            "A plant's time minus the median time of the plants in its latest aligned row (seconds).",
            ["plant"],
            registry=r,
        )
        self.root_probability = Gauge(
            "fedrca_root_probability",
            "P(the root is this plant) by the latest verdict (calibrated when fedrca_verdict_calibrated is 1), "
            "0 for plants outside its candidate set.",
            ["plant"],
            registry=r,
        )
        self.root_candidate = Gauge(
            "fedrca_root_candidate",
            "1 for the plants of the latest verdict's candidate set (their probabilities reach rca.coverage).",
            ["plant"],
            registry=r,
        )
        self.alarm_onset = Gauge(
            "fedrca_alarm_onset_rows",
            "Rows after the incident's first alarm at which the plant started alarming (latest verdict), -1 when "
            "it has not alarmed in the incident.",
            ["plant"],
            registry=r,
        )
        self.verdict_calibrated = Gauge(
            "fedrca_verdict_calibrated",
            "1 when the latest verdict's probabilities come from a calibration map, 0 when they are the engine's own.",
            registry=r,
        )
        self.verdict_margin = Gauge(
            "fedrca_verdict_margin_nats",
            "Log evidence of the latest verdict's root over its runner-up (nats; +Inf when nothing else is possible).",
            registry=r,
        )
        self.reason_info = Gauge(
            "fedrca_verdict_reason_info",
            "Why the latest verdict names its root, per plant: its dominant flag pair, P1's reading of it, the "
            "look-up table's outcome next to the root's pair and the path that carries the root's effect (always 1).",
            ["plant", "pair", "state", "table", "link"],
            registry=r,
        )
        self.change_info = Gauge(
            "fedrca_verdict_change_info",
            "What would change the latest verdict: its root, the runner-up and the sentence (always 1).",
            ["root_cause", "runner_up", "change"],
            registry=r,
        )
        for plant in plants:
            self._know(plant)

    # -- helpers ---------------------------------------------------------------------
    def _series(self, metric: Any, *values: str) -> Any:
        """``metric.labels(*values)`` (label values in the metric's label order), looked up once.

        prometheus-client checks and joins the labels on every ``labels`` call; a plant worker
        serving a 1 Hz plant records a dozen series per message. Only for metrics whose series
        are never removed (``fedrca_parameter_info``'s are).
        """
        key = (metric, values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child

    def _know(self, plant: str) -> None:
        """Remember a plant name; a new plant starts with ``fedrca_root_cause`` 0."""
        with self._lock:
            if plant in self._plants:
                return
            self._plants[plant] = None
        self.root_cause.labels(plant=plant).set(0)

    @property
    def plants(self) -> list[str]:
        """Plant names known so far, in the order they were first seen."""
        with self._lock:
            return list(self._plants)

    @staticmethod
    def _check_kind(kind: str, allowed: tuple[str, ...], what: str) -> None:
        if kind not in allowed:
            raise ConfigError(f"{what} kind must be one of {', '.join(allowed)}, got {kind!r}")

    # -- counters --------------------------------------------------------------------
    def record_messages_in(self, stage: str, plant: str, n: int = 1) -> None:
        """Count ``n`` consumed input messages.

        Parameters
        ----------
        stage : str
            Processing stage (``"plant"``, ``"rca"``, ...).
        plant : str
            Plant the messages came from (``"all"`` for the central stage).
        n : int, default 1
            Number of messages (>= 0).
        """
        self._series(self.messages_in, stage, plant).inc(n)

    def record_messages_out(self, stage: str, topic: str, n: int = 1) -> None:
        """Count ``n`` produced messages.

        Parameters
        ----------
        stage : str
            Processing stage that produced them.
        topic : str
            Destination topic.
        n : int, default 1
            Number of messages (>= 0).
        """
        self._series(self.messages_out, stage, topic).inc(n)

    def record_deadletter(self, stage: str, reason: str, n: int = 1) -> None:
        """Count ``n`` messages sent to the dead-letter topic.

        Parameters
        ----------
        stage : str
            Stage that rejected them.
        reason : str
            Machine-friendly reason (:attr:`fedrca.exceptions.MessageError.reason`).
        n : int, default 1
            Number of messages (>= 0).
        """
        self.deadletters.labels(stage=stage, reason=reason).inc(n)

    # -- detection -------------------------------------------------------------------
    def observe_d2(self, plant: str, kind: str, values: ArrayLike) -> int:
        """Observe a whole batch of Mahalanobis distances in ``fedrca_d2`` (vectorised).

        Parameters
        ----------
        plant : str
            Plant name.
        kind : {"c", "a"}
            ``"c"`` proprietary model, ``"a"`` augmented model.
        values : array_like of float
            The distances (any shape; flattened).

        Returns
        -------
        int
            Number of values observed. Non-finite values are not observed but
            counted in ``fedrca_d2_dropped_total``.

        Raises
        ------
        ValueError
            If ``kind`` is not ``"c"`` or ``"a"``.
        """
        self._check_kind(kind, D2_KINDS, "d2")
        self._know(plant)
        arr = np.asarray(values, dtype=np.float64).ravel()
        finite = np.isfinite(arr)
        kept = arr if finite.all() else arr[finite]
        dropped = arr.size - kept.size
        self._d2.observe((plant, kind), kept)
        if dropped:
            self._series(self.d2_dropped, plant, kind).inc(dropped)
        return int(kept.size)

    def record_flags(self, plant: str, flags: Mapping[str, ArrayLike]) -> None:
        """Count raised flags of a batch.

        Parameters
        ----------
        plant : str
            Plant name.
        flags : mapping of str to array_like of bool
            Flag arrays by kind (``zc``, ``za``, ``zc_pub``, ``za_pub``); the
            number of nonzero entries of each is added to its counter.

        Raises
        ------
        ValueError
            If a key is not a known flag kind.
        """
        for kind in flags:
            self._check_kind(kind, FLAG_KINDS, "flag")
        self._know(plant)
        for kind, arr in flags.items():
            self._series(self.flags, plant, kind).inc(int(np.count_nonzero(np.asarray(arr))))

    def set_plant_anomalous(self, plant: str, anomalous: bool) -> None:
        """Set ``fedrca_plant_anomalous`` of a plant to 1 (anomalous) or 0.

        Parameters
        ----------
        plant : str
            Plant name.
        anomalous : bool
            Whether the plant's latest published flags say anomalous.
        """
        self._know(plant)
        self._series(self.plant_anomalous, plant).set(1 if anomalous else 0)

    def record_detection(self, plant: str, result: DetectionLike) -> None:
        """Record everything a plant detector's batch result says.

        Observes ``d2_c``/``d2_a`` in ``fedrca_d2``, counts the four flag
        arrays in ``fedrca_flags_total`` and the degraded rows (a result's
        ``degraded``, when it has one) in ``fedrca_degraded_rows_total``, and sets
        ``fedrca_plant_anomalous`` from the last published row (``zc_pub or za_pub``).

        Parameters
        ----------
        plant : str
            Plant name.
        result : DetectionLike
            E.g. a :class:`fedrca.detectors.base.DetectionResult`.
        """
        self.observe_d2(plant, "c", result.d2_c)
        self.observe_d2(plant, "a", result.d2_a)
        self.record_flags(plant, {"zc": result.zc, "za": result.za, "zc_pub": result.zc_pub, "za_pub": result.za_pub})
        degraded = int(np.count_nonzero(getattr(result, "degraded", ())))
        if degraded:
            self._series(self.degraded, plant).inc(degraded)
        zc_pub, za_pub = np.asarray(result.zc_pub), np.asarray(result.za_pub)
        if zc_pub.size and za_pub.size:
            self.set_plant_anomalous(plant, bool(zc_pub.ravel()[-1]) or bool(za_pub.ravel()[-1]))

    # -- RCA -------------------------------------------------------------------------
    def record_verdict(self, root_cause: str | None, plants: Iterable[str] = ()) -> None:
        """Count a verdict and point ``fedrca_root_cause`` at its plant.

        Parameters
        ----------
        root_cause : str or None
            Plant named root cause; ``None`` names none (counted as ``"none"``,
            every plant's ``fedrca_root_cause`` goes to 0).
        plants : iterable of str, optional
            More plant names to know (set to 0 unless named).
        """
        for plant in plants:
            self._know(plant)
        if root_cause is not None:
            self._know(root_cause)
        self.verdicts.labels(root_cause=NO_ROOT_CAUSE if root_cause is None else root_cause).inc()
        for plant in self.plants:
            self.root_cause.labels(plant=plant).set(1 if plant == root_cause else 0)

    # -- sensor faults, time ---------------------------------------------------------
    def record_health(self, plant: str, faulty: Mapping[str, int], started: Mapping[str, int]) -> None:
        """Set a plant's faulty tags per check (after a batch) and count the sensor-fault episodes begun.

        Parameters
        ----------
        plant : str
            Plant name.
        faulty : mapping of str to int
            Check -> tags it holds faulty now.
        started : mapping of str to int
            Check -> episodes begun in the batch.
        """
        self._know(plant)
        for check, n in faulty.items():
            self._series(self.sensor_faulty_tags, plant, check).set(n)
        for check, n in started.items():
            if n:
                self._series(self.sensor_episodes, plant, check).inc(n)

    def set_sensor_fault(self, plant: str, faulty: bool) -> None:
        """Set ``fedrca_sensor_fault`` of a plant (1 while the RCA reports its sensor fault)."""
        self._know(plant)
        self._series(self.sensor_fault, plant).set(1 if faulty else 0)

    def record_rows_without(self, plant: str, reason: str, n: int = 1) -> None:
        """Count ``n`` rows judged without ``plant`` because of time (``skipped``, ``late`` or ``clock``)."""
        self._check_kind(reason, TIME_REASONS, "row-without-plant reason")
        self._know(plant)
        if n:
            self._series(self.rows_without_plant, plant, reason).inc(n)

    def set_clock_offset(self, plant: str, seconds: float) -> None:
        """Set ``fedrca_clock_offset_seconds`` of a plant."""
        self._know(plant)
        self._series(self.clock_offset, plant).set(seconds)

    def record_reason(self, verdict: Verdict) -> None:
        """Show why ``verdict`` names its root: probabilities, candidate set, alarm onsets, the per-plant reason and
        what would change it (a verdict without a reason, e.g. ``no_anomaly``, clears them)."""
        probabilities = dict(zip(verdict.candidates, verdict.probabilities, strict=False))
        reason = verdict.reason
        for plant in [*verdict.candidates, *([] if reason is None else [p.plant for p in reason.plants])]:
            self._know(plant)
        onsets = {} if reason is None else {p.plant: p.onset for p in reason.plants}
        for plant in self.plants:
            self.root_probability.labels(plant=plant).set(probabilities.get(plant, 0.0))
            self.root_candidate.labels(plant=plant).set(1 if plant in probabilities else 0)
            onset = onsets.get(plant)
            self.alarm_onset.labels(plant=plant).set(-1 if onset is None else onset)
        self.verdict_calibrated.set(0 if verdict.calibration is None else 1)
        self.reason_info.clear()
        self.change_info.clear()
        if reason is None:
            self.verdict_margin.set(0.0)
            return
        self.verdict_margin.set(reason.margin)
        for p in reason.plants:
            self.reason_info.labels(
                plant=p.plant, pair=f"({p.pair[0]},{p.pair[1]})", state=p.state, table=p.table, link=p.link
            ).set(1)
        self.change_info.labels(
            root_cause=verdict.root_cause or NO_ROOT_CAUSE, runner_up=reason.runner_up or "", change=reason.change
        ).set(1)

    # -- latency, lag ----------------------------------------------------------------
    def record_stage_latency(self, stage: str, records: Sequence[Any], now: float | None = None) -> None:
        """Observe, for every record of a committed batch, seconds from its creation to now (vectorised).

        ``records`` carry ``timestamp_ms`` (Kafka's create time, milliseconds since the epoch).
        """
        self.record_stage_latencies(records, {stage: time.time() if now is None else now})

    def record_stage_latencies(self, records: Sequence[Any], nows: Mapping[str, float]) -> None:
        """:meth:`record_stage_latency` of one batch at several stages (stage -> its time), the records' create
        times read once (a plant worker records two stages of every batch)."""
        if not records:
            return
        seconds = np.fromiter((r.timestamp_ms for r in records), dtype=np.float64, count=len(records)) / 1000.0
        for stage, now in nows.items():
            self._stage.observe((stage,), np.maximum(0.0, now - seconds))

    def record_latency(self, stage: str, seconds: float) -> None:
        """Observe the processing time of one batch.

        Parameters
        ----------
        stage : str
            Processing stage.
        seconds : float
            Wall-clock duration in seconds.
        """
        self._series(self.latency, stage).observe(seconds)

    def latency_timer(self, stage: str) -> Timer:
        """Context manager / decorator timing a block into ``fedrca_processing_latency_seconds``.

        Parameters
        ----------
        stage : str
            Processing stage.

        Returns
        -------
        prometheus_client.context_managers.Timer
            Use as ``with metrics.latency_timer("rca"): ...``.
        """
        return self.latency.labels(stage=stage).time()

    def set_consumer_lag(self, stage: str, topic: str, partition: int, lag: float) -> None:
        """Set the consumer lag of one topic partition.

        Parameters
        ----------
        stage : str
            Consuming stage.
        topic : str
            Topic name.
        partition : int
            Partition number.
        lag : float
            End offset minus committed offset (messages).
        """
        self.consumer_lag.labels(stage=stage, topic=topic, partition=str(partition)).set(lag)

    # -- parameters, privacy -----------------------------------------------------------
    def set_rca_parameters(self, version: str | float, reloaded: bool) -> None:
        """Record the server artifact version the RCA engine now uses (and count a hot reload)."""
        self.rca_parameter_version.set(numeric_version(version))
        if reloaded:
            self.rca_reloads.inc()

    def record_refresh(self, plant: str, outcome: str) -> None:
        """Count one refresh of a plant's baseline (or operator action) by its outcome; a scheduled refresh
        refused lengthens the plant's refused streak, one that changed or checked the baseline ends it."""
        self._know(plant)
        self._series(self.refreshes, plant, outcome).inc()
        streak = self._series(self.baseline_refused, plant)
        if outcome == "refused":
            streak.inc()
        elif outcome != "pinned":
            streak.set(0)

    def set_baseline(self, plant: str, version: int, age_seconds: float, pinned: bool) -> None:
        """Export the baseline a plant runs: its version, its age (sample time) and whether it is pinned."""
        self._know(plant)
        self._series(self.baseline_version, plant).set(version)
        self._series(self.baseline_age, plant).set(age_seconds)
        self._series(self.baseline_pinned, plant).set(1 if pinned else 0)

    def set_parameter_version(self, plant: str, version: str | float, loaded_at: float | None = None) -> None:
        """Record the parameter version a plant now uses and when it was loaded.

        Parameters
        ----------
        plant : str
            Plant name.
        version : str or float
            Parameter version; exported numerically (see :func:`numeric_version`)
            and verbatim in ``fedrca_parameter_info``.
        loaded_at : float, optional
            Unix time the parameters were loaded or created; now by default.
            Pass an artifact's creation time so that restarting a worker on
            old parameters does not look like fresh ones.
        """
        self._know(plant)
        text = str(version)
        with self._lock:
            previous = self._versions.get(plant)
            self._versions[plant] = text
        if previous is not None and previous != text:
            self.parameter_info.remove(plant, previous)
        self.parameter_info.labels(plant=plant, version=text).set(1)
        self.parameter_version.labels(plant=plant).set(numeric_version(version))
        self.parameter_loaded.labels(plant=plant).set(time.time() if loaded_at is None else loaded_at)

    def set_privacy(self, plant: str, spent: float, budget: float = math.inf, mechanism: str = "all") -> None:
        """Set the privacy budget (epsilon) a plant has spent and may spend.

        Parameters
        ----------
        plant : str
            Plant name.
        spent : float
            Epsilon spent so far.
        budget : float, default inf
            Total epsilon allowed (inf = unlimited).
        mechanism : str, default "all"
            ``gaussian`` (training), ``randomized_response`` (flags of the window) or ``all``
            (both composed: what the budget and the exhaustion alert compare).
        """
        self._check_kind(mechanism, ("gaussian", "randomized_response", "all"), "privacy mechanism")
        self._know(plant)
        self._series(self.epsilon_spent, plant, mechanism).set(spent)
        self._series(self.epsilon_budget, plant).set(budget)

    # -- exposition --------------------------------------------------------------------
    def render(self) -> bytes:
        """The registry in the Prometheus text exposition format.

        Returns
        -------
        bytes
            Output of :func:`prometheus_client.generate_latest`.
        """
        return generate_latest(self.registry)

    def value(self, name: str, **labels: str) -> float | None:
        """Current value of one sample (e.g. ``fedrca_d2_count``), or None if absent.

        Parameters
        ----------
        name : str
            Sample name, with its suffix (``_total``, ``_bucket``, ``_count``...).
        **labels : str
            The sample's exact labels.

        Returns
        -------
        float or None
        """
        return self.registry.get_sample_value(name, labels)


class SiteMetrics(_Exposition):
    """The metrics of a worker of several sites on one endpoint: each site's series with a ``site`` label.

    Every site keeps its own :class:`Metrics` (its runtimes record into it); :meth:`serve`
    exposes the union, one family per metric name, each sample labelled with its site.

    Examples
    --------
    >>> a, b = Metrics(plants=["p"]), Metrics(plants=["p"])
    >>> a.record_messages_in("plant", "p", 2)
    >>> b.record_messages_in("plant", "p", 5)
    >>> text = SiteMetrics({"north": a, "south": b}).exposition()
    >>> for line in text.splitlines():
    ...     if line.startswith("fedrca_messages_in_total"):
    ...         print(line)
    fedrca_messages_in_total{plant="p",site="north",stage="plant"} 2.0
    fedrca_messages_in_total{plant="p",site="south",stage="plant"} 5.0
    """

    def __init__(self, sites: Mapping[str, Metrics]) -> None:
        super().__init__()
        self.sites = dict(sites)
        self.registry = CollectorRegistry()
        self.registry.register(_SitesCollector(self.sites))

    def exposition(self) -> str:
        """The text ``/metrics`` serves."""
        return generate_latest(self.registry).decode()


class _SitesCollector:
    """Collects every site's registry, one family per name, each sample labelled with its site."""

    def __init__(self, sites: Mapping[str, Metrics]) -> None:
        self._sites = sites

    def collect(self) -> Iterator[PrometheusMetric]:
        merged: dict[str, PrometheusMetric] = {}
        for site, metrics in self._sites.items():
            for family in metrics.registry.collect():
                out = merged.get(family.name)
                if out is None:
                    out = merged[family.name] = PrometheusMetric(
                        family.name, family.documentation, family.type, family.unit
                    )
                out.samples += [sample._replace(labels={**sample.labels, "site": site}) for sample in family.samples]
        return iter(merged.values())
