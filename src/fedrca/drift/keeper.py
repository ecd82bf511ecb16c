"""One plant's re-baselining loop: its history, its schedule, its versioned baselines (pure, no I/O).

A :class:`BaselineKeeper` wraps a plant's fitted
:class:`~fedrca.detectors.plant.PlantDetector`. Every batch goes through
:meth:`BaselineKeeper.process`, which

1. runs the detector on the rows up to the next scheduled refresh (a refresh falls between two
   rows, at a seq: the schedule counts samples, so every path through the same rows, a Kafka
   worker killed and restarted or the in-process replay, refreshes at the same row),
2. records each row with its alarm state (``Z_c or Z_a``) in the plant's bounded
   :class:`~fedrca.drift.history.RowHistory`,
3. at a refresh, re-fits the scorers' moments on the usable rows of the last ``window`` seqs
   (:mod:`fedrca.drift.guard`, :mod:`fedrca.drift.baseline`), steps toward them within the bounds
   (a rate: :meth:`KeeperSettings.bounds`), installs the result as baseline ``b<n+1>`` and carries
   on with the rest of the batch; while the plant alarms, only means that explain the alarms as
   drift are taken (``explain``), else the refresh is refused.

Every refresh, applied or refused, is a :class:`RefreshReport`. An operator may
:meth:`~BaselineKeeper.pin` the baseline (scheduled refreshes are skipped and reported), roll
back to any of the last ``keep`` baselines (:meth:`~BaselineKeeper.rollback`) or take a
refresh the guards refused (:meth:`~BaselineKeeper.refresh` with ``force``).

What persists, and how (the shell writes it: :mod:`fedrca.streams`): :meth:`get_state` is small
(version, schedule, pin: it rides in the plant's state record with every batch); the history's
chunks and each baseline (:meth:`baseline_record`, its moments as float64 bytes) go to the
plant's private history topic. Nothing here leaves the plant.

Examples
--------
>>> import numpy as np
>>> from fedrca.detectors.plant import PlantDetector
>>> rng = np.random.default_rng(0)
>>> nominal = rng.normal(size=(600, 3))
>>> det = PlantDetector(n_states=1, method="family", alpha=0.01, seed=0).fit(nominal)
>>> keeper = BaselineKeeper(det, KeeperSettings(every=300, window=300, history=600, min_rows=100))
>>> _ = keeper.process(rng.normal(size=(700, 3)) + 0.3, seqs=np.arange(700))
>>> [(r.seq, r.outcome, r.version) for r in keeper.reports]
[(300, 'applied', 1), (600, 'applied', 2)]
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from threadpoolctl import ThreadpoolController

from fedrca.config import DriftSettings
from fedrca.contracts.bounds import parse_json, short
from fedrca.contracts.deadletter import DeadLetterReason
from fedrca.detectors.base import DetectionResult
from fedrca.detectors.plant import Evidence, PlantDetector
from fedrca.detectors.scoring import ScorerState
from fedrca.detectors.statistics import FamilyState, Moments, family_statistics, score_of
from fedrca.drift.baseline import (
    limit_family,
    limit_moments,
    mean_shift,
    refit_family,
    refit_residual,
    transfer_memory,
)
from fedrca.drift.guard import alarm_limit, ongoing_alarm, usable_rows
from fedrca.drift.history import RowHistory
from fedrca.exceptions import DataError, MessageError, ModelError

__all__ = ["OUTCOMES", "Baseline", "BaselineKeeper", "KeeperSettings", "RefreshReport", "baseline_record_bytes"]

FloatArray = NDArray[np.float64]
Calibration = FamilyState | ScorerState

#: What a refresh can end in: applied (the whole re-fit), limited (a bound held it back), refused (a
#: guard stopped it), pinned (the operator holds the baseline); and the operator's actions: pinned,
#: unpinned, rollback, forced (a refresh past the guards and bounds).
OUTCOMES = ("applied", "limited", "refused", "pinned", "unpinned", "rollback", "forced")

_BLAS: ThreadpoolController | None = None


def _one_blas_thread() -> Any:
    """A context manager holding BLAS at one thread (:meth:`ThreadpoolController.limit`).

    The controller lists the process's BLAS libraries once, at the first refresh (numpy's and scipy's,
    loaded by then): ``threadpool_limits`` lists them again on every call, reading the process's
    memory map and each library's version, about as long as a small plant's whole re-fit.
    """
    global _BLAS
    if _BLAS is None:
        _BLAS = ThreadpoolController()
    return _BLAS.limit(limits=1, user_api="blas")


def baseline_record_bytes(n_sensors: int, n_lambdas: int = 2, n_states: int | None = None) -> int:
    """Bytes of one baseline's record at most (:meth:`BaselineKeeper.baseline_record`): both families' moments and
    the means of their target, ``2 ((2 + L) (D + D^2) + P + P^2 + 16) + 2 (2 D + P)`` floats as base64 float64
    (``P`` states, at most ``D``), and 4 kB of names.

    It must fit one Kafka record (1 MiB): a plant of more than about 100 sensors cannot persist its baselines.

    Examples
    --------
    >>> baseline_record_bytes(12), baseline_record_bytes(100) > 1 << 20
    (21846, True)
    """
    D, P, L = n_sensors, n_sensors if n_states is None else n_states, n_lambdas
    # both families' moments (and 16 scalars each), and the means of a limited step's target (Baseline.target)
    floats = 2 * ((2 + L) * (D + D * D) + P + P * P + 16) + 2 * (2 * D + P)
    return 4096 + (8 * floats * 4 + 2) // 3


@dataclass(frozen=True)
class KeeperSettings:
    """The loop's knobs in samples (:class:`fedrca.config.DriftSettings` resolved at the site's sample time).

    Attributes
    ----------
    every : samples between two scheduled refreshes (the first at seq ``every``)
    window : the most recent seqs a refresh reads
    history : seqs the plant keeps
    guard : rows left out on either side of an alarm
    recent : the last rows whose alarms stop a refresh
    min_rows : fewest usable rows a refresh needs
    max_shift : most a mean moves per ``per`` seqs, in standard deviations of its old distribution
    max_scale : most a covariance's eigenvalues change per ``per`` seqs, in log
    keep : baselines kept for a rollback
    covariances : re-fit the covariances (else only the means: the spreads of commissioning stay)
    per : the seqs the bounds are per, counted since the baseline in force took effect (a rate;
        None: per ``every``, i.e. per refresh while every refresh is taken) (:meth:`bounds`)
    trend : each mean is the value at the refresh of its window's least-squares line (else the
        window's average, half a window behind a drift) (:func:`fedrca.drift.baseline.trend_mean`)
    explain : while the plant alarms, take the means of the last ``min_rows`` rows when they moved
        within the rate and explain the alarms (else every refresh is refused while it alarms)
    explain_shift : the explaining refresh's rate, most nominal drift moves a mean per ``per`` (standard
        deviations; None: ``max_shift``) (:meth:`explain_bound`). ``max_shift`` is how fast a baseline
        follows (a smoother: on a drifting plant the steps are limited and the baseline lags the plant);
        this is how fast the plant itself may move and still be drift, so it is at least the fastest
        nominal drift, else a loop that fell behind it never catches up
    """

    every: int
    window: int
    history: int
    guard: int = 20
    recent: int = 60
    min_rows: int = 240
    max_shift: float = 0.5
    max_scale: float = 0.25
    keep: int = 8
    covariances: bool = True
    per: int | None = None
    trend: bool = False
    explain: bool = False
    explain_shift: float | None = None

    def __post_init__(self) -> None:
        if min(self.every, self.window, self.history, self.recent, self.min_rows, self.keep) < 1 or self.guard < 0:
            raise ModelError("the loop's sample counts must be positive (guard >= 0)")
        if self.window > self.history:
            raise ModelError(f"window ({self.window}) must be at most history ({self.history})")

    @classmethod
    def from_config(cls, settings: DriftSettings, sample_seconds: float) -> KeeperSettings:
        """The settings of a site's ``drift:`` section at its sample time."""
        return cls(
            every=settings.rows("every", sample_seconds),
            window=settings.rows("window", sample_seconds),
            history=settings.rows("history", sample_seconds),
            guard=settings.guard,
            recent=settings.recent,
            min_rows=settings.min_rows,
            max_shift=settings.max_shift,
            max_scale=settings.max_scale,
            keep=settings.keep,
            covariances=settings.covariances,
            per=settings.rows("per", sample_seconds) if settings.per is not None else None,
            trend=settings.trend,
            explain=settings.explain,
            explain_shift=settings.explain_shift,
        )

    def bounds(self, elapsed: int) -> tuple[float, float]:
        """The step bounds ``(shift, scale)`` of a refresh ``elapsed`` seqs after the baseline in force took
        effect: ``max_shift`` and ``max_scale`` per ``per`` seqs (a rate), so a refresh after refused ones
        may move as far as the plant may have drifted since (``per`` None: per ``every``)."""
        share = max(elapsed, 0) / float(self.per or self.every)
        return self.max_shift * share, self.max_scale * share

    def explain_bound(self, elapsed: int) -> float:
        """How far nominal drift may move a mean in ``elapsed`` seqs: ``explain_shift`` (else ``max_shift``) per
        ``per`` (``per`` None: per ``every``); the explaining refresh's test (:meth:`BaselineKeeper._explain`)."""
        rate = self.max_shift if self.explain_shift is None else self.explain_shift
        return rate * max(elapsed, 0) / float(self.per or self.every)


@dataclass(frozen=True)
class RefreshReport:
    """What one refresh (or operator action) did.

    Attributes
    ----------
    plant : the plant
    seq : the refresh took effect before this row
    outcome : one of :data:`OUTCOMES`
    reason : why, in words (empty for an applied refresh)
    version : the baseline in force afterwards (0: the one the detector was fitted with)
    rows : usable rows the re-fit read (0 when none was made)
    alarms : rows with an alarm in the window read
    shift, scale : the re-fit's full move (largest over the moments; see :mod:`fedrca.drift.baseline`)
    applied : the smallest share of it a moment took (1: all of it)
    """

    plant: str
    seq: int
    outcome: str
    reason: str
    version: int
    rows: int = 0
    alarms: int = 0
    shift: float = 0.0
    scale: float = 0.0
    applied: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form (the fields are scalars: no deep copy, the loop writes its recent reports with
        every refresh)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def line(self) -> str:
        """One line for an operator's log."""
        head = f"plant {self.plant}: baseline refresh at seq {self.seq}: {self.outcome}"
        if self.outcome in ("applied", "limited", "forced"):
            detail = (
                f" -> b{self.version} ({self.rows} rows; mean moved {self.shift:.2f} sd, covariance {self.scale:.2f}; "
                f"{100 * self.applied:.0f}% of the re-fit applied)"
            )
        else:
            detail = f" (baseline b{self.version} kept)"
        return head + detail + (f": {self.reason}" if self.reason else "")


@dataclass(frozen=True)
class Baseline:
    """A versioned baseline: both scorers' states, the training version they go with, where it came from.

    ``target`` holds the means of the re-fit the baseline is a step toward, by name (``c.innovation``, ...,
    ``a.reconstruction``; :func:`target_means`): where the refresh that made it measured the plant at
    ``seq``. A limited step stops short of it on purpose (the rate smooths the baseline); the explaining
    refresh measures how far the plant moved since from it, not from the lagging baseline
    (:meth:`BaselineKeeper._explain`). None: the baseline's own means (an applied or forced refresh, a
    rollback, the fitted baseline, a residual scorer).
    """

    version: int
    training: str
    state_c: Calibration
    state_a: Calibration
    seq: int
    outcome: str
    target: dict[str, FloatArray] | None = field(default=None, compare=False)

    def reference(self) -> tuple[Calibration, Calibration]:
        """Both states with their means at the target (the whitenings, spreads, the baseline's): where the
        plant was last measured, in the units of the baseline in force."""
        if self.target is None or not isinstance(self.state_c, FamilyState):
            return self.state_c, self.state_a
        out = []
        for prefix, state in (("c", self.state_c), ("a", self.state_a)):
            assert isinstance(state, FamilyState)
            inn, lev, rec = (Moments(self.target[f"{prefix}.{k}"], getattr(state, k).whitening) for k in _MOMENTS)
            out.append(replace(state, innovation=inn, level=lev, reconstruction=rec))
        return out[0], out[1]

    def digest(self) -> str:
        """sha256 (hex, 32) of the states' arrays: names a baseline in the plant's state record.

        Computed once per baseline (a plant's state record names it with every batch): a baseline's
        states are not written after it is made (a refresh, a rollback or a reset makes a new one).
        """
        known: str | None = self.__dict__.get("_digest")
        if known is None:
            h = hashlib.sha256()
            for name, a in sorted(_arrays(self.state_c, "c").items()) + sorted(_arrays(self.state_a, "a").items()):
                h.update(name.encode())
                h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
            known = h.hexdigest()[:32]
            object.__setattr__(self, "_digest", known)  # a cache beside the fields (eq, repr, replace ignore it)
        return known


#: The moments a refresh re-fits (and a baseline's target names), in a family state.
_MOMENTS = ("innovation", "level", "reconstruction")


def target_means(state_c: Calibration, state_a: Calibration) -> dict[str, FloatArray] | None:
    """The means of both family states by name (``c.innovation``, ...): a baseline's :attr:`Baseline.target`
    (None for a residual scorer, which has no explaining refresh)."""
    if not (isinstance(state_c, FamilyState) and isinstance(state_a, FamilyState)):
        return None
    return {f"{p}.{k}": np.asarray(getattr(st, k).mean, dtype=np.float64) for p, st in (("c", state_c), ("a", state_a))
            for k in _MOMENTS}  # fmt: skip


def _target_arrays(base: Baseline) -> dict[str, np.ndarray]:
    """A baseline's target as record arrays (``t<name>``); none when it is the baseline's own means."""
    return {} if base.target is None else {f"t{name}": a for name, a in base.target.items()}


def _arrays(state: Calibration, prefix: str) -> dict[str, np.ndarray]:
    if isinstance(state, FamilyState):
        return state.to_arrays(prefix)
    return {
        f"{prefix}.mean": state.mean,
        f"{prefix}.whitening": state.whitening,
        f"{prefix}.threshold": np.asarray(state.threshold),
        f"{prefix}.ewma_start": np.asarray(state.ewma_start),
    }


def _from_arrays(arrays: dict[str, np.ndarray], prefix: str, family: bool) -> Calibration:
    if family:
        return FamilyState.from_arrays(arrays, prefix)
    return ScorerState(
        np.asarray(arrays[f"{prefix}.mean"], dtype=np.float64),
        np.asarray(arrays[f"{prefix}.whitening"], dtype=np.float64),
        float(arrays[f"{prefix}.threshold"]),
        float(arrays[f"{prefix}.ewma_start"]),
    )


def _pack(arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    return {
        name: [list(a.shape), base64.b64encode(np.ascontiguousarray(a, dtype=np.float64).tobytes()).decode("ascii")]
        for name, a in sorted(arrays.items())
    }


def _unpack(packed: dict[str, Any]) -> dict[str, np.ndarray]:
    out = {}
    for name, (shape, data) in packed.items():
        flat = np.frombuffer(base64.b64decode(data.encode("ascii"), validate=True), dtype=np.float64)
        out[name] = flat.reshape(tuple(int(v) for v in shape)).copy()
    return out


@dataclass
class BaselineKeeper:
    """One plant's re-baselining loop around its fitted detector (see the module docstring).

    Parameters
    ----------
    detector : the plant's fitted detector (its scorers' states are baseline 0)
    settings : the loop's knobs in samples
    rate : the plant's nominal alarm rate per sample (the guard's "alarms now" test); None = the
        detector's ``alpha``
    """

    detector: PlantDetector
    settings: KeeperSettings
    rate: float | None = None
    reports: list[RefreshReport] = field(default_factory=list)
    pinned: bool = False

    def __post_init__(self) -> None:
        det = self.detector
        n_inputs = 0
        identified = det.identified_model
        if det.use_inputs and identified is not None and identified.u_scaler is not None:
            n_inputs = len(identified.u_scaler.mean)
        self.history = RowHistory(len(det.scaler.mean), self.settings.history, n_inputs)
        state_c, state_a = det.baseline
        self._baselines: dict[int, Baseline] = {0: Baseline(0, det.parameter_version, state_c, state_a, 0, "fitted")}
        self.version = 0
        self._counter = 0  # the newest version ever made (versions are never reused)
        self.next_due = self.settings.every
        self.last_command: str | None = None
        self._new_baselines: list[int] = []
        self._recent: list[RefreshReport] = []  # the last reports, persisted for `fedrca baseline status`
        self._reports_changed = False
        if self.rate is None:
            # the detector's designed false-alarm rate per sample (both flags)
            percentile = det.method == "residual" and det.threshold == "percentile"
            self.rate = 1.0 - det.percentile / 100.0 if percentile else float(det.alpha)

    # -- versions -----------------------------------------------------------------------------
    @property
    def baseline(self) -> Baseline:
        """The baseline in force."""
        return self._baselines[self.version]

    @property
    def versions(self) -> list[int]:
        """The baselines held (for a rollback), oldest first."""
        return sorted(self._baselines)

    def version_label(self) -> str:
        """``b<n>`` of the baseline in force."""
        return f"b{self.version}"

    def take_new_baselines(self) -> list[int]:
        """Baselines made since the last call (their records are to be written)."""
        made, self._new_baselines = self._new_baselines, []
        return made

    # -- processing ---------------------------------------------------------------------------
    def process(self, Y: ArrayLike, U: ArrayLike | None = None, *, seqs: ArrayLike) -> DetectionResult:
        """Run the detector over a batch (increasing ``seqs``), refreshing the baseline at every due seq."""
        Y_arr = np.asarray(Y, dtype=np.float64)
        U_arr = None if U is None else np.asarray(U, dtype=np.float64).reshape(len(Y_arr), -1)
        seq_arr = np.asarray(seqs, dtype=np.int64).reshape(len(Y_arr))
        parts: list[DetectionResult] = []
        i = 0
        while i < len(Y_arr):
            # rows before the next due seq are scored with the baseline in force
            j = i + int(np.searchsorted(seq_arr[i:], self.next_due, side="left"))
            if j > i:
                U_part = None if U_arr is None else U_arr[i:j]
                out = self.detector.step_batch(Y_arr[i:j], U_part)
                self.history.add(seq_arr[i:j], Y_arr[i:j], U_part, out.zc | out.za)
                parts.append(out)
                i = j
            if i < len(Y_arr):
                # seq_arr[i] >= next_due: refresh between the previous row and this one
                self.refresh(at=int(seq_arr[i]))
                while self.next_due <= seq_arr[i]:
                    self.next_due += self.settings.every
        if not parts:
            return self.detector.step_batch(Y_arr, U_arr)
        return parts[0] if len(parts) == 1 else DetectionResult.concat(parts)

    def reset(self) -> None:
        """A new recording starts at seq 0: the history is forgotten and the schedule restarts. The baseline
        in force is kept and counts as in force from seq 0: its drift allowance (``per``) accrues from the
        recording's start, not from a seq of the previous recording
        (``tests/drift/test_keeper.py::test_a_new_recording_counts_the_drift_allowance_from_its_start``)."""
        self.history.clear()
        self.next_due = self.settings.every
        self._baselines[self.version] = replace(self.baseline, seq=0)

    def restart(self) -> None:
        """Back to the plant as fitted: :meth:`reset`, the fitted baseline b0 installed again, no pin, the
        other versions and the reports forgotten (a replay of a new file starts from the fitted site)."""
        self.reset()
        fitted = self._baselines[0]
        if self.version != 0:
            self.detector.set_baseline(fitted.state_c, fitted.state_a)
        self._baselines = {0: fitted}
        self.version = self._counter = 0
        self.pinned = False
        self.last_command = None
        self.reports.clear()
        self._recent.clear()
        self._new_baselines.clear()

    # -- the refresh ---------------------------------------------------------------------------
    def refresh(self, at: int, force: bool = False) -> RefreshReport:
        """Re-baseline on the history before seq ``at`` (scheduled, or an operator's ``force``).

        The re-fit's matrices are D x D: one BLAS thread (a second spins on a busy machine and makes a
        4 x 4 triangular solve take tens of milliseconds).
        """
        with _one_blas_thread():
            return self._refresh(at, force)

    def _refresh(self, at: int, force: bool) -> RefreshReport:
        s = self.settings
        plant = self.detector.name
        if self.pinned and not force:
            return self._report(RefreshReport(plant, at, "pinned", "the baseline is pinned by an operator",
                                              self.version))  # fmt: skip
        seqs, Y, U, alarm = self.history.window(at, s.window)
        alarms = int(np.count_nonzero(alarm))
        alarming = not force and ongoing_alarm(alarm, s.recent, self.rate or 0.0)
        if alarming:
            recent = int(np.count_nonzero(alarm[-s.recent :]))
            limit = alarm_limit(min(s.recent, len(alarm)), self.rate or 0.0)
            reason = (
                f"the plant alarms now: {recent} alarms in its last {min(s.recent, len(alarm))} rows, at most {limit} "
                "are nominal; a refresh would learn the alarm as normal"
            )
            if not (s.explain and isinstance(self.detector.baseline[0], FamilyState)):
                return self._report(RefreshReport(plant, at, "refused", reason, self.version, 0, alarms))
        # a row with a missing value (NaN) was not scored by the detector (a degraded row): left out, and the
        # rows go through the filter as the live stream did, one stream without it (the window's first rows are
        # the filter's start-up)
        observed = np.isfinite(Y).all(axis=1)
        if U is not None:
            observed &= np.isfinite(U).all(axis=1)
        if not observed.all():
            seqs, Y, alarm = seqs[observed], Y[observed], alarm[observed]
            U = None if U is None else U[observed]
        lengths = [len(seqs)] if len(seqs) else []
        # explaining an alarm reads every row (the alarms are what it must explain); else no row near one
        use = np.ones(len(alarm), dtype=bool) if alarming else usable_rows(alarm, 0 if force else s.guard)
        skip = max(self.detector.warmup, 10)
        start = 0
        for n in lengths:
            use[start : start + min(skip, n)] = False  # the filter's start-up
            start += n
        usable = int(use.sum())
        if alarming:
            return self._explain(at, seqs, Y, U, use, lengths, alarms, reason)
        if usable < s.min_rows:
            reason = (
                f"only {usable} usable rows in the last {s.window} seqs ({len(seqs)} held, {alarms} with an alarm, "
                f"guard {s.guard}); a refresh needs {s.min_rows}"
            )
            return self._report(RefreshReport(plant, at, "refused", reason, self.version, usable, alarms))
        det = self.detector
        try:
            ev = det.baseline_evidence(Y, U, segments=lengths)
            old_c, old_a = det.baseline
            bounds = (math.inf, math.inf) if force else s.bounds(at - self.baseline.seq)
            times = seqs.astype(np.float64) if s.trend else None
            new_c, new_a, shift, scale, applied, target = self._step(old_c, old_a, ev, use, lengths, *bounds,
                                                                     s.covariances, times, float(at))  # fmt: skip
        except (DataError, ModelError, np.linalg.LinAlgError) as exc:
            reason = f"the re-fit failed ({exc})"
            return self._report(RefreshReport(plant, at, "refused", reason, self.version, usable, alarms))
        outcome = "forced" if force else ("applied" if applied >= 1.0 else "limited")
        reason = "" if outcome != "limited" else "a bound held the step back (max_shift / max_scale)"
        self._install(new_c, new_a, at, outcome, target if applied < 1.0 else None)
        return self._report(RefreshReport(plant, at, outcome, reason, self.version, usable, alarms, shift, scale,
                                          applied))  # fmt: skip

    def _explain(
        self,
        at: int,
        seqs: NDArray[np.int64],
        Y: FloatArray,
        U: FloatArray | None,
        use: NDArray[np.bool_],
        lengths: Sequence[int],
        alarms: int,
        alarming: str,
    ) -> RefreshReport:
        """While the plant alarms: take the means of the window's last ``min_rows`` rows (alarms included) only
        when they *explain* the alarms as drift, else refuse.

        Drift: the re-fit's means moved no further from the baseline in force than the rate bounds allow
        for the time since it took effect (all or nothing: no bounded step toward an alarm), and
        measured against them (the spreads kept: a fault that changes a spread or the dynamics is never
        explained by a mean) the last ``recent`` rows hold no more alarms than the nominal rate explains.
        A fault moves faster than a season (``max_shift`` per ``per`` is set on nominal drift) or is not a
        shift of the means: it stays an alarm and the refresh is refused
        (``tests/drift/test_follow.py::test_a_slow_fault_is_refused_by_the_explaining_refresh``); a loop that
        fell behind slow drift, after a fault or a pin, catches up
        (``tests/drift/test_follow.py::test_a_loop_behind_drift_catches_up_while_it_alarms``).
        """
        s = self.settings
        plant = self.detector.name
        # the means now: the average of the last min_rows rows (a fault that ended earlier in the window, whose
        # rows a trend through the whole window would read, is not now)
        use = use & (np.arange(len(use)) >= len(use) - s.min_rows)
        usable = int(use.sum())
        if usable < s.min_rows // 2:
            return self._report(RefreshReport(plant, at, "refused", alarming, self.version, 0, alarms))
        det = self.detector
        old_c, old_a = det.baseline
        assert isinstance(old_c, FamilyState) and isinstance(old_a, FamilyState)
        max_shift = s.explain_bound(at - self.baseline.seq)
        try:
            ev = det.baseline_evidence(Y, U, segments=lengths)
            new_c = refit_family(old_c, ev.r_c, ev.xh_c, ev.e_c, use, lengths, False)
            new_a = refit_family(old_a, ev.r_a, ev.xh_a, ev.e_a, use, lengths, False)
        except (DataError, ModelError, np.linalg.LinAlgError) as exc:
            return self._report(RefreshReport(plant, at, "refused", f"{alarming} (the re-fit failed: {exc})",
                                              self.version, usable, alarms))  # fmt: skip
        # how far the plant moved since it was last measured: from the target of the baseline in force (the
        # re-fit a limited step was moving toward), not from the baseline, which lags it by design
        # (tests/drift/test_follow.py::test_the_explaining_refresh_measures_from_where_the_plant_was_last_measured)
        ref_c, ref_a = self.baseline.reference()
        assert isinstance(ref_c, FamilyState) and isinstance(ref_a, FamilyState)
        shift = max(
            mean_shift(getattr(ref, k), getattr(new, k))
            for ref, new in ((ref_c, new_c), (ref_a, new_a))
            for k in _MOMENTS
        )
        recent = min(s.recent, len(seqs))
        # the alarms the re-fit's means leave in the last recent rows (the stream scored from the window's start)
        left = 0
        for state, r, x, e in ((new_c, ev.r_c, ev.xh_c, ev.e_c), (new_a, ev.r_a, ev.xh_a, ev.e_a)):
            stats, _ = family_statistics(state, r, x, e)
            left = max(left, int(np.count_nonzero(score_of(stats[-recent:] / state.scale) > state.threshold)))
        limit = alarm_limit(recent, self.rate or 0.0)
        if shift > max_shift or left > limit:
            if shift > max_shift:
                why = f"the means moved {shift:.2f} sd, more than the {max_shift:.2f} the drift rate allows from "
                why += f"where b{self.version} measured the plant"
            else:
                why = f"measured against the re-fit's means {left} of the last {recent} rows still alarm "
                why += f"(at most {limit})"
            return self._report(RefreshReport(plant, at, "refused", f"{alarming}; not drift: {why}", self.version,
                                              usable, alarms, shift))  # fmt: skip
        reason = (
            f"the alarms are drift: the means moved {shift:.2f} sd (at most {max_shift:.2f} from where b{self.version} "
            f"measured the plant) and "
            f"explain them ({left} of the last {recent} rows alarm against them)"
        )
        self._install(new_c, new_a, at, "applied")
        return self._report(RefreshReport(plant, at, "applied", reason, self.version, usable, alarms, shift, 0.0, 1.0))

    @staticmethod
    def _step(
        old_c: Calibration,
        old_a: Calibration,
        ev: Evidence,
        use: NDArray[np.bool_],
        lengths: Sequence[int],
        max_shift: float,
        max_scale: float,
        covariances: bool = True,
        times: FloatArray | None = None,
        end: float | None = None,
    ) -> tuple[Calibration, Calibration, float, float, float, dict[str, FloatArray] | None]:
        """Both scorers' bounded steps: (state_c, state_a, largest shift, largest scale, smallest share applied,
        the re-fit's means: :func:`target_means`)."""
        if isinstance(old_c, FamilyState) and isinstance(old_a, FamilyState):
            refit_c = refit_family(old_c, ev.r_c, ev.xh_c, ev.e_c, use, lengths, covariances, times, end)
            refit_a = refit_family(old_a, ev.r_a, ev.xh_a, ev.e_a, use, lengths, covariances, times, end)
            step_c = limit_family(old_c, refit_c, max_shift, max_scale)
            step_a = limit_family(old_a, refit_a, max_shift, max_scale)
            applied = min(min(x.applied for x in step.steps.values()) for step in (step_c, step_a))
            return (
                step_c.state,
                step_a.state,
                max(step_c.shift, step_a.shift),
                max(step_c.scale, step_a.scale),
                applied,
                target_means(refit_c, refit_a),
            )
        assert isinstance(old_c, ScorerState) and isinstance(old_a, ScorerState)
        out = []
        for old, r in ((old_c, ev.r_c), (old_a, ev.r_a)):
            refit = refit_residual(old, r, use)
            step = limit_moments(Moments(old.mean, old.whitening), Moments(refit.mean, refit.whitening),
                                 max_shift, max_scale)  # fmt: skip
            out.append((ScorerState(step.moments.mean, step.moments.whitening, old.threshold, old.ewma_start), step))
        (new_c, sc), (new_a, sa) = out
        return new_c, new_a, max(sc.shift, sa.shift), max(sc.scale, sa.scale), min(sc.applied, sa.applied), None

    def _install(
        self,
        state_c: Calibration,
        state_a: Calibration,
        seq: int,
        outcome: str,
        target: dict[str, FloatArray] | None = None,
    ) -> None:
        det = self.detector
        old_c, old_a = det.baseline
        memory_c = memory_a = None
        sc, sa = det.scorers
        if isinstance(old_c, FamilyState) and isinstance(state_c, FamilyState):
            memory_c = transfer_memory(old_c, state_c, getattr(sc, "memory", None))
        if isinstance(old_a, FamilyState) and isinstance(state_a, FamilyState):
            memory_a = transfer_memory(old_a, state_a, getattr(sa, "memory", None))
        det.set_baseline(state_c, state_a, memory_c, memory_a)
        self._counter += 1
        self.version = self._counter
        self._baselines[self.version] = Baseline(self.version, det.parameter_version, state_c, state_a, seq, outcome,
                                                 target)  # fmt: skip
        self._new_baselines.append(self.version)
        # the fitted baseline (0) stays; the oldest others go beyond keep
        extra = [v for v in sorted(self._baselines) if v not in (0, self.version)]
        for v in extra[: max(0, len(extra) - (self.settings.keep - 1))]:
            del self._baselines[v]

    def _report(self, report: RefreshReport) -> RefreshReport:
        self.reports.append(report)
        self._recent.append(report)
        del self._recent[: -self.settings.keep * 2]
        self._reports_changed = True
        return report

    # -- operator actions ----------------------------------------------------------------------
    def pin(self, at: int) -> RefreshReport:
        """Hold the baseline in force: scheduled refreshes are skipped (and reported) until :meth:`unpin`."""
        self.pinned = True
        return self._report(RefreshReport(self.detector.name, at, "pinned", "pinned by an operator", self.version))

    def unpin(self, at: int) -> RefreshReport:
        """Let scheduled refreshes run again."""
        self.pinned = False
        return self._report(RefreshReport(self.detector.name, at, "unpinned", "unpinned by an operator", self.version))

    def rollback(self, version: int, at: int) -> RefreshReport:
        """Install baseline ``version`` again (one of :attr:`versions`) as a new version; pins the baseline, so
        the next scheduled refresh does not undo the operator's choice."""
        if version not in self._baselines:
            held = ", ".join(f"b{v}" for v in self.versions)
            raise ModelError(f"plant '{self.detector.name}': baseline b{version} is not held; held: {held}")
        target = self._baselines[version]
        self._install(target.state_c, target.state_a, at, "rollback")
        self.pinned = True
        return self._report(RefreshReport(self.detector.name, at, "rollback", f"rolled back to b{version} and pinned",
                                          self.version))  # fmt: skip

    # -- persistence ---------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """Small JSON state (rides in the plant's state record): version, its digest, schedule, pin."""
        return {
            "version": self.version,
            "digest": self.baseline.digest(),
            "counter": self._counter,
            "next_due": self.next_due,
            "pinned": self.pinned,
            "command": self.last_command,
            "held": self.versions,
        }

    def set_state(self, state: dict[str, Any] | None) -> None:
        """Continue from :meth:`get_state` output; the baselines must have been loaded first
        (:meth:`load_baseline`). The baseline in force is installed in the detector."""
        if not state:
            return
        self.next_due = int(state["next_due"])
        self.pinned = bool(state["pinned"])
        self.last_command = state.get("command")
        self._counter = int(state.get("counter", state["version"]))
        version = int(state["version"])
        for v in [v for v in self._baselines if v not in state.get("held", self._baselines) and v != 0]:
            del self._baselines[v]
        base = self._baselines.get(version)
        if base is None or base.digest() != state.get("digest"):
            raise DataError(
                f"plant '{self.detector.name}': baseline b{version} of the saved state is not in the plant's history "
                "topic (or differs); it continues with the fitted baseline b0"
            )
        if version != self.version:
            self.detector.set_baseline(base.state_c, base.state_a)
            self.version = version

    # -- the plant's history topic (records the shell writes with each batch, reads back at a restart) ----
    def baseline_key(self, version: int) -> bytes:
        """The record key of baseline ``version``: one of ``keep + 1`` slots (compaction keeps the newest)."""
        return f"baseline/{version % (self.settings.keep + 1)}".encode()

    def pending_records(self) -> list[tuple[bytes, bytes]]:
        """``(key, value)`` records for the history topic: every chunk and baseline changed since the last call."""
        history = self.history
        out = [(f"rows/{history.slot(c)}".encode(), history.record(c)) for c in sorted(history.take_dirty())]
        made = [v for v in self.take_new_baselines() if v in self._baselines]
        out += [(self.baseline_key(v), self.baseline_record(v)) for v in made]
        if self._reports_changed:
            self._reports_changed = False
            out.append((b"reports", json.dumps([r.as_dict() for r in self._recent], separators=(",", ":")).encode()))
        return out

    def check_record(self, key: bytes, value: bytes) -> None:
        """Refuse a record of the history topic this loop could not take back, before any is taken.

        Checked: JSON within one record's size and nesting; a key of the slots this loop writes
        (``rows/<slot>``, ``baseline/<slot>``, ``reports``); a chunk of this plant's width, at a
        non-negative index, under its own slot; a baseline of a positive version under its own
        slot with the arrays (names, shapes) of the fitted one; reports of their fields. The
        plant worker reads its history through it (:func:`fedrca.streams.loop.read_compacted_checked`;
        ``tests/drift/test_keeper.py``, ``tests/streams/test_drift_kafka.py``).

        Raises
        ------
        MessageError
            ``bad-state`` (or ``too-large`` / ``too-deep`` / ``malformed-json``) naming what is wrong.
        """
        what = f"plant '{self.detector.name}': history record {short(key)}"
        doc = parse_json(value, what, max_depth=4)  # a baseline: {"arrays": {name: [[shape], data]}}
        try:
            if key.startswith(b"rows/"):
                self.history.check_record(key, doc, value)
            elif key.startswith(b"baseline/"):
                base = self._parse_baseline(value)
                if base.version < 1 or key != self.baseline_key(base.version):
                    raise ValueError(f"baseline {base.version} is not kept under this key")
                fitted = self._baselines[0]
                want = {**_arrays(fitted.state_c, "c"), **_arrays(fitted.state_a, "a")}
                if base.target is not None:  # a limited step's target: the fitted means' shapes
                    want |= {f"t{name}": a for name, a in (target_means(fitted.state_c, fitted.state_a) or {}).items()}
                got = {**_arrays(base.state_c, "c"), **_arrays(base.state_a, "a"), **_target_arrays(base)}
                if {k: np.shape(a) for k, a in got.items()} != {k: np.shape(a) for k, a in want.items()}:
                    raise ValueError("its arrays are not the fitted baseline's (names, shapes)")
            elif key == b"reports":
                if not isinstance(doc, list):
                    raise ValueError("reports are a list")
                for r in doc:
                    RefreshReport(**r)
            else:
                raise ValueError("no record of this loop has this key")
        except MessageError:
            raise
        except Exception as exc:  # whatever a hostile record makes the readers raise
            raise MessageError(DeadLetterReason.BAD_STATE, f"{what}: {short(str(exc), 200)}") from None

    def restore_records(self, records: dict[bytes, bytes], newest: int) -> None:
        """Rebuild the history and the baselines from the topic's records (``newest``: the last committed seq,
        -1 for none). Call before :meth:`set_state`."""
        det = self.detector
        self.history = RowHistory(self.history.n_sensors, self.history.capacity, self.history.n_inputs)
        fitted = self._baselines[0]
        self._baselines = {0: fitted}
        self._recent = []
        for key, value in sorted(records.items()):
            if key.startswith(b"rows/"):
                self.history.load(value, newest=newest)
            elif key.startswith(b"baseline/"):
                self.load_baseline(value)
            elif key == b"reports":
                self._recent = [RefreshReport(**r) for r in json.loads(value)]
        self._reports_changed = False
        self.history.settle(newest)
        self._new_baselines.clear()
        if self.version != 0:  # the state names the baseline to run; until then, the fitted one
            det.set_baseline(fitted.state_c, fitted.state_a)
            self.version = 0

    def baseline_record(self, version: int) -> bytes:
        """A baseline as one JSON record (its states' arrays as float64 bytes)."""
        b = self._baselines[version]
        doc = {
            "kind": "baseline",
            "plant": self.detector.name,
            "version": b.version,
            "training": b.training,
            "seq": b.seq,
            "outcome": b.outcome,
            "family": isinstance(b.state_c, FamilyState),
            "arrays": _pack({**_arrays(b.state_c, "c"), **_arrays(b.state_a, "a"), **_target_arrays(b)}),
        }
        return json.dumps(doc, separators=(",", ":")).encode()

    def load_baseline(self, raw: bytes) -> int:
        """Take a baseline back from its record; returns its version."""
        base = self._parse_baseline(raw)
        if base.version > 0:
            self._baselines[base.version] = base
        return base.version

    def _parse_baseline(self, raw: bytes) -> Baseline:
        """A baseline from its record (:meth:`baseline_record`)."""
        try:
            doc = json.loads(raw)
            arrays = _unpack(doc["arrays"])
            family = bool(doc["family"])
            state_c, state_a = _from_arrays(arrays, "c", family), _from_arrays(arrays, "a", family)
            own = target_means(state_c, state_a)
            target = None
            if own is not None and any(name.startswith("t") for name in arrays):
                target = {name: np.asarray(arrays[f"t{name}"], dtype=np.float64) for name in own}
            base = Baseline(
                int(doc["version"]),
                str(doc["training"]),
                state_c,
                state_a,
                int(doc["seq"]),
                str(doc["outcome"]),
                target,
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise DataError(f"plant '{self.detector.name}': not a baseline record ({exc})") from None
        return base
