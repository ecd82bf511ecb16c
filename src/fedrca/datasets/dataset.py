"""The recorded data set every parser returns: sensor frame, timestamps, labels."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from fedrca.exceptions import DataError

__all__ = ["Dataset"]

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class Dataset:
    """A recorded file, parsed.

    Attributes
    ----------
    frame : pandas.DataFrame
        (T, D) float64 sensor columns in file order (names stripped of surrounding spaces),
        index 0..T-1; every value finite.
    timestamps : ndarray
        (T,) seconds, non-decreasing: seconds since the epoch (UTC) for dated formats (local
        times converted from ``dataset.timezone``), ``row * sample_seconds`` for TEP and for
        CSV files without a time column, the column's numbers for numeric time columns.
    labels : pandas.DataFrame or None
        (T, K) int8 0/1: column ``attack`` (any attack or fault) first and, when the format
        has them, per-process columns (HAI 20.07/21.03: ``attack_P1`` .. ``attack_P3``).
    source : str
        The file it came from.
    format : str
        ``tep``, ``hai``, ``swat`` or ``csv``.
    """

    frame: pd.DataFrame
    timestamps: FloatArray
    labels: pd.DataFrame | None
    source: str
    format: str

    def __post_init__(self) -> None:
        if len(self.timestamps) != len(self.frame) or (self.labels is not None and len(self.labels) != len(self.frame)):
            raise DataError(f"{self.source}: frame, timestamps and labels must have the same number of rows")

    @property
    def rows(self) -> int:
        """Number of rows (samples) T."""
        return len(self.frame)

    @property
    def columns(self) -> list[str]:
        """Sensor column names in file order."""
        return [str(c) for c in self.frame.columns]

    @property
    def attack(self) -> NDArray[np.int8] | None:
        """(T,) overall 0/1 label, or None when the file has no labels."""
        return None if self.labels is None else self.labels["attack"].to_numpy(np.int8)

    @classmethod
    def build(
        cls,
        source: str,
        fmt: str,
        values: FloatArray,
        columns: list[str],
        timestamps: FloatArray,
        labels: dict[str, NDArray[np.int8]] | None,
    ) -> Dataset:
        """A dataset from a (T, D) matrix, its column names, (T,) times and label columns."""
        frame = pd.DataFrame(np.ascontiguousarray(values, dtype=np.float64), columns=columns)
        table = None
        if labels:
            table = pd.DataFrame({k: np.asarray(v, dtype=np.int8) for k, v in labels.items()})
            if "attack" not in table:
                table.insert(0, "attack", table.max(axis=1).astype(np.int8))
            else:
                table = table[["attack", *[c for c in table.columns if c != "attack"]]]
        return cls(frame, np.ascontiguousarray(timestamps, dtype=np.float64), table, source, fmt)
