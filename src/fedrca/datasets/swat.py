"""SWaT (Secure Water Treatment, A1/A2 December 2015) files.

Layouts (see docs/datasets.md):

* the owners' workbooks ``SWaT_Dataset_Normal_v1.xlsx`` / ``SWaT_Dataset_Attack_v0.xlsx``:
  first row the stage names (P1 .. P6), second row the column names;
* CSV exports of them, ``,``-separated, or ``;``-separated with decimal commas
  (``168,563``), sometimes with empty lines or the stage row before the header.

Columns: ``" Timestamp"`` (leading space, as are some tags such as ``" MV101"``),
51 tags ``FIT101`` .. ``P603`` whose first digit is the stage, ``Normal/Attack``.
Times are day first on a 12-hour clock (``28/12/2015 10:00:00 AM``) in Singapore
time: set ``dataset.timezone: Asia/Singapore``.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from fedrca.datasets.dataset import Dataset
from fedrca.datasets.excel import is_workbook, read_sheet
from fedrca.datasets.labels import SwatLabelParser
from fedrca.datasets.table import ColumnParser, cell, read_table
from fedrca.datasets.times import SWAT_FORMATS, TimeParser, check_increasing, localize, zone
from fedrca.exceptions import DataError

__all__ = ["load_swat", "swat_stage"]


def swat_stage(tag: str) -> int:
    """The SWaT process stage (1..6) of a tag: the first digit of its three-digit number.

    Examples
    --------
    >>> swat_stage("FIT101"), swat_stage(" AIT201"), swat_stage("DPIT301"), swat_stage("P603")
    (1, 2, 3, 6)
    """
    match = re.search(r"(\d)\d\d$", tag.strip())
    if match is None:
        raise DataError(f"'{cell(tag)}' is not a SWaT tag (letters then a three-digit number such as FIT101)")
    return int(match.group(1))


def _is_label(column: str) -> bool:
    return re.sub(r"\s+", "", column).lower() == "normal/attack"


def _is_header(fields: list[str]) -> bool:
    return any(f.lower() == "timestamp" for f in fields)


def load_swat(
    path: str | Path, *, timezone: str = "UTC", time_format: str | None = None, missing: bool = False
) -> Dataset:
    """A SWaT workbook (``.xlsx``) or CSV export (``,`` or ``;`` separated, ``.gz`` allowed).

    Column names and values are stripped of surrounding spaces; labels are matched
    ignoring case and spaces (``A ttack`` is ``Attack``); rows before the header (empty
    lines, the stage row of the workbook) are skipped. The time format is chosen from
    the first row and every row must match it. With ``missing``, empty tag cells (and
    ``nan``, ``NA``, ...) become NaN.

    Raises
    ------
    DataError
        One line naming the file, line (sheet row) and column, and the fix.
    """
    file = Path(path)
    tz = zone(timezone)
    timers: dict[str, TimeParser] = {}

    def parsers(names: list[str]) -> dict[str, ColumnParser]:
        time_col = next(c for c in names if c.lower() == "timestamp")
        timers["time"] = TimeParser(file, time_col, SWAT_FORMATS, time_format)
        out: dict[str, ColumnParser] = {time_col: timers["time"]}
        out.update({c: SwatLabelParser(file, c) for c in names if _is_label(c)})
        return out

    if is_workbook(file):
        table = read_sheet(file, "SWaT", _is_header, parsers, missing=missing)
    else:
        table = read_table(file, "SWaT CSV (' Timestamp' column)", _is_header, parsers, missing=missing)
    time_col = next(c for c in table.columns if c.lower() == "timestamp")
    label_col = next((c for c in table.columns if _is_label(c)), None)
    sensors = [c for c in table.columns if c not in (time_col, label_col)]
    if not sensors:
        raise DataError(f"{file}: no tag columns besides '{cell(time_col)}'; a SWaT file has tags such as FIT101")
    ts = np.asarray(table.values[time_col], dtype=np.float64)
    if timers["time"].wall_clock:
        ts = localize(ts, tz, file, time_col, table.lines)
    check_increasing(ts, file, time_col, table.lines)
    labels = None if label_col is None else {"attack": np.asarray(table.values[label_col], dtype=np.int8)}
    return Dataset.build(str(file), "swat", table.matrix(sensors), sensors, ts, labels)
