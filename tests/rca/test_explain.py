"""The verdict as issued: its candidate set, probabilities and reason (rca/explain.py, rca/calibration.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrca.config import RCASettings
from fedrca.contracts import Verdict
from fedrca.contracts.reason import MAX_CANDIDATES
from fedrca.exceptions import ArtifactError
from fedrca.rca import InterdependencyGraph, engine_for
from fedrca.rca.calibration import (
    FEATURES,
    CalibrationMap,
    add_coverage,
    coverage_by_threshold,
    expected_calibration_error,
    features,
    fit,
    fit_thresholds,
    plant_set,
    reliability,
    share_of_others,
    threshold_steps,
    thresholds_of_coverage,
)
from fedrca.rca.explain import _TABLE, candidate_set, describe, link, shortest_path
from fedrca.rca.table import lookup

CHAIN = ["p1", "p2", "p3"]


def chain_graph() -> InterdependencyGraph:
    return InterdependencyGraph.from_edges(CHAIN, [("p1", "p2"), ("p2", "p3")])


def incident(engine, first: str = "p1", others: tuple[str, ...] = ("p2",), rows: int = 20) -> list[Verdict]:
    """Quiet rows, then ``first`` alarms, the ``others`` 3 rows later (untrained plants: (1, 1))."""
    out = []
    for t in range(5 + rows):
        on = {first} if 5 <= t < 8 else ({first, *others} if t >= 8 else set())
        v = engine.update(t, {p: (1, 1) if p in on else (0, 0) for p in CHAIN})
        out += [v] if v else []
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=30), st.floats(0.05, 1.0))
def test_the_candidate_set_is_the_smallest_that_reaches_the_level(weights, level):
    p = np.array(weights)
    if p.sum() > 0:
        p = p / p.sum()
    chosen = candidate_set(p, level)
    held = p[chosen].sum()
    assert len(chosen) <= MAX_CANDIDATES and len(set(chosen)) == len(chosen)
    if len(chosen) < min(MAX_CANDIDATES, int((p > 0).sum())):
        assert held >= level - 1e-9
    # no smaller set reaches the level: the largest probabilities of one fewer plant do not
    if chosen:
        best = np.sort(p)[::-1][: len(chosen) - 1].sum()
        assert best < level - 1e-9 or len(chosen) == 1


def test_the_named_root_leads_its_set_even_when_another_plant_is_likelier():
    assert candidate_set(np.array([0.3, 0.6, 0.1]), 0.9, first=0) == [0, 1]


def test_an_issued_verdict_carries_its_set_and_reason():
    engine = engine_for(CHAIN, chain_graph())
    v = incident(engine)[-1]
    assert v.root_cause == "p1" and v.candidates[0] == "p1" and v.calibration is None
    assert len(v.probabilities) == len(v.candidates) and sum(v.probabilities) >= 0.9 - 1e-9
    assert v.level == 0.9
    reason = v.reason
    assert [p.plant for p in reason.plants][:2] == ["p1", "p2"]
    root, effect = reason.plant("p1"), reason.plant("p2")
    assert root.onset == 0 and effect.onset == 3  # rows after the incident's first alarm
    assert root.pair == (1, 1) and root.state == "root_candidate" and root.table == "" and root.link == ""
    # P1's table on (1, 1) next to (1, 1) cannot tell: two root candidates
    assert effect.table == "multiple_roots" and effect.link == "config path p1 > p2"
    assert reason.plant("p3").onset is None and reason.plant("p3").share == 0.0
    assert reason.runner_up in {"p2", "p3"} and reason.margin > 0
    assert Verdict.decode(v.encode()) == v


def test_the_reason_says_when_the_onset_order_decides():
    v = incident(engine_for(CHAIN, InterdependencyGraph.complete(CHAIN)))[-1]
    reason = v.reason
    assert v.root_cause == "p1" and reason.runner_up == "p2"
    assert "onset order decides" in reason.change and "p2 would be named had it alarmed first" in reason.change


def test_the_reason_says_when_the_flags_decide():
    engine = engine_for(["a", "b"], InterdependencyGraph.complete(["a", "b"]))
    verdicts = []
    for t in range(30):  # both from the same row; b comes and goes
        row = {"a": (1, 1), "b": (1, 1) if t % 3 == 0 else (0, 0)}
        verdicts += [v] if (v := engine.update(t, row)) else []
    reason = verdicts[-1].reason
    assert verdicts[-1].root_cause == "a" and "flags decide" in reason.change
    assert reason.plant("b").link == "complete graph: every unit may affect every other"


def test_a_declared_entry_is_explained_as_one():
    plants = ["src", "a", "b"]
    graph = InterdependencyGraph.from_edges(plants, [("src", "a"), ("a", "b")])
    engine = engine_for(plants, graph, settings=RCASettings(unobserved_entry=["src"]))
    rows = [{"src": (0, 0), "a": (1, 1) if t >= 5 else (0, 0), "b": (0, 0)} for t in range(20)]
    v = [v for t, row in enumerate(rows) if (v := engine.update(t, row))][-1]
    assert v.root_cause == "a"
    assert v.reason.plant("src").link.startswith("declared unmeasured entry into a")


def test_paths_and_links():
    g = chain_graph()
    assert shortest_path(g, 0, 2) == [0, 1, 2] and shortest_path(g, 2, 0) is None
    assert link(g, 2, 0) == "no path from p3 in the config graph"


def test_describe_reads_like_a_sentence():
    v = incident(engine_for(CHAIN, chain_graph()))[-1]
    text = describe(v, entries={"p2"})
    first = text.splitlines()[0]
    assert first.startswith("root cause p1 (p 1.00, uncalibrated); candidates at 0.90: p1 1.00")
    assert "  p2: +3 rows" in text and "would change:" in text


def calibrated_engine(weights: tuple[float, ...]) -> tuple:
    engine = engine_for(CHAIN, chain_graph())
    engine.calibration = CalibrationMap(weights, tuple(CHAIN), name="test")
    return engine, incident(engine)


def test_a_calibrated_verdict_names_its_map_and_its_probabilities_come_from_it():
    tempered = (0.05,) + (0.0,) * (len(FEATURES) - 1)  # a high temperature: the engine's certainty cut down
    engine, verdicts = calibrated_engine(tempered)
    v = verdicts[-1]
    assert v.calibration == engine.calibration.id and v.calibration.startswith("test-")
    assert v.probabilities[0] < 0.9 and len(v.candidates) >= 2  # the set grows to reach the level
    now = engine.explain()  # the current decision, annotated from the current evidence
    expected = engine.calibration.apply(features(engine.snapshot(), engine.graph, engine.settings))
    assert now.probabilities[0] == pytest.approx(expected[0], abs=1e-4)


def test_the_set_reaches_the_maps_threshold_for_its_coverage():
    """A map whose sets held a true root at the configured coverage with the named root alone (threshold 0.05)
    shows the named root alone where the probabilities' sum would add plants."""
    tempered = (0.05,) + (0.0,) * (len(FEATURES) - 1)
    plain = calibrated_engine(tempered)[1][-1]
    engine = engine_for(CHAIN, chain_graph())
    engine.calibration = CalibrationMap(tempered, tuple(CHAIN), name="test", thresholds=((0.9, 0.05),))
    v = incident(engine)[-1]
    assert len(plain.candidates) >= 2 and v.candidates == (v.root_cause,)
    assert v.probabilities == plain.probabilities[:1] and v.level == 0.9


@pytest.mark.parametrize("rule", ["mass", "plant"])
@pytest.mark.parametrize("seed", range(8))
def test_fitted_thresholds_give_the_smallest_sets_that_hold_the_coverage_in_every_group(seed, rule):
    """mass: the smallest sum that holds the coverage (one grid step less does not); plant: the largest floor a
    plant needs to join the named root (one grid step more does not)."""
    rng = np.random.default_rng(seed)
    n, M = 60, 4
    p = rng.dirichlet(np.full(M, 0.7), size=n)
    truth = rng.random((n, M)) < 0.35
    named, w, groups = rng.integers(0, M, n), rng.random(n) + 0.1, rng.integers(0, 3, n)
    build = candidate_set if rule == "mass" else plant_set

    def covered(t: float, level: float) -> list[bool]:
        ok = np.array([truth[i][build(p[i], t, first=int(named[i]))].any() for i in range(n)])
        return [np.sum(w[(groups == g) & ok]) >= level * np.sum(w[groups == g]) - 1e-9 for g in range(3)]

    table = fit_thresholds(p, truth, named, w, groups, levels=(0.3, 0.5, 0.7), grid=50, rule=rule)
    limits = [t for _, t in table]
    assert [c for c, _ in table] == [0.3, 0.5, 0.7] and limits == sorted(limits, reverse=rule == "plant")
    # the threshold when none holds the level: the whole set (mass 1, plant 0: every plant of positive probability)
    whole, step = (1.0, -1 / 50) if rule == "mass" else (0.0, 1 / 50)
    for level, t in table:
        assert all(covered(t, level)) or t == whole
        # one grid step towards smaller sets loses the level (mass: a smaller sum; plant: a higher floor)
        if (rule == "mass" and 1 / 50 < t < 1.0) or (rule == "plant" and t < 1.0):
            assert not all(covered(t + step, level))


@pytest.mark.parametrize("rule", ["mass", "plant"])
@pytest.mark.parametrize("seed", range(4))
def test_coverage_tables_of_parts_add_up_to_the_thresholds_of_the_whole(seed, rule):
    """The shipped set thresholds are searched on the coverage tables of many sets of verdicts added up (the inner folds
    of bench/rca_calibration.py's nested cross-validation, every verdict in several): they are fit_thresholds' on all
    those verdicts at once, and one table's search is fit_thresholds' on its verdicts."""
    rng = np.random.default_rng(seed)
    M, levels = 4, (0.3, 0.5, 0.7, 0.9)
    parts = []
    for n in (40, 25, 60):
        parts.append((rng.dirichlet(np.full(M, 0.7), size=n), rng.random((n, M)) < 0.35, rng.integers(0, M, n),
                      rng.random(n) + 0.1, rng.choice(np.array(["a", "b", "c"]), n)))  # fmt: skip
    tables = [coverage_by_threshold(*part, grid=50, rule=rule) for part in parts]
    whole = fit_thresholds(*(np.concatenate(x) for x in zip(*parts, strict=True)), levels=levels, grid=50, rule=rule)
    assert thresholds_of_coverage(add_coverage(tables), levels, grid=50, rule=rule) == whole
    for part, table in zip(parts, tables, strict=True):
        assert thresholds_of_coverage(table, levels, grid=50, rule=rule) == fit_thresholds(
            *part, levels=levels, grid=50, rule=rule)  # fmt: skip
        # per group: the covered weight at each step (never more than the group's weight, growing toward larger sets)
        # and the group's weight
        for label, (held, total) in table.items():
            assert total == pytest.approx(part[3][part[4] == label].sum())
            assert np.all(np.diff(held) >= -1e-12) and held[-1] <= total + 1e-12
    # a label the other tables lack is kept; the totals add up
    added = add_coverage([tables[0], {"d": (np.ones(len(threshold_steps(50, rule))), 2.0)}])
    assert added["d"][1] == 2.0 and set(added) == set(tables[0]) | {"d"}
    with pytest.raises(ValueError, match="one of mass, plant"):
        threshold_steps(50, "sum")


def test_a_plant_rule_map_adds_every_plant_of_probability_at_least_its_threshold():
    """The same probabilities and coverage: the mass rule adds the most probable plants until their sum reaches its
    threshold, the plant rule every plant at or above its own, and nothing below it however small the sum."""
    tempered = (0.05,) + (0.0,) * (len(FEATURES) - 1)
    mass = calibrated_engine(tempered)[1][-1]
    engine = engine_for(CHAIN, chain_graph())
    engine.calibration = CalibrationMap(tempered, tuple(CHAIN), name="test", thresholds=((0.9, 0.3),), rule="plant")
    v = incident(engine)[-1]
    assert v.calibration == engine.calibration.id != mass.calibration
    full = dict(zip(mass.candidates, mass.probabilities, strict=True))
    assert len(mass.candidates) == 3 and sum(full.values()) >= 0.9  # the sum needs every plant
    expected = [v.root_cause] + [
        k for k in sorted(full, key=lambda k: -full[k]) if k != v.root_cause and full[k] >= 0.3
    ]
    assert list(v.candidates) == expected and len(v.candidates) < len(mass.candidates)
    p = np.array([0.05, 0.6, 0.2, 0.15])
    assert plant_set(p, 0.15, first=2) == [2, 1, 3] and plant_set(p, 0.7) == [1] and plant_set(p, 0.0) == [1, 2, 3, 0]


def test_a_plant_rule_map_keeps_its_rule_and_decreasing_thresholds():
    w = (1.0,) + (0.5,) * (len(FEATURES) - 1)
    table = ((0.8, 0.4), (0.9, 0.2))
    plant = CalibrationMap(w, ("a", "b"), name="tep", thresholds=table, rule="plant")
    assert CalibrationMap.from_json(plant.to_json()) == plant
    # the rule is part of the digest: the same weights make another map
    assert CalibrationMap(w, ("a", "b"), rule="plant").id != CalibrationMap(w, ("a", "b")).id
    assert plant.threshold(0.85) == pytest.approx(0.3) and plant.threshold(0.99) == pytest.approx(0.01)
    assert CalibrationMap(w, ("a", "b"), name="tep", rule="plant").threshold(0.9) == pytest.approx(0.1)
    with pytest.raises(ArtifactError, match="decreasing"):
        CalibrationMap(w, ("a", "b"), thresholds=((0.8, 0.2), (0.9, 0.4)), rule="plant")
    with pytest.raises(ArtifactError, match="set rule"):
        CalibrationMap.from_dict(json.loads(plant.to_json()) | {"rule": "largest"})
    # a mass map's JSON from before rules (no "rule") is read as one, with its id
    mass = CalibrationMap(w, ("a", "b"), name="tep", thresholds=((0.8, 0.2), (0.9, 0.4)))
    data = json.loads(mass.to_json())
    del data["rule"]
    assert CalibrationMap.from_dict(data) == mass


def test_a_map_without_thresholds_reaches_the_coverage_and_keeps_its_id():
    w = (1.0,) + (0.5,) * (len(FEATURES) - 1)
    old = CalibrationMap(w, ("a", "b"), name="tep")
    assert old.threshold(0.9) == 0.9 and old.id.startswith("tep-")
    data = json.loads(old.to_json()) | {"format": "fedrca-calibration/1"}
    del data["thresholds"]
    assert CalibrationMap.from_dict(data).id == old.id  # a map written before thresholds is still read
    new = CalibrationMap(w, ("a", "b"), name="tep", thresholds=((0.8, 0.5), (0.9, 0.7)))
    assert new.id != old.id and CalibrationMap.from_json(new.to_json()) == new
    assert new.threshold(0.9) == 0.7 and new.threshold(0.85) == pytest.approx(0.6) and new.threshold(0.99) == 0.99
    for bad in ([[0.9, 0.7], [0.8, 0.5]], [[0.8, 0.7], [0.9, 0.5]], [[0.9, 1.5]], [[0.9]], "x"):
        with pytest.raises(ArtifactError, match="thresholds"):
            CalibrationMap.from_dict(json.loads(new.to_json()) | {"thresholds": bad, "id": None} | {"id": new.id})


def test_the_map_is_an_artifact_that_refuses_what_it_was_not_made_for(tmp_path):
    m = CalibrationMap((1.0,) + (0.5,) * (len(FEATURES) - 1), ("a", "b"), {"runs": 3}, {"ece": 0.02}, name="tep")
    again = CalibrationMap.from_json(m.to_json())
    assert again == m and again.id == m.id
    with pytest.raises(ArtifactError, match="fitted for plants"):
        m.check(["a", "c"])
    data = json.loads(m.to_json())
    data["weights"][0] = 2.0
    with pytest.raises(ArtifactError, match="does not match"):
        CalibrationMap.from_dict(data)
    with pytest.raises(ArtifactError, match="features"):
        CalibrationMap.from_dict({**json.loads(m.to_json()), "features": ["x"], "id": None} | {"id": m.id})
    for bad in ("[1]", '{"format": "other"}', "{", '{"format": "fedrca-calibration/1", "weights": "x", "plants": []}'):
        with pytest.raises(ArtifactError):
            CalibrationMap.from_json(bad)


def test_fitting_recovers_a_temperature():
    """Verdicts whose engine posterior is over-confident: the fit finds the temperature that calibrates them."""
    rng = np.random.default_rng(0)
    n, M = 4000, 3
    x = np.zeros((n, M, len(FEATURES)))
    logits = rng.normal(0.0, 6.0, (n, M))  # the engine's log posteriors, 3x too sharp
    x[:, :, 0] = logits - logits.max(axis=1, keepdims=True)
    p_true = np.exp(logits / 3.0)
    p_true /= p_true.sum(axis=1, keepdims=True)
    root = np.array([rng.choice(M, p=row) for row in p_true])
    truth = np.eye(M, dtype=bool)[root]
    m = fit(x, truth, np.ones(n), ("a", "b", "c"), penalty=0.0)
    assert m.weights[0] == pytest.approx(1 / 3, rel=0.15)
    p = m.apply(x)
    top = p.max(axis=1)
    correct = p.argmax(axis=1) == root
    assert expected_calibration_error(top, correct) < 0.03
    raw = np.exp(x[:, :, 0]) / np.exp(x[:, :, 0]).sum(axis=1, keepdims=True)
    assert expected_calibration_error(raw.max(axis=1), raw.argmax(axis=1) == root) > 0.1


def test_reliability_bins():
    rows = reliability([0.05, 0.15, 0.95, 0.95], [0, 1, 1, 0], bins=10)
    assert [(r["low"], r["accuracy"], r["weight"]) for r in rows] == [(0.0, 0.0, 1.0), (0.1, 1.0, 1.0), (0.9, 0.5, 2.0)]
    assert expected_calibration_error([0.95, 0.95], [1, 0], weight=[3, 1]) == pytest.approx(abs(0.75 - 0.95))


def test_the_table_is_the_lookup():
    pairs = [(zc, za) for zc in (0, 1) for za in (0, 1)]
    assert {(a, b): lookup(a, b).outcome for a in pairs for b in pairs} == _TABLE


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(st.lists(st.booleans(), min_size=1, max_size=70), st.integers(0, 69))
def test_share_of_others_is_the_mean(alarming, top):
    a, k = np.array(alarming, dtype=bool), top % len(alarming)
    want = float(np.delete(a, k).mean()) if len(a) > 1 else 0.0
    assert share_of_others(a, k) == want and type(share_of_others(a, k)) is float
