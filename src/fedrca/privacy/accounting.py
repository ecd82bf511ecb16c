"""Privacy accounting: exact (epsilon, delta) of Gaussian and randomized-response releases, composed.

Every noisy release of the training protocol is a Gaussian mechanism
(:class:`fedrca.privacy.mechanisms.GaussianMechanism`): vectors clipped to an
L2 bound ``c`` (so one record moves by at most ``sensitivity = 2 c`` under
replacement), plus ``N(0, sigma^2)`` noise on every entry. Such a release is exactly
``mu``-GDP (Gaussian differential privacy, Dong, Roth & Su 2022) with
``mu = sensitivity / sigma``, which is the same as ``rho``-zCDP with ``rho = mu^2 / 2``
(Bun & Steinke 2016). Gaussian mechanisms compose exactly: ``k`` releases with
``mu_i`` are ``sqrt(sum mu_i^2)``-GDP, adaptively. The accountants (:mod:`fedrca.privacy.accountant`,
:mod:`fedrca.privacy.ledger`) therefore keep
``sum mu^2`` per record and converts to ``(epsilon, delta)`` with the exact privacy
profile of the Gaussian mechanism (Balle & Wang 2018, Theorem 8)::

    delta(epsilon) = Phi(-epsilon / mu + mu / 2) - e^epsilon Phi(-epsilon / mu - mu / 2)

which is tight for compositions of Gaussian mechanisms (no slack from an RDP/zCDP
conversion; the zCDP bound ``rho + 2 sqrt(rho log(1/delta))`` is reported alongside).

Randomized response (the published flags, :mod:`fedrca.privacy.randomized_response`) and every other
pure epsilon-DP release compose with them exactly too: the privacy loss of one randomized
response bit is ``+eps`` with probability ``p = e^eps / (1 + e^eps)`` and ``-eps`` otherwise,
so ``k`` bits give a binomial loss and, with independent Gaussian releases of total ``mu``,

    delta(epsilon) = sum_j Binom(j; k, 1 - p) delta_G(epsilon - (k - 2 j) eps; mu)

with ``delta_G(x; mu) = Phi(-x / mu + mu / 2) - e^x Phi(-x / mu - mu / 2)`` for every real x
(:func:`composed_delta`; the hockey-stick divergence of the composed worst-case pair, which
is exact for randomized response and Gaussian mechanisms and an upper bound for any other
pure epsilon-DP release, whose privacy region randomized response contains; Kairouz, Oh &
Viswanath 2015). This is the privacy-loss-distribution (PRV) accounting of these
mechanisms, done in closed form instead of on a grid.

Unit of privacy: one *record* = one time step of one plant (the state vectors it
sends for that step; the per-sample gradients that depend on it). The windows of
successive rounds may overlap, so the accountant tracks ``sum mu^2`` per record and
reports the worst record.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import scipy.special
from numpy.typing import NDArray

from fedrca.exceptions import ModelError
from fedrca.privacy.randomized_response import keep_probability

__all__ = [
    "classic_gaussian_sigma",
    "composed_delta",
    "composed_epsilon",
    "gaussian_delta",
    "gaussian_epsilon",
    "gaussian_mu",
    "randomized_response_loss",
    "zcdp_epsilon",
]


def gaussian_delta(epsilon: float, mu: float) -> float:
    """delta(epsilon) of a mu-GDP mechanism (exact Gaussian privacy profile).

    Examples
    --------
    >>> round(gaussian_delta(1.0, 1.0), 4)
    0.1269
    >>> 0.0 <= gaussian_delta(1e300, 1.4e150) <= 1.0
    True
    """
    if mu <= 0.0:
        return 0.0
    if math.isinf(mu):
        return 1.0
    a = -epsilon / mu + mu / 2.0
    b = -epsilon / mu - mu / 2.0
    # Phi(a) - e^eps Phi(b), the second term in log space so large eps cannot overflow; e^eps Phi(b) <= Phi(a)
    # (delta >= 0), so its log is at most log Phi(a): the bound caps the rounding of eps + log Phi(b) at huge eps
    first = scipy.special.ndtr(a)
    second = math.exp(min(epsilon + float(scipy.special.log_ndtr(b)), float(scipy.special.log_ndtr(a))))
    return float(max(first - second, 0.0))


def gaussian_epsilon(mu: float, delta: float) -> float:
    """Smallest epsilon with delta(epsilon) <= delta for a mu-GDP mechanism.

    Examples
    --------
    >>> round(gaussian_epsilon(1.0, 1e-5), 3)
    4.377
    """
    if not 0.0 < delta < 1.0:
        raise ModelError(f"delta must be in (0, 1), got {delta}")
    if mu <= 0.0:
        return 0.0
    if math.isinf(mu):
        return math.inf
    if gaussian_delta(0.0, mu) <= delta:
        return 0.0
    hi = max(1.0, mu * mu)
    while gaussian_delta(hi, mu) > delta:
        hi *= 2.0
    from scipy.optimize import brentq  # at first use: a worker starts without it

    return float(brentq(lambda e: gaussian_delta(e, mu) - delta, 0.0, hi, xtol=1e-12, rtol=1e-12))


def gaussian_mu(epsilon: float, delta: float) -> float:
    """The mu whose Gaussian mechanism is exactly (epsilon, delta)-DP (inverse of :func:`gaussian_epsilon`).

    ``inf`` epsilon gives ``inf`` (no noise).

    Examples
    --------
    >>> round(1.0 / gaussian_mu(1.0, 1e-5), 2)   # the analytic Gaussian mechanism's sigma for Delta = 1
    3.73
    """
    if not 0.0 < delta < 1.0:
        raise ModelError(f"delta must be in (0, 1), got {delta}")
    if not epsilon > 0.0:
        raise ModelError(f"epsilon must be > 0, got {epsilon}")
    if math.isinf(epsilon):
        return math.inf
    hi = 1.0
    while gaussian_delta(epsilon, hi) < delta:
        hi *= 2.0
    from scipy.optimize import brentq  # at first use: a worker starts without it

    return float(brentq(lambda m: gaussian_delta(epsilon, m) - delta, 0.0, hi, xtol=1e-14, rtol=1e-12))


def zcdp_epsilon(rho: float, delta: float) -> float:
    """The standard zCDP -> (epsilon, delta) bound ``rho + 2 sqrt(rho log(1/delta))`` (Bun & Steinke, Prop. 1.3).

    Examples
    --------
    >>> round(zcdp_epsilon(0.5, 1e-5), 4)
    5.2985
    """
    return float(rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta)))


def _delta_gaussian_shifted(x: NDArray[np.float64], mu: float) -> NDArray[np.float64]:
    """E[(1 - e^(x - L))_+] for L ~ N(mu^2/2, mu^2) (mu = 0: L = 0), elementwise over any real x."""
    if mu <= 0.0:
        return np.maximum(-np.expm1(np.minimum(x, 0.0)), 0.0)
    # Phi(-x/mu + mu/2) - e^x Phi(-x/mu - mu/2); the second term in log space (x may be large)
    first = scipy.special.ndtr(-x / mu + mu / 2.0)
    second = np.exp(x + scipy.special.log_ndtr(-x / mu - mu / 2.0))
    return np.asarray(np.maximum(first - second, 0.0))


#: Atoms of a discrete privacy-loss distribution lighter than this are dropped; their mass is
#: added to delta (each atom contributes at most its probability), so the bound stays sound.
_PRUNE = 1e-300


def randomized_response_loss(pure: Mapping[float, int]) -> tuple[NDArray[np.float64], NDArray[np.float64], float]:
    """Privacy-loss distribution of independent pure releases: ``{epsilon: count}`` -> (losses, probabilities, dropped).

    Each release is dominated by randomized response with its epsilon: loss ``+eps`` with
    probability ``e^eps / (1 + e^eps)``, ``-eps`` otherwise. ``dropped`` is the probability
    mass of atoms pruned below 1e-300 (added to delta by :func:`composed_delta`).

    Examples
    --------
    >>> losses, probs, _ = randomized_response_loss({1.0: 2})
    >>> losses.tolist(), probs.round(4).tolist()
    ([2.0, 0.0, -2.0], [0.5344, 0.3932, 0.0723])
    """
    from scipy.stats import binom  # at first use: a worker starts without it

    losses = np.zeros(1)
    probs = np.ones(1)
    dropped = 0.0
    for eps, count in sorted(pure.items()):
        k = int(count)
        if k <= 0:
            continue
        if not (eps > 0.0) or math.isinf(eps):
            raise ModelError(f"a pure release needs a finite epsilon > 0, got {eps}")
        j = np.arange(k + 1)
        # j flips out of k: loss (k - 2 j) eps with probability Binom(j; k, 1 - p)
        pmf = binom.pmf(j, k, 1.0 - keep_probability(eps))
        keep = pmf > _PRUNE
        dropped += float(pmf[~keep].sum())
        new_losses = ((k - 2 * j) * eps)[keep]
        # the sum of independent losses: outer sum, atoms of equal loss merged
        total = (losses[:, None] + new_losses[None, :]).ravel()
        weight = (probs[:, None] * pmf[keep][None, :]).ravel()
        keys = np.round(total, 9)
        uniq, inverse = np.unique(keys, return_inverse=True)
        probs = np.asarray(np.bincount(inverse, weights=weight), dtype=np.float64)
        losses = uniq
        keep = probs > _PRUNE
        dropped += float(probs[~keep].sum())
        losses, probs = losses[keep], probs[keep]
    order = np.argsort(-losses)
    return losses[order], probs[order], dropped


def composed_delta(epsilon: float, mu: float = 0.0, pure: Mapping[float, int] | None = None) -> float:
    """delta(epsilon) of Gaussian releases of total ``mu`` (GDP) composed with pure releases ``{eps: count}``.

    Exact for Gaussian mechanisms and randomized response (see the module docstring).

    Examples
    --------
    >>> round(composed_delta(1.0, mu=1.0), 4) == round(gaussian_delta(1.0, 1.0), 4)
    True
    >>> composed_delta(2.0, pure={1.0: 2})   # two bits of eps 1 are (2, 0)-DP
    0.0
    """
    losses, probs, dropped = randomized_response_loss(pure or {})
    if math.isinf(mu):
        return 1.0
    value = float(np.dot(probs, _delta_gaussian_shifted(epsilon - losses, mu))) + dropped
    return min(value, 1.0)


def composed_epsilon(delta: float, mu: float = 0.0, pure: Mapping[float, int] | None = None) -> float:
    """Smallest epsilon with :func:`composed_delta` <= delta.

    Examples
    --------
    >>> round(composed_epsilon(1e-5, mu=1.0), 3) == round(gaussian_epsilon(1.0, 1e-5), 3)
    True
    >>> p = math.e / (1 + math.e)   # one randomized-response bit of eps 1: delta(eps) = p (1 - e^(eps - 1))
    >>> round(composed_epsilon(1e-5, pure={1.0: 1}), 8) == round(1 + math.log(1 - 1e-5 / p), 8)
    True
    """
    if not 0.0 < delta < 1.0:
        raise ModelError(f"delta must be in (0, 1), got {delta}")
    pure = {e: int(k) for e, k in (pure or {}).items() if int(k) > 0}
    if math.isinf(mu):
        return math.inf
    if mu <= 0.0 and not pure:
        return 0.0
    losses, probs, dropped = randomized_response_loss(pure)
    if dropped >= delta:
        raise ModelError(f"the pruned privacy-loss mass {dropped:g} exceeds delta {delta:g}")

    def excess(eps: float) -> float:
        return float(np.dot(probs, _delta_gaussian_shifted(eps - losses, mu))) + dropped - delta

    if excess(0.0) <= 0.0:
        return 0.0
    # the loss never exceeds max(losses) + the Gaussian part, so this bracket always holds
    hi = float(losses.max()) + (gaussian_epsilon(mu, delta - dropped) if mu > 0.0 else 0.0) + 1e-9
    while excess(hi) > 0.0:
        hi = 2.0 * hi + 1.0
    from scipy.optimize import brentq  # at first use: a worker starts without it

    return float(brentq(excess, 0.0, hi, xtol=1e-12, rtol=1e-12))


def classic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """Dwork & Roth (2014, Thm A.1) noise ``sensitivity sqrt(2 log(1.25/delta)) / epsilon`` (valid for epsilon < 1).

    Only for comparison: :class:`GaussianMechanism` uses the exact calibration, which needs less noise.
    """
    return float(sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon)
