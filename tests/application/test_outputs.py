"""The one output layer (``fedrca.application.outputs``): transactions, stages, real full and read-only file systems.

The layer's rules run in-process (a plan's outputs appear together or not at all; a folder
output is staged and moved in; a staged file never replaces an input). The file-system
errors are real, not simulated: every command that writes is run in a private mount
namespace (``unshare -m``; ``unshare -r -m`` maps a non-root user to root in a user
namespace) over a 4 KiB tmpfs (``ENOSPC`` part-way through the writes) and over a
read-only bind mount (``EROFS`` at the plan's probe, before any work), and the folder is
listed inside that namespace afterwards: nothing may be left in it. A file-size limit
(``RLIMIT_FSIZE``: ``EFBIG``) needs no privilege at all.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from fedrca.application.outputs import Outputs, staged_folder, write_file
from fedrca.cli import main
from fedrca.datasets import linear_multiplant
from fedrca.datasets.fleet import fleet_patterns
from fedrca.exceptions import DataError, OutputError

REPO = Path(__file__).resolve().parents[2]


# -- the layer's rules ------------------------------------------------------------------------------------
def test_outputs_of_a_failed_run_never_appear(tmp_path):
    data = tmp_path / "data.csv"
    data.write_text("a\n1\n")
    (tmp_path / "old.json").write_text("old\n")
    outputs = {"--a": tmp_path / "new/a.json", "--b": tmp_path / "old.json"}
    with pytest.raises(DataError, match="bad row"), Outputs.plan({"--input": data}, outputs) as out:
        out.write("--a", "{}\n")
        out.write("--b", "{}\n")
        raise DataError("bad row")
    # no new file, no temporary file, no folder made for it; the old output keeps its content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.csv", "old.json"]
    assert (tmp_path / "old.json").read_text() == "old\n"


def test_outputs_of_a_run_appear_together_at_the_end(tmp_path):
    with Outputs.plan({}, {"--a": tmp_path / "a.json"}, {"--report": tmp_path / "r"}) as out:
        out.write("--a", "1\n")
        with out.folder("--report") as stage:
            write_file(stage / "index.html", "<p>")
        assert not (tmp_path / "a.json").exists() and not (tmp_path / "r").exists()
    assert (tmp_path / "a.json").read_text() == "1\n" and (tmp_path / "r/index.html").read_text() == "<p>"
    assert not list(tmp_path.rglob(".fedrca-*"))


def test_a_staged_folder_replaces_its_files_and_keeps_the_others(tmp_path):
    target = tmp_path / "out"
    (target / "sub").mkdir(parents=True)
    (target / "keep.txt").write_text("mine")
    (target / "sub/model.json").write_text("old")
    with staged_folder(target) as stage:
        write_file(stage / "sub/model.json", "new")
        write_file(stage / "report.json", "r")
    assert (target / "keep.txt").read_text() == "mine" and (target / "sub/model.json").read_text() == "new"
    assert sorted(p.name for p in target.iterdir()) == ["keep.txt", "report.json", "sub"]


def test_a_staged_file_never_replaces_an_input(tmp_path):
    (tmp_path / "out").mkdir()
    config = tmp_path / "out/report.json"
    config.write_text("the input")
    plan = Outputs.plan({"--config": config}, folders={"--out": tmp_path / "out"})
    refused = pytest.raises(DataError, match="is the --config input: writing would destroy it")
    with refused, plan as out, out.folder("--out") as stage:
        write_file(stage / "report.json", "{}")
    assert config.read_text() == "the input" and sorted(p.name for p in (tmp_path / "out").iterdir()) == ["report.json"]


def test_a_hard_link_to_a_file_of_an_input_folder_is_refused(tmp_path):
    (tmp_path / "params").mkdir()
    (tmp_path / "params/plant1.json").write_text("{}")
    os.link(tmp_path / "params/plant1.json", tmp_path / "alias.json")
    with pytest.raises(DataError, match=r"--json .*alias\.json is the --params input"):
        Outputs.plan({}, {"--json": tmp_path / "alias.json"}, input_folders={"--params": tmp_path / "params"})


def _child(code: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False, **kwargs
    )  # type: ignore[call-overload]


def test_a_file_size_limit_becomes_one_line_and_leaves_no_file(tmp_path):
    """EFBIG from RLIMIT_FSIZE (no privilege needed; Python ignores SIGXFSZ, so the write fails instead)."""
    target = tmp_path / "big.json"

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    code = (
        "from fedrca.application.outputs import write_file\nfrom fedrca.exceptions import OutputError\n"
        f"try:\n    write_file({str(target)!r}, 'x' * 100_000, option='--json')\n"
        "except OutputError as exc:\n    print(exc)\n"
    )
    done = _child(code, preexec_fn=limit)
    assert done.returncode == 0, done.stderr
    assert "--json" in done.stdout and "File too large" in done.stdout and "ulimit -f" in done.stdout, done.stdout
    assert list(tmp_path.iterdir()) == []


# -- every command on a full and on a read-only file system (a private mount namespace) -------------------
def _unshare() -> list[str]:
    return ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-r", "-m"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """Inputs of every writing command (outside the mount point), trained artifacts included."""
    ws = tmp_path_factory.mktemp("outputs-ws")
    shutil.copy(REPO / "config/synthetic_linear.yaml", ws / "linear.yaml")
    shutil.copy(REPO / "config/synthetic_inputs.yaml", ws / "inputs.yaml")
    for name, seed, n in (("nominal.csv", 0, 600), ("test.csv", 1, 300)):
        data = linear_multiplant(n_samples=n, seed=seed)
        pd.DataFrame(data.Y, columns=data.columns()).to_csv(ws / name, index=False)
    for argv in (
        ["--config", "linear.yaml", "--data", "nominal.csv", "--out", "params"],
        ["--config", "inputs.yaml", "--synthetic", "linear_two_plant_inputs", "--samples", "500", "--out", "wparams"],
    ):
        assert main(["train", *[str(ws / a) if a.endswith((".yaml", ".csv")) or a.endswith("params") else a
                                for a in argv], "--rounds", "1", "--quiet"]) == 0  # fmt: skip
    fleet = fleet_patterns(n_participants=4, n_samples=120, n_dims=3, seed=1)
    for name, values in fleet.datasets.items():
        pd.DataFrame(values, columns=["x1", "x2", "x3"]).to_csv(ws / f"{name}.csv", index=False)
    config = {
        "fleet": "full",
        "participants": [{"name": n, "file": str(ws / f"{n}.csv")} for n in fleet.datasets],
        "model": {"components": 2, "n_init": 2},
        "threshold": {"folds": 0},
    }
    (ws / "fleet.yaml").write_text(yaml.safe_dump(config))
    return ws


#: Every command that writes, its outputs in the folder ``{mnt}``.
COMMANDS = {
    "detect": "detect --config {ws}/linear.yaml --train {ws}/nominal.csv --input {ws}/test.csv --out {mnt}/f.jsonl",
    "replay": "replay --config {ws}/linear.yaml --train {ws}/nominal.csv --input {ws}/test.csv --params {ws}/params "
    "--flags-out {mnt}/f.jsonl --verdicts-out {mnt}/v.jsonl",
    "evaluate": "evaluate --config {ws}/linear.yaml --train {ws}/nominal.csv --input {ws}/test.csv --fault-start 100 "
    "--root-cause plant1 --json {mnt}/m.json --report {mnt}/report",
    "train": "train --config {ws}/linear.yaml --data {ws}/nominal.csv --rounds 2 --quiet --out {mnt}/params",
    "simulate": "simulate --hours 0.5 --seed 3 --out {mnt}/run.dat",
    "graph": "graph --config {ws}/linear.yaml --sites {ws}/nominal.csv --split 2 --max-cond 1 --out {mnt}/g.json",
    "fleet": "fleet --config {ws}/fleet.yaml --out {mnt}/fleet",
    "whatif": "whatif --params {ws}/wparams --target plant2 --input-of plant1 --delta [1,0] --plot {mnt}/w.png "
    "--json {mnt}/w.json",
}

_RUNNER = """
import contextlib, io, json, os, sys
from fedrca.cli import main
out = {}
for name, argv in json.loads(sys.argv[1]).items():
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    left = sorted(os.path.relpath(os.path.join(r, f), sys.argv[2])
                  for r, ds, fs in os.walk(sys.argv[2]) for f in ds + fs)
    out[name] = {"code": code, "stderr": err.getvalue(), "left": left}
print(json.dumps(out))
"""


def _in_namespace(mount: str, inputs: Path, tmp_path: Path) -> dict[str, dict]:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    argvs = {name: [a.format(ws=inputs, mnt=mnt) for a in argv.split()] for name, argv in COMMANDS.items()}
    script = f'{mount} && exec "$0" -c "$1" "$2" "$3"'
    done = subprocess.run(
        [*_unshare(), "sh", "-c", script, sys.executable, _RUNNER, json.dumps(argvs), str(mnt)],
        capture_output=True, text=True, timeout=900, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _one_line(result: dict, fragment: str, *, before_work: bool) -> str:
    """The error line (the last line; with ``before_work`` the only one: no progress line was printed)."""
    lines = result["stderr"].strip().splitlines()
    assert result["code"] == 2 and "Traceback" not in result["stderr"], result
    assert sum(": error: " in line for line in lines) == 1 and (len(lines) == 1 or not before_work), lines
    assert lines[-1].startswith("fedrca ") and fragment in lines[-1], lines[-1]
    return lines[-1]


def test_every_command_on_a_full_disk_says_so_in_one_line_and_leaves_nothing(inputs, tmp_path):
    """ENOSPC part-way through the writes: one line naming the option and the fix; the folder stays empty."""
    results = _in_namespace("mount -t tmpfs -o size=4k tmpfs mnt", inputs, tmp_path)
    assert set(results) == set(COMMANDS)
    for name, result in results.items():
        line = _one_line(result, "No space left on device", before_work=False)
        assert "the disk is full: free space or give a path on another file system" in line, line
        assert result["left"] == [], (name, result["left"])


def test_every_command_on_a_read_only_file_system_refuses_before_the_work(inputs, tmp_path):
    """EROFS at the plan's probe: one line, before any work (no progress line), nothing written."""
    results = _in_namespace("mount --bind mnt mnt && mount -o remount,bind,ro mnt", inputs, tmp_path)
    for name, result in results.items():
        line = _one_line(result, "Read-only file system", before_work=True)
        assert "give a path on a writable file system" in line and " --" in line.split("error:")[1], (name, line)
        assert result["left"] == [], (name, result["left"])


def test_outputs_are_checked_writable_before_the_work(tmp_path):
    """A probe file is made and removed where each output goes: a missing parent folder is no problem."""
    plan = Outputs.plan({}, {"--out": tmp_path / "a/b/c.json"}, {"--report": tmp_path / "r"})
    assert plan.path("--out") == tmp_path / "a/b/c.json" and list(tmp_path.iterdir()) == []
    with pytest.raises(OutputError, match=r"--out .*: the name 'x+\.\.\.' has 300 bytes"):
        Outputs.plan({}, {"--out": tmp_path / ("x" * 300)})
