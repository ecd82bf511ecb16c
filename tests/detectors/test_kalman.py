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
    with pytest.raises(DataError, match="inf"):
        kf.step([np.inf])
    with pytest.raises(DataError, match=r"shape \(T, 1\)"):
        kf.filter(np.ones((3, 2)))


# -- missing values: the update on the observed subset (Shumway & Stoffer) -------------------------


def filterpy_missing(A, C, Q, R, x0, P0, Y):
    """filterpy's time-varying filter with, per step, the rows of H and R of the observed sensors."""
    kf = KalmanFilter(dim_x=A.shape[0], dim_z=C.shape[0])
    kf.F, kf.Q = A, Q
    kf.x, kf.P = x0.copy(), P0.copy()
    post, covs = [], []
    for y in Y:
        kf.predict()
        o = np.flatnonzero(~np.isnan(y))
        if len(o):
            kf.update(y[o], R=R[np.ix_(o, o)], H=C[o])
        post.append(kf.x.copy())
        covs.append(kf.P.copy())
    return np.array(post), covs


def fast_simulate(rng, A, C, Q, R, T):
    """simulate() without inputs, its noise drawn at once."""
    W = rng.normal(size=(T, len(A))) @ np.linalg.cholesky(Q).T
    V = rng.normal(size=(T, len(C))) @ np.linalg.cholesky(R).T
    x, X = np.zeros(len(A)), np.empty((T, len(A)))
    for t in range(T):
        x = X[t] = A @ x + W[t]
    return X @ C.T + V


def knock_out(rng, Y, rate, dead=None):
    Y = Y.copy()
    Y[rng.random(Y.shape) < rate] = np.nan
    if dead is not None:
        column, start, stop = dead
        Y[start:stop, column] = np.nan
    return Y


@pytest.mark.parametrize("seed", range(6))
def test_missing_values_update_on_the_observed_rows_like_filterpy(seed):
    rng = np.random.default_rng(seed)
    n, d = int(rng.integers(1, 5)), int(rng.integers(2, 7))
    A, _, C, Q, R = random_stable_system(rng, n, d)
    Y = knock_out(rng, fast_simulate(rng, A, C, Q, R, 400), 0.2, dead=(0, 100, 160))
    Y[200:205] = np.nan  # whole rows missing: prediction only
    R_diagonal = np.diag(np.diag(R))  # the identified models' R: the information-form steps
    for steady, noise in [(True, R), (False, R), (True, R_diagonal), (False, R_diagonal)]:
        kf = LinearKalmanFilter(A, C, Q, noise, steady_state=steady)
        x0, P0 = np.zeros(n), kf._P0.copy()
        out = kf.filter(Y)
        post, _ = filterpy_missing(A, C, Q, noise, x0, P0, Y)
        # the steady filter returns to its constant gain within STEADY_RTOL of the covariance
        assert np.max(np.abs(out.x_est - post)) < 1e-6
        assert np.array_equal(np.isnan(out.residuals), np.isnan(Y))
        assert np.all(np.isfinite(out.x_est))


def test_information_form_steps_equal_the_pure_twin_step_by_step():
    rng = np.random.default_rng(11)
    A, _, C, Q, R = random_stable_system(rng, 3, 6)
    R = np.diag(np.diag(R))
    Y = knock_out(rng, fast_simulate(rng, A, C, Q, R, 200), 0.1)
    kf = LinearKalmanFilter(A, C, Q, R, steady_state=False)
    assert kf._information() is not None
    out = kf.filter(Y)
    x, P = np.zeros(3), kf._P0
    for t, y in enumerate(Y):
        x_pred, P_pred = kf_predict(x, P, A, Q)
        x, P, r, _, _ = kf_update(x_pred, P_pred, y, C, R)
        assert np.allclose(out.x_pred[t], x_pred, atol=1e-9) and np.allclose(out.x_est[t], x, atol=1e-9)
        assert np.allclose(out.residuals[t], r, atol=1e-9, equal_nan=True)
    assert np.allclose(kf.get_state()["P"], P, atol=1e-9)


def test_the_pure_update_equals_the_update_of_the_observed_subsystem():
    rng = np.random.default_rng(3)
    A, _, C, Q, R = random_stable_system(rng, 3, 5)
    x, P = kf_predict(rng.normal(size=3), np.eye(3), A, Q)
    y = rng.normal(size=5)
    y[[1, 3]] = np.nan
    o = [0, 2, 4]
    x_est, P_est, r, S, K = kf_update(x, P, y, C, R)
    x_sub, P_sub, r_sub, S_sub, K_sub = kf_update(x, P, y[o], C[o], R[np.ix_(o, o)])
    assert np.allclose(x_est, x_sub) and np.allclose(P_est, P_sub)
    assert np.allclose(r[o], r_sub) and np.isnan(r[[1, 3]]).all()
    assert np.allclose(K[:, o], K_sub) and not K[:, [1, 3]].any()
    assert np.allclose(S[np.ix_(o, o)], S_sub)
    nothing = kf_update(x, P, np.full(5, np.nan), C, R)
    assert np.array_equal(nothing[0], x) and np.array_equal(nothing[1], P)


@settings(max_examples=6, deadline=None)
@given(st.integers(0, 2**16), st.lists(st.integers(1, 60), min_size=1, max_size=8))
def test_missing_values_batch_equals_streaming_and_the_gain_returns_to_steady(seed, cuts):
    rng = np.random.default_rng(seed)
    A, _, C, Q, R = random_stable_system(rng, 2, 4)
    Y = knock_out(rng, fast_simulate(rng, A, C, Q, R, 300), 0.05, dead=(1, 50, 90))
    whole = LinearKalmanFilter(A, C, Q, R)
    reference = whole.filter(Y)
    chunked = LinearKalmanFilter(A, C, Q, R)
    parts, start = [], 0
    for n in [*cuts, len(Y)]:
        if start >= len(Y):
            break
        state = chunked.get_state()
        chunked = LinearKalmanFilter(A, C, Q, R)
        chunked.set_state(state)  # a restart between chunks: the covariance travels in the state
        parts.append(chunked.filter(Y[start : start + n]).x_est)
        start += n
    assert np.allclose(np.concatenate(parts), reference.x_est, atol=1e-9)
    # a long complete stretch: back at the constant gain, whose state is x alone
    tail = LinearKalmanFilter(A, C, Q, R)
    tail.filter(np.vstack([Y, fast_simulate(rng, A, C, Q, R, 400)]))
    assert tail.steady and set(tail.get_state()) == {"x"}
