"""Augmentation: Theta = 0 is the proprietary model; closed-form gradients are exact."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrca.detectors.augment import Augmentation, IdentityFeatures, RandomFourierFeatures, make_feature_map
from fedrca.detectors.ekf import ExtendedKalmanFilter
from fedrca.detectors.kalman import LinearKalmanFilter
from fedrca.exceptions import ModelError
from tests.conftest import random_stable_system


def linear_setup(seed, features="identity"):
    rng = np.random.default_rng(seed)
    A, B, C, Q, R = random_stable_system(rng, 3, 5, m=1)
    kf = LinearKalmanFilter(A, C, Q, R, B=B)
    T = 40
    xhat = rng.normal(size=(T, 3))
    yprev = rng.normal(size=(T, 5))
    u = rng.normal(size=(T, 1))
    target = rng.normal(size=(T, 5))
    fmap = make_feature_map(features, 5, n_features=7, seed=seed)
    return kf, xhat, yprev, u, target, fmap, rng


def test_zero_theta_is_exactly_the_proprietary_prediction():
    kf, xhat, yprev, u, _, fmap, _ = linear_setup(0, "rff")
    aug = Augmentation(fmap, 3)
    xhat_a, x_a = aug.augment(kf, xhat, yprev, u)
    assert np.array_equal(xhat_a, xhat)
    assert np.array_equal(x_a, kf.predict(xhat, u))


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), features=st.sampled_from(["identity", "rff"]))
def test_local_gradient_matches_finite_differences(seed, features):
    kf, xhat, yprev, u, target, fmap, rng = linear_setup(seed, features)
    aug = Augmentation(fmap, 3, theta=0.1 * rng.normal(size=(3, fmap.n_features)))
    loss, grad, _ = aug.local_loss_gradient(kf, xhat, yprev, target, u)
    numeric = np.zeros_like(grad)
    h = 1e-6
    base = aug.theta.copy()
    for i, j in np.ndindex(*grad.shape):
        for sign in (1, -1):
            theta = base.copy()
            theta[i, j] += sign * h
            aug.theta = theta
            numeric[i, j] += sign * aug.local_loss_gradient(kf, xhat, yprev, target, u)[0] / (2 * h)
    aug.theta = base
    assert loss > 0
    assert np.allclose(grad, numeric, rtol=1e-5, atol=1e-7)


def test_upstream_gradient_for_nonlinear_model_matches_finite_differences():
    rng = np.random.default_rng(4)
    W = rng.normal(size=(2, 2))

    def f(x, u=None):
        return np.tanh(x @ W.T)

    def h(x):
        return (
            np.column_stack([x[:, 0], x[:, 1], x[:, 0] * x[:, 1]])
            if np.ndim(x) == 2
            else np.array([x[0], x[1], x[0] * x[1]])
        )

    ekf = ExtendedKalmanFilter(f, h, Q=np.eye(2) * 0.1, R=np.eye(3) * 0.1)
    fmap = RandomFourierFeatures(3, n_features=5, seed=2)
    aug = Augmentation(fmap, 2, theta=0.2 * rng.normal(size=(2, 5)))
    xhat = rng.normal(size=(30, 2))
    yprev = rng.normal(size=(30, 3))
    G = rng.normal(size=(30, 2))  # upstream dL/dx_a, L = sum(G * x_a)

    def surrogate(theta):
        aug.theta = theta
        return float(np.sum(G * aug.augment(ekf, xhat, yprev)[1]))

    base = aug.theta.copy()
    xhat_a, _ = aug.augment(ekf, xhat, yprev)
    grad = aug.gradient(ekf, xhat_a, yprev, G)
    numeric = np.zeros_like(base)
    for i, j in np.ndindex(*base.shape):
        e = np.zeros_like(base)
        e[i, j] = 1e-6
        numeric[i, j] = (surrogate(base + e) - surrogate(base - e)) / 2e-6
    assert np.allclose(grad, numeric, rtol=1e-5, atol=1e-7)
    # the local loss through h's Jacobian too
    aug.theta = base
    target = rng.normal(size=(30, 3))
    _, grad_local, _ = aug.local_loss_gradient(ekf, xhat, yprev, target)

    def local(theta):
        aug.theta = theta
        return aug.local_loss_gradient(ekf, xhat, yprev, target)[0]

    numeric_local = np.zeros_like(base)
    for i, j in np.ndindex(*base.shape):
        e = np.zeros_like(base)
        e[i, j] = 1e-6
        numeric_local[i, j] = (local(base + e) - local(base - e)) / 2e-6
    assert np.allclose(grad_local, numeric_local, rtol=1e-4, atol=1e-6)


def test_random_features_are_seeded_and_approximate_rbf_kernel():
    a = RandomFourierFeatures(3, n_features=4000, lengthscale=1.5, seed=9)
    b = RandomFourierFeatures(3, n_features=4000, lengthscale=1.5, seed=9)
    c = RandomFourierFeatures(3, n_features=4000, lengthscale=1.5, seed=10)
    x = np.random.default_rng(0).normal(size=(6, 3))
    assert np.array_equal(a.transform(x), b.transform(x))
    assert not np.array_equal(a.transform(x), c.transform(x))
    gram = a.transform(x) @ a.transform(x).T
    sq = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    assert np.max(np.abs(gram - np.exp(-sq / (2 * 1.5**2)))) < 0.08


def test_theta_shape_and_feature_errors():
    aug = Augmentation(IdentityFeatures(4), 2)
    with pytest.raises(ModelError, match=r"shape \(2, 4\)"):
        aug.theta = np.zeros((4, 2))
    with pytest.raises(ModelError, match="unknown feature map"):
        make_feature_map("poly", 3)
