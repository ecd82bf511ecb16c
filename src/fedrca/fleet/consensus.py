"""Decentralised average consensus with random chunking (pure core, no I/O).

Participants of a fleet hold private vectors xi^s (statistics) and want their
sum without a coordinator and without any peer seeing another's vector. Each
participant talks only to its neighbours in a sparse peer graph:

* **Dynamical consensus** (the CollabDict paper, Eq. 3)::

      xi_s(t+1) = xi_s(t) + eps * sum_j A_sj (xi_j(t) - xi_s(t))

  With ``W = I - eps L`` (L the graph Laplacian) every xi_s(t) tends to the
  average of the xi_s(0). The paper's step is ``eps = 1/S``; the default here is
  ``eps = 1/(d_max + 1)`` (``step="degree"``), which keeps every eigenvalue of W
  but the consensus one inside (-1, 1) and makes the number of rounds grow with
  ln S on an expander instead of roughly linearly in S (docs/fleet.md, measured).
* **Stopping without a coordinator.** Every message also carries the maxima of
  the relative per-round changes seen so far, ``h[d]`` = the largest change at
  round t - d within d hops. After D rounds (D = the graph diameter) ``h[D]`` is
  the fleet-wide maximum of round t - D, identical for everybody, so every
  participant stops at the same round once it is below the tolerance.
* **Agreement.** The values still differ by about the tolerance. For D more
  rounds every participant forwards the value of the smallest node label it has
  seen, so all end with bit-identical sums (the value forwarded is an estimate of
  the average, which everybody learns anyway).
* **Random chunking** (Sec. 4.2). Each participant splits its vector into C
  random chunks that sum to it; one consensus session runs per chunk, in the
  same rounds, each on a differently re-labelled copy of the graph. The
  re-labellings are derived from a shared seed so that no participant is the
  neighbour of the same peer in every chunk session: no single peer ever
  receives all C first-round chunks of anybody (tests/fleet/test_model.py
  checks the recorded messages).

Everything that crosses between participants is a :class:`ConsensusMessage`, an
immutable, validated value object. :func:`average_consensus` is the vectorised
twin of the message-passing sessions (same iteration, same stopping rule).

Examples
--------
>>> import numpy as np
>>> graph = PeerGraph.cycle_inverse_chord(11)
>>> graph.n_nodes, graph.max_degree, graph.diameter
(11, 3, 4)
>>> X = np.random.default_rng(0).normal(size=(11, 4))
>>> out = average_consensus(X, graph, tol=1e-12)
>>> bool(np.allclose(out.values, X.mean(axis=0), atol=1e-9))
True
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedrca.contracts.bounds import short
from fedrca.contracts.deadletter import DeadLetterReason as R
from fedrca.exceptions import ConfigError, ConvergenceError, MessageError

__all__ = [
    "ConsensusMessage",
    "ConsensusResult",
    "ConsensusSession",
    "Exchange",
    "MessageKey",
    "PeerGraph",
    "average_consensus",
    "make_chunks",
    "session_labellings",
    "step_size",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
Phase = Literal["average", "agree"]
StepRule = Literal["degree", "paper"]


# -- peer graphs ------------------------------------------------------------------------------
def _is_prime(n: int) -> bool:
    if n < 2:
        return False
    return all(n % d for d in range(2, math.isqrt(n) + 1))


class PeerGraph:
    """An undirected, connected peer graph on nodes ``0 .. n-1`` (immutable).

    Parameters
    ----------
    neighbours : for every node, the nodes it exchanges messages with; the relation
        must be symmetric; self-loops are dropped (they do not change Eq. 3)

    Raises
    ------
    ConfigError
        When a neighbour is out of range, the relation is not symmetric or the
        graph is not connected (consensus would not reach everybody).

    Examples
    --------
    >>> PeerGraph([[1], [0, 2], [1]]).diameter
    2
    >>> PeerGraph([[1], [0], []])
    Traceback (most recent call last):
    ...
    fedrca.exceptions.ConfigError: peer graph: node 2 cannot be reached from node 0; the graph must be connected
    """

    def __init__(self, neighbours: Sequence[Iterable[int]]) -> None:
        n = len(neighbours)
        if n < 1:
            raise ConfigError("peer graph: needs at least one node")
        nbrs: list[tuple[int, ...]] = []
        for i, row in enumerate(neighbours):
            clean = set()
            for j in row:
                j = int(j)
                if not 0 <= j < n:
                    raise ConfigError(f"peer graph: node {i} lists neighbour {j}; nodes are 0..{n - 1}")
                if j != i:
                    clean.add(j)
            nbrs.append(tuple(sorted(clean)))
        for i, row in enumerate(nbrs):
            for j in row:
                if i not in nbrs[j]:
                    raise ConfigError(
                        f"peer graph: node {i} lists {j} but {j} does not list {i}; links must be listed both ways"
                    )
        self.neighbours: tuple[tuple[int, ...], ...] = tuple(nbrs)
        dist = self._distances_from(0)
        if np.any(dist < 0):
            far = int(np.flatnonzero(dist < 0)[0])
            raise ConfigError(f"peer graph: node {far} cannot be reached from node 0; the graph must be connected")
        self.diameter = max(int(self._distances_from(i).max()) for i in range(n))

    def _distances_from(self, start: int) -> IntArray:
        dist = np.full(self.n_nodes, -1, dtype=np.int64)
        dist[start] = 0
        queue = deque([start])
        while queue:
            i = queue.popleft()
            for j in self.neighbours[i]:
                if dist[j] < 0:
                    dist[j] = dist[i] + 1
                    queue.append(j)
        return dist

    @property
    def n_nodes(self) -> int:
        """S, the number of nodes."""
        return len(self.neighbours)

    @property
    def degrees(self) -> IntArray:
        """(S,) number of neighbours per node."""
        return np.array([len(r) for r in self.neighbours], dtype=np.int64)

    @property
    def max_degree(self) -> int:
        """d_max."""
        return int(self.degrees.max())

    def adjacency(self) -> FloatArray:
        """(S, S) 0/1 adjacency matrix A."""
        A = np.zeros((self.n_nodes, self.n_nodes))
        for i, row in enumerate(self.neighbours):
            A[i, list(row)] = 1.0
        return A

    def laplacian(self) -> FloatArray:
        """(S, S) graph Laplacian L = D - A."""
        A = self.adjacency()
        return np.diag(A.sum(axis=1)) - A

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PeerGraph) and self.neighbours == other.neighbours

    def __hash__(self) -> int:
        return hash(self.neighbours)

    def __repr__(self) -> str:
        return f"PeerGraph(n_nodes={self.n_nodes}, max_degree={self.max_degree}, diameter={self.diameter})"

    @classmethod
    def cycle_inverse_chord(cls, n: int) -> PeerGraph:
        """The 3-regular-ish expander on Z_p: x ~ x + 1, x ~ x - 1, x ~ x^-1 (mod p), p prime.

        0 has no inverse and 1, p - 1 are their own, so those nodes have degree 2.

        Raises
        ------
        ConfigError
            When ``n`` is not a prime (give an explicit adjacency list instead).
        """
        if not _is_prime(n):
            raise ConfigError(
                f"peer graph: the cycle with inverse chords needs a prime number of participants, got {n}; "
                "give graph: {kind: adjacency, neighbours: [...]} or use a prime fleet size"
            )
        rows: list[set[int]] = [set() for _ in range(n)]
        for x in range(n):
            for y in ((x + 1) % n, (x - 1) % n):
                rows[x].add(y)
                rows[y].add(x)
            if x:
                y = pow(x, -1, n)
                rows[x].add(y)
                rows[y].add(x)
        return cls(rows)

    @classmethod
    def ring(cls, n: int) -> PeerGraph:
        """The cycle 0 - 1 - ... - (n-1) - 0 (a path for n = 2, a single node for n = 1)."""
        return cls([[(i - 1) % n, (i + 1) % n] for i in range(n)] if n > 1 else [[]])

    @classmethod
    def default(cls, n: int) -> PeerGraph:
        """The cycle with inverse chords for a prime ``n``, else the ring with the same chords
        taken modulo the next prime and folded back (connected, degree <= 4)."""
        if n <= 3 or _is_prime(n):
            return cls.cycle_inverse_chord(n) if n >= 2 else cls([[]])
        p = n
        while not _is_prime(p):
            p += 1
        rows: list[set[int]] = [{(i - 1) % n, (i + 1) % n} for i in range(n)]
        for x in range(1, n):
            y = pow(x, -1, p)
            if y < n and y != x:
                rows[x].add(y)
                rows[y].add(x)
        return cls(rows)


def step_size(graph: PeerGraph, rule: StepRule | float = "degree") -> float:
    """The consensus step eps: ``1/(d_max + 1)`` ("degree"), ``1/S`` ("paper") or a number.

    Raises
    ------
    ConfigError
        When a numeric step is outside (0, 2 / lambda_max(L)) (the iteration would diverge)
    """
    if rule == "degree":
        return 1.0 / (graph.max_degree + 1)
    if rule == "paper":
        return 1.0 / graph.n_nodes
    eps = float(rule)
    lam_max = float(np.linalg.eigvalsh(graph.laplacian()).max()) if graph.n_nodes > 1 else 0.0
    if eps <= 0.0 or (lam_max > 0 and eps >= 2.0 / lam_max):
        raise ConfigError(f"consensus step {eps} must be in (0, 2/lambda_max(L) = {2.0 / max(lam_max, 1e-300):.4g})")
    return eps


# -- messages ---------------------------------------------------------------------------------
class MessageKey(NamedTuple):
    """What identifies one expected message: (session, round, phase, sender)."""

    session: str
    round: int
    phase: str
    sender: str


def _frozen(a: ArrayLike, name: str) -> FloatArray:
    if isinstance(a, np.ndarray) and a.dtype == np.float64 and not a.flags.writeable and a.ndim == 1:
        return a  # already an immutable vector (shared by the messages of one round)
    arr = np.array(a, dtype=np.float64, copy=True)
    if arr.ndim != 1:
        raise MessageError(R.BAD_ARRAY, f"{name} must be 1-D, got shape {arr.shape}")
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True, eq=False)
class ConsensusMessage:
    """One consensus message from ``sender`` to ``receiver`` (immutable, validated).

    Attributes
    ----------
    session : the consensus session, e.g. ``"em3/c1"`` (EM iteration 3, chunk 1)
    round : the round t whose value this is (>= 0)
    phase : ``"average"`` (value xi_s(t), flood = the change maxima h (D+1,)) or
        ``"agree"`` (value = the forwarded result, flood = [its node label])
    sender, receiver : participant names
    value : (d,) finite float64, read-only
    flood : (D+1,) or (1,) non-negative float64 (inf allowed before any change is known)

    Raises
    ------
    MessageError
        When a field is malformed (reason code ``bad-field`` / ``bad-array``).
    """

    session: str
    round: int
    phase: Phase
    sender: str
    receiver: str
    value: FloatArray = field(repr=False)
    flood: FloatArray = field(repr=False)

    def __post_init__(self) -> None:
        for name in ("session", "sender", "receiver"):
            v = getattr(self, name)
            if not isinstance(v, str) or not v:
                raise MessageError(R.BAD_FIELD, f"{name} must be a non-empty string, got {short(v)}")
        if self.sender == self.receiver:
            raise MessageError(R.BAD_FIELD, f"sender and receiver are both {short(self.sender)}")
        if type(self.round) is not int:
            if isinstance(self.round, bool) or not isinstance(self.round, np.integer):
                raise MessageError(R.BAD_FIELD, f"round must be a non-negative integer, got {short(self.round)}")
            object.__setattr__(self, "round", int(self.round))
        if self.round < 0:
            raise MessageError(R.BAD_FIELD, f"round must be a non-negative integer, got {short(self.round)}")
        if self.phase not in ("average", "agree"):
            raise MessageError(R.BAD_FIELD, f"phase must be 'average' or 'agree', got {short(self.phase)}")
        value = _frozen(self.value, "value")
        if not np.isfinite(value).all():
            raise MessageError(R.BAD_ARRAY, "value contains NaN or inf")
        flood = _frozen(self.flood, "flood")
        # NaN >= 0 is False, so this refuses NaN too
        if flood.size == 0 or not (flood >= 0).all():
            raise MessageError(R.BAD_ARRAY, "flood must be a non-empty array of non-negative numbers")
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "flood", flood)

    @functools.cached_property
    def key(self) -> MessageKey:
        """(session, round, phase, sender)."""
        return MessageKey(self.session, self.round, self.phase, self.sender)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConsensusMessage):
            return NotImplemented
        return (
            (self.session, self.round, self.phase, self.sender, self.receiver)
            == (other.session, other.round, other.phase, other.sender, other.receiver)
            and np.array_equal(self.value, other.value)
            and np.array_equal(self.flood, other.flood)
        )

    __hash__ = None  # type: ignore[assignment]


class Exchange(NamedTuple):
    """What a participant's protocol yields each round: messages to send and the ones it waits for."""

    outgoing: tuple[ConsensusMessage, ...]
    expected: frozenset[MessageKey]


# -- chunking and re-labelling ----------------------------------------------------------------
def make_chunks(xi: ArrayLike, n_chunks: int, rng: np.random.Generator) -> FloatArray:
    """Split ``xi`` (d,) into ``n_chunks`` random chunks (C, d) that sum to it.

    chunk_l = xi / C + eta_l with zero-sum Gaussian noise eta whose scale per element
    is |xi_i| + mean|xi| + 1: a chunk alone says little about the statistic's value or
    sign, and an all-zero statistic (e.g. empty histogram bins) is hidden as well.

    Examples
    --------
    >>> import numpy as np
    >>> xi = np.array([3.0, -1.0, 0.5])
    >>> chunks = make_chunks(xi, 3, np.random.default_rng(0))
    >>> bool(np.allclose(chunks.sum(axis=0), xi)), bool(np.any(np.isclose(chunks, xi)))
    (True, False)
    """
    x = np.asarray(xi, dtype=np.float64)
    if n_chunks < 1:
        raise ConfigError(f"chunks must be >= 1, got {n_chunks}")
    if n_chunks == 1:
        return x[None, :].copy()
    scale = np.abs(x) + np.mean(np.abs(x)) + 1.0
    eta = rng.standard_normal((n_chunks, x.size)) * scale
    # sum_l eta_l = 0 so that sum_l chunk_l = xi
    eta -= eta.mean(axis=0)
    return np.asarray(x / n_chunks + eta)


def _seed_words(seed: int, key: str) -> list[int]:
    """Process-independent seed material from an integer and a text key (Python's hash is salted)."""
    digest = hashlib.sha256(f"{int(seed)}:{key}".encode()).digest()
    return [int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4)]


def session_labellings(graph: PeerGraph, n_chunks: int, seed: int, key: str, max_tries: int = 10_000) -> IntArray:
    """Node label of every participant in each of the ``n_chunks`` sessions of one statistic (C, S).

    Row l is a permutation: participant s plays node ``labels[l, s]`` of ``graph`` in
    chunk session l. Derived from (``seed``, ``key``) alone, so every participant
    computes the same labellings without talking to anybody. With C >= 2 they are
    drawn so that no participant has the same peer as neighbour in all C sessions
    (no peer receives all first-round chunks of anybody).

    Raises
    ------
    ConfigError
        When no such labelling is found (too few chunks for this graph).

    Examples
    --------
    >>> g = PeerGraph.cycle_inverse_chord(11)
    >>> labels = session_labellings(g, 3, seed=7, key="em0")
    >>> labels.shape, bool(np.array_equal(labels, session_labellings(g, 3, seed=7, key="em0")))
    ((3, 11), True)
    """
    S = graph.n_nodes
    rng = np.random.default_rng(_seed_words(seed, key))
    if n_chunks <= 1 or S <= 2:
        return np.stack([rng.permutation(S) for _ in range(max(n_chunks, 1))]).astype(np.int64)
    nbr_sets = [set(r) for r in graph.neighbours]
    for _ in range(max_tries):
        labels = np.stack([rng.permutation(S) for _ in range(n_chunks)]).astype(np.int64)
        if not _shared_peer(labels, nbr_sets):
            return labels
    if graph.max_degree == S - 1:
        # more chunks cannot help on a complete graph: every peer is a neighbour in every session
        raise ConfigError(
            f"chunks: this {S}-participant graph is complete (every peer sees every chunk), so no re-labelling "
            f"keeps a peer from seeing all {n_chunks} chunks of a neighbour; add participants or set chunks to 1 "
            f"(no chunking)"
        )
    raise ConfigError(
        f"chunks: no re-labelling of this {S}-participant graph keeps every peer from seeing all "
        f"{n_chunks} chunks of a neighbour; use more chunks, a sparser graph or a larger fleet"
    )


def _shared_peer(labels: IntArray, nbr_sets: list[set[int]]) -> bool:
    """True when some participant has a peer that is its neighbour in every session."""
    S = labels.shape[1]
    inverse = np.argsort(labels, axis=1)  # [l, node] -> participant
    for s in range(S):
        common: set[int] | None = None
        for lab, inv in zip(labels, inverse):
            peers = {int(inv[j]) for j in nbr_sets[int(lab[s])]}
            common = peers if common is None else common & peers
            if not common:
                break
        if common:
            return True
    return False


def _neighbour_sum(values: Sequence[FloatArray]) -> FloatArray:
    """sum_j xi_j, added in neighbour order (the sessions and the twin add in the same order)."""
    total = np.array(values[0], dtype=np.float64, copy=True) if values else np.zeros(0)
    for v in values[1:]:
        total += v
    return total


# -- one participant's view of one session ------------------------------------------------------
class ConsensusSession:
    """Participant ``me``'s side of one consensus session (a small state machine).

    Call :meth:`outgoing` for the messages of the current round, hand every expected
    message (:meth:`expected`) to :meth:`receive`, repeat until :attr:`done`; then
    :attr:`result` is the agreed average (identical at every participant).

    Parameters
    ----------
    session : session name (part of every message)
    me : this participant's name
    label : this participant's node in the (re-labelled) graph
    peers : name of the participant at every node (S,), for this session
    graph : the peer graph
    x0 : (d,) this participant's initial value (a chunk)
    eps : the consensus step
    tol : stop when every participant's relative change per round is below ``tol``
    max_rounds : ConvergenceError beyond this many averaging rounds

    Attributes
    ----------
    rounds : averaging rounds done (the round at which everybody stopped)
    history : (rounds + 1,) this participant's relative change per round (evidence)
    """

    def __init__(
        self,
        session: str,
        me: str,
        label: int,
        peers: Sequence[str],
        graph: PeerGraph,
        x0: ArrayLike,
        eps: float,
        tol: float,
        max_rounds: int = 100_000,
    ) -> None:
        self.session = session
        self.me = me
        self.label = int(label)
        self.graph = graph
        self._nbr_names = tuple(peers[j] for j in graph.neighbours[self.label])
        self._nbr_labels = {peers[j]: j for j in graph.neighbours[self.label]}
        self.eps = float(eps)
        self.tol = float(tol)
        self.max_rounds = int(max_rounds)
        self._D = graph.diameter
        self._x = np.array(x0, dtype=np.float64, copy=True)
        # h[d]: largest relative change of round t - d within d hops; unknown = inf
        self._h = np.full(self._D + 1, np.inf)
        self._t = 0
        self.phase: Phase = "average"
        self._agree_round = 0
        self._leader = self.label
        self.rounds = 0
        self.history: list[float] = [math.inf]
        self.result: FloatArray | None = None
        self._expected: frozenset[MessageKey] = frozenset()
        self._expected_tag: tuple[int, str] | None = None
        if self._D == 0:  # a fleet of one: nothing to average
            self._finish_average()

    @property
    def done(self) -> bool:
        """True once the agreed result is known."""
        return self.result is not None

    @property
    def round(self) -> int:
        """The round of the messages :meth:`outgoing` returns."""
        return self._t if self.phase == "average" else self._agree_round

    def outgoing(self) -> list[ConsensusMessage]:
        """This round's messages to every neighbour (empty once done)."""
        if self.done:
            return []
        flood = self._h if self.phase == "average" else np.array([float(self._leader)])
        value = _frozen(self._x, "value")
        flood = _frozen(flood, "flood")
        return [
            ConsensusMessage(self.session, self.round, self.phase, self.me, peer, value, flood)
            for peer in self._nbr_names
        ]

    def expected(self) -> frozenset[MessageKey]:
        """Keys of the neighbours' messages this round needs."""
        if self.done:
            return frozenset()
        tag = (self.round, self.phase)
        if self._expected_tag != tag:
            self._expected = frozenset(MessageKey(self.session, self.round, self.phase, p) for p in self._nbr_names)
            self._expected_tag = tag
        return self._expected

    def receive(self, messages: Iterable[ConsensusMessage]) -> None:
        """Advance one round with every neighbour's message of the current round.

        Raises
        ------
        MessageError
            When a message is foreign to this round or one is missing.
        """
        want = self.expected()
        got = {}
        for m in messages:
            if m.key not in want or m.receiver != self.me:
                raise MessageError(R.UNEXPECTED, f"{self.me} in {self.session} round {self.round}: got {m.key}")
            got[m.sender] = m
        if len(got) != len(want):
            missing = sorted(k.sender for k in want if k.sender not in got)
            raise MessageError(
                R.MISSING_MESSAGES, f"{self.me} in {self.session} round {self.round}: nothing from {missing}"
            )
        if self.phase == "average":
            self._average_step([got[p] for p in self._nbr_names])
        else:
            self._agree_step([got[p] for p in self._nbr_names])

    def _average_step(self, msgs: list[ConsensusMessage]) -> None:
        x_old = self._x
        total = _neighbour_sum([m.value for m in msgs])
        # xi_s(t+1) = xi_s(t) + eps sum_j (xi_j(t) - xi_s(t))
        x_new = x_old + self.eps * (total - len(msgs) * x_old)
        change = float(np.abs(x_new - x_old).max() / max(float(np.abs(x_new).max()), 1e-300))
        # h(t+1)[0] = own change; h(t+1)[d] = max over self and neighbours of h(t)[d-1]
        h = np.empty_like(self._h)
        h[0] = change
        h[1:] = self._h[:-1]
        for m in msgs:
            np.maximum(h[1:], m.flood[:-1], out=h[1:])
        self._x, self._h = x_new, h
        self._t += 1
        self.history.append(change)
        if h[self._D] <= self.tol:
            self._finish_average()
        elif self._t >= self.max_rounds:
            raise ConvergenceError(
                f"consensus session {self.session}: no agreement within {self.max_rounds} rounds "
                f"(largest change {h[self._D]:.3g} > tolerance {self.tol:g}); raise max_rounds or the tolerance"
            )

    def _finish_average(self) -> None:
        self.rounds = self._t
        self.phase = "agree"
        self._agree_round = 0
        if self._D == 0:
            self.result = self._x.copy()

    def _agree_step(self, msgs: list[ConsensusMessage]) -> None:
        for m in msgs:
            label = int(m.flood[0])
            if label < self._leader:
                self._leader, self._x = label, np.array(m.value)
        self._agree_round += 1
        if self._agree_round >= self._D:
            self.result = self._x.copy()


# -- the vectorised twin -----------------------------------------------------------------------
@dataclass(frozen=True)
class ConsensusResult:
    """Outcome of :func:`average_consensus`.

    Attributes
    ----------
    values : (d,) the agreed average (the value of node 0 at the stopping round)
    per_node : (S, d) every node's value at the stopping round
    rounds : averaging rounds until everybody stopped (includes the D-round stopping lag)
    """

    values: FloatArray
    per_node: FloatArray
    rounds: int


def average_consensus(
    X0: ArrayLike,
    graph: PeerGraph,
    step: StepRule | float = "degree",
    tol: float = 1e-10,
    max_rounds: int = 100_000,
) -> ConsensusResult:
    """Vectorised twin of :class:`ConsensusSession`: X (S, d) -> the average, same rounds.

    Node i of ``graph`` holds row i. Iterates X(t+1) = X(t) - eps L X(t) and stops
    at the first round t with max over nodes of the relative change of round
    t - D below ``tol`` (what the sessions learn by flooding). The result is
    node 0's value, as in the sessions' agreement phase with identity labels.

    Raises
    ------
    ConvergenceError
        When ``max_rounds`` is reached first.
    """
    X = np.array(X0, dtype=np.float64, copy=True)
    if X.ndim != 2 or X.shape[0] != graph.n_nodes:
        raise ConfigError(f"consensus input must be (S={graph.n_nodes}, d), got shape {X.shape}")
    eps = step_size(graph, step)
    D = graph.diameter
    changes: list[float] = [math.inf]
    t = 0
    nbrs = graph.neighbours
    degrees = graph.degrees.astype(np.float64)[:, None]
    # neighbour slots: column j of ``slots`` is every node's j-th neighbour (padded with -1)
    width = graph.max_degree
    slots = np.full((graph.n_nodes, width), -1, dtype=np.int64)
    for i, row in enumerate(nbrs):
        slots[i, : len(row)] = row
    while D > 0:
        # sum over neighbours in neighbour order (as the sessions add), then minus degree x own value
        nbr_sum = np.where((slots[:, 0] >= 0)[:, None], X[slots[:, 0]], 0.0)
        for j in range(1, width):
            nbr_sum = nbr_sum + np.where((slots[:, j] >= 0)[:, None], X[slots[:, j]], 0.0)
        X_new = X + eps * (nbr_sum - degrees * X)
        rel = np.max(np.abs(X_new - X), axis=1) / np.maximum(np.max(np.abs(X_new), axis=1), 1e-300)
        X = X_new
        t += 1
        changes.append(float(rel.max()))
        if t >= D and changes[t - D] <= tol:
            break
        if t >= max_rounds:
            raise ConvergenceError(f"consensus: no agreement within {max_rounds} rounds")
    return ConsensusResult(X[0].copy(), X, t)
