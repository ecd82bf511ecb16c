"""Flag likelihoods: what each plant's published flag pair looks like in each role.

A plant's true state is the flag pair ``s = (Z_c, Z_a)`` coded ``2 Z_c + Z_a``
(0 = (0,0), 1 = (0,1), 2 = (1,0), 3 = (1,1)). Over an evidence window a plant
plays one **role**, and each role is a distribution ``q(s)`` per row:

* ``NORMAL``: nominal operation, ``q_N`` = the plant's nominal state frequencies
  (its false alarms, estimated on nominal data);
* ``ROOT``: the fault is in this plant; it alarms with probability
  ``1 - miss``, and the augmented model cannot explain its own fault except with
  the small ``leak`` probability::

      q_R(miss) = miss q_N + (1 - miss) a_R,   a_R = [0, i, (1 - i) leak, (1 - i)(1 - leak)]

  A step fault keeps its unit alarming, a random-variation or sticking-valve
  fault makes it alarm on and off, so the root role is a mixture over a grid of
  miss rates (equal weights, chosen once per plant and window);

* ``PROPAGATED``: the effect of a root elsewhere; visible in a row with
  probability ``v`` and then explained by the learned interdependencies (state
  (1,0)) with probability ``s``::

      q_P(v, s) = (1 - v) q_N + v a_P(s),   a_P(s) = [0, i, (1 - i) s, (1 - i)(1 - s)]

  How visible an effect is (control loops compensate some effects, not others)
  and how well the trained augmentation explains it are not known in advance,
  so the propagated role is a **mixture** over a grid of (v, s) with equal
  weights, chosen once per plant and window (a compensated effect is
  intermittent, an uncompensated one persistent; both are effects);
* ``AUGMENTED``: only the augmented detector alarms, state (0,1) with
  probability 1/2 per row (the signature of imperfect training);

with ``i`` = ``imperfect``, the chance that an active anomaly shows as (0,1)
(zero when Z_a equals Z_c, i.e. without trained parameters).

The plant publishes each bit through randomized response, independently per bit, so
the published pair o has ``P(o | role) = sum_s C[o, s] q_role(s)`` with the channel
``C`` of :func:`fedrca.privacy.randomized_response.rr_channel`. That is the exact
likelihood the engine scores; nothing is debiased by hand.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedrca.contracts.flagstate import flag_states
from fedrca.exceptions import DataError
from fedrca.privacy.randomized_response import rr_channel, rr_level_channel

__all__ = [
    "AUGMENTED",
    "NORMAL",
    "ROOT",
    "FlagModel",
    "SeverityModel",
    "default_state_rates",
    "encode_states",
    "nominal_state_rates",
    "state_rates_from_counts",
]

FloatArray = NDArray[np.float64]

#: Component indices of :attr:`FlagModel.log_emission`; the root components start at ``ROOT``
#: (:attr:`FlagModel.root` is their slice), the propagated ones follow (:attr:`FlagModel.propagated`).
NORMAL, AUGMENTED, ROOT = 0, 1, 2


def encode_states(flags: ArrayLike) -> NDArray[np.int64]:
    """Code ``2 zc + za`` of flag pairs (..., 2) -> (...); -1 where a pair is missing (negative).

    Examples
    --------
    >>> encode_states([[0, 0], [0, 1], [1, 0], [1, 1], [-1, -1]]).tolist()
    [0, 1, 2, 3, -1]
    """
    F = np.asarray(flags)
    if F.shape[-1:] != (2,):
        raise DataError(f"flags must have a last axis of 2 (zc, za), got shape {F.shape}")
    F = F.astype(np.int64)
    missing = np.any(F < 0, axis=-1)
    if np.any((F > 1) & ~missing[..., None]):
        raise DataError("flags must be 0 or 1")
    return np.where(missing, -1, flag_states(F[..., 0], F[..., 1]))


def nominal_state_rates(flags: Mapping[str, ArrayLike], plants: Sequence[str], floor: float = 0.0) -> FloatArray:
    """Nominal frequencies of the four true states per plant, (M, 4), from nominal flags (T, 2).

    Laplace-smoothed (add one half per state), and the proprietary alarm rate
    P(Z_c = 1) raised to ``floor`` when below it (states (1,0), (1,1) scaled
    together), so rare false alarms never get probability zero.

    Examples
    --------
    >>> import numpy as np
    >>> rates = nominal_state_rates({"a": np.zeros((998, 2), bool)}, ["a"])
    >>> rates.round(4).tolist()
    [[0.9985, 0.0005, 0.0005, 0.0005]]
    """
    counts = np.zeros((len(plants), 4))
    for m, name in enumerate(plants):
        if name not in flags:
            raise DataError(f"no nominal flags for plant '{name}'")
        codes = encode_states(np.asarray(flags[name]))
        counts[m] = np.bincount(codes[codes >= 0], minlength=4)
    return state_rates_from_counts(counts, floor)


def state_rates_from_counts(counts: ArrayLike, floor: float = 0.0) -> FloatArray:
    """Per-plant state frequencies (M, 4) from nominal counts of (0,0), (0,1), (1,0), (1,1) (M, 4).

    The counts are all a plant needs to share with the RCA about its detector (they
    travel in its training artifact); see :func:`nominal_state_rates` for the smoothing.

    Examples
    --------
    >>> state_rates_from_counts([[998, 0, 0, 0]]).round(4).tolist()
    [[0.9985, 0.0005, 0.0005, 0.0005]]
    """
    C = np.atleast_2d(np.asarray(counts, dtype=np.float64))
    if C.shape[-1] != 4 or np.any(C < 0) or not np.all(np.isfinite(C)):
        raise DataError(f"nominal state counts must be non-negative (M, 4), got shape {C.shape}")
    out = np.zeros_like(C)
    for m in range(len(C)):
        rates = (C[m] + 0.5) / (C[m] + 0.5).sum()
        p_alarm = rates[2] + rates[3]
        if p_alarm < floor:
            # P(zc = 1) at least the floor: new data alarms more often than finite nominal data shows
            rates[2:] *= floor / p_alarm
            rates[0] = 1.0 - rates[1:].sum()
        out[m] = rates
    return out


def default_state_rates(n_plants: int, false_alarm: float, coupled: bool) -> FloatArray:
    """Nominal state frequencies (M, 4) when no nominal flags are at hand.

    ``coupled``: Z_a equals Z_c (untrained augmentation), so false alarms come in
    (1, 1); otherwise the two flags alarm independently at ``false_alarm`` each.
    """
    fa = float(false_alarm)
    if coupled:
        row = np.array([1.0 - fa, 0.0, 0.0, fa])
    else:
        row = np.array([(1 - fa) ** 2, (1 - fa) * fa, fa * (1 - fa), fa * fa])
    return np.tile(row, (n_plants, 1))


def _zc_marginal(p: FloatArray) -> FloatArray:
    """P(o) (..., 4) -> P(Z_c bit of o) (..., 4): the two codes of each Z_c value share their sum."""
    zc0, zc1 = p[..., 0] + p[..., 1], p[..., 2] + p[..., 3]
    return np.stack([zc0, zc0, zc1, zc1], axis=-1)


class FlagModel:
    """Per-plant flag likelihoods of every role component, through the randomized-response channel.

    Parameters
    ----------
    nominal : (M, 4) nominal true-state frequencies q_N per plant
    epsilon : published flag epsilon (inf = flags published as they are)
    miss_rate : grid of P(a root's proprietary flag is off in a row while its fault is active)
    leak : P(a root's own augmented model explains its fault) -> (1, 0)
    visibility : grid of v, P(a propagated effect is visible in a row)
    separation : grid of s, P(a visible effect is explained by the augmented model) -> (1, 0)
    imperfect : P(an active anomaly shows only in the augmented flag) -> (0, 1)
    augmented : (M,) False for a plant whose detector has no independent Z_a (the fleet
        detector publishes Z_a = Z_c): its Z_a bit is ignored, ``emission[m, k, o]`` is then
        P(published Z_c bit of o | component) (default: every plant has Z_a)

    Attributes
    ----------
    components : labels of the K components: normal, augmented, ``root(miss)``..., ``propagated(v, s)``...
    root, propagated : slices of the root and the propagated components
    true_dist : (M, K, 4) q(s) per component
    emission : (M, K, 4) P(published o | component)
    log_emission : log of ``emission``; -inf where impossible
    alarm_llr : (M, 4) log P(o | alarming) - log P(o | normal), the CUSUM increment
        (alarming: root or visible effect, P(alarm) = 1 - miss), clipped to +-1e6
    state_posterior : (4, 4) P(true s | published o) under a flat prior

    Examples
    --------
    >>> import math, numpy as np
    >>> model = FlagModel(np.array([[0.99, 0.0, 0.0, 0.01]]), math.inf, [0.1], 0.0, [0.5], [1.0])
    >>> root, effect = model.root.start, model.propagated.start
    >>> model.emission[0, root].round(3).tolist(), model.emission[0, effect].round(3).tolist()
    ([0.099, 0.0, 0.0, 0.901], [0.495, 0.0, 0.5, 0.005])
    """

    def __init__(
        self,
        nominal: ArrayLike,
        epsilon: float,
        miss_rate: Sequence[float],
        leak: float,
        visibility: Sequence[float],
        separation: Sequence[float],
        imperfect: float = 0.0,
        augmented: Sequence[bool] | None = None,
    ) -> None:
        q_N = np.asarray(nominal, dtype=np.float64)
        if q_N.ndim != 2 or q_N.shape[1] != 4 or np.any(q_N < 0) or np.any(q_N.sum(axis=1) <= 0):
            raise DataError(f"nominal state rates must be (M, 4) non-negative, got shape {q_N.shape}")
        checks = [("leak", leak), ("imperfect", imperfect)] + [("miss_rate", m) for m in miss_rate]
        checks += [("visibility", v) for v in visibility] + [("separation", x) for x in separation]
        for name, value in checks:
            if not 0.0 <= value <= 1.0:
                raise DataError(f"{name} must be a probability in [0, 1], got {value}")
        if not visibility or not separation or not miss_rate:
            raise DataError("miss_rate, visibility and separation need at least one value each")
        self.nominal = q_N / q_N.sum(axis=1, keepdims=True)
        self.augmented = np.ones(len(q_N), dtype=bool) if augmented is None else np.asarray(augmented, dtype=bool)
        if self.augmented.shape != (len(q_N),):
            raise DataError(f"augmented must have one entry per plant ({len(q_N)}), got {self.augmented.shape}")
        self.epsilon = float(epsilon)
        self.miss_rate = tuple(float(m) for m in miss_rate)
        self.leak = float(leak)
        self.visibility = tuple(float(v) for v in visibility)
        self.separation = tuple(float(x) for x in separation)
        self.imperfect = float(imperfect)
        q_N = self.nominal
        i = self.imperfect

        def affected(split: float) -> FloatArray:
            return np.array([0.0, i, (1.0 - i) * split, (1.0 - i) * (1.0 - split)])

        q_R = [m * q_N + (1.0 - m) * affected(leak) for m in self.miss_rate]
        q_A = 0.5 * q_N + 0.5 * np.array([0.0, 1.0, 0.0, 0.0])
        grid = [(v, x) for v in self.visibility for x in self.separation]
        q_P = [(1.0 - v) * q_N + v * affected(x) for v, x in grid]
        self.components = (
            "normal",
            "augmented",
            *[f"root(miss={m:g})" for m in self.miss_rate],
            *[f"propagated(v={v:g}, s={x:g})" for v, x in grid],
        )
        self.n_root = len(q_R)
        self.n_propagated = len(grid)
        self.root = slice(ROOT, ROOT + self.n_root)
        self.propagated = slice(ROOT + self.n_root, ROOT + self.n_root + self.n_propagated)
        self.true_dist = np.stack([q_N, q_A, *q_R, *q_P], axis=1)  # (M, K, s)
        self.channel = rr_channel(self.epsilon)
        # P(o | component) = sum_s C[o, s] q(s)
        self.emission = np.einsum("os,mks->mko", self.channel, self.true_dist)
        mean_split, miss = float(np.mean(self.separation)), min(self.miss_rate)
        q_alarm = miss * q_N + (1.0 - miss) * 0.5 * (affected(leak) + affected(mean_split))
        p_alarm, p_normal = q_alarm @ self.channel.T, q_N @ self.channel.T
        lone = ~self.augmented
        if lone.any():
            # only the Z_c bit is evidence: P(o | .) -> P(zc(o) | .) = sum over the Z_a bit
            self.emission[lone] = _zc_marginal(self.emission[lone])
            p_alarm[lone], p_normal[lone] = _zc_marginal(p_alarm[lone]), _zc_marginal(p_normal[lone])
        with np.errstate(divide="ignore", invalid="ignore"):
            self.log_emission = np.log(self.emission)
            llr = np.log(p_alarm) - np.log(p_normal)
        self.alarm_llr = np.clip(np.nan_to_num(llr, nan=0.0, posinf=1e6, neginf=-1e6), -1e6, 1e6)
        self.state_posterior = self.channel / self.channel.sum(axis=1, keepdims=True)
        # P(Z_c = 1 | published o), flat prior: the channel-inverted evidence of an alarm
        self.alarm_posterior = self.state_posterior[:, 2] + self.state_posterior[:, 3]

    @property
    def n_plants(self) -> int:
        """M."""
        return int(self.nominal.shape[0])

    @property
    def n_components(self) -> int:
        """K = 2 + number of root components + number of propagated components."""
        return 2 + self.n_root + self.n_propagated


class SeverityModel:
    """Evidence of the published severity levels: the CUSUM increments of "at level j or above".

    A plant publishes, per row, the level ``l`` of its proprietary score ``s`` against its
    threshold ``tau``: 0 below it (no alarm), else ``1 + floor(log_b(s / tau))`` capped at
    ``K - 1`` (:func:`fedrca.detectors.plant.severity_levels`), through k-ary randomized response
    (:func:`rr_level_channel`). For every level ``j >= 2`` the engine runs a CUSUM of the
    log-likelihood ratio of the indicator ``o >= j`` (o the published level) between "the
    plant is at level j or above" (probability ``1 - miss`` per row) and nominal operation
    (where ``s > b tau`` has probability ``nominal``), exactly as it does for the alarm
    itself; that gives each plant's onset of every severity level.

    Parameters
    ----------
    n_levels : K
    epsilon : privacy of the published level (inf = published as it is)
    miss : P(a plant at level j or above shows a lower level in a row)
    nominal : P(level >= 2) on nominal data (a floor: finite nominal data shows none)

    Attributes
    ----------
    llr : (K - 2, K) increment ``[j - 2, o]`` of the CUSUM of level j for published level o

    Examples
    --------
    >>> m = SeverityModel(4, math.inf, 0.1, 1e-4)
    >>> m.llr.shape, bool(m.llr[0, 2] > 5 > 0 > m.llr[0, 1])
    ((2, 4), True)
    """

    def __init__(self, n_levels: int, epsilon: float, miss: float, nominal: float) -> None:
        if not 0.0 < miss < 1.0 or not 0.0 < nominal < 1.0:
            raise DataError("severity miss and nominal rates must be probabilities in (0, 1)")
        self.n_levels = int(n_levels)
        self.epsilon = float(epsilon)
        self.channel = rr_level_channel(epsilon, self.n_levels)
        K = self.n_levels
        rows = []
        for j in range(2, K):
            # P(o >= j | true level l) for every l, then mixed over "at level >= j" and "nominal"
            above = self.channel[j:, :].sum(axis=0)  # (K,)
            at = np.zeros(K)
            at[j:] = 1.0 / (K - j)
            alarm_dist = (1.0 - miss) * at + miss * np.eye(K)[j - 1]
            nominal_dist = (1.0 - nominal) * np.eye(K)[0] + nominal * at
            p1, p0 = float(above @ alarm_dist), float(above @ nominal_dist)
            # llr(o) = log P(1[o >= j] | at level >= j) - log P(1[o >= j] | nominal)
            hit = math.log(p1 / p0)
            no_hit = math.log((1.0 - p1) / (1.0 - p0)) if p1 < 1.0 else -1e6
            rows.append(np.where(np.arange(K) >= j, hit, no_hit))
        self.llr = np.array(rows).reshape(max(K - 2, 0), K)

    @property
    def n_tracked(self) -> int:
        """Levels with their own onset (2 .. K - 1)."""
        return max(self.n_levels - 2, 0)
