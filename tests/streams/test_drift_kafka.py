"""Issue 36, acceptance 4: Kafka workers and ``fedrca replay`` give the same flags and verdicts across a refresh.

A site with the re-baselining loop on (a refresh every 240 samples) streams the nominal TEP test
file through a ``fedrca run`` worker (plant processors and the RCA, whose engine is then fitted on
the nominal data as ``fedrca replay``'s) on the repository's broker. The worker is killed with
SIGKILL after the first refresh and restarted: it reads the plants' history and baselines back from
their history topics. Every flag (bits and parameter version) and every
verdict must be those of ``fedrca replay`` on the same rows, and the history topics hold the
plants' raw rows, so they must be read by nobody but the plant worker.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from tools.cluster import (
    Cluster,
    consumed_everything,
    count,
    group_assignment,
    json_records,
    replay_file,
    site_config,
)

from fedrca.config import load_config
from fedrca.connectors.kafka import KafkaSink, ensure_site_topics, read_topic
from fedrca.datasets.loader import load_frame
from tests.kafka_broker import unique_name, wait_until

# a minute of an idle machine's time: make exhaustive; tests/streams/test_drift_agent.py is its fast twin in make test
pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.exhaustive]

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "data" / "tep" / "d00.dat"
STREAM = REPO / "data" / "tep" / "d00_te.dat"
EVERY = 240
#: a refresh every 240 samples: seqs 240, 480 and 720 of the 960-row file
#: the worker is killed once it has flagged the first KILL_AT rows of every plant (the rows after are sent after)
KILL_AT = 330
DRIFT = {"enabled": True, "every": EVERY, "window": EVERY, "history": 960, "min_rows": 100}


def with_drift(path: Path, drift: dict[str, Any]) -> Path:
    """The configuration file at ``path`` with its ``drift:`` section replaced by ``drift``."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["drift"] = drift
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


#: a refresh line of ``fedrca replay`` (stderr): plant, seq, outcome, version
REFRESH = re.compile(r"plant (\S+): baseline refresh at seq (\d+): (\w+)(?: -> b(\d+))?")


@pytest.fixture(scope="module")
def drift_run(kafka_broker: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("drift")
    bootstrap = kafka_broker.bootstrap
    config_path = with_drift(site_config(tmp, unique_name("drift")), DRIFT)
    config = load_config(config_path)
    ensure_site_topics(bootstrap, config)
    cluster = Cluster(config_path, bootstrap, TRAIN, tmp)
    try:
        # one worker with both roles (its RCA engine is fitted on the nominal data, as fedrca replay's); it fits its
        # detectors while fedrca replay runs
        cluster.add("w1", "plants,params,rca", ["--allowed-lateness", "1400"])
        flags_out, verdicts_out = tmp / "flags.jsonl", tmp / "verdicts.jsonl"
        replay = subprocess.run(
            [sys.executable, "-m", "fedrca.cli", "replay", "--config", str(config_path), "--train", str(TRAIN),
             "--input", str(STREAM), "--flags-out", str(flags_out), "--verdicts-out", str(verdicts_out)],
            check=True, capture_output=True, text=True, cwd=REPO,
        )  # fmt: skip
        refreshes = [
            (m.group(1), int(m.group(2)), m.group(3), None if m.group(4) is None else int(m.group(4)))
            for m in REFRESH.finditer(replay.stdout + replay.stderr)
        ]
        site_name = config.site
        wait_until(lambda: group_assignment(bootstrap, f"fedrca-{site_name}-plants") is not None, 300, "plant worker")
        wait_until(lambda: group_assignment(bootstrap, f"fedrca-{site_name}-rca") is not None, 300, "RCA worker")
        # poison on the control topic while the worker runs (issue 34): dead-lettered once, never a crash
        control = hostile_commands(site_name, config.plant_names)
        with KafkaSink(bootstrap, config) as sink:
            for key, value in control:
                sink.send_raw(config.topic("control"), key, value)
            sink.flush()
        # the rows up to KILL_AT first: the worker cannot be past them when it is killed, however fast it is
        # (with the whole file sent at once, a loaded machine's count saw every flag before the kill)
        replay_file(config, bootstrap, STREAM, "x9000", stop=KILL_AT)
        flags_topic = config.topic("flags")
        # past the first refresh (seq 240) of every plant: kill the plant worker, start it again
        wait_until(lambda: count(bootstrap, flags_topic) >= 5 * KILL_AT, 180, "flags past the first refresh",
                   interval=0.2)  # fmt: skip
        flags_at_kill = count(bootstrap, flags_topic)
        cluster.workers["w1"].kill9()
        # poison on every plant's history topic, under the keys the restarted worker reads back (issue 34): it
        # must take the valid records before them, dead-letter them once and compute what replay computes
        history_poison = {}
        with KafkaSink(bootstrap, config) as sink:
            for p in config.plant_names:
                topic = config.topic("history", plant=p)
                history_poison[p] = hostile_history(p, {r.key: r.value for r in read_topic(bootstrap, topic)})
                for key, value in history_poison[p]:
                    sink.send_raw(topic, key, value)
            sink.flush()
        cluster.workers["w1"].start()
        feeder = threading.Thread(target=replay_file, args=(config, bootstrap, STREAM, "x9000", KILL_AT))
        feeder.start()
        feeder.join(timeout=300)
        want = {json.loads(line)["id"] for line in verdicts_out.read_text().splitlines()}
        verdicts_topic = config.topic("verdicts")
        wait_until(lambda: want <= {v["id"] for v in json_records(bootstrap, verdicts_topic)}, 300, "every verdict",
                   interval=1.0)  # fmt: skip
        wait_until(lambda: count(bootstrap, flags_topic) >= 5 * 960, 120, "every flag", interval=0.5)
        wait_until(lambda: consumed_everything(bootstrap, f"fedrca-{site_name}-rca", flags_topic), 120, "the RCA")
        rca_topics = {t for member in group_assignment(bootstrap, f"fedrca-{site_name}-rca") or [] for t in member}
        history = {p: list(read_topic(bootstrap, config.topic("history", plant=p), timeout=30))
                   for p in config.plant_names}  # fmt: skip
        dead = {p: list(read_topic(bootstrap, config.topic("plant_deadletter", plant=p), timeout=30))
                for p in config.plant_names}  # fmt: skip
        worker = cluster.workers["w1"]
        # an operator's status over topics with poison on them: the newest valid state, the loop's records only
        plant = config.plant_names[0]
        with KafkaSink(bootstrap, config) as sink:
            sink.send_raw(config.topic("state", plant=plant), f"{config.topic('sensors', plant=plant)}:0".encode(),
                          b'{"offset":0,"state":' + b"[" * 100_000)  # fmt: skip
            sink.send_raw(config.topic("history", plant=plant), b"baseline/3", b"garbage")
            sink.send_raw(config.topic("history", plant=plant), b"reports", b'[{"seq": [[1]]}]')
            sink.send_raw(config.topic("history", plant=plant), b"rows/2", b"[" * 100_000)
            sink.send_raw(config.topic("history", plant=plant), b"rows/3", b'{"chunk": -1, "present": "AA=="}')
            sink.flush()
        # a training job on the history topics leaves such records out (one line each), as the worker does
        from fedrca.cli.train import history_frame

        history_rows = len(history_frame(config, f"kafka://{bootstrap}"))
        status = subprocess.run(
            [sys.executable, "-m", "fedrca.cli", "baseline", "status", "--config", str(config_path), "--broker",
             f"kafka://{bootstrap}"], capture_output=True, text=True, cwd=REPO, timeout=300,
        )  # fmt: skip
        return {
            "config": config,
            "flags_at_kill": flags_at_kill,
            "flags": json_records(bootstrap, flags_topic),
            "verdicts": json_records(bootstrap, verdicts_topic),
            "replay_flags": [json.loads(line) for line in flags_out.read_text().splitlines()],
            "replay_verdicts": [json.loads(line) for line in verdicts_out.read_text().splitlines()],
            "refreshes": refreshes,
            "history": history,
            "rca_topics": rca_topics,
            "control_poison": control,
            "history_poison": history_poison,
            "dead": dead,
            "alive": worker.alive,
            "log": worker.log_tail(100_000),
            "status": status,
            "history_rows": history_rows,
        }
    except BaseException:
        print(cluster.diagnostics())
        raise
    finally:
        cluster.stop_all()


def test_the_workers_refresh_where_replay_does_with_the_same_flags_and_verdicts(drift_run: dict[str, Any]) -> None:
    run = drift_run
    assert 5 * EVERY < run["flags_at_kill"] <= 5 * KILL_AT, "the plant worker was killed after the first refresh"
    # replay refreshed: plants changed their baselines at 240, 480 and 720
    changed = [(plant, seq, version) for plant, seq, outcome, version in run["refreshes"]
               if outcome in ("applied", "limited")]  # fmt: skip
    assert {seq for _, seq, _ in changed} == {240, 480, 720}
    seen: dict[tuple[str, int], tuple[int, int, str]] = {}
    for f in run["flags"]:  # redeliveries must be identical
        key, value = (f["plant"], f["seq"]), (f["zc"], f["za"], f["model_version"])
        assert seen.setdefault(key, value) == value, f"a redelivered flag changed: {key}"
    replayed = {(f["plant"], f["seq"]): (f["zc_pub"], f["za_pub"]) for f in run["replay_flags"]}
    assert {k: v[:2] for k, v in seen.items()} == replayed
    # the version each flag carries is the baseline it was scored with, as in the replay
    for plant, seq, version in changed:
        before = "proprietary" if version == 1 else f"proprietary+b{version - 1}"
        assert seen[(plant, seq - 1)][2] == before
        assert seen[(plant, seq)][2] == f"proprietary+b{version}"
    by_id = {v["id"]: v for v in run["verdicts"]}
    assert len(by_id) == len(run["verdicts"]), "a verdict was emitted twice"
    assert by_id == {v["id"]: v for v in run["replay_verdicts"]}


def test_poison_on_the_history_and_control_topics_is_dead_lettered_once_and_changes_nothing(
    drift_run: dict[str, Any],
) -> None:
    """Issue 34 acceptance 1 for the drift topics: the flags and verdicts above equal replay's with the poison in."""
    run = drift_run
    config = run["config"]
    assert run["alive"] and "Traceback" not in run["log"], run["log"][-3000:]
    control_dead: list[Any] = []
    for plant in config.plant_names:
        records = run["dead"][plant]
        stages = [r.headers["fedrca-stage"] for r in records]
        # every history record refused once (the first batch after the restart dead-letters and re-writes them)
        history = [r for r, stage in zip(records, stages, strict=True) if stage == b"state"]
        assert sorted(r.value for r in history) == sorted(v[:1_000_000] for _, v in run["history_poison"][plant])
        assert all(r.headers["fedrca-reason"] and r.headers["fedrca-source-topic"] ==
                   config.topic("history", plant=plant).encode() for r in history)  # fmt: skip
        control_dead += [r for r, stage in zip(records, stages, strict=True) if stage == b"control"]
    # every control record refused once (the restarted worker reads them back and counts them, no second letter)
    assert sorted(r.value for r in control_dead) == sorted(v[:1_000_000] for _, v in run["control_poison"])
    assert len(run["control_poison"]) >= 10 and all(len(v) >= 10 for v in run["history_poison"].values())
    # fedrca baseline status reads past the poison too: every plant's baseline, one line on what it left out
    status = run["status"]
    assert status.returncode == 0 and "Traceback" not in status.stderr, status.stderr[-2000:]
    assert all(f"{p}: baseline b" in status.stdout for p in config.plant_names), status.stdout
    assert "2 record(s) of" in status.stdout, status.stdout
    # fedrca train --history: two chunks of one plant left out, the rest of the common nominal rows read
    assert DRIFT["min_rows"] <= run["history_rows"] <= 960 - 2 * 64


def test_the_history_topics_hold_the_plants_rows_and_only_their_worker_reads_them(drift_run: dict[str, Any]) -> None:
    run = drift_run
    config = run["config"]
    frame = load_frame(config, STREAM)
    for plant, records in run["history"].items():
        latest = {r.key: r.value for r in records if r.value is not None}  # a refused key's repair may be a tombstone
        assert any(k.startswith(b"baseline/") for k in latest), plant
        rows = [json.loads(v) for k, v in latest.items() if k.startswith(b"rows/")]
        # bounded: one record per slot of 64 seqs (compaction keeps the newest of each)
        assert 0 < len(rows) <= 960 // 64 + 2, plant
        # what the plant kept is the rows it saw, exactly (the last chunk: seqs 896..959)
        last = next(r for r in rows if r["chunk"] == 959 // 64)
        sensors = config.plant(plant).sensors
        values = np.frombuffer(base64.b64decode(last["y"]), dtype=np.float64).reshape(-1, len(sensors))
        np.testing.assert_array_equal(values, frame[sensors].to_numpy()[896:960])
    # the RCA worker's consumer group never subscribed to a history topic (taken while it ran)
    history_topics = {config.topic("history", plant=p) for p in config.plant_names}
    assert run["rca_topics"] and not run["rca_topics"] & history_topics


def hostile_commands(site: str, plants: list[str]) -> list[tuple[bytes, bytes]]:
    """(key, value) of control records that are not commands of this site (>= 10; issue 34)."""
    plant = plants[1]
    good = {"site": site, "plant": plant, "action": "pin", "version": None, "id": "c1", "ts": 1.0}

    def cmd(**change: Any) -> bytes:
        return json.dumps({**good, **change}).encode()

    return [
        (plant.encode(), b"[" * 100_000),  # deep nesting
        (plant.encode(), b'{"site":' * 50_000),
        (plant.encode(), cmd(plant=[plant])),  # a plant that is a list
        (plant.encode(), cmd(ts=int("9" * 400))),  # a ts beyond any float
        (plant.encode(), cmd(ts="1")),
        (plant.encode(), cmd(action="explode")),
        (plant.encode(), cmd(id="x" * 1_000_000)),  # a string of a million characters
        (plant.encode(), cmd(version=3)),  # a version for a pin
        (plant.encode(), cmd(site="elsewhere")),
        (plant.encode(), cmd(extra=1)),
        (plant.encode(), cmd()[:20]),  # truncated
        (b"nobody", b"\xff\xfe garbage"),  # keyed by no plant: the first plant's worker dead-letters it
        (plants[0].encode(), b""),
    ]


def hostile_history(plant: str, latest: dict[bytes, bytes]) -> list[tuple[bytes, bytes]]:
    """(key, value) of history records the plant's loop cannot take back, under the keys it reads (>= 10)."""
    rows = json.loads(latest[b"rows/1"])
    baseline = json.loads(latest[b"baseline/1"])

    def with_(doc: dict[str, Any], **change: Any) -> bytes:
        return json.dumps({**doc, **change}).encode()

    narrow = {**baseline, "arrays": {k: [[1], v[1]] for k, v in baseline["arrays"].items()}}
    return [
        (b"rows/1", b"[" * 100_000),  # deep nesting
        (b"rows/1", with_(rows, chunk=-17)),  # a negative chunk under slot 1 would hold rows before seq 0
        (b"rows/1", with_(rows, chunk=2**70)),
        (b"rows/1", with_(rows, chunk=0)),  # chunk 0 is kept under rows/0
        (b"rows/1", with_(rows, y=base64.b64encode(b"\x00" * 24).decode())),  # not this plant's width
        (b"rows/1", latest[b"rows/1"][: len(latest[b"rows/1"]) // 2]),  # truncated
        (b"rows/0", with_(rows, present="x" * 1_000_000)),  # a string of a million characters
        (b"baseline/1", json.dumps(narrow).encode()),  # arrays of other shapes
        (b"baseline/1", with_(baseline, version=0)),
        (b"baseline/1", b"garbage"),
        (b"reports", b'{"not": "a list"}'),
        (b"reports", b'[{"plant": "x"}]'),
        (b"reports", json.dumps([["x"] * 3] * 2).encode()),
        (b"junk", b"{}"),  # a key the loop never writes
    ]
