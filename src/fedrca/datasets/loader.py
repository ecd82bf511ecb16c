"""The one loader of every command: a data file in the configured format, split into plants.

:func:`load_frame` reads a file in the site's ``dataset.format``;
:func:`plant_frames` splits a frame into per-plant sensor and input arrays in the
configured column order.
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
from fedrca.exceptions import DataError

__all__ = ["PlantData", "load_frame", "plant_frames"]

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
