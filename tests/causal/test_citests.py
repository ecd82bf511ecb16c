"""Conditional-independence tests: Fisher-z and G-square against independent computations and causal-learn."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrca.causal import citests
from fedrca.causal.citests import DSeparation, FisherZ, GSquare, TableGSquare, d_separated, table_chunks
from fedrca.exceptions import DataError


def all_queries(p: int, l: int) -> tuple[list[int], list[int], np.ndarray]:
    rows = [
        (x, y, S)
        for x, y in itertools.combinations(range(p), 2)
        for S in itertools.combinations([v for v in range(p) if v not in (x, y)], l)
    ]
    return [r[0] for r in rows], [r[1] for r in rows], np.array([r[2] for r in rows], dtype=int).reshape(len(rows), l)


def gaussian_data(seed: int, n: int = 400, p: int = 6) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    X[:, 1] += X[:, 0]
    X[:, 2] += 0.4 * X[:, 1]
    X[:, 4] += 0.8 * X[:, 2] - 0.5 * X[:, 3]
    return X


def discrete_data(seed: int, n: int = 600) -> np.ndarray:
    rng = np.random.default_rng(seed)
    D = rng.integers(0, 3, size=(n, 6))
    D[:, 1] = (D[:, 0] + rng.integers(0, 2, n)) % 3
    D[:, 2] = np.where(rng.random(n) < 0.7, D[:, 1], D[:, 2])
    D[:, 3] = rng.integers(0, 2, n)  # binary
    D[:, 5] = np.where(rng.random(n) < 0.5, D[:, 3] + D[:, 2] % 2, D[:, 5])
    return D


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fisher_z_equals_the_residual_correlation_with_a_normal_reference(seed):
    """r from the precision matrix equals the correlation of the least-squares residuals on S."""
    X = gaussian_data(seed)
    n = len(X)
    test = FisherZ(X)
    for l in range(4):
        x, y, S = all_queries(6, l)
        p = test.pvalues(x, y, S)
        for q in range(len(x)):
            Z = np.column_stack([np.ones(n), X[:, S[q]]])
            rx = X[:, x[q]] - Z @ np.linalg.lstsq(Z, X[:, x[q]], rcond=None)[0]
            ry = X[:, y[q]] - Z @ np.linalg.lstsq(Z, X[:, y[q]], rcond=None)[0]
            r = np.corrcoef(rx, ry)[0, 1]
            expected = 2 * scipy.stats.norm.sf(abs(np.arctanh(r)) * np.sqrt(n - l - 3))
            assert p[q] == pytest.approx(expected, rel=1e-8, abs=1e-300)


def test_fisher_z_agrees_with_causal_learn():
    from causallearn.utils.cit import CIT

    X = gaussian_data(7, n=300)
    ours, ref = FisherZ(X), CIT(X, "fisherz")
    for l in range(4):
        x, y, S = all_queries(6, l)
        p = ours.pvalues(x, y, S)
        expected = np.array([ref(a, b, list(s)) for a, b, s in zip(x, y, S)])
        # causal-learn computes 2 (1 - Φ(|z|)), which loses the digits of p below ~1e-16
        np.testing.assert_allclose(p, expected, atol=1e-14)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.integers(0, 3))
def test_fisher_z_is_symmetric_and_invariant_to_scale_and_set_order(seed, l):
    rng = np.random.default_rng(seed)
    X = gaussian_data(seed % 17, n=200)
    x, y, S = all_queries(6, l)
    base = FisherZ(X).pvalues(x, y, S)
    scaled = FisherZ(X * rng.uniform(0.1, 10, size=6) + rng.normal(size=6)).pvalues(x, y, S)
    swapped = FisherZ(X).pvalues(y, x, S[:, ::-1])
    np.testing.assert_allclose(scaled, base, rtol=1e-7, atol=1e-12)
    np.testing.assert_allclose(swapped, base, rtol=1e-9, atol=1e-14)
    assert np.all((base >= 0) & (base <= 1))


def test_fisher_z_detects_chain_and_collider():
    rng = np.random.default_rng(0)
    n = 5000
    a, b = rng.normal(size=n), rng.normal(size=n)
    c = a + b + rng.normal(size=n)  # collider a -> c <- b
    d = c + rng.normal(size=n)  # chain a -> c -> d
    test = FisherZ(np.column_stack([a, b, c, d]))
    p = test.pvalues([0, 0, 0, 0], [1, 1, 3, 3], [[2], [3], [2], [1]])
    assert p[0] < 1e-10  # a, b dependent given their common child
    assert p[1] < 1e-3  # ... and given its descendant
    assert p[2] > 0.01  # a ⟂ d | c
    assert p[3] < 1e-10


def test_fisher_z_untestable_queries_are_nan_and_bad_input_is_rejected():
    X = gaussian_data(0, n=6)
    test = FisherZ(X)
    assert np.isnan(test.pvalues([0], [1], [[2, 3, 4]])).all()  # n - |S| - 3 = 0
    assert np.isfinite(test.pvalues([0], [1], [[2, 3]])).all()
    bad = gaussian_data(0)
    bad[3, 2] = np.nan
    with pytest.raises(DataError, match="NaN"):
        FisherZ(bad)
    const = gaussian_data(0)
    const[:, 4] = 1.0
    with pytest.raises(DataError, match=r"constant column\(s\) \[4\]"):
        FisherZ(const)
    with pytest.raises(DataError, match="against itself"):
        test.pvalues([1], [1], [[]])
    with pytest.raises(DataError, match="conditions on one of its own"):
        test.pvalues([1], [2], [[2]])
    with pytest.raises(DataError, match=r"in \[0, 6\)"):
        test.pvalues([1], [9], [[]])


def test_fisher_z_from_correlation_matches_data():
    X = gaussian_data(3)
    x, y, S = all_queries(6, 2)
    direct = FisherZ(X).pvalues(x, y, S)
    via = FisherZ.from_correlation(np.corrcoef(X, rowvar=False), len(X)).pvalues(x, y, S)
    np.testing.assert_array_equal(direct, via)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_g_square_unconditional_equals_scipy_log_likelihood_ratio(seed):
    D = discrete_data(seed)
    test = GSquare(D)
    x, y, S = all_queries(6, 0)
    G2, dof = test.statistics(x, y, S)
    p = test.pvalues(x, y, S)
    for q in range(len(x)):
        table = scipy.stats.contingency.crosstab(D[:, x[q]], D[:, y[q]]).count
        stat, pv, df, _ = scipy.stats.chi2_contingency(table, correction=False, lambda_="log-likelihood")
        assert G2[q] == pytest.approx(stat, rel=1e-10, abs=1e-10)
        assert dof[q] == df
        assert p[q] == pytest.approx(pv, rel=1e-9, abs=1e-300)


@pytest.mark.parametrize("seed", [0, 1])
def test_g_square_conditional_is_the_sum_over_strata(seed):
    """G² and dof given S are the sums of the per-stratum tests (each with its observed levels only)."""
    D = discrete_data(seed, n=300)
    test = GSquare(D)
    for l in (1, 2, 3):
        x, y, S = all_queries(6, l)
        G2, dof = test.statistics(x, y, S)
        p = test.pvalues(x, y, S)
        for q in range(seed, len(x), 5):  # a fifth of the queries: the per-stratum reference is slow
            total, df_total = 0.0, 0
            _, stratum = np.unique(D[:, S[q]], axis=0, return_inverse=True)
            for key in np.unique(stratum):
                rows = stratum.ravel() == key
                table = scipy.stats.contingency.crosstab(D[rows, x[q]], D[rows, y[q]]).count
                if min(table.shape) < 2:
                    continue  # one observed level: no degree of freedom, G = 0
                stat, _, df, _ = scipy.stats.chi2_contingency(table, correction=False, lambda_="log-likelihood")
                total += stat
                df_total += df
            assert G2[q] == pytest.approx(total, rel=1e-9, abs=1e-9)
            assert dof[q] == df_total
            expected = 1.0 if df_total == 0 else scipy.stats.chi2.sf(total, df_total)
            assert p[q] == pytest.approx(expected, rel=1e-9, abs=1e-300)


def test_g_square_agrees_with_causal_learn():
    from causallearn.utils.cit import CIT

    D = discrete_data(5, n=500)
    ours, ref = GSquare(D), CIT(D, "gsq")
    for l in range(4):
        x, y, S = all_queries(6, l)
        np.testing.assert_allclose(
            ours.pvalues(x, y, S), [ref(a, b, list(s)) for a, b, s in zip(x, y, S)], rtol=1e-9, atol=1e-14
        )


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.integers(0, 3))
def test_g_square_properties_for_every_example(seed, l):
    """Non-negative G², p in [0, 1], symmetric in x and y, invariant to relabelling values and to S's order."""
    rng = np.random.default_rng(seed)
    D = discrete_data(seed % 13, n=int(rng.integers(20, 300)))
    x, y, S = all_queries(6, l)
    test = GSquare(D)
    G2, dof = test.statistics(x, y, S)
    p = test.pvalues(x, y, S)
    assert np.all(G2 >= 0) and np.all(dof >= 0) and np.all((p >= 0) & (p <= 1))
    np.testing.assert_array_equal(p[dof == 0], 1.0)
    G2s, dofs = test.statistics(y, x, S[:, ::-1])
    np.testing.assert_allclose(G2s, G2, rtol=1e-10, atol=1e-9)
    np.testing.assert_array_equal(dofs, dof)
    relabelled = np.column_stack([rng.permutation(10)[D[:, j]] * 7 + 3 for j in range(6)])
    G2r, dofr = GSquare(relabelled).statistics(x, y, S)
    np.testing.assert_allclose(G2r, G2, rtol=1e-10, atol=1e-9)
    np.testing.assert_array_equal(dofr, dof)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 50), max_size=40), st.integers(1, 60))
def test_table_chunks_cover_the_queries_in_order_within_the_cells(sizes, cells):
    chunks = list(table_chunks(sizes, cells=cells))
    assert [i for lo, hi in chunks for i in range(lo, hi)] == list(range(len(sizes)))
    assert all(hi - lo == 1 or sum(sizes[lo:hi]) <= cells for lo, hi in chunks)


@pytest.mark.parametrize("seed", range(4))
def test_g_square_batches_cost_the_same_as_one_query_at_a_time(seed, monkeypatch):
    """A batch's tables are counted a few cells at a time (memory of one run of cells, not of the batch):
    the statistics equal the whole batch's, for the local test and for tables counted elsewhere."""
    D = discrete_data(seed, n=200)
    x, y, S = all_queries(6, 2)
    test = GSquare(D)
    G2, dof = test.statistics(x, y, S)
    monkeypatch.setattr(citests, "TABLE_CELLS", 40)  # one or two queries' tables a time
    sizes: list[int] = []

    def count(xa, ya, Sa):
        counts = test.counts(xa, ya, Sa)
        sizes.append(len(counts))
        return counts

    for other in (GSquare(D), TableGSquare(test.levels, len(D), count)):
        G2c, dofc = other.statistics(x, y, S)
        np.testing.assert_allclose(G2c, G2, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(dofc, dof)
    largest_table = int(np.prod(np.sort(test.levels)[-4:]))
    assert len(sizes) > 1 and max(sizes) <= max(40, largest_table)


def test_g_square_accepts_strings_and_rejects_bad_shapes():
    D = np.array([["a", "x"], ["b", "y"], ["a", "x"], ["b", "y"]] * 10)
    p = GSquare(D).pvalues([0], [1], [[]])
    assert p[0] < 1e-5
    with pytest.raises(DataError, match="n_variables >= 2"):
        GSquare(np.zeros((10, 1)))


def test_d_separation_textbook_graphs():
    # 0 -> 2 <- 1, 2 -> 3 ; 4 -> 0
    dag = np.zeros((5, 5), dtype=bool)
    dag[0, 2] = dag[1, 2] = dag[2, 3] = dag[4, 0] = True
    assert d_separated(dag, 0, 1, [])
    assert not d_separated(dag, 0, 1, [2])  # conditioning on the collider
    assert not d_separated(dag, 0, 1, [3])  # ... or on its descendant
    assert d_separated(dag, 4, 3, [2])  # chain blocked
    assert not d_separated(dag, 4, 3, [])
    assert d_separated(dag, 4, 1, [])
    oracle = DSeparation(dag)
    np.testing.assert_array_equal(
        oracle.pvalues([0, 0, 4, 4], [1, 1, 3, 3], [[4], [3], [0], [1]]), [1.0, 0.0, 1.0, 0.0]
    )
