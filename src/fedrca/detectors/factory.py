"""Detectors built from a site configuration's typed settings.

:func:`build_detector` turns a plant's ``model`` / ``augmentation`` / ``scoring``
settings (and the site's flag privacy) into an unfitted
:class:`~fedrca.detectors.plant.PlantDetector`; :func:`fit_detectors` builds and
fits one per plant on its nominal data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from fedrca.config import PlantConfig, SiteConfig
from fedrca.detectors.plant import PlantDetector
from fedrca.detectors.plugin import load_plugin

__all__ = ["SEGMENTS", "PlantArrays", "build_detector", "fit_detectors", "frame_segments"]


class PlantArrays(Protocol):
    """One plant's data: sensors Y (T, D) and inputs U (T, U) or None."""

    @property
    def Y(self) -> NDArray[np.float64]: ...

    @property
    def U(self) -> NDArray[np.float64] | None: ...


def build_detector(config: SiteConfig, plant: PlantConfig, seed: int | None = None) -> PlantDetector:
    """An unfitted detector with the plant's configured settings.

    Randomness (random features, randomized response) is seeded per plant from
    ``privacy.seed`` (or ``seed``) and the plant's position, so every plant draws
    differently and every run draws the same.
    """
    model = None
    if plant.model.kind == "plugin" and plant.model.plugin:
        model = load_plugin(plant.model.plugin, **plant.model.plugin_args)
    scoring = plant.scoring
    smoothing = scoring.smoothing
    base_seed = config.privacy.seed if seed is None else seed
    family = scoring.method == "family"
    return PlantDetector(
        name=plant.name,
        model=model,
        n_states=plant.model.n_states,
        energy=plant.model.energy,
        steady_state=plant.model.steady_state,
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
        seed=base_seed * 1000 + config.plant_names.index(plant.name),
    )


def fit_detectors(
    config: SiteConfig,
    nominal: Mapping[str, PlantArrays],
    seed: int | None = None,
    segments: Sequence[int] | None = None,
) -> dict[str, PlantDetector]:
    """One detector per plant, fitted on its nominal data (per-plant arrays in configured column order).

    ``segments``: lengths of the consecutive recordings the nominal rows are made of
    (:meth:`PlantDetector.fit`); None = one recording.
    """
    return {
        plant.name: build_detector(config, plant, seed).fit(
            nominal[plant.name].Y, nominal[plant.name].U, segments=segments
        )
        for plant in config.plants
    }


#: ``DataFrame.attrs`` key of the lengths of the consecutive recordings a nominal frame is made of.
SEGMENTS = "segments"


def frame_segments(frame: Any) -> list[int] | None:
    """The recording lengths a nominal frame carries in ``attrs["segments"]`` (None: one recording)."""
    attrs = getattr(frame, "attrs", None) or {}
    segments = attrs.get(SEGMENTS)
    return None if segments is None else [int(v) for v in segments]
