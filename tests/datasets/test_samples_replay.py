"""``fedrca replay`` end to end on every sample, with the shipped configuration of its dataset."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedrca.cli import main
from fedrca.config import load_config, resolve_plants
from fedrca.datasets import load_dataset

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "data" / "samples"
GENERIC_CONFIG = (
    "site: plantlog\n"
    "dataset: {format: csv, time_column: t, label_columns: [fault], sample_seconds: 0.5}\n"
    "plants:\n"
    "  - {name: feed, match: {prefix: feed_}}\n"
    "  - {name: tank, match: {regex: '^(tank|pump)_'}}\n"
    "graph: {edges: [[feed, tank]]}\n"
)
CASES = [
    ("hai.yaml", "hai/hai-20.07-test1.csv"),
    ("hai.yaml", "hai/hai-21.03-test1.csv"),
    ("hai.yaml", "hai/hai-22.04-test1.csv"),
    ("hai.yaml", "hai/hai-23.05-test1.csv"),
    ("hai.yaml", "hai/hai-23.05-test2.csv"),
    ("haiend.yaml", "haiend/haiend-23.05-end-test2.csv"),
    ("swat.yaml", "swat/SWaT_Dataset_Attack_v0-sample.xlsx"),
    ("swat.yaml", "swat/SWaT_Dataset_Attack_v0-sample.csv"),
    ("swat.yaml", "swat/SWaT_Dataset_Normal_v1-sample.csv"),
    ("swat.yaml", "swat/SWaT_Dataset_Normal_v1-semicolon-sample.csv"),
    ("generic", "csv/plant-log.csv"),
]


def test_every_sample_file_is_covered():
    shipped = {str(p.relative_to(SAMPLES)) for p in SAMPLES.rglob("*") if p.is_file() and "label" not in p.name}
    assert shipped == {sample for _, sample in CASES}


@pytest.mark.parametrize(("config_name", "sample"), CASES, ids=[s.split("/")[-1] for _, s in CASES])
def test_replay_runs_end_to_end_on_the_sample(config_name, sample, tmp_path, capsys):
    if config_name == "generic":
        config_path = tmp_path / "plantlog.yaml"
        config_path.write_text(GENERIC_CONFIG)
    else:
        config_path = REPO / "config" / config_name
    path = SAMPLES / sample
    flags, verdicts = tmp_path / "flags.jsonl", tmp_path / "verdicts.jsonl"
    argv = ["replay", "--config", str(config_path), "--train", str(path), "--input", str(path)]
    code = main([*argv, "--flags-out", str(flags), "--verdicts-out", str(verdicts)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    config = load_config(config_path)
    data = load_dataset(config.dataset, path)
    plants = resolve_plants(config, data.columns).plant_names
    lines = [json.loads(line) for line in flags.read_text().splitlines()]
    assert len(lines) == data.rows * len(plants)
    assert [(r["plant"], r["seq"]) for r in lines] == [(p, t) for t in range(data.rows) for p in plants]
    assert all(set(r) == {"plant", "seq", "zc", "za", "zc_pub", "za_pub", "d2c", "d2a"} for r in lines)
    assert verdicts.exists()
    assert f"wrote {len(lines)} flag lines" in captured.out
