"""The detector contract as a function a plug-in author runs: :func:`check_detector`.

One suite every fedrca detector passes (river's ``check_estimator`` is the model): the
shipped detectors in ``tests/detectors/test_contract.py``, a plug-in in its own tests
(docs/plugins.md). Each check builds what it needs from ``detector_factory(seed=...)``
and the data, and a failure raises :class:`~fedrca.exceptions.ContractError` naming the
check (``error.check``) and what the detector did. The checks, in order (:data:`CHECKS`):

``protocol``
    the factory builds a :class:`~fedrca.detectors.base.Detector` with a ``name``, an
    ``epsilon``, a ``parameter_version``; ``fit`` returns the detector; ``thresholds`` is
    two finite numbers.
``unfitted``
    ``step_batch`` before ``fit`` raises :class:`~fedrca.exceptions.NotFittedError`.
``result``
    ``step_batch`` returns a :class:`~fedrca.detectors.base.DetectionResult` of T rows with
    the documented shapes and dtypes; a degraded row raises and publishes no flag; with
    ``epsilon = inf`` the published flags are the flags; without an augmented model
    (``has_augmented = False``) Z_a is Z_c.
``determinism``
    two detectors of one seed fitted on the same data give identical results; with a finite
    ``epsilon`` another seed publishes other flags.
``batch-step``
    one batch, row-by-row ``step`` and two chunks from the same state give the same result.
``state``
    ``get_state`` survives ``json.dumps`` / ``json.loads``, and a copy of the fitted
    detector restored from it continues exactly as the original.
``pickle``
    a pickled detector continues exactly as the original.
``reset``
    after ``reset`` the same samples give the same scores and flags.
``score``
    ``score`` leaves the state unchanged and equals the ``step_batch`` score.
``missing``
    a row with NaN is scored on its observed sensors or degraded, a row of NaN is degraded,
    the complete rows after them are scored, and batch equals steps on such rows.
``refusal``
    samples of the wrong width, not 2-D or holding ``inf`` are refused with
    :class:`~fedrca.exceptions.DataError` (by ``fit``, ``step_batch`` and ``step``) and
    leave the state as it was.
``calibration``
    on nominal test data at most ``max_false_alarm`` of the rows raise Z_c, on the same data
    shifted by 5 nominal standard deviations at least ``min_detection`` do.

Pure: numpy only (no test framework), so it ships with the package.
"""

from __future__ import annotations

import copy
import json
import math
import pickle
from collections.abc import Callable, Iterable
from dataclasses import fields
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedrca.detectors.base import DetectionResult, Detector
from fedrca.exceptions import ContractError, DataError, NotFittedError
from fedrca.privacy import keep_probability

__all__ = ["CHECKS", "check_detector", "contract_data"]

FloatArray = NDArray[np.float64]
#: ``factory(seed=s)`` -> an unfitted detector; a detector class with a ``seed`` argument is one.
DetectorFactory = Callable[..., Detector]

CHECKS = (
    "protocol",
    "unfitted",
    "result",
    "determinism",
    "batch-step",
    "state",
    "pickle",
    "reset",
    "score",
    "missing",
    "refusal",
    "calibration",
)

#: Expected number of published bits that differ between two seeds below which the ``determinism``
#: check does not ask for a difference (P(no difference) <= exp(-20) above it).
_MIN_EXPECTED_FLIPS = 20.0


def contract_data(
    n_nominal: int = 1200, n_test: int = 300, n_sensors: int = 4, seed: int = 0
) -> tuple[FloatArray, FloatArray]:
    """Nominal and test samples ``(n_nominal, D)``, ``(n_test, D)`` of one plant: a stable VAR(1) of two
    latent states seen through ``n_sensors`` noisy sensors (the test rows continue the same process).

    Examples
    --------
    >>> nominal, test = contract_data()
    >>> nominal.shape, test.shape
    ((1200, 4), (300, 4))
    """
    rng = np.random.default_rng(seed)
    A = np.array([[0.8, 0.1], [-0.1, 0.7]])
    C = rng.normal(size=(n_sensors, 2))
    n = n_nominal + n_test
    x = np.zeros(2)
    X = np.empty((n, 2))
    for t in range(n):
        # x(t) = A x(t-1) + w(t)
        x = A @ x + 0.5 * rng.normal(size=2)
        X[t] = x
    # y(t) = C x(t) + v(t)
    Y = X @ C.T + 0.3 * rng.normal(size=(n, n_sensors))
    return Y[:n_nominal], Y[n_nominal:]


def check_detector(
    detector_factory: DetectorFactory,
    nominal: ArrayLike | None = None,
    test: ArrayLike | None = None,
    *,
    seed: int = 0,
    checks: Iterable[str] | None = None,
    max_false_alarm: float = 0.05,
    min_detection: float = 0.5,
) -> list[str]:
    """Run the detector contract on the detectors ``detector_factory(seed=s)`` builds; returns the checks run.

    Parameters
    ----------
    detector_factory : callable
        ``detector_factory(seed=s)`` returns a new, unfitted :class:`~fedrca.detectors.base.Detector`
        (a detector class whose ``__init__`` takes ``seed`` is one).
    nominal, test : (T, D) array, optional
        Nominal samples to fit on and nominal samples to run (raw units, complete rows); default
        :func:`contract_data`.
    seed : int
        Seed of the detectors built (``seed + 1`` for the other-seed check).
    checks : names from :data:`CHECKS`, optional
        Run only these (default: all, in :data:`CHECKS` order).
    max_false_alarm, min_detection : float
        ``calibration``: the largest share of nominal test rows with Z_c, the smallest share of
        shifted rows with Z_c.

    Returns
    -------
    list of str
        The names of the checks run (all passed).

    Raises
    ------
    ContractError
        At the first failed check; ``error.check`` names it. An exception the detector raises
        where the contract expects none is reported as that check's failure.
    ValueError
        When ``checks`` names an unknown check or the data are not 2-D with at least 100 test rows.

    Examples
    --------
    >>> from fedrca.detectors import PlantDetector
    >>> check_detector(lambda seed: PlantDetector(n_states=2, seed=seed), checks=["state", "refusal"])
    ['state', 'refusal']
    """
    wanted = list(CHECKS) if checks is None else list(checks)
    unknown = [c for c in wanted if c not in CHECKS]
    if unknown:
        raise ValueError(f"unknown check(s) {', '.join(unknown)}; the checks are {', '.join(CHECKS)}")
    if nominal is None or test is None:
        default_nominal, default_test = contract_data()
        nominal = default_nominal if nominal is None else nominal
        test = default_test if test is None else test
    Y_nom, Y_test = np.asarray(nominal, dtype=np.float64), np.asarray(test, dtype=np.float64)
    if Y_nom.ndim != 2 or Y_test.ndim != 2 or Y_nom.shape[1] != Y_test.shape[1] or len(Y_test) < 100:
        raise ValueError(
            f"nominal {Y_nom.shape} and test {Y_test.shape} must be 2-D with the same columns and >= 100 test rows"
        )
    suite = _Suite(detector_factory, Y_nom, Y_test, seed, max_false_alarm, min_detection)
    for name in [c for c in CHECKS if c in wanted]:
        try:
            getattr(suite, "check_" + name.replace("-", "_"))()
        except ContractError:
            raise
        except Exception as exc:  # the detector's own error where the contract expects none
            raise ContractError(name, f"raised {type(exc).__name__}: {exc}") from exc
    return [c for c in CHECKS if c in wanted]


def _fail(check: str, message: str) -> ContractError:
    return ContractError(check, message)


def _same(a: Any, b: Any) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if a.dtype.kind == "f" and b.dtype.kind == "f":
        return bool(np.array_equal(a, b, equal_nan=True))
    return bool(np.array_equal(a, b))


def _differences(a: DetectionResult, b: DetectionResult) -> list[str]:
    """The fields in which two results differ."""
    return [f.name for f in fields(DetectionResult) if not _same(getattr(a, f.name), getattr(b, f.name))]


def _state_text(det: Detector) -> str:
    return json.dumps(det.get_state(), sort_keys=True)


class _Suite:
    """The checks over one factory and one data set; fits three detectors at most (two of ``seed``, one of
    ``seed + 1``) and copies the first for every check that only runs it."""

    def __init__(
        self,
        factory: DetectorFactory,
        nominal: FloatArray,
        test: FloatArray,
        seed: int,
        max_false_alarm: float,
        min_detection: float,
    ) -> None:
        self.factory = factory
        self.nominal = nominal
        self.test = test
        self.seed = seed
        self.max_false_alarm = max_false_alarm
        self.min_detection = min_detection
        self._fitted: Detector | None = None

    # -- building ------------------------------------------------------------------------------
    def build(self, seed: int) -> Detector:
        det = self.factory(seed=seed)
        if not isinstance(det, Detector):
            raise _fail(
                "protocol",
                f"the factory returned {type(det).__name__}, not a fedrca.detectors.Detector (subclass Detector)",
            )
        return det

    def fit(self, seed: int) -> Detector:
        det = self.build(seed)
        out = det.fit(self.nominal)
        if out is not det:
            raise _fail("protocol", f"fit returned {type(out).__name__}, not the detector itself (return self)")
        return det

    def fitted(self) -> Detector:
        """A copy of the detector of ``seed`` fitted on the nominal data (fitted once)."""
        if self._fitted is None:
            self._fitted = self.fit(self.seed)
        return copy.deepcopy(self._fitted)

    def run(self, det: Detector, Y: FloatArray, check: str) -> DetectionResult:
        out = det.step_batch(Y)
        if not isinstance(out, DetectionResult):
            raise _fail(check, f"step_batch returned {type(out).__name__}, not a DetectionResult")
        if len(out) != len(Y):
            raise _fail(check, f"step_batch of {len(Y)} rows returned {len(out)} rows")
        return out

    # -- the checks ----------------------------------------------------------------------------
    def check_protocol(self) -> None:
        det = self.fitted()
        if not isinstance(getattr(det, "name", None), str):
            raise _fail("protocol", "the detector has no plant name (str attribute 'name')")
        if not isinstance(getattr(det, "parameter_version", None), str):
            raise _fail("protocol", "the detector has no 'parameter_version' (str), e.g. 'proprietary'")
        epsilon = getattr(det, "epsilon", None)
        if not isinstance(epsilon, int | float) or isinstance(epsilon, bool) or not epsilon > 0:
            raise _fail(
                "protocol", f"'epsilon' must be the flags' privacy budget, a number > 0 (or inf), got {epsilon!r}"
            )
        if not isinstance(det.has_augmented, bool):
            raise _fail("protocol", f"'has_augmented' must be a bool, got {det.has_augmented!r}")
        thresholds = det.thresholds
        if (
            not isinstance(thresholds, tuple)
            or len(thresholds) != 2
            or not all(isinstance(v, int | float) and math.isfinite(v) for v in thresholds)
        ):
            raise _fail(
                "protocol", f"'thresholds' must be a tuple of two finite numbers (Z_c, Z_a), got {thresholds!r}"
            )

    def check_unfitted(self) -> None:
        det = self.build(self.seed)
        try:
            det.step_batch(self.test[:5])
        except NotFittedError:
            return
        except Exception as exc:
            raise _fail(
                "unfitted", f"step_batch before fit raised {type(exc).__name__}: {exc}; it must raise NotFittedError"
            ) from exc
        raise _fail("unfitted", "step_batch before fit returned a result; it must raise NotFittedError")

    def check_result(self) -> None:
        det = self.fitted()
        out = self.run(det, self.test, "result")
        T, D = self.test.shape
        problems = []
        for name in ("d2_c", "d2_a"):
            value = getattr(out, name)
            if value.shape != (T,) or value.dtype != np.float64:
                problems.append(f"{name} must be ({T},) float64, is {value.shape} {value.dtype}")
        for name in ("zc", "za", "zc_pub", "za_pub", "degraded"):
            value = getattr(out, name)
            if value.shape != (T,) or value.dtype != np.bool_:
                problems.append(f"{name} must be ({T},) bool, is {value.shape} {value.dtype}")
        for name in ("x_c", "x_a", "r_c", "r_a"):
            value = getattr(out, name)
            if value.ndim != 2 or len(value) != T or value.dtype != np.float64:
                problems.append(f"{name} must be (T, n) float64 with T = {T}, is {value.shape} {value.dtype}")
        for name in ("r_c", "r_a"):
            value = getattr(out, name)
            if value.ndim == 2 and value.shape[1] not in (0, D):
                problems.append(f"{name} must have the {D} sensors' residuals (or none), has {value.shape[1]} columns")
        for name in ("stats_c", "stats_a"):
            value = getattr(out, name)
            if value.shape != (0, 0) and (value.ndim != 2 or len(value) != T):
                problems.append(f"{name} must be (T, K) with T = {T} or (0, 0), is {value.shape}")
        for name in ("level", "level_pub"):
            value = getattr(out, name)
            if value.shape not in ((T,), (0,)) or value.dtype != np.int64:
                problems.append(f"{name} must be ({T},) or (0,) int64, is {value.shape} {value.dtype}")
        if problems:
            raise _fail("result", "; ".join(problems))
        scored = ~out.degraded
        if out.degraded.any():
            raise _fail(
                "result", f"{int(out.degraded.sum())} complete rows were degraded (only missing values degrade)"
            )
        if not np.isfinite(out.d2_c[scored]).all():
            raise _fail("result", "d2_c is not finite on complete rows")
        if det.epsilon == math.inf and not (_same(out.zc_pub, out.zc) and _same(out.za_pub, out.za)):
            raise _fail("result", "with epsilon = inf the published flags must equal the flags")
        if not det.has_augmented and not (_same(out.za, out.zc) and _same(out.za_pub, out.zc_pub)):
            raise _fail("result", "has_augmented is False, so Z_a must be a copy of Z_c (za == zc, za_pub == zc_pub)")

    def check_determinism(self) -> None:
        a, b = self.fitted(), self.fit(self.seed)
        ra, rb = self.run(a, self.test, "determinism"), self.run(b, self.test, "determinism")
        differ = _differences(ra, rb)
        if differ:
            raise _fail(
                "determinism",
                f"two detectors of seed {self.seed} fitted on the same data differ in {', '.join(differ)}; "
                "draw every random number from a generator seeded by 'seed'",
            )
        eps = float(a.epsilon)
        flip = 1.0 - keep_probability(eps)
        bits = len(self.test) * (2 if a.has_augmented else 1)
        if bits * 2 * flip * (1 - flip) < _MIN_EXPECTED_FLIPS:
            return
        rc = self.run(self.fit(self.seed + 1), self.test, "determinism")
        if _same(np.column_stack([ra.zc_pub, ra.za_pub]), np.column_stack([rc.zc_pub, rc.za_pub])):
            raise _fail(
                "determinism",
                f"seeds {self.seed} and {self.seed + 1} publish the same flags at epsilon {eps}; the randomized "
                "response must be seeded by 'seed' (fedrca.privacy.randomized_response.RandomizedResponse)",
            )

    def _batch_equals_steps(self, det: Detector, Y: FloatArray, check: str) -> None:
        start = copy.deepcopy(det.get_state())
        batch = self.run(det, Y, check)
        det.set_state(copy.deepcopy(start))
        rows = []
        for t, y in enumerate(Y):
            one = det.step(y)
            if not isinstance(one, DetectionResult) or len(one) != 1:
                raise _fail(check, f"step of row {t} must return a DetectionResult of one row")
            rows.append(one)
        steps = DetectionResult.concat(rows)
        det.set_state(copy.deepcopy(start))
        k = len(Y) // 3
        chunks = DetectionResult.concat([self.run(det, Y[:k], check), self.run(det, Y[k:], check)])
        for label, other in (("row-by-row step", steps), ("two chunks", chunks)):
            exact = ("zc", "za", "zc_pub", "za_pub", "degraded")
            differ = [n for n in exact if not _same(getattr(batch, n), getattr(other, n))]
            differ += [
                n
                for n in ("d2_c", "d2_a")
                if not np.allclose(getattr(batch, n), getattr(other, n), rtol=1e-9, atol=1e-12, equal_nan=True)
            ]
            if differ:
                raise _fail(
                    check,
                    f"one batch and {label} from the same state differ in {', '.join(differ)}; every streaming "
                    "quantity (filters, EWMA, randomizer) must be carried in the state from one call to the next",
                )

    def check_batch_step(self) -> None:
        self._batch_equals_steps(self.fitted(), self.test[:60], "batch-step")

    def check_state(self) -> None:
        h = len(self.test) // 2
        a = self.fitted()
        self.run(a, self.test[:h], "state")
        try:
            text = json.dumps(a.get_state())
        except (TypeError, ValueError) as exc:
            raise _fail("state", f"get_state() is not JSON ({exc}); return lists and numbers, not arrays") from None
        b = self.fitted()
        self.run(b, self.test[h : h + 7], "state")  # a state of its own, which set_state must replace
        b.set_state(json.loads(text))
        differ = _differences(self.run(a, self.test[h:], "state"), self.run(b, self.test[h:], "state"))
        if differ:
            raise _fail(
                "state",
                f"a detector restored from the JSON of get_state() continues differently from the original in "
                f"{', '.join(differ)}; get_state must hold everything the stream carries (the randomizer's too)",
            )

    def check_pickle(self) -> None:
        h = len(self.test) // 2
        a = self.fitted()
        self.run(a, self.test[:h], "pickle")
        b = pickle.loads(pickle.dumps(a))
        differ = _differences(self.run(a, self.test[h:], "pickle"), self.run(b, self.test[h:], "pickle"))
        if differ:
            raise _fail("pickle", f"a pickled copy continues differently from the original in {', '.join(differ)}")

    def check_reset(self) -> None:
        det = self.fitted()
        thresholds = det.thresholds
        self.run(det, self.test[:50], "reset")
        det.reset()
        first = self.run(det, self.test, "reset")
        det.reset()
        second = self.run(det, self.test, "reset")
        differ = [
            n for n in ("d2_c", "d2_a", "zc", "za", "degraded") if not _same(getattr(first, n), getattr(second, n))
        ]
        if differ:
            raise _fail(
                "reset", f"after reset the same samples give other {', '.join(differ)}; reset must forget the stream"
            )
        if det.thresholds != thresholds:
            raise _fail("reset", "reset changed the thresholds; it must keep the learned parameters")

    def check_score(self) -> None:
        h = len(self.test) // 2
        det = self.fitted()
        self.run(det, self.test[:h], "score")
        before = _state_text(det)
        scores = np.asarray(det.score(self.test[h:]))
        if _state_text(det) != before:
            raise _fail("score", "score changed the streaming state; it must leave it as it was")
        if scores.shape != (len(self.test) - h,):
            raise _fail("score", f"score must return ({len(self.test) - h},), returned {scores.shape}")
        stepped = self.run(det, self.test[h:], "score").score
        if not np.allclose(scores, stepped, rtol=1e-9, atol=1e-12, equal_nan=True):
            raise _fail("score", "score differs from step_batch(...).score from the same state")

    def check_missing(self) -> None:
        D = self.test.shape[1]
        Y = self.test[:40].copy()
        Y[5, 0] = np.nan  # one value missing
        Y[10:13, D - 1] = np.nan  # a value missing for three rows
        Y[20, :] = np.nan  # nothing observed
        gaps = np.isnan(Y).any(axis=1)
        det = self.fitted()
        out = self.run(det, Y, "missing")
        problems = []
        if not out.degraded[20]:
            problems.append("a row of NaN must be degraded")
        if out.degraded[~gaps].any():
            problems.append(f"complete rows {np.flatnonzero(out.degraded & ~gaps).tolist()} were degraded")
        unscored = gaps & ~out.degraded & ~np.isfinite(out.d2_c)
        if unscored.any():
            problems.append(
                f"rows {np.flatnonzero(unscored).tolist()} with missing values are neither scored (finite d2_c on "
                "the observed sensors) nor degraded"
            )
        if not np.isfinite(out.d2_c[21:]).all():
            problems.append("the complete rows after the missing values are not scored (d2_c not finite)")
        silent = out.zc | out.za | out.zc_pub | out.za_pub
        if (silent & out.degraded).any():
            problems.append("a degraded row raised or published a flag")
        if problems:
            raise _fail("missing", "; ".join(problems) + " (docs/missing.md: NaN is plant data, scored as such)")
        self._batch_equals_steps(self.fitted(), Y, "missing")

    def check_refusal(self) -> None:
        det = self.fitted()
        Y = self.test[:5]
        with_inf = Y.copy()
        with_inf[2, 0] = np.inf
        before = _state_text(det)
        cases: list[tuple[str, Callable[[], Any]]] = [
            ("step_batch of one column fewer", lambda: det.step_batch(Y[:, :-1])),
            ("step_batch of one column more", lambda: det.step_batch(np.hstack([Y, Y[:, :1]]))),
            ("step_batch of a 1-D array", lambda: det.step_batch(Y[0])),
            ("step_batch with inf", lambda: det.step_batch(with_inf)),
            ("step of one value fewer", lambda: det.step(Y[0, :-1])),
            ("fit on a 1-D array", lambda: self.build(self.seed).fit(self.nominal[:, 0])),
            ("fit on data with inf", lambda: self.build(self.seed).fit(np.vstack([self.nominal, with_inf]))),
        ]
        for label, call in cases:
            try:
                call()
            except DataError:
                pass
            except Exception as exc:
                raise _fail(
                    "refusal", f"{label} raised {type(exc).__name__}: {exc}; it must raise fedrca.exceptions.DataError"
                ) from exc
            else:
                raise _fail("refusal", f"{label} was accepted; it must raise fedrca.exceptions.DataError")
            if _state_text(det) != before:
                raise _fail("refusal", f"{label} changed the streaming state; a refused batch must leave it as it was")

    def check_calibration(self) -> None:
        det = self.fitted()
        rate = float(np.mean(self.run(det, self.test, "calibration").zc))
        if rate > self.max_false_alarm:
            raise _fail(
                "calibration",
                f"{rate:.1%} of nominal test rows raise Z_c, more than {self.max_false_alarm:.1%}; the threshold "
                "must come from the nominal data",
            )
        shifted = self.test + 5.0 * self.nominal.std(axis=0)
        found = float(np.mean(self.run(self.fitted(), shifted, "calibration").zc))
        if found < self.min_detection:
            raise _fail(
                "calibration",
                f"only {found:.1%} of rows shifted by 5 nominal standard deviations raise Z_c, fewer than "
                f"{self.min_detection:.1%}",
            )
