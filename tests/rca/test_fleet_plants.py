"""The RCA engine with plants whose detector yields Z_c only (detector.kind: fleet)."""

from __future__ import annotations

import math

import numpy as np

from fedrca.config import RCASettings, parse_config
from fedrca.rca.engine import build_engine
from fedrca.rca.flagmodel import FlagModel

NOMINAL = np.tile([0.97, 0.01, 0.01, 0.01], (2, 1))


def _model(augmented, epsilon=1.0):
    return FlagModel(NOMINAL, epsilon, [0.1], 0.05, [0.3, 0.9], [0.1, 0.5, 0.9], 0.05, augmented=augmented)


def test_a_plant_without_z_a_is_scored_on_its_z_c_bit_alone():
    full, lone = _model(None), _model([True, False])
    # the plant with Z_a is untouched
    assert np.array_equal(full.emission[0], lone.emission[0])
    e = lone.emission[1]
    # the Z_a bit changes nothing: (0,0) ~ (0,1) and (1,0) ~ (1,1)
    assert np.array_equal(e[:, 0], e[:, 1]) and np.array_equal(e[:, 2], e[:, 3])
    # and the Z_c bit has its marginal likelihood under every role
    f = full.emission[1]
    assert np.allclose(e[:, 0], f[:, 0] + f[:, 1]) and np.allclose(e[:, 2], f[:, 2] + f[:, 3])
    assert np.allclose(e[:, 0] + e[:, 2], 1.0)
    assert np.array_equal(lone.alarm_llr[1, 0], lone.alarm_llr[1, 1])
    assert np.array_equal(lone.alarm_llr[1, 2], lone.alarm_llr[1, 3])


def test_the_engine_ignores_the_published_z_a_of_such_a_plant():
    config = parse_config(
        {
            "site": "mixed",
            "plants": [
                {"name": "own", "sensors": ["a"]},
                {"name": "fleet", "sensors": ["b"], "detector": {"kind": "fleet"}},
            ],
            "graph": {"edges": [["own", "fleet"]]},
            "privacy": {"flag_epsilon": 1.0},
        }
    )
    # an RCA worker holds no detector: the configuration says which plant has no Z_a
    engine = build_engine(config, settings=RCASettings(horizon=20))
    assert engine.model.augmented.tolist() == [True, False]
    rng = np.random.default_rng(0)
    flags = rng.integers(0, 2, size=(30, 2, 2))
    other = flags.copy()
    other[:, 1, 1] = 1 - other[:, 1, 1]  # flip every Z_a of the fleet plant
    assert np.array_equal(engine.evidence(flags), engine.evidence(other))
    other[:, 0, 1] = 1 - other[:, 0, 1]  # the plant detector's Z_a still counts
    assert not np.allclose(engine.evidence(flags), engine.evidence(other))


def test_fleet_plants_do_not_make_a_site_trained():
    def site(fleet_kind: str):
        return parse_config(
            {
                "site": "s",
                "plants": [
                    {"name": "p", "sensors": ["a"]},
                    {"name": "f", "sensors": ["b"], "detector": {"kind": fleet_kind}},
                ],
            }
        )

    untrained = build_engine(site("fleet"))
    reference = build_engine(site("plant"))
    # the plant detector's flag likelihoods are those of an untrained site
    assert np.array_equal(untrained.model.emission[0], reference.model.emission[0])
    assert not math.isclose(untrained.model.emission[1, 0, 1], reference.model.emission[1, 0, 1])
