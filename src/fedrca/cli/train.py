"""``fedrca train``: federated training of a site's augmentations from nominal data.

Examples::

    fedrca train --config config/tep.yaml --data data/tep/d00.dat --out params/ --test data/tep/d00_te.dat
    fedrca train --config config/synthetic.yaml --synthetic nonlinear_two_plant --out params/synthetic --test synthetic
    fedrca train --config config/synthetic_linear.yaml --synthetic linear_two_plant --samples 10000 --out params/linear

Progress (rounds, losses) goes to stderr, the final tables to stdout. Re-running the
same command resumes from the last completed round in ``<out>/checkpoint``
(``--fresh`` starts over).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np
import pandas as pd

from fedrca.application.outputs import Outputs
from fedrca.application.site import build_detectors
from fedrca.application.training import run_training
from fedrca.config import SiteConfig, load_config
from fedrca.config.limits import MAX_TRAINING_ROUNDS, MEMORY_LIMIT, gib, largest, plant_bytes
from fedrca.datasets.loader import PlantData, load_frame, plant_frames
from fedrca.datasets.synthetic import SyntheticData, linear_multiplant, nonlinear_two_plant
from fedrca.exceptions import ConfigError
from fedrca.training.federated import FederatedTraining, TrainingResult
from fedrca.training.oracle import identified_oracle, linear_oracle, nonlinear_oracle

__all__ = ["SYNTHETIC", "register", "synthetic_data"]

#: Generators ``--synthetic`` knows, with the configuration they match.
SYNTHETIC = {
    "nonlinear_two_plant": "config/synthetic.yaml (P1: 4 sensors, 2 states per plant, plant1 drives plant2)",
    "linear_two_plant": "config/synthetic_linear.yaml (P2: 8 sensors, 2 states per plant, A_12 = 0)",
    "linear_two_plant_inputs": (
        "config/synthetic_inputs.yaml (P3: 8 sensors, 2 states, 2 inputs per plant, A_12 = B_12 = 0)"
    ),
}

#: The inputs of ``linear_two_plant_inputs``: AR(1) with coefficient 0.5, unit variance, mean 1
#: (a non-zero operating point, so the clients' bias has an average input push to carry).
INPUT_MEAN, INPUT_AR = 1.0, 0.5


def synthetic_data(name: str, n_samples: int, seed: int) -> SyntheticData:
    """Nominal data of a known synthetic generator (``system_seed`` 0, noise ``seed``)."""
    if name == "nonlinear_two_plant":
        return nonlinear_two_plant(n_samples=n_samples, seed=seed)
    if name == "linear_two_plant":
        return linear_multiplant(n_samples=n_samples, seed=seed)
    if name == "linear_two_plant_inputs":
        return linear_multiplant(
            n_samples=n_samples, seed=seed, inputs_per_plant=2, input_mean=INPUT_MEAN, input_ar=INPUT_AR
        )
    raise ConfigError(f"unknown synthetic data set '{name}'; choose one of {', '.join(SYNTHETIC)}", key="--synthetic")


def _frame(data: SyntheticData) -> pd.DataFrame:
    if data.U is None:
        return pd.DataFrame(data.Y, columns=data.columns())
    return pd.DataFrame(np.hstack([data.Y, data.U]), columns=data.columns() + data.input_columns())


def _evaluate(
    config: SiteConfig, result: TrainingResult, nominal: dict[str, PlantData], test: dict[str, PlantData], oracle: Any
) -> pd.DataFrame:
    """Held-out residual norms (proprietary, augmented, centralised oracle) and flag rates per plant."""
    rows = []
    offset = 0
    for plant in config.plants:
        det = result.detectors[plant.name]
        det.reset()
        out = det.step_batch(test[plant.name].Y, test[plant.name].U)
        width = out.r_c.shape[1]
        row: dict[str, Any] = {
            "plant": plant.name,
            "mean |r_c| proprietary": round(float(np.mean(np.linalg.norm(out.r_c, axis=1))), 4),
            "mean |r_a| augmented": round(float(np.mean(np.linalg.norm(out.r_a, axis=1))), 4),
        }
        if oracle is not None:
            r_o = oracle[:, offset : offset + width]
            row["mean |r| oracle"] = round(float(np.mean(np.linalg.norm(r_o, axis=1))), 4)
        row["augmented lower"] = "yes" if row["mean |r_a| augmented"] < row["mean |r_c| proprietary"] else "no"
        row["Z_c rate"] = round(float(out.zc.mean()), 4)
        row["Z_a rate"] = round(float(out.za.mean()), 4)
        rows.append(row)
        offset += width
        det.reset()
    return pd.DataFrame(rows)


def _train(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    inputs = {"--config": args.config, "--data": args.data, "--test": args.test}
    with Outputs.plan(inputs, {"--save-data": args.save_data}, {"--out": args.out}) as out:
        _train_into(args, out)
    print(f"\ndone in {time.perf_counter() - started:.1f} s")
    return 0


def _train_into(args: argparse.Namespace, out: Outputs) -> None:
    """Train, write the artifacts (and --save-data) into the plan, print the tables (committed by the caller)."""
    config = load_config(args.config)
    settings = config.training
    if args.rounds is not None and not 1 <= args.rounds <= MAX_TRAINING_ROUNDS:
        raise ConfigError(f"must be in 1..{MAX_TRAINING_ROUNDS:,}, got {args.rounds}", key="--rounds")
    if args.samples < 100:
        raise ConfigError(f"must be at least 100, got {args.samples}", key="--samples")
    if args.synthetic:
        # the generated rows, every plant's arrays over them, the held-out third (plant_bytes per plant)
        width = max(1, sum(len(p.sensors) + len(p.inputs) for p in config.plants))
        need = sum(plant_bytes(args.samples, len(p.sensors) + len(p.inputs), 1) for p in config.plants)
        if need > MEMORY_LIMIT:
            most = largest(
                MEMORY_LIMIT, lambda n: sum(plant_bytes(n, len(p.sensors) + len(p.inputs), 1) for p in config.plants),
                args.samples,
            )  # fmt: skip
            raise ConfigError(
                f"{args.samples} samples of {width} columns need about {gib(need)}, over the {gib(MEMORY_LIMIT)} "
                f"limit (docs/limits.md): give at most {most}",
                key="--samples",
            )
    if args.test == "synthetic" and not args.synthetic:
        raise ConfigError("--test synthetic needs --synthetic", key="--test")
    synthetic: SyntheticData | None = None
    if args.synthetic:
        synthetic = synthetic_data(args.synthetic, args.samples, args.seed)
        frame = _frame(synthetic)
        source = f"synthetic {args.synthetic} (seed {args.seed})"
        if args.save_data:
            out.write("--save-data", frame.to_csv(index=False))
            print(f"writes the generated nominal data to {args.save_data}", file=sys.stderr)
    elif args.data:
        frame = load_frame(config, args.data)
        source = str(args.data)
    else:
        raise ConfigError("give the nominal data: --data FILE (or --synthetic NAME)", key="--data")
    data = plant_frames(config, frame, source)
    detectors = build_detectors(config, data, source=source)  # checks the nominal data first
    # the held-out file is read before the long work: a bad one refuses the run, not its end
    test_frame = load_frame(config, args.test) if args.test and args.test != "synthetic" else None
    test_data = None if test_frame is None else plant_frames(config, test_frame, args.test)
    header = (
        f"fedrca train: site '{config.site}', {len(data)} plants, {len(frame)} nominal samples from {source}; "
        f"estimator {settings.estimator}, {args.rounds or settings.rounds} rounds"
    )
    job = FederatedTraining(config, data, detectors=detectors, settings=settings)
    result = run_training(
        job,
        args.out,
        rounds=args.rounds,
        resume=not args.fresh,
        progress=None if args.quiet else sys.stderr,
        header=header,
        outputs=out,
    )
    how = f"resumed from round {result.resumed_from}" if result.resumed_from else "fresh"
    print(f"\nTraining ({result.rounds} rounds, {how}):")
    print(result.table().to_string(index=False))
    server = result.server
    print(
        f"\nserver: estimator {settings.estimator}, features {server.features}, loss {server.loss:.5g}; "
        f"artifacts {next(iter(result.artifacts.values())).version if result.artifacts else '-'} in {args.out}"
    )
    if not args.test:
        return
    if synthetic is not None and args.test == "synthetic":
        held_out = synthetic_data(args.synthetic, max(1000, args.samples // 3), args.seed + 1000)
        test = plant_frames(config, _frame(held_out), "synthetic held-out data")
        oracle_out = linear_oracle(held_out) if held_out.A is not None else nonlinear_oracle(held_out)
        residuals = oracle_out.residuals
        # identified detectors standardise; express the oracle's raw residuals in the same units
        scale = np.concatenate([result.detectors[p.name].scaler.std for p in config.plants])
        if all(result.detectors[p.name].identified_model is not None for p in config.plants):
            residuals = residuals / scale
        oracle_name = "true model"
    else:
        assert test_frame is not None and test_data is not None
        test = test_data
        columns = [c for p in config.plants for c in (p.sensors or [])]
        if not columns:
            columns = [c for c in test_frame.columns if c in frame.columns]
        residuals = identified_oracle(
            frame[columns].to_numpy(dtype=np.float64),
            test_frame[columns].to_numpy(dtype=np.float64),
            n_states=sum(c.state_dim for c in result.clients.values()),
        ).residuals
        oracle_name = "jointly identified"
    table = _evaluate(config, result, data, test, residuals)
    better = int((table["augmented lower"] == "yes").sum())
    print(f"\nHeld-out residuals on {args.test} (oracle: centralised, {oracle_name}; comparison only):")
    print(table.to_string(index=False))
    print(f"augmented residuals lower than proprietary for {better} of {len(table)} plants")


def register(subparsers: Any) -> None:
    """Add ``fedrca train`` to the CLI."""
    parser = subparsers.add_parser(
        "train",
        help="federated training of the plants' augmentations (writes versioned artifacts)",
        description=(
            "Train every plant's augmentation with the federated protocol on nominal data and write one "
            "artifact per plant plus the server artifact. Re-running resumes from the last completed round."
        ),
    )
    parser.add_argument("--config", required=True, help="site configuration YAML (e.g. config/tep.yaml)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--data", help="nominal data file in the configured format (e.g. data/tep/d00.dat)")
    source.add_argument(
        "--synthetic",
        choices=sorted(SYNTHETIC),
        help="generate nominal data: " + "; ".join(f"{k} for {v}" for k, v in SYNTHETIC.items()),
    )
    parser.add_argument("--samples", type=int, default=3000, help="samples to generate with --synthetic")
    parser.add_argument("--seed", type=int, default=0, help="noise seed of --synthetic")
    parser.add_argument("--save-data", help="also write the generated data to this CSV (usable as --data)")
    parser.add_argument("--out", required=True, help="output directory of the artifacts (and checkpoint/)")
    parser.add_argument("--rounds", type=int, help="total rounds (default: training.rounds of the config)")
    parser.add_argument("--fresh", action="store_true", help="ignore an existing checkpoint and start over")
    parser.add_argument(
        "--test", help="held-out nominal data to compare residuals on (a file, or 'synthetic' with --synthetic)"
    )
    parser.add_argument("--quiet", action="store_true", help="no per-round progress lines")
    parser.set_defaults(func=_train)
