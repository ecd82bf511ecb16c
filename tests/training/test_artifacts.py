"""Parameter artifacts: save/load, sha256 refusal, the params-topic encoding, applying to a detector."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedrca.application.training import run_training
from fedrca.config import parse_config
from fedrca.contracts import (
    NOMINAL_STATE_COUNTS,
    SERVER,
    ParameterArtifact,
    decode_published_artifact,
    encode_published_artifact,
    load_artifact,
    load_server_artifact,
    load_site_artifacts,
    make_artifact,
    save_artifact,
)
from fedrca.contracts.artifacts import PRIVATE_PREFIX, arrays_sha256, check_binding, manifest_digest, public_artifact
from fedrca.detectors.parameters import apply_artifact
from fedrca.exceptions import ArtifactError, IntegrityError
from fedrca.training.federated import FederatedTraining
from tests.training.conftest import linear_setup


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    config, _data, frames, settings = linear_setup(n_samples=800, rounds=3)
    out = tmp_path_factory.mktemp("params")
    result = run_training(FederatedTraining(config, frames, settings=settings), out)
    return config, frames, result, out


def test_run_writes_one_verified_artifact_per_plant_and_the_server(trained):
    _config, _, result, out = trained
    site = load_site_artifacts(out)
    assert sorted(site) == ["plant1", "plant2"]
    server = load_server_artifact(out)
    assert server.manifest["plants"] == ["plant1", "plant2"]
    assert server.arrays["A"].shape == (4, 4) and server.arrays["A_stderr"].shape == (4, 4)
    assert server.arrays["state_dims"].tolist() == [2, 2] and server.arrays["state_dims"].dtype == np.int64
    assert np.all(server.arrays["A_stderr"] > 0)
    for plant, art in site.items():
        assert art.version == "v1" and art.manifest["config_hash"] == result.artifacts[plant].manifest["config_hash"]
        assert np.array_equal(art.arrays["theta"], result.clients[plant].theta)
        for key in ("scorer_a.mean", "scorer_a.whitening", "scorer_a.threshold", "scorer_a.ewma_start"):
            assert key in art.arrays
        m = art.manifest
        assert {"created", "sha256", "metrics", "epsilon_spent", "delta", "model_fingerprint"} <= set(m)
        assert m["metrics"]["client_loss_after"] <= m["metrics"]["client_loss_before"]
        assert m["epsilon_spent"] == 0.0
    manifest = json.loads((out / "plant1.json").read_text())
    assert manifest["arrays"]["theta"]["shape"] == [2, 8]


def test_tampered_arrays_are_refused(trained, tmp_path):
    _, _, result, _ = trained
    art = result.artifacts["plant2"]
    save_artifact(art, tmp_path)
    theta = art.arrays["theta"].copy()
    theta[0, 0] += 1e-9
    np.savez(tmp_path / "plant2.npz", **{**{k: np.asarray(v) for k, v in art.arrays.items()}, "theta": theta})
    with pytest.raises(IntegrityError, match="sha256"):
        load_artifact(tmp_path, "plant2")
    (tmp_path / "plant2.npz").write_bytes(b"not a zip")
    with pytest.raises(IntegrityError, match="unreadable"):
        load_artifact(tmp_path, "plant2")
    with pytest.raises(ArtifactError, match="no artifact for 'plant9'"):
        load_artifact(tmp_path, "plant9")


def test_tampered_manifest_is_refused(trained, tmp_path):
    _, _, result, _ = trained
    save_artifact(result.artifacts["plant1"], tmp_path)
    manifest = json.loads((tmp_path / "plant1.json").read_text())
    manifest["sha256"] = "0" * 64
    (tmp_path / "plant1.json").write_text(json.dumps(manifest))
    with pytest.raises(IntegrityError):
        load_artifact(tmp_path, "plant1")


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: m.__setitem__("epsilon_spent", 0.01),  # the privacy ledger
        lambda m: m["privacy"].__setitem__("budget", 1000.0),
        lambda m: m["privacy"].__setitem__("mu2", m["privacy"]["mu2"] + 1.0),  # the ledger the runtime composes
        lambda m: m.__setitem__("config_hash", "0" * 64),  # re-bound to another configuration
        lambda m: m["schema"]["sensors"].reverse(),
        lambda m: m["metrics"].__setitem__("rounds", 99),
    ],
    ids=["epsilon_spent", "budget", "ledger_mu2", "config_hash", "schema", "metrics"],
)
def test_an_edited_manifest_is_refused(trained, tmp_path, edit):
    _, _, result, _ = trained
    save_artifact(result.artifacts["plant1"], tmp_path)
    manifest = json.loads((tmp_path / "plant1.json").read_text())
    edit(manifest)
    (tmp_path / "plant1.json").write_text(json.dumps(manifest))
    with pytest.raises(IntegrityError, match="does not match its digest"):
        load_artifact(tmp_path, "plant1")


def test_an_artifact_of_an_older_format_is_refused_with_the_fix(trained, tmp_path):
    _, _, result, _ = trained
    save_artifact(result.artifacts["plant1"], tmp_path)
    manifest = json.loads((tmp_path / "plant1.json").read_text())
    manifest["format"] = "fedrca-artifact/1"
    manifest["digest"] = manifest_digest(manifest)
    (tmp_path / "plant1.json").write_text(json.dumps(manifest))
    with pytest.raises(IntegrityError, match=r"format 'fedrca-artifact/1'.*re-run fedrca train"):
        load_artifact(tmp_path, "plant1")


def test_artifacts_are_bound_to_the_configuration_and_the_columns(trained):
    """Trained under one configuration, refused under another (issue 12: a scoring change went unnoticed)."""
    config, frames, _result, out = trained
    from fedrca.application.params import load_params
    from fedrca.application.site import prepare_site

    assert sorted(load_params(out, config)) == ["_server", "plant1", "plant2"]
    raw = config.model_dump(exclude={"source"})
    raw["plants"][0]["scoring"]["percentile"] = 50.0
    other = parse_config(raw, source="other.yaml")
    with pytest.raises(ArtifactError, match=r"another configuration.*fedrca train --config other\.yaml"):
        prepare_site(other, frames, params_dir=out)
    # the same plants with their columns in another order: a schema error naming the columns
    raw = config.model_dump(exclude={"source"})
    raw["plants"][0]["sensors"] = list(reversed(raw["plants"][0]["sensors"]))
    reordered = parse_config(raw)
    with pytest.raises(ArtifactError, match=r"trained on other columns \(sensors differ"):
        load_params(out, reordered)
    # what needs no retraining: RCA settings, topics, flag privacy
    raw = config.model_dump(exclude={"source"})
    raw["rca"] = {"horizon": 7}
    raw["privacy"] = {"flag_epsilon": 2.0}
    raw["topics"] = {"flags": "{site}.other-flags"}
    assert sorted(load_params(out, parse_config(raw))) == ["_server", "plant1", "plant2"]


def test_the_streaming_runtime_refuses_an_artifact_of_another_configuration(trained):
    config, frames, result, _ = trained
    from fedrca.application.site import build_detectors
    from fedrca.rca import build_engine
    from fedrca.streams.runtime import PlantRuntime, RCARuntime

    runtime = PlantRuntime(config, build_detectors(config, frames))
    good = result.artifacts["plant1"]
    assert runtime.offer_parameters("plant1", good)
    foreign = make_artifact(
        "plant1", 9, dict(good.arrays), config_hash="x" * 64, extra={"schema": good.manifest["schema"]}
    )
    with pytest.raises(ArtifactError, match=r"another configuration.*publish-params"):
        runtime.offer_parameters("plant1", foreign)
    assert runtime.processors["plant1"].model_version == good.version
    rca = RCARuntime(config, build_engine(config))
    server = result.artifacts[SERVER]
    forged = make_artifact(SERVER, 9, dict(server.arrays), config_hash="x" * 64, extra={"plants": ["plant1", "plant2"]})
    with pytest.raises(ArtifactError, match="another configuration"):
        rca.offer_artifact(SERVER, forged)
    assert rca.offer_artifact(SERVER, server) and rca.reloads == 1


def test_published_encoding_round_trips_and_refuses_tampering(trained):
    _, _, result, _ = trained
    for name, art in result.artifacts.items():
        plant, back = decode_published_artifact(encode_published_artifact(art))
        public = public_artifact(art)
        assert plant == name and back.version == art.version and back.manifest == public.manifest
        # every array but the plant's own model (the private what-if arrays, never published)
        assert set(back.arrays) == {k for k in art.arrays if not k.startswith(PRIVATE_PREFIX)}
        assert all(
            np.array_equal(back.arrays[k], art.arrays[k]) and back.arrays[k].dtype == art.arrays[k].dtype
            for k in back.arrays
        )
    raw = bytearray(encode_published_artifact(result.artifacts["plant1"]))
    raw[-1] ^= 0x01  # flip one bit of the last array
    with pytest.raises(IntegrityError):
        decode_published_artifact(bytes(raw))
    with pytest.raises(ArtifactError, match="not a parameter artifact"):
        decode_published_artifact(b"garbage")


def test_the_private_what_if_arrays_are_covered_on_disk_and_the_published_record_binds(trained, tmp_path):
    config, _, result, _ = trained
    art = result.artifacts["plant2"]
    private = sorted(k for k in art.arrays if k.startswith(PRIVATE_PREFIX))
    assert {"whatif.A", "whatif.C"} <= set(private) and set(private) <= set(art.manifest["arrays"])
    save_artifact(art, tmp_path)
    edited = {k: np.asarray(v) for k, v in art.arrays.items()}
    edited["whatif.A"] = edited["whatif.A"] + 1e-9
    np.savez(tmp_path / "plant2.npz", **edited)
    with pytest.raises(IntegrityError, match="sha256"):
        load_artifact(tmp_path, "plant2")
    # re-hashing the edited arrays without re-computing the digest is caught by the digest
    manifest = json.loads((tmp_path / "plant2.json").read_text())
    manifest["sha256"] = arrays_sha256(edited)
    (tmp_path / "plant2.json").write_text(json.dumps(manifest))
    with pytest.raises(IntegrityError, match="does not match its digest"):
        load_artifact(tmp_path, "plant2")
    # the published record has a digest of its own and the same binding
    _, back = decode_published_artifact(encode_published_artifact(art))
    assert back.manifest["digest"] != art.manifest["digest"]
    check_binding(back, art.manifest["config_hash"], config.plant("plant2").data_schema(), fix="re-run")


def test_apply_artifact_installs_theta_and_the_recalibrated_scorer(trained):
    config, frames, result, out = trained
    from fedrca.application.site import build_detectors

    fresh = build_detectors(config, frames)
    det = fresh["plant2"]
    assert det.augmentation.is_zero
    art = load_artifact(out, "plant2")
    apply_artifact(det, art)
    assert np.array_equal(det.augmentation.theta, art.arrays["theta"]) and det.parameter_version == "v1"
    assert det.scorers[1].threshold_value == float(art.arrays["scorer_a.threshold"])
    # the detector that trained and the one that loaded the artifact flag the same samples
    trained_det = result.detectors["plant2"]
    trained_det.reset()
    det.reset()
    a, b = trained_det.step_batch(frames["plant2"].Y[:300]), det.step_batch(frames["plant2"].Y[:300])
    assert np.array_equal(a.za, b.za) and np.allclose(a.r_a, b.r_a)
    with pytest.raises(ArtifactError, match="cannot be applied to plant 'plant1'"):
        apply_artifact(fresh["plant1"], art)
    with pytest.raises(ArtifactError, match="server artifact"):
        apply_artifact(det, load_server_artifact(out))


def test_apply_artifact_refuses_a_tampered_or_foreign_artifact(trained):
    config, frames, result, _ = trained
    from fedrca.application.site import build_detectors

    det = build_detectors(config, frames)["plant1"]
    art = result.artifacts["plant1"]
    forged = ParameterArtifact(art.plant, art.version, {**art.arrays, "theta": art.arrays["theta"] * 2}, art.manifest)
    with pytest.raises(IntegrityError):
        apply_artifact(det, forged)
    wrong_shape = make_artifact("plant1", 2, {"theta": np.zeros((3, 8))}, config_hash="x")
    with pytest.raises(ArtifactError, match="shape"):
        apply_artifact(det, wrong_shape)
    foreign = make_artifact(
        "plant1", 2, {"theta": np.zeros((2, 8))}, config_hash="x", extra={"model_fingerprint": "f" * 64}
    )
    with pytest.raises(ArtifactError, match="another proprietary model"):
        apply_artifact(det, foreign)
    assert det.augmentation.is_zero  # nothing was applied


def test_versions_increase_per_run_in_a_directory(tmp_path):
    config, _, frames, settings = linear_setup(n_samples=300, rounds=1)
    run_training(FederatedTraining(config, frames, settings=settings), tmp_path)
    run_training(FederatedTraining(config, frames, settings=settings), tmp_path, rounds=2)
    assert load_artifact(tmp_path, "plant1").version == "v2" and load_artifact(tmp_path, SERVER).version == "v2"


def test_make_artifact_checks_the_version():
    with pytest.raises(ArtifactError, match="v<N>"):
        make_artifact("p", "latest", {"theta": np.zeros(2)}, config_hash="x")


def test_plant_artifacts_carry_the_nominal_flag_state_counts(trained):
    config, frames, _result, out = trained
    from fedrca.application.site import build_detectors

    for plant in config.plant_names:
        det = build_detectors(config, frames)[plant]
        art = load_artifact(out, plant)
        apply_artifact(det, art)
        flags = det.step_batch(frames[plant].Y)
        counts = [int(np.sum((flags.zc == zc) & (flags.za == za))) for zc in (0, 1) for za in (0, 1)]
        assert art.arrays[NOMINAL_STATE_COUNTS].tolist() == counts
        assert sum(counts) == len(frames[plant].Y)
