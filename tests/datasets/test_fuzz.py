"""Property-based fuzzing of every file parser: any bytes give a valid dataset or the project's own error.

Each parser gets raw bytes and bytes shaped like its format (its header, then rows
of tokens chosen to hit the edge cases: separators, quotes, line ends, NUL,
invalid UTF-8, BOMs, numbers in every spelling, dates in several formats, labels),
plain or gzip-compressed. A result must satisfy the dataset contract (finite
float64 frame, non-decreasing times, equal lengths, 0/1 labels); an error must be a
:class:`~fedrca.exceptions.FedrcaError` with a one-line printable message.

The fast variant runs in every test run; the ``slow`` variant runs 10,000 examples
per parser (``pytest -m slow tests/datasets/test_fuzz.py -s`` prints the counts); the
bounded text reader, under every parser, has its own fast variant.
"""

from __future__ import annotations

import datetime as dt
import gzip
import io
import random
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedrca.datasets import Dataset, load_csv, load_hai, load_swat, load_tep_dataset
from fedrca.datasets.hai import _label_file as hai_label_file
from fedrca.datasets.text import open_lines
from fedrca.exceptions import FedrcaError

REPO = Path(__file__).resolve().parents[2]
FAST = 150
SLOW = 10_000

HOSTILE = [
    "", " ", "-", "1,5", "1.234,5", "1,234.5", "1_000", "0x1f", ".5", "5.", "nan", "NaN", "inf", "-inf", "1e400",
    "-1e300", "9" * 30, "a", "n/a", "True", '"', '""', '"1"', '"a,b"', "\t", "é", "\u2028", "\x0b", "\x1a", "\x00",
    "\ufeff", "Attack", "A ttack", "Normal", "attack", "label", "time", "timestamp", " Timestamp", "2022-08-17 0:00",
    "2022-08-17 00:00:01", "2021-07-10T00:00:01+09:00", "28/12/2015 10:00:00 AM", "12/28/2015 10:00:00 PM",
    "2021-03-28 02:30:00", "20190926 13:00:00", "P1_FT01", "x1001_05_SETPOINT_OUT", "DM-FT01", "1001.2-OUT", ",", ";",
    "\r", "\n", "\r\n",
]  # fmt: skip
BAD_BYTES = [b"\x00", b"\xff", b"\xc3", b"\xed\xa0\x80", b"\r", b"\xef\xbb\xbf", b"\xfe\xff"]


def _times(kind: str, rng: random.Random, n: int) -> list[str]:
    start = dt.datetime(2022, 8, 17, rng.randrange(24), rng.randrange(60), rng.randrange(60))
    if kind == "hai_labels":  # around the rows of LABELS_DATA
        start = dt.datetime(2022, 8, 17, 0, 0, rng.choice([0, 0, 0, 1, 59]))
    step = rng.choice([1, 1, 1, 0, 60, -1])
    stamps = [start + dt.timedelta(seconds=step * i) for i in range(n)]
    if kind == "swat":
        return [f" {t:%d/%m/%Y} {t.hour % 12 or 12}:{t:%M:%S %p}" for t in stamps]
    if kind == "csv":
        return [f"{step * i * 0.5}" for i in range(n)]
    fmt = rng.choice(["%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S+09:00", "minute"])
    if fmt == "minute":
        return [f"{t:%Y-%m-%d} {t.hour}:{t:%M}" for t in stamps]
    return [t.strftime(fmt) for t in stamps]


def build(kind: str, seed: int) -> bytes:
    """A file of ``kind`` from a seed: mostly well-formed, then a few random corruptions."""
    rng = random.Random(seed)
    n = rng.choice([5, 5, 5, 4, 6, 0] if kind == "hai_labels" else [0, 1, 2, 5, 20, 60])
    width = rng.randint(1, 5)
    sep = rng.choice([",", ",", ";", "\t"])
    if kind == "tep":
        cols = rng.choice([52, 52, 3, 53])
        rows = [[f"{rng.gauss(0, 100):.{rng.randint(0, 6)}f}" for _ in range(cols)] for _ in range(n)]
        if rng.random() < 0.2:  # the transposed layout (one line of samples, repeated: cheap to build)
            line = [f"{rng.random():.3f}" for _ in range(rng.choice([500, 499]))]
            rows = [line] * 52
        lines = [" ".join(r) for r in rows]
    else:
        names = {
            "hai": [rng.choice(["time", "timestamp", "Timestamp"])]
            + [f"P{j}_T{j}" for j in range(width)]
            + rng.choice([[], ["attack", "attack_P1"], ["Attack"]]),
            "hai_labels": [rng.choice(["timestamp", "Timestamp"]), rng.choice(["label", "attack", "x"])],
            "swat": [" Timestamp"] + [f"FIT{101 + j}" for j in range(width)] + rng.choice([["Normal/Attack"], []]),
            "csv": ["t"] + [f"s{j}" for j in range(width)],
        }[kind]
        times = _times("csv" if kind == "csv" else kind, rng, n)
        rows = []
        for i in range(n):
            row = [times[i]]
            for name in names[1:]:
                if name.lower().startswith(("attack", "label")) or name == "x":
                    row.append(rng.choice(["0", "1"]))
                elif name == "Normal/Attack":
                    row.append(rng.choice(["Normal", "Attack", "A ttack"]))
                else:
                    value = f"{rng.gauss(0, 50):.{rng.randint(0, 5)}f}"
                    row.append(value.replace(".", ",") if sep == ";" and rng.random() < 0.5 else value)
            rows.append(row)
        lines = [sep.join(names)] + [sep.join(r) for r in rows]
        if kind == "swat" and rng.random() < 0.3:
            lines.insert(0, sep.join(["", "P1", "P1"]))
    for _ in range(rng.choice([0, 0, 1, 1, 2, 4])):  # corruptions
        if not lines:
            break
        i = rng.randrange(len(lines))
        how = rng.random()
        if how < 0.4:
            parts = lines[i].split(sep)
            parts[rng.randrange(len(parts))] = rng.choice(HOSTILE)
            lines[i] = sep.join(parts)
        elif how < 0.55:
            lines.insert(i, lines[rng.randrange(len(lines))])
        elif how < 0.7:
            del lines[i]
        elif how < 0.85:
            cut = rng.randrange(len(lines[i]) + 1)
            lines[i] = lines[i][:cut] + rng.choice(HOSTILE) + lines[i][cut:]
        else:
            lines.insert(i, "")
    end = rng.choice(["\n", "\r\n", "\r"])
    data = (end.join(lines) + rng.choice(["", end])).encode("utf-8")
    if rng.random() < 0.1:
        data = b"\xef\xbb\xbf" + data
    if rng.random() < 0.1:
        spot = rng.randrange(len(data) + 1)
        data = data[:spot] + rng.choice(BAD_BYTES) + data[spot:]
    if rng.random() < 0.1:
        data = gzip.compress(data, mtime=0)
        if rng.random() < 0.5:
            data = data[: rng.randrange(len(data) + 1)]
    return data


def any_bytes(kind: str) -> st.SearchStrategy[bytes]:
    """Raw bytes (1 in 5) or a seeded, mostly well-formed file of the kind (one draw: fast to generate)."""
    return st.one_of(st.binary(max_size=400), *[st.integers(0, 2**63).map(lambda seed: build(kind, seed))] * 4)


def check(result: object) -> None:
    """The dataset contract every successful parse must meet."""
    assert isinstance(result, Dataset)
    values = result.frame.to_numpy()
    assert values.dtype == np.float64 and np.isfinite(values).all()
    assert len(result.timestamps) == result.rows and np.all(np.diff(result.timestamps) >= 0)
    assert np.isfinite(result.timestamps).all()
    assert result.rows > 0 and len(result.columns) > 0
    if result.labels is not None:
        assert len(result.labels) == result.rows and set(np.unique(result.labels.to_numpy())) <= {0, 1}


def outcome(parse: Callable[[Path], object], path: Path, data: bytes) -> str:
    # a new name per example: rewriting one file in place costs a flush on some file systems
    path.write_bytes(data)
    try:
        result = parse(path)
    except FedrcaError as exc:
        message = str(exc)
        assert message and "\n" not in message and message.isprintable(), repr(message)
        return "error"
    finally:
        path.unlink()
    check(result)
    return "ok"


LABELS_DATA = b"timestamp,P1_FT01\n" + b"".join(f"2022-08-17 00:00:0{i},{i}.5\n".encode() for i in range(5))


def _hai_labels(directory: Path) -> Callable[[Path], object]:
    """The label-file parser on its own, against the rows of a fixed data file (parsed once)."""
    data = directory / "data.csv"
    data.write_bytes(LABELS_DATA)
    parsed = load_hai(data, timezone="Asia/Seoul")
    lines = np.arange(2, 2 + parsed.rows)

    def parse(path: Path) -> Dataset:
        labels = hai_label_file(path, parsed.timestamps, lines, data, "Asia/Seoul", None)
        assert labels.shape == (parsed.rows,) and set(np.unique(labels)) <= {0, 1}
        return Dataset(parsed.frame, parsed.timestamps, pd.DataFrame({"attack": labels}), str(path), "hai")

    return parse


def _workbook() -> bytes:
    import openpyxl

    book = openpyxl.Workbook()
    book.active.append(["", "P1", None, None])
    book.active.append([" Timestamp", "FIT101", "LIT101", "Normal/Attack"])
    for i in range(3):
        book.active.append([f"28/12/2015 10:00:0{i} AM", 1.5 + i, 2 + i % 2, "Normal"])
    buffer = io.BytesIO()
    book.save(buffer)
    return buffer.getvalue()


WORKBOOK = _workbook()


def mutate_workbook(seed: int) -> bytes:
    """A small valid workbook, mutated from a seed: flipped bytes, cut, one entry replaced by junk."""
    rng = random.Random(seed)
    how = rng.choice(["flip", "cut", "entry", "random", "valid"])
    if how == "valid":
        return WORKBOOK
    if how == "random":
        return b"PK\x03\x04" + rng.randbytes(rng.randrange(300))
    if how == "cut":
        return WORKBOOK[: rng.randrange(len(WORKBOOK) + 1)]
    if how == "flip":
        data = bytearray(WORKBOOK)
        for _ in range(rng.randint(1, 5)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)
    source = zipfile.ZipFile(io.BytesIO(WORKBOOK))
    names = source.namelist()
    target = rng.choice(names)
    junk = rng.choice([rng.randbytes(rng.randrange(200)), b"<x/>", b"<sheetData><row><c>", b"\x00"])
    if target.endswith("sheet1.xml") and rng.random() < 0.5:  # valid XML, odd cells
        cell = rng.choice(HOSTILE).encode("utf-8", "replace").replace(b"<", b"").replace(b"&", b"")
        junk = source.read(target).replace(b"FIT101", cell, 1).replace(b"<v>2</v>", b"<v>" + cell + b"</v>", 1)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as dest:
        for name in names:
            dest.writestr(name, junk if name == target else source.read(name))
    return out.getvalue()


def workbooks() -> st.SearchStrategy[bytes]:
    return st.integers(0, 2**63).map(mutate_workbook)


PARSERS: dict[str, tuple[Callable[[Path], Callable[[Path], object]], str, Callable[[], st.SearchStrategy[bytes]]]] = {
    "text-reader": (lambda d: lambda p: _lines(p), "data.csv", lambda: any_bytes("csv")),
    "tep": (lambda d: load_tep_dataset, "d01_te.dat", lambda: any_bytes("tep")),
    "hai": (lambda d: lambda p: load_hai(p, timezone="Asia/Seoul"), "test1.csv", lambda: any_bytes("hai")),
    "hai-labels": (_hai_labels, "label-test1.csv", lambda: any_bytes("hai_labels")),
    "swat-csv": (lambda d: lambda p: load_swat(p, timezone="Asia/Singapore"), "swat.csv", lambda: any_bytes("swat")),
    "swat-xlsx": (lambda d: lambda p: load_swat(p), "swat.xlsx", workbooks),
    "csv": (lambda d: lambda p: load_csv(p, time_column="t", label_columns=()), "plant.csv", lambda: any_bytes("csv")),
}


def _lines(path: Path) -> Dataset:
    """The bounded reader alone: drain it, then report a tiny valid dataset."""
    count = sum(1 for _ in open_lines(path, "CSV"))
    return Dataset(pd.DataFrame({"lines": [float(count)]}), np.zeros(1), None, str(path), "csv")


def fuzz(name: str, directory: Path, examples: int) -> dict[str, int]:
    make, filename, strategy = PARSERS[name]
    parse = make(directory)
    counts = {"ok": 0, "error": 0}

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(strategy())
    def run(data: bytes) -> None:
        counts[outcome(parse, directory / f"{sum(counts.values())}-{filename}", data)] += 1

    run()
    return counts


@pytest.mark.parametrize("name", list(PARSERS))
def test_fuzz_parsers_give_a_dataset_or_a_fedrca_error(name, tmp_path_factory):
    counts = fuzz(name, tmp_path_factory.mktemp(name), FAST)
    assert sum(counts.values()) >= FAST


@pytest.mark.slow
@pytest.mark.exhaustive
@pytest.mark.parametrize("name", [n for n in PARSERS if n != "text-reader"])  # the reader is under every parser
def test_fuzz_parsers_slow(name, tmp_path_factory):
    counts = fuzz(name, tmp_path_factory.mktemp(name), SLOW)
    print(f"\nfuzz {name}: {sum(counts.values())} examples, {counts['ok']} parsed, {counts['error']} FedrcaError")
    assert sum(counts.values()) >= SLOW
