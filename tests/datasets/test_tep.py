"""TEP loader."""

from __future__ import annotations

import numpy as np
import pytest

from fedrca.datasets import TEP_COLUMNS, load_tep
from fedrca.exceptions import DataError


def test_transposed_training_file_is_fixed(tep_dir):
    train = load_tep(tep_dir / "d00.dat")
    raw = np.loadtxt(tep_dir / "d00.dat")
    assert raw.shape == (52, 500) and train.shape == (500, 52)
    assert np.array_equal(train.to_numpy(), raw.T)
    assert list(train.columns) == list(TEP_COLUMNS)
    assert load_tep(tep_dir / "d04_te.dat").shape == (960, 52)


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
    text.write_text("a b c\n")
    with pytest.raises(DataError, match="not a whitespace-separated numeric"):
        load_tep(text)
