"""The cores a worker (or the embedded runner) runs, built from one configuration.

A :class:`Runtime` holds one :class:`PlantProcessor` per plant, the
:class:`RCAStage`, the metrics and the parameter-reload logic. The Faust
agents and the embedded runner both call into it, so the production path and
the in-process default execute the same code.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedrca.config import SiteConfig
from fedrca.connectors.metrics import Metrics
from fedrca.detectors.plant import PlantDetector
from fedrca.exceptions import ArtifactError, ConfigError, FedrcaError, MessageError
from fedrca.streams.processor import PlantProcessor, ProcessorOutput
from fedrca.streams.rca_stage import RCAStage
from fedrca.streams.records import SensorMessage, decode_flag, decode_sensors

__all__ = ["Runtime", "RuntimeSettings", "SensorBatch"]

log = logging.getLogger("fedrca.streams")


@dataclass(frozen=True)
class RuntimeSettings:
    """Knobs of the streaming runtime (shared by Faust workers and the embedded runner).

    Attributes
    ----------
    allowed_lateness : samples a row waits for missing plants before the RCA judges it
        without them (make it larger than the longest processor outage you want to
        ride through without losing evidence)
    batch_size : most messages an agent takes per batch
    batch_within : seconds an agent waits to fill a batch
    """

    allowed_lateness: int = 1000
    batch_size: int = 500
    batch_within: float = 0.05


@dataclass
class SensorBatch:
    """A decoded batch: valid messages and rejected ones (original bytes, error)."""

    valid: list[SensorMessage] = field(default_factory=list)
    rejected: list[tuple[bytes, MessageError]] = field(default_factory=list)


class Runtime:
    """Processors + RCA stage + metrics for one site.

    Parameters
    ----------
    config : site configuration
    detectors : fitted detectors per plant (see :meth:`Runtime.from_nominal`)
    engine : RCA engine for the central stage (see :func:`fedrca.rca.build_engine`)
    metrics : Prometheus metrics (a fresh registry by default)
    settings : runtime knobs
    """

    def __init__(
        self,
        config: SiteConfig,
        detectors: dict[str, PlantDetector],
        engine: Any,
        metrics: Metrics | None = None,
        settings: RuntimeSettings | None = None,
    ) -> None:
        if detectors and not config.resolved:
            raise ConfigError(
                "plants given by match rules must be resolved against the data's columns first "
                "(fedrca.config.resolve_plants, or Runtime.from_nominal)"
            )
        self.config = config
        self.settings = settings or RuntimeSettings()
        self.metrics = metrics or Metrics(plants=config.plant_names)
        self.processors = {name: PlantProcessor(config.site, det) for name, det in detectors.items()}
        self.sensor_counts = {p.name: len(p.sensors) for p in config.plants}
        self.engine = engine
        self.rca = RCAStage(config.site, config.plant_names, engine, self.settings.allowed_lateness)
        self._latest: dict[str, Any] = {}
        self.refused_artifacts = 0
        for name, det in detectors.items():
            self.metrics.set_parameter_version(name, det.parameter_version)

    @classmethod
    def from_nominal(
        cls,
        config: SiteConfig,
        train_path: str | Path,
        params_dir: str | Path | None = None,
        **kwargs: Any,
    ) -> Runtime:
        """Fit the detectors on nominal data, apply trained parameters, build the RCA engine.

        Exactly the site preparation of ``fedrca replay`` / ``fedrca evaluate``
        (:func:`fedrca.rca.pipeline.prepare_site`), so the live system and the offline
        commands issue the same verdicts on the same data. Plants configured by
        ``match`` rules take the nominal file's columns.
        """
        from fedrca.rca.pipeline import prepare_site

        site = prepare_site(config, train_path, params_dir=params_dir)
        runtime = cls(site.config, site.detectors, site.engine, **kwargs)
        if params_dir is not None:
            from fedrca.training.artifacts import load_site_artifacts

            for plant, artifact in load_site_artifacts(params_dir).items():
                if plant in runtime.processors:
                    runtime._record(plant, artifact)  # applied by prepare_site
        return runtime

    @classmethod
    def for_rca(cls, config: SiteConfig, params_dir: str | Path | None = None, **kwargs: Any) -> Runtime:
        """A runtime with the central RCA stage only: no plant processor, no plant data.

        The engine comes from the configuration and the training artifacts alone
        (:func:`fedrca.rca.build_engine`): the learned graph from the server artifact and
        the nominal flag rates from the flag-state counts each plant artifact carries, so
        it equals the engine :meth:`from_nominal` builds from the nominal data. Without
        ``params_dir`` the engine uses the configured graph (else the complete graph) and
        ``rca.false_alarm_rate``.
        """
        from fedrca.rca.engine import build_engine

        return cls(config, {}, build_engine(config, {}, params_dir=params_dir), **kwargs)

    def reset(self) -> None:
        """Start a new recording: processors, alignment and the RCA engine forget the stream.

        Parameters, fitted statistics and metrics are kept.
        """
        for processor in self.processors.values():
            processor.reset()
        self.rca.reset()

    # -- plant side ------------------------------------------------------------------
    def decode_sensors(self, raws: list[bytes], plant: str | None = None) -> SensorBatch:
        """Validate raw sensor messages; invalid ones are kept with their reason.

        With ``plant``, messages of any other plant are rejected (they are on the wrong topic).
        """
        counts = self.sensor_counts if plant is None else {plant: self.sensor_counts[plant]}
        valid, rejected = decode_sensors(raws, self.config.site, counts, time.time())
        for _, err in rejected:
            self.metrics.record_deadletter("plant", err.reason)
        return SensorBatch(valid, rejected)

    def process_plant(self, plant: str, messages: list[SensorMessage]) -> ProcessorOutput:
        """Run one plant's batch."""
        started = time.perf_counter()
        processor = self.processors[plant]
        out = processor.process(messages)
        self.metrics.record_messages_in("plant", plant, len(messages))
        if out.result is not None:
            self.metrics.record_detection(plant, out.result)
        self.metrics.record_latency("plant", time.perf_counter() - started)
        return out

    def resume_plant(self, plant: str, state: dict[str, Any]) -> None:
        """Restore a plant processor's saved state (after a restart or a rebalance).

        The saved state carries the parameters it was produced with; when a newer
        artifact has been offered since, the plant switches to it right away.
        """
        self.processors[plant].set_state(state)
        latest = self._latest.get(plant)
        if latest is not None and str(latest.version) != self.processors[plant].model_version:
            self._apply(plant, latest)
        self.metrics.set_parameter_version(plant, self.processors[plant].model_version)

    # -- parameters ------------------------------------------------------------------
    def offer_parameters(self, plant: str, artifact: Any) -> bool:
        """Switch a plant to a verified artifact, between two batches.

        Returns False (and changes nothing) when the plant already uses that version.
        Cores run on one thread (the worker's event loop or the embedded loop), so the
        switch can never fall inside a batch.
        """
        if plant not in self.processors:
            raise ArtifactError(f"artifact for unknown plant '{plant}'; plants are {', '.join(self.processors)}")
        self._latest[plant] = artifact
        if str(artifact.version) == self.processors[plant].model_version:
            return False
        self._apply(plant, artifact)
        return True

    def offer_published_artifact(self, raw: bytes) -> bool:
        """Verify and apply an artifact as published on ``<site>.params``.

        Raises
        ------
        FedrcaError
            (IntegrityError, ArtifactError) when the artifact is tampered with, unreadable or
            for an unknown plant; it is counted in ``fedrca_deadletters_total{stage="params"}``.
        """
        from fedrca.training.artifacts import SERVER, decode_published_artifact

        try:
            plant, artifact = decode_published_artifact(raw)
            if plant == SERVER:
                return False  # the server artifact is for the RCA's graph, not for a plant
            return self.offer_parameters(plant, artifact)
        except FedrcaError as exc:
            self.refused_artifacts += 1
            self.metrics.record_deadletter("params", "bad-artifact")
            log.error("refused parameter artifact: %s", exc)
            raise

    def _apply(self, plant: str, artifact: Any) -> None:
        from fedrca.training.artifacts import apply_artifact

        detector = self.processors[plant].detector
        apply_artifact(detector, artifact)
        self._record(plant, artifact)
        log.info("plant %s switched to parameter version %s", plant, detector.parameter_version)

    def _record(self, plant: str, artifact: Any) -> None:
        """Remember the plant's newest artifact and export its version and privacy spend."""
        self._latest[plant] = artifact
        self.metrics.set_parameter_version(plant, str(artifact.version))
        privacy = artifact.manifest.get("privacy") or {}
        spent = artifact.manifest.get("epsilon_spent")
        if spent is not None:
            budget = privacy.get("budget")
            self.metrics.set_privacy(plant, float(spent), math.inf if budget is None else float(budget))

    # -- RCA side ------------------------------------------------------------------------
    def process_flags(self, raws: list[bytes]) -> tuple[list[dict[str, Any]], list[tuple[bytes, MessageError]]]:
        """Validate flags, align, judge; returns (verdict records, rejected flags)."""
        started = time.perf_counter()
        verdicts: list[dict[str, Any]] = []
        rejected: list[tuple[bytes, MessageError]] = []
        plants = set(self.config.plant_names)
        now = time.time()
        for raw in raws:
            try:
                flag = decode_flag(raw, self.config.site, plants, now)
            except MessageError as err:
                rejected.append((raw, err))
                self.metrics.record_deadletter("rca", err.reason)
                continue
            new, status = self.rca.add(flag)
            if status == "late":
                late = MessageError(
                    "late", f"flag of plant '{flag.plant}' seq {flag.seq} arrived after its row was judged"
                )
                rejected.append((raw, late))
                self.metrics.record_deadletter("rca", "late")
            verdicts.extend(new)
        self.metrics.record_messages_in("rca", "all", len(raws) - len(rejected))
        for v in verdicts:
            self.metrics.record_verdict(v["root_cause"])
        self.metrics.record_latency("rca", time.perf_counter() - started)
        return verdicts, rejected

    def flush(self) -> list[dict[str, Any]]:
        """Judge every buffered row (end of a finite stream)."""
        verdicts = self.rca.flush()
        for v in verdicts:
            self.metrics.record_verdict(v["root_cause"])
        return verdicts
