"""Per-plant detector: proprietary filter + augmentation + scoring + flag privacy.

One :class:`PlantDetector` per plant. ``fit`` calibrates on nominal data only;
``step_batch`` and ``step`` process new samples and keep all streaming state,
so processing a stream in any chunking gives the same result as one batch.

Two scoring methods (``method``):

* ``"residual"``: P1's flags, the Mahalanobis distance of the prediction residual
  of each model (:class:`~fedrca.detectors.scoring.ResidualScorer`), optionally
  EWMA-smoothed;
* ``"family"``: a family of statistics per model, innovation + MEWMA + level +
  reconstruction (:mod:`fedrca.detectors.statistics`), with one jointly calibrated
  family-wise false-alarm rate ``alpha`` per plant (both flags together).

Either way ``Z_c`` comes from the proprietary model and ``Z_a`` from the augmented
one: each statistic of the proprietary model has its augmented counterpart,
computed from the augmented prediction ``x_a(t) = f(x̂_c(t-1) + Theta psi(y(t-1)))``
and the augmented estimate ``x̂_a(t) = x̂_c(t) + Theta psi(y(t))`` exactly as the
proprietary one is from ``x_c(t)`` and ``x̂_c(t)``; with Theta = 0 the two are equal.

Missing values (docs/missing.md). A sample may hold NaN for a value that is missing,
Bad or stale; a caller that excludes a tag (a sensor-fault check) either sets it NaN or
passes ``exclude`` (a boolean mask of the same shape, or (D,) for every row) to
:meth:`PlantDetector.step_batch`: both mean the same. The filter corrects on the
observed sensors (:func:`~fedrca.detectors.kalman.kf_update`), every statistic is the
statistic of the observed entries on the complete-data scale
(:mod:`fedrca.detectors.missing`), the augmentation's features take the filter's
estimate ``h(x̂_c(t))`` in place of a missing value, and a missing input holds its last
value. A row with fewer usable sensors than ``min_sensors`` is *degraded*: scored for the
streaming memory but never flagged (:attr:`DetectionResult.degraded`); the plant
publishes it as a degraded flag. Only ``inf`` is refused.
"""

from __future__ import annotations

import copy
import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedrca.detectors.augment import Augmentation, make_feature_map
from fedrca.detectors.base import DetectionResult, Detector, check_samples
from fedrca.detectors.fused import PairMaps, pair_statistics
from fedrca.detectors.identify import IdentifiedModel, Standardizer, identify_linear_model
from fedrca.detectors.kalman import LinearKalmanFilter
from fedrca.detectors.missing import min_present, observed_counts
from fedrca.detectors.plugin import ProprietaryFilter, filter_batch
from fedrca.detectors.scoring import ResidualScorer, ScorerState
from fedrca.detectors.statistics import (
    STATISTICS,
    FamilyState,
    StatisticFamily,
    family_statistics,
    fit_family,
    keep_mask,
    score_of,
    segment_lengths,
    segment_statistics,
    stream_memory,
    tail_quantile,
)
from fedrca.exceptions import DataError, ModelError, NotFittedError
from fedrca.privacy.randomized_response import LevelRandomizedResponse, RandomizedResponse

__all__ = ["Evidence", "PlantDetector", "hold_last", "severity_levels"]

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]
Scorer = ResidualScorer | StatisticFamily
Calibration = ScorerState | FamilyState
IntArray = NDArray[np.int64]


def _digest_update(h: Any, value: Any) -> None:
    """Feed ``value`` (arrays, dataclasses of them, sequences, scalars) into the hash ``h``."""
    if isinstance(value, np.ndarray):
        array = np.ascontiguousarray(value, dtype=np.float64)
        h.update(repr(array.shape).encode())
        h.update(array.data)
    elif is_dataclass(value) and not isinstance(value, type):
        for f in fields(value):
            h.update(f.name.encode())
            _digest_update(h, getattr(value, f.name))
    elif isinstance(value, list | tuple):
        h.update(b"[%d" % len(value))
        for item in value:
            _digest_update(h, item)
    else:
        h.update(repr(value).encode())


def severity_levels(score: FloatArray, threshold: float, alarm: BoolArray, n_levels: int, base: float) -> IntArray:
    """Severity level of each sample: 0 without an alarm, else ``1 + floor(log_base(score / threshold))``
    capped at ``n_levels - 1`` (so level 1 is ``[tau, base tau)``, level 2 ``[base tau, base^2 tau)``, ...).

    Examples
    --------
    >>> import numpy as np
    >>> severity_levels(np.array([0.5, 2.0, 30.0, 3e5]), 1.0, np.array([False, True, True, True]), 4, 10.0).tolist()
    [0, 1, 2, 3]
    """
    alarm = np.asarray(alarm, dtype=bool)
    if not alarm.any():  # the usual sample: no alarm, level 0 (no logarithm to take)
        return np.zeros(alarm.shape, dtype=np.int64)
    ratio = np.maximum(np.asarray(score, dtype=np.float64) / threshold, 1.0)
    # l = 1 + floor(log_b(s / tau)), capped
    level = np.minimum(1 + np.floor(np.log(ratio) / math.log(base)), n_levels - 1)
    return np.asarray(np.where(alarm, level, 0), dtype=np.int64)


@dataclass(frozen=True)
class _Evidence:
    """What both models give for T samples (before scoring); units of the filter."""

    x_c: FloatArray  # (T, P) x_c(t), proprietary prediction
    x_a: FloatArray  # (T, P) x_a(t), augmented prediction
    xh_c: FloatArray  # (T, P) x̂_c(t), proprietary estimate
    xh_a: FloatArray  # (T, P) x̂_a(t) = x̂_c(t) + Theta psi(y(t))
    r_c: FloatArray  # (T, D) y - h(x_c)
    r_a: FloatArray  # (T, D) y - h(x_a)
    e_c: FloatArray  # (T, D) y - h(x̂_c)
    e_a: FloatArray  # (T, D) y - h(x̂_a)

    @classmethod
    def concat(cls, parts: list[_Evidence]) -> _Evidence:
        if len(parts) == 1:
            return parts[0]  # one stream (a refresh's window): its arrays are fresh already, no copy
        return cls(**{f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(cls)})


#: What both models give for T samples before scoring (:meth:`PlantDetector.baseline_evidence`).
Evidence = _Evidence


class PlantDetector(Detector):
    """One plant's detector: fixed filter, augmentation, scorers and randomized response.

    Parameters
    ----------
    name : plant name (for messages)
    model : the plant's own fixed filter (plug-in protocol); when None a linear model
        is identified from the nominal data in :meth:`fit` (SVD + VAR(1))
    n_states : state dimension for identification (None: chosen by ``energy``)
    energy : energy fraction for identification
    features : augmentation feature map, "identity" or "rff"
    n_features, lengthscale : random-feature settings
    method : "residual" (P1's residual scorer) or "family" (the statistic family, see the
        module docstring)
    threshold, percentile, margin, smooth : residual method, see :class:`ResidualScorer`
    alpha : residual method: the chi-square level; family method: the family-wise
        false-alarm rate per sample of the plant (both flags, every statistic)
    ewma : residual method: the EWMA weight (None = off); family method: the MEWMA
        smoothing constant(s) (None = 0.1)
    statistics : family method: which statistics (subset of
        :data:`fedrca.detectors.statistics.STATISTICS`)
    base_quantile, tail, confidence : family method: the per-statistic normaliser, the share
        of the held-out scores the threshold's tail is fitted to and the confidence of the
        threshold (:func:`~fedrca.detectors.statistics.tail_quantile`)
    dispersion : family method: smoothing constant of the ``dispersion`` statistic
    warmup : samples after a reset during which no flag is raised (the filter and the
        EWMA settle from their initial values); the statistics are computed all the same
    min_sensors : fewest usable (non-missing) sensors a row is scored with: a count (>= 1) or
        a share of the plant's sensors (< 1, rounded up); a row with fewer is degraded
    severity_levels, severity_base : publish, with the flags, the severity level of the
        proprietary score (:func:`severity_levels`, ``severity_levels`` values K >= 3; 0 = no
        levels) through k-ary randomized response of budget ``level_epsilon``
    epsilon : flag privacy budget per published flag (inf = no perturbation)
    seed : seeds the random features and the randomized response
    steady_state : steady-state Kalman gain for identified models
    use_inputs : when False the inputs given to :meth:`fit` and :meth:`step_batch` are ignored:
        the filter runs as if the plant had none (its inputs still reach the federated learner)
    calibration, folds : thresholds from held-out residuals of models identified without
        each of ``folds`` contiguous blocks ("cv"), or in-sample

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> nominal = rng.normal(size=(400, 4)).cumsum(axis=0) * 0.05 + rng.normal(size=(400, 4))
    >>> det = PlantDetector(n_states=2, seed=0).fit(nominal)
    >>> shifted = nominal[:50] + 8.0
    >>> bool(det.step_batch(shifted).zc.mean() > 0.9)
    True
    >>> fam = PlantDetector(n_states=2, method="family", alpha=0.01, seed=0).fit(nominal)
    >>> fam.statistics
    ('innovation', 'mewma@0.1', 'level', 'reconstruction', 'dispersion')
    >>> bool(fam.step_batch(shifted).zc.mean() > 0.9)
    True
    """

    def __init__(
        self,
        name: str = "plant",
        model: ProprietaryFilter | None = None,
        n_states: int | None = None,
        energy: float = 0.9,
        features: str = "identity",
        n_features: int = 64,
        lengthscale: float = 1.0,
        threshold: str = "percentile",
        percentile: float = 99.0,
        alpha: float = 0.01,
        ewma: float | Sequence[float] | None = None,
        smooth: str = "d2",
        margin: float = 1.0,
        epsilon: float = math.inf,
        seed: int = 0,
        steady_state: bool = True,
        calibration: str = "cv",
        folds: int = 5,
        use_inputs: bool = True,
        method: str = "residual",
        statistics: Sequence[str] = STATISTICS,
        base_quantile: float = 0.99,
        tail: float = 0.1,
        confidence: float = 0.5,
        dispersion: float = 0.2,
        warmup: int = 0,
        severity_levels: int = 0,
        severity_base: float = 10.0,
        level_epsilon: float = math.inf,
        min_sensors: float = 0.5,
    ) -> None:
        self.name = name
        self.model = model
        self.n_states = n_states
        self.energy = energy
        self.features = features
        self.n_features = n_features
        self.lengthscale = lengthscale
        self.threshold = threshold
        self.percentile = percentile
        self.alpha = alpha
        self.ewma = ewma
        self.smooth = smooth
        self.margin = margin
        self.epsilon = epsilon
        self.seed = seed
        self.steady_state = steady_state
        if calibration not in ("cv", "in-sample"):
            raise ModelError(f"calibration must be 'cv' or 'in-sample', got {calibration!r}")
        if folds < 2:
            raise ModelError(f"folds must be >= 2, got {folds}")
        if method not in ("residual", "family"):
            raise ModelError(f"method must be 'residual' or 'family', got {method!r}")
        if warmup < 0:
            raise ModelError(f"warmup must be >= 0, got {warmup}")
        if severity_levels not in (0,) and severity_levels < 3:
            raise ModelError(f"severity_levels must be 0 (no levels) or >= 3, got {severity_levels}")
        if severity_base <= 1.0:
            raise ModelError(f"severity_base must be > 1, got {severity_base}")
        if method == "residual" and ewma is not None and not isinstance(ewma, int | float):
            raise ModelError("the residual method takes one EWMA weight (a number), not a list")
        self.calibration = calibration
        self.folds = folds
        self.use_inputs = use_inputs
        self.method = method
        self.statistics_selected = tuple(statistics)
        self.base_quantile = base_quantile
        self.tail = tail
        self.confidence = confidence
        self.dispersion = dispersion
        self.warmup = warmup
        self.severity_levels = severity_levels
        self.severity_base = severity_base
        self.level_epsilon = level_epsilon
        min_present(min_sensors, 1)  # checks the setting
        self.min_sensors = min_sensors
        self._filter: ProprietaryFilter | None = None
        self._identified: IdentifiedModel | None = None
        self._scaler: Standardizer | None = None
        self._augmentation: Augmentation | None = None
        self._scorer_c: Scorer = self._new_scorer()
        self._scorer_a: Scorer = self._new_scorer()
        self._privacy = RandomizedResponse(epsilon, seed=seed)
        self._level_privacy = LevelRandomizedResponse(level_epsilon, max(severity_levels, 2), seed=seed)
        self._last_y: FloatArray | None = None  # standardised y(t-1)
        self._last_u: FloatArray | None = None
        self._seen = 0  # samples since the last reset (counted up to warmup)
        self._initial_filter_state: dict[str, Any] | None = None
        # family method: the calibration of the proprietary family, kept to re-calibrate the pair
        # jointly for a new Theta (calibrate_augmented)
        self._inflation: FloatArray | None = None
        self._threshold_c0: float | None = None
        self.parameter_version: str = "proprietary"
        self._digest: str | None = None  # of the parameters in use (parameter_digest), None: not computed
        self.restored_parameters: tuple[str, str | None] | None = None
        self._fused: tuple[tuple[Any, ...], PairMaps] | None = None
        # (y(t-1) it belongs to, maps, PairOutput.last_features): kept by identity of both
        self._fused_last: tuple[FloatArray, PairMaps, FloatArray] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # the fused maps are keyed by id() of the scorers' moments (fused.PairMaps.shifts): a copy
        # (pickle, deepcopy) has other ids, so it rebuilds them (check_detector's "pickle" check)
        state = self.__dict__.copy()
        state["_fused"] = state["_fused_last"] = None
        return state

    def _lambdas(self) -> tuple[float, ...]:
        if self.ewma is None:
            return (0.1,)
        if isinstance(self.ewma, int | float):
            return (float(self.ewma),)
        return tuple(float(v) for v in self.ewma)

    def _new_scorer(self) -> Scorer:
        if self.method == "family":
            return StatisticFamily(
                self.statistics_selected,
                self._lambdas(),
                self.alpha,
                self.base_quantile,
                self.tail,
                self.confidence,
                self.dispersion,
            )
        ewma = self.ewma if self.ewma is None or isinstance(self.ewma, int | float) else None
        return ResidualScorer(
            threshold=self.threshold,  # type: ignore[arg-type]
            percentile=self.percentile,
            alpha=self.alpha,
            ewma=None if ewma is None else float(ewma),
            smooth=self.smooth,  # type: ignore[arg-type]
            margin=self.margin,
        )

    # -- accessors ------------------------------------------------------------------------
    @property
    def proprietary(self) -> ProprietaryFilter:
        """The fixed filter (identified or plugged in); NotFittedError before fit."""
        if self._filter is None:
            raise NotFittedError(f"plant '{self.name}': detector is not fitted; call fit(nominal) first")
        return self._filter

    @property
    def identified_model(self) -> IdentifiedModel | None:
        """The identified model, when the plant brought none."""
        return self._identified

    @property
    def augmentation(self) -> Augmentation:
        """The learned augmentation (Theta = 0 until trained parameters are set)."""
        if self._augmentation is None:
            raise NotFittedError(f"plant '{self.name}': detector is not fitted; call fit(nominal) first")
        return self._augmentation

    @property
    def scaler(self) -> Standardizer:
        """Nominal standardiser of this plant's sensors."""
        if self._scaler is None:
            raise NotFittedError(f"plant '{self.name}': detector is not fitted; call fit(nominal) first")
        return self._scaler

    @property
    def scorers(self) -> tuple[Scorer, Scorer]:
        """(proprietary scorer, augmented scorer); each has ``threshold_value``."""
        return self._scorer_c, self._scorer_a

    @property
    def statistics(self) -> tuple[str, ...]:
        """Labels of the columns of ``stats_c`` / ``stats_a`` in a :class:`DetectionResult`."""
        if isinstance(self._scorer_c, StatisticFamily):
            return self._scorer_c.statistics
        return ("residual",)

    @property
    def thresholds(self) -> tuple[float, float]:
        """The thresholds of Z_c and Z_a (d2 for the residual scorer; the family's scorer has its own scale)."""
        return self._scorer_c.threshold_value, self._scorer_a.threshold_value

    @property
    def privacy(self) -> RandomizedResponse:
        """The flag randomizer."""
        return self._privacy

    @property
    def level_privacy(self) -> LevelRandomizedResponse:
        """The severity-level randomizer."""
        return self._level_privacy

    # -- fitting --------------------------------------------------------------------------
    def fit(self, Y: ArrayLike, U: ArrayLike | None = None, *, segments: Sequence[int] | None = None) -> PlantDetector:
        """Identify (if needed) and calibrate both scorers on nominal data ``Y`` (T, D).

        ``segments``: lengths of the consecutive recordings ``Y`` is made of (None: one).
        Each starts a fresh stream (the filter and the EWMA restart, the first ``warmup``
        rows are left out of the calibration), so a jump between two recordings is not
        taken for nominal behaviour.

        Nominal data with gaps (NaN, docs/missing.md): the model is identified as
        :func:`~fedrca.detectors.identify.identify_linear_model` says (moments and R on the observed
        entries, gaps bridged for the SVD and the VAR); the nominal evidence is then computed
        exactly as it will be online (the filter and the statistics on the observed sensors), the
        statistics' moments on the rows it has complete (complete-case), their thresholds on all
        held-out rows, gaps included.
        """
        Y_arr = self._check_batch(Y, expect_dim=None)
        U_arr = None if U is None or not self.use_inputs else np.asarray(U, dtype=np.float64).reshape(len(Y_arr), -1)
        lengths = segment_lengths(len(Y_arr), segments)
        if self.model is None:
            self._identified = identify_linear_model(Y_arr, U_arr, n_states=self.n_states, energy=self.energy)
            self._filter = self._identified.kalman_filter(steady_state=self.steady_state)
            self._scaler = self._identified.y_scaler
        else:
            self._filter = self.model
            self._scaler = Standardizer.fit(Y_arr)
        feature_map = make_feature_map(self.features, Y_arr.shape[1], self.n_features, self.lengthscale, self.seed)
        self._augmentation = Augmentation(feature_map, self._filter.state_dim)
        self._filter.reset()
        self._initial_filter_state = copy.deepcopy(self._filter.get_state())
        self._scorer_c, self._scorer_a = self._new_scorer(), self._new_scorer()
        ev = self._segment_evidence(Y_arr, U_arr, lengths)
        if isinstance(self._scorer_c, StatisticFamily):
            self._fit_family(Y_arr, U_arr, ev, lengths)
        else:
            held_out = None
            if self.calibration == "cv" and self._identified is not None:
                held_out = self._cross_validated_residuals(Y_arr, U_arr)
            self._scorer_c.fit(ev.r_c, calibration_residuals=held_out)
            self._scorer_a.state = self._scorer_c.state
        self.parameter_version = "proprietary"
        self._digest = None
        self.reset()
        return self

    def _segment_evidence(self, Y: FloatArray, U: FloatArray | None, lengths: Sequence[int]) -> _Evidence:
        """Evidence of consecutive recordings, each from a reset detector."""
        parts, start = [], 0
        for n in lengths:
            self.reset()
            parts.append(self._evidence(Y[start : start + n], None if U is None else U[start : start + n]))
            start += n
        self.reset()
        return _Evidence.concat(parts)

    def _skip(self) -> int:
        """Leading rows of a fresh stream left out of fitting and calibration (the filter's start-up)."""
        return max(self.warmup, 10)

    def _fit_family(self, Y: FloatArray, U: FloatArray | None, ev: _Evidence, lengths: Sequence[int]) -> None:
        """Moments in-sample; scales and the threshold on held-out statistics (cross-validated)."""
        assert isinstance(self._scorer_c, StatisticFamily) and isinstance(self._scorer_a, StatisticFamily)
        skip = self._skip()
        held_out = None
        if self.calibration == "cv" and self._identified is not None:
            held_out = self._held_out_statistics(Y, U, lengths)
        self._scorer_c.fit(ev.r_c, ev.xh_c, ev.e_c, held_out=held_out, skip=skip, segments=lengths)
        state = self._scorer_c.state
        insample = segment_statistics(state, ev.r_c, ev.xh_c, ev.e_c, lengths)[keep_mask(lengths, skip)]
        # how much heavier the held-out tails are than the in-sample ones, per statistic: an augmented
        # family (whose held-out statistics cannot be had: Theta belongs to the full model) is scaled alike
        self._inflation = state.scale / np.maximum(np.quantile(insample, self.base_quantile, axis=0), 1e-12)
        self._threshold_c0 = state.threshold
        self._scorer_a.state = state

    def _fold_evidence(
        self, fold: IdentifiedModel, Y: FloatArray, U: FloatArray | None, lengths: Sequence[int]
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        """(r, x̂, e) of a fold model over consecutive recordings of ``Y`` (each a fresh stream), in
        the full model's units."""
        assert self._identified is not None
        parts, start = [], 0
        for n in lengths:
            kf = fold.kalman_filter(steady_state=self.steady_state)
            U_prev = None
            if U is not None and fold.u_scaler is not None:
                Uz = fold.u_scaler.transform(U[start : start + n])
                U_prev = np.vstack([np.zeros((1, Uz.shape[1])), Uz[:-1]])
            Z = fold.y_scaler.transform(Y[start : start + n])
            out = kf.filter(Z, U_prev)
            parts.append((out.residuals, out.x_est, Z - kf.measure(out.x_est)))
            start += n
        # express the fold's residuals in the full model's standardised units
        ratio = fold.y_scaler.std / self._identified.y_scaler.std
        r, x, e = (np.concatenate([p[i] for p in parts]) for i in range(3))
        return r * ratio, x, e * ratio

    def _held_out_statistics(self, Y: FloatArray, U: FloatArray | None, lengths: Sequence[int]) -> FloatArray:
        """Statistics (n, K) of each contiguous block under a detector fitted without it.

        Each fold is a whole detector: a model identified without the block, its
        statistics' moments fitted on its own training rows; it then runs over the
        whole data (each recording one stream, so no restart at the block and no
        start-up in it) and the block's rows are kept: statistics on data the fold
        never saw.
        """
        assert self._identified is not None
        T = len(Y)
        skip = self._skip()
        keep = keep_mask(lengths, skip)
        recording = np.repeat(np.arange(len(lengths)), lengths)
        parts = []
        for block in np.array_split(np.arange(T), self.folds):
            train = np.setdiff1d(np.arange(T), block)
            U_train = None if U is None else U[train]
            fold = identify_linear_model(Y[train], U_train, n_states=self._identified.n_states)
            # the training rows as recordings: split where a recording starts or the block was cut out
            cuts = np.flatnonzero((np.diff(train) > 1) | (np.diff(recording[train]) != 0)) + 1
            pieces = np.diff(np.r_[0, cuts, len(train)]).tolist()
            r, x, e = self._fold_evidence(fold, Y[train], U_train, pieces)
            state = fit_family(r, x, e, self.statistics_selected, self._lambdas(), skip, pieces, self.dispersion)
            parts.append(self._block_statistics(state, fold, Y, U, lengths, block)[keep[block]])
        return np.concatenate(parts)

    def _block_statistics(
        self,
        state: FamilyState,
        fold: IdentifiedModel,
        Y: FloatArray,
        U: FloatArray | None,
        lengths: Sequence[int],
        block: IntArray,
    ) -> FloatArray:
        """``segment_statistics(state, *self._fold_evidence(fold, Y, U, lengths), lengths)[block]`` for a
        contiguous ``block``, from the rows up to its end only and with the statistics of its own rows
        only (the rows before it give the filter's and the EWMAs' memory): the same numbers at a
        fraction of the cost, which for a plant of D sensors is one (T, D) x (D, D) product per
        statistic and fold."""
        lo, end = int(block[0]), int(block[-1]) + 1
        starts = np.cumsum([0, *lengths[:-1]]).tolist()
        pieces = [min(n, end - s0) for s0, n in zip(starts, lengths, strict=True) if s0 < end]
        r, x, e = self._fold_evidence(fold, Y[:end], None if U is None else U[:end], pieces)
        out = []
        for s0, n in zip(starts, pieces, strict=False):
            a, b = max(s0, lo), s0 + n  # the block's rows in this recording
            if b > a:
                memory = stream_memory(state, r[s0:a])
                out.append(family_statistics(state, r[a:b], x[a:b], e[a:b], memory)[0])
        return np.concatenate(out)

    def _cross_validated_residuals(self, Y: FloatArray, U: FloatArray | None) -> list[FloatArray]:
        """Residuals of models identified without each contiguous block, on that block.

        In-sample residuals are too small (the model was fitted to them), so a
        threshold set on them alarms more often on new nominal data; held-out
        residuals carry the heavier tails new data will have.
        """
        if self._identified is None:
            raise NotFittedError("cross-validation needs an identified model")
        full_std = self._identified.y_scaler.std
        blocks = np.array_split(np.arange(len(Y)), self.folds)
        residuals = []
        for block in blocks:
            train = np.setdiff1d(np.arange(len(Y)), block)
            U_train = None if U is None else U[train]
            fold = identify_linear_model(Y[train], U_train, n_states=self._identified.n_states)
            kf = fold.kalman_filter(steady_state=self.steady_state)
            U_block = None
            if U is not None and fold.u_scaler is not None:
                Uz = fold.u_scaler.transform(U[block])
                U_block = np.vstack([np.zeros((1, Uz.shape[1])), Uz[:-1]])
            out = kf.filter(fold.y_scaler.transform(Y[block]), U_block)
            warm_up = min(10, len(block) // 10)
            # Express the fold's residuals in the full model's standardised units.
            residuals.append(out.residuals[warm_up:] * fold.y_scaler.std / full_std)
        return residuals

    def calibrate_augmented(
        self, Y: ArrayLike, U: ArrayLike | None = None, *, segments: Sequence[int] | None = None
    ) -> Calibration:
        """Re-calibrate the augmented scorer on nominal data ``Y`` with the current Theta; returns its state.

        The new calibration is installed (as :meth:`set_parameters` with it would) and
        returned for the training artifact. Residual method: the augmented scorer's
        mean, covariance and threshold are refitted on the augmented residuals. Family
        method: the augmented family's moments are fitted on the augmented evidence, its
        scales are the in-sample ones inflated like the proprietary family's held-out
        ones, and the threshold both flags share is raised so that ``P(Z_c or Z_a)``
        stays ``alpha`` (``tests/detectors/test_plant.py`` guards that the returned state
        is the new one). ``segments`` as in :meth:`fit`.
        """
        Y_arr = self._check_batch(Y, expect_dim=self.proprietary.output_dim if self._identified is None else None)
        U_arr = None if U is None else np.asarray(U, dtype=np.float64).reshape(len(Y_arr), -1)
        lengths = segment_lengths(len(Y_arr), segments)
        with self.detached():
            ev = self._segment_evidence(Y_arr, U_arr, lengths)
        if isinstance(self._scorer_c, StatisticFamily):
            state: Calibration = self._calibrate_family_pair(ev, lengths)
        else:
            state = ResidualScorer(**self._residual_settings()).fit(ev.r_a).state
        self.set_parameters(self.augmentation.theta, scorer_a=state, version=self.parameter_version)
        return state

    def _residual_settings(self) -> dict[str, Any]:
        scorer = self._scorer_c
        assert isinstance(scorer, ResidualScorer)
        return {
            "threshold": scorer.threshold,
            "percentile": scorer.percentile,
            "alpha": scorer.alpha,
            "ewma": scorer.ewma,
            "shrinkage": scorer.shrinkage,
            "margin": scorer.margin,
            "smooth": scorer.smooth,
        }

    def _calibrate_family_pair(self, ev: _Evidence, lengths: Sequence[int]) -> FamilyState:
        if self._inflation is None or self._threshold_c0 is None:
            raise NotFittedError(f"plant '{self.name}': detector is not fitted; call fit(nominal) first")
        skip = self._skip()
        keep = keep_mask(lengths, skip)
        state_c = self._scorer_c.state
        assert isinstance(state_c, FamilyState)
        fresh = fit_family(
            ev.r_a, ev.xh_a, ev.e_a, self.statistics_selected, self._lambdas(), skip, lengths, self.dispersion
        )
        S_a = segment_statistics(fresh, ev.r_a, ev.xh_a, ev.e_a, lengths)[keep]
        S_c = segment_statistics(state_c, ev.r_c, ev.xh_c, ev.e_c, lengths)[keep]
        # c_a,k = in-sample base quantile of the augmented s_k x the proprietary family's held-out inflation
        scale_a = np.maximum(np.quantile(S_a, self.base_quantile, axis=0), 1e-12) * self._inflation
        u_c = score_of(S_c / state_c.scale)
        u_pair = np.maximum(u_c, score_of(S_a / scale_a))
        # one threshold for both flags: the proprietary one, raised by how much the pair's in-sample
        # (1 - alpha) quantile exceeds the proprietary family's alone (1 for Theta = 0)
        q_pair = tail_quantile(u_pair, self.alpha, self.tail, self.confidence)
        ratio = q_pair / max(tail_quantile(u_c, self.alpha, self.tail, self.confidence), 1e-12)
        return fresh.with_calibration(scale_a, self._threshold_c0 * max(ratio, 1.0))

    def set_parameters(self, theta: FloatArray, scorer_a: Calibration | None = None, version: str = "trained") -> None:
        """Hot-swap trained augmentation parameters (between samples).

        ``scorer_a`` is the augmented scorer calibrated on nominal data with this
        Theta (stored in the training artifact); without it the scorer keeps its
        statistics. Family method: its threshold is the one both flags share, so the
        proprietary family takes it too.
        """
        if scorer_a is not None:
            self._check_calibration(scorer_a)
        self.augmentation.theta = theta
        if scorer_a is not None:
            last_a, last_c = self._scorer_a.get_state(), self._scorer_c.get_state()
            self._scorer_a.state = scorer_a
            self._scorer_a.set_state(last_a)
            if isinstance(scorer_a, FamilyState) and isinstance(self._scorer_c, StatisticFamily):
                state_c = self._scorer_c.state
                self._scorer_c.state = state_c.with_calibration(state_c.scale, scorer_a.threshold)
                self._scorer_c.set_state(last_c)
        self.parameter_version = version
        self._digest = None

    def _check_calibration(self, state: Calibration) -> None:
        family = isinstance(self._scorer_c, StatisticFamily)
        if family != isinstance(state, FamilyState):
            raise ModelError(
                f"plant '{self.name}': the augmented calibration is for the "
                f"{'family' if isinstance(state, FamilyState) else 'residual'} method, the detector uses "
                f"'{self.method}'; retrain with the current configuration"
            )
        if isinstance(state, FamilyState) and state.statistics != self.statistics:
            raise ModelError(
                f"plant '{self.name}': the augmented calibration has statistics {list(state.statistics)}, the "
                f"detector {list(self.statistics)}; retrain with the current configuration"
            )

    # -- baseline (the re-baselining loop, fedrca.drift) ------------------------------------
    @property
    def baseline(self) -> tuple[Calibration, Calibration]:
        """(proprietary, augmented) scorer states: what the scores are measured against."""
        return self._scorer_c.state, self._scorer_a.state

    def baseline_evidence(
        self, Y: ArrayLike, U: ArrayLike | None = None, *, segments: Sequence[int] | None = None
    ) -> Evidence:
        """The evidence of both models over rows ``Y`` (T, D) (each segment a fresh stream), leaving the
        stream as it was: what a re-baseline re-fits the scorers' moments on."""
        Y_arr = self._check_batch(Y, expect_dim=len(self.scaler.mean))
        U_arr = None if U is None or not self.use_inputs else np.asarray(U, dtype=np.float64).reshape(len(Y_arr), -1)
        with self.detached():
            return self._segment_evidence(Y_arr, U_arr, segment_lengths(len(Y_arr), segments))

    def set_baseline(
        self,
        state_c: Calibration,
        state_a: Calibration,
        memory_c: list[FloatArray | None] | None = None,
        memory_a: list[FloatArray | None] | None = None,
    ) -> None:
        """Install re-baselined scorer states between two samples, the stream continuing.

        ``memory_c`` / ``memory_a``: the family's EWMA memories carried into the new whitening
        (:func:`fedrca.drift.baseline.transfer_memory`); None keeps the memory as it is. The
        parameters' version stays (the loop versions its baselines, :mod:`fedrca.drift`).
        """
        for scorer, state in ((self._scorer_c, state_c), (self._scorer_a, state_a)):
            if isinstance(scorer, StatisticFamily) != isinstance(state, FamilyState):
                raise ModelError(f"plant '{self.name}': a baseline for the other scoring method")
        keep_c, keep_a = self._scorer_c.get_state(), self._scorer_a.get_state()
        self._scorer_c.state, self._scorer_a.state = state_c, state_a
        self._scorer_c.set_state(keep_c)
        self._scorer_a.set_state(keep_a)
        if isinstance(self._scorer_c, StatisticFamily) and memory_c is not None:
            self._scorer_c.memory = memory_c
        if isinstance(self._scorer_a, StatisticFamily) and memory_a is not None:
            self._scorer_a.memory = memory_a
        self._digest = None

    # -- processing -------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget the stream: filter, EWMA and lag memory back to their initial values."""
        if self._filter is not None and self._initial_filter_state is not None:
            self._filter.set_state(copy.deepcopy(self._initial_filter_state))
        self._last_y = self._last_u = None
        self._seen = 0
        self._scorer_c.reset()
        self._scorer_a.reset()

    def step_batch(
        self, Y: ArrayLike, U: ArrayLike | None = None, *, exclude: ArrayLike | None = None
    ) -> DetectionResult:
        """Process samples ``Y`` (T, D) (raw units; NaN = missing) with inputs ``U`` (T, U).

        ``exclude`` : (T, D) or (D,) bool, optional; True marks a value to treat as missing (a
        tag a sensor-fault check excluded), exactly as if it were NaN.
        """
        Y_arr = self._check_batch(Y, expect_dim=len(self.scaler.mean))
        if exclude is not None:
            try:
                mask = np.broadcast_to(np.asarray(exclude, dtype=bool), Y_arr.shape)
            except ValueError:
                raise DataError(
                    f"plant '{self.name}': exclude must be (T, D) or (D,) booleans for samples of shape "
                    f"{Y_arr.shape}, got shape {np.shape(exclude)}"
                ) from None
            if mask.any():
                Y_arr = np.where(mask, np.nan, Y_arr)
        U_arr = None if U is None else np.asarray(U, dtype=np.float64).reshape(len(Y_arr), -1)
        gaps = bool(np.isnan(Y_arr).any())
        maps = self._fused_maps(U_arr) if len(Y_arr) and not gaps else None
        if maps is not None:
            return self._step_fused(maps, Y_arr)
        return self._score(self._evidence(Y_arr, U_arr), self._degraded(Y_arr) if gaps else None)

    @property
    def min_present(self) -> int:
        """The fewest usable sensors a row is scored with (``min_sensors`` for this plant's sensor count)."""
        return min_present(self.min_sensors, len(self.scaler.mean))

    def _degraded(self, Y: FloatArray) -> BoolArray:
        """Rows (T,) with fewer usable sensors than :attr:`min_present`."""
        return np.asarray(observed_counts(Y) < self.min_present)

    def _fused_maps(self, U: FloatArray | None) -> PairMaps | None:
        """The stacked maps of :mod:`fedrca.detectors.fused` when it applies to this detector (an
        identified steady-state Kalman filter without inputs, the family method), else None."""
        model, sc, sa = self._filter, self._scorer_c, self._scorer_a
        if not (
            isinstance(model, LinearKalmanFilter)
            and model.gain is not None
            and model.steady  # after missing values the filter takes exact steps until it is back
            and self._identified is not None
            and (U is None or not self.use_inputs)
            and isinstance(sc, StatisticFamily)
            and isinstance(sa, StatisticFamily)
        ):
            return None
        key = (model, self.augmentation.theta, sc.state, sa.state)
        cached = self._fused
        if cached is None or any(a is not b for a, b in zip(cached[0], key, strict=True)):
            maps = PairMaps.build(model.A, model.C, self.augmentation.theta, sc.state, sa.state)
            self._fused = cached = (key, maps)
        return cached[1]

    def _step_fused(self, maps: PairMaps, Y: FloatArray) -> DetectionResult:
        """:meth:`step_batch` through :func:`~fedrca.detectors.fused.pair_statistics` (same flags as
        ``_score(_evidence(...))``; ``tests/detectors/test_fused.py``)."""
        model = self.proprietary
        assert isinstance(model, LinearKalmanFilter)
        sc, sa = self._scorer_c, self._scorer_a
        assert isinstance(sc, StatisticFamily) and isinstance(sa, StatisticFamily)
        Yz = self.scaler.transform(Y)
        x0 = model.x
        X = model.estimates(Yz)
        features = self.augmentation.feature_map
        psi0 = None if self._last_y is None else features.transform(self._last_y[None, :])[0]
        # the feature products of y(t-1) when the last batch left them (the same y and maps)
        kept = self._fused_last
        first = kept[2] if kept is not None and kept[0] is self._last_y and kept[1] is maps else None
        out = pair_statistics(maps, Yz, features.transform(Yz), X, x0, psi0, sc.memory, sa.memory, first)
        sc.memory, sa.memory = out.memory_c, out.memory_a
        self._last_y = Yz[-1].copy()
        self._fused_last = (self._last_y, maps, out.last_features)
        # max_k s_k / c_k of each family
        d2_c, d2_a = out.stats_c.max(axis=0), out.stats_a.max(axis=0)
        return self._finish(out.x_c.T, out.x_a.T, out.r_c.T, out.r_a.T, d2_c, d2_a, out.stats_c.T, out.stats_a.T)

    def _evidence(self, Y: FloatArray, U: FloatArray | None) -> _Evidence:
        """Run the filter and the augmentation over a batch; advances the filter and lag memory."""
        model = self.proprietary
        augmentation = self.augmentation
        Yz = self.scaler.transform(Y)
        Ym = Yz if self._identified is not None else Y  # the units the filter works in
        T = len(Y)
        # The transition into t is driven by u(t-1); identified inputs are standardised.
        U_prev: FloatArray | None = None
        Uz: FloatArray | None = None
        if U is not None and self.use_inputs:
            u_scaler = None if self._identified is None else self._identified.u_scaler
            Uz = U if u_scaler is None else u_scaler.transform(U)
            first_u = self._last_u if self._last_u is not None else np.zeros(Uz.shape[1])
            if np.isnan(Uz).any():
                Uz = hold_last(Uz, first_u)  # a missing input holds its last value
            U_prev = np.vstack([first_u[None, :], Uz[:-1]])
        x_before = np.asarray(model.get_state()["x"], dtype=np.float64).reshape(model.state_dim)
        out = filter_batch(model, Ym, U_prev)
        missing = np.isnan(Yz)
        if missing.any():
            # the features of a missing value: the filter's estimate h(x̂_c(t)) in its place
            estimate = model.measure(out.x_est)
            if self._identified is None:
                estimate = self.scaler.transform(estimate)
            Yz = np.where(missing, estimate, Yz)
        # x̂_c(t-1) for every t in the batch
        xhat_prev = np.vstack([x_before[None, :], out.x_est[:-1]])
        has_prev = np.ones(T, dtype=bool)
        first_y = self._last_y
        if first_y is None:
            has_prev[0] = False  # no y(-1) yet: the very first sample is not augmented
            first_y = np.zeros(Y.shape[1])
        yz_prev = np.vstack([first_y[None, :], Yz[:-1]])
        # x̂_a(t-1) = x̂_c(t-1) + Theta psi(y(t-1)) ;  x_a(t) = f(x̂_a(t-1), u)
        phi_prev = augmentation.phi(yz_prev) * has_prev[:, None]
        x_a = model.predict(xhat_prev + phi_prev, U_prev)
        x_c = out.x_pred
        # x̂_a(t) = x̂_c(t) + Theta psi(y(t))  (the augmented estimate once y(t) is seen)
        xh_a = out.x_est + augmentation.phi(Yz) if T else out.x_est
        if T:
            self._last_y = Yz[-1].copy()
            if Uz is not None:
                self._last_u = Uz[-1].copy()
        # r = y - h(x) ;  e = y - h(x̂)
        return _Evidence(
            x_c=x_c,
            x_a=x_a,
            xh_c=out.x_est,
            xh_a=xh_a,
            r_c=out.residuals,
            r_a=Ym - model.measure(x_a),
            e_c=Ym - model.measure(out.x_est),
            e_a=Ym - model.measure(xh_a),
        )

    def _score(self, ev: _Evidence, degraded: BoolArray | None = None) -> DetectionResult:
        """Scores, flags and published flags of the evidence; advances the scorers' memory.
        ``degraded`` (T,): rows that are not flagged (None: none)."""
        if isinstance(self._scorer_c, StatisticFamily) and isinstance(self._scorer_a, StatisticFamily):
            stats_c = self._scorer_c.normalised(ev.r_c, ev.xh_c, ev.e_c)
            stats_a = self._scorer_a.normalised(ev.r_a, ev.xh_a, ev.e_a)
            d2_c, d2_a = score_of(stats_c), score_of(stats_a)
        else:
            assert isinstance(self._scorer_c, ResidualScorer) and isinstance(self._scorer_a, ResidualScorer)
            d2_c = self._scorer_c.score(ev.r_c)
            d2_a = self._scorer_a.score(ev.r_a)
            stats_c, stats_a = d2_c[:, None], d2_a[:, None]
        return self._finish(ev.x_c, ev.x_a, ev.r_c, ev.r_a, d2_c, d2_a, stats_c, stats_a, degraded)

    def _finish(
        self,
        x_c: FloatArray,
        x_a: FloatArray,
        r_c: FloatArray,
        r_a: FloatArray,
        d2_c: FloatArray,
        d2_a: FloatArray,
        stats_c: FloatArray,
        stats_a: FloatArray,
        degraded: BoolArray | None = None,
    ) -> DetectionResult:
        """Flags, published flags and severity levels of the scores; advances the warm-up count and
        the randomizers. ``degraded`` rows raise no flag (their randomized response is drawn all the
        same, so the randomizers' streams do not depend on the pattern)."""
        T = len(d2_c)
        zc = self._scorer_c.flags(d2_c)
        za = self._scorer_a.flags(d2_a)
        if degraded is not None:
            zc[degraded] = False
            za[degraded] = False
        # no flag while the filter and the EWMA settle after a reset
        settling = max(0, min(self.warmup - self._seen, T))
        if settling:
            zc[:settling] = False
            za[:settling] = False
        self._seen = min(self._seen + T, self.warmup)
        published = self._privacy.perturb(np.column_stack([zc, za]))
        if degraded is not None:
            published[degraded] = False  # a degraded row publishes no bits (its draws are spent all the same)
        if self.severity_levels:
            level = severity_levels(d2_c, self._scorer_c.threshold_value, zc, self.severity_levels, self.severity_base)
            level_pub = self._level_privacy.perturb(level)
            if degraded is not None:
                level_pub[degraded] = 0
        else:
            level = level_pub = np.full(T, -1, dtype=np.int64)
        return DetectionResult(
            x_c,
            x_a,
            r_c,
            r_a,
            d2_c,
            d2_a,
            zc,
            za,
            published[:, 0],
            published[:, 1],
            stats_c,
            stats_a,
            level,
            level_pub,
            np.zeros(T, dtype=bool) if degraded is None else degraded,
        )

    # -- streaming state ---------------------------------------------------------------------
    @property
    def parameter_digest(self) -> str:
        """sha256 (hex, first 16 bytes) of every parameter that shapes the flags: the identified model,
        the standardiser, Theta, both scorers' fitted statistics and thresholds.

        Computed once per parameter change (fit, :meth:`set_parameters`): a 1,000-sensor plant's
        scorers hold D x D matrices, tens of MB."""
        if self._digest is None:
            h = hashlib.sha256()
            model = self._identified
            parts: list[Any] = [self.scaler, self.augmentation.theta, self._scorer_c.state, self._scorer_a.state]
            if model is not None:
                parts += [model.A, model.B, model.C, model.Q, model.R]
            for part in parts:
                _digest_update(h, part)
            self._digest = h.hexdigest()[:32]
        return self._digest

    def get_state(self) -> dict[str, Any]:
        """Everything of the stream that must survive a restart (JSON-friendly), and which parameters
        produced it.

        The parameters themselves (Theta, the scorers' statistics: D x D matrices) are not in it,
        only their version and :attr:`parameter_digest`: a plant worker writes this state with every
        batch, so its size and cost stay linear in the sensor count (``docs/sizing.md``). Whoever
        restores it brings the parameters (the fitted detector, the published artifact of that
        version) and checks the digest (:meth:`fedrca.streams.runtime.PlantRuntime.start_plant`).
        """
        return {
            "filter": self.proprietary.get_state(),
            "last_y": None if self._last_y is None else self._last_y.tolist(),
            "last_u": None if self._last_u is None else self._last_u.tolist(),
            "seen": self._seen,
            "scorer_c": self._scorer_c.get_state(),
            "scorer_a": self._scorer_a.get_state(),
            "privacy": self._privacy.get_state(),
            "level_privacy": self._level_privacy.get_state(),
            "parameter_version": self.parameter_version,
            "parameter_digest": self.parameter_digest,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`get_state` output; the parameters stay those in use.

        :attr:`restored_parameters` is set to the ``(version, digest)`` the state was produced
        with, for the caller to compare with :attr:`parameter_version` / :attr:`parameter_digest`.
        A state that carries the parameters themselves (``theta``, ``scorer_a_fit``, written by
        earlier versions) installs them.
        """
        if "theta" in state:
            self.augmentation.theta = np.asarray(state["theta"], dtype=np.float64)
            fit = state["scorer_a_fit"]
            if isinstance(self._scorer_a, StatisticFamily):
                self._scorer_a.state = FamilyState.from_dict(fit)
            else:
                self._scorer_a.state = ScorerState.from_dict(fit)
            if "threshold_c" in state and isinstance(self._scorer_c, StatisticFamily):
                state_c = self._scorer_c.state
                self._scorer_c.state = state_c.with_calibration(state_c.scale, float(state["threshold_c"]))
            self.parameter_version = state["parameter_version"]
            self._digest = None
        self.proprietary.set_state(state["filter"])
        self._last_y = None if state["last_y"] is None else np.asarray(state["last_y"], dtype=np.float64)
        self._last_u = None if state["last_u"] is None else np.asarray(state["last_u"], dtype=np.float64)
        self._seen = int(state.get("seen", self.warmup))
        self._scorer_c.set_state(state["scorer_c"])
        self._scorer_a.set_state(state["scorer_a"])
        self._privacy.set_state(state["privacy"])
        if "level_privacy" in state:
            self._level_privacy.set_state(state["level_privacy"])
        self.restored_parameters = (str(state["parameter_version"]), state.get("parameter_digest"))

    def _checkpoint(self) -> Any:
        # the parameters by reference: set_parameters replaces them, never changes them in place
        scorers = (self._scorer_c.state, self._scorer_a.state)
        return (super()._checkpoint(), self.augmentation.theta, scorers, self.parameter_version, self._digest)

    def _restore_checkpoint(self, saved: Any) -> None:
        stream, theta, (state_c, state_a), version, digest = saved
        self.augmentation.theta = theta
        self._scorer_c.state, self._scorer_a.state = state_c, state_a  # (resets their memory: restored below)
        self.parameter_version, self._digest = version, digest
        restored = self.restored_parameters
        super()._restore_checkpoint(stream)
        self.restored_parameters = restored

    def _check_batch(self, Y: ArrayLike, expect_dim: int | None) -> FloatArray:
        return check_samples(Y, self.name, expect_dim)


def hold_last(U: FloatArray, first: FloatArray) -> FloatArray:
    """``U`` (T, K) with each NaN replaced by the last value of its column before it (``first`` before the batch)."""
    out = np.vstack([first[None, :], U])
    rows = np.where(np.isnan(out), 0, np.arange(len(out))[:, None])
    # the index of the last observed row of each column, carried forward
    np.maximum.accumulate(rows, axis=0, out=rows)
    return np.asarray(out[rows, np.arange(out.shape[1])][1:])
