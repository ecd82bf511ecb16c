"""``fedrca simulate``: a simulated TEP run, written as a 52-column ``.dat`` file or streamed live to Kafka.

    fedrca simulate --hours 48 --seed 3 [--idv 14@8] [--mode mode1] --out run.dat
    fedrca simulate --hours 24 --seed 3 --idv 6@2 --to kafka://HOST:PORT [--speed realtime|xN|asap]
    fedrca simulate --hours 24 --seed 3 --idv 6@2 --to opcua://HOST:PORT [--speed realtime|xN]
                    [--imperfect dropout=0.01,bad=0.01,stuck=0.005,jitter=0.2,skew=2,restart=100]
    fedrca simulate --hours 24 --seed 3 --to mqtt://HOST:PORT [--sparkplug] [--speed realtime|xN]
    fedrca simulate --hours 24 --seed 3 --to modbus://HOST:PORT [--speed realtime|xN]
                    [--config config/tep.yaml]

The file has the layout of the recorded Braatz files (``fedrca detect`` /
``fedrca replay --config config/tep.yaml`` read it). With ``--to`` every 3-minute
sample goes, as it is simulated, to the site's sensor topics (one message per plant,
``seq`` = sample number, ``ts`` = simulated seconds), paced in real time or N times
faster: a live plant for ``fedrca run`` workers to watch, with the disturbance switched
on at the chosen hour. Needs the optional extra ``fedrca[sim]``; without it the command
prints one line naming ``pip install 'fedrca[sim]'`` and exits 2.

With ``--to opcua://HOST:PORT`` the plant is served from a real OPC UA server (asyncua's)
listening there: the 52 columns are tags ``nsu=urn:fedrca:tep-simulator;s=XMEAS(1)`` ..
``s=XMV(11)`` (browse path ``Objects/TEP/<column>``), each sample written with its status and
source timestamp in the middle of the sample interval of ``fedrca edge --speed`` at the same
speed, which reads them (``config/tep.yaml``'s ``edge:`` section; docs/connectors.md).
``--imperfect`` injects what real servers do: dropouts, Bad quality, stuck values, jitter,
clock skew, a server restart (:class:`fedrca.edge.opcua_server.Imperfections`).

With ``--to mqtt://HOST:PORT`` the samples are published to that MQTT broker on the same
clock: each column as JSON on ``<site>/sim/<column>`` (``{"value", "timestamp", "quality"}``),
or with ``--sparkplug`` each plant as a Sparkplug B edge node ``spBv1.0/fedrca/NDATA/<plant>``
(births, the NDEATH will, rebirth on request; :mod:`fedrca.edge.mqtt_plant`). With
``--to modbus://HOST:PORT`` a Modbus TCP server (pymodbus) listens there and holds plant p
(1-based, in the site's order) as unit p, its column i the float32 in holding registers 2i,
2i + 1 (:mod:`fedrca.edge.modbus_server`). ``--imperfect`` applies to these too. The
``edge:`` section that reads each back is printed at start (``--edge-config FILE`` writes it).
"""

from __future__ import annotations

import argparse
import asyncio
import queue
import re
import sys
import threading
import time
from typing import Any

import aiomqtt
import yaml

from fedrca.application.outputs import Outputs
from fedrca.cli.bundled import bundled_config
from fedrca.config import load_config
from fedrca.config.edge_protocols import split_url
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
from fedrca.datasets.tep import TEP_COLUMNS
from fedrca.edge.modbus_server import ModbusTagServer
from fedrca.edge.modbus_server import edge_section as modbus_edge_section
from fedrca.edge.mqtt_plant import MqttPlant
from fedrca.edge.mqtt_plant import edge_section as mqtt_edge_section
from fedrca.edge.opcua_server import Imperfections, TagServer, parse_opcua_address, serve_rows
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
    bootstrap = bootstrap_of(args.to, key="--to")
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


def _serve_opcua(args: argparse.Namespace) -> int:
    """``--to opcua://HOST:PORT``: the live run served from an OPC UA server."""
    host, port = parse_opcua_address(args.to)
    pacer = Pacer.from_spec(args.speed)
    if pacer.speed is None:
        raise ConfigError("an OPC UA server serves samples on a clock: give --speed realtime or xN", key="--speed")
    imperfections = Imperfections.parse(args.imperfect)
    spec = _spec(args)
    simulator = TEPSimulator(spec)
    period = spec.sample_seconds / pacer.speed
    server = TagServer(list(TEP_COLUMNS), host=host, port=port, folder="TEP")
    print(
        f"simulating TEP {spec.mode} (seed {spec.seed}, {_describe(spec)}; tep-studio {simulator.version}) for "
        f"{spec.hours:g} h = {spec.n_samples} samples, served at opc.tcp://{host}:{port} (namespace "
        f"{server.namespace}), a sample every {period:g} s"
        + (f"; injecting {args.imperfect}" if args.imperfect else ""),
        flush=True,
    )
    progress = progress_printer("simulate") if args.progress else None

    async def serve() -> Any:
        await server.start()
        try:
            return await serve_rows(
                server, simulator.rows(), period, imperfections,
                on_row=(lambda k: progress(k + 1, spec.n_samples)) if progress else None,
            )  # fmt: skip
        finally:
            await server.stop()

    try:
        served = asyncio.run(serve())
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port} ({exc.strerror}); pick a free port", key="--to") from None
    ended = f"; PLANT SHUT DOWN after {served.rows} samples: {simulator.shutdown}" if simulator.terminated else ""
    print(f"served {served.rows} samples (most behind schedule {served.max_lag:.2f} s){ended}")
    return 0


def _serve_protocol(args: argparse.Namespace) -> int:
    """``--to mqtt://HOST:PORT`` (JSON, or ``--sparkplug``) or ``--to modbus://HOST:PORT``: the live run
    published to a broker or served from a Modbus server, paced like the OPC UA server."""
    config = load_config(args.config or bundled_config("tep.yaml"))
    if config.dataset.format != "tep":
        what = config.dataset.format
        raise ConfigError(f"the simulator makes TEP samples; --config must be a TEP site, not {what!r}", key="--config")
    plants = {p.name: list(p.sensors) for p in config.plants}
    pacer = Pacer.from_spec(args.speed)
    if pacer.speed is None:
        raise ConfigError("a served plant publishes samples on a clock: give --speed realtime or xN", key="--speed")
    imperfections = Imperfections.parse(args.imperfect)
    spec = _spec(args)
    simulator = TEPSimulator(spec)
    period = spec.sample_seconds / pacer.speed
    server: Any
    if args.to.startswith("modbus://"):
        host, port = split_url(_checked_url(args.to, "modbus"), 502)
        server = ModbusTagServer(plants, host=host, port=port, columns=TEP_COLUMNS)
        edge = modbus_edge_section(plants, f"modbus://{host}:{port}")
        where = f"served from a Modbus TCP server at modbus://{host}:{port} (plant p = unit p, column i = float32 at "
        where += "holding 2i)"
    else:
        url = _checked_url(args.to, "mqtt")
        server = MqttPlant(plants, url, config.site, sparkplug=args.sparkplug, columns=TEP_COLUMNS)
        edge = mqtt_edge_section(plants, url, config.site, sparkplug=args.sparkplug)
        nodes = f"Sparkplug B nodes spBv1.0/{server.group}/*/<plant>"
        where = f"published to {url} as " + (nodes if args.sparkplug else f"JSON on {server.prefix}/<column>")
    edge_yaml = yaml.safe_dump({"edge": edge}, sort_keys=False)
    if args.edge_config:
        with Outputs.plan({}, {"--edge-config": args.edge_config}) as out:
            out.write_with("--edge-config", lambda f: f.write(edge_yaml.encode()))
    print(
        f"simulating TEP {spec.mode} (seed {spec.seed}, {_describe(spec)}; tep-studio {simulator.version}) for "
        f"{spec.hours:g} h = {spec.n_samples} samples, {where}, a sample every {period:g} s"
        + (f"; injecting {args.imperfect}" if args.imperfect else "")
        + (f"\nthe edge: section that reads it back ({args.edge_config or 'add it to the site configuration'}):\n"
           + edge_yaml.rstrip()),
        flush=True,
    )  # fmt: skip
    progress = progress_printer("simulate") if args.progress else None

    async def serve() -> Any:
        await server.start()
        try:
            served = await serve_rows(
                server, _ahead(simulator.rows()), period, imperfections,
                on_row=(lambda k: progress(k + 1, spec.n_samples)) if progress else None,
            )  # fmt: skip
            # the last sample stays up until an edge at this speed has closed its row
            await asyncio.sleep(period)
            return served
        finally:
            await server.stop()

    try:
        served = asyncio.run(serve())
    except aiomqtt.MqttError as exc:
        raise ConfigError(f"cannot publish to {args.to} ({exc}); is the broker running?", key="--to") from None
    except OSError as exc:
        raise ConfigError(f"cannot listen on {args.to} ({exc.strerror}); pick a free port", key="--to") from None
    ended = f"; PLANT SHUT DOWN after {served.rows} samples: {simulator.shutdown}" if simulator.terminated else ""
    print(f"served {served.rows} samples (most behind schedule {served.max_lag:.2f} s){ended}")
    return 0


def _ahead(rows: Any, most: int = 4) -> Any:
    """``rows`` computed up to ``most`` ahead in a thread: the event loop that serves the plant (a
    Modbus server answering polls, the MQTT keep-alives) is not held while the next sample computes."""
    waiting: queue.Queue[Any] = queue.Queue(maxsize=most)
    end = object()

    def produce() -> None:
        try:
            for row in rows:
                waiting.put(row)
        except Exception as exc:  # handed to the consumer, raised there
            waiting.put(exc)
        waiting.put(end)

    threading.Thread(target=produce, name="simulate-ahead", daemon=True).start()
    while (row := waiting.get()) is not end:
        if isinstance(row, Exception):
            raise row
        yield row


def _checked_url(url: str, scheme: str) -> str:
    """``scheme://host:port`` as given, or a ConfigError naming --to."""
    if not re.match(rf"^{scheme}://[^/\s:]+:\d{{1,5}}/?$", url):
        raise ConfigError(f"{url!r}: write {scheme}://HOST:PORT", key="--to")
    return url.rstrip("/")


#: the --to schemes served by a plant on a protocol (beside kafka:// and a file)
_SERVED = ("opcua://", "opc.tcp://", "mqtt://", "modbus://")


def _simulate(args: argparse.Namespace) -> int:
    if args.imperfect and not (args.to or "").startswith(_SERVED):
        raise ConfigError("--imperfect applies to a served plant: --to opcua://, mqtt:// or modbus://HOST:PORT",
                          key="--imperfect")  # fmt: skip
    if args.sparkplug and not (args.to or "").startswith("mqtt://"):
        raise ConfigError("--sparkplug applies to --to mqtt://HOST:PORT", key="--sparkplug")
    if args.edge_config and not (args.to or "").startswith(("mqtt://", "modbus://")):
        raise ConfigError("--edge-config applies to --to mqtt:// or modbus://HOST:PORT", key="--edge-config")
    if args.to is not None and args.to.startswith(_SERVED):
        if args.out is not None:
            raise ConfigError("give --out FILE or --to, not both", key="--out")
        if args.to.startswith(("mqtt://", "modbus://")):
            return _serve_protocol(args)
        return _serve_opcua(args)
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
    parser.add_argument(
        "--to", metavar="kafka://|opcua://|mqtt://|modbus://HOST:PORT",
        help="stream the run live to this Kafka broker's sensor topics, serve it from an OPC UA or Modbus server "
        "listening here, or publish it to this MQTT broker",
    )  # fmt: skip
    parser.add_argument(
        "--sparkplug",
        action="store_true",
        help="with --to mqtt://: publish Sparkplug B edge nodes (one a plant), not JSON per tag",
    )
    parser.add_argument(
        "--edge-config",
        metavar="FILE",
        help="with --to mqtt:// or modbus://: write the edge: section that reads the plant back",
    )
    parser.add_argument(
        "--imperfect", metavar="NAME=VALUE,...",
        help="with --to opcua://, mqtt:// or modbus://: inject dropout, bad, stuck (rates per tag and sample), "
        "jitter, skew (s), restart (after sample N), e.g. dropout=0.01,bad=0.01,restart=100",
    )  # fmt: skip
    parser.add_argument(
        "--config", help="with --to: the TEP site (topics, plants; default: the bundled config/tep.yaml)"
    )
    parser.add_argument(
        "--speed", default="realtime",
        help="with --to: realtime (one sample every 3 minutes), xN (N times faster) or asap (default realtime)",
    )  # fmt: skip
    parser.add_argument("--progress", action="store_true", help="print progress to stderr")
    parser.set_defaults(func=_simulate)
