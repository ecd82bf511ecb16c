"""The fault library's calibration figures (``bench/rca_calibration.py``): what one map and one set threshold are
fitted for in the cross-validation (``bench/bench_faults.py --maps``, ``--set-thresholds``). All of it runs in
``make exhaustive``: these are ablations of a docs figure, and ``make test``'s smoke run of ``bench_faults`` covers the
pooled path the shipped map takes."""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pytest

from fedrca.rca.calibration import FEATURES
from tests.bench.smoke import BENCH

pytestmark = pytest.mark.exhaustive


@pytest.fixture
def rc(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))
    import rca_calibration

    return rca_calibration


def test_threshold_key_names_the_part_of_the_library(rc: ModuleType) -> None:
    assert rc.threshold_key("fedrca-2880-inf", "pooled") == rc.threshold_key("fedrca-500-2", "pooled")
    assert rc.threshold_key("fedrca-2880-inf", "rows") == rc.threshold_key("fedrca-2880-2", "rows") == "2880"
    assert rc.threshold_key("fedrca-500-2", "rows") == "500"
    assert rc.threshold_key("fedrca-500-2", "setting") != rc.threshold_key("fedrca-500-inf", "setting")
    assert rc.threshold_key("fedrca-500-2", "setting-shrunk") == rc.threshold_key("fedrca-500-2", "setting")
    with pytest.raises(ValueError, match="one of pooled, rows, setting, rows-shrunk, setting-shrunk"):
        rc.threshold_key("fedrca-500-2", "epsilon")


def _library(rc: ModuleType) -> object:
    """Two settings, 3 fault seeds x 8 IDVs x 3 verdicts each, 3 plants: at 2,880 rows the engine's favourite is
    always the root, at 500 rows only in two runs of three (then the second plant is)."""
    rng = np.random.default_rng(7)
    rows: list[tuple[object, ...]] = []
    run = 0
    for setting in ("fedrca-2880-inf", "fedrca-500-inf"):
        for seed in (100, 101, 102):
            for idv in range(1, 9):
                wrong = setting.endswith("500-inf") and (idv + seed) % 3 == 0
                for _ in range(3):
                    x = np.zeros((3, len(FEATURES)))
                    x[:, 0] = np.log(np.array([0.7, 0.2, 0.1]) + rng.uniform(0, 0.05, 3))
                    x[0, FEATURES.index("named")] = 1.0
                    rows.append((x, np.array([not wrong, wrong, False]), 0, 1 / 3, run, setting, idv, seed))
                run += 1
    return rc.Samples.from_rows(rows)


def test_maps_and_thresholds_per_part_of_the_library(rc: ModuleType) -> None:
    samples = _library(rc)
    plants = ("a", "b", "c")
    at_500 = samples.setting == "fedrca-500-inf"
    ablations = (
        ("pooled", "pooled"),
        ("rows", "pooled"),
        ("rows-shrunk", "pooled"),
        ("setting-shrunk", "pooled"),
        ("pooled", "rows"),
    )
    for maps_by, thresholds_by in ablations:
        probs, maps = rc.cross_validate(samples, plants, thresholds_by, maps_by)
        # every verdict's probabilities are its map's
        for i in range(len(samples)):
            np.testing.assert_allclose(probs[i], maps[i].apply(samples.x[i]))
        fold = (samples.seed == 100) & (samples.idv % 4 == 1)
        first_2880, first_500 = np.flatnonzero(fold & ~at_500)[0], np.flatnonzero(fold & at_500)[0]
        same_map = maps[first_2880].weights == maps[first_500].weights
        same_thresholds = maps[first_2880].threshold(0.9) == maps[first_500].threshold(0.9)
        # a map or a threshold per training size differs between them (the 500-row runs name a wrong root in one
        # run of three, the 2,880-row ones never); pooled, one serves both
        assert same_map == (maps_by == "pooled"), maps_by
        assert same_thresholds == (thresholds_by == "pooled"), thresholds_by
    # a threshold per training size: the 2,880-row sets are the named root alone, whatever the set rule
    for rule in ("mass", "plant"):
        probs, maps = rc.cross_validate(samples, plants, "rows", "pooled", rule)
        for i in np.flatnonzero(~at_500):
            assert maps[i].rule == rule and maps[i].candidates(probs[i], 0.9, int(samples.root[i])) == [samples.root[i]]


def test_an_ablation_is_not_written_as_the_shipped_map(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    import bench_faults

    # a file's map has one threshold table: thresholds finer than the maps make no file; the set rule is fixed
    for flags in (("--maps", "pooled", "--set-thresholds", "rows"), ("--maps", "rows", "--set-thresholds", "setting"),
                  ("--set-rule", "mass")):  # fmt: skip
        with pytest.raises(SystemExit) as exc:
            bench_faults.main([*flags, "--calibration", "map.json", "--load-outputs", "none.pkl"])
        assert exc.value.code == 2
        assert "leave out --calibration" in capsys.readouterr().err


def test_the_shipped_maps_are_one_per_training_size_each_fitted_on_its_own_runs(rc: ModuleType) -> None:
    from fedrca.rca.calibration import CalibrationMaps

    samples = _library(rc)
    plants = ("a", "b", "c")
    probs, _ = rc.cross_validate(samples, plants, "pooled", "rows")
    maps = rc.final_maps(samples, plants, {"cross-validated": {}}, {"library": "test"}, probs, rc.SET_RULE, "rows",
                         "pooled")  # fmt: skip
    assert [m.name for m in maps.maps] == ["tep-library-rows500", "tep-library-rows2880"]
    assert maps.ranges == ({"training rows": (1.0, 1200.0)}, {"training rows": (1200.0, float("inf"))})
    one_table = rc._thresholds(samples, probs, "pooled", rc.SET_RULE)["all"]
    for m, setting in zip(maps.maps, ("fedrca-500-inf", "fedrca-2880-inf"), strict=True):
        alone = rc._fit(samples.where(samples.setting == setting), plants)
        assert m.weights == alone.weights and m.thresholds == one_table and m.rule == rc.SET_RULE
        assert m.fitted_on["training rows"] == rc.setting_key(setting)[0]
    assert maps.select(1000, float("inf")) is maps.maps[0] and maps.select(2880, 2.0) is maps.maps[1]
    assert CalibrationMaps.from_json(maps.to_json()) == maps
    # pooled: one map for every site, fitted on every run, written as the map itself (the format of one map)
    pooled = rc.final_maps(samples, plants, {}, {}, probs, rc.SET_RULE)
    assert len(pooled.maps) == 1 and pooled.maps[0].weights == rc._fit(samples, plants).weights
    assert pooled.maps[0].thresholds == one_table and '"format": "fedrca-calibration/3"' in pooled.to_json()


def test_shared_inner_fits_are_the_fits_of_each_fold(rc: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """The nested cross-validation fits each set of runs once (inner folds of different outer folds that leave out
    the same two seeds and IDV groups share their map), and gives the probabilities and thresholds of fitting every
    (outer, inner) fold on its own."""
    samples = _library(rc)
    plants = ("a", "b", "c")
    fitted = []
    real = rc._fit_keyed
    monkeypatch.setattr(rc, "_fit_keyed", lambda s, p, by, family="features": fitted.append(len(s)) or real(
        s, p, by, family))  # fmt: skip
    probs, maps = rc.cross_validate(samples, plants, "setting", "pooled")
    # 3 seeds x 4 IDV groups held out in turn; inside each, 2 seeds x 3 groups: 12 + 12 x 6 fits on their own, and
    # 12 + 3 x 6 distinct sets of runs (the outer folds, then each pair of seeds x pair of groups left out)
    assert len(fitted) == 12 + 3 * 6
    for train, test in rc._folds(samples):
        inside, outside = samples.where(train), samples.where(test)
        alone = real(inside, plants, "pooled")
        np.testing.assert_array_equal(probs[test], rc._apply_keyed(alone, outside, "pooled"))
        inner = np.full(inside.truth.shape, np.nan)
        for tr2, te2 in rc._folds(inside):
            inner[te2] = rc._apply_keyed(real(inside.where(tr2), plants, "pooled"), inside.where(te2), "pooled")
        table = rc._thresholds(inside, inner, "setting", rc.SET_RULE)
        for i in np.flatnonzero(test):
            assert maps[i].thresholds == table[samples.setting[i]]


def test_maps_per_setting_shrunk_toward_their_training_size(rc: ModuleType) -> None:
    """``setting-shrunk``: one map per setting, those of one training size fitted together (a map of the size plus one
    difference per flag epsilon), those of another size apart; the file keys them by both."""
    library = _library(rc)
    # the runs once more at the other training size and flag epsilon 2: at 500 rows, eps 2 the favourite is always
    # the root, at 2,880 rows, eps 2 only in two runs of three
    other = {"fedrca-2880-inf": "fedrca-500-2", "fedrca-500-inf": "fedrca-2880-2"}
    copy = np.array([other[str(s)] for s in library.setting])
    samples = rc.Samples(*(np.concatenate([getattr(library, f), copy if f == "setting" else getattr(library, f)])
                           for f in library.__dataclass_fields__))  # fmt: skip
    plants = ("a", "b", "c")
    fitted = rc._fit_keyed(samples, plants, "setting-shrunk")
    assert sorted(fitted) == ["fedrca-2880-2", "fedrca-2880-inf", "fedrca-500-2", "fedrca-500-inf"]
    # the two flag epsilons of one size have their own maps (one names a wrong root in a run of three, one never)
    assert fitted["fedrca-500-2"].weights != fitted["fedrca-500-inf"].weights
    # a training size's maps are fitted on its own runs alone
    for size in ("500", "2880"):
        mine = np.array([rc.threshold_key(str(s), "rows") == size for s in samples.setting])
        alone = rc._fit_keyed(samples.where(mine), plants, "setting-shrunk")
        assert sorted(alone) == [f"fedrca-{size}-2", f"fedrca-{size}-inf"]
        assert all(alone[k].weights == fitted[k].weights for k in alone)
    probs, _ = rc.cross_validate(samples, plants, "pooled", "setting-shrunk")
    maps = rc.final_maps(samples, plants, {"cross-validated": {}}, {"library": "test"}, probs, rc.SET_RULE,
                         "setting-shrunk", "pooled")  # fmt: skip
    assert [m.name for m in maps.maps] == ["tep-library-rows500-eps2", "tep-library-rows500-epsinf",
                                           "tep-library-rows2880-eps2", "tep-library-rows2880-epsinf"]  # fmt: skip
    for i, (rows, eps) in enumerate(((500, 2.0), (500, float("inf")), (2880, 2.0), (2880, float("inf")))):
        assert maps.select(rows, eps) is maps.maps[i]


def test_the_shipped_thresholds_are_fitted_on_every_inner_fold_of_the_nested_cross_validation(rc: ModuleType) -> None:
    """The file's set thresholds come from the maps the cross-validated figures' thresholds come from (each fitted
    without two seeds and two IDV groups): every (outer, inner) fold's out-of-fold probabilities searched at once,
    as fit_thresholds on all of them together; each fold's own thresholds are the search of its part alone."""
    from fedrca.rca.calibration import fit_thresholds, thresholds_of_coverage

    samples = _library(rc)
    plants = ("a", "b", "c")
    inner: list = []
    probs, maps = rc.cross_validate(samples, plants, "pooled", "rows", inner=inner)
    folds = list(rc._folds(samples))
    assert len(inner) == len(folds)
    together: dict[str, list[np.ndarray]] = {k: [] for k in ("probs", "truth", "root", "weight", "setting")}
    for (train, test), table in zip(folds, inner, strict=True):
        inside = samples.where(train)
        for tr2, te2 in rc._folds(inside):
            part = inside.where(te2)
            together["probs"].append(rc._apply_keyed(rc._fit_keyed(inside.where(tr2), plants, "rows"), part, "rows"))
            for k in ("truth", "root", "weight", "setting"):
                together[k].append(getattr(part, k))
        assert maps[np.flatnonzero(test)[0]].thresholds == thresholds_of_coverage(table, rc.LEVELS, rule=rc.SET_RULE)
    P, T, R, W, G = (np.concatenate(together[k]) for k in ("probs", "truth", "root", "weight", "setting"))
    expected = fit_thresholds(P, T, R, W, groups=G, levels=rc.LEVELS, rule=rc.SET_RULE)
    shipped = rc.final_maps(samples, plants, {}, {}, probs, rc.SET_RULE, "rows", "pooled", inner)
    assert [m.thresholds for m in shipped.maps] == [expected, expected]
    # without the inner folds' tables: the out-of-fold probabilities' thresholds (what shipped before)
    outer = rc.final_maps(samples, plants, {}, {}, probs, rc.SET_RULE, "rows", "pooled")
    assert [m.thresholds for m in outer.maps] == [rc._thresholds(samples, probs, "pooled", rc.SET_RULE)["all"]] * 2
    assert [m.weights for m in outer.maps] == [m.weights for m in shipped.maps]
