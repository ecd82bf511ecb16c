"""The two-plant look-up table: all 16 combinations of (Z_c, Z_a) pairs."""

from __future__ import annotations

import itertools

import pytest

from fedrca.exceptions import DataError
from fedrca.rca.table import (
    EXTERNAL_ROOT,
    IMPERFECT_TRAINING,
    INDEPENDENT,
    MULTIPLE_ROOTS,
    NO_ANOMALY,
    ROOT_CAUSE,
    TableDecision,
    classify_pattern,
    lookup,
)

N, A, P, R = (0, 0), (0, 1), (1, 0), (1, 1)

# The published table (issue 4) and fedrca's documented decisions for the six other combinations.
EXPECTED = {
    (R, N): TableDecision(ROOT_CAUSE, 0, ()),
    (N, R): TableDecision(ROOT_CAUSE, 1, ()),
    (R, P): TableDecision(ROOT_CAUSE, 0, (1,)),
    (P, R): TableDecision(ROOT_CAUSE, 1, (0,)),
    (N, N): TableDecision(NO_ANOMALY, None, ()),
    (P, P): TableDecision(EXTERNAL_ROOT, None, (0, 1)),
    (A, A): TableDecision(INDEPENDENT, None, ()),
    (A, R): TableDecision(IMPERFECT_TRAINING, None, ()),
    (R, A): TableDecision(IMPERFECT_TRAINING, None, ()),
    (R, R): TableDecision(MULTIPLE_ROOTS, None, ()),
    # not in the published table: documented in fedrca.rca.table
    (P, N): TableDecision(EXTERNAL_ROOT, None, (0,)),
    (N, P): TableDecision(EXTERNAL_ROOT, None, (1,)),
    (A, N): TableDecision(IMPERFECT_TRAINING, None, ()),
    (N, A): TableDecision(IMPERFECT_TRAINING, None, ()),
    (A, P): TableDecision(IMPERFECT_TRAINING, None, ()),
    (P, A): TableDecision(IMPERFECT_TRAINING, None, ()),
}


def test_expectations_cover_all_16_combinations():
    assert set(EXPECTED) == set(itertools.product([N, A, P, R], repeat=2))


@pytest.mark.parametrize(("c1", "c2"), sorted(EXPECTED))
def test_every_combination_has_its_documented_outcome(c1, c2):
    assert lookup(c1, c2) == EXPECTED[(c1, c2)]


def test_swapping_the_plants_swaps_the_decision():
    for (c1, c2), decision in EXPECTED.items():
        swapped = lookup(c2, c1)
        assert swapped.outcome == decision.outcome
        assert swapped.root_cause == (None if decision.root_cause is None else 1 - decision.root_cause)
        assert sorted(swapped.propagated) == sorted(1 - i for i in decision.propagated)


@pytest.mark.parametrize("bad", [(1,), (0, 2), (1, 1, 1), (-1, 0)])
def test_malformed_states_are_rejected_with_a_clear_error(bad):
    with pytest.raises(DataError, match="pair of 0/1 flags"):
        lookup(bad, (0, 0))


def test_pattern_classification_for_more_plants():
    assert classify_pattern([A, A, A]).outcome == INDEPENDENT
    assert classify_pattern([A, N, N]).outcome == IMPERFECT_TRAINING
    assert classify_pattern([R, P, R]).outcome == MULTIPLE_ROOTS
    assert classify_pattern([P, N, R]).outcome == "unexplained"
