"""Synthetic fleets: participants sharing a few operating patterns in different proportions.

Each pattern k is a Gaussian with mean ``mu_k`` and a sparse precision
``Lambda_k`` (a chain of partial correlations); participant s draws its samples
from the mixture with its own weights ``pi^s`` (Dirichlet). This is the data the
CollabDict model assumes, so a fleet fit can be checked against the truth.

Examples
--------
>>> fleet = fleet_patterns(n_participants=4, n_samples=100, n_dims=3, seed=0)
>>> sorted(fleet.datasets)[:2], fleet.datasets["p00"].shape, fleet.weights.shape
(['p00', 'p01'], (100, 3), (4, 3))
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from fedrca.exceptions import DataError

__all__ = ["FleetData", "fleet_patterns"]

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class FleetData:
    """A synthetic fleet.

    Attributes
    ----------
    datasets : participant name (``p00``, ``p01``, ...) -> samples (N_s, M)
    labels : participant name -> the pattern of every sample (N_s,)
    weights : (S, K) each participant's true mixture weights
    means : (K, M) true pattern means
    precisions : (K, M, M) true sparse pattern precisions
    """

    datasets: dict[str, FloatArray]
    labels: dict[str, NDArray[np.int64]]
    weights: FloatArray
    means: FloatArray
    precisions: FloatArray


def fleet_patterns(
    n_participants: int = 11,
    n_samples: int | list[int] = 200,
    n_dims: int = 5,
    n_patterns: int = 3,
    separation: float = 5.0,
    concentration: float = 1.0,
    seed: int = 0,
) -> FleetData:
    """A fleet of ``n_participants`` drawing from ``n_patterns`` shared patterns.

    Parameters
    ----------
    n_participants : S
    n_samples : samples per participant (one number, or one per participant)
    n_dims : M
    n_patterns : K
    separation : distance scale between pattern means (in within-pattern standard deviations)
    concentration : Dirichlet concentration of the participants' weights (small = each
        participant dominated by one pattern)
    seed : the generator's seed
    """
    if n_participants < 1 or n_dims < 1 or n_patterns < 1:
        raise DataError("n_participants, n_dims and n_patterns must be >= 1")
    counts = [n_samples] * n_participants if isinstance(n_samples, int) else list(n_samples)
    if len(counts) != n_participants or min(counts) < 1:
        raise DataError(f"n_samples must be a positive count or {n_participants} positive counts")
    rng = np.random.default_rng(seed)
    means = rng.normal(size=(n_patterns, n_dims)) * separation / np.sqrt(n_dims)
    precisions = np.empty((n_patterns, n_dims, n_dims))
    for k in range(n_patterns):
        # a chain of partial correlations: tridiagonal, diagonally dominant (positive definite)
        off = rng.uniform(-0.45, 0.45, size=n_dims - 1)
        P = np.eye(n_dims) + np.diag(off, 1) + np.diag(off, -1)
        precisions[k] = P * rng.uniform(0.7, 1.5)
    weights = rng.dirichlet(np.full(n_patterns, concentration), size=n_participants)
    chol_cov = [np.linalg.cholesky(np.linalg.inv(P)) for P in precisions]
    datasets: dict[str, FloatArray] = {}
    labels: dict[str, NDArray[np.int64]] = {}
    width = max(2, len(str(n_participants - 1)))
    for s in range(n_participants):
        z = rng.choice(n_patterns, size=counts[s], p=weights[s])
        X = np.empty((counts[s], n_dims))
        for k in range(n_patterns):
            idx = np.flatnonzero(z == k)
            X[idx] = means[k] + rng.standard_normal((len(idx), n_dims)) @ chol_cov[k].T
        name = f"p{s:0{width}d}"
        datasets[name] = X
        labels[name] = z.astype(np.int64)
    return FleetData(datasets, labels, weights, means, precisions)
