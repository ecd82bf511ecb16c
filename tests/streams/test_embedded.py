"""The embedded default: same verdicts as the offline pipeline, restartable recordings, pacing, the demo."""

from __future__ import annotations

import contextlib
import importlib.util
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from fedrca.application.site import prepare_site, run_pipeline, site_runtime
from fedrca.config import load_config
from fedrca.connectors.replay import Pacer
from fedrca.datasets.loader import load_frame, plant_frames
from fedrca.streams.embedded import replay_frame

REPO = Path(__file__).resolve().parents[2]


def _tool(name: str) -> Any:
    """A script of tools/ as a module (tools/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


docs_figures = _tool("docs_figures")


@pytest.fixture(scope="module")
def tep():
    config = load_config(REPO / "config" / "tep.yaml")
    # randomized response on: the streaming path must draw exactly as the batch path
    config = config.model_copy(update={"privacy": config.privacy.model_copy(update={"flag_epsilon": 3.0})})
    frame = load_frame(config, REPO / "data" / "tep" / "d04_te.dat")
    values = {p: d.Y for p, d in plant_frames(config, frame).items()}
    return config, frame, values


def _key(v):
    return v.seq, v.root_cause, v.propagated, v.evidence_window


def test_streaming_runtime_issues_the_verdicts_of_the_offline_pipeline(tep):
    config, frame, values = tep
    offline = run_pipeline(prepare_site(config, REPO / "data" / "tep" / "d00.dat"), frame)
    runtime = site_runtime(config, REPO / "data" / "tep" / "d00.dat")
    live = replay_frame(runtime, values, sample_seconds=180.0, chunk=37)
    assert not live.deadletters
    assert len(live.flags) == 5 * 960
    assert [_key(v) for v in live.verdicts] == [_key(v) for v in offline.verdicts]
    assert live.verdicts == offline.verdicts  # the one verdict schema: same time stamps and ids too
    assert sum(v.root_cause == "reactor" for v in live.verdicts) > 40
    for plant in config.plant_names:  # published flags identical, randomized response included
        mine = [(f.zc, f.za) for f in live.flags if f.plant == plant]
        theirs = list(zip(offline.results[plant].zc_pub.astype(int), offline.results[plant].za_pub.astype(int)))
        assert mine == theirs
        # severity levels reach the RCA through the same messages (FlagMessage.level)
        assert [f.level for f in live.flags if f.plant == plant] == offline.results[plant].level_pub.tolist()


def test_reset_starts_a_new_recording(tep):
    config, _, values = tep
    # the re-baselining loop off: a reset keeps a refreshed baseline (a parameter, like the trained ones;
    # tests/drift covers that), so only the fitted one replays the first recording's flags
    plain = config.model_copy(
        update={
            "privacy": config.privacy.model_copy(update={"flag_epsilon": float("inf")}),
            "drift": config.drift.model_copy(update={"enabled": False}),
        }
    )
    runtime = site_runtime(plain, REPO / "data" / "tep" / "d00.dat")
    first = replay_frame(runtime, values, sample_seconds=180.0)
    again = replay_frame(runtime, values, sample_seconds=180.0)
    assert len(first.flags) == 5 * 960
    assert again.flags == [], "without reset every seq is a redelivery of processed samples"
    runtime.reset()
    fresh = replay_frame(runtime, values, sample_seconds=180.0)
    assert fresh.flags == first.flags and fresh.verdicts == first.verdicts


def test_a_replay_that_keeps_no_flags_counts_them_and_issues_the_same_verdicts(tep):
    """The demo keeps no flag message (its report reads the plants' results): the same run, only lighter."""
    config, _, values = tep
    kept = replay_frame(site_runtime(config, REPO / "data" / "tep" / "d00.dat"), values, sample_seconds=180.0)
    lean = replay_frame(
        site_runtime(config, REPO / "data" / "tep" / "d00.dat"), values, sample_seconds=180.0, keep_flags=False
    )
    assert lean.flags == [] and lean.n_flags == kept.n_flags == len(kept.flags) == 5 * 960
    assert lean.verdicts == kept.verdicts and lean.verdicts
    for plant in config.plant_names:
        assert lean.results[plant].zc_pub.tolist() == kept.results[plant].zc_pub.tolist()


def test_pacer_releases_chunks_at_scaled_sample_time(tep):
    config, _, values = tep
    runtime = site_runtime(config, REPO / "data" / "tep" / "d00.dat")
    now = [0.0]
    pacer = Pacer(600.0, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    short = {p: v[:100] for p, v in values.items()}
    replay_frame(runtime, short, sample_seconds=180.0, chunk=20, pacer=pacer)
    # the last chunk starts at row 80: 80 * 180 s of data at x600 = 24 s
    assert now[0] == pytest.approx(24.0)


@pytest.mark.slow
def test_demo_serves_metrics_while_it_runs_and_ends_with_readmes_table(tmp_path):
    """``make demo`` (``fedrca demo`` with its defaults) serves metrics while it runs and ends with the
    table README.md shows (generated by ``make docs-figures``; regenerate it when the results change)."""
    cmd = [sys.executable, "-m", "fedrca.cli", "demo", "--metrics-port", "0", "--out", str(tmp_path)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO)
    assert proc.stdout is not None
    lines = []
    port = None
    while port is None:
        line = proc.stdout.readline()
        assert line, f"demo ended before announcing its metrics: {lines}"
        lines.append(line)
        match = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", line)
        port = int(match.group(1)) if match else None
    wanted = ("fedrca_flags_total{", 'fedrca_messages_in_total{plant="reactor",stage="plant"}')
    seen = ""
    deadline = time.monotonic() + 120
    while not all(w in seen for w in wanted) and proc.poll() is None and time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            seen = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
        time.sleep(0.2)
    assert proc.poll() is None, "the metrics were checked while the demo ran"
    assert all(w in seen for w in wanted)
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0
    table = out[out.index("3/3 evaluation") :]
    row = next(line for line in table.splitlines() if line.startswith("d04_te.dat"))
    correct, total = map(int, re.search(r"(\d+)/(\d+)", row).groups())
    assert "reactor" in row and correct > total / 2
    readme = docs_figures.blocks((REPO / "README.md").read_text(encoding="utf-8"))["demo-table"]
    assert docs_figures.demo_table(out) == readme, (
        "README.md's demo table differs from what make demo prints; run make docs-figures (demo-table)"
    )
    assert (tmp_path / "report" / "index.html").is_file()
    assert (tmp_path / "report" / "d04_te" / "timeline.png").stat().st_size > 1000
    assert (tmp_path / "params" / "reactor.json").is_file()


def test_trained_parameters_export_their_version_and_privacy_spend(tep, tmp_path):
    from fedrca.application.training import train_site
    from fedrca.contracts import load_artifact

    config, _, values = tep
    train_site(config, load_frame(config, REPO / "data" / "tep" / "d00.dat"), tmp_path, progress=None)
    runtime = site_runtime(config, REPO / "data" / "tep" / "d00.dat", params_dir=tmp_path)
    manifest = load_artifact(tmp_path, "reactor").manifest
    m = runtime.metrics
    # the training's Gaussian spend, and composed with the flags of the window (none published yet)
    spent = manifest["epsilon_spent"]
    assert m.value("fedrca_privacy_epsilon_spent", plant="reactor", mechanism="gaussian") == pytest.approx(spent)
    assert m.value("fedrca_privacy_epsilon_spent", plant="reactor", mechanism="all") == pytest.approx(spent)
    assert m.value("fedrca_privacy_epsilon_spent", plant="reactor", mechanism="randomized_response") == 0.0
    assert m.value("fedrca_privacy_epsilon_budget", plant="reactor") == config.privacy.budget
    assert m.value("fedrca_parameter_info", plant="reactor", version=manifest["version"]) == 1.0
    flags = replay_frame(runtime, {p: v[:50] for p, v in values.items()}, sample_seconds=180.0).flags
    assert {f.model_version for f in flags} == {manifest["version"]}


def test_one_row_chunks_give_the_results_of_whole_chunks(tep, monkeypatch):
    """A live source of one row per chunk (the simulator demo at a slow speed) has its plants' results
    joined every ``FOLD`` chunks as it goes; what the run ends with is what one join at the end gives:
    every detection and health array, the health episodes' rows included (their offsets add up)."""
    import numpy as np

    from fedrca.streams import embedded

    config, _, values = tep
    rows = 2 * embedded.FOLD + 37  # two joins and a remainder
    short = {p: v[:rows].copy() for p, v in values.items()}
    first = config.plant_names[0]
    short[first][100:200, 0] = short[first][100, 0]  # a stuck transmitter and a lost one: health episodes
    short[first][300:340, 1] = np.nan

    def run():
        return replay_frame(
            site_runtime(config, REPO / "data" / "tep" / "d00.dat"), short, sample_seconds=180.0, chunk=1
        )

    folded = run()
    monkeypatch.setattr(embedded, "FOLD", rows + 1)  # never joined before the end
    once = run()
    assert folded.verdicts == once.verdicts
    for plant in config.plant_names:
        a, b = folded.results[plant], once.results[plant]
        assert len(a.zc) == rows
        for name in vars(b):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=f"{plant}: {name}")
        ha, hb = folded.health[plant], once.health[plant]
        assert len(ha) == rows
        for name in ("values", "excluded", "checks", "fault", "fault_pub", "onsets"):
            np.testing.assert_array_equal(getattr(ha, name), getattr(hb, name), err_msg=f"{plant}: {name}")
    assert sum(len(h.onsets) for h in folded.health.values()) > 0  # episodes were there to offset
