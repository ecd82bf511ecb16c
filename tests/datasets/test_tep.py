"""TEP loader: layout, the transposed d00.dat and nothing else, errors."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from fedrca.datasets import TEP_COLUMNS, load_tep, load_tep_dataset
from fedrca.exceptions import DataError


def test_transposed_training_file_is_fixed(tep_dir):
    train = load_tep(tep_dir / "d00.dat")
    raw = np.loadtxt(tep_dir / "d00.dat")
    assert raw.shape == (52, 500) and train.shape == (500, 52)
    assert np.array_equal(train.to_numpy(), raw.T)
    assert list(train.columns) == list(TEP_COLUMNS)
    assert load_tep(tep_dir / "d04_te.dat").shape == (960, 52)


def test_only_the_real_transposed_layout_is_turned_around(tmp_path):
    # 52 lines of 53 values is not d00.dat: refused, not read as 53 samples of 52 columns
    square_ish = tmp_path / "d07.dat"
    np.savetxt(square_ish, np.random.default_rng(0).normal(size=(52, 53)))
    with pytest.raises(DataError, match=r"d07.dat: 53 columns, a TEP file has 52 .* only d00.dat is stored transposed"):
        load_tep(square_ish)
    other = tmp_path / "x.dat"
    np.savetxt(other, np.ones((52, 480)))
    with pytest.raises(DataError, match="480 columns, a TEP file has 52"):
        load_tep(other)
    # 52 samples of 52 columns are 52 samples, as stored
    square = tmp_path / "sq.dat"
    values = np.random.default_rng(1).normal(size=(52, 52))
    np.savetxt(square, values)
    np.testing.assert_allclose(load_tep(square).to_numpy(), values, rtol=1e-15)


def test_labels_and_times_from_the_file_name(tep_dir, tmp_path):
    data = load_tep_dataset(tep_dir / "d04_te.dat", sample_seconds=180)
    assert data.format == "tep" and data.rows == 960 and data.columns == list(TEP_COLUMNS)
    np.testing.assert_array_equal(data.frame.to_numpy(), np.loadtxt(tep_dir / "d04_te.dat"))
    np.testing.assert_array_equal(data.timestamps, np.arange(960) * 180.0)
    assert data.attack[:160].sum() == 0 and data.attack[160:].all()
    nominal = load_tep_dataset(tep_dir / "d00.dat", sample_seconds=3)
    assert nominal.timestamps[-1] == 499 * 3 and nominal.attack.sum() == 0
    copy = tmp_path / "run7.dat"
    copy.write_bytes((tep_dir / "d01_te.dat").read_bytes())
    assert load_tep_dataset(copy).labels is None
    zipped = tmp_path / "d01_te.dat.gz"
    zipped.write_bytes(gzip.compress((tep_dir / "d01_te.dat").read_bytes()))
    np.testing.assert_array_equal(load_tep_dataset(zipped).attack, load_tep_dataset(tep_dir / "d01_te.dat").attack)


def test_errors(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        load_tep(tmp_path / "nope.dat")
    short = tmp_path / "short.dat"
    np.savetxt(short, np.ones((5, 40)))
    with pytest.raises(DataError, match="40 columns, a TEP file has 52"):
        load_tep(short)
    holes = tmp_path / "nan.dat"
    values = np.ones((5, 52))
    values[3, 7] = np.nan
    np.savetxt(holes, values)
    with pytest.raises(DataError, match=r"row 3, column XMEAS\(8\)"):
        load_tep(holes)
    text = tmp_path / "text.dat"
    text.write_text("1 2 3\n4 a 6\n")
    with pytest.raises(DataError, match=r"text.dat: line 2, value 2: 'a' is not a number; a TEP file is whitespace"):
        load_tep(text)
    ragged = tmp_path / "ragged.dat"
    ragged.write_text("1 2 3\n4 5\n")
    with pytest.raises(DataError, match="line 2 has 2 values, line 1 has 3"):
        load_tep(ragged)
    empty = tmp_path / "empty.dat"
    empty.write_text("\n \n")
    with pytest.raises(DataError, match=r"empty\.dat: no data"):
        load_tep(empty)
