"""The in-sample bound of issue 35's sets (``bench/rca_bound.py``, a bound and not a method): its pure core builds and
scores the sets of the ``plant`` rule exactly as the calibration bench scores the shipped ones."""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pytest

from fedrca.rca.calibration import FEATURES, CalibrationMap
from tests.bench.smoke import BENCH


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, ModuleType]:
    monkeypatch.syspath_prepend(str(BENCH))
    import rca_bound
    import rca_calibration

    return rca_bound, rca_calibration


def _verdicts(rc: ModuleType, seed: int) -> tuple[object, np.ndarray]:
    """40 runs of 1 to 6 verdicts over 4 plants (IDVs among the stream-4, kinetics and others), random probabilities
    with some exact zeros, a truth of one or two plants per run."""
    rng = np.random.default_rng(seed)
    M = 4
    rows: list[tuple[object, ...]] = []
    probs = []
    for run in range(40):
        idv = int(rng.choice([1, 2, 5, 8, 13, 13, 20]))
        truth = np.zeros(M, dtype=bool)
        truth[rng.choice(M, size=int(rng.integers(1, 3)), replace=False)] = True
        n = int(rng.integers(1, 7))
        for _ in range(n):
            p = rng.dirichlet(np.full(M, 0.6))
            p[rng.random(M) < 0.15] = 0.0
            if p.sum() == 0.0:
                p[0] = 1.0
            probs.append(p / p.sum())
            root = int(np.argmax(probs[-1])) if rng.random() < 0.7 else int(rng.integers(0, M))
            rows.append((np.zeros((M, len(FEATURES))), truth, root, 1.0 / n, run, "fedrca-500-inf", idv, 100))
    return rc.Samples.from_rows(rows), np.asarray(probs)


@pytest.mark.parametrize("seed", range(4))
def test_the_bound_scores_the_plant_rule_sets_as_the_bench_does(bench, seed):
    rb, rc = bench
    samples, probs = _verdicts(rc, seed)
    thresholds = [1.0, 0.7, 0.45, 0.3, 0.2, 0.1, 0.05, 0.0]
    points = rb.sweep(probs, samples.truth, samples.root, samples.run, samples.idv, thresholds)
    assert [p["threshold"] for p in points] == thresholds
    weights = (1.0,) + (0.0,) * (len(FEATURES) - 1)
    for t, point in zip(thresholds, points, strict=True):
        plant = CalibrationMap(weights, ("a", "b", "c", "d"), thresholds=((0.9, t),), rule="plant")
        expected = rc.score(samples, probs, 0.9, [plant] * len(samples))
        assert point["coverage"] == pytest.approx(expected["coverage"]), t
        assert point["size"] == pytest.approx(expected["size"]), t
        for kind in ("stream-4", "kinetics"):
            held, runs = point[kind]
            assert runs == expected[f"{kind} runs"]
            assert held == round(expected[kind] * runs) if runs else held == 0
    # lower thresholds make larger sets that hold a true root at least as often
    assert [p["size"] for p in points] == sorted(p["size"] for p in points)
    assert [p["coverage"] for p in points] == sorted(p["coverage"] for p in points)


def test_the_best_point_meets_every_bar_at_the_smallest_size(bench):
    rb, _ = bench

    def point(t: float, coverage: float, size: float, s4: int, kinetics: int) -> dict[str, object]:
        return {"threshold": t, "coverage": coverage, "size": size, "stream-4": (s4, 9), "kinetics": (kinetics, 6)}

    points = [
        point(0.5, 0.88, 1.10, 9, 6),  # coverage below 0.9
        point(0.4, 0.92, 1.30, 5, 6),  # stream-4 below 2/3
        point(0.3, 0.93, 1.45, 6, 3),  # kinetics below 2/3
        point(0.2, 0.95, 1.70, 6, 4),  # every bar but the size
        point(0.1, 0.97, 2.10, 9, 6),
    ]
    assert rb.best(points)["threshold"] == 0.2
    # at coverage >= 0.9 and size <= 1.5, the most kinetics runs held (then stream-4): the point at 0.4
    assert rb.most_held(points)["threshold"] == 0.4
    assert rb.best(points[:3]) is None and rb.most_held(points[:1]) is None
    # a kind without runs is no bar
    assert rb.best([{**points[2], "kinetics": (0, 0)}])["threshold"] == 0.3


def test_the_plants_family_adds_terms_naming_each_plant(bench):
    rb, _ = bench
    x = np.random.default_rng(1).random((5, 3, len(FEATURES)))
    assert rb.design(x, "features") is x
    d = rb.design(x, "plants")
    F = len(FEATURES)
    assert d.shape == (5, 3, F + 9)
    np.testing.assert_array_equal(d[:, :, :F], x)
    np.testing.assert_array_equal(d[:, :, F : F + 3], np.broadcast_to(np.eye(3), (5, 3, 3)))
    np.testing.assert_array_equal(d[:, 1, F + 3 + 1], x[:, 1, FEATURES.index("named")])
    np.testing.assert_array_equal(d[:, 2, F + 6 + 2], x[:, 2, FEATURES.index("share")])
    assert not d[:, 1, F + 3 + 2].any()
    with pytest.raises(ValueError, match="one of features, plants"):
        rb.design(x, "raw")
