#!/usr/bin/env python3
"""Fault injection on the live system: kill -9 of workers, broker restarts and broker pauses.

Every run is one fresh site (own topics and consumer groups) on a broker of this
harness's own (``tools/kafka/broker.py --home <tmp>``, loopback only, so restarting or
pausing it disturbs no test session): parameters are trained once and published,
two plant workers (``fedrca run --roles plants,params``) and one RCA worker
(``--roles rca``) run, and TEP fault 04 (``data/tep/d04_te.dat``, 960 rows x 5 plants)
is replayed into the sensors topics at 50 rows/s. While it streams, the run's faults
strike at random points (a random share of the flags already on the flags topic):

``kill``
    1 to 3 times: ``kill -9`` of a random victim (one plant worker, both, or the RCA
    worker), restarted after 0 to 3 s with the same name and state directory.
``restart``
    the broker is stopped (SIGTERM, or SIGKILL on every second run) and started again on
    the same data and ports.
``pause``
    the broker is frozen with SIGSTOP for ``--pause-seconds`` (default 30 s, longer than
    the workers' session timeout and the producers' request timeout) and resumed.
``drift``
    kills as in ``kill``, on a site whose plants re-baseline every 240 samples
    (docs/drift.md) while the nominal ``d00_te.dat`` streams: the refreshes at seqs 240, 480
    and 720 take effect, and a killed plant worker reads the plants' histories and baselines
    back from their history topics; every flag must carry the baseline version of the replay.

When everything is in, the run is compared with the in-process replay of the same
input through the same cores (:func:`fedrca.streams.embedded.replay_frame`): every
expected verdict id exactly once with the same content and no other verdict; every
(plant, seq) flag exactly once with the same bits and model version. Committed
records only (``read_committed``), as every reader of the outputs sees them.

With ``--gaps`` the input is fault 04 as plant data really arrives (:func:`with_gaps`:
values missing at random, a dead sensor per plant, a plant with nothing for a few rows),
replayed with ``null`` values under ``dataset.missing: allow`` (docs/missing.md): the
same comparison, degraded flags included.

Usage::

    tools/faults.py                                  # 30 kill runs, 5 restarts, 5 pauses, 5 drift runs
    tools/faults.py --kills 3 --restarts 1 --pauses 1 --drifts 1 --seed 7 --json faults.json
    tools/faults.py --gaps --kills 5 --restarts 1 --pauses 1 --drifts 0   # the input with missing values

Exit status 0 when every run lost and duplicated nothing, 1 otherwise (the failing
runs' worker logs are printed), 2 on a setup error.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

BROKER = REPO / "tools" / "kafka" / "broker.py"
TRAIN = REPO / "data" / "tep" / "d00.dat"
FAULT = REPO / "data" / "tep" / "d04_te.dat"
NOMINAL = REPO / "data" / "tep" / "d00_te.dat"
#: the drift scenario's loop: a refresh every 240 samples (seqs 240, 480, 720 of a 960-row file)
DRIFT = {"enabled": True, "every": 240, "window": 240, "history": 960, "min_rows": 100}
LATENESS = 1400  # rows wait for a killed worker's plants longer than any outage here (bound of five plants: 1,483)
SPEED = "x9000"  # 3-minute samples at 9000x: 50 rows/s, 960 rows in about 19 s
FEDRCA = [sys.executable, "-m", "fedrca.cli"]


def with_gaps(
    source: Path, out: Path, plants: dict[str, list[str]], seed: int = 30, dark: range = range(500, 503)
) -> Path:
    """A copy of the TEP file ``source`` with missing values (``nan``), as plant data really arrives.

    5 % of the values missing at random, one sensor of each plant (in ``plants``: name ->
    columns) missing for a tenth of the rows at a random place, and every sensor of the first
    plant missing in the ``dark`` rows (rows it cannot score: degraded). Seeded.
    """
    import numpy as np

    from fedrca.datasets.tep import TEP_COLUMNS, load_tep

    rng = np.random.default_rng(seed)
    X = load_tep(source).to_numpy(dtype=np.float64, copy=True)
    T = len(X)
    X[rng.random(X.shape) < 0.05] = np.nan
    index = {c: j for j, c in enumerate(TEP_COLUMNS)}
    for columns in plants.values():
        j = index[columns[int(rng.integers(len(columns)))]]
        start = int(rng.integers(0, T - T // 10))
        X[start : start + T // 10, j] = np.nan
    first = next(iter(plants.values()))
    X[np.ix_(np.asarray(dark), [index[c] for c in first])] = np.nan
    np.savetxt(out, X, fmt="%.9g")
    return out


@dataclass
class Comparison:
    """What the broker holds against what the in-process replay produced."""

    verdicts_expected: int
    verdicts_found: int
    verdicts_missing: int
    verdicts_duplicated: int
    verdicts_unexpected: int
    verdicts_different: int
    flags_expected: int
    flags_found: int
    flags_missing: int
    flags_duplicated: int
    flags_different: int
    first_problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (
            self.verdicts_missing
            or self.verdicts_duplicated
            or self.verdicts_unexpected
            or self.verdicts_different
            or self.flags_missing
            or self.flags_duplicated
            or self.flags_different
        )


def compare(
    expected_verdicts: Mapping[str, Any],
    expected_flags: Mapping[tuple[str, int], tuple[int, int, str, bool]],
    verdicts: Iterable[Mapping[str, Any]],
    flags: Iterable[Mapping[str, Any]],
    decode: Callable[[Mapping[str, Any]], Any] = dict,
) -> Comparison:
    """Compare committed verdicts/flags with the expected ones (exactly once, same content).

    ``expected_verdicts`` maps verdict id -> the expected verdict, compared with
    ``decode(record)`` of each verdict record found (``Verdict.from_dict`` in the harness);
    ``expected_flags`` maps (plant, seq) -> (zc, za, model_version, degraded).
    """
    verdicts = list(verdicts)
    flags = list(flags)
    problems: list[str] = []
    ids = Counter(v["id"] for v in verdicts)
    missing_v = sorted(set(expected_verdicts) - set(ids))
    unexpected_v = sorted(set(ids) - set(expected_verdicts))
    duplicated_v = sorted(i for i, n in ids.items() if n > 1)
    different_v = sorted(
        {v["id"] for v in verdicts if v["id"] in expected_verdicts and decode(v) != expected_verdicts[v["id"]]}
    )
    problems += [f"verdict {i} missing" for i in missing_v[:3]]
    problems += [f"verdict {i} emitted {ids[i]} times" for i in duplicated_v[:3]]
    problems += [f"verdict {i} not expected" for i in unexpected_v[:3]]
    problems += [f"verdict {i} differs" for i in different_v[:3]]
    keys = Counter((f["plant"], f["seq"]) for f in flags)
    got = {(f["plant"], f["seq"]): (f["zc"], f["za"], f["model_version"], bool(f.get("degraded"))) for f in flags}
    missing_f = sorted(set(expected_flags) - set(got))
    duplicated_f = sorted(k for k, n in keys.items() if n > 1)
    different_f = sorted(k for k in expected_flags if k in got and got[k] != expected_flags[k])
    # a flag for a (plant, seq) that was never sent is a difference too
    different_f += sorted(k for k in got if k not in expected_flags)
    problems += [f"flag {k} missing" for k in missing_f[:3]]
    problems += [f"flag {k} published {keys[k]} times" for k in duplicated_f[:3]]
    problems += [f"flag {k} differs: {got.get(k)} != {expected_flags.get(k)}" for k in different_f[:3]]
    return Comparison(
        verdicts_expected=len(expected_verdicts),
        verdicts_found=len(verdicts),
        verdicts_missing=len(missing_v),
        verdicts_duplicated=len(duplicated_v),
        verdicts_unexpected=len(unexpected_v),
        verdicts_different=len(different_v),
        flags_expected=len(expected_flags),
        flags_found=len(flags),
        flags_missing=len(missing_f),
        flags_duplicated=len(duplicated_f),
        flags_different=len(different_f),
        first_problems=problems[:8],
    )


@dataclass
class RunResult:
    run: int
    scenario: str
    faults: list[str]
    seconds: float
    comparison: dict[str, Any] | None
    ok: bool
    error: str = ""


class Broker:
    """The harness's own broker (``tools/kafka/broker.py --home``)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.bootstrap = ""

    def _run(self, *args: str, timeout: float = 300.0) -> str:
        proc = subprocess.run(
            [sys.executable, str(BROKER), "--home", str(self.home), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"tools/kafka/broker.py {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc.stdout

    def start(self) -> str:
        self.bootstrap = json.loads(self._run("start", "--json").strip().splitlines()[-1])["bootstrap"]
        return self.bootstrap

    def restart(self, hard: bool) -> None:
        self._run("restart", *(["--hard"] if hard else []))

    def pause(self) -> None:
        self._run("pause")

    def resume(self) -> None:
        self._run("resume")

    def stop(self) -> None:
        self._run("stop")


def wait_for(condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def end_offset(bootstrap: str, topic: str) -> int:
    """The flags topic's end offset (records + transaction markers): a cheap progress gauge."""
    from kafka import KafkaConsumer
    from kafka.structs import TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    try:
        tp = TopicPartition(topic, 0)
        return int(consumer.end_offsets([tp]).get(tp, 0))
    except Exception:
        return 0
    finally:
        consumer.close()


class Harness:
    def __init__(
        self,
        workdir: Path,
        broker: Broker,
        params: Path,
        log: Callable[[str], None],
        pause_seconds: float,
        gaps: bool = False,
    ) -> None:
        self.gaps = gaps
        self.pause_seconds = pause_seconds
        self.workdir = workdir
        self.broker = broker
        self.params = params
        self.log = log

    def run(self, index: int, scenario: str, rng: random.Random) -> RunResult:
        from tools.cluster import Cluster, group_assignment, json_records, site_config, unique_name

        from fedrca.application.site import site_runtime
        from fedrca.config import load_config
        from fedrca.connectors import replay
        from fedrca.connectors.kafka import KafkaSink, ensure_site_topics
        from fedrca.contracts import Verdict
        from fedrca.datasets import load_dataset
        from fedrca.datasets.loader import load_frame, plant_frames
        from fedrca.streams.embedded import replay_frame
        from fedrca.streams.runtime import RuntimeSettings

        began = time.monotonic()
        bootstrap = self.broker.bootstrap
        tmp = Path(tempfile.mkdtemp(prefix=f"run{index:02d}-", dir=self.workdir))
        config_path = site_config(tmp, unique_name("flt"), missing=self.gaps)
        stream = FAULT
        if scenario == "drift":  # the same kills, on a site that re-baselines mid-stream
            import yaml

            data = yaml.safe_load(config_path.read_text(encoding="utf-8"))
            data["drift"] = DRIFT
            config_path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
            stream = NOMINAL
        config = load_config(config_path)
        fault = stream
        if self.gaps:
            fault = with_gaps(stream, tmp / stream.name, {p.name: list(p.sensors) for p in config.plants})
        runtime = site_runtime(
            config, TRAIN, params_dir=self.params, settings=RuntimeSettings(allowed_lateness=LATENESS)
        )
        data = plant_frames(config, load_frame(config, fault))
        expected = replay_frame(runtime, {p: d.Y for p, d in data.items()}, sample_seconds=180.0)
        expected_verdicts = {v.id: v for v in expected.verdicts}
        expected_flags = {(f.plant, f.seq): (f.zc, f.za, f.model_version, f.degraded) for f in expected.flags}
        total_flags = len(expected_flags)

        ensure_site_topics(bootstrap, config)
        subprocess.run(
            [*FEDRCA, "publish-params", "--config", str(config_path), "--params", str(self.params),
             "--broker", f"kafka://{bootstrap}"],
            check=True, capture_output=True, cwd=REPO,
        )  # fmt: skip
        cluster = Cluster(config_path, bootstrap, TRAIN, tmp)
        faults: list[str] = []
        flags_topic, verdicts_topic = config.topic("flags"), config.topic("verdicts")
        try:
            for name in ("w1", "w2"):
                cluster.add(name, "plants,params")
            cluster.add("rca", "rca", ["--allowed-lateness", str(LATENESS)], plant_data=False)
            plants_group, rca_group = f"fedrca-{config.site}-plants", f"fedrca-{config.site}-rca"

            def plants_ready() -> bool:
                members = group_assignment(bootstrap, plants_group)
                covered = {(t, p) for m in members or [] for t, parts in m.items() for p in parts}
                wanted = {(config.topic("sensors", plant=n), 0) for n in config.plant_names}
                return members is not None and len(members) == 2 and wanted <= covered

            wait_for(plants_ready, 240, "two plant workers")
            wait_for(lambda: group_assignment(bootstrap, rca_group) is not None, 240, "the RCA worker")

            def feed() -> None:
                groups = {p.name: list(p.sensors) for p in config.plants}
                dataset = load_dataset(config.dataset, fault)
                with KafkaSink(bootstrap, config) as sink:
                    replay.replay(dataset, groups, sink, site=config.site, pacer=replay.Pacer.from_spec(SPEED))

            feeder = threading.Thread(target=feed, daemon=True)
            feeder.start()
            n_faults = rng.randint(1, 3) if scenario in ("kill", "drift") else 1
            points = sorted(rng.uniform(0.05, 0.9) for _ in range(n_faults))
            for share in points:
                threshold = int(share * total_flags)
                wait_for(lambda t=threshold: end_offset(bootstrap, flags_topic) >= t, 240, f"{threshold} flags")
                if scenario in ("kill", "drift"):
                    victims = rng.choice([["w1"], ["w2"], ["rca"], ["w1", "w2"]])
                    for v in victims:
                        cluster.workers[v].kill9()
                    delay = rng.uniform(0.0, 3.0)
                    time.sleep(delay)  # the outage itself (a fault, not a wait for a condition)
                    for v in victims:
                        cluster.workers[v].start()
                    faults.append(f"kill -9 {'+'.join(victims)} at {share:.0%} of the flags, back after {delay:.1f} s")
                elif scenario == "restart":
                    hard = index % 2 == 1
                    self.broker.restart(hard=hard)
                    faults.append(f"broker {'SIGKILL' if hard else 'SIGTERM'} restart at {share:.0%} of the flags")
                else:
                    self.broker.pause()
                    time.sleep(self.pause_seconds)  # the pause itself is the fault being injected
                    self.broker.resume()
                    faults.append(f"broker paused {self.pause_seconds:.0f} s at {share:.0%} of the flags")
            feeder.join(timeout=600)
            if feeder.is_alive():
                raise TimeoutError("the replay did not finish within 600 s")

            def all_in() -> bool:
                try:
                    return set(expected_verdicts) <= {v["id"] for v in json_records(bootstrap, verdicts_topic)}
                except Exception:
                    return False

            sensors = [config.topic("sensors", plant=n) for n in config.plant_names]
            try:
                wait_for(all_in, 600, "every expected verdict", interval=2.0)
                # every sensor record processed before the RCA is asked about the flags: with every verdict in
                # before a last kill, the flags after it come only once the workers started again have served
                wait_for(
                    lambda: all(_consumed(bootstrap, plants_group, t) for t in sensors),
                    300,
                    "the plant workers to process every sensor record",
                    1.0,
                )
                wait_for(
                    lambda: _consumed(bootstrap, rca_group, flags_topic), 300, "the RCA to consume every flag", 1.0
                )
            except TimeoutError as exc:
                self.log(f"  {exc}")
            comparison = compare(
                expected_verdicts,
                expected_flags,
                json_records(bootstrap, verdicts_topic),
                json_records(bootstrap, flags_topic),
                decode=Verdict.from_dict,
            )
            result = RunResult(index, scenario, faults, round(time.monotonic() - began, 1), asdict(comparison),
                               comparison.ok)  # fmt: skip
            if not comparison.ok:
                self.log("\n".join(comparison.first_problems))
                self.log(cluster.diagnostics())
            return result
        except Exception as exc:
            self.log(cluster.diagnostics())
            return RunResult(index, scenario, faults, round(time.monotonic() - began, 1), None, False, repr(exc))
        finally:
            cluster.stop_all()


def _consumed(bootstrap: str, group: str, topic: str) -> bool:
    """``group`` has committed past the last record of ``topic`` (False while the broker recovers)."""
    from tools.cluster import consumed_everything

    try:
        return consumed_everything(bootstrap, group, topic)
    except Exception:
        return False


def summarise(results: list[RunResult]) -> str:
    lines = ["scenario  runs  ok  faults  verdicts compared  flags compared  lost  duplicated  different  median s"]
    for scenario in ("kill", "restart", "pause", "drift"):
        rs = [r for r in results if r.scenario == scenario]
        if not rs:
            continue
        cs = [r.comparison for r in rs if r.comparison]
        lost = sum(c["verdicts_missing"] + c["flags_missing"] for c in cs)
        dup = sum(c["verdicts_duplicated"] + c["flags_duplicated"] for c in cs)
        diff = sum(c["verdicts_different"] + c["verdicts_unexpected"] + c["flags_different"] for c in cs)
        seconds = sorted(r.seconds for r in rs)[len(rs) // 2]
        lines.append(
            f"{scenario:<8}  {len(rs):>4}  {sum(r.ok for r in rs):>2}  {sum(len(r.faults) for r in rs):>6}  "
            f"{sum(c['verdicts_found'] for c in cs):>17}  {sum(c['flags_found'] for c in cs):>14}  "
            f"{lost:>4}  {dup:>10}  {diff:>9}  {seconds:>8.0f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=30, help="runs with kill -9 of workers (default 30)")
    parser.add_argument("--restarts", type=int, default=5, help="runs with a broker restart (default 5)")
    parser.add_argument("--pauses", type=int, default=5, help="runs with a broker pause (default 5)")
    parser.add_argument("--pause-seconds", type=float, default=30.0, help="length of a broker pause (default 30)")
    parser.add_argument(
        "--gaps", action="store_true", help="the input with missing values (with_gaps, docs/missing.md)"
    )
    parser.add_argument(
        "--drifts", type=int, default=5, help="kill runs on a site that re-baselines mid-stream (default 5)"
    )
    parser.add_argument("--seed", type=int, default=None, help="seed of the fault schedule (default: random, printed)")
    parser.add_argument("--json", type=Path, default=None, help="write every run's result to this file")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (worker logs, broker)")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    rng = random.Random(seed)

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    workdir = Path(tempfile.mkdtemp(prefix="fedrca-faults-"))
    broker = Broker(workdir / "kafka")
    log(f"fault injection: seed {seed}, work directory {workdir}")
    try:
        bootstrap = broker.start()
        log(f"broker at {bootstrap}")
        params = workdir / "params"
        config_path = workdir / "train.yaml"
        config_path.write_text((REPO / "config" / "tep.yaml").read_text(encoding="utf-8"), encoding="utf-8")
        subprocess.run(
            [*FEDRCA, "train", "--config", str(config_path), "--data", str(TRAIN), "--out", str(params), "--quiet"],
            check=True, capture_output=True, cwd=REPO,
        )  # fmt: skip
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        log(f"setup failed: {exc}")
        return 2
    harness = Harness(workdir, broker, params, log, args.pause_seconds, gaps=args.gaps)
    plan = ["kill"] * args.kills + ["restart"] * args.restarts + ["pause"] * args.pauses + ["drift"] * args.drifts
    results: list[RunResult] = []
    try:
        for index, scenario in enumerate(plan, 1):
            result = harness.run(index, scenario, rng)
            results.append(result)
            c = result.comparison or {}
            status = "ok" if result.ok else "FAILED " + (result.error or "; ".join(c.get("first_problems", [])))
            log(
                f"[{index}/{len(plan)}] {scenario}: {'; '.join(result.faults) or 'no fault struck'}; "
                f"verdicts {c.get('verdicts_found', '?')}/{c.get('verdicts_expected', '?')}, "
                f"flags {c.get('flags_found', '?')}/{c.get('flags_expected', '?')}; {result.seconds:.0f} s; {status}"
            )
            if args.json:
                args.json.write_text(json.dumps({"seed": seed, "runs": [asdict(r) for r in results]}, indent=1))
    finally:
        try:
            broker.stop()
        except RuntimeError as exc:
            log(str(exc))
        if not args.keep:
            import shutil

            shutil.rmtree(workdir, ignore_errors=True)
    print(f"seed {seed}")
    print(summarise(results))
    return 0 if results and all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
