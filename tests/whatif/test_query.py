"""What-if queries on a known global model: the closed-form effects and one clear error for every bad query."""

from __future__ import annotations

import numpy as np
import pytest

from fedrca.exceptions import ConfigError
from fedrca.whatif import GlobalModel, PlantMap, client_effect, what_if


def _two_plant_model():
    A = np.array([[0.5, 0.0], [0.4, 0.6]])
    B = np.array([[1.0, 0.0], [0.3, 2.0]])
    maps = {
        "a": PlantMap("a", C=np.array([[1.0]]), y_scale=np.array([1.0]), u_scale=np.array([2.0]), inputs=("ua",)),
        "b": PlantMap("b", C=np.array([[2.0], [-1.0]]), y_scale=np.array([10.0, 1.0]), sensors=("b1", "b2")),
    }
    return GlobalModel(("a", "b"), (1, 1), (1, 1), A, B, maps)


def test_what_if_matches_the_closed_form_effects():
    model = _two_plant_model()
    answer = what_if(model, "b", "a", [4.0], steps=6)
    du = 4.0 / 2.0  # raw -> model units of the input
    # ATE one step later: C_bb B_ba du, in sensor units
    assert answer.direct_sensors == pytest.approx(np.array([10.0, 1.0]) * (np.array([2.0, -1.0]) * 0.3 * du))
    # held for K steps: dx(K) = (I - A)^-1 (I - A^K) B[:, a] du
    A, K = model.A, 6
    closed = np.linalg.solve(np.eye(2) - A, (np.eye(2) - np.linalg.matrix_power(A, K)) @ model.B[:, 0] * du)
    assert answer.state_response[-1] == pytest.approx(closed[1:])
    assert answer.sensor_response[-1] == pytest.approx(np.array([20.0, -1.0]) * closed[1])
    impulse = what_if(model, "b", "a", [4.0], steps=6, mode="impulse")
    assert impulse.state_response[-1] == pytest.approx((np.linalg.matrix_power(A, K - 1) @ model.B[:, 0] * du)[1:])
    # the client-side answer: C dphi in sensor units
    assert client_effect(model.maps["b"].C, [0.5], model.maps["b"].y_scale) == pytest.approx([10.0, -0.5])


@pytest.mark.parametrize(
    ("args", "key", "fragment"),
    [
        (("x", "a", [1.0]), "target", "unknown plant 'x'"),
        (("b", "y", [1.0]), "input_of", "unknown plant 'y'"),
        (("b", "a", [1.0, 2.0]), "delta", r"has 1 input\(s\) \(ua\); give 1 finite change\(s\), got 2"),
        (("b", "a", [np.nan]), "delta", "finite"),
    ],
)
def test_what_if_refuses_bad_queries_naming_the_fix(args, key, fragment):
    with pytest.raises(ConfigError, match=fragment) as info:
        what_if(_two_plant_model(), *args)
    assert info.value.key == key
