"""Detectors built from a site configuration's typed settings.

:func:`build_detector` turns a plant's ``model`` / ``augmentation`` / ``scoring``
settings (and the site's flag privacy) into an unfitted
:class:`~fedrca.detectors.plant.PlantDetector`; :func:`fit_detectors` builds and
fits one per plant on its nominal data. A plant with ``detector.kind: fleet`` runs
the fleet detector of :mod:`fedrca.fleet`, a package above this one: its builder
(:func:`fedrca.fleet.detector.build_fleet_detector`) is passed in as ``build`` by
the site shell (:func:`fedrca.application.site.build_detector`), which knows both kinds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from fedrca.config import PlantConfig, SiteConfig
from fedrca.detectors.health import SensorHealth
from fedrca.detectors.plant import Detector, PlantDetector
from fedrca.detectors.plugin import load_plugin
from fedrca.exceptions import ConfigError

__all__ = [
    "SEGMENTS",
    "Builder",
    "PlantArrays",
    "build_detector",
    "build_health",
    "fit_detectors",
    "fit_health",
    "frame_segments",
    "plant_seed",
]


class PlantArrays(Protocol):
    """One plant's data: sensors Y (T, D) and inputs U (T, U) or None."""

    @property
    def Y(self) -> NDArray[np.float64]: ...

    @property
    def U(self) -> NDArray[np.float64] | None: ...


#: ``build(config, plant, seed) -> unfitted detector`` of one plant.
Builder = Callable[[SiteConfig, PlantConfig, int | None], Detector]


def plant_seed(config: SiteConfig, plant: PlantConfig, seed: int | None = None) -> int:
    """The plant's own seed: ``privacy.seed`` (or ``seed``) and the plant's position.

    Every plant draws differently (random features, randomized response) and every run draws the same.
    """
    base_seed = config.privacy.seed if seed is None else seed
    return base_seed * 1000 + config.plant_names.index(plant.name)


def build_detector(config: SiteConfig, plant: PlantConfig, seed: int | None = None) -> PlantDetector:
    """An unfitted :class:`~fedrca.detectors.plant.PlantDetector` with the plant's configured settings.

    Seeded by :func:`plant_seed`. A plant with ``detector.kind: fleet`` is refused with a
    ConfigError: its detector lives in :mod:`fedrca.fleet` (built by
    :func:`fedrca.application.site.build_detector`).
    """
    if plant.detector.kind != "plant":
        index = config.plant_names.index(plant.name)
        raise ConfigError(
            f"plant '{plant.name}' runs the {plant.detector.kind} detector (detector.kind: {plant.detector.kind}); "
            "this builder makes plant detectors only (the fleet's: fedrca.fleet.build_fleet_detector)",
            source=config.source,
            key=f"plants[{index}].detector.kind",
        )
    model = None
    if plant.model.kind == "plugin" and plant.model.plugin:
        try:
            model = load_plugin(plant.model.plugin, **plant.model.plugin_args)
        except ConfigError as exc:
            index = config.plant_names.index(plant.name)
            raise ConfigError(exc.reason, source=config.source, key=f"plants[{index}].model.plugin") from None
    scoring = plant.scoring
    smoothing = scoring.smoothing
    family = scoring.method == "family"
    return PlantDetector(
        name=plant.name,
        model=model,
        n_states=plant.model.n_states,
        energy=plant.model.energy,
        steady_state=plant.model.steady_state,
        use_inputs=plant.model.use_inputs,
        features=plant.augmentation.features,
        n_features=plant.augmentation.n_features,
        lengthscale=plant.augmentation.lengthscale,
        threshold=plant.scoring.threshold,
        percentile=plant.scoring.percentile,
        alpha=plant.scoring.alpha,
        ewma=tuple(scoring.ewma) if family else (None if smoothing is None else smoothing.ewma),
        smooth="d2" if smoothing is None else smoothing.target,
        margin=plant.scoring.margin,
        calibration=plant.scoring.calibration,
        folds=plant.scoring.folds,
        method=scoring.method,
        statistics=tuple(scoring.statistics),
        base_quantile=scoring.base_quantile,
        tail=scoring.tail,
        confidence=scoring.confidence,
        dispersion=scoring.dispersion,
        warmup=scoring.warmup,
        min_sensors=scoring.min_sensors,
        severity_levels=scoring.severity_levels,
        severity_base=scoring.severity_base,
        level_epsilon=config.privacy.level_epsilon,
        epsilon=config.privacy.flag_epsilon,
        seed=plant_seed(config, plant, seed),
    )


def fit_detectors(
    config: SiteConfig,
    nominal: Mapping[str, PlantArrays],
    seed: int | None = None,
    segments: Sequence[int] | None = None,
    build: Builder = build_detector,
) -> dict[str, Detector]:
    """One detector per plant, fitted on its nominal data (per-plant arrays in configured column order).

    ``segments``: lengths of the consecutive recordings the nominal rows are made of
    (:meth:`PlantDetector.fit`; any other detector fits on the rows as one recording); None = one recording.
    ``build``: the detector of one plant (default :func:`build_detector`, plant detectors only).
    """
    return {plant.name: _fit(build(config, plant, seed), nominal[plant.name], segments) for plant in config.plants}


def _fit(detector: Detector, data: PlantArrays, segments: Sequence[int] | None) -> Detector:
    if isinstance(detector, PlantDetector):
        return detector.fit(data.Y, data.U, segments=segments)
    return detector.fit(data.Y, data.U)


#: Offset of a plant's sensor-bit randomizer seed from its flags' (:func:`plant_seed`): another stream.
HEALTH_SEED_OFFSET = 1_000_000_007


def build_health(config: SiteConfig, plant: PlantConfig, seed: int | None = None) -> SensorHealth | None:
    """The plant's unfitted sensor checks from its ``health`` settings (None when ``health.enabled`` is false).

    The published sensor-fault bit gets the flags' ``privacy.flag_epsilon`` and a seed of its own.
    """
    settings = plant.health
    if not settings.enabled:
        return None
    nan = float("nan")
    # the configuration names only the plant's sensors (validated when read); a plant narrowed since
    # (a constant sensor dropped) keeps the limits of the sensors it still has
    limits = {
        tag: (nan if low is None else float(low), nan if high is None else float(high))
        for tag, (low, high) in settings.limits.items()
        if tag in plant.sensors
    }
    return SensorHealth(
        name=plant.name,
        tags=plant.sensors,
        stale_after=settings.stale_after,
        stuck_slack=settings.stuck_slack,
        flat_moves=settings.flat_moves,
        flat_ratio=settings.flat_ratio,
        range_margin=settings.range_margin,
        limits=limits,
        recover=settings.recover,
        epsilon=config.privacy.flag_epsilon,
        seed=plant_seed(config, plant, seed) + HEALTH_SEED_OFFSET,
    )


def fit_health(
    config: SiteConfig,
    nominal: Mapping[str, PlantArrays],
    seed: int | None = None,
    segments: Sequence[int] | None = None,
    plants: Sequence[str] | None = None,
) -> dict[str, SensorHealth]:
    """The sensor checks of every plant (of ``plants``, default all) with ``health.enabled``, fitted on its
    nominal data (``segments`` = the recordings it is made of)."""
    out = {}
    for plant in config.plants:
        if plants is not None and plant.name not in plants:
            continue
        health = build_health(config, plant, seed)
        if health is not None:
            out[plant.name] = health.fit(nominal[plant.name].Y, segments=segments)
    return out


#: ``DataFrame.attrs`` key of the lengths of the consecutive recordings a nominal frame is made of.
SEGMENTS = "segments"


def frame_segments(frame: Any) -> list[int] | None:
    """The recording lengths a nominal frame carries in ``attrs["segments"]`` (None: one recording)."""
    attrs = getattr(frame, "attrs", None) or {}
    segments = attrs.get(SEGMENTS)
    return None if segments is None else [int(v) for v in segments]
