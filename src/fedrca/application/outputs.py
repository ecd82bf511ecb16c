"""The one output layer of every command: outputs checked before any work, written whole or not at all.

Every file or folder a ``fedrca`` command writes goes through this module.

* :meth:`Outputs.plan` runs before a command reads its data. It refuses, with one line
  naming the option and the fix: an output that is a device node, FIFO or socket (it would
  be written in place or replaced by a regular file); an output file that is a directory,
  or an output folder that is a file; an output that is, links to, or lies inside an input
  (every file of an input folder such as ``--params`` or a ``--sites`` directory counts, hard
  links included) or another output; a name longer than the file system allows; and a
  location that cannot be written (read-only file system, no permission, no space for a
  new file: a probe file is created and removed there). Inputs that are device nodes or
  FIFOs are refused too (reading ``/dev/zero`` never ends).
* A plan is a transaction: ``with Outputs.plan(...) as out:`` the command writes every file
  output (:meth:`Outputs.write`) to a temporary file in the target's directory and every
  folder output (:meth:`Outputs.folder`: a report, a fleet's model and reports, training
  artifacts) into a hidden stage next to (or inside) the target; only when the command's
  work ended without an error are they moved into place, each by :func:`os.replace`
  (atomic on one file system). A run cut short (a full disk, Ctrl-C, a bad row) leaves the
  old outputs, or none, never a truncated file or half a folder, and removes the
  directories it created.
* :func:`write_file` / :func:`write_with` / :func:`staged_folder` do the same for one file
  or folder outside a plan.
* :func:`cannot_write` turns an :class:`OSError` (``ENOSPC``, ``EDQUOT``, ``EFBIG``,
  ``EROFS``, ``EACCES``, ``EPERM``, ``ENAMETOOLONG`` ...) into one
  :class:`~fedrca.exceptions.OutputError` line naming the option, the path and the fix.

Guarded by ``tests/application/test_outputs.py`` (the layer, real ``ENOSPC``/``EROFS`` in a private
mount namespace and ``EFBIG`` under a file-size limit) and ``tests/cli/test_hostile_cli.py``
(every command).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from fedrca.exceptions import DataError, OutputError

__all__ = [
    "TMP_PREFIX",
    "Outputs",
    "cannot_write",
    "lock_path",
    "make_parents",
    "remove_created",
    "staged_folder",
    "write_file",
    "write_with",
]

PathArg = str | Path | None

#: Prefix of every temporary file or folder this layer makes (short: a target name near the
#: file system's limit must still leave room for it).
TMP_PREFIX = ".fedrca-"
#: Files of an input folder whose identities are collected (a hard link elsewhere to any of
#: them is refused as an output); deeper or larger folders are still covered by the
#: "inside an input folder" rule.
MAX_INPUT_FILES = 100_000

_FIX = {
    errno.ENOSPC: "the disk is full: free space or give a path on another file system",
    errno.EDQUOT: "the disk quota is used up: free space or give a path on another file system",
    errno.EFBIG: "the file is larger than the file system or the file-size limit (ulimit -f) allows: "
    "raise the limit or give a path on another file system",
    errno.EROFS: "the file system is read-only: give a path on a writable file system",
    errno.EACCES: "permission denied: give a path you may write",
    errno.EPERM: "the operation is not permitted there: give a path you may write",
    errno.ENAMETOOLONG: "the name is too long for the file system: give a shorter path",
    errno.EISDIR: "a directory is in the way: give the path of a file",
    errno.ENOTDIR: "a file is in the way of a directory in the path: give another path",
}


def _where(option: str | None, path: Path | str) -> str:
    return f"{option} {path}" if option else str(path)


def cannot_write(option: str | None, path: Path | str, exc: OSError) -> OutputError:
    """The one-line error of a failed write: option, path, the system's reason and the fix."""
    reason = exc.strerror or type(exc).__name__
    fix = _FIX.get(exc.errno or 0, "give another path")
    return OutputError(f"{_where(option, path)}: cannot write ({reason}); {fix}")


def _kind(mode: int) -> str | None:
    """'character device', 'FIFO', ... for a special file's mode; None for a regular file or directory."""
    for test, name in (
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISFIFO, "FIFO (named pipe)"),
        (stat.S_ISSOCK, "socket"),
    ):
        if test(mode):
            return name
    return None


def _stat(path: Path) -> os.stat_result | None:
    try:
        return path.stat()
    except (OSError, ValueError):  # missing, dangling link, a component that is a file, NUL in the name
        return None


def _identity(path: Path) -> tuple[int, int] | None:
    st = _stat(path)
    return None if st is None else (st.st_dev, st.st_ino)


def _real(path: Path) -> str:
    return os.path.realpath(path)


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _existing_ancestor(path: Path) -> Path:
    """The nearest ancestor of ``path`` that exists (``path`` itself when it exists)."""
    current = Path(os.path.abspath(path))
    while not os.path.lexists(current) and current != current.parent:
        current = current.parent
    return current


def _check_names(option: str, path: Path) -> None:
    """Refuse a path with a component longer than the file system allows (before any work)."""
    anchor = _existing_ancestor(path)
    try:
        name_max = os.pathconf(anchor if anchor.is_dir() else anchor.parent, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    for part in Path(os.path.abspath(path)).parts:
        if len(os.fsencode(part)) > name_max:
            raise OutputError(
                f"{option} {path}: the name '{part[:40]}...' has {len(os.fsencode(part))} bytes, the file system "
                f"allows {name_max}; give a shorter path"
            )
    if len(os.fsencode(os.path.abspath(path))) + 40 > 4096:
        raise OutputError(f"{option}: the path is longer than the file system allows (4096 bytes); give a shorter one")


def _probe(option: str, path: Path, folder: bool) -> None:
    """Create and remove a temporary file where ``path`` (a ``folder`` or a file) will be written: in the folder
    itself when it exists, else in the nearest existing directory above it."""
    anchor = _existing_ancestor(path if folder else path.parent)
    if not anchor.is_dir():
        raise OutputError(f"{option} {path}: {anchor} is a file, not a directory; give another path")
    try:
        fd, probe = tempfile.mkstemp(dir=anchor, prefix=f"{TMP_PREFIX}probe-")
    except OSError as exc:
        raise cannot_write(option, path, exc) from None
    os.close(fd)
    os.unlink(probe)


@dataclass(frozen=True)
class _Inputs:
    """The inputs of a run: identities of every input file (folders' files included) and the input folders."""

    ids: dict[tuple[int, int], str] = field(default_factory=dict)  # (st_dev, st_ino) -> option
    paths: dict[str, str] = field(default_factory=dict)  # real path -> option
    folders: dict[str, str] = field(default_factory=dict)  # real path of an input folder -> option

    @classmethod
    def collect(cls, inputs: Mapping[str, PathArg], folders: Mapping[str, PathArg]) -> _Inputs:
        found = cls()
        for option, raw in [*inputs.items(), *folders.items()]:
            if raw is None or str(raw) == "":
                continue
            path = Path(raw)
            st = _stat(path)
            found.paths[_real(path)] = option
            if st is None:
                continue  # a missing input is the reader's error (with its own fix)
            kind = _kind(st.st_mode)
            if kind is not None:
                what = "a file or a folder" if option in folders else "a file"
                raise DataError(f"{option} {path} is a {kind}, not a regular file; give {what} to read")
            found.ids[(st.st_dev, st.st_ino)] = option
            if stat.S_ISDIR(st.st_mode):
                if option not in folders:
                    raise DataError(f"{option} {path} is a directory; give a file")
                found.folders[_real(path)] = option
                found._walk(path, option)
        return found

    def _walk(self, folder: Path, option: str) -> None:
        seen = 0
        for root, _dirs, files in os.walk(folder):
            for name in files:
                st = _stat(Path(root) / name)
                if st is not None:
                    self.ids.setdefault((st.st_dev, st.st_ino), option)
                seen += 1
                if seen >= MAX_INPUT_FILES:
                    return

    def alias(self, option: str, path: Path) -> str | None:
        """Why writing ``path`` would destroy an input (it is one, links to one, lies in an input folder); else None."""
        st = _stat(path)
        source = self.ids.get((st.st_dev, st.st_ino)) if st is not None else None
        source = source or self.paths.get(_real(path))
        if source is not None:
            return f"{option} {path} is the {source} input: writing would destroy it; give another output path"
        real = _real(path)
        for folder, source in self.folders.items():
            if _inside(real, folder):
                return (
                    f"{option} {path} is inside the {source} folder {folder}: writing would change that input; "
                    "give a path outside it"
                )
        return None


class Outputs:
    """A command's checked outputs, written as one transaction (see the module docstring).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "data.csv").write_text("a\\n1\\n")
    >>> with Outputs.plan({"--input": d / "data.csv"}, files={"--out": d / "flags.jsonl"}) as out:
    ...     _ = out.write("--out", "{}\\n")
    ...     (d / "flags.jsonl").exists()  # not before the work ended
    False
    >>> (d / "flags.jsonl").read_text()
    '{}\\n'
    >>> try:
    ...     Outputs.plan({"--input": d / "data.csv"}, files={"--out": d / "data.csv"})
    ... except DataError as exc:
    ...     print(str(exc).split("data.csv ")[1].split(":")[0])
    is the --input input
    """

    def __init__(self, files: Mapping[str, Path], folders: Mapping[str, Path], inputs: _Inputs) -> None:
        self.files = dict(files)
        self.folders = dict(folders)
        self._inputs = inputs
        self._pending: list[tuple[str, Path, Path, list[Path]]] = []  # option, temporary, target, created dirs
        self._stages: list[tuple[str, Path, Path]] = []  # option, stage, target folder
        self._locks: list[tuple[int, Path]] = []  # a folder lock's descriptor and file

    @classmethod
    def plan(
        cls,
        inputs: Mapping[str, PathArg],
        files: Mapping[str, PathArg] | None = None,
        folders: Mapping[str, PathArg] | None = None,
        *,
        input_folders: Mapping[str, PathArg] | None = None,
    ) -> Outputs:
        """Check every output against the inputs, each other and the file system, before any work.

        Parameters
        ----------
        inputs : option (e.g. ``"--train"``) -> file the command reads (None: not given); a directory is refused
        files : option -> output file
        folders : option -> output folder (created when missing; its files are staged and moved in at the end)
        input_folders : option -> folder (or file) the command reads, e.g. ``--params``; every file in it is an input

        Raises
        ------
        DataError
            (an :class:`~fedrca.exceptions.OutputError` for a location that cannot be written) naming the option,
            the path and the fix.
        """
        given = _Inputs.collect(inputs, input_folders or {})
        out_files = {k: Path(v) for k, v in (files or {}).items() if v is not None}
        out_folders = {k: Path(v) for k, v in (folders or {}).items() if v is not None}
        outs = [*out_files.items(), *out_folders.items()]
        for option, path in outs:
            _check_names(option, path)
        for option, path in out_files.items():
            st = _stat(path)
            if st is not None and stat.S_ISDIR(st.st_mode):
                raise DataError(f"{option} {path} is a directory; give the path of a file to write")
            if st is not None and (kind := _kind(st.st_mode)) is not None:
                raise DataError(
                    f"{option} {path} is a {kind}, not a regular file; give the path of a file (outputs are written "
                    "whole, through a temporary file and a rename)"
                )
        for option, path in out_folders.items():
            st = _stat(path)
            if st is not None and not stat.S_ISDIR(st.st_mode):
                raise DataError(f"{option} {path} is a file; give a directory (it is created when missing)")
        for k, (option, path) in enumerate(outs):
            for other, other_path in outs[k + 1 :]:
                same_file = _identity(path) is not None and _identity(path) == _identity(other_path)
                if same_file or _real(path) == _real(other_path):
                    raise DataError(f"{option} and {other} are the same path ({path}); give each output its own path")
            clash = given.alias(option, path)
            if clash is not None:
                raise DataError(clash)
        for option, path in out_files.items():
            for folder_option, folder in out_folders.items():
                if _inside(_real(path), _real(folder)):
                    raise DataError(
                        f"{option} {path} is inside the {folder_option} folder {folder}; give {option} a path "
                        "outside it"
                    )
        for option, path in outs:
            _probe(option, path, folder=option in out_folders)
        return cls(out_files, out_folders, given)

    def path(self, option: str) -> Path:
        """The checked path of an output option."""
        return self.files[option] if option in self.files else self.folders[option]

    def write(self, option: str, data: str | bytes) -> Path:
        """Write a file output (text as UTF-8) to its temporary file; it replaces the target at :meth:`commit`."""
        payload = data.encode("utf-8") if isinstance(data, str) else data
        return self.write_with(option, lambda out: out.write(payload))

    def write_with(self, option: str, writer: Callable[[BinaryIO], object]) -> Path:
        """Write a file output with ``writer(binary file)``; it replaces the target at :meth:`commit`."""
        target = self.files[option]
        tmp, created = _write_temporary(target, writer, option)
        self._pending.append((option, tmp, target, created))
        return target

    @contextlib.contextmanager
    def folder(self, option: str) -> Iterator[Path]:
        """Yield the stage of a folder output to write into; its content moves into place at :meth:`commit`."""
        target = self.folders[option]
        stage = _open_stage(target, option)
        try:
            yield stage
        except BaseException as exc:
            shutil.rmtree(stage, ignore_errors=True)
            raise _in_stage(exc, stage, target, option) from None
        self._stages.append((option, stage, target))

    def commit(self) -> None:
        """Move every written output into place (each by an atomic rename); the stages are removed."""
        try:
            for option, stage, target in self._stages:
                _check_stage(stage, target, option, self._inputs.alias)
            for option, tmp, target, _created in self._pending:
                try:
                    os.replace(tmp, target)
                except OSError as exc:
                    raise cannot_write(option, target, exc) from None
            self._pending = []
            for option, stage, target in list(self._stages):
                _commit_stage(stage, target, option)
                self._stages.remove((option, stage, target))
        finally:
            self.discard()

    def discard(self) -> None:
        """Remove every temporary file and stage not yet moved into place, and the directories made for them."""
        for _option, tmp, _target, created in self._pending:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            remove_created(created)
        for _option, stage, _target in self._stages:
            shutil.rmtree(stage, ignore_errors=True)
        self._pending, self._stages = [], []
        self._unlock()

    def _lock(self) -> None:
        """Lock every folder output for this command until it commits or discards.

        Two commands writing one folder at once (``train --fresh --out D`` twice) would leave a mix of
        both: the second is refused at once instead. The lock is the kernel's (``flock``) on a hidden
        file beside the folder (in its nearest existing ancestor: the folder itself appears only at the
        end), removed with the lock; a command that dies leaves no lock held.
        """
        for option, target in self.folders.items():
            path = lock_path(target)
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            except OSError as exc:
                self._unlock()
                raise cannot_write(option, target, exc) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                # the file may have been removed by the holder that just let go: then it is not the lock
                if os.fstat(fd).st_ino != os.stat(path).st_ino:
                    raise BlockingIOError
            except OSError:
                os.close(fd)
                self._unlock()
                raise DataError(
                    f"{option} {target} is being written by another fedrca command; wait until it ends, or give "
                    "another folder"
                ) from None
            self._locks.append((fd, path))

    def _unlock(self) -> None:
        for fd, path in self._locks:
            with contextlib.suppress(OSError):
                os.unlink(path)  # while it is held: a command that opens it next sees it gone and locks anew
            os.close(fd)
        self._locks = []

    def __enter__(self) -> Outputs:
        self._lock()
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is None:
            self.commit()
        else:
            self.discard()


def lock_path(folder: str | Path) -> Path:
    """The hidden lock file of a folder output: beside it, in its nearest existing ancestor (named by its real path)."""
    real = os.path.realpath(folder)
    anchor = _existing_ancestor(Path(real).parent)
    return anchor / f"{TMP_PREFIX}lock-{hashlib.sha1(real.encode()).hexdigest()[:16]}"


def make_parents(directory: Path) -> list[Path]:
    """Create ``directory`` and its missing parents; returns the ones created (innermost first)."""
    created: list[Path] = []
    current = Path(os.path.abspath(directory))
    while not os.path.lexists(current):
        created.append(current)
        current = current.parent
    for d in reversed(created):
        d.mkdir()
    return created


def remove_created(created: Iterable[Path]) -> None:
    """Remove the directories :func:`make_parents` created, innermost first, as far as they are empty."""
    for d in created:
        with contextlib.suppress(OSError):
            d.rmdir()  # only when still empty


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _write_temporary(target: Path, writer: Callable[[BinaryIO], object], option: str | None) -> tuple[Path, list[Path]]:
    """Write a temporary file in ``target``'s directory (created when missing); (its path, directories created)."""
    st = _stat(target)
    if st is not None and not stat.S_ISREG(st.st_mode):
        what = "a directory" if stat.S_ISDIR(st.st_mode) else f"a {_kind(st.st_mode)}"
        raise DataError(f"{_where(option, target)} is {what}, not a regular file; give the path of a file to write")
    created: list[Path] = []
    tmp: str | None = None
    try:
        created = make_parents(target.parent)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=TMP_PREFIX, suffix=".tmp")
        with os.fdopen(fd, "wb") as out:
            writer(out)
        os.chmod(tmp, 0o666 & ~_umask())
    except BaseException as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        remove_created(created)
        if isinstance(exc, OSError):
            raise cannot_write(option, target, exc) from None
        raise
    return Path(tmp), created


def write_with(path: str | Path, writer: Callable[[BinaryIO], object], *, option: str | None = None) -> Path:
    """Write ``path`` whole: ``writer`` fills a temporary file in the same directory, which then replaces ``path``.

    Missing parent directories are created (and removed again when the write fails). A target
    that is a device node, FIFO, socket or directory is refused: it would be written in place
    or replaced by a regular file.

    Raises
    ------
    OutputError
        When the file system refuses (full, read-only, no permission ...): one line naming
        ``option``, the path and the fix; the target keeps its old content (or stays absent).
    """
    target = Path(path)
    tmp, created = _write_temporary(target, writer, option)
    try:
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        remove_created(created)
        raise cannot_write(option, target, exc) from None
    return target


def write_file(path: str | Path, data: str | bytes, *, option: str | None = None) -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` whole (:func:`write_with`); returns the path."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    return write_with(path, lambda out: out.write(payload), option=option)


def _open_stage(target: Path, option: str | None) -> Path:
    """An empty hidden folder on ``target``'s file system: inside it when it exists, else in its nearest ancestor."""
    if target.exists() and not target.is_dir():
        raise DataError(f"{_where(option, target)} is a file; give a directory (it is created when missing)")
    anchor = target if target.is_dir() else _existing_ancestor(target.parent)
    try:
        return Path(tempfile.mkdtemp(dir=anchor, prefix=f"{TMP_PREFIX}stage-"))
    except OSError as exc:
        raise cannot_write(option, target, exc) from None


def _in_stage(exc: BaseException, stage: Path, target: Path, option: str | None) -> BaseException:
    """An error raised while a stage was written, naming the folder output instead of the stage."""
    if isinstance(exc, OutputError):
        return OutputError(_where(option, str(exc).replace(str(stage), str(target))))
    if isinstance(exc, OSError):
        return cannot_write(option, target, exc)
    return exc


def _check_stage(stage: Path, target: Path, option: str | None, protect: Callable[[str, Path], str | None]) -> None:
    """Refuse to move a staged file over an input (``protect`` says why, None: it may)."""
    for staged in sorted(stage.rglob("*")):
        if not staged.is_dir():
            why = protect(option or "output", target / staged.relative_to(stage))
            if why is not None:
                raise DataError(why)


def _move_into(stage: Path, target: Path) -> None:
    """Move every entry of ``stage`` into the existing folder ``target`` (files replaced one by one)."""
    for entry in sorted(stage.iterdir()):
        destination = target / entry.name
        if entry.is_dir() and destination.is_dir() and not destination.is_symlink():
            _move_into(entry, destination)
        else:
            if destination.is_dir() and not destination.is_symlink():
                raise OutputError(f"{destination} is a directory in the way of an output file; move it away")
            os.replace(entry, destination)


def _commit_stage(stage: Path, target: Path, option: str | None) -> None:
    """Move a stage's content into ``target`` (a missing target becomes the renamed stage; else file by file)."""
    created: list[Path] = []
    try:
        if target.is_dir():
            _move_into(stage, target)
            shutil.rmtree(stage, ignore_errors=True)
        else:
            created = make_parents(target.parent)
            os.rename(stage, target)
    except OSError as exc:
        shutil.rmtree(stage, ignore_errors=True)
        remove_created(created)
        raise cannot_write(option, target, exc) from None


@contextlib.contextmanager
def staged_folder(
    path: str | Path, *, option: str | None = None, protect: Callable[[str, Path], str | None] | None = None
) -> Iterator[Path]:
    """Stage a folder output: yield an empty hidden folder to write into; move its content to ``path`` at the end.

    A missing ``path`` is created by renaming the stage (all files appear at once); into an
    existing one, every staged file replaces its namesake (other files stay). When the body
    raises, or a write fails, the stage is removed and ``path`` is as it was. ``protect(option,
    destination)`` says why a destination must not be replaced (an input), None when it may.

    Raises
    ------
    OutputError
        When the file system refuses, naming ``option``, the folder and the fix.
    """
    target = Path(path)
    stage = _open_stage(target, option)
    try:
        yield stage
        if protect is not None:
            _check_stage(stage, target, option, protect)
    except BaseException as exc:
        shutil.rmtree(stage, ignore_errors=True)
        raise _in_stage(exc, stage, target, option) from None
    _commit_stage(stage, target, option)
