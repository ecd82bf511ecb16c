"""The commands' output files: checked before any work, written whole or not at all.

:func:`check_paths` runs before a command reads its data: an output that is one of the
inputs (the raw data file, the configuration) or another output of the same command,
an output file that is a directory, or an output directory that is a file is refused
with one line naming both options. A command that fails half-way (a bad row, a full
disk, Ctrl-C) must not leave a truncated file that looks like a result; every output
is written to a temporary file next to its target and renamed over it
(:func:`write_atomic`; :func:`os.replace` is atomic on one file system). Guarded by
``tests/cli/test_hostile_cli.py``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from fedrca.exceptions import DataError

__all__ = ["check_paths", "write_atomic"]

PathArg = str | Path | None


def _same(a: Path, b: Path) -> bool:
    if a.exists() and b.exists():
        try:
            return a.samefile(b)  # hard links and symlinks too
        except OSError:
            return False
    return os.path.realpath(a) == os.path.realpath(b)


def check_paths(
    inputs: Mapping[str, PathArg],
    outputs: Mapping[str, PathArg],
    directories: Mapping[str, PathArg] | None = None,
) -> None:
    """Refuse output paths that would destroy an input or another output, before any work is done.

    Parameters
    ----------
    inputs : option name (e.g. ``"--train"``) -> path read by the command (None: not given)
    outputs : option name -> output file written by the command
    directories : option name -> output directory the command writes files into

    Raises
    ------
    DataError
        naming the two options and the path.
    """
    given_in = {k: Path(v) for k, v in inputs.items() if v is not None}
    files = {k: Path(v) for k, v in outputs.items() if v is not None}
    dirs = {k: Path(v) for k, v in (directories or {}).items() if v is not None}
    for option, path in files.items():
        if path.is_dir():
            raise DataError(f"{option} {path} is a directory; give the path of a file to write")
        if path.parent.exists() and not path.parent.is_dir():
            raise DataError(f"{option} {path}: {path.parent} is a file, not a directory")
    for option, path in dirs.items():
        if path.exists() and not path.is_dir():
            raise DataError(f"{option} {path} is a file; give a directory (it is created when missing)")
    outs = [*files.items(), *dirs.items()]
    for k, (option, path) in enumerate(outs):
        for other, other_path in outs[k + 1 :]:
            if _same(path, other_path):
                raise DataError(f"{option} and {other} are the same path ({path}); give each output its own path")
        for source, source_path in given_in.items():
            if _same(path, source_path):
                raise DataError(
                    f"{option} {path} is the {source} input: writing would destroy it; give another output path"
                )


def write_atomic(path: str | Path, data: str | bytes) -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` by a temporary file and a rename; returns the path.

    The parent directory is created. On any error the temporary file is removed and
    the target keeps its old content (or stays absent). A target that is a device, FIFO
    or socket (``/dev/stdout``) is written in place instead.
    """
    target = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    if target.exists() and not target.is_file() and not target.is_dir():
        # a device, FIFO or socket (/dev/stdout, a pipe): written in place, never replaced by a file
        try:
            with target.open("wb") as out:
                out.write(payload)
        except OSError as exc:
            raise DataError(f"{target}: cannot write the output ({exc.strerror or exc})") from None
        return target
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
