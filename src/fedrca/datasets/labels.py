"""Label columns and separate label files (HAI 23.05, HAIEnd 23.05).

A label file is aligned to its data file in one of two ways, checked row by row:

* **by position** when it has one row per data row: label row ``i`` belongs to data
  row ``i``, and its time must equal the data time floored to the label file's
  resolution (``label-test2.csv`` of HAI 23.05 has minute times, so 60 data rows
  share each label time);
* **by timestamp** otherwise, when the label times are unique (a label file that
  covers more rows than the data): every data time must appear in it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import tzinfo
from pathlib import Path

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from fedrca.datasets.table import cell
from fedrca.exceptions import DataError

__all__ = ["SwatLabelParser", "ZeroOneParser", "align_labels"]

Int8Array = NDArray[np.int8]
FloatArray = NDArray[np.float64]


@dataclass
class ZeroOneParser:
    """A 0/1 label column (``0``, ``1``, ``0.0``, ``1.0``)."""

    file: Path
    column: str

    def __call__(self, strings: NDArray[np.object_], lines: NDArray[np.int64]) -> Int8Array:
        text = pd.Series([None if v is None else str(v).strip() for v in strings], dtype=object)
        values = pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        bad = ~np.isin(values, (0.0, 1.0))
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            shown = "" if strings[row] is None else cell(strings[row])
            raise DataError(
                f"{self.file}: line {lines[row]:,}, column '{cell(self.column)}': label '{shown}' is not 0 or 1; "
                "fix the value"
            )
        return values.astype(np.int8)


@dataclass
class SwatLabelParser:
    """SWaT's ``Normal/Attack`` column, matched ignoring case and spaces (``A ttack`` is ``Attack``)."""

    file: Path
    column: str

    def __call__(self, strings: NDArray[np.object_], lines: NDArray[np.int64]) -> Int8Array:
        words = [re.sub(r"\s+", "", "" if v is None else str(v)).lower() for v in strings]
        coded = np.fromiter(({"normal": 0, "attack": 1}.get(w, -1) for w in words), dtype=np.int8, count=len(words))
        if (coded < 0).any():
            row = int(np.flatnonzero(coded < 0)[0])
            shown = "" if strings[row] is None else cell(strings[row])
            raise DataError(
                f"{self.file}: line {lines[row]:,}, column '{cell(self.column)}': label '{shown}' is neither Normal "
                "nor Attack; fix the value"
            )
        return coded


def _when(seconds: float, tz: tzinfo | None) -> str:
    stamp = pd.Timestamp(seconds, unit="s", tz="UTC")
    if tz is not None:
        stamp = stamp.tz_convert(tz)
    return f"{stamp.strftime('%Y-%m-%d %H:%M:%S')} {stamp.tzname()}"


def align_labels(
    data_times: FloatArray,
    data_lines: NDArray[np.int64],
    data_file: Path,
    label_times: FloatArray,
    label_values: Int8Array,
    label_lines: NDArray[np.int64],
    label_file: Path,
    tz: tzinfo | None = None,
) -> Int8Array:
    """The (T,) labels of the data rows (times in seconds since the epoch).

    Raises
    ------
    DataError
        Naming the first label line that does not fit its data row, or the first data
        time without a label.
    """
    T, L = len(data_times), len(label_times)
    if L == T:
        if np.array_equal(label_times, data_times):
            return label_values
        resolution = 60.0 if np.all(np.mod(label_times, 60.0) == 0) else 1.0
        floored = np.floor(data_times / resolution) * resolution
        bad = np.flatnonzero(floored != label_times)
        if bad.size == 0:
            return label_values
        i = int(bad[0])
        unit = "minute" if resolution == 60 else "second"
        label_when, data_when = _when(label_times[i], tz), _when(data_times[i], tz)
        raise DataError(
            f"{label_file}: line {label_lines[i]:,}: label time {label_when} is not the time of data row {i + 1:,} "
            f"({data_file} line {data_lines[i]:,}, {data_when}) floored to the {unit}; a label file with one row "
            "per data row is aligned by position - pass the label file of this data file"
        )
    if L > 1 and not np.all(np.diff(label_times) > 0):
        raise DataError(
            f"{label_file}: {L:,} label rows for {T:,} data rows of {data_file}, and the label times repeat (coarser "
            "than the data); such a label file needs exactly one row per data row - pass the label file of this "
            "data file"
        )
    position = np.searchsorted(label_times, data_times)
    found = (position < L) & (label_times[np.minimum(position, L - 1)] == data_times)
    if not found.all():
        row = int(np.flatnonzero(~found)[0])
        first, last = _when(label_times[0], tz), _when(label_times[-1], tz)
        raise DataError(
            f"{label_file}: no label for {_when(data_times[row], tz)} ({data_file} line {data_lines[row]:,}); the "
            f"label file covers {first} .. {last}; pass the label file of this data file"
        )
    return label_values[position]
