"""Hostile and odd data files against the commands: one clear line and exit 2, or a correct result.

Every case goes through the real command line in-process (``fedrca detect``, and
``fedrca replay-to-kafka`` whose file is read before any broker is contacted, to show
that both commands read files through the same loader) and asserts the exit code, that
stderr is exactly one line naming the file and the fix with no traceback and no binary
garbage, and that the input file was not changed.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from fedrca.cli import main
from fedrca.datasets import load_csv
from fedrca.datasets.text import MAX_LINE_CHARS, check_file, open_lines
from fedrca.exceptions import DataError

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "data" / "samples"
CSV_CONFIG = "site: h\ndataset: {format: csv, time_column: t}\nplants:\n  - {name: p, match: {prefix: s}}\n"
GOOD_HEADER = "t,s1,s2"


def good_rows(n: int = 120, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    values = rng.normal(size=(n, 2)).cumsum(axis=0)
    return [f"{t},{a:.6f},{b:.6f}" for t, (a, b) in enumerate(values)]


def csv_text(rows: list[str], header: str = GOOD_HEADER, end: str = "\n") -> bytes:
    return (end.join([header, *rows]) + end).encode()


@dataclass(frozen=True)
class Case:
    """A hostile file: its name, its bytes (or a builder), where it goes and the expected message fragment."""

    id: str
    name: str
    content: bytes | Callable[[Path], None]
    fragment: str | None  # None: valid, the command succeeds
    config: str = "csv"  # csv | tep | hai | swat
    role: str = "input"  # input | train


def _gzip_truncated(path: Path) -> None:
    path.write_bytes(gzip.compress(csv_text(good_rows()))[:-30])


def _gzip_corrupt(path: Path) -> None:
    data = bytearray(gzip.compress(csv_text(good_rows())))
    data[20:40] = b"\xff" * 20
    path.write_bytes(bytes(data))


def _directory(path: Path) -> None:
    path.mkdir()


def _xlsx_truncated(path: Path) -> None:
    path.write_bytes((SAMPLES / "swat" / "SWaT_Dataset_Attack_v0-sample.xlsx").read_bytes()[:3000])


def _xlsx_without_header(path: Path) -> None:
    import openpyxl

    book = openpyxl.Workbook()
    for r in range(30):
        book.active.append([r, r * 2])
    book.save(path)


def _xlsx_bomb(path: Path) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        with archive.open("xl/sharedStrings.xml", "w") as entry:
            block = b" " * (1 << 20)
            for _ in range(260):  # 260 MiB of spaces, a few hundred kB compressed
                entry.write(block)


def _fifo(path: Path) -> None:
    os.mkfifo(path)  # opening it for reading would wait for a writer forever


def _xlsx_far_cell(path: Path) -> None:
    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    sheet.append([" Timestamp", "FIT101", "Normal/Attack"])
    for i in range(30):
        sheet.append([f"28/12/2015 10:00:{i:02d} AM", float(i), "Normal"])
    sheet.cell(row=20, column=16000, value=1.0)  # the sheet's dimension becomes A1:WNN31
    book.save(path)


def _tep_52_by_53(path: Path) -> None:
    np.savetxt(path, np.random.default_rng(0).normal(size=(52, 53)))


def _tep_text(path: Path) -> None:
    path.write_text(" ".join(["1.0"] * 52) + "\n" + " ".join(["1.0"] * 51 + ["abc"]) + "\n")


def _with_cell(row: int, col: int, value: str) -> bytes:
    rows = [r.split(",") for r in good_rows()]
    rows[row][col] = value
    return csv_text([",".join(r) for r in rows])


def _hai_2204(path: Path) -> None:
    path.write_bytes((SAMPLES / "hai" / "hai-22.04-test1.csv").read_bytes())


ROWS = good_rows()
CASES = [
    # -- not text / not readable
    Case("empty", "empty.csv", b"", "no data (the file is empty or blank)"),
    Case("blank-lines", "blank.csv", b"\n\n  \n,,\n", "no data (the file is empty or blank)"),
    Case("header-only", "header.csv", b"t,s1,s2\n", "has no data rows below it"),
    Case("nul-bytes", "nul.csv", b"\x00" * 5000, "binary data (a NUL byte at byte 0, line 1)"),
    Case("nul-after-text", "nul2.csv", csv_text(ROWS[:5]) + b"\x00\x00\x01", "binary data (a NUL byte at byte"),
    Case("random-binary", "bin.csv", bytes(range(256)) * 4, "binary data (a NUL byte at byte 0"),
    Case("utf16-bom", "u16.csv", "\ufefft,s1,s2\n0,1,2\n".encode("utf-16"), "UTF-16 text; re-save the file as UTF-8"),
    Case("utf16-no-bom", "u16b.csv", "t,s1,s2\n0,1,2\n".encode("utf-16-le"), "binary data (a NUL byte at byte 1"),
    Case("latin1", "latin.csv", csv_text(ROWS).replace(b"s2", b"s\xe92"), "line 1 is not UTF-8 text"),
    Case("gz-truncated", "t.csv.gz", _gzip_truncated, "truncated gzip data after"),
    Case("gz-corrupt", "c.csv.gz", _gzip_corrupt, "gzip data after"),
    Case("gz-fake", "fake.csv.gz", csv_text(ROWS), "named .gz but not gzip-compressed"),
    Case("directory", "adir.csv", _directory, "is a directory"),
    Case("missing", "missing.csv", lambda p: None, "no such file"),
    Case("fifo", "pipe.csv", _fifo, "is a FIFO (named pipe), not a regular file"),
    Case(
        "zip-as-csv",
        "book.csv",
        (SAMPLES / "swat" / "SWaT_Dataset_Attack_v0-sample.xlsx").read_bytes(),
        "a ZIP archive or Excel workbook, not a text CSV file",
    ),
    Case("giant-line", "line.csv", b"t,s1,s2\n" + b"1" * (MAX_LINE_CHARS + 10), "is longer than 1,048,576 characters"),
    Case("giant-header", "wide.csv", b"," * (MAX_LINE_CHARS + 10) + b"\n1\n", "line 1 is longer than"),
    # -- structure
    Case(
        "ragged-short", "short.csv", csv_text([*ROWS[:3], "3,1.0", *ROWS[4:]]), "line 5 has 2 fields, the header has 3"
    ),
    Case(
        "ragged-long", "long.csv", csv_text([*ROWS[:3], "3,1,2,4", *ROWS[4:]]), "line 5 has 4 fields, the header has 3"
    ),
    Case("duplicate-names", "dup.csv", csv_text(ROWS, "t,s1,s1"), "duplicate column name(s) 's1'"),
    Case("unnamed-column", "unnamed.csv", csv_text(ROWS, "t,,s2"), "column 2 after 't' has no name"),
    Case(
        "many-columns",
        "many.csv",
        (",".join(f"s{i}" for i in range(10_001)) + "\n").encode() * 2,
        "10,001 columns, more than 10,000",
    ),
    Case("unclosed-quote", "quote.csv", csv_text([*ROWS[:3], '3,"1.5,2', *ROWS[4:]]), "line 5: badly quoted field"),
    Case("blank-start", "blanks.csv", b"\n" * 25 + csv_text(ROWS), "the first 20 lines are blank; a CSV file starts"),
    Case(
        "no-header",
        "nohead.hai",
        csv_text(ROWS),
        "no HAI CSV (first column time/timestamp) header line found",
        config="hai",
    ),
    # -- cells
    Case("text-cell", "text.csv", _with_cell(6, 1, "open"), "line 8, column 's1': 'open' is not a number"),
    # n/a and nan are missing values (datasets/table.py MISSING_TOKENS): refused unless dataset.missing: allow
    Case("na-cell", "na.csv", _with_cell(6, 1, "n/a"), "line 8, column 's1': missing value; fill it or drop the line"),
    Case("empty-cell", "hole.csv", _with_cell(6, 2, ""), "line 8, column 's2': missing value"),
    Case("inf-cell", "inf.csv", _with_cell(6, 1, "inf"), "line 8, column 's1': non-finite value"),
    Case("overflow-cell", "big.csv", _with_cell(6, 1, "1e400"), "line 8, column 's1': non-finite value"),
    Case("nan-text", "nan.csv", _with_cell(6, 1, "nan"), "line 8, column 's1': missing value"),
    Case("thousands-comma", "th.csv", _with_cell(6, 1, '"1,234.5"'), "'1,234.5' is not a number; numbers take one"),
    Case(
        "thousands-dot", "th2.csv", b"t;s1;s2\n0;1,5;2,5\n1;1.234,5;2,0\n", "'1.234,5' has a '.' in a file with decimal"
    ),
    Case(
        "mixed-decimal", "mix.csv", b"t;s1;s2\n0;1,5;2,5\n1;1.5;2,0\n", "'1.5' has a '.' in a file with decimal commas"
    ),
    Case("control-chars", "ctrl.csv", _with_cell(6, 1, "1\x072"), "'1\\x072' is not a number"),
    # -- times
    Case(
        "time-backwards",
        "back.csv",
        csv_text([*ROWS[:5], ROWS[6], ROWS[5], *ROWS[7:]]),
        "line 8, column 't': time goes backwards",
    ),
    Case("time-missing", "notime.csv", _with_cell(4, 0, ""), "line 6, column 't': missing time"),
    Case(
        "time-text",
        "badtime.csv",
        _with_cell(4, 0, "soon"),
        "'soon' is not a number of seconds (at most 1e+12) like the column's",
    ),
    Case(
        "time-mixed-offsets",
        "tz.csv",
        b"t,s1,s2\n2024-01-01 00:00:00+01:00,1,2\n2024-01-01 00:00:01,1,3\n",
        "times with and without a UTC offset are mixed",
    ),
    # -- valid but odd: loads, gives the right result
    Case("bom-crlf", "bom.csv", b"\xef\xbb\xbf" + csv_text(ROWS, end="\r\n"), None),
    Case(
        "mixed-line-ends",
        "ends.csv",
        b"t,s1,s2\r\n" + "\r".join(ROWS[:60]).encode() + b"\n" + "\r\n".join(ROWS[60:]).encode(),
        None,
    ),
    Case("quoted-header", "qh.csv", csv_text(ROWS, '"t", "s1","s2 "'), None),
    Case("quote-after-quote", "qq.csv", csv_text(ROWS, '"t","s1" x,"s2"'), "line 1: badly quoted field"),
    Case("trailing-delimiters", "trail.csv", csv_text([r + ",," for r in ROWS], GOOD_HEADER + ","), None),
    Case("blank-lines-inside", "gaps.csv", csv_text([*ROWS[:50], "", " ", ",,", *ROWS[50:]]), None),
    Case(
        "semicolon-decimal-comma",
        "semi.csv",
        b"t;s1;s2\n" + "\n".join(r.replace(",", ";").replace(".", ",") for r in ROWS).encode() + b"\n",
        None,
    ),
    Case("gzip", "ok.csv.gz", gzip.compress(csv_text(ROWS)), None),
    # -- TEP
    Case("tep-52x53", "d07.dat", _tep_52_by_53, "53 columns, a TEP file has 52", config="tep"),
    Case("tep-text", "d08.dat", _tep_text, "line 2, value 52: 'abc' is not a number", config="tep"),
    Case("tep-nul", "d09.dat", b"\x00" * 100, "binary data (a NUL byte at byte 0", config="tep"),
    Case("tep-ragged", "d10.dat", b"1 2 3\n1 2\n", "line 2 has 2 values, line 1 has 3", config="tep"),
    # -- SWaT workbooks
    Case("xlsx-truncated", "cut.xlsx", _xlsx_truncated, "not a readable .xlsx workbook", config="swat"),
    Case("xlsx-no-header", "nohead.xlsx", _xlsx_without_header, "no sheet has a SWaT header row", config="swat"),
    Case("xlsx-bomb", "bomb.xlsx", _xlsx_bomb, "shared-string table unpacks to", config="swat"),
    Case(
        "xlsx-far-cell", "far.xlsx", _xlsx_far_cell, "line 20 has values beyond the header's 3 columns", config="swat"
    ),
    Case("xlsx-random", "rand.xlsx", b"PK\x03\x04" + bytes(range(200)), "not a readable .xlsx workbook", config="swat"),
    # -- HAI: a 22.04 file carries its own labels
    Case("hai-2204", "test1.csv", _hai_2204, None, config="hai"),
    # -- nominal (training) data
    Case("train-1e300", "huge.csv", _with_cell(10, 1, "1e300"), "is beyond +-1e+150, which overflows", role="train"),
    Case(
        "train-constant",
        "const.csv",
        csv_text([f"{t},{r.split(',')[1]},7.0" for t, r in enumerate(ROWS)]),
        "sensor column(s) s2 never change in the nominal data",
        role="train",
    ),
    Case(
        "train-5-rows", "five.csv", csv_text(ROWS[:5]), "5 nominal samples, a detector needs at least 18", role="train"
    ),
    Case(
        "train-17-rows",
        "few.csv",
        csv_text(ROWS[:17]),
        "17 nominal samples, a detector needs at least 18",
        role="train",
    ),
    Case(
        "train-folds",
        "folds.csv",
        csv_text(ROWS[:60]),
        "scoring.folds 5 leaves 12 nominal samples per fold",
        role="train",
    ),
    Case("train-nul", "tnul.csv", b"\x00" * 1000, "binary data (a NUL byte", role="train"),
]
CONFIGS = {
    "tep": (REPO / "config" / "tep.yaml", REPO / "data" / "tep" / "d00.dat"),
    "hai": (REPO / "config" / "hai.yaml", SAMPLES / "hai" / "hai-22.04-test1.csv"),
    "swat": (REPO / "config" / "swat.yaml", SAMPLES / "swat" / "SWaT_Dataset_Attack_v0-sample.csv"),
}


def make(case: Case, tmp_path: Path) -> Path:
    path = tmp_path / case.name
    if callable(case.content):
        case.content(path)
    else:
        path.write_bytes(case.content)
    return path


def digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def files(case: Case, tmp_path: Path) -> tuple[Path, Path, Path]:
    """(config, train, input) of a case."""
    bad = make(case, tmp_path)
    if case.config == "csv":
        config = tmp_path / "site.yaml"
        config.write_text(CSV_CONFIG)
        good = tmp_path / "good.csv"
        good.write_bytes(csv_text(good_rows(seed=1)))
    else:
        config, good = CONFIGS[case.config]
    return (config, bad, good) if case.role == "train" else (config, good, bad)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_file_gives_one_clear_line_or_a_correct_result(case, tmp_path, capsys):
    config, train, data = files(case, tmp_path)
    bad = train if case.role == "train" else data
    before = digest(bad)
    out = tmp_path / "flags.jsonl"
    code, err = run(
        ["detect", "--config", str(config), "--train", str(train), "--input", str(data), "--out", str(out)], capsys
    )
    assert digest(bad) == before  # the data file is never touched
    if case.fragment is None:
        assert code == 0, err
        assert out.read_text().count("\n") > 0
        return
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("fedrca detect: error: ")
    assert case.fragment in lines[0]
    assert str(bad) in lines[0] or case.id == "train-folds" or str(bad.name) in lines[0]
    assert lines[0].isprintable() and "\x00" not in lines[0]
    assert not out.exists()


@pytest.mark.parametrize("case", [c for c in CASES if c.role == "input" and c.fragment], ids=lambda c: c.id)
def test_replay_to_kafka_reads_files_with_the_same_loader(case, tmp_path, capsys):
    """The same file gives the same verdict in replay-to-kafka (read before any broker is contacted)."""
    config, _, data = files(case, tmp_path)
    argv = ["replay-to-kafka", "--config", str(config), "--input", str(data), "--broker", "kafka://127.0.0.1:9"]
    code, err = run(argv, capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fedrca replay-to-kafka: error: ")
    assert case.fragment in lines[0]


def test_valid_odd_files_read_like_the_plain_file(tmp_path):
    plain = make(Case("plain", "plain.csv", csv_text(ROWS), None), tmp_path)
    expected = load_csv(plain, time_column="t")
    for case in CASES:
        if case.fragment is None and case.config == "csv":
            data = load_csv(make(case, tmp_path), time_column="t")
            np.testing.assert_array_equal(data.frame.to_numpy(), expected.frame.to_numpy(), err_msg=case.id)
            np.testing.assert_array_equal(data.timestamps, expected.timestamps, err_msg=case.id)
            assert data.columns == ["s1", "s2"], case.id


def test_train_refuses_what_detect_refuses_with_the_same_minimum(tmp_path, capsys):
    config, few, _ = files(next(c for c in CASES if c.id == "train-17-rows"), tmp_path)
    code, err = run(["train", "--config", str(config), "--data", str(few), "--out", str(tmp_path / "params")], capsys)
    last = err.strip().splitlines()[-1]
    assert code == 2 and "Traceback" not in err
    assert last.startswith("fedrca train: error: ") and "17 nominal samples, a detector needs at least 18" in last


def test_input_of_another_dataset_version_names_the_missing_columns(tmp_path, capsys):
    config, train, _ = files(next(c for c in CASES if c.id == "hai-2204"), tmp_path)
    other = SAMPLES / "hai" / "hai-21.03-test1.csv"
    argv = ["detect", "--config", str(config), "--train", str(train), "--input", str(other), "--out", "o.jsonl"]
    code, err = run(argv, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"{other}: plant 'boiler' needs column(s) P1_PIT01_HH" in err


def test_unreadable_file_is_one_clear_line(tmp_path, monkeypatch):
    path = tmp_path / "locked.csv"
    path.write_bytes(csv_text(ROWS))
    real_open = open

    def deny(file, *args, **kwargs):
        if str(file) == str(path):
            raise PermissionError(13, "Permission denied")
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", deny)
    with pytest.raises(DataError, match=r"locked.csv: cannot be read \(permission denied\); check the file's"):
        check_file(path, "CSV")


def test_lines_split_across_read_blocks_and_crlf_at_a_block_boundary(tmp_path, monkeypatch):
    monkeypatch.setattr("fedrca.datasets.text.BLOCK_BYTES", 7)
    path = tmp_path / "x.csv"
    path.write_bytes(b"ab,c\r\n" + b"x" * 20 + b"\r\n\r\n1,2\r3,4\n\xc3\xa9,5")
    assert list(open_lines(path, "CSV")) == [(1, "ab,c"), (2, "x" * 20), (3, ""), (4, "1,2"), (5, "3,4"), (6, "é,5")]


def test_memory_stays_bounded_on_a_large_malformed_file(tmp_path):
    """A 64 MB line without a line end is refused after reading about one line's worth."""
    import tracemalloc

    path = tmp_path / "huge.csv"
    with open(path, "wb") as handle:
        handle.write(b"t,s1,s2\n")
        block = b"9" * (1 << 20)
        for _ in range(64):
            handle.write(block)
    tracemalloc.start()
    try:
        with pytest.raises(DataError, match="line 2 is longer than"):
            load_csv(path, time_column="t")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 24 * (1 << 20), peak


def test_gzip_bomb_is_decompressed_as_a_stream(tmp_path):
    import tracemalloc

    path = tmp_path / "bomb.csv.gz"
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb") as handle:
        handle.write(b"t,s1,s2\n")
        for _ in range(100):
            handle.write(b"\x00" * (1 << 20))
    path.write_bytes(buffer.getvalue())
    tracemalloc.start()
    try:
        with pytest.raises(DataError, match="binary data"):
            load_csv(path, time_column="t")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * (1 << 20), peak
