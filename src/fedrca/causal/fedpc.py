"""FedPC: the federated PC algorithm (P4) that learns a causal graph from sites that cannot pool their data.

Every site holds samples of the same variables; the server never sees a sample.

**Anonymisation.** Before anything leaves it, a site sorts its variable names
(:func:`anonymise`, character by character) and refers to variable ``names[i]``
as id ``i``. Sites with the same variables agree on the ids without talking to
each other, and the server learns no name.

**Skeleton, layer by layer** (FedSkele). Start from the complete graph G_0 and l = 0:

1. the server sends G_l (:class:`SkeletonRequest`);
2. each site removes every edge x - y of G_l for which its own data find some
   S ⊆ adj(x) \\ {y} or S ⊆ adj(y) \\ {x} (neighbours in G_l), |S| = l, with
   ``p(x ⟂ y | S) > alpha`` (:func:`site_layer`, the order-independent "stable"
   PC step), and returns its skeleton (:class:`SkeletonReply`);
3. the server keeps an edge when **more than** ``keep_fraction`` (0.3) of the
   sites kept it (:func:`merge_skeletons`): that is G_{l+1};
4. l <- l + 1 while some variable still has more than l neighbours (a pair with
   l neighbours besides the partner left to test); otherwise the skeleton is final.
   (Stopping once l exceeds every neighbour count, as P4 states it, only adds
   layers in which no test is possible: the skeleton is the same.)

Only adjacency matrices travel in this phase.

**Consistent separating sets** (FedOrien). For every unshielded triple
x - z - y of the final skeleton the server asks each site for the pair (x, y)
(:class:`SepsetRequest`); the site tests every subset of adj(x) \\ {y} and of
adj(y) \\ {x} (up to ``max_cond`` variables) and returns the one with the highest
p-value with that p-value (:class:`SepsetReply`). The server keeps the highest
over sites and orients x -> z <- y when z is not in it (strongest separations
first, :func:`fedrca.causal.pdag.orient_colliders`), then applies Meek's rules R1-R4:
the result is a CPDAG; a DAG extension comes from Dor & Tarsi's algorithm.

What leaves a site is exactly: adjacency matrices (:class:`SkeletonReply`), and
sets of variable ids with p-values (:class:`SepsetReply`) —
``tests/causal/test_fedpc.py`` checks the messages. Every message is an immutable,
validated value object with a JSON encoding (:func:`encode_message`,
:func:`decode_message`) for crossing a process boundary.

Examples
--------
>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> def sample(n):          # a -> c <- b,  c -> d
...     a, b = rng.normal(size=n), rng.normal(size=n)
...     c = a + b + rng.normal(size=n)
...     return np.column_stack([a, b, c, c + rng.normal(size=n)])
>>> sites = [FedPCSite(sample(n), ["a", "b", "c", "d"]) for n in (400, 700, 900)]
>>> result = FedPCServer(n_variables=4, alpha=0.01).run([s.handle for s in sites])
>>> names, cpdag = sites[0].translate(result)
>>> sorted((names[i], names[j]) for i, j in zip(*np.nonzero(cpdag & ~cpdag.T)))
[('a', 'c'), ('b', 'c'), ('c', 'd')]
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, ClassVar, Literal

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

from fedrca.causal.citests import CITest, FisherZ, GSquare, as_queries, contingency_counts
from fedrca.causal.pdag import meek_rules, orient_colliders, pdag_to_dag, unshielded_triples
from fedrca.causal.secagg import KeyReply, KeyRequest, MaskedVector, SessionKeys, encode_counts, encode_fixed
from fedrca.causal.sufficient import (
    LevelsReply,
    LevelsRequest,
    StatsRequest,
    code_against,
    moment_vector,
    scatter_vector,
)
from fedrca.causal.wire import Message, decode_message, encode_message, register
from fedrca.contracts.deadletter import DeadLetterReason as Reason
from fedrca.exceptions import DataError, MessageError
from fedrca.privacy.ledger import PrivacyLedger
from fedrca.privacy.mechanisms import private_scatter_vector

__all__ = [
    "MAX_QUERIES",
    "FedPCResult",
    "FedPCServer",
    "FedPCSite",
    "LayerRecord",
    "ResultMessage",
    "SepsetReply",
    "SepsetRequest",
    "SkeletonReply",
    "SkeletonRequest",
    "aggregate_to_groups",
    "anonymise",
    "best_separating_sets",
    "check_layer",
    "decode_message",
    "encode_message",
    "fedpc",
    "layer_queries",
    "layer_size",
    "merge_skeletons",
    "needs_layer",
    "site_layer",
]

BoolArray = NDArray[np.bool_]
IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]
TestKind = Literal["fisher-z", "g-square"]

#: queries tested in one vectorised call (bounds the memory of one batch)
_BATCH = 200_000
#: ids in one block of queries (rows x (2 + l)): with deep conditioning sets a block has fewer rows
_BLOCK_ELEMENTS = 1 << 22
#: refuse a skeleton layer or a separating-set search of more CI queries than this (run time: a
#: dense skeleton needs max_cond); memory does not grow with it, queries are made and tested by block
MAX_QUERIES = 20_000_000


# ----------------------------------------------------------------------------- anonymisation
def anonymise(names: Sequence[str]) -> tuple[str, ...]:
    """The site's id -> name table: names sorted character by character (id i = position i).

    Sites with the same variables get the same table without communicating.

    Examples
    --------
    >>> anonymise(["Theft", "Theatre", "Apple"])
    ('Apple', 'Theatre', 'Theft')
    """
    labels = [str(n) for n in names]
    if len(set(labels)) != len(labels):
        dup = sorted({n for n in labels if labels.count(n) > 1})
        raise DataError(f"variable names must be unique; repeated: {', '.join(dup)}")
    return tuple(sorted(labels))


# ----------------------------------------------------------------------------- validation helpers
def _skeleton_array(value: Any, what: str) -> BoolArray:
    """A read-only (p, p) bool, symmetric, zero-diagonal adjacency matrix, or MessageError."""
    try:
        arr = np.asarray(value)
    except Exception as exc:  # pragma: no cover - numpy accepts nearly anything
        raise MessageError(Reason.BAD_ADJACENCY, f"{what}: not an array ({exc})") from None
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1] or arr.shape[0] < 2:
        raise MessageError(Reason.BAD_ADJACENCY, f"{what}: adjacency must be (p, p) with p >= 2, got shape {arr.shape}")
    if arr.dtype != np.bool_:
        if arr.dtype.kind not in "iub" or not np.isin(arr, (0, 1)).all():
            raise MessageError(Reason.BAD_ADJACENCY, f"{what}: adjacency entries must be 0/1 or bool")
        arr = arr.astype(bool)
    else:
        arr = arr.copy()
    if not np.array_equal(arr, arr.T):
        raise MessageError(Reason.BAD_ADJACENCY, f"{what}: a skeleton must be symmetric")
    if arr.diagonal().any():
        raise MessageError(Reason.BAD_ADJACENCY, f"{what}: a skeleton has no self-loops")
    arr.flags.writeable = False
    return arr


def _pairs_array(value: Any, what: str) -> IntArray:
    arr = np.asarray(value if len(value) else np.zeros((0, 2)), dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise MessageError(Reason.BAD_PAIRS, f"{what}: pairs must be (K, 2) variable ids, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)) or np.any(arr < 0):
        raise MessageError(Reason.BAD_PAIRS, f"{what}: pair ids must be non-negative integers")
    out = arr.astype(np.int64)
    if np.any(out[:, 0] >= out[:, 1]):
        raise MessageError(Reason.BAD_PAIRS, f"{what}: every pair (x, y) must have x < y")
    out.flags.writeable = False
    return out


# ----------------------------------------------------------------------------- messages
def _edge_list(adjacency: BoolArray) -> list[list[int]]:
    return [[int(i), int(j)] for i, j in zip(*np.nonzero(np.triu(adjacency, 1)))]


def _from_edge_list(n: Any, edges: Any, what: str) -> BoolArray:
    if not isinstance(n, int) or n < 2:
        raise MessageError(Reason.BAD_ADJACENCY, f"{what}: n_variables must be an integer >= 2")
    A = np.zeros((n, n), dtype=bool)
    try:
        for i, j in edges:
            if not (isinstance(i, int) and isinstance(j, int) and 0 <= i < n and 0 <= j < n and i != j):
                raise ValueError(f"edge ({i}, {j})")
            A[i, j] = A[j, i] = True
    except (TypeError, ValueError) as exc:
        raise MessageError(
            Reason.BAD_ADJACENCY, f"{what}: edges must be pairs of distinct ids in [0, {n}) ({exc})"
        ) from None
    return A


@register
@dataclass(frozen=True, eq=False)
class SkeletonRequest(Message):
    """Server -> site: the skeleton at the start of layer ``layer`` and the test level.

    Attributes
    ----------
    layer : conditioning-set size l of this layer, >= 0
    adjacency : (p, p) bool, symmetric, the merged skeleton G_l (read-only)
    alpha : significance level of the site's CI tests, in (0, 1)
    """

    kind: ClassVar[str] = "skeleton_request"
    layer: int
    adjacency: BoolArray
    alpha: float

    def __post_init__(self) -> None:
        if not isinstance(self.layer, int | np.integer) or self.layer < 0:
            raise MessageError(Reason.BAD_LAYER, f"layer must be an integer >= 0, got {self.layer!r}")
        object.__setattr__(self, "layer", int(self.layer))
        object.__setattr__(self, "adjacency", _skeleton_array(self.adjacency, "skeleton request"))
        if not 0.0 < float(self.alpha) < 1.0:
            raise MessageError(Reason.BAD_FIELD, f"alpha must be in (0, 1), got {self.alpha!r}")
        object.__setattr__(self, "alpha", float(self.alpha))

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "type": self.kind,
            "layer": self.layer,
            "alpha": self.alpha,
            "n_variables": int(self.adjacency.shape[0]),
            "edges": _edge_list(self.adjacency),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SkeletonRequest:
        """Inverse of :meth:`to_dict`."""
        A = _from_edge_list(data["n_variables"], data["edges"], cls.kind)
        return cls(layer=data["layer"], adjacency=A, alpha=data["alpha"])


@register
@dataclass(frozen=True, eq=False)
class SkeletonReply(Message):
    """Site -> server: the site's skeleton at the end of layer ``layer`` (nothing else).

    Attributes
    ----------
    layer : the layer answered
    adjacency : (p, p) bool, symmetric (read-only)
    """

    kind: ClassVar[str] = "skeleton_reply"
    layer: int
    adjacency: BoolArray

    def __post_init__(self) -> None:
        if not isinstance(self.layer, int | np.integer) or self.layer < 0:
            raise MessageError(Reason.BAD_LAYER, f"layer must be an integer >= 0, got {self.layer!r}")
        object.__setattr__(self, "layer", int(self.layer))
        object.__setattr__(self, "adjacency", _skeleton_array(self.adjacency, "skeleton reply"))

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "type": self.kind,
            "layer": self.layer,
            "n_variables": int(self.adjacency.shape[0]),
            "edges": _edge_list(self.adjacency),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SkeletonReply:
        """Inverse of :meth:`to_dict`."""
        return cls(layer=data["layer"], adjacency=_from_edge_list(data["n_variables"], data["edges"], cls.kind))


@register
@dataclass(frozen=True, eq=False)
class SepsetRequest(Message):
    """Server -> site: the final skeleton and the non-adjacent pairs that need a separating set.

    Attributes
    ----------
    adjacency : (p, p) bool, the final skeleton (candidates come from its neighbourhoods)
    pairs : (K, 2) int, pairs (x, y), x < y, non-adjacent, ends of unshielded triples
    max_size : largest separating set to try (-1 = no limit)
    """

    kind: ClassVar[str] = "sepset_request"
    adjacency: BoolArray
    pairs: IntArray
    max_size: int = -1

    def __post_init__(self) -> None:
        adj = _skeleton_array(self.adjacency, "separating-set request")
        pairs = _pairs_array(self.pairs, "separating-set request")
        p = adj.shape[0]
        if len(pairs) and (pairs.max() >= p or adj[pairs[:, 0], pairs[:, 1]].any()):
            raise MessageError(Reason.BAD_PAIRS, f"separating-set request: pairs must be non-adjacent ids in [0, {p})")
        if not isinstance(self.max_size, int | np.integer) or self.max_size < -1:
            raise MessageError(Reason.BAD_FIELD, f"max_size must be an integer >= -1, got {self.max_size!r}")
        object.__setattr__(self, "adjacency", adj)
        object.__setattr__(self, "pairs", pairs)
        object.__setattr__(self, "max_size", int(self.max_size))

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "type": self.kind,
            "n_variables": int(self.adjacency.shape[0]),
            "edges": _edge_list(self.adjacency),
            "pairs": self.pairs.tolist(),
            "max_size": self.max_size,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SepsetRequest:
        """Inverse of :meth:`to_dict`."""
        A = _from_edge_list(data["n_variables"], data["edges"], cls.kind)
        return cls(adjacency=A, pairs=data["pairs"], max_size=data["max_size"])


@register
@dataclass(frozen=True, eq=False)
class SepsetReply(Message):
    """Site -> server: per requested pair, the site's best separating set and its p-value (nothing else).

    Attributes
    ----------
    pairs : (K, 2) int, the requested pairs (x, y), x < y
    sepsets : K sorted tuples of variable ids (neither x nor y)
    pvalues : (K,) float in [0, 1], p-value of ``x ⟂ y | sepset`` on the site's data (read-only)
    """

    kind: ClassVar[str] = "sepset_reply"
    pairs: IntArray
    sepsets: tuple[tuple[int, ...], ...]
    pvalues: FloatArray

    def __post_init__(self) -> None:
        pairs = _pairs_array(self.pairs, "separating-set reply")
        try:
            sepsets = tuple(tuple(sorted(int(v) for v in s)) for s in self.sepsets)
        except (TypeError, ValueError) as exc:
            raise MessageError(Reason.BAD_SEPSETS, f"separating sets must be sets of integer ids ({exc})") from None
        pv = np.array(self.pvalues, dtype=np.float64).reshape(-1)
        if len(sepsets) != len(pairs) or len(pv) != len(pairs):
            raise MessageError(
                Reason.BAD_SEPSETS, f"{len(pairs)} pairs need as many separating sets and p-values, "
                f"got {len(sepsets)} and {len(pv)}"
            )  # fmt: skip
        for (x, y), s in zip(pairs.tolist(), sepsets):
            if len(set(s)) != len(s) or x in s or y in s or any(v < 0 for v in s):
                raise MessageError(
                    Reason.BAD_SEPSETS, f"separating set {s} of ({x}, {y}) must be distinct ids other than x, y"
                )
        if not np.all((pv >= 0.0) & (pv <= 1.0)):
            raise MessageError(Reason.BAD_PVALUES, "p-values must be finite and in [0, 1]")
        pv.flags.writeable = False
        object.__setattr__(self, "pairs", pairs)
        object.__setattr__(self, "sepsets", sepsets)
        object.__setattr__(self, "pvalues", pv)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (p-values round-trip exactly)."""
        return {
            "type": self.kind,
            "pairs": self.pairs.tolist(),
            "sepsets": [list(s) for s in self.sepsets],
            "pvalues": [float(v) for v in self.pvalues],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SepsetReply:
        """Inverse of :meth:`to_dict`."""
        return cls(pairs=data["pairs"], sepsets=tuple(data["sepsets"]), pvalues=data["pvalues"])


@register
@dataclass(frozen=True, eq=False)
class ResultMessage(Message):
    """Server -> sites: the learned CPDAG and its DAG extension over variable ids.

    Attributes
    ----------
    cpdag : (p, p) bool PDAG (``G[i, j] and not G[j, i]`` = i -> j; both = undirected)
    dag : (p, p) bool DAG extension
    """

    kind: ClassVar[str] = "fedpc_result"
    cpdag: BoolArray
    dag: BoolArray

    def __post_init__(self) -> None:
        for name in ("cpdag", "dag"):
            arr = np.array(getattr(self, name), dtype=bool)
            if arr.ndim != 2 or arr.shape[0] != arr.shape[1] or arr.diagonal().any():
                raise MessageError(Reason.BAD_GRAPH, f"{name} must be (p, p) bool without self-loops")
            arr.flags.writeable = False
            object.__setattr__(self, name, arr)
        if self.cpdag.shape != self.dag.shape:
            raise MessageError(Reason.BAD_GRAPH, "cpdag and dag differ in size")

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (arcs i -> j; an undirected CPDAG edge is two arcs)."""
        return {
            "type": self.kind,
            "n_variables": int(self.cpdag.shape[0]),
            "cpdag_arcs": [[int(i), int(j)] for i, j in zip(*np.nonzero(self.cpdag))],
            "dag_arcs": [[int(i), int(j)] for i, j in zip(*np.nonzero(self.dag))],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ResultMessage:
        """Inverse of :meth:`to_dict`."""
        n = data["n_variables"]
        cp = np.zeros((n, n), dtype=bool)
        dg = np.zeros((n, n), dtype=bool)
        for target, key in ((cp, "cpdag_arcs"), (dg, "dag_arcs")):
            for i, j in data[key]:
                target[i, j] = True
        return cls(cpdag=cp, dag=dg)


Request = SkeletonRequest | SepsetRequest
Reply = SkeletonReply | SepsetReply


# ----------------------------------------------------------------------------- skeleton (pure)
#: subset tables of at most this many ids are kept for reuse (64 of them: at most 32 MB)
_CACHED_IDS = 1 << 16


@lru_cache(maxsize=64)
def _cached_combinations(n: int, k: int) -> IntArray:
    return _make_combinations(n, k)


def _make_combinations(n: int, k: int) -> IntArray:
    out = np.fromiter(itertools.chain.from_iterable(itertools.combinations(range(n), k)), dtype=np.int64)
    out = out.reshape(math.comb(n, k), k)
    out.flags.writeable = False
    return out


def _combinations(n: int, k: int) -> IntArray:
    """All k-subsets of range(n) in lexicographic order, (C(n, k), k); for C(n, k) up to a block's rows.

    Small tables (the common case: every variable's neighbourhood at every layer) are cached.
    """
    if math.comb(n, k) * max(k, 1) <= _CACHED_IDS:
        return _cached_combinations(n, k)
    return _make_combinations(n, k)


def _block_rows(width: int) -> int:
    """Queries of ``width`` ids in one block: at most ``_BATCH``, and at most ``_BLOCK_ELEMENTS`` ids."""
    return max(1, min(_BATCH, _BLOCK_ELEMENTS // max(width, 1)))


def _combination_chunks(n: int, k: int, rows: int) -> Iterator[IntArray]:
    """The k-subsets of range(n) in lexicographic order, in arrays of at most ``rows`` rows.

    Memory is that of one chunk however many subsets there are (``C(30, 15)`` is 155 million);
    ``tests/causal/test_fedpc.py::test_combination_chunks_are_the_lexicographic_subsets`` checks
    the order and the chunking.
    """
    if math.comb(n, k) <= min(rows, _BATCH):
        yield _combinations(n, k)
        return
    subsets = itertools.combinations(range(n), k)
    while True:
        flat = np.fromiter(itertools.chain.from_iterable(itertools.islice(subsets, rows)), dtype=np.int64)
        if not flat.size:
            return
        yield flat.reshape(-1, k)


def needs_layer(adjacency: ArrayLike, layer: int) -> bool:
    """Whether layer l can test anything: some variable has more than l neighbours."""
    A = np.asarray(adjacency, dtype=bool)
    return bool(A.size) and int(A.sum(axis=1).max()) > layer


def layer_size(adjacency: ArrayLike, layer: int) -> int:
    """CI queries layer l generates at most: ``Σ_x d_x C(d_x - 1, l)`` over the degrees d_x of the skeleton."""
    degrees = np.asarray(adjacency, dtype=bool).sum(axis=1).tolist()
    return sum(d * math.comb(d - 1, layer) for d in degrees if d > layer)


def check_layer(adjacency: ArrayLike, layer: int) -> None:
    """Refuse a skeleton layer of more than ``MAX_QUERIES`` CI queries (run time; memory is per block).

    Raises
    ------
    DataError
        Naming the layer, its size and the ``max_cond`` that avoids it.
    """
    total = layer_size(adjacency, layer)
    if total > MAX_QUERIES:
        top = int(np.asarray(adjacency, dtype=bool).sum(axis=1).max())
        raise DataError(
            f"layer {layer} of the skeleton would run {total:,} CI tests (neighbourhoods of up to {top} variables; "
            f"the limit is {MAX_QUERIES:,}): the variables stay dependent given {layer - 1} others, bound the "
            f"conditioning sets with max_cond at most {layer - 1} (fedrca graph --max-cond N)"
        )


def _layer_blocks(A: BoolArray, layer: int, skipped: BoolArray) -> Iterator[IntArray]:
    """The distinct queries of layer l, generated per variable x (and per neighbour y when x has many).

    ``skipped`` (p, p) is read at each step, so edges decided meanwhile are left out. A block holds
    at most ``_BATCH`` queries (a neighbour's subsets are cut into chunks when they are more).
    """
    rows_max = _block_rows(layer + 2)
    for x in range(A.shape[0]):
        nb = np.flatnonzero(A[x])
        d = len(nb)
        if d - 1 < layer:
            continue
        m = math.comb(d - 1, layer)
        # others[j] = nb without nb[j]: positions 0..d-2 shifted past j
        pos = np.arange(d - 1)[None, :]
        others = nb[pos + (pos >= np.arange(d)[:, None])]  # (d, d-1)
        # one block per x, or per (x, y) and chunk of subsets when x's block would be too large
        if d * m <= rows_max:
            parts: Iterator[tuple[IntArray, IntArray]] = iter([(np.arange(d), _combinations(d - 1, layer))])
        else:
            parts = ((np.array([j]), C) for j in range(d) for C in _combination_chunks(d - 1, layer, rows_max))
        for js, C in parts:
            ys = np.repeat(nb[js], len(C))
            S = others[js][:, C].reshape(len(ys), layer)  # (len(js) * m, l)
            xs = np.full(len(ys), x)
            rows = np.column_stack([np.minimum(xs, ys), np.maximum(xs, ys), S])
            keep = ~skipped[rows[:, 0], rows[:, 1]]
            if layer:
                # (x, y, S) with y < x and S ⊆ adj(y) was generated at y's turn already
                keep &= ~((ys < x) & A[ys[:, None], S].all(axis=1))
            else:
                keep &= ys > x
            if keep.any():
                yield rows[keep].astype(np.int64)


def layer_queries(adjacency: ArrayLike, layer: int, skip: ArrayLike | None = None) -> IntArray:
    """The distinct CI queries of layer l, (Q, 2 + l) rows ``(x, y, S...)`` with x < y and S sorted.

    For every edge x - y of the skeleton: every S ⊆ adj(x) \\ {y} and every
    S ⊆ adj(y) \\ {x} with |S| = l. Edges marked in ``skip`` (p, p) are left out.
    """
    A = np.asarray(adjacency, dtype=bool)
    skipped = np.zeros_like(A) if skip is None else np.asarray(skip, dtype=bool)
    blocks = list(_layer_blocks(A, layer, skipped))
    if not blocks:
        return np.zeros((0, 2 + layer), dtype=np.int64)
    return np.concatenate(blocks)


def site_layer(test: CITest, adjacency: ArrayLike, layer: int, alpha: float) -> BoolArray:
    """One site's PC step at layer l (order-independent): the skeleton minus the edges found independent.

    Parameters
    ----------
    test : the site's CI test
    adjacency : (p, p) bool, symmetric start skeleton G_l (neighbourhoods are taken from it)
    layer : conditioning-set size l
    alpha : an edge x - y goes when some query of it has ``p > alpha``; NaN (untestable) keeps it

    Returns
    -------
    (p, p) bool symmetric skeleton

    Notes
    -----
    Queries are generated and tested in blocks; an edge already found independent
    gets no further test (the decision is the same: the neighbourhoods stay those
    of G_l), which bounds memory and saves most tests of the high layers. A layer of more than
    :data:`MAX_QUERIES` queries is refused (:func:`check_layer`): a site does not take a request
    that would run without end.
    """
    A = np.asarray(adjacency, dtype=bool)
    check_layer(A, layer)
    removed = np.zeros_like(A)
    pending: list[IntArray] = []
    size = 0

    def flush() -> None:
        block = np.concatenate(pending)
        pending.clear()
        block = block[~removed[block[:, 0], block[:, 1]]]
        if len(block):
            p = test.pvalues(block[:, 0], block[:, 1], block[:, 2:])
            indep = p > alpha  # NaN compares False: an untestable edge stays
            removed[block[indep, 0], block[indep, 1]] = True

    for rows in _layer_blocks(A, layer, removed):
        pending.append(rows)
        size += len(rows)
        if size >= _BATCH:
            flush()
            size = 0
    if pending:
        flush()
    removed |= removed.T
    return A & ~removed


def merge_skeletons(adjacencies: Sequence[ArrayLike], keep_fraction: float) -> tuple[BoolArray, IntArray]:
    """The server's vote: an edge stays when more than ``keep_fraction`` of the K skeletons keep it.

    Returns
    -------
    merged : (p, p) bool
    votes : (p, p) int, how many sites kept each edge
    """
    stack = np.stack([np.asarray(a, dtype=bool) for a in adjacencies])
    votes = stack.sum(axis=0).astype(np.int64)
    # keep when votes / K > keep_fraction (the 1e-9 absorbs float error in keep_fraction * K)
    merged = votes > keep_fraction * len(stack) + 1e-9
    return merged, votes


# ----------------------------------------------------------------------------- separating sets (pure)
def best_separating_sets(
    test: CITest, adjacency: ArrayLike, pairs: ArrayLike, max_size: int | None = None
) -> tuple[list[tuple[int, ...]], FloatArray]:
    """For each pair (x, y): the subset of adj(x) \\ {y} or adj(y) \\ {x} with the highest p-value, and that p-value.

    Sizes 0 .. ``max_size`` (default: every size). Ties go to the smaller set,
    then the lexicographically first. A pair whose every query is untestable
    (NaN) reports the empty set with p = 0 (no evidence of independence).

    Returns
    -------
    sepsets : K sorted tuples of ids
    pvalues : (K,) float

    Notes
    -----
    The queries are made and tested block by block (:func:`_level_queries`), each query once,
    and only the best set of each pair so far is kept: memory is that of a block however many
    queries the search runs (at most :data:`MAX_QUERIES`, counted before it starts).
    """
    A = np.asarray(adjacency, dtype=bool)
    P = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    K = len(P)
    best_p = np.full(K, -1.0)
    best_set: list[tuple[int, ...]] = [()] * K
    if K == 0:
        return [], np.zeros(0)
    ids = np.arange(A.shape[0])
    cand = [np.flatnonzero(A[x] & (ids != y)) for x, y in P]
    cand_y = [np.flatnonzero(A[y] & (ids != x)) for x, y in P]
    top = max(max(len(a), len(b)) for a, b in zip(cand, cand_y))
    if max_size is not None and max_size >= 0:
        top = min(top, max_size)
    total = sum(math.comb(len(nb), l) for a, b in zip(cand, cand_y) for nb in (a, b) for l in range(top + 1))
    if total > MAX_QUERIES:
        raise DataError(
            f"the separating-set search would run {total:,} CI tests (neighbourhoods of up to {top + 1} variables; "
            f"the limit is {MAX_QUERIES:,}): bound the set size with max_cond (fedrca graph --max-cond N)"
        )
    for l in range(top + 1):
        level_p, level_set = _best_at_level(test, P, cand, cand_y, l)
        # a larger set replaces a smaller one only with a strictly higher p-value
        better = level_p > best_p
        best_p[better] = level_p[better]
        for k in np.flatnonzero(better).tolist():
            best_set[k] = tuple(int(v) for v in level_set[k])
    return best_set, np.maximum(best_p, 0.0)


def _level_queries(cand: Sequence[IntArray], cand_y: Sequence[IntArray], l: int, rows: int) -> Iterator[IntArray]:
    """Blocks of at most ``rows`` queries ``(pair index, S...)``: the l-subsets of each pair's ``cand[k]``, then
    those of ``cand_y[k]`` not inside ``cand[k]`` (so each query once), pairs and subsets in order."""
    pending: list[IntArray] = []
    size = 0
    for k, (a, b) in enumerate(zip(cand, cand_y)):
        inside = np.isin(b, a)
        for nb, seen in ((a, None), (b, inside)):
            if len(nb) < l:
                continue
            for C in _combination_chunks(len(nb), l, rows):
                if seen is not None:
                    C = C[~seen[C].all(axis=1)]  # S ⊆ cand[k] was asked with x's subsets
                if pending and size + len(C) > rows:
                    yield np.concatenate(pending)
                    pending.clear()
                    size = 0
                if len(C):
                    pending.append(np.column_stack([np.full(len(C), k), nb[C]]))
                    size += len(C)
    if pending:
        yield np.concatenate(pending)


def _best_at_level(
    test: CITest, P: IntArray, cand: Sequence[IntArray], cand_y: Sequence[IntArray], l: int
) -> tuple[FloatArray, IntArray]:
    """Per pair, the highest p-value of its l-subsets (-2 when it has none; NaN counts -1) and the
    lexicographically first subset that has it, (K,) and (K, l)."""
    K = len(P)
    level_p = np.full(K, -2.0)
    level_set = np.zeros((K, l), dtype=np.int64)
    for Q in _level_queries(cand, cand_y, l, _block_rows(l + 1)):
        pv = test.pvalues(P[Q[:, 0], 0], P[Q[:, 0], 1], Q[:, 1:])
        pv = np.where(np.isnan(pv), -1.0, pv)
        # the block's best row per pair: sorted by pair, then p-value down, then S lexicographically
        order = np.lexsort((*Q[:, :0:-1].T, -pv, Q[:, 0]))
        pair_of, first = np.unique(Q[order, 0], return_index=True)
        rows = order[first]
        new_p, new_S = pv[rows], Q[rows, 1:]
        old_p, old_S = level_p[pair_of], level_set[pair_of]
        if l:
            # new_S < old_S lexicographically: at the first column where they differ
            differs = new_S != old_S
            col = differs.argmax(axis=1)
            at = np.arange(len(rows))
            earlier = differs.any(axis=1) & (new_S[at, col] < old_S[at, col])
        else:
            earlier = np.zeros(len(rows), dtype=bool)
        take = (new_p > old_p) | ((new_p == old_p) & earlier)
        level_p[pair_of[take]] = new_p[take]
        level_set[pair_of[take]] = new_S[take]
    return level_p, level_set


# ----------------------------------------------------------------------------- result
@dataclass(frozen=True)
class LayerRecord:
    """Evidence of one skeleton layer at the server.

    Attributes
    ----------
    layer : conditioning-set size l
    votes : (p, p) int, sites that kept each edge
    merged : (p, p) bool, the merged skeleton G_{l+1}
    """

    layer: int
    votes: IntArray
    merged: BoolArray


@dataclass(frozen=True, eq=False)
class FedPCResult:
    """What FedPC learned (over variable ids) and the evidence.

    Attributes
    ----------
    skeleton : (p, p) bool, the final merged skeleton
    cpdag : (p, p) bool PDAG after v-structures and Meek's rules
    dag : (p, p) bool, a DAG extension of the CPDAG
    extension_exact : the DAG keeps every orientation of the CPDAG (Dor-Tarsi found an extension)
    layers : per-layer votes and merged skeletons
    sepsets : {(x, y): (separating set, highest p-value over sites)} for the unshielded pairs
    colliders : v-structures (x, z, y) oriented, in order of application
    n_sites, alpha, keep_fraction, max_cond : the run's parameters
    """

    skeleton: BoolArray
    cpdag: BoolArray
    dag: BoolArray
    extension_exact: bool
    layers: tuple[LayerRecord, ...]
    sepsets: Mapping[tuple[int, int], tuple[tuple[int, ...], float]]
    colliders: tuple[tuple[int, int, int], ...]
    n_sites: int
    alpha: float
    keep_fraction: float
    max_cond: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def n_variables(self) -> int:
        """p."""
        return int(self.skeleton.shape[0])

    def message(self) -> ResultMessage:
        """The result as the server broadcasts it to the sites."""
        return ResultMessage(cpdag=self.cpdag, dag=self.dag)

    def same_graphs(self, other: FedPCResult) -> bool:
        """Same skeleton, CPDAG, DAG and separating sets as another result."""
        return (
            np.array_equal(self.skeleton, other.skeleton)
            and np.array_equal(self.cpdag, other.cpdag)
            and np.array_equal(self.dag, other.dag)
            and dict(self.sepsets) == dict(other.sepsets)
        )


def _orient(
    skeleton: BoolArray,
    sepsets: Mapping[tuple[int, int], tuple[tuple[int, ...], float]],
) -> tuple[BoolArray, BoolArray, bool, tuple[tuple[int, int, int], ...]]:
    """v-structures from the consistent separating sets, Meek's rules, DAG extension."""
    T = unshielded_triples(skeleton)
    collider = np.array([int(z) not in sepsets[(int(x), int(y))][0] for x, z, y in T], dtype=bool)
    priority = np.array([sepsets[(int(x), int(y))][1] for x, _, y in T], dtype=np.float64)
    pdag, oriented = orient_colliders(skeleton, T, collider, priority)
    cpdag = meek_rules(pdag)
    dag, exact = pdag_to_dag(cpdag)
    return cpdag, dag, exact, tuple(oriented)


def _unshielded_pairs(skeleton: BoolArray) -> IntArray:
    T = unshielded_triples(skeleton)
    if not len(T):
        return np.zeros((0, 2), dtype=np.int64)
    return np.unique(T[:, [0, 2]], axis=0)


def _check_params(alpha: float, keep_fraction: float, max_cond: int | None) -> None:
    if not 0.0 < alpha < 1.0:
        raise DataError(f"alpha must be in (0, 1), got {alpha}")
    if not 0.0 <= keep_fraction < 1.0:
        raise DataError(f"keep_fraction must be in [0, 1), got {keep_fraction}")
    if max_cond is not None and max_cond < 0:
        raise DataError(f"max_cond must be >= 0 or None, got {max_cond}")


def fedpc(
    tests: Sequence[CITest], alpha: float = 0.01, keep_fraction: float = 0.3, max_cond: int | None = None
) -> FedPCResult:
    """FedPC as one pure function over the sites' CI tests (no messages): the twin of :class:`FedPCServer`.

    Parameters
    ----------
    tests : one CI test per site, all over the same p variable ids
    alpha : significance level of every CI test
    keep_fraction : the server keeps an edge kept by more than this share of sites
    max_cond : largest conditioning set (layers beyond it are not run), None = no limit

    With a single site this is the PC-stable algorithm with max-p separating sets.
    """
    _check_params(alpha, keep_fraction, max_cond)
    if not tests:
        raise DataError("FedPC needs at least one site")
    p = tests[0].n_variables
    if any(t.n_variables != p for t in tests):
        raise DataError(f"every site must test the same {p} variables, got {[t.n_variables for t in tests]}")
    A = ~np.eye(p, dtype=bool)
    layers = []
    l = 0
    while needs_layer(A, l) and (max_cond is None or l <= max_cond):
        check_layer(A, l)
        A, votes = merge_skeletons([site_layer(t, A, l, alpha) for t in tests], keep_fraction)
        layers.append(LayerRecord(l, votes, A.copy()))
        l += 1
    pairs = _unshielded_pairs(A)
    sepsets: dict[tuple[int, int], tuple[tuple[int, ...], float]] = {}
    if len(pairs):
        found = [best_separating_sets(t, A, pairs, max_cond) for t in tests]
        sepsets = _consistent_sepsets(pairs, [f[0] for f in found], [f[1] for f in found])
    cpdag, dag, exact, colliders = _orient(A, sepsets)
    return FedPCResult(
        A, cpdag, dag, exact, tuple(layers), sepsets, colliders, len(tests), alpha, keep_fraction, max_cond
    )


def _consistent_sepsets(
    pairs: IntArray, sets: Sequence[Sequence[tuple[int, ...]]], pvalues: Sequence[FloatArray]
) -> dict[tuple[int, int], tuple[tuple[int, ...], float]]:
    """Per pair, the separating set with the highest p-value over sites (ties: the first site)."""
    pv = np.stack([np.asarray(v, dtype=np.float64) for v in pvalues])  # (K_sites, n_pairs)
    best = np.argmax(pv, axis=0)
    return {
        (int(x), int(y)): (tuple(sets[best[k]][k]), float(pv[best[k], k])) for k, (x, y) in enumerate(pairs.tolist())
    }


# ----------------------------------------------------------------------------- site and server
class FedPCSite:
    """One site of FedPC: keeps its data, answers the server's requests.

    Parameters
    ----------
    data : (n, p) samples, or a DataFrame whose columns are the variable names
    names : the p variable names (required with an array)
    test : ``fisher-z`` (continuous) or ``g-square`` (discrete)
    seed : seed of the noise of a private release (pooled statistics with ``mu``)
    ledger : the site's privacy ledger (e.g. :class:`fedrca.privacy.ledger.PrivacyLedger`);
        a noised release is charged to it first and refused when it would pass its budget
    max_mu : the largest mu (least noise) this site releases at; a request for more is refused
        (None: the server's request decides, within the ledger's budget)

    The site keeps its CI test (the correlation matrix and n for Fisher's z, the coded
    values for G-square) and, for Fisher's z, its rows (the pooled-statistics mode sums
    over them), in ``_private`` attributes. It answers the vote with a
    :class:`SkeletonReply` or a :class:`SepsetReply`, and the pooled-statistics protocol
    (:class:`fedrca.causal.pooled.PooledStatsServer`) with a
    :class:`~fedrca.causal.secagg.KeyReply`, a :class:`~fedrca.causal.sufficient.LevelsReply`
    or a :class:`~fedrca.causal.secagg.MaskedVector`.
    """

    def __init__(
        self,
        data: ArrayLike | pd.DataFrame,
        names: Sequence[str] | None = None,
        *,
        test: TestKind = "fisher-z",
        seed: int = 0,
        ledger: PrivacyLedger | None = None,
        max_mu: float | None = None,
    ):
        if isinstance(data, pd.DataFrame):
            names = [str(c) for c in data.columns] if names is None else list(names)
            X = data.to_numpy()
        else:
            X = np.asarray(data)
        if names is None:
            raise DataError("a FedPC site needs the variable names of its data columns")
        if X.ndim != 2 or X.shape[1] != len(names):
            raise DataError(
                f"site data must be (n_samples, {len(names)}) for names {list(names)[:5]}..., got {X.shape}"
            )
        self._names = anonymise(names)
        position = {str(n): j for j, n in enumerate(names)}
        order = [position[n] for n in self._names]
        X = X[:, order]
        self._rows: FloatArray | None = None
        if test == "fisher-z":
            self._rows = X.astype(np.float64)
            self._test: CITest = FisherZ(self._rows)
        elif test == "g-square":
            self._test = GSquare(X)
        else:
            raise DataError(f"unknown CI test {test!r}; use 'fisher-z' or 'g-square'")
        self._n = int(X.shape[0])
        self._rng = np.random.default_rng(seed)
        self._ledger = ledger
        self._max_mu = max_mu
        self._sessions: dict[str, SessionKeys] = {}
        self._released: set[str] = set()
        self._coded: tuple[tuple[tuple[str, ...], ...], IntArray] | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """The site's own id -> name table (never sent)."""
        return self._names

    @property
    def n_variables(self) -> int:
        """p."""
        return len(self._names)

    @property
    def n_samples(self) -> int:
        """n (never sent)."""
        return self._n

    @property
    def test(self) -> CITest:
        """The site's CI test."""
        return self._test

    def _check(self, adjacency: BoolArray) -> None:
        if adjacency.shape[0] != self.n_variables:
            raise MessageError(
                Reason.WRONG_SIZE,
                f"the server's skeleton has {adjacency.shape[0]} variables, this site has {self.n_variables}",
            )

    def skeleton(self, request: SkeletonRequest) -> SkeletonReply:
        """FedSkele phase 1: this site's skeleton after layer ``request.layer``."""
        self._check(request.adjacency)
        A = site_layer(self._test, request.adjacency, request.layer, request.alpha)
        return SkeletonReply(layer=request.layer, adjacency=A)

    def separating_sets(self, request: SepsetRequest) -> SepsetReply:
        """FedOrien phase 2: the highest-p separating set of each requested pair on this site's data."""
        self._check(request.adjacency)
        if len(request.pairs) and request.pairs.max() >= self.n_variables:
            raise MessageError(Reason.BAD_PAIRS, f"pair ids must be < {self.n_variables}")
        max_size = None if request.max_size < 0 else request.max_size
        sets, pv = best_separating_sets(self._test, request.adjacency, request.pairs, max_size)
        return SepsetReply(pairs=request.pairs, sepsets=tuple(sets), pvalues=pv)

    def join(self, request: KeyRequest) -> KeyReply:
        """Pooled statistics, step 1: a fresh key pair for the session; the reply carries its public key."""
        if request.session in self._sessions:
            raise MessageError(Reason.BAD_FIELD, f"session {request.session} was joined already")
        keys = SessionKeys.generate(request.session, request.index, request.n_sites)
        self._sessions[request.session] = keys
        return keys.reply()

    def levels(self, request: LevelsRequest) -> LevelsReply:
        """Pooled statistics (G-square): the labels of the levels this site observed, per variable id."""
        if not isinstance(self._test, GSquare):
            raise MessageError(Reason.BAD_FIELD, "levels are asked of G-square sites; this site tests with Fisher-z")
        return LevelsReply(session=request.session, levels=self._test.labels)

    def _codes(self, codebook: tuple[tuple[str, ...], ...]) -> IntArray:
        """The site's values coded by the agreed code book (cached: the code book is fixed for a run)."""
        assert isinstance(self._test, GSquare)
        if self._coded is None or self._coded[0] != codebook:
            if len(codebook) != self.n_variables:
                raise MessageError(Reason.WRONG_SIZE, f"the code book has {len(codebook)} variables")
            labels, local = self._test.labels, self._test.codes
            coded = np.column_stack([code_against(labels[j], local[:, j], codebook[j]) for j in range(len(labels))])
            self._coded = (codebook, coded)
        return self._coded[1]

    def statistics(self, request: StatsRequest) -> MaskedVector:
        """Pooled statistics: this site's share of a secure sum, masked (see :mod:`fedrca.causal.sufficient`)."""
        keys = self._sessions.get(request.session)
        if keys is None:
            raise MessageError(Reason.BAD_FIELD, f"session {request.session} was not joined (KeyRequest first)")
        kind = request.statistic
        if kind == "tables":
            assert request.queries is not None and request.codebook is not None
            if not isinstance(self._test, GSquare):
                raise MessageError(Reason.BAD_FIELD, "tables are asked of G-square sites; this site runs Fisher-z")
            levels = np.array([len(c) for c in request.codebook], dtype=np.int64)
            q = request.queries
            x, y, S = as_queries(q[:, 0], q[:, 1], q[:, 2:], self.n_variables)
            payload = encode_counts(contingency_counts(self._codes(request.codebook), levels, x, y, S))
        elif kind == "count":
            payload = encode_counts(np.array([self._n]))
        else:
            if self._rows is None:
                raise MessageError(Reason.BAD_FIELD, f"{kind} is asked of Fisher-z sites; this site runs G-square")
            if kind == "moments":
                vector = moment_vector(self._rows)
            elif kind == "scatter":
                assert request.center is not None
                if len(request.center) != self.n_variables:
                    raise MessageError(Reason.WRONG_SIZE, f"the center has {len(request.center)} variables")
                vector = scatter_vector(self._rows, request.center)
            else:
                assert request.clip is not None and request.mu is not None
                if request.session in self._released:
                    raise MessageError(Reason.BAD_ROUND, f"the noised statistics of {request.session} were released")
                if self._max_mu is not None and request.mu > self._max_mu:
                    raise MessageError(
                        Reason.BAD_FIELD, f"the server asks for mu {request.mu:g}, above this site's {self._max_mu:g}"
                    )
                if self._ledger is not None and math.isfinite(request.mu):
                    # charged before anything is computed: a release past the budget never happens
                    self._ledger.charge_gaussian(request.mu**2, key=f"fedpc-stats:{request.session}")
                # the site's standardiser: its own mean and standard deviation (preprocessing, never sent)
                center, scale = self._rows.mean(axis=0), self._rows.std(axis=0)
                vector = private_scatter_vector(self._rows, center, scale, request.clip, request.mu, self._rng)
                self._released.add(request.session)
            payload = encode_fixed(vector)
        return keys.mask(payload, request.roster, request.round)

    def handle(self, request: Message) -> Message:
        """Answer one request (the site's endpoint): the vote's and the pooled-statistics protocol's."""
        if isinstance(request, SkeletonRequest):
            return self.skeleton(request)
        if isinstance(request, SepsetRequest):
            return self.separating_sets(request)
        if isinstance(request, KeyRequest):
            return self.join(request)
        if isinstance(request, LevelsRequest):
            return self.levels(request)
        if isinstance(request, StatsRequest):
            return self.statistics(request)
        raise MessageError(
            Reason.BAD_TYPE,
            f"a site answers SkeletonRequest, SepsetRequest, KeyRequest, LevelsRequest or StatsRequest, "
            f"got {type(request).__name__}",
        )

    def translate(
        self, result: FedPCResult | ResultMessage, which: Literal["cpdag", "dag"] = "cpdag"
    ) -> tuple[tuple[str, ...], BoolArray]:
        """The learned graph with this site's names: (names, (p, p) graph), on the site's side only."""
        graph = result.cpdag if which == "cpdag" else result.dag
        self._check(np.asarray(graph))
        return self._names, np.array(graph, dtype=bool)


SiteEndpoint = Callable[[Any], Any]


class FedPCServer:
    """The FedPC server: drives the layers, votes, collects separating sets, orients.

    Parameters
    ----------
    n_variables : p, the agreed number of variables
    alpha : significance level the sites use
    keep_fraction : an edge stays when more than this share of sites keep it (0.3)
    max_cond : largest conditioning set, None = no limit

    ``run(sites)`` takes one endpoint per site, a callable from a request to its
    reply (``FedPCSite.handle`` in process; a transport in production), and sees
    nothing but the replies.
    """

    def __init__(
        self, n_variables: int, *, alpha: float = 0.01, keep_fraction: float = 0.3, max_cond: int | None = None
    ) -> None:
        _check_params(alpha, keep_fraction, max_cond)
        if n_variables < 2:
            raise DataError(f"FedPC needs at least 2 variables, got {n_variables}")
        self.n_variables = int(n_variables)
        self.alpha = float(alpha)
        self.keep_fraction = float(keep_fraction)
        self.max_cond = max_cond

    def _ask(self, sites: Sequence[SiteEndpoint], request: Request, expect: type) -> list[Any]:
        replies = []
        for k, site in enumerate(sites):
            reply = site(request)
            if not isinstance(reply, expect):
                raise MessageError(
                    Reason.BAD_REPLY, f"site {k} answered {type(reply).__name__}, expected {expect.__name__}"
                )
            replies.append(reply)
        return replies

    def run(self, sites: Sequence[SiteEndpoint]) -> FedPCResult:
        """Run FedPC over the sites; returns the result over variable ids."""
        if not sites:
            raise DataError("FedPC needs at least one site")
        p = self.n_variables
        A = ~np.eye(p, dtype=bool)
        layers = []
        l = 0
        rounds = 0
        while needs_layer(A, l) and (self.max_cond is None or l <= self.max_cond):
            check_layer(A, l)
            request = SkeletonRequest(layer=l, adjacency=A, alpha=self.alpha)
            replies = self._ask(sites, request, SkeletonReply)
            rounds += 1
            for k, r in enumerate(replies):
                if r.layer != l or r.adjacency.shape != (p, p):
                    raise MessageError(
                        Reason.BAD_REPLY, f"site {k} answered layer {r.layer} {r.adjacency.shape}, expected {l}"
                    )
                if (r.adjacency & ~A).any():
                    raise MessageError(
                        Reason.BAD_REPLY, f"site {k} added edges at layer {l}; a site can only remove edges"
                    )
            A, votes = merge_skeletons([r.adjacency for r in replies], self.keep_fraction)
            layers.append(LayerRecord(l, votes, A.copy()))
            l += 1
        pairs = _unshielded_pairs(A)
        sepsets: dict[tuple[int, int], tuple[tuple[int, ...], float]] = {}
        if len(pairs):
            request2 = SepsetRequest(adjacency=A, pairs=pairs, max_size=-1 if self.max_cond is None else self.max_cond)
            answers = self._ask(sites, request2, SepsetReply)
            rounds += 1
            for k, r in enumerate(answers):
                if not np.array_equal(r.pairs, pairs):
                    raise MessageError(Reason.BAD_REPLY, f"site {k} answered other pairs than requested")
                if any(v >= p for s in r.sepsets for v in s):
                    raise MessageError(Reason.BAD_REPLY, f"site {k} named variable ids >= {p}")
            sepsets = _consistent_sepsets(pairs, [r.sepsets for r in answers], [r.pvalues for r in answers])
        cpdag, dag, exact, colliders = _orient(A, sepsets)
        return FedPCResult(
            A, cpdag, dag, exact, tuple(layers), sepsets, colliders, len(sites), self.alpha, self.keep_fraction,
            self.max_cond, {"rounds": rounds},
        )  # fmt: skip


# ----------------------------------------------------------------------------- variables -> groups (plants)
def aggregate_to_groups(
    graph: ArrayLike, variable_groups: Sequence[str], groups: Sequence[str]
) -> tuple[BoolArray, FloatArray]:
    """A group-level (plant-level) directed graph from a variable-level PDAG.

    Group n -> group m (n != m) when some variable of n has an arc into a
    variable of m; an undirected variable edge is an arc both ways (its
    direction is not known). The weight is the number of such arcs.

    Parameters
    ----------
    graph : (p, p) bool PDAG over the variables
    variable_groups : (p,) the group of each variable
    groups : the M group names, in output order

    Returns
    -------
    adjacency : (M, M) bool
    weight : (M, M) float, arcs from group n into group m
    """
    G = np.asarray(graph, dtype=bool)
    names = list(groups)
    index = {g: k for k, g in enumerate(names)}
    unknown = sorted({g for g in variable_groups if g not in index})
    if unknown:
        raise DataError(f"variables assigned to unknown group(s) {unknown}; groups are {names}")
    if len(variable_groups) != G.shape[0]:
        raise DataError(f"{len(variable_groups)} group labels for {G.shape[0]} variables")
    member = np.zeros((G.shape[0], len(names)))
    member[np.arange(G.shape[0]), [index[g] for g in variable_groups]] = 1.0
    # W[n, m] = Σ_{u in n, v in m} G[u, v]
    W = member.T @ G.astype(np.float64) @ member
    np.fill_diagonal(W, 0.0)
    return W > 0, W
