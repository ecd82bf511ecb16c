"""Plant grouping by config rules (prefix / regex): validation, resolution against a file, site wiring."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from fedrca.config import ColumnMatch, group_columns, load_config, parse_config, resolve_plants
from fedrca.datasets import load_hai, load_swat
from fedrca.datasets.loader import load_frame, plant_frames
from fedrca.exceptions import ConfigError

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "data" / "samples"


def site(*plants, **extra):
    return {"site": "s", "plants": list(plants), **extra}


def test_shipped_hai_and_swat_configs_resolve_against_the_samples():
    hai = load_config(REPO / "config" / "hai.yaml")
    assert not hai.resolved and hai.plant_names == ["boiler", "turbine", "water", "hil"]
    columns = load_hai(SAMPLES / "hai" / "hai-21.03-test1.csv").columns
    resolved = resolve_plants(hai, columns)
    assert resolved.resolved
    for plant, prefix in zip(resolved.plants, ("P1_", "P2_", "P3_", "P4_")):
        assert plant.sensors == [c for c in columns if c.startswith(prefix)]
        assert plant.match is None
    assert sum(len(p.sensors) for p in resolved.plants) == len(columns)
    swat = load_config(REPO / "config" / "swat.yaml")
    columns = load_swat(SAMPLES / "swat" / "SWaT_Dataset_Attack_v0-sample.csv").columns
    stages = resolve_plants(swat, columns)
    assert stages.plant("raw_water").sensors == ["FIT101", "LIT101", "MV101", "P101", "P102"]
    assert stages.plant("backwash").sensors == ["FIT601", "P601", "P602", "P603"]
    assert stages.plant("ultrafiltration").sensors[0] == "DPIT301"
    assert sum(len(p.sensors) for p in stages.plants) == 51


def test_the_same_hai_config_reads_every_layout():
    hai = load_config(REPO / "config" / "hai.yaml")
    sizes = {}
    for name in ("hai-20.07-test1.csv", "hai-21.03-test1.csv", "hai-22.04-test1.csv", "hai-23.05-test1.csv"):
        frame = load_frame(hai, SAMPLES / "hai" / name)
        data = plant_frames(hai, frame, name)
        sizes[name] = {p: d.Y.shape for p, d in data.items()}
        p3 = [c for c in frame.columns if c.startswith("P3_")]
        np.testing.assert_array_equal(data["water"].Y, frame[p3].to_numpy())
    assert sizes["hai-20.07-test1.csv"]["boiler"] == (120, 31)
    assert sizes["hai-21.03-test1.csv"]["boiler"] == (120, 38)
    assert sizes["hai-22.04-test1.csv"]["boiler"] == (120, 44)
    # 23.05: 37 P1_ tags and the seven x10NN_ outputs of the boiler's DCS
    assert sizes["hai-23.05-test1.csv"]["boiler"] == (120, 44)
    assert sizes["hai-23.05-test1.csv"]["turbine"] == (120, 24)


def test_explicit_columns_are_never_taken_by_a_rule_and_exclude_drops_columns():
    cfg = parse_config(
        site(
            {"name": "a", "sensors": ["P1_LIT01"]},
            {"name": "b", "match": {"prefix": "P1_", "exclude": ["P1_PP01AD"]}, "inputs": ["P1_FCV01D"]},
        )
    )
    out = resolve_plants(cfg, ["P1_FCV01D", "P1_LIT01", "P1_PP01AD", "P1_FT01", "P1_TIT01"])
    assert out.plant("a").sensors == ["P1_LIT01"]
    assert out.plant("b").sensors == ["P1_FT01", "P1_TIT01"]
    assert out.plant("b").inputs == ["P1_FCV01D"]


def test_config_with_known_columns_is_resolved_at_load():
    cfg = parse_config(
        site(
            {"name": "a", "match": {"regex": r"^x\d$"}},
            {"name": "b", "match": {"regex": r"^y"}},
            dataset={"columns": ["x1", "y1", "x2", "y2", "z"]},
        )
    )
    assert cfg.resolved and cfg.plant("a").sensors == ["x1", "x2"] and cfg.plant("b").sensors == ["y1", "y2"]


@pytest.mark.parametrize(
    ("plants", "key", "fragment"),
    [
        ([{"name": "a"}], "plants[0]", "give the sensor columns (sensors: [...]) or a rule"),
        ([{"name": "a", "sensors": ["x"], "match": {"prefix": "x"}}], "plants[0]", "not both"),
        ([{"name": "a", "match": {}}], "plants[0].match", "exactly one of prefix"),
        ([{"name": "a", "match": {"prefix": "x", "regex": "y"}}], "plants[0].match", "exactly one of prefix"),
        ([{"name": "a", "match": {"regex": "(["}}], "plants[0].match", "does not compile"),
        ([{"name": "a", "match": {"prefx": "x"}}], "plants[0].match.prefx", "unknown key"),
    ],
)
def test_rule_errors_name_the_key(tmp_path, plants, key, fragment):
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(site(*plants)))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert err.value.key == key
    assert fragment in str(err.value)
    assert str(err.value).startswith(f"{path}: {key}: ")


def test_resolution_errors_name_the_plant_rule_and_columns(tmp_path):
    path = tmp_path / "site.yaml"
    path.write_text(
        yaml.safe_dump(site({"name": "a", "match": {"prefix": "P1_"}}, {"name": "b", "match": {"regex": "FT"}}))
    )
    cfg = load_config(path)
    with pytest.raises(ConfigError) as err:
        resolve_plants(cfg, ["P1_FT01", "P2_SIT01"])
    assert str(err.value) == (
        f"{path}: plants[1].match: column 'P1_FT01' matches the rules of plants 'a' and 'b'; "
        "narrow one rule or add the column to its exclude list"
    )
    with pytest.raises(ConfigError) as err:
        resolve_plants(cfg, ["P1_LIT01", "P2_SIT01", "P2_SIT02"])
    assert str(err.value) == (
        f"{path}: plants[1].match: rule {{regex: 'FT'}} of plant 'b' selects no column; "
        "the data has P1_LIT01, P2_SIT01..P2_SIT02"
    )


def test_group_columns_keeps_file_order():
    rules = {"s1": ColumnMatch(regex=r"^[A-Z]+1\d\d$"), "s2": {"regex": r"^[A-Z]+2\d\d$"}}
    columns = ["LIT101", "AIT201", "FIT101", "P201", "FIT301"]
    assert group_columns(columns, rules) == {"s1": ["LIT101", "FIT101"], "s2": ["AIT201", "P201"]}
    with pytest.raises(ConfigError, match="exactly one of prefix"):
        group_columns(columns, {"s1": {"exclude": ["x"]}})
