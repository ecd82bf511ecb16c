"""The in-process pipeline of ``fedrca replay`` / ``fedrca evaluate``: detectors -> published flags -> RCA.

The same pure cores as the streaming runtime, in one process and in batch:
every plant's :class:`fedrca.detectors.plant.PlantDetector` processes its own
sensors (raw values never leave it), publishes its flags through randomized
response, and the RCA engine sees only the published flags (and the graph).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from fedrca.config import SiteConfig, resolve_plants
from fedrca.detectors.plant import DetectionResult, PlantDetector
from fedrca.exceptions import ArtifactError
from fedrca.rca.engine import RCAEngine, Verdict, build_engine
from fedrca.rca.graph import InterdependencyGraph
from fedrca.rca.settings import RCASettings
from fedrca.site import PlantData, build_detectors, load_frame, plant_frames, run_detectors

__all__ = ["PipelineRun", "Site", "apply_params", "prepare_site", "run_pipeline", "without_privacy"]

BoolArray = NDArray[np.bool_]


def without_privacy(config: SiteConfig) -> SiteConfig:
    """The same configuration with flags published as they are (epsilon = inf)."""
    privacy = config.privacy.model_copy(update={"flag_epsilon": math.inf})
    return config.model_copy(update={"privacy": privacy})


def apply_params(detectors: Mapping[str, PlantDetector], params_dir: str | Path) -> str:
    """Load every plant's training artifact from ``params_dir`` into its detector; returns the version."""
    try:
        from fedrca.training.artifacts import apply_artifact, load_site_artifacts
    except ModuleNotFoundError as exc:
        raise ArtifactError(f"--params needs fedrca.training.artifacts, which is not available ({exc})") from None
    artifacts = load_site_artifacts(params_dir)
    # fleet detectors (detector.kind: fleet) have no augmentation, so no training artifact
    detectors = {name: det for name, det in detectors.items() if getattr(det, "has_augmented", True)}
    missing = [name for name in detectors if name not in artifacts]
    if missing:
        raise ArtifactError(f"{params_dir}: no artifact for plant(s) {', '.join(missing)}; run fedrca train first")
    for name, det in detectors.items():
        apply_artifact(det, artifacts[name])
    versions = sorted({det.parameter_version for det in detectors.values()})
    return ",".join(versions)


@dataclass
class Site:
    """Fitted detectors of a site, their nominal flags and the RCA engine."""

    config: SiteConfig
    detectors: dict[str, PlantDetector]
    nominal_flags: dict[str, BoolArray]
    engine: RCAEngine
    params_version: str

    @property
    def graph(self) -> InterdependencyGraph:
        """The engine's interdependency graph."""
        return self.engine.graph


def _as_plant_data(
    config: SiteConfig, data: pd.DataFrame | Mapping[str, PlantData], source: str
) -> dict[str, PlantData]:
    if isinstance(data, pd.DataFrame):
        return plant_frames(config, data, source)
    return dict(data)


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
    detectors = build_detectors(config, nominal, source=source)
    version = "proprietary"
    if params_dir is not None:
        version = apply_params(detectors, params_dir)
    nominal_flags = {}
    for name, det in detectors.items():
        saved = copy.deepcopy(det.get_state())
        det.reset()
        result = det.step_batch(nominal[name].Y, nominal[name].U)
        nominal_flags[name] = np.column_stack([result.zc, result.za])
        det.set_state(saved)
        det.reset()
    engine = build_engine(
        config, detectors, params_dir=params_dir, nominal_flags=nominal_flags, settings=settings, graph=graph
    )
    return Site(config, detectors, nominal_flags, engine, version)


@dataclass
class PipelineRun:
    """What one in-process run produced."""

    site: Site
    results: dict[str, DetectionResult]
    verdicts: list[Verdict]

    @property
    def plants(self) -> list[str]:
        """Plant names in order."""
        return list(self.site.config.plant_names)

    @property
    def n_samples(self) -> int:
        """Rows processed."""
        return len(next(iter(self.results.values())))

    def published(self) -> NDArray[np.int64]:
        """Published flags (T, M, 2) as the RCA saw them."""
        return np.stack(
            [np.column_stack([self.results[p].zc_pub, self.results[p].za_pub]) for p in self.plants], axis=1
        ).astype(np.int64)

    def true_flags(self) -> NDArray[np.int64]:
        """The plants' own flags before randomized response (T, M, 2) (for detector metrics only)."""
        return np.stack(
            [np.column_stack([self.results[p].zc, self.results[p].za]) for p in self.plants], axis=1
        ).astype(np.int64)


def run_pipeline(
    site: Site, data: str | Path | pd.DataFrame | Mapping[str, PlantData], reset: bool = True
) -> PipelineRun:
    """Process a data set: every detector in batch, then the engine over the published flags.

    With ``reset`` the detectors and the engine start fresh (a new recording).
    """
    config = site.config
    source = str(data) if isinstance(data, str | Path) else "input"
    frame = load_frame(config, data) if isinstance(data, str | Path) else data
    arrays = _as_plant_data(config, frame, source)
    if reset:
        for det in site.detectors.values():
            det.reset()
        site.engine.reset()
    results = run_detectors(site.detectors, arrays)
    plants = config.plant_names
    published = np.stack([np.column_stack([results[p].zc_pub, results[p].za_pub]) for p in plants], axis=1)
    T = len(published)
    verdicts = site.engine.run(np.arange(T), published.astype(np.int64))
    return PipelineRun(site, results, verdicts)


def verdict_records(verdicts: list[Verdict]) -> list[dict[str, Any]]:
    """The verdict lines of ``fedrca replay``."""
    return [v.to_record() for v in verdicts]
