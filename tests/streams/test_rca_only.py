"""An RCA-only runtime needs no plant data: its engine comes from the training artifacts alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedrca.application.site import rca_runtime, site_runtime
from fedrca.cli import main
from fedrca.config import load_config
from fedrca.contracts import encode_flags
from fedrca.datasets.loader import load_frame, plant_frames
from fedrca.rca.calibration import CalibrationMaps
from fedrca.streams.embedded import replay_frame
from fedrca.streams.runtime import RCARuntime, RuntimeSettings

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "config" / "tep.yaml"
TRAIN = REPO / "data" / "tep" / "d00.dat"
FAULT = REPO / "data" / "tep" / "d04_te.dat"


@pytest.fixture(scope="module")
def params(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("params")
    assert main(["train", "--config", str(CONFIG), "--data", str(TRAIN), "--out", str(out), "--quiet"]) == 0
    return out


def test_rca_only_runtime_issues_the_verdicts_of_the_runtime_fitted_on_the_data(params):
    config = load_config(CONFIG)
    settings = RuntimeSettings(allowed_lateness=1000)
    full = site_runtime(config, TRAIN, params_dir=params, settings=settings)
    data = plant_frames(full.config, load_frame(full.config, FAULT))
    expected = replay_frame(full, {p: d.Y for p, d in data.items()})
    assert expected.verdicts, "fault 04 gives verdicts"

    rca_only = rca_runtime(config, params_dir=params, settings=settings)
    assert isinstance(rca_only, RCARuntime)
    order = np.argsort([f.seq for f in expected.flags], kind="stable")  # per sample, plants in order
    verdicts, rejected = rca_only.process_flags(encode_flags([expected.flags[i] for i in order]))
    verdicts += rca_only.flush()  # the end of the recording releases the rows still waiting
    assert rejected == []
    # the same verdicts, their candidate sets and calibrated probabilities included
    assert [v.to_dict() for v in verdicts] == [v.to_dict() for v in expected.verdicts]


def test_the_rca_worker_and_the_demo_pick_the_calibration_map_of_their_plants_training_rows(params):
    # the shipped file holds one map per training size; both sides take the one of d00.dat's 500 rows: the
    # in-process site from its nominal flags, the RCA worker from the nominal counts the plants' artifacts carry
    shipped = CalibrationMaps.from_json((REPO / "config" / "tep.calibration.json").read_text(encoding="utf-8"))
    config = load_config(CONFIG)
    eps = config.privacy.flag_epsilon
    assert shipped.keyed_by("training rows") and shipped.select(500, eps) != shipped.select(2880, eps)
    full = site_runtime(config, TRAIN, params_dir=params)
    rca_only = rca_runtime(config, params_dir=params)
    assert full.rca.engine.training_rows == rca_only.engine.training_rows == 500
    assert full.rca.engine.calibration == rca_only.engine.calibration == shipped.select(500, eps)
    # without any artifact the worker cannot know the rows: uncalibrated until the plants publish
    assert rca_runtime(config).engine.calibration is None


def test_run_without_train_is_refused_for_the_plant_roles(capsys):
    code = main(["run", "--config", str(CONFIG), "--broker", "kafka://127.0.0.1:9", "--roles", "plants,params"])
    assert code == 2
    err = capsys.readouterr().err
    assert "--train is required for the plants role" in err
    assert "--roles rca alone needs no plant data" in err
