"""Files with gaps: ``dataset.missing: refuse | allow`` for every layout, and every command on a file with gaps."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import openpyxl
import pandas as pd
import pytest

from fedrca.cli import main
from fedrca.config import parse_config
from fedrca.datasets import linear_multiplant, load_dataset
from fedrca.datasets.nominal import check_nominal
from fedrca.exceptions import DataError

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "data" / "samples"


def blank(path: Path, out: Path, cells: dict[int, int], token: str = "", sep: str = ",") -> Path:
    """A copy of a delimited file with the fields {line index: field index} replaced by ``token``."""
    lines = path.read_text(encoding="utf-8").splitlines()
    for line, field in cells.items():
        fields = lines[line].split(sep)
        fields[field] = token
        lines[line] = sep.join(fields)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def options(fmt: str, missing: str, **extra):
    sensor = "XMEAS(1)" if fmt == "tep" else "a"
    return parse_config(
        {
            "site": "s",
            "dataset": {"format": fmt, "missing": missing, **extra},
            "plants": [{"name": "p", "sensors": [sensor]}],
        }
    ).dataset


# (format, sample, {line: field} of sensor cells to blank, loader options)
LAYOUTS = [
    ("csv", "csv/plant-log.csv", {3: 1, 7: 4}, {"time_column": "t", "label_columns": ["fault"]}),
    ("hai", "hai/hai-21.03-test1.csv", {2: 3, 9: 10}, {}),
    ("swat", "swat/SWaT_Dataset_Normal_v1-sample.csv", {3: 2, 8: 5}, {}),
]


@pytest.mark.parametrize(("fmt", "sample", "cells", "extra"), LAYOUTS, ids=[x[0] for x in LAYOUTS])
@pytest.mark.parametrize("token", ["", "nan", "NA", "null"])
def test_a_gap_is_refused_by_default_and_missing_when_allowed(tmp_path, fmt, sample, cells, extra, token):
    source = SAMPLES / sample
    header = next(i for i, line in enumerate(source.read_text().splitlines()) if line.strip())
    shifted = {header + line: field for line, field in cells.items()}
    path = blank(source, tmp_path / Path(sample).name, shifted, token)
    with pytest.raises(DataError, match=r"missing value; fill it or drop the line, or set dataset.missing: allow"):
        load_dataset(options(fmt, "refuse", **extra), path)
    gappy = load_dataset(options(fmt, "allow", **extra), path).frame
    complete = load_dataset(options(fmt, "allow", **extra), source).frame
    holes = np.argwhere(np.isnan(gappy.to_numpy()))
    assert len(holes) == len(cells)
    assert np.array_equal(np.nan_to_num(gappy.to_numpy()), np.where(np.isnan(gappy), 0.0, complete))


def test_an_infinity_or_text_is_still_an_error_when_gaps_are_allowed(tmp_path):
    source = SAMPLES / "csv" / "plant-log.csv"
    extra = {"time_column": "t", "label_columns": ["fault"]}
    for token, message in (("inf", "non-finite value"), ("broken", "'broken' is not a number")):
        path = blank(source, tmp_path / f"{token}.csv", {4: 2}, token)
        with pytest.raises(DataError, match=message):
            load_dataset(options("csv", "allow", **extra), path)


def test_a_workbook_gap_is_missing_when_allowed(tmp_path):
    book = openpyxl.load_workbook(SAMPLES / "swat" / "SWaT_Dataset_Attack_v0-sample.xlsx")
    sheet = book.worksheets[0]
    header = next(r for r in range(1, 20) if any(str(c.value).strip().lower() == "timestamp" for c in sheet[r]))
    sheet.cell(row=header + 4, column=3).value = None
    sheet.cell(row=header + 6, column=5).value = "NA"
    path = tmp_path / "gappy.xlsx"
    book.save(path)
    with pytest.raises(DataError, match="missing value"):
        load_dataset(options("swat", "refuse"), path)
    assert int(np.isnan(load_dataset(options("swat", "allow"), path).frame.to_numpy()).sum()) == 2


def test_a_tep_file_with_nan_values(tmp_path):
    values = np.loadtxt(REPO / "data" / "tep" / "d01_te.dat")
    values[[10, 20], [3, 7]] = np.nan
    path = tmp_path / "d01_te.dat"
    np.savetxt(path, values, fmt="%.6g")
    with pytest.raises(DataError, match=r"dataset.missing: allow"):
        load_dataset(options("tep", "refuse", sample_seconds=180), path)
    frame = load_dataset(options("tep", "allow", sample_seconds=180), path).frame
    assert np.argwhere(np.isnan(frame.to_numpy())).tolist() == [[10, 3], [20, 7]]


def test_nominal_data_refuses_a_mostly_missing_column_naming_it():
    rng = np.random.default_rng(0)
    Y = rng.normal(size=(200, 3))
    Y[rng.random(200) < 0.6, 1] = np.nan
    with pytest.raises(DataError) as err:
        check_nominal(Y, ["a", "b", "c"], plant="p", source="x.csv", missing=True)
    assert str(err.value).count("\n") == 0
    assert "column b is missing in 6" in str(err.value) and "leave it out of the plant" in str(err.value)
    Y[:, 1] = rng.normal(size=200)
    Y[::2, 0] = np.nan
    Y[1::2, 2] = np.nan  # every row has a gap: no complete row to estimate the moments on
    with pytest.raises(DataError, match=r"0 nominal rows have every sensor present"):
        check_nominal(Y, ["a", "b", "c"], plant="p", source="x.csv", missing=True)
    with pytest.raises(DataError, match="non-finite value"):
        check_nominal(Y, ["a", "b", "c"], plant="p", source="x.csv")


# -- every command on a file with gaps ---------------------------------------------------------------


@pytest.fixture(scope="module")
def gappy_site(tmp_path_factory):
    root = tmp_path_factory.mktemp("gappy")
    columns = [f"a{i}" for i in range(6)] + [f"b{i}" for i in range(6)]

    def write(name, data, seed):
        Y = data.Y[:, :12].copy()
        rng = np.random.default_rng(seed)
        Y[rng.random(Y.shape) < 0.05] = np.nan
        Y[100:140, 2] = np.nan  # one sensor dead for a while
        Y[200:203, :6] = np.nan  # plant a has nothing for three rows: degraded
        frame = pd.DataFrame(Y, columns=columns)
        frame.insert(0, "t", np.arange(len(Y), dtype=float))
        path = root / name
        frame.to_csv(path, index=False, na_rep="")
        return path

    nominal = write("nominal.csv", linear_multiplant(n_samples=600, n_plants=2, seed=1), 1)
    test = write("test.csv", linear_multiplant(n_samples=300, n_plants=2, n_events=2, duration=40, seed=2), 2)
    config = root / "site.yaml"
    config.write_text(
        "site: gappy\n"
        "dataset: {format: csv, time_column: t, missing: allow}\n"
        "defaults: {scoring: {folds: 3}}\n"
        "plants:\n"
        "  - {name: a, match: {prefix: a}, model: {n_states: 2}}\n"
        "  - {name: b, match: {prefix: b}, model: {n_states: 2}}\n"
        "graph: {edges: [[a, b]]}\n"
        "training: {rounds: 2}\n"
    )
    return root, config, nominal, test


def test_detect_replay_evaluate_and_train_accept_gaps(gappy_site, capsys):
    root, config, nominal, test = gappy_site
    site = ["--config", str(config)]
    assert main(["detect", *site, "--train", str(nominal), "--input", str(test), "--out", str(root / "d.jsonl")]) == 0
    flags, verdicts = root / "flags.jsonl", root / "verdicts.jsonl"
    argv = ["replay", *site, "--train", str(nominal), "--input", str(test)]
    assert main([*argv, "--flags-out", str(flags), "--verdicts-out", str(verdicts)]) == 0
    lines = [json.loads(line) for line in flags.read_text().splitlines()]
    assert len(lines) == 300 * 2  # not one row dropped for a missing value
    degraded = {(r["plant"], r["seq"]) for r in lines if r.get("degraded")}
    assert {("a", s) for s in range(200, 203)} <= degraded
    assert all(r["zc_pub"] == r["za_pub"] == 0 for r in lines if r.get("degraded"))
    assert main(["evaluate", *site, "--train", str(nominal), "--input", str(test), "--fault-start", "0",
                 "--root-cause", "a", "--json", str(root / "eval.json")]) == 0  # fmt: skip
    assert main(["train", *site, "--data", str(nominal), "--out", str(root / "params"), "--quiet"]) == 0
    assert main([*argv, "--params", str(root / "params"), "--flags-out", str(root / "f2.jsonl"),
                 "--verdicts-out", str(root / "v2.jsonl")]) == 0  # fmt: skip
    capsys.readouterr()


def test_the_default_refuses_the_file_with_the_fix(gappy_site, capsys):
    root, config, nominal, test = gappy_site
    strict = root / "strict.yaml"
    strict.write_text(config.read_text().replace(", missing: allow", ""))
    code = main(["detect", "--config", str(strict), "--train", str(nominal), "--input", str(test), "--out", "-"])
    assert code == 2
    assert "missing value; fill it or drop the line, or set dataset.missing: allow" in capsys.readouterr().err
