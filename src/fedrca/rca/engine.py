"""The multi-plant RCA engine: published flags in, verdicts out (streaming, deterministic).

The engine never sees raw data or states: only each plant's published flag
pair ``(Z_c, Z_a)`` per row (sample) and the interdependency graph.

Hypotheses
----------
* ``none``: every plant nominal;
* ``root k`` (one per plant): plant k is the root cause; every other plant j is
  either affected (shows the propagated effect) or not, with prior probability
  ``1 - effect_absent`` when j is reachable from k in the interdependency graph
  and ``unlisted_path`` when it is not (a learned graph can miss real paths);
* ``external``: the root lies outside the monitored plants; every plant may
  show a propagated effect (probability 1/2), none is a root;
* ``unexplained``: a catch-all in which every plant picks its role on its own
  (normal or an effect, rarely a second root or augmented-only alarms, 1 % each);
  when it wins, the flag pattern is named by
  :func:`fedrca.rca.table.classify_pattern` (independent plants, imperfect
  training, multiple roots, unexplained).

Evidence
--------
1. **Flag likelihoods** (:class:`fedrca.rca.flagmodel.FlagModel`): per plant and
   row, ``log P(published pair | role)`` with the nominal false-alarm rates, the
   miss rate, the propagation visibility / separation and the randomized-response
   channel of the published epsilon, summed over the window. Whether a plant is
   affected is decided once per window (a mixture per plant), so a plant pays
   for an unlisted path once, not per row. A root alarms in nearly every row
   (**persistence**: an intermittent plant is an effect, e.g. one that control
   loops compensate), and a ``(1, 0)`` pair says "explained by the other plants".
2. **Onset order**: each plant runs a CUSUM of its flag log-likelihood ratio;
   the onset of an alarm is where the CUSUM last left zero. Under "root k", an
   affected plant that started alarming more than ``onset_slack`` rows before k
   contradicts the hypothesis (an effect cannot precede its cause):
   ``log order_violation`` per such plant. A plant listed in
   ``rca.unobserved_entry`` (its sensors do not measure what its own disturbances
   change) may be seen after the plants its disturbance enters: its root
   hypothesis mixes in (prior share ``unobserved_weight``) a variant timed from
   the **entry**, the earliest onset among k and its direct successors in the
   graph; every other plant must still not start before the entry, and k must
   alarm itself at some point.
3. **Accumulation** over a sliding horizon of ``horizon`` rows, cut at the start
   of the current alarm episode (the earliest onset among the alarming plants),
   so rows before the fault do not dilute the evidence and one isolated alarm is
   outweighed by the prior (``prior_anomaly``); once no plant alarms any more the
   episode is over and its rows no longer count (the verdict is cleared).

The posterior over the hypotheses is the softmax of the summed log evidence and
log priors. A :class:`Verdict` is issued when the best anomaly hypothesis
reaches ``min_posterior`` and the decision changed, or every ``heartbeat`` rows
while it holds; a "no anomaly" verdict clears an issued one. The same rows in
give the same verdicts out (no clock, no randomness), and the state survives a
restart through :meth:`RCAEngine.get_state` / :meth:`RCAEngine.set_state`.

With two plants, a complete graph, no noise (no false alarms, no misses, no
leak, perfect separation, no randomized response) and a horizon of 1 the
decision equals the look-up table :func:`fedrca.rca.table.lookup`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedrca.config import RCASettings, SiteConfig
from fedrca.contracts import NOMINAL_STATE_COUNTS, SERVER, ParameterArtifact, Verdict, flag_states
from fedrca.contracts.reason import MAX_PROPAGATED
from fedrca.exceptions import ArtifactError, ConfigError, DataError
from fedrca.rca.block import cusum_block, episode_bounds, state_counts, window_counts
from fedrca.rca.calibration import CalibrationMap, CalibrationMaps
from fedrca.rca.evidence import Evidence
from fedrca.rca.explain import annotate
from fedrca.rca.flagmodel import (
    AUGMENTED,
    NORMAL,
    FlagModel,
    SeverityModel,
    default_state_rates,
    encode_states,
    nominal_state_rates,
    state_rates_from_counts,
)
from fedrca.rca.graph import InterdependencyGraph
from fedrca.rca.memory import IncidentMemory, MemoryRows, penalty_rows, started_rows
from fedrca.rca.table import EXTERNAL_ROOT, NO_ANOMALY, ROOT_CAUSE, UNEXPLAINED, classify_pattern

__all__ = [
    "RCAEngine",
    "artifact_state_counts",
    "build_engine",
    "engine_for",
    "flag_model",
    "resolve_graph",
    "select_calibration",
    "severity_model",
    "training_rows",
]

log = logging.getLogger("fedrca.rca")

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: Most elements of an intermediate array of one pass of :meth:`RCAEngine.update_block` (rows x M x max(M, K))
_BLOCK_ELEMENTS = 1 << 17
#: Most rows of one pass of :meth:`RCAEngine.update_block` (and of one block the RCA stage judges at once,
#: :meth:`fedrca.streams.rca_stage.RCAStage.judge`): a block's working memory (its intermediates, the
#: per-row lists around them) is that of this many rows at most, however many rows a block holds, so a
#: catch-up burst of thousands of rows holds no more at once than a batch of this many rows
#: (``tests/streams/test_rca_memory.py::test_a_burst_is_digested_in_the_working_memory_of_a_few_hundred_rows``);
#: a few hundred rows keep the passes vectorised (their fixed cost spread over the rows)
BLOCK_ROWS = 256


def _logsumexp(a: FloatArray, axis: int) -> FloatArray:
    """log(sum(exp(a))) along ``axis``, stable, -inf where every term is -inf.

    (scipy.special.logsumexp does the same with array-API dispatch that costs more
    than the arithmetic for the engine's tiny per-row arrays.)
    """
    top = np.max(a, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return np.asarray(np.log(np.sum(np.exp(a - top), axis=axis)) + np.squeeze(top, axis=axis))


class RCAEngine:
    """Streaming RCA over published flags (see the module docstring for the model).

    Parameters
    ----------
    graph : interdependency graph; its plant order is the engine's plant order
    model : flag likelihoods of the plants (same order)
    settings : RCA settings (horizon, thresholds, priors, onset evidence)
    site : the site named in the verdicts

    Examples
    --------
    >>> import math, numpy as np
    >>> g = InterdependencyGraph.from_edges(["p1", "p2"], [("p1", "p2")])
    >>> model = FlagModel(np.tile([0.98, 0.0, 0.01, 0.01], (2, 1)), math.inf, [0.1], 0.05, [0.3, 0.9], [0.5])
    >>> engine = RCAEngine(g, model, RCASettings(horizon=10))
    >>> rows = [{"p1": (0, 0), "p2": (0, 0)}] * 5 + [{"p1": (1, 1), "p2": (1, 0)}] * 5
    >>> verdicts = [v for seq, row in enumerate(rows) if (v := engine.update(seq, row)) is not None]
    >>> v = verdicts[0]
    >>> v.root_cause, v.propagated, v.evidence_window, v.posterior > 0.9
    ('p1', ('p2',), (5, 6), True)
    """

    def __init__(
        self,
        graph: InterdependencyGraph,
        model: FlagModel,
        settings: RCASettings | None = None,
        site: str = "",
        severity: SeverityModel | None = None,
        calibration: CalibrationMap | None = None,
    ) -> None:
        if model.n_plants != graph.n_plants:
            raise DataError(f"flag model has {model.n_plants} plants, the graph {graph.n_plants}")
        self.site = site
        self.severity = severity
        self.settings = settings or RCASettings()
        self.graph = graph
        self.model = model
        self.plants: tuple[str, ...] = graph.plants
        self.horizon = self.settings.horizon
        M = len(self.plants)
        self._index = {name: m for m, name in enumerate(self.plants)}
        self._reach = graph.reachability
        s = self.settings
        # P(plant j affected | root k): trust the graph's paths, doubt its missing edges a little
        unlisted = s.unlisted_path_for(graph.source)
        with np.errstate(divide="ignore"):
            self._log_affected = np.where(self._reach, math.log(1.0 - s.effect_absent), np.log(unlisted))
            self._log_unaffected = np.where(self._reach, math.log(s.effect_absent), np.log1p(-unlisted))
        self._log_prop_weight = -math.log(model.n_propagated)
        self._log_root_weight = -math.log(model.n_root)
        # role weights of the catch-all "unexplained" hypothesis: normal, root, augmented-only, effect
        self._log_free_weights = np.log(np.array([0.49, 0.01, 0.01, 0.49]))
        p_root = s.prior_anomaly * (1.0 - s.prior_external) / M
        p_external = s.prior_anomaly * s.prior_external
        p_none = 1.0 - s.prior_anomaly - s.prior_unexplained
        self._log_prior = np.log(np.array([p_none, *([p_root] * M), p_external, s.prior_unexplained]))
        self._log_violation = math.log(s.order_violation)
        self._log_severity_violation = math.log(s.severity_violation)
        self._cusum_max = 2.0 * s.cusum_threshold
        # plants through which a disturbance can enter unseen (rca.unobserved_entry): their sensors
        # may show it only after their direct successors do (e.g. feed compositions measured by
        # flow meters alone), so their root hypothesis mixes in a variant timed from the entry
        unknown = [p for p in s.unobserved_entry if p not in self._index]
        if unknown:
            raise ConfigError(
                f"unknown plant(s) {', '.join(unknown)}; plants are {', '.join(self.plants)}",
                key="rca.unobserved_entry",
            )
        self._unseen = np.array([p in s.unobserved_entry for p in self.plants], dtype=bool)
        self._entry = graph.adjacency | np.eye(M, dtype=bool)  # where a root's disturbance enters
        self._log_seen = np.where(self._unseen, math.log1p(-s.unobserved_weight), 0.0)
        self._log_unseen = math.log(s.unobserved_weight)
        # the incident's memory matters only where the graph leaves a plant unreachable from another
        self._memory = IncidentMemory(M, s.incident_gap, s.incident_rows, forget=self.horizon)
        self._memory_counts = not bool((self._reach | np.eye(M, dtype=bool)).all())
        if calibration is not None:
            calibration.check(self.plants)
        self.calibration = calibration
        #: the maps ``calibration`` was picked from and the training rows it was picked by (:func:`build_engine`)
        self.calibrations: CalibrationMaps | None = None if calibration is None else CalibrationMaps.single(calibration)
        self.training_rows: int | None = None
        #: when a list, the evidence of every issued verdict is appended to it (benchmarks fit and score
        #: calibration maps on it: bench/bench_faults.py)
        self.evidence_log: list[Evidence] | None = None
        self.reset()

    # -- state -------------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget every row seen."""
        M, H = len(self.plants), self.horizon
        self._buf_seq = np.full(H, -1, dtype=np.int64)
        self._buf_codes = np.full((H, M), -1, dtype=np.int64)
        self._buf_valid = np.zeros(H, dtype=bool)
        self._n_rows = 0
        self._cusum = np.zeros(M)
        self._rise = np.full(M, -1, dtype=np.int64)
        self._onset = np.full(M, -1, dtype=np.int64)
        self._alarmed = np.zeros(M, dtype=bool)
        J = 0 if self.severity is None else self.severity.n_tracked
        # per plant and severity level j >= 2 (column j - 2): the same CUSUM machinery on "level >= j"
        self._lcusum = np.zeros((M, J))
        self._lrise = np.full((M, J), -1, dtype=np.int64)
        self._lonset = np.full((M, J), -1, dtype=np.int64)
        self._lalarmed = np.zeros((M, J), dtype=bool)
        self._episode_start: int | None = None
        self._episode_end: int | None = None
        self._last_seq: int | None = None
        self._active = False
        self._last_key: tuple[str, str | None, tuple[str, ...]] | None = None
        self._last_emit = -1
        self._memory.reset()
        self._last_moment: _Moment | None = None
        self.decision: Verdict | None = None

    def get_state(self) -> dict[str, Any]:
        """JSON-friendly streaming state (the evidence is recomputed from the stored flags)."""
        order = self._ordered_rows()
        return {
            "version": 1,
            "plants": list(self.plants),
            "rows": [[int(self._buf_seq[i]), self._buf_codes[i].tolist()] for i in order],
            "n_rows": self._n_rows,
            "cusum": self._cusum.tolist(),
            "rise": self._rise.tolist(),
            "onset": self._onset.tolist(),
            "alarmed": self._alarmed.astype(int).tolist(),
            "levels": {
                "cusum": self._lcusum.tolist(),
                "rise": self._lrise.tolist(),
                "onset": self._lonset.tolist(),
                "alarmed": self._lalarmed.astype(int).tolist(),
            },
            "episode_start": self._episode_start,
            "episode_end": self._episode_end,
            "last_seq": self._last_seq,
            "active": self._active,
            "last_key": None if self._last_key is None else [*self._last_key[:2], list(self._last_key[2])],
            "last_emit": self._last_emit,
            "incident": self._memory.get_state(),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`get_state` output."""
        if list(state.get("plants", [])) != list(self.plants):
            raise DataError(f"RCA state is for plants {state.get('plants')}, this engine has {list(self.plants)}")
        self.reset()
        rows = state["rows"]
        for j, (seq, codes) in enumerate(rows):
            slot = self._slot_for(j + int(state["n_rows"]) - len(rows))
            self._buf_seq[slot] = int(seq)
            self._buf_codes[slot] = np.asarray(codes, dtype=np.int64)
            self._buf_valid[slot] = True
        self._n_rows = int(state["n_rows"])
        self._cusum = np.asarray(state["cusum"], dtype=np.float64)
        self._rise = np.asarray(state["rise"], dtype=np.int64)
        self._onset = np.asarray(state["onset"], dtype=np.int64)
        self._alarmed = np.asarray(state["alarmed"], dtype=bool)
        levels = state.get("levels")
        if levels is not None and np.asarray(levels["cusum"]).size == self._lcusum.size:
            shape = self._lcusum.shape
            self._lcusum = np.asarray(levels["cusum"], dtype=np.float64).reshape(shape)
            self._lrise = np.asarray(levels["rise"], dtype=np.int64).reshape(shape)
            self._lonset = np.asarray(levels["onset"], dtype=np.int64).reshape(shape)
            self._lalarmed = np.asarray(levels["alarmed"], dtype=bool).reshape(shape)
        self._episode_start = state["episode_start"]
        self._episode_end = state["episode_end"]
        self._last_seq = state["last_seq"]
        self._active = bool(state["active"])
        key = state["last_key"]
        self._last_key = None if key is None else (key[0], key[1], tuple(key[2]))
        self._last_emit = int(state["last_emit"])
        self._memory.set_state(state.get("incident"))

    def _slot_for(self, row_number: int) -> int:
        return row_number % self.horizon

    def _ordered_rows(self) -> list[int]:
        n = min(self._n_rows, self.horizon)
        return [self._slot_for(r) for r in range(self._n_rows - n, self._n_rows)]

    # -- scoring ---------------------------------------------------------------------------
    def encode(self, flags: Mapping[str, tuple[int, int]]) -> IntArray:
        """Published pairs of one row as state codes (M,), -1 for absent plants."""
        codes = np.full(len(self.plants), -1, dtype=np.int64)
        for plant, pair in flags.items():
            m = self._index.get(plant)
            if m is None:
                raise DataError(f"flags for unknown plant '{plant}'; plants are {', '.join(self.plants)}")
            try:
                zc, za = int(pair[0]), int(pair[1])
            except (TypeError, ValueError, IndexError):
                raise DataError(f"plant '{plant}': flags must be a pair (zc, za) of 0/1, got {pair!r}") from None
            if zc not in (0, 1) or za not in (0, 1):
                raise DataError(f"plant '{plant}': flags must be 0 or 1, got ({zc}, {za})")
            codes[m] = int(flag_states(zc, za))
        return codes

    def _window_sums(self, counts: IntArray) -> FloatArray:
        """Log evidence (T, M, K) of each plant's window rows per component, from their state counts (T, M, 4).

        ``S[t, m, k] = sum_o n[t, m, o] log P(o | k)``: the sum over the window's rows of
        the rows' log-likelihoods, with the four terms added in a fixed order (the same
        floats whatever the block); a state not seen adds nothing (even where it is
        impossible, log P = -inf).
        """
        L = self.model.log_emission  # (M, K, 4)
        n = counts.astype(np.float64)
        with np.errstate(invalid="ignore"):  # 0 x -inf, masked
            terms = [np.where(counts[:, :, None, o] > 0, n[:, :, None, o] * L[None, :, :, o], 0.0) for o in range(4)]
        return np.asarray(((terms[0] + terms[1]) + terms[2]) + terms[3])

    def _log_evidence(
        self,
        S: FloatArray,
        order: FloatArray,
        order_unseen: FloatArray | None,
        unseen_roots: NDArray[np.bool_],
        quiet_roots: NDArray[np.bool_] | None = None,
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Log evidence (T, M + 3) of the hypotheses from window sums S (T, M, K) and order penalties (T, M, M).

        ``order_unseen`` (T, M, M): the order penalties timed from the entry (see
        :meth:`_order_penalties`) of the unseen-entry variant of the roots in
        ``unseen_roots`` (T, M) (plants of ``rca.unobserved_entry`` that are alarming:
        a root seen late must be seen); rows without such a root have no variant. ``quiet_roots``
        (T, M): the entries that started the incident (:meth:`_incident_terms`): their variant holds
        also while they are quiet, and their rows are root-like or normal (an entry's sensors see
        its disturbance in bursts, or not at all).

        Also returns, per row, root hypothesis k and plant j, the log evidence of
        "j affected" and "j not affected" (T, M, M) (for the propagated list).
        """
        M = len(self.plants)
        diagonal = np.arange(M)
        S_N, S_A = S[..., NORMAL], S[..., AUGMENTED]
        # the root and the propagated roles mix over their components, chosen once per window
        S_R = _logsumexp(S[..., self.model.root] + self._log_root_weight, axis=-1)
        P_mix = _logsumexp(S[..., self.model.propagated] + self._log_prop_weight, axis=-1)
        affected = self._log_affected + P_mix[:, None, :] + order  # [t, k, j]
        unaffected = self._log_unaffected + S_N[:, None, :]
        per_plant = np.logaddexp(affected, unaffected)
        per_plant[:, diagonal, diagonal] = 0.0
        roots = S_R + per_plant.sum(axis=-1)
        if quiet_roots is not None and quiet_roots.any():
            unseen_roots = unseen_roots | quiet_roots
        if order_unseen is not None and unseen_roots.any():
            # "k is the root and its disturbance entered unseen": the same flags, effects timed from the entry
            rows = np.any(unseen_roots, axis=1)
            affected_u = self._log_affected + P_mix[:, None, :] + order_unseen
            per_u = np.logaddexp(affected_u, unaffected)
            per_u[:, diagonal, diagonal] = 0.0
            seen = roots + self._log_seen
            own = S_R
            if quiet_roots is not None and quiet_roots.any():
                # an entry that started the incident: its rows are a root's (any miss rate) or normal, one
                # more component of equal weight (tests/rca/test_memory.py, the intermittent entry)
                n = self.model.n_root
                quiet = np.logaddexp(S_R + math.log(n / (n + 1)), S_N - math.log(n + 1))
                own = np.where(quiet_roots, quiet, S_R)
            unseen = np.where(unseen_roots, own + self._log_unseen + per_u.sum(axis=-1), -np.inf)
            affected = np.where((rows[:, None] & (unseen > seen))[:, :, None], affected_u, affected)
            roots = np.where(rows[:, None], np.logaddexp(seen, unseen), roots)
        half = math.log(0.5)
        external = np.logaddexp(half + P_mix, half + S_N).sum(axis=-1)
        # every plant on its own: mostly normal or an effect, rarely a second root or augmented-only
        free = _logsumexp(np.stack([S_N, S_R, S_A, P_mix], axis=-1) + self._log_free_weights, axis=-1).sum(axis=-1)
        evidence = np.concatenate([S_N.sum(axis=-1)[:, None], roots, external[:, None], free[:, None]], axis=1)
        return evidence + self._log_prior, affected, unaffected

    def evidence(self, flags: ArrayLike) -> FloatArray:
        """Log evidence (M + 3,) of [none, root 1..M, external, unexplained] for a block of rows
        (T, M, 2) taken as one window, without onset-order evidence (negative pair = absent)."""
        counts = state_counts(np.atleast_2d(encode_states(flags)))
        M = len(self.plants)
        S = self._window_sums(counts[None])
        return self._log_evidence(S, np.zeros((1, M, M)), None, np.zeros((1, M), dtype=bool))[0][0]

    @property
    def hypotheses(self) -> list[str]:
        """Hypothesis labels in scoring order."""
        return ["none", *[f"root:{p}" for p in self.plants], "external", "unexplained"]

    def _order_penalties(
        self, alarmed: NDArray[np.bool_], onset: IntArray, lalarmed: NDArray[np.bool_], lonset: IntArray, unseen: bool
    ) -> FloatArray:
        """Log evidence (T, M, M) of the onset order per row, from the plants' alarm states (T, M):
        [t, k, j] = log order_violation when plant j started alarming more than ``onset_slack``
        rows before plant k (or k is not alarming), plus the severity evidence (levels (T, M, J));
        0 in a row where no plant alarms.

        ``unseen``: for a root whose disturbance may enter unseen, time its effects from
        the **entry** instead: the earliest onset among k and its direct successors in
        the graph (where the disturbance enters), which are then never early themselves;
        any other plant that started before the entry still contradicts the hypothesis.
        """
        M = len(self.plants)
        diagonal = np.arange(M)
        slack = self.settings.onset_slack
        onset_f = np.where(alarmed, onset.astype(np.float64), np.inf)
        start = onset_f
        if unseen:
            start = np.where(self._entry[None, :, :], onset_f[:, None, :], np.inf).min(axis=2)
        early = alarmed[:, None, :] & (onset_f[:, None, :] < start[:, :, None] - slack)
        if unseen:
            early &= ~self._entry
        early[:, diagonal, diagonal] = False
        penalty = np.where(early, self._log_violation, 0.0) + self._severity_penalties(lalarmed, lonset)
        return np.where(np.any(alarmed, axis=1)[:, None, None], penalty, 0.0)

    def _severity_penalties(self, lalarmed: NDArray[np.bool_], lonset: IntArray) -> FloatArray:
        """Log evidence (T, M, M) of the severity order: [t, k, i] sums ``log severity_violation`` over the
        levels i reached more than ``onset_slack`` rows before k reached them (or that k has not
        reached): an effect is weaker than its cause, and reaches each severity after it."""
        T, M, J = lalarmed.shape
        if J == 0:
            return np.zeros((T, M, M))
        diagonal = np.arange(M)
        onset = np.where(lalarmed, lonset.astype(np.float64), np.inf)  # (T, M, J)
        # early[t, k, i, j] = i at level j more than slack rows before k
        early = lalarmed[:, None, :, :] & (onset[:, None, :, :] < onset[:, :, None, :] - self.settings.onset_slack)
        count = early.sum(axis=3).astype(np.float64)
        count[:, diagonal, diagonal] = 0.0
        return count * self._log_severity_violation

    def _judge(
        self,
        counts: IntArray,
        alarmed: NDArray[np.bool_],
        onset: IntArray,
        lalarmed: NDArray[np.bool_],
        lonset: IntArray,
        memory: MemoryRows,
    ) -> _Judged:
        """The decision of T rows from their windows' state counts (T, M, 4), the plants' alarm
        states after each row (T, M; levels (T, M, J)) and the incident's memory after each row;
        both engine paths decide through it."""
        M = len(self.plants)
        S = self._window_sums(counts)
        quiet_roots, incident = self._incident_terms(alarmed, onset, memory)
        order = self._order_penalties(alarmed, onset, lalarmed, lonset, unseen=False)
        unseen_roots = self._unseen[None, :] & alarmed
        variant = unseen_roots if quiet_roots is None else unseen_roots | quiet_roots
        order_u = self._order_penalties(alarmed, onset, lalarmed, lonset, unseen=True) if variant.any() else None
        evidence, affected, unaffected = self._log_evidence(S, order, order_u, unseen_roots, quiet_roots)
        if incident is not None:
            evidence[:, 1 : M + 1] = np.where(
                memory.active[:, None], evidence[:, 1 : M + 1] + incident, evidence[:, 1 : M + 1]
            )
        top = evidence.max(axis=1)
        # a row where every hypothesis deems a pair of its window impossible (e.g. (1, 0) from untrained
        # detectors, whose Z_a equals Z_c) has no finite evidence: it is decided "unexplained", with no confidence
        finite = np.isfinite(top)
        with np.errstate(invalid="ignore"):
            weights = np.exp(evidence - np.where(finite, top, 0.0)[:, None])
            posterior = weights / weights.sum(axis=1, keepdims=True)
        best = np.argmax(np.where(finite[:, None], posterior, 0.0), axis=1)
        n = counts.astype(np.float64)
        # channel-inverted share of window rows in which each plant's Z_c is on, and its most likely true state
        ap, sp = self.model.alarm_posterior, self.model.state_posterior
        alarm = ((n[..., 0] * ap[0] + n[..., 1] * ap[1]) + n[..., 2] * ap[2]) + n[..., 3] * ap[3]
        share = alarm / np.maximum(counts.sum(axis=2), 1)
        alarming = share >= 0.5
        states = ((n[..., 0, None] * sp[0] + n[..., 1, None] * sp[1]) + n[..., 2, None] * sp[2]) + n[..., 3, None] * sp[
            3
        ]
        # the plants the best root hypothesis says show its effect: alarming, and "affected" beats "not affected"
        k = np.clip(best - 1, 0, M - 1)
        pick = k[:, None, None]
        a_k, u_k = np.take_along_axis(affected, pick, axis=1)[:, 0], np.take_along_axis(unaffected, pick, axis=1)[:, 0]
        effect = a_k > u_k
        with np.errstate(invalid="ignore"):  # -inf - -inf: a plant no hypothesis lets alarm
            margin = np.nan_to_num(a_k - u_k, nan=-np.inf)
        is_root = finite & (best >= 1) & (best <= M)
        shown = np.where(is_root[:, None], alarming & effect & (np.arange(M)[None, :] != k[:, None]), False)
        shown = np.where((finite & (best == M + 1))[:, None], alarming, shown)
        return _Judged(posterior, best, finite, shown, np.argmax(states, axis=2), evidence, share, margin, quiet_roots)

    def _incident_terms(
        self, alarmed: NDArray[np.bool_], onset: IntArray, memory: MemoryRows
    ) -> tuple[NDArray[np.bool_] | None, FloatArray | None]:
        """Per row (T rows), the declared unseen entries that started the incident (T, M) and the incident
        order's log evidence of the roots (T, M) (None when no row has them); zero outside an incident.

        Quiet roots: first to alarm, more than ``onset_slack`` rows before any other plant, for at
        least ``incident_rows`` rows. The penalty (:meth:`IncidentMemory.penalty`): a plant that
        started earlier in the incident and that the root cannot reach contradicts it, also while
        quiet. Computed only on the rows of an open incident; both are counts and comparisons per
        row, the same whatever the block (``tests/rca/test_block.py::test_blocks_equal_rows``).
        """
        T, M = alarmed.shape
        rows = np.flatnonzero(memory.active)
        if not rows.size:
            return None, None
        s = self.settings
        min_rows = self._memory.min_rows
        quiet: NDArray[np.bool_] | None = None
        if self._unseen.any():
            quiet = np.zeros((T, M), dtype=bool)
            quiet[rows] = self._unseen & started_rows(memory.first[rows], memory.rows[rows], min_rows, s.onset_slack)
        penalty: FloatArray | None = None
        if self._memory_counts:
            onset_f = np.where(alarmed[rows], onset[rows].astype(np.float64), np.inf)
            # the window's order evidence already counts j against k: j alarms now and started before k
            covered = alarmed[rows][:, None, :] & (onset_f[:, None, :] < onset_f[:, :, None] - s.onset_slack)
            penalty = np.zeros((T, M))
            penalty[rows] = penalty_rows(
                memory.first[rows],
                memory.episode_rows[rows],
                min_rows,
                self._reach,
                s.onset_slack,
                self._log_violation,
                covered,
            )
        return quiet, penalty

    def _verdict_at(self, judged: _Judged, i: int, seq: int, ts: float, window: tuple[int, int]) -> Verdict:
        """The decision of row i of a judged block as a verdict (before :meth:`_issue` annotates it)."""
        if not judged.finite[i]:
            return self._verdict(ts, seq, None, (), 0.0, window, UNEXPLAINED)
        M = len(self.plants)
        posterior = judged.posterior[i]
        h = int(judged.best[i])
        prob = float(posterior[h])
        if h == 0:
            return self._verdict(ts, seq, None, (), prob, window, NO_ANOMALY)
        if h <= M:
            return self._verdict(ts, seq, self.plants[h - 1], self._clearest(judged, i), prob, window, ROOT_CAUSE)
        if h == M + 1:
            return self._verdict(ts, seq, None, self._clearest(judged, i), prob, window, EXTERNAL_ROOT)
        return self._verdict(ts, seq, None, (), prob, window, self._pattern(judged.dominant[i]))

    def _clearest(self, judged: _Judged, i: int) -> tuple[str, ...]:
        """The plants row i lists as showing the propagated effect, in plant order, at most
        :data:`~fedrca.contracts.reason.MAX_PROPAGATED`: the ones the root's hypothesis deems most
        affected (an external root: the largest alarm shares); a verdict's size is bounded whatever the site."""
        chosen = np.flatnonzero(judged.shown[i])
        if len(chosen) > MAX_PROPAGATED:
            strength = judged.margin[i] if judged.best[i] <= len(self.plants) else judged.share[i]
            chosen = np.sort(chosen[np.argsort(-strength[chosen], kind="stable")[:MAX_PROPAGATED]])
        return tuple(self.plants[j] for j in chosen)

    def _moment_at(
        self, judged: _Judged, i: int, counts: IntArray, alarmed: NDArray[np.bool_], memory: MemoryRows, n_rows: int
    ) -> _Moment:
        """What :meth:`snapshot` reads of row i of a judged block."""
        quiet = None if judged.quiet is None else judged.quiet[i]
        return _Moment(
            counts[i],
            judged.evidence[i],
            alarmed[i],
            quiet,
            memory.first[i],
            memory.rows[i],
            judged.dominant[i],
            n_rows,
        )

    def _pattern(self, dominant: IntArray) -> str:
        """The outcome of the catch-all hypothesis: the pattern of the plants' dominant states (M,)."""
        return classify_pattern([(int(c) >> 1, int(c) & 1) for c in dominant]).outcome

    # -- streaming -------------------------------------------------------------------------
    def update(
        self,
        seq: int,
        flags: Mapping[str, tuple[int, int]],
        ts: float = 0.0,
        levels: Mapping[str, int] | None = None,
    ) -> Verdict | None:
        """Add the published flags of row ``seq`` (pairs (zc, za) per plant; absent plants = no evidence)
        and, when the plants publish them, their severity levels (see :class:`SeverityModel`).

        Returns the verdict issued at this row (stamped with the row's time ``ts``), if
        any; :attr:`decision` always holds the current decision. This is the per-row
        reference of :meth:`update_block`, which takes many rows at once and gives the same
        verdicts and state.

        Raises
        ------
        DataError
            When seq does not increase, a plant is unknown or a flag is not 0/1.
        """
        return self._step(int(seq), float(ts), self.encode(flags), self._encode_levels(levels))

    def _encode_levels(self, levels: Mapping[str, int] | None) -> IntArray:
        """Published levels of one row (M,), -1 where absent (or when no severity model is set)."""
        out = np.full(len(self.plants), -1, dtype=np.int64)
        if levels is None or self.severity is None:
            return out
        for plant, level in levels.items():
            m = self._index.get(plant)
            if m is None:
                raise DataError(f"level for unknown plant '{plant}'; plants are {', '.join(self.plants)}")
            if level is None:
                continue
            if not 0 <= int(level) < self.severity.n_levels:
                raise DataError(f"plant '{plant}': level must be in 0..{self.severity.n_levels - 1}, got {level}")
            out[m] = int(level)
        return out

    def _block_arrays(
        self, seqs: ArrayLike, codes: ArrayLike, ts: ArrayLike | None, levels: ArrayLike | None
    ) -> tuple[IntArray, IntArray, FloatArray, IntArray]:
        """Validated arrays of a block: seqs (T,), codes (T, M), ts (T,), levels (T, M)."""
        seq_arr = np.asarray(seqs, dtype=np.int64).reshape(-1)
        T, M = len(seq_arr), len(self.plants)
        code_arr = np.asarray(codes, dtype=np.int64)
        if code_arr.shape != (T, M):
            raise DataError(f"codes must be (T, {M}) for {T} seqs, got shape {code_arr.shape}")
        if np.any((code_arr < -1) | (code_arr > 3)):
            raise DataError("state codes must be -1 (absent) or 0..3 (2 zc + za)")
        ts_arr = np.zeros(T) if ts is None else np.asarray(ts, dtype=np.float64).reshape(T)
        lev = np.full((T, M), -1, dtype=np.int64)
        if levels is not None and self.severity is not None:
            lev = np.asarray(levels, dtype=np.int64).reshape(T, M)
            if np.any(lev >= self.severity.n_levels):
                raise DataError(f"levels must be below {self.severity.n_levels}")
            lev = np.where(lev < 0, -1, lev)
        return seq_arr, code_arr, ts_arr, lev

    def run(
        self, seqs: ArrayLike, flags: ArrayLike, ts: ArrayLike | None = None, levels: ArrayLike | None = None
    ) -> list[Verdict]:
        """Process many rows at once: seqs (T,), flags (T, M, 2) in plant order (negative = absent),
        row times ts (T,) in seconds (default 0), published severity levels (T, M) (negative = absent).

        The result (verdicts and state) equals calling :meth:`update` row by row
        (:meth:`run_per_row`); the rows go through :meth:`update_block`.
        """
        codes = encode_states(flags)
        if codes.ndim != 2 or codes.shape[1] != len(self.plants):
            raise DataError(f"flags must be (T, {len(self.plants)}, 2), got {np.shape(flags)}")
        return self.update_block(seqs, codes, ts, levels)

    def run_per_row(
        self, seqs: ArrayLike, flags: ArrayLike, ts: ArrayLike | None = None, levels: ArrayLike | None = None
    ) -> list[Verdict]:
        """:meth:`run` through :meth:`update`'s per-row path (the reference :meth:`update_block` is checked against)."""
        codes = encode_states(flags)
        if codes.ndim != 2 or codes.shape[1] != len(self.plants):
            raise DataError(f"flags must be (T, {len(self.plants)}, 2), got {np.shape(flags)}")
        return self.update_rows(seqs, codes, ts, levels)

    def update_rows(
        self, seqs: ArrayLike, codes: ArrayLike, ts: ArrayLike | None = None, levels: ArrayLike | None = None
    ) -> list[Verdict]:
        """:meth:`update_block`'s arguments through :meth:`update`'s per-row path, one row at a time: the
        reference :meth:`update_block` is checked against, and the peer its cost is measured against
        (``bench/bench_streams.py``, the RCA handler alone)."""
        seq_arr, code_arr, ts_arr, lev = self._block_arrays(seqs, codes, ts, levels)
        out = []
        for t in range(len(seq_arr)):
            verdict = self._step(int(seq_arr[t]), float(ts_arr[t]), code_arr[t], lev[t])
            if verdict is not None:
                out.append(verdict)
        return out

    def update_block(
        self, seqs: ArrayLike, codes: ArrayLike, ts: ArrayLike | None = None, levels: ArrayLike | None = None
    ) -> list[Verdict]:
        """Add T rows at once; the verdicts they issue, in order.

        Parameters
        ----------
        seqs : (T,) increasing seqs (above every seq seen)
        codes : (T, M) published states ``2 zc + za`` in plant order, -1 where a plant is absent
        ts : (T,) row times in seconds (default 0)
        levels : (T, M) published severity levels, -1 where absent

        The verdicts and the state after the block equal those of :meth:`update` called row by
        row (``tests/rca/test_block.py::test_blocks_equal_rows``): the CUSUMs and episodes
        are stepped in plain floats (:mod:`fedrca.rca.block`), and the windows' evidence and
        the decisions of the rows are computed in vectorised passes of at most :data:`BLOCK_ROWS` rows
        (a long block takes several: its working memory is that of one pass), O(M^2) per row whatever
        the window's length.

        Raises
        ------
        DataError
            When the seqs do not increase (the rows before the offending one are processed)
            or an array has the wrong shape or values.
        """
        seq_arr, code_arr, ts_arr, lev = self._block_arrays(seqs, codes, ts, levels)
        if len(seq_arr) == 1:
            # one row (an RCA worker's batch at 1,000 messages/s holds about one): the per-row step, whose
            # fixed cost is below the block's passes (python bench/rca_state.py --engines); the same
            # verdicts and state either way (tests/rca/test_block.py::test_blocks_equal_rows)
            verdict = self._step(int(seq_arr[0]), float(ts_arr[0]), code_arr[0], lev[0])
            return [] if verdict is None else [verdict]
        if len(seq_arr) and self._last_seq is not None and seq_arr[0] <= self._last_seq:
            stop = 0
        else:
            wrong = np.flatnonzero(np.diff(seq_arr) <= 0)
            stop = int(wrong[0]) + 1 if len(wrong) else len(seq_arr)
        M = len(self.plants)
        K = self.model.n_components
        # rows per pass: the (rows, M, M) and (rows, M, K) intermediates stay small, and as large for a
        # block of a thousand rows as for one of BLOCK_ROWS (the same verdicts and state whatever the passes:
        # tests/streams/test_rca_memory.py::test_a_long_block_takes_passes_of_block_rows)
        step = max(1, min(BLOCK_ROWS, _BLOCK_ELEMENTS // max(M * M, M * K, 1)))
        out: list[Verdict] = []
        for lo in range(0, stop, step):
            hi = min(stop, lo + step)
            out += self._block(seq_arr[lo:hi], ts_arr[lo:hi], code_arr[lo:hi], lev[lo:hi])
        if stop < len(seq_arr):
            raise DataError(
                f"rows must arrive in increasing seq order: got {int(seq_arr[stop])} after {self._last_seq}"
            )
        return out

    def _block(self, seqs: IntArray, ts: FloatArray, codes: IntArray, levels: IntArray) -> list[Verdict]:
        T, M = codes.shape
        if T == 0:
            return []
        s = self.settings
        present = codes >= 0
        # the CUSUM increments: llr(o) of each present plant's published state
        inc = np.where(present, self.model.alarm_llr[np.arange(M)[None, :], np.where(present, codes, 0)], 0.0)
        plants = cusum_block(
            self._cusum, self._rise, self._alarmed, self._onset, inc, seqs, s.cusum_threshold, self._cusum_max
        )
        J = self._lcusum.shape[1]
        if J:
            assert self.severity is not None
            shown = levels >= 0
            linc = np.where(shown[:, :, None], self.severity.llr.T[np.where(shown, levels, 0)], 0.0)  # (T, M, J)
            lev = cusum_block(
                self._lcusum.ravel(),
                self._lrise.ravel(),
                self._lalarmed.ravel(),
                self._lonset.ravel(),
                linc.reshape(T, M * J),
                seqs,
                s.cusum_threshold,
                self._cusum_max,
            )
            lalarmed, lonset = lev.alarmed.reshape(T, M, J), lev.onset.reshape(T, M, J)
        else:
            lalarmed, lonset = np.zeros((T, M, 0), dtype=bool), np.zeros((T, M, 0), dtype=np.int64)
        bounds, episode_start, episode_end = episode_bounds(
            plants.alarmed, plants.onset, seqs, self._episode_start, self._episode_end
        )
        # the rows before the block a window can reach: at most horizon - 1
        ordered = self._ordered_rows()
        past = ordered[len(ordered) - min(self._n_rows, self.horizon - 1) :]
        counts, first, n_rows = window_counts(
            self._buf_seq[past], self._buf_codes[past], seqs, codes, bounds, self.horizon
        )
        # the incident's memory is stepped row by row only where an incident is open (IncidentMemory.run)
        memory = self._memory.run(seqs, plants.alarmed, plants.onset)
        judged = self._judge(counts, plants.alarmed, plants.onset, lalarmed, lonset, memory)
        emitted = self._emit_block(judged, seqs)
        seq_list, ts_list, first_list, rows_list = seqs.tolist(), ts.tolist(), first.tolist(), n_rows.tolist()
        out = []
        # the evidence without the onset order of every issued row, in one pass
        if emitted:
            unordered = self._unordered(counts[emitted], plants.alarmed[emitted], _rows_of(judged.quiet, emitted))
        decisions = [
            self._verdict_at(judged, i, seq_list[i], ts_list[i], (first_list[i], seq_list[i])) for i in emitted
        ]
        evidences = [
            self._evidence_of(self._moment_at(judged, i, counts, plants.alarmed, memory, rows_list[i]), d, unordered[j])
            for j, (i, d) in enumerate(zip(emitted, decisions, strict=True))
        ]
        # the calibrated probabilities of the block's verdicts from their features computed at once
        calibration = self.calibration
        calibrated: list[FloatArray | None] = [None] * len(emitted)
        if calibration is not None and any(d.outcome != NO_ANOMALY for d in decisions):
            calibrated = list(calibration.probabilities_block(evidences, self.graph, self.settings))
        for decision, evidence, probabilities in zip(decisions, evidences, calibrated, strict=True):
            out.append(self._issue_evidence(decision, evidence, probabilities))
        last = T - 1
        if emitted and emitted[-1] == last:
            self.decision = out[-1]
        else:
            self.decision = self._verdict_at(
                judged, last, seq_list[last], ts_list[last], (first_list[last], seq_list[last])
            )
        self._last_moment = self._moment_at(judged, last, counts, plants.alarmed, memory, rows_list[last])
        # the state after the block's last row
        self._cusum, self._rise, self._alarmed, self._onset = (
            plants.level[last].copy(),
            plants.rise,
            plants.alarmed[last].copy(),
            plants.onset[last].copy(),
        )
        if J:
            self._lcusum = lev.level[last].reshape(M, J).copy()
            self._lrise = lev.rise.reshape(M, J)
            self._lalarmed = lalarmed[last].copy()
            self._lonset = lonset[last].copy()
        self._episode_start, self._episode_end = episode_start, episode_end
        self._last_seq = seq_list[last]
        kept = np.arange(max(0, T - self.horizon), T)
        slots = (self._n_rows + kept) % self.horizon
        self._buf_seq[slots] = seqs[kept]
        self._buf_codes[slots] = codes[kept]
        self._buf_valid[slots] = True
        self._n_rows += T
        return out

    def _emit_block(self, judged: _Judged, seqs: IntArray) -> list[int]:
        """The rows of a judged block at which a verdict is issued (:meth:`_emit` row by row, on keys)."""
        M = len(self.plants)
        s = self.settings
        # the posterior a verdict carries (clipped into [0, 1], 6 digits: Verdict) decides the confidence
        best = judged.best
        prob = np.take_along_axis(judged.posterior, best[:, None], axis=1)[:, 0]
        confident = [
            ok and round(min(max(p, 0.0), 1.0), 6) >= s.min_posterior
            for ok, p in zip(judged.finite.tolist(), prob.tolist(), strict=True)
        ]
        shown_keys = _row_keys(judged.shown)
        propagated: dict[Any, tuple[str, ...]] = {}
        heartbeat = s.heartbeat
        active, last_key, last_emit = self._active, self._last_key, self._last_emit
        emitted = []
        for i, (ok, h, seq) in enumerate(zip(confident, best.tolist(), seqs.tolist(), strict=True)):
            if not ok:
                continue
            if h == 0:
                # a confident "no anomaly" clears an issued verdict
                if active:
                    active, last_key, last_emit = False, None, seq
                    emitted.append(i)
                continue
            if h <= M or h == M + 1:
                names = propagated.get(shown_keys[i])
                if names is None:
                    names = self._clearest(judged, i)
                    if len(names) < MAX_PROPAGATED:  # a longer list may be cut by strength, row by row
                        propagated[shown_keys[i]] = names
                key = (ROOT_CAUSE, self.plants[h - 1], names) if h <= M else (EXTERNAL_ROOT, None, names)
            else:
                key = (self._pattern(judged.dominant[i]), None, ())
            if key != last_key or (heartbeat > 0 and seq - last_emit >= heartbeat):
                active, last_key, last_emit = True, key, seq
                emitted.append(i)
        self._active, self._last_key, self._last_emit = active, last_key, last_emit
        return emitted

    def _step(self, seq: int, ts: float, codes: IntArray, levels: IntArray | None = None) -> Verdict | None:
        if self._last_seq is not None and seq <= self._last_seq:
            raise DataError(f"rows must arrive in increasing seq order: got {seq} after {self._last_seq}")
        self._last_seq = seq
        self._update_onsets(seq, codes)
        if levels is not None and self.severity is not None and self.severity.n_tracked:
            self._update_level_onsets(seq, levels)
        slot = self._slot_for(self._n_rows)
        self._buf_seq[slot] = seq
        self._buf_codes[slot] = codes
        self._buf_valid[slot] = True
        self._n_rows += 1
        m = self._memory
        m.update(seq, self._alarmed, self._onset)
        memory = MemoryRows(m.first[None], m.rows[None], m.episode_rows[None], np.array([m.active]))
        mask = self._window(seq)
        counts = state_counts(self._buf_codes[mask])[None]
        judged = self._judge(
            counts, self._alarmed[None], self._onset[None], self._lalarmed[None], self._lonset[None], memory
        )
        seqs = self._buf_seq[mask]
        decision = self._verdict_at(judged, 0, seq, ts, (int(seqs.min()), int(seqs.max())))
        self.decision = decision
        moment = self._moment_at(judged, 0, counts, self._alarmed[None], memory, int(mask.sum()))
        self._last_moment = moment
        issued = self._emit(decision)
        return None if issued is None else self._issue(issued, moment)

    def _update_level_onsets(self, seq: int, levels: IntArray) -> None:
        """Per plant and level j >= 2, the CUSUM of "published level >= j" (as :meth:`_update_onsets`)."""
        assert self.severity is not None
        present = (levels >= 0)[:, None]
        # inc[m, j] = llr_j(o_m)
        inc = np.where(present, self.severity.llr[:, np.where(levels >= 0, levels, 0)].T, 0.0)
        new = np.clip(self._lcusum + inc, 0.0, self._cusum_max)
        rising = (self._lcusum <= 0.0) & (new > 0.0)
        self._lrise = np.where(rising, seq, self._lrise)
        starts = ~self._lalarmed & (new >= self.settings.cusum_threshold)
        self._lonset = np.where(starts, self._lrise, self._lonset)
        self._lalarmed = (self._lalarmed & (new > 0.0)) | starts
        self._lonset = np.where(self._lalarmed, self._lonset, -1)
        self._lcusum = new

    def _update_onsets(self, seq: int, codes: IntArray) -> None:
        """Per-plant CUSUM S = clip(S + llr(o), 0, 2 h); alarming from S >= h until S returns to 0."""
        present = codes >= 0
        M = len(self.plants)
        inc = np.where(present, self.model.alarm_llr[np.arange(M), np.where(present, codes, 0)], 0.0)
        new = np.clip(self._cusum + inc, 0.0, self._cusum_max)
        rising = (self._cusum <= 0.0) & (new > 0.0)
        self._rise = np.where(rising, seq, self._rise)
        starts = ~self._alarmed & (new >= self.settings.cusum_threshold)
        self._onset = np.where(starts, self._rise, self._onset)
        self._alarmed = (self._alarmed & (new > 0.0)) | starts
        self._onset = np.where(self._alarmed, self._onset, -1)
        self._cusum = new
        if self._alarmed.any():
            first = int(self._onset[self._alarmed].min())
            self._episode_start = first if self._episode_start is None else min(self._episode_start, first)
        elif self._episode_start is not None:
            self._episode_start = None
            self._episode_end = seq

    def _window(self, seq: int) -> NDArray[np.bool_]:
        """The evidence rows: the last ``horizon`` rows, from the current episode's start, or
        after the last episode's end when none is active (a finished episode is history)."""
        mask = self._buf_valid.copy()
        if self._episode_start is not None:
            mask &= self._buf_seq >= self._episode_start
        elif self._episode_end is not None:
            mask &= self._buf_seq >= self._episode_end
        return mask

    def _verdict(
        self,
        ts: float,
        seq: int,
        root: str | None,
        propagated: tuple[str, ...],
        posterior: float,
        window: tuple[int, int],
        outcome: str,
    ) -> Verdict:
        # the posterior is a softmax: clip its float rounding into [0, 1], the contract's range
        posterior = min(max(posterior, 0.0), 1.0)
        return Verdict(self.site, ts, seq, root, propagated, posterior, window, outcome)

    def _emit(self, decision: Verdict) -> Verdict | None:
        confident = decision.posterior >= self.settings.min_posterior
        if decision.outcome == NO_ANOMALY:
            if self._active and confident:
                self._active = False
                self._last_key = None
                self._last_emit = decision.seq
                return decision
            return None
        if not confident:
            return None
        key = (decision.outcome, decision.root_cause, decision.propagated)
        heartbeat = self.settings.heartbeat
        due = heartbeat > 0 and decision.seq - self._last_emit >= heartbeat
        if key != self._last_key or due:
            self._active = True
            self._last_key = key
            self._last_emit = decision.seq
            return decision
        return None

    def snapshot(self) -> Evidence | None:
        """The evidence of the current decision (:class:`~fedrca.rca.evidence.Evidence`), None before any row.

        Built only when a verdict is issued (or asked for): it scores the window once more without
        the onset order."""
        if self._last_moment is None or self.decision is None:
            return None
        return self._evidence_of(self._last_moment, self.decision)

    def _unordered(self, counts: IntArray, alarmed: NDArray[np.bool_], quiet: NDArray[np.bool_] | None) -> FloatArray:
        """Log evidence (E, M + 3) of E rows without the onset order, from their windows' state counts
        (E, M, 4), alarm states (E, M) and quiet entry roots (E, M) (None: none).

        Row by row the same floats as one row at a time: every operation of :meth:`_log_evidence` is
        per row, and a row without an unseen or quiet root keeps the plain root evidence
        (``tests/rca/test_block.py::test_blocks_equal_rows`` compares the issued verdicts' reasons
        and probabilities, which read it)."""
        E, M = alarmed.shape
        unseen_roots = self._unseen[None, :] & alarmed
        zero = np.zeros((E, M, M))
        variant = zero if (unseen_roots.any() or (quiet is not None and quiet.any())) else None
        return self._log_evidence(self._window_sums(counts), zero, variant, unseen_roots, quiet)[0]

    def _evidence_of(self, moment: _Moment, decision: Verdict, unordered: FloatArray | None = None) -> Evidence:
        if unordered is None:
            quiet = None if moment.quiet is None else moment.quiet[None]
            unordered = self._unordered(moment.counts[None], moment.alarmed[None], quiet)[0]
        return Evidence(
            plants=self.plants,
            seq=decision.seq,
            window=decision.evidence_window,
            rows=moment.rows,
            log_evidence=moment.evidence.copy(),
            unordered=unordered,
            alarming=moment.alarmed.copy(),
            first=moment.first.copy(),
            alarm_rows=moment.alarm_rows.copy(),
            share=self._true_share(moment.counts),
            pairs=moment.dominant.copy(),
        )

    def _true_share(self, counts: IntArray) -> FloatArray:
        """Unbiased share of window rows in which each plant's true Z_c is on (M,), in [0, 1], from the
        window's state counts (M, 4): the published rate r of the Z_c bit with the randomized response
        taken out, (r - (1 - p)) / (2 p - 1)."""
        rate = (counts[:, 2] + counts[:, 3]) / np.maximum(counts.sum(axis=1), 1)
        eps = self.model.epsilon
        if math.isinf(eps):
            return np.asarray(rate, dtype=np.float64)
        p = 1.0 / (1.0 + math.exp(-eps))
        return np.asarray(np.clip((rate - (1.0 - p)) / (2.0 * p - 1.0), 0.0, 1.0))

    def explain(self) -> Verdict | None:
        """The current decision with its candidate set, probabilities and reason, as it would be issued
        (also when it is too uncertain to be issued); None before any row."""
        evidence = self.snapshot()
        if evidence is None or self.decision is None:
            return self.decision
        return annotate(self.decision, evidence, self.graph, self.settings, self.calibration)

    def _issue(self, decision: Verdict, moment: _Moment, unordered: FloatArray | None = None) -> Verdict:
        """The decision as issued: with its candidate set, probabilities and reason
        (:func:`fedrca.rca.explain.annotate`); at the block's or the row's decision it is also :attr:`decision`.
        ``unordered``: the row's evidence without the onset order when already computed (:meth:`_unordered`)."""
        return self._issue_evidence(decision, self._evidence_of(moment, decision, unordered))

    def _issue_evidence(self, decision: Verdict, evidence: Evidence, calibrated: FloatArray | None = None) -> Verdict:
        """:meth:`_issue` from the decision's evidence (``calibrated``: its calibrated probabilities, when
        already computed)."""
        if self.evidence_log is not None:
            self.evidence_log.append(evidence)
        issued = annotate(decision, evidence, self.graph, self.settings, self.calibration, calibrated)
        if self.decision is not None and self.decision.seq == decision.seq:
            self.decision = issued
        return issued


@dataclass(frozen=True)
class _Judged:
    """The decisions of T rows (:meth:`RCAEngine._judge`).

    Attributes
    ----------
    posterior : (T, M + 3) posterior of [none, root 1..M, external, unexplained]
    best : (T,) the best hypothesis
    finite : (T,) False where no hypothesis has finite evidence (decided "unexplained", no confidence)
    shown : (T, M) the plants the best hypothesis lists as showing the propagated effect
    dominant : (T, M) each plant's most likely true state over the window (the catch-all's pattern)
    evidence : (T, M + 3) log evidence + log prior of the hypotheses
    share : (T, M) channel-inverted share of the window's rows with Z_c on
    margin : (T, M) log evidence of "j affected" minus "j not affected" under the best root
    quiet : (T, M) the declared unseen entries that started the incident (None: none in any row)
    """

    posterior: FloatArray
    best: IntArray
    finite: NDArray[np.bool_]
    shown: NDArray[np.bool_]
    dominant: IntArray
    evidence: FloatArray
    share: FloatArray
    margin: FloatArray
    quiet: NDArray[np.bool_] | None


@dataclass(frozen=True)
class _Moment:
    """What the engine keeps of one row's decision for its :class:`Evidence` (arrays (M,) unless said)."""

    counts: IntArray  # (M, 4) the window's state counts
    evidence: FloatArray  # (M + 3,)
    alarmed: NDArray[np.bool_]
    quiet: NDArray[np.bool_] | None
    first: IntArray
    alarm_rows: IntArray
    dominant: IntArray
    rows: int


def _rows_of(values: NDArray[np.bool_] | None, rows: list[int]) -> NDArray[np.bool_] | None:
    """``values[rows]``, None when ``values`` is None."""
    return None if values is None else values[rows]


def _row_keys(mask: NDArray[np.bool_]) -> list[Any]:
    """A hashable key per row of a boolean matrix (T, M): its bits as an int (or bytes when M > 62)."""
    _T, M = mask.shape
    if M <= 62:
        return (mask.astype(np.int64) @ (np.int64(1) << np.arange(M, dtype=np.int64))).tolist()
    return [row.tobytes() for row in np.packbits(mask, axis=1)]


def resolve_graph(
    config: SiteConfig,
    settings: RCASettings,
    server: ParameterArtifact | None = None,
    graph: InterdependencyGraph | None = None,
) -> InterdependencyGraph:
    """The graph the engine uses: given (e.g. read from ``rca.graph.path``), from the config, learned
    from the server artifact, or complete.

    ``settings.graph.source`` decides (``auto``: config edges when present, else the
    learned graph when a ``server`` artifact is given, else complete).
    """
    plants = list(config.plant_names)
    if graph is not None:
        if list(graph.plants) != plants:
            raise DataError(f"graph plants {list(graph.plants)} differ from the config's {plants}")
        return graph
    source = settings.graph.source
    if source == "file":
        # reading the file is the shell's job (fedrca.application.site.configured_graph): the core does no I/O
        raise ConfigError(
            f"graph source 'file' needs the graph read from {settings.graph.path} and given to build_engine(graph=...)",
            key="rca.graph.source",
        )
    has_config = config.graph is not None and bool(config.graph.edges)
    if source == "config" or (source == "auto" and has_config):
        if config.graph is None or not has_config:
            raise ConfigError(
                "graph source is 'config' but the configuration has no graph.edges", key="rca.graph.source"
            )
        return InterdependencyGraph.from_edges(plants, list(config.graph.edges), source="config")
    if source == "learned" or (source == "auto" and server is not None):
        if server is None:
            raise ArtifactError("graph source 'learned' needs trained parameters (--params DIR with a server artifact)")
        learned = InterdependencyGraph.from_server_artifact(server, settings.graph.alpha)
        if list(learned.plants) != plants:
            raise ArtifactError(f"server artifact plants {list(learned.plants)} differ from the config's {plants}")
        return learned
    return InterdependencyGraph.complete(plants)


def build_engine(
    config: SiteConfig,
    *,
    artifacts: Mapping[str, ParameterArtifact] | None = None,
    trained: bool | None = None,
    nominal_flags: Mapping[str, ArrayLike] | None = None,
    graph: InterdependencyGraph | None = None,
    settings: RCASettings | None = None,
    epsilon: float | None = None,
    level_epsilon: float | None = None,
    calibration: CalibrationMap | CalibrationMaps | None = None,
) -> RCAEngine:
    """The site's RCA engine from its configuration and what the plants published.

    Parameters
    ----------
    config : the site configuration
    artifacts : the training artifacts by plant (and :data:`~fedrca.contracts.SERVER`), as
        loaded by :func:`fedrca.contracts.load_artifacts`; the server's gives the learned graph
    trained : whether the plants' augmentation is trained (propagated effects can then show
        as (1, 0)); default: artifacts were given
    nominal_flags : per plant the true flags (T, 2) on nominal data, to estimate the
        false-alarm rates; without them the nominal flag-state counts of the plant artifacts
        (what an RCA worker without any plant's data uses), else ``rca.false_alarm_rate``
    graph : use this graph instead of resolving one
    settings : use these settings instead of ``config.rca``
    epsilon : published flag epsilon (default ``config.privacy.flag_epsilon``)
    level_epsilon : published severity-level epsilon (default ``config.privacy.level_epsilon``);
        the engine reads levels when the plants publish them (``scoring.severity_levels``)
    calibration : the calibration map of the verdicts' root probabilities (read by the shell from
        ``rca.calibration.path``), or maps keyed by the site's training rows and flag epsilon, of which the engine
        takes the one of this site (:func:`select_calibration`); None = uncalibrated verdicts
    """
    s = settings or config.rca
    plants = list(config.plant_names)
    if trained is None:
        trained = bool(artifacts)
    # only the plant detector has an augmented model the training learns (Z_a); the others (detector.kind:
    # fleet, plugin) publish Z_a = Z_c or a Z_a of their own the flag model has no nominal rates of: it
    # ignores their Z_a bit (FlagModel ``augmented``); known from the configuration, so an RCA worker
    # without any plant's detector knows it too
    augmented = [config.plant(p).detector.kind == "plant" for p in plants]
    counts = None if nominal_flags is not None or not artifacts else artifact_state_counts(artifacts, plants)
    if nominal_flags is not None:
        nominal = nominal_state_rates(nominal_flags, plants, floor=s.min_false_alarm)
    elif counts is not None:
        nominal = state_rates_from_counts(counts, floor=s.min_false_alarm)
    else:
        nominal = default_state_rates(len(plants), max(s.false_alarm_rate, s.min_false_alarm), coupled=not trained)
    eps = config.privacy.flag_epsilon if epsilon is None else epsilon
    server = None if artifacts is None else artifacts.get(SERVER)
    level_eps = config.privacy.level_epsilon if level_epsilon is None else level_epsilon
    rows = training_rows(plants, nominal_flags, counts)
    engine = RCAEngine(
        resolve_graph(config, s, server, graph),
        flag_model(s, nominal, eps, trained, augmented),
        s,
        site=config.site,
        severity=severity_model(s, config.severity_levels, level_eps),
        calibration=select_calibration(calibration, rows, eps, s.calibration.training_rows),
    )
    # what the engine picked its map from, kept for a rebuild on newer artifacts (fedrca.streams.runtime.RCARuntime)
    engine.calibrations = None if calibration is None else CalibrationMaps.of(calibration)
    engine.training_rows = rows
    return engine


def training_rows(
    plants: Sequence[str],
    nominal_flags: Mapping[str, ArrayLike] | None = None,
    counts: ArrayLike | None = None,
) -> int | None:
    """The nominal rows the site's detectors were trained on, as the RCA side knows them: per plant the rows of its
    nominal flags (the demo and ``fedrca replay``, fitted here), else the sum of its artifact's nominal flag-state
    counts (an RCA worker: the counts every plant publishes on the params topic, made on the same rows, degraded rows
    out: the same number, ``tests/streams/test_rca_only.py``); the smallest over the plants (a plant trained on fewer
    rows false-alarms more: the map of its size is the cautious one). None when neither is known.

    Examples
    --------
    >>> training_rows(["a", "b"], counts=[[490, 4, 4, 2], [2870, 5, 3, 2]])
    500
    >>> training_rows(["a"]) is None
    True
    """
    if nominal_flags is not None:
        per = [int(np.count_nonzero(encode_states(np.asarray(nominal_flags[p])) >= 0)) for p in plants]
    elif counts is not None:
        per = [int(n) for n in np.rint(np.asarray(counts, dtype=np.float64).sum(axis=1))]
    else:
        return None
    return min(per) if per else None


def select_calibration(
    calibration: CalibrationMap | CalibrationMaps | None,
    rows: int | None,
    epsilon: float,
    configured_rows: int | None = None,
) -> CalibrationMap | None:
    """The calibration map of a site whose detectors were trained on ``rows`` nominal rows (:func:`training_rows`;
    None: unknown) at flag epsilon ``epsilon``.

    Maps keyed by training rows need the rows: when the plants' nominal flags or published counts do not say (an RCA
    worker started before any plant published parameters), ``configured_rows`` (``rca.calibration.training_rows``)
    does; without it the verdicts are uncalibrated (``"calibration": null``, logged with the fix) until the
    plants' artifacts arrive and the engine is rebuilt from them. A configured count that the published counts
    contradict is logged and the published one used: it is what the detectors were trained on.
    """
    if calibration is None:
        return None
    maps = CalibrationMaps.of(calibration)
    if maps.keyed_by("training rows"):
        if rows is None and configured_rows is None:
            log.warning(
                "calibration maps %s are keyed by the plants' training rows, which no nominal data or published "
                "artifact gives yet: verdicts uncalibrated until the plants publish parameters (or set "
                "rca.calibration.training_rows)",
                maps.id,
            )
            return None
        if rows is not None and configured_rows is not None and rows != configured_rows:
            log.warning(
                "rca.calibration.training_rows is %d, the plants' published parameters say %d rows: using %d",
                configured_rows, rows, rows,
            )  # fmt: skip
        rows = rows if rows is not None else configured_rows
    chosen = maps.select(rows, epsilon)
    if maps.keyed_by("training rows") and chosen is not None:
        log.info("calibration map %s: the plants were trained on %s nominal rows", chosen.id, rows)
    return chosen


def severity_model(settings: RCASettings, n_levels: int, epsilon: float) -> SeverityModel | None:
    """The severity evidence of ``n_levels`` published levels (None for fewer than 3: no level to order)."""
    if n_levels < 3:
        return None
    # a plant at a level shows it with the root's smallest miss rate; nominal data shows level >= 2 at
    # most at the floor of the nominal alarm rate
    return SeverityModel(n_levels, epsilon, min(settings.miss_rate), max(settings.min_false_alarm, 1e-6))


def artifact_state_counts(artifacts: Mapping[str, ParameterArtifact], plants: Sequence[str]) -> FloatArray | None:
    """Nominal flag-state counts (M, 4) from the plant artifacts, or None when a plant's are missing."""
    if not all(p in artifacts and NOMINAL_STATE_COUNTS in artifacts[p].arrays for p in plants):
        return None
    return np.stack([np.asarray(artifacts[p].arrays[NOMINAL_STATE_COUNTS], dtype=np.float64) for p in plants])


def engine_for(
    plants: Sequence[str],
    graph: InterdependencyGraph | None = None,
    *,
    nominal: ArrayLike | None = None,
    epsilon: float = math.inf,
    trained: bool = False,
    settings: RCASettings | None = None,
    severity_levels: int = 0,
    level_epsilon: float = math.inf,
    site: str = "local",
) -> RCAEngine:
    """An engine without a site configuration (tests, benchmarks, notebooks); its verdicts name ``site``
    (a verdict's site is a name: the wire contract refuses an empty one)."""
    s = settings or RCASettings()
    q_N = (
        default_state_rates(len(plants), max(s.false_alarm_rate, s.min_false_alarm), coupled=not trained)
        if nominal is None
        else np.asarray(nominal, dtype=np.float64)
    )
    return RCAEngine(
        graph or InterdependencyGraph.complete(list(plants)),
        flag_model(s, q_N, epsilon, trained),
        s,
        site=site,
        severity=severity_model(s, severity_levels, level_epsilon),
    )


def flag_model(
    settings: RCASettings,
    nominal: ArrayLike,
    epsilon: float,
    trained: bool,
    augmented: Sequence[bool] | None = None,
) -> FlagModel:
    """The flag likelihoods of the settings (``auto`` values resolved for trained or untrained detectors);
    ``augmented`` (M,) is False for plants whose Z_a carries no information of its own."""
    s = settings
    return FlagModel(
        nominal,
        epsilon,
        s.miss_rate,
        s.leak_for(trained),
        s.visibility,
        s.separation_for(trained),
        s.imperfect_for(trained),
        augmented=augmented,
    )
