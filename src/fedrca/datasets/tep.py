"""Tennessee Eastman Process (TEP) benchmark files.

The files are whitespace-separated floats with 52 columns, XMEAS(1..41) then
XMV(1..11), one row per 3-minute sample. ``d00.dat`` alone is stored transposed,
52 rows of 500 samples; :func:`load_tep` turns exactly that layout (52 lines of
500 values) around and nothing else, so a 52-line file of 53 values is an error,
not a silently transposed file.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from fedrca.config.formats import TEP_COLUMNS
from fedrca.datasets.dataset import Dataset
from fedrca.datasets.table import MAX_VALUES, cell
from fedrca.datasets.text import open_lines
from fedrca.exceptions import DataError

__all__ = [
    "TEP_COLUMNS",
    "TEP_FAULT_ONSET",
    "TEP_FAULT_ROOTS",
    "TEP_FLOWSHEET",
    "TEP_MATERIAL_FLOW",
    "TEP_SAMPLE_SECONDS",
    "TEP_TRANSPOSED_SAMPLES",
    "load_tep",
    "load_tep_dataset",
]

#: In the ``dNN_te.dat`` test files the fault is introduced after this many samples.
TEP_FAULT_ONSET = 160
#: Unit where each bundled fault originates (data/tep/README.md), named as in config/tep.yaml.
TEP_FAULT_ROOTS: dict[str, str] = {"01": "feed", "04": "reactor", "05": "separator", "06": "feed"}
#: Sampling interval of the benchmark.
TEP_SAMPLE_SECONDS = 180.0
#: Samples per line of the transposed ``d00.dat`` (52 lines of 500 values).
TEP_TRANSPOSED_SAMPLES = 500

#: Characters of lines parsed at a time (bounds memory whatever the line width).
_CHUNK_CHARS = 4 << 20


def _parse(lines: list[str], numbers: list[int], file: Path) -> NDArray[np.float64]:
    try:
        return np.loadtxt(lines, dtype=np.float64, ndmin=2, comments=None)
    except (ValueError, OverflowError):
        pass
    for line, number in zip(lines, numbers):  # find the bad value for the message
        for k, token in enumerate(line.split()):
            try:
                float(token)
            except ValueError:
                raise DataError(
                    f"{file}: line {number:,}, value {k + 1}: '{cell(token)}' is not a number; a TEP file is "
                    "whitespace-separated numbers"
                ) from None
    raise DataError(f"{file}: lines {numbers[0]:,}..{numbers[-1]:,} are not whitespace-separated numbers")


def _read(file: Path) -> NDArray[np.float64]:
    blocks: list[NDArray[np.float64]] = []
    chunk: list[str] = []
    numbers: list[int] = []
    width = 0
    first = 0
    rows = 0
    size = 0
    for number, line in open_lines(file, "TEP .dat"):
        tokens = line.split()
        if not tokens:
            continue
        if not width:
            width, first = len(tokens), number
        elif len(tokens) != width:
            raise DataError(
                f"{file}: line {number:,} has {len(tokens)} values, line {first:,} has {width}; every line of a TEP "
                "file has the same number of values"
            )
        chunk.append(line)
        numbers.append(number)
        rows += 1
        size += len(line)
        if rows * width > MAX_VALUES:
            raise DataError(f"{file}: more than {MAX_VALUES:,} values (line {number:,}); split the file into parts")
        if size >= _CHUNK_CHARS:
            blocks.append(_parse(chunk, numbers, file))
            chunk, numbers, size = [], [], 0
    if chunk:
        blocks.append(_parse(chunk, numbers, file))
    if not blocks:
        raise DataError(f"{file}: no data (the file is empty or blank); pass a TEP .dat file such as data/tep/d00.dat")
    return blocks[0] if len(blocks) == 1 else np.vstack(blocks)


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


def load_tep(path: str | Path, *, missing: bool = False) -> pd.DataFrame:
    """Load one TEP ``.dat`` file as a (samples x 52) frame named by :data:`TEP_COLUMNS`.

    Parameters
    ----------
    path : str or Path
        A ``dNN.dat`` / ``dNN_te.dat`` file (plain or ``.gz``); the transposed layout of
        ``d00.dat`` (52 lines of 500 values) is turned around.
    missing : bool
        ``nan`` values are missing values (NaN) instead of errors (``dataset.missing: allow``).

    Returns
    -------
    pandas.DataFrame
        Shape (n_samples, 52), float64, index = 0-based sample number.

    Raises
    ------
    DataError
        When the file is missing or unreadable, not numeric, has a column count other
        than 52, or contains NaN/inf.

    Examples
    --------
    >>> frame = load_tep("data/tep/d00.dat")
    >>> frame.shape
    (500, 52)
    """
    file = Path(path)
    values = _read(file)
    n_cols = len(TEP_COLUMNS)
    rows, width = values.shape
    if width != n_cols:
        if rows == n_cols and width == TEP_TRANSPOSED_SAMPLES:
            values = np.ascontiguousarray(values.T)
        else:
            raise DataError(
                f"{file}: {width} columns, a TEP file has {n_cols} (XMEAS(1)..XMEAS(41), XMV(1)..XMV(11)); only "
                f"d00.dat is stored transposed ({n_cols} lines of {TEP_TRANSPOSED_SAMPLES} values)"
            )
    bad = np.isinf(values) if missing else ~np.isfinite(values)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        fix = "fix the value" if missing else "TEP files must be complete (or set dataset.missing: allow)"
        raise DataError(f"{file}: non-finite value at row {row}, column {TEP_COLUMNS[col]}; {fix}")
    return pd.DataFrame(values, columns=list(TEP_COLUMNS))


def load_tep_dataset(path: str | Path, sample_seconds: float = TEP_SAMPLE_SECONDS, *, missing: bool = False) -> Dataset:
    """A TEP ``.dat`` file with ``ts = row * sample_seconds`` and labels from the file name.

    Labels: ``d00*.dat`` all 0; ``dNN_te.dat`` (NN > 0) 1 from sample :data:`TEP_FAULT_ONSET`
    on; other names have no labels.

    Examples
    --------
    >>> data = load_tep_dataset("data/tep/d04_te.dat")
    >>> data.frame.shape, data.timestamps[:3].tolist(), int(data.attack.sum())
    ((960, 52), [0.0, 180.0, 360.0], 800)
    """
    file = Path(path)
    frame = load_tep(file, missing=missing)
    T = len(frame)
    labels = None
    match = re.fullmatch(r"d(\d\d)(_te)?\.dat(\.gz)?", file.name)
    if match is not None:
        fault = int(match.group(1))
        if fault == 0:
            labels = {"attack": np.zeros(T, dtype=np.int8)}
        elif match.group(2):
            labels = {"attack": (np.arange(T) >= TEP_FAULT_ONSET).astype(np.int8)}
    ts = np.arange(T, dtype=np.float64) * float(sample_seconds)
    return Dataset.build(str(file), "tep", frame.to_numpy(), list(TEP_COLUMNS), ts, labels)
