"""Excel workbooks (``.xlsx``) read as a :class:`~fedrca.datasets.table.Table`, streamed.

The SWaT owners distribute their data as ``.xlsx`` with the column names in the
sheet's second row (the first holds the stage names P1..P6). :func:`read_sheet`
streams the rows with openpyxl's read-only mode, so memory stays bounded by
a chunk of rows plus the workbook's shared-string table, whose size is checked
before opening (as is the archive's total size: a ZIP bomb is refused, not
unpacked). Messages say "line N" for sheet row N.
"""

from __future__ import annotations

import datetime as dt
import warnings
import zipfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedrca.datasets.table import MAX_COLUMNS, MAX_VALUES, MISSING_TOKENS, ColumnParser, Table, cell
from fedrca.datasets.text import check_file
from fedrca.exceptions import DataError

__all__ = ["MAX_SHARED_STRINGS_BYTES", "MAX_XLSX_BYTES", "is_workbook", "read_sheet"]

#: Largest uncompressed workbook accepted (the SWaT attack workbook unpacks to about 1.3 GB).
MAX_XLSX_BYTES = 8 << 30
#: Largest shared-string table (held in memory by openpyxl).
MAX_SHARED_STRINGS_BYTES = 256 << 20

#: Cells converted at a time (bounds memory whatever the row width).
_CHUNK_CELLS = 1 << 20


def is_workbook(path: str | Path) -> bool:
    """True when the file is a ZIP archive (an ``.xlsx`` workbook) by its first bytes or its name."""
    file = Path(path)
    if file.suffix.lower() in (".xlsx", ".xlsm"):
        return True
    try:
        with open(file, "rb") as handle:
            return handle.read(4) == b"PK\x03\x04"
    except OSError:
        return False


def _open(file: Path) -> Any:
    try:
        with zipfile.ZipFile(file) as archive:
            infos = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as exc:
        raise DataError(
            f"{file}: not a readable .xlsx workbook ({type(exc).__name__}); open and re-save it in a spreadsheet "
            "program, or export the sheet as CSV"
        ) from None
    total = sum(max(i.file_size, 0) for i in infos)
    if total > MAX_XLSX_BYTES:
        raise DataError(
            f"{file}: the workbook unpacks to {total:,} bytes, more than {MAX_XLSX_BYTES:,}; export the sheet as CSV"
        )
    shared = sum(i.file_size for i in infos if i.filename.lower().endswith("sharedstrings.xml"))
    if shared > MAX_SHARED_STRINGS_BYTES:
        raise DataError(
            f"{file}: its shared-string table unpacks to {shared:,} bytes, more than {MAX_SHARED_STRINGS_BYTES:,}; "
            "export the sheet as CSV"
        )
    try:
        import openpyxl
    except ModuleNotFoundError:  # pragma: no cover - a declared dependency
        raise DataError(f"{file}: reading .xlsx needs openpyxl; pip install openpyxl") from None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # openpyxl warns about styles, data validation ... it does not use
            return openpyxl.load_workbook(file, read_only=True, data_only=True, keep_links=False)
    except Exception as exc:  # openpyxl raises many types (KeyError, XML errors, ...) on a broken workbook
        raise DataError(
            f"{file}: not a readable .xlsx workbook ({type(exc).__name__}); open and re-save it in a spreadsheet "
            "program, or export the sheet as CSV"
        ) from None


def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    return str(value).strip()


def _rows(sheet: Any, file: Path) -> Iterator[tuple[int, tuple[Any, ...]]]:
    try:
        # rows as written, not padded to the sheet's declared dimension (which a file can inflate)
        reset = getattr(sheet, "reset_dimensions", None)
        if callable(reset):
            reset()
        for number, row in enumerate(sheet.iter_rows(values_only=True), start=1):
            yield number, tuple(row)
    except DataError:
        raise
    except Exception as exc:  # broken sheet XML
        raise DataError(
            f"{file}: the sheet cannot be read ({type(exc).__name__}); open and re-save it, or export it as CSV"
        ) from None


def read_sheet(
    path: str | Path,
    what: str,
    is_header: Callable[[list[str]], bool],
    parsers: Callable[[list[str]], Mapping[str, ColumnParser]],
    scan: int = 20,
    *,
    missing: bool = False,
) -> Table:
    """The first sheet with a header accepted by ``is_header`` in its first ``scan`` rows, as a table.

    Same contract as :func:`fedrca.datasets.table.read_table`: number columns become
    float64 (numbers or numeric text; text and non-finite values are errors, and so are
    empty cells and :data:`~fedrca.datasets.table.MISSING_TOKENS` unless ``missing``: NaN),
    the ``parsers`` convert the others (dates arrive as ISO 8601 text).
    """
    file = check_file(path, what)
    book = _open(file)
    try:
        for sheet in book.worksheets:
            rows = _rows(sheet, file)
            header = None
            for number, row in rows:
                fields = [_text(v) for v in row]
                if any(fields) and is_header(fields):
                    header = (number, fields)
                    break
                if number >= scan:
                    break
            if header is not None:
                return _read_rows(file, rows, header[0], header[1], parsers, missing)
    finally:
        book.close()
    raise DataError(f"{file}: no sheet has a {what} header row in its first {scan} rows; is this the right workbook?")


def _read_rows(
    file: Path,
    rows: Iterator[tuple[int, tuple[Any, ...]]],
    header_line: int,
    fields: list[str],
    parsers: Callable[[list[str]], Mapping[str, ColumnParser]],
    missing: bool = False,
) -> Table:
    names = list(fields)
    while names and not names[-1]:
        names.pop()
    for i, name in enumerate(names):
        if not name:
            raise DataError(f"{file}: line {header_line}: column {i + 1} has no name; give every column a name")
    if len(set(names)) != len(names):
        dupes = sorted({n for n in names if names.count(n) > 1})
        raise DataError(
            f"{file}: line {header_line}: duplicate column name(s) {', '.join(cell(d) for d in dupes[:5])}; "
            "column names must be unique"
        )
    if len(names) > MAX_COLUMNS:
        raise DataError(f"{file}: line {header_line}: {len(names):,} columns, more than {MAX_COLUMNS:,}")
    converters = dict(parsers(names))
    n = len(names)
    parts: dict[str, list[NDArray[np.generic]]] = {name: [] for name in names}
    line_parts: list[NDArray[np.int64]] = []
    chunk: list[tuple[Any, ...]] = []
    numbers: list[int] = []
    total = 0

    def flush() -> None:
        lines = np.asarray(numbers, dtype=np.int64)
        for j, name in enumerate(names):
            column = [r[j] if j < len(r) else None for r in chunk]
            converter = converters.get(name)
            if converter is not None:
                strings = np.array([None if v is None else _text(v) or None for v in column], dtype=object)
                parts[name].append(converter(strings, lines))
            else:
                parts[name].append(_numbers(column, name, lines, file, missing))
        line_parts.append(lines)

    for number, row in rows:
        if all(v is None or (isinstance(v, str) and not v.strip()) for v in row):
            continue
        extra = [v for v in row[n:] if v is not None and not (isinstance(v, str) and not v.strip())]
        if extra:
            raise DataError(
                f"{file}: line {number:,} has values beyond the header's {n} columns; delete them or name the column"
            )
        chunk.append(row[:n])
        numbers.append(number)
        total += 1
        if total * n > MAX_VALUES:
            raise DataError(f"{file}: more than {MAX_VALUES:,} values (line {number:,}); split the sheet into parts")
        if len(chunk) * n >= _CHUNK_CELLS:
            flush()
            chunk, numbers = [], []
    if chunk:
        flush()
    if total == 0:
        raise DataError(f"{file}: the header (line {header_line}) has no data rows below it; the sheet holds no data")
    values = {name: (p[0] if len(p) == 1 else np.concatenate(p)) for name, p in parts.items()}
    lines = line_parts[0] if len(line_parts) == 1 else np.concatenate(line_parts)
    return Table(file, header_line, "xlsx", ".", names, values, lines)


def _numbers(
    column: list[Any], name: str, lines: NDArray[np.int64], file: Path, missing: bool = False
) -> NDArray[np.float64]:
    try:
        if not all(type(v) is float or type(v) is int for v in column):
            raise TypeError
        out = np.array(column, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        out = _numbers_slowly(column, name, lines, file, missing)
    finite = np.isfinite(out) | (missing & np.isnan(out))
    if not finite.all():
        i = int(np.flatnonzero(~finite)[0])
        raise DataError(f"{file}: line {lines[i]:,}, column '{cell(name)}': non-finite value; fill it or drop the row")
    return out


def _numbers_slowly(
    column: list[Any], name: str, lines: NDArray[np.int64], file: Path, missing: bool = False
) -> NDArray[np.float64]:
    out = np.empty(len(column), dtype=np.float64)
    for i, v in enumerate(column):
        if isinstance(v, int | float) and not isinstance(v, bool):
            out[i] = float(v) if abs(v) < 1e308 or isinstance(v, float) else np.inf
            continue
        if v is None or (isinstance(v, str) and (not v.strip() or v.strip().lower() in MISSING_TOKENS)):
            if missing:
                out[i] = np.nan
                continue
            raise DataError(
                f"{file}: line {lines[i]:,}, column '{cell(name)}': missing value; fill it or drop the row, or set "
                "dataset.missing: allow to score the values that are there"
            )
        text = v.strip() if isinstance(v, str) else None
        try:
            if text is None or "_" in text:
                raise ValueError
            out[i] = float(text)
        except (ValueError, OverflowError):
            raise DataError(
                f"{file}: line {lines[i]:,}, column '{cell(name)}': '{cell(_text(v))}' is not a number; fix the "
                "value or drop the row"
            ) from None
    return out
