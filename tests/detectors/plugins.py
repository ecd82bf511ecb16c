"""A vendor-style proprietary filter used by the plug-in tests (loaded by dotted path)."""

from __future__ import annotations

import numpy as np

from fedrca.detectors.ekf import ExtendedKalmanFilter

W = np.array([[0.6, -0.3], [0.3, 0.6]])
C = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5], [1.0, -1.0]])


def transition(x, u=None):
    return np.tanh(np.asarray(x) @ W.T)


def measurement(x):
    return np.asarray(x) @ C.T


def damped_filter(noise: float = 0.05) -> ExtendedKalmanFilter:
    """Factory named in configs as 'tests.detectors.plugins:damped_filter'."""
    return ExtendedKalmanFilter(transition, measurement, Q=noise * np.eye(2), R=noise * np.eye(4))


def simulate(n: int, seed: int, shift_at: int | None = None) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.zeros(2)
    Y = np.empty((n, 4))
    for t in range(n):
        x = transition(x) + np.array([0.4 * np.sin(0.2 * t), 0.0]) + 0.2 * rng.normal(size=2)
        Y[t] = measurement(x) + 0.2 * rng.normal(size=4)
        if shift_at is not None and t >= shift_at:
            Y[t, 0] += 3.0
    return Y
