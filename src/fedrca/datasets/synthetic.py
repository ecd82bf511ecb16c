"""Seeded synthetic multi-plant data with known interdependencies and root causes.

Two generators from the papers:

* :func:`linear_multiplant` (P2): a linear state space whose block transition
  matrix has off-diagonal blocks A_mn = cross-plant Granger effects, with
  injected mean shifts;
* :func:`nonlinear_network` (P1) and its two-plant special case
  :func:`nonlinear_two_plant`: smooth sinusoidal nominal states, nonlinear
  transitions and cross-plant dependency along a directed graph, nonlinear
  measurement map, sustained anomalies injected in one root plant at a time.

Both return a :class:`SyntheticData` with ground-truth labels. Fully vectorised
except the unavoidable time recursion of the state (one numpy step per sample).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedrca.exceptions import DataError

__all__ = [
    "AnomalyEvent",
    "SyntheticData",
    "chain_graph",
    "linear_multiplant",
    "nonlinear_network",
    "nonlinear_two_plant",
    "schedule_events",
]

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class AnomalyEvent:
    """One injected root-cause anomaly: samples ``start <= t < end`` in plant ``root``."""

    start: int
    end: int
    root: int


@dataclass(frozen=True)
class SyntheticData:
    """Generated plant data and its ground truth.

    Attributes
    ----------
    Y : (T, sum D_m) sensors, plants side by side
    X : (T, sum P_m) true states
    plants : plant names, e.g. ``["plant1", "plant2"]``
    sensor_slices : per plant, the slice of its sensor columns in Y
    state_slices : per plant, the slice of its state columns in X
    graph : (M, M) bool, ``graph[n, m]`` = plant n drives plant m
    A : (sum P, sum P) true block transition (linear generator; None otherwise)
    C : per plant (D_m, P_m) measurement matrices
    U : (T, sum U_m) control inputs, plants side by side (linear generator with inputs; None otherwise);
        row t is u(t), which drives the transition into t + 1
    B : (sum P, sum U) true block input matrix (block (m, n) = B_mn, the effect of plant n's
        inputs on plant m's state), or None
    input_slices : per plant, the slice of its input columns in U (empty when no inputs)
    events : injected anomalies
    root_cause : (T,) int, root plant index during an event, -1 otherwise
    system : the generator's remaining parameters (nonlinear generator: ``R`` (M, 2, 2),
        ``W`` (M, M, 2, 2), ``mask`` (M, M), ``G`` per plant, ``cycle`` (T, M, 2), ``coupling``,
        ``state_noise``, ``sensor_noise``; linear: ``state_noise``, ``sensor_noise``), for a
        centralised oracle that knows the true model (comparison only)
    """

    Y: FloatArray
    X: FloatArray
    plants: list[str]
    sensor_slices: list[slice]
    state_slices: list[slice]
    graph: NDArray[np.bool_]
    C: list[FloatArray]
    events: list[AnomalyEvent] = field(default_factory=list)
    root_cause: NDArray[np.int64] = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    A: FloatArray | None = None
    system: dict[str, Any] = field(default_factory=dict)
    U: FloatArray | None = None
    B: FloatArray | None = None
    input_slices: list[slice] = field(default_factory=list)

    @property
    def n_plants(self) -> int:
        """M."""
        return len(self.plants)

    def plant_data(self, m: int) -> FloatArray:
        """Sensors of plant m, (T, D_m)."""
        return self.Y[:, self.sensor_slices[m]]

    def sensor_names(self, m: int) -> list[str]:
        """Column names of plant m's sensors, e.g. ``plant1.y1``."""
        return [f"{self.plants[m]}.y{i + 1}" for i in range(self.sensor_slices[m].stop - self.sensor_slices[m].start)]

    def columns(self) -> list[str]:
        """All sensor column names in Y order."""
        return [name for m in range(self.n_plants) for name in self.sensor_names(m)]

    def input_names(self, m: int) -> list[str]:
        """Column names of plant m's inputs, e.g. ``plant1.u1`` (empty without inputs)."""
        if not self.input_slices:
            return []
        s = self.input_slices[m]
        return [f"{self.plants[m]}.u{i + 1}" for i in range(s.stop - s.start)]

    def input_columns(self) -> list[str]:
        """All input column names in U order."""
        return [name for m in range(self.n_plants) for name in self.input_names(m)]

    def input_block(self, m: int, n: int) -> FloatArray:
        """True B_mn (effect of plant n's inputs on plant m's state), linear generator with inputs only."""
        if self.B is None:
            raise DataError("this data set has no control inputs")
        return self.B[self.state_slices[m], self.input_slices[n]]

    def block(self, m: int, n: int) -> FloatArray:
        """True A_mn (effect of plant n's state on plant m's), linear generator only."""
        if self.A is None:
            raise DataError("this data set has no linear transition matrix")
        return self.A[self.state_slices[m], self.state_slices[n]]


def chain_graph(n_plants: int) -> NDArray[np.bool_]:
    """Adjacency of the chain 1 -> 2 -> ... -> M (``graph[n, m]`` = n drives m).

    Examples
    --------
    >>> chain_graph(3).astype(int).tolist()
    [[0, 1, 0], [0, 0, 1], [0, 0, 0]]
    """
    graph = np.zeros((n_plants, n_plants), dtype=bool)
    idx = np.arange(n_plants - 1)
    graph[idx, idx + 1] = True
    return graph


def schedule_events(
    n_samples: int,
    n_events: int,
    n_plants: int,
    duration: int,
    rng: np.random.Generator,
    warm_up: int = 50,
    min_gap: int = 40,
    roots: list[int] | None = None,
) -> list[AnomalyEvent]:
    """Non-overlapping events of ``duration`` samples, evenly spread with random jitter.

    Roots cycle through ``roots`` (default all plants) so each plant is a root equally often.
    """
    if n_events == 0:
        return []
    slot = (n_samples - warm_up) // n_events
    if slot < duration + min_gap:
        raise DataError(
            f"{n_events} events of {duration} samples need at least "
            f"{warm_up + n_events * (duration + min_gap)} samples, got {n_samples}"
        )
    candidates = list(range(n_plants)) if roots is None else roots
    jitter = rng.integers(0, slot - duration - min_gap + 1, size=n_events)
    starts = warm_up + np.arange(n_events) * slot + min_gap // 2 + jitter
    order = rng.permutation(n_events)
    return [
        AnomalyEvent(int(s), int(s) + duration, candidates[int(order[i]) % len(candidates)])
        for i, s in enumerate(starts)
    ]


def _root_labels(n_samples: int, events: list[AnomalyEvent]) -> NDArray[np.int64]:
    labels = np.full(n_samples, -1, dtype=np.int64)
    for ev in events:
        labels[ev.start : ev.end] = ev.root
    return labels


def linear_multiplant(
    n_samples: int = 2000,
    n_plants: int = 2,
    sensors_per_plant: int = 8,
    states_per_plant: int = 2,
    graph: NDArray[np.bool_] | None = None,
    coupling: float = 0.4,
    self_radius: float = 0.7,
    state_noise: float = 0.1,
    sensor_noise: float = 0.1,
    n_events: int = 0,
    shift: float = 3.0,
    duration: int = 20,
    seed: int = 0,
    system_seed: int = 0,
    inputs_per_plant: int = 0,
    input_coupling: float = 0.5,
    input_gain: float = 0.5,
    input_mean: float = 0.0,
    input_ar: float = 0.0,
) -> SyntheticData:
    """Linear multi-plant state space with known cross-plant blocks (P2), optionally with control inputs (P3).

    ``x(t+1) = A x(t) + w``, ``y_m(t) = C_m x_m(t) + v``; diagonal blocks are scaled
    random rotations of spectral radius ``self_radius``; an edge n -> m of ``graph``
    gets a random block A_mn of Frobenius norm ``coupling``; the whole A is rescaled if
    needed so its spectral radius stays below 0.95. Mean shifts of size ``shift`` are
    added to the root plant's state during each event and propagate through A.
    ``system_seed`` draws the system (A, C), ``seed`` the noise and the events, so
    training and test sets of the same system differ only in ``seed``.

    With ``inputs_per_plant`` = U > 0 every plant also has U control inputs and
    ``x(t+1) = A x(t) + B u(t) + w``: the own block B_mm has Frobenius norm ``input_gain``,
    an edge n -> m of ``graph`` gets a random block B_mn of norm ``input_coupling`` (so with
    the default chain, B_21 != 0 and B_12 = 0). Each input column is a stationary AR(1)
    process with mean ``input_mean``, unit variance and coefficient ``input_ar`` (0 = white),
    independent of the noises (the inputs are exogenous). B is drawn after A and C, so a
    system with inputs has the same A and C as the one without.

    Examples
    --------
    >>> data = linear_multiplant(n_samples=300, seed=1)
    >>> data.Y.shape, bool(np.linalg.norm(data.block(0, 1)) == 0)
    ((300, 16), True)
    >>> ctl = linear_multiplant(n_samples=300, seed=1, inputs_per_plant=2)
    >>> ctl.U.shape, bool(np.linalg.norm(ctl.input_block(0, 1)) == 0), bool(np.array_equal(ctl.A, data.A))
    ((300, 4), True, True)
    """
    if inputs_per_plant < 0 or not -1.0 < input_ar < 1.0:
        raise DataError(f"need inputs_per_plant >= 0 and -1 < input_ar < 1, got {inputs_per_plant}, {input_ar}")
    sys_rng = np.random.default_rng(system_seed)
    # Separate streams: the noise does not depend on how many events are injected.
    rng, event_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    M, P, D = n_plants, states_per_plant, sensors_per_plant
    graph = chain_graph(M) if graph is None else np.asarray(graph, dtype=bool)
    if graph.shape != (M, M):
        raise DataError(f"graph must be ({M}, {M}), got {graph.shape}")
    A = np.zeros((M * P, M * P))
    for m in range(M):
        Q_rot, _ = np.linalg.qr(sys_rng.normal(size=(P, P)))
        A[m * P : (m + 1) * P, m * P : (m + 1) * P] = self_radius * Q_rot
    for n, m in zip(*np.nonzero(graph)):
        if n == m:
            continue
        block = sys_rng.normal(size=(P, P))
        A[m * P : (m + 1) * P, n * P : (n + 1) * P] = coupling * block / np.linalg.norm(block)
    radius = np.max(np.abs(np.linalg.eigvals(A)))
    if radius >= 0.95:
        A *= 0.95 / radius
    C = [sys_rng.normal(size=(D, P)) / np.sqrt(P) for _ in range(M)]
    K = inputs_per_plant
    B: FloatArray | None = None
    U: FloatArray | None = None
    drive = np.zeros((n_samples, M * P))  # B u(t-1), the input's push into x(t)
    x = np.zeros(M * P)
    if K:
        B = np.zeros((M * P, M * K))
        for n in range(M):
            for m in range(M):
                if m != n and not graph[n, m]:
                    continue
                block = sys_rng.normal(size=(P, K))
                scale = input_gain if m == n else input_coupling
                B[m * P : (m + 1) * P, n * K : (n + 1) * K] = scale * block / np.linalg.norm(block)
        # a third stream, so the state and sensor noise are those of the same seed without inputs
        input_rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(3)[2])
        innovations = input_rng.normal(size=(n_samples, M * K))
        E = np.empty_like(innovations)
        E[0] = innovations[0]
        # e(t) = rho e(t-1) + sqrt(1 - rho^2) eps(t): stationary, unit variance
        for t in range(1, n_samples):
            E[t] = input_ar * E[t - 1] + np.sqrt(1.0 - input_ar**2) * innovations[t]
        U = input_mean + E
        drive[1:] = U[:-1] @ B.T
        drive[0] = np.full(M * K, input_mean) @ B.T
        # start at the stationary mean (I - A)^-1 B mean(u), so there is no start-up transient
        x = np.linalg.solve(np.eye(M * P) - A, B @ np.full(M * K, input_mean))
    events = schedule_events(n_samples, n_events, M, duration, event_rng)
    offsets = np.zeros((n_samples, M * P))
    for ev in events:
        offsets[ev.start : ev.end, ev.root * P : (ev.root + 1) * P] = shift / np.sqrt(P)
    noise = state_noise * rng.normal(size=(n_samples, M * P))
    X = np.zeros((n_samples, M * P))
    for t in range(n_samples):
        x = A @ x + drive[t] + noise[t] + offsets[t] * (1.0 - self_radius)
        X[t] = x
    Y = np.hstack([X[:, m * P : (m + 1) * P] @ C[m].T for m in range(M)])
    Y += sensor_noise * rng.normal(size=Y.shape)
    return SyntheticData(
        Y=Y,
        X=X,
        plants=[f"plant{m + 1}" for m in range(M)],
        sensor_slices=[slice(m * D, (m + 1) * D) for m in range(M)],
        state_slices=[slice(m * P, (m + 1) * P) for m in range(M)],
        graph=graph,
        C=C,
        events=events,
        root_cause=_root_labels(n_samples, events),
        A=A,
        system={"state_noise": state_noise, "sensor_noise": sensor_noise},
        U=U,
        B=B,
        input_slices=[slice(m * K, (m + 1) * K) for m in range(M)] if K else [],
    )


def nonlinear_network(
    graph: NDArray[np.bool_],
    n_samples: int = 3000,
    sensors_per_plant: int = 4,
    n_events: int = 0,
    magnitude: float = 2.0,
    duration: int = 10,
    coupling: float = 0.8,
    state_noise: float = 0.05,
    sensor_noise: float = 0.05,
    period: float = 50.0,
    seed: int = 0,
    system_seed: int = 0,
) -> SyntheticData:
    """Nonlinear plants (P = 2 states each) coupled along ``graph`` (P1's benchmark family).

    Per plant m::

        x_m(t+1) = 0.6 R(w_m) x_m(t) + 0.2 sin(x_m(t)) + s_m(t)
                   + coupling * sum_{n -> m} tanh(W_mn x_n(t)) + a_m(t) + w
        y_m(t)   = C_m x_m(t) + 0.1 G_m (x_m(t) ** 2) + v

    with a smooth sinusoid ``s_m(t)`` (the nominal operating cycle), rotations R,
    random W_mn, C_m (D x 2), G_m (D x 2), and ``a_m(t) = magnitude`` on both states
    of the root plant during each event (sustained, ``duration`` samples).
    ``system_seed`` draws the system and its operating cycle, ``seed`` the noise and events.

    Examples
    --------
    >>> data = nonlinear_network(chain_graph(2), n_samples=400, n_events=3, seed=0)
    >>> data.Y.shape, sorted({e.root for e in data.events}) <= [0, 1]
    ((400, 8), True)
    """
    sys_rng = np.random.default_rng(system_seed)
    # Separate streams: the noise does not depend on how many events are injected.
    rng, event_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    graph = np.asarray(graph, dtype=bool)
    M, P, D = graph.shape[0], 2, sensors_per_plant
    angles = sys_rng.uniform(0.2, 0.6, size=M)
    cos_a, sin_a = np.cos(angles), np.sin(angles)
    R = 0.6 * np.stack([np.stack([cos_a, -sin_a], -1), np.stack([sin_a, cos_a], -1)], 1)  # (M, 2, 2)
    W = sys_rng.normal(size=(M, M, P, P)) / np.sqrt(P)
    mask = graph.T.astype(np.float64)  # mask[m, n] = n drives m
    np.fill_diagonal(mask, 0.0)
    C = [sys_rng.normal(size=(D, P)) / np.sqrt(P) for _ in range(M)]
    G = [sys_rng.normal(size=(D, P)) / np.sqrt(P) for _ in range(M)]
    phases = sys_rng.uniform(0, 2 * np.pi, size=M)
    t_idx = np.arange(n_samples)[:, None]
    omega = 2 * np.pi / period
    cycle = 0.3 * np.stack([np.sin(omega * t_idx + phases), np.cos(omega * t_idx + phases)], -1)  # (T, M, 2)
    events = schedule_events(n_samples, n_events, M, duration, event_rng)
    anomaly = np.zeros((n_samples, M, P))
    for ev in events:
        anomaly[ev.start : ev.end, ev.root, :] = magnitude
    noise = state_noise * rng.normal(size=(n_samples, M, P))
    X = np.zeros((n_samples, M, P))
    x = np.zeros((M, P))
    for t in range(n_samples):
        drive = np.einsum("mnpq,nq->mnp", W, x)  # (M, N, P): W_mn x_n
        cross = coupling * np.einsum("mn,mnp->mp", mask, np.tanh(drive))
        x = np.einsum("mpq,mq->mp", R, x) + 0.2 * np.sin(x) + cycle[t] + cross + anomaly[t] + noise[t]
        X[t] = x
    Y = np.hstack([X[:, m] @ C[m].T + 0.1 * (X[:, m] ** 2) @ G[m].T for m in range(M)])
    Y += sensor_noise * rng.normal(size=Y.shape)
    return SyntheticData(
        Y=Y,
        X=X.reshape(n_samples, M * P),
        plants=[f"plant{m + 1}" for m in range(M)],
        sensor_slices=[slice(m * D, (m + 1) * D) for m in range(M)],
        state_slices=[slice(m * P, (m + 1) * P) for m in range(M)],
        graph=graph,
        C=C,
        events=events,
        root_cause=_root_labels(n_samples, events),
        system={
            "R": R,
            "W": W,
            "mask": mask,
            "G": G,
            "cycle": cycle,
            "coupling": coupling,
            "state_noise": state_noise,
            "sensor_noise": sensor_noise,
        },
    )


def nonlinear_two_plant(
    n_samples: int = 3000,
    n_events: int = 0,
    magnitude: float = 2.0,
    duration: int = 10,
    seed: int = 0,
    system_seed: int = 0,
) -> SyntheticData:
    """P1's benchmark: plant 1 drives plant 2, D = 4 sensors and P = 2 states each,
    sustained anomalies of ``magnitude`` 2.0 for ``duration`` 10 samples.

    Examples
    --------
    >>> data = nonlinear_two_plant(n_samples=500, n_events=4, seed=3)
    >>> data.graph.astype(int).tolist(), len(data.events)
    ([[0, 1], [0, 0]], 4)
    """
    return nonlinear_network(
        chain_graph(2),
        n_samples=n_samples,
        n_events=n_events,
        magnitude=magnitude,
        duration=duration,
        seed=seed,
        system_seed=system_seed,
    )
