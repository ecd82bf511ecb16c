"""RCA settings from the free rca: section: defaults and errors that name the key."""

from __future__ import annotations

import pytest

from fedrca.config import load_config, parse_config, parse_rca_settings
from fedrca.exceptions import ConfigError
from fedrca.rca import build_engine


def test_defaults_and_overrides():
    s = parse_rca_settings({"horizon": 12, "separation": [0.3], "graph": {"alpha": 0.05}})
    assert (s.horizon, s.separation_for(False), s.graph.alpha, s.graph.source) == (12, (0.3,), 0.05, "auto")
    auto = parse_rca_settings(None)
    assert auto.separation_for(True) == (0.1, 0.5, 0.9) and auto.separation_for(False) == (0.0,)
    assert (auto.leak_for(False), auto.imperfect_for(False)) == (0.0, 0.0)  # Z_a equals Z_c untrained
    assert auto.unlisted_path_for("learned") > auto.unlisted_path_for("config")


@pytest.mark.parametrize(
    ("section", "key", "fragment"),
    [
        ({"horizon": 0}, "rca.horizon", "greater than or equal to 1"),
        ({"horizn": 5}, "rca.horizn", "valid keys are horizon"),
        ({"graph": {"source": "magic"}}, "rca.graph.source", "'auto', 'config', 'learned', 'complete' or 'file'"),
        ({"graph": {"alhpa": 0.1}}, "rca.graph.alhpa", "valid keys are source, alpha, path"),
        ({"separation": 1.5}, "rca.separation", "'auto' or a list of probabilities"),
        ({"separation": [0.2, 1.5]}, "rca.separation", "'auto' or a list of probabilities"),
        ({"unlisted_path": "some"}, "rca.unlisted_path", "'auto' or a probability"),
        ({"visibility": [0.0]}, "rca.visibility", "probabilities in"),
        ({"min_posterior": 0.2}, "rca.min_posterior", "greater than or equal to 0.5"),
        ({"unobserved_weight": 1.0}, "rca.unobserved_weight", "less than 1"),
        ({"unobserved_entry": "feed"}, "rca.unobserved_entry", "valid list"),
        ("fast", "rca", "mapping"),
    ],
)
def test_errors_name_the_key(section, key, fragment):
    with pytest.raises(ConfigError, match=fragment) as info:
        parse_rca_settings(section, source="site.yaml")
    assert info.value.key == key and str(info.value).startswith(f"site.yaml: {key}:")


def test_the_rca_section_is_validated_with_the_configuration(repo):
    base = load_config(repo / "config/synthetic.yaml").model_dump(exclude={"source"})
    with pytest.raises(ConfigError, match=r"x\.yaml: rca\.horizon"):
        parse_config({**base, "rca": {"horizon": -3}}, source="x.yaml")
    engine = build_engine(parse_config({**base, "rca": {"horizon": 9}}))
    assert engine.horizon == 9 and engine.graph.source == "config" and engine.graph.edges() == [("plant1", "plant2")]
    with pytest.raises(ConfigError, match=r"x\.yaml: rca\.unobserved_entry\[0\]: unknown plant 'feed'"):
        parse_config({**base, "rca": {"unobserved_entry": ["feed"]}}, source="x.yaml")
    unseen = build_engine(parse_config({**base, "rca": {"unobserved_entry": ["plant1"]}}))
    assert unseen.settings.unobserved_entry == ["plant1"]
    forced = build_engine(parse_config({**base, "rca": {"graph": {"source": "complete"}}}))
    assert forced.graph.source == "complete"
    with pytest.raises(ConfigError, match=r"rca\.graph\.source: .*graph\.edges"):
        tep = load_config(repo / "config/tep.yaml").model_dump(exclude={"source"})
        parse_config({**tep, "rca": {"graph": {"source": "config"}}})
