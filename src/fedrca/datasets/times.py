"""Time columns: one format per column, local times in the dataset's time zone.

A :class:`TimeParser` converts a text time column chunk by chunk. The format is
chosen once, from the column's first value (the first of the candidate formats
that parses it), and every other value must match it: a file whose rows mix
formats (a spreadsheet re-save that turned some day-first dates month-first)
fails at the first row that does not match, instead of being read row by row
with a guess. Numbers are taken as seconds.

Times without a UTC offset are wall-clock times of the dataset's time zone
(``dataset.timezone``, an IANA name such as ``Asia/Seoul``); :func:`localize`
turns them into seconds since the epoch. Times with an offset keep it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from fedrca.datasets.table import cell
from fedrca.exceptions import ConfigError, DataError

__all__ = [
    "HAI_FORMATS",
    "ISO_FORMATS",
    "MAX_SECONDS",
    "SWAT_FORMATS",
    "TimeParser",
    "check_increasing",
    "localize",
    "zone",
]

FloatArray = NDArray[np.float64]

#: ISO 8601 (``2021-07-10 00:00:01``, ``T`` separator, fractions, offsets), then minutes with unpadded hours.
ISO_FORMATS: tuple[str, ...] = ("ISO8601", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M")
#: HAI: ISO 8601; label-test2.csv of 23.05 has ``2022-08-17 0:00`` (minutes, unpadded hour).
HAI_FORMATS: tuple[str, ...] = (*ISO_FORMATS, "%Y%m%d %H:%M:%S")
#: SWaT: day first, 12-hour clock (`` 28/12/2015 10:00:00 AM``), its 24-hour re-saves, then ISO 8601.
SWAT_FORMATS: tuple[str, ...] = ("%d/%m/%Y %I:%M:%S %p", "%d/%m/%Y %H:%M:%S", "%d/%m/%Y %H:%M", *ISO_FORMATS)

#: Largest magnitude of a numeric time column (about 31,700 years of seconds).
MAX_SECONDS = 1e12

_EPOCH_UTC = pd.Timestamp(0, tz="UTC")
# times must stay within pandas' nanosecond range (1677-09-21 .. 2262-04-11) with a day to spare
_FIRST = pd.Timestamp("1678-01-01").timestamp()
_LAST = pd.Timestamp("2261-12-31").timestamp()


def zone(name: str, source: str | None = None) -> ZoneInfo:
    """The IANA time zone ``name``.

    Raises
    ------
    ConfigError
        When the name is not a known zone.
    """
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise ConfigError(
            f"unknown time zone '{cell(name)}'; use an IANA name such as UTC, Asia/Seoul, Asia/Singapore",
            source=source,
            key="dataset.timezone",
        ) from None


def _describe(fmt: str) -> str:
    return "ISO 8601" if fmt == "ISO8601" else fmt


@dataclass
class TimeParser:
    """Converter of one time column (a :data:`fedrca.datasets.table.ColumnParser`).

    Returns float64 seconds: numbers as they are, times with an offset as seconds since
    the epoch, times without one as wall-clock seconds (localized later by :func:`localize`).

    Attributes
    ----------
    file, column : for messages
    formats : candidate formats in order (``strftime`` codes or ``"ISO8601"``)
    fixed : the user's ``dataset.time_format``, used alone when given
    """

    file: Path
    column: str
    formats: Sequence[str]
    fixed: str | None = None
    chosen: str | None = field(default=None, init=False)
    first_line: int = field(default=0, init=False)
    aware: bool | None = field(default=None, init=False)

    @property
    def numeric(self) -> bool:
        """True when the column holds plain numbers (seconds)."""
        return self.chosen == "seconds"

    @property
    def wall_clock(self) -> bool:
        """True when the values are wall-clock times still to localize."""
        return self.chosen not in (None, "seconds") and not self.aware

    def __call__(self, strings: NDArray[np.object_], lines: NDArray[np.int64]) -> FloatArray:
        text = pd.Series([None if v is None else str(v).strip() for v in strings], dtype=object)
        missing = text.isna().to_numpy() | (text.to_numpy() == "")
        if missing.any():
            row = int(np.flatnonzero(missing)[0])
            where = f"{self.file}: line {lines[row]:,}, column '{cell(self.column)}'"
            raise DataError(f"{where}: missing time; fill it or drop the line")
        if self.chosen is None:
            self._choose(str(text.iloc[0]), int(lines[0]))
        if self.chosen == "seconds":
            values = pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
            bad = ~(np.abs(values) <= MAX_SECONDS)
            if bad.any():
                row = int(np.flatnonzero(bad)[0])
                raise DataError(
                    f"{self.file}: line {lines[row]:,}, column '{cell(self.column)}': '{cell(text.iloc[row])}' is not "
                    f"a number of seconds (at most {MAX_SECONDS:g}) like the column's first value (line "
                    f"{self.first_line:,}); fix the value"
                )
            return values
        fmt = str(self.chosen)
        try:
            parsed = pd.to_datetime(text, format=fmt, errors="coerce")
        except (ValueError, TypeError, OverflowError):
            raise DataError(
                f"{self.file}: lines {lines[0]:,}..{lines[-1]:,}, column '{cell(self.column)}': times with and without "
                "a UTC offset are mixed; write every time the same way"
            ) from None
        bad = parsed.isna().to_numpy()
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise DataError(
                f"{self.file}: line {lines[row]:,}, column '{cell(self.column)}': '{cell(text.iloc[row])}' does not "
                f"match the column's time format {_describe(fmt)} (set by line {self.first_line:,}); one format per "
                "column - fix the row, or set dataset.time_format (e.g. '%m/%d/%Y %I:%M:%S %p' for month-first dates)"
            )
        aware = getattr(parsed.dt, "tz", None) is not None
        if self.aware is None:
            self.aware = aware
        elif self.aware != aware:
            raise DataError(
                f"{self.file}: line {lines[0]:,}, column '{cell(self.column)}': times with and without a UTC offset "
                "are mixed; write every time the same way"
            )
        naive = parsed.dt.tz_convert("UTC").dt.tz_localize(None) if aware else parsed
        micros = naive.to_numpy(dtype="datetime64[us]").astype(np.int64)
        seconds = micros / 1e6
        outside = (seconds < _FIRST) | (seconds > _LAST)
        if outside.any():
            row = int(np.flatnonzero(outside)[0])
            raise DataError(
                f"{self.file}: line {lines[row]:,}, column '{cell(self.column)}': '{cell(text.iloc[row])}' is outside "
                "the years 1678..2261; fix the value"
            )
        return seconds

    def _choose(self, first: str, line: int) -> None:
        self.first_line = line
        if self.fixed is None and _is_number(first):
            self.chosen = "seconds"
            return
        candidates = [self.fixed] if self.fixed else list(self.formats)
        for fmt in candidates:
            try:
                value = pd.to_datetime(pd.Series([first], dtype=object), format=fmt, errors="coerce")
            except (ValueError, TypeError, OverflowError):
                continue
            if not value.isna().iloc[0]:
                self.chosen = fmt
                return
        listed = ", ".join(_describe(f) for f in candidates)
        hint = "fix dataset.time_format" if self.fixed else "set dataset.time_format to its strftime format"
        raise DataError(
            f"{self.file}: line {line:,}, column '{cell(self.column)}': '{cell(first)}' is not a time in the format "
            f"{listed}; {hint}"
        )


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return "_" not in text


def localize(wall: FloatArray, tz: ZoneInfo, file: Path, column: str, lines: NDArray[np.int64]) -> FloatArray:
    """Seconds since the epoch of wall-clock seconds in time zone ``tz``.

    Raises
    ------
    DataError
        At the first time that does not exist or is ambiguous in ``tz`` (daylight-saving changes).
    """
    if str(tz) == "UTC":
        return wall
    stamps = pd.to_datetime(pd.Series(wall), unit="s")
    local = stamps.dt.tz_localize(tz, ambiguous="NaT", nonexistent="NaT")
    bad = local.isna().to_numpy()
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise DataError(
            f"{file}: line {lines[row]:,}, column '{cell(column)}': {stamps.iloc[row]} does not exist or is ambiguous "
            f"in time zone {tz} (a daylight-saving change); write times with a UTC offset or set dataset.timezone"
        )
    return np.asarray((local.dt.tz_convert("UTC") - _EPOCH_UTC) / pd.Timedelta(seconds=1), dtype=np.float64)


def check_increasing(values: FloatArray, file: Path, column: str, lines: NDArray[np.int64]) -> None:
    """Raise :class:`DataError` at the first time that goes backwards."""
    back = np.flatnonzero(np.diff(values) < 0)
    if back.size:
        row = int(back[0]) + 1
        raise DataError(
            f"{file}: line {lines[row]:,}, column '{cell(column)}': time goes backwards (line {lines[row - 1]:,} "
            "is later); sort the file by time"
        )
