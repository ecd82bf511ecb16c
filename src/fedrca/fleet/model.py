"""A fleet of participants learning one CollabDict model peer to peer (pure core, no I/O).

Each :class:`FleetParticipant` holds its own raw data and runs the whole protocol
as a generator: it yields an :class:`~fedrca.fleet.consensus.Exchange`
(messages to send, messages it waits for) every round and is resumed with the
messages it waited for. Nothing else passes between participants, so the same
participant runs in one process (:class:`InProcessNetwork`, :func:`simulate_fleet`)
or over Kafka (:mod:`fedrca.application.fleet.kafka`).

The protocol of one participant:

1. **scale**: three sums, each centred on what the previous one agreed: [N, sum x] ->
   the mean c; sum (x - c)^2 -> per-variable scales s; sum z, sum z z^T with z = (x - c) / s ->
   the fleet standardiser and candidate initial means (identical everywhere,
   :func:`fedrca.fleet.collabdict.initialise`). Raw sums [N, sum x, sum x x^T]
   would lose a sensor with a large mean and a small spread to cancellation;
   **init**: the fleet sums every candidate's local log-likelihood and keeps the best;
2. **fit**: EM iterations ``local_update -> consensus -> optimize`` until the fleet
   log-likelihood settles (every participant decides the same, from the same sums);
3. **folds** (``settings.folds`` > 0): the same EM with one block of every participant
   held out, for f = 1..F (participant i's block (f + i) mod F, staggered); each
   participant scores its held-out blocks;
4. **threshold**: the fleet sums a histogram of those nominal scores; the fleet's
   threshold (the model's) is its ``percentile`` (no score leaves a participant, only
   bin counts, chunked); **calibration**: each participant's own threshold from its own
   held-out scores, or, for those with too few, one more histogram pooled from just
   them (:mod:`fedrca.fleet.calibration`).

Every sum goes through :meth:`FleetParticipant.fleet_sum`: random chunks, one
consensus session per chunk on a re-labelled peer graph, agreement on one value.

Examples
--------
>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> data = {f"p{s}": rng.normal(size=(60, 2)) + (4.0 if s % 2 else 0.0) for s in range(5)}
>>> run = simulate_fleet(data, FleetSettings(n_components=2, folds=0), seed=1)
>>> run.identical, run.model.n_components
(True, 2)
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedrca.contracts.deadletter import DeadLetterReason as R
from fedrca.exceptions import ConfigError, DataError, MessageError, ModelError
from fedrca.fleet.calibration import Calibration, conformal_percentile, held_out_block, own_calibration
from fedrca.fleet.collabdict import (
    FleetInit,
    FleetModel,
    FleetSettings,
    GlobalLearner,
    LocalLearner,
    anomaly_score,
    bin_index,
    coarse_edges,
    fine_edges,
    fleet_center,
    initialise,
    mean_statistics,
    moment_statistics,
    quantile_bin,
    rank_value,
    rough_scale,
    score_floor,
    score_histogram,
    spread_statistics,
)
from fedrca.fleet.consensus import (
    ConsensusMessage,
    ConsensusSession,
    Exchange,
    MessageKey,
    PeerGraph,
    make_chunks,
    session_labellings,
    step_size,
)

__all__ = [
    "FleetParticipant",
    "FleetRun",
    "InProcessNetwork",
    "ParticipantResult",
    "Protocol",
    "simulate_fleet",
]

FloatArray = NDArray[np.float64]
Protocol = Generator[Exchange, list[ConsensusMessage], "ParticipantResult"]


@functools.lru_cache(maxsize=512)
def _labellings(graph: PeerGraph, n_chunks: int, seed: int, key: str) -> NDArray[np.int64]:
    labels = session_labellings(graph, n_chunks, seed, key)
    labels.setflags(write=False)
    return labels


@dataclass(frozen=True)
class ParticipantResult:
    """What one participant holds at the end of the protocol.

    Attributes
    ----------
    name : the participant
    model : the shared model (identical at every participant), with the fleet threshold
    weights : (K,) its own mixture weights pi^s (private)
    iterations : EM iterations of the main fit
    session_rounds : averaging rounds of every consensus session it took part in
    entropies : per EM iteration of the main fit, the l-diversity H_k of its release (K,)
    privacy_fired : per EM iteration, whether the monitor fired
    init : the standardiser and initial parameters agreed from the scale sums
    calibration : its own alarm rule (private: threshold and statistic, :mod:`fedrca.fleet.calibration`)
    """

    name: str
    model: FleetModel
    weights: FloatArray
    iterations: int
    session_rounds: dict[str, int]
    entropies: list[FloatArray]
    privacy_fired: list[bool]
    init: FleetInit
    calibration: Calibration


class FleetParticipant:
    """One member of the fleet: private data, private randomness, the protocol generator.

    Parameters
    ----------
    name : this participant's name (unique in the fleet)
    data : (N, M) its raw nominal data; never leaves the object
    names : every participant's name, in the fleet's agreed order (node i of ``graph``
        before re-labelling is ``names[i]``)
    graph : the peer graph over ``len(names)`` nodes
    settings : the fleet settings (shared)
    seed : this participant's **private** seed (chunks, pseudo-samples); None = fresh
        entropy (in deployment nobody else may know it)

    Attributes
    ----------
    released : every statistics vector it released to a consensus (evidence for tests;
        only its random chunks ever travel)
    """

    def __init__(
        self,
        name: str,
        data: ArrayLike,
        names: Sequence[str],
        graph: PeerGraph,
        settings: FleetSettings,
        seed: int | Sequence[int] | None = None,
    ) -> None:
        X = np.asarray(data, dtype=np.float64)
        if X.ndim != 2 or len(X) < 1:
            raise DataError(f"participant '{name}': data must be (N >= 1, M), got shape {X.shape}")
        if not np.all(np.isfinite(X)):
            raise DataError(f"participant '{name}': data contain NaN or inf")
        if name not in names:
            raise ConfigError(f"participant '{name}' is not among the fleet's names {list(names)}")
        if len(set(names)) != len(names):
            raise ConfigError(f"participant names must be unique, got {list(names)}")
        if graph.n_nodes != len(names):
            raise ConfigError(f"the peer graph has {graph.n_nodes} nodes for {len(names)} participants")
        self.name = name
        self._X = X
        self.names = tuple(names)
        self.index = self.names.index(name)
        self.graph = graph
        self.settings = settings
        self.eps = step_size(graph, settings.step)
        self._rng = np.random.default_rng(seed)
        self.released: list[tuple[str, FloatArray]] = []
        self.session_rounds: dict[str, int] = {}

    @property
    def n_dims(self) -> int:
        """M."""
        return int(self._X.shape[1])

    # -- consensus -------------------------------------------------------------------------------
    def fleet_sum(self, vec: ArrayLike, key: str) -> Generator[Exchange, list[ConsensusMessage], FloatArray]:
        """The fleet's sum of everybody's ``vec`` (d,) under session ``key`` (a sub-generator).

        Splits ``vec`` into C random chunks, runs one consensus session per chunk on
        the re-labelled graph of that chunk, and returns S x the sum of the agreed averages.
        """
        x = np.asarray(vec, dtype=np.float64)
        self.released.append((key, x.copy()))
        s = self.settings
        chunks = make_chunks(x, s.chunks, self._rng)
        labels = _labellings(self.graph, s.chunks, s.seed, key)
        inverse = np.argsort(labels, axis=1)
        sessions = []
        for c in range(s.chunks):
            peers = [self.names[int(i)] for i in inverse[c]]
            sessions.append(
                ConsensusSession(
                    f"{key}/c{c}",
                    self.name,
                    int(labels[c, self.index]),
                    peers,
                    self.graph,
                    chunks[c],
                    self.eps,
                    s.tolerance,
                    s.max_rounds,
                )
            )
        while not all(ses.done for ses in sessions):
            outgoing = tuple(m for ses in sessions for m in ses.outgoing())
            expected = frozenset().union(*(ses.expected() for ses in sessions))
            inbox = yield Exchange(outgoing, expected)
            by_session: dict[str, list[ConsensusMessage]] = defaultdict(list)
            for m in inbox:
                by_session[m.session].append(m)
            for ses in sessions:
                if not ses.done:
                    ses.receive(by_session.pop(ses.session, []))
            if by_session:
                raise MessageError(R.UNEXPECTED, f"{self.name}: messages of unknown sessions {sorted(by_session)}")
        for ses in sessions:
            self.session_rounds[ses.session] = ses.rounds
        S = self.graph.n_nodes
        # sum_s xi^s = S * sum_c average_c
        return float(S) * np.sum(np.stack([ses.result for ses in sessions if ses.result is not None]), axis=0)

    # -- the protocol ------------------------------------------------------------------------------
    def _em(
        self, Z: FloatArray, init: FleetInit, key: str, trace: list[tuple[FloatArray, bool]] | None = None
    ) -> Generator[Exchange, list[ConsensusMessage], tuple[GlobalLearner, LocalLearner]]:
        """EM iterations until the fleet decides to stop; ``trace`` collects (entropies, fired) per release."""
        glob = GlobalLearner(init, self.settings)
        local = LocalLearner(Z, len(init.means), self.settings, self._rng)
        while True:
            theta = local.local_update(glob)
            if trace is not None:
                trace.append((local.entropies.copy(), local.fired))
            total = yield from self.fleet_sum(theta, f"{key}/it{glob.iterations}")
            done, keep = glob.optimize(total)
            local.keep(keep)
            if done:
                return glob, local

    def _pooled_quantiles(
        self, excesses: Sequence[FloatArray], percentiles: Sequence[Callable[[int], float]]
    ) -> Generator[Exchange, list[ConsensusMessage], list[tuple[float | None, int]]]:
        """(quantile, count) of everybody's ``excesses[j]`` at ``percentiles[j](pooled count)`` for every j,
        by the two-pass histogram (:func:`~fedrca.fleet.collabdict.pooled_quantile`); (None, 0) for a j
        nobody counted a score in (everybody decides that from the same sum).

        The J histograms travel side by side in one session per pass: as many messages as one quantile.
        """
        coarse = coarse_edges()
        bins = len(coarse) - 1
        mine = [score_histogram(e, coarse) for e in excesses]
        # consensus sums are within ~1e-10 of whole counts; rounding makes them exact
        c1 = np.round((yield from self.fleet_sum(np.concatenate(mine), "threshold/coarse"))).reshape(-1, bins)
        found = [
            quantile_bin(c, pct(int(c.sum()))) if c.sum() > 0 else None for c, pct in zip(c1, percentiles, strict=True)
        ]
        fines = [fine_edges(coarse, q[0] if q is not None else 0) for q in found]
        inside = [
            score_histogram(e[bin_index(e, coarse) == q[0]], fine) if q is not None else np.zeros(bins)
            for e, q, fine in zip(excesses, found, fines, strict=True)
        ]
        c2 = np.round((yield from self.fleet_sum(np.concatenate(inside), "threshold/fine"))).reshape(-1, bins)
        return [
            (None, 0) if q is None else (rank_value(c, fine, q[1]), int(c_all.sum()))
            for q, c, fine, c_all in zip(found, c2, fines, c1, strict=True)
        ]

    def _calibrate(
        self, blocks: list[FloatArray], floor: float
    ) -> Generator[Exchange, list[ConsensusMessage], tuple[float, Calibration]]:
        """(the fleet's threshold, this participant's alarm rule); the twin: :func:`fedrca.fleet.collabdict.calibrate`.

        The fleet's threshold pools everybody's held-out scores. The participant's rule is its own
        conformal percentile when its held-out scores certify one; else the threshold pooled, in the
        same sessions, from just the participants in that situation (a participant with its own
        threshold adds an empty histogram there).
        """
        s = self.settings
        excess = np.concatenate(blocks) - floor
        own = own_calibration(blocks, s.percentile, s.ewma) if s.threshold_scope == "participant" else None
        small = excess if s.threshold_scope == "participant" and own is None else np.empty(0)
        (pooled, count), (shared, n) = yield from self._pooled_quantiles(
            [excess, small], [lambda _: s.percentile, lambda m: conformal_percentile(m, s.percentile)]
        )
        if pooled is None:
            raise DataError("no nominal scores to take a threshold from")
        threshold = floor + pooled
        if s.threshold_scope == "fleet":
            return threshold, Calibration(threshold, None, "fleet", count)
        if own is not None:
            return threshold, own
        if shared is None:  # cannot happen: this participant's own scores are in the pool
            raise ModelError(f"{self.name}: the shared threshold pooled no score")
        return threshold, Calibration(floor + shared, None, "shared", n)

    def protocol(self) -> Protocol:
        """The whole protocol as a generator (see the module docstring); returns a :class:`ParticipantResult`."""
        s = self.settings
        # the twin: collabdict.initialise_centralised (same stages, exact sums)
        n, center = fleet_center((yield from self.fleet_sum(mean_statistics(self._X), "scale/mean")))
        spread = yield from self.fleet_sum(spread_statistics(self._X, center), "scale/spread")
        scale = rough_scale(spread, n)
        moments = yield from self.fleet_sum(moment_statistics(self._X, center, scale), "scale/moments")
        init = initialise(n, center, scale, moments, s)
        Z = init.scaler.transform(self._X)
        if s.n_init > 1:
            init = init.choose((yield from self.fleet_sum(init.candidate_loglik(Z), "init")))
        trace: list[tuple[FloatArray, bool]] = []
        glob, local = yield from self._em(Z, init, "fit", trace)
        floor = score_floor(glob.precisions)
        blocks: list[FloatArray] = []
        if s.folds:
            # the twin: collabdict.held_out_scores (blocks staggered by the participant's position)
            for f in range(s.folds):
                rows = held_out_block(len(Z), s.folds, f, self.index)
                fglob, flocal = yield from self._em(np.delete(Z, rows, axis=0), init, f"fold{f}")
                blocks.append(anomaly_score(Z[rows], flocal.weights, fglob.means, fglob.precisions))
        else:
            blocks.append(anomaly_score(Z, local.weights, glob.means, glob.precisions))
        threshold, calibration = yield from self._calibrate(blocks, floor)
        info = {
            "participants": len(self.names),
            "samples": float(init.n_total),
            "iterations": glob.iterations,
            "converged": glob.converged,
            "loglik": list(glob.loglik),
            "components": glob.n_components,
        }
        model = FleetModel(init.scaler.mean, init.scaler.std, glob.means, glob.precisions, threshold, info)
        return ParticipantResult(
            self.name,
            model,
            local.weights.copy(),
            glob.iterations,
            dict(self.session_rounds),
            [e for e, _ in trace],
            [f for _, f in trace],
            init,
            calibration,
        )


# -- in-process transport -------------------------------------------------------------------------
class InProcessNetwork:
    """Runs participants' protocols in one process, passing only their messages.

    Parameters
    ----------
    record : keep every message in :attr:`log` (tests inspect what each participant saw)

    Attributes
    ----------
    messages : number of messages delivered; bytes : their payload bytes (value + flood)
    log : the delivered messages, in delivery order (when ``record``)
    """

    def __init__(self, record: bool = False) -> None:
        self.record = record
        self.messages = 0
        self.bytes = 0
        self.log: list[ConsensusMessage] = []

    def run(self, protocols: Mapping[str, Protocol]) -> dict[str, ParticipantResult]:
        """Drive every protocol to its end; returns each participant's result.

        Raises
        ------
        ModelError
            When no participant can proceed (a protocol waits for a message nobody sends).
        """
        mailbox: dict[str, dict[MessageKey, ConsensusMessage]] = {name: {} for name in protocols}
        pending: dict[str, Exchange] = {}
        results: dict[str, ParticipantResult] = {}
        gens = dict(protocols)
        for name, gen in gens.items():
            try:
                ex = next(gen)
            except StopIteration as stop:
                results[name] = stop.value
                continue
            self._deliver(ex.outgoing, mailbox)
            pending[name] = ex
        while pending:
            progressed = False
            for name in list(pending):
                ex = pending[name]
                box = mailbox[name]
                if not all(k in box for k in ex.expected):
                    continue
                inbox = [box.pop(k) for k in sorted(ex.expected)]
                progressed = True
                try:
                    nxt = gens[name].send(inbox)
                except StopIteration as stop:
                    results[name] = stop.value
                    del pending[name]
                    continue
                self._deliver(nxt.outgoing, mailbox)
                pending[name] = nxt
            if not progressed:
                waiting = {n: sorted(k for k in ex.expected if k not in mailbox[n])[:3] for n, ex in pending.items()}
                raise ModelError(f"fleet deadlock: participants wait for messages nobody sends: {waiting}")
        return results

    def _deliver(self, messages: Iterable[ConsensusMessage], mailbox: dict[str, dict[MessageKey, ConsensusMessage]]):
        for m in messages:
            box = mailbox.get(m.receiver)
            if box is None:
                raise MessageError(R.UNKNOWN_RECEIVER, f"{m.sender} sent to unknown participant {m.receiver!r}")
            if m.key in box:
                raise MessageError(R.DUPLICATE, f"{m.receiver} already holds {m.key}")
            box[m.key] = m
            self.messages += 1
            self.bytes += m.value.nbytes + m.flood.nbytes
            if self.record:
                self.log.append(m)


@dataclass(frozen=True)
class FleetRun:
    """Outcome of a simulated fleet.

    Attributes
    ----------
    results : per participant its :class:`ParticipantResult`
    graph : the peer graph used
    messages, bytes : messages delivered and their payload bytes
    """

    results: dict[str, ParticipantResult]
    graph: PeerGraph
    messages: int
    bytes: int
    participants: list[FleetParticipant] = field(default_factory=list, repr=False)

    @property
    def model(self) -> FleetModel:
        """The shared model (the first participant's copy)."""
        return next(iter(self.results.values())).model

    @property
    def identical(self) -> bool:
        """True when every participant holds bit-identical shared parameters and threshold."""
        ref = self.model
        return all(
            np.array_equal(r.model.means, ref.means)
            and np.array_equal(r.model.precisions, ref.precisions)
            and np.array_equal(r.model.center, ref.center)
            and r.model.threshold == ref.threshold
            for r in self.results.values()
        )

    def max_parameter_difference(self) -> float:
        """Largest absolute difference of any shared parameter between two participants."""
        ref = self.model
        worst = 0.0
        for r in self.results.values():
            for a, b in ((r.model.means, ref.means), (r.model.precisions, ref.precisions)):
                if a.shape != b.shape:
                    return math.inf
                worst = max(worst, float(np.max(np.abs(a - b))))
        return worst

    def rounds(self, prefix: str = "fit/") -> list[int]:
        """Averaging rounds of the sessions whose name starts with ``prefix`` (first participant's record)."""
        first = next(iter(self.results.values()))
        return [r for k, r in first.session_rounds.items() if k.startswith(prefix)]

    def summary(self) -> dict[str, Any]:
        """JSON-friendly figures of the run."""
        fit = self.rounds("fit/")
        model = self.model
        return {
            "participants": len(self.results),
            "graph": {
                "nodes": self.graph.n_nodes,
                "max_degree": self.graph.max_degree,
                "diameter": self.graph.diameter,
            },
            "components": model.n_components,
            "iterations": next(iter(self.results.values())).iterations,
            "consensus_rounds_mean": float(np.mean(fit)) if fit else 0.0,
            "consensus_rounds_max": int(max(fit)) if fit else 0,
            "messages": self.messages,
            "megabytes": round(self.bytes / 1e6, 3),
            "threshold": model.threshold,
            "identical": self.identical,
            "privacy_warnings": {n: int(sum(r.privacy_fired)) for n, r in self.results.items()},
        }


def simulate_fleet(
    datasets: Mapping[str, ArrayLike],
    settings: FleetSettings,
    graph: PeerGraph | None = None,
    seed: int = 0,
    network: InProcessNetwork | None = None,
) -> FleetRun:
    """Run a whole fleet in this process, participants exchanging messages only.

    Parameters
    ----------
    datasets : participant name -> its raw nominal data (N_s, M); the mapping's order is
        the fleet's agreed order
    settings : the fleet settings
    graph : the peer graph (default :meth:`PeerGraph.default` for the fleet size)
    seed : derives each participant's private seed (reproducible simulations only)
    network : the in-process network to use (e.g. one that records messages)
    """
    names = list(datasets)
    if not names:
        raise DataError("a fleet needs at least one participant")
    graph = graph or PeerGraph.default(len(names))
    seeds = np.random.SeedSequence(seed).spawn(len(names))
    participants = [
        FleetParticipant(n, datasets[n], names, graph, settings, seed=int(sq.generate_state(1)[0]))
        for n, sq in zip(names, seeds)
    ]
    net = network or InProcessNetwork()
    results = net.run({p.name: p.protocol() for p in participants})
    return FleetRun({n: results[n] for n in names}, graph, net.messages, net.bytes, participants)
