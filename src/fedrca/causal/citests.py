"""Conditional-independence tests for constraint-based structure learning (PC, FedPC).

Every test answers a **batch** of queries ``X ⟂ Y | S`` at once: ``x`` (Q,),
``y`` (Q,) and ``S`` (Q, l) variable indices, all queries of a batch with the
same conditioning-set size l; the answer is the p-value of each query (Q,).
A large p-value means the data do not contradict independence; PC removes an
edge when ``p > alpha``.

* :class:`FisherZ` (continuous data): partial correlation from the correlation
  matrix, Fisher's z transform, standard normal reference distribution.
* :class:`GSquare` (discrete data): the likelihood-ratio statistic of the
  stratified contingency tables, chi-square reference distribution with the
  degrees of freedom of the **observed** levels in each non-empty stratum.
* :class:`DSeparation` (an oracle): p = 1 when x and y are d-separated by S in
  a known DAG, else 0 (what any consistent test gives with infinite data).

The p-values come from :mod:`scipy.stats` (``norm.sf``, ``chi2.sf``): exact for
the reference distribution, with no approximation beyond the test's own
(Fisher's z is asymptotically normal; G-square asymptotically chi-square).
A query that cannot be tested (fewer than ``|S| + 4`` samples for Fisher's z)
gets NaN: PC keeps an edge it cannot test.

Examples
--------
>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> a = rng.normal(size=2000); b = a + rng.normal(size=2000); c = b + rng.normal(size=2000)
>>> test = FisherZ(np.column_stack([a, b, c]))
>>> bool(test.pvalues([0], [2], [])[0] < 1e-6)      # a, c dependent
True
>>> bool(test.pvalues([0], [2], [[1]])[0] > 0.01)   # a ⟂ c | b
True
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import scipy.stats
from numpy.typing import ArrayLike, NDArray

from fedrca.exceptions import DataError

__all__ = [
    "CITest",
    "DSeparation",
    "FisherZ",
    "GSquare",
    "TableGSquare",
    "as_queries",
    "contingency_counts",
    "d_separated",
    "gsquare_from_counts",
    "gsquare_pvalues",
    "table_chunks",
    "table_shapes",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]

#: cap on the elements of one intermediate array (queries x cells or queries x samples) of a batch
_CHUNK_ELEMENTS = 1 << 22
#: cells of the contingency tables counted and scored at once: a batch of queries is cut into runs
#: of at most this many cells (or one query, when its table alone is larger), so a batch's memory
#: does not grow with its number of queries (``fedrca.application.graph.g_square_bytes``; guarded by
#: ``tests/causal/test_citests.py::test_g_square_batches_cost_the_same_as_one_query_at_a_time``)
TABLE_CELLS = 1 << 21


@runtime_checkable
class CITest(Protocol):
    """A conditional-independence test over ``n_variables`` columns of one data set."""

    @property
    def n_variables(self) -> int:
        """Number of variables (columns) p."""
        ...

    @property
    def n_samples(self) -> int:
        """Number of samples (rows) n."""
        ...

    def pvalues(self, x: ArrayLike, y: ArrayLike, S: ArrayLike) -> FloatArray:
        """p-values (Q,) of ``x[q] ⟂ y[q] | S[q]`` for x, y (Q,) and S (Q, l)."""
        ...


def as_queries(x: ArrayLike, y: ArrayLike, S: ArrayLike, p: int) -> tuple[IntArray, IntArray, IntArray]:
    """Validate a batch of queries: x, y (Q,) and S (Q, l) integer ids in [0, p), x != y, S disjoint from both.

    Raises
    ------
    DataError
        Naming what is wrong with the batch.
    """
    xa = np.asarray(x, dtype=np.int64).reshape(-1)
    ya = np.asarray(y, dtype=np.int64).reshape(-1)
    Q = len(xa)
    Sa = np.asarray(S, dtype=np.int64)
    if Sa.ndim < 2:  # a flat list: l = len / Q ids per query ([] = the empty set for every query)
        Sa = Sa.reshape(Q, -1) if Q else Sa.reshape(0, 0)
    if len(ya) != Q or Sa.ndim != 2 or Sa.shape[0] != Q:
        raise DataError(
            f"CI queries need x, y of shape (Q,) and S of shape (Q, l); got {xa.shape}, {ya.shape}, {Sa.shape}"
        )
    every = np.concatenate([xa, ya, Sa.ravel()])
    if every.size and (every.min() < 0 or every.max() >= p):
        raise DataError(f"CI query variable ids must be in [0, {p}); got {every.min()}..{every.max()}")
    if np.any(xa == ya):
        raise DataError("a CI query tests a variable against itself (x == y)")
    if Sa.shape[1] and (np.any(Sa == xa[:, None]) or np.any(Sa == ya[:, None])):
        raise DataError("a CI query conditions on one of its own variables (x or y in S)")
    return xa, ya, Sa


class FisherZ:
    """Fisher's z test of zero partial correlation (Gaussian data).

    Parameters
    ----------
    data : (n, p) float, samples in rows; or use :meth:`from_correlation`

    Notes
    -----
    For a query (x, y, S) with k = |S| + 2 variables ``V = (x, y, S)``::

        P = C[V, V]^-1                               (precision of the sub-correlation)
        r = -P_01 / sqrt(P_00 P_11)                  (partial correlation of x, y given S)
        z = sqrt(n - |S| - 3) * atanh(r)             (~ N(0, 1) when r = 0)
        p = 2 * Φ̄(|z|)                               (two-sided)

    Only the correlation matrix (p, p) and n are kept: they are the test's
    sufficient statistics, so the raw samples can be dropped after construction.
    """

    def __init__(self, data: ArrayLike) -> None:
        X = np.asarray(data, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] < 2:
            raise DataError(f"Fisher-z data must be (n_samples, n_variables >= 2), got shape {X.shape}")
        if X.shape[0] < 4:
            raise DataError(f"Fisher-z needs at least 4 samples, got {X.shape[0]}")
        if not np.all(np.isfinite(X)):
            raise DataError("Fisher-z data contain NaN or inf; drop or impute those rows first")
        sd = X.std(axis=0)
        if np.any(sd == 0):
            raise DataError(f"Fisher-z data have constant column(s) {np.flatnonzero(sd == 0).tolist()}; drop them")
        self._corr: FloatArray = np.asarray(np.corrcoef(X, rowvar=False), dtype=np.float64)
        self._n = int(X.shape[0])

    @classmethod
    def from_correlation(cls, corr: ArrayLike, n_samples: int, noise_var: float = 0.0) -> FisherZ:
        """The test from a correlation matrix (p, p) estimated on ``n_samples`` samples.

        ``noise_var`` is the variance of independent noise on each off-diagonal entry of
        ``corr`` (a private release, :mod:`fedrca.causal.sufficient`); the test then adds
        the noise's share to the variance of every partial correlation (see :meth:`pvalues`).
        """
        C = np.asarray(corr, dtype=np.float64)
        if C.ndim != 2 or C.shape[0] != C.shape[1] or not np.allclose(C, C.T) or not np.allclose(np.diag(C), 1.0):
            raise DataError("a correlation matrix must be square, symmetric, with a unit diagonal")
        if not (np.isfinite(noise_var) and noise_var >= 0):
            raise DataError(f"noise_var must be a finite number >= 0, got {noise_var}")
        test = cls.__new__(cls)
        test._corr = C.copy()
        test._n = int(n_samples)
        test._noise_var = float(noise_var)
        return test

    _noise_var: float = 0.0

    @property
    def n_variables(self) -> int:
        """p."""
        return int(self._corr.shape[0])

    @property
    def n_samples(self) -> int:
        """n."""
        return self._n

    @property
    def correlation(self) -> FloatArray:
        """The correlation matrix (p, p) (a copy)."""
        return self._corr.copy()

    def _partials(self, xa: IntArray, ya: IntArray, Sa: IntArray) -> tuple[FloatArray, FloatArray]:
        """r (Q,) and the variance (Q,) the correlation matrix's noise gives r (zeros without noise)."""
        Q, l = Sa.shape
        tau2 = self._noise_var
        if l == 0:
            return np.asarray(self._corr[xa, ya], dtype=np.float64), np.full(Q, tau2)
        r = np.empty(Q)
        var = np.zeros(Q)
        k = l + 2
        step = max(1, _CHUNK_ELEMENTS // (k * k))
        upper = np.triu_indices(k, 1)
        for lo in range(0, Q, step):
            hi = min(Q, lo + step)
            V = np.column_stack([xa[lo:hi], ya[lo:hi], Sa[lo:hi]])  # (q, k)
            sub = self._corr[V[:, :, None], V[:, None, :]]  # (q, k, k) sub-correlations
            try:
                # P = C[V, V]^-1, batched
                P = np.linalg.inv(sub)
            except np.linalg.LinAlgError:
                # a singular sub-matrix (collinear variables) somewhere in the chunk: pseudo-inverse
                P = np.linalg.pinv(sub, hermitian=True)
            # r = -P_01 / sqrt(P_00 P_11)
            denom = np.sqrt(np.abs(P[:, 0, 0] * P[:, 1, 1]))
            with np.errstate(divide="ignore", invalid="ignore"):
                rq = np.where(denom > 0, -P[:, 0, 1] / denom, 0.0)
                r[lo:hi] = rq
                if tau2 > 0:
                    # delta method: dP = -P dC P, so dr = Σ_ab h_ab dC_ab with
                    # h_ab = -(∂r/∂P_01 P_0a P_b1 + ∂r/∂P_00 P_0a P_b0 + ∂r/∂P_11 P_1a P_b1),
                    # ∂r/∂P_01 = -1/sqrt(P_00 P_11), ∂r/∂P_00 = -r/(2 P_00), ∂r/∂P_11 = -r/(2 P_11)
                    g01 = np.where(denom > 0, -1.0 / denom, 0.0)
                    g00 = -rq / (2.0 * P[:, 0, 0])
                    g11 = -rq / (2.0 * P[:, 1, 1])
                    h = -(
                        g01[:, None, None] * P[:, 0, :, None] * P[:, None, :, 1]
                        + g00[:, None, None] * P[:, 0, :, None] * P[:, None, :, 0]
                        + g11[:, None, None] * P[:, 1, :, None] * P[:, None, :, 1]
                    )
                    # C is symmetric, dC_ab = dC_ba: Var = τ² Σ_{a<b} (h_ab + h_ba)²
                    both = (h + np.transpose(h, (0, 2, 1)))[:, upper[0], upper[1]]
                    var[lo:hi] = tau2 * np.nan_to_num(np.sum(both * both, axis=1))
        return r, var

    def pvalues(self, x: ArrayLike, y: ArrayLike, S: ArrayLike) -> FloatArray:
        """Two-sided p-values (Q,); NaN where n - |S| - 3 <= 0 (too few samples to test).

        With ``noise_var`` > 0 the standard error of atanh(r) is
        ``sqrt(1/(n - |S| - 3) + Var_noise(r) / (1 - r²)²)`` (delta method), so that noise on
        the correlation matrix does not pass for evidence of dependence.
        """
        xa, ya, Sa = as_queries(x, y, S, self.n_variables)
        l = Sa.shape[1]
        dof = self._n - l - 3
        if len(xa) == 0:
            return np.empty(0)
        if dof <= 0:
            return np.full(len(xa), np.nan)
        r, noise = self._partials(xa, ya, Sa)
        # |r| = 1 (a deterministic relation): keep z finite, p = 0 to machine precision
        r = np.clip(r, -1.0 + np.finfo(float).eps, 1.0 - np.finfo(float).eps)
        if self._noise_var > 0:
            # z = atanh(r) / sqrt(1/(n - |S| - 3) + Var_noise(r) / (1 - r²)²)
            z = np.arctanh(r) / np.sqrt(1.0 / dof + noise / (1.0 - r * r) ** 2)
        else:
            # z = sqrt(n - |S| - 3) atanh(r)
            z = np.sqrt(dof) * np.arctanh(r)
        # p = 2 Φ̄(|z|)
        return np.asarray(2.0 * scipy.stats.norm.sf(np.abs(z)), dtype=np.float64)


class GSquare:
    """G-square (likelihood-ratio) test of conditional independence for discrete data.

    Parameters
    ----------
    data : (n, p), any hashable discrete values per column (ints, strings); each
        column is coded 0..r_j - 1 in sorted order of its distinct values

    Notes
    -----
    For a query (x, y, S), the samples fall into strata s (the joint values of S);
    with counts O_sab of (s, x = a, y = b) and margins O_sa+, O_s+b, O_s++::

        E_sab = O_sa+ O_s+b / O_s++                        (expected under x ⟂ y | S)
        G² = 2 Σ_{O_sab > 0} O_sab ln(O_sab / E_sab)
        dof = Σ_{s: O_s++ > 0} (r_s(x) - 1)(r_s(y) - 1)    (r_s = levels observed in stratum s)
        p = P(χ²_dof > G²),   p = 1 when dof = 0

    Counting only observed levels and non-empty strata is the usual correction
    for structural zeros (the same rule as causal-learn's ``gsq`` test, which
    ``tests/causal/test_citests.py`` checks against).
    """

    def __init__(self, data: ArrayLike) -> None:
        raw = np.asarray(data)
        if raw.ndim != 2 or raw.shape[1] < 2:
            raise DataError(f"G-square data must be (n_samples, n_variables >= 2), got shape {raw.shape}")
        if raw.shape[0] < 1:
            raise DataError("G-square data have no samples")
        if raw.dtype.kind == "f" and not np.all(np.isfinite(raw)):
            raise DataError("G-square data contain NaN or inf; drop those rows or code missing as a level")
        codes = np.empty(raw.shape, dtype=np.int64)
        labels = []
        for j in range(raw.shape[1]):
            values, codes[:, j] = np.unique(raw[:, j], return_inverse=True)
            labels.append(tuple(str(v) for v in values))
            if len(set(labels[-1])) != len(values):
                raise DataError(f"G-square data: column {j} has distinct values with the same text; code them uniquely")
        self._codes: IntArray = codes
        self._codes.flags.writeable = False
        self._labels: tuple[tuple[str, ...], ...] = tuple(labels)
        self._levels: IntArray = np.asarray(codes.max(axis=0) + 1, dtype=np.int64)

    @property
    def n_variables(self) -> int:
        """p."""
        return int(self._codes.shape[1])

    @property
    def n_samples(self) -> int:
        """n."""
        return int(self._codes.shape[0])

    @property
    def levels(self) -> IntArray:
        """Number of distinct values r_j of each variable (p,)."""
        return self._levels.copy()

    @property
    def labels(self) -> tuple[tuple[str, ...], ...]:
        """Per variable, the text of each level in code order (``labels[j][codes[i, j]]`` is sample i's value)."""
        return self._labels

    @property
    def codes(self) -> IntArray:
        """(n, p) level codes (read-only)."""
        return self._codes

    def counts(self, x: ArrayLike, y: ArrayLike, S: ArrayLike) -> IntArray:
        """The queries' contingency tables, flat (layout of :func:`table_shapes`)."""
        xa, ya, Sa = as_queries(x, y, S, self.n_variables)
        return contingency_counts(self._codes, self._levels, xa, ya, Sa)

    def statistics(self, x: ArrayLike, y: ArrayLike, S: ArrayLike) -> tuple[FloatArray, IntArray]:
        """G² (Q,) and degrees of freedom (Q,) of each query (counted and scored :data:`TABLE_CELLS` cells at once)."""
        xa, ya, Sa = as_queries(x, y, S, self.n_variables)
        shapes = table_shapes(self._levels, xa, ya, Sa)
        G2, dof = np.zeros(len(xa)), np.zeros(len(xa), dtype=np.int64)
        for lo, hi in table_chunks(np.prod(shapes, axis=1)):
            counts = contingency_counts(self._codes, self._levels, xa[lo:hi], ya[lo:hi], Sa[lo:hi])
            G2[lo:hi], dof[lo:hi] = gsquare_from_counts(counts, shapes[lo:hi])
        return G2, dof

    def pvalues(self, x: ArrayLike, y: ArrayLike, S: ArrayLike) -> FloatArray:
        """p-values (Q,) from the chi-square distribution; 1 where the tables leave no degree of freedom."""
        return gsquare_pvalues(*self.statistics(x, y, S))


class TableGSquare:
    """G-square over contingency tables counted elsewhere: the pooled test of sites that add their counts.

    Parameters
    ----------
    levels : (p,) int, number of levels r_j of each variable (the agreed code book's sizes)
    n_samples : N, the number of samples the counts cover
    count : ``count(x, y, S)`` -> the flat tables of the queries (layout of :func:`table_shapes`),
        e.g. the sum of every site's :meth:`GSquare.counts` under secure aggregation

    The contingency tables are G-square's sufficient statistics, and they add over
    disjoint samples: with the pooled tables the test is the pooled-data test
    (``tests/causal/test_pooled.py`` checks the p-values against :class:`GSquare` on the pooled data).
    """

    def __init__(self, levels: ArrayLike, n_samples: int, count: Callable[[IntArray, IntArray, IntArray], IntArray]):
        self._levels: IntArray = np.asarray(levels, dtype=np.int64).copy()
        if self._levels.ndim != 1 or len(self._levels) < 2 or np.any(self._levels < 1):
            raise DataError(f"G-square levels must be (p >= 2,) positive counts, got {self._levels.tolist()}")
        self._n = int(n_samples)
        self._count = count

    @property
    def n_variables(self) -> int:
        """p."""
        return len(self._levels)

    @property
    def n_samples(self) -> int:
        """N."""
        return self._n

    def statistics(self, x: ArrayLike, y: ArrayLike, S: ArrayLike) -> tuple[FloatArray, IntArray]:
        """G² (Q,) and degrees of freedom (Q,) of each query, from the counted tables."""
        xa, ya, Sa = as_queries(x, y, S, self.n_variables)
        shapes = table_shapes(self._levels, xa, ya, Sa)
        sizes = np.prod(shapes, axis=1)
        G2, dof = np.zeros(len(xa)), np.zeros(len(xa), dtype=np.int64)
        for lo, hi in table_chunks(sizes):
            counts = np.asarray(self._count(xa[lo:hi], ya[lo:hi], Sa[lo:hi]), dtype=np.int64)
            if counts.shape != (int(sizes[lo:hi].sum()),):
                raise DataError(f"the counted tables have {counts.shape} cells, the queries need {sizes[lo:hi].sum()}")
            G2[lo:hi], dof[lo:hi] = gsquare_from_counts(counts, shapes[lo:hi])
        return G2, dof

    def pvalues(self, x: ArrayLike, y: ArrayLike, S: ArrayLike) -> FloatArray:
        """p-values (Q,) from the chi-square distribution; 1 where the tables leave no degree of freedom."""
        return gsquare_pvalues(*self.statistics(x, y, S))


def table_chunks(sizes: ArrayLike, cells: int | None = None) -> Iterator[tuple[int, int]]:
    """Consecutive query ranges ``[lo, hi)`` whose tables hold at most ``cells`` cells (one query at least).

    ``cells`` defaults to :data:`TABLE_CELLS`.

    Examples
    --------
    >>> list(table_chunks([4, 4, 4, 9, 1], cells=8))
    [(0, 2), (2, 3), (3, 4), (4, 5)]
    """
    limit = TABLE_CELLS if cells is None else cells
    total = np.cumsum(np.asarray(sizes, dtype=np.int64))
    lo, done = 0, 0
    while lo < len(total):
        # the most queries after lo whose cells fit, at least one
        hi = max(lo + 1, int(np.searchsorted(total, done + limit, side="right")))
        yield lo, hi
        done = int(total[hi - 1])
        lo = hi


def table_shapes(levels: ArrayLike, x: IntArray, y: IntArray, S: IntArray) -> IntArray:
    """(Q, 3) shape of each query's table: strata (product of S's levels), levels of x, levels of y.

    Query q's table is ``counts[offset_q : offset_q + prod(shape_q)]`` reshaped to ``shape_q``
    (C order; the stratum is the mixed-radix code of S's values, first variable most
    significant), the tables one after another in query order.
    """
    r = np.asarray(levels, dtype=np.int64)
    strata = np.prod(r[S], axis=1) if S.shape[1] else np.ones(len(x), dtype=np.int64)
    return np.column_stack([strata, r[x], r[y]]).astype(np.int64)


def contingency_counts(codes: IntArray, levels: ArrayLike, x: IntArray, y: IntArray, S: IntArray) -> IntArray:
    """The flat contingency tables O_sab of the queries over coded samples (n, p), layout of :func:`table_shapes`."""
    r = np.asarray(levels, dtype=np.int64)
    shapes = table_shapes(r, x, y, S)
    sizes = np.prod(shapes, axis=1)
    Q, l = S.shape
    n = codes.shape[0]
    out = np.zeros(int(sizes.sum()), dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    step = max(1, _CHUNK_ELEMENTS // max(n, 1))
    for lo in range(0, Q, step):
        hi = min(Q, lo + step)
        # stratum of every sample: mixed-radix code of S's values (q, n)
        stratum = np.zeros((hi - lo, n), dtype=np.int64)
        for k in range(l):
            stratum = stratum * r[S[lo:hi, k]][:, None] + codes[:, S[lo:hi, k]].T
        # cell = offset_q + (stratum r_x + a) r_y + b
        cell = (stratum * shapes[lo:hi, 1:2] + codes[:, x[lo:hi]].T) * shapes[lo:hi, 2:3] + codes[:, y[lo:hi]].T
        cell += (starts[lo:hi] - starts[lo])[:, None]
        out[starts[lo] : starts[hi]] = np.bincount(cell.ravel(), minlength=int(starts[hi] - starts[lo]))
    return out


def gsquare_from_counts(counts: IntArray, shapes: IntArray) -> tuple[FloatArray, IntArray]:
    """G² (Q,) and degrees of freedom (Q,) from flat contingency tables (layout of :func:`table_shapes`).

    Queries with tables of one shape are computed together, in chunks that bound memory.
    """
    Q = len(shapes)
    G2 = np.zeros(Q)
    dof = np.zeros(Q, dtype=np.int64)
    if Q == 0:
        return G2, dof
    sizes = np.prod(shapes, axis=1)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    kinds, which = np.unique(shapes, axis=0, return_inverse=True)
    for g, (s, rx, ry) in enumerate(kinds.tolist()):
        members = np.flatnonzero(which.ravel() == g)
        c = s * rx * ry
        step = max(1, _CHUNK_ELEMENTS // c)
        for lo in range(0, len(members), step):
            idx = members[lo : lo + step]
            # O_sab: counts per query, stratum, x level, y level
            O = counts[starts[idx][:, None] + np.arange(c)].reshape(len(idx), s, rx, ry).astype(np.float64)
            Osa = O.sum(axis=3)  # (q, s, r_x)
            Osb = O.sum(axis=2)  # (q, s, r_y)
            Os = Osa.sum(axis=2)  # (q, s)
            # E_sab = O_sa+ O_s+b / O_s++
            with np.errstate(divide="ignore", invalid="ignore"):
                E = Osa[:, :, :, None] * Osb[:, :, None, :] / Os[:, :, None, None]
                # G² = 2 Σ O ln(O / E) over the cells with O > 0 (E > 0 there)
                terms = np.where(O > 0, O * np.log(np.where(O > 0, O, 1.0) / np.where(O > 0, E, 1.0)), 0.0)
            G2[idx] = 2.0 * terms.sum(axis=(1, 2, 3))
            # dof = Σ_{non-empty s} (observed x levels - 1)(observed y levels - 1)
            rxo = (Osa > 0).sum(axis=2)
            ryo = (Osb > 0).sum(axis=2)
            dof[idx] = np.where(Os > 0, (rxo - 1) * (ryo - 1), 0).sum(axis=1)
    return np.maximum(G2, 0.0), dof


def gsquare_pvalues(G2: FloatArray, dof: IntArray) -> FloatArray:
    """p = P(χ²_dof > G²) (Q,); 1 where dof = 0."""
    p = np.ones(len(G2))
    ok = dof > 0
    # p = P(χ²_dof > G²)
    p[ok] = scipy.stats.chi2.sf(G2[ok], dof[ok])
    return p


def d_separated(dag: ArrayLike, x: int, y: int, S: Sequence[int]) -> bool:
    """Whether S d-separates x and y in a DAG (``dag[i, j]`` = edge i -> j).

    Moral-graph criterion: x and y are d-separated by S iff they are disconnected
    in the moralised graph of the ancestral set of {x, y} ∪ S after removing S.
    """
    D = np.asarray(dag, dtype=bool)
    p = D.shape[0]
    keep = np.zeros(p, dtype=bool)
    frontier = [x, y, *S]
    while frontier:  # ancestors of {x, y} ∪ S
        v = frontier.pop()
        if keep[v]:
            continue
        keep[v] = True
        frontier.extend(int(u) for u in np.flatnonzero(D[:, v]) if not keep[u])
    A = D & keep[:, None] & keep[None, :]
    moral = A | A.T
    for child in np.flatnonzero(keep):  # marry the parents of every kept node
        parents = np.flatnonzero(A[:, child])
        moral[np.ix_(parents, parents)] = True
    np.fill_diagonal(moral, False)
    blocked = np.zeros(p, dtype=bool)
    blocked[list(S)] = True
    seen = np.zeros(p, dtype=bool)
    seen[x] = True
    frontier = [x]
    while frontier:
        v = frontier.pop()
        for u in np.flatnonzero(moral[v] & ~blocked & ~seen):
            if u == y:
                return False
            seen[u] = True
            frontier.append(int(u))
    return True


class DSeparation:
    """Oracle CI test from a known DAG: p = 1 when d-separated, else 0.

    Parameters
    ----------
    dag : (p, p) bool, ``dag[i, j]`` = edge i -> j
    n_samples : reported sample size (the oracle has no data)
    """

    def __init__(self, dag: ArrayLike, n_samples: int = 10**9) -> None:
        D = np.asarray(dag, dtype=bool)
        if D.ndim != 2 or D.shape[0] != D.shape[1]:
            raise DataError(f"a DAG adjacency must be square, got shape {D.shape}")
        self._dag = D.copy()
        self._n = n_samples

    @property
    def n_variables(self) -> int:
        """p."""
        return int(self._dag.shape[0])

    @property
    def n_samples(self) -> int:
        """The nominal sample size given at construction."""
        return self._n

    def pvalues(self, x: ArrayLike, y: ArrayLike, S: ArrayLike) -> FloatArray:
        """1.0 where ``x[q] ⟂ y[q] | S[q]`` in the DAG, else 0.0."""
        xa, ya, Sa = as_queries(x, y, S, self.n_variables)
        return np.array(
            [
                1.0 if d_separated(self._dag, int(a), int(b), [int(s) for s in row]) else 0.0
                for a, b, row in zip(xa, ya, Sa)
            ]
        )
