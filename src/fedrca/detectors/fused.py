"""Fused batch path of a plant detector: both models' evidence and statistic families in one pass.

:meth:`PlantDetector.step_batch <fedrca.detectors.plant.PlantDetector.step_batch>` with an
identified steady-state Kalman filter, no inputs in the filter and the ``family`` method
(the shipped TEP configuration) spends its time in thin products ``(T, D) @ (D, D)`` and
in one IIR filter per EWMA. This module computes the same quantities with the algebra
rearranged so that every product and filter runs over a whole batch in feature-major
layout (``(rows, T)``, each signal contiguous in time), and the products of the estimate
``x̂_c`` feed both models at once:

* ``A x̂_c(t-1)``, ``C A x̂_c(t-1)`` and ``C x̂_c(t)`` from one product with ``[A; C A; C]``;
* ``Theta psi(y)``, ``A Theta psi``, ``C A Theta psi`` and ``C Theta psi`` from one product
  with ``[Theta; A Theta; C A Theta; C Theta]``, so the augmented prediction, residual and
  estimate are the proprietary ones plus a correction (with Theta = 0 they are equal);
* the EWMA vectors of both models' whitened residuals for one smoothing constant in one
  :func:`scipy.signal.lfilter` call.

:func:`pair_statistics` is the pure function; :func:`fedrca.detectors.statistics.family_statistics`
over the evidence of ``PlantDetector._evidence`` is its reference twin: they agree to
rounding and raise the same flags on every bundled TEP file
(``tests/detectors/test_fused.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.signal
from numpy.typing import NDArray

from fedrca.detectors.statistics import FamilyState, Moments

__all__ = ["PairMaps", "PairOutput", "pair_statistics"]

FloatArray = NDArray[np.float64]
Memory = list[FloatArray | None]
#: batches of at most this many samples run the EWMA recursion directly (see :func:`_ewma`)
_LOOP_SAMPLES = 8


@dataclass(frozen=True)
class PairMaps:
    """The stacked linear maps of one filter, one Theta and one pair of families.

    Attributes
    ----------
    P, D : state and measurement dimensions
    state_maps : (P + 2D, P) ``[A; C A; C]``
    feature_maps : (2P + 2D, F) ``[Theta; A Theta; C A Theta; C Theta]``
    state_c, state_a : the proprietary and augmented families
    """

    P: int
    D: int
    state_maps: FloatArray
    feature_maps: FloatArray
    state_c: FamilyState
    state_a: FamilyState

    @classmethod
    def build(
        cls, A: FloatArray, C: FloatArray, theta: FloatArray, state_c: FamilyState, state_a: FamilyState
    ) -> PairMaps:
        """Stack the maps of transition ``A`` (P, P), measurement ``C`` (D, P) and ``theta`` (P, F)."""
        CA = C @ A
        return cls(
            A.shape[0],
            C.shape[0],
            np.ascontiguousarray(np.vstack([A, CA, C])),
            np.ascontiguousarray(np.vstack([theta, A @ theta, CA @ theta, C @ theta])),
            state_c,
            state_a,
        )


@dataclass(frozen=True)
class PairOutput:
    """What :func:`pair_statistics` gives for T samples (feature-major arrays, one row per signal).

    Attributes
    ----------
    x_c, x_a : (P, T) proprietary and augmented predictions x_c(t), x_a(t)
    r_c, r_a : (D, T) prediction residuals
    stats_c, stats_a : (K, T) normalised statistics ``s_k / c_k`` of each family
    memory_c, memory_a : each family's EWMA memory after the last sample
    """

    x_c: FloatArray
    x_a: FloatArray
    r_c: FloatArray
    r_a: FloatArray
    stats_c: FloatArray
    stats_a: FloatArray
    memory_c: Memory
    memory_a: Memory


def _minus_previous(X: FloatArray, block: FloatArray, first: FloatArray) -> FloatArray:
    """``X(t) - block(t-1)`` per column (feature-major), with ``block(-1) = first``, in one pass."""
    out = np.empty_like(X)
    np.subtract(X[:, 0], first, out=out[:, 0])
    np.subtract(X[:, 1:], block[:, :-1], out=out[:, 1:])
    return out


def _plus_previous(X: FloatArray, block: FloatArray, first: FloatArray) -> FloatArray:
    """``X(t) + block(t-1)`` per column (feature-major), with ``block(-1) = first``, in one pass."""
    out = np.empty_like(X)
    np.add(X[:, 0], first, out=out[:, 0])
    np.add(X[:, 1:], block[:, :-1], out=out[:, 1:])
    return out


def _white(m: Moments, X: FloatArray, out: FloatArray | None = None) -> FloatArray:
    """``L⁻¹ (x - μ)`` of feature-major columns ``X`` (D, T) -> (D, T)."""
    W = np.matmul(m.whitening, X, out=out)
    W -= (m.whitening @ m.mean)[:, None]
    return W


def _sq(W: FloatArray) -> FloatArray:
    """``||w(t)||²`` of feature-major columns (D, T) -> (T,)."""
    return np.asarray(np.einsum("dt,dt->t", W, W))


def _ewma(W: FloatArray, lam: float, start: FloatArray) -> FloatArray:
    """``w(t) = λ W(t) + (1 - λ) w(t-1)`` per row of ``W`` (R, T), from ``w(-1) = start`` (R,).

    A few samples (a stream's small batches) go through the recursion itself: the same two
    products and one sum per value as :func:`scipy.signal.lfilter`'s transposed direct form,
    so the same numbers to the bit, without its set-up cost.
    """
    T = W.shape[1]
    if T <= _LOOP_SAMPLES:
        out = np.empty_like(W)
        w = np.asarray(start, dtype=np.float64)
        for t in range(T):
            w = out[:, t] = lam * W[:, t] + (1.0 - lam) * w
        return out
    filtered, _ = scipy.signal.lfilter([lam], [1.0, -(1.0 - lam)], W, axis=1, zi=((1.0 - lam) * start)[:, None])
    return np.asarray(filtered)


def pair_statistics(
    maps: PairMaps,
    Yz: FloatArray,
    psi: FloatArray,
    X: FloatArray,
    x0: FloatArray,
    psi0: FloatArray | None,
    memory_c: Memory | None,
    memory_a: Memory | None,
) -> PairOutput:
    """Both models' predictions, residuals and normalised family statistics for T samples.

    Parameters
    ----------
    maps : the stacked maps (:meth:`PairMaps.build`)
    Yz : (T, D) standardised measurements y(t)
    psi : (T, F) features psi(y(t)) of ``Yz``
    X : (T, P) proprietary estimates x̂_c(t) (the filter run over ``Yz``)
    x0 : (P,) the estimate x̂_c(-1) before the batch
    psi0 : (F,) the features of y(-1), or None before the first sample of a stream (the first
        prediction is then not augmented)
    memory_c, memory_a : each family's EWMA memory (None: a fresh stream), as
        :func:`~fedrca.detectors.statistics.family_statistics` keeps it

    Returns
    -------
    PairOutput
    """
    P, D, T = maps.P, maps.D, len(Yz)
    Y = Yz.T
    # [A; C A; C] x̂_c(t) and [Theta; A Theta; C A Theta; C Theta] psi(y(t)), all t at once
    SX = maps.state_maps @ X.T
    SF = maps.feature_maps @ psi.T
    first_x = maps.state_maps @ x0
    first_f = np.zeros(len(maps.feature_maps)) if psi0 is None else maps.feature_maps @ psi0
    # x_c(t) = A x̂_c(t-1) ;  x_a(t) = A (x̂_c(t-1) + Theta psi(y(t-1)))
    x_c = np.empty((P, T))
    x_c[:, 0] = first_x[:P]
    x_c[:, 1:] = SX[:P, :-1]
    x_a = _plus_previous(x_c, SF[P : 2 * P], first_f[P : 2 * P])
    # r_c(t) = y(t) - C x_c(t) ;  r_a(t) = r_c(t) - C A Theta psi(y(t-1))
    r_c = _minus_previous(Y, SX[P : P + D], first_x[P : P + D])
    r_a = _minus_previous(r_c, SF[2 * P : 2 * P + D], first_f[2 * P : 2 * P + D])
    # x̂_a(t) = x̂_c(t) + Theta psi(y(t)) ;  e_c(t) = y(t) - C x̂_c(t) ;  e_a(t) = e_c(t) - C Theta psi(y(t))
    xh_a = X.T + SF[:P]
    e_c = Y - SX[P + D :]
    e_a = e_c - SF[2 * P + D :]

    sc, sa = maps.state_c, maps.state_a
    last_c: Memory = list(memory_c) if memory_c is not None else [None] * _slots(sc)
    last_a: Memory = list(memory_a) if memory_a is not None else [None] * _slots(sa)
    # w(t) = L⁻¹ (r(t) - μ) of both models, stacked so that one IIR filter smooths both
    W = np.empty((2 * D, T))
    _white(sc.innovation, r_c, W[:D])
    _white(sa.innovation, r_a, W[D:])
    cols_c: dict[str, Any] = {}
    cols_a: dict[str, Any] = {}
    d2_c, d2_a = _sq(W[:D]), _sq(W[D:])
    cols_c["innovation"], cols_a["innovation"] = d2_c, d2_a
    for state, d2, cols, last in ((sc, d2_c, cols_c, last_c), (sa, d2_a, cols_a, last_a)):
        if state.dispersion:
            # v(t) = λ_d d2(r(t)) + (1 - λ_d) v(t-1), from the nominal mean of d2
            start = np.array([state.dispersion_start]) if last[-1] is None else last[-1]
            v = _ewma(d2[None, :], state.dispersion, start)[0]
            cols["dispersion"] = v
            if T:
                last[-1] = v[-1:].copy()
    if sc.lambdas == sa.lambdas:
        for i, lam in enumerate(sc.lambdas):
            start = np.concatenate([_zero_if_none(last_c[i], D), _zero_if_none(last_a[i], D)])
            # w_λ(t) = λ w(t) + (1 - λ) w_λ(t-1), both models in one filter
            Wl = _ewma(W, lam, start)
            _smoothed(sc, i, Wl[:D], cols_c, last_c, T)
            _smoothed(sa, i, Wl[D:], cols_a, last_a, T)
    else:
        for state, Wm, cols, last in ((sc, W[:D], cols_c, last_c), (sa, W[D:], cols_a, last_a)):
            for i, lam in enumerate(state.lambdas):
                _smoothed(state, i, _ewma(Wm, lam, _zero_if_none(last[i], D)), cols, last, T)
    for state, xh, e, cols in ((sc, X.T, e_c, cols_c), (sa, xh_a, e_a, cols_a)):
        if "level" in state.statistics:
            # level = d2(x̂)
            cols["level"] = _sq(_white(state.level, xh))
        if "reconstruction" in state.statistics:
            # reconstruction = d2(y - h(x̂))
            cols["reconstruction"] = _sq(_white(state.reconstruction, e))
    return PairOutput(x_c, x_a, r_c, r_a, _normalised(sc, cols_c, T), _normalised(sa, cols_a, T), last_c, last_a)


def _slots(state: FamilyState) -> int:
    return len(state.lambdas) + (1 if state.dispersion else 0)


def _zero_if_none(v: FloatArray | None, n: int) -> FloatArray:
    return np.zeros(n) if v is None else np.asarray(v, dtype=np.float64)


def _smoothed(state: FamilyState, i: int, Wl: FloatArray, cols: dict[str, Any], last: Memory, T: int) -> None:
    # mewma = d2(w_λ) against the nominal moments of w_λ
    cols[f"mewma@{state.lambdas[i]:g}"] = _sq(_white(state.smoothed[i], Wl))
    if T:
        last[i] = Wl[:, -1].copy()


def _normalised(state: FamilyState, cols: dict[str, Any], T: int) -> FloatArray:
    """(K, T) ``s_k / c_k`` in ``state.statistics`` order."""
    if not T:
        return np.empty((state.n_statistics, 0))
    stats = np.vstack([cols[s] for s in state.statistics])
    stats /= state.scale[:, None]
    return stats
