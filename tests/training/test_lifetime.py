"""A plant's whole-life training spend across runs: refresh rounds charged on top of the earlier ones (issue 36).

Each artifact carries ``lifetime`` (every run's Gaussian ``mu^2`` and pure releases, and the
number of runs); a run given the earlier spend (``prior``) composes its own with it exactly, and
is refused before anything is released when it would pass ``drift.federated.budget``.
"""

from __future__ import annotations

import pytest

from fedrca.exceptions import PrivacyBudgetExceeded
from fedrca.privacy.ledger import spent_epsilon
from fedrca.training.federated import FederatedTraining, lifetime_of
from tests.training.conftest import linear_setup

#: estimator moments at the shipped TEP releases: states pure epsilon 2, moments epsilon 2 at delta 1e-5
MOMENTS = {"estimator": "moments", "rounds": 2, "privacy": {"state_epsilon": 2.0, "moment_epsilon": 2.0,
                                                             "state_clip": 3.0, "delta": 1e-5}}  # fmt: skip


def _job(budget: float = float("inf"), prior=None):  # type: ignore[no-untyped-def]
    config, _, frames, settings = linear_setup(n_samples=600, **MOMENTS)
    drift = config.drift.model_copy(update={"federated": config.drift.federated.model_copy(update={"budget": budget})})
    config = config.model_copy(update={"drift": drift})
    return FederatedTraining(config, frames, settings=settings, prior=prior)


@pytest.fixture(scope="module")
def lifetime() -> dict[str, dict[str, object]]:
    """Each plant's lifetime after one run (commissioning)."""
    first = _job().run(version=1)
    return {p: lifetime_of(a.manifest) for p, a in first.artifacts.items() if p != "_server"}


def test_every_run_adds_to_the_lifetime_and_the_composition_is_exact(lifetime) -> None:  # type: ignore[no-untyped-def]
    one = lifetime["plant1"]
    assert one["rounds"] == 1 and one["pure"] == {2.0: 1}
    second = _job(prior=lifetime).run(version=2)
    two = lifetime_of(second.artifacts["plant1"].manifest)
    assert two["rounds"] == 2 and two["pure"] == {2.0: 2}
    assert two["mu2"] == pytest.approx(2 * one["mu2"])
    manifest = second.artifacts["plant1"].manifest["lifetime"]
    # the composed epsilon is the exact one of both runs' releases, less than twice one run's
    both = spent_epsilon(1e-5, two["mu2"], ((2.0, 2),))
    assert manifest["epsilon"] == pytest.approx(both)
    single = spent_epsilon(1e-5, one["mu2"], ((2.0, 1),))
    assert single < both < 2 * single


def test_a_round_past_the_training_budget_is_refused_before_any_release(lifetime) -> None:  # type: ignore[no-untyped-def]
    job = _job(budget=5.0, prior=lifetime)  # one round is 3.985; two compose to 6.9
    with pytest.raises(PrivacyBudgetExceeded, match=r"after 1 earlier one.*above drift\.federated\.budget = 5"):
        job.run(version=2)
    assert all(client.ledger.epsilon() == 0.0 for client in job.clients.values()), "nothing was released"
    # without the earlier run the same round fits the same budget
    _job(budget=5.0).check(2)
