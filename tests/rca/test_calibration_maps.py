"""Calibration maps keyed by what a site knows of itself (rca/calibration.py ``CalibrationMaps``): the file, its checks,
and the map the RCA side picks from its plants' training rows (rca/engine.py ``build_engine``)."""

from __future__ import annotations

import json
import logging
import math
import re

import numpy as np
import pytest

from fedrca.application.site import load_calibration_map
from fedrca.config import load_config, parameters_hash, parse_config
from fedrca.contracts import NOMINAL_STATE_COUNTS, make_artifact
from fedrca.exceptions import ArtifactError, ConfigError
from fedrca.rca import build_engine
from fedrca.rca.calibration import FEATURES, CalibrationMap, CalibrationMaps
from fedrca.rca.engine import training_rows
from fedrca.streams.runtime import RCARuntime

PLANTS = ("plant1", "plant2")


def _map(name: str, temperature: float, plants: tuple[str, ...] = PLANTS) -> CalibrationMap:
    return CalibrationMap((temperature,) + (0.1,) * (len(FEATURES) - 1), plants, name=name,
                          thresholds=((0.9, 0.2),), rule="plant")  # fmt: skip


FEW, MANY = _map("few", 0.3), _map("many", 0.8)
BY_ROWS = CalibrationMaps((FEW, MANY), ({"training rows": (1, 1200)}, {"training rows": (1200, math.inf)}), "t")


def test_a_site_gets_the_map_of_its_training_rows_nearest_on_a_log_scale():
    # 500 and 2,880 rows fitted; the bound between them their geometric mean, 1,200: a site of 1,000 rows is nearer
    # 500 (a ratio of 2) than 2,880 (2.9)
    assert [BY_ROWS.select(n, math.inf).name for n in (1, 500, 1000, 1199, 1200, 2880, 10**7)] == [
        "few", "few", "few", "few", "many", "many", "many"]  # fmt: skip
    assert BY_ROWS.select(2880, 2.0) is MANY  # not keyed by the flag epsilon: every epsilon
    assert BY_ROWS.select(None, math.inf) is None  # keyed by rows, the rows unknown
    assert BY_ROWS.keyed_by("training rows") and not BY_ROWS.keyed_by("flag epsilon")
    one = CalibrationMaps.single(FEW)
    assert one.select(None, 2.0) is FEW and not one.keyed_by("training rows")


def test_maps_by_setting_are_keyed_by_rows_and_flag_epsilon():
    cells = [(r, e) for r in ((1, 1200), (1200, math.inf)) for e in ((0, 2.76), (2.76, math.inf))]
    maps = tuple(_map(f"m{i}", 0.2 + 0.1 * i) for i in range(4))
    by_setting = CalibrationMaps(maps, tuple({"training rows": r, "flag epsilon": e} for r, e in cells))
    assert by_setting.select(500, 2.0).name == "m0" and by_setting.select(500, math.inf).name == "m1"
    assert by_setting.select(2880, 1.0).name == "m2" and by_setting.select(2880, math.inf).name == "m3"
    assert by_setting.select(2880, 4.0).name == "m3"  # eps 4 flips 1.8 % of the flags: nearer inf than 2 (11.9 %)
    assert CalibrationMaps.from_json(by_setting.to_json()) == by_setting


def test_the_file_round_trips_and_a_file_of_one_map_is_read_as_one_map_for_every_site():
    data = json.loads(BY_ROWS.to_json())
    assert data["format"] == "fedrca-calibration-maps/1" and data["keys"] == ["training rows"]
    assert [m["training rows"] for m in data["maps"]] == [[1.0, 1200.0], [1200.0, None]]
    again = CalibrationMaps.from_json(BY_ROWS.to_json())
    assert again == BY_ROWS and again.id == BY_ROWS.id
    assert CalibrationMaps.from_json(FEW.to_json()) == CalibrationMaps.single(FEW)
    assert json.loads(CalibrationMaps.single(FEW).to_json()) == json.loads(FEW.to_json())  # written as before


def _edited(**entry: object) -> dict[str, object]:
    data = json.loads(BY_ROWS.to_json())
    data["maps"][1] = {**data["maps"][1], **entry}
    del data["id"]
    return data


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (_edited(**{"training rows": [1500, None]}), r"no map for a site of training rows 1200: .* cover every value"),
        (_edited(**{"training rows": [1200, 5000]}), r"no map for a site of training rows 5000: .*high null"),
        (_edited(**{"training rows": [1000, None]}), r"maps \[0, 1\] all serve a site of training rows 1000"),
        (_edited(**{"rows": [1200, None]}), r"maps\[1\]: unknown key\(s\) \['rows'\]; .* training rows, flag epsilon"),
        (_edited(**{"training rows": [1200, 1200]}), r"maps\[1\]: 'training rows' \[1200, 1200\] .* low < high"),
        (_edited(**{"training rows": "1200+"}), r"maps\[1\]: 'training rows' must be \[low, high\]"),
        (_edited(map={**FEW.to_dict(), "weights": [1.0]}), r"calibration maps\[1\]: calibration weights must be"),
        (_edited(map=_map("other", 0.5, ("a", "b")).to_dict()), r"maps of different plants"),
        ({"format": "fedrca-calibration-maps/1", "maps": []}, r"'maps' must be a non-empty list"),
        ({**json.loads(BY_ROWS.to_json()), "id": "t-000000000000"}, r"does not match its maps and ranges"),
        ({"format": "fedrca-calibration-maps/9"}, r"not a calibration map"),
    ],
)
def test_a_bad_file_is_refused_naming_the_key_and_the_fix(data, fragment):
    with pytest.raises(ArtifactError, match=fragment):
        CalibrationMaps.from_dict(data)


def test_training_rows_are_the_smallest_over_the_plants():
    flags = {"plant1": np.zeros((500, 2), int), "plant2": np.vstack([np.zeros((2879, 2), int), [[-1, -1]]])}
    assert training_rows(PLANTS, flags) == 500
    # the published counts (degraded rows out) give the same number as the flags they were made from
    counts = [np.bincount(np.zeros(n, int), minlength=4) for n in (2880, 2879)]
    assert training_rows(PLANTS, counts=counts) == 2879
    assert training_rows(PLANTS) is None


def _artifacts(config, rows: dict[str, int], version: int = 1):
    counts = {p: np.array([n - 6, 2, 2, 2]) for p, n in rows.items()}
    return {p: make_artifact(p, version, {NOMINAL_STATE_COUNTS: c}, config_hash=parameters_hash(config))
            for p, c in counts.items()}  # fmt: skip


def test_the_engine_takes_the_map_of_its_plants_training_rows_from_nominal_flags_or_published_counts(repo, caplog):
    config = load_config(repo / "config" / "synthetic.yaml")
    few = build_engine(config, artifacts=_artifacts(config, {"plant1": 500, "plant2": 2880}), calibration=BY_ROWS)
    assert few.calibration is FEW and few.training_rows == 500
    many = build_engine(config, artifacts=_artifacts(config, {"plant1": 2880, "plant2": 2880}), calibration=BY_ROWS)
    assert many.calibration is MANY
    local = build_engine(config, nominal_flags={p: np.zeros((500, 2), int) for p in PLANTS}, calibration=BY_ROWS)
    assert local.calibration is FEW  # the demo (nominal flags) and the worker (published counts) agree
    # no artifact, no nominal data: uncalibrated verdicts, said with the fix
    with caplog.at_level(logging.WARNING, logger="fedrca.rca"):
        blind = build_engine(config, calibration=BY_ROWS)
    assert blind.calibration is None and blind.calibrations == BY_ROWS
    assert "rca.calibration.training_rows" in caplog.text
    # the configured rows stand in until the plants publish; the published count wins over them
    base = config.model_dump(exclude={"source"})
    told = parse_config({**base, "rca": {**base["rca"], "calibration": {"training_rows": 3000}}})
    assert build_engine(told, calibration=BY_ROWS).calibration is MANY
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fedrca.rca"):
        published = build_engine(told, artifacts=_artifacts(told, {"plant1": 500, "plant2": 500}), calibration=BY_ROWS)
    assert published.calibration is FEW and "published parameters say 500 rows" in caplog.text
    # one map for every site needs no rows
    assert build_engine(config, calibration=FEW).calibration is FEW


def test_training_rows_of_the_configuration_are_validated(repo):
    base = load_config(repo / "config" / "synthetic.yaml").model_dump(exclude={"source"})
    with pytest.raises(ConfigError, match=r"rca\.calibration\.training_rows: .*greater than or equal to 1"):
        parse_config({**base, "rca": {**base["rca"], "calibration": {"training_rows": 0}}}, source="x.yaml")


def test_a_newly_published_artifact_of_another_training_size_switches_the_map(repo):
    config = load_config(repo / "config" / "synthetic.yaml")
    artifacts = _artifacts(config, {"plant1": 500, "plant2": 500})
    rca = RCARuntime(config, build_engine(config, artifacts=artifacts, calibration=BY_ROWS), artifacts=artifacts)
    assert rca.engine.calibration is FEW
    # the plants trained again on a longer history
    for plant, artifact in _artifacts(config, {"plant1": 2880, "plant2": 2880}, version=2).items():
        assert rca.offer_artifact(plant, artifact)
    assert rca.engine.calibration is MANY and rca.engine.training_rows == 2880


def _per_plant(plants: tuple[str, ...] = PLANTS, name: str = "site") -> CalibrationMap:
    """A map of the family plants: the features' weights, then per plant a bias, a ``named`` and a ``share`` term."""
    M = len(plants)
    per_plant = [0.4 * (j + 1) for j in range(M)] + [0.3] * M + [-0.2 * (j + 1) for j in range(M)]
    return CalibrationMap((0.8,) + (0.1,) * (len(FEATURES) - 1) + tuple(per_plant), plants, name=name,
                          thresholds=((0.9, 0.2),), rule="plant", family="plants")  # fmt: skip


def test_a_per_plant_map_round_trips_through_the_file_and_weighs_each_plant(tmp_path):
    site = _per_plant()
    data = json.loads(site.to_json())
    assert data["format"] == "fedrca-calibration/4" and data["family"] == "plants" and data["plants"] == list(PLANTS)
    again = CalibrationMap.from_json(site.to_json())
    assert again == site and again.id == site.id and again.family == "plants"
    # keyed by training rows, as the shipped file is
    maps = CalibrationMaps((site, _per_plant(name="site-many")), BY_ROWS.ranges, "site")
    assert CalibrationMaps.from_json(maps.to_json()) == maps
    (tmp_path / "site.calibration.json").write_text(maps.to_json(), encoding="utf-8")
    assert load_calibration_map(tmp_path / "site.calibration.json", PLANTS) == maps
    # its probabilities: the softmax of the features' logit plus each plant's terms (plant2 named, both sharing 0.5)
    x = np.zeros((2, len(FEATURES)))
    x[:, 0] = np.log([0.3, 0.7])
    x[1, FEATURES.index("named")] = 1.0
    x[:, FEATURES.index("share")] = 0.5
    w = np.asarray(site.weights)
    F = len(FEATURES)
    z = x @ w[:F] + w[F : F + 2] + x[:, FEATURES.index("named")] * w[F + 2 : F + 4] + 0.5 * w[F + 4 :]
    np.testing.assert_allclose(site.apply(x), np.exp(z) / np.exp(z).sum())
    agnostic = CalibrationMap(site.weights[:F], PLANTS)
    assert not np.allclose(site.apply(x), agnostic.apply(x))
    # many verdicts at once: each verdict's own
    block = np.stack([x, x[::-1]])
    np.testing.assert_allclose(site.apply(block), [site.apply(x), site.apply(x[::-1])])
    # the plant-agnostic maps are written as before families existed (the shipped file's id is checked on load)
    assert "family" not in json.loads(FEW.to_json()) and json.loads(FEW.to_json())["format"] == "fedrca-calibration/3"


def test_a_per_plant_map_is_refused_by_a_site_of_other_plants_naming_the_key_and_the_fix(repo, tmp_path):
    tep = _per_plant(("feed", "reactor", "separator", "stripper", "compressor"), name="tep")
    path = tmp_path / "tep.calibration.json"
    path.write_text(tep.to_json(), encoding="utf-8")
    for other in (PLANTS, ("reactor", "feed", "separator", "stripper", "compressor")):
        with pytest.raises(ArtifactError, match=r"per-plant map \(family plants\) .* do not carry to other plants"
                           r".*--family plants --calibration PATH.*rca\.calibration\.path"):  # fmt: skip
            tep.check(other)
        named = re.escape(f"{path}: calibration map tep-") + r"\w+ is a per-plant map"
        with pytest.raises(ArtifactError, match=named):
            load_calibration_map(path, other)
    load_calibration_map(path, tep.plants)  # its own site
    config = load_config(repo / "config" / "synthetic.yaml")
    with pytest.raises(ArtifactError, match=r"per-plant map"):
        build_engine(config, calibration=tep)
    assert build_engine(config, calibration=_per_plant()).calibration == _per_plant()


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        ({"weights": [0.1] * len(FEATURES)}, rf"weights must be {len(FEATURES) + 6} finite numbers \(.* per plant"),
        ({"format": "fedrca-calibration/3"}, r"family 'plants' in format fedrca-calibration/3; .* format .*/4"),
        ({"family": "sites"}, r"family 'sites': one of features, plants"),
    ],
)
def test_a_broken_per_plant_map_is_refused(edit, fragment):
    data = {**json.loads(_per_plant().to_json()), **edit}
    del data["id"]
    with pytest.raises(ArtifactError, match=fragment):
        CalibrationMap.from_dict(data)
