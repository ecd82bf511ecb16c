"""The nested cross-validation of the calibration maps (``bench/rca_calibration.py``) for both families of maps
(``fedrca.rca.calibration.FAMILIES``): nothing of a held-out run reaches the map or the set threshold it is scored
with, and the per-plant family (``plants``) goes through the same procedure and makes a file of its site alone."""

from __future__ import annotations

import dataclasses
from types import ModuleType

import numpy as np
import pytest

from fedrca.exceptions import ArtifactError
from fedrca.rca.calibration import FEATURES, CalibrationMaps, fit
from tests.bench.smoke import BENCH

PLANTS = ("a", "b", "c")


@pytest.fixture
def rc(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))
    import rca_calibration

    return rca_calibration


def _library(rc: ModuleType, seed: int = 3) -> object:
    """Two settings (500 and 2,880 rows), 3 fault seeds x 8 IDVs x 2 verdicts each over 3 plants: the engine's
    posterior random, its favourite named, the true root the named plant in about two runs of three, else one of the
    others (plant c more often than b, which only per-plant terms can learn)."""
    rng = np.random.default_rng(seed)
    rows: list[tuple[object, ...]] = []
    run = 0
    for setting in ("fedrca-2880-inf", "fedrca-500-inf"):
        for fault_seed in (100, 101, 102):
            for idv in range(1, 9):
                p = rng.dirichlet(np.ones(3))
                named = int(np.argmax(p))
                u = rng.random()
                root = named if u < 0.65 else int(rng.choice([m for m in range(3) if m != named],
                                                               p=[0.3, 0.7] if named == 0 else [0.5, 0.5]))  # fmt: skip
                for _ in range(2):
                    x = np.zeros((3, len(FEATURES)))
                    x[:, 0] = np.log(p + rng.uniform(0, 0.05, 3))
                    x[:, 1] = x[:, 0]
                    x[named, FEATURES.index("named")] = 1.0
                    x[:, FEATURES.index("share")] = rng.uniform(0, 1, 3)
                    rows.append((x, np.arange(3) == root, named, 0.5, run, setting, idv, fault_seed))
                run += 1
    return rc.Samples.from_rows(rows)


@pytest.mark.parametrize("family", ["features", "plants"])
def test_the_nested_cross_validation_never_fits_on_a_held_out_run(rc: ModuleType, family: str) -> None:
    """Changing the truth of the runs an outer fold holds out changes neither their probabilities (the fold's map) nor
    their set thresholds (the cross-validation inside the fold's runs): their truth reaches no fit that scores them. It
    does change the probabilities of other runs, whose maps were fitted on those runs: the change is visible to a fit
    that sees it (a leak would show)."""
    samples = _library(rc)
    probs, maps = rc.cross_validate(samples, PLANTS, "pooled", "rows", rc.SET_RULE, family=family)
    assert all(m.family == family for m in maps)
    folds = list(rc._folds(samples))
    for train, test in (folds[0], folds[5]):
        truth = samples.truth.copy()
        truth[test] = np.roll(truth[test], 1, axis=1)  # every held-out run's true root moved to another plant
        moved = dataclasses.replace(samples, truth=truth)
        probs2, maps2 = rc.cross_validate(moved, PLANTS, "pooled", "rows", rc.SET_RULE, family=family)
        np.testing.assert_array_equal(probs2[test], probs[test])
        for i in np.flatnonzero(test):
            assert maps2[i].weights == maps[i].weights and maps2[i].thresholds == maps[i].thresholds
        # the runs of other seeds and other IDV groups were fitted on the moved runs: their probabilities move
        assert not np.array_equal(probs2[train], probs[train])


def test_a_held_out_run_in_the_fit_would_be_seen(rc: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above has the power to see a leak: folds that fit on every run (the held-out ones too) make the
    held-out runs' probabilities move with their truth."""
    samples = _library(rc)
    rc_folds = rc._folds
    leaky = lambda s: ((np.ones(len(s), dtype=bool), test) for _, test in rc_folds(s))  # noqa: E731
    monkeypatch.setattr(rc, "_folds", leaky)
    probs, _ = rc.cross_validate(samples, PLANTS, "pooled", "rows", rc.SET_RULE, family="plants")
    _, test = next(iter(rc_folds(samples)))
    truth = samples.truth.copy()
    truth[test] = np.roll(truth[test], 1, axis=1)
    probs2, _ = rc.cross_validate(dataclasses.replace(samples, truth=truth), PLANTS, "pooled", "rows", rc.SET_RULE,
                                  family="plants")  # fmt: skip
    assert not np.array_equal(probs2[test], probs[test])


def test_per_plant_terms_learn_what_the_features_cannot() -> None:
    """Three plants whose features differ only in the named one: when the named plant is wrong, the root is plant c
    three times in four. A map of the features cannot tell b from c; a map of the family plants learns c."""
    N = 40
    x = np.zeros((N, 3, len(FEATURES)))
    x[:, :, 0] = np.log([0.8, 0.1, 0.1])
    x[:, 0, FEATURES.index("named")] = 1.0
    truth = np.zeros((N, 3), dtype=bool)
    truth[: N // 2, 0] = True
    truth[N // 2 : N // 2 + 15, 2] = True
    truth[N // 2 + 15 :, 1] = True
    agnostic = fit(x, truth, np.ones(N), PLANTS)
    per_plant = fit(x, truth, np.ones(N), PLANTS, family="plants")
    p, q = agnostic.apply(x[0]), per_plant.apply(x[0])
    assert p[1] == pytest.approx(p[2])
    assert q[2] > q[1] + 0.1 and per_plant.family == "plants" and len(per_plant.weights) == len(FEATURES) + 9
    assert 0.4 < q[0] < 0.6 and 0.4 < p[0] < 0.6  # the named plant is right half of the time


def test_family_figures_score_both_families_and_the_per_plant_file_is_its_sites_alone(rc: ModuleType) -> None:
    samples = _library(rc)
    figures = {f: rc.family_figures(samples, PLANTS, 0.9, f, "pooled", "rows", rc.SET_RULE, "inner", {"library": "t"})
               for f in rc.FAMILIES}  # fmt: skip
    settings = ["fedrca-500-inf", "fedrca-2880-inf"]
    for family, fig in figures.items():
        assert list(fig.fold) == list(fig.file) == settings
        for setting in settings:
            sel = samples.setting == setting
            part = samples.where(sel)
            maps = [m for m, k in zip(fig.maps, sel, strict=True) if k]
            np.testing.assert_equal(fig.fold[setting], rc.score(part, fig.probs[sel], 0.9, maps))  # NaN: no run
            file_map = fig.calibration.select(*rc.setting_key(setting))
            assert file_map.family == family and fig.file_threshold[setting] == file_map.threshold(0.9)
            np.testing.assert_equal(fig.file[setting], rc.score(part, fig.probs[sel], 0.9, [file_map] * len(part)))
            bar = rc.family_bar(setting, fig)
            assert bar.startswith(f"{setting}, maps of family {family}: nested (map and threshold held out): holds ")
    # the two families' maps differ, on the same folds
    assert not np.allclose(figures["features"].probs, figures["plants"].probs)
    # the per-plant file: named for its family, fitted on every run of its training size, and its site's alone
    plants_file = figures["plants"].calibration
    assert [m.name for m in plants_file.maps] == ["tep-library-plants-rows500", "tep-library-plants-rows2880"]
    assert plants_file.fitted_on["family"] == "plants" and "family" not in figures["features"].calibration.fitted_on
    alone = rc._fit(samples.where(samples.setting == "fedrca-500-inf"), PLANTS, family="plants")
    assert plants_file.maps[0].weights == alone.weights
    again = CalibrationMaps.from_json(plants_file.to_json())
    assert again == plants_file and again.id == plants_file.id
    again.check(PLANTS)
    with pytest.raises(ArtifactError, match=r"per-plant map \(family plants\)"):
        again.check(("a", "b", "d"))
    with pytest.raises(ValueError, match="one of features, plants"):
        rc.family_figures(samples, PLANTS, 0.9, "raw")
