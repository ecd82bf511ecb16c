"""Hostile arguments, configurations and artifacts against the commands: one clear line and exit 2.

The companion of ``tests/datasets/test_hostile.py`` (hostile *data files*): here the
files are fine and everything around them is wrong: outputs that would destroy an
input or another output or cannot be written, configurations that are malformed,
semantically impossible or reference a plug-in that is no filter, numerical data a
detector cannot be fitted on or score, and parameter artifacts or checkpoints that were
trained under another configuration, edited or corrupted.

Every case runs the real command line in-process and asserts: the exit code; for a
refusal, that stderr is exactly one printable line ``fedrca <command>: error: ...``
containing the expected fragment (no traceback); that **no file of the workspace
changed** (inputs, configuration, artifacts; a pre-existing output keeps its content);
and that a refused command leaves no output behind. A case whose input is valid but odd
asserts the correct result instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedrca.cli import main
from fedrca.datasets import linear_multiplant

REPO = Path(__file__).resolve().parents[2]
LINEAR = REPO / "config" / "synthetic_linear.yaml"
TEP = REPO / "config" / "tep.yaml"


@dataclass(frozen=True)
class Case:
    """One hostile invocation.

    ``argv`` is formatted with the workspace's paths (``{ws}`` the workspace, ``{cfg}``
    the linear configuration, ``{nominal}``/``{test}`` its data, ``{params}`` trained
    artifacts, ``{tep}``/``{d00}``/``{d01}`` the TEP configuration and files). ``setup``
    changes the workspace first; ``fragment`` is a regular expression the one error line
    must contain (None: the command must succeed). ``outputs`` are the paths the command
    would write: absent (or unchanged) after a refusal.
    """

    id: str
    argv: str
    fragment: str | None
    setup: Callable[[Path], None] | None = None
    outputs: tuple[str, ...] = ()
    check: Callable[[Path], None] | None = None
    changes: tuple[str, ...] = field(default=())  # workspace files the command may legitimately write


def _write(rel: str, text: str) -> Callable[[Path], None]:
    def setup(ws: Path) -> None:
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text)

    return setup


def _config(edit: Callable[[str], str], name: str = "bad.yaml") -> Callable[[Path], None]:
    def setup(ws: Path) -> None:
        (ws / name).write_text(edit((ws / "linear.yaml").read_text()))

    return setup


def _sub(old: str, new: str) -> Callable[[str], str]:
    def edit(text: str) -> str:
        assert old in text, old
        return text.replace(old, new, 1)

    return edit


def _frame_file(name: str, change: Callable[[pd.DataFrame], pd.DataFrame]) -> Callable[[Path], None]:
    def setup(ws: Path) -> None:
        change(pd.read_csv(ws / "nominal.csv")).to_csv(ws / name, index=False)

    return setup


def _set(column: str, value: float, rows: slice = slice(None)) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def change(frame: pd.DataFrame) -> pd.DataFrame:
        frame.loc[frame.index[rows], column] = value
        return frame

    return change


def _edit_manifest(plant: str, edit: Callable[[dict], None]) -> Callable[[Path], None]:
    def setup(ws: Path) -> None:
        shutil.copytree(ws / "params", ws / "edited")
        path = ws / "edited" / f"{plant}.json"
        manifest = json.loads(path.read_text())
        edit(manifest)
        path.write_text(json.dumps(manifest))

    return setup


def _params_under(edit: Callable[[str], str]) -> Callable[[Path], None]:
    """Artifacts trained under an edited configuration, in ``other/``."""

    def setup(ws: Path) -> None:
        (ws / "other.yaml").write_text(edit((ws / "linear.yaml").read_text()))
        code = main(
            ["train", "--config", str(ws / "other.yaml"), "--data", str(ws / "nominal.csv"), "--out",
             str(ws / "other"), "--rounds", "2", "--quiet"]
        )  # fmt: skip
        assert code == 0

    return setup


def _checkpoint(edit: Callable[[Path], None]) -> Callable[[Path], None]:
    """A training run with state privacy (``dp.yaml``) stopped after one round (checkpoint in ``run/``),
    then ``edit``-ed."""

    def setup(ws: Path) -> None:
        from fedrca.cli.training import run_training
        from fedrca.config import load_config
        from fedrca.datasets.loader import load_frame, plant_frames
        from fedrca.training.federated import FederatedTraining

        text = (ws / "linear.yaml").read_text()
        (ws / "dp.yaml").write_text(
            text.replace("    state_clip: 0.5", "    state_epsilon: 4.0\n    budget: 12.0\n    state_clip: 0.5")
        )
        config = load_config(ws / "dp.yaml")
        assert config.training.privacy.state_epsilon == 4.0
        frames = plant_frames(config, load_frame(config, ws / "nominal.csv"))
        run_training(FederatedTraining(config, frames), ws / "run", rounds=3, stop_after=1)
        checkpoint = ws / "run" / "checkpoint"
        edit(checkpoint / (checkpoint / "LATEST").read_text())

    return setup


def _lower_accountant(round_dir: Path) -> None:
    path = round_dir / "client-plant1.json"
    meta = json.loads(path.read_text())
    meta["accountant"]["mu2"]["states"] = [0.0 for _ in meta["accountant"]["mu2"]["states"]]
    path.write_text(json.dumps(meta))


def _link(kind: str, target: str, name: str) -> Callable[[Path], None]:
    def setup(ws: Path) -> None:
        (os.symlink if kind == "symlink" else os.link)(ws / target, ws / name)

    return setup


def _both(*setups: Callable[[Path], None]) -> Callable[[Path], None]:
    def setup(ws: Path) -> None:
        for s in setups:
            s(ws)

    return setup


def _no_nan_or_inf(path: Path) -> Callable[[Path], None]:
    def check(ws: Path) -> None:
        lines = (ws / path).read_text().splitlines()
        assert lines and all(json.loads(line) for line in lines)  # strict JSON: no NaN/Infinity tokens

    return check


DETECT = "detect --config {cfg} --train {nominal} --input {test}"
REPLAY = "replay --config {cfg} --train {nominal} --input {test}"
EVALUATE = "evaluate --config {cfg} --train {nominal} --input {test} --fault-start 100 --root-cause plant1"
NESTED = "site: x\nplants: " + "[" * 200 + "]" * 200 + "\n"
BOMB = "a: &a ['x','x','x','x','x','x','x','x','x']\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)}]\n"
    for i in range(9)
)

CASES = [
    # -- outputs: never destroy an input or another output; written whole or not at all ---------------
    Case("out-is-input", DETECT + " --out {test}", r"--out .*test\.csv is the --input input: writing would destroy"),
    Case("out-is-train", DETECT + " --out {ws}/./nominal.csv", r"is the --train input: writing would destroy it"),
    Case("out-is-config", DETECT + " --out {cfg}", r"is the --config input"),
    Case(
        "out-symlink-to-input",
        DETECT + " --out {ws}/alias.csv",
        r"is the --input input",
        setup=_link("symlink", "test.csv", "alias.csv"),
    ),
    Case(
        "out-hardlink-to-train",
        DETECT + " --out {ws}/hard.csv",
        r"is the --train input",
        setup=_link("hardlink", "nominal.csv", "hard.csv"),
    ),
    Case("out-is-a-directory", DETECT + " --out {ws}", r"--out .* is a directory; give the path of a file"),
    Case("out-parent-is-a-file", DETECT + " --out {nominal}/flags.jsonl", r"nominal\.csv is a file, not a directory"),
    Case("out-device-full", DETECT + " --out /dev/full", r"--out /dev/full is a character device, not a regular file"),
    Case("out-dev-null", DETECT + " --out /dev/null", r"--out /dev/null is a character device.*give the path"),
    Case(
        "out-missing-directory-is-created",
        DETECT + " --out {ws}/new/dir/flags.jsonl",
        None,
        outputs=("new/dir/flags.jsonl",),
        check=_no_nan_or_inf(Path("new/dir/flags.jsonl")),
    ),
    Case(
        "failed-run-keeps-the-old-output",
        DETECT.replace("{test}", "{ws}/nan.csv") + " --out {ws}/old.jsonl",
        r"line 9, column .plant2\.y3.: missing value",
        setup=_both(
            _write("old.jsonl", "previous result\n"), _frame_file("nan.csv", _set("plant2.y3", np.nan, slice(7, 8)))
        ),
    ),
    Case(
        "flags-out-is-verdicts-out",
        REPLAY + " --flags-out {ws}/x.jsonl --verdicts-out {ws}/x.jsonl",
        r"--flags-out and --verdicts-out are the same path",
    ),
    Case(
        "flags-out-is-input",
        REPLAY + " --flags-out {test} --verdicts-out {ws}/v.jsonl",
        r"--flags-out .* is the --input input",
    ),
    Case(
        "verdicts-out-is-train",
        REPLAY + " --flags-out {ws}/f.jsonl --verdicts-out {nominal}",
        r"--verdicts-out .* is the --train input",
    ),
    Case("json-is-input", EVALUATE + " --json {test}", r"--json .* is the --input input"),
    Case(
        "report-dir-is-a-file", EVALUATE + " --report {nominal}", r"--report .*nominal\.csv is a file; give a directory"
    ),
    Case(
        "train-out-is-the-data",
        "train --config {cfg} --data {nominal} --out {nominal}",
        r"--out .* is a file; give a directory",
    ),
    Case(
        "train-save-data-is-config",
        "train --config {cfg} --synthetic linear_two_plant --save-data {cfg} --out {ws}/p",
        r"--save-data .* is the --config input",
    ),
    Case(
        "graph-picture-is-out",
        "graph --config {cfg} --sites {nominal} --out {ws}/g.json --picture {ws}/g.json",
        r"--out and --picture are the same path",
    ),
    Case("graph-out-is-a-site", "graph --config {cfg} --sites {nominal} --out {nominal}", r"is the --sites .* input"),
    Case("simulate-out-is-a-directory", "simulate --hours 1 --seed 1 --out {ws}", r"--out .* is a directory"),
    # -- configuration: the YAML and its meaning -----------------------------------------------------------
    Case(
        "config-duplicate-key",
        DETECT.replace("{cfg}", "{ws}/bad.yaml") + " --out {ws}/o.jsonl",
        r"'privacy' .*twice|duplicate",
        setup=_config(lambda t: t + "\nprivacy:\n  flag_epsilon: 1.0\n"),
    ),
    Case(
        "config-alias-bomb",
        DETECT.replace("{cfg}", "{ws}/bad.yaml") + " --out {ws}/o.jsonl",
        r"alias",
        setup=_write("bad.yaml", BOMB),
    ),
    Case(
        "config-deep-nesting",
        DETECT.replace("{cfg}", "{ws}/bad.yaml") + " --out {ws}/o.jsonl",
        r"nest",
        setup=_write("bad.yaml", NESTED),
    ),
    Case(
        "config-not-utf8",
        DETECT.replace("{cfg}", "{ws}/bad.yaml") + " --out {ws}/o.jsonl",
        r"UTF-8",
        setup=lambda ws: (ws / "bad.yaml").write_bytes(b"site: caf\xe9\nplants: []\n"),
    ),
    Case("config-is-a-directory", DETECT.replace("{cfg}", "{ws}") + " --out {ws}/o.jsonl", r"is a directory"),
    Case(
        "config-empty",
        DETECT.replace("{cfg}", "{ws}/bad.yaml") + " --out {ws}/o.jsonl",
        r"must be a mapping with keys site, plants",
        setup=_write("bad.yaml", ""),
    ),
    Case(
        "config-unknown-key",
        DETECT.replace("{cfg}", "{ws}/bad.yaml") + " --out {ws}/o.jsonl",
        r"pirvacy",
        setup=_config(_sub("privacy:", "pirvacy:")),
    ),
    Case(
        "config-plants-not-a-list",
        DETECT.replace("{cfg}", "{ws}/bad.yaml") + " --out {ws}/o.jsonl",
        r"plants",
        setup=_write("bad.yaml", "site: x\nplants: 5\n"),
    ),
    Case(
        "config-negative-epsilon",
        DETECT.replace("{cfg}", "{ws}/bad.yaml") + " --out {ws}/o.jsonl",
        r"privacy\.flag_epsilon",
        setup=_config(_sub("flag_epsilon: inf", "flag_epsilon: -1")),
    ),
    Case(
        "config-duplicate-plant-names",
        DETECT.replace("{cfg}", "{ws}/bad.yaml") + " --out {ws}/o.jsonl",
        r"plant1",
        setup=_config(_sub("- name: plant2", "- name: plant1")),
    ),
    Case(
        "config-sensor-in-two-plants",
        DETECT.replace("{cfg}", "{ws}/bad.yaml") + " --out {ws}/o.jsonl",
        r"plant1\.y1",
        setup=_config(_sub('sensors: ["plant2.y1"', 'sensors: ["plant1.y1"')),
    ),
    Case(
        "config-unknown-column",
        DETECT.replace("{cfg}", "{ws}/bad.yaml") + " --out {ws}/o.jsonl",
        r"plant2\.y9",
        setup=_config(_sub('sensors: ["plant2.y1"', 'sensors: ["plant2.y9"')),
    ),
    Case(
        "config-plugin-not-a-filter",
        DETECT.replace("{cfg}", "{ws}/bad.yaml") + " --out {ws}/o.jsonl",
        r"plants\[0\]\.model\.plugin: plugin 'json:dumps' failed when called",
        setup=_config(
            _sub('plugin: "fedrca.training.oracle:true_local_filter", plugin_args: {plant: 0}', 'plugin: "json:dumps"')
        ),
    ),
    Case(
        "config-plugin-not-a-reference",
        DETECT.replace("{cfg}", "{ws}/bad.yaml") + " --out {ws}/o.jsonl",
        r"is not a reference 'package\.module:factory'",
        setup=_config(_sub('"fedrca.training.oracle:true_local_filter"', '"rm -rf /"')),
    ),
    Case(
        "config-plugin-missing-module",
        DETECT.replace("{cfg}", "{ws}/bad.yaml") + " --out {ws}/o.jsonl",
        r"cannot import module 'no_such_module'",
        setup=_config(_sub('"fedrca.training.oracle:true_local_filter"', '"no_such_module:Filter"')),
    ),
    Case(
        "config-plugin-returns-no-filter",
        DETECT.replace("{cfg}", "{ws}/bad.yaml") + " --out {ws}/o.jsonl",
        r"returned str, which lacks predict",
        setup=_config(
            _sub('plugin: "fedrca.training.oracle:true_local_filter", plugin_args: {plant: 0}', 'plugin: "os:getcwd"')
        ),
    ),
    Case(
        "config-folds-beyond-the-data",
        DETECT.replace("{cfg}", "{ws}/bad.yaml") + " --out {ws}/o.jsonl",
        r"scoring\.folds 500 leaves 1 nominal samples per fold.*set scoring\.folds to at most",
        setup=_config(_sub("    calibration: in-sample", "    calibration: cv\n    folds: 500")),
    ),
    Case(
        "config-graph-file-without-path",
        REPLAY.replace("{cfg}", "{ws}/bad.yaml") + " --flags-out {ws}/f --verdicts-out {ws}/v",
        r"needs graph\.path",
        setup=_config(lambda t: t + "\nrca:\n  graph: {source: file}\n"),
    ),
    Case(
        "config-graph-file-missing",
        REPLAY.replace("{cfg}", "{ws}/bad.yaml") + " --flags-out {ws}/f --verdicts-out {ws}/v",
        r"no such graph file .*fedrca graph",
        setup=_config(lambda t: t + "\nrca:\n  graph: {source: file, path: /nonexistent/g.json}\n"),
    ),
    # -- numbers a detector cannot be fitted on or score ------------------------------------------------
    Case(
        "train-values-1e300",
        DETECT.replace("{nominal}", "{ws}/huge.csv") + " --out {ws}/o.jsonl",
        r"huge\.csv: value .*1e\+300 at row 0, column plant1\.y2 .*beyond",
        setup=_frame_file("huge.csv", _set("plant1.y2", 1e300)),
    ),
    Case(
        "input-values-1e300",
        DETECT.replace("{test}", "{ws}/huge.csv") + " --out {ws}/o.jsonl",
        r"value .*e\+300 at row 3, column plant2\.y1",
        setup=_frame_file("huge.csv", _set("plant2.y1", -2e300, slice(3, 5))),
    ),
    Case(
        "train-constant-column",
        DETECT.replace("{nominal}", "{ws}/const.csv") + " --out {ws}/o.jsonl",
        r"sensor column\(s\) plant1\.y4 never change",
        setup=_frame_file("const.csv", _set("plant1.y4", 2.5)),
    ),
    Case(
        "train-all-constant",
        "train --config {cfg} --data {ws}/const.csv --out {ws}/p",
        r"never change in the nominal data",
        setup=_frame_file("const.csv", lambda f: f * 0 + 1.0),
    ),
    Case(
        "train-five-rows-detect",
        DETECT.replace("{nominal}", "{ws}/five.csv") + " --out {ws}/o.jsonl",
        r"5 nominal samples, a detector needs at least 18",
        setup=_frame_file("five.csv", lambda f: f.head(5)),
    ),
    Case(
        "input-nan",
        DETECT.replace("{test}", "{ws}/nan.csv") + " --out {ws}/o.jsonl",
        r"line 9, column .plant2\.y3.: missing value",
        setup=_frame_file("nan.csv", _set("plant2.y3", np.nan, slice(7, 8))),
    ),
    Case(
        "tep-52-by-53-is-not-transposed",
        "detect --config {tep} --train {d00} --input {ws}/t.dat --out {ws}/o.jsonl",
        r"53 columns, a TEP file has 52",
        setup=lambda ws: np.savetxt(ws / "t.dat", np.random.default_rng(0).normal(size=(52, 53))),
    ),
    # -- trained parameters and checkpoints -------------------------------------------------------------
    Case(
        "params-of-another-configuration",
        REPLAY + " --params {ws}/other --flags-out {ws}/f --verdicts-out {ws}/v",
        r"trained under another configuration .*re-run fedrca train --config .*linear\.yaml",
        setup=_params_under(_sub("percentile: 99", "percentile: 50")),
    ),
    Case(
        "params-of-other-columns",
        REPLAY.replace("{cfg}", "{ws}/bad.yaml") + " --params {params} --flags-out {ws}/f --verdicts-out {ws}/v",
        r"trained on other columns \(sensors differ",
        setup=_config(_sub('sensors: ["plant1.y1", "plant1.y2"', 'sensors: ["plant1.y2", "plant1.y1"')),
    ),
    Case(
        "params-epsilon-edited",
        REPLAY + " --params {ws}/edited --flags-out {ws}/f --verdicts-out {ws}/v",
        r"does not match its digest",
        setup=_edit_manifest("plant1", lambda m: m.__setitem__("epsilon_spent", 0.5)),
    ),
    Case(
        "params-config-hash-edited",
        REPLAY + " --params {ws}/edited --flags-out {ws}/f --verdicts-out {ws}/v",
        r"does not match its digest",
        setup=_edit_manifest("_server", lambda m: m.__setitem__("config_hash", "0")),
    ),
    Case(
        "params-npz-corrupted",
        REPLAY + " --params {ws}/edited --flags-out {ws}/f --verdicts-out {ws}/v",
        r"unreadable parameter file",
        setup=_both(
            _edit_manifest("plant1", lambda m: None),
            lambda ws: (ws / "edited/plant1.npz").write_bytes(b"PK\x03\x04junk"),
        ),
    ),
    Case(
        "params-plant-missing",
        REPLAY + " --params {ws}/edited --flags-out {ws}/f --verdicts-out {ws}/v",
        r"no artifact for plant\(s\) plant2",
        setup=_both(
            _edit_manifest("plant1", lambda m: None),
            lambda ws: [(ws / f"edited/plant2.{x}").unlink() for x in ("json", "npz")],
        ),
    ),
    Case(
        "params-directory-missing",
        REPLAY + " --params {ws}/nope --flags-out {ws}/f --verdicts-out {ws}/v",
        r"--params .*nope: no such artifact directory",
    ),
    Case(
        "checkpoint-accountant-edited",
        "train --config {ws}/dp.yaml --data {nominal} --out {ws}/run --rounds 3",
        r"does not match its digest.*--fresh",
        setup=_checkpoint(_lower_accountant),
    ),
    Case(
        "checkpoint-corrupted",
        "train --config {ws}/dp.yaml --data {nominal} --out {ws}/run --rounds 3",
        r"unreadable checkpoint .*--fresh",
        setup=_checkpoint(lambda d: (d / "server.npz").write_bytes(b"\x00" * 64)),
    ),
    # -- arguments ----------------------------------------------------------------------------------------
    Case("evaluate-unknown-root", EVALUATE.replace("plant1", "plant9") + "", r"--root-cause 'plant9' is not a plant"),
    Case("evaluate-negative-start", EVALUATE.replace("100", "-5"), r"--fault-start must be a row number >= 0"),
    Case("evaluate-start-after-the-data", EVALUATE.replace("100", "100000"), r"--fault-start 100000 is outside"),
    Case(
        "train-zero-rounds",
        "train --config {cfg} --data {nominal} --out {ws}/p --rounds 0",
        r"--rounds: must be at least 1",
    ),
    Case(
        "train-too-few-samples",
        "train --config {cfg} --synthetic linear_two_plant --samples 10 --out {ws}/p",
        r"--samples: must be at least 100",
    ),
    Case("train-missing-data", "train --config {cfg} --data {ws}/missing.csv --out {ws}/p", r"missing\.csv"),
]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """Configurations, data and trained artifacts every case starts from (copied per case)."""
    ws = tmp_path_factory.mktemp("hostile-base")
    shutil.copy(LINEAR, ws / "linear.yaml")
    shutil.copy(TEP, ws / "tep.yaml")
    for name in ("d00.dat", "d01_te.dat"):
        shutil.copy(REPO / "data" / "tep" / name, ws / name)
    for name, seed, n in (("nominal.csv", 0, 600), ("test.csv", 1, 300)):
        data = linear_multiplant(n_samples=n, seed=seed)
        pd.DataFrame(data.Y, columns=data.columns()).to_csv(ws / name, index=False)
    argv = ["train", "--config", str(ws / "linear.yaml"), "--data", str(ws / "nominal.csv"), "--out",
            str(ws / "params"), "--rounds", "2", "--quiet"]  # fmt: skip
    assert main(argv) == 0
    return ws


def _digests(ws: Path) -> dict[str, str]:
    return {
        str(p.relative_to(ws)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(ws.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def _argv(case: Case, ws: Path) -> list[str]:
    paths = {
        "ws": ws, "cfg": ws / "linear.yaml", "nominal": ws / "nominal.csv", "test": ws / "test.csv",
        "params": ws / "params", "tep": ws / "tep.yaml", "d00": ws / "d00.dat", "d01": ws / "d01_te.dat",
    }  # fmt: skip
    return [part.format(**{k: str(v) for k, v in paths.items()}) for part in case.argv.split()]


def test_the_suite_is_large_enough():
    """Issue 12 asks for at least 60 hostile cases; this table and the data-file table together."""
    from tests.datasets.test_hostile import CASES as FILE_CASES

    assert len({c.id for c in CASES}) == len(CASES)
    assert len(CASES) + len(FILE_CASES) >= 60 and len(CASES) >= 50


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_invocation_gives_one_clear_line_and_damages_nothing(case, workspace, tmp_path, capsys):
    ws = tmp_path / "ws"
    shutil.copytree(workspace, ws, symlinks=True)
    if case.setup is not None:
        case.setup(ws)
    capsys.readouterr()
    before = _digests(ws)
    argv = _argv(case, ws)
    code = main(argv)
    err = capsys.readouterr().err
    after = _digests(ws)
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    if case.fragment is None:
        assert code == 0, err
        assert changed <= set(case.outputs), changed
        if case.check is not None:
            case.check(ws)
        return
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"fedrca {argv[0]}: error: "), lines[0]
    assert lines[0].isprintable()
    assert re.search(case.fragment, lines[0]), lines[0]
    # nothing was written or damaged: not an input, not an old output, no partial or temporary file
    assert not changed, changed
