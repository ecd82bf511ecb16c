"""``fedrca simulate``: a simulated TEP run written as a 52-column ``.dat`` file.

    fedrca simulate --hours 48 --seed 3 [--idv 14@8] [--mode mode1] --out run.dat

The file has the layout of the recorded Braatz files (``fedrca detect`` /
``fedrca replay --config config/tep.yaml`` read it). Needs the optional extra
``fedrca[sim]``; without it the command prints one line naming
``pip install 'fedrca[sim]'`` and exits 2.
"""

from __future__ import annotations

import argparse
import sys
import time

from fedrca.cli.outputs import Outputs
from fedrca.connectors.simulator import (
    DESIGN_CONTROL_INTERVAL_H,
    TEP_MODES,
    SimulationSpec,
    dump_tep_dat,
    parse_disturbance,
    simulate,
)

__all__ = ["register"]


def _simulate(args: argparse.Namespace) -> int:
    spec = SimulationSpec(
        hours=args.hours,
        seed=args.seed,
        disturbances=tuple(parse_disturbance(text) for text in args.idv),
        mode=args.mode,
        control_interval=args.control_interval,
    )
    started = time.perf_counter()
    step = max(1, spec.n_samples // 10)

    def progress(k: int, n: int) -> None:
        if args.progress and (k % step == 0 or k == n):
            print(f"  {k}/{n} samples ({k * spec.sample_seconds / 3600:.1f} h)", file=sys.stderr, flush=True)

    with Outputs.plan({}, {"--out": args.out}) as out:
        run = simulate(spec, progress=progress)
        out.write_with("--out", lambda f: dump_tep_dat(run.values, f))
    idv = ", ".join(f"IDV {d.idv} from {d.onset_h:g} h" for d in spec.disturbances) or "no disturbance"
    ended = f"; PLANT SHUT DOWN after {len(run.values)} samples: {run.shutdown}" if run.terminated else ""
    print(
        f"{args.out}: {len(run.values)} samples x 52 (TEP {spec.mode}, seed {spec.seed}, {idv}; "
        f"tep-studio {run.version}) in {time.perf_counter() - started:.1f} s{ended}"
    )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``simulate`` to the ``fedrca`` subcommands."""
    parser = sub.add_parser(
        "simulate",
        help="simulate the Tennessee Eastman process (needs fedrca[sim]) and write a 52-column TEP .dat file",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--hours", type=float, required=True, help="simulated hours (3-minute samples)")
    parser.add_argument("--seed", type=int, required=True, help="noise / random-disturbance seed (integer >= 0)")
    parser.add_argument(
        "--idv", action="append", default=[], metavar="N[@HOURS]",
        help="switch disturbance IDV(N) (1..28) on, from HOURS (default 0); repeatable",
    )  # fmt: skip
    parser.add_argument("--mode", choices=TEP_MODES, default="mode1", help="operating mode (default mode1)")
    parser.add_argument(
        "--control-interval", type=float, default=DESIGN_CONTROL_INTERVAL_H, metavar="HOURS",
        help=f"controller sample time in hours (default {DESIGN_CONTROL_INTERVAL_H}, the loops' design rate)",
    )  # fmt: skip
    parser.add_argument("--out", required=True, help="output .dat file (52 whitespace-separated columns)")
    parser.add_argument("--progress", action="store_true", help="print progress to stderr")
    parser.set_defaults(func=_simulate)
