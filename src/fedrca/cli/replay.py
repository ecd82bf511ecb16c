"""CLI commands of the RCA: ``fedrca replay`` and ``fedrca evaluate``.

Both run the in-process pipeline (detectors -> published flags -> RCA engine)
on a recorded file with the same pure cores the streaming runtime uses.

``replay`` writes one flags line per plant and sample
``{"plant","seq","zc","za","zc_pub","za_pub","d2c","d2a"}`` (plus ``level``/``level_pub``
when the plants grade their alarms) and one verdict
line per verdict in the verdicts-topic contract
(:class:`fedrca.contracts.Verdict`; ``seq`` = 0-based input row, ``root_cause``
null when none). ``evaluate``
prints the metrics against a fault that starts at ``--fault-start`` in
``--root-cause`` and optionally writes them as JSON and an HTML report.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd

from fedrca.application.evaluation import evaluate_run, json_safe
from fedrca.application.outputs import Outputs
from fedrca.application.params import load_params
from fedrca.application.site import PipelineRun, configured_graph, prepare_site, run_pipeline, without_privacy
from fedrca.cli import privacy_notice
from fedrca.cli.detect import flags_jsonl
from fedrca.cli.report import sensor_episodes, write_report
from fedrca.config import load_config
from fedrca.datasets.loader import check_warmup, load_frame
from fedrca.exceptions import DataError
from fedrca.rca.metrics import FaultEvent

__all__ = ["register"]


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _plan(args: argparse.Namespace, outputs: dict[str, str | None], report: str | None = None) -> Outputs:
    inputs = {"--config": args.config, "--train": args.train, "--input": args.input}
    return Outputs.plan(inputs, outputs, {"--report": report}, input_folders={"--params": args.params})


def _prepare(args: argparse.Namespace) -> PipelineRun:
    config = load_config(args.config)
    privacy_notice(args.command, without_privacy(config) if args.no_privacy else config)
    root = getattr(args, "root_cause", None)
    if root is not None and root not in config.plant_names:
        raise DataError(f"--root-cause '{root}' is not a plant; plants are {', '.join(config.plant_names)}")
    start = getattr(args, "fault_start", 0)
    if start < 0:
        raise DataError(f"--fault-start must be a row number >= 0, got {start}")
    # everything that can refuse the run is read before the long work (and its progress lines)
    if args.params is not None:
        load_params(args.params, config)
    configured_graph(config)
    data = load_frame(config, args.input)
    check_warmup(config, len(data), f"the {len(data):,} rows of {args.input}")
    if start >= len(data):
        raise DataError(f"--fault-start {start} is outside the input's rows 0..{len(data) - 1}")
    started = time.perf_counter()
    _progress(f"fitting {len(config.plants)} plant detectors on {args.train} ...")
    site = prepare_site(config, args.train, params_dir=args.params, no_privacy=args.no_privacy)
    _progress(
        f"  parameters: {site.params_version}; graph: {site.graph.source} "
        f"({len(site.graph.edges())} edges); flag epsilon {site.config.privacy.flag_epsilon}"
    )
    _progress(f"processing {args.input} ...")
    run = run_pipeline(site, data, source=str(args.input))
    _progress(f"  {run.n_samples} rows, {len(run.verdicts)} verdicts in {time.perf_counter() - started:.2f} s")
    for keeper in site.keepers.values():  # each plant's re-baselining loop (drift.enabled), refresh by refresh
        for report in keeper.reports:
            _progress(f"  {report.line()}")
    return run


def _replay(args: argparse.Namespace) -> int:
    with _plan(args, {"--flags-out": args.flags_out, "--verdicts-out": args.verdicts_out}) as out:
        run = _prepare(args)
        text, n_flags = flags_jsonl(run.results, published=True)
        out.write("--flags-out", text)
        lines = [v.encode().decode() for v in run.verdicts]
        out.write("--verdicts-out", "".join(line + "\n" for line in lines))
    named = Counter(v.root_cause or v.outcome for v in run.verdicts)  # sensor events as sensor_fault / _recovered
    print(f"wrote {n_flags} flag lines to {args.flags_out} and {len(lines)} verdicts to {args.verdicts_out}")
    if named:
        print("verdicts: " + ", ".join(f"{k} {n}" for k, n in named.most_common()))
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    with _plan(args, {"--json": args.json}, args.report) as out:
        run = _prepare(args)
        index = _evaluate_run(args, run, out)
    if args.json:
        print(f"wrote {args.json}")
    if index is not None:
        print(f"wrote the report {index}")
    return 0


def _evaluate_run(args: argparse.Namespace, run: PipelineRun, out: Outputs) -> Path | None:
    """Score the run, print the tables, write --json and --report (committed by the caller); the report's page."""
    plants = run.plants
    if args.root_cause not in plants:
        raise DataError(f"--root-cause '{args.root_cause}' is not a plant; plants are {', '.join(plants)}")
    event = FaultEvent(args.fault_start, run.n_samples, args.root_cause)
    result = evaluate_run(run, [event])
    pd.set_option("display.width", 160)
    print(f"\nDetection (fault from row {args.fault_start}; ARL in samples):")
    print(pd.DataFrame(result.detection_rows()).round(3).to_string(index=False))
    print(f"\nRoot cause analysis (true root: {args.root_cause}):")
    print(pd.DataFrame(result.rca_rows()).round(3).to_string(index=False))
    after = result.after_onset
    print(
        f"\n{after['correct']} of {after['verdicts']} verdicts after onset name {args.root_cause}; "
        f"named after onset: {after['named'] or '{}'}; RCA delay: "
        f"{'-' if after['rca_delay'] is None else after['rca_delay']} samples"
    )
    payload = {
        "input": str(args.input),
        "fault_start": args.fault_start,
        "root_cause": args.root_cause,
        "plants": plants,
        "params_version": run.site.params_version,
        "flag_epsilon": run.site.config.privacy.flag_epsilon,
        "graph": run.site.graph.to_dict(),
        **result.as_dict(),
    }
    payload = json_safe(payload)
    if args.json:
        out.write("--json", json.dumps(payload, indent=2) + "\n")
    if not args.report:
        return None
    detectors = run.site.detectors
    with out.folder("--report") as staging:
        page = write_report(
            staging,
            title=f"fedrca evaluate: {Path(args.input).name}",
            summary=(
                f"site {run.site.config.site}, {len(plants)} plants, {run.n_samples} samples, fault from row "
                f"{args.fault_start} in {args.root_cause}; parameters {run.site.params_version}, graph "
                f"{run.site.graph.source}, flag epsilon {run.site.config.privacy.flag_epsilon}"
            ),
            plants=plants,
            d2c={p: run.results[p].d2_c for p in plants},
            d2a={p: run.results[p].d2_a for p in plants},
            thresholds={p: detectors[p].thresholds for p in plants},
            published=run.published(),
            verdicts=run.verdicts,
            graph=run.site.graph,
            metrics=payload,
            detection_rows=result.detection_rows(),
            rca_rows=result.rca_rows(),
            fault_start=args.fault_start,
            root_cause=args.root_cause,
            sensor_rows=sensor_episodes(run.health, run.site.health),
            baselines=_refresh_rows(run) if run.site.keepers else None,
            entries=run.site.config.rca.unobserved_entry,
        )
    return out.path("--report") / page.name


def _refresh_rows(run: PipelineRun) -> list[dict[str, Any]]:
    """Every refresh of the plants' loops in the run, for the report."""
    rows = [r.as_dict() for keeper in run.site.keepers.values() for r in keeper.reports]
    return sorted(rows, key=lambda r: (r["seq"], run.plants.index(r["plant"])))


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="site configuration YAML (e.g. config/tep.yaml)")
    parser.add_argument(
        "--train", required=True, help="nominal data the detectors are fitted on (e.g. data/tep/d00.dat)"
    )
    parser.add_argument("--input", required=True, help="recorded data to replay (e.g. data/tep/d04_te.dat)")
    parser.add_argument("--params", help="directory of training artifacts (fedrca train --out DIR); default: Theta = 0")
    parser.add_argument("--no-privacy", action="store_true", help="publish flags without randomized response")


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``replay`` and ``evaluate``."""
    replay = sub.add_parser(
        "replay", help="run detectors -> published flags -> RCA in-process over a file; write flags and verdicts"
    )
    _common(replay)
    replay.add_argument("--flags-out", required=True, help="JSON-lines file of flags (one line per plant and sample)")
    replay.add_argument("--verdicts-out", required=True, help="JSON-lines file of RCA verdicts")
    replay.set_defaults(func=_replay)

    evaluate = sub.add_parser("evaluate", help="replay a file with a known fault and report detection and RCA metrics")
    _common(evaluate)
    evaluate.add_argument("--fault-start", type=int, required=True, help="0-based row where the fault starts")
    evaluate.add_argument("--root-cause", required=True, help="the plant where the fault originates")
    evaluate.add_argument("--json", help="write the metrics as JSON to this file")
    evaluate.add_argument("--report", help="write PNG plots and index.html into this directory")
    evaluate.set_defaults(func=_evaluate)
