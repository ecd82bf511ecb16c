"""``fedrca fleet --config FLEET.yaml``: learn a fleet's CollabDict model peer to peer and evaluate it.

Runs the participants of the configuration in this process (message passing only)
or, with ``--kafka host:port``, over a Kafka broker (one topic per participant,
``<fleet>.<run id>.peer.<participant>``, one thread per participant in this
process). Writes the shared model (``model.npz`` + ``.json``), each participant's
own weights and ``report.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import uuid
import warnings
from pathlib import Path
from typing import Any

import pandas as pd

from fedrca.application.fleet.config import FleetConfig, load_fleet_config
from fedrca.application.fleet.run import FleetOutcome, Runner, run_fleet, write_outcome
from fedrca.application.outputs import Outputs
from fedrca.exceptions import PrivacyWarning

__all__ = ["register"]


def _fleet(args: argparse.Namespace) -> int:
    Outputs.plan({"--config": args.config}, folders={"--out": args.out})  # the configuration itself first
    config = load_fleet_config(args.config)
    with Outputs.plan(config.inputs(args.config), folders={"--out": args.out}) as out:
        outcome = _run(args, config)
        with out.folder("--out") as stage:
            paths = write_outcome(stage, outcome)
    _summary(args, config, outcome, {k: Path(args.out) / v.relative_to(stage) for k, v in paths.items()})
    return 0


def _run(args: argparse.Namespace, config: FleetConfig) -> FleetOutcome:
    """Learn the fleet's model in process or over Kafka, and evaluate it."""
    runner: Runner | None = None
    if args.kafka:
        # start-up cost: the Kafka client is imported only for a fleet run over a broker
        from fedrca.application.fleet.kafka import kafka_fleet
        from fedrca.connectors.kafka import bootstrap_of

        bootstrap = bootstrap_of(args.kafka, key="--kafka")
        # a fresh topic prefix per run: a participant reads its topic from the beginning
        prefix = f"{config.fleet}.{uuid.uuid4().hex[:8]}"

        def runner(data: Any) -> Any:
            return kafka_fleet(bootstrap, data, config.settings(), config.peer_graph(), seed=config.seed, fleet=prefix)

    with warnings.catch_warnings():
        # every firing is recorded per participant and summarised below, once
        warnings.simplefilter("ignore", PrivacyWarning)
        return run_fleet(config, runner)


def _summary(args: argparse.Namespace, config: FleetConfig, outcome: FleetOutcome, paths: dict[str, Path]) -> None:
    s = outcome.summary()
    transport = f"Kafka at {args.kafka}" if args.kafka else "in process"
    print(
        f"fleet {config.fleet}: {s['participants']} participants ({transport}), {len(outcome.columns)} variables, "
        f"K = {s['components']} patterns after {s['iterations']} EM iterations; consensus rounds per session "
        f"mean {s['consensus_rounds_mean']:.1f} (max {s['consensus_rounds_max']}); {s['messages']:,} messages, "
        f"{s['megabytes']} MB; identical parameters everywhere: {s['identical']}; "
        f"fleet threshold {s['threshold']:.3f}; {s['seconds']} s"
    )
    rules = [r.calibration.rule for r in outcome.run.results.values()]
    print(
        "participants' thresholds: "
        + ", ".join(f"{rule} {rules.count(rule)}" for rule in ("own", "shared", "fleet") if rule in rules)
        + f" (each one's rule in {paths['participants']}/<name>.json)"
    )
    warned = {n: c for n, c in s["privacy_warnings"].items() if c}
    if warned:
        print(f"l-diversity below ln {config.privacy.l0:g} at: {warned} (EM iterations per participant)")
    if outcome.evaluation:
        rows = [
            {
                "file": r["label"],
                "kind": r["kind"],
                "rows": r["rows"],
                "alarm rate mean": f"{r['mean']:.3f}",
                "min": f"{r['min']:.3f}",
                "max": f"{r['max']:.3f}",
            }
            for r in outcome.evaluation
        ]
        print(pd.DataFrame(rows).to_string(index=False))
    print(f"wrote {paths['model']}, {paths['report']} and {paths['participants']}/")


def register(sub: Any) -> None:
    """Add the ``fleet`` subcommand to the ``fedrca`` parser."""
    p = sub.add_parser("fleet", help="learn a fleet's anomaly model peer to peer (CollabDict) and evaluate it")
    p.add_argument("--config", required=True, help="fleet configuration YAML (e.g. config/fleet-tep.yaml)")
    p.add_argument("--out", default="out/fleet", help="output directory (model.npz, report.json, participants/)")
    p.add_argument("--kafka", default=None, help="run over this broker (host:port or kafka://host:port)")
    p.set_defaults(func=_fleet)
