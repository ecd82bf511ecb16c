"""HAI (HIL-based Augmented ICS) and HAIEnd files.

Layouts (checked against the dataset's repository: README, per-file summaries,
DCS graphs; see docs/datasets.md):

======================  ===================  ===========================================  =========================
version                 time column          tags                                         labels
======================  ===================  ===========================================  =========================
20.07 (``;``)           ``time``             59: ``P1_B2004`` .. ``P4_ST_TT01``           ``attack``, ``attack_P1``
                                                                                           .. ``attack_P3``
21.03 (``,``)           ``time``             79                                           as 20.07
22.04                   ``timestamp``        86                                           one ``Attack`` column
23.05 ``hai-*.csv``     ``timestamp``        86 (``x1001_05_SETPOINT_OUT`` .. instead     ``label-test1.csv`` /
                                             of ``P1_B*``)                                ``label-test2.csv``
HAIEnd 23.05            ``Timestamp``        225 boiler DCS points (``1001.2-OUT``,       shared with HAI 23.05
``end-*.csv``                                ``DM-FT01``, ``GATEOPEN`` ...)
======================  ===================  ===========================================  =========================

Times are local (KST): set ``dataset.timezone: Asia/Seoul``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedrca.datasets.dataset import Dataset
from fedrca.datasets.labels import ZeroOneParser, align_labels
from fedrca.datasets.table import ColumnParser, cell, read_table
from fedrca.datasets.times import HAI_FORMATS, TimeParser, check_increasing, localize, zone
from fedrca.exceptions import DataError

__all__ = ["HAI_LABEL_COLUMNS", "HAI_TIME_COLUMNS", "load_hai"]

#: Label columns of HAI 20.07 / 21.03 (overall, then per process P1..P3).
HAI_LABEL_COLUMNS = ("attack", "attack_P1", "attack_P2", "attack_P3")
#: Names of the first (time) column, compared ignoring case.
HAI_TIME_COLUMNS = ("time", "timestamp")


def _is_label(column: str) -> bool:
    low = column.lower()
    return low == "attack" or low.startswith("attack_")


def _label_name(column: str) -> str:
    low = column.lower()
    return "attack" if low == "attack" else "attack_" + column.split("_", 1)[1].upper()


def _is_time_header(fields: list[str]) -> bool:
    return bool(fields) and fields[0].lower() in HAI_TIME_COLUMNS


def load_hai(
    path: str | Path,
    labels_path: str | Path | None = None,
    *,
    timezone: str = "UTC",
    time_format: str | None = None,
    missing: bool = False,
) -> Dataset:
    """A HAI or HAIEnd CSV file (``.csv`` or ``.csv.gz``, ``,`` or ``;`` separated).

    Parameters
    ----------
    path : the data file; its first column is the time (``time`` / ``timestamp``, any case)
    labels_path : HAI 23.05 / HAIEnd 23.05 only: the label file (``timestamp,label``) of this
        data file; refused for files with their own label columns (20.07, 21.03, 22.04)
    timezone : IANA zone of the file's times (HAI: ``Asia/Seoul``)
    time_format : ``strftime`` format of the times (default: ISO 8601 or ``2022-08-17 0:00``)
    missing : empty cells (and ``nan``, ``NA``, ...) in tag columns become NaN (else refused)

    Raises
    ------
    DataError
        One line naming the file, line and column, and the fix.
    """
    file = Path(path)
    tz = zone(timezone)
    what = "HAI CSV (first column time/timestamp)"
    timers: dict[str, TimeParser] = {}

    def parsers(names: list[str]) -> dict[str, ColumnParser]:
        timers["time"] = TimeParser(file, names[0], HAI_FORMATS, time_format)
        out: dict[str, ColumnParser] = {names[0]: timers["time"]}
        out.update({c: ZeroOneParser(file, c) for c in names[1:] if _is_label(c)})
        return out

    table = read_table(file, what, _is_time_header, parsers, missing=missing)
    time_col = table.columns[0]
    label_cols = [c for c in table.columns[1:] if _is_label(c)]
    sensors = [c for c in table.columns[1:] if not _is_label(c)]
    if not sensors:
        raise DataError(f"{file}: no sensor columns after '{cell(time_col)}'; a HAI file has tags such as P1_FT01")
    timer = timers["time"]
    ts = np.asarray(table.values[time_col], dtype=np.float64)
    if timer.wall_clock:
        ts = localize(ts, tz, file, time_col, table.lines)
    check_increasing(ts, file, time_col, table.lines)
    labels = None
    if label_cols:
        if labels_path is not None:
            raise DataError(
                f"{file}: has its own label column(s) {', '.join(cell(c) for c in label_cols)}; drop the label file "
                f"{labels_path} (only HAI 23.05 and HAIEnd 23.05 keep their labels in separate files)"
            )
        names = [_label_name(c) for c in label_cols]
        clash = sorted({n for n in names if names.count(n) > 1})
        if clash:
            same = [c for c in label_cols if _label_name(c) in clash]
            raise DataError(
                f"{file}: label columns {', '.join(cell(c) for c in same)} are the same label spelled differently; "
                "keep one of them"
            )
        labels = {n: np.asarray(table.values[c], dtype=np.int8) for n, c in zip(names, label_cols)}
    elif labels_path is not None:
        labels = {"attack": _label_file(Path(labels_path), ts, table.lines, file, timezone, time_format)}
    return Dataset.build(str(file), "hai", table.matrix(sensors), sensors, ts, labels)


def _label_file(
    file: Path,
    data_ts: np.ndarray,
    data_lines: np.ndarray,
    data_file: Path,
    timezone: str,
    time_format: str | None,
) -> np.ndarray:
    """Labels of a 23.05 label file (``timestamp``, ``label``) aligned to the data rows."""
    timers: dict[str, TimeParser] = {}
    found: dict[str, str] = {}

    def parsers(names: list[str]) -> dict[str, ColumnParser]:
        label = next((c for c in names[1:] if c.lower() in ("label", "attack")), None)
        if label is None:
            raise DataError(
                f"{file}: no 'label' column (the header has {', '.join(cell(c) for c in names[:10])}); a HAI label "
                "file has the columns timestamp,label"
            )
        found["label"] = label
        timers["time"] = TimeParser(file, names[0], HAI_FORMATS, time_format)
        out: dict[str, ColumnParser] = {names[0]: timers["time"], label: ZeroOneParser(file, label)}
        # other columns of a label file are not used
        out.update({c: _ignore for c in names[1:] if c != label})
        return out

    table = read_table(file, "HAI label CSV (timestamp,label)", _is_time_header, parsers)
    time_col = table.columns[0]
    tz = zone(timezone)
    ts = np.asarray(table.values[time_col], dtype=np.float64)
    if timers["time"].wall_clock:
        ts = localize(ts, tz, file, time_col, table.lines)
    check_increasing(ts, file, time_col, table.lines)
    values = np.asarray(table.values[found["label"]], dtype=np.int8)
    return align_labels(data_ts, data_lines, data_file, ts, values, table.lines, file, tz)


def _ignore(strings: np.ndarray, lines: np.ndarray) -> np.ndarray:
    return np.zeros(len(strings), dtype=np.int8)
