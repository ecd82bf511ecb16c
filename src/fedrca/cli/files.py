"""Writing the commands' output files: whole or not at all.

A command that fails half-way (a bad row, a full disk, Ctrl-C) must not leave a
truncated file that looks like a result; every output is written to a temporary
file next to its target and renamed over it (:func:`os.replace` is atomic on one
file system). Guarded by ``tests/cli/test_files.py``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from fedrca.exceptions import DataError

__all__ = ["write_atomic"]


def write_atomic(path: str | Path, data: str | bytes) -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` by a temporary file and a rename; returns the path.

    The parent directory is created. On any error the temporary file is removed and
    the target keeps its old content (or stays absent).
    """
    target = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:
        raise DataError(f"{target}: cannot write the output ({exc.strerror or exc})") from None
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(payload)
        os.replace(tmp, target)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise DataError(f"{target}: cannot write the output ({exc.strerror or exc})") from None
        raise
    return target
