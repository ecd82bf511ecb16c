"""Fused batch path of a plant detector: both models' evidence and statistic families in one pass.

:meth:`PlantDetector.step_batch <fedrca.detectors.plant.PlantDetector.step_batch>` with an
identified steady-state Kalman filter, no inputs in the filter and the ``family`` method
(the shipped TEP configuration) spends its time in thin products ``(T, D) @ (D, D)`` and
in one IIR filter per EWMA. This module computes the same quantities with the algebra
rearranged so that every product and filter runs over a whole batch in feature-major
layout (``(rows, T)``, each signal contiguous in time), and the products of the estimate
``x̂_c`` feed both models at once:

* ``A x̂_c(t-1)``, ``C A x̂_c(t-1)`` and ``C x̂_c(t)`` from one product with ``[A; C A; C]``;
* ``Theta psi(y)``, ``A Theta psi``, ``C A Theta psi`` and ``C Theta psi`` as a chain of
  products (``Theta psi`` first: a (P, F) map, then the (P, P) and (D, P) ones, never a
  (2P + 2D, F) stack, which at a thousand sensors is the largest matrix of the step), so the
  augmented prediction, residual and estimate are the proprietary ones plus a correction (with
  Theta = 0 they are equal); the products of ``psi(y(t-1))`` for the first sample of a batch are
  the previous batch's last ones, handed back (:attr:`PairOutput.last_features`);
* every whitening ``L⁻¹ (x - μ)`` as ``L⁻¹ x - (L⁻¹ μ)``, with ``L⁻¹ μ`` computed once per
  parameter set (:attr:`PairMaps.shifts`): at batch size 1 it was a second (D, D) product;
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
    A, C, theta : (P, P) transition, (D, P) measurement, (P, F) Theta
    state_c, state_a : the proprietary and augmented families
    shifts : ``L⁻¹ μ`` of every :class:`Moments` of both families, by ``id`` of the moments
    """

    P: int
    D: int
    state_maps: FloatArray
    A: FloatArray
    C: FloatArray
    theta: FloatArray
    state_c: FamilyState
    state_a: FamilyState
    shifts: dict[int, FloatArray]

    @classmethod
    def build(
        cls, A: FloatArray, C: FloatArray, theta: FloatArray, state_c: FamilyState, state_a: FamilyState
    ) -> PairMaps:
        """Stack the maps of transition ``A`` (P, P), measurement ``C`` (D, P) and ``theta`` (P, F)."""
        CA = C @ A
        moments = [m for st in (state_c, state_a) for m in (st.innovation, st.level, st.reconstruction, *st.smoothed)]
        return cls(
            A.shape[0],
            C.shape[0],
            np.ascontiguousarray(np.vstack([A, CA, C])),
            np.ascontiguousarray(A),
            np.ascontiguousarray(C),
            np.ascontiguousarray(theta),
            state_c,
            state_a,
            # L⁻¹ μ, the shift of every whitening
            {id(m): m.whitening @ m.mean for m in moments},
        )

    def features(self, psi: FloatArray) -> FloatArray:
        """``[Theta; A Theta; C A Theta; C Theta] psi`` of feature-major columns ``psi`` (F, T) -> (2P + 2D, T)."""
        P, D = self.P, self.D
        out = np.empty((2 * P + 2 * D, psi.shape[1]))
        # Theta psi ; A (Theta psi) ; C (A Theta psi) ; C (Theta psi)
        np.matmul(self.theta, psi, out=out[:P])
        np.matmul(self.A, out[:P], out=out[P : 2 * P])
        np.matmul(self.C, out[P : 2 * P], out=out[2 * P : 2 * P + D])
        np.matmul(self.C, out[:P], out=out[2 * P + D :])
        return out


@dataclass(frozen=True)
class PairOutput:
    """What :func:`pair_statistics` gives for T samples (feature-major arrays, one row per signal).

    Attributes
    ----------
    x_c, x_a : (P, T) proprietary and augmented predictions x_c(t), x_a(t)
    r_c, r_a : (D, T) prediction residuals
    stats_c, stats_a : (K, T) normalised statistics ``s_k / c_k`` of each family
    memory_c, memory_a : each family's EWMA memory after the last sample
    last_features : (2P + 2D,) the feature products of the last sample's ``psi`` (the next batch's
        ``first_features``)
    """

    x_c: FloatArray
    x_a: FloatArray
    r_c: FloatArray
    r_a: FloatArray
    stats_c: FloatArray
    stats_a: FloatArray
    memory_c: Memory
    memory_a: Memory
    last_features: FloatArray


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


def _white(maps: PairMaps, m: Moments, X: FloatArray, out: FloatArray | None = None) -> FloatArray:
    """``L⁻¹ (x - μ) = L⁻¹ x - L⁻¹ μ`` of feature-major columns ``X`` (D, T) -> (D, T)."""
    W = np.matmul(m.whitening, X, out=out)
    W -= maps.shifts[id(m)][:, None]
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
    from scipy.signal import lfilter  # at first use (a worker starts without it: fedrca.streams.app.warm_up)

    filtered, _ = lfilter([lam], [1.0, -(1.0 - lam)], W, axis=1, zi=((1.0 - lam) * start)[:, None])
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
    first_features: FloatArray | None = None,
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
    first_features : (2P + 2D,) :meth:`PairMaps.features` of ``psi0`` when the caller kept them
        (the previous batch's :attr:`PairOutput.last_features`); None: computed here

    Returns
    -------
    PairOutput
    """
    P, D, T = maps.P, maps.D, len(Yz)
    Y = Yz.T
    # [A; C A; C] x̂_c(t) and [Theta; A Theta; C A Theta; C Theta] psi(y(t)), all t at once
    SX = maps.state_maps @ X.T
    SF = maps.features(psi.T)
    first_x = maps.state_maps @ x0
    if psi0 is None:
        first_f = np.zeros(2 * P + 2 * D)
    elif first_features is not None:
        first_f = first_features
    else:
        first_f = maps.features(psi0[:, None])[:, 0]
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
    cols_c: dict[str, Any] = {}
    cols_a: dict[str, Any] = {}
    # Every D-vector statistic of both models is a squared norm ||L⁻¹ (v - μ)||²: the whitened
    # vectors go to one (blocks, D, T) array and their norms are taken in one pass.
    blocks: list[tuple[dict[str, Any], str]] = [(cols_c, "innovation"), (cols_a, "innovation")]
    n_rec = sum("reconstruction" in st.statistics for st in (sc, sa))
    B = np.empty((2 + len(sc.lambdas) + len(sa.lambdas) + n_rec, D, T))
    # w(t) = L⁻¹ (r(t) - μ) of both models, stacked so that one IIR filter smooths both
    _white(maps, sc.innovation, r_c, B[0])
    _white(maps, sa.innovation, r_a, B[1])
    W = B[:2].reshape(2 * D, T)
    k = 2
    if sc.lambdas == sa.lambdas:
        for i, lam in enumerate(sc.lambdas):
            start = np.concatenate([_zero_if_none(last_c[i], D), _zero_if_none(last_a[i], D)])
            # w_λ(t) = λ w(t) + (1 - λ) w_λ(t-1), both models in one filter
            Wl = _ewma(W, lam, start)
            for state, half, cols, last in ((sc, Wl[:D], cols_c, last_c), (sa, Wl[D:], cols_a, last_a)):
                k = _smoothed(maps, state, i, half, B, k, blocks, cols, last, T)
    else:
        for state, Wm, cols, last in ((sc, W[:D], cols_c, last_c), (sa, W[D:], cols_a, last_a)):
            for i, lam in enumerate(state.lambdas):
                Wl = _ewma(Wm, lam, _zero_if_none(last[i], D))
                k = _smoothed(maps, state, i, Wl, B, k, blocks, cols, last, T)
    for state, e, cols in ((sc, e_c, cols_c), (sa, e_a, cols_a)):
        if "reconstruction" in state.statistics:
            # reconstruction = d2(y - h(x̂))
            _white(maps, state.reconstruction, e, B[k])
            blocks.append((cols, "reconstruction"))
            k += 1
    # ||w(t)||² of every block
    norms = np.einsum("kdt,kdt->kt", B, B)
    for (cols, name), row in zip(blocks, norms, strict=True):
        cols[name] = row
    for state, d2, cols, last in ((sc, norms[0], cols_c, last_c), (sa, norms[1], cols_a, last_a)):
        if state.dispersion:
            # v(t) = λ_d d2(r(t)) + (1 - λ_d) v(t-1), from the nominal mean of d2
            start = np.array([state.dispersion_start]) if last[-1] is None else last[-1]
            v = _ewma(d2[None, :], state.dispersion, start)[0]
            cols["dispersion"] = v
            if T:
                last[-1] = v[-1:].copy()
    for state, xh, cols in ((sc, X.T, cols_c), (sa, xh_a, cols_a)):
        if "level" in state.statistics:
            # level = d2(x̂)
            cols["level"] = _sq(_white(maps, state.level, xh))
    stats_c, stats_a = _normalised(sc, cols_c, T), _normalised(sa, cols_a, T)
    return PairOutput(x_c, x_a, r_c, r_a, stats_c, stats_a, last_c, last_a, SF[:, -1].copy())


def _slots(state: FamilyState) -> int:
    return len(state.lambdas) + (1 if state.dispersion else 0)


def _zero_if_none(v: FloatArray | None, n: int) -> FloatArray:
    return np.zeros(n) if v is None else np.asarray(v, dtype=np.float64)


def _smoothed(
    maps: PairMaps,
    state: FamilyState,
    i: int,
    Wl: FloatArray,
    B: FloatArray,
    k: int,
    blocks: list[tuple[dict[str, Any], str]],
    cols: dict[str, Any],
    last: Memory,
    T: int,
) -> int:
    """Whiten one model's EWMA vectors ``Wl`` (D, T) into block ``k`` of ``B``; the next block."""
    # mewma = d2(w_λ) against the nominal moments of w_λ
    _white(maps, state.smoothed[i], Wl, B[k])
    blocks.append((cols, f"mewma@{state.lambdas[i]:g}"))
    if T:
        last[i] = Wl[:, -1].copy()
    return k + 1


def _normalised(state: FamilyState, cols: dict[str, Any], T: int) -> FloatArray:
    """(K, T) ``s_k / c_k`` in ``state.statistics`` order."""
    if not T:
        return np.empty((state.n_statistics, 0))
    stats = np.vstack([cols[s] for s in state.statistics])
    stats /= state.scale[:, None]
    return stats
