"""The fleet detector: a plant's anomaly detector from a CollabDict model (pure core).

A plant that belongs to a fleet of same-type plants scores its samples with the
fleet's shared patterns and its own mixture weights (Eq. 20)::

    a(x) = sum_k r_k(x) [ M/2 ln 2pi - 1/2 ln|Lambda_k| + 1/2 (x - mu_k)^T Lambda_k (x - mu_k) ]

and flags ``Z_c = s > tau``, where s is the score or its EWMA and tau its own
threshold, both from nominal scores only (:mod:`fedrca.fleet.calibration`: the
calibration the fleet run gave this participant, or one from this plant's own nominal
data). It has no proprietary filter and no learned augmentation, so it yields **Z_c
only**: the result's ``za`` is ``zc`` and the published ``za_pub`` is the same
randomized bit as ``zc_pub`` (publishing one bit twice costs no extra epsilon). The
RCA engine is told through :attr:`FleetDetector.has_augmented` and then ignores that
plant's ``Z_a`` (see :mod:`fedrca.rca.flagmodel`).

Its streaming state is the randomized-response generator and, when it smooths, the
last smoothed score.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedrca.config import PlantConfig, SiteConfig
from fedrca.detectors.factory import plant_seed
from fedrca.detectors.plant import DetectionResult, Detector
from fedrca.exceptions import ConfigError, DataError, ModelError, NotFittedError
from fedrca.fleet.calibration import Calibration, ewma_scores, own_calibration
from fedrca.fleet.collabdict import FleetModel, FleetSettings, fit_centralised, responsibilities
from fedrca.privacy.randomized_response import RandomizedResponse

__all__ = ["FleetDetector", "ThresholdView", "build_fleet_detector"]

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class ThresholdView:
    """What the site shell reads of a plant detector's scorers: ``threshold_value``."""

    threshold_value: float


class FleetDetector(Detector):
    """A plant detector scoring with a CollabDict (sparse GGM mixture) model.

    Parameters
    ----------
    name : plant name (for messages)
    model : the fleet's shared model (``fedrca fleet`` writes it); when None,
        :meth:`fit` learns one on this plant's data alone (a fleet of one)
    calibration : this plant's alarm rule from the fleet run (``ParticipantResult.calibration``,
        cross-fitted on the fleet's fold models); None = calibrate on the nominal data given to
        :meth:`fit` (with a shared model: its scores there, this plant's own threshold when
        they certify ``percentile``, else the model's fleet threshold)
    n_components, rho, lambda0, folds, max_iter : model settings for a fleet of one (see
        :class:`~fedrca.fleet.collabdict.FleetSettings`)
    percentile, ewma, scope : calibration settings when ``calibration`` is None (``scope``
        "fleet": the shared model's one threshold, or for a fleet of one its pooled percentile)
    margin : multiplies the threshold (>= 1)
    epsilon : flag privacy budget per published flag (inf = no perturbation)
    seed : seeds the model initialisation (fleet of one) and the randomized response

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> nominal = rng.normal(size=(600, 4))
    >>> det = FleetDetector(n_components=1, folds=0, seed=0).fit(nominal)
    >>> bool(det.step_batch(nominal[:50] + 6.0).zc.mean() > 0.9)
    True
    """

    #: The detector publishes no independent augmented flag (Z_a is Z_c).
    has_augmented = False

    def __init__(
        self,
        name: str = "plant",
        model: FleetModel | None = None,
        n_components: int = 2,
        rho: float = 10.0,
        lambda0: float = 1.0,
        folds: int = 5,
        percentile: float = 99.5,
        max_iter: int = 100,
        margin: float = 1.0,
        epsilon: float = math.inf,
        seed: int = 0,
        calibration: Calibration | None = None,
        ewma: float | None = None,
        scope: Literal["participant", "fleet"] = "participant",
    ) -> None:
        if margin < 1.0:
            raise ModelError(f"margin must be >= 1, got {margin}")
        if ewma is not None and not 0.0 < ewma <= 1.0:
            raise ModelError(f"ewma must be in (0, 1] or None, got {ewma}")
        if scope not in ("participant", "fleet"):
            raise ModelError(f"scope must be 'participant' or 'fleet', got {scope!r}")
        self.name = name
        self.model = model
        self.calibration = calibration
        self.n_components = n_components
        self.rho = rho
        self.lambda0 = lambda0
        self.folds = folds
        self.percentile = percentile
        self.max_iter = max_iter
        self.margin = margin
        self.epsilon = epsilon
        self.seed = seed
        self.ewma = ewma
        self.scope = scope
        self._model: FleetModel | None = None
        self._weights: FloatArray | None = None
        self._threshold: float | None = None
        self._rule: Calibration | None = None
        self._last: float | None = None
        self._privacy = RandomizedResponse(epsilon, seed=seed)
        self.parameter_version = "fleet"

    # -- accessors ---------------------------------------------------------------------------
    @property
    def fitted_model(self) -> FleetModel:
        """The model in use (shared, or learned alone); NotFittedError before :meth:`fit`."""
        if self._model is None:
            raise NotFittedError(f"plant '{self.name}': detector is not fitted; call fit(nominal) first")
        return self._model

    @property
    def weights(self) -> FloatArray:
        """This plant's mixture weights pi (K,)."""
        if self._weights is None:
            raise NotFittedError(f"plant '{self.name}': detector is not fitted; call fit(nominal) first")
        return self._weights

    @property
    def threshold_value(self) -> float:
        """tau on the statistic (the margin included)."""
        if self._threshold is None:
            raise NotFittedError(f"plant '{self.name}': detector is not fitted; call fit(nominal) first")
        return self._threshold

    @property
    def rule(self) -> Calibration:
        """The alarm rule in use (threshold before the margin, statistic, how it was calibrated)."""
        if self._rule is None:
            raise NotFittedError(f"plant '{self.name}': detector is not fitted; call fit(nominal) first")
        return self._rule

    @property
    def thresholds(self) -> tuple[float, float]:
        """The score threshold, for Z_c and its copy Z_a."""
        return self.threshold_value, self.threshold_value

    @property
    def scorers(self) -> tuple[ThresholdView, ThresholdView]:
        """(Z_c, Z_a) thresholds as the site shell reads a plant detector's (the same tau twice)."""
        view = ThresholdView(self.threshold_value)
        return view, view

    @property
    def privacy(self) -> RandomizedResponse:
        """The flag randomizer."""
        return self._privacy

    # -- fitting ------------------------------------------------------------------------------
    def _stack(self, Y: ArrayLike, U: ArrayLike | None, missing: bool = False) -> FloatArray:
        """The modelled variables: the sensors, followed by the inputs when given (NaN only when ``missing``)."""
        Y_arr = np.asarray(Y, dtype=np.float64)
        if Y_arr.ndim != 2:
            raise DataError(f"plant '{self.name}': samples must be 2-D (T, D), got shape {Y_arr.shape}")
        X = Y_arr if U is None else np.hstack([Y_arr, np.asarray(U, dtype=np.float64).reshape(len(Y_arr), -1)])
        if np.isinf(X).any() or (not missing and np.isnan(X).any()):
            raise DataError(f"plant '{self.name}': samples contain NaN or inf")
        return X

    def fit(self, Y: ArrayLike, U: ArrayLike | None = None) -> FleetDetector:
        """Calibrate on nominal data ``Y`` (T, D) (and inputs ``U`` (T, U), modelled as extra variables).

        With a shared model: this plant's weights by EM on the weights alone, and its alarm
        rule (the given ``calibration``, else :meth:`_self_calibration` on these data).
        Without: a fleet of one learns the model and cross-fits its own alarm rule.
        """
        X = self._stack(Y, U)
        if self.model is not None:
            if X.shape[1] != self.model.n_dims:
                raise DataError(
                    f"plant '{self.name}': {X.shape[1]} variables, the fleet model has {self.model.n_dims}; "
                    "the plant must measure the same sensors in the same order as the fleet"
                )
            model = self.model
            weights = model.fit_weights(X)
            rule = self.calibration or self._self_calibration(model.score(X, weights), model.threshold)
        else:
            settings = FleetSettings(
                n_components=self.n_components,
                rho=self.rho,
                lambda0=self.lambda0,
                folds=self.folds,
                percentile=self.percentile,
                max_iter=self.max_iter,
                chunks=1,
                threshold_scope=self.scope,
                ewma=self.ewma,
                seed=self.seed,
            )
            fit = fit_centralised([X], settings)
            model, weights = fit.model, fit.weights[0]
            rule = self.calibration or fit.calibrations[0]
        self._model, self._weights, self._rule = model, np.asarray(weights, dtype=np.float64), rule
        self._threshold = rule.threshold * self.margin
        self._last = None
        self._privacy = RandomizedResponse(self.epsilon, seed=self.seed)
        return self

    def _self_calibration(self, scores: FloatArray, fleet_threshold: float | None) -> Calibration:
        """The alarm rule from this plant's scores under the shared model (its own conformal percentile
        of them, smoothed by ``ewma``), or the model's fleet threshold when they are too few to certify
        it (or ``scope`` is "fleet"); the in-sample percentile when the model carries no threshold."""
        own = own_calibration([scores], self.percentile, self.ewma) if self.scope == "participant" else None
        if own is not None:
            return own
        if fleet_threshold is not None:
            return Calibration(fleet_threshold, None, "fleet", len(scores))
        return Calibration(float(np.percentile(scores, self.percentile)), None, "own", len(scores))

    # -- processing ---------------------------------------------------------------------------
    def step_batch(self, Y: ArrayLike, U: ArrayLike | None = None) -> DetectionResult:
        """Score samples ``Y`` (T, D) (raw units); flags and published flags advance the randomizer.

        ``d2_c`` (= ``d2_a``) is the statistic compared with the threshold: the score, or its EWMA
        continuing from the previous batch. The mixture scores complete rows only: a row with a
        missing value (NaN) is degraded (:attr:`DetectionResult.degraded`: no flag, its residual NaN)
        and leaves the EWMA as it was (docs/missing.md).
        """
        model = self.fitted_model
        X = self._stack(Y, U, missing=True)
        if X.shape[1] != model.n_dims:
            raise DataError(f"plant '{self.name}': samples have {X.shape[1]} values, expected {model.n_dims}")
        degraded = np.asarray(np.isnan(X).any(axis=1))
        if degraded.any():
            return self._with_degraded(X, degraded)
        Z = model.standardise(X)
        score = model.score(X, self.weights)
        lam = self.rule.ewma
        stat = score if lam is None else ewma_scores(score, lam, self._last)
        if lam is not None and len(stat):
            self._last = float(stat[-1])
        # residual: x - sum_k r_k(x) mu_k (standardised units)
        resid = Z - responsibilities(Z, self.weights, model.means, model.precisions) @ model.means
        zc = np.asarray(stat > self.threshold_value)
        published = self._privacy.perturb(zc)
        empty = np.zeros((len(X), 0))
        return DetectionResult(empty, empty, resid, resid, stat, stat, zc, zc.copy(), published, published.copy())

    def _with_degraded(self, X: FloatArray, degraded: NDArray[np.bool_]) -> DetectionResult:
        """A batch with degraded rows: the complete rows scored in runs (the EWMA carried across the
        degraded ones), the degraded rows without flag; one randomized response for the whole batch."""
        T = len(X)
        stat = np.zeros(T)
        resid = np.full(X.shape, np.nan)
        state = self._privacy.get_state()
        for run in np.split(np.arange(T), np.flatnonzero(np.diff(degraded)) + 1):
            if degraded[run[0]]:
                stat[run] = self._last if self._last is not None else 0.0
                continue
            part = self.step_batch(X[run])
            stat[run], resid[run] = part.d2_c, part.r_c
        self._privacy.set_state(state)  # the flags of the whole batch are randomized once, below
        zc = np.asarray(stat > self.threshold_value) & ~degraded
        published = self._privacy.perturb(zc) & ~degraded  # a degraded row publishes no bit
        empty = np.zeros((T, 0))
        return DetectionResult(
            empty, empty, resid, resid, stat, stat, zc, zc.copy(), published, published.copy(), degraded=degraded
        )

    # -- streaming state ----------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """The streaming state: the randomized-response generator and the last smoothed score."""
        return {"privacy": self._privacy.get_state(), "ewma": self._last}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`get_state` output."""
        self._privacy.set_state(state["privacy"])
        last = state.get("ewma")
        self._last = None if last is None else float(last)

    def reset(self) -> None:
        """Forget the smoothed score (the next sample starts a new stream); the randomizer continues."""
        self._last = None


def build_fleet_detector(
    config: SiteConfig,
    plant: PlantConfig,
    seed: int | None = None,
    model: FleetModel | None = None,
    calibration: Calibration | None = None,
) -> FleetDetector:
    """An unfitted :class:`FleetDetector` for a plant with ``detector.kind: fleet``.

    ``model`` is the fleet's shared model (read by the caller from ``detector.model``; None = the
    plant learns alone), ``calibration`` the plant's own from the fleet run (read from
    ``detector.participant``; None = from its nominal data, ``detector.percentile`` / ``ewma``);
    the seed is the plant's own (:func:`fedrca.detectors.factory.plant_seed`).
    """
    if plant.detector.kind != "fleet":
        index = config.plant_names.index(plant.name)
        raise ConfigError(
            f"plant '{plant.name}' runs the {plant.detector.kind} detector, not the fleet detector",
            source=config.source,
            key=f"plants[{index}].detector.kind",
        )
    d = plant.detector
    return FleetDetector(
        name=plant.name,
        model=model,
        n_components=d.components,
        rho=d.rho,
        folds=d.folds,
        percentile=d.percentile,
        epsilon=config.privacy.flag_epsilon,
        seed=plant_seed(config, plant, seed),
        calibration=calibration,
        ewma=d.ewma,
    )
