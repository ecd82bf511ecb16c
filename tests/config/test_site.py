"""Configuration: shipped files load; every error names file, key path and the fix."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from fedrca.config import compress_columns, load_config, parse_config
from fedrca.exceptions import ConfigError

REPO = Path(__file__).resolve().parents[2]


def tep_dict():
    return yaml.safe_load((REPO / "config" / "tep.yaml").read_text())


def write(tmp_path, data, name="site.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def test_shipped_configs_load():
    tep = load_config(REPO / "config" / "tep.yaml")
    assert tep.plant_names == ["feed", "reactor", "separator", "stripper", "compressor"]
    assert sum(len(p.sensors) for p in tep.plants) == 52
    assert tep.plant("separator").scoring.method == "family"  # defaults merged
    assert tep.plant("separator").scoring.ewma == [0.1, 0.05]
    assert math.isinf(tep.privacy.flag_epsilon)
    assert tep.topic("sensors", plant="feed") == "tep.sensors.feed"
    assert tep.topic("deadletter") == "tep.deadletter"
    syn = load_config(REPO / "config" / "synthetic.yaml")
    assert syn.plants[1].augmentation.features == "rff" and syn.graph.edges == [("plant1", "plant2")]


def test_unknown_column_message_is_exact(tmp_path):
    data = tep_dict()
    data["plants"][2]["sensors"][3] = "XMEAS(44)"
    path = write(tmp_path, data)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == (
        f"{path}: plants[2].sensors[3]: unknown column 'XMEAS(44)'; columns are XMEAS(1)..XMEAS(41), XMV(1)..XMV(11)"
    )


@pytest.mark.parametrize(
    ("mutate", "key", "fragment"),
    [
        (
            lambda d: d["defaults"]["augmentation"].update(features="poly"),
            "plants[0].augmentation.features",
            "'identity' or 'rff'",
        ),
        (
            lambda d: d["plants"][1]["model"].update({"energy": 1.5}),
            "plants[1].model.energy",
            "less than or equal to 1",
        ),
        (lambda d: d["plants"][0].update(sensros=["x"]), "plants[0].sensros", "unknown key"),
        (lambda d: d.pop("site"), "site", "Field required"),
        (lambda d: d["privacy"].update(flag_epsilon=-1), "privacy.flag_epsilon", "greater than 0"),
        (lambda d: d["privacy"].update(window=0), "privacy.window", "greater than or equal to 1"),
        (lambda d: d["privacy"].update(on_exhausted="ignore"), "privacy.on_exhausted", "'warn' or 'stop'"),
        (lambda d: d["privacy"].update(budget=0), "privacy.budget", "greater than 0"),
        (
            lambda d: d["plants"][4]["sensors"].append("XMEAS(1)"),
            "plants[4].sensors[13]",
            "already used by plant 'feed'",
        ),
        (lambda d: d.update(graph={"edges": [["feed", "boiler"]]}), "graph.edges[0]", "unknown plant 'boiler'"),
        (lambda d: d["plants"][0].setdefault("model", {}).update(kind="plugin"), "plants[0].model", "needs plugin"),
        (lambda d: d.update(defaults={"modle": {}}), "defaults", "unknown section"),
    ],
)
def test_errors_name_file_key_and_fix(tmp_path, mutate, key, fragment):
    data = tep_dict()
    data["plants"][1]["model"] = {}
    mutate(data)
    path = write(tmp_path, data)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert err.value.source == str(path)
    assert err.value.key == key
    assert fragment in str(err.value)
    assert str(err.value).startswith(f"{path}: {key}: ")


def test_file_and_yaml_errors(tmp_path):
    with pytest.raises(ConfigError, match="no such configuration file"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("site: tep\nplants: [\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: line \d+, column \d+: not valid YAML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="must be a mapping"):
        parse_config(["not", "a", "mapping"], source="x.yaml")


def test_flag_epsilon_accepts_inf_spellings():
    base = {"site": "s", "dataset": {"columns": ["a"]}, "plants": [{"name": "p", "sensors": ["a"]}]}
    for spelling in ("inf", ".inf", "off"):
        cfg = parse_config({**base, "privacy": {"flag_epsilon": spelling}})
        assert math.isinf(cfg.privacy.flag_epsilon)
    assert parse_config({**base, "privacy": {"flag_epsilon": 2}}).privacy.flag_epsilon == 2.0


def test_drift_durations_count_only_when_the_loop_runs():
    """A fast site (0.2 s samples, an OPC UA plant) loads with the drift defaults while the loop is off; turned
    on, its default 2-week history is refused naming the key."""
    plants = [{"name": "p", "sensors": ["a"]}]
    base = {"site": "s", "dataset": {"columns": ["a"], "sample_seconds": 0.2}, "plants": plants}
    assert not parse_config(base).drift.enabled
    with pytest.raises(ConfigError, match=r"drift: history .* must be at most"):
        parse_config({**base, "drift": {"enabled": True}})


def test_compress_columns_handles_gaps():
    assert compress_columns(["a1", "a2", "a4", "b"]) == "a1..a2, a4, b"


def test_a_control_column_may_be_its_plants_sensor_and_input_but_nothing_more(tmp_path):
    tep = load_config(REPO / "config" / "tep.yaml")
    # the shipped TEP site: every XMV is its plant's input and stays its sensor
    assert tep.plant("reactor").inputs == ["XMV(10)"] and "XMV(10)" in tep.plant("reactor").sensors
    assert sorted(c for p in tep.plants for c in p.inputs) == sorted(f"XMV({k})" for k in range(1, 12))
    assert tep.plant("reactor").model.use_inputs is False
    for mutate, key in [
        (lambda d: d["plants"][0]["inputs"].append("XMV(10)"), "plants[1].sensors[11]"),  # the reactor's valve
        (lambda d: d["plants"][1]["inputs"].append("XMV(10)"), "plants[1].inputs[1]"),  # twice an input
        (lambda d: d["plants"][1]["inputs"].append("XMEAS(1)"), "plants[1].inputs[1]"),  # the feed's sensor
    ]:
        data = tep_dict()
        mutate(data)
        path = write(tmp_path, data)
        with pytest.raises(ConfigError) as err:
            load_config(path)
        assert str(err.value).startswith(f"{path}: {key}: column ") and "already used by plant" in str(err.value)


def test_severity_levels_with_a_finite_privacy_budget_are_refused():
    # the ledger composes the flags' randomized-response bits, not the levels' k-ary release
    data = yaml.safe_load((REPO / "config" / "tep.yaml").read_text())
    assert data["defaults"]["scoring"]["severity_levels"] > 0
    parse_config(data)  # budget inf: accepted
    data["privacy"]["budget"] = 8.0
    with pytest.raises(ConfigError, match=r"privacy\.budget.*severity levels are not accounted"):
        parse_config(data)
    data["defaults"]["scoring"]["severity_levels"] = 0
    assert parse_config(data).privacy.budget == 8.0
