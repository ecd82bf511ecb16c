"""The lock a named worker holds on its local directory (``fedrca.application.worker_lock``).

Real processes hold it: a second worker of the name is refused with the holder's pid, a standby
waiting on it takes it the moment the holder dies by ``kill -9``, and a holder's child process (one
it spawned) does not keep it alive after the holder is gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from fedrca.application.worker_lock import LOCK_FILE, WorkerLock
from fedrca.exceptions import ConfigError
from tests.kafka_broker import wait_until

REPO = Path(__file__).resolve().parents[2]

#: a process that takes the lock, says so, optionally spawns a long-lived child, and sleeps until killed
HOLDER = """
import subprocess, sys, time
from pathlib import Path
from fedrca.application.worker_lock import WorkerLock
lock = WorkerLock(Path(sys.argv[1]), "p1")
lock.acquire(wait=False)
if sys.argv[2] == "child":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print(child.pid, flush=True)
print("held", flush=True)
time.sleep(600)
"""


def _holder(directory: Path, child: bool = False) -> tuple[subprocess.Popen[str], int | None]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(directory), "child" if child else "-"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert proc.stdout is not None
    child_pid = int(proc.stdout.readline()) if child else None
    assert proc.stdout.readline().strip() == "held"
    return proc, child_pid


def test_a_second_worker_of_the_name_is_refused_with_the_holders_pid(tmp_path: Path) -> None:
    proc, _ = _holder(tmp_path)
    try:
        with pytest.raises(ConfigError) as refused:
            WorkerLock(tmp_path, "p1").acquire(wait=False)
        message = str(refused.value)
        assert f"pid {proc.pid}" in message and "--standby" in message and "--worker-name" in message, message
    finally:
        proc.kill()
        proc.wait(timeout=30)
    lock = WorkerLock(tmp_path, "p1")
    lock.acquire(wait=False)  # the dead holder's lock is free: no stale file blocks a restart
    assert lock.holder() == os.getpid() and (tmp_path / LOCK_FILE).read_text() == f"{os.getpid()}\n"
    lock.release()


@pytest.mark.parametrize("child", [False, True], ids=["holder", "holder-with-a-child"])
def test_a_standby_takes_the_lock_when_the_holder_is_killed(tmp_path: Path, child: bool) -> None:
    proc, child_pid = _holder(tmp_path, child=child)
    standby = WorkerLock(tmp_path, "p1")
    waited: list[int | None] = []
    taker = threading.Thread(target=standby.acquire, kwargs={"wait": True, "on_wait": waited.append}, daemon=True)
    try:
        taker.start()
        wait_until(lambda: waited == [proc.pid], 30, "the standby to wait on the holder")
        taker.join(timeout=0.5)
        assert taker.is_alive() and not standby.held, "the standby took a held lock"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        # a child the holder spawned lives on, and does not keep the lock (its descriptor is not inherited)
        if child_pid is not None:
            os.kill(child_pid, 0)  # raises when the child is gone
        taker.join(timeout=30)
        assert not taker.is_alive() and standby.held and standby.holder() == os.getpid()
    finally:
        if proc.poll() is None:
            proc.kill()
        if child_pid is not None:
            os.kill(child_pid, signal.SIGKILL)
        standby.release()
