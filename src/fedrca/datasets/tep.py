"""Tennessee Eastman Process (TEP) benchmark files.

The files are whitespace-separated floats with 52 columns, XMEAS(1..41) then
XMV(1..11), one row per 3-minute sample. ``d00.dat`` is stored transposed
(52 rows x 500 samples); :func:`load_tep` detects and fixes that.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from fedrca.config.formats import TEP_COLUMNS
from fedrca.exceptions import DataError

__all__ = [
    "TEP_COLUMNS",
    "TEP_FAULT_ONSET",
    "TEP_FAULT_ROOTS",
    "TEP_FLOWSHEET",
    "TEP_MATERIAL_FLOW",
    "TEP_SAMPLE_SECONDS",
    "load_tep",
]

#: In the ``dNN_te.dat`` test files the fault is introduced after this many samples.
TEP_FAULT_ONSET = 160
#: Unit where each bundled fault originates (data/tep/README.md), named as in config/tep.yaml.
TEP_FAULT_ROOTS: dict[str, str] = {"01": "feed", "04": "reactor", "05": "separator", "06": "feed"}
#: Sampling interval of the benchmark.
TEP_SAMPLE_SECONDS = 180.0

#: Material flows between the five TEP plants of ``config/tep.yaml`` (Downs & Vogel 1993):
#: streams 1-3 (A, D, E) enter the reactor, stream 4 (A and C) enters the stripper, the
#: stripper overhead (stream 5) and the recycle (stream 8) join the reactor feed, the reactor
#: product goes to the condenser/separator, whose vapour goes to the compressor (and purge)
#: and whose liquid goes to the stripper.
TEP_MATERIAL_FLOW: list[tuple[str, str]] = [
    ("feed", "reactor"),
    ("feed", "stripper"),
    ("stripper", "reactor"),
    ("compressor", "reactor"),
    ("reactor", "separator"),
    ("separator", "compressor"),
    ("separator", "stripper"),
]

#: The TEP interdependencies a site can declare (``graph.edges``): the material flows plus the
#: control loops of the data set's decentralised control structure that cross plants. The
#: reactor-feed analysers (XMEAS 23, 26, 27) set the A, D and E feed flow set points and the
#: reactor level (XMEAS 8) sets the A and C feed set point, so the reactor drives the feed
#: unit's flows and valves (the strongest block of the graph learned without DP noise, too).
#: Its reachability is complete (recycle + control): every plant can reach every other.
TEP_FLOWSHEET: list[tuple[str, str]] = [*TEP_MATERIAL_FLOW, ("reactor", "feed")]


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
