"""A command ended by SIGTERM cleans up as Ctrl-C does; a folder being written is locked; a closed stdout is quiet.

Real ``fedrca`` processes (issue 34, class 4 and 5):

* ``demo --speed realtime`` writes its ``--out`` folder (trained parameters and report) into one
  hidden stage from the start of its work; it is ended by SIGTERM (or SIGINT) while it trains:
  the stage, the folder's lock and every temporary file are gone, the folder never appears, and
  the exit code is 143 (130) with one line. SIGTERM used to leave ``.fedrca-stage-*`` behind.
* while it runs, a second command writing the same folder is refused at once (two
  ``train --fresh --out D`` at once used to mix both runs in ``D``);
* ``fedrca whatif ... | head -1``: stdout's reader is gone; the command ends quietly (exit 141),
  without a ``BrokenPipeError`` traceback.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fedrca.application.outputs import lock_path
from fedrca.cli import BROKEN_PIPE, TERMINATED, main
from tests.kafka_broker import wait_until

FEDRCA = [sys.executable, "-m", "fedrca.cli"]
REPO = Path(__file__).resolve().parents[2]


def _interruptible() -> None:
    """The child meets Ctrl-C as a command started from a terminal does: a test run started in the background
    (``nohup``, ``make exhaustive &``) hands its children SIGINT ignored, and Python then leaves it ignored (the
    demo never ended after SIGINT there)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _left(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.name.startswith(".fedrca-"))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("how", "code", "word"),
    [
        (signal.SIGTERM, TERMINATED, "terminated"),
        # Ctrl-C has always cleaned up (make exhaustive: the same path)
        pytest.param(signal.SIGINT, 130, "interrupted", marks=pytest.mark.exhaustive),
    ],
)
def test_a_signal_ends_the_demo_without_a_trace_and_its_folder_is_locked_meanwhile(tmp_path, how, code, word, capsys):
    out = tmp_path / "demo"
    demo = subprocess.Popen(
        [*FEDRCA, "demo", "--out", str(out), "--faults", "01", "--speed", "realtime", "--metrics-port", "0"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=_interruptible,
    )  # fmt: skip
    try:
        wait_until(lambda: lock_path(out).exists() and bool(list(tmp_path.glob(".fedrca-stage-*"))), 120,
                   "the demo's lock and stage")  # fmt: skip
        # another command writing the same folder meanwhile: refused at once, nothing of it written
        capsys.readouterr()
        assert main(["demo", "--out", str(out), "--faults", "01"]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and "--out" in lines[0] and "is being written by another fedrca command" in lines[0]
        demo.send_signal(how)
        _, err = demo.communicate(timeout=300)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
    assert demo.returncode == code, err
    assert err.strip().splitlines()[-1] == f"fedrca demo: {word}" and "Traceback" not in err, err
    assert _left(tmp_path) == [] and not out.exists(), _left(tmp_path)


@pytest.fixture(scope="module")
def wparams(tmp_path_factory) -> Path:
    ws = tmp_path_factory.mktemp("pipe")
    config = str(REPO / "config" / "synthetic_inputs.yaml")
    argv = ["train", "--config", config, "--synthetic", "linear_two_plant_inputs", "--samples", "500", "--rounds",
            "1", "--quiet", "--out", str(ws / "p")]  # fmt: skip
    assert main(argv) == 0
    return ws / "p"


def test_a_closed_stdout_ends_a_command_quietly(wparams, tmp_path):
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the command writes a line: every write fails with EPIPE
    try:
        done = subprocess.run(
            [*FEDRCA, "whatif", "--params", str(wparams), "--target", "plant2", "--input-of", "plant1", "--delta",
             "[1,0]", "--plot", str(tmp_path / "w.png")],
            stdout=write, stderr=subprocess.PIPE, text=True, timeout=300, check=False,
        )  # fmt: skip
    finally:
        os.close(write)
    assert done.returncode == BROKEN_PIPE, done.stderr
    assert done.stderr == "", done.stderr
