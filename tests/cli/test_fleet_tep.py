"""Issue 18, acceptance 3: the fleet detector on TEP (52 variables, config/fleet-tep.yaml).

Five participants, each holding one 100-row nominal segment of data/tep/d00.dat, learn
the shared model peer to peer; every participant's detector (shared model, its own
weights, the 99.5th percentile of the cross-fitted nominal scores the five pool: 100 rows
each are too few for one of their own) then scores the recorded test files. Bars: at most
2 % false alarms on d00_te.dat and a detection rate of at least 95 % on samples 161..960
of faults 01, 04 and 06, for every participant.
"""

from __future__ import annotations

import pytest

from fedrca.application.fleet.config import load_fleet_config
from fedrca.application.fleet.run import run_fleet

# seg1 (the start of d00.dat) releases below the l-diversity bound: recorded in the report, not a failure here
pytestmark = pytest.mark.filterwarnings("ignore::fedrca.exceptions.PrivacyWarning")


@pytest.fixture(scope="module")
def outcome(repo):
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(repo)  # the configuration's data paths are relative to the checkout
        return run_fleet(load_fleet_config(repo / "config" / "fleet-tep.yaml"))


def test_every_participant_holds_the_same_tep_model(outcome):
    assert outcome.run.identical and len(outcome.columns) == 52
    assert outcome.run.model.n_components >= 1
    # 100 held-out scores each cannot certify a 99.5th percentile (199 needed): they pool theirs
    assert {r.calibration.rule for r in outcome.run.results.values()} == {"shared"}
    assert {r.calibration.scores for r in outcome.run.results.values()} == {500}


def test_false_alarms_on_nominal_test_data_at_most_two_percent(outcome):
    nominal = next(r for r in outcome.evaluation if r["kind"] == "nominal")
    assert nominal["rows"] == 960
    assert nominal["max"] <= 0.02


@pytest.mark.parametrize("fault", ["01", "04", "06"])
def test_fault_detection_rate_at_least_95_percent(outcome, fault):
    row = next(r for r in outcome.evaluation if r["label"] == fault)
    assert row["rows"] == 800  # samples 161..960
    assert row["min"] >= 0.95
