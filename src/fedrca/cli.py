"""The ``fedrca`` command line.

Subcommands: ``detect`` and ``demo`` here; ``train`` (fedrca.training.commands),
``replay`` / ``evaluate`` (fedrca.rca.commands) and the streaming commands
register themselves when their packages provide a ``commands`` module.

Every handler returns an exit code; a :class:`FedrcaError` becomes one clear
line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from fedrca import __version__
from fedrca.config import load_config
from fedrca.detectors.plant import DetectionResult
from fedrca.exceptions import FedrcaError
from fedrca.site import build_detectors, load_frame, plant_frames, run_detectors

__all__ = ["default_data_dir", "main", "write_flags_jsonl"]

#: Packages whose ``commands.register(subparsers)`` adds subcommands, when present.
COMMAND_MODULES = (
    "fedrca.training.commands",
    "fedrca.rca.commands",
    "fedrca.streams.commands",
    "fedrca.fleet.commands",
)


def default_data_dir() -> Path:
    """The bundled data directory: ``$FEDRCA_DATA`` or ``data/`` of the source checkout."""
    env = os.environ.get("FEDRCA_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "data"


def default_config_dir() -> Path:
    """The bundled ``config/`` directory of the source checkout."""
    return Path(__file__).resolve().parents[2] / "config"


def write_flags_jsonl(path: str | Path, results: dict[str, DetectionResult], published: bool = False) -> int:
    """Write one JSON line per sample and plant (sample-major order); returns the line count.

    Lines: ``{"plant", "seq", "zc", "za", "d2c", "d2a"}`` plus ``zc_pub``/``za_pub`` when
    ``published`` is true.
    """
    plants = list(results)
    if not plants:
        return 0
    fields = ["zc", "za", "zc_pub", "za_pub"] if published else ["zc", "za"]
    columns = {
        name: {
            **{f: getattr(results[name], f).astype(int).tolist() for f in fields},
            "d2c": np.round(results[name].d2_c, 6).tolist(),
            "d2a": np.round(results[name].d2_a, 6).tolist(),
        }
        for name in plants
    }
    keys = [*fields, "d2c", "d2a"]
    lines = [
        json.dumps({"plant": name, "seq": t, **{k: columns[name][k][t] for k in keys}}, separators=(",", ":"))
        for t in range(len(results[plants[0]]))
        for name in plants
    ]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines)


def _detect(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    config = load_config(args.config)
    train = load_frame(config, args.train)
    data = load_frame(config, args.input)
    detectors = build_detectors(config, train, source=str(args.train))
    fitted = time.perf_counter()
    results = run_detectors(detectors, plant_frames(config, data, str(args.input)))
    processed = time.perf_counter()
    n_lines = write_flags_jsonl(args.out, results)
    rows = []
    for name, det in detectors.items():
        r = results[name]
        first = np.flatnonzero(r.zc)
        rows.append(
            {
                "plant": name,
                "sensors": r.r_c.shape[1],
                "states": det.proprietary.state_dim if hasattr(det, "proprietary") else "-",  # fleet: none
                "threshold": round(det.scorers[0].threshold_value, 2),
                "Z_c rate": f"{r.zc.mean():.3f}",
                "Z_a rate": f"{r.za.mean():.3f}",
                "first Z_c": int(first[0]) if len(first) else "-",
            }
        )
    any_flag = np.any([r.zc for r in results.values()], axis=0)
    print(pd.DataFrame(rows).to_string(index=False))
    print(
        f"\n{len(any_flag)} samples, any-plant Z_c rate {any_flag.mean():.3f}; "
        f"wrote {n_lines} lines to {args.out}; fit {fitted - started:.2f} s, "
        f"detect {processed - fitted:.3f} s, total {time.perf_counter() - started:.2f} s"
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every available subcommand."""
    parser = argparse.ArgumentParser(
        prog="fedrca", description="Federated, privacy-preserving root cause analysis for interdependent plants."
    )
    parser.add_argument("--version", action="version", version=f"fedrca {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    detect = sub.add_parser("detect", help="run every plant's detector offline and write flags as JSON lines")
    detect.add_argument("--config", required=True, help="site configuration YAML (e.g. config/tep.yaml)")
    detect.add_argument("--train", required=True, help="nominal data to fit on (e.g. data/tep/d00.dat)")
    detect.add_argument("--input", required=True, help="data to score (e.g. data/tep/d04_te.dat)")
    detect.add_argument("--out", required=True, help="output JSON-lines file of flags")
    detect.set_defaults(func=_detect)

    from fedrca.streams.demo import register_demo

    register_demo(sub, default_config_dir() / "tep.yaml", default_data_dir())

    for module_name in COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fedrca`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except FedrcaError as exc:
        print(f"fedrca {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"fedrca {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
