"""Synthetic causal structures for structure learning: random DAGs, linear-Gaussian and discrete data, site splits.

All generators are pure and seeded (``numpy.random.default_rng(seed)``).

Examples
--------
>>> dag = random_dag(6, expected_degree=2.0, seed=1)
>>> X = linear_gaussian(dag, 100, seed=1)
>>> X.shape, dag.shape, bool((dag & dag.T).any())
((100, 6), (6, 6), False)
>>> [len(part) for part in split_sites(1000, 4, seed=0)]
[327, 417, 129, 127]
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedrca.exceptions import DataError

__all__ = ["discrete_network", "linear_gaussian", "random_dag", "split_sites", "topological_order"]

BoolArray = NDArray[np.bool_]
FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


def random_dag(
    n_variables: int, expected_degree: float = 2.0, seed: int = 0, max_parents: int | None = None
) -> BoolArray:
    """An Erdős–Rényi DAG (p, p), ``dag[i, j]`` = i -> j, with randomly permuted variable order.

    Each pair i < j (in a random causal order) gets an edge with probability
    ``expected_degree / (p - 1)``, so a variable has ``expected_degree``
    neighbours on average; ``max_parents`` drops the surplus parents of a node.
    """
    if n_variables < 2:
        raise DataError(f"a DAG needs at least 2 variables, got {n_variables}")
    rng = np.random.default_rng(seed)
    p = n_variables
    prob = min(1.0, expected_degree / (p - 1))
    lower = np.tril(rng.random((p, p)) < prob, -1)  # lower[j, i] = i -> j in causal order (i < j)
    order_adj = lower.T
    if max_parents is not None:
        for j in range(p):
            parents = np.flatnonzero(order_adj[:, j])
            if len(parents) > max_parents:
                drop = rng.choice(parents, len(parents) - max_parents, replace=False)
                order_adj[drop, j] = False
    perm = rng.permutation(p)
    dag = np.zeros((p, p), dtype=bool)
    dag[np.ix_(perm, perm)] = order_adj
    return dag


def topological_order(dag: ArrayLike) -> IntArray:
    """A topological order of a DAG (parents before children)."""
    D = np.asarray(dag, dtype=bool)
    indeg = D.sum(axis=0)
    alive = np.ones(D.shape[0], dtype=bool)
    order: list[int] = []
    while alive.any():
        sources = np.flatnonzero(alive & (indeg == 0))
        if not len(sources):
            raise DataError("the graph has a directed cycle")
        order.extend(int(s) for s in sources)
        alive[sources] = False
        indeg = indeg - D[sources].sum(axis=0)
    return np.array(order, dtype=np.int64)


def linear_gaussian(
    dag: ArrayLike,
    n_samples: int,
    seed: int = 0,
    weight_range: tuple[float, float] = (0.5, 2.0),
    noise_range: tuple[float, float] = (0.5, 1.5),
) -> FloatArray:
    """Samples (n, p) of the linear SEM ``X_j = Σ_{i -> j} w_ij X_i + e_j``.

    Weights are uniform in ±``weight_range`` (random sign), noise e_j is
    Gaussian with a standard deviation uniform in ``noise_range``.
    """
    D = np.asarray(dag, dtype=bool)
    rng = np.random.default_rng(seed)
    p = D.shape[0]
    W = rng.uniform(*weight_range, size=(p, p)) * rng.choice([-1.0, 1.0], size=(p, p)) * D
    sd = rng.uniform(*noise_range, size=p)
    X = rng.normal(size=(n_samples, p)) * sd
    for j in topological_order(D):
        parents = np.flatnonzero(D[:, j])
        if len(parents):
            # X_j = Σ w_ij X_i + e_j
            X[:, j] += X[:, parents] @ W[parents, j]
    return X


def discrete_network(
    dag: ArrayLike,
    n_samples: int,
    seed: int = 0,
    levels: ArrayLike | None = None,
    concentration: float = 0.5,
) -> tuple[IntArray, IntArray]:
    """Samples (n, p) of a discrete Bayesian network on the DAG, and the number of levels of each variable.

    Each variable has 2 or 3 levels (drawn at random unless ``levels`` is given);
    each row of each conditional probability table is Dirichlet(``concentration``)
    (a small concentration gives strong, detectable dependencies).
    """
    D = np.asarray(dag, dtype=bool)
    rng = np.random.default_rng(seed)
    p = D.shape[0]
    r: IntArray = np.asarray(rng.integers(2, 4, size=p) if levels is None else levels, dtype=np.int64).reshape(p)
    X = np.zeros((n_samples, p), dtype=np.int64)
    for j in topological_order(D):
        parents = np.flatnonzero(D[:, j])
        n_configs = int(np.prod(r[parents])) if len(parents) else 1
        cpt = rng.dirichlet(np.full(int(r[j]), concentration), size=n_configs)  # (configs, r_j)
        config = np.zeros(n_samples, dtype=np.int64)
        for i in parents:
            config = config * r[i] + X[:, i]
        # inverse-CDF draw of X_j from its parents' configuration row
        cdf = np.cumsum(cpt[config], axis=1)
        u = rng.random(n_samples)[:, None]
        X[:, j] = np.minimum((u > cdf).sum(axis=1), r[j] - 1)
    return X, r


def split_sites(n_samples: int, n_sites: int, seed: int = 0, min_share: float = 0.5) -> list[IntArray]:
    """Row indices of an uneven random split into sites, each with at least ``min_share`` of an even share.

    Every site first gets ``floor(min_share * n / K)`` rows; the rest is spread
    by Dirichlet(1) proportions; rows are assigned at random.
    """
    if n_sites < 1 or n_samples < n_sites:
        raise DataError(f"cannot split {n_samples} samples into {n_sites} sites")
    rng = np.random.default_rng(seed)
    floor = int(min_share * n_samples / n_sites)
    rest = n_samples - floor * n_sites
    sizes = floor + rng.multinomial(rest, rng.dirichlet(np.ones(n_sites)))
    perm = rng.permutation(n_samples)
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    return [np.sort(perm[bounds[k] : bounds[k + 1]]) for k in range(n_sites)]
