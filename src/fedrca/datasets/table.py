"""Delimited tables (CSV, ``;``- or tab-separated) read in bounded chunks.

:func:`read_table` finds the header line, checks every line's field count against
it, and parses the data in chunks of at most :data:`CHUNK_CHARS` characters with
pandas' C parser, so the memory used besides the result is bounded whatever the
file holds. Sensor columns become float64; columns the caller names (times,
labels) go through the caller's converter chunk by chunk.

Rules (each violation is one :class:`DataError` line naming the file, the line,
the column and the fix):

* the delimiter is the most frequent of ``,`` ``;`` tab in the header line;
* header names are stripped of spaces and quotes; empty or duplicate names are refused
  (empty trailing names, as spreadsheets write them, are dropped);
* blank lines and lines of delimiters only are skipped anywhere;
* every line has the header's number of fields (extra *empty* trailing fields are ignored);
* numbers use ``.`` as decimal mark, or ``,`` in ``;``/tab-separated files when the first
  chunk shows decimal commas (``168,563``); one mark per file, digit grouping
  (``1,234.5``) is refused, as are text and infinities, and empty cells and the
  :data:`MISSING_TOKENS` unless the configuration allows missing values
  (``dataset.missing: allow``: they become NaN, docs/missing.md);
* at most :data:`MAX_COLUMNS` columns and :data:`MAX_VALUES` values.
"""

from __future__ import annotations

import csv
import io
import itertools
import re
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from fedrca.datasets.text import open_line_blocks
from fedrca.exceptions import DataError

__all__ = [
    "CHUNK_CHARS",
    "MAX_COLUMNS",
    "MAX_VALUES",
    "MISSING_TOKENS",
    "ColumnParser",
    "Table",
    "cell",
    "read_table",
    "split_fields",
]

#: Characters of data lines parsed at a time.
CHUNK_CHARS = 4 << 20
#: Cells that mean "no value" (compared stripped and lower-cased), besides an empty cell: NaN when
#: missing values are allowed, else refused like an empty cell.
MISSING_TOKENS = frozenset({"nan", "na", "n/a", "null", "none"})
#: Most columns a table may have.
MAX_COLUMNS = 10_000
#: Most values (rows x columns) a table may hold in memory (2 GiB of float64).
MAX_VALUES = 1 << 28

_SEPARATORS = (",", ";", "\t")
_DECIMAL_COMMA = re.compile(r"^[+-]?(\d+,\d*|,\d+)([eE][+-]?\d+)?$")

#: Converts one chunk of a text column: (cells as str or None, their file line numbers) -> values.
ColumnParser = Callable[[NDArray[np.object_], NDArray[np.int64]], NDArray[np.generic]]


@dataclass(frozen=True)
class Table:
    """A parsed table.

    Attributes
    ----------
    source : the file
    header_line : 1-based line number of the header
    sep : the delimiter
    decimal : the decimal mark of the numbers (``.`` or ``,``)
    columns : every column name in file order
    values : column -> (T,) array: float64 for number columns, the converter's output otherwise
    lines : (T,) 1-based file line of every row
    """

    source: Path
    header_line: int
    sep: str
    decimal: str
    columns: list[str]
    values: dict[str, NDArray[np.generic]]
    lines: NDArray[np.int64]

    @property
    def rows(self) -> int:
        """Number of data rows T."""
        return len(self.lines)

    def matrix(self, names: Sequence[str]) -> NDArray[np.float64]:
        """(T, len(names)) float64 of number columns."""
        if not names:
            return np.empty((self.rows, 0))
        return np.column_stack([self.values[n] for n in names]).astype(np.float64, copy=False)


def cell(value: object, width: int = 40) -> str:
    """A cell value fit for an error message: printable, one line, at most ``width`` characters.

    Examples
    --------
    >>> cell("n/a"), cell("a\\tb"), cell("x" * 60)[-5:]
    ('n/a', 'a\\\\tb', 'xx...')
    """
    text = str(value)
    text = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
    return text if len(text) <= width else text[: width - 3] + "..."


def _sniff_sep(line: str) -> str:
    counts = [line.count(s) for s in _SEPARATORS]
    best = max(range(len(_SEPARATORS)), key=lambda i: counts[i])
    return _SEPARATORS[best] if counts[best] else ","


def split_fields(line: str, sep: str, file: Path, number: int) -> list[str]:
    """The fields of one line (quotes removed, surrounding spaces kept)."""
    if '"' not in line:
        return line.split(sep)
    try:
        return next(csv.reader([line], delimiter=sep, quotechar='"', doublequote=True, strict=True))
    except (csv.Error, StopIteration) as exc:
        raise DataError(
            f"{file}: line {number:,}: badly quoted field ({cell(str(exc), 60)}); close every '\"' on its line"
        ) from None


def _is_blank(line: str, sep: str) -> bool:
    return not line.strip().strip(sep + " \t")


def _header(
    blocks: Iterator[tuple[int, list[str]]],
    file: Path,
    what: str,
    is_header: Callable[[list[str]], bool],
    scan: int,
) -> tuple[int, str, list[str], list[tuple[int, list[str]]]]:
    """(header line, delimiter, fields, the lines after the header in its block)."""
    seen = 0
    stopped = False
    for first, block in blocks:
        for k, line in enumerate(block):
            number = first + k
            if _is_blank(line, ",;\t"):
                if number >= scan:
                    stopped = True
                    break
                continue
            seen += 1
            sep = _sniff_sep(line)
            fields = [f.strip().strip('"').strip() for f in split_fields(line, sep, file, number)]
            if is_header(fields):
                return number, sep, fields, [(number + 1, block[k + 1 :])]
            if number >= scan:
                stopped = True
                break
        if stopped:
            break
    if seen == 0 and not stopped:
        raise DataError(f"{file}: no data (the file is empty or blank); a {what} file has a header line and data rows")
    if seen == 0:
        raise DataError(f"{file}: the first {scan} lines are blank; a {what} file starts with its header line")
    raise DataError(
        f"{file}: no {what} header line found in the first {scan} lines; is this a {what} file (and is the "
        "dataset.format right)?"
    )


def _check_names(names: list[str], file: Path, header_line: int) -> list[str]:
    while names and not names[-1]:
        names = names[:-1]
    for i, name in enumerate(names):
        if not name:
            after = f" after '{cell(names[i - 1])}'" if i else ""
            raise DataError(
                f"{file}: line {header_line}: column {i + 1}{after} has no name; give every column a name in the header"
            )
    seen: set[str] = set()
    dupes = []
    for name in names:
        if name in seen and name not in dupes:
            dupes.append(name)
        seen.add(name)
    if dupes:
        listed = ", ".join(f"'{cell(d)}'" for d in dupes[:5]) + (" ..." if len(dupes) > 5 else "")
        raise DataError(f"{file}: line {header_line}: duplicate column name(s) {listed}; column names must be unique")
    if len(names) > MAX_COLUMNS:
        raise DataError(
            f"{file}: line {header_line}: {len(names):,} columns, more than {MAX_COLUMNS:,}; is the delimiter right?"
        )
    return names


def read_table(
    path: str | Path,
    what: str,
    is_header: Callable[[list[str]], bool],
    parsers: Callable[[list[str]], Mapping[str, ColumnParser]],
    scan: int = 20,
    *,
    missing: bool = False,
) -> Table:
    """Read a delimited file in bounded chunks.

    Parameters
    ----------
    path : the file (plain or ``.gz``)
    what : what the file is, for messages (``"SWaT CSV"``)
    is_header : accepts the stripped fields of the header line (lines before it are skipped)
    parsers : called with the column names; returns converters of the non-number columns
        (it may raise :class:`DataError` when a required column is missing)
    scan : lines searched for the header
    missing : empty cells and :data:`MISSING_TOKENS` in number columns become NaN (else refused)

    Raises
    ------
    DataError
        One line naming the file, the line, the column and the fix.
    """
    file = Path(path)
    blocks = open_line_blocks(file, what)
    try:
        header_line, sep, raw_names, rest = _header(blocks, file, what, is_header, scan)
        names = _check_names(raw_names, file, header_line)
        converters = dict(parsers(names))
        reader = _ChunkReader(file, sep, names, converters, missing)
        chunk: list[str] = []
        numbers: list[int] = []
        size = 0
        for first, block in itertools.chain(rest, blocks):
            lines, kept = reader.fit_block(block, first)
            chunk += lines
            numbers += kept
            size += sum(map(len, lines)) + len(lines)
            while size >= CHUNK_CHARS:
                cut, taken = 0, 0
                while cut < len(chunk) and taken < CHUNK_CHARS:
                    taken += len(chunk[cut]) + 1
                    cut += 1
                reader.parse(chunk[:cut], numbers[:cut])
                chunk, numbers, size = chunk[cut:], numbers[cut:], size - taken
        if chunk:
            reader.parse(chunk, numbers)
    finally:
        blocks.close()  # type: ignore[attr-defined]
    if reader.rows == 0:
        raise DataError(f"{file}: the header (line {header_line}) has no data rows below it; the file holds no data")
    return Table(file, header_line, sep, reader.decimal, names, reader.result(), reader.line_numbers())


class _ChunkReader:
    """Field-count checks and chunk parsing for one table."""

    def __init__(
        self, file: Path, sep: str, names: list[str], converters: dict[str, ColumnParser], missing: bool = False
    ) -> None:
        self.file = file
        self.missing = missing
        self.sep = sep
        self.names = names
        self.converters = converters
        self.number_columns = [i for i, n in enumerate(names) if n not in converters]
        self.decimal: str = ""  # decided by the first chunk
        self.parts: dict[str, list[NDArray[np.generic]]] = {n: [] for n in names}
        self.line_parts: list[NDArray[np.int64]] = []
        self.rows = 0

    # -- lines ----------------------------------------------------------------------------
    def fit_block(self, block: list[str], first: int) -> tuple[list[str], list[int]]:
        """The block's data lines, each with the header's field count, and their line numbers.

        Lines with the header's number of delimiters and no quote pass at C speed; blank lines
        are dropped; the others are fitted one by one (:meth:`fit`).
        """
        sep, n1, blank = self.sep, len(self.names) - 1, self.sep + " \t"
        odd = [k for k, line in enumerate(block) if line.count(sep) != n1 or '"' in line or not line.strip(blank)]
        if not odd:
            return block, list(range(first, first + len(block)))
        lines = list(block)
        keep = [True] * len(block)
        for k in odd:
            if _is_blank(block[k], sep):
                keep[k] = False
            else:
                lines[k] = self.fit(block[k], first + k)
        return [x for x, ok in zip(lines, keep) if ok], [first + k for k, ok in enumerate(keep) if ok]

    def fit(self, line: str, number: int) -> str:
        """The line with exactly the header's number of fields (DataError otherwise)."""
        n = len(self.names)
        k = line.count(self.sep) + 1 if '"' not in line else len(split_fields(line, self.sep, self.file, number))
        if k == n:
            return line
        if k > n:
            fields = split_fields(line, self.sep, self.file, number)
            if all(not f.strip() for f in fields[n:]):
                trimmed = line.rstrip(self.sep + " \t")
                have = (
                    trimmed.count(self.sep) + 1
                    if '"' not in trimmed
                    else len(split_fields(trimmed, self.sep, self.file, number))
                )
                return trimmed + self.sep * (n - have)
        raise DataError(
            f"{self.file}: line {number:,} has {k} fields, the header has {n}; every line needs one value per "
            f"column (separated by '{_sep_name(self.sep)}')"
        )

    # -- chunks ---------------------------------------------------------------------------
    def _read(self, text: str, decimal: str) -> pd.DataFrame:
        dtypes = {i: object for i, name in enumerate(self.names) if name in self.converters}
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)
            return pd.read_csv(
                io.BytesIO(text.encode("utf-8")),
                sep=self.sep,
                header=None,
                names=list(range(len(self.names))),
                index_col=False,
                dtype=dtypes,
                engine="c",
                encoding="utf-8",
                quotechar='"',
                doublequote=True,
                keep_default_na=False,
                na_values=[""],
                skip_blank_lines=False,
                decimal=decimal,
                low_memory=False,
            )

    def parse(self, chunk: list[str], numbers: list[int]) -> None:
        """Parse one chunk of fitted lines and keep its columns."""
        lines = np.asarray(numbers, dtype=np.int64)
        if self.rows + len(chunk) > MAX_VALUES // max(len(self.names), 1):
            raise DataError(
                f"{self.file}: more than {MAX_VALUES:,} values (line {numbers[-1]:,}); split the file into parts"
            )
        text = "\n".join(chunk)
        try:
            frame = self._read(text, self.decimal or ".")
            if not self.decimal:
                self.decimal = self._decide_decimal(frame)
                if self.decimal == ",":
                    frame = self._read(text, ",")
        except DataError:
            raise
        except (ValueError, OverflowError, pd.errors.ParserError, pd.errors.ParserWarning, csv.Error) as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise DataError(
                f"{self.file}: lines {numbers[0]:,}..{numbers[-1]:,} cannot be parsed ({cell(reason, 80)}); "
                "check the quotes and delimiters there"
            ) from None
        if len(frame) != len(chunk):
            raise DataError(
                f"{self.file}: lines {numbers[0]:,}..{numbers[-1]:,} parse into {len(frame)} rows, not {len(chunk)}; "
                "check the quotes there"
            )
        for i, name in enumerate(self.names):
            series = frame[i]
            converter = self.converters.get(name)
            if converter is not None:
                strings = series.to_numpy(dtype=object, na_value=None)
                self.parts[name].append(converter(strings, lines))
            else:
                self.parts[name].append(self._numbers(series, name, lines))
        self.line_parts.append(lines)
        self.rows += len(chunk)

    def _decide_decimal(self, frame: pd.DataFrame) -> str:
        if self.sep == ",":
            return "."
        for i in self.number_columns:
            series = frame[i]
            if pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series):
                continue
            for value in series.to_numpy(dtype=object, na_value=None):
                if value is not None and _DECIMAL_COMMA.match(str(value).strip()):
                    return ","
        return "."

    def _numbers(self, series: pd.Series, name: str, lines: NDArray[np.int64]) -> NDArray[np.float64]:
        if pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series):
            values = series.to_numpy(dtype=np.float64, na_value=np.nan)
        else:
            raw = series.to_numpy(dtype=object, na_value=None)
            text = pd.Series([None if v is None else str(v).strip() for v in raw], dtype=object)
            if self.decimal == ",":
                dotted = text.str.contains(".", regex=False, na=False).to_numpy()
                if dotted.any():
                    row = int(np.flatnonzero(dotted)[0])
                    raise DataError(
                        f"{self.file}: line {lines[row]:,}, column '{cell(name)}': '{cell(raw[row])}' has a '.' in a "
                        "file with decimal commas; use one decimal mark and no digit grouping"
                    )
                text = text.str.replace(",", ".", regex=False)
            values = pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
            # an empty cell or a missing token is a missing value (NaN), refused below unless allowed
            given = (
                text.notna().to_numpy() & (text.to_numpy() != "") & ~text.str.lower().isin(MISSING_TOKENS).to_numpy()
            )
            bad = np.isnan(values) & given
            if bad.any():
                row = int(np.flatnonzero(bad)[0])
                value = cell(raw[row])
                hint = "fix the value or drop the line"
                if "," in value or ("." in value and self.decimal == ","):
                    hint = "numbers take one decimal mark and no digit grouping (1234.5)"
                raise DataError(
                    f"{self.file}: line {lines[row]:,}, column '{cell(name)}': '{value}' is not a number; {hint}"
                )
        finite = np.isfinite(values) | (self.missing & np.isnan(values))
        if not finite.all():
            row = int(np.flatnonzero(~finite)[0])
            if np.isnan(values[row]):
                raise DataError(
                    f"{self.file}: line {lines[row]:,}, column '{cell(name)}': missing value; fill it or drop the "
                    "line, or set dataset.missing: allow to score the values that are there"
                )
            raise DataError(f"{self.file}: line {lines[row]:,}, column '{cell(name)}': non-finite value; fix the value")
        return values

    # -- result ---------------------------------------------------------------------------
    def result(self) -> dict[str, NDArray[np.generic]]:
        out: dict[str, NDArray[np.generic]] = {}
        for name in self.names:
            parts = self.parts.pop(name)
            out[name] = parts[0] if len(parts) == 1 else np.concatenate(parts)
        return out

    def line_numbers(self) -> NDArray[np.int64]:
        return self.line_parts[0] if len(self.line_parts) == 1 else np.concatenate(self.line_parts)


def _sep_name(sep: str) -> str:
    return {"\t": "tab"}.get(sep, sep)
