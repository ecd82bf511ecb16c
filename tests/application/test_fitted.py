"""A plant worker started again with the same directory loads its fitted detectors instead of fitting them,
and fits them again when the nominal data or the configuration changed (fedrca.application.fitted)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedrca.application.fitted import FittedStore
from fedrca.application.site import plant_runtime
from fedrca.config import load_config
from fedrca.datasets.loader import load_frame

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "data" / "tep" / "d00.dat"
TEST = REPO / "data" / "tep" / "d04_te.dat"
CONFIG = REPO / "config" / "tep.yaml"


def _flags(runtime, config) -> dict[str, dict[str, np.ndarray]]:
    """Every plant's detector and sensor checks run over the first 200 rows of a fault file."""
    frame = load_frame(config, TEST).iloc[:200]
    out = {}
    for name, processor in runtime.processors.items():
        Y = frame[list(config.plant(name).sensors)].to_numpy(dtype=np.float64)
        result = processor.detector.step_batch(Y)
        checked = processor.health.update(Y, None) if processor.health is not None else None
        out[name] = {"d2_c": result.d2_c, "d2_a": result.d2_a, "zc": result.zc, "za": result.za}
        if checked is not None:
            out[name]["fault"] = checked.fault
    return out


def _store(tmp_path: Path, train: Path = TRAIN) -> FittedStore:
    return FittedStore(tmp_path / "worker" / "fitted", train)


def test_a_restart_with_unchanged_inputs_loads_the_fitted_detectors(tmp_path: Path) -> None:
    config = load_config(CONFIG)
    first = _store(tmp_path)
    fitted = plant_runtime(config, TRAIN, store=first)
    assert first.fitted == list(config.plant_names) and first.loaded == []
    again = _store(tmp_path)
    loaded = plant_runtime(config, TRAIN, store=again)
    assert again.loaded == list(config.plant_names) and again.fitted == []
    assert any(p.health is not None for p in loaded.processors.values())  # the sensor checks are kept too
    ran, kept = _flags(fitted, config), _flags(loaded, config)
    for plant in config.plant_names:
        assert ran[plant].keys() == kept[plant].keys()
        for field in ran[plant]:
            np.testing.assert_array_equal(ran[plant][field], kept[plant][field], err_msg=f"{plant} {field}")


def test_a_changed_training_file_is_fitted_again(tmp_path: Path) -> None:
    config = load_config(CONFIG)
    train = tmp_path / "d00.dat"
    train.write_bytes(TRAIN.read_bytes())
    plant_runtime(config, train, store=_store(tmp_path, train))
    lines = train.read_text().splitlines(keepends=True)
    values = lines[10].split()
    values[0] = f"{float(values[0]) * 1.001:.6e}"  # one reading of one row, within the nominal range
    lines[10] = "  ".join(values) + "\n"
    train.write_text("".join(lines))
    again = _store(tmp_path, train)
    plant_runtime(config, train, store=again)
    assert again.loaded == [] and again.fitted == list(config.plant_names)


def test_a_changed_configuration_is_fitted_again(tmp_path: Path) -> None:
    config = load_config(CONFIG)
    plant_runtime(config, TRAIN, store=_store(tmp_path))
    plant = config.plants[0]
    changed_plant = plant.model_copy(update={"scoring": plant.scoring.model_copy(update={"ewma": [0.2, 0.05]})})
    changed = config.model_copy(update={"plants": [changed_plant, *config.plants[1:]]})
    again = _store(tmp_path)
    plant_runtime(changed, TRAIN, store=again)
    # the site's design is in every plant's key: a change of one plant's settings fits every plant again
    assert again.loaded == [] and sorted(again.fitted) == sorted(config.plant_names)


@pytest.mark.parametrize("damage", ["cut", "other-key"])
def test_a_stored_file_that_is_not_whole_or_not_its_key_is_fitted_again(tmp_path: Path, damage: str) -> None:
    config = load_config(CONFIG)
    plant_runtime(config, TRAIN, store=_store(tmp_path))
    name = config.plant_names[0]
    folder = tmp_path / "worker" / "fitted"
    if damage == "cut":
        blob = folder / f"{name}.pickle"
        blob.write_bytes(blob.read_bytes()[:-100])
    else:
        meta = folder / f"{name}.json"
        meta.write_text(meta.read_text().replace('"key": "', '"key": "0'))
    again = _store(tmp_path)
    plant_runtime(config, TRAIN, store=again)
    assert again.fitted == [name] and again.loaded == list(config.plant_names[1:])
