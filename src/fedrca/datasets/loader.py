"""The one entry point from a configuration's ``dataset`` section to a parsed file.

Every command reads its data files through :func:`load_dataset` (``detect``,
``train``, ``replay``, ``evaluate`` via :func:`fedrca.site.load_frame`, and
``replay-to-kafka``), so they all accept and refuse the same files.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from fedrca.datasets.dataset import Dataset
from fedrca.datasets.generic import load_csv
from fedrca.datasets.hai import load_hai
from fedrca.datasets.swat import load_swat
from fedrca.datasets.tep import load_tep_dataset
from fedrca.exceptions import ConfigError

__all__ = ["DatasetOptions", "load_dataset"]


class DatasetOptions(Protocol):
    """What :func:`load_dataset` reads from a configuration's ``dataset`` section."""

    @property
    def format(self) -> str: ...

    @property
    def time_column(self) -> str | None: ...

    @property
    def sample_seconds(self) -> float: ...

    @property
    def label_columns(self) -> Sequence[str]: ...


def load_dataset(options: DatasetOptions, path: str | Path, labels_path: str | Path | None = None) -> Dataset:
    """Parse a recorded file in the configured format.

    Parameters
    ----------
    options : the configuration's ``dataset`` section (``format``, ``time_column``,
        ``sample_seconds``, ``label_columns``, ``timezone``, ``time_format``)
    path : the data file
    labels_path : HAI 23.05 / HAIEnd 23.05 only: the separate label file

    Raises
    ------
    DataError
        When the file breaks its format (one line naming the file, the line, the fix).
    ConfigError
        When a label file is given for a format that has none.
    """
    fmt = options.format
    timezone = str(getattr(options, "timezone", "UTC") or "UTC")
    time_format = getattr(options, "time_format", None)
    if labels_path is not None and fmt != "hai":
        raise ConfigError(
            f"a separate label file is only read for HAI 23.05 / HAIEnd 23.05 data, not for format '{fmt}'; "
            "drop --labels",
            key="--labels",
        )
    if fmt == "tep":
        return load_tep_dataset(path, sample_seconds=options.sample_seconds)
    if fmt == "hai":
        return load_hai(path, labels_path=labels_path, timezone=timezone, time_format=time_format)
    if fmt == "swat":
        return load_swat(path, timezone=timezone, time_format=time_format)
    return load_csv(
        path,
        options.time_column,
        options.sample_seconds,
        label_columns=list(options.label_columns),
        time_format=time_format,
        timezone=timezone,
    )
