"""Where the bundled configurations and TEP files are, for a source checkout and an installed wheel alike.

The wheel carries ``config/*.yaml`` and ``data/tep/*`` as package data under
``fedrca/_bundled`` (in the source tree those are links to the checkout's
``config/`` and ``data/``), so ``fedrca demo`` runs from an installed package
without a checkout. ``$FEDRCA_DATA`` points the data elsewhere.
"""

from __future__ import annotations

import os
from pathlib import Path

from fedrca.exceptions import DataError

__all__ = ["bundled_config", "bundled_data_dir"]

_ROOT = Path(__file__).resolve().parents[1] / "_bundled"


def bundled_data_dir() -> Path:
    """The data directory holding ``tep/*.dat``: ``$FEDRCA_DATA``, else the bundled one."""
    env = os.environ.get("FEDRCA_DATA")
    return Path(env) if env else _ROOT / "data"


def bundled_config(name: str) -> Path:
    """A bundled configuration file (e.g. ``tep.yaml``).

    Raises
    ------
    DataError
        When the installation does not carry it (a broken install).
    """
    path = _ROOT / "config" / name
    if not path.is_file():
        raise DataError(f"the bundled configuration {name} is missing from {path.parent}; reinstall fedrca")
    return path
