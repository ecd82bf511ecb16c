"""``fedrca fleet``: configuration, outputs, and the learned model as a plant's detector in ``fedrca detect``."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import yaml

from fedrca.application.fleet.config import load_fleet_config, parse_fleet_config
from fedrca.application.fleet.run import run_fleet
from fedrca.application.fleet.store import load_calibration, load_fleet_model
from fedrca.application.site import build_detectors
from fedrca.cli import main
from fedrca.config import parse_config
from fedrca.datasets.fleet import fleet_patterns
from fedrca.exceptions import ArtifactError, ConfigError, DataError
from fedrca.fleet.calibration import Calibration

COLUMNS = ["x1", "x2", "x3"]


@pytest.fixture(scope="module")
def fleet_dir(tmp_path_factory):
    """Five participants' CSV files, a nominal and a faulty evaluation file, the fleet YAML."""
    root = tmp_path_factory.mktemp("fleet")
    fleet = fleet_patterns(n_participants=6, n_samples=150, n_dims=3, seed=4)
    names = list(fleet.datasets)
    for n in names[:5]:
        pd.DataFrame(fleet.datasets[n], columns=COLUMNS).to_csv(root / f"{n}.csv", index=False)
    held_out = fleet.datasets[names[5]]
    pd.DataFrame(held_out, columns=COLUMNS).to_csv(root / "nominal.csv", index=False)
    faulty = held_out.copy()
    faulty[50:] += 6.0
    pd.DataFrame(faulty, columns=COLUMNS).to_csv(root / "fault.csv", index=False)
    config = {
        "fleet": "synthetic",
        "data": {"format": "csv", "columns": COLUMNS},
        "participants": [{"name": n, "file": str(root / f"{n}.csv")} for n in names[:5]],
        "model": {"components": 3},
        "threshold": {"folds": 0, "percentile": 99.0},
        "evaluate": {"onset": 50, "nominal": [str(root / "nominal.csv")], "faults": {"shift": str(root / "fault.csv")}},
    }
    (root / "fleet.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    return root


def test_fleet_command_writes_the_model_the_weights_and_a_report(fleet_dir, capsys):
    out = fleet_dir / "out"
    assert main(["fleet", "--config", str(fleet_dir / "fleet.yaml"), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "identical parameters everywhere: True" in printed and "shift" in printed
    assert "participants' thresholds: own 5" in printed
    model = load_fleet_model(out / "model.npz")
    assert model.n_dims == 3 and model.threshold is not None and model.info["columns"] == COLUMNS
    report = json.loads((out / "report.json").read_text())
    assert report["identical"] and report["participants"] == 5
    rates = {r["label"]: r for r in report["evaluation"]}
    assert rates["nominal.csv"]["max"] < 0.05 and rates["shift"]["min"] > 0.95
    own = json.loads((out / "participants" / "p00.json").read_text())
    weights = own["weights"]
    assert len(weights) == model.n_components and abs(sum(weights) - 1) < 1e-9
    # 150 in-sample scores each cannot certify a 99th percentile of their own (199 needed at 99.5,
    # 99 at 99): ceil(151 x 0.99) = 150 <= 150 does, so every participant calibrated its own
    rule = load_calibration(out / "participants" / "p00.json")
    assert rule == Calibration.from_dict(own["calibration"]) and (rule.rule, rule.scores) == ("own", 150)


def test_a_site_plant_takes_its_calibration_from_its_participant_file(fleet_dir, tmp_path):
    out = fleet_dir / "out-participant"
    assert main(["fleet", "--config", str(fleet_dir / "fleet.yaml"), "--out", str(out)]) == 0
    detector = {"kind": "fleet", "model": str(out / "model.npz"), "participant": str(out / "participants/p01.json")}
    site = parse_config({"site": "s", "dataset": {"format": "csv"}, "plants": [{"name": "p01", "sensors": COLUMNS}]})
    plant = site.plants[0].model_copy(update={"detector": site.plants[0].detector.model_validate(detector)})
    site = site.model_copy(update={"plants": [plant]})
    nominal = pd.read_csv(fleet_dir / "p01.csv")
    det = build_detectors(site, nominal)["p01"]
    assert det.rule == load_calibration(out / "participants/p01.json")
    # without the file it calibrates on the nominal data it is fitted on: 150 rows cannot certify the
    # plant's default 99.5th percentile (199 needed), so it takes the fleet's one threshold
    bare_detector = plant.detector.model_copy(update={"participant": None})
    bare = site.model_copy(update={"plants": [plant.model_copy(update={"detector": bare_detector})]})
    rule = build_detectors(bare, nominal)["p01"].rule
    assert rule.rule == "fleet" and rule.threshold == load_fleet_model(out / "model.npz").threshold
    with pytest.raises(ArtifactError, match="no participant file"):
        load_calibration(out / "participants/nobody.json")
    (tmp_path / "bad.json").write_text('{"participant": "p01", "calibration": {"threshold": 1.0}}')
    with pytest.raises(ArtifactError, match=r"bad\.json: calibration lacks"):
        load_calibration(tmp_path / "bad.json")
    with pytest.raises(ConfigError, match="ewma: belongs to the fleet detector"):
        parse_config({"site": "s", "plants": [{"name": "a", "sensors": ["x"], "detector": {"ewma": 0.1}}]})


def test_the_fleet_model_is_a_plant_detector_option_for_detect(fleet_dir, tmp_path):
    out = fleet_dir / "out-detect"
    assert main(["fleet", "--config", str(fleet_dir / "fleet.yaml"), "--out", str(out)]) == 0
    site = {
        "site": "fleetsite",
        "dataset": {"format": "csv"},
        "plants": [
            {"name": "member", "sensors": COLUMNS, "detector": {"kind": "fleet", "model": str(out / "model.npz")}}
        ],
    }
    (tmp_path / "site.yaml").write_text(yaml.safe_dump(site), encoding="utf-8")
    flags = tmp_path / "flags.jsonl"
    code = main(
        [
            "detect",
            "--config",
            str(tmp_path / "site.yaml"),
            "--train",
            str(fleet_dir / "p01.csv"),
            "--input",
            str(fleet_dir / "fault.csv"),
            "--out",
            str(flags),
        ]
    )
    assert code == 0
    lines = [json.loads(line) for line in flags.read_text().splitlines()]
    zc = np.array([r["zc"] for r in lines])
    assert np.array_equal(zc, np.array([r["za"] for r in lines]))  # Z_c only
    assert zc[50:].mean() > 0.95 and zc[:50].mean() < 0.1


def test_run_fleet_gives_the_same_model_as_the_command(fleet_dir):
    outcome = run_fleet(load_fleet_config(fleet_dir / "fleet.yaml"))
    assert outcome.run.identical and outcome.columns == COLUMNS
    assert outcome.summary()["max_parameter_difference"] == 0.0


@pytest.mark.parametrize(
    ("patch", "key"),
    [
        ({"model": {"componets": 2}}, "model.componets"),
        ({"graph": {"kind": "adjacency"}}, "graph"),
        ({"threshold": {"folds": 1}}, "threshold"),
        ({"participants": [{"name": "a", "file": "x"}, {"name": "a", "file": "y"}]}, "names must be unique"),
        ({"participants": [{"name": "a", "file": "x", "rows": [5, 2]}]}, "participants[0]: rows must be [start, stop"),
        ({"consensus": {"chunks": 0}}, "consensus.chunks"),
        ({"threshold": {"ewma": 0.0}}, "threshold.ewma"),
        ({"threshold": {"scope": "everybody"}}, "threshold.scope"),
        ({"evaluate": {"participants": ["a", "zed"], "nominal": ["n.csv"]}}, "evaluate.participants names no"),
    ],
)
def test_bad_configurations_name_the_key(patch, key):
    base = {"fleet": "f", "participants": [{"name": "a", "file": "x"}, {"name": "b", "file": "y"}]}
    with pytest.raises(ConfigError, match=key.replace("[", r"\[").replace("]", r"\]")):
        parse_fleet_config({**base, **patch}, source="f.yaml")


def test_adjacency_of_the_wrong_size_and_rows_past_the_end_are_refused(fleet_dir):
    cfg = load_fleet_config(fleet_dir / "fleet.yaml")
    adjacency = cfg.graph.model_copy(update={"kind": "adjacency", "neighbours": [[1], [0]]})
    bad_graph = cfg.model_copy(update={"graph": adjacency})
    with pytest.raises(ConfigError, match="graph: neighbours lists 2 participants, the fleet has 5"):
        bad_graph.peer_graph()
    first = cfg.participants[0].model_copy(update={"rows": (0, 10_000)})
    past = cfg.model_copy(update={"participants": [first, *cfg.participants[1:]]})
    with pytest.raises(DataError, match="run past the 150 rows"):
        run_fleet(past)


def test_a_missing_config_is_one_clear_line(tmp_path, capsys):
    assert main(["fleet", "--config", str(tmp_path / "nope.yaml")]) == 2
    assert "no such fleet configuration" in capsys.readouterr().err
