"""Private lag moments: the interdependency structure from states released once (pure core).

Per-sample noised states make a cross-plant statistic noisy twice: the server's estimate
of ``sum_t x_m(t) x_n(t-j)'`` from two noised series carries the product of both noises,
``sigma^2 sqrt(T)``, which swamps the signal at any useful epsilon. Here each plant uses
its *exact* states wherever it can and only the other plants' released ones:

1. **states, once** (:func:`fedrca.privacy.mechanisms.release_states`): plant m releases its measurement states
   ``x̃_m(t)`` (clipped to L2 norm ``c``) with Laplace noise, scale ``b = 2 c sqrt(P) / eps``
   per coordinate (L1 sensitivity ``2 c sqrt(P)`` under replacement of one record): a pure
   ``eps``-DP release. Everything later reads these noised states: post-processing, free.
2. **moments, once** (:func:`plant_moments`): plant m computes, with its exact states and
   the other plants' released ones (clipped to ``b_n``, a public post-processing), its own
   lag moments ``sum_t x̃_m(t) x̃_m(t-j)'`` (lag 0 minus the known measurement-noise
   covariance) and its cross moments ``sum_t x̃_m(t) ž_n(t-j)'`` for ``|j| <= L``, and
   releases them all with one Gaussian mechanism (L2 sensitivity in :func:`moment_sensitivity`).
   The cross moments carry the other plant's noise only once: their error is
   ``sigma_n s_m sqrt(T)``, which averages out with T.
3. **estimate** (:func:`estimate_transition`): the server assembles the lag covariances
   ``Gamma_j`` of all plants' states (a cross block is the mean of both plants' versions,
   divided by the known clipping attenuation) and solves the Yule-Walker equations
   ``Gamma_j = A Gamma_{j-1}``, ``j = 1..L``, in the least-squares sense. Standard errors
   combine the known noise of the released moments (propagated by simulation with a
   fixed seed) with the sampling error of a VAR(1).

A plant's privacy cost is one pure release (``state_epsilon``) composed with one Gaussian
release (``moment_mu``) (:class:`~fedrca.privacy.ledger.PrivacyLedger`), whatever the
number of training rounds: the clients' targets are computed from these releases too.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedrca.exceptions import DataError
from fedrca.privacy.mechanisms import clip_rows, laplace_scale

__all__ = [
    "MomentRelease",
    "MomentSettings",
    "TransitionEstimate",
    "attenuation",
    "cross_prediction",
    "estimate_transition",
    "moment_sensitivity",
    "pack_moments",
    "plant_moments",
    "released_noise",
    "unpack_moments",
]

FloatArray = NDArray[np.float64]


@functools.lru_cache(maxsize=64)
def _clipped_laplace(noise_scale: float, bound: float, dim: int, seed: int, draws: int) -> tuple[float, float]:
    """(kappa, variance per coordinate) of Laplace(noise_scale)^P noise clipped to L2 norm ``bound``, one draw.

    Both are Monte Carlo over the same ``draws`` rows and depend on public numbers only, so one draw
    serves both and is cached: every client and the server ask for the same plants' values, and a
    draw of 400,000 rows costs ~0.2 s (``tests/training/test_moments.py::
    test_attenuation_and_released_noise_are_their_monte_carlo_formulas_from_one_cached_draw`` checks
    each value against its own formula on the draw, whichever is asked first).
    """
    e = np.random.default_rng(seed).laplace(0.0, noise_scale, (draws, dim))
    norm = np.linalg.norm(e, axis=1)
    outside = norm > bound
    # tr J = P inside; (b/|e|)(P - 1) outside
    trace = np.where(outside, bound / np.maximum(norm, 1e-300) * (dim - 1), float(dim))
    clipped, _ = clip_rows(e, bound)
    # Var per coordinate = E[|clip_b(e)|^2] / P
    return float(trace.mean() / dim), float(np.mean(np.sum(clipped**2, axis=1)) / dim)


def attenuation(noise_scale: float, bound: float, dim: int, seed: int = 0, draws: int = 400_000) -> float:
    """kappa with E[clip_b(z + e)] ~ kappa z for small z, e ~ Laplace(noise_scale)^P (public numbers only).

    ``d/dz E[clip_b(z + e)]`` at z = 0 is the mean Jacobian of the clipping map, ``(1/P) tr E[J(e)]``
    with ``J = I`` inside the ball and ``(b/|e|)(I - e e'/|e|^2)`` outside; computed by Monte Carlo
    with a fixed seed (it depends on nothing private).

    Examples
    --------
    >>> attenuation(0.0, 1.0, 2)
    1.0
    >>> 0.5 < attenuation(1.0, 2.0, 2) < 1.0
    True
    """
    if noise_scale == 0.0:
        return 1.0
    return _clipped_laplace(float(noise_scale), float(bound), int(dim), int(seed), int(draws))[0]


def moment_sensitivity(clip: float, others_bound: float, n_others: int, lags: int) -> float:
    """L2 sensitivity of :func:`plant_moments` to replacing one record (states clipped to ``clip``).

    Record t enters each cross moment once (``2 c b`` per other plant and lag, 2L+1 lags), each
    own moment of lag j = 1..L twice (``4 c^2``) and the lag-0 one once (``2 c^2``).

    Examples
    --------
    >>> round(moment_sensitivity(1.0, 1.0, 1, 0), 4)   # one cross lag: 2cb; lag 0 own: 2c^2
    2.8284
    """
    c, b = clip, others_bound
    cross = (2.0 * c * b) ** 2 * n_others * (2 * lags + 1)
    # own moments of lags 0..L: lag 0 once (||x x' - y y'|| <= 2 c^2), every other lag twice
    own = (2.0 * c * c) ** 2 + lags * (4.0 * c * c) ** 2
    return math.sqrt(cross + own)


@dataclass(frozen=True)
class MomentRelease:
    """One plant's released moments (noised).

    Attributes
    ----------
    plant : who released them
    own : (2L+1, P, P) ``sum_t x(t) x(t-j)'`` at index L + j for j = 0..L (lag 0 minus n_rows x the
        measurement-noise covariance); the negative lags (indices 0..L-1) are zero, not released
    cross : other plant -> (2L+1, P, P_n) ``sum_t x(t) ž_n(t-j)'`` for j = -L..L (ž clipped to the public bound)
    n_rows : terms in every sum
    noise_sigma : Gaussian noise per entry
    """

    plant: str
    own: FloatArray
    cross: dict[str, FloatArray]
    n_rows: int
    noise_sigma: float


def _lagged_sum(X: FloatArray, Z: FloatArray, j: int, lags: int) -> FloatArray:
    """sum_t X(t) Z(t-j)' over t = L .. T-1-L (the same rows for every |j| <= L)."""
    T = len(X)
    rows = slice(lags, T - lags)
    shifted = slice(lags - j, T - lags - j)
    return np.asarray(X[rows].T @ Z[shifted])


def plant_moments(
    plant: str,
    states: FloatArray,
    released: Mapping[str, FloatArray],
    *,
    clip: float,
    others_bounds: Mapping[str, float],
    lags: int,
    mu: float,
    rng: np.random.Generator,
    noise_cov: FloatArray | None = None,
) -> MomentRelease:
    """Plant m's moments with its exact (clipped) states and the others' released ones, Gaussian-noised.

    Parameters
    ----------
    plant : this plant's name
    states : (T, P) this plant's measurement states (clipped here to ``clip``)
    released : other plant -> (T, P_n) its released states (clipped here to ``others_bound``)
    clip : L2 bound of this plant's states
    others_bounds : other plant -> L2 bound its released states are clipped to (the largest sets the sensitivity)
    lags : L
    mu : GDP parameter of the release (inf = no noise)
    rng : noise
    noise_cov : (P, P) covariance of the measurement-state noise (subtracted from lag 0), or None
    """
    X, _ = clip_rows(np.asarray(states, dtype=np.float64), clip)
    T = len(X)
    if 2 * lags + 2 >= T:
        raise DataError(f"plant '{plant}': {T} samples are too few for {lags} moment lags")
    n_rows = T - 2 * lags
    sens = moment_sensitivity(clip, max(others_bounds.values(), default=0.0), len(released), lags)
    sigma = 0.0 if math.isinf(mu) else sens / mu
    P = X.shape[1]
    own = np.zeros((2 * lags + 1, P, P))
    own[lags:] = np.stack([_lagged_sum(X, X, j, lags) for j in range(lags + 1)])
    if noise_cov is not None:
        # E[x̃ x̃'] = Gamma_0 + N: the plant knows its own N (its model), the server never sees it
        own[lags] -= n_rows * np.asarray(noise_cov, dtype=np.float64)
    cross: dict[str, FloatArray] = {}
    for other, Z in released.items():
        Zc, _ = clip_rows(np.asarray(Z, dtype=np.float64), others_bounds[other])
        cross[other] = np.stack([_lagged_sum(X, Zc, j, lags) for j in range(-lags, lags + 1)])
    if sigma > 0.0:
        own[lags:] += sigma * rng.standard_normal(own[lags:].shape)
        cross = {k: v + sigma * rng.standard_normal(v.shape) for k, v in cross.items()}
    return MomentRelease(plant, own, cross, n_rows, sigma)


@dataclass(frozen=True)
class TransitionEstimate:
    """Â (S, S), its standard errors, and the lag covariances it was solved from (L+1, S, S)."""

    A: FloatArray
    stderr: FloatArray
    gammas: FloatArray


def _assemble(
    plants: Sequence[str],
    dims: Sequence[int],
    releases: Mapping[str, MomentRelease],
    kappa: Mapping[str, float],
    lags: int,
) -> FloatArray:
    offsets = np.cumsum((0, *dims))
    S = int(offsets[-1])
    G = np.zeros((lags + 1, S, S))
    block = {p: slice(int(offsets[i]), int(offsets[i + 1])) for i, p in enumerate(plants)}
    for m in plants:
        rel = releases[m]
        n = rel.n_rows
        for j in range(lags + 1):
            G[j][block[m], block[m]] = rel.own[lags + j] / n
        for other, C in rel.cross.items():
            # plant m's version of block (m, other) at lag j: sum x_m(t) ž_o(t-j)' / kappa_o
            for j in range(lags + 1):
                G[j][block[m], block[other]] += 0.5 * C[lags + j] / (n * kappa[other])
                # ... and of block (other, m) at lag j: (sum x_m(t) ž_o(t+j)')' = sum ž_o(s) x_m(s-j)'
                G[j][block[other], block[m]] += 0.5 * C[lags - j].T / (n * kappa[other])
    return G


def _yule_walker(G: FloatArray) -> FloatArray:
    """Least squares over j = 1..L of ``Gamma_j = A Gamma_{j-1}``; ``G`` (..., L+1, S, S), Â (..., S, S).

    ``A = (sum_j Gamma_j Gamma_{j-1}') (sum_j Gamma_{j-1} Gamma_{j-1}')^-1``
    """
    lags = G.shape[-3] - 1
    prev = np.swapaxes(G[..., :lags, :, :], -1, -2)  # Gamma_{j-1}', j = 1..L
    # sum_j Gamma_j Gamma_{j-1}', sum_j Gamma_{j-1} Gamma_{j-1}'
    num = (G[..., 1:, :, :] @ prev).sum(axis=-3)
    den = (G[..., :lags, :, :] @ prev).sum(axis=-3)
    # A = num den^-1, i.e. den' A' = num'
    return np.asarray(np.swapaxes(np.linalg.solve(np.swapaxes(den, -1, -2), np.swapaxes(num, -1, -2)), -1, -2))


def estimate_transition(
    plants: Sequence[str],
    dims: Sequence[int],
    releases: Mapping[str, MomentRelease],
    kappa: Mapping[str, float],
    lags: int,
    cross_noise_var: Mapping[str, float],
    draws: int = 200,
    seed: int = 0,
) -> TransitionEstimate:
    """Â from the released moments of every plant, with standard errors.

    ``cross_noise_var[n]`` is the variance per coordinate of plant n's released-state noise
    after clipping (public); it sets the error of every cross moment that uses plant n's
    released states, ``var = noise_var_n sum_t x_m,i(t)^2``, estimated from plant m's own
    released lag-0 moment. Those errors and the Gaussian noise of the releases are
    propagated to Â by simulation (``draws``, fixed ``seed``); the sampling error of a
    VAR(1), ``Sigma_u[i, i] (Gamma_0^-1)[j, j] / T``, is added.
    """
    G = _assemble(plants, dims, releases, kappa, lags)
    A = _yule_walker(G)
    offsets = np.cumsum((0, *dims))
    block = {p: slice(int(offsets[i]), int(offsets[i + 1])) for i, p in enumerate(plants)}
    # Every noise term of one draw, in the order a draw takes its normals: (lag, rows, columns,
    # shape, pre, post), the term being pre * z / post. All draws are taken at once, one row of Z
    # per draw: the same numbers, in the same order, as a draw-by-draw loop
    # (tests/training/test_moments.py::test_the_vectorised_draws_equal_the_draw_by_draw_simulation).
    terms: list[tuple[int, slice, slice, tuple[int, ...], Any, float]] = []
    for m in plants:
        rel = releases[m]
        n = rel.n_rows
        power = np.clip(np.diag(rel.own[lags]), 0.0, None)  # sum_t x_m,i(t)^2 (noisy, clipped at 0)
        for j in range(lags + 1):
            terms.append((j, block[m], block[m], rel.own[lags].shape, rel.noise_sigma, float(n)))
        for other in rel.cross:
            k = kappa[other]
            for j in range(lags + 1):
                for target, shape in (
                    ((block[m], block[other]), (dims[plants.index(m)], dims[plants.index(other)])),
                    ((block[other], block[m]), (dims[plants.index(other)], dims[plants.index(m)])),
                ):
                    # each half-block: Gaussian release noise + the other plant's state noise
                    own_rows = power if target[0] == block[m] else None
                    var_state = cross_noise_var[other] * (own_rows[:, None] if own_rows is not None else power[None, :])
                    sd = np.sqrt(rel.noise_sigma**2 + np.broadcast_to(var_state, shape))
                    terms.append((j, target[0], target[1], shape, 0.5 * sd, n * k))
    sizes = [math.prod(term[3]) for term in terms]
    Z = np.random.default_rng(seed).standard_normal((draws, sum(sizes)))
    Gs = np.repeat(G[None], draws, axis=0)  # (draws, L+1, S, S)
    at = 0
    for (j, rows, cols, half, pre, post), size in zip(terms, sizes, strict=True):
        Gs[:, j, rows, cols] += pre * Z[:, at : at + size].reshape(draws, *half) / post
        at += size
    sims = _yule_walker(Gs)
    noise_var = np.var(sims, axis=0)
    # sampling error of a VAR(1): Sigma_u = Gamma_0 - A Gamma_1'
    n_obs = min(r.n_rows for r in releases.values())
    sigma_u = G[0] - A @ G[1].T
    inv0 = np.linalg.pinv(G[0])
    sampling = np.outer(np.clip(np.diag(sigma_u), 0.0, None), np.clip(np.diag(inv0), 0.0, None)) / n_obs
    return TransitionEstimate(A=A, stderr=np.sqrt(noise_var + sampling), gammas=G)


def released_noise(noise_scale: float, bound: float, dim: int, seed: int = 0, draws: int = 400_000) -> float:
    """Variance per coordinate of Laplace(noise_scale)^P noise after clipping to L2 norm ``bound`` (public)."""
    if noise_scale == 0.0:
        return 0.0
    return _clipped_laplace(float(noise_scale), float(bound), int(dim), int(seed), int(draws))[1]


@dataclass(frozen=True)
class MomentSettings:
    """The two releases of the private-moments protocol.

    Attributes
    ----------
    state_clip : L2 bound of a measurement-state vector (state units)
    state_epsilon : pure epsilon of the one release of the states (Laplace); inf = no noise
    moment_mu : GDP mu of the one release of the moments (Gaussian); inf = no noise
    lags : L, lags of the moments (Yule-Walker equations j = 1..L)
    bound_factor : others' released states are clipped to ``state_clip + bound_factor x`` their
        noise's RMS norm before they enter a plant's moments (bounds the sensitivity)
    """

    state_clip: float
    state_epsilon: float
    moment_mu: float
    lags: int = 3
    bound_factor: float = 1.0

    def noise_scale(self, dim: int) -> float:
        """Laplace scale per coordinate of the state release."""
        return laplace_scale(self.state_clip, dim, self.state_epsilon)

    def others_bound(self, dim: int) -> float:
        """L2 bound of a released state vector of dimension ``dim`` inside the moments."""
        return self.state_clip + self.bound_factor * math.sqrt(2.0 * dim) * self.noise_scale(dim)


def pack_moments(release: MomentRelease, others: Sequence[str]) -> FloatArray:
    """One 2-D array ((2L+1) P, P + sum P_n) of a release: own block, then the others' in order."""
    blocks = [release.own] + [release.cross[o] for o in others]
    stacked = np.concatenate(blocks, axis=2)  # (2L+1, P, P + sum P_n)
    return np.ascontiguousarray(stacked.reshape(-1, stacked.shape[2]))


def unpack_moments(
    plant: str, array: FloatArray, others: Sequence[str], dims: Mapping[str, int], lags: int, n_rows: int, sigma: float
) -> MomentRelease:
    """Inverse of :func:`pack_moments`."""
    P = dims[plant]
    a = np.asarray(array, dtype=np.float64)
    width = P + sum(dims[o] for o in others)
    if a.shape != ((2 * lags + 1) * P, width):
        raise DataError(f"moments of plant '{plant}' have shape {a.shape}, expected {((2 * lags + 1) * P, width)}")
    cube = a.reshape(2 * lags + 1, P, width)
    own = cube[:, :, :P]
    cross: dict[str, FloatArray] = {}
    col = P
    for o in others:
        cross[o] = cube[:, :, col : col + dims[o]]
        col += dims[o]
    return MomentRelease(plant, own, cross, n_rows, sigma)


def cross_prediction(
    plant: str,
    plants: Sequence[str],
    dims: Sequence[int],
    A: FloatArray,
    released: Mapping[str, FloatArray],
    kappa: Mapping[str, float],
    bounds: Mapping[str, float],
) -> FloatArray:
    """d_m(t) = sum_{n != m} Â_mn ẑ_n(t-1) / kappa_n: what the other plants predict of plant m (public data only).

    Rows are aligned with the released states (row 0 has no predecessor: 0).
    """
    offsets = np.cumsum((0, *dims))
    m = plants.index(plant)
    rows = slice(int(offsets[m]), int(offsets[m + 1]))
    T = len(next(iter(released.values())))
    d = np.zeros((T, dims[m]))
    for n, other in enumerate(plants):
        if other == plant:
            continue
        Z, _ = clip_rows(np.asarray(released[other], dtype=np.float64), bounds[other])
        block = A[rows, int(offsets[n]) : int(offsets[n + 1])]
        # d(t) += A_mn ẑ_n(t-1) / kappa_n
        d[1:] += Z[:-1] @ block.T / kappa[other]
    return d
