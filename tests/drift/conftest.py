"""A small drifting plant for the loop's unit tests (pure cores: no broker, no simulator)."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from fedrca.detectors.plant import PlantDetector
from fedrca.drift import KeeperSettings

#: Sensors of the test plant.
D = 4


def plant_rows(seed: int, n: int, drift_per_row: float = 0.0, start: int = 0) -> np.ndarray:
    """``n`` rows (n, D) of a VAR(1) plant: two slow states seen by four sensors, noise; from row ``start``
    its operating point moves ``drift_per_row`` per row along a fixed direction (slow nominal drift)."""
    rng = np.random.default_rng(seed)
    A = np.array([[0.9, 0.05], [0.0, 0.8]])
    C = np.array([[1.0, 0.2], [0.5, 1.0], [0.3, -0.6], [-0.8, 0.4]])
    x = np.zeros(2)
    out = np.empty((n, D))
    for t in range(n):
        x = A @ x + rng.normal(scale=0.3, size=2)
        out[t] = C @ x + rng.normal(scale=0.2, size=D)
    direction = np.array([1.0, 0.6, -0.4, 0.3])
    return out + np.outer(drift_per_row * (start + np.arange(n)), direction)


@pytest.fixture(autouse=True)
def one_blas_thread() -> Iterator[None]:
    """The loop's matrices are D x D: one BLAS thread, as the keeper's refresh and a streaming worker use."""
    with threadpool_limits(limits=1, user_api="blas"):
        yield


@pytest.fixture(scope="session")
def fitted_once() -> PlantDetector:
    """A family detector fitted on 1,200 nominal rows (no drift), once per session."""
    return PlantDetector(
        name="unit", n_states=2, method="family", alpha=0.005, ewma=(0.1, 0.05), warmup=10, seed=0
    ).fit(plant_rows(1, 1200))


@pytest.fixture
def fitted(fitted_once: PlantDetector) -> PlantDetector:
    """A fresh copy of the fitted detector for each test."""
    return copy.deepcopy(fitted_once)


@pytest.fixture
def settings() -> KeeperSettings:
    """A refresh every 400 rows on the last 800, history 1,600 rows."""
    return KeeperSettings(every=400, window=800, history=1600, guard=20, recent=60, min_rows=200, max_shift=0.5,
                          max_scale=0.25)  # fmt: skip
