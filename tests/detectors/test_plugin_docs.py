"""docs/plugins.md is enough to write a detector: its example, copied out of the page, passes
check_detector and runs in `fedrca replay` through the configuration the page shows."""

from __future__ import annotations

import json
import sys

import pytest
import yaml

from fedrca.cli import main
from fedrca.config import parse_config
from fedrca.contracts import Verdict
from fedrca.detectors.factory import build_plugin_detector
from fedrca.exceptions import ConfigError
from tests.detectors import doc_plugin


@pytest.fixture
def plugin_on_path(tmp_path, monkeypatch):
    """The example saved as my_detector.py in a folder on Python's path (imported afresh from the file)."""
    (tmp_path / "my_detector.py").write_text(doc_plugin.example_source(), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_detector", raising=False)
    return tmp_path


def _site(repo, detector: dict, plant: str = "reactor") -> dict:
    """config/tep.yaml with ``plant`` running ``detector``."""
    data = yaml.safe_load((repo / "config/tep.yaml").read_text(encoding="utf-8"))
    for entry in data["plants"]:
        if entry["name"] == plant:
            entry["detector"] = detector
    return data


def test_the_documented_example_passes_check_detector(plugin_on_path, capsys):
    exec(compile(doc_plugin.check_snippet(), "docs/plugins.md", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 2 and all("'calibration'" in line for line in printed)


def test_the_documented_plugin_runs_in_replay_and_its_plant_is_named(repo, plugin_on_path, capsys):
    detector = doc_plugin.config_snippet()
    assert detector["kind"] == "plugin" and detector["plugin"] == "my_detector:ZScore"
    config = plugin_on_path / "site.yaml"
    config.write_text(yaml.safe_dump(_site(repo, detector)), encoding="utf-8")
    flags, verdicts = plugin_on_path / "f.jsonl", plugin_on_path / "v.jsonl"
    code = main(
        [
            "replay",
            "--config",
            str(config),
            "--train",
            str(repo / "data/tep/d00.dat"),
            "--input",
            str(repo / "data/tep/d04_te.dat"),
            "--flags-out",
            str(flags),
            "--verdicts-out",
            str(verdicts),
        ]
    )
    assert code == 0, capsys.readouterr().err
    rows = [json.loads(line) for line in flags.read_text().splitlines()]
    assert len(rows) == 960 * 5
    reactor = [r for r in rows if r["plant"] == "reactor"]
    assert len(reactor) == 960 and all(r["za"] == r["zc"] for r in reactor)  # one model: Z_a is Z_c
    # fault 04 (reactor cooling water) starts at row 160: the plug-in raises the reactor's flag after it only
    assert sum(r["zc"] for r in reactor[:160]) <= 8
    assert sum(r["zc"] for r in reactor[160:]) > 0.9 * 800
    out = [json.loads(line) for line in verdicts.read_text().splitlines()]
    assert out and all(Verdict.from_dict(v).to_dict() == v for v in out)
    named = [v["root_cause"] for v in out if v["seq"] >= 160]
    assert named.count("reactor") > len(named) / 2


def test_a_plugin_that_cannot_be_built_is_a_configuration_error_naming_the_key(repo, plugin_on_path):
    for detector, fragment, key in [
        ({"kind": "plugin", "plugin": "no_such_module:ZScore"}, "cannot import module", "plugin"),
        ({"kind": "plugin", "plugin": "my_detector:Missing"}, "has no attribute 'Missing'", "plugin"),
        ({"kind": "plugin", "plugin": "my_detector:ZScore", "plugin_args": {"ewmaa": 0.2}}, "ewmaa", "plugin"),
        ({"kind": "plugin", "plugin": "json:loads"}, "failed when called", "plugin"),
        ({"kind": "plugin", "plugin": "my_detector:ZScore", "plugin_args": {"seed": 3}}, "given by", "plugin_args"),
    ]:
        config = parse_config(_site(repo, detector), source="site.yaml")
        with pytest.raises(ConfigError, match=fragment) as caught:
            build_plugin_detector(config, config.plant("reactor"))
        assert caught.value.key == f"plants[1].detector.{key}"


def test_a_plugin_returning_something_else_than_a_detector_is_refused(repo):
    config = parse_config(_site(repo, {"kind": "plugin", "plugin": "collections:OrderedDict"}), source="site.yaml")
    with pytest.raises(ConfigError, match=r"not a fedrca\.detectors\.Detector"):
        build_plugin_detector(config, config.plant("reactor"))


@pytest.mark.parametrize(
    ("detector", "fragment"),
    [
        ({"kind": "plugin"}, "needs plugin"),
        ({"kind": "plant", "plugin": "my_detector:ZScore"}, "belong to a plug-in detector"),
        ({"kind": "plugin", "plugin": "my detector"}, "is not a reference"),
        ({"kind": "plugin", "plugin": "my_detector:ZScore", "ewma": 0.2}, "belongs to the fleet detector"),
    ],
)
def test_plugin_settings_are_checked_when_the_configuration_is_read(repo, detector, fragment):
    with pytest.raises(ConfigError, match=fragment):
        parse_config(_site(repo, detector), source="site.yaml")


def test_the_site_hands_the_plugin_its_name_budget_and_seed(repo, plugin_on_path):
    data = _site(repo, doc_plugin.config_snippet())
    data["privacy"]["flag_epsilon"] = 1.5
    config = parse_config(data, source="site.yaml")
    det = build_plugin_detector(config, config.plant("reactor"))
    assert (det.name, det.epsilon, det.seed, det.ewma) == ("reactor", 1.5, 1, 0.2)
