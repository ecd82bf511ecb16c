"""Tennessee Eastman Process (TEP) benchmark files.

The files are whitespace-separated floats with 52 columns, XMEAS(1..41) then
XMV(1..11), one row per 3-minute sample. ``d00.dat`` is stored transposed
(52 rows x 500 samples); :func:`load_tep` detects and fixes that.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from fedrca.exceptions import DataError

__all__ = ["TEP_COLUMNS", "TEP_FAULT_ONSET", "TEP_FAULT_ROOTS", "TEP_SAMPLE_SECONDS", "load_tep"]

#: Column names in file order: 41 measurements then 11 manipulated variables.
TEP_COLUMNS: tuple[str, ...] = tuple([f"XMEAS({i})" for i in range(1, 42)] + [f"XMV({i})" for i in range(1, 12)])
#: In the ``dNN_te.dat`` test files the fault is introduced after this many samples.
TEP_FAULT_ONSET = 160
#: Unit where each bundled fault originates (data/tep/README.md), named as in config/tep.yaml.
TEP_FAULT_ROOTS: dict[str, str] = {"01": "feed", "04": "reactor", "05": "separator", "06": "feed"}
#: Sampling interval of the benchmark.
TEP_SAMPLE_SECONDS = 180.0


def load_tep(path: str | Path) -> pd.DataFrame:
    """Load one TEP ``.dat`` file as a (samples x 52) frame named by :data:`TEP_COLUMNS`.

    Parameters
    ----------
    path : str or Path
        A ``dNN.dat`` / ``dNN_te.dat`` file; transposed files (52 rows) are accepted.

    Returns
    -------
    pandas.DataFrame
        Shape (n_samples, 52), float64, index = 0-based sample number.

    Raises
    ------
    DataError
        When the file is missing, not numeric, has a column count other than 52,
        or contains NaN/inf.

    Examples
    --------
    >>> frame = load_tep("data/tep/d00.dat")
    >>> frame.shape
    (500, 52)
    """
    file = Path(path)
    if not file.is_file():
        raise DataError(f"{file}: no such file; pass a TEP .dat file such as data/tep/d00.dat")
    try:
        values = np.loadtxt(file, dtype=np.float64, ndmin=2)
    except ValueError as exc:
        raise DataError(f"{file}: not a whitespace-separated numeric TEP file ({exc})") from None
    n_cols = len(TEP_COLUMNS)
    if values.shape[1] != n_cols and values.shape[0] == n_cols:
        values = values.T
    if values.shape[1] != n_cols:
        raise DataError(
            f"{file}: {values.shape[1]} columns, a TEP file has {n_cols} (XMEAS(1)..XMEAS(41), XMV(1)..XMV(11))"
        )
    bad = ~np.isfinite(values)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        raise DataError(f"{file}: non-finite value at row {row}, column {TEP_COLUMNS[col]}; TEP files must be complete")
    return pd.DataFrame(values, columns=list(TEP_COLUMNS))
