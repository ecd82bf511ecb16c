"""The interdependency graph among plants: from the learned server transition or from the config.

``adjacency[n, m]`` is true when plant n drives plant m (the convention of
:mod:`fedrca.datasets`). A learned graph comes from the server's block
transition Â over the concatenated proprietary states: block Â_mn (rows of
plant m, columns of plant n) is the effect of plant n on plant m, and the edge
n -> m is kept when the block is significantly non-zero under its **null
distribution**. With entry-wise standard errors se (the server artifact's
``A_stderr``) the Wald statistic ``W_mn = sum_ij (Â_ij / se_ij)^2`` of a zero
block is chi-square with P_m P_n degrees of freedom, so the threshold on the
block norm is the chi-square quantile at ``1 - alpha / (M (M - 1))``
(Bonferroni over the blocks). Without standard errors a common entry scale is
estimated robustly from all off-diagonal entries (1.4826 MAD, most blocks
being null in sparse networks) and used in the same test.

Examples
--------
>>> g = InterdependencyGraph.from_edges(["a", "b", "c"], [("a", "b"), ("b", "c")])
>>> sorted(g.descendants("a")), sorted(g.descendants("c"))
(['b', 'c'], [])
>>> InterdependencyGraph.from_json(g.to_json()) == g
True
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedrca.config._json import strict_json
from fedrca.contracts.artifacts import ParameterArtifact
from fedrca.exceptions import ArtifactError, ConfigError, DataError

__all__ = ["InterdependencyGraph", "transitive_closure"]

BoolArray = NDArray[np.bool_]
FloatArray = NDArray[np.float64]


def transitive_closure(adjacency: ArrayLike) -> BoolArray:
    """Reachability in at least one step: ``R[n, m]`` = a directed path n -> ... -> m exists.

    Boolean matrix squaring, O(M^3 log M).

    Examples
    --------
    >>> transitive_closure([[0, 1, 0], [0, 0, 1], [0, 0, 0]]).astype(int).tolist()
    [[0, 1, 1], [0, 0, 1], [0, 0, 0]]
    """
    R = np.asarray(adjacency, dtype=bool).copy()
    if R.ndim != 2 or R.shape[0] != R.shape[1]:
        raise DataError(f"adjacency must be square (M, M), got shape {R.shape}")
    while True:
        # R <- R or R @ R  (paths of length up to twice as long)
        grown = R | ((R.astype(np.int64) @ R.astype(np.int64)) > 0)
        if np.array_equal(grown, R):
            return R
        R = grown


@dataclass(frozen=True, eq=False)
class InterdependencyGraph:
    """Directed graph among plants with optional edge weights and test statistics.

    Attributes
    ----------
    plants : plant names, in order
    adjacency : (M, M) bool, ``adjacency[n, m]`` = plant n drives plant m (no self loops)
    weight : (M, M) float, edge strength (block Frobenius norm for learned graphs; 1 for given edges)
    pvalue : (M, M) float or None, p-value of each block test (learned graphs)
    source : "config", "learned", "complete", "fedpc" (``fedrca graph``) or "given"
    threshold : the significance level used (learned graphs)
    """

    plants: tuple[str, ...]
    adjacency: BoolArray
    weight: FloatArray
    pvalue: FloatArray | None = None
    source: str = "given"
    threshold: float | None = None
    _reach: BoolArray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        M = len(self.plants)
        adj = np.asarray(self.adjacency, dtype=bool)
        if adj.shape != (M, M):
            raise DataError(f"adjacency must be ({M}, {M}) for plants {list(self.plants)}, got {adj.shape}")
        adj = adj.copy()
        np.fill_diagonal(adj, False)
        object.__setattr__(self, "plants", tuple(self.plants))
        object.__setattr__(self, "adjacency", adj)
        object.__setattr__(self, "weight", np.asarray(self.weight, dtype=np.float64).reshape(M, M))
        if self.pvalue is not None:
            object.__setattr__(self, "pvalue", np.asarray(self.pvalue, dtype=np.float64).reshape(M, M))
        object.__setattr__(self, "_reach", transitive_closure(adj))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, InterdependencyGraph):
            return NotImplemented
        return self.plants == other.plants and np.array_equal(self.adjacency, other.adjacency)

    __hash__ = None  # type: ignore[assignment]

    # -- constructors -------------------------------------------------------------------
    @classmethod
    def from_edges(
        cls, plants: Sequence[str], edges: Sequence[tuple[str, str]], source: str = "config"
    ) -> InterdependencyGraph:
        """Graph from directed edges ``(from, to)`` between named plants."""
        names = list(plants)
        adj = np.zeros((len(names), len(names)), dtype=bool)
        for k, (src, dst) in enumerate(edges):
            for end, name in (("from", src), ("to", dst)):
                if name not in names:
                    raise ConfigError(
                        f"edge {end} unknown plant '{name}'; plants are {', '.join(names)}", key=f"graph.edges[{k}]"
                    )
            adj[names.index(src), names.index(dst)] = True
        return cls(tuple(names), adj, adj.astype(np.float64), source=source)

    @classmethod
    def complete(cls, plants: Sequence[str]) -> InterdependencyGraph:
        """Every plant may drive every other (the assumption when nothing is known)."""
        M = len(plants)
        adj = ~np.eye(M, dtype=bool)
        return cls(tuple(plants), adj, adj.astype(np.float64), source="complete")

    @classmethod
    def from_transition(
        cls,
        plants: Sequence[str],
        A: ArrayLike,
        state_dims: Sequence[int],
        stderr: ArrayLike | None = None,
        alpha: float = 0.01,
    ) -> InterdependencyGraph:
        """Learned graph from the server's block transition Â (S, S) over concatenated states.

        Parameters
        ----------
        plants : M plant names in block order
        A : (S, S) learned transition, S = sum(state_dims); block (m, n) = effect of n on m
        state_dims : (M,) state dimension P_m of each plant
        stderr : (S, S) standard errors of Â's entries, or None (robust common scale)
        alpha : family-wise significance level of the M (M - 1) block tests

        Examples
        --------
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> A = 0.01 * rng.normal(size=(4, 4)); A[2:, :2] += 0.5   # plant a drives plant b
        >>> g = InterdependencyGraph.from_transition(["a", "b"], A, [2, 2], stderr=np.full((4, 4), 0.01))
        >>> g.adjacency.astype(int).tolist()
        [[0, 1], [0, 0]]
        """
        A_arr = np.asarray(A, dtype=np.float64)
        dims = [int(d) for d in state_dims]
        M, S = len(plants), int(sum(dims))
        if len(dims) != M:
            raise ArtifactError(f"server artifact has {len(dims)} state blocks for {M} plants {list(plants)}")
        if A_arr.shape != (S, S):
            raise ArtifactError(f"server transition A must be ({S}, {S}) for state dims {dims}, got {A_arr.shape}")
        if not np.all(np.isfinite(A_arr)):
            raise ArtifactError("server transition A contains NaN or inf")
        bounds = np.concatenate([[0], np.cumsum(dims)])
        off = np.ones((S, S), dtype=bool)
        for m in range(M):
            off[bounds[m] : bounds[m + 1], bounds[m] : bounds[m + 1]] = False
        if stderr is None:
            entries = A_arr[off]
            scale = 1.4826 * float(np.median(np.abs(entries - np.median(entries)))) if entries.size else 1.0
            se = np.full((S, S), max(scale, 1e-12))
        else:
            se = np.asarray(stderr, dtype=np.float64)
            if se.shape != (S, S):
                raise ArtifactError(f"A_stderr must be ({S}, {S}), got {se.shape}")
            se = np.maximum(se, 1e-12)
        z2 = (A_arr / se) ** 2
        weight = np.zeros((M, M))
        from scipy.stats import chi2  # at first use (a learned graph): a worker starts without it

        pvalue = np.ones((M, M))
        n_tests = max(M * (M - 1), 1)
        for m in range(M):
            rows = slice(bounds[m], bounds[m + 1])
            for n in range(M):
                if n == m:
                    continue
                cols = slice(bounds[n], bounds[n + 1])
                # W = sum (Â_ij / se_ij)^2 ~ chi2(P_m P_n) when A_mn = 0
                stat = float(z2[rows, cols].sum())
                weight[n, m] = float(np.linalg.norm(A_arr[rows, cols]))
                pvalue[n, m] = float(chi2.sf(stat, dims[m] * dims[n]))
        adjacency = pvalue < alpha / n_tests
        np.fill_diagonal(adjacency, False)
        return cls(tuple(plants), adjacency, weight, pvalue=pvalue, source="learned", threshold=alpha)

    @classmethod
    def from_server_artifact(cls, artifact: ParameterArtifact, alpha: float = 0.01) -> InterdependencyGraph:
        """Learned graph from the server's :class:`~fedrca.contracts.artifacts.ParameterArtifact`."""
        arrays: Mapping[str, Any] = artifact.arrays
        if "A" not in arrays or "state_dims" not in arrays:
            raise ArtifactError("the server artifact has no 'A' / 'state_dims'; retrain with fedrca train")
        plants = artifact.manifest.get("plants")
        if not plants:
            raise ArtifactError("the server artifact's manifest does not name its plants")
        stderr = arrays.get("A_stderr")
        return cls.from_transition(
            list(plants), arrays["A"], [int(d) for d in np.asarray(arrays["state_dims"]).ravel()], stderr, alpha
        )

    # -- queries -------------------------------------------------------------------------
    @property
    def n_plants(self) -> int:
        """M."""
        return len(self.plants)

    @property
    def reachability(self) -> BoolArray:
        """(M, M) bool: ``R[n, m]`` = m is reachable from n along directed edges (n != m)."""
        R = self._reach.copy()
        np.fill_diagonal(R, False)
        return R

    def index(self, plant: str) -> int:
        """Position of a plant."""
        try:
            return self.plants.index(plant)
        except ValueError:
            raise DataError(f"unknown plant '{plant}'; plants are {', '.join(self.plants)}") from None

    def descendants(self, plant: str) -> set[str]:
        """Plants reachable from ``plant`` (where its anomalies can propagate)."""
        k = self.index(plant)
        return {self.plants[m] for m in np.flatnonzero(self.reachability[k])}

    def edges(self) -> list[tuple[str, str]]:
        """Directed edges (from, to) in row-major order."""
        return [(self.plants[n], self.plants[m]) for n, m in zip(*np.nonzero(self.adjacency))]

    def reordered(self, plants: Sequence[str]) -> InterdependencyGraph:
        """The same graph with its plants in the order of ``plants`` (the same set), e.g. a config's order.

        Raises
        ------
        DataError
            when ``plants`` is not the graph's set of plants.
        """
        names = list(plants)
        if sorted(self.plants) != sorted(names):
            raise DataError(f"graph plants {list(self.plants)} differ from the config's {names}")
        order = [self.plants.index(p) for p in names]
        pvalue = None if self.pvalue is None else self.pvalue[np.ix_(order, order)]
        return InterdependencyGraph(
            tuple(names), self.adjacency[np.ix_(order, order)], self.weight[np.ix_(order, order)],
            pvalue=pvalue, source=self.source, threshold=self.threshold,
        )  # fmt: skip

    # -- export ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly description (plants, edges with weights and p-values, source)."""
        edges = []
        for n, m in zip(*np.nonzero(self.adjacency)):
            edge: dict[str, Any] = {
                "from": self.plants[n],
                "to": self.plants[m],
                "weight": round(float(self.weight[n, m]), 6),
            }
            if self.pvalue is not None:
                edge["pvalue"] = float(f"{self.pvalue[n, m]:.6g}")
            edges.append(edge)
        return {
            "plants": list(self.plants),
            "edges": edges,
            "source": self.source,
            "alpha": self.threshold,
            "weights": np.round(self.weight, 6).tolist(),
        }

    def to_json(self) -> str:
        """:meth:`to_dict` as a JSON string."""
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> InterdependencyGraph:
        """Inverse of :meth:`to_dict`."""
        plants = list(data["plants"])
        graph = cls.from_edges(plants, [(e["from"], e["to"]) for e in data["edges"]], source=str(data["source"]))
        weights = np.asarray(data.get("weights", graph.weight), dtype=np.float64)
        return cls(tuple(plants), graph.adjacency, weights, source=str(data["source"]), threshold=data.get("alpha"))

    @classmethod
    def from_json(cls, text: str) -> InterdependencyGraph:
        """Inverse of :meth:`to_json`."""
        try:
            return cls.from_dict(strict_json(text))
        except ConfigError as exc:
            raise DataError(f"not an interdependency graph JSON document ({exc.reason})") from None
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"not an interdependency graph JSON document ({exc})") from None
