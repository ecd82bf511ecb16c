"""Bounded reading of text data files: the one place that touches the bytes.

Every file parser reads its file through :func:`open_lines`, which turns any
byte string into either numbered lines of text or one :class:`DataError` line
naming the file, the place and the fix. Memory stays bounded whatever the file
holds: bytes are read in blocks of :data:`BLOCK_BYTES`, a line may not exceed
:data:`MAX_LINE_CHARS`, plain files of :data:`PRESCAN_BYTES` or more are first
scanned for binary and non-UTF-8 bytes (so garbage at the end of a large file is
refused before any of it is parsed), and nothing the file contains is quoted back
when it is not text (NUL bytes, invalid UTF-8). ``.gz`` files (detected by their magic
bytes, not only by their name) are decompressed as a stream, so a truncated or
fake archive fails with its byte offset instead of a traceback.

Line ends may be ``\\n``, ``\\r\\n`` or ``\\r``, mixed in one file; a UTF-8 byte order
mark is dropped. Fields never span lines (quoted line breaks are not supported).

Examples
--------
>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "x.csv"
>>> _ = path.write_bytes(b"\\xef\\xbb\\xbfa,b\\r\\n1,2\\r3,4\\n")
>>> [(n, line) for n, line in open_lines(path, "CSV")]
[(1, 'a,b'), (2, '1,2'), (3, '3,4')]
"""

from __future__ import annotations

import codecs
import gzip
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

from fedrca.exceptions import DataError

__all__ = [
    "BLOCK_BYTES",
    "MAX_LINE_CHARS",
    "PRESCAN_BYTES",
    "ByteStream",
    "check_file",
    "open_binary",
    "open_line_blocks",
    "open_lines",
]

#: Bytes read (or decompressed) at a time.
BLOCK_BYTES = 1 << 20
#: Longest accepted line in characters (a HAIEnd line of 226 fields has ~3,000).
MAX_LINE_CHARS = 1 << 20
#: Plain files at least this large are scanned for binary and non-UTF-8 bytes before parsing.
PRESCAN_BYTES = 64 << 20

_GZIP_MAGIC = b"\x1f\x8b"
_ZIP_MAGIC = b"PK\x03\x04"


class ByteStream(Protocol):
    """What :func:`open_binary` returns: ``read`` and ``close``."""

    def read(self, size: int = -1, /) -> bytes:
        """Up to ``size`` bytes; b"" at the end."""

    def close(self) -> None:
        """Release the file."""


def check_file(path: str | Path, what: str) -> Path:
    """The path as a :class:`Path` when it names a readable regular file.

    Raises
    ------
    DataError
        When it does not exist, is a directory or cannot be opened for reading.
    """
    file = Path(path)
    try:
        if not file.exists():
            raise DataError(f"{file}: no such file; pass the path of a {what} file")
        if file.is_dir():
            raise DataError(f"{file}: is a directory; pass the path of a {what} file")
        if not file.is_file():
            raise DataError(f"{file}: not a regular file (a device, pipe or socket); pass the path of a {what} file")
        with open(file, "rb"):
            pass
    except PermissionError:
        raise DataError(f"{file}: cannot be read (permission denied); check the file's permissions") from None
    except OSError as exc:
        raise DataError(f"{file}: cannot be read ({exc.strerror or type(exc).__name__}); check the path") from None
    return file


def open_binary(path: str | Path, what: str) -> ByteStream:
    """The file's (decompressed) bytes as a stream; gzip is recognised by its magic bytes.

    A name ending in ``.gz`` whose content is not gzip is refused (it was renamed, or
    the download is an error page). The stream raises :class:`DataError` itself when
    the compressed data turn out truncated or corrupt while reading.
    """
    file = check_file(path, what)
    try:
        raw = open(file, "rb")  # noqa: SIM115 - returned to the caller, closed by it
        head = raw.read(4)
        raw.seek(0)
    except OSError as exc:
        raise DataError(f"{file}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    if head[:2] == _GZIP_MAGIC:
        return _GzipStream(file, raw)
    if file.suffix.lower() == ".gz":
        raw.close()
        raise DataError(
            f"{file}: named .gz but not gzip-compressed; decompress it with gunzip or drop the .gz from the name"
        )
    return raw


class _GzipStream:
    """A gzip member read as a stream whose errors are :class:`DataError` lines with the byte offset."""

    def __init__(self, file: Path, raw: BinaryIO) -> None:
        self._file = file
        self._raw = raw
        self._gzip = gzip.GzipFile(fileobj=raw, mode="rb")
        self._out = 0

    def read(self, size: int = -1) -> bytes:
        try:
            data = self._gzip.read(size if size >= 0 else BLOCK_BYTES)
        except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as exc:
            kind = "truncated" if isinstance(exc, EOFError) else "corrupt"
            raise DataError(
                f"{self._file}: {kind} gzip data after {self._out:,} decompressed bytes "
                f"({type(exc).__name__}); download or copy the file again"
            ) from None
        self._out += len(data)
        return data

    def close(self) -> None:
        self._gzip.close()
        self._raw.close()

    def __enter__(self) -> _GzipStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_lines(path: str | Path, what: str) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of every line of a UTF-8 text file, 1-based, line ends removed.

    Parameters
    ----------
    path : the file (plain or gzip-compressed)
    what : what the file should be, for the messages (``"HAI CSV"``)

    Raises
    ------
    DataError
        Missing/unreadable file, binary data (a NUL byte), text that is not UTF-8,
        a line longer than :data:`MAX_LINE_CHARS`, an xlsx/zip workbook, corrupt gzip.
    """
    for first, lines in open_line_blocks(path, what):
        yield from enumerate(lines, start=first)


def open_line_blocks(path: str | Path, what: str) -> Iterator[tuple[int, list[str]]]:
    """The lines of :func:`open_lines` in blocks: ``(number of the first line, lines)``.

    One block per read block of the file, so callers can check many lines at C speed.
    """
    stream = open_binary(path, what)
    file = Path(path)
    try:
        if not isinstance(stream, _GzipStream) and file.stat().st_size >= PRESCAN_BYTES:
            _prescan(stream, file, what)
        yield from _blocks(stream, file, what)
    finally:
        stream.close()


def _prescan(stream: ByteStream, file: Path, what: str) -> None:
    """Refuse binary or non-UTF-8 content anywhere in a large file before parsing any of it.

    A large file whose NUL bytes or invalid UTF-8 come late would otherwise be parsed (and
    held in memory) up to that point; this pass reads it once in blocks at memory speed.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="strict")
    offset = 0
    lines = 1
    while True:
        block = stream.read(BLOCK_BYTES * 8)
        nul = block.find(b"\x00")
        if nul >= 0:
            raise _binary(file, what, offset + nul, lines + block.count(b"\n", 0, nul))
        try:
            decoder.decode(block, final=not block)
        except UnicodeDecodeError as exc:
            at = max(exc.start, 0)
            raise _not_utf8(file, lines + block.count(b"\n", 0, at), offset + at) from None
        if not block:
            break
        offset += len(block)
        lines += block.count(b"\n")
    stream.seek(0)  # type: ignore[attr-defined]


def _binary(file: Path, what: str, offset: int, line: int) -> DataError:
    return DataError(
        f"{file}: binary data (a NUL byte at byte {offset:,}, line {line:,}); not a text {what} file - check the "
        "path (UTF-16 text must be re-saved as UTF-8)"
    )


def _not_utf8(file: Path, line: int, offset: int) -> DataError:
    return DataError(
        f"{file}: line {line:,} is not UTF-8 text (invalid byte at byte {offset:,}); re-save the file as UTF-8"
    )


def _blocks(stream: ByteStream, file: Path, what: str) -> Iterator[tuple[int, list[str]]]:
    decoder = codecs.getincrementaldecoder("utf-8")(errors="strict")
    pending = ""
    number = 0  # lines completed so far
    offset = 0  # bytes consumed so far
    first = True
    while True:
        block = stream.read(BLOCK_BYTES)
        final = not block
        if first and block:
            if block.startswith(_ZIP_MAGIC):
                raise DataError(
                    f"{file}: a ZIP archive or Excel workbook, not a text {what} file; export the sheet as CSV "
                    "(SWaT .xlsx workbooks are read by dataset.format: swat)"
                )
            if block.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
                raise DataError(f"{file}: UTF-16 text; re-save the file as UTF-8")
        nul = block.find(b"\x00")
        if nul >= 0:
            raise _binary(file, what, offset + nul, number + 1 + block.count(b"\n", 0, nul))
        try:
            text = decoder.decode(block, final=final)
        except UnicodeDecodeError as exc:
            at = max(exc.start, 0)
            raise _not_utf8(file, number + 1 + block.count(b"\n", 0, at), offset + at) from None
        offset += len(block)
        if first and text.startswith("\ufeff"):
            text = text[1:]
        if block:
            first = False
        pending += text
        # a trailing '\r' may be the first half of a '\r\n' split across blocks: keep it for the next block
        tail = "\r" if not final and pending.endswith("\r") else ""
        body = pending[: len(pending) - len(tail)]
        if "\r" in body:
            body = body.replace("\r\n", "\n").replace("\r", "\n")
        parts = body.split("\n")
        pending = parts.pop() + tail
        if final and pending:
            parts.append(pending)
            pending = ""
        if parts:
            if max(map(len, parts)) > MAX_LINE_CHARS:
                k = next(k for k, line in enumerate(parts) if len(line) > MAX_LINE_CHARS)
                raise _too_long(file, number + 1 + k)
            yield number + 1, parts
            number += len(parts)
        if len(pending) > MAX_LINE_CHARS:
            raise _too_long(file, number + 1)
        if final:
            return


def _too_long(file: Path, line: int) -> DataError:
    return DataError(
        f"{file}: line {line:,} is longer than {MAX_LINE_CHARS:,} characters; not a line-based data file "
        "(check the file, its line ends and its delimiter)"
    )
