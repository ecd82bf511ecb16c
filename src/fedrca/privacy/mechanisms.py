"""The noise mechanisms of every release a plant makes: clipping, Gaussian, Laplace, noised scatter.

* :func:`clip_rows` and :class:`GaussianMechanism`: the training protocol's states and
  gradients (``mu``-GDP per release; :mod:`fedrca.privacy.accounting`);
* :func:`laplace_scale` and :func:`release_states`: a plant's states released once with
  Laplace noise (pure ``eps``-DP; the ``moments`` estimator, :mod:`fedrca.training.moments`);
* :func:`scatter_sensitivity`, :func:`noise_sd` and :func:`private_scatter_vector`: a site's
  standardised cross-products for the pooled CI tests of ``fedrca graph`` (``mu``-GDP;
  :mod:`fedrca.causal.sufficient`).

Randomized response of the published flags is in :mod:`fedrca.privacy.randomized_response`.
Every release is charged to the plant's ledger (:mod:`fedrca.privacy.ledger`) or the
training accountant (:mod:`fedrca.privacy.accountant`) by its caller.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedrca.exceptions import DataError, ModelError
from fedrca.privacy.accounting import gaussian_mu

__all__ = [
    "GaussianMechanism",
    "clip_rows",
    "laplace_scale",
    "noise_sd",
    "private_scatter_vector",
    "release_states",
    "scatter_sensitivity",
]

FloatArray = NDArray[np.float64]


def clip_rows(X: FloatArray, bound: float) -> tuple[FloatArray, int]:
    """Scale every row of X (T, K) down to L2 norm <= bound; returns (clipped, rows that were clipped).

    Examples
    --------
    >>> clipped, n = clip_rows(np.array([[3.0, 4.0], [0.3, 0.4]]), 1.0)
    >>> clipped.round(3).tolist(), n
    ([[0.6, 0.8], [0.3, 0.4]], 1)
    """
    norms = np.linalg.norm(X, axis=1)
    # x <- x * min(1, c / ||x||)
    scale = np.minimum(1.0, bound / np.maximum(norms, 1e-300))
    return X * scale[:, None], int(np.count_nonzero(norms > bound))


@dataclass(frozen=True)
class GaussianMechanism:
    """Clip each vector to ``clip`` and add N(0, sigma^2) noise, sigma calibrated to (epsilon, delta).

    One release perturbs ``n_vectors`` vectors per record together, so the record's L2
    sensitivity is ``2 clip sqrt(n_vectors)`` and ``sigma = sensitivity / mu(epsilon, delta)``.
    ``epsilon = inf`` is the identity (no clipping, no noise, ``mu = inf`` is never charged).

    Examples
    --------
    >>> from fedrca.privacy.accounting import classic_gaussian_sigma
    >>> mech = GaussianMechanism(epsilon=1.0, delta=1e-5, clip=1.0)
    >>> round(mech.sigma(1), 3), round(classic_gaussian_sigma(1.0, 1e-5, 2.0), 3)
    (7.461, 9.69)
    """

    epsilon: float
    delta: float
    clip: float

    @property
    def active(self) -> bool:
        """False for epsilon = inf."""
        return math.isfinite(self.epsilon)

    @property
    def mu(self) -> float:
        """GDP parameter of one release."""
        return gaussian_mu(self.epsilon, self.delta) if self.active else math.inf

    def sigma(self, n_vectors: int) -> float:
        """Noise standard deviation per entry for a release of ``n_vectors`` vectors per record."""
        if not self.active:
            return 0.0
        return 2.0 * self.clip * math.sqrt(n_vectors) / self.mu

    def release(self, arrays: Sequence[FloatArray], rng: np.random.Generator) -> tuple[list[FloatArray], int]:
        """Clip and noise the (T, K_i) arrays of one release; returns (noised arrays, clipped row count)."""
        if not self.active:
            return [np.asarray(a, dtype=np.float64).copy() for a in arrays], 0
        sigma = self.sigma(len(arrays))
        out = []
        clipped = 0
        for a in arrays:
            c, n = clip_rows(np.asarray(a, dtype=np.float64), self.clip)
            clipped += n
            out.append(c + sigma * rng.standard_normal(c.shape))
        return out, clipped


def laplace_scale(clip: float, dim: int, epsilon: float) -> float:
    """Laplace scale per coordinate for one eps-DP release of a P-vector clipped to L2 norm ``clip``.

    Examples
    --------
    >>> round(laplace_scale(0.5, 2, 2.0), 4)   # 2 c sqrt(P) / eps
    0.7071
    """
    if not epsilon > 0.0:
        raise ModelError(f"state epsilon must be > 0, got {epsilon}")
    return 0.0 if math.isinf(epsilon) else 2.0 * clip * math.sqrt(dim) / epsilon


def release_states(X: FloatArray, clip: float, epsilon: float, rng: np.random.Generator) -> tuple[FloatArray, int]:
    """Clip every row of X (T, P) to L2 norm ``clip`` and add Laplace noise: one pure eps-DP release per record.

    Returns (released states, rows clipped). ``epsilon = inf`` releases the clipped states.
    """
    clipped, n = clip_rows(np.asarray(X, dtype=np.float64), clip)
    scale = laplace_scale(clip, clipped.shape[1], epsilon)
    if scale == 0.0:
        return clipped, n
    # x + Laplace(0, b) per coordinate, b = 2 c sqrt(P) / eps
    return clipped + rng.laplace(0.0, scale, clipped.shape), n


def scatter_sensitivity(clip: float, p: int) -> float:
    """L2 sensitivity of the upper triangle of ``Σ_i z_i z_i'`` to replacing one row, rows clipped to ``clip sqrt(p)``.

    ``||z z' - z~ z~'||_F^2 = ||z||^4 + ||z~||^4 - 2 (z'z~)^2 <= 2 c^4``, and the upper triangle
    holds each entry at most once.

    Examples
    --------
    >>> round(scatter_sensitivity(1.5, 4), 4)      # sqrt(2) (1.5^2 * 4)
    12.7279
    """
    return math.sqrt(2.0) * clip * clip * p


def noise_sd(clip: float, p: int, mu: float) -> float:
    """σ = Δ / mu of each noised entry (0 when mu is inf: no noise)."""
    if not mu > 0.0:
        raise DataError(f"mu must be > 0, got {mu}")
    return 0.0 if math.isinf(mu) else scatter_sensitivity(clip, p) / mu


def private_scatter_vector(
    X: ArrayLike, center: ArrayLike, scale: ArrayLike, clip: float, mu: float, rng: np.random.Generator
) -> FloatArray:
    """``[n, triu(Σ_i z_i z_i') + N(0, σ²)]``: one mu-GDP release of a site's standardised, clipped rows.

    ``z = (x - center) / scale``, each row scaled down to L2 norm ``clip sqrt(p)`` when longer.
    ``center`` and ``scale`` (p,) are the site's standardiser, fixed before the release (the
    site's preprocessing, like a plant's scaler: the guarantee covers the rows given it).
    """
    A = np.asarray(X, dtype=np.float64)
    n, p = A.shape
    sd = np.asarray(scale, dtype=np.float64)
    if np.any(~np.isfinite(sd)) or np.any(sd <= 0):
        raise DataError("the standardiser's scale must be finite and > 0 for every variable")
    Z = (A - np.asarray(center, dtype=np.float64)) / sd
    bound = clip * math.sqrt(p)
    norms = np.linalg.norm(Z, axis=1)
    # z <- z min(1, c / ||z||)
    Z *= np.minimum(1.0, bound / np.maximum(norms, np.finfo(float).tiny))[:, None]
    S = (Z.T @ Z)[np.triu_indices(p)]
    sigma = noise_sd(clip, p, mu)
    noise = sigma * rng.standard_normal(S.shape) if sigma > 0 else np.zeros_like(S)
    return np.concatenate([[float(n)], S + noise])
