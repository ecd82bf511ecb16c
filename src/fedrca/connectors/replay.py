"""Recorded datasets replayed as live sensor streams: TEP, HAI, SWaT and generic CSV.

A loader turns a file into a :class:`ReplayDataset` (numeric sensor frame, per-row
timestamps in seconds, optional attack labels); :func:`replay` writes one sensors
message ``{"site","plant","ts","seq","values"}`` per plant and row to a
:class:`Sink`, paced by a :class:`Pacer` (as fast as possible, real time or
x N). Sinks block when their consumer is behind (Kafka's producer buffer, a
bounded queue), so the replay slows down instead of dropping rows.

Formats
-------
* **TEP** ``dNN.dat`` / ``dNN_te.dat`` (whitespace-separated, 52 columns; ``d00.dat``
  is stored transposed): :func:`load_tep_replay`.
* **HAI** 20.07 / 21.03: first column ``time`` (or ``timestamp``), tags ``P1_*`` ..
  ``P4_*``, label columns ``attack``, ``attack_P1``, ``attack_P2``, ``attack_P3``;
  22.04 / 23.05: first column ``timestamp``, no label column, labels in a separate
  CSV with ``timestamp`` / ``label``: :func:`load_hai`.
* **SWaT** (A1/A2, Dec 2015): first column ``" Timestamp"`` (leading space, as are some
  tag names such as ``" MV101"``), day-first 12-hour times, tags ``FIT101`` ..
  ``P603`` whose first digit is the stage, label column ``Normal/Attack`` with
  ``Normal`` / ``Attack`` and misspellings such as ``A ttack``: :func:`load_swat`.
* **Generic CSV** with a time column, label columns and plant rules from the
  configuration: :func:`load_csv`.

Delimiters (``,``, ``;``, tab) are detected from the header line; ``.gz`` files
are read directly. Dated timestamps without a zone are taken as UTC.

Examples
--------
>>> data = load_tep_replay("data/tep/d04_te.dat")
>>> data.frame.shape, data.timestamps[:3].tolist()
((960, 52), [0.0, 180.0, 360.0])
>>> int(data.labels["attack"].sum())  # fault 04 is introduced after sample 160
800
>>> sink = ListSink()
>>> stats = replay(data, {"reactor": ["XMEAS(9)", "XMEAS(21)"]}, sink, site="tep", stop=2)
>>> stats.rows, sink.messages[1][1]["seq"], len(sink.messages[1][1]["values"])
(2, 1, 2)
"""

from __future__ import annotations

import gzip
import math
import queue
import re
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from fedrca.config import ColumnMatch, SiteConfig, group_columns
from fedrca.contracts import SensorMessage
from fedrca.datasets.tep import TEP_FAULT_ONSET, TEP_SAMPLE_SECONDS, load_tep
from fedrca.exceptions import ConfigError, DataError

__all__ = [
    "HAI_LABEL_COLUMNS",
    "ListSink",
    "Pacer",
    "QueueSink",
    "ReplayDataset",
    "ReplayStats",
    "Sink",
    "group_columns",
    "load_csv",
    "load_for_config",
    "load_hai",
    "load_swat",
    "load_tep_replay",
    "progress_printer",
    "replay",
    "swat_stage",
]

FloatArray = NDArray[np.float64]

#: Label columns of HAI 20.07 / 21.03 (overall, then per process P1..P3).
HAI_LABEL_COLUMNS = ("attack", "attack_P1", "attack_P2", "attack_P3")
_HAI_TIME = ("time", "timestamp")
_SWAT_TIME_FORMAT = "%d/%m/%Y %I:%M:%S %p"
_SEPARATORS = (",", ";", "\t")


# -- the dataset ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReplayDataset:
    """A recorded file ready for replay.

    Attributes
    ----------
    frame : pandas.DataFrame
        (T, D) float64 sensor columns (names stripped of surrounding spaces), index 0..T-1.
    timestamps : ndarray
        (T,) seconds, non-decreasing: seconds since the epoch (UTC) for dated formats,
        ``row * sample_seconds`` for TEP and CSV files without a time column.
    labels : pandas.DataFrame or None
        (T, K) int8 0/1: column ``attack`` (any attack or fault) and, when the format has
        them, per-stage columns (HAI 20.07/21.03: ``attack_P1``, ``attack_P2``, ``attack_P3``).
    source : str
        The file it came from.
    format : str
        ``tep``, ``hai``, ``swat`` or ``csv``.
    """

    frame: pd.DataFrame
    timestamps: FloatArray
    labels: pd.DataFrame | None
    source: str
    format: str

    def __post_init__(self) -> None:
        if len(self.timestamps) != len(self.frame) or (self.labels is not None and len(self.labels) != len(self.frame)):
            raise DataError(f"{self.source}: frame, timestamps and labels must have the same number of rows")

    @property
    def rows(self) -> int:
        """Number of rows (samples) T."""
        return len(self.frame)

    @property
    def columns(self) -> list[str]:
        """Sensor column names in file order."""
        return [str(c) for c in self.frame.columns]

    @property
    def attack(self) -> NDArray[np.int8] | None:
        """(T,) overall 0/1 label, or None when the file has no labels."""
        return None if self.labels is None else self.labels["attack"].to_numpy(np.int8)


# -- reading helpers --------------------------------------------------------------------------
def _open_text(file: Path) -> Any:
    if file.suffix == ".gz":
        return gzip.open(file, "rt", encoding="utf-8", errors="replace", newline="")
    return open(file, encoding="utf-8", errors="replace", newline="")


def _sniff(file: Path, is_header: Callable[[list[str]], bool], what: str, scan: int = 20) -> tuple[int, str]:
    """(0-based line of the header, delimiter): the first non-blank line accepted by ``is_header``."""
    if not file.is_file():
        raise DataError(f"{file}: no such file; pass the path of a {what} file")
    with _open_text(file) as handle:
        for number in range(scan):
            line = handle.readline()
            if not line:
                break
            stripped = line.strip().lstrip("\ufeff")
            if not stripped.strip(",;\t "):
                continue  # blank or only delimiters (spreadsheet exports)
            sep = max(_SEPARATORS, key=stripped.count)
            fields = [f.strip().strip('"') for f in stripped.split(sep)]
            if is_header(fields):
                return number, sep
    raise DataError(f"{file}: no {what} header line found in the first {scan} lines; is this a {what} file?")


def _read_table(file: Path, header_line: int, sep: str) -> pd.DataFrame:
    try:
        with warnings.catch_warnings():
            # a first data line longer than the header would silently become the index
            warnings.simplefilter("error", pd.errors.ParserWarning)
            frame = pd.read_csv(
                file,
                sep=sep,
                skiprows=header_line,
                index_col=False,
                skipinitialspace=True,
                skip_blank_lines=False,  # keeps data row i on line header_line + 2 + i
                keep_default_na=False,  # only empty cells are missing; 'n/a', 'null' ... are reported as text
                na_values=[""],
                low_memory=False,
                encoding="utf-8-sig",
            )
    except (pd.errors.ParserError, pd.errors.ParserWarning, UnicodeDecodeError, ValueError) as exc:
        raise DataError(
            f"{file}: not a well-formed CSV file ({str(exc).strip()}); every line needs the header's fields"
        ) from None
    frame.columns = [str(c).strip() for c in frame.columns]
    dupes = sorted({c for c in frame.columns if list(frame.columns).count(c) > 1})
    if dupes:
        raise DataError(f"{file}: duplicate column(s) {', '.join(dupes)} in the header; column names must be unique")
    # trailing empty lines are not data
    filled = frame.notna().any(axis=1).to_numpy()
    last = int(np.flatnonzero(filled)[-1]) + 1 if filled.any() else 0
    frame = frame.iloc[:last].reset_index(drop=True)
    if frame.empty:
        raise DataError(f"{file}: the header has no data rows below it")
    return frame


def _line(header_line: int, row: int) -> int:
    return header_line + 2 + row


def _numeric(frame: pd.DataFrame, columns: list[str], file: Path, header_line: int) -> pd.DataFrame:
    """The columns as float64; the first non-numeric or missing cell is reported by line and column."""
    out = {}
    for column in columns:
        series = frame[column]
        if not pd.api.types.is_numeric_dtype(series) or pd.api.types.is_bool_dtype(series):
            coerced = pd.to_numeric(series.astype("string").str.strip(), errors="coerce")
            bad = coerced.isna() & series.notna()
            if bad.any():
                row = int(np.flatnonzero(bad.to_numpy())[0])
                raise DataError(
                    f"{file}: line {_line(header_line, row)}, column '{column}': '{series.iloc[row]}' is not a number; "
                    "fix the value or drop the line"
                )
            series = coerced
        out[column] = series.to_numpy(dtype=np.float64, na_value=np.nan)
    values = pd.DataFrame(out, columns=columns)
    finite = np.isfinite(values.to_numpy())
    if not finite.all():
        row, col = np.argwhere(~finite)[0]
        raise DataError(
            f"{file}: line {_line(header_line, int(row))}, column '{columns[col]}': missing or non-finite value; "
            "fill it or drop the line"
        )
    return values


def _seconds(
    series: pd.Series,
    file: Path,
    column: str,
    header_line: int,
    formats: Sequence[str | None] = ("ISO8601",),
    dayfirst: bool = False,
) -> FloatArray:
    """Timestamps as float seconds: numbers as they are, dates as seconds since the epoch (UTC)."""
    if pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series):
        values = series.to_numpy(dtype=np.float64, na_value=np.nan)
        bad = ~np.isfinite(values)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise DataError(f"{file}: line {_line(header_line, row)}, column '{column}': missing time value")
    else:
        text = series.astype("string").str.strip()
        parsed = None
        for fmt in (*formats, "mixed"):
            try:
                parsed = pd.to_datetime(text, format=fmt, dayfirst=dayfirst, utc=True)
                break
            except (ValueError, TypeError):
                continue
        if parsed is None:
            parsed = pd.to_datetime(text, format="mixed", dayfirst=dayfirst, utc=True, errors="coerce")
            row = int(np.flatnonzero(parsed.isna().to_numpy())[0])
            raise DataError(
                f"{file}: line {_line(header_line, row)}, column '{column}': '{series.iloc[row]}' is not a date/time; "
                "fix the value or drop the line"
            )
        missing = parsed.isna().to_numpy()
        if missing.any():
            row = int(np.flatnonzero(missing)[0])
            raise DataError(f"{file}: line {_line(header_line, row)}, column '{column}': missing time value")
        epoch = pd.Timestamp(0, tz="UTC")
        values = ((parsed - epoch) / pd.Timedelta(seconds=1)).to_numpy(dtype=np.float64)
    back = np.flatnonzero(np.diff(values) < 0)
    if back.size:
        row = int(back[0]) + 1
        raise DataError(
            f"{file}: line {_line(header_line, row)}, column '{column}': time goes backwards "
            f"('{series.iloc[row]}' after '{series.iloc[row - 1]}'); sort the file by time"
        )
    return values


def _binary(series: pd.Series, file: Path, column: str, header_line: int) -> NDArray[np.int8]:
    values = pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isin(values, (0.0, 1.0))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise DataError(
            f"{file}: line {_line(header_line, row)}, column '{column}': label '{series.iloc[row]}' is not 0 or 1"
        )
    return values.astype(np.int8)


def _dataset(file: Path, fmt: str, frame: pd.DataFrame, ts: FloatArray, labels: pd.DataFrame | None) -> ReplayDataset:
    frame = frame.reset_index(drop=True)
    if labels is not None:
        labels = labels.reset_index(drop=True)
    return ReplayDataset(frame, np.ascontiguousarray(ts, dtype=np.float64), labels, str(file), fmt)


# -- TEP --------------------------------------------------------------------------------------
def load_tep_replay(path: str | Path, sample_seconds: float = TEP_SAMPLE_SECONDS) -> ReplayDataset:
    """A TEP ``.dat`` file (transposed ``d00.dat`` included) with ``ts = row * sample_seconds``.

    Labels: ``d00*.dat`` all 0; ``dNN_te.dat`` (NN > 0) 1 from sample :data:`TEP_FAULT_ONSET`
    on; other names have no labels.
    """
    file = Path(path)
    frame = load_tep(file)
    T = len(frame)
    labels = None
    match = re.fullmatch(r"d(\d\d)(_te)?\.dat", file.name)
    if match is not None:
        fault = int(match.group(1))
        if fault == 0:
            labels = pd.DataFrame({"attack": np.zeros(T, dtype=np.int8)})
        elif match.group(2):
            labels = pd.DataFrame({"attack": (np.arange(T) >= TEP_FAULT_ONSET).astype(np.int8)})
    return _dataset(file, "tep", frame, np.arange(T, dtype=np.float64) * float(sample_seconds), labels)


# -- HAI --------------------------------------------------------------------------------------
def _is_label(column: str) -> bool:
    low = column.lower()
    return low == "attack" or low.startswith("attack_")


def load_hai(path: str | Path, labels_path: str | Path | None = None) -> ReplayDataset:
    """A HAI CSV file (20.07/21.03 with label columns, or 22.04/23.05 with a separate label file).

    Parameters
    ----------
    path : the data file (``.csv`` or ``.csv.gz``; ``,`` or ``;`` separated)
    labels_path : for 22.04/23.05, the label CSV (``timestamp``, ``label``) matched to the data
        by timestamp; must not be given when the data file has its own label columns

    Raises
    ------
    DataError
        Naming the file, line and column, and the fix.
    """
    file = Path(path)
    header, sep = _sniff(file, lambda f: bool(f) and f[0].lower() in _HAI_TIME, "HAI CSV (first column time/timestamp)")
    table = _read_table(file, header, sep)
    time_col = table.columns[0]
    label_cols = [c for c in table.columns[1:] if _is_label(c)]
    sensors = [c for c in table.columns[1:] if not _is_label(c)]
    if not sensors:
        raise DataError(f"{file}: no sensor columns after '{time_col}'; a HAI file has tags P1_* .. P4_*")
    ts = _seconds(table[time_col], file, time_col, header)
    frame = _numeric(table, sensors, file, header)
    labels = None
    if label_cols:
        if labels_path is not None:
            raise DataError(
                f"{file}: has label columns ({', '.join(label_cols)}) and a separate label file {labels_path} was "
                "given; drop the label file (20.07/21.03 files carry their labels)"
            )
        names = {c: ("attack" if c.lower() == "attack" else "attack_" + c.split("_", 1)[1]) for c in label_cols}
        labels = pd.DataFrame({names[c]: _binary(table[c], file, c, header) for c in label_cols})
        if "attack" not in labels:
            labels.insert(0, "attack", labels.max(axis=1).astype(np.int8))
    elif labels_path is not None:
        labels = pd.DataFrame({"attack": _hai_label_file(Path(labels_path), ts, file)})
    return _dataset(file, "hai", frame, ts, labels)


def _hai_label_file(file: Path, data_ts: FloatArray, data_file: Path) -> NDArray[np.int8]:
    """Labels of a 22.04/23.05 label CSV (``timestamp``, ``label``) aligned to the data's timestamps."""
    header, sep = _sniff(file, lambda f: bool(f) and f[0].lower() in _HAI_TIME, "HAI label CSV (timestamp, label)")
    table = _read_table(file, header, sep)
    time_col = table.columns[0]
    label_col = next((c for c in table.columns[1:] if c.lower() in ("label", "attack")), None)
    if label_col is None:
        raise DataError(
            f"{file}: no 'label' column (columns are {', '.join(table.columns)}); "
            "a HAI label file has columns timestamp,label"
        )
    ts = _seconds(table[time_col], file, time_col, header)
    values = _binary(table[label_col], file, label_col, header)
    unique, counts = np.unique(ts, return_counts=True)
    if (counts > 1).any():
        dup = unique[counts > 1][0]
        row = int(np.flatnonzero(ts == dup)[1])
        raise DataError(
            f"{file}: line {_line(header, row)}: timestamp '{table[time_col].iloc[row]}' appears twice; "
            "a label file has one line per timestamp"
        )
    position = np.searchsorted(ts, data_ts)
    found = (position < len(ts)) & (ts[np.minimum(position, len(ts) - 1)] == data_ts)
    if not found.all():
        row = int(np.flatnonzero(~found)[0])
        when = pd.Timestamp(data_ts[row], unit="s", tz="UTC").strftime("%Y-%m-%d %H:%M:%S")
        raise DataError(
            f"{file}: no label for {when} (data row {row + 1} of {data_file}); the label file covers "
            f"{table[time_col].iloc[0]} .. {table[time_col].iloc[-1]}; pass the label file of this data file"
        )
    return values[position]


# -- SWaT -------------------------------------------------------------------------------------
def swat_stage(tag: str) -> int:
    """The SWaT process stage (1..6) of a tag: the first digit of its three-digit number.

    Examples
    --------
    >>> swat_stage("FIT101"), swat_stage(" AIT201"), swat_stage("DPIT301"), swat_stage("P603")
    (1, 2, 3, 6)
    """
    match = re.search(r"(\d)\d\d$", tag.strip())
    if match is None:
        raise DataError(f"'{tag}' is not a SWaT tag (letters then a three-digit number such as FIT101)")
    return int(match.group(1))


def _swat_label(value: Any) -> int:
    word = re.sub(r"\s+", "", str(value)).lower()
    return {"normal": 0, "attack": 1}.get(word, -1)


def load_swat(path: str | Path) -> ReplayDataset:
    """A SWaT CSV file (``" Timestamp"``, tags, ``Normal/Attack``).

    Column names and values are stripped of surrounding spaces; labels are matched
    ignoring case and spaces (``A ttack`` is ``Attack``); leading blank lines before
    the header (spreadsheet exports) are skipped.
    """
    file = Path(path)
    header, sep = _sniff(file, lambda f: any(x.lower() == "timestamp" for x in f), "SWaT CSV (' Timestamp' column)")
    table = _read_table(file, header, sep)
    time_col = next(c for c in table.columns if c.lower() == "timestamp")
    label_col = next((c for c in table.columns if re.sub(r"\s+", "", c).lower() == "normal/attack"), None)
    sensors = [c for c in table.columns if c not in (time_col, label_col)]
    if not sensors:
        raise DataError(f"{file}: no tag columns besides '{time_col}'; a SWaT file has tags such as FIT101, LIT101")
    ts = _seconds(table[time_col], file, time_col, header, formats=(_SWAT_TIME_FORMAT, "ISO8601"), dayfirst=True)
    frame = _numeric(table, sensors, file, header)
    labels = None
    if label_col is not None:
        coded = np.fromiter((_swat_label(v) for v in table[label_col].to_numpy()), dtype=np.int8, count=len(table))
        if (coded < 0).any():
            row = int(np.flatnonzero(coded < 0)[0])
            raise DataError(
                f"{file}: line {_line(header, row)}, column '{label_col}': label '{table[label_col].iloc[row]}' is "
                "neither Normal nor Attack; fix the value"
            )
        labels = pd.DataFrame({"attack": coded})
    return _dataset(file, "swat", frame, ts, labels)


# -- generic CSV ------------------------------------------------------------------------------
def load_csv(
    path: str | Path,
    time_column: str | None = None,
    sample_seconds: float = 1.0,
    label_columns: Sequence[str] = (),
    time_format: str | None = None,
) -> ReplayDataset:
    """A CSV file with a header: optional time column, optional 0/1 label columns, numeric sensors.

    Parameters
    ----------
    path : the file (``,``, ``;`` or tab separated; ``.gz`` allowed)
    time_column : numeric seconds or dates; None = ``row * sample_seconds``
    sample_seconds : sampling interval when there is no time column
    label_columns : 0/1 label columns (the first becomes ``attack`` unless one is named so)
    time_format : ``strftime`` format of the dates (default: ISO 8601, then inferred)
    """
    file = Path(path)
    header, sep = _sniff(file, lambda f: len([x for x in f if x]) >= 1, "CSV")
    table = _read_table(file, header, sep)
    for kind, wanted in (("time column", [time_column] if time_column else []), ("label column", label_columns)):
        missing = [c for c in wanted if c not in table.columns]
        if missing:
            raise DataError(
                f"{file}: no {kind} {', '.join(repr(c) for c in missing)}; the header has {', '.join(table.columns)}; "
                "fix dataset.time_column / dataset.label_columns in the configuration"
            )
    sensors = [c for c in table.columns if c != time_column and c not in label_columns]
    if time_column:
        formats: tuple[str | None, ...] = (time_format,) if time_format else ("ISO8601",)
        ts = _seconds(table[time_column], file, time_column, header, formats=formats)
    else:
        ts = np.arange(len(table), dtype=np.float64) * float(sample_seconds)
    frame = _numeric(table, sensors, file, header)
    labels = None
    if label_columns:
        labels = pd.DataFrame({c: _binary(table[c], file, c, header) for c in label_columns})
        if "attack" not in labels:
            labels.insert(0, "attack", labels.max(axis=1).astype(np.int8))
    return _dataset(file, "csv", frame, ts, labels)


def load_for_config(config: SiteConfig, path: str | Path, labels_path: str | Path | None = None) -> ReplayDataset:
    """Load a recorded file in the configuration's ``dataset`` format."""
    ds = config.dataset
    if ds.format == "tep":
        return load_tep_replay(path, sample_seconds=ds.sample_seconds)
    if labels_path is not None and ds.format != "hai":
        raise ConfigError(f"a separate label file is only read for HAI 22.04/23.05 data, not for '{ds.format}'")
    if ds.format == "hai":
        return load_hai(path, labels_path=labels_path)
    if ds.format == "swat":
        return load_swat(path)
    return load_csv(path, ds.time_column, ds.sample_seconds, label_columns=ds.label_columns)


# -- sinks ------------------------------------------------------------------------------------
class Sink(Protocol):
    """Where replayed messages go; ``send`` blocks while the consumer is behind (back-pressure)."""

    def send(self, message: SensorMessage) -> None:
        """Deliver (or queue) one sensors message."""


@dataclass
class ListSink:
    """In-process sink keeping the messages in order (the embedded default, tests)."""

    messages: list[SensorMessage] = field(default_factory=list)

    def send(self, message: SensorMessage) -> None:
        """Append one message."""
        self.messages.append(message)


class QueueSink:
    """A bounded in-process queue: ``send`` blocks while the queue is full (back-pressure)."""

    def __init__(self, maxsize: int, timeout: float | None = None) -> None:
        self.queue: queue.Queue[SensorMessage] = queue.Queue(maxsize=maxsize)
        self.timeout = timeout

    def send(self, message: SensorMessage) -> None:
        """Put one message, waiting for room (DataError after ``timeout`` seconds, if set)."""
        try:
            self.queue.put(message, block=True, timeout=self.timeout)
        except queue.Full:
            raise DataError(f"the consumer took no message for {self.timeout} s; is it still running?") from None


# -- pacing -----------------------------------------------------------------------------------
class Pacer:
    """Releases rows at their recorded time scaled by ``speed`` (None = as fast as possible).

    The schedule is absolute (row time relative to the first row), so time lost while a
    sink blocks is caught up rather than accumulated; rows are never skipped. ``clock``
    and ``sleep`` are injectable for tests.

    Examples
    --------
    >>> now = [0.0]
    >>> pacer = Pacer(60.0, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    >>> pacer.begin(1000.0)
    >>> pacer.wait(1000.0), pacer.wait(1180.0)  # 180 s of data at x60 = 3 s
    (0.0, 3.0)
    """

    def __init__(
        self,
        speed: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if speed is not None and not (speed > 0 and math.isfinite(speed)):
            raise ConfigError(f"replay speed must be a positive factor, got {speed}")
        self.speed = speed
        self._clock = clock
        self._sleep = sleep
        self._t0 = 0.0
        self._w0 = 0.0
        self.slept = 0.0
        self.max_lag = 0.0

    @classmethod
    def from_spec(cls, spec: str | float | None, **kwargs: Any) -> Pacer:
        """``"asap"`` (also ``"max"``), ``"realtime"`` (= ``"x1"``) or ``"xN"`` such as ``"x60"``.

        Examples
        --------
        >>> Pacer.from_spec("x60").speed, Pacer.from_spec("realtime").speed, Pacer.from_spec("asap").speed
        (60.0, 1.0, None)
        """
        if spec is None:
            return cls(None, **kwargs)
        if isinstance(spec, int | float):
            return cls(float(spec), **kwargs)
        text = str(spec).strip().lower()
        if text in ("asap", "max", "fast", "fastest"):
            return cls(None, **kwargs)
        if text in ("realtime", "real-time", "real"):
            return cls(1.0, **kwargs)
        match = re.fullmatch(r"x?(\d+(?:\.\d*)?|\.\d+)x?", text)
        if match is None or float(match.group(1)) <= 0:
            raise ConfigError(f"unknown replay speed '{spec}'; use asap, realtime, or xN such as x60")
        return cls(float(match.group(1)), **kwargs)

    def begin(self, t0: float) -> None:
        """Anchor the schedule: data time ``t0`` is released now."""
        self._t0 = t0
        self._w0 = self._clock()

    def wait(self, t: float) -> float:
        """Sleep until data time ``t`` is due; returns the seconds slept (0 when late or asap)."""
        if self.speed is None:
            return 0.0
        delay = self._w0 + (t - self._t0) / self.speed - self._clock()
        if delay <= 0:
            self.max_lag = max(self.max_lag, -delay)
            return 0.0
        self._sleep(delay)
        self.slept += delay
        return delay


# -- replay -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReplayStats:
    """What one replay sent."""

    rows: int
    messages: int
    first_row: int
    stop_row: int
    seconds: float
    slept: float
    max_lag: float


def replay(
    dataset: ReplayDataset,
    groups: Mapping[str, Sequence[str]] | Mapping[str, ColumnMatch],
    sink: Sink,
    *,
    site: str,
    pacer: Pacer | None = None,
    start: int = 0,
    stop: int | None = None,
    chunk: int = 4096,
    progress: Callable[[int, int], None] | None = None,
) -> ReplayStats:
    """Send rows ``start..stop-1`` as one sensors message per plant and row.

    Parameters
    ----------
    dataset : the loaded file
    groups : plant -> its sensor columns in message order (or plant -> :class:`ColumnMatch` rule)
    sink : receives one :class:`~fedrca.contracts.SensorMessage` per plant and row; ``seq`` is the
        row number in the file, ``ts`` the row's timestamp in seconds; ``flush()`` is called at the end
        when the sink has it (a :class:`~fedrca.connectors.kafka.KafkaSink` then raises if
        anything was not delivered)
    site : the site name written into every message
    pacer : release schedule (default: as fast as possible)
    start, stop : row range (``stop`` None = to the end)
    chunk : rows between two progress reports
    progress : called as ``progress(rows_done, rows_total)`` after each chunk

    Raises
    ------
    DataError
        When a plant's column is not in the file or the row range is empty.
    """
    T = dataset.rows
    stop = T if stop is None else stop
    if not 0 <= start < stop <= T:
        raise DataError(f"{dataset.source}: row range {start}..{stop} is empty or outside the file's 0..{T} rows")
    plants = _plant_columns(dataset, groups)
    pacer = pacer or Pacer(None)
    arrays = {p: dataset.frame[cols].to_numpy(dtype=np.float64) for p, cols in plants.items()}
    ts = dataset.timestamps
    messages = 0
    started = time.perf_counter()
    pacer.begin(float(ts[start]))
    for lo in range(start, stop, chunk):
        hi = min(stop, lo + chunk)
        times = ts[lo:hi].tolist()
        for i, t in enumerate(times):
            pacer.wait(t)
            seq = lo + i
            for plant, values in arrays.items():
                sink.send(SensorMessage(site, plant, t, seq, values[seq]))
            messages += len(arrays)
        if progress is not None:
            progress(hi - start, stop - start)
    flush = getattr(sink, "flush", None)
    if callable(flush):
        flush()
    return ReplayStats(
        rows=stop - start,
        messages=messages,
        first_row=start,
        stop_row=stop,
        seconds=time.perf_counter() - started,
        slept=pacer.slept,
        max_lag=pacer.max_lag,
    )


def _plant_columns(
    dataset: ReplayDataset, groups: Mapping[str, Sequence[str]] | Mapping[str, ColumnMatch]
) -> dict[str, list[str]]:
    if not groups:
        raise DataError("no plants to replay; give at least one plant and its columns")
    rules = {p: g for p, g in groups.items() if isinstance(g, ColumnMatch)}
    resolved = group_columns(dataset.columns, rules) if rules else {}
    out: dict[str, list[str]] = {}
    have = set(dataset.columns)
    for plant, cols in groups.items():
        names = resolved[plant] if plant in rules else [str(c) for c in cols]
        missing = [c for c in names if c not in have]
        if missing:
            raise DataError(
                f"{dataset.source}: plant '{plant}' needs column(s) {', '.join(missing)}, which the file does not "
                "have; check the plant's sensors in the configuration"
            )
        if not names:
            raise DataError(f"plant '{plant}' has no columns to replay")
        out[plant] = names
    return out


def progress_printer(label: str = "replay", stream: Any = None, every: float = 1.0) -> Callable[[int, int], None]:
    """A throttled one-line progress display on stderr."""
    last = [0.0]
    out = stream or sys.stderr

    def show(done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - last[0] < every:
            return
        last[0] = now
        out.write(f"\r{label}: {done}/{total} rows ({100 * done / max(total, 1):.0f}%)")
        if done >= total:
            out.write("\n")
        out.flush()

    return show
