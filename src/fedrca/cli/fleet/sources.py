"""Participants' nominal data for ``fedrca fleet``: files (or row ranges of files) in a known format.

Every participant's samples come from one loader, keyed by the source kind. A
new kind of source (e.g. simulated nominal runs of the TEP simulator, seeds >= 100)
is one more entry in :data:`LOADERS` and one more optional key of
:class:`~fedrca.cli.fleet.config.ParticipantConfig`; the runner does not change.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from fedrca.cli.fleet.config import FleetConfig, ParticipantConfig
from fedrca.config import compress_columns
from fedrca.datasets.tep import TEP_COLUMNS, load_tep
from fedrca.exceptions import DataError

__all__ = ["LOADERS", "load_file", "load_participant", "load_participants"]

FloatArray = NDArray[np.float64]


def load_file(path: str | Path, fmt: str, columns: list[str] | None = None) -> tuple[FloatArray, list[str]]:
    """Samples (N, M) and their column names from a ``tep`` or ``csv`` file.

    Raises
    ------
    DataError
        When the file is missing or malformed, a column is missing, or a value is not finite.
    """
    file = Path(path)
    if fmt == "tep":
        frame = load_tep(file)
        names = list(TEP_COLUMNS) if columns is None else list(columns)
    else:
        if not file.is_file():
            raise DataError(f"{file}: no such file")
        try:
            frame = pd.read_csv(file, sep=None, engine="python")
        except (ValueError, pd.errors.ParserError) as exc:
            raise DataError(f"{file}: not a readable CSV file ({exc})") from None
        frame.columns = [str(c).strip() for c in frame.columns]
        names = [str(c) for c in frame.columns] if columns is None else list(columns)
    missing = [c for c in names if c not in frame.columns]
    if missing:
        raise DataError(
            f"{file}: missing column(s) {', '.join(missing)}; the file has {compress_columns(list(frame.columns))}"
        )
    try:
        values = frame[names].to_numpy(dtype=np.float64)
    except ValueError as exc:
        raise DataError(f"{file}: non-numeric values ({exc})") from None
    bad = ~np.isfinite(values)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        raise DataError(f"{file}: NaN or inf at row {row}, column {names[col]}; clean the file or drop the row")
    return values, names


def _file_source(config: FleetConfig, p: ParticipantConfig) -> tuple[FloatArray, list[str]]:
    values, names = load_file(p.file, config.data.format, config.data.columns)
    if p.rows is not None:
        start, stop = p.rows
        if stop > len(values):
            raise DataError(
                f"participant '{p.name}': rows [{start}, {stop}) run past the {len(values)} rows of {p.file}"
            )
        values = values[start:stop]
    return values, names


#: Source kind -> loader (config, participant) -> (samples (N, M), column names).
LOADERS: dict[str, Callable[[FleetConfig, ParticipantConfig], tuple[FloatArray, list[str]]]] = {"file": _file_source}


def load_participant(config: FleetConfig, p: ParticipantConfig) -> tuple[FloatArray, list[str]]:
    """One participant's nominal samples and column names."""
    return LOADERS["file"](config, p)


def load_participants(config: FleetConfig) -> tuple[dict[str, FloatArray], list[str]]:
    """Every participant's samples (in the fleet's order) and the shared column names.

    Raises
    ------
    DataError
        When participants do not measure the same variables.
    """
    out: dict[str, FloatArray] = {}
    columns: list[str] | None = None
    for p in config.participants:
        values, names = load_participant(config, p)
        if columns is None:
            columns = names
        elif names != columns:
            raise DataError(
                f"participant '{p.name}' has columns {compress_columns(names)}, the fleet has "
                f"{compress_columns(columns)}; every participant must measure the same variables"
            )
        out[p.name] = values
    return out, columns or []
