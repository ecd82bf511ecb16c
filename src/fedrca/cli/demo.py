"""``fedrca demo``: the main job on the embedded default (one process, no broker).

1. federated training on the nominal TEP file (clients and server in process;
   the artifacts go to ``<out>/params``);
2. the plant processors and the RCA stage of :class:`~fedrca.streams.runtime.SiteRuntime`
   (the code the Kafka workers run) built from the trained parameters;
3. the bundled nominal test file and fault files replayed as live streams
   (JSON sensor messages in, JSON flags and verdicts out), verdicts printed as they
   change, Prometheus metrics served on ``/metrics`` while it runs;
4. the evaluation table and a report directory (PNG plots + HTML page per file).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedrca import __version__
from fedrca.application.outputs import Outputs, staged_folder, write_file
from fedrca.application.site import site_runtime
from fedrca.application.training import train_site
from fedrca.cli.bundled import bundled_config, bundled_data_dir
from fedrca.cli.report import write_report
from fedrca.config import load_config
from fedrca.config.limits import (
    MAX_DEMO_HOURS,
    MAX_HOLD_SECONDS,
    MAX_PORT,
    check_range,
)
from fedrca.connectors.replay import Pacer
from fedrca.connectors.simulator import SimulationSpec, TEPSimulator, cached_run, parse_disturbance
from fedrca.contracts import Verdict
from fedrca.datasets.loader import load_frame, plant_frames
from fedrca.datasets.tep import TEP_COLUMNS, TEP_FAULT_ONSET, TEP_FAULT_ROOTS, TEP_SAMPLE_SECONDS
from fedrca.exceptions import ConfigError, DataError
from fedrca.observability import Metrics
from fedrca.streams.embedded import EmbeddedRun, progress_bar, replay_chunks, replay_frame
from fedrca.streams.runtime import SiteRuntime

__all__ = ["FileResult", "register", "run_demo"]


@dataclass(frozen=True)
class FileResult:
    """One replayed file and what the pipeline made of it."""

    name: str
    root: str | None  # None for nominal data
    run: EmbeddedRun


def _say(message: str) -> None:
    print(message, flush=True)


def _verdict_printer(name: str) -> Any:
    last: list[tuple[Any, ...]] = [()]

    def show(v: Verdict) -> None:
        key = (v.root_cause, v.propagated, v.outcome, v.candidates)
        if key == last[0]:
            return  # print changes, not every row of an episode
        last[0] = key
        if v.root_cause is not None:
            what = f"root cause {v.root_cause}" + (f", propagated to {', '.join(v.propagated)}" if v.propagated else "")
            if len(v.candidates) > 1:  # the engine is not sure between these (rca.candidate_mass)
                what += f" [candidates: {', '.join(v.candidates)}]"
        else:
            what = v.outcome.replace("_", " ")
        first, last_seq = v.evidence_window
        if sys.stderr.isatty():
            sys.stderr.write("\r" + " " * 70 + "\r")  # clear the live progress bar
        _say(f"  [{name}] sample {v.seq:>4}: {what} (posterior {v.posterior:.2f}, evidence {first}..{last_seq})")

    return show


def _score(result: FileResult, plants: list[str], onset: int) -> dict[str, Any]:
    run = result.run
    zc = np.asarray(np.column_stack([run.results[p].zc for p in plants]).any(axis=1))
    verdicts = run.verdicts
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
    }


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


def check_demo_options(args: argparse.Namespace) -> SimulationSpec:
    """Refuse every number of ``fedrca demo`` outside its bound before any work (whatever ``--source``).

    The port, the hold, the replay speed and the simulated run (``--hours``, ``--seed``, ``--idv``:
    :class:`~fedrca.connectors.simulator.SimulationSpec`, at most :data:`~fedrca.config.limits.MAX_DEMO_HOURS`:
    the demo keeps every sample for its report, :func:`~fedrca.config.limits.demo_bytes`). Returns the
    simulated run's spec.
    """
    check_range("--metrics-port", args.metrics_port, 0, MAX_PORT, "a TCP port; 0 = any free one")
    check_range("--hold", args.hold, 0, MAX_HOLD_SECONDS, "seconds /metrics is served at the end; Ctrl-C ends it")
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


def run_demo(args: argparse.Namespace) -> int:
    """The demo (see the module docstring); returns the exit code."""
    check_demo_options(args)
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
    Outputs.plan({"--config": args.config}, folders={"--out": out}, input_folders={"--data-dir": data_dir})
    pacer_spec = args.speed

    metrics = Metrics(plants=config.plant_names)
    try:
        port = metrics.serve(args.metrics_port)
    except OSError:
        port = metrics.serve(0)  # the default port is taken (another exporter): any free one
    _say(f"fedrca {__version__} demo: {len(config.plants)} TEP plants ({', '.join(config.plant_names)}), no broker")
    _say(f"  Prometheus metrics: http://127.0.0.1:{port}/metrics  (while the demo runs)")

    # 1. federated training (clients and server in process; only noised states and gradients move)
    _say(f"\n1/3 federated training on {nominal_path} ...")
    nominal = load_frame(config, nominal_path)
    with contextlib.redirect_stderr(io.StringIO()):
        trained = train_site(config, nominal, out / "params", resume=False, progress=None, source=str(nominal_path))
    table = trained.table()
    _say(table[["plant", "states", "client loss before", "client loss after", "epsilon"]].to_string(index=False))
    version = next(iter(trained.artifacts.values())).version if trained.artifacts else "proprietary"
    _say(f"  artifacts {version} in {out / 'params'} ({trained.seconds:.1f} s)")

    # 2. the live pipeline on the embedded default
    _say("\n2/3 plant processors + RCA stream (embedded; same cores as the Kafka workers)")
    runtime = site_runtime(config, nominal_path, params_dir=out / "params", metrics=metrics)
    _say(
        f"  parameters {runtime.plants.processors[config.plant_names[0]].model_version}, graph "
        f"{runtime.rca.engine.graph.source}, flag epsilon {config.privacy.flag_epsilon}, replay speed {pacer_spec}"
    )
    files = [("d00_te.dat", None)] + [(f"d{f}_te.dat", TEP_FAULT_ROOTS[f]) for f in faults]
    results: list[FileResult] = []
    for name, root in files:
        path = data_dir / name
        frame = load_frame(config, path)
        values = {p: d.Y for p, d in plant_frames(config, frame, str(path)).items()}
        runtime.reset()  # each file is a new recording
        what = "nominal operation" if root is None else f"fault from sample {TEP_FAULT_ONSET}, true root {root}"
        _say(f"\n  replaying {name} ({len(frame)} samples; {what})")
        run = replay_frame(
            runtime,
            values,
            sample_seconds=TEP_SAMPLE_SECONDS,
            pacer=Pacer.from_spec(pacer_spec),
            on_verdict=_verdict_printer(name.removesuffix("_te.dat")),
            progress=progress_bar(name),
        )
        results.append(FileResult(name, root, run))

    # 3. evaluation and report
    rows = [_score(r, config.plant_names, TEP_FAULT_ONSET) for r in results]
    _say("\n3/3 evaluation (alarm rate = any plant's Z_c; verdicts after onset naming the true root)")
    pd.set_option("display.width", 160)
    _say(pd.DataFrame(rows).to_string(index=False))
    # the report appears whole (every file's page, plots and the index) or not at all
    with staged_folder(out / "report", option="--out") as stage:
        for result in results:
            _report(stage, result, runtime, TEP_FAULT_ONSET)
        _index(stage, rows)
    index = out / "report" / "index.html"
    dead = sum(len(r.run.deadletters) for r in results)
    _say(f"\nreport: {index}   dead letters: {dead}   done in {time.perf_counter() - started:.1f} s")
    if args.hold > 0:
        _say(f"serving metrics for {args.hold:.0f} more seconds (Ctrl-C to stop)")
        time.sleep(args.hold)
    metrics.close()
    return 0


#: the simulated nominal run the live demo fits on (tep-studio, mode 1; cached after the first demo)
NOMINAL_HOURS, NOMINAL_SEED = 25.0, 200


def run_simulator_demo(args: argparse.Namespace) -> int:
    """``fedrca demo --source simulator``: the same pipeline on a live simulated TEP plant.

    Fits and trains on a simulated nominal run, then runs the live plant (``--hours``,
    ``--seed``, the disturbance ``--idv N@HOURS``) sample by sample through the plant
    processors and the RCA stage as the simulator produces it, and ends with the table.
    """
    started = time.perf_counter()
    config = load_config(args.config or bundled_config("tep-sim.yaml"))
    if config.dataset.format != "tep":
        raise ConfigError("the simulator makes TEP samples: use config/tep-sim.yaml", key="--config")
    spec = check_demo_options(args)
    disturbance = spec.disturbances[0]
    onset = round(disturbance.onset_h * 3600 / spec.sample_seconds)  # row k holds the plant at (k + 1) * 3 min
    if onset >= spec.n_samples:
        raise ConfigError(
            f"the disturbance starts at {disturbance.onset_h:g} h, after the {args.hours:g} h run", key="--idv"
        )
    root = TEP_FAULT_ROOTS.get(f"{disturbance.idv:02d}")
    out = Path(args.out)
    metrics = Metrics(plants=config.plant_names)
    try:
        port = metrics.serve(args.metrics_port)
    except OSError:
        port = metrics.serve(0)  # the port is taken (another exporter): any free one, as with --source files
    _say(f"fedrca {__version__} demo on a live simulated TEP plant: {len(config.plants)} plants, no broker")
    _say(f"  Prometheus metrics: http://127.0.0.1:{port}/metrics  (while the demo runs)")

    _say(f"\n1/3 nominal data: {NOMINAL_HOURS:g} h of the simulated plant (seed {NOMINAL_SEED}; cached once run)")
    nominal = cached_run(SimulationSpec(hours=NOMINAL_HOURS, seed=NOMINAL_SEED))
    assert nominal is not None
    with contextlib.redirect_stderr(io.StringIO()):
        trained = train_site(config, nominal.frame, out / "params", resume=False, progress=None, source="simulated")
    _say(f"  federated training: {len(trained.artifacts)} artifacts in {out / 'params'} ({trained.seconds:.1f} s)")

    what = f"IDV {disturbance.idv} from {disturbance.onset_h:g} h (sample {onset})"
    _say(f"\n2/3 the live plant: {args.hours:g} h, seed {args.seed}, {what}, true root {root or '?'}; {args.speed}")
    runtime = site_runtime(config, nominal.frame, params_dir=out / "params", metrics=metrics)
    simulator = TEPSimulator(spec)
    position = {c: i for i, c in enumerate(TEP_COLUMNS)}
    index = {p.name: [position[c] for c in p.sensors] for p in config.plants}

    def live() -> Any:
        for k, row in simulator.rows():
            yield k, {p: row[cols][None, :] for p, cols in index.items()}

    name = f"simulated IDV {disturbance.idv}"
    run = replay_chunks(
        runtime,
        live(),
        total=spec.n_samples,
        sample_seconds=spec.sample_seconds,
        start_ts=spec.sample_seconds,
        pacer=Pacer.from_spec(args.speed),
        on_verdict=_verdict_printer(name),
        progress=progress_bar(name),
    )
    if simulator.terminated:
        _say(f"  the plant shut down after {run.rows} samples: {simulator.shutdown}")

    _say("\n3/3 evaluation (alarm rate = any plant's Z_c; verdicts after onset naming the true root)")
    pd.set_option("display.width", 160)
    result = FileResult(name, root, run)
    _say(pd.DataFrame([_score(result, config.plant_names, onset)]).to_string(index=False))
    report = out / "report"
    report.mkdir(parents=True, exist_ok=True)
    _report(report, result, runtime, onset)
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
        "--source", choices=("files", "simulator"), default="files",
        help="files: the bundled recorded files (default); simulator: a live simulated plant (needs fedrca[sim])",
    )  # fmt: skip
    demo.add_argument("--idv", default="4@2", metavar="N[@HOURS]", help="simulator: the disturbance (default 4@2)")
    demo.add_argument("--hours", type=float, default=8.0, help="simulator: hours of the live run (default 8)")
    demo.add_argument("--seed", type=int, default=7, help="simulator: the live run's seed (default 7)")
    demo.set_defaults(func=run_demo)
