"""The edge: section: tag maps resolve against the plants; every error names its key and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fedrca.config import load_config, parse_config
from fedrca.config.edge import parse_node_id
from fedrca.edge.tags import TagMap
from fedrca.exceptions import ConfigError

REPO = Path(__file__).resolve().parents[2]


def site(edge):
    return {
        "site": "s",
        "plants": [{"name": "boiler", "sensors": ["a", "b"]}, {"name": "turbine", "sensors": ["c"]}],
        "edge": edge,
    }


SRC = {"plc": {"kind": "opcua", "url": "opc.tcp://127.0.0.1:4840", "namespace": "urn:x"}}


def test_tep_tag_map_covers_every_column():
    config = load_config(REPO / "config" / "tep.yaml")
    tags = TagMap(config, config.plant_names)
    assert len(tags) == 52 and tags.sources() == ["tep-sim"]
    assert tags.of_plant("reactor")[0].address.node == "s=XMEAS(6)"


def test_tags_template_shorthand_class_and_scale():
    config = parse_config(site({
        "sources": SRC,
        "plants": {
            "boiler": {"tags": {"a": "nsu=urn:y;s=A", "b": {"path": "Boiler/B", "class": "level", "scale": 0.1}}},
            "turbine": {"template": {"node": "s={plant}.{column}.{index}"}},
        },
    }))  # fmt: skip
    tags = TagMap(config, ["boiler", "turbine"])
    a, b, c = tags.tags
    assert a.address.node == "nsu=urn:y;s=A" and a.tag_class == "plc"
    assert b.address.path == "Boiler/B" and b.tag_class == "level" and b.scaled(10.0) == pytest.approx(1.0)
    assert c.address.node == "s=turbine.c.0" and c.plant == "turbine" and c.column == 0


@pytest.mark.parametrize(
    ("edge", "key", "words"),
    [
        ({"sources": SRC, "plants": {"boiler": {"tags": {"a": "s=A"}}}}, "edge.plants.boiler.tags", "'b'"),
        ({"sources": SRC, "plants": {"boiler": {"tags": {"a": "s=A", "b": "s=B", "z": "s=Z"}}}},
         "edge.plants.boiler.tags", "not a sensor"),
        ({"sources": SRC, "plants": {"pump": {"template": "s={column}"}}}, "edge.plants.pump", "unknown plant"),
        ({"sources": SRC, "plants": {"boiler": {"template": "q=1"}}}, "edge.plants.boiler.template.node", "node id"),
        ({"sources": SRC, "plants": {"boiler": {"template": {"node": "s=x", "path": "A"}}}},
         "edge.plants.boiler.template", "exactly one"),
        ({"sources": SRC, "plants": {"boiler": {"source": "nope", "template": "s={column}"}}},
         "edge.plants.boiler.source", "unknown source"),
        ({"sources": {"plc": {"kind": "opcua", "url": "http://x"}}}, "edge.sources.plc.url", "opc"),
        ({"sources": {"plc": {"kind": "telnet"}}}, "edge.sources.plc.kind", "opcua"),
        ({"sources": {"plc": {**SRC["plc"], "publishing_interval": 0}}}, "edge.sources.plc.publishing_interval", ""),
        ({"sources": {"plc": {**SRC["plc"], "pasword_env": "X"}}}, "edge.sources.plc.pasword_env", "unknown key"),
        ({"sources": SRC, "plants": {"boiler": {"template": "s={column}"}}, "groups": {"g": ["turbine"]}},
         "edge.groups.g", "no tag map"),
        ({"sources": SRC, "staleness_seconds": -1}, "edge.staleness_seconds", ""),
        ({"sources": SRC, "plants": {"boiler": {"template": {"node": "s={column}", "scale": "inf"}}}},
         "edge.plants.boiler.template.scale", "finite"),
    ],
)  # fmt: skip
def test_errors_name_the_key(tmp_path, edge, key, words):
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(site(edge)))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert err.value.key == key, str(err.value)
    assert words in str(err.value) and str(path) in str(err.value)


def test_two_sources_need_the_plants_source():
    two = {**SRC, "plc2": {**SRC["plc"], "url": "opc.tcp://127.0.0.1:4841"}}
    with pytest.raises(ConfigError, match="names no source") as err:
        parse_config(site({"sources": two, "plants": {"turbine": {"template": "s={column}"}}}))
    assert err.value.key == "edge.plants.turbine.source"


@pytest.mark.parametrize("text", ["ns=2;x=1", "i=abc", "ns=70000;i=1", "g=not-a-guid", "", "ns=2;"])
def test_malformed_node_ids(text):
    with pytest.raises(ValueError, match=r"node id|identifier|namespace"):
        parse_node_id(text)
