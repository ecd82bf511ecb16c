"""The lock a named worker holds on its local directory while it runs, and the hot standby that waits on it.

A worker started with ``--worker-name NAME`` takes an exclusive lock on
``<data-dir>/NAME/worker.lock`` (``flock``) and writes its process id into the file. The kernel
releases the lock when the process ends, however it ends (``kill -9`` and a crash included), so:

* a second worker of the same name and directory is refused at once with the holder's pid
  (two live members of one static name fence each other's transactions and group membership);
* a worker started with ``--standby`` does everything a start does that needs no partition —
  imports, the plant detectors' fit or load, the published parameters read — and then waits for
  the lock. It takes over the moment the holder is gone: it joins the groups under the same
  static name, which the broker answers with the dead member's partitions at once
  (``tests/streams/test_standby.py``), so a killed worker's partitions are served again within a
  fetch and a partition take-over, not a process start.

Linux and macOS (``fcntl.flock``); the lock is local to one host (or one pod's shared volume).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from pathlib import Path

from fedrca.exceptions import ConfigError

__all__ = ["LOCK_FILE", "WorkerLock"]

#: the lock's file name in the worker's local directory
LOCK_FILE = "worker.lock"


class WorkerLock:
    """An exclusive ``flock`` on ``<directory>/worker.lock``, held for the process's life, its pid in the file.

    Parameters
    ----------
    directory : the worker's local directory (``<data-dir>/<worker-name>``), created when missing
    worker : the worker's name (messages)

    Examples
    --------
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> lock = WorkerLock(folder, "p1")
    >>> lock.acquire(wait=False)
    >>> lock.holder() == os.getpid(), lock.held
    (True, True)
    >>> lock.release()
    """

    def __init__(self, directory: Path, worker: str) -> None:
        self.path = Path(directory) / LOCK_FILE
        self.worker = worker
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this process holds the lock."""
        return self._fd is not None

    def holder(self) -> int | None:
        """The pid written by the process that holds (or last held) the lock; None when unknown."""
        try:
            text = self.path.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            return None
        return int(text) if text.isdigit() else None

    def acquire(self, wait: bool, on_wait: Callable[[int | None], None] | None = None) -> None:
        """Take the lock; with ``wait``, block until its holder's process ends (``on_wait(pid)`` first).

        Raises
        ------
        ConfigError
            ``wait`` is False and another live process holds the lock (its pid named, and the fix).
        """
        if self._fd is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # os.open's descriptors are not inherited by child processes: the lock dies with this process alone
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not wait:
                    pid = self.holder()
                    raise ConfigError(
                        f"worker '{self.worker}' already runs on {self.path.parent}"
                        f"{f' (pid {pid})' if pid else ''}: two live workers of one name fence each other; give "
                        "another --worker-name (or --data-dir), or --standby to wait and take over when it stops",
                        key="--worker-name",
                    ) from None
                if on_wait is not None:
                    on_wait(self.holder())
                fcntl.flock(fd, fcntl.LOCK_EX)  # returns when the holder's process is gone (the kernel's release)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        """Give the lock up (a process's end does the same)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the last descriptor of the open file releases the flock
