"""``fedrca train``: federated training of a site's augmentations from nominal data.

Examples::

    fedrca train --config config/tep.yaml --data data/tep/d00.dat --out params/ --test data/tep/d00_te.dat
    fedrca train --config config/synthetic.yaml --synthetic nonlinear_two_plant --out params/synthetic --test synthetic
    fedrca train --config config/synthetic_linear.yaml --synthetic linear_two_plant --samples 10000 --out params/linear

Progress (rounds, losses) goes to stderr, the final tables to stdout. Re-running the
same command resumes from the last completed round in ``<out>/checkpoint``
(``--fresh`` starts over).

A refresh round of the cross-plant part (docs/drift.md) trains on the plants' own recent
nominal rows, read from their history topics, with the detectors fitted on the commissioning
data as the workers fitted them, and is charged on top of the earlier runs' releases::

    fedrca train --config config/tep.yaml --data data/tep/d00.dat --history kafka://HOST:PORT \
                 --previous params/ --out params/
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedrca.application.outputs import Outputs
from fedrca.application.params import load_params
from fedrca.application.site import build_detectors
from fedrca.application.training import next_version, run_training
from fedrca.cli import privacy_notice
from fedrca.config import SiteConfig, TrainingSettings, load_config, resolve_plants
from fedrca.config.limits import (
    MAX_SEED,
    MAX_TRAINING_ROUNDS,
    MEMORY_LIMIT,
    check_seed,
    gib,
    largest,
    plant_bytes,
)
from fedrca.connectors.kafka import KafkaOptions, bootstrap_of, read_topic
from fedrca.connectors.names import SiteNames
from fedrca.contracts.bounds import parse_json, short
from fedrca.datasets.loader import PlantData, load_frame, plant_frames
from fedrca.datasets.synthetic import SyntheticData, linear_multiplant, nonlinear_two_plant
from fedrca.drift import RowHistory, usable_rows
from fedrca.exceptions import ConfigError
from fedrca.training.federated import FederatedTraining, TrainingResult, lifetime_of
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


def previous_spend(config: SiteConfig, directory: str) -> dict[str, dict[str, Any]]:
    """Each plant's whole-life training spend so far, from the artifacts in ``directory`` (``--previous``; a folder
    without artifacts is a site's first training: nothing spent yet)."""
    folder = Path(directory)
    if folder.is_dir() and not any(folder.glob("*.json")):
        return {}
    artifacts = load_params(directory, config, option="--previous")
    return {plant: lifetime_of(a.manifest) for plant, a in artifacts.items() if plant in config.plant_names}


def refresh_settings(config: SiteConfig) -> TrainingSettings:
    """The training settings of a refresh round: ``drift.federated``'s epsilons where it sets them."""
    federated = config.drift.federated
    pairs = (("state_epsilon", federated.state_epsilon), ("moment_epsilon", federated.moment_epsilon))
    update = {k: v for k, v in pairs if v is not None}
    privacy = config.training.privacy.model_copy(update=update)
    return config.training.model_copy(update={"privacy": privacy})


def history_frame(config: SiteConfig, broker: str) -> pd.DataFrame:
    """The rows every plant kept in its history topic and a refresh could read (no alarm within the guard band),
    on their common seqs, as one frame of the plants' columns; ``attrs["segments"]``: its contiguous runs.

    Raises
    ------
    ConfigError
        When the loop is off (no history) or the plants kept too few common nominal rows.
    """
    if not config.drift.enabled:
        raise ConfigError("--history needs the plants' history: set drift.enabled: true", key="--history")
    bootstrap = bootstrap_of(broker)
    options = KafkaOptions.from_settings(config.kafka)
    names = SiteNames(config)
    drift = config.drift
    capacity = drift.rows("history", config.dataset.sample_seconds)
    kept: dict[str, pd.DataFrame] = {}
    for plant in config.plants:
        history = RowHistory(len(plant.sensors), capacity)
        records: dict[bytes, bytes] = {}
        for record in read_topic(bootstrap, names.history(plant.name), timeout=60, options=options):
            if record.key is not None and record.key.startswith(b"rows/") and record.value is not None:
                records[record.key] = record.value
        for key, value in sorted(records.items()):
            # a record the plant's loop would refuse is left out, as its worker leaves it out (and writes the
            # record before it again when it next takes the plant): bounded, its own slot, the plant's width
            try:
                history.check_record(key, parse_json(value, "a history record", max_depth=1), value)
            except Exception as exc:  # whatever a hostile record makes the readers raise
                what = f"the record under {short(key)} is not a history chunk of plant {plant.name}"
                print(f"fedrca train: {names.history(plant.name)}: {what} ({short(str(exc), 200)}): left out",
                      file=sys.stderr)  # fmt: skip
                continue
            history.load(value)
        seqs, Y, _, alarm = history.window(history.newest + 1, capacity)
        use = usable_rows(alarm, drift.guard)
        kept[plant.name] = pd.DataFrame(Y[use], index=seqs[use], columns=list(plant.sensors))
    common = sorted(set.intersection(*(set(f.index) for f in kept.values())))
    frame = pd.concat([kept[p].loc[common] for p in config.plant_names], axis=1)
    frame = frame.loc[:, ~frame.columns.duplicated()].reset_index(drop=True)
    if len(frame) < drift.min_rows:
        raise ConfigError(
            f"the plants kept {len(frame)} common nominal rows in their history topics; a refresh round needs "
            f"drift.min_rows = {drift.min_rows}: let the loop run longer",
            key="--history",
        )
    runs = np.diff(np.r_[0, np.flatnonzero(np.diff(common) != 1) + 1, len(common)]).astype(int).tolist()
    frame.attrs["segments"] = runs
    return frame


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
    privacy_notice("train", config, training=True)
    settings = config.training
    if args.rounds is not None and not 1 <= args.rounds <= MAX_TRAINING_ROUNDS:
        raise ConfigError(f"must be in 1..{MAX_TRAINING_ROUNDS:,}, got {args.rounds}", key="--rounds")
    if args.samples < 100:
        raise ConfigError(f"must be at least 100, got {args.samples}", key="--samples")
    check_seed("--seed", args.seed)
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
    # plants given by match rules take the file's columns (their artifacts' schemas name them)
    config = resolve_plants(config, [str(c) for c in frame.columns])
    data = plant_frames(config, frame, source)
    detectors = build_detectors(config, data, source=source)  # checks the nominal data first
    segments = None
    prior = None if args.previous is None else previous_spend(config, args.previous)
    if prior:
        # a refresh round (the plants run artifacts already): drift.federated's releases, on top of the earlier ones
        settings = refresh_settings(config)
    if args.history is not None:
        # the detectors as the workers fitted them, trained on the plants' own recent rows
        history = history_frame(config, args.history)
        data, source, segments = plant_frames(config, history, "history"), f"the history topics of {args.history}", (
            history.attrs["segments"])  # fmt: skip
    # the held-out file is read before the long work: a bad one refuses the run, not its end
    test_frame = load_frame(config, args.test) if args.test and args.test != "synthetic" else None
    test_data = None if test_frame is None else plant_frames(config, test_frame, args.test)
    header = (
        f"fedrca train: site '{config.site}', {len(data)} plants, {len(frame)} nominal samples from {source}; "
        f"estimator {settings.estimator}, {args.rounds or settings.rounds} rounds"
    )
    job = FederatedTraining(config, data, detectors=detectors, settings=settings, segments=segments, prior=prior)
    result = run_training(
        job,
        args.out,
        rounds=args.rounds,
        resume=not args.fresh,
        progress=None if args.quiet else sys.stderr,
        header=header,
        outputs=out,
        min_version=1 if args.previous is None or not Path(args.previous).is_dir() else next_version(args.previous),
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
        held_out = synthetic_data(args.synthetic, max(1000, args.samples // 3), (args.seed + 1000) % (MAX_SEED + 1))
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
    parser.add_argument(
        "--history",
        help="kafka://HOST:PORT: train on the plants' recent nominal rows from their history topics (a refresh round "
        "of drift.federated; --data still fits the detectors as the workers did)",
    )
    parser.add_argument(
        "--previous",
        help="the artifacts the plants run now (a params directory): this run is charged on top of their whole-life "
        "spend against privacy.budget",
    )
    parser.set_defaults(func=_train)
