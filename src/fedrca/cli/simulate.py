"""``fedrca simulate``: a simulated TEP run, written as a 52-column ``.dat`` file or streamed live to Kafka.

    fedrca simulate --hours 48 --seed 3 [--idv 14@8] [--mode mode1] --out run.dat
    fedrca simulate --hours 24 --seed 3 --idv 6@2 --to kafka://HOST:PORT [--speed realtime|xN|asap]
                    [--config config/tep.yaml]

The file has the layout of the recorded Braatz files (``fedrca detect`` /
``fedrca replay --config config/tep.yaml`` read it). With ``--to`` every 3-minute
sample goes, as it is simulated, to the site's sensor topics (one message per plant,
``seq`` = sample number, ``ts`` = simulated seconds), paced in real time or N times
faster: a live plant for ``fedrca run`` workers to watch, with the disturbance switched
on at the chosen hour. Needs the optional extra ``fedrca[sim]``; without it the command
prints one line naming ``pip install 'fedrca[sim]'`` and exits 2.
"""

from __future__ import annotations

import argparse
import sys
import time

from fedrca.application.outputs import Outputs
from fedrca.cli.bundled import bundled_config
from fedrca.config import load_config
from fedrca.connectors.kafka import KafkaOptions, KafkaSink, bootstrap_of, ensure_site_topics
from fedrca.connectors.replay import Pacer, progress_printer
from fedrca.connectors.simulator import (
    DESIGN_CONTROL_INTERVAL_H,
    TEP_MODES,
    SimulationSpec,
    TEPSimulator,
    dump_tep_dat,
    parse_disturbance,
    simulate,
    stream_simulation,
)
from fedrca.exceptions import ConfigError

__all__ = ["register"]


def _spec(args: argparse.Namespace) -> SimulationSpec:
    return SimulationSpec(
        hours=args.hours,
        seed=args.seed,
        disturbances=tuple(parse_disturbance(text) for text in args.idv),
        mode=args.mode,
        control_interval=args.control_interval,
    )


def _describe(spec: SimulationSpec) -> str:
    return ", ".join(f"IDV {d.idv} from {d.onset_h:g} h" for d in spec.disturbances) or "no disturbance"


def _stream(args: argparse.Namespace) -> int:
    """``--to kafka://...``: the live run into the site's sensor topics."""
    config = load_config(args.config or bundled_config("tep.yaml"))
    if config.dataset.format != "tep":
        what = config.dataset.format
        raise ConfigError(f"the simulator makes TEP samples; --config must be a TEP site, not {what!r}", key="--config")
    bootstrap = bootstrap_of(args.to)
    pacer = Pacer.from_spec(args.speed)
    spec = _spec(args)
    simulator = TEPSimulator(spec)
    options = KafkaOptions.from_settings(config.kafka)
    sensors = [config.topic("sensors", plant=p) for p in config.plant_names]
    ensure_site_topics(bootstrap, config, options=options, only=sensors)
    sink = KafkaSink(bootstrap, config, options=options)
    print(
        f"simulating TEP {spec.mode} (seed {spec.seed}, {_describe(spec)}; tep-studio {simulator.version}) for "
        f"{spec.hours:g} h = {spec.n_samples} samples into {config.site}.sensors.* at {args.to}, speed {args.speed}",
        flush=True,
    )
    try:
        stats = stream_simulation(
            simulator,
            {p.name: list(p.sensors) for p in config.plants},
            sink,
            site=config.site,
            pacer=pacer,
            progress=progress_printer("simulate") if args.progress else None,
        )
    finally:
        sink.close()
    ended = f"; PLANT SHUT DOWN after {stats.rows} samples: {simulator.shutdown}" if simulator.terminated else ""
    print(
        f"streamed {stats.rows} samples x {len(config.plants)} plants = {stats.messages} messages in "
        f"{stats.seconds:.1f} s (most behind schedule {stats.max_lag:.2f} s){ended}"
    )
    return 0


def _simulate(args: argparse.Namespace) -> int:
    if (args.out is None) == (args.to is None):
        raise ConfigError("give exactly one of --out FILE (write a .dat file) and --to kafka://HOST:PORT (stream)",
                          key="--out")  # fmt: skip
    if args.to is not None:
        return _stream(args)
    spec = _spec(args)
    started = time.perf_counter()
    step = max(1, spec.n_samples // 10)

    def progress(k: int, n: int) -> None:
        if args.progress and (k % step == 0 or k == n):
            print(f"  {k}/{n} samples ({k * spec.sample_seconds / 3600:.1f} h)", file=sys.stderr, flush=True)

    with Outputs.plan({}, {"--out": args.out}) as out:
        run = simulate(spec, progress=progress)
        out.write_with("--out", lambda f: dump_tep_dat(run.values, f))
    idv = _describe(spec)
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
        help="simulate the Tennessee Eastman process (needs fedrca[sim]): a 52-column .dat file or live to Kafka",
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
    parser.add_argument("--out", help="output .dat file (52 whitespace-separated columns)")
    parser.add_argument("--to", metavar="kafka://HOST:PORT", help="stream the run live to this broker's sensor topics")
    parser.add_argument(
        "--config", help="with --to: the TEP site (topics, plants; default: the bundled config/tep.yaml)"
    )
    parser.add_argument(
        "--speed", default="realtime",
        help="with --to: realtime (one sample every 3 minutes), xN (N times faster) or asap (default realtime)",
    )  # fmt: skip
    parser.add_argument("--progress", action="store_true", help="print progress to stderr")
    parser.set_defaults(func=_simulate)
