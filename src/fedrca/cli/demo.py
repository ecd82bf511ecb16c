"""``fedrca demo``: the main job on the embedded default (one process, no broker).

1. federated training on the nominal TEP file (clients and server in process;
   the artifacts go to ``<out>/params``);
2. the plant processors and the RCA stage of :class:`~fedrca.streams.runtime.SiteRuntime`
   (the code the Kafka workers run) built from the trained parameters;
3. the bundled nominal test file and fault files replayed as live streams
   (JSON sensor messages in, JSON flags and verdicts out), verdicts printed as they
   change, Prometheus metrics served on ``/metrics`` while it runs; then one fault file
   again with a broken sensor in another plant (``--sensor-fault``): the sensor fault and
   the process fault told apart;
4. the evaluation table and a report directory (PNG plots + HTML page per file).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import logging
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedrca import __version__
from fedrca.application.outputs import Outputs, write_file
from fedrca.application.protocol_demo import through_mqtt, through_opcua
from fedrca.application.site import site_runtime
from fedrca.application.training import train_site
from fedrca.cli.bundled import bundled_config, bundled_data_dir
from fedrca.cli.report import sensor_episodes, write_report
from fedrca.config import SiteConfig, load_config
from fedrca.config.limits import (
    MAX_DEMO_HOURS,
    MAX_HOLD_SECONDS,
    MAX_PORT,
    check_range,
)
from fedrca.connectors.kafka import bootstrap_of
from fedrca.connectors.replay import Pacer
from fedrca.connectors.simulator import SimulationSpec, TEPSimulator, cached_run, parse_disturbance
from fedrca.contracts import SENSOR_FAULT, Verdict
from fedrca.datasets.loader import check_warmup, load_frame, plant_frames
from fedrca.datasets.sensor_faults import inject_sensor_fault, parse_sensor_fault
from fedrca.datasets.tep import TEP_COLUMNS, TEP_FAULT_ONSET, TEP_FAULT_ROOTS, TEP_SAMPLE_SECONDS
from fedrca.exceptions import ConfigError, DataError
from fedrca.observability import Metrics
from fedrca.rca.explain import describe
from fedrca.streams.embedded import EmbeddedRun, progress_bar, replay_chunks, replay_frame
from fedrca.streams.runtime import SiteRuntime

__all__ = ["FileResult", "register", "run_demo"]


@dataclass(frozen=True)
class FileResult:
    """One replayed file and what the pipeline made of it."""

    name: str
    root: str | None  # None for nominal data
    run: EmbeddedRun
    #: the injected sensor fault: (plant, tag, first sample, kind), None without one
    sensor: tuple[str, str, int, str] | None = None


def _say(message: str) -> None:
    print(message, flush=True)


def _verdict_printer(name: str, entries: frozenset[str] = frozenset()) -> Any:
    """Print a verdict when its decision or candidate set changes: the root with its probability, the candidate
    set (``rca.coverage``), then the reason (:func:`fedrca.rca.explain.describe`; ``entries``: the declared
    unmeasured entries, marked in the set)."""
    last: list[tuple[Any, ...]] = [()]

    def show(v: Verdict) -> None:
        if v.is_sensor_event:
            plants = ", ".join(v.sensor_plants)
            what = (
                f"sensor fault in {plants} (a broken tag, not a process fault)"
                if v.outcome == SENSOR_FAULT
                else f"sensor of {plants} recovered"
            )
            if sys.stderr.isatty():
                sys.stderr.write("\r" + " " * 70 + "\r")
            _say(f"  [{name}] sample {v.seq:>4}: {what}")
            return
        key = (v.root_cause, v.propagated, v.outcome, v.candidates)
        if key == last[0]:
            return  # print changes, not every row of an episode
        last[0] = key
        head, *reason = describe(v, entries).splitlines()
        if v.propagated:
            head += f"; propagated to {', '.join(v.propagated)}"
        first, last_seq = v.evidence_window
        if sys.stderr.isatty():
            sys.stderr.write("\r" + " " * 70 + "\r")  # clear the live progress bar
        _say(f"  [{name}] sample {v.seq:>4}: {head} (posterior {v.posterior:.2f}, evidence {first}..{last_seq})")
        for line in reason:
            _say(f"      {line.strip()}")

    return show


def _sensor_events(verdicts: list[Verdict]) -> str:
    """The plants whose sensor fault the RCA reported, each with the sample of its first report, ``-`` for none."""
    first: dict[str, int] = {}
    for v in verdicts:
        if v.outcome == SENSOR_FAULT:
            for p in v.sensor_plants:
                first.setdefault(p, v.seq)
    return " ".join(f"{p}@{seq}" for p, seq in first.items()) or "-"


def _score(result: FileResult, plants: list[str], onset: int) -> dict[str, Any]:
    run = result.run
    zc = np.asarray(np.column_stack([run.results[p].zc for p in plants]).any(axis=1))
    verdicts = [v for v in run.verdicts if not v.is_sensor_event]
    sensor = _sensor_events(run.verdicts)
    if result.root is None:
        naming = [v for v in verdicts if v.root_cause is not None]
        return {
            "file": result.name,
            "true root": "- (nominal)",
            "alarm rate": f"{zc.mean():.3f} (false)",
            "verdicts": len(verdicts),
            "naming a root": len(naming),
            "correct after onset": "-",
            "majority after onset": "-",
            "RCA delay": "-",
            "sensor faults": sensor,
        }
    after = [v for v in verdicts if v.seq >= onset]
    named = Counter(v.root_cause for v in after if v.root_cause is not None)
    correct = sum(1 for v in after if v.root_cause == result.root)
    first = next((v.seq for v in after if v.root_cause == result.root), None)
    return {
        "file": result.name,
        "true root": result.root,
        "alarm rate": f"{zc[onset:].mean():.3f} (detection)",
        "verdicts": len(verdicts),
        "naming a root": sum(named.values()),
        "correct after onset": f"{correct}/{len(after)}",
        "majority after onset": named.most_common(1)[0][0] if named else "-",
        "RCA delay": "-" if first is None else f"{first - onset} samples",
        "sensor faults": sensor,
    }


def _sensor_rows(result: FileResult, runtime: SiteRuntime) -> list[dict[str, Any]]:
    """The injected sensor fault and the plants' own sensor-fault episodes (the operator report holds every
    plant's data, so it may name the tag, which never leaves a plant's boundary in the live system)."""
    checks = {p: h for p, proc in runtime.plants.processors.items() if (h := proc.health) is not None}
    rows = sensor_episodes(result.run.health, checks)
    if result.sensor is not None:
        plant, tag, start, kind = result.sensor
        injected = {"plant": plant, "tag": tag, "check": f"{kind} (injected)", "from sample": start,
                    "to sample": result.run.rows - 1}  # fmt: skip
        rows.insert(0, injected)
    return rows


def _report(out: Path, result: FileResult, runtime: SiteRuntime, onset: int) -> Path:
    plants = runtime.config.plant_names
    run = result.run
    published = np.stack(
        [np.column_stack([run.results[p].zc_pub, run.results[p].za_pub]) for p in plants], axis=1
    ).astype(np.int64)
    detectors = {p: runtime.plants.processors[p].detector for p in plants}
    row = _score(result, plants, onset)
    return write_report(
        out / result.name.removesuffix(".dat"),
        title=f"fedrca demo: {result.name}",
        summary=(
            f"site {runtime.config.site}, {len(plants)} plants, {run.rows} samples"
            + (f", fault from sample {onset} in {result.root}" if result.root else ", nominal operation")
        ),
        plants=plants,
        d2c={p: run.results[p].d2_c for p in plants},
        d2a={p: run.results[p].d2_a for p in plants},
        thresholds={p: d.thresholds for p, d in detectors.items()},
        published=published,
        verdicts=run.verdicts,
        graph=runtime.rca.engine.graph,
        metrics=row,
        detection_rows=[{k: row[k] for k in ("file", "alarm rate")}],
        rca_rows=[{k: v for k, v in row.items() if k != "alarm rate"}],
        fault_start=onset if result.root else None,
        root_cause=result.root,
        sensor_rows=_sensor_rows(result, runtime),
        baselines=[r.as_dict() for r in run.refreshes] if runtime.config.drift.enabled else None,
        entries=runtime.config.rca.unobserved_entry,
    )


def _index(out: Path, rows: list[dict[str, Any]]) -> Path:
    links = "".join(
        f'<li><a href="{r["file"].removesuffix(".dat")}/index.html">{r["file"]}</a> (true root: {r["true root"]})</li>'
        for r in rows
    )
    table = pd.DataFrame(rows).to_html(index=False, border=0)
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>fedrca demo</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{padding:4px 10px;border-bottom:1px solid #ddd}</style></head><body>"
        f"<h1>fedrca demo</h1>{table}<ul>{links}</ul></body></html>\n"
    )
    return write_file(out / "index.html", page)


def _sensor_fault_replay(
    args: argparse.Namespace, config: SiteConfig, runtime: SiteRuntime, data_dir: Path, pacer_spec: str
) -> FileResult:
    """One bundled file replayed again with a broken sensor (``--sensor-fault FAULT:TAG@SAMPLE[:KIND]``)."""
    fault, tag, start, kind = sensor_fault_option(args.sensor_fault)
    name = f"d{fault}_te.dat"
    root = TEP_FAULT_ROOTS.get(fault)
    path = data_dir / name
    frame = load_frame(config, path)
    arrays = plant_frames(config, frame, str(path))
    plant = next((p.name for p in config.plants if tag in p.sensors), None)
    if plant is None:
        raise ConfigError(f"{tag} is no sensor of any plant of {config.site}", key="--sensor-fault")
    column = config.plant(plant).sensors.index(tag)
    if start >= len(frame):
        raise ConfigError(f"{name} has {len(frame)} samples; the sensor fault starts at {start}", key="--sensor-fault")
    values = {p: d.Y for p, d in arrays.items()}
    values[plant], codes = inject_sensor_fault(values[plant], column, kind, start, len(frame), seed=0)
    label = f"{name}+{kind} {tag}"
    runtime.reset()
    what = "nominal operation" if root is None else f"fault from sample {TEP_FAULT_ONSET}, true root {root}"
    _say(f"\n  replaying {name} again with {tag} of the {plant} {kind} from sample {start} ({what})")
    run = replay_frame(
        runtime,
        values,
        sample_seconds=TEP_SAMPLE_SECONDS,
        pacer=Pacer.from_spec(pacer_spec),
        on_verdict=_verdict_printer(f"{name.removesuffix('_te.dat')}+{kind}"),
        progress=progress_bar(label),
        quality={plant: codes},
        keep_flags=False,
    )
    return FileResult(label, root, run, (plant, tag, start, kind))


def sensor_fault_option(text: str) -> tuple[str, str, int, str]:
    """``--sensor-fault FAULT:TAG@SAMPLE[:KIND]`` -> (bundled fault number, tag, first sample, kind); ``00`` is
    the nominal test file.

    Examples
    --------
    >>> sensor_fault_option("04:XMEAS(13)@100")
    ('04', 'XMEAS(13)', 100, 'stuck')
    """
    fault, _, rest = text.partition(":")
    fault = fault.strip().zfill(2)
    if fault != "00" and fault not in TEP_FAULT_ROOTS:
        raise ConfigError(
            f"a sensor fault is FAULT:TAG@SAMPLE[:KIND] with FAULT 00 (nominal) or one of "
            f"{', '.join(TEP_FAULT_ROOTS)}, got {text!r}",
            key="--sensor-fault",
        )
    try:
        tag, start, kind = parse_sensor_fault(rest)
    except DataError as exc:
        raise ConfigError(str(exc), key="--sensor-fault") from None
    return fault, tag, start, kind


def check_demo_options(args: argparse.Namespace) -> SimulationSpec:
    """Refuse every number of ``fedrca demo`` outside its bound before any work (whatever ``--source``).

    The port, the hold, the replay speed and the simulated run (``--hours``, ``--seed``, ``--idv``:
    :class:`~fedrca.connectors.simulator.SimulationSpec`, at most :data:`~fedrca.config.limits.MAX_DEMO_HOURS`:
    the demo keeps every sample for its report, :func:`~fedrca.config.limits.demo_bytes`). Returns the
    simulated run's spec.
    """
    check_range("--metrics-port", args.metrics_port, 0, MAX_PORT, "a TCP port; 0 = any free one")
    check_range("--hold", args.hold, 0, MAX_HOLD_SECONDS, "seconds /metrics is served at the end; Ctrl-C ends it")
    if getattr(args, "sensor_fault", "none") != "none":
        sensor_fault_option(args.sensor_fault)
    Pacer.from_spec(args.speed)
    disturbance = parse_disturbance(args.idv)
    spec = SimulationSpec(hours=args.hours, seed=args.seed, disturbances=(disturbance,))
    if spec.hours > MAX_DEMO_HOURS:
        samples = round(MAX_DEMO_HOURS * 3600 / spec.sample_seconds)
        raise ConfigError(
            f"the demo's live run is at most {MAX_DEMO_HOURS:g} hours ({samples:,} samples), got {spec.hours:g}: "
            "for a longer live plant run fedrca simulate --to kafka://HOST:PORT into fedrca run",
            key="--hours",
        )
    return spec


def _quiet_refresh_log() -> None:
    """The demo prints each file's refreshes itself (indented, after the file); the runtime's log lines of
    them (a worker's log) would say it twice."""
    logging.getLogger("fedrca.drift").setLevel(logging.ERROR)


def run_demo(args: argparse.Namespace) -> int:
    """The demo (see the module docstring); returns the exit code."""
    check_demo_options(args)
    _quiet_refresh_log()
    if args.source == "simulator":
        return run_simulator_demo(args)
    started = time.perf_counter()
    config = load_config(args.config or bundled_config("tep.yaml"))
    data_dir = Path(args.data_dir or bundled_data_dir()) / "tep"
    out = Path(args.out)
    faults = [f.strip().zfill(2) for f in args.faults.split(",") if f.strip()]
    unknown = [f for f in faults if f not in TEP_FAULT_ROOTS]
    if unknown:
        raise ConfigError(
            f"no bundled fault file for {unknown}; faults are {', '.join(TEP_FAULT_ROOTS)}", key="--faults"
        )
    roots = {TEP_FAULT_ROOTS[f] for f in faults}
    if config.dataset.format != "tep" or not roots <= set(config.plant_names):
        raise ConfigError(
            f"the demo replays the TEP files and needs plants {sorted(roots)}: use config/tep.yaml", key="--config"
        )
    nominal_path = data_dir / "d00.dat"
    if not nominal_path.is_file():
        raise DataError(f"{nominal_path}: no such file; --data-dir must hold tep/d00.dat (the bundled data/)")
    # every output is planned before the work, and appears at the end or not at all (params and report)
    plan = Outputs.plan({"--config": args.config}, folders={"--out": out}, input_folders={"--data-dir": data_dir})
    with plan, plan.folder("--out") as stage, contextlib.ExitStack() as on_error:
        pacer_spec = args.speed
        protocol = args.source in ("opcua", "mqtt")
        bootstrap, period = "", 0.0
        if args.source != "mqtt" and (args.mqtt is not None or args.sparkplug):
            raise ConfigError(
                "--mqtt and --sparkplug apply to --source mqtt", key="--mqtt" if args.mqtt else "--sparkplug"
            )
        if protocol:
            if args.broker is None:
                raise ConfigError(
                    f"--source {args.source} goes through Kafka: give --broker kafka://HOST:PORT (a broker of your "
                    "own, or tools/kafka/broker.py start in a checkout)",
                    key="--broker",
                )
            bootstrap = bootstrap_of(args.broker)
            if args.source == "opcua" and config.edge is None:
                raise ConfigError(
                    "--source opcua needs the site's edge: section (config/tep.yaml has one)", key="--config"
                )
            if args.source == "mqtt" and (args.mqtt is None or not re.match(r"^mqtt://[^/\s:]+:\d{1,5}/?$", args.mqtt)):
                raise ConfigError(
                    "--source mqtt publishes to an MQTT broker: give --mqtt mqtt://HOST:PORT (a broker of your own, "
                    "or tools/mosquitto.py start in a checkout)",
                    key="--mqtt",
                )
            check_range("--period", args.period, 0.01, 60.0, f"seconds between two rows on the {args.source} server")
            period = args.period

        metrics = Metrics(plants=config.plant_names)
        on_error.callback(metrics.close)  # a failed demo stops serving /metrics (one that ends well: after --hold)
        try:
            port = metrics.serve(args.metrics_port)
        except OSError:
            port = metrics.serve(0)  # the default port is taken (another exporter): any free one
        path_of = {"opcua": "OPC UA", "mqtt": f"MQTT{' Sparkplug B' if args.sparkplug else ''} at {args.mqtt}"}
        how = f"{path_of[args.source]} -> fedrca edge -> Kafka at {bootstrap}" if protocol else "no broker"
        _say(f"fedrca {__version__} demo: {len(config.plants)} TEP plants ({', '.join(config.plant_names)}), {how}")
        if (off := config.privacy_off()) is not None:
            _say(f"  privacy: {off}")
        _say(f"  Prometheus metrics: http://127.0.0.1:{port}/metrics  (while the demo runs)")

        # 1. federated training (clients and server in process; only noised states and gradients move)
        _say(f"\n1/3 federated training on {nominal_path} ...")
        nominal = load_frame(config, nominal_path)
        with contextlib.redirect_stderr(io.StringIO()):
            trained = train_site(
                config, nominal, stage / "params", resume=False, progress=None, source=str(nominal_path)
            )
        table = trained.table()
        _say(table[["plant", "states", "client loss before", "client loss after", "epsilon"]].to_string(index=False))
        version = next(iter(trained.artifacts.values())).version if trained.artifacts else "proprietary"
        _say(f"  artifacts {version} in {out / 'params'} ({trained.seconds:.1f} s)")

        # 2. the live pipeline on the embedded default
        _say("\n2/3 plant processors + RCA stream (embedded; same cores as the Kafka workers)")
        runtime = site_runtime(config, nominal_path, params_dir=stage / "params", metrics=metrics)
        # the protocol path is compared with the files path on a twin built the same way, which replays every
        # file as the runtime does: state carried from file to file (the plants' re-baselined means, their
        # privacy windows) is then the same on both sides when a file's verdicts are compared
        files_path = (
            site_runtime(config, nominal_path, params_dir=stage / "params", metrics=Metrics(plants=config.plant_names))
            if protocol
            else None
        )
        _say(
            f"  parameters {runtime.plants.processors[config.plant_names[0]].model_version}, graph "
            f"{runtime.rca.engine.graph.source}, flag epsilon {config.privacy.flag_epsilon}, replay speed {pacer_spec}"
        )
        files = [("d00_te.dat", None)] + [(f"d{f}_te.dat", TEP_FAULT_ROOTS[f]) for f in faults]
        results: list[FileResult] = []
        same: list[str] = []
        for name, root in files:
            path = data_dir / name
            frame = load_frame(config, path)
            values = {p: d.Y for p, d in plant_frames(config, frame, str(path)).items()}
            runtime.reset()  # each file is a new recording
            what = "nominal operation" if root is None else f"fault from sample {TEP_FAULT_ONSET}, true root {root}"
            _say(f"\n  replaying {name} ({len(frame)} samples; {what})")
            if files_path is not None:
                files_path.reset()
                expected = replay_frame(files_path, values, sample_seconds=TEP_SAMPLE_SECONDS, keep_flags=False)
                over = path_of[args.source].split(" at ")[0]
                _say(f"  serving it over {over}, a row every {period:g} s ({len(frame) * period:.0f} s) ...")
                table = frame[list(TEP_COLUMNS)].to_numpy(dtype=np.float64)
                if args.source == "mqtt":
                    served = through_mqtt(
                        config, list(TEP_COLUMNS), table, bootstrap, period, args.mqtt.rstrip("/"),
                        sparkplug=args.sparkplug, progress=progress_bar(f"{name} over {over}"),
                    )  # fmt: skip
                else:
                    served = through_opcua(
                        config, list(TEP_COLUMNS), table, bootstrap, period,
                        progress=progress_bar(f"{name} over OPC UA"),
                    )  # fmt: skip
                identical = all(np.array_equal(values[p], served.values[p], equal_nan=True) for p in values)
                _say(
                    f"  {served.rows_published} rows through {over} and fedrca edge to {served.site}.sensors.* "
                    f"({served.seconds:.0f} s, {served.late_updates} late updates); rows identical to the file: "
                    f"{'yes' if identical else 'NO'}"
                )
                if not identical:
                    changed = sum(int((~np.isclose(values[p], served.values[p], equal_nan=True)).sum()) for p in values)
                    raise DataError(
                        f"{name}: {changed} values changed on the way through {over} and fedrca edge "
                        f"({served.late_updates} updates came after their row closed): the machine is too busy for a "
                        f"row every {period:g} s; give a longer --period"
                    )
                values = served.values
            run = replay_frame(
                runtime,
                values,
                sample_seconds=TEP_SAMPLE_SECONDS,
                pacer=Pacer.from_spec(pacer_spec),
                on_verdict=_verdict_printer(name.removesuffix("_te.dat"), frozenset(config.rca.unobserved_entry)),
                progress=progress_bar(name),
                keep_flags=False,
            )
            for refresh in run.refreshes:  # the plants' re-baselining loops (drift.enabled)
                _say(f"    {refresh.line()}")
            results.append(FileResult(name, root, run))
            if protocol:
                agree = [
                    _verdict_key(a) == _verdict_key(b) for a, b in zip(expected.verdicts, run.verdicts, strict=False)
                ]
                n = max(len(expected.verdicts), len(run.verdicts))
                same.append(f"{name}: {sum(agree)}/{n}")
        if args.sensor_fault != "none" and not protocol:
            results.append(_sensor_fault_replay(args, config, runtime, data_dir, pacer_spec))

        # 3. evaluation and report
        rows = [_score(r, config.plant_names, TEP_FAULT_ONSET) for r in results]
        _say("\n3/3 evaluation (alarm rate = any plant's Z_c; verdicts after onset naming the true root)")
        pd.set_option("display.width", 160)
        _say(pd.DataFrame(rows).to_string(index=False))
        if protocol:
            over = path_of[args.source].split(" at ")[0]
            _say(f"\nverdicts through {over} -> edge -> Kafka equal to the files path's: " + ", ".join(same))
        # the report appears whole (every file's page, plots and the index) or not at all, with the params
        report = stage / "report"
        report.mkdir()
        for result in results:
            _report(report, result, runtime, TEP_FAULT_ONSET)
        _index(report, rows)
        on_error.pop_all()
    index = out / "report" / "index.html"
    dead = sum(len(r.run.deadletters) for r in results)
    _say(f"\nreport: {index}   dead letters: {dead}   done in {time.perf_counter() - started:.1f} s")
    if args.hold > 0:
        _say(f"serving metrics for {args.hold:.0f} more seconds (Ctrl-C to stop)")
        time.sleep(args.hold)
    metrics.close()
    return 0


def _verdict_key(v: Verdict) -> tuple[Any, ...]:
    """What a verdict says (its id and time stamp aside): row, root cause, propagation, posterior, outcome."""
    return (v.seq, v.root_cause, tuple(v.propagated), round(v.posterior, 9), v.outcome, v.candidates)


#: the simulated nominal run the live demo fits on (tep-studio, mode 1; cached after the first demo)
NOMINAL_HOURS, NOMINAL_SEED = 25.0, 200
#: The live plant's rows go through the pipeline together when they fall due within this many seconds of
#: each other at the replay speed, at most ``LIVE_CHUNK`` (a recorded file's chunk, ``replay_frame``).
LIVE_CHUNK, LIVE_CHUNK_SECONDS = 20, 0.25


def live_chunk(speed: float | None, sample_seconds: float) -> int:
    """Rows of the live plant handed to the pipeline at once (:data:`LIVE_CHUNK_SECONDS`).

    Each chunk leaves a result per plant in the run, whatever its rows (the report keeps the
    whole run: ``fedrca.config.limits.demo_bytes``), so the rows of a fast replay go together;
    a slow one still sees each row when it is due.

    Examples
    --------
    >>> live_chunk(None, 180.0), live_chunk(40_000.0, 180.0), live_chunk(600.0, 180.0), live_chunk(1.0, 180.0)
    (20, 20, 1, 1)
    """
    if speed is None:
        return LIVE_CHUNK
    return max(1, min(LIVE_CHUNK, int(LIVE_CHUNK_SECONDS * speed / sample_seconds)))


def run_simulator_demo(args: argparse.Namespace) -> int:
    """``fedrca demo --source simulator``: the same pipeline on a live simulated TEP plant.

    Fits and trains on a simulated nominal run, then runs the live plant (``--hours``,
    ``--seed``, the disturbance ``--idv N@HOURS``) through the plant processors and the RCA
    stage as the simulator produces it (the rows due together at once: :func:`live_chunk`),
    and ends with the table.
    """
    started = time.perf_counter()
    config = load_config(args.config or bundled_config("tep-sim.yaml"))
    if config.dataset.format != "tep":
        raise ConfigError("the simulator makes TEP samples: use config/tep-sim.yaml", key="--config")
    spec = check_demo_options(args)
    check_warmup(config, spec.n_samples, f"the {spec.n_samples:,} samples of the {args.hours:g} h run", key="--hours")
    disturbance = spec.disturbances[0]
    onset = round(disturbance.onset_h * 3600 / spec.sample_seconds)  # row k holds the plant at (k + 1) * 3 min
    if onset >= spec.n_samples:
        raise ConfigError(
            f"the disturbance starts at {disturbance.onset_h:g} h, after the {args.hours:g} h run", key="--idv"
        )
    root = TEP_FAULT_ROOTS.get(f"{disturbance.idv:02d}")
    out = Path(args.out)
    # every output is planned before the work (the run cache checks its own folder before it simulates)
    plan = Outputs.plan({"--config": args.config}, folders={"--out": out})
    with plan, plan.folder("--out") as stage, contextlib.ExitStack() as on_error:
        metrics = Metrics(plants=config.plant_names)
        on_error.callback(metrics.close)  # a failed demo stops serving /metrics (one that ends well: after --hold)
        try:
            port = metrics.serve(args.metrics_port)
        except OSError:
            port = metrics.serve(0)  # the port is taken (another exporter): any free one, as with --source files
        _say(f"fedrca {__version__} demo on a live simulated TEP plant: {len(config.plants)} plants, no broker")
        if (off := config.privacy_off()) is not None:
            _say(f"  privacy: {off}")
        _say(f"  Prometheus metrics: http://127.0.0.1:{port}/metrics  (while the demo runs)")

        _say(f"\n1/3 nominal data: {NOMINAL_HOURS:g} h of the simulated plant (seed {NOMINAL_SEED}; cached once run)")
        nominal = cached_run(SimulationSpec(hours=NOMINAL_HOURS, seed=NOMINAL_SEED), rebuild=args.rebuild_cache,
                         fix="rerun the demo with --rebuild-cache")  # fmt: skip
        assert nominal is not None
        with contextlib.redirect_stderr(io.StringIO()):
            trained = train_site(
                config, nominal.frame, stage / "params", resume=False, progress=None, source="simulated"
            )
        _say(f"  federated training: {len(trained.artifacts)} artifacts in {out / 'params'} ({trained.seconds:.1f} s)")

        what = f"IDV {disturbance.idv} from {disturbance.onset_h:g} h (sample {onset})"
        _say(f"\n2/3 the live plant: {args.hours:g} h, seed {args.seed}, {what}, true root {root or '?'}; {args.speed}")
        runtime = site_runtime(config, nominal.frame, params_dir=stage / "params", metrics=metrics)
        simulator = TEPSimulator(spec)
        position = {c: i for i, c in enumerate(TEP_COLUMNS)}
        index = {p.name: [position[c] for c in p.sensors] for p in config.plants}
        pacer = Pacer.from_spec(args.speed)
        together = live_chunk(pacer.speed, spec.sample_seconds)

        def live() -> Any:
            rows = simulator.rows()
            while chunk := list(itertools.islice(rows, together)):
                table = np.stack([row for _, row in chunk])
                yield chunk[0][0], {p: table[:, cols] for p, cols in index.items()}

        name = f"simulated IDV {disturbance.idv}"
        run = replay_chunks(
            runtime,
            live(),
            total=spec.n_samples,
            sample_seconds=spec.sample_seconds,
            start_ts=spec.sample_seconds,
            pacer=pacer,
            on_verdict=_verdict_printer(name, frozenset(config.rca.unobserved_entry)),
            progress=progress_bar(name),
            keep_flags=False,
        )
        if simulator.terminated:
            _say(f"  the plant shut down after {run.rows} samples: {simulator.shutdown}")
        for refresh in run.refreshes:  # the plants' re-baselining loops (drift.enabled)
            _say(f"    {refresh.line()}")

        _say("\n3/3 evaluation (alarm rate = any plant's Z_c; verdicts after onset naming the true root)")
        pd.set_option("display.width", 160)
        result = FileResult(name, root, run)
        _say(pd.DataFrame([_score(result, config.plant_names, onset)]).to_string(index=False))
        (stage / "report").mkdir()
        _report(stage / "report", result, runtime, onset)
        on_error.pop_all()
    report = out / "report"
    _say(f"\nreport: {report}   dead letters: {len(run.deadletters)}   done in {time.perf_counter() - started:.1f} s")
    metrics.close()
    return 0


def register(sub: Any) -> None:
    """Add ``fedrca demo``."""
    demo = sub.add_parser("demo", help="the main job on the embedded default: train, replay TEP faults live, RCA")
    demo.add_argument("--config", default=None, help="TEP site configuration (default: the bundled config/tep.yaml)")
    demo.add_argument(
        "--data-dir", default=None, help="directory holding tep/*.dat (default: $FEDRCA_DATA, else the bundled data)"
    )
    demo.add_argument("--out", default="out/demo", help="trained parameters and the report go here")
    demo.add_argument("--faults", default="01,04,05,06", help="bundled fault files to replay (default 01,04,05,06)")
    demo.add_argument(
        "--speed", default="x40000", help="replay speed: asap, realtime or xN of the 3-minute sampling (default x40000)"
    )
    demo.add_argument("--metrics-port", type=int, default=9464, help="Prometheus port (0 = any free port)")
    demo.add_argument("--hold", type=float, default=0.0, help="keep serving /metrics this many seconds at the end")
    demo.add_argument(
        "--source", choices=("files", "simulator", "opcua", "mqtt"), default="files",
        help="files: the bundled recorded files (default); simulator: a live simulated plant (needs fedrca[sim]); "
        "opcua / mqtt: the files served from an OPC UA server / published to an MQTT broker (--mqtt), read by "
        "fedrca edge into Kafka (needs --broker)",
    )  # fmt: skip
    demo.add_argument("--broker", default=None, help="opcua, mqtt: the Kafka broker, kafka://HOST:PORT")
    demo.add_argument("--mqtt", default=None, metavar="mqtt://HOST:PORT", help="mqtt: the MQTT broker")
    demo.add_argument("--sparkplug", action="store_true", help="mqtt: as Sparkplug B nodes, not JSON per tag")
    demo.add_argument(
        "--period", type=float, default=0.2,
        help="opcua, mqtt: seconds between two rows on the server (default 0.2; 960 rows a file take 3 minutes)",
    )  # fmt: skip
    demo.add_argument(
        "--sensor-fault", default="04:XMEAS(13)@100", metavar="FAULT:TAG@SAMPLE[:KIND]",
        help="files: replay this bundled file again with TAG broken from SAMPLE (KIND stuck, flatline, range, stale or "
        "bad; default 04:XMEAS(13)@100, the separator pressure stuck during the reactor's fault; none: skip)",
    )  # fmt: skip
    demo.add_argument("--idv", default="4@2", metavar="N[@HOURS]", help="simulator: the disturbance (default 4@2)")
    demo.add_argument(
        "--rebuild-cache",
        action="store_true",
        help="simulator: simulate the nominal run again and replace it in the run cache ($FEDRCA_CACHE)",
    )
    demo.add_argument("--hours", type=float, default=8.0, help="simulator: hours of the live run (default 8)")
    demo.add_argument("--seed", type=int, default=7, help="simulator: the live run's seed (default 7)")
    demo.set_defaults(func=run_demo)
