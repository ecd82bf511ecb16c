"""A site assembled from its configuration: fitted detectors, trained parameters, RCA engine; and the
in-process pipeline of ``fedrca replay`` / ``fedrca evaluate`` (detectors -> published flags -> RCA).

:func:`prepare_site` is the one way every command (and the live workers) builds a
site, so the offline commands and the streaming runtime issue the same verdicts on
the same data. :func:`run_pipeline` runs the same pure cores as the streaming
runtime, in one process and in batch: every plant's
:class:`~fedrca.detectors.plant.PlantDetector` processes its own sensors (raw
values never leave it), publishes its flags through randomized response, and the
RCA engine sees only the published flags (and the graph).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from fedrca.application.fitted import FittedStore
from fedrca.application.params import load_params
from fedrca.config import PlantConfig, RCASettings, SiteConfig, resolve_plants
from fedrca.contracts import ParameterArtifact, Verdict
from fedrca.datasets.loader import PlantData, check_nominal_plant, check_warmup, load_frame, plant_frames
from fedrca.detectors.base import DetectionResult, Detector
from fedrca.detectors.factory import build_detector as build_plant_detector
from fedrca.detectors.factory import build_plugin_detector, fit_detectors, fit_health, frame_segments
from fedrca.detectors.health import HealthResult, SensorHealth
from fedrca.detectors.parameters import apply_artifact
from fedrca.detectors.plant import PlantDetector
from fedrca.drift import BaselineKeeper, KeeperSettings
from fedrca.exceptions import ArtifactError, ConfigError, DataError
from fedrca.observability import Metrics
from fedrca.rca.calibration import CalibrationMaps
from fedrca.rca.engine import RCAEngine, build_engine
from fedrca.rca.graph import InterdependencyGraph
from fedrca.rca.sensors import SensorEvents
from fedrca.streams.runtime import PlantRuntime, RCARuntime, RuntimeSettings, SiteRuntime

if TYPE_CHECKING:
    # a fleet plant's modules (scipy's linear algebra, the shared dictionary) are imported by the plants that
    # have one: a worker without fleet plants starts without them
    from fedrca.fleet.calibration import Calibration
    from fedrca.fleet.collabdict import FleetModel

__all__ = [
    "PipelineRun",
    "Site",
    "apply_params",
    "build_detector",
    "build_detectors",
    "build_keepers",
    "configured_calibration_map",
    "configured_graph",
    "load_calibration_map",
    "load_graph_file",
    "plant_runtime",
    "prepare_site",
    "rca_runtime",
    "run_detectors",
    "run_pipeline",
    "site_runtime",
    "without_privacy",
]

BoolArray = NDArray[np.bool_]
#: The configurations (and calibration maps) fedrca ships: config/ of the checkout, package data of a wheel.
BUNDLED_CONFIG = Path(__file__).resolve().parents[1] / "_bundled" / "config"


def without_privacy(config: SiteConfig) -> SiteConfig:
    """The same configuration with flags (and severity levels) published as they are (epsilon = inf)."""
    privacy = config.privacy.model_copy(update={"flag_epsilon": math.inf, "level_epsilon": math.inf})
    return config.model_copy(update={"privacy": privacy})


def apply_params(
    detectors: Mapping[str, Detector], artifacts: Mapping[str, ParameterArtifact], params_dir: str | Path
) -> str:
    """Apply every plant's training artifact (loaded from ``params_dir``) to its detector; returns the version.

    Fleet detectors (``detector.kind: fleet``) have no augmentation and so no training artifact.
    """
    trainable = {name: det for name, det in detectors.items() if isinstance(det, PlantDetector)}
    missing = [name for name in trainable if name not in artifacts]
    if missing:
        raise ArtifactError(f"{params_dir}: no artifact for plant(s) {', '.join(missing)}; run fedrca train first")
    for name, det in trainable.items():
        apply_artifact(det, artifacts[name])
    versions = sorted({det.parameter_version for det in trainable.values()})
    return ",".join(versions)


@dataclass
class Site:
    """Fitted detectors of a site, their nominal flags, the RCA engine and the plants' sensor checks; with
    ``drift.enabled`` each plant detector's re-baselining loop (:class:`~fedrca.drift.BaselineKeeper`,
    docs/drift.md)."""

    config: SiteConfig
    detectors: dict[str, Detector]
    nominal_flags: dict[str, BoolArray]
    engine: RCAEngine
    params_version: str
    health: dict[str, SensorHealth] = field(default_factory=dict)
    keepers: dict[str, BaselineKeeper] = field(default_factory=dict)

    @property
    def graph(self) -> InterdependencyGraph:
        """The engine's interdependency graph."""
        return self.engine.graph


def build_keepers(config: SiteConfig, detectors: Mapping[str, Detector]) -> dict[str, BaselineKeeper]:
    """The re-baselining loop of every plant detector when ``drift.enabled`` (none otherwise).

    A fleet plant (``detector.kind: fleet``) has no loop: its calibration comes from the fleet run.
    """
    if not config.drift.enabled:
        return {}
    settings = KeeperSettings.from_config(config.drift, config.dataset.sample_seconds)
    return {name: BaselineKeeper(det, settings) for name, det in detectors.items() if isinstance(det, PlantDetector)}


def _as_plant_data(
    config: SiteConfig, data: pd.DataFrame | Mapping[str, PlantData], source: str
) -> dict[str, PlantData]:
    if isinstance(data, pd.DataFrame):
        return plant_frames(config, data, source)
    return dict(data)


def load_graph_file(path: str | Path, plants: Sequence[str]) -> InterdependencyGraph:
    """Read a graph JSON (``fedrca graph --out``, ``fedrca report``'s graph.json) in the order of ``plants``."""
    file = Path(path)
    if not file.is_file():
        raise ArtifactError(
            f"{file}: no such graph file (rca.graph.path); write one with fedrca graph --config ... --out {file}"
        )
    try:
        return InterdependencyGraph.from_json(file.read_text(encoding="utf-8")).reordered(plants)
    except (DataError, ConfigError, UnicodeDecodeError) as exc:
        raise ArtifactError(f"{file}: {exc}") from None


def load_calibration_map(path: str | Path, plants: Sequence[str]) -> CalibrationMaps:
    """Read a calibration map, or maps keyed by training size (``python bench/bench_faults.py --calibration PATH``
    writes them), for ``plants``."""
    file = Path(path)
    if not file.is_file():
        raise ArtifactError(
            f"{file}: no such calibration map (rca.calibration.path, relative to the configuration's folder); "
            "fit one with python bench/bench_faults.py --calibration PATH, or remove the key (uncalibrated verdicts)"
        )
    try:
        calibration = CalibrationMaps.from_json(file.read_text(encoding="utf-8"))
        calibration.check(plants)
    except (ArtifactError, UnicodeDecodeError) as exc:
        raise ArtifactError(f"{file}: {exc}") from None
    return calibration


def configured_calibration_map(config: SiteConfig, settings: RCASettings | None = None) -> CalibrationMaps | None:
    """The calibration map(s) the configuration names (``rca.calibration.path``), else None: the verdicts then
    carry the engine's own, uncalibrated posterior (the engine takes the map of its plants' training rows:
    :func:`fedrca.rca.engine.select_calibration`).

    A relative path is looked up beside the configuration file, then among the configurations fedrca ships
    (``fedrca/_bundled/config``: the TEP map is found for a copy of config/tep.yaml anywhere)."""
    path = (settings or config.rca).calibration.path
    if path is None:
        return None
    file = Path(path)
    if not file.is_absolute():
        places = [Path(config.source).parent / file] if config.source is not None else [file]
        places.append(BUNDLED_CONFIG / file)
        file = next((p for p in places if p.is_file()), places[0])
    return load_calibration_map(file, config.plant_names)


def configured_graph(config: SiteConfig, settings: RCASettings | None = None) -> InterdependencyGraph | None:
    """The graph file the configuration names (``rca.graph.source: file``), else None (the engine resolves it)."""
    options = (settings or config.rca).graph
    if options.source != "file" or options.path is None:
        return None
    return load_graph_file(options.path, config.plant_names)


def prepare_site(
    config: SiteConfig,
    train: str | Path | pd.DataFrame | Mapping[str, PlantData],
    *,
    params_dir: str | Path | None = None,
    no_privacy: bool = False,
    settings: RCASettings | None = None,
    graph: InterdependencyGraph | None = None,
) -> Site:
    """Fit the detectors on nominal data, apply trained parameters, estimate nominal flag rates, build the engine.

    The nominal flag rates come from each detector's own (true) flags on the
    nominal data; only these per-plant rates reach the RCA side.
    """
    if no_privacy:
        config = without_privacy(config)
    source = str(train) if isinstance(train, str | Path) else "nominal data"
    frame = load_frame(config, train) if isinstance(train, str | Path) else train
    if isinstance(frame, pd.DataFrame):
        # plants given by match rules take the nominal file's columns
        config = resolve_plants(config, [str(c) for c in frame.columns])
    nominal = _as_plant_data(config, frame, source)
    # a nominal frame made of several recordings says so in attrs["segments"]: each is a fresh stream
    segments = frame_segments(frame)
    detectors = build_detectors(config, nominal, source=source, segments=segments)
    health = fit_health(config, nominal, segments=segments)
    version = "proprietary"
    artifacts = None
    if params_dir is not None:
        artifacts = load_params(params_dir, config)
        version = apply_params(detectors, artifacts, params_dir)
    nominal_flags = {}
    for name, det in detectors.items():
        parts, start = [], 0
        for n in segments or [len(nominal[name].Y)]:
            U = nominal[name].U
            with det.detached():
                parts.append(
                    det.step_batch(nominal[name].Y[start : start + n], None if U is None else U[start : start + n])
                )
            start += n
        # a degraded row (too few sensors, docs/missing.md) is no flag state
        nominal_flags[name] = np.column_stack(
            [np.concatenate([r.zc[~r.degraded] for r in parts]), np.concatenate([r.za[~r.degraded] for r in parts])]
        )
    engine = build_engine(
        config,
        artifacts=artifacts,
        trained=version != "proprietary",
        nominal_flags=nominal_flags,
        settings=settings,
        graph=graph if graph is not None else configured_graph(config, settings),
        calibration=configured_calibration_map(config, settings),
    )
    return Site(config, detectors, nominal_flags, engine, version, health, build_keepers(config, detectors))


@dataclass
class PipelineRun:
    """What one in-process run produced.

    ``health``: each plant's sensor checks (which tag, which check: the plant's own evidence).
    """

    site: Site
    results: dict[str, DetectionResult]
    verdicts: list[Verdict]
    health: dict[str, HealthResult] = field(default_factory=dict)

    @property
    def plants(self) -> list[str]:
        """Plant names in order."""
        return list(self.site.config.plant_names)

    @property
    def n_samples(self) -> int:
        """Rows processed."""
        return len(next(iter(self.results.values())))

    def published(self) -> NDArray[np.int64]:
        """Published flags (T, M, 2) as the RCA saw them (-1 where a plant's row was degraded: no evidence)."""
        out = np.stack(
            [np.column_stack([self.results[p].zc_pub, self.results[p].za_pub]) for p in self.plants], axis=1
        ).astype(np.int64)
        for m, p in enumerate(self.plants):
            out[self.results[p].degraded, m] = -1
        return out

    def sensor_faults(self) -> NDArray[np.bool_]:
        """(T, M) the plants' own sensor-fault decisions (False for a plant without checks)."""
        T = self.n_samples
        return np.column_stack(
            [self.health[p].fault if p in self.health else np.zeros(T, dtype=bool) for p in self.plants]
        )

    def true_flags(self) -> NDArray[np.int64]:
        """The plants' own flags before randomized response (T, M, 2) (for detector metrics only)."""
        return np.stack(
            [np.column_stack([self.results[p].zc, self.results[p].za]) for p in self.plants], axis=1
        ).astype(np.int64)


def run_pipeline(
    site: Site,
    data: str | Path | pd.DataFrame | Mapping[str, PlantData],
    reset: bool = True,
    source: str | None = None,
    quality: Mapping[str, NDArray[np.uint8]] | None = None,
) -> PipelineRun:
    """Process a data set: every plant's sensor checks and detector in batch, then the engine and the
    sensor events over the published flags and bits (the streaming runtime's order: a row's sensor
    events before its process verdict).

    With ``reset`` the detectors and the engine start fresh (a new recording; a plant's
    re-baselining loop restarts from the fitted baseline); ``source`` names a frame's file in
    error messages; ``quality`` gives per-plant (T, D) quality codes
    (:class:`~fedrca.contracts.Quality`) of the values, as a sensor message's ``quality``. Rows
    are seqs 0, 1, ... from the start of the recording: a plant with a loop refreshes its
    baseline at the seqs its schedule names, as a live worker does on the same rows
    (``tests/streams/test_drift_kafka.py``).
    """
    config = site.config
    source = source or (str(data) if isinstance(data, str | Path) else "input")
    frame = load_frame(config, data) if isinstance(data, str | Path) else data
    arrays = _as_plant_data(config, frame, source)
    if reset:
        rows = len(next(iter(arrays.values())).Y) if arrays else 0
        check_warmup(config, rows, f"the {rows:,} rows of {source}")
        for det in site.detectors.values():
            det.reset()
        for health in site.health.values():
            health.reset()
        for keeper in site.keepers.values():
            keeper.restart()
        site.engine.reset()
    checked = {}
    for name, health in site.health.items():
        # a broken tag is excluded (NaN) before the plant's detector sees it
        checked[name] = health.update(arrays[name].Y, None if quality is None else quality.get(name))
        arrays[name] = PlantData(checked[name].values, arrays[name].U)
    results = run_detectors(site.detectors, arrays, site.keepers)
    run = PipelineRun(site, results, [], checked)
    plants = config.plant_names
    # a degraded row (too few usable sensors) is no evidence, like an absent plant (negative)
    published = run.published()
    degraded = published[:, :, 0] < 0
    seqs = np.arange(len(published))
    levels = np.column_stack([results[p].level_pub for p in plants]) if config.severity_levels else None
    if levels is not None:
        levels = np.where(degraded, -1, levels)
    # rows are stamped like the live stream's: seq times the sampling interval
    ts = seqs * config.dataset.sample_seconds
    verdicts = site.engine.run(seqs, published, ts=ts, levels=levels)
    if checked:
        bits = np.column_stack(
            [checked[p].fault_pub.astype(np.int64) if p in checked else np.zeros(len(seqs), np.int64) for p in plants]
        )
        events = SensorEvents(config.site, plants, config.privacy.flag_epsilon).run(seqs, bits, ts)
        # in seq order, a row's sensor events first
        verdicts = sorted([*events, *verdicts], key=lambda v: (v.seq, not v.is_sensor_event))
    run.verdicts = verdicts
    return run


def build_detectors(
    config: SiteConfig,
    nominal: pd.DataFrame | Mapping[str, PlantData],
    seed: int | None = None,
    source: str = "nominal data",
    segments: list[int] | None = None,
) -> dict[str, Detector]:
    """One detector per plant, fitted on the nominal data (a frame or per-plant arrays) once it is checked
    (:func:`fedrca.datasets.loader.check_nominal_plant`: enough rows, finite, no constant column).

    A frame's ``attrs["segments"]`` or ``segments`` = the lengths of the recordings it is made of
    (each a fresh stream). A fleet plant's shared model is read from the file its configuration names.
    """
    if isinstance(nominal, pd.DataFrame):
        segments = segments if segments is not None else frame_segments(nominal)
        config = resolve_plants(config, [str(c) for c in nominal.columns])
        data = plant_frames(config, nominal, source)
    else:
        data = dict(nominal)
    for plant in config.plants:
        check_nominal_plant(config, plant, data[plant.name], source)
    models, rules = fleet_models(config), fleet_calibrations(config)

    def build(config: SiteConfig, plant: PlantConfig, seed: int | None) -> Detector:
        return build_detector(config, plant, seed, models.get(plant.name), rules.get(plant.name))

    return fit_detectors(config, data, seed, segments=segments, build=build)


def build_detector(
    config: SiteConfig,
    plant: PlantConfig,
    seed: int | None = None,
    fleet_model: FleetModel | None = None,
    calibration: Calibration | None = None,
) -> Detector:
    """An unfitted detector with the plant's configured settings.

    A plant with ``detector.kind: fleet`` gets a :class:`~fedrca.fleet.detector.FleetDetector` on
    ``fleet_model`` (the fleet's shared model; None = the plant learns alone) with ``calibration``
    (its own from the fleet run; None = from its nominal data), a plant with ``detector.kind: plugin``
    its plug-in (:func:`fedrca.detectors.factory.build_plugin_detector`, docs/plugins.md), every other plant a
    :class:`~fedrca.detectors.plant.PlantDetector` (:func:`fedrca.detectors.factory.build_detector`).
    """
    if plant.detector.kind == "fleet":
        # the fleet modules only for a site with fleet plants (start-up cost of a worker, fedrca run)
        from fedrca.fleet.detector import build_fleet_detector

        return build_fleet_detector(config, plant, seed, fleet_model, calibration)
    if plant.detector.kind == "plugin":
        return build_plugin_detector(config, plant, seed)
    return build_plant_detector(config, plant, seed)


def fleet_models(config: SiteConfig) -> dict[str, FleetModel]:
    """The shared model of every fleet plant that names one (``detector.model``), read from its file."""
    plants = [p for p in config.plants if p.detector.kind == "fleet" and p.detector.model is not None]
    if not plants:
        return {}
    # the fleet store only for a site with fleet plants (start-up cost of a worker, fedrca run)
    from fedrca.application.fleet.store import load_fleet_model

    return {p.name: load_fleet_model(p.detector.model) for p in plants}  # type: ignore[arg-type]


def fleet_calibrations(config: SiteConfig) -> dict[str, Calibration]:
    """The calibration from the fleet run of every fleet plant that names its participant file."""
    plants = [p for p in config.plants if p.detector.kind == "fleet" and p.detector.participant is not None]
    if not plants:
        return {}
    # the fleet store only for a site with fleet plants (start-up cost of a worker, fedrca run)
    from fedrca.application.fleet.store import load_calibration

    return {p.name: load_calibration(p.detector.participant) for p in plants}  # type: ignore[arg-type]


def run_detectors(
    detectors: Mapping[str, Detector],
    data: Mapping[str, PlantData],
    keepers: Mapping[str, BaselineKeeper] | None = None,
) -> dict[str, DetectionResult]:
    """Process every plant's batch (each detector continues from its current state; a plant with a
    re-baselining loop goes through it, its rows numbered on from the loop's history)."""
    out = {}
    for name, det in detectors.items():
        keeper = (keepers or {}).get(name)
        if keeper is None:
            out[name] = det.step_batch(data[name].Y, data[name].U)
        else:
            first = keeper.history.newest + 1
            out[name] = keeper.process(data[name].Y, data[name].U, seqs=np.arange(first, first + len(data[name].Y)))
    return out


def site_runtime(
    config: SiteConfig,
    train: str | Path | pd.DataFrame | Mapping[str, PlantData],
    *,
    params_dir: str | Path | None = None,
    metrics: Metrics | None = None,
    settings: RuntimeSettings | None = None,
) -> SiteRuntime:
    """Both streaming runtimes of a site, built exactly like ``fedrca replay`` builds its site.

    The detectors are fitted on the nominal data, trained parameters from ``params_dir``
    applied and the RCA engine built (:func:`prepare_site`), so the live system and the
    offline commands issue the same verdicts on the same data. Plants configured by
    ``match`` rules take the nominal file's columns.
    """
    site = prepare_site(config, train, params_dir=params_dir)
    metrics = metrics or Metrics(plants=site.config.plant_names)
    plants = PlantRuntime(site.config, site.detectors, metrics=metrics, settings=settings, health=site.health,
                          keepers=site.keepers)  # fmt: skip
    artifacts = None if params_dir is None else load_params(params_dir, site.config)
    for plant, artifact in (artifacts or {}).items():
        if plant in plants.processors:
            plants.record_artifact(plant, artifact)  # applied by prepare_site
    graph = configured_graph(site.config)
    rca = RCARuntime(site.config, site.engine, metrics=metrics, settings=settings, artifacts=artifacts, graph=graph)
    return SiteRuntime(plants, rca)


def rca_runtime(
    config: SiteConfig,
    params_dir: str | Path | None = None,
    *,
    metrics: Metrics | None = None,
    settings: RuntimeSettings | None = None,
) -> RCARuntime:
    """The central RCA runtime alone: no plant processor, no plant data.

    The engine comes from the configuration and the training artifacts alone
    (:func:`fedrca.rca.build_engine`): the learned graph from the server artifact and
    the nominal flag rates from the flag-state counts each plant artifact carries, so
    it equals the engine :func:`site_runtime` builds from the nominal data. Without
    ``params_dir`` the engine uses the configured graph (else the complete graph) and
    ``rca.false_alarm_rate``.
    """
    artifacts = None if params_dir is None else load_params(params_dir, config)
    graph = configured_graph(config)
    engine = build_engine(config, artifacts=artifacts, graph=graph, calibration=configured_calibration_map(config))
    return RCARuntime(config, engine, metrics=metrics, settings=settings, artifacts=artifacts, graph=graph)


def plant_runtime(
    config: SiteConfig,
    train: str | Path | pd.DataFrame | Mapping[str, PlantData],
    *,
    plants: Sequence[str] | None = None,
    params_dir: str | Path | None = None,
    metrics: Metrics | None = None,
    settings: RuntimeSettings | None = None,
    fitted: dict[Any, Detector] | None = None,
    store: FittedStore | None = None,
) -> PlantRuntime:
    """The plant runtime of a worker serving ``plants`` (default all): only their detectors are fitted.

    A worker of one plant needs only that plant's nominal data (and its own artifact).
    ``fitted``: a memo shared by the sites of a worker of several sites. A plant whose
    configuration (everything but the site's name) and nominal file equal those of a plant
    fitted before takes a copy of that detector as it was fitted: the fit is deterministic
    (seeded), so the copy is what fitting again would give, at the cost of a copy.
    ``store``: the worker's fitted detectors of an earlier start (:class:`~fedrca.application.fitted.FittedStore`);
    a plant whose nominal data, configuration and code are unchanged loads its detector and sensor
    checks from it instead of fitting them, any other is fitted and stored.
    """
    source = str(train) if isinstance(train, str | Path) else "nominal data"
    frame = load_frame(config, train) if isinstance(train, str | Path) else train
    if isinstance(frame, pd.DataFrame):
        config = resolve_plants(config, [str(c) for c in frame.columns])
    served = list(config.plant_names if plants is None else plants)
    nominal = _as_plant_data(config, frame, source)
    for plant_config in config.plants:
        if plant_config.name in served:
            check_nominal_plant(config, plant_config, nominal[plant_config.name], source)
    models, rules = fleet_models(config), fleet_calibrations(config)
    design = config.model_dump_json(exclude={"site"})

    segments = frame_segments(frame)
    health: dict[str, SensorHealth] = {}

    def fit(plant: PlantConfig) -> Detector:
        stored = store.key(config, plant) if store is not None else None
        kept = store.load(plant.name, stored) if store is not None else None
        if kept is not None:
            if kept[1] is not None:
                health[plant.name] = kept[1]
            return kept[0]
        key = (source if isinstance(train, str | Path) else id(train), design, plant.name)
        if fitted is not None and key in fitted:
            detector = copy.deepcopy(fitted[key])
        else:
            detector = build_detector(
                config, plant, fleet_model=models.get(plant.name), calibration=rules.get(plant.name)
            )
            detector = detector.fit(nominal[plant.name].Y, nominal[plant.name].U)
            if fitted is not None:
                fitted[key] = copy.deepcopy(detector)  # as fitted, before any stream moves it
        health.update(fit_health(config, nominal, segments=segments, plants=[plant.name]))
        if store is not None:
            store.save(plant.name, stored, detector, health.get(plant.name))  # as fitted
        return detector

    detectors = {p.name: fit(p) for p in config.plants if p.name in served}
    artifacts = None if params_dir is None else load_params(params_dir, config, plants=served)
    if artifacts is not None:
        apply_params(detectors, artifacts, str(params_dir))
    # the loops wrap the detectors as the artifacts left them (baseline 0), as prepare_site's do
    runtime = PlantRuntime(config, detectors, metrics=metrics, settings=settings, health=health,
                           keepers=build_keepers(config, detectors))  # fmt: skip
    for plant in served if artifacts is not None else []:
        runtime.record_artifact(plant, artifacts[plant])  # type: ignore[index]
    return runtime
