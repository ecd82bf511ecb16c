"""The fedrca command line: detect output contract, summary and clear errors."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from fedrca.cli import main


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "fedrca.cli", *args], capture_output=True, text=True, timeout=120)


def test_detect_writes_one_line_per_plant_and_sample(repo, tmp_path, capsys):
    out = tmp_path / "flags.jsonl"
    code = main(
        [
            "detect",
            "--config",
            str(repo / "config/tep.yaml"),
            "--train",
            str(repo / "data/tep/d00.dat"),
            "--input",
            str(repo / "data/tep/d04_te.dat"),
            "--out",
            str(out),
        ]
    )
    assert code == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 960 * 5
    # config/tep.yaml grades alarms (scoring.severity_levels): the level comes with the flags
    assert set(lines[0]) == {"plant", "seq", "zc", "za", "d2c", "d2a", "level"}
    assert [r["plant"] for r in lines[:5]] == ["feed", "reactor", "separator", "stripper", "compressor"]
    assert {r["seq"] for r in lines} == set(range(960))
    reactor = np.array([r["zc"] for r in lines if r["plant"] == "reactor"])
    assert reactor[160:].mean() > 0.95 and reactor[:160].mean() < 0.05
    summary = capsys.readouterr().out
    assert "reactor" in summary and "any-plant Z_c rate" in summary


@pytest.mark.parametrize(
    ("make_input", "fragment"),
    [
        (lambda p: p / "missing.dat", "no such file"),
        (lambda p: (p / "cols.dat").write_text("1 2 3\n4 5 6\n") and p / "cols.dat", "3 columns, a TEP file has 52"),
        (
            lambda p: (p / "nan.dat").write_text(" ".join(["1"] * 51 + ["nan"]) + "\n") and p / "nan.dat",
            "non-finite value",
        ),
    ],
)
def test_bad_inputs_give_one_clear_line_and_nonzero_exit(repo, tmp_path, make_input, fragment):
    bad = make_input(tmp_path)
    result = run_cli(
        "detect",
        "--config",
        str(repo / "config/tep.yaml"),
        "--train",
        str(repo / "data/tep/d00.dat"),
        "--input",
        str(bad),
        "--out",
        str(tmp_path / "o.jsonl"),
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert fragment in result.stderr


def test_bad_config_is_reported_with_its_key(repo, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text((repo / "config/tep.yaml").read_text().replace('"XMEAS(14)"', '"XMEAS(44)"'))
    result = run_cli("detect", "--config", str(cfg), "--train", "x", "--input", "y", "--out", "z")
    assert result.returncode == 2
    assert "plants[2].sensors[3]: unknown column 'XMEAS(44)'" in result.stderr


def test_the_command_table_is_every_command():
    import argparse

    from fedrca.cli import COMMANDS, build_parser

    def names(parser):
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return set(sub.choices)

    assert names(build_parser()) == set(COMMANDS)
    for command, module in COMMANDS.items():
        # each command's own parser holds it (and the other commands of its module only)
        assert command in names(build_parser(command)), (command, module)
        assert names(build_parser(command)) == {c for c, m in COMMANDS.items() if m == module}


def test_a_command_imports_only_its_own_module():
    # start-up cost of every worker and command: `fedrca baseline status` does not load the OPC UA and Modbus
    # servers, the fleet's learner (scikit-learn) nor the other commands' modules
    code = (
        "import sys\nfrom fedrca.cli import build_parser\n"
        "build_parser(sys.argv[1]).parse_args(sys.argv[1:])\n"
        "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in {'asyncua', 'pymodbus', 'sklearn'}"
        " or m in {'fedrca.cli.demo', 'fedrca.cli.fleet', 'fedrca.cli.edge'})))\n"
    )
    argv = ["baseline", "status", "--config", "c.yaml", "--broker", "kafka://h:1"]
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == []
    everything = subprocess.run([sys.executable, "-c", code.replace("sys.argv[1]", "None"), *argv],
                                capture_output=True, text=True, timeout=120)  # fmt: skip
    assert "fedrca.cli.demo" in everything.stdout.split()  # the check sees what a full parser imports
