"""Per-plant detector: proprietary filter + augmentation + residual scoring + flag privacy.

One :class:`PlantDetector` per plant. ``fit`` calibrates on nominal data only;
``step_batch`` and ``step`` process new samples and keep all streaming state,
so processing a stream in any chunking gives the same result as one batch.
"""

from __future__ import annotations

import copy
import math
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedrca.detectors.augment import Augmentation, make_feature_map
from fedrca.detectors.identify import IdentifiedModel, Standardizer, identify_linear_model
from fedrca.detectors.plugin import ProprietaryFilter, filter_batch
from fedrca.detectors.privacy import RandomizedResponse
from fedrca.detectors.scoring import ResidualScorer, ScorerState
from fedrca.exceptions import DataError, ModelError, NotFittedError

__all__ = ["DetectionResult", "Detector", "PlantDetector"]

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]


@dataclass(frozen=True)
class DetectionResult:
    """Per-sample evidence of a plant detector for T samples.

    Attributes
    ----------
    x_c : (T, P) proprietary predicted states x_c(t)
    x_a : (T, P) augmented predicted states x_a(t)
    r_c, r_a : (T, D) residuals y - h(x_c), y - h(x_a) (standardised units for
        identified models)
    d2_c, d2_a : (T,) Mahalanobis distances (smoothed when EWMA is on)
    zc, za : (T,) bool, d2 above the nominal threshold
    zc_pub, za_pub : (T,) bool, the flags after randomized response (what leaves the plant)
    """

    x_c: FloatArray
    x_a: FloatArray
    r_c: FloatArray
    r_a: FloatArray
    d2_c: FloatArray
    d2_a: FloatArray
    zc: BoolArray
    za: BoolArray
    zc_pub: BoolArray
    za_pub: BoolArray

    def __len__(self) -> int:
        return len(self.d2_c)

    @property
    def score(self) -> FloatArray:
        """Anomaly score (T,): the proprietary d2 (high means anomalous)."""
        return self.d2_c

    @classmethod
    def concat(cls, parts: list[DetectionResult]) -> DetectionResult:
        """Concatenate results of consecutive chunks."""
        return cls(**{f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(cls)})


class Detector(ABC):
    """Base contract every fedrca detector satisfies (tested by one shared suite).

    ``fit`` on nominal data; ``step`` one sample / ``step_batch`` many, advancing the
    streaming state; ``score`` the anomaly score of samples without advancing it
    (high = anomalous). Hyper-parameters live under their own names, learned state
    in ``_private`` attributes, randomness comes from ``seed``. Every detector names
    its plant, the privacy budget of its published flags and the version of the
    parameters it runs (the streaming runtime records them in every flag).
    """

    name: str
    epsilon: float
    parameter_version: str

    @property
    @abstractmethod
    def thresholds(self) -> tuple[float, float]:
        """The d2 thresholds of Z_c and Z_a (the same number twice for a detector without Z_a)."""

    @abstractmethod
    def fit(self, Y: ArrayLike, U: ArrayLike | None = None) -> Detector: ...

    @abstractmethod
    def step_batch(self, Y: ArrayLike, U: ArrayLike | None = None) -> DetectionResult: ...

    @abstractmethod
    def get_state(self) -> dict[str, Any]: ...

    @abstractmethod
    def set_state(self, state: dict[str, Any]) -> None: ...

    def step(self, y: ArrayLike, u: ArrayLike | None = None) -> DetectionResult:
        """Process one sample ``y`` (D,); returns a length-1 result."""
        y_row = np.asarray(y, dtype=np.float64).reshape(1, -1)
        u_row = None if u is None else np.asarray(u, dtype=np.float64).reshape(1, -1)
        return self.step_batch(y_row, u_row)

    def score(self, Y: ArrayLike, U: ArrayLike | None = None) -> FloatArray:
        """Anomaly scores (T,) of ``Y`` continuing from the current state, which is left unchanged."""
        with self.detached(reset=False):
            return self.step_batch(Y, U).score

    @contextmanager
    def detached(self, reset: bool = True) -> Iterator[Detector]:
        """Process samples without a trace: the streaming state is restored on exit.

        For scoring data outside the stream (the nominal data, to count its flag
        states or re-calibrate a scorer): inside the block the detector starts from
        its initial state (``reset=True``) or continues from the current one; on exit
        (also on an error) it is exactly as it was before, parameters included.
        """
        saved = copy.deepcopy(self.get_state())
        try:
            if reset:
                self.reset()
            yield self
        finally:
            self.set_state(saved)

    @abstractmethod
    def reset(self) -> None:
        """Forget the stream (the learned parameters are kept)."""


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
    threshold, percentile, alpha, ewma, margin : see :class:`ResidualScorer`
    epsilon : flag privacy budget per published flag (inf = no perturbation)
    seed : seeds the random features and the randomized response
    steady_state : steady-state Kalman gain for identified models
    use_inputs : when False the inputs given to :meth:`fit` and :meth:`step_batch` are ignored:
        the filter runs as if the plant had none (its inputs still reach the federated learner)

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> nominal = rng.normal(size=(400, 4)).cumsum(axis=0) * 0.05 + rng.normal(size=(400, 4))
    >>> det = PlantDetector(n_states=2, seed=0).fit(nominal)
    >>> shifted = nominal[:50] + 8.0
    >>> bool(det.step_batch(shifted).zc.mean() > 0.9)
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
        ewma: float | None = None,
        smooth: str = "d2",
        margin: float = 1.0,
        epsilon: float = math.inf,
        seed: int = 0,
        steady_state: bool = True,
        calibration: str = "cv",
        folds: int = 5,
        use_inputs: bool = True,
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
        self.calibration = calibration
        self.folds = folds
        self.use_inputs = use_inputs
        self._filter: ProprietaryFilter | None = None
        self._identified: IdentifiedModel | None = None
        self._scaler: Standardizer | None = None
        self._augmentation: Augmentation | None = None
        self._scorer_c = self._new_scorer()
        self._scorer_a = self._new_scorer()
        self._privacy = RandomizedResponse(epsilon, seed=seed)
        self._last_y: FloatArray | None = None  # standardised y(t-1)
        self._last_u: FloatArray | None = None
        self._initial_filter_state: dict[str, Any] | None = None
        self.parameter_version: str = "proprietary"

    def _new_scorer(self) -> ResidualScorer:
        return ResidualScorer(
            threshold=self.threshold,  # type: ignore[arg-type]
            percentile=self.percentile,
            alpha=self.alpha,
            ewma=self.ewma,
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
    def scorers(self) -> tuple[ResidualScorer, ResidualScorer]:
        """(proprietary scorer, augmented scorer)."""
        return self._scorer_c, self._scorer_a

    @property
    def thresholds(self) -> tuple[float, float]:
        """The d2 thresholds of Z_c and Z_a."""
        return self._scorer_c.threshold_value, self._scorer_a.threshold_value

    @property
    def privacy(self) -> RandomizedResponse:
        """The flag randomizer."""
        return self._privacy

    # -- fitting --------------------------------------------------------------------------
    def fit(self, Y: ArrayLike, U: ArrayLike | None = None) -> PlantDetector:
        """Identify (if needed) and calibrate both scorers on nominal data ``Y`` (T, D)."""
        Y_arr = self._check_batch(Y, expect_dim=None)
        U_arr = None if U is None or not self.use_inputs else np.asarray(U, dtype=np.float64).reshape(len(Y_arr), -1)
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
        self._last_y = self._last_u = None
        result = self._run(Y_arr, U_arr, score=False)
        held_out = None
        if self.calibration == "cv" and self._identified is not None:
            held_out = self._cross_validated_residuals(Y_arr, U_arr)
        self._scorer_c.fit(result.r_c, calibration_residuals=held_out)
        self._scorer_a.state = self._scorer_c.state
        self.parameter_version = "proprietary"
        self.reset()
        return self

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

    def calibrate_augmented(self, Y: ArrayLike, U: ArrayLike | None = None) -> ScorerState:
        """Refit the augmented scorer on nominal data with the current Theta; returns its state."""
        Y_arr = self._check_batch(Y, expect_dim=self.proprietary.output_dim if self._identified is None else None)
        U_arr = None if U is None else np.asarray(U, dtype=np.float64).reshape(len(Y_arr), -1)
        with self.detached():
            result = self._run(Y_arr, U_arr, score=False)
            self._scorer_a.fit(result.r_a)
        return self._scorer_a.state

    def set_parameters(self, theta: FloatArray, scorer_a: ScorerState | None = None, version: str = "trained") -> None:
        """Hot-swap trained augmentation parameters (between samples).

        ``scorer_a`` is the augmented scorer calibrated on nominal data with this
        Theta (stored in the training artifact); without it the scorer keeps its
        statistics.
        """
        self.augmentation.theta = theta
        if scorer_a is not None:
            last = self._scorer_a.get_state()
            self._scorer_a.state = scorer_a
            self._scorer_a.set_state(last)
        self.parameter_version = version

    # -- processing -------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget the stream: filter, EWMA and lag memory back to their initial values."""
        if self._filter is not None and self._initial_filter_state is not None:
            self._filter.set_state(copy.deepcopy(self._initial_filter_state))
        self._last_y = self._last_u = None
        self._scorer_c.reset()
        self._scorer_a.reset()

    def step_batch(self, Y: ArrayLike, U: ArrayLike | None = None) -> DetectionResult:
        """Process samples ``Y`` (T, D) (raw units) with inputs ``U`` (T, U)."""
        Y_arr = self._check_batch(Y, expect_dim=len(self.scaler.mean))
        U_arr = None if U is None else np.asarray(U, dtype=np.float64).reshape(len(Y_arr), -1)
        return self._run(Y_arr, U_arr, score=True)

    def _run(self, Y: FloatArray, U: FloatArray | None, score: bool) -> DetectionResult:
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
            U_prev = np.vstack([first_u[None, :], Uz[:-1]])
        x_before = np.asarray(model.get_state()["x"], dtype=np.float64).reshape(model.state_dim)
        out = filter_batch(model, Ym, U_prev)
        # x̂_c(t-1) for every t in the batch
        xhat_prev = np.vstack([x_before[None, :], out.x_est[:-1]])
        has_prev = np.ones(T, dtype=bool)
        first_y = self._last_y
        if first_y is None:
            has_prev[0] = False  # no y(-1) yet: the very first sample is not augmented
            first_y = np.zeros(Y.shape[1])
        yz_prev = np.vstack([first_y[None, :], Yz[:-1]])
        # x̂_a(t-1) = x̂_c(t-1) + Theta psi(y(t-1)) ;  x_a(t) = f(x̂_a(t-1), u)
        phi = augmentation.phi(yz_prev) * has_prev[:, None]
        x_a = model.predict(xhat_prev + phi, U_prev)
        x_c = out.x_pred
        # r = y - h(x)
        r_c = out.residuals
        r_a = Ym - model.measure(x_a)
        if T:
            self._last_y = Yz[-1].copy()
            if Uz is not None:
                self._last_u = Uz[-1].copy()
        if not score:
            empty_b = np.zeros(T, dtype=bool)
            empty_f = np.zeros(T)
            return DetectionResult(x_c, x_a, r_c, r_a, empty_f, empty_f, empty_b, empty_b, empty_b, empty_b)
        d2_c = self._scorer_c.score(r_c)
        d2_a = self._scorer_a.score(r_a)
        zc = self._scorer_c.flags(d2_c)
        za = self._scorer_a.flags(d2_a)
        published = self._privacy.perturb(np.column_stack([zc, za]))
        return DetectionResult(x_c, x_a, r_c, r_a, d2_c, d2_a, zc, za, published[:, 0], published[:, 1])

    # -- streaming state ---------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """Everything that must survive a restart (JSON-friendly).

        Includes the trained parameters (Theta, the augmented scorer's statistics and
        their version), so a restored detector continues exactly as the saved one
        would have, whatever parameters the new process started with.
        """
        return {
            "filter": self.proprietary.get_state(),
            "last_y": None if self._last_y is None else self._last_y.tolist(),
            "last_u": None if self._last_u is None else self._last_u.tolist(),
            "scorer_c": self._scorer_c.get_state(),
            "scorer_a": self._scorer_a.get_state(),
            "privacy": self._privacy.get_state(),
            "parameter_version": self.parameter_version,
            "theta": self.augmentation.theta.tolist(),
            "scorer_a_fit": self._scorer_a.state.to_dict(),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`get_state` output."""
        if "theta" in state:
            self.augmentation.theta = np.asarray(state["theta"], dtype=np.float64)
            self._scorer_a.state = ScorerState.from_dict(state["scorer_a_fit"])
        self.proprietary.set_state(state["filter"])
        self._last_y = None if state["last_y"] is None else np.asarray(state["last_y"], dtype=np.float64)
        self._last_u = None if state["last_u"] is None else np.asarray(state["last_u"], dtype=np.float64)
        self._scorer_c.set_state(state["scorer_c"])
        self._scorer_a.set_state(state["scorer_a"])
        self._privacy.set_state(state["privacy"])
        self.parameter_version = state["parameter_version"]

    def _check_batch(self, Y: ArrayLike, expect_dim: int | None) -> FloatArray:
        Y_arr = np.asarray(Y, dtype=np.float64)
        if Y_arr.ndim != 2:
            raise DataError(f"plant '{self.name}': samples must be 2-D (T, D), got shape {Y_arr.shape}")
        if expect_dim is not None and Y_arr.shape[1] != expect_dim:
            raise DataError(f"plant '{self.name}': samples have {Y_arr.shape[1]} values, expected {expect_dim}")
        if not np.all(np.isfinite(Y_arr)):
            raise DataError(f"plant '{self.name}': samples contain NaN or inf")
        return Y_arr
