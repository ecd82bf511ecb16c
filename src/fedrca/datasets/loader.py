"""The one loader of every command: a data file in the configured format, split into plants.

Every command reads its data files through :func:`load_dataset` (``detect``,
``train``, ``replay``, ``evaluate`` via :func:`load_frame`, and ``replay-to-kafka``),
so they all accept and refuse the same files. :func:`plant_frames` splits a frame
into per-plant sensor and input arrays in the configured column order;
:func:`check_nominal_plant` refuses nominal data a detector cannot be fitted on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from fedrca.config import PlantConfig, SiteConfig, compress_columns, resolve_plants
from fedrca.config.limits import MEMORY_LIMIT, gib, largest, plant_bytes, plant_share
from fedrca.datasets.dataset import Dataset
from fedrca.datasets.generic import load_csv
from fedrca.datasets.hai import load_hai
from fedrca.datasets.nominal import MAX_ABS_VALUE, check_nominal
from fedrca.datasets.swat import load_swat
from fedrca.datasets.tep import load_tep_dataset
from fedrca.exceptions import ConfigError, DataError

__all__ = [
    "DatasetOptions",
    "PlantData",
    "check_nominal_plant",
    "check_warmup",
    "load_dataset",
    "load_frame",
    "plant_frames",
]

FloatArray = NDArray[np.float64]


class DatasetOptions(Protocol):
    """What :func:`load_dataset` reads from a configuration's ``dataset`` section."""

    @property
    def format(self) -> str: ...

    @property
    def time_column(self) -> str | None: ...

    @property
    def sample_seconds(self) -> float: ...

    @property
    def label_columns(self) -> Sequence[str]: ...

    @property
    def missing(self) -> str: ...


def load_dataset(options: DatasetOptions, path: str | Path, labels_path: str | Path | None = None) -> Dataset:
    """Parse a recorded file in the configured format.

    Parameters
    ----------
    options : the configuration's ``dataset`` section (``format``, ``time_column``,
        ``sample_seconds``, ``label_columns``, ``timezone``, ``time_format``, ``missing``:
        ``allow`` reads empty cells as missing values, NaN)
    path : the data file
    labels_path : HAI 23.05 / HAIEnd 23.05 only: the separate label file

    Raises
    ------
    DataError
        When the file breaks its format (one line naming the file, the line, the fix).
    ConfigError
        When a label file is given for a format that has none.
    """
    fmt = options.format
    missing = options.missing == "allow"
    timezone = str(getattr(options, "timezone", "UTC") or "UTC")
    time_format = getattr(options, "time_format", None)
    if labels_path is not None and fmt != "hai":
        raise ConfigError(
            f"a separate label file is only read for HAI 23.05 / HAIEnd 23.05 data, not for format '{fmt}'; "
            "drop --labels",
            key="--labels",
        )
    if fmt == "tep":
        return load_tep_dataset(path, sample_seconds=options.sample_seconds, missing=missing)
    if fmt == "hai":
        return load_hai(path, labels_path=labels_path, timezone=timezone, time_format=time_format, missing=missing)
    if fmt == "swat":
        return load_swat(path, timezone=timezone, time_format=time_format, missing=missing)
    return load_csv(
        path,
        options.time_column,
        options.sample_seconds,
        label_columns=list(options.label_columns),
        time_format=time_format,
        timezone=timezone,
        missing=missing,
    )


@dataclass(frozen=True)
class PlantData:
    """One plant's slice of a data file: sensors Y (T, D) and inputs U (T, U) or None."""

    Y: FloatArray
    U: FloatArray | None


def load_frame(config: SiteConfig, path: str | Path) -> pd.DataFrame:
    """The sensor columns of a data file in the configured ``dataset.format`` (time and label columns dropped).

    The same parser as ``replay-to-kafka`` (:func:`load_dataset`), so every command accepts and
    refuses the same files.

    Raises
    ------
    DataError
        When the file is missing or malformed (the message names the file, the line and the fix).
    """
    return load_dataset(config.dataset, path).frame


def _columns(
    frame: pd.DataFrame, plant: PlantConfig, kind: str, source: str, missing: bool = False
) -> FloatArray | None:
    names = getattr(plant, kind)
    if not names:
        return None
    absent = [c for c in names if c not in frame.columns]
    if absent:
        raise DataError(
            f"{source}: plant '{plant.name}' needs column(s) {', '.join(absent)}; "
            f"the file has {compress_columns([str(c) for c in frame.columns])}"
        )
    try:
        values = frame[names].to_numpy(dtype=np.float64)
    except ValueError as exc:
        raise DataError(f"{source}: plant '{plant.name}' has non-numeric values ({exc})") from None
    bad = np.isinf(values) if missing else ~np.isfinite(values)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        fix = "fix the file" if missing else "clean the file or drop the row, or set dataset.missing: allow"
        raise DataError(f"{source}: NaN or inf at row {row}, column {names[col]} (plant '{plant.name}'); {fix}")
    # a finite value this large overflows every squared statistic to inf (scores, JSON output):
    # refused in any file, nominal or not (tests/cli/test_hostile_cli.py)
    huge = np.abs(np.nan_to_num(values)) > MAX_ABS_VALUE
    if huge.any():
        row, col = np.argwhere(huge)[0]
        raise DataError(
            f"{source}: value {values[row, col]:.3g} at row {row}, column {names[col]} (plant '{plant.name}') is "
            f"beyond +-{MAX_ABS_VALUE:g}, which overflows the detector's statistics; fix the file or rescale the column"
        )
    return values


def plant_frames(config: SiteConfig, frame: pd.DataFrame, source: str = "data") -> dict[str, PlantData]:
    """Split a frame into per-plant arrays in configured column order.

    Plants whose sensors are a ``match`` rule take the frame's columns the rule selects
    (:func:`fedrca.config.resolve_plants`), in the frame's column order. Missing values (NaN) are
    refused unless ``dataset.missing`` is ``allow``.
    """
    config = resolve_plants(config, [str(c) for c in frame.columns])
    missing = config.dataset.missing == "allow"
    out: dict[str, PlantData] = {}
    for plant in config.plants:
        Y = _columns(frame, plant, "sensors", source, missing)
        if Y is None:  # sensors are required by the config schema
            raise DataError(f"plant '{plant.name}' has no sensors")
        out[plant.name] = PlantData(Y, _columns(frame, plant, "inputs", source, missing))
    return out


def check_warmup(
    config: SiteConfig, rows: int, what: str, *, key: str | None = None, plants: Sequence[str] | None = None
) -> None:
    """Refuse a warm-up (``scoring.warmup``: samples after a reset without flags) not shorter than a run of ``rows``.

    Such a run raises no flag at all (``scoring.warmup: 1000000000`` was accepted, and a one-hour
    simulator demo under the default warm-up reported a detection rate of 0.000). ``what``
    describes the run; ``key`` names the option that sets its length (default: the setting).
    """
    for name in plants or config.plant_names:
        index = config.plant_names.index(name)
        warmup = config.plants[index].scoring.warmup
        if warmup >= rows:
            setting = f"plants[{index}].scoring.warmup"
            raise ConfigError(
                f"{what} are no more than the warm-up of {warmup:,} samples of plant '{name}' ({setting}): no flag "
                f"could be raised; give a longer run, or a warm-up below {rows:,}",
                source=None if key else config.source,
                key=key or setting,
            )


def check_nominal_plant(config: SiteConfig, plant: PlantConfig, data: PlantData, source: str) -> None:
    """Refuse nominal data a plant's detector cannot be fitted on (:func:`fedrca.datasets.nominal.check_nominal`),
    and settings the data cannot carry: augmentation features whose arrays pass the memory limit
    (:func:`fedrca.config.limits.plant_bytes`), more fleet patterns than the rows estimate."""
    folds = plant.scoring.folds if plant.scoring.calibration == "cv" else None
    names = plant.sensors if len(plant.sensors) == data.Y.shape[1] else [f"#{j}" for j in range(data.Y.shape[1])]
    missing = config.dataset.missing == "allow"
    check_nominal(data.Y, names, plant=plant.name, source=source, folds=folds, missing=missing)
    key = f"plants[{config.plant_names.index(plant.name)}]"
    T, D = data.Y.shape
    check_warmup(config, T, f"the {T} nominal rows of {source}", plants=[plant.name])
    if plant.detector.kind == "fleet":
        most = max(1, T // (D + 1))
        if plant.detector.components > most:
            raise ConfigError(
                f"{plant.detector.components} patterns of {D} sensors need {D + 1} nominal rows each, {source} has "
                f"{T}: set it to at most {most}",
                source=config.source,
                key=f"{key}.detector.components",
            )
    elif plant.augmentation.features == "rff":
        # every plant's detector and training share what the RCA's evidence window leaves of the limit
        F, share = plant.augmentation.n_features, plant_share(config.rca.horizon, len(config.plants))
        if plant_bytes(T, D, F) > share:
            fits = largest(share, lambda f: plant_bytes(T, D, f), F)
            fix = f"set it to at most {fits}" if fits else "use fewer features or a shorter rca.horizon"
            raise ConfigError(
                f"{F} random features of {D} sensors over {T} nominal rows need about {gib(plant_bytes(T, D, F))}, "
                f"over this plant's share {gib(share)} of the {gib(MEMORY_LIMIT)} limit (docs/limits.md): {fix}",
                source=config.source,
                key=f"{key}.augmentation.n_features",
            )
    if data.U is not None:
        inputs = plant.inputs if len(plant.inputs) == data.U.shape[1] else [f"#{j}" for j in range(data.U.shape[1])]
        check_nominal(data.U, inputs, plant=plant.name, source=source, where="inputs", missing=missing)
