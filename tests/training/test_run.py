"""Orchestration: resume, refusals, settings errors, the CLI and the acceptance bars of issue 3 (fixed seeds)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fedrca.application.training import run_training
from fedrca.cli import main
from fedrca.config import load_config, parse_config, parse_training_settings
from fedrca.contracts import load_artifact, load_server_artifact
from fedrca.datasets import linear_multiplant, nonlinear_two_plant
from fedrca.datasets.loader import load_frame, plant_frames
from fedrca.exceptions import ArtifactError, ConfigError, IntegrityError, PrivacyBudgetExceeded
from fedrca.privacy.accounting import gaussian_epsilon, gaussian_mu
from fedrca.training.federated import FederatedTraining
from fedrca.training.oracle import linear_oracle, nonlinear_oracle
from tests.training.conftest import REPO, linear_setup, nonlinear_setup


def test_resume_continues_exactly_where_it_stopped(tmp_path):
    config, _, frames, settings = linear_setup(
        n_samples=600, rounds=6, window=150, privacy={"state_epsilon": 20.0, "state_clip": 0.5}
    )
    straight = FederatedTraining(config, frames, settings=settings).run()
    first = run_training(FederatedTraining(config, frames, settings=settings), tmp_path, stop_after=4)
    assert first.rounds == 4 and not first.artifacts and not (tmp_path / "plant1.npz").exists()
    resumed = run_training(FederatedTraining(config, frames, settings=settings), tmp_path)
    assert resumed.resumed_from == 4 and resumed.rounds == 6
    for plant in ("plant1", "plant2"):
        assert np.array_equal(resumed.clients[plant].theta, straight.clients[plant].theta)
        assert resumed.clients[plant].accountant.epsilon() == straight.clients[plant].accountant.epsilon()
    assert np.array_equal(resumed.server.A, straight.server.A)
    assert np.array_equal(load_server_artifact(tmp_path).arrays["A"], straight.server.A)


def test_resume_refuses_another_configuration_or_data(tmp_path):
    config, _, frames, settings = linear_setup(n_samples=300, rounds=3)
    run_training(FederatedTraining(config, frames, settings=settings), tmp_path, stop_after=1)
    other = linear_setup(n_samples=300, seed=5, rounds=3)
    with pytest.raises(ArtifactError, match=r"another training data.*--fresh"):
        run_training(FederatedTraining(config, other[2], settings=settings), tmp_path)
    raw = load_config(REPO / "config" / "synthetic_linear.yaml").model_dump(exclude={"source"})
    raw["training"] = {**raw["training"], "ridge": 0.5}
    changed = parse_config(raw)
    with pytest.raises(ArtifactError, match="another configuration"):
        run_training(FederatedTraining(changed, frames), tmp_path)
    fresh = run_training(FederatedTraining(config, frames, settings=settings), tmp_path, resume=False)
    assert fresh.resumed_from == 0 and fresh.rounds == 3


def test_an_edited_checkpoint_is_refused_before_anything_is_restored(tmp_path):
    """Lowering a client's spent privacy in the checkpoint must not let more rounds run (issue 12)."""
    config, _, frames, settings = linear_setup(
        n_samples=300, rounds=3, privacy={"state_epsilon": 2.0, "budget": 50.0, "state_clip": 0.5}
    )
    run_training(FederatedTraining(config, frames, settings=settings), tmp_path, stop_after=1)
    checkpoint = tmp_path / "checkpoint"
    party = checkpoint / (checkpoint / "LATEST").read_text() / "client-plant1.json"
    meta = json.loads(party.read_text())
    meta["accountant"]["mu2"]["states"] = [0.0] * len(meta["accountant"]["mu2"]["states"])
    party.write_text(json.dumps(meta))
    job = FederatedTraining(config, frames, settings=settings)
    with pytest.raises(IntegrityError, match=r"does not match its digest.*--fresh"):
        run_training(job, tmp_path)
    assert job.round == 0 and job.clients["plant1"].accountant.epsilon() == 0.0
    party.write_bytes(b"\x00garbage")
    with pytest.raises(ArtifactError, match=r"unreadable checkpoint.*--fresh"):
        run_training(FederatedTraining(config, frames, settings=settings), tmp_path)


def test_training_refuses_to_start_past_the_privacy_budget():
    config, _, frames, settings = linear_setup(
        n_samples=300, rounds=10, privacy={"state_epsilon": 2.0, "budget": 5.0, "state_clip": 0.5}
    )
    mu = gaussian_mu(2.0, 1e-5)
    # every round releases every record once: k rounds are exactly one release of sqrt(k) mu
    fit = max(k for k in range(1, 11) if gaussian_epsilon(math.sqrt(k) * mu, 1e-5) <= 5.0)
    assert fit < 10
    job = FederatedTraining(config, frames, settings=settings)
    with pytest.raises(PrivacyBudgetExceeded, match=rf"at most {fit} round\(s\) fit") as info:
        job.run()
    assert f"{gaussian_epsilon(math.sqrt(10) * mu, 1e-5):.3g}" in str(info.value)
    assert all(c.accountant.epsilon() == 0.0 for c in job.clients.values())  # nothing left any plant
    ok = FederatedTraining(config, frames, settings=settings).run(rounds=fit)
    assert all(c.accountant.epsilon() <= 5.0 for c in ok.clients.values())
    with pytest.raises(PrivacyBudgetExceeded):
        ok_job = FederatedTraining(config, frames, settings=settings)
        ok_job.run(rounds=fit)
        ok_job.run_round()  # one more round by hand: the client's own ledger refuses it


@pytest.mark.parametrize(
    ("training", "key", "text"),
    [
        ({"rounds": 0}, "training.rounds", "greater than or equal to 1"),
        ({"estimatr": "iv"}, "training.estimatr", "valid keys are rounds"),
        ({"privacy": {"delta": 2}}, "training.privacy.delta", "less than 1"),
        ({"privacy": {"epsilon": 1}}, "training.privacy.epsilon", "state_epsilon"),
        ({"estimator": "sgd"}, "training.estimator", "'iv', 'ols', 'gd' or 'moments'"),
        ("fast", "training", "must be a mapping"),
    ],
)
def test_bad_training_settings_name_the_key(training, key, text):
    with pytest.raises(ConfigError, match=text) as info:
        parse_training_settings(training, source="site.yaml")
    assert info.value.key == key and str(info.value).startswith("site.yaml: " + key)


def test_shipped_configurations_have_valid_training_sections():
    for name in ("tep.yaml", "synthetic.yaml", "synthetic_linear.yaml"):
        settings = load_config(REPO / "config" / name).training
        assert settings.rounds >= 1
    assert math.isfinite(load_config(REPO / "config" / "tep.yaml").training.privacy.state_epsilon)


# -- acceptance bars (issue 3) ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def linear_trained():
    config, data, frames, settings = linear_setup(n_samples=10000)
    return data, FederatedTraining(config, frames, settings=settings).run()


def test_acceptance_1_linear_granger_blocks(linear_trained):
    data, result = linear_trained
    server = result.server
    assert np.linalg.norm(server.block(1, 0) - data.block(1, 0)) <= 0.05
    assert np.linalg.norm(server.block(0, 1)) <= 0.05
    # the edge 1 -> 2 is many standard errors away from zero, the absent edge is not
    se = server.A_stderr
    wald_21 = np.sum((server.block(1, 0) / se[2:, :2]) ** 2)
    wald_12 = np.sum((server.block(0, 1) / se[:2, 2:]) ** 2)
    assert wald_21 > 100 and wald_12 < 20


def test_acceptance_2_driven_plant_loss_and_distance_to_the_oracle(linear_trained):
    _, result = linear_trained
    client = result.clients["plant2"]
    assert client.reconstruction_loss() < client.initial_loss
    test = linear_multiplant(n_samples=3000, seed=1)
    oracle = linear_oracle(test)
    det = result.detectors["plant2"]
    det.reset()
    out = det.step_batch(test.plant_data(1))
    x_o = oracle.x_pred[:, 2:4]
    d_prop = np.mean(np.linalg.norm(out.x_c - x_o, axis=1))
    d_aug = np.mean(np.linalg.norm(out.x_a - x_o, axis=1))
    assert d_aug < d_prop


def test_acceptance_3_nonlinear_residual_order_on_held_out_data():
    config, _, frames, settings = nonlinear_setup(n_samples=3000)
    result = FederatedTraining(config, frames, settings=settings).run()
    test = nonlinear_two_plant(n_samples=1000, seed=1)
    oracle = nonlinear_oracle(test)
    det = result.detectors["plant2"]
    det.reset()
    out = det.step_batch(test.plant_data(1))
    proprietary = np.mean(np.linalg.norm(out.r_c, axis=1))
    augmented = np.mean(np.linalg.norm(out.r_a, axis=1))
    best = np.mean(np.linalg.norm(oracle.residuals[:, 4:8] / det.scaler.std, axis=1))
    assert proprietary > augmented > best


def test_acceptance_5_tep_augmented_residuals_lower_for_most_plants(tep_dir):
    config = load_config(REPO / "config" / "tep.yaml")
    nominal = plant_frames(config, load_frame(config, tep_dir / "d00.dat"))
    result = FederatedTraining(config, nominal).run()
    test = plant_frames(config, load_frame(config, tep_dir / "d00_te.dat"))
    lower = 0
    for plant, det in result.detectors.items():
        det.reset()
        out = det.step_batch(test[plant].Y)
        lower += np.mean(np.linalg.norm(out.r_a, axis=1)) < np.mean(np.linalg.norm(out.r_c, axis=1))
    assert lower >= 3
    assert max(c.epsilon_spent() for c in result.clients.values()) <= 4.0  # issue 15: the whole run
    # issue 15's byte figures: whole bytes per round, uploads below the raw data's bytes
    for plant in config.plant_names:
        metrics = result.artifacts[plant].manifest["metrics"]
        up, raw = metrics["bytes_per_round_up"], metrics["raw_bytes_per_round"]
        assert type(up) is int and type(raw) is int
        rows = len(nominal[plant].Y) - config.training.warm_up  # float64 readings of the trained rows
        assert 0 < up < raw == 8 * len(config.plant(plant).sensors) * rows


# -- CLI ---------------------------------------------------------------------------------------------
def test_cli_trains_synthetic_resumes_and_reports(tmp_path, capsys):
    out = tmp_path / "params"
    args = [
        "train",
        "--config",
        str(REPO / "config" / "synthetic.yaml"),
        "--synthetic",
        "nonlinear_two_plant",
        "--samples",
        "600",
        "--out",
        str(out),
        "--rounds",
        "3",
        "--quiet",
    ]
    assert main(args) == 0
    first = capsys.readouterr()
    assert "client loss before" in first.out and "epsilon" in first.out and "fresh" in first.out
    assert load_artifact(out, "plant2").version == "v1"
    assert main([*args[:-2], "5", "--quiet", "--save-data", str(tmp_path / "nominal.csv")]) == 0
    second = capsys.readouterr()
    assert "resumed from round 3" in second.out and (tmp_path / "nominal.csv").is_file()
    assert load_artifact(out, "plant2").manifest["metrics"]["rounds"] == 5
    config_args = [
        "train",
        "--config",
        str(REPO / "config" / "synthetic.yaml"),
        "--data",
        str(tmp_path / "nominal.csv"),
        "--out",
        str(tmp_path / "from_csv"),
        "--rounds",
        "2",
        "--quiet",
        "--test",
        str(tmp_path / "nominal.csv"),
    ]
    assert main(config_args) == 0
    third = capsys.readouterr()
    assert "augmented residuals lower than proprietary" in third.out


def test_cli_errors_are_one_clear_line(tmp_path, capsys):
    code = main(["train", "--config", str(REPO / "config" / "synthetic.yaml"), "--out", str(tmp_path)])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("fedrca train: error: --data: give the nominal data")
