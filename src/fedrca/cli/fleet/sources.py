"""Participants' nominal data for ``fedrca fleet``: files (or row ranges of files), simulated TEP runs.

Every participant's samples come from one loader, keyed by the source kind
(:attr:`~fedrca.cli.fleet.config.ParticipantConfig.source`):

* ``file``: a ``tep`` or ``csv`` file, optionally a row range;
* ``simulate``: a nominal run of the TEP simulator (``simulate: {seed: 200, hours: 48}``)
  read from the run cache of :func:`fedrca.connectors.simulator.cached_run`
  (``python bench/tep_library.py`` fills it), or simulated first with ``generate: true``.

A new kind of source is one more entry in :data:`LOADERS` and one more optional key of
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
from fedrca.connectors.simulator import SIM_EXTRA_HINT, SimulationSpec, cached_run, default_cache_dir
from fedrca.datasets.tep import TEP_COLUMNS, load_tep
from fedrca.exceptions import DataError, ModelError

__all__ = ["LOADERS", "load_file", "load_participant", "load_participants", "load_simulated"]

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


def _rows(p: ParticipantConfig, values: FloatArray, what: str) -> FloatArray:
    if p.rows is None:
        return values
    start, stop = p.rows
    if stop > len(values):
        raise DataError(f"participant '{p.name}': rows [{start}, {stop}) run past the {len(values)} rows of {what}")
    return values[start:stop]


def _file_source(config: FleetConfig, p: ParticipantConfig) -> tuple[FloatArray, list[str]]:
    assert p.file is not None  # ParticipantConfig guarantees it for source "file"
    values, names = load_file(p.file, config.data.format, config.data.columns)
    return _rows(p, values, p.file), names


def load_simulated(
    seed: int, hours: float = 48.0, mode: str = "mode1", *, generate: bool = False, who: str = "simulate"
) -> FloatArray:
    """A nominal TEP simulator run (T, 52) in :data:`~fedrca.datasets.tep.TEP_COLUMNS` order.

    Raises
    ------
    DataError
        When the run is not cached (and ``generate`` is off), the simulator extra that keys
        the cache is missing, or the run shut down (not a nominal run).
    """
    spec = SimulationSpec(hours=hours, seed=seed, mode=mode)
    try:
        run = cached_run(spec, generate=generate)
    except ModelError as exc:
        raise DataError(
            f"{who}: simulated run seed {seed} needs the TEP simulator, which keys and generates the run cache "
            f"({SIM_EXTRA_HINT}; {exc})"
        ) from None
    if run is None:
        raise DataError(
            f"{who}: nominal simulated run (seed {seed}, {hours:g} h, {mode}) is not in {default_cache_dir()}; "
            "fill the cache with python bench/tep_library.py, or add generate: true to simulate it"
        )
    if run.terminated:
        raise DataError(
            f"{who}: simulated run seed {seed} shut down after {len(run.values)} rows ({run.shutdown}); "
            "a participant needs a nominal run: choose another seed"
        )
    return np.asarray(run.values, dtype=np.float64)


def _simulate_source(config: FleetConfig, p: ParticipantConfig) -> tuple[FloatArray, list[str]]:
    sim = p.simulate
    assert sim is not None  # ParticipantConfig guarantees it for source "simulate"
    values = load_simulated(sim.seed, sim.hours, sim.mode, generate=sim.generate, who=f"participant '{p.name}'")
    names = list(TEP_COLUMNS) if config.data.columns is None else list(config.data.columns)
    missing = [c for c in names if c not in TEP_COLUMNS]
    if missing:
        raise DataError(
            f"participant '{p.name}': data.columns {', '.join(missing)} are not TEP columns "
            f"({compress_columns(list(TEP_COLUMNS))})"
        )
    values = values[:, [TEP_COLUMNS.index(c) for c in names]]
    return _rows(p, values, f"simulated run seed {sim.seed}"), names


#: Source kind -> loader (config, participant) -> (samples (N, M), column names).
LOADERS: dict[str, Callable[[FleetConfig, ParticipantConfig], tuple[FloatArray, list[str]]]] = {
    "file": _file_source,
    "simulate": _simulate_source,
}


def load_participant(config: FleetConfig, p: ParticipantConfig) -> tuple[FloatArray, list[str]]:
    """One participant's nominal samples and column names."""
    return LOADERS[p.source](config, p)


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
