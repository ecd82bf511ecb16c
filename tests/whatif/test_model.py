"""The global model read from a training run's artifacts: B and the plants' maps, the own blocks, refusals."""

from __future__ import annotations

import numpy as np
import pytest

from fedrca.contracts import SERVER, make_artifact
from fedrca.contracts.artifacts import public_artifact
from fedrca.detectors.parameters import apply_artifact
from fedrca.exceptions import ArtifactError, ConfigError
from fedrca.rca.graph import InterdependencyGraph
from fedrca.training.federated import FederatedTraining
from fedrca.whatif import GlobalModel, PlantMap, what_if
from tests.training.conftest import inputs_setup


def test_global_model_refuses_a_server_artifact_without_inputs():
    old = make_artifact(
        SERVER,
        1,
        {"A": np.eye(2) * 0.5, "A_stderr": np.zeros((2, 2)), "state_dims": np.array([1, 1])},
        config_hash="x",
        extra={"plants": ["a", "b"]},
    )
    with pytest.raises(ArtifactError, match="trained without control inputs"):
        GlobalModel.from_artifacts(old)


def test_artifacts_carry_B_and_the_plants_maps_and_stay_usable(tmp_path):
    config, data, frames, settings = inputs_setup(n_samples=600)
    job = FederatedTraining(config, frames, settings=settings)
    result = job.run(rounds=2)
    server_art = result.artifacts[SERVER]
    assert server_art.arrays["B"].shape == (4, 4) and server_art.arrays["input_dims"].tolist() == [2, 2]
    plant2 = result.artifacts["plant2"]
    schema = plant2.manifest["schema"]
    assert schema["inputs"] == ["plant2.u1", "plant2.u2"] and len(schema["sensors"]) == 8
    assert np.allclose(plant2.arrays["whatif.C"], data.C[1])
    model = GlobalModel.from_artifacts(server_art, result.artifacts)
    assert model.maps["plant2"].bias == pytest.approx(job.clients["plant2"].bias)
    # the detector side and the RCA read the same artifacts as before
    apply_artifact(result.detectors["plant2"], plant2)
    graph = InterdependencyGraph.from_server_artifact(server_art)
    assert list(graph.plants) == ["plant1", "plant2"]


def test_the_plants_own_blocks_replace_the_servers_and_stay_private():
    config, data, frames, settings = inputs_setup(n_samples=600)
    result = FederatedTraining(config, frames, settings=settings).run(rounds=2)
    server_art = result.artifacts[SERVER]
    plant2 = result.artifacts["plant2"]
    own = data.state_slices[1]
    # the proprietary model is the true local one: its own blocks are A_22, B_22 exactly
    assert np.allclose(plant2.arrays["whatif.A"], data.A[own, own])
    assert np.allclose(plant2.arrays["whatif.B"], data.B[own, data.input_slices[1]])
    local = GlobalModel.from_artifacts(server_art, result.artifacts, local_blocks=True)
    served = GlobalModel.from_artifacts(server_art, result.artifacts)
    assert local.local == ("plant1", "plant2") and served.local == ()
    assert np.allclose(local.A[own, own], data.A[own, own])
    assert np.array_equal(served.A, server_art.arrays["A"])
    # cross blocks stay the server's
    assert np.array_equal(local.A[own, data.state_slices[0]], served.A[own, data.state_slices[0]])
    # a plant map of another run's shape is refused, naming the fix
    wrong = dict(local.maps)
    wrong["plant2"] = PlantMap("plant2", A=np.eye(3))
    with pytest.raises(ArtifactError, match="re-run fedrca train"):
        GlobalModel(local.plants, local.state_dims, local.input_dims, served.A, served.B, wrong).with_local_blocks()


def _moments_run(**privacy):
    config, data, frames, settings = inputs_setup(
        n_samples=3000, estimator="moments", rounds=2, privacy={"state_clip": 50.0, **privacy}
    )
    return data, FederatedTraining(config, frames, settings=settings).run()


def test_private_moments_artifacts_answer_with_the_plants_rows():
    data, result = _moments_run(input_epsilon="inf", input_moment_epsilon="inf")
    artifacts = dict(result.artifacts)
    server = artifacts.pop(SERVER)
    assert "B" not in server.arrays and server.arrays["input_dims"].tolist() == [2, 2]
    model = GlobalModel.from_artifacts(server, artifacts)
    assert model.rows == ("plant1", "plant2")
    row2 = result.clients["plant2"].row
    own = data.state_slices[1]
    assert np.array_equal(model.A[own], row2.A) and np.array_equal(model.B[own], row2.B)
    answer = what_if(model, "plant2", "plant1", [1.0, -0.5], steps=3)
    C2 = artifacts["plant2"].arrays["whatif.C"]
    assert answer.direct_sensors == pytest.approx(C2 @ row2.B[:, data.input_slices[0]] @ [1.0, -0.5])
    # plant 1's inputs push plant 1 and, through the rows, plant 2
    assert model.reach("plant1") == ("plant1", "plant2")
    # a row is private: the published artifact has none of it
    assert not any(k.startswith("whatif.") for k in public_artifact(artifacts["plant2"]).arrays)
    # without the plants' artifacts the server's alone cannot answer
    with pytest.raises(ArtifactError, match="none of the plant artifacts given carries its row"):
        GlobalModel.from_artifacts(server, {})
    # nor can a query whose target's artifact is missing
    partial = GlobalModel.from_artifacts(server, {"plant1": artifacts["plant1"]})
    with pytest.raises(ConfigError, match="the row of plant 'plant2' in the model") as info:
        what_if(partial, "plant2", "plant1", [1.0, 0.0])
    assert info.value.key == "target"


def test_a_cross_query_on_inputs_that_never_left_their_plant_is_refused_naming_the_keys():
    _, result = _moments_run()
    artifacts = dict(result.artifacts)
    model = GlobalModel.from_artifacts(artifacts.pop(SERVER), artifacts)
    assert model.learned_inputs("plant2") == ("plant2",)
    with pytest.raises(ConfigError, match=r"training\.privacy\.input_epsilon") as info:
        what_if(model, "plant2", "plant1", [1.0, 0.0])
    assert info.value.key == "input_of"
    own = what_if(model, "plant2", "plant2", [1.0, 0.0])  # its own inputs: answered
    assert np.all(np.isfinite(own.direct_sensors))
