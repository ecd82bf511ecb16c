"""Partially directed graphs over variable ids: v-structures, Meek's rules, DAG extension, structure metrics.

A graph over p variables is one boolean matrix ``G`` (p, p):

* ``G[i, j] and G[j, i]``: undirected edge i - j;
* ``G[i, j] and not G[j, i]``: directed edge i -> j;
* neither: no edge.

A skeleton is a symmetric ``G``; a DAG has no undirected edge and no directed
cycle. The functions are pure (no I/O) and vectorised over edges where it pays.

Examples
--------
>>> import numpy as np
>>> dag = np.zeros((3, 3), dtype=bool); dag[0, 2] = dag[1, 2] = True     # 0 -> 2 <- 1
>>> cpdag = cpdag_of_dag(dag)
>>> edges(cpdag)
{'directed': [(0, 2), (1, 2)], 'undirected': []}
>>> chain = np.zeros((3, 3), dtype=bool); chain[0, 1] = chain[1, 2] = True  # 0 -> 1 -> 2: no v-structure
>>> edges(cpdag_of_dag(chain))
{'directed': [], 'undirected': [(0, 1), (1, 2)]}
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedrca.exceptions import DataError

__all__ = [
    "StructureScores",
    "cpdag_of_dag",
    "edges",
    "is_acyclic",
    "meek_rules",
    "orient_colliders",
    "pdag_to_dag",
    "score_structure",
    "structural_hamming_distance",
    "unshielded_triples",
    "v_structures",
    "vote_graphs",
]

BoolArray = NDArray[np.bool_]
IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]


def as_graph(G: ArrayLike, name: str = "graph") -> BoolArray:
    """A validated (p, p) boolean graph without self-loops (a copy)."""
    A = np.array(G, dtype=bool, copy=True)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise DataError(f"{name} must be a square (p, p) matrix, got shape {A.shape}")
    if np.any(np.diag(A)):
        raise DataError(f"{name} has self-loops on its diagonal")
    return A


def _parts(G: BoolArray) -> tuple[BoolArray, BoolArray, BoolArray]:
    """(directed D[i, j] = i -> j, undirected U, adjacency A) of a PDAG."""
    U = G & G.T
    return G & ~G.T, U, G | G.T


def edges(G: ArrayLike) -> dict[str, list[tuple[int, int]]]:
    """Directed edges (i, j) = i -> j and undirected edges (i, j), i < j, in row-major order."""
    A = as_graph(G)
    D, U, _ = _parts(A)
    return {
        "directed": [(int(i), int(j)) for i, j in zip(*np.nonzero(D))],
        "undirected": [(int(i), int(j)) for i, j in zip(*np.nonzero(np.triu(U)))],
    }


def is_acyclic(dag: ArrayLike) -> bool:
    """Whether the directed part of a graph has no directed cycle (Kahn's algorithm)."""
    D, _, _ = _parts(as_graph(dag))
    indeg = D.sum(axis=0)
    alive = np.ones(D.shape[0], dtype=bool)
    while True:
        sources = alive & (indeg == 0)
        if not sources.any():
            return not alive.any()
        alive &= ~sources
        indeg = indeg - D[sources].sum(axis=0)


def unshielded_triples(skeleton: ArrayLike) -> IntArray:
    """Unshielded triples x - z - y (x, y non-adjacent, x < y) of a graph's adjacencies, (T, 3) rows (x, z, y).

    Rows are in lexicographic order of (x, z, y).
    """
    G = as_graph(skeleton, "skeleton")
    A = G | G.T
    p = A.shape[0]
    upper = np.triu(np.ones((p, p), dtype=bool), 1)
    # M[x, z, y] = x - z, z - y, x < y, x not adjacent to y
    M = A[:, :, None] & A[None, :, :] & (upper & ~A)[:, None, :]
    x, z, y = np.nonzero(M)
    return np.column_stack([x, z, y]).astype(np.int64)


def v_structures(dag: ArrayLike) -> set[tuple[int, int, int]]:
    """The v-structures x -> z <- y (x < y, x and y non-adjacent) of a DAG, as (x, z, y)."""
    D, _, A = _parts(as_graph(dag, "dag"))
    p = D.shape[0]
    upper = np.triu(np.ones((p, p), dtype=bool), 1)
    M = D[:, :, None] & D.T[None, :, :] & (upper & ~A)[:, None, :]
    return {(int(a), int(b), int(c)) for a, b, c in zip(*np.nonzero(M))}


def orient_colliders(
    skeleton: ArrayLike, triples: ArrayLike, is_collider: ArrayLike, priority: ArrayLike | None = None
) -> tuple[BoolArray, list[tuple[int, int, int]]]:
    """Orient x -> z <- y for the collider triples; the rest of the skeleton stays undirected.

    Parameters
    ----------
    skeleton : (p, p) bool, symmetric
    triples : (T, 3) unshielded triples (x, z, y)
    is_collider : (T,) bool, z is not in the separating set of x and y
    priority : (T,) float, larger first (e.g. the separating set's p-value); default: the given order

    Returns
    -------
    pdag : (p, p) bool PDAG
    oriented : the colliders applied, in the order applied

    Notes
    -----
    With finite data two colliders can ask for opposite directions of one edge.
    A collider is applied only when neither of its edges already points out of
    z (existing colliders keep priority; the same rule as causal-learn's PC with
    ``uc_priority=2``), in order of decreasing ``priority``, so the best-supported
    separations decide.
    """
    G = as_graph(skeleton, "skeleton")
    if not np.array_equal(G, G.T):
        raise DataError("a skeleton must be symmetric (undirected)")
    T = np.asarray(triples, dtype=np.int64).reshape(-1, 3)
    col = np.asarray(is_collider, dtype=bool).reshape(-1)
    if len(col) != len(T):
        raise DataError(f"is_collider has {len(col)} entries for {len(T)} triples")
    order = (
        np.arange(len(T)) if priority is None else np.argsort(-np.asarray(priority, dtype=np.float64), kind="stable")
    )
    oriented = []
    for t in order:
        if not col[t]:
            continue
        x, z, y = (int(v) for v in T[t])
        # z -> x or z -> y already directed: this collider contradicts an earlier (stronger) one
        if (G[z, x] and not G[x, z]) or (G[z, y] and not G[y, z]):
            continue
        G[z, x] = False
        G[z, y] = False
        oriented.append((x, z, y))
    return G, oriented


def meek_rules(pdag: ArrayLike, rule4: bool = True) -> BoolArray:
    """Orient every undirected edge that Meek's rules R1-R4 force; repeat until nothing changes.

    * R1: a -> b - c, a and c non-adjacent                      => b -> c  (no new v-structure)
    * R2: a -> c -> b and a - b                                  => a -> b  (no cycle)
    * R3: a - c -> b, a - d -> b, c and d non-adjacent, a - b    => a -> b
    * R4: a - c -> d -> b, c and b non-adjacent, a adjacent d, a - b => a -> b

    Each rule is applied to all edges at once; an edge that a rule would orient
    both ways in the same pass (possible only in a PDAG no DAG extends) stays
    undirected.
    """
    G = as_graph(pdag, "pdag")
    p = G.shape[0]
    off = ~np.eye(p, dtype=bool)

    def apply(G: BoolArray, orient: BoolArray) -> tuple[BoolArray, bool]:
        # orient[i, j]: make i -> j (drop j -> i); conflicting pairs are left alone
        orient = orient & ~orient.T
        if not orient.any():
            return G, False
        G = G.copy()
        G[orient.T] = False
        return G, True

    while True:
        changed_any = False
        # R1: b -> c for b - c when some a -> b with a, c non-adjacent
        D, U, A = _parts(G)
        R1 = U & ((D.T.astype(np.int64) @ (~A & off).astype(np.int64)) > 0)
        G, changed = apply(G, R1)
        changed_any |= changed
        # R2: a -> b for a - b when a -> c -> b
        D, U, A = _parts(G)
        R2 = U & ((D.astype(np.int64) @ D.astype(np.int64)) > 0)
        G, changed = apply(G, R2)
        changed_any |= changed
        # R3: a -> b for a - b when a - c -> b and a - d -> b with c, d non-adjacent (c != d)
        D, U, A = _parts(G)
        N = (~A & off).astype(np.int64)
        R3 = np.zeros_like(G)
        for a in np.flatnonzero(U.any(axis=1)):
            K = (U[a][:, None] & D).astype(np.int64)  # K[c, b] = a - c -> b
            R3[a] = U[a] & (np.einsum("cb,cd,db->b", K, N, K) > 0)
        G, changed = apply(G, R3)
        changed_any |= changed
        if rule4:
            # R4: a -> b for a - b when a - c -> d -> b, c and b non-adjacent, a adjacent d
            D, U, A = _parts(G)
            Di = D.astype(np.int64)
            R4 = np.zeros_like(G)
            for a in np.flatnonzero(U.any(axis=1)):
                K1 = (U[a][:, None] & ~A & off).astype(np.int64)  # K1[c, b] = a - c, c not adjacent b
                K2 = (A[a][:, None] & D).astype(np.int64)  # K2[d, b] = a adjacent d, d -> b
                R4[a] = U[a] & (np.einsum("cb,cd,db->b", K1, Di, K2) > 0)
            G, changed = apply(G, R4)
            changed_any |= changed
        if not changed_any:
            return G


def cpdag_of_dag(dag: ArrayLike) -> BoolArray:
    """The CPDAG (essential graph) of a DAG: its skeleton, its v-structures, then Meek's rules."""
    D = as_graph(dag, "dag")
    if np.any(D & D.T) or not is_acyclic(D):
        raise DataError("cpdag_of_dag needs a DAG (directed edges only, no cycle)")
    skeleton = D | D.T
    T = unshielded_triples(skeleton)
    collider = D[T[:, 0], T[:, 1]] & D[T[:, 2], T[:, 1]] if len(T) else np.zeros(0, dtype=bool)
    pdag, _ = orient_colliders(skeleton, T, collider)
    return meek_rules(pdag)


def pdag_to_dag(pdag: ArrayLike) -> tuple[BoolArray, bool]:
    """A DAG extension of a PDAG by Dor & Tarsi (1992); ``exact`` is False when none exists.

    Repeatedly take a vertex x that is a sink (no directed edge out of x among
    the remaining vertices) and whose undirected neighbours are each adjacent to
    all other neighbours of x; direct its undirected edges into x and remove x.
    The result keeps every directed edge and v-structure of the PDAG and adds
    none. A PDAG learned from finite data may admit no extension: then the
    lowest sink (or, with a directed cycle left, the vertex with the fewest
    outgoing edges, whose outgoing edges are reversed) is taken and ``exact`` is
    False; the output is always acyclic.

    Returns
    -------
    dag : (p, p) bool
    exact : whether the PDAG's orientations and v-structures were all kept
    """
    G = as_graph(pdag, "pdag")
    p = G.shape[0]
    D, U, A = _parts(G)
    dag = D.copy()
    alive = np.ones(p, dtype=bool)
    exact = True
    while alive.any():
        out_deg = (D & alive[None, :]).sum(axis=1)
        chosen = -1
        for x in np.flatnonzero(alive & (out_deg == 0)):
            nbrs = np.flatnonzero(A[x] & alive)
            und = np.flatnonzero(U[x] & alive)
            # every undirected neighbour y of x is adjacent to every other neighbour of x
            sub = A[np.ix_(und, nbrs)] | (und[:, None] == nbrs[None, :])
            if sub.all():
                chosen = int(x)
                break
        if chosen < 0:
            exact = False
            sinks = np.flatnonzero(alive & (out_deg == 0))
            if len(sinks):
                chosen = int(sinks[0])
            else:
                live = np.flatnonzero(alive)
                chosen = int(live[np.argmin(out_deg[live])])
                flip = D[chosen] & alive
                dag[chosen, flip] = False
                dag[flip, chosen] = True
        # direct x's remaining undirected edges into x
        und = U[chosen] & alive
        dag[und, chosen] = True
        alive[chosen] = False
    return dag, exact


def structural_hamming_distance(estimate: ArrayLike, truth: ArrayLike) -> int:
    """Pairs of variables whose edge differs: missing, extra, reversed, or undirected where the other is directed.

    Both graphs may be PDAGs; a pair counts once (a reversed edge is one error).
    """
    E = as_graph(estimate, "estimate")
    T = as_graph(truth, "truth")
    if E.shape != T.shape:
        raise DataError(f"graphs differ in size: {E.shape} vs {T.shape}")
    # per unordered pair (i < j): state = (G[i, j], G[j, i]) in {none, ->, <-, -}
    iu = np.triu_indices(E.shape[0], 1)
    differ = (E[iu] != T[iu]) | (E.T[iu] != T.T[iu])
    return int(differ.sum())


@dataclass(frozen=True)
class StructureScores:
    """Structure metrics of an estimated graph against a true DAG.

    Attributes
    ----------
    shd : structural Hamming distance (pairs that differ)
    missing, extra, reversed : edges of the truth absent / edges absent from the truth /
        edges present in both but pointing the other way (undirected ones count as
        not reversed: their orientation error is in ``undirected``)
    undirected : estimated edges left undirected
    precision, recall, f1 : of the arrowheads (i -> j in the estimate that are i -> j in the truth)
    """

    shd: int
    missing: int
    extra: int
    reversed: int
    undirected: int
    precision: float
    recall: float
    f1: float

    def as_dict(self) -> dict[str, float]:
        """Plain values for tables."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def score_structure(estimate: ArrayLike, truth: ArrayLike) -> StructureScores:
    """SHD and arrowhead precision / recall / F1 of an estimate (PDAG or DAG) against a true DAG.

    An arrowhead is a directed edge i -> j; an undirected edge carries none
    (F1 = 2 P R / (P + R), 0 when nothing is right).

    Examples
    --------
    >>> import numpy as np
    >>> truth = np.zeros((3, 3), dtype=bool); truth[0, 1] = truth[1, 2] = True
    >>> est = np.zeros((3, 3), dtype=bool); est[0, 1] = est[2, 1] = True
    >>> s = score_structure(est, truth)
    >>> s.shd, s.reversed, s.precision, s.recall
    (1, 1, 0.5, 0.5)
    """
    E = as_graph(estimate, "estimate")
    T = as_graph(truth, "truth")
    De, Ue, Ae = _parts(E)
    Dt, _, At = _parts(T)
    iu = np.triu_indices(E.shape[0], 1)
    missing = int((At[iu] & ~Ae[iu]).sum())
    extra = int((Ae[iu] & ~At[iu]).sum())
    reversed_ = int((De & Dt.T).sum())
    undirected = int(Ue[iu].sum())
    hits = int((De & Dt).sum())
    n_est, n_true = int(De.sum()), int(Dt.sum())
    precision = hits / n_est if n_est else 0.0
    recall = hits / n_true if n_true else 0.0
    f1 = 2 * precision * recall / (precision + recall) if hits else 0.0
    return StructureScores(
        structural_hamming_distance(E, T), missing, extra, reversed_, undirected, precision, recall, f1
    )


def vote_graphs(graphs: Sequence[ArrayLike], keep_fraction: float) -> BoolArray:
    """Directed edges kept by more than ``keep_fraction`` of the graphs (the naive vote of per-site DAGs).

    Both directions of a pair can survive (then the pair is an undirected edge);
    the result need not be acyclic.
    """
    stack = np.stack([as_graph(g) for g in graphs])
    return np.asarray(stack.sum(axis=0) > keep_fraction * len(stack) + 1e-9, dtype=bool)
