"""The embedded default: same verdicts as the offline pipeline, restartable recordings, pacing, the demo."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from fedrca.cli.site import prepare_site, run_pipeline, site_runtime
from fedrca.config import load_config
from fedrca.connectors.replay import Pacer
from fedrca.datasets.loader import load_frame, plant_frames
from fedrca.streams.embedded import replay_frame

REPO = Path(__file__).resolve().parents[2]


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
    plain = config.model_copy(update={"privacy": config.privacy.model_copy(update={"flag_epsilon": float("inf")})})
    runtime = site_runtime(plain, REPO / "data" / "tep" / "d00.dat")
    first = replay_frame(runtime, values, sample_seconds=180.0)
    again = replay_frame(runtime, values, sample_seconds=180.0)
    assert len(first.flags) == 5 * 960
    assert again.flags == [], "without reset every seq is a redelivery of processed samples"
    runtime.reset()
    fresh = replay_frame(runtime, values, sample_seconds=180.0)
    assert fresh.flags == first.flags and fresh.verdicts == first.verdicts


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
def test_demo_serves_metrics_while_it_runs_and_ends_with_the_evaluation(tmp_path):
    cmd = [sys.executable, "-m", "fedrca.cli", "demo", "--faults", "04", "--speed", "x20000"]
    cmd += ["--metrics-port", "0", "--out", str(tmp_path)]
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
    assert (tmp_path / "report" / "index.html").is_file()
    assert (tmp_path / "report" / "d04_te" / "timeline.png").stat().st_size > 1000
    assert (tmp_path / "params" / "reactor.json").is_file()


def test_trained_parameters_export_their_version_and_privacy_spend(tep, tmp_path):
    from fedrca.cli.training import train_site
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
