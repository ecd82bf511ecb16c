"""The global model read from a training run's artifacts: B and the plants' maps, the own blocks, refusals."""

from __future__ import annotations

import numpy as np
import pytest

from fedrca.contracts import SERVER, make_artifact
from fedrca.detectors.parameters import apply_artifact
from fedrca.exceptions import ArtifactError
from fedrca.rca.graph import InterdependencyGraph
from fedrca.training.federated import FederatedTraining
from fedrca.whatif import GlobalModel, PlantMap
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
