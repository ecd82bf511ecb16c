"""Sensor faults where an operator sees them: the demo's lines and table column, its --sensor-fault option, the
HTML report's section, the configuration's health section (issue 30, item 3)."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest

from fedrca.cli.demo import _sensor_events, _verdict_printer, check_demo_options, sensor_fault_option
from fedrca.cli.report import write_report
from fedrca.config import parse_config
from fedrca.contracts import SENSOR_FAULT, SENSOR_RECOVERED, Verdict
from fedrca.exceptions import ConfigError
from fedrca.rca.graph import InterdependencyGraph


def _event(seq: int, outcome: str, plant: str) -> Verdict:
    return Verdict("tep", float(seq), seq, None, (), 1.0, (seq - 3, seq), outcome, sensor_plants=(plant,))


def _root(seq: int, plant: str) -> Verdict:
    return Verdict("tep", float(seq), seq, plant, (), 0.95, (seq - 3, seq), "root_cause", (plant,))


def test_the_demo_prints_a_sensor_fault_apart_from_the_root_cause(capsys: pytest.CaptureFixture[str]) -> None:
    show = _verdict_printer("d04+stuck")
    show(_event(103, SENSOR_FAULT, "separator"))
    show(_root(161, "reactor"))
    show(_event(300, SENSOR_RECOVERED, "separator"))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("sample  103: sensor fault in separator (a broken tag, not a process fault)")
    assert "root cause reactor" in lines[1]
    assert lines[2].endswith("sensor of separator recovered")
    verdicts = [_event(103, SENSOR_FAULT, "separator"), _root(161, "reactor"), _event(200, SENSOR_FAULT, "separator")]
    assert _sensor_events(verdicts) == "separator@103" and _sensor_events([_root(161, "reactor")]) == "-"


@pytest.mark.parametrize(
    ("text", "why"),
    [("4:XMEAS(13)", "TAG@SAMPLE"), ("99:XMEAS(13)@100", "FAULT 00"), ("04:XMEAS(13)@100:broken", "KIND one of")],
)
def test_a_bad_sensor_fault_option_is_one_clear_line(text: str, why: str) -> None:
    with pytest.raises(ConfigError) as err:
        sensor_fault_option(text)
    assert err.value.key == "--sensor-fault" and why in str(err.value)
    args = argparse.Namespace(metrics_port=0, hold=0.0, speed="asap", idv="4@2", hours=8.0, seed=7, sensor_fault=text)
    with pytest.raises(ConfigError):
        check_demo_options(args)
    assert sensor_fault_option("00:XMV(3)@40:range") == ("00", "XMV(3)", 40, "range")


def test_the_report_counts_sensor_faults_and_lists_the_plants_own_episodes(tmp_path: Path) -> None:
    plants = ["reactor", "separator", "sep"]
    T = 60
    rows = [{"plant": "separator", "tag": "XMEAS(13)", "check": "stuck", "from sample": 12, "to sample": 59}]
    page = write_report(
        tmp_path,
        title="t",
        summary="s",
        plants=plants,
        d2c={p: np.ones(T) for p in plants},
        d2a={p: np.ones(T) for p in plants},
        thresholds={p: (2.0, 2.0) for p in plants},
        published=np.zeros((T, 3, 2), dtype=np.int64),
        verdicts=[
            _event(12, SENSOR_FAULT, "separator"),
            _root(30, "reactor"),
            _event(50, SENSOR_RECOVERED, "separator"),
        ],
        graph=InterdependencyGraph.complete(plants),
        metrics={},
        detection_rows=[],
        rca_rows=[],
        sensor_rows=rows,
    )
    text = page.read_text()
    assert "<h2>Sensor faults</h2>" in text and "XMEAS(13)" in text
    counts = text[text.index("<h2>Sensor faults</h2>") :]
    assert "<td>separator</td><td>1</td>" in counts and "<td>reactor</td><td>0</td>" in counts
    assert (tmp_path / "timeline.png").stat().st_size > 0


def _site(**health: object) -> dict:
    return {
        "site": "s",
        "dataset": {"format": "synthetic", "columns": ["a", "b", "c"]},
        "defaults": {"health": {"limits": {"a": [0, 10], "c": [None, 5]}}},
        "plants": [{"name": "p", "sensors": ["a", "b"], **health}, {"name": "q", "sensors": ["c"]}],
    }


def test_the_health_section_site_wide_limits_per_plant_and_clear_errors() -> None:
    config = parse_config(_site())
    assert config.plant("p").health.limits == {"a": (0.0, 10.0)}
    assert config.plant("q").health.limits == {"c": (None, 5.0)}
    assert config.plant("p").health.range_margin == 100.0  # the default (docs/sensors.md: 100 nominal spans)
    with pytest.raises(ConfigError, match=r"plants\[0\].*health.limits names \['c'\]"):
        parse_config(_site(health={"limits": {"c": [0, 1]}}))
    with pytest.raises(ConfigError, match=r"low < high"):
        parse_config(_site(health={"limits": {"a": [5, 1]}}))
    with pytest.raises(ConfigError, match=r"stale_after"):
        parse_config(_site(health={"stale_after": 0}))
    with pytest.raises(ConfigError, match=r"max_clock_skew"):
        parse_config({**_site(), "rca": {"max_clock_skew": -1}})
