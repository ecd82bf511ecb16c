"""``fedrca graph``: the mode (pooled statistics, the vote) from the options or the config's ``causal:`` section,
the noised variant's privacy record, and one clear line for every bad choice."""

from __future__ import annotations

import importlib
import json

import numpy as np
import pandas as pd
import pytest
import yaml

from fedrca.application.graph import learn_site_graph, site_frames
from fedrca.cli import main
from fedrca.config import load_config, parse_causal_settings
from fedrca.exceptions import ConfigError

fedpc_module = importlib.import_module("fedrca.causal.fedpc")


def _graph(repo, tmp_path, *options, name="g.json"):
    out = tmp_path / name
    code = main(["graph", "--config", str(repo / "config/tep.yaml"), "--sites", str(repo / "data/tep/d00.dat"),
                 "--out", str(out), *options])  # fmt: skip
    return code, out


def test_pooled_statistics_are_the_default_and_the_vote_is_selectable(repo, tmp_path, capsys):
    code, out = _graph(repo, tmp_path, "--split", "3")
    assert code == 0
    detail = json.loads(out.read_text())["fedpc"]
    assert detail["mode"] == "pooled-stats" and detail["keep_fraction"] is None and detail["privacy"] is None
    assert detail["rounds"] == 2 and len(detail["bytes_per_site"]) == 3  # counts and sums, then cross-products
    # the default orientation: every variable edge joins its plants both ways
    assert detail["orientation"] == "skeleton"
    edges = {(e["from"], e["to"]) for e in json.loads(out.read_text())["edges"]}
    assert edges == {(b, a) for a, b in edges} and len(edges) >= 2
    assert "FedPC (pooled-stats) over 3 sites" in capsys.readouterr().err
    code, out = _graph(repo, tmp_path, "--split", "3", "--mode", "vote", name="vote.json")
    assert code == 0
    vote = json.loads(out.read_text())["fedpc"]
    assert vote["mode"] == "vote" and vote["keep_fraction"] == 0.3 and vote["bytes_per_site"] is None
    # the two modes are different protocols: here they learn different variable graphs
    assert (vote["directed"], vote["undirected"]) != (detail["directed"], detail["undirected"])


def test_the_config_section_selects_the_mode_and_the_options_override_it(repo, tmp_path):
    data = yaml.safe_load((repo / "config/tep.yaml").read_text())
    data["causal"] = {"mode": "vote", "alpha": 0.05}
    config_path = tmp_path / "tep-vote.yaml"
    config_path.write_text(yaml.safe_dump(data))
    config = load_config(config_path)
    assert config.causal.mode == "vote" and config.causal.alpha == 0.05
    resolved, frames = site_frames(config, [repo / "data/tep/d00.dat"], 2)
    _, result, detail = learn_site_graph(resolved, frames)
    assert detail["mode"] == "vote" and detail["alpha"] == 0.05 and "mode" not in result.extra
    _, result, detail = learn_site_graph(resolved, frames, mode="pooled-stats")
    assert detail["mode"] == "pooled-stats" and result.extra["mode"] == "pooled-stats"
    with pytest.raises(ConfigError, match=r"tep-vote\.yaml with the options epsilon: causal: a finite epsilon"):
        learn_site_graph(resolved, frames, epsilon=2.0)


def test_a_noised_run_records_each_sites_spend(repo, tmp_path, capsys):
    code, out = _graph(repo, tmp_path, "--split", "4", "--epsilon", "8", "--clip", "2")
    assert code == 0
    privacy = json.loads(out.read_text())["fedpc"]["privacy"]
    assert privacy["epsilon_per_site"] == 8.0 and privacy["clip"] == 2.0 and privacy["delta"] == 1e-5
    assert privacy["spent_epsilon"] == pytest.approx([8.0] * 4, rel=1e-6)
    assert "privacy: epsilon 8 per site (delta 1e-05)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--split", "2", "--epsilon", "0"], "--epsilon must be > 0"),
        (["--split", "2", "--clip", "-1"], "--clip must be in (0, 100]"),
        (["--split", "2", "--mode", "vote", "--epsilon", "2"], "causal: a finite epsilon noises the pooled statistics"),
        ([], "pooled statistics need at least 2 sites"),
        (["--split", "2", "--test", "g-square", "--epsilon", "2"], "set mode: pooled-stats and test: fisher-z"),
    ],
)
def test_bad_choices_are_one_line_and_exit_2(repo, tmp_path, capsys, options, message):
    code, out = _graph(repo, tmp_path, *options)
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err
    assert not out.exists()


def test_a_constant_column_is_named(repo, tmp_path, capsys):
    values = np.loadtxt(repo / "data/tep/d00.dat")
    values = values.T if values.shape[0] == 52 else values
    values[:, 51] = 50.0  # XMV(11) held still
    site = tmp_path / "still.dat"
    np.savetxt(site, values)
    out = tmp_path / "g.json"
    code = main(["graph", "--config", str(repo / "config/tep.yaml"), "--sites", str(site), "--split", "2",
                 "--out", str(out)])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "column(s) XMV(11) are constant" in err and "leave them out" in err


def test_the_causal_section_is_validated_with_its_key_path():
    assert parse_causal_settings(None).mode == "pooled-stats"
    assert parse_causal_settings({"epsilon": "inf", "budget": "off"}).budget == float("inf")
    for data, key in [
        ({"mode": "average"}, r"causal\.mode"),
        ({"clip": 0}, r"causal\.clip"),
        ({"keep_fraction": 1.0}, r"causal\.keep_fraction"),
        ({"unknown": 1}, r"causal\.unknown: unknown key"),
    ]:
        with pytest.raises(ConfigError, match=key):
            parse_causal_settings(data, source="x.yaml")


def _dense_site(tmp_path, p=12, n=2000):
    """p variables with one common factor: every pair stays dependent given any others (a complete skeleton)."""
    rng = np.random.default_rng(0)
    columns = [f"a.x{j}" for j in range(p // 2)] + [f"b.x{j}" for j in range(p - p // 2)]
    values = rng.normal(size=(n, 1)) + 0.3 * rng.normal(size=(n, p))
    pd.DataFrame(values, columns=columns).to_csv(tmp_path / "dense.csv", index=False)
    config = {
        "site": "dense",
        "dataset": {"format": "csv", "columns": columns},
        "plants": [{"name": "a", "sensors": columns[: p // 2]}, {"name": "b", "sensors": columns[p // 2 :]}],
    }
    (tmp_path / "dense.yaml").write_text(yaml.safe_dump(config))
    return ["graph", "--config", str(tmp_path / "dense.yaml"), "--sites", str(tmp_path / "dense.csv"), "--split", "2",
            "--out", str(tmp_path / "dense.json")]  # fmt: skip


def test_a_skeleton_too_dense_for_the_query_limit_names_the_depth_that_fits(tmp_path, capsys, monkeypatch):
    """A layer over the limit is refused before it runs: one line naming --max-cond, no output."""
    monkeypatch.setattr(fedpc_module, "MAX_QUERIES", 10_000)  # layer 3 of 12 variables makes 15,840
    argv = _dense_site(tmp_path)
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("fedrca graph: error: layer 3 of the skeleton would run 15,840 CI tests"), err
    assert "max_cond at most 2 (fedrca graph --max-cond N)" in err[-1] and "Traceback" not in "".join(err)
    assert not list(tmp_path.glob("dense.json*")) and not list(tmp_path.glob(".*"))
    assert main([*argv, "--max-cond", "2"]) == 0
    assert json.loads((tmp_path / "dense.json").read_text())["fedpc"]["max_cond"] == 2
