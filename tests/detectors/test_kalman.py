"""Linear Kalman filter: against filterpy, its pure-function twin, batch == streaming."""

from __future__ import annotations

import numpy as np
import pytest
from filterpy.kalman import KalmanFilter
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrca.detectors.kalman import LinearKalmanFilter, kf_predict, kf_update, lti_recursion
from fedrca.exceptions import DataError, ModelError
from tests.conftest import random_stable_system


def simulate(rng, A, B, C, Q, R, T, U=None):
    n, d = A.shape[0], C.shape[0]
    x = np.zeros(n)
    Y = np.empty((T, d))
    for t in range(T):
        x = A @ x + rng.multivariate_normal(np.zeros(n), Q)
        if B is not None and U is not None:
            x = x + B @ U[t]
        Y[t] = C @ x + rng.multivariate_normal(np.zeros(d), R)
    return Y


def filterpy_run(A, B, C, Q, R, x0, P0, Y, U=None):
    kf = KalmanFilter(dim_x=A.shape[0], dim_z=C.shape[0], dim_u=0 if B is None else B.shape[1])
    kf.F, kf.H, kf.Q, kf.R = A, C, Q, R
    if B is not None:
        kf.B = B
    kf.x, kf.P = x0.copy(), P0.copy()
    prior, post, resid = [], [], []
    for t, y in enumerate(Y):
        kf.predict(u=None if U is None else U[t])
        prior.append(kf.x.copy())
        kf.update(y)
        resid.append(kf.y.copy())
        post.append(kf.x.copy())
    return np.array(prior), np.array(post), np.array(resid)


@pytest.mark.parametrize("seed", range(6))
def test_steady_state_batch_matches_filterpy(seed):
    rng = np.random.default_rng(seed)
    n, d = int(rng.integers(1, 5)), int(rng.integers(1, 6))
    A, _, C, Q, R = random_stable_system(rng, n, d)
    Y = simulate(rng, A, None, C, Q, R, 300)
    kf = LinearKalmanFilter(A, C, Q, R)
    out = kf.filter(Y)
    # filterpy runs the time-varying recursion; started at the steady-state posterior it stays there.
    P_post = (np.eye(n) - kf.gain @ C) @ kf._P_pred_ss
    prior, post, resid = filterpy_run(A, None, C, Q, R, np.zeros(n), P_post, Y)
    assert np.max(np.abs(out.x_pred - prior)) < 1e-9
    assert np.max(np.abs(out.x_est - post)) < 1e-9
    assert np.max(np.abs(out.residuals - resid)) < 1e-9


@pytest.mark.parametrize("seed", range(4))
def test_time_varying_with_inputs_matches_filterpy(seed):
    rng = np.random.default_rng(100 + seed)
    A, B, C, Q, R = random_stable_system(rng, 3, 4, m=2)
    U = rng.normal(size=(200, 2))
    Y = simulate(rng, A, B, C, Q, R, 200, U)
    P0 = np.eye(3) * 2.0
    kf = LinearKalmanFilter(A, C, Q, R, B=B, P0=P0, steady_state=False)
    out = kf.filter(Y, U)
    prior, post, resid = filterpy_run(A, B, C, Q, R, np.zeros(3), P0, Y, U)
    assert np.max(np.abs(out.x_est - post)) < 1e-9
    assert np.max(np.abs(out.residuals - resid)) < 1e-9
    assert np.max(np.abs(out.x_pred - prior)) < 1e-9


def test_pure_function_twin_agrees_with_class_to_1e12():
    rng = np.random.default_rng(7)
    A, B, C, Q, R = random_stable_system(rng, 3, 5, m=1)
    U = rng.normal(size=(100, 1))
    Y = simulate(rng, A, B, C, Q, R, 100, U)
    kf = LinearKalmanFilter(A, C, Q, R, B=B, P0=np.eye(3), steady_state=False)
    x, P = np.zeros(3), np.eye(3)
    for t in range(len(Y)):
        step = kf.step(Y[t], U[t])
        x_pred, P_pred = kf_predict(x, P, A, Q, B, U[t])
        x, P, residual, S, K = kf_update(x_pred, P_pred, Y[t], C, R)
        assert np.max(np.abs(step.x_pred - x_pred)) < 1e-12
        assert np.max(np.abs(step.x_est - x)) < 1e-12
        assert np.max(np.abs(step.residual - residual)) < 1e-12
        assert np.max(np.abs(step.K - K)) < 1e-12
        assert np.max(np.abs(step.S - S)) < 1e-12
        assert step.mahalanobis == pytest.approx(residual @ np.linalg.solve(S, residual), rel=1e-10)


@pytest.mark.parametrize("steady", [True, False])
def test_batch_equals_streaming_and_chunking(steady):
    rng = np.random.default_rng(11)
    A, B, C, Q, R = random_stable_system(rng, 4, 6, m=2)
    U = rng.normal(size=(250, 2))
    Y = simulate(rng, A, B, C, Q, R, 250, U)
    batch = LinearKalmanFilter(A, C, Q, R, B=B, steady_state=steady)
    whole = batch.filter(Y, U)
    stream = LinearKalmanFilter(A, C, Q, R, B=B, steady_state=steady)
    steps = [stream.step(Y[t], U[t]) for t in range(len(Y))]
    assert np.allclose([s.x_est for s in steps], whole.x_est, atol=1e-10, rtol=0)
    assert np.allclose([s.residual for s in steps], whole.residuals, atol=1e-10, rtol=0)
    chunked = LinearKalmanFilter(A, C, Q, R, B=B, steady_state=steady)
    parts = [chunked.filter(Y[a:b], U[a:b]) for a, b in [(0, 1), (1, 90), (90, 91), (91, 250)]]
    assert np.allclose(np.vstack([p.x_est for p in parts]), whole.x_est, atol=1e-10, rtol=0)
    assert np.allclose(batch.x, stream.x, atol=1e-10) and np.allclose(chunked.x, batch.x, atol=1e-10)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 6),
    T=st.integers(0, 60),
    seed=st.integers(0, 2**16),
)
def test_lti_recursion_equals_loop(n, T, seed):
    rng = np.random.default_rng(seed)
    F = rng.normal(size=(n, n))
    F *= rng.uniform(0.1, 0.99) / max(np.abs(np.linalg.eigvals(F)))
    W = rng.normal(size=(T, n))
    x0 = rng.normal(size=n)
    expected = np.empty((T, n))
    x = x0
    for t in range(T):
        x = F @ x + W[t]
        expected[t] = x
    assert np.allclose(lti_recursion(F, W, x0), expected, atol=1e-10, rtol=0)


def test_state_round_trip_continues_identically():
    rng = np.random.default_rng(3)
    A, _, C, Q, R = random_stable_system(rng, 2, 3)
    Y = simulate(rng, A, None, C, Q, R, 40)
    kf = LinearKalmanFilter(A, C, Q, R, steady_state=False)
    kf.filter(Y[:20])
    saved = kf.get_state()
    tail = kf.filter(Y[20:]).x_est
    kf.set_state(saved)
    assert np.array_equal(kf.filter(Y[20:]).x_est, tail)


def test_input_errors_are_clear():
    with pytest.raises(ModelError, match="A must be square"):
        LinearKalmanFilter(np.ones((2, 3)), np.ones((1, 2)), np.eye(2), np.eye(1))
    with pytest.raises(ModelError, match="C must have 2 columns"):
        LinearKalmanFilter(np.eye(2), np.ones((1, 3)), np.eye(2), np.eye(1))
    kf = LinearKalmanFilter(0.5 * np.eye(2), np.ones((1, 2)), np.eye(2), np.eye(1))
    with pytest.raises(DataError, match="NaN"):
        kf.step([np.nan])
    with pytest.raises(DataError, match=r"shape \(T, 1\)"):
        kf.filter(np.ones((3, 2)))
