"""PlantDetector: composition, batch == streaming, Theta = 0, hot swap, plug-ins."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from fedrca.datasets import linear_multiplant
from fedrca.detectors import PlantDetector, load_plugin
from fedrca.exceptions import ConfigError, DataError, NotFittedError
from tests.detectors import plugins


@pytest.fixture(scope="module")
def data():
    train = linear_multiplant(n_samples=1500, n_plants=2, seed=1)
    test = linear_multiplant(n_samples=800, n_plants=2, n_events=6, seed=2)
    return train, test


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"ewma": 0.2, "smooth": "residual"},
        {"features": "rff", "n_features": 16, "epsilon": 1.0},
        {"steady_state": False, "calibration": "in-sample", "ewma": 0.3},
    ],
)
def test_batch_equals_streaming_in_any_chunking(data, kwargs):
    train, test = data
    Y = test.plant_data(1)
    det = PlantDetector("p2", n_states=2, seed=4, **kwargs).fit(train.plant_data(1))
    rng = np.random.default_rng(0)
    det.set_parameters(0.05 * rng.normal(size=det.augmentation.theta.shape), version="v1")
    start = copy.deepcopy(det.get_state())
    batch = det.step_batch(Y)
    det.set_state(copy.deepcopy(start))
    stream = [det.step(y) for y in Y]
    det.set_state(copy.deepcopy(start))
    chunks = [det.step_batch(Y[a:b]) for a, b in [(0, 7), (7, 8), (8, 500), (500, 800)]]
    for other in (stream, chunks):
        merged = type(batch).concat(other)
        for field in ("zc", "za", "zc_pub", "za_pub"):
            assert np.array_equal(getattr(merged, field), getattr(batch, field)), field
        for field in ("x_c", "x_a", "r_c", "r_a", "d2_c", "d2_a"):
            assert np.allclose(getattr(merged, field), getattr(batch, field), rtol=1e-9, atol=1e-9), field


def test_zero_theta_equals_proprietary_model(data):
    train, test = data
    det = PlantDetector("p1", n_states=2, features="rff", n_features=8).fit(train.plant_data(0))
    out = det.step_batch(test.plant_data(0))
    assert np.max(np.abs(out.x_a - out.x_c)) <= 1e-12
    assert np.max(np.abs(out.r_a - out.r_c)) <= 1e-12
    assert np.array_equal(out.za, out.zc)


def test_trained_theta_changes_augmented_path_only(data):
    train, test = data
    det = PlantDetector("p2", n_states=2).fit(train.plant_data(1))
    base = det.step_batch(test.plant_data(1))
    det.reset()
    det.set_parameters(np.full(det.augmentation.theta.shape, 0.05), version="v2")
    moved = det.step_batch(test.plant_data(1))
    assert det.parameter_version == "v2"
    assert np.array_equal(base.r_c, moved.r_c)
    assert not np.allclose(base.r_a, moved.r_a)


def test_detects_injected_shifts_and_stays_quiet_on_nominal(data):
    train, test = data
    det = PlantDetector("p1", n_states=2).fit(train.plant_data(0))
    out = det.step_batch(test.plant_data(0))
    in_event = test.root_cause == 0
    quiet = test.root_cause == -1
    assert out.zc[in_event].mean() > 0.5
    assert out.zc[quiet].mean() < 0.1


def test_state_survives_a_restart(data):
    train, test = data
    Y = test.plant_data(0)
    det = PlantDetector("p1", n_states=2, epsilon=1.0, ewma=0.3).fit(train.plant_data(0))
    det.step_batch(Y[:300])
    saved = copy.deepcopy(det.get_state())
    expected = det.step_batch(Y[300:])
    restarted = PlantDetector("p1", n_states=2, epsilon=1.0, ewma=0.3).fit(train.plant_data(0))
    restarted.set_state(saved)
    again = restarted.step_batch(Y[300:])
    assert np.array_equal(again.zc_pub, expected.zc_pub)
    assert np.allclose(again.d2_c, expected.d2_c, rtol=1e-12)


def test_restored_state_names_its_parameters_not_their_matrices(data):
    train, test = data
    Y = test.plant_data(0)
    det = PlantDetector("p1", n_states=2, epsilon=1.0).fit(train.plant_data(0))
    theta = 0.1 * np.random.default_rng(3).normal(size=det.augmentation.theta.shape)
    det.set_parameters(theta, scorer_a=det.calibrate_augmented(train.plant_data(0)), version="v7")
    det.step_batch(Y[:200])
    saved = json.loads(json.dumps(det.get_state()))
    assert not {"theta", "scorer_a_fit", "threshold_c"} & set(saved)
    assert (saved["parameter_version"], saved["parameter_digest"]) == ("v7", det.parameter_digest)
    expected = det.step_batch(Y[200:])
    # a worker holding the same parameters (the same nominal data, the same artifact) continues exactly
    same = PlantDetector("p1", n_states=2, epsilon=1.0).fit(train.plant_data(0))
    same.set_parameters(theta, scorer_a=same.calibrate_augmented(train.plant_data(0)), version="v7")
    assert same.parameter_digest == det.parameter_digest
    same.set_state(saved)
    again = same.step_batch(Y[200:])
    assert same.restored_parameters == ("v7", det.parameter_digest)
    assert np.allclose(again.d2_a, expected.d2_a, rtol=1e-12)
    assert np.array_equal(again.za_pub, expected.za_pub)
    # one with other parameters keeps them and tells which ones the state was produced with
    other = PlantDetector("p1", n_states=2, epsilon=1.0).fit(train.plant_data(0))
    other.set_state(saved)
    assert other.parameter_version == "proprietary" and other.restored_parameters == saved_version(saved)
    assert other.parameter_digest != det.parameter_digest


def saved_version(state: dict) -> tuple[str, str]:
    return state["parameter_version"], state["parameter_digest"]


def test_state_grows_linearly_with_the_sensor_count():
    # the state is written with every batch of a plant worker: no D x D matrix may be in it
    sizes = {}
    for d in (20, 80):
        rng = np.random.default_rng(d)
        nominal = rng.normal(size=(600, d)).cumsum(axis=0) * 0.02 + rng.normal(size=(600, d))
        det = PlantDetector(n_states=4, method="family", ewma=(0.1, 0.05), seed=0).fit(nominal)
        det.step_batch(nominal[:5])
        sizes[d] = len(json.dumps(det.get_state()))
    assert sizes[80] < 4.5 * sizes[20], sizes  # 4x the sensors; D^2 would be 16x


def test_plugin_model_from_dotted_path():
    model = load_plugin("tests.detectors.plugins:damped_filter", noise=0.05)
    det = PlantDetector("vendor", model=model).fit(plugins.simulate(1500, seed=1))
    out = det.step_batch(plugins.simulate(600, seed=2, shift_at=300))
    assert det.proprietary is model  # used as is, never replaced
    assert out.zc[:300].mean() < 0.05 and out.zc[300:].mean() > 0.5
    with pytest.raises(ConfigError, match="cannot import module"):
        load_plugin("no_such_module:factory")
    with pytest.raises(ConfigError, match="lacks"):
        load_plugin("numpy:eye", N=2)


def test_errors_name_the_plant():
    det = PlantDetector("reactor")
    with pytest.raises(NotFittedError, match="reactor"):
        det.step_batch(np.ones((2, 3)))
    det.fit(np.random.default_rng(0).normal(size=(100, 3)))
    with pytest.raises(DataError, match=r"reactor.*expected 3"):
        det.step_batch(np.ones((2, 4)))
    with pytest.raises(DataError, match=r"reactor.*inf"):
        det.step_batch(np.array([[1.0, np.inf, 0.0]]))
    with pytest.raises(DataError, match=r"reactor.*exclude must be"):
        det.step_batch(np.ones((2, 3)), exclude=np.ones(4, dtype=bool))


def test_detached_scoring_leaves_no_trace_even_when_it_fails():
    rng = np.random.default_rng(4)
    nominal = rng.normal(size=(300, 4)).cumsum(axis=0) * 0.05 + rng.normal(size=(300, 4))
    det = PlantDetector(n_states=2, seed=0).fit(nominal)
    det.step_batch(nominal[:50] + 3.0)  # the stream is somewhere
    before = det.get_state()
    with det.detached():
        fresh = det.step_batch(nominal[:20])
    assert det.get_state() == before
    again = PlantDetector(n_states=2, seed=0).fit(nominal).step_batch(nominal[:20])
    np.testing.assert_array_equal(fresh.d2_c, again.d2_c)  # it started from the initial state
    with pytest.raises(RuntimeError), det.detached():
        det.step_batch(nominal[:10])
        raise RuntimeError("interrupted")
    assert det.get_state() == before
