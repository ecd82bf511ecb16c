"""The calibration features of a block's verdicts computed at once equal those of one verdict at a time, bit for
bit (the RCA engine's block path computes them at once, its per-row path one by one)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedrca.config import RCASettings
from fedrca.rca.calibration import FEATURES, CalibrationMap, features, features_block
from fedrca.rca.evidence import Evidence
from fedrca.rca.graph import InterdependencyGraph

#: log evidences with ties, very unequal values and impossible hypotheses (-inf), a row of them all -inf too
log_values = st.one_of(
    st.sampled_from([-math.inf, 0.0, -1.0, -745.0, 3.5]), st.floats(-1e4, 1e4, allow_nan=False, allow_infinity=False)
)


@st.composite
def evidences(draw, M: int) -> Evidence:
    log_evidence = np.array(draw(st.lists(log_values, min_size=M + 3, max_size=M + 3)))
    unordered = np.array(draw(st.lists(log_values, min_size=M + 3, max_size=M + 3)))
    # no root possible (its probabilities uniform), beside verdicts of the same block that have one
    for values in (log_evidence, unordered):
        if draw(st.integers(0, 3)) == 0:
            values[1 : M + 1] = -math.inf
    first = np.array(draw(st.lists(st.integers(-1, 6), min_size=M, max_size=M)), dtype=np.int64)
    alarming = np.array(draw(st.lists(st.booleans(), min_size=M, max_size=M)))
    share = np.array(draw(st.lists(st.floats(0.0, 1.0), min_size=M, max_size=M)))
    return Evidence(
        plants=tuple(f"p{m}" for m in range(M)),
        seq=10,
        window=(0, 10),
        rows=11,
        log_evidence=log_evidence,
        unordered=unordered,
        alarming=alarming,
        first=first,
        alarm_rows=np.zeros(M, dtype=np.int64),
        share=share,
        pairs=np.zeros(M, dtype=np.int64),
    )


@st.composite
def blocks(draw):
    M = draw(st.integers(1, 6))
    plants = [f"p{m}" for m in range(M)]
    edges = [(a, b) for a in plants for b in plants if a != b and draw(st.booleans())]
    graph = InterdependencyGraph.from_edges(plants, edges)
    entries = tuple(p for p in plants if draw(st.booleans()))
    return graph, RCASettings(unobserved_entry=entries), draw(st.lists(evidences(M), min_size=1, max_size=6))


@settings(max_examples=300, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(block=blocks())
def test_block_features_equal_one_at_a_time(block):
    graph, s, evs = block
    at_once = features_block(evs, graph, s)
    one_by_one = np.stack([features(ev, graph, s) for ev in evs])
    assert at_once.shape == one_by_one.shape == (len(evs), evs[0].n_plants, len(FEATURES))
    assert at_once.tobytes() == one_by_one.tobytes()
    weights = CalibrationMap(tuple(np.linspace(1.0, -0.5, len(FEATURES))), tuple(evs[0].plants), name="t")
    for got, ev in zip(weights.probabilities_block(evs, graph, s), evs, strict=True):
        assert got.tobytes() == weights.probabilities(ev, graph, s).tobytes()
