"""CollabDict: a sparse Gaussian-graphical-model mixture learned by a fleet (pure core).

The model (the CollabDict paper, Sec. 4.3-4.5): K shared patterns
``(mu_k, Lambda_k)`` (mean, sparse precision) and per-participant mixture
weights ``pi^s``::

    p^s(x) = sum_k pi_k^s N(x | mu_k, Lambda_k^-1)

Learning alternates, at every participant s,

* ``local_update`` (E-step, Eq. 12-13): responsibilities
  ``r_k(n) ∝ pi_k^s N(x_n | mu_k, Lambda_k^-1)``, new weights ``pi_k^s = N_k^s / N^s``
  and the statistics ``N_k^s = sum_n r``, ``m_k^s = sum_n r x``, ``C_k^s = sum_n r x x^T``
  (packed into one vector by :func:`pack_statistics`, with the local log-likelihood);
* ``consensus``: the fleet sums of the statistics (:mod:`fedrca.fleet.consensus`);
* ``optimize`` (MAP M-step, Eq. 15-16) from the sums, identical at every participant::

      mu_k     = (lambda0 m0 + Nbar_k mbar_k) / (lambda0 + Nbar_k)
      Sigma_k  = Cbar_k - mbar_k mbar_k^T + lambda0 / (lambda0 + Nbar_k) (mbar_k - m0)(mbar_k - m0)^T
      Lambda_k = argmax (Nbar_k + 1)/Nbar_k ln|L| - Tr(L Sigma_k) - rho / Nbar_k ||L||_1

  The last line is scikit-learn's graphical lasso after dividing by (Nbar+1)/Nbar:
  empirical covariance ``Nbar/(Nbar+1) Sigma_k`` and l1 weight ``alpha = rho/(Nbar+1)``.
  scikit-learn leaves the diagonal unpenalised; the paper's ||L||_1 includes it,
  which is the same as adding ``alpha`` to the empirical covariance's diagonal
  (the diagonal's subgradient is always +1), so that is what is passed.
  Components whose ``Nbar_k`` falls below ``prune`` x the fleet's sample count are
  dropped by everybody at once.

The anomaly score (Eq. 20) is the responsibility-weighted negative log density::

    a^s(x) = sum_k r_k^s(x) [ M/2 ln 2pi - 1/2 ln|Lambda_k| + 1/2 (x - mu_k)^T Lambda_k (x - mu_k) ]

The privacy monitor (Sec. 6.2) is the entropy l-diversity of the released local
means: ``g_k^s(n) ∝ N(x_n | m_k^s / N_k^s, Lambda_k^-1)``, ``E^s = max_k H(g_k^s)``;
below ``ln l0`` one released mean is a near copy of a few raw samples.

All learning happens in coordinates standardised by the fleet's mean and standard
deviation (agreed by consensus first, in three sessions: count and mean, centred sums
of squares, second moments in those scales; :func:`initialise`), so the l1 weight
treats every sensor alike and the sums keep their precision. :func:`fit_centralised` is the pure twin of the
fleet: the same code on exact sums of the same participants' data.

Examples
--------
>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> a, b = rng.normal(size=(300, 3)), rng.normal(size=(300, 3)) + 6.0
>>> fit = fit_centralised([np.vstack([a, b[:30]]), np.vstack([a[:30], b])], FleetSettings(n_components=2, folds=0))
>>> fit.model.n_components, np.round(np.sort(fit.weights[0]), 2).tolist()
(2, [0.09, 0.91])
"""

from __future__ import annotations

import hashlib
import math
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
import scipy.linalg
from numpy.typing import ArrayLike, NDArray
from scipy.special import logsumexp

from fedrca.detectors.identify import Standardizer
from fedrca.exceptions import ConfigError, ConvergenceError, DataError, PrivacyWarning
from fedrca.fleet.calibration import Calibration, conformal_percentile, held_out_block, own_calibration
from fedrca.fleet.consensus import StepRule

__all__ = [
    "CentralFit",
    "EStep",
    "FleetInit",
    "FleetModel",
    "FleetSettings",
    "GlobalLearner",
    "LocalLearner",
    "anomaly_score",
    "calibrate",
    "component_nll",
    "e_step",
    "fit_centralised",
    "fleet_center",
    "held_out_scores",
    "initialise",
    "initialise_centralised",
    "l_diversity",
    "m_step",
    "mean_statistics",
    "moment_statistics",
    "pack_statistics",
    "pooled_quantile",
    "posterior_pseudo_samples",
    "rough_scale",
    "score_floor",
    "score_histogram",
    "shared_threshold",
    "spread_statistics",
    "unpack_statistics",
]

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]
LN_2PI = math.log(2.0 * math.pi)


@dataclass(frozen=True)
class FleetSettings:
    """Hyper-parameters every participant of a fleet agrees on (validated, immutable).

    Parameters
    ----------
    n_components : K, the number of shared patterns (before pruning)
    rho : l1 weight of the precision prior (Eq. 8), in samples; the M-step uses rho / Nbar_k
    lambda0 : strength (in samples) of the prior pulling every mean towards m0 = 0
        (the fleet mean, in standardised coordinates)
    chunks : C, random chunks per statistic (1 = no chunking: peers see first-round values)
    tolerance : consensus stops when every relative change per round is below it
    step : consensus step, "degree" (1/(d_max+1)), "paper" (1/S) or a number
    max_rounds : consensus rounds before ConvergenceError
    max_iter : EM iterations at most
    em_tol : EM stops when the fleet log-likelihood changes by less than em_tol x |LL|
    prune : drop component k when Nbar_k < prune x (fleet sample count)
    init_scale : initial means are drawn from N(0, init_scale^2 R), R the fleet correlation
    n_init : candidate sets of initial means; the fleet keeps the one with the highest
        summed log-likelihood (one small consensus)
    glasso_tol, glasso_max_iter : graphical lasso dual-gap tolerance and iterations
    folds : cross-fitting folds for the thresholds (0 = in-sample scores); participant i holds
        out its block (f + i) mod folds in fold f (:func:`fedrca.fleet.calibration.held_out_block`)
    percentile : thresholds = this percentile of nominal statistics
    threshold_scope : "participant" (each participant's own threshold, :mod:`fedrca.fleet.calibration`)
        or "fleet" (one threshold pooled over everybody's scores)
    ewma : lambda of the smoothed score a participant with its own threshold alarms on, or None
        (the score itself)
    l0 : l-diversity bound; a PrivacyWarning when E^s < ln l0
    diversity : "max" (E^s = max_k H_k, the paper's definition) or "min" (every component)
    privacy_noise : when the monitor fires, add ``noise_samples`` pseudo-samples per exposed
        component drawn from the posterior N(w_k, (lambda_k Lambda_k)^-1)
    noise_samples : pseudo-samples per exposed component
    seed : the fleet's shared seed (initial means, peer re-labelling)
    """

    n_components: int = 3
    rho: float = 10.0
    lambda0: float = 1.0
    chunks: int = 3
    tolerance: float = 1e-12
    step: StepRule | float = "degree"
    max_rounds: int = 100_000
    max_iter: int = 100
    em_tol: float = 1e-6
    prune: float = 1e-3
    init_scale: float = 1.0
    n_init: int = 10
    glasso_tol: float = 1e-6
    glasso_max_iter: int = 500
    folds: int = 5
    percentile: float = 99.5
    threshold_scope: Literal["participant", "fleet"] = "participant"
    ewma: float | None = None
    l0: float = 2.0
    diversity: Literal["max", "min"] = "max"
    privacy_noise: bool = False
    noise_samples: int = 10
    seed: int = 0

    def __post_init__(self) -> None:
        checks = [
            ("n_components", self.n_components >= 1, ">= 1"),
            ("rho", self.rho >= 0, ">= 0"),
            ("lambda0", self.lambda0 > 0, "> 0"),
            ("chunks", self.chunks >= 1, ">= 1"),
            ("tolerance", 0 < self.tolerance < 1, "in (0, 1)"),
            ("max_rounds", self.max_rounds >= 1, ">= 1"),
            ("max_iter", self.max_iter >= 1, ">= 1"),
            ("em_tol", self.em_tol >= 0, ">= 0"),
            ("prune", 0 <= self.prune < 1, "in [0, 1)"),
            ("init_scale", self.init_scale >= 0, ">= 0"),
            ("n_init", self.n_init >= 1, ">= 1"),
            ("glasso_tol", self.glasso_tol > 0, "> 0"),
            ("glasso_max_iter", self.glasso_max_iter >= 1, ">= 1"),
            ("folds", self.folds == 0 or self.folds >= 2, "0 or >= 2"),
            ("percentile", 0 < self.percentile < 100, "in (0, 100)"),
            ("threshold_scope", self.threshold_scope in ("participant", "fleet"), "'participant' or 'fleet'"),
            ("ewma", self.ewma is None or 0 < self.ewma <= 1, "in (0, 1] or None"),
            ("l0", self.l0 >= 1, ">= 1"),
            ("diversity", self.diversity in ("max", "min"), "'max' or 'min'"),
            ("noise_samples", self.noise_samples >= 1, ">= 1"),
        ]
        for name, ok, rule in checks:
            if not ok:
                raise ConfigError(f"must be {rule}, got {getattr(self, name)!r}", key=f"fleet.{name}")
        if isinstance(self.step, str) and self.step not in ("degree", "paper"):
            raise ConfigError(f"must be 'degree', 'paper' or a number, got {self.step!r}", key="fleet.step")


# -- statistics --------------------------------------------------------------------------------
def _triu(M: int) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    return np.triu_indices(M)


def pack_statistics(N: FloatArray, m: FloatArray, C: FloatArray, extra: ArrayLike = ()) -> FloatArray:
    """One vector [N (K), m (K M), upper(C) (K M(M+1)/2), extra] of the local statistics.

    Only the upper triangle of each symmetric C_k travels.
    """
    M = m.shape[1]
    iu = _triu(M)
    return np.concatenate([N, m.ravel(), C[:, iu[0], iu[1]].ravel(), np.asarray(extra, dtype=np.float64)])


def unpack_statistics(vec: ArrayLike, K: int, M: int) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Inverse of :func:`pack_statistics`: (N (K,), m (K, M), C (K, M, M), extra)."""
    v = np.asarray(vec, dtype=np.float64)
    n_tri = M * (M + 1) // 2
    base = K + K * M + K * n_tri
    if v.ndim != 1 or v.size < base:
        raise DataError(f"statistics vector of length {v.size} is too short for K={K}, M={M}")
    N = v[:K].copy()
    m = v[K : K + K * M].reshape(K, M).copy()
    iu = _triu(M)
    C = np.zeros((K, M, M))
    C[:, iu[0], iu[1]] = v[K + K * M : base].reshape(K, n_tri)
    C[:, iu[1], iu[0]] = C[:, iu[0], iu[1]]
    return N, m, C, v[base:].copy()


#: a centred sum of squares below this share of the largest is below the scale
#: session's resolution (a relative consensus error of ~1e-11 of the largest element):
#: its variable is scaled by the floor instead (tests/fleet/test_collabdict.py::
#: test_staged_standardiser_keeps_constant_columns_constant)
SPREAD_FLOOR = 1e-8


def mean_statistics(X: ArrayLike) -> FloatArray:
    """[N, sum x (M)] of raw data X (N, M): the fleet sums it first (session ``scale/mean``)."""
    A = np.asarray(X, dtype=np.float64)
    return np.concatenate([[float(len(A))], A.sum(axis=0)])


def fleet_center(sums: ArrayLike) -> tuple[float, FloatArray]:
    """(n, c (M,)) from the summed :func:`mean_statistics`: the fleet's count and mean.

    n is a count, so the agreed sum (within ~1e-10 of a whole number) is rounded.

    Raises
    ------
    DataError
        When the fleet holds fewer than 2 samples.
    """
    v = np.asarray(sums, dtype=np.float64)
    n = float(np.round(v[0]))
    if n < 2:
        raise DataError(f"the fleet holds {n:.0f} samples; need at least 2")
    # c = sum x / n
    return n, v[1:] / n


def spread_statistics(X: ArrayLike, center: FloatArray) -> FloatArray:
    """sum (x - c)^2 (M,) of raw data X (N, M) about the fleet mean c (session ``scale/spread``).

    Centring on the agreed mean before squaring keeps a sensor with a large mean and a
    small spread: from raw sums var = E[x^2] - E[x]^2 cancels catastrophically (TEP's
    reactor temperature, mean 120.4, std 0.0122).
    """
    A = np.asarray(X, dtype=np.float64) - center
    return np.asarray(np.einsum("nm,nm->m", A, A), dtype=np.float64)


def rough_scale(sums: ArrayLike, n: float) -> FloatArray:
    """s (M,) from the summed :func:`spread_statistics`: per-variable scales for the last session.

    s_i = sqrt(max(v_i, SPREAD_FLOOR max_j v_j) / (n - 1)); 1 when every v_j is 0. Only
    needs to be right in magnitude: the moment session measures the spread in units of s.
    """
    v = np.clip(np.asarray(sums, dtype=np.float64), 0.0, None)
    top = float(v.max()) if v.size else 0.0
    if top <= 0.0:
        return np.ones_like(v)
    return np.asarray(np.sqrt(np.maximum(v, SPREAD_FLOOR * top) / (n - 1.0)), dtype=np.float64)


def moment_statistics(X: ArrayLike, center: FloatArray, scale: FloatArray) -> FloatArray:
    """[sum z (M), upper(sum z z^T) (M(M+1)/2)] with z = (x - c) / s (session ``scale/moments``).

    Every element is at most ~N in size, so the consensus error (relative to the
    largest element) is relative to every variable's standard deviation and variance;
    sum z corrects the mean c, which the first session knows only relative to the
    largest sum x (a tight sensor with a large mean).
    """
    Z = (np.asarray(X, dtype=np.float64) - center) / scale
    iu = _triu(Z.shape[1])
    return np.concatenate([Z.sum(axis=0), (Z.T @ Z)[iu]])


@dataclass(frozen=True)
class FleetInit:
    """What every participant derives identically from the fleet's scale sums.

    Attributes
    ----------
    scaler : the fleet's standardiser (mean, std in raw units)
    means : (K, M) initial means (standardised)
    precisions : (K, M, M) initial precisions (identity)
    n_total : the fleet's sample count
    candidates : (n_init, K, M) the candidate initial means ``means`` was chosen from
    """

    scaler: Standardizer
    means: FloatArray
    precisions: FloatArray
    n_total: float
    candidates: FloatArray

    def candidate_loglik(self, Z: FloatArray) -> FloatArray:
        """Local log-likelihood (n_init,) of standardised data Z under each candidate (uniform pi, Lambda = I)."""
        K = self.candidates.shape[1]
        out = np.empty(len(self.candidates))
        for c, means in enumerate(self.candidates):
            # ln sum_k 1/K N(z | mu_k, I)
            logp = -component_nll(Z, means, self.precisions) - math.log(K)
            out[c] = float(logsumexp(logp, axis=1).sum()) if len(Z) else 0.0
        return out

    def choose(self, fleet_loglik: ArrayLike) -> FleetInit:
        """The initialisation with the candidate of the highest fleet log-likelihood (n_init,)."""
        best = int(np.argmax(np.asarray(fleet_loglik, dtype=np.float64)))
        return replace(self, means=self.candidates[best].copy())


def initialise(
    n: float, center: FloatArray, scale: FloatArray, moments: ArrayLike, settings: FleetSettings
) -> FleetInit:
    """Standardiser and initial parameters from the three scale sessions' results.

    The fleet agrees on (1) n and the mean c (:func:`fleet_center`), (2) the centred sums
    of squares, giving per-variable scales s (:func:`rough_scale`), (3) the sums of
    z and z z^T with z = (x - c) / s (``moments``, :func:`moment_statistics`). Then::

        zbar  = sum z / n                        (mean = c + s zbar)
        cov_z = (sum z z^T - n zbar zbar^T) / (n - 1)   (unbiased, in units of s)
        std_i = s_i sqrt(cov_z_ii)               (1 when below resolution: constant)
        R     = s s^T cov_z / (std std^T)        (the fleet correlation)

    Initial means are ``init_scale`` x draws from N(0, R) with the shared seed:
    data-shaped starting points without any sample. ``n_init`` candidate sets are
    drawn; :meth:`FleetInit.choose` keeps the best once the fleet has summed
    :meth:`FleetInit.candidate_loglik`. :func:`initialise_centralised` is the twin on
    exact sums.
    """
    c = np.asarray(center, dtype=np.float64)
    s = np.asarray(scale, dtype=np.float64)
    M = c.size
    iu = _triu(M)
    v = np.asarray(moments, dtype=np.float64)
    zbar = v[:M] / n
    # mean = c + s zbar
    mean = c + s * zbar
    S = np.zeros((M, M))
    S[iu] = v[M:]
    S[iu[1], iu[0]] = S[iu]
    # cov_z = (sum z z^T - n zbar zbar^T) / (n - 1)
    cov_z = (S - n * np.outer(zbar, zbar)) / (n - 1.0)
    d = np.clip(np.diag(cov_z), 0.0, None)
    std = s * np.sqrt(d)
    # constant (to the sessions' resolution): d_i is ~1 for every variable with a spread
    floor = SPREAD_FLOOR * max(float(d.max(initial=0.0)), 1e-300)
    resolved = (d > floor) & (std > 1e-12 * np.maximum(np.abs(mean), 1.0))
    std = np.where(resolved, std, 1.0)
    # cov = s s^T cov_z in raw units, R = cov / (std std^T)
    R = cov_z * np.outer(s / std, s / std)
    w, V = np.linalg.eigh((R + R.T) / 2.0)
    rng = np.random.default_rng([int(settings.seed), 0x5EED])
    z = rng.standard_normal((settings.n_init, settings.n_components, M))
    # mu_k^0 = init_scale V sqrt(w) z_k  ~  N(0, init_scale^2 R)
    candidates = settings.init_scale * (z * np.sqrt(np.clip(w, 0.0, None))) @ V.T
    precisions = np.tile(np.eye(M), (settings.n_components, 1, 1))
    return FleetInit(Standardizer(mean=mean, std=std), candidates[0].copy(), precisions, float(n), candidates)


def initialise_centralised(datasets: Sequence[ArrayLike], settings: FleetSettings) -> FleetInit:
    """:func:`initialise` from exact sums of every participant's raw data (the fleet's twin).

    The same three stages as :meth:`fedrca.fleet.model.FleetParticipant.protocol`,
    each summed exactly instead of by consensus (first candidate; not yet chosen).
    """
    Xs = [np.asarray(x, dtype=np.float64) for x in datasets]
    n, c = fleet_center(np.sum([mean_statistics(x) for x in Xs], axis=0))
    s = rough_scale(np.sum([spread_statistics(x, c) for x in Xs], axis=0), n)
    return initialise(n, c, s, np.sum([moment_statistics(x, c, s) for x in Xs], axis=0), settings)


# -- E-step ------------------------------------------------------------------------------------
def _cholesky(precisions: FloatArray) -> FloatArray:
    try:
        return np.asarray(np.linalg.cholesky(precisions), dtype=np.float64)
    except np.linalg.LinAlgError:
        raise ConvergenceError("a precision matrix is not positive definite; raise rho") from None


def component_nll(X: FloatArray, means: FloatArray, precisions: FloatArray) -> FloatArray:
    """-ln N(x_n | mu_k, Lambda_k^-1) for X (N, M) -> (N, K).

    With Lambda_k = L_k L_k^T: (x - mu)^T Lambda (x - mu) = ||L_k^T (x - mu)||^2 and
    ln|Lambda_k| = 2 sum ln diag(L_k).
    """
    L = _cholesky(precisions)
    K, M = means.shape
    out = np.empty((len(X), K))
    for k in range(K):
        # d2 = ||(x - mu_k) L_k||^2
        white = (X - means[k]) @ L[k]
        d2 = np.einsum("nm,nm->n", white, white)
        half_logdet = np.sum(np.log(np.diag(L[k])))
        # -ln N = M/2 ln 2pi - 1/2 ln|Lambda_k| + 1/2 d2
        out[:, k] = 0.5 * M * LN_2PI - half_logdet + 0.5 * d2
    return out


@dataclass(frozen=True)
class EStep:
    """One participant's E-step (intermediate values kept as evidence).

    Attributes
    ----------
    resp : (N, K) responsibilities r_k(n)
    N : (K,) N_k = sum_n r_k(n)
    m : (K, M) m_k = sum_n r_k(n) x_n
    C : (K, M, M) C_k = sum_n r_k(n) x_n x_n^T
    loglik : sum_n ln p^s(x_n)
    """

    resp: FloatArray
    N: FloatArray
    m: FloatArray
    C: FloatArray
    loglik: float


def _log(w: ArrayLike) -> FloatArray:
    with np.errstate(divide="ignore"):
        return np.asarray(np.log(np.asarray(w, dtype=np.float64)))


def e_step(X: FloatArray, weights: FloatArray, means: FloatArray, precisions: FloatArray) -> EStep:
    """Local E-step (Eq. 12-13) of X (N, M) with weights pi (K,) and the shared components."""
    # ln pi_k + ln N(x_n | mu_k, Lambda_k^-1)
    logp = _log(weights)[None, :] - component_nll(X, means, precisions)
    lse = logsumexp(logp, axis=1)
    # r_k(n) = pi_k N_k(x_n) / sum_l pi_l N_l(x_n)
    resp = np.exp(logp - lse[:, None])
    Nk = resp.sum(axis=0)
    mk = resp.T @ X
    Ck = np.stack([(X * resp[:, k : k + 1]).T @ X for k in range(len(weights))])
    return EStep(resp, Nk, mk, Ck, float(lse.sum()))


def responsibilities(X: FloatArray, weights: FloatArray, means: FloatArray, precisions: FloatArray) -> FloatArray:
    """r_k(x) (N, K) of Eq. 18."""
    logp = _log(weights)[None, :] - component_nll(X, means, precisions)
    return np.asarray(np.exp(logp - logsumexp(logp, axis=1)[:, None]))


def anomaly_score(X: FloatArray, weights: FloatArray, means: FloatArray, precisions: FloatArray) -> FloatArray:
    """a^s(x) (N,) of Eq. 20: sum_k r_k(x) (-ln N(x | mu_k, Lambda_k^-1))."""
    nll = component_nll(X, means, precisions)
    logp = _log(weights)[None, :] - nll
    r = np.exp(logp - logsumexp(logp, axis=1)[:, None])
    return np.asarray(np.einsum("nk,nk->n", r, nll))


# -- M-step ------------------------------------------------------------------------------------
def _glasso(emp: FloatArray, alpha: float, tol: float, max_iter: int) -> FloatArray:
    """Precision of scikit-learn's graphical lasso; ConvergenceError with the fix on failure."""
    if alpha <= 0:
        try:
            return np.asarray(np.linalg.inv(emp))
        except np.linalg.LinAlgError:
            raise ConvergenceError("a component covariance is singular; use rho > 0") from None
    # argmax ln|L| - Tr(L S) - alpha ||L||_1 is c L' with L' the solution for (c S, c alpha): the same
    # problem, but scikit-learn's coordinate descent breaks down ("Non SPD result") on well-conditioned
    # matrices with small variances (tests/detectors/test_contract.py, fleet-ggm); c = M / Tr(S)
    # gives it unit mean variance
    c = emp.shape[0] / float(np.trace(emp))
    # scikit-learn when learning only: every command and worker that assembles a site imports this module
    from sklearn.covariance import graphical_lasso
    from sklearn.exceptions import ConvergenceWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        try:
            # the inner lasso solves 100x tighter than the outer dual gap, or the gap stalls above tol
            _, scaled = graphical_lasso(c * emp, c * alpha, tol=tol, enet_tol=tol * 1e-2, max_iter=max_iter)
        except FloatingPointError:
            try:
                _, scaled = graphical_lasso(c * emp, c * alpha, mode="lars", tol=tol, max_iter=max_iter)
            except FloatingPointError as exc:
                raise ConvergenceError(f"graphical lasso failed ({exc}); raise rho") from None
    precision = c * scaled
    return np.asarray((precision + precision.T) / 2.0)


def m_step(
    N_bar: FloatArray,
    m_sum: FloatArray,
    C_sum: FloatArray,
    rho: float,
    lambda0: float,
    m0: FloatArray | None = None,
    glasso_tol: float = 1e-6,
    glasso_max_iter: int = 500,
) -> tuple[FloatArray, FloatArray]:
    """MAP M-step (Eq. 15-16) from the fleet sums: (means (K, M), precisions (K, M, M)).

    Parameters
    ----------
    N_bar : (K,) sum_s N_k^s
    m_sum : (K, M) sum_s m_k^s
    C_sum : (K, M, M) sum_s C_k^s
    rho, lambda0 : prior settings; m0 : (M,) prior mean (default 0)
    """
    K, M = m_sum.shape
    m0v = np.zeros(M) if m0 is None else np.asarray(m0, dtype=np.float64)
    means = np.empty((K, M))
    precisions = np.empty((K, M, M))
    for k in range(K):
        n = float(N_bar[k])
        m_bar = m_sum[k] / n
        C_bar = C_sum[k] / n
        # mu_k = (lambda0 m0 + Nbar mbar) / (lambda0 + Nbar)
        means[k] = (lambda0 * m0v + n * m_bar) / (lambda0 + n)
        dev = m_bar - m0v
        # Sigma_k = Cbar - mbar mbar^T + lambda0/(lambda0 + Nbar) (mbar - m0)(mbar - m0)^T
        sigma = C_bar - np.outer(m_bar, m_bar) + lambda0 / (lambda0 + n) * np.outer(dev, dev)
        sigma = (sigma + sigma.T) / 2.0
        alpha = rho / (n + 1.0)
        # objective / ((N+1)/N): ln|L| - Tr(L N/(N+1) Sigma) - rho/(N+1) ||L||_1 ; diagonal penalty -> + alpha I
        emp = n / (n + 1.0) * sigma + alpha * np.eye(M)
        precisions[k] = _glasso(emp, alpha, glasso_tol, glasso_max_iter)
    return means, precisions


_M_STEP_MEMO: OrderedDict[bytes, tuple[FloatArray, FloatArray]] = OrderedDict()


def _m_step_shared(N_bar: FloatArray, m_sum: FloatArray, C_sum: FloatArray, settings: FleetSettings):
    """:func:`m_step` with the settings, memoised on the exact input bytes.

    Every participant of an in-process simulation computes the same M-step from
    bit-identical sums; the memo returns copies of the one result (a pure function,
    so nothing observable changes, only S - 1 graphical lassos are saved).
    """
    h = hashlib.sha256()
    for a in (N_bar, m_sum, C_sum):
        h.update(np.ascontiguousarray(a).tobytes())
    h.update(repr((settings.rho, settings.lambda0, settings.glasso_tol, settings.glasso_max_iter)).encode())
    key = h.digest()
    hit = _M_STEP_MEMO.get(key)
    if hit is None:
        hit = m_step(
            N_bar,
            m_sum,
            C_sum,
            settings.rho,
            settings.lambda0,
            glasso_tol=settings.glasso_tol,
            glasso_max_iter=settings.glasso_max_iter,
        )
        _M_STEP_MEMO[key] = hit
        while len(_M_STEP_MEMO) > 64:
            _M_STEP_MEMO.popitem(last=False)
    else:
        _M_STEP_MEMO.move_to_end(key)
    return hit[0].copy(), hit[1].copy()


# -- privacy monitor ---------------------------------------------------------------------------
def l_diversity(X: FloatArray, resp: FloatArray, precisions: FloatArray) -> FloatArray:
    """Entropy H(g_k^s) (K,) of every released local mean (Eq. 47-48).

    ``g_k(n) ∝ N(x_n | m_k^s / N_k^s, Lambda_k^-1)``; a component this participant
    does not use (N_k^s = 0, nothing released) has entropy +inf.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0], [50.0], [-50.0]])
    >>> float(l_diversity(X, np.ones((3, 1)), np.eye(1)[None])[0]) < 1e-6
    True
    """
    Nk = resp.sum(axis=0)
    out = np.full(resp.shape[1], np.inf)
    for k in range(resp.shape[1]):
        if Nk[k] <= 1e-300:
            continue
        local_mean = resp[:, k] @ X / Nk[k]
        logg = -component_nll(X, local_mean[None, :], precisions[k : k + 1])[:, 0]
        logg -= logsumexp(logg)
        g = np.exp(logg)
        # H = -sum g ln g
        out[k] = float(-np.sum(g * logg))
    return out


def posterior_pseudo_samples(
    w: FloatArray, lam: float, precision: FloatArray, n: int, rng: np.random.Generator
) -> FloatArray:
    """n draws (n, M) from the posterior N(w, (lam Lambda)^-1) of a mean (Eq. 42).

    With Lambda = L L^T: u = w + L^-T z / sqrt(lam), z ~ N(0, I).
    """
    L = _cholesky(precision[None])[0]
    z = rng.standard_normal((n, len(w)))
    return np.asarray(w + scipy.linalg.solve_triangular(L.T, z.T, lower=False).T / math.sqrt(lam))


# -- thresholds ---------------------------------------------------------------------------------
def score_floor(precisions: FloatArray) -> float:
    """The smallest score any x can get: M/2 ln 2pi - 1/2 max_k ln|Lambda_k|."""
    M = precisions.shape[1]
    logdets = [np.linalg.slogdet(P)[1] for P in precisions]
    return float(0.5 * M * LN_2PI - 0.5 * max(logdets))


#: Bins of each of the two histogram passes of the threshold.
HIST_BINS = 256


def coarse_edges() -> FloatArray:
    """Pass-1 grid of score excesses (score - floor): 0, then log-spaced 1e-3 .. 1e7 (HIST_BINS bins)."""
    return np.concatenate([[0.0], np.logspace(-3, 7, HIST_BINS)])


def fine_edges(coarse: FloatArray, i: int) -> FloatArray:
    """Pass-2 grid: coarse bin ``i`` split linearly into HIST_BINS bins."""
    return np.linspace(coarse[i], coarse[i + 1], HIST_BINS + 1)


def bin_index(excess: ArrayLike, edges: FloatArray) -> NDArray[np.intp]:
    """Bin of every excess on ``edges`` (half-open bins, the last one closed; outside -> end bins)."""
    e = np.clip(np.asarray(excess, dtype=np.float64), edges[0], edges[-1])
    idx = np.searchsorted(edges, e, side="right") - 1
    return np.asarray(np.minimum(idx, len(edges) - 2))


def score_histogram(excess: ArrayLike, edges: FloatArray) -> FloatArray:
    """Counts (len(edges) - 1,) of score excesses on a shared grid."""
    return np.bincount(bin_index(excess, edges), minlength=len(edges) - 1).astype(np.float64)


def quantile_bin(counts: ArrayLike, percentile: float) -> tuple[int, float]:
    """(bin, rank within the bin) of the ``percentile`` of what ``counts`` counts."""
    c = np.clip(np.asarray(counts, dtype=np.float64), 0.0, None)
    total = float(c.sum())
    if total <= 0:
        raise DataError("no nominal scores to take a threshold from")
    target = percentile / 100.0 * total
    cum = np.cumsum(c)
    i = min(int(np.searchsorted(cum, target)), len(c) - 1)
    return i, target - (float(cum[i - 1]) if i else 0.0)


def rank_value(counts: ArrayLike, edges: FloatArray, rank: float) -> float:
    """The value of the ``rank``-th counted score, linear within its bin."""
    c = np.clip(np.asarray(counts, dtype=np.float64), 0.0, None)
    cum = np.cumsum(c)
    i = min(int(np.searchsorted(cum, rank)), len(c) - 1)
    within = rank - (float(cum[i - 1]) if i else 0.0)
    frac = 0.0 if c[i] <= 0 else float(np.clip(within / c[i], 0.0, 1.0))
    return float(edges[i] + frac * (edges[i + 1] - edges[i]))


def pooled_quantile(excess: Sequence[ArrayLike], percentile: float) -> float:
    """The two-pass histogram quantile of pooled score excesses (what the fleet computes by consensus).

    Pass 1 counts everybody's excesses on :func:`coarse_edges` and finds the bin of
    the quantile; pass 2 counts the excesses inside that bin on :func:`fine_edges`.
    The result is within (coarse bin width) / 256 of the exact pooled quantile; only
    bin counts are ever summed.

    Examples
    --------
    >>> import numpy as np
    >>> e = np.random.default_rng(0).exponential(3.0, size=(4, 500))
    >>> exact = np.percentile(e, 99.0)
    >>> bool(abs(pooled_quantile(list(e), 99.0) - exact) < 0.01 * exact)
    True
    """
    coarse = coarse_edges()
    c1 = np.sum([score_histogram(e, coarse) for e in excess], axis=0)
    i, within = quantile_bin(c1, percentile)
    fine = fine_edges(coarse, i)
    c2 = np.sum([score_histogram(np.asarray(e)[bin_index(e, coarse) == i], fine) for e in excess], axis=0)
    return rank_value(c2, fine, within)


# -- the learner, shared by the fleet and the centralised twin -----------------------------------
class LocalLearner:
    """One participant's private side of the EM: its standardised data and weights pi^s.

    Parameters
    ----------
    Z : (N, M) standardised local data (never leaves the participant)
    n_components : K
    settings : the fleet settings
    rng : private generator (pseudo-samples of the privacy monitor)

    Attributes
    ----------
    weights : (K_active,) pi^s
    last : the last :class:`EStep` (evidence)
    entropies : (K_active,) l-diversity of the last release
    fired : True when the last release was below the l-diversity bound
    """

    def __init__(self, Z: FloatArray, n_components: int, settings: FleetSettings, rng: np.random.Generator) -> None:
        self.Z = Z
        self.settings = settings
        self.weights = np.full(n_components, 1.0 / n_components)
        self._rng = rng
        self.last: EStep | None = None
        self.entropies = np.full(n_components, np.inf)
        self.fired = False
        self.released: list[FloatArray] = []

    def local_update(self, glob: GlobalLearner) -> FloatArray:
        """E-step with the current shared components; returns the packed statistics θ^s.

        A participant without samples (e.g. every sample held out in a fold) releases zeros.
        """
        if len(self.Z) == 0:
            K, M = glob.means.shape
            theta = pack_statistics(np.zeros(K), np.zeros((K, M)), np.zeros((K, M, M)), [0.0, 0.0])
            self.released.append(theta)
            return theta
        est = e_step(self.Z, self.weights, glob.means, glob.precisions)
        self.last = est
        # pi_k^s = N_k^s / N^s
        self.weights = est.N / est.N.sum()
        N, m, C = est.N, est.m, est.C
        self.entropies = l_diversity(self.Z, est.resp, glob.precisions)
        E = float(np.max(self.entropies) if self.settings.diversity == "max" else np.min(self.entropies))
        bound = math.log(self.settings.l0)
        self.fired = bool(bound > E)
        if self.fired:
            warnings.warn(
                f"entropy l-diversity {E:.3g} < ln l0 = {bound:.3g}: a released mean is close to a few raw "
                "samples" + ("; adding posterior pseudo-samples" if self.settings.privacy_noise else ""),
                PrivacyWarning,
                stacklevel=2,
            )
            if self.settings.privacy_noise:
                N, m, C = N.copy(), m.copy(), C.copy()
                for k in np.flatnonzero(self.entropies < bound):
                    lam = self.settings.lambda0 + glob.last_counts[k]
                    u = posterior_pseudo_samples(
                        glob.means[k], lam, glob.precisions[k], self.settings.noise_samples, self._rng
                    )
                    N[k] += len(u)
                    m[k] += u.sum(axis=0)
                    C[k] += u.T @ u
        theta = pack_statistics(N, m, C, [est.loglik, float(len(self.Z))])
        self.released.append(theta)
        return theta

    def keep(self, mask: BoolArray) -> None:
        """Drop pruned components from pi^s (renormalised)."""
        w = self.weights[mask]
        self.weights = w / w.sum() if w.sum() > 0 else np.full(mask.sum(), 1.0 / mask.sum())
        self.entropies = self.entropies[mask]


class GlobalLearner:
    """The shared side of the EM (the same at every participant, given the same sums).

    Parameters
    ----------
    init : initial parameters; settings : the fleet settings

    Attributes
    ----------
    means (K, M), precisions (K, M, M) : current shared components
    last_counts : (K,) Nbar_k of the last consensus
    loglik : fleet log-likelihood per iteration
    iterations : EM iterations done
    converged : True when the log-likelihood settled before ``max_iter``
    """

    def __init__(self, init: FleetInit, settings: FleetSettings) -> None:
        self.settings = settings
        self.means = init.means.copy()
        self.precisions = init.precisions.copy()
        self.n_dims = init.means.shape[1]
        self.last_counts = np.zeros(len(init.means))
        self.loglik: list[float] = []
        self.iterations = 0
        self.converged = False

    @property
    def n_components(self) -> int:
        """Active K."""
        return len(self.means)

    def optimize(self, total: FloatArray) -> tuple[bool, BoolArray]:
        """From the fleet sums: (done, kept-components mask); M-step unless done."""
        K, M = self.n_components, self.n_dims
        N_bar, m_sum, C_sum, extra = unpack_statistics(total, K, M)
        ll, n_total = float(extra[0]), float(extra[1])
        self.last_counts = N_bar
        prev = self.loglik[-1] if self.loglik else None
        self.loglik.append(ll)
        self.iterations += 1
        keep = np.ones(K, dtype=bool)
        if prev is not None and abs(ll - prev) <= self.settings.em_tol * abs(ll):
            self.converged = True
            return True, keep
        keep = N_bar >= self.settings.prune * n_total
        if not keep.any():
            keep[int(np.argmax(N_bar))] = True
        self.means, self.precisions = _m_step_shared(N_bar[keep], m_sum[keep], C_sum[keep], self.settings)
        self.last_counts = N_bar[keep]
        return self.iterations >= self.settings.max_iter, keep


# -- the fitted model ----------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class FleetModel:
    """The shared result of a fleet: standardiser, K patterns and the fleet threshold.

    Attributes
    ----------
    center, scale : (M,) the fleet standardiser (raw units)
    means : (K, M) pattern means (standardised units)
    precisions : (K, M, M) sparse pattern precisions (standardised units)
    threshold : score threshold (from nominal scores), or None
    info : what produced it (JSON-friendly: iterations, rounds, settings...)
    """

    center: FloatArray
    scale: FloatArray
    means: FloatArray
    precisions: FloatArray
    threshold: float | None = None
    info: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def n_components(self) -> int:
        """K."""
        return int(self.means.shape[0])

    @property
    def n_dims(self) -> int:
        """M."""
        return int(self.means.shape[1])

    def __eq__(self, other: object) -> bool:
        """Same arrays (bit for bit) and threshold; ``info`` is not compared."""
        if not isinstance(other, FleetModel):
            return NotImplemented
        return self.threshold == other.threshold and all(
            np.array_equal(getattr(self, name), getattr(other, name))
            for name in ("center", "scale", "means", "precisions")
        )

    __hash__ = None  # type: ignore[assignment]

    def standardise(self, X: ArrayLike) -> FloatArray:
        """(X - center) / scale, X (N, M) in raw units."""
        A = np.asarray(X, dtype=np.float64)
        if A.ndim != 2 or A.shape[1] != self.n_dims:
            raise DataError(f"samples must be (N, {self.n_dims}), got shape {A.shape}")
        return np.asarray((A - self.center) / self.scale)

    def score(self, X: ArrayLike, weights: ArrayLike) -> FloatArray:
        """a^s(x) (N,) of raw samples X (N, M) with a participant's weights (K,)."""
        return anomaly_score(self.standardise(X), np.asarray(weights, dtype=np.float64), self.means, self.precisions)

    def fit_weights(self, X: ArrayLike, max_iter: int = 200, tol: float = 1e-10) -> FloatArray:
        """A participant's own pi^s (K,) on its raw data with the shared components fixed (EM on pi only)."""
        Z = self.standardise(X)
        nll = component_nll(Z, self.means, self.precisions)
        w = np.full(self.n_components, 1.0 / self.n_components)
        for _ in range(max_iter):
            logp = _log(w)[None, :] - nll
            r = np.exp(logp - logsumexp(logp, axis=1)[:, None])
            new = r.mean(axis=0)
            if np.max(np.abs(new - w)) < tol:
                return np.asarray(new)
            w = new
        return np.asarray(w)

    def with_threshold(self, threshold: float) -> FleetModel:
        """A copy with ``threshold`` set."""
        return replace(self, threshold=float(threshold))

    def to_arrays(self) -> dict[str, FloatArray]:
        """Plain arrays (for ``numpy.savez``); :meth:`from_arrays` inverts it (info not included)."""
        return {
            "center": self.center,
            "scale": self.scale,
            "means": self.means,
            "precisions": self.precisions,
            "threshold": np.array([np.nan if self.threshold is None else self.threshold]),
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, Any], info: dict[str, Any] | None = None) -> FleetModel:
        """Inverse of :meth:`to_arrays`.

        Raises
        ------
        DataError
            When an array is missing or the shapes do not fit together.
        """
        try:
            center = np.asarray(arrays["center"], dtype=np.float64)
            scale = np.asarray(arrays["scale"], dtype=np.float64)
            means = np.asarray(arrays["means"], dtype=np.float64)
            precisions = np.asarray(arrays["precisions"], dtype=np.float64)
            thr = float(np.asarray(arrays["threshold"], dtype=np.float64).ravel()[0])
        except (KeyError, ValueError, IndexError) as exc:
            raise DataError(
                f"fleet model arrays are incomplete ({exc}); write them with FleetModel.to_arrays"
            ) from None
        K, M = means.shape if means.ndim == 2 else (0, 0)
        if K < 1 or center.shape != (M,) or scale.shape != (M,) or precisions.shape != (K, M, M):
            raise DataError(
                f"fleet model shapes do not fit: means {means.shape}, precisions {precisions.shape}, "
                f"center {center.shape}, scale {scale.shape}"
            )
        return cls(center, scale, means, precisions, None if math.isnan(thr) else thr, dict(info or {}))


# -- the centralised twin --------------------------------------------------------------------------
@dataclass(frozen=True)
class CentralFit:
    """Result of :func:`fit_centralised`.

    Attributes
    ----------
    model : the shared model; its threshold is the one pooled over the whole fleet
    weights : per participant pi^s (K,)
    init : the initialisation used
    iterations : EM iterations; loglik : fleet log-likelihood per iteration
    calibrations : per participant its alarm rule (:class:`~fedrca.fleet.calibration.Calibration`)
    """

    model: FleetModel
    weights: list[FloatArray]
    init: FleetInit
    iterations: int
    loglik: list[float]
    calibrations: list[Calibration] = field(default_factory=list)


def _em_exact(
    Zs: Sequence[FloatArray], init: FleetInit, settings: FleetSettings
) -> tuple[GlobalLearner, list[LocalLearner]]:
    glob = GlobalLearner(init, settings)
    learners = [
        LocalLearner(Z, len(init.means), settings, np.random.default_rng([settings.seed, 7, s]))
        for s, Z in enumerate(Zs)
    ]
    while True:
        thetas = [lrn.local_update(glob) for lrn in learners]
        total = np.sum(np.stack(thetas), axis=0)
        done, keep = glob.optimize(total)
        for lrn in learners:
            lrn.keep(keep)
        if done:
            return glob, learners


def shared_threshold(excess: Sequence[ArrayLike], percentile: float) -> float | None:
    """The threshold excess pooled from the participants without one of their own (None: there are none).

    The conformal ``percentile`` of the pooled count n (:func:`~fedrca.fleet.calibration.conformal_percentile`,
    the maximum when n is too small) of their excesses, by the fleet's two-pass histogram (:func:`pooled_quantile`).
    """
    n = int(sum(np.asarray(e).size for e in excess))
    return None if n == 0 else pooled_quantile(excess, conformal_percentile(n, percentile))


def calibrate(
    held: Sequence[Sequence[FloatArray]], floor: float, fleet_threshold: float, settings: FleetSettings
) -> list[Calibration]:
    """Every participant's alarm rule from its held-out score blocks (the twin of the fleet's calibration).

    ``held[s]`` are participant s's cross-fitted nominal scores, one array per contiguous block;
    ``fleet_threshold`` is the one pooled over everybody (``threshold_scope: fleet``).
    """
    counts = [int(sum(b.size for b in blocks)) for blocks in held]
    if settings.threshold_scope == "fleet":
        return [Calibration(fleet_threshold, None, "fleet", sum(counts)) for _ in held]
    own = [own_calibration(blocks, settings.percentile, settings.ewma) for blocks in held]
    small = [np.concatenate(list(b)) - floor for b, o in zip(held, own, strict=True) if o is None and len(b)]
    shared = shared_threshold(small, settings.percentile)
    pooled = sum(c for c, o in zip(counts, own, strict=True) if o is None)
    if shared is None:  # every participant certified a threshold of its own
        return [o for o in own if o is not None]
    return [o if o is not None else Calibration(floor + shared, None, "shared", pooled) for o in own]


def held_out_scores(
    Zs: Sequence[FloatArray],
    init: FleetInit,
    settings: FleetSettings,
    glob: GlobalLearner,
    weights: Sequence[FloatArray],
) -> list[list[FloatArray]]:
    """Every participant's nominal scores, one array per block: cross-fitted over ``settings.folds``
    (participant s holds out its block (f + s) mod F in fold f), in-sample under the fitted model when 0."""
    if not settings.folds:
        return [[anomaly_score(Z, w, glob.means, glob.precisions)] for Z, w in zip(Zs, weights, strict=True)]
    held: list[list[FloatArray]] = [[] for _ in Zs]
    for f in range(settings.folds):
        rows = [held_out_block(len(Z), settings.folds, f, s) for s, Z in enumerate(Zs)]
        fglob, flearners = _em_exact([np.delete(Z, r, axis=0) for Z, r in zip(Zs, rows)], init, settings)
        for s, (Z, r, lrn) in enumerate(zip(Zs, rows, flearners)):
            held[s].append(anomaly_score(Z[r], lrn.weights, fglob.means, fglob.precisions))
    return held


def fit_centralised(
    datasets: Sequence[ArrayLike], settings: FleetSettings, init: FleetInit | None = None
) -> CentralFit:
    """The fleet's model computed centrally from every participant's raw data (the pure twin).

    Same participants (per-participant weights), same EM, same M-step; the fleet
    sums are exact instead of agreed by consensus. The model's threshold is the
    ``percentile`` of the pooled nominal scores, cross-fitted over ``folds`` (each
    participant's data split into contiguous blocks, fold f leaving block (f + s) mod F
    of participant s out), in-sample when ``folds`` is 0; every participant's own alarm
    rule is in ``calibrations`` (:func:`calibrate`).

    Parameters
    ----------
    datasets : per participant raw data (N_s, M)
    settings : the fleet settings
    init : initial parameters (default: :func:`initialise` on the pooled sums, best candidate)
    """
    Xs = [np.asarray(x, dtype=np.float64) for x in datasets]
    if not Xs or any(x.ndim != 2 or x.shape[1] != Xs[0].shape[1] for x in Xs):
        raise DataError("every participant's data must be (N_s, M) with the same M")
    if init is None:
        init = initialise_centralised(Xs, settings)
        Zs = [init.scaler.transform(x) for x in Xs]
        init = init.choose(np.sum([init.candidate_loglik(Z) for Z in Zs], axis=0))
    Zs = [init.scaler.transform(x) for x in Xs]
    glob, learners = _em_exact(Zs, init, settings)
    model = FleetModel(init.scaler.mean, init.scaler.std, glob.means, glob.precisions)
    weights = [lrn.weights for lrn in learners]
    floor = score_floor(glob.precisions)
    held = held_out_scores(Zs, init, settings, glob, weights)
    threshold = floor + pooled_quantile([np.concatenate(b) - floor for b in held], settings.percentile)
    model = model.with_threshold(threshold)
    calibrations = calibrate(held, floor, threshold, settings)
    return CentralFit(model, weights, init, glob.iterations, list(glob.loglik), calibrations)
