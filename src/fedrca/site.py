"""A site's detectors built from its configuration (the glue between config and cores).

Loads a data file in the configured format, splits it into per-plant sensor and
input arrays, and builds one fitted :class:`PlantDetector` per plant.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from fedrca.config import PlantConfig, SiteConfig, compress_columns, resolve_plants
from fedrca.datasets.tep import load_tep
from fedrca.detectors.fleet_detector import FleetDetector
from fedrca.detectors.plant import DetectionResult, PlantDetector
from fedrca.detectors.plugin import load_plugin
from fedrca.exceptions import DataError

__all__ = ["PlantData", "build_detector", "build_detectors", "load_frame", "plant_frames", "run_detectors"]

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class PlantData:
    """One plant's slice of a data file: sensors Y (T, D) and inputs U (T, U) or None."""

    Y: FloatArray
    U: FloatArray | None


def load_frame(config: SiteConfig, path: str | Path) -> pd.DataFrame:
    """Load a data file in the configured ``dataset.format`` as a numeric frame.

    Raises
    ------
    DataError
        When the file is missing or malformed (the message names the file and the fix).
    """
    file = Path(path)
    fmt = config.dataset.format
    if fmt == "tep":
        return load_tep(file)
    if not file.is_file():
        raise DataError(f"{file}: no such file")
    if fmt in ("hai", "swat"):
        # connectors import the cores, never the reverse: resolve the loader at run time
        replay = importlib.import_module("fedrca.connectors.replay")
        loaded = replay.load_hai(file) if fmt == "hai" else replay.load_swat(file)
        return loaded.frame
    try:
        frame = pd.read_csv(file, sep=None, engine="python")
    except (ValueError, pd.errors.ParserError) as exc:
        raise DataError(f"{file}: not a readable CSV file ({exc})") from None
    frame.columns = [str(c).strip() for c in frame.columns]
    if config.dataset.time_column and config.dataset.time_column in frame.columns:
        frame = frame.drop(columns=[config.dataset.time_column])
    labels = [c for c in config.dataset.label_columns if c in frame.columns]
    return frame.drop(columns=labels) if labels else frame


def _columns(frame: pd.DataFrame, plant: PlantConfig, kind: str, source: str) -> FloatArray | None:
    names = getattr(plant, kind)
    if not names:
        return None
    missing = [c for c in names if c not in frame.columns]
    if missing:
        raise DataError(
            f"{source}: plant '{plant.name}' needs column(s) {', '.join(missing)}; "
            f"the file has {compress_columns([str(c) for c in frame.columns])}"
        )
    try:
        values = frame[names].to_numpy(dtype=np.float64)
    except ValueError as exc:
        raise DataError(f"{source}: plant '{plant.name}' has non-numeric values ({exc})") from None
    bad = ~np.isfinite(values)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        raise DataError(
            f"{source}: NaN or inf at row {row}, column {names[col]} (plant '{plant.name}'); "
            "clean the file or drop the row"
        )
    return values


def plant_frames(config: SiteConfig, frame: pd.DataFrame, source: str = "data") -> dict[str, PlantData]:
    """Split a frame into per-plant arrays in configured column order.

    Plants whose sensors are a ``match`` rule take the frame's columns the rule selects
    (:func:`fedrca.config.resolve_plants`), in the frame's column order.
    """
    config = resolve_plants(config, [str(c) for c in frame.columns])
    out: dict[str, PlantData] = {}
    for plant in config.plants:
        Y = _columns(frame, plant, "sensors", source)
        if Y is None:  # sensors are required by the config schema
            raise DataError(f"plant '{plant.name}' has no sensors")
        out[plant.name] = PlantData(Y, _columns(frame, plant, "inputs", source))
    return out


def build_detector(config: SiteConfig, plant: PlantConfig, seed: int | None = None) -> PlantDetector:
    """An unfitted detector with the plant's configured settings.

    A plant with ``detector.kind: fleet`` gets a :class:`~fedrca.detectors.fleet_detector.FleetDetector`
    (duck-typed like a plant detector: ``step_batch``, flags, ``scorers[0].threshold_value``).
    """
    base_seed = config.privacy.seed if seed is None else seed
    if plant.detector.kind == "fleet":
        return _fleet_detector(config, plant, base_seed)  # type: ignore[return-value]
    model = None
    if plant.model.kind == "plugin" and plant.model.plugin:
        model = load_plugin(plant.model.plugin, **plant.model.plugin_args)
    smoothing = plant.scoring.smoothing
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
        ewma=None if smoothing is None else smoothing.ewma,
        smooth="d2" if smoothing is None else smoothing.target,
        margin=plant.scoring.margin,
        calibration=plant.scoring.calibration,
        folds=plant.scoring.folds,
        epsilon=config.privacy.flag_epsilon,
        # Distinct, reproducible randomness per plant.
        seed=base_seed * 1000 + config.plant_names.index(plant.name),
    )


def _fleet_detector(config: SiteConfig, plant: PlantConfig, base_seed: int) -> FleetDetector:
    from fedrca.fleet.store import load_fleet_model

    d = plant.detector
    return FleetDetector(
        name=plant.name,
        model=None if d.model is None else load_fleet_model(d.model),
        n_components=d.components,
        rho=d.rho,
        folds=d.folds,
        percentile=d.percentile,
        epsilon=config.privacy.flag_epsilon,
        seed=base_seed * 1000 + config.plant_names.index(plant.name),
    )


def build_detectors(
    config: SiteConfig,
    nominal: pd.DataFrame | dict[str, PlantData],
    seed: int | None = None,
    source: str = "nominal data",
) -> dict[str, PlantDetector]:
    """One detector per plant, fitted on the nominal data (a frame or per-plant arrays)."""
    data = plant_frames(config, nominal, source) if isinstance(nominal, pd.DataFrame) else nominal
    return {
        plant.name: build_detector(config, plant, seed).fit(data[plant.name].Y, data[plant.name].U)
        for plant in config.plants
    }


def run_detectors(detectors: dict[str, PlantDetector], data: dict[str, PlantData]) -> dict[str, DetectionResult]:
    """Process every plant's batch (each detector continues from its current state)."""
    return {name: det.step_batch(data[name].Y, data[name].U) for name, det in detectors.items()}
