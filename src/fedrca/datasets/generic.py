"""Generic delimited files: a header, an optional time column, 0/1 label columns, numeric sensors."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fedrca.datasets.dataset import Dataset
from fedrca.datasets.labels import ZeroOneParser
from fedrca.datasets.table import ColumnParser, cell, read_table
from fedrca.datasets.times import ISO_FORMATS, TimeParser, check_increasing, localize, zone
from fedrca.exceptions import ConfigError, DataError

__all__ = ["load_csv"]


def load_csv(
    path: str | Path,
    time_column: str | None = None,
    sample_seconds: float = 1.0,
    label_columns: Sequence[str] = (),
    time_format: str | None = None,
    *,
    timezone: str = "UTC",
    missing: bool = False,
) -> Dataset:
    """A CSV file with a header: optional time column, optional 0/1 label columns, numeric sensors.

    Parameters
    ----------
    path : the file (``,``, ``;`` or tab separated; ``.gz`` allowed)
    time_column : numeric seconds or dates; None = ``row * sample_seconds``
    sample_seconds : sampling interval when there is no time column
    label_columns : 0/1 label columns (the first becomes ``attack`` unless one is named so)
    time_format : ``strftime`` format of the dates (default: ISO 8601)
    timezone : IANA zone of dates without a UTC offset
    missing : empty cells (and ``nan``, ``NA``, ``null``, ...) in sensor columns become NaN (else refused)

    Examples
    --------
    >>> data = load_csv("data/samples/csv/plant-log.csv", time_column="t", label_columns=["fault"])
    >>> data.columns, data.timestamps[:2].tolist(), int(data.attack.sum())
    (['feed_flow', 'feed_temp', 'tank_level', 'tank_temp', 'pump_speed'], [0.0, 0.5], 10)
    """
    file = Path(path)
    tz = zone(timezone)
    timers: dict[str, TimeParser] = {}

    if time_column and time_column in label_columns:
        raise ConfigError(
            f"column '{time_column}' is both the time column and a label column; fix dataset.label_columns",
            key="dataset.label_columns",
        )

    def parsers(names: list[str]) -> dict[str, ColumnParser]:
        for kind, wanted in (("time column", [time_column] if time_column else []), ("label column", label_columns)):
            missing = [c for c in wanted if c not in names]
            if missing:
                have = ", ".join(cell(n) for n in names[:30]) + (" ..." if len(names) > 30 else "")
                raise DataError(
                    f"{file}: no {kind} {', '.join(repr(c) for c in missing)}; the header has {have}; fix "
                    "dataset.time_column / dataset.label_columns in the configuration"
                )
        out: dict[str, ColumnParser] = {c: ZeroOneParser(file, c) for c in label_columns}
        if time_column:
            timers["time"] = TimeParser(file, time_column, ISO_FORMATS, time_format)
            out[time_column] = timers["time"]
        return out

    table = read_table(file, "CSV", lambda fields: any(fields), parsers, missing=missing)
    sensors = [c for c in table.columns if c != time_column and c not in label_columns]
    if not sensors:
        raise DataError(f"{file}: no sensor columns besides the time and label columns; add the sensor columns")
    if time_column:
        ts = np.asarray(table.values[time_column], dtype=np.float64)
        if timers["time"].wall_clock:
            ts = localize(ts, tz, file, time_column, table.lines)
        check_increasing(ts, file, time_column, table.lines)
    else:
        ts = np.arange(table.rows, dtype=np.float64) * float(sample_seconds)
    labels = {c: np.asarray(table.values[c], dtype=np.int8) for c in label_columns} or None
    return Dataset.build(str(file), "csv", table.matrix(sensors), sensors, ts, labels)
