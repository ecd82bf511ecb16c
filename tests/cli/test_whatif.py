"""``fedrca whatif``: the answer on a trained synthetic site, its plot, and one clear line for every bad query."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from fedrca.cli import COMMAND_MODULES, main
from fedrca.contracts import SERVER, load_artifacts
from fedrca.training.whatif import GlobalModel, what_if


@pytest.fixture(scope="module")
def params(repo, tmp_path_factory):
    out = tmp_path_factory.mktemp("whatif") / "params"
    code = main(
        [
            "train",
            "--config",
            str(repo / "config/synthetic_inputs.yaml"),
            "--synthetic",
            "linear_two_plant_inputs",
            "--samples",
            "3000",
            "--rounds",
            "3",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    assert code == 0
    return out


@pytest.fixture(scope="module")
def params_without_inputs(repo, tmp_path_factory):
    out = tmp_path_factory.mktemp("whatif") / "old"
    argv = ["train", "--config", str(repo / "config/synthetic_linear.yaml"), "--synthetic", "linear_two_plant"]
    assert main([*argv, "--samples", "500", "--rounds", "1", "--out", str(out), "--quiet"]) == 0
    return out


def test_whatif_is_a_registered_command():
    assert "fedrca.cli.whatif" in COMMAND_MODULES


def test_whatif_prints_the_change_per_sensor_and_draws_the_response(params, tmp_path, capsys):
    capsys.readouterr()
    plot, answer_file = tmp_path / "resp.png", tmp_path / "answer.json"
    argv = ["whatif", "--params", str(params), "--target", "plant2", "--input-of", "plant1", "--delta", "[1.5, -0.5]"]
    code = main([*argv, "--steps", "7", "--plot", str(plot), "--json", str(answer_file)])
    assert code == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "plant1.u1 +1.5, plant1.u2 -0.5" in lines[0]
    rows = [line for line in lines if line.startswith("plant2.y")]
    assert len(rows) == 8  # one row per sensor of the target
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    answer = json.loads(answer_file.read_text())
    # the printed numbers are the core's answer on the same artifacts
    artifacts = load_artifacts(params)
    model = GlobalModel.from_artifacts(artifacts.pop(SERVER), artifacts)
    core = what_if(model, "plant2", "plant1", [1.5, -0.5], steps=7)
    assert np.allclose(answer["ate"], core.direct_sensors) and np.allclose(answer["response"], core.sensor_response)
    assert float(rows[0].split()[1]) == pytest.approx(core.direct_sensors[0], rel=1e-4)
    # a named input: the other one does not change
    assert main([*argv[:-1], '{"plant1.u1": 1.5}', "--plot", str(plot)]) == 0
    assert "plant1.u1 +1.5, plant1.u2 +0" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("target", "source", "delta", "fragment"),
    [
        ("plantX", "plant1", "[1, 0]", "--target: unknown plant 'plantX'; plants are plant1, plant2"),
        ("plant2", "nope", "[1, 0]", "--input-of: unknown plant 'nope'; plants are plant1, plant2"),
        ("plant2", "plant1", "[1, 0, 2]", "--delta: plant 'plant1' has 2 input(s) (plant1.u1, plant1.u2); give 2"),
        ("plant2", "plant1", "1", "--delta: plant 'plant1' has 2 input(s)"),
        ("plant2", "plant1", '{"u9": 1}', "--delta: plant 'plant1' has no input(s) 'u9'"),
        ("plant2", "plant1", "[1, oops]", "--delta: not JSON"),
    ],
)
def test_bad_queries_give_one_clear_line_and_exit_2(params, tmp_path, capsys, target, source, delta, fragment):
    capsys.readouterr()
    code = main(
        [
            *("whatif", "--params", str(params), "--target", target, "--input-of", source, "--delta", delta),
            *("--plot", str(tmp_path / "x.png")),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and fragment in err
    assert not (tmp_path / "x.png").exists()


def test_artifacts_trained_without_inputs_are_refused_with_the_fix(params_without_inputs, tmp_path):
    result = subprocess.run(
        [
            *(sys.executable, "-m", "fedrca.cli", "whatif", "--params", str(params_without_inputs)),
            *("--target", "plant2", "--input-of", "plant1", "--delta", "[1]", "--plot", str(tmp_path / "x.png")),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1
    assert "trained without control inputs" in result.stderr and "re-run fedrca train" in result.stderr
