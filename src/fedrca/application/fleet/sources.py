"""Participants' nominal data for ``fedrca fleet``: files (or row ranges of files), simulated TEP runs.

Every participant's samples come from one loader, keyed by the source kind
(:attr:`~fedrca.application.fleet.config.ParticipantConfig.source`):

* ``file``: a ``tep`` or ``csv`` file, optionally a row range;
* ``simulate``: a nominal run of the TEP simulator (``simulate: {seed: 200, hours: 48}``)
  read from the run cache of :func:`fedrca.connectors.simulator.cached_run`
  (``python bench/tep_library.py`` fills it), or simulated first with ``generate: true``.

A new kind of source is one more entry in :data:`LOADERS` and one more optional key of
:class:`~fedrca.application.fleet.config.ParticipantConfig`; the runner does not change.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from fedrca.application.fleet.config import FleetConfig, ParticipantConfig
from fedrca.config import MIN_NOMINAL_SAMPLES, compress_columns
from fedrca.config.limits import MEMORY_LIMIT, fleet_bytes, gib, largest
from fedrca.connectors.simulator import SIM_EXTRA_HINT, SimulationSpec, cached_run, default_cache_dir
from fedrca.datasets.loader import DatasetOptions, load_dataset
from fedrca.datasets.nominal import MAX_ABS_VALUE
from fedrca.datasets.tep import TEP_COLUMNS
from fedrca.exceptions import ConfigError, DataError, ModelError

__all__ = ["LOADERS", "check_fleet", "load_file", "load_participant", "load_participants", "load_simulated"]

FloatArray = NDArray[np.float64]


def load_file(
    path: str | Path, data: DatasetOptions, variables: list[str] | None = None
) -> tuple[FloatArray, list[str]]:
    """Samples (N, M) and their column names from a file read as the fleet's ``data`` section says
    (``variables``: these columns instead of ``data.columns``).

    The loader of every command (:func:`fedrca.datasets.loader.load_dataset`) reads it, so a
    CSV's ``time_column`` and ``label_columns`` are never variables; ``data.columns`` picks the
    variables (default: every other column). With every column taken, a column that grows on
    every row (an unnamed time or counter column) is refused: as a variable it would make the
    same data at another time look anomalous.

    Raises
    ------
    DataError
        When the file is missing or malformed, a column is missing, or a value is not finite or too large.
    """
    file = Path(path)
    frame = load_dataset(data, file).frame
    columns = variables if variables is not None else getattr(data, "columns", None)
    names = [str(c) for c in frame.columns] if columns is None else list(columns)
    missing = [c for c in names if c not in frame.columns]
    if missing:
        raise DataError(
            f"{file}: missing column(s) {', '.join(missing)}; the file has {compress_columns(list(frame.columns))} "
            "(fix data.columns)"
        )
    values = frame[names].to_numpy(dtype=np.float64)
    if columns is None and data.format == "csv" and len(values) >= 3:
        growing = np.flatnonzero(np.all(np.diff(values, axis=0) > 0, axis=0))
        if growing.size:
            name = names[int(growing[0])]
            raise DataError(
                f"{file}: column '{name}' grows on every row, like a time or counter column; name it "
                f"data.time_column: {name}, or list the variables in data.columns"
            )
    huge = np.abs(values) > MAX_ABS_VALUE
    if huge.any():
        row, col = np.argwhere(huge)[0]
        raise DataError(
            f"{file}: value {values[row, col]:.3g} at row {row}, column {names[col]} is beyond +-{MAX_ABS_VALUE:g}, "
            "which overflows the model's statistics; fix the file or rescale the column"
        )
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
    values, names = load_file(p.file, config.data)
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


def check_fleet(config: FleetConfig, data: dict[str, FloatArray], columns: list[str]) -> None:
    """Refuse settings the fleet's data cannot carry, before the learning (docs/limits.md).

    Every participant needs :data:`~fedrca.config.MIN_NOMINAL_SAMPLES` rows, and as many in each
    threshold fold; a pattern of M variables needs M + 1 of the fleet's rows; the run's arrays must
    fit :data:`~fedrca.config.limits.MEMORY_LIMIT` (:func:`~fedrca.config.limits.fleet_bytes`).

    Raises
    ------
    ConfigError
        naming the key, the participant or the figures, and the largest value that fits.
    DataError
        When a participant has too few rows.
    """
    source = config.source
    rows = {name: len(X) for name, X in data.items()}
    for name, n in rows.items():
        if n < MIN_NOMINAL_SAMPLES:
            raise DataError(
                f"participant '{name}': {n} rows, a participant needs at least {MIN_NOMINAL_SAMPLES}; give it more "
                "nominal rows"
            )
    fewest = min(rows, key=lambda name: rows[name])
    folds = config.threshold.folds
    if folds and rows[fewest] // folds < MIN_NOMINAL_SAMPLES:
        best = rows[fewest] // MIN_NOMINAL_SAMPLES
        fix = f"set threshold.folds to at most {best}, or 0 (in-sample scores)" if best >= 2 else "set it to 0"
        raise ConfigError(
            f"{folds} folds leave participant '{fewest}' {rows[fewest] // folds} rows per fold ({rows[fewest]} rows), "
            f"fewer than {MIN_NOMINAL_SAMPLES}; {fix}",
            source=source,
            key="threshold.folds",
        )
    S, M, N = len(rows), len(columns), sum(rows.values())
    k = config.model.components
    most = max(1, N // (M + 1))
    if k > most:
        raise ConfigError(
            f"{k} patterns of {M} variables need {M + 1} of the fleet's rows each, the fleet has {N}: set "
            f"model.components to at most {most}",
            source=source,
            key="model.components",
        )
    noise = config.privacy.noise_samples if config.privacy.noise else 0

    def need(k: int) -> int:
        return fleet_bytes(S, k, M, N, chunks=config.consensus.chunks, n_init=config.model.n_init, noise_samples=noise)

    if need(k) > MEMORY_LIMIT:
        fits = largest(MEMORY_LIMIT, need, k)
        fix = f"set model.components to at most {fits}" if fits else "use fewer consensus.chunks or participants"
        raise ConfigError(
            f"{k} patterns of {M} variables over {S} participants ({N} rows, {config.consensus.chunks} chunks) "
            f"need about {gib(need(k))}, over the {gib(MEMORY_LIMIT)} limit (docs/limits.md); {fix}",
            source=source,
            key="model.components",
        )
