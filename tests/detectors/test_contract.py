"""The contract every fedrca detector satisfies, run by ``fedrca.detectors.check_detector`` (the one
source of the suite): every shipped detector passes it, and a detector broken in one way fails
exactly the check that guards it. Add new detectors to DETECTORS."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from fedrca.datasets import nonlinear_two_plant
from fedrca.detectors import DetectionResult, PlantDetector, check_detector, load_plugin
from fedrca.detectors.check import CHECKS, contract_data
from fedrca.exceptions import ContractError, ModelError, NotFittedError
from fedrca.fleet.detector import FleetDetector
from fedrca.privacy import RandomizedResponse
from tests.detectors import doc_plugin, plugins


class TrainedPlant(PlantDetector):
    """A plant detector whose augmentation is trained (a small random Theta) once fitted, so the
    augmented model's path differs from the proprietary one's."""

    def fit(self, Y, U=None, **kwargs):
        super().fit(Y, U, **kwargs)
        theta = 0.02 * np.random.default_rng(self.seed).normal(size=self.augmentation.theta.shape)
        self.set_parameters(theta, version="t")
        return self


def _nonlinear():
    train = nonlinear_two_plant(n_samples=1500, seed=1)
    test = nonlinear_two_plant(n_samples=400, seed=2)
    return train.plant_data(1), test.plant_data(1)


def _vendor():
    # the vendor filter steps row by row (no batch form): fewer test rows keep the suite quick
    return plugins.simulate(1500, seed=1), plugins.simulate(200, seed=2)


DETECTORS = {
    "identified-linear": (lambda seed: TrainedPlant("p", n_states=2, seed=seed, epsilon=2.0), _nonlinear),
    "identified-rff-mewma": (
        lambda seed: TrainedPlant(
            "p", n_states=2, features="rff", n_features=16, ewma=0.2, smooth="residual", seed=seed, epsilon=1.0
        ),
        _nonlinear,
    ),
    "identified-family-levels": (
        lambda seed: TrainedPlant(
            "p", n_states=2, method="family", severity_levels=4, level_epsilon=2.0, seed=seed, epsilon=2.0
        ),
        _nonlinear,
    ),
    "plugin-ekf": (
        lambda seed: TrainedPlant(
            "p", model=load_plugin("tests.detectors.plugins:damped_filter"), seed=seed, epsilon=1.0
        ),
        _vendor,
    ),
    "fleet-ggm": (
        lambda seed: FleetDetector("p", n_components=2, folds=3, max_iter=30, epsilon=2.0, seed=seed),
        _nonlinear,
    ),
    "fleet-ggm-ewma": (
        lambda seed: FleetDetector("p", n_components=2, folds=3, max_iter=30, ewma=0.2, epsilon=2.0, seed=seed),
        _nonlinear,
    ),
}


@pytest.mark.parametrize("name", sorted(DETECTORS))
def test_every_shipped_detector_passes_the_contract(name):
    factory, data = DETECTORS[name]
    train, test = data()
    assert check_detector(factory, train, test) == list(CHECKS)


# -- a detector broken in one way fails the check that guards it ------------------------------------
# Each is the documented example (docs/plugins.md) with one fault; the example itself passes
# (tests/detectors/test_plugin_docs.py), so the failure is the fault's.
ZScore = doc_plugin.example_module().ZScore


class FitReturnsNothing(ZScore):
    def fit(self, Y, U=None):
        super().fit(Y, U)


class ScoresBeforeFit(ZScore):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._mean, self._std, self._threshold = np.zeros(4), np.ones(4), 1.0


class IntegerFlags(ZScore):
    def step_batch(self, Y, U=None):
        out = super().step_batch(Y, U)
        return dataclasses.replace(out, zc=out.zc.astype(np.int64))


class UnseededPrivacy(ZScore):
    def fit(self, Y, U=None):
        super().fit(Y, U)
        self._privacy = RandomizedResponse(self.epsilon, seed=None)
        return self


class IgnoresSeed(ZScore):
    def __init__(self, seed=0, **kwargs):
        super().__init__(seed=0, **kwargs)


class ForgetsBetweenBatches(ZScore):
    def step_batch(self, Y, U=None):
        self._last = None
        return super().step_batch(Y, U)


class ArrayInState(ZScore):
    def get_state(self):
        return {**super().get_state(), "mean": self._mean}


class Unpicklable(ZScore):
    def fit(self, Y, U=None):
        super().fit(Y, U)
        self._transform = lambda z: z
        return self


class ResetKeepsStream(ZScore):
    def reset(self):
        pass


class ScoreAdvances(ZScore):
    def score(self, Y, U=None):
        return self.step_batch(Y, U).score


class NaNPoisons(ZScore):
    def _raw(self, Y):
        z2 = ((Y - self._mean) / self._std) ** 2
        return z2.mean(axis=1), np.zeros(len(Y), dtype=bool)


class TakesAnyBatch(ZScore):
    def step_batch(self, Y, U=None):
        if self._mean is None:
            raise NotFittedError("fit first")
        Y = np.atleast_2d(np.asarray(Y, dtype=np.float64))
        Y = np.where(np.isinf(Y), 0.0, Y)
        raw, degraded = self._raw(Y[:, : len(self._mean)])
        score = self._smooth(raw, degraded)
        flags = (score > self._threshold) & ~degraded
        return DetectionResult.from_score(score, flags, self._privacy.perturb(flags) & ~degraded, degraded=degraded)


BROKEN = {
    "protocol": lambda seed: FitReturnsNothing(seed=seed),
    "unfitted": lambda seed: ScoresBeforeFit(seed=seed),
    "result": lambda seed: IntegerFlags(seed=seed),
    "determinism": lambda seed: UnseededPrivacy(seed=seed, epsilon=1.0),
    "batch-step": lambda seed: ForgetsBetweenBatches(seed=seed),
    "state": lambda seed: ArrayInState(seed=seed),
    "pickle": lambda seed: Unpicklable(seed=seed),
    "reset": lambda seed: ResetKeepsStream(seed=seed),
    "score": lambda seed: ScoreAdvances(seed=seed),
    "missing": lambda seed: NaNPoisons(seed=seed),
    "refusal": lambda seed: TakesAnyBatch(seed=seed),
    "calibration": lambda seed: ZScore(seed=seed, percentile=50.0),
}


def test_every_check_has_a_broken_detector():
    assert sorted(BROKEN) == sorted(CHECKS)


@pytest.mark.parametrize("check", CHECKS)
def test_a_detector_broken_in_one_way_fails_that_check(check):
    with pytest.raises(ContractError) as caught:
        check_detector(BROKEN[check])
    assert caught.value.check == check, str(caught.value)
    assert f"check '{check}'" in str(caught.value)
    assert isinstance(caught.value, ModelError)  # one hierarchy: callers catch FedrcaError


def test_a_detector_that_ignores_its_seed_publishes_the_same_flags_for_every_seed():
    with pytest.raises(ContractError, match="publish the same flags") as caught:
        check_detector(lambda seed: IgnoresSeed(seed=seed, epsilon=1.0))
    assert caught.value.check == "determinism"


def test_an_object_that_is_not_a_detector_fails_the_protocol():
    with pytest.raises(ContractError, match=r"not a fedrca\.detectors\.Detector") as caught:
        check_detector(lambda seed: object())
    assert caught.value.check == "protocol"


def test_checks_can_be_chosen_and_an_unknown_one_is_refused():
    assert check_detector(ZScore, checks=["reset", "state"]) == ["state", "reset"]  # in contract order
    with pytest.raises(ValueError, match="unknown check"):
        check_detector(ZScore, checks=["stat"])


def test_the_contract_data_are_nominal_for_the_example_and_user_data_are_used():
    nominal, test = contract_data(n_nominal=800, n_test=150, n_sensors=3, seed=5)
    assert nominal.shape == (800, 3) and test.shape == (150, 3)
    assert check_detector(ZScore, nominal, test, checks=["calibration"]) == ["calibration"]
    # a 90th-percentile threshold raises about 10 % false alarms: refused at 5 %, accepted at 30 %
    loose = lambda seed: ZScore(seed=seed, percentile=90.0)  # noqa: E731
    with pytest.raises(ContractError, match="nominal test rows raise Z_c"):
        check_detector(loose, checks=["calibration"])
    assert check_detector(loose, checks=["calibration"], max_false_alarm=0.3) == ["calibration"]
    assert math.isfinite(ZScore().fit(nominal).thresholds[0])
