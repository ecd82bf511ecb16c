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
from fedrca.detectors.plant import Detector, PlantDetector
from fedrca.detectors.plugin import load_plugin
from fedrca.exceptions import ConfigError

__all__ = ["SEGMENTS", "Builder", "PlantArrays", "build_detector", "fit_detectors", "frame_segments", "plant_seed"]


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


#: ``DataFrame.attrs`` key of the lengths of the consecutive recordings a nominal frame is made of.
SEGMENTS = "segments"


def frame_segments(frame: Any) -> list[int] | None:
    """The recording lengths a nominal frame carries in ``attrs["segments"]`` (None: one recording)."""
    attrs = getattr(frame, "attrs", None) or {}
    segments = attrs.get(SEGMENTS)
    return None if segments is None else [int(v) for v in segments]
