"""The cores a worker (or the embedded runner) runs: :class:`PlantRuntime` and :class:`RCARuntime`.

A :class:`PlantRuntime` holds one :class:`~fedrca.streams.processor.PlantProcessor`
per plant, its metrics and the parameter hot-reload; an :class:`RCARuntime` holds
the :class:`~fedrca.streams.rca_stage.RCAStage` over the RCA engine and its
metrics. The Kafka workers run one of them per role; the embedded runner runs
both (:class:`SiteRuntime`). Both paths execute the same code.

The runtimes take fitted cores; building them from a configuration and data is
the shell's (:func:`fedrca.application.site.site_runtime`).

Privacy ledger: a :class:`PlantRuntime` keeps each plant's spent epsilon (the training
releases of the artifact it runs composed with the flags it published over the last
``privacy.window`` samples, :class:`~fedrca.privacy.ledger.FlagWindow`) and exports it
after every batch as ``fedrca_privacy_epsilon_spent{plant, mechanism}`` next to
``privacy.budget``. At exhaustion the plant warns (``privacy.on_exhausted: warn``) or
publishes withheld flags (``stop``); the :class:`RCARuntime` then marks the verdicts it
reaches without that plant ``privacy_withheld``.
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from threadpoolctl import threadpool_limits

from fedrca.config import SiteConfig, parameters_hash
from fedrca.contracts import (
    PRIVACY_WITHHELD,
    SENSOR_FAULT,
    SERVER,
    BaselineCommand,
    DeadLetterReason,
    DeadLetterStage,
    ParameterArtifact,
    SensorMessage,
    Verdict,
    check_binding,
    decode_flag_columns,
    decode_flags,
    decode_sensors,
)
from fedrca.detectors.base import Detector
from fedrca.detectors.health import CHECKS, HealthResult, SensorHealth
from fedrca.detectors.parameters import apply_artifact
from fedrca.detectors.plant import PlantDetector
from fedrca.drift import BaselineKeeper, RefreshReport
from fedrca.exceptions import ArtifactError, ConfigError, DataError, MessageError, ModelError
from fedrca.observability import Metrics
from fedrca.privacy.accounting import gaussian_mu
from fedrca.privacy.ledger import FlagWindow
from fedrca.rca.engine import BLOCK_ROWS, RCAEngine, build_engine
from fedrca.rca.graph import InterdependencyGraph
from fedrca.streams.aligner import AlignedRow
from fedrca.streams.processor import PlantProcessor, ProcessorOutput
from fedrca.streams.rca_stage import RCAStage

__all__ = ["PlantRuntime", "RCARuntime", "RuntimeSettings", "SensorBatch", "SiteRuntime"]

log = logging.getLogger("fedrca.streams")
#: every refresh of a plant's baseline, one line (a refused one is a warning)
refresh_log = logging.getLogger("fedrca.drift")

#: BLAS threads while a worker streams (:func:`streaming_threads`)
STREAMING_BLAS_THREADS = 1
#: Rows of one batch whose new sensor faults a plant worker logs (the metrics count every one).
MAX_LOGGED_FAULTS = 5


def _c_malloc_trim() -> Any:
    """glibc's ``malloc_trim`` (None where the C library has none: musl, macOS)."""
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


_MALLOC_TRIM = _c_malloc_trim()


def release_free_heap() -> bool:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim(0)``); False where there is none.

    Called after a batch larger than one slice (:meth:`RCARuntime.process_flags`), in this one place: what
    such a batch decoded, aligned and judged is freed by then, but glibc keeps the freed pages, so the
    worker's RSS would stay at the batch's high-water mark, a step at every catch-up burst (the hour's soak,
    docs/streams.md, "Soak"). A steady batch is never that large and is not trimmed; a call walks the heap's
    free chunks once (a fraction of a millisecond for a worker's heap).
    """
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True


def streaming_threads() -> threadpool_limits:
    """One BLAS thread for the batches of a streaming worker (a context manager; ``Worker.run``).

    At a 1 Hz plant's batch size of 1 every product of the detector is a matrix-vector product,
    bound by memory, not arithmetic: a second BLAS thread does not make it faster but spins while
    it waits for work, and that spinning is CPU the worker pays per message (a 1,000-sensor plant's
    handler about 3x its single-thread CPU; ``bench/bench_sizing.py`` measures the handler under
    this limit). The worker's event loop is one thread anyway; start-up fits run before it, with
    every thread.
    """
    return threadpool_limits(limits=STREAMING_BLAS_THREADS, user_api="blas")


#: How an operator replaces a refused artifact on the params topic.
_REPUBLISH = "publish parameters trained under this configuration: fedrca publish-params --config CONFIG --params DIR"


@dataclass(frozen=True)
class RuntimeSettings:
    """Knobs of the streaming runtime (shared by the Kafka workers and the embedded runner).

    Attributes
    ----------
    allowed_lateness : samples a row waits for missing plants before the RCA judges it
        without them (make it larger than the longest processor outage you want to
        ride through without losing evidence)
    batch_size : most messages a worker takes per batch
    batch_within : seconds a worker waits to fill a batch
    """

    allowed_lateness: int = 1000
    batch_size: int = 500
    batch_within: float = 0.05


@dataclass
class SensorBatch:
    """A decoded batch: valid messages and rejected ones (original bytes, error)."""

    valid: list[SensorMessage] = field(default_factory=list)
    rejected: list[tuple[bytes, MessageError]] = field(default_factory=list)


class PlantRuntime:
    """The plant side of a site: processors, metrics, parameter hot-reload.

    Parameters
    ----------
    config : site configuration (plants resolved to explicit columns)
    detectors : fitted detectors per plant (a worker may hold any subset of the site's plants)
    metrics : Prometheus metrics (a fresh registry by default)
    settings : runtime knobs
    keepers : each plant's re-baselining loop (``drift.enabled``; :func:`fedrca.application.site.build_keepers`)
    """

    def __init__(
        self,
        config: SiteConfig,
        detectors: Mapping[str, Detector],
        metrics: Metrics | None = None,
        settings: RuntimeSettings | None = None,
        health: Mapping[str, SensorHealth] | None = None,
        keepers: Mapping[str, BaselineKeeper] | None = None,
    ) -> None:
        if not config.resolved:
            raise ConfigError(
                "plants given by match rules must be resolved against the data's columns first "
                "(fedrca.config.resolve_plants, or fedrca.application.site.prepare_site)"
            )
        unknown = sorted(set(detectors) - set(config.plant_names))
        if unknown:
            raise ConfigError(f"detectors of unknown plant(s) {unknown}; plants are {', '.join(config.plant_names)}")
        self.config = config
        self._parameters_hash = parameters_hash(config)
        self.settings = settings or RuntimeSettings()
        self.metrics = metrics or Metrics(plants=config.plant_names)
        privacy = config.privacy
        checks = dict(health or {})
        keepers = dict(keepers or {})
        self.processors = {
            name: PlantProcessor(
                config.site,
                det,
                FlagWindow(name, det.epsilon, privacy.window, privacy.delta, privacy.budget),
                privacy.on_exhausted,
                checks.get(name),
                keepers.get(name),
            )
            for name, det in detectors.items()
        }
        self.sensor_counts = {p.name: len(p.sensors) for p in config.plants}
        self._latest: dict[str, ParameterArtifact] = {}
        self._exhausted: set[str] = set()
        self.commands: dict[str, BaselineCommand] = {}  # each plant's newest operator command (control topic)
        self.refused_artifacts = 0
        for name, det in detectors.items():
            self.metrics.set_parameter_version(name, det.parameter_version)
            self._export_privacy(name)
            self._export_baseline(name)

    def _export_privacy(self, plant: str) -> None:
        """Export the plant's spent epsilon (training, flags of the window, composed) and its budget."""
        window = self.processors[plant].window
        if window is None:
            return
        for mechanism in ("gaussian", "randomized_response", "all"):
            self.metrics.set_privacy(plant, window.epsilon(mechanism), window.budget, mechanism=mechanism)

    def _export_baseline(self, plant: str, refreshes: list[RefreshReport] | None = None) -> None:
        """Export the plant's baseline (version, age in samples, pin) and count its refreshes by outcome."""
        keeper = self.processors[plant].keeper
        if keeper is None:
            return
        for report in refreshes or []:
            self.metrics.record_refresh(plant, report.outcome)
            refresh_log.log(logging.WARNING if report.outcome == "refused" else logging.INFO, "%s", report.line())
        processor = self.processors[plant]
        # age: the samples scored since the baseline in force took effect, in sample time
        age = max(0, processor.last_seq + 1 - keeper.baseline.seq) * self.config.dataset.sample_seconds
        self.metrics.set_baseline(plant, keeper.version, age, keeper.pinned)

    def offer_command(self, command: BaselineCommand) -> None:
        """Keep an operator's command for its plant's next batch (:meth:`apply_command`)."""
        self.commands[command.plant] = command

    def apply_command(self, plant: str) -> RefreshReport | None:
        """Apply the plant's newest operator command, once (its id is kept in the plant's state, committed with
        the batch it took effect before); None when there is nothing new."""
        command = self.commands.get(plant)
        processor = self.processors[plant]
        keeper = processor.keeper
        if command is None or keeper is None or command.id == keeper.last_command:
            return None
        at = processor.last_seq + 1
        report: RefreshReport | None = None
        try:
            if command.action == "pin":
                report = keeper.pin(at)
            elif command.action == "unpin":
                report = keeper.unpin(at)
            elif command.action == "rollback":
                assert command.version is not None
                report = keeper.rollback(command.version, at)
            else:
                report = keeper.refresh(at, force=True)
        except ModelError as exc:
            log.error("plant %s: command %s %s refused: %s", plant, command.action, command.id, exc)
        keeper.last_command = command.id
        self._export_baseline(plant, [] if report is None else [report])
        return report

    def reset(self) -> None:
        """Start a new recording: the processors forget the stream (parameters and metrics are kept)."""
        for processor in self.processors.values():
            processor.reset()

    def decode_sensors(self, raws: list[bytes], plant: str | None = None) -> SensorBatch:
        """Validate raw sensor messages; invalid ones are kept with their reason.

        With ``plant``, messages of any other plant are rejected (they are on the wrong topic).
        """
        counts = self.sensor_counts if plant is None else {plant: self.sensor_counts[plant]}
        valid, rejected = decode_sensors(raws, self.config.site, counts, time.time())
        for _, err in rejected:
            self.metrics.record_deadletter(DeadLetterStage.PLANT, err.reason)
        return SensorBatch(valid, rejected)

    def reject(self, batch: SensorBatch, raw: bytes, error: MessageError) -> None:
        """Add a message refused outside decoding (e.g. a wrong key) to the batch's dead letters."""
        batch.rejected.append((raw, error))
        self.metrics.record_deadletter(DeadLetterStage.PLANT, error.reason)

    def process_plant(
        self, plant: str, messages: list[SensorMessage], batch: SensorBatch | None = None
    ) -> ProcessorOutput:
        """Run one plant's batch; a late message (its row was published degraded when a later row came
        first) is added to ``batch``'s dead letters with reason ``late``."""
        started = time.perf_counter()
        processor = self.processors[plant]
        out = processor.process(messages)
        if processor.keeper is not None and out.result is not None:
            self._export_baseline(plant, out.refreshes)
        self.metrics.record_messages_in("plant", plant, len(messages))
        if out.health is not None:
            self._record_health(processor, out.health)
        if out.skipped:
            self.metrics.record_rows_without(plant, "skipped", out.skipped)
        for msg in out.late:
            late = MessageError(
                DeadLetterReason.LATE,
                f"sensor row of plant '{plant}' seq {msg.seq} came after a later row; its row was judged without "
                "this plant (published degraded)",
            )
            if batch is not None:
                self.reject(batch, msg.encode(), late)
            else:
                self.metrics.record_deadletter(DeadLetterStage.PLANT, late.reason)
        if out.result is not None:
            self.metrics.record_detection(plant, out.result)
            window = processor.window
            if window is not None and window.active:  # flags without randomized response spend nothing
                self._export_privacy(plant)
        if out.overrun or out.withheld:
            if plant not in self._exhausted:
                action = "publishing anyway" if out.overrun else "withholding its flags"
                log.warning(
                    "plant %s: privacy budget %g exhausted over the last %d samples; %s (privacy.on_exhausted)",
                    plant,
                    self.config.privacy.budget,
                    self.config.privacy.window,
                    action,
                )
            self._exhausted.add(plant)
        elif out.result is not None:
            self._exhausted.discard(plant)
        self.metrics.record_latency("plant", time.perf_counter() - started)
        return out

    def _record_health(self, processor: PlantProcessor, checked: HealthResult) -> None:
        """Export a batch's sensor checks; log each new sensor fault with its tag (the plant's own log: the
        tag never leaves the plant)."""
        plant = processor.plant
        if not len(checked):
            return
        # the gauges hold the batch's last row (its tags per check); episodes are counted only when one began
        faulty = checked.checks[:, -1].sum(axis=1).tolist()
        started = checked.started.tolist() if len(checked.onsets) else [0] * len(CHECKS)
        self.metrics.record_health(
            plant, dict(zip(CHECKS, faulty, strict=True)), dict(zip(CHECKS, started, strict=True))
        )
        health = processor.health
        if health is not None and len(checked.onsets):
            begun = health.describe(checked)
            for _, tag, check in begun[:MAX_LOGGED_FAULTS]:
                log.warning("plant %s: sensor fault: %s %s; excluded until it recovers", plant, tag, check)
            if len(begun) > MAX_LOGGED_FAULTS:
                log.warning("plant %s: %d more sensor faults in this batch", plant, len(begun) - MAX_LOGGED_FAULTS)

    def start_plant(self, plant: str, state: dict[str, Any] | None) -> None:
        """Continue a plant from a saved state (after a restart or a rebalance), or from the start.

        The saved state names the parameters it was produced with (version and digest, not the
        matrices: :meth:`PlantDetector.get_state <fedrca.detectors.plant.PlantDetector.get_state>`);
        the plant continues with the parameters this worker holds, which are the same ones when
        it fitted the same nominal data or applied the same published artifact. When a newer
        artifact has been offered since, the plant switches to it right away; parameters that
        differ otherwise (another nominal file, an artifact no longer published) are logged.
        """
        processor = self.processors[plant]
        if state is None:
            processor.reset()
        else:
            try:
                processor.set_state(state)
            except DataError as exc:  # the history topic lost the baseline the state names
                log.error("%s", exc)
                processor.set_state({**state, "drift": None})
        latest = self._latest.get(plant)
        if latest is not None and str(latest.version) != processor.training_version:
            self._apply(plant, latest)
        self.metrics.set_parameter_version(plant, processor.training_version)
        self._export_baseline(plant)
        detector = processor.detector
        saved = getattr(detector, "restored_parameters", None) if state is not None else None
        if saved is not None and isinstance(detector, PlantDetector):
            version, digest = saved
            if version != detector.parameter_version:
                log.info("plant %s: its saved state is of parameters %s; continuing with %s", plant, version,
                         detector.parameter_version)  # fmt: skip
            elif digest is not None and digest != detector.parameter_digest:
                log.warning(
                    "plant %s: its saved state is of parameters %s with digest %s, this worker's %s are %s "
                    "(fitted on other nominal data?); continuing with this worker's",
                    plant,
                    version,
                    digest,
                    version,
                    detector.parameter_digest,
                )

    def offer_parameters(self, plant: str, artifact: ParameterArtifact) -> bool:
        """Switch a plant to a verified artifact, between two batches.

        Returns False (and changes nothing) when the plant already uses that version.
        Cores run on one thread (the worker's event loop or the embedded loop), so the
        switch can never fall inside a batch.
        """
        if plant not in self.processors:
            raise ArtifactError(f"artifact for unknown plant '{plant}'; plants are {', '.join(self.processors)}")
        check_binding(artifact, self._parameters_hash, self.config.plant(plant).data_schema(), fix=_REPUBLISH)
        self._latest[plant] = artifact
        if str(artifact.version) == self.processors[plant].training_version:
            return False
        self._apply(plant, artifact)
        return True

    def record_artifact(self, plant: str, artifact: ParameterArtifact) -> None:
        """Remember a plant's newest artifact (already applied) and export its version and privacy spend."""
        self._latest[plant] = artifact
        self.metrics.set_parameter_version(plant, str(artifact.version))
        spent = artifact.manifest.get("epsilon_spent")
        window = self.processors[plant].window if plant in self.processors else None
        if spent is not None and window is not None:
            # the training's releases as the ledger keeps them (mu^2, {eps: count}): they compose with the
            # flags exactly; an artifact without them had Gaussian releases only, recovered from its epsilon
            # the plant's whole life: every training run's releases (an artifact of a refresh round says
            # them all in its lifetime), else this run's
            privacy = artifact.manifest.get("lifetime") or artifact.manifest.get("privacy") or {}
            delta = float(artifact.manifest.get("delta") or self.config.privacy.delta)
            eps = float(spent)
            if "mu2" in privacy:
                window.training_mu2 = float(privacy["mu2"])
                window.training_pure = {float(e): int(k) for e, k in (privacy.get("pure") or {}).items()}
            else:
                window.training_mu2 = 0.0 if eps <= 0.0 else gaussian_mu(eps, delta) ** 2
            self._export_privacy(plant)

    def _apply(self, plant: str, artifact: ParameterArtifact) -> None:
        detector = self.processors[plant].detector
        if not isinstance(detector, PlantDetector):
            raise ArtifactError(f"plant '{plant}' runs the fleet detector, which takes no training artifact")
        apply_artifact(detector, artifact)
        self.record_artifact(plant, artifact)
        log.info("plant %s switched to parameter version %s", plant, detector.parameter_version)


class RCARuntime:
    """The central RCA side of a site: flags in, verdicts out, with metrics. Never sees plant data.

    Parameters
    ----------
    config : site configuration
    engine : the RCA engine (:func:`fedrca.rca.build_engine`)
    metrics : Prometheus metrics (a fresh registry by default)
    settings : runtime knobs (its ``allowed_lateness`` bounds how long a row waits for plants)
    artifacts : the artifacts ``engine`` was built from (plant -> artifact)
    graph : a fixed graph (read from ``rca.graph.path``) kept when a new artifact rebuilds the engine
    """

    def __init__(
        self,
        config: SiteConfig,
        engine: RCAEngine,
        metrics: Metrics | None = None,
        settings: RuntimeSettings | None = None,
        artifacts: Mapping[str, ParameterArtifact] | None = None,
        graph: InterdependencyGraph | None = None,
    ) -> None:
        self.config = config
        self._graph = graph
        self.settings = settings or RuntimeSettings()
        self.metrics = metrics or Metrics(plants=config.plant_names)
        self.engine = engine
        self.stage = RCAStage(
            config.site,
            config.plant_names,
            engine,
            self.settings.allowed_lateness,
            sensor_epsilon=config.privacy.flag_epsilon,
            max_clock_skew=config.rca.max_clock_skew_for(config.dataset.sample_seconds),
        )
        self._plants = set(config.plant_names)
        self._artifacts: dict[str, ParameterArtifact] = dict(artifacts or {})
        self.reloads = 0
        self.withheld: set[str] = set()  # plants whose latest flag was withheld (privacy budget exhausted)
        #: align a batch of plain flags at once when the aligner can (False: always flag by flag, the reference
        #: the batch path is checked against)
        self.batch_align = True
        #: most flags of a batch decoded and aligned at once (:meth:`process_flags`): as many as an engine block
        #: has rows (each decoded message is a few hundred bytes of the interpreter's small objects until the slice
        #: is aligned: a slice of every plant's rows of a block held 1,280 of them at the TEP site)
        self.chunk_flags = BLOCK_ROWS
        self._export_versions()

    @property
    def artifacts(self) -> dict[str, ParameterArtifact]:
        """The artifacts the engine is built from (plant -> artifact; the server's under ``SERVER``)."""
        return dict(self._artifacts)

    def offer_artifact(self, name: str, artifact: ParameterArtifact) -> bool:
        """Rebuild the engine from a newly published artifact (the learned graph, a plant's nominal
        flag-state counts), between two batches, keeping the evidence gathered so far.

        Returns False (and changes nothing) when that version is already in use.
        """
        current = self._artifacts.get(name)
        if current is not None and current.version == artifact.version:
            return False
        check_binding(artifact, parameters_hash(self.config), fix=_REPUBLISH)
        artifacts = {**self._artifacts, name: artifact}
        engine = build_engine(
            self.config,
            artifacts=artifacts,
            settings=self.engine.settings,
            graph=self._graph,
            calibration=self.engine.calibrations,  # the map of the (new) training rows: build_engine picks it
        )
        engine.set_state(self.engine.get_state())  # same plants: the stored rows are re-scored by the new model
        self._artifacts = artifacts
        self.engine = engine
        self.stage.engine = engine
        self.reloads += 1
        self._export_versions(reloaded=True)
        log.info("RCA engine rebuilt from %s %s (graph: %s)", name, artifact.version, engine.graph.source)
        return True

    def _export_versions(self, reloaded: bool = False) -> None:
        server = self._artifacts.get(SERVER)
        self.metrics.set_rca_parameters("none" if server is None else str(server.version), reloaded)

    def reset(self) -> None:
        """Start a new recording: alignment and engine evidence are forgotten."""
        self.stage.reset()

    def process_flags(self, raws: list[bytes]) -> tuple[list[Verdict], list[tuple[bytes, MessageError]]]:
        """Validate flags, align, judge; returns (verdicts, rejected flags).

        The flags are aligned one by one, in order; the rows they complete are judged at
        once (engine blocks: :meth:`RCAStage.judge`). A process verdict reached at a
        row released while a plant withheld its flags is marked ``privacy_withheld``, as if
        the rows were judged one by one.

        A batch is decoded and aligned in slices of :attr:`chunk_flags` flags, one after the other,
        and the rows they release are judged as soon as they fill an engine block
        (:data:`~fedrca.rca.engine.BLOCK_ROWS` rows), the rest at the end: what the batch holds at
        once is one slice's decoded messages and less than two blocks of rows, however many flags
        it holds (a catch-up burst; ``tests/streams/test_rca_memory.py``,
        ``tests/streams/test_rca_catchup.py``), while a large batch of plants in step is still
        judged in whole blocks. The verdicts, dead letters and state are those of the batch taken
        whole (``tests/streams/test_rca_memory.py::test_a_batch_in_slices_gives_what_it_gives_whole``);
        the metrics count the batch once. After a batch of more than one slice the C heap's free pages
        are given back (:func:`release_free_heap`).
        """
        started = time.perf_counter()
        now = time.time()
        step = self.chunk_flags
        verdicts: list[Verdict] = []
        rejected: list[tuple[bytes, MessageError]] = []
        rows: list[AlignedRow] = []  # released, not judged yet
        marked: set[int] = set()  # seqs of the rows released while a plant withheld
        for lo in range(0, len(raws), step):
            rejected += self._align_slice(raws[lo : lo + step], now, rows, marked)
            if len(rows) >= BLOCK_ROWS:  # whole blocks judged now; the rest waits for the next slices' rows
                whole = len(rows) - len(rows) % BLOCK_ROWS
                verdicts += self._judge(rows[:whole], marked)
                del rows[:whole]
        verdicts += self._judge(rows, marked)
        if len(raws) > step:
            # the slices' memory is free again: hand it back, or RSS keeps the burst's high-water mark
            release_free_heap()
        self.metrics.record_messages_in("rca", "all", len(raws) - len(rejected))
        self._record(verdicts)
        self.metrics.record_latency("rca", time.perf_counter() - started)
        return verdicts, rejected

    def _judge(self, rows: list[AlignedRow], marked: set[int]) -> list[Verdict]:
        """Judge released rows (:meth:`RCAStage.judge`); a process verdict at a row of ``marked`` says
        ``privacy_withheld``."""
        if not rows:
            return []
        issued = self.stage.judge(rows)
        if not marked:
            return issued
        return [
            dataclasses.replace(v, outcome=PRIVACY_WITHHELD) if v.seq in marked and not v.is_sensor_event else v
            for v in issued
        ]

    def _align_slice(
        self, raws: list[bytes], now: float, rows: list[AlignedRow], marked: set[int]
    ) -> list[tuple[bytes, MessageError]]:
        """Align one slice of a batch: the rows it releases appended to ``rows`` (those released while a plant
        withheld its flags: their seqs into ``marked``); returns its dead letters (counted in the metrics)."""
        rejected: list[tuple[bytes, MessageError]] = []
        severity = self.engine.severity
        levels = None if severity is None else severity.n_levels
        stage = self.stage
        # the common batch: plain valid flags that the aligner takes whole (no dead letter, none withheld);
        # anything else, flag by flag below (tests/streams/test_rca_batch.py: the same verdicts, state and
        # dead letters either way)
        released = self._align_columns(raws, now, levels) if self.batch_align else None
        if released is not None:
            rows += released
            return rejected
        for raw, flag in zip(raws, decode_flags(raws, self.config.site, self._plants, now), strict=True):
            if isinstance(flag, MessageError):
                rejected.append((raw, flag))
                self.metrics.record_deadletter(DeadLetterStage.RCA, flag.reason)
                continue
            if levels is not None and flag.level is not None and flag.level >= levels:
                error = MessageError(
                    DeadLetterReason.BAD_FLAG, f"'level' {flag.level} is beyond the site's {levels} severity levels"
                )
                rejected.append((raw, error))
                self.metrics.record_deadletter(DeadLetterStage.RCA, error.reason)
                continue
            if flag.withheld:
                self.withheld.add(flag.plant)
            else:
                self.withheld.discard(flag.plant)
            released, status = stage.align(flag)
            if status == "late":
                late = MessageError(
                    DeadLetterReason.LATE,
                    f"flag of plant '{flag.plant}' seq {flag.seq} arrived after its row was judged",
                )
                rejected.append((raw, late))
                self.metrics.record_deadletter(DeadLetterStage.RCA, DeadLetterReason.LATE)
            if released:
                rows += released
                if self.withheld:
                    marked.update(row.seq for row in released)
        return rejected

    def _align_columns(self, raws: list[bytes], now: float, levels: int | None) -> list[AlignedRow] | None:
        """The rows a batch of plain flags releases, aligned at once; None when the batch must go flag by
        flag: a message not plain and valid (:func:`decode_flag_columns`), a level beyond the site's
        severity levels, a plant withholding its flags, or a flag the aligner cannot take at once
        (:meth:`FlagAligner.add_columns`: late, duplicate, ...)."""
        if self.withheld:
            return None
        columns = decode_flag_columns(raws, self.config.site, self._plants, now)
        if columns is None:
            return None
        # each distinct level once (a batch holds a few)
        if levels is not None and any(x is not None and x >= levels for x in set(columns.level)):
            return None
        return self.stage.align_columns(columns)

    def _record(self, verdicts: list[Verdict]) -> None:
        """Export the verdicts (a sensor event sets its plant's ``fedrca_sensor_fault``, never the root cause),
        the latest process verdict's reason, and the rows judged without a plant because of time since the
        last call."""
        latest = None
        for v in verdicts:
            if v.is_sensor_event:
                for plant in v.sensor_plants:
                    self.metrics.set_sensor_fault(plant, v.outcome == SENSOR_FAULT)
            else:
                self.metrics.record_verdict(v.root_cause)
                latest = v
        if latest is not None:  # why the latest process verdict says what it says; a sensor event has no reason
            self.metrics.record_reason(latest)
        for (plant, reason), n in self.stage.without.items():
            self.metrics.record_rows_without(plant, reason, n=n)
        self.stage.without.clear()
        for plant, offset in self.stage.offsets.items():
            self.metrics.set_clock_offset(plant, offset)

    def _mark_withheld(self, verdicts: list[Verdict]) -> list[Verdict]:
        """Process verdicts reached while a plant withholds its flags say so (outcome ``privacy_withheld``)."""
        if not self.withheld:
            return verdicts
        return [v if v.is_sensor_event else dataclasses.replace(v, outcome=PRIVACY_WITHHELD) for v in verdicts]

    def flush(self) -> list[Verdict]:
        """Judge every buffered row (end of a finite stream)."""
        verdicts = self._mark_withheld(self.stage.flush())
        self._record(verdicts)
        return verdicts


@dataclass
class SiteRuntime:
    """Both sides of a site in one process (the embedded default); they share one metrics registry."""

    plants: PlantRuntime
    rca: RCARuntime

    @property
    def config(self) -> SiteConfig:
        """The site configuration."""
        return self.plants.config

    @property
    def metrics(self) -> Metrics:
        """The shared metrics."""
        return self.plants.metrics

    def reset(self) -> None:
        """Start a new recording on both sides."""
        self.plants.reset()
        self.rca.reset()
