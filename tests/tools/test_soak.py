"""tools/soak.py's pure parts: where the kills fall, and which windows hold a kill's restart."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tools" / "soak.py"


@pytest.fixture(scope="module")
def soak():
    spec = importlib.util.spec_from_file_location("fedrca_soak_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("kill_every", "window"), [(10.0, 5.0), (2.0, 1.0), (10.0, 1.0), (1.0, 5.0)])
def test_every_kill_falls_inside_a_window_with_its_restart(soak, kill_every: float, window: float) -> None:
    first = soak.first_kill(kill_every, window)
    kills = [first + k * kill_every for k in range(6)]
    if kill_every > window / 2:
        for minute in kills:
            into = minute % window
            # never on a boundary, and its restart ends before the window does
            assert into > 0 and into + min(soak.RESTART_SPILL, window / 2) <= window, (minute, window)
    else:
        assert first == kill_every  # kills more often than half a window: the plain schedule


def _window(start: float, end: float) -> dict:
    return {"start": start, "end": end}


def test_a_window_that_begins_just_after_a_kill_holds_its_restart(soak) -> None:
    windows = [_window(0, 5.02), _window(5.02, 10.01), _window(10.01, 15.3), _window(15.3, 20.1)]
    kills = [{"minute": 10.0, "worker": "plants"}, {"minute": 13.0, "worker": "rca"}]
    # the kill at 10.0 is in the second window by time; its restart (RESTART_SPILL) is in the third
    assert soak.killed_windows(windows, kills) == [[], ["plants"], ["plants", "rca"], []]


def test_the_table_counts_a_window_holding_a_restart_as_killed(soak, tmp_path: Path, capsys) -> None:
    def window(start: float, end: float, p99: float) -> dict:
        return {"start": start, "end": end, "sent": 1, "verdicts": 1, "verdict_ms": [1.0, p99],
                "flag_ms": [1.0, 1.0], "rss_mib": {"plants": 1.0, "rca": 1.0}, "lag_max": {"plants": 0, "rca": 0},
                "kills": [], "load": 1.0}  # fmt: skip

    run = {
        "command": "tools/soak.py --minutes 15",
        "began": "2026-11-30 13:07 UTC",
        "windows": [window(0, 5, 100.0), window(5, 10.01, 120.0), window(10.01, 15, 9000.0), window(15, 20, 150.0)],
        "kills": [{"minute": 10.0, "worker": "plants"}],
        "samples": [],
    }
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    assert soak.main(["--render", str(path)]) == 0
    out = capsys.readouterr().out
    # the kill at minute 10.0 is in the window 5-10 by time, and its restart in 10-15: both count as killed
    assert "| 5-10 |" in out and "| plants |" in out and "| 10-15 |" in out and "(restart of plants)" in out
    assert "at most 1.50x in the windows without a kill, 90.00x in those with one" in out


def test_a_kill_is_served_again_at_the_first_output_created_after_it(soak) -> None:
    kills = [
        {"minute": 1.0, "worker": "plants", "ns": 10_000_000_000},
        {"minute": 3.0, "worker": "rca", "ns": 50_000_000_000},
    ]
    # (receive ns, create ms, value): a flag committed by the dead process arrives after the kill and does not count
    flags = [(10_100_000_000, 9_990, {}), (14_000_000_000, 12_500, {}), (14_500_000_000, 13_000, {})]
    soak.served_again(kills, {"plants": flags, "rca": [(20_000_000_000, 19_000, {})]})
    assert kills[0]["served_s"] == pytest.approx(4.0) and "served_s" not in kills[1]
    soak.served_again(kills, {"plants": [(60_000_000_000, 59_000, {})], "rca": [(57_000_000_000, 56_000, {})]})
    assert kills[0]["served_s"] == pytest.approx(4.0) and kills[1]["served_s"] == pytest.approx(7.0)


def test_a_kills_backlog_is_its_groups_most_lag_until_the_next_kill(soak) -> None:
    def sample(minute: float, plants: int, rca: int) -> dict:
        return {"minute": minute, "lag": {"plants": plants, "rca": rca}}

    samples = [sample(0.5, 900, 900), sample(1.2, 8000, 900), sample(1.4, 5000, 900), sample(1.6, 1200, 900),
               sample(3.1, 900, 12000), sample(3.5, 900, 9000)]  # fmt: skip
    kills = [{"minute": 1.0, "worker": "plants"}, {"minute": 3.0, "worker": "rca"}]
    assert soak.backlogs(kills, samples, 3000) == [
        {"backlog": 8000, "caught_up_min": pytest.approx(0.6)},
        {"backlog": 12000, "caught_up_min": None},
    ]
