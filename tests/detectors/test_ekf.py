"""Extended Kalman filter: reduces to the linear KF, finite-difference Jacobians are right."""

from __future__ import annotations

import numpy as np

from fedrca.detectors.ekf import ExtendedKalmanFilter, batched_jacobian
from fedrca.detectors.kalman import LinearKalmanFilter
from tests.conftest import random_stable_system


def test_linear_model_ekf_equals_time_varying_kf():
    rng = np.random.default_rng(5)
    A, _, C, Q, R = random_stable_system(rng, 3, 4)
    Y = rng.normal(size=(150, 4))
    P0 = np.eye(3)
    kf = LinearKalmanFilter(A, C, Q, R, P0=P0, steady_state=False).filter(Y)
    ekf = ExtendedKalmanFilter(lambda x, u=None: x @ A.T, lambda x: x @ C.T, Q, R, P0=P0).filter(Y)
    assert np.max(np.abs(kf.x_est - ekf.x_est)) < 1e-6  # finite-difference Jacobians of a linear map
    exact = ExtendedKalmanFilter(
        lambda x, u=None: x @ A.T,
        lambda x: x @ C.T,
        Q,
        R,
        F_jacobian=lambda x, u=None: A,
        H_jacobian=lambda x: C,
        P0=P0,
    ).filter(Y)
    assert np.max(np.abs(kf.x_est - exact.x_est)) < 1e-9
    assert np.max(np.abs(kf.residuals - exact.residuals)) < 1e-9


def test_batched_jacobian_matches_analytic():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 3))
    W = rng.normal(size=(2, 3))

    def fn(Z):
        return np.sin(Z @ W.T)

    J = batched_jacobian(fn, X)
    analytic = np.cos(X @ W.T)[:, :, None] * W[None, :, :]
    assert J.shape == (20, 2, 3)
    assert np.max(np.abs(J - analytic)) < 1e-8


def test_nonlinear_ekf_tracks_and_streams_like_batch():
    rng = np.random.default_rng(1)
    T = 200
    x = np.zeros(2)
    Y = np.empty((T, 2))
    for t in range(T):
        x = 0.8 * np.sin(x) + np.array([0.3 * np.sin(0.1 * t), 0.0]) + 0.05 * rng.normal(size=2)
        Y[t] = np.array([x[0] + x[1] ** 2, x[1]]) + 0.05 * rng.normal(size=2)

    def f(z, u=None):
        return 0.8 * np.sin(z)

    def h(z):
        z = np.atleast_2d(z)
        out = np.column_stack([z[:, 0] + z[:, 1] ** 2, z[:, 1]])
        return out if out.shape[0] > 1 else out[0]

    ekf = ExtendedKalmanFilter(f, h, Q=0.01 * np.eye(2), R=0.01 * np.eye(2))
    out = ekf.filter(Y)
    # innovations are much smaller than the signal when the filter tracks
    assert np.std(out.residuals) < 0.5 * np.std(Y)
    stream = ExtendedKalmanFilter(f, h, Q=0.01 * np.eye(2), R=0.01 * np.eye(2))
    steps = np.array([stream.step(y).x_est for y in Y])
    assert np.array_equal(steps, out.x_est)


def test_missing_values_ekf_of_a_linear_model_equals_the_kf_on_the_observed_rows():
    rng = np.random.default_rng(6)
    A, _, C, Q, R = random_stable_system(rng, 3, 4)
    Y = rng.normal(size=(150, 4))
    Y[rng.random(Y.shape) < 0.2] = np.nan
    Y[40:45] = np.nan
    P0 = np.eye(3)
    kf = LinearKalmanFilter(A, C, Q, R, P0=P0, steady_state=False).filter(Y)
    ekf = ExtendedKalmanFilter(
        lambda x, u=None: x @ A.T, lambda x: x @ C.T, Q, R, lambda x, u=None: A, lambda x: C, P0=P0
    ).filter(Y)
    assert np.max(np.abs(kf.x_est - ekf.x_est)) < 1e-9
    assert np.array_equal(np.isnan(ekf.residuals), np.isnan(Y))
