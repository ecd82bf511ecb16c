"""Differential privacy of the training messages: clipping, Gaussian mechanism, accountant.

Every noisy release in the protocol is a Gaussian mechanism: vectors clipped to an
L2 bound ``c`` (so one record moves by at most ``sensitivity = 2 c`` under
replacement), plus ``N(0, sigma^2)`` noise on every entry. Such a release is exactly
``mu``-GDP (Gaussian differential privacy, Dong, Roth & Su 2022) with
``mu = sensitivity / sigma``, which is the same as ``rho``-zCDP with ``rho = mu^2 / 2``
(Bun & Steinke 2016). Gaussian mechanisms compose exactly: ``k`` releases with
``mu_i`` are ``sqrt(sum mu_i^2)``-GDP, adaptively. The accountant therefore keeps
``sum mu^2`` per record and converts to ``(epsilon, delta)`` with the exact privacy
profile of the Gaussian mechanism (Balle & Wang 2018, Theorem 8)::

    delta(epsilon) = Phi(-epsilon / mu + mu / 2) - e^epsilon Phi(-epsilon / mu - mu / 2)

which is tight for compositions of Gaussian mechanisms (no slack from an RDP/zCDP
conversion; the zCDP bound ``rho + 2 sqrt(rho log(1/delta))`` is reported alongside).

Randomized response (the published flags, :mod:`fedrca.detectors.privacy`) and every other
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.optimize
import scipy.special
import scipy.stats
from numpy.typing import NDArray

from fedrca.exceptions import ModelError, PrivacyBudgetExceeded

__all__ = [
    "GaussianMechanism",
    "PrivacyAccountant",
    "classic_gaussian_sigma",
    "clip_rows",
    "composed_delta",
    "composed_epsilon",
    "gaussian_delta",
    "gaussian_epsilon",
    "gaussian_mu",
    "randomized_response_loss",
    "zcdp_epsilon",
]

FloatArray = NDArray[np.float64]
CHANNELS = ("states", "gradients")


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
    return float(scipy.optimize.brentq(lambda e: gaussian_delta(e, mu) - delta, 0.0, hi, xtol=1e-12, rtol=1e-12))


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
    return float(scipy.optimize.brentq(lambda m: gaussian_delta(epsilon, m) - delta, 0.0, hi, xtol=1e-14, rtol=1e-12))


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
        pmf = scipy.stats.binom.pmf(j, k, 1.0 / (1.0 + math.exp(eps)))
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
    return float(scipy.optimize.brentq(excess, 0.0, hi, xtol=1e-12, rtol=1e-12))


def classic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """Dwork & Roth (2014, Thm A.1) noise ``sensitivity sqrt(2 log(1.25/delta)) / epsilon`` (valid for epsilon < 1).

    Only for comparison: :class:`GaussianMechanism` uses the exact calibration, which needs less noise.
    """
    return float(sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon)


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


class PrivacyAccountant:
    """Per-plant ledger of Gaussian releases: sum of mu^2 per record and channel.

    Parameters
    ----------
    n_records : records (time steps) of the plant's training data
    delta : the delta epsilon is reported at
    budget : the total epsilon (at delta) the plant allows; inf = no limit
    plant : name, for messages

    Examples
    --------
    >>> acc = PrivacyAccountant(n_records=100, delta=1e-5, budget=10.0)
    >>> for _ in range(4):
    ...     acc.charge(0.25, slice(0, 100), "states")   # four releases of mu = 0.5 ...
    >>> round(acc.epsilon(), 3) == round(gaussian_epsilon(1.0, 1e-5), 3)   # ... compose to mu = 1
    True
    """

    def __init__(self, n_records: int, delta: float, budget: float = math.inf, plant: str = "plant") -> None:
        if not 0.0 < delta < 1.0:
            raise ModelError(f"delta must be in (0, 1), got {delta}")
        self.n_records = int(n_records)
        self.delta = float(delta)
        self.budget = float(budget)
        self.plant = plant
        self._mu2 = {c: np.zeros(self.n_records) for c in CHANNELS}
        self._releases = dict.fromkeys(CHANNELS, 0)

    def _records(self, records: slice | NDArray[np.int64] | None) -> slice | NDArray[np.int64]:
        return slice(0, self.n_records) if records is None else records

    def total_mu2(self) -> FloatArray:
        """Per-record sum of mu^2 over all channels."""
        return np.asarray(sum(self._mu2.values()), dtype=np.float64)

    def mu(self, channel: str | None = None) -> float:
        """GDP mu of the worst record (one channel, or all)."""
        mu2 = self.total_mu2() if channel is None else self._mu2[channel]
        return float(math.sqrt(float(mu2.max()))) if self.n_records else 0.0

    def epsilon(self, channel: str | None = None) -> float:
        """Epsilon spent at ``delta`` (exact Gaussian conversion)."""
        return gaussian_epsilon(self.mu(channel), self.delta)

    def epsilon_zcdp(self) -> float:
        """The looser standard zCDP bound on the same releases (for comparison)."""
        return zcdp_epsilon(self.mu() ** 2 / 2.0, self.delta)

    def projected_epsilon(self, mu2: float, records: slice | NDArray[np.int64] | None = None) -> float:
        """Epsilon after a further release of ``mu2`` on ``records``."""
        total = self.total_mu2()
        total[self._records(records)] += mu2
        return gaussian_epsilon(math.sqrt(float(total.max())), self.delta) if self.n_records else 0.0

    def plan(self, releases: Sequence[tuple[float, slice | NDArray[np.int64] | None]]) -> tuple[float, int]:
        """Epsilon after a planned sequence of releases ``(mu2, records)``, and how many of them fit the budget.

        Returns ``(epsilon after all of them, the longest prefix that stays within the budget)``.

        Examples
        --------
        >>> acc = PrivacyAccountant(n_records=10, delta=1e-5, budget=2.0)
        >>> eps, fit = acc.plan([(0.04, None)] * 50)
        >>> fit < 50 < eps * 100
        True
        """
        total = self.total_mu2()
        fit = len(releases)
        for k, (mu2, records) in enumerate(releases):
            total[self._records(records)] += mu2
            over = (
                gaussian_epsilon(math.sqrt(float(total.max())), self.delta) > self.budget if self.n_records else False
            )
            if over and fit == len(releases):
                fit = k
        eps = gaussian_epsilon(math.sqrt(float(total.max())), self.delta) if self.n_records else 0.0
        return eps, fit

    def check(self, mu2: float, records: slice | NDArray[np.int64] | None = None) -> None:
        """Raise PrivacyBudgetExceeded if a release of ``mu2`` on ``records`` would pass the budget."""
        if math.isinf(mu2):
            raise ModelError("a release without noise cannot be charged; switch the mechanism off instead")
        if math.isinf(self.budget) or mu2 == 0.0:
            return
        after = self.projected_epsilon(mu2, records)
        if after > self.budget:
            raise PrivacyBudgetExceeded(
                f"plant '{self.plant}': this release would bring epsilon to {after:.3g} (delta={self.delta:g}), "
                f"above the budget {self.budget:g} (spent so far {self.epsilon():.3g}); lower training.rounds, "
                "lower the per-release epsilons (more noise) or raise training.privacy.budget"
            )

    def charge(self, mu2: float, records: slice | NDArray[np.int64] | None, channel: str) -> None:
        """Record one release of ``mu2`` (sum of mu^2 of its mechanisms) on ``records``, after :meth:`check`."""
        if channel not in self._mu2:
            raise ModelError(f"unknown privacy channel '{channel}'; channels are {', '.join(CHANNELS)}")
        if mu2 == 0.0:
            return
        self.check(mu2, records)
        self._mu2[channel][self._records(records)] += mu2
        self._releases[channel] += 1

    def summary(self) -> dict[str, Any]:
        """Epsilon spent (total and per channel), the zCDP bound, delta and the release counts."""
        return {
            "epsilon": self.epsilon(),
            "epsilon_states": self.epsilon("states"),
            "epsilon_gradients": self.epsilon("gradients"),
            "epsilon_zcdp_bound": self.epsilon_zcdp(),
            "delta": self.delta,
            "budget": self.budget,
            "releases": dict(self._releases),
        }

    def get_state(self) -> dict[str, Any]:
        """JSON-friendly ledger."""
        return {
            "mu2": {c: v.tolist() for c, v in self._mu2.items()},
            "releases": dict(self._releases),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`get_state` output."""
        self._mu2 = {c: np.asarray(state["mu2"][c], dtype=np.float64) for c in CHANNELS}
        self._releases = {c: int(state["releases"][c]) for c in CHANNELS}
