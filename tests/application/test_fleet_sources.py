"""``fedrca fleet`` participant sources: the ``simulate`` key (a nominal TEP simulator run by seed)."""

from __future__ import annotations

import numpy as np
import pytest

from fedrca.application.fleet.config import parse_fleet_config
from fedrca.application.fleet.sources import load_participants
from fedrca.connectors import simulator
from fedrca.datasets.tep import TEP_COLUMNS
from fedrca.exceptions import ConfigError, DataError, ModelError


def _config(*participants: dict, fmt: str = "tep", columns: list[str] | None = None):
    data: dict = {"format": fmt}
    if columns is not None:
        data["columns"] = columns
    return parse_fleet_config({"fleet": "sim", "data": data, "participants": list(participants)}, source="fleet.yaml")


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    """An empty run cache of this test only."""
    monkeypatch.setenv("FEDRCA_CACHE", str(tmp_path))
    return tmp_path / "tep-library"


@pytest.mark.parametrize(
    ("participant", "fmt", "key"),
    [
        ({"name": "a"}, "tep", "participants[0]"),  # no source
        ({"name": "a", "file": "x.dat", "simulate": {"seed": 200}}, "tep", "participants[0]"),  # two sources
        ({"name": "a", "simulate": {"seed": -1}}, "tep", "participants[0].simulate.seed"),
        ({"name": "a", "simulate": {"seed": 200, "mode": "mode9"}}, "tep", "participants[0].simulate.mode"),
        ({"name": "a", "simulate": {"seed": 200, "hourz": 2}}, "tep", "participants[0].simulate.hourz"),
        ({"name": "a", "simulate": {"seed": 200}}, "csv", "set data: {format: tep}"),
    ],
)
def test_bad_simulate_participants_name_the_key_or_the_fix(participant, fmt, key):
    with pytest.raises(ConfigError) as err:
        _config(participant, fmt=fmt)
    assert "fleet.yaml" in str(err.value) and key in str(err.value)


def test_a_simulated_participant_reads_its_run_from_the_cache_and_slices_rows(cache):
    spec = simulator.SimulationSpec(hours=0.3, seed=154)
    made = simulator.cached_run(spec)  # 6 rows of the real simulator, stored in this test's cache
    assert made is not None and not made.terminated
    config = _config(
        {"name": "whole", "simulate": {"seed": 154, "hours": 0.3}},
        {"name": "part", "simulate": {"seed": 154, "hours": 0.3}, "rows": [2, 5]},
    )
    data, columns = load_participants(config)
    assert columns == list(TEP_COLUMNS)
    np.testing.assert_array_equal(data["whole"], made.values)
    np.testing.assert_array_equal(data["part"], made.values[2:5])
    picked = _config({"name": "a", "simulate": {"seed": 154, "hours": 0.3}}, columns=["XMV(1)", "XMEAS(3)"])
    values, names = load_participants(picked)
    assert names == ["XMV(1)", "XMEAS(3)"]
    np.testing.assert_array_equal(values["a"], made.values[:, [TEP_COLUMNS.index("XMV(1)"), 2]])


def test_a_missing_run_is_one_clear_error_unless_generate_is_on(cache):
    config = _config({"name": "s1", "simulate": {"seed": 155, "hours": 0.3}})
    with pytest.raises(DataError, match=r"participant 's1'.*seed 155.*not in .*tep_library\.py.*generate: true"):
        load_participants(config)
    assert not cache.exists() or not any(cache.iterdir())  # nothing was simulated
    generated = _config({"name": "s1", "simulate": {"seed": 155, "hours": 0.3, "generate": True}})
    data, _ = load_participants(generated)
    assert data["s1"].shape == (6, len(TEP_COLUMNS))
    again, _ = load_participants(config)  # now cached: the same rows without generate
    np.testing.assert_array_equal(again["s1"], data["s1"])


def test_rows_past_a_simulated_run_and_a_missing_simulator_are_clear_errors(cache, monkeypatch):
    simulator.cached_run(simulator.SimulationSpec(hours=0.3, seed=154))
    with pytest.raises(DataError, match=r"participant 'a': rows \[0, 50\) run past the 6 rows"):
        load_participants(_config({"name": "a", "simulate": {"seed": 154, "hours": 0.3}, "rows": [0, 50]}))

    def missing() -> None:
        raise ModelError("the TEP simulator needs the optional extra 'sim'")

    monkeypatch.setattr(simulator, "load_tep_studio", missing)
    with pytest.raises(DataError, match=r"participant 'a'.*needs the TEP simulator.*fedrca\[sim\]"):
        load_participants(_config({"name": "a", "simulate": {"seed": 154, "hours": 0.3}}))


def test_the_simulated_tep_fleet_trains_on_training_seeds_only(monkeypatch):
    """config/fleet-tep-sim.yaml: simulated participants are nominal TRAIN seeds, never FAR or fault seeds."""
    import importlib
    from pathlib import Path

    from fedrca.application.fleet.config import load_fleet_config

    repo = Path(__file__).resolve().parents[2]
    monkeypatch.syspath_prepend(str(repo / "bench"))
    library = importlib.import_module("tep_library")
    config = load_fleet_config(repo / "config" / "fleet-tep-sim.yaml")
    sims = [p.simulate for p in config.participants if p.simulate is not None]
    seeds = {s.seed for s in sims}
    assert seeds and seeds <= set(library.TRAIN_SEEDS)
    assert not seeds & (set(library.FAR_SEEDS) | set(library.FAULT_SEEDS))
    assert all(s.hours == library.HOURS for s in sims)
