"""The transfer function of a learned linear model, and how to compare it with the true one (pure).

Only the transfer function ``G(z) = C (zI - A)^-1 B`` is identified by input-output
data (a change of state basis T gives ``(T A T^-1, T B, C T^-1)`` with the same G), so
learned and true systems are compared by it: :func:`transfer_function` (poles,
transmission zeros, singular values on the unit circle), :func:`pole_distance` and
:func:`channel_zeros`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.optimize
from numpy.typing import ArrayLike, NDArray

from fedrca.exceptions import ModelError
from fedrca.whatif.model import FloatArray

__all__ = ["TransferFunction", "channel_zeros", "invariant_zeros", "pole_distance", "transfer_function"]

ComplexArray = NDArray[np.complex128]


@dataclass(frozen=True)
class TransferFunction:
    """Poles, transmission zeros and singular values of G(z) = C (zI - A)^-1 B on the unit circle.

    Attributes
    ----------
    poles : (S,) eigenvalues of A
    zeros : (Z,) finite transmission zeros (often none for a non-square G)
    frequencies : (F,) omega in [0, pi] (radians per sample)
    singular_values : (F, min(D, U)) singular values of G(e^{j omega}), largest first
    """

    poles: ComplexArray
    zeros: ComplexArray
    frequencies: FloatArray
    singular_values: FloatArray

    @property
    def stable(self) -> bool:
        """True when every pole lies strictly inside the unit circle."""
        return bool(np.all(np.abs(self.poles) < 1.0))


def _finite_pencil_eigenvalues(A: FloatArray, B: FloatArray, C: FloatArray) -> ComplexArray:
    """Finite z with det([[A - zI, B], [C, 0]]) = 0 for a square system (D = U)."""
    S, U = B.shape
    M = np.block([[A, B], [C, np.zeros((C.shape[0], U))]])
    N = np.zeros_like(M)
    N[:S, :S] = np.eye(S)
    alpha, beta = scipy.linalg.eigvals(M, N, homogeneous_eigvals=True)
    scale = np.abs(alpha) + np.abs(beta)
    finite = np.abs(beta) > 1e-9 * np.where(scale > 0, scale, 1.0)
    return np.asarray(alpha[finite] / beta[finite], dtype=np.complex128)


def invariant_zeros(A: ArrayLike, B: ArrayLike, C: ArrayLike, seed: int = 0, tol: float = 1e-6) -> ComplexArray:
    """Finite transmission zeros of (A, B, C, 0).

    Square systems: the finite generalized eigenvalues of the Rosenbrock pencil. Non-square
    systems: a zero of G is a zero of every square projection (``W'G`` or ``G V``), while a
    random projection adds zeros of its own; the zeros common to two seeded projections
    (within ``tol``, relative) are returned. A generic tall or wide system has none.

    Examples
    --------
    >>> A = np.array([[0.2, 0.0], [0.0, 0.9]]); B = np.array([[1.0], [1.0]]); C = np.array([[1.0, -0.5]])
    >>> invariant_zeros(A, B, C).real.round(6).tolist()     # G(z) = 0.5 (z - 1.6) / ((z - 0.2)(z - 0.9))
    [1.6]
    """
    A_arr, B_arr, C_arr = (np.asarray(a, dtype=np.float64) for a in (A, B, C))
    p, m = C_arr.shape[0], B_arr.shape[1]
    if p == m:
        return _finite_pencil_eigenvalues(A_arr, B_arr, C_arr)
    rng = np.random.default_rng(seed)
    candidates = []
    for _ in range(2):
        if p > m:
            W = rng.standard_normal((p, m))
            candidates.append(_finite_pencil_eigenvalues(A_arr, B_arr, W.T @ C_arr))
        else:
            V = rng.standard_normal((m, p))
            candidates.append(_finite_pencil_eigenvalues(A_arr, B_arr @ V, C_arr))
    first, second = candidates
    common = [z for z in first if second.size and np.min(np.abs(second - z)) <= tol * (1.0 + abs(z))]
    return np.asarray(common, dtype=np.complex128)


def channel_zeros(A: ArrayLike, B: ArrayLike, C: ArrayLike) -> list[list[ComplexArray]]:
    """Zeros of every single-input single-output channel G_ij(z) = c_i (zI - A)^-1 b_j (``[i][j]``)."""
    A_arr, B_arr, C_arr = (np.asarray(a, dtype=np.float64) for a in (A, B, C))
    return [
        [_finite_pencil_eigenvalues(A_arr, B_arr[:, [j]], C_arr[[i], :]) for j in range(B_arr.shape[1])]
        for i in range(C_arr.shape[0])
    ]


def transfer_function(A: ArrayLike, B: ArrayLike, C: ArrayLike, n_frequencies: int = 128) -> TransferFunction:
    """Poles, zeros and the singular-value spectrum of ``G(z) = C (zI - A)^-1 B`` for ``z = e^{j omega}``.

    Examples
    --------
    >>> tf = transfer_function([[0.5]], [[1.0]], [[2.0]], n_frequencies=2)
    >>> tf.poles.real.tolist(), tf.stable, tf.singular_values[:, 0].round(3).tolist()   # |2 / (z - 0.5)|
    ([0.5], True, [4.0, 1.333])
    """
    A_arr, B_arr, C_arr = (np.asarray(a, dtype=np.float64) for a in (A, B, C))
    S = len(A_arr)
    omega = np.linspace(0.0, np.pi, n_frequencies)
    values = []
    for w in omega:
        # G(e^{jw}) = C (e^{jw} I - A)^-1 B
        G = C_arr @ np.linalg.solve(np.exp(1j * w) * np.eye(S) - A_arr, B_arr)
        values.append(np.linalg.svd(G, compute_uv=False))
    return TransferFunction(
        poles=np.asarray(np.linalg.eigvals(A_arr), dtype=np.complex128),
        zeros=invariant_zeros(A_arr, B_arr, C_arr),
        frequencies=omega,
        singular_values=np.asarray(values, dtype=np.float64),
    )


def pole_distance(learned: Sequence[complex] | ComplexArray, true: Sequence[complex] | ComplexArray) -> float:
    """Largest distance between matched poles (optimal one-to-one matching of two equally long sets).

    Examples
    --------
    >>> pole_distance([0.5, 0.1 + 0.2j, 0.1 - 0.2j], [0.1 - 0.25j, 0.52, 0.1 + 0.25j])
    0.05
    """
    a, b = np.ravel(np.asarray(learned, dtype=np.complex128)), np.ravel(np.asarray(true, dtype=np.complex128))
    if a.shape != b.shape:
        raise ModelError(f"pole sets differ in size: {a.size} learned vs {b.size} true")
    if not a.size:
        return 0.0
    cost = np.abs(a[:, None] - b[None, :])
    rows, cols = scipy.optimize.linear_sum_assignment(cost)
    return round(float(cost[rows, cols].max()), 12)
