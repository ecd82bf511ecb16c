"""``fedrca edge``: read a group of plants' tags from their industrial protocols and publish their rows.

    fedrca edge --config config/tep.yaml --broker kafka://HOST:PORT [--group NAME | --plant P ...]
                [--source-url NAME=opc.tcp://HOST:PORT] [--speed realtime|xN] [--metrics-port N]

One process per plant or per group of plants (``edge.groups``; default all the plants with a tag
map). It connects to each source of their tags (``edge.sources``), makes one row per plant and
sample on the sample clock, and publishes it to ``<site>.sensors.<plant>``; a restart continues
after the last row on the topic. ``--speed xN`` runs the clock N times faster, for a simulated
plant served at that speed (``fedrca simulate --to opcua://HOST:PORT --speed xN``). Prometheus
metrics on ``/metrics`` (``fedrca_edge_*``), readiness on ``/readyz`` (every source connected).
Stops on SIGTERM / Ctrl-C after flushing what the broker takes within 10 s. docs/connectors.md.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import time
from typing import Any

from fedrca.config import SiteConfig, load_config
from fedrca.config.limits import MAX_PORT, check_range
from fedrca.connectors.kafka import KafkaOptions, bootstrap_of, ensure_site_topics
from fedrca.connectors.replay import Pacer
from fedrca.edge.metrics import EdgeMetrics
from fedrca.edge.publisher import RowPublisher
from fedrca.edge.runtime import EdgeRuntime, run_loop
from fedrca.exceptions import ConfigError

__all__ = ["edge_plants", "register", "with_source_urls"]

log = logging.getLogger("fedrca.edge")


def with_source_urls(config: SiteConfig, overrides: list[str]) -> SiteConfig:
    """The configuration with ``NAME=URL`` overrides of its edge sources' ``url``."""
    if not overrides:
        return config
    edge = config.edge
    if edge is None:
        raise ConfigError("the site has no edge: section (docs/connectors.md)", source=config.source, key="edge")
    sources = dict(edge.sources)
    for text in overrides:
        name, eq, url = text.partition("=")
        if not eq or name not in sources:
            raise ConfigError(f"{text!r}: write NAME=URL with NAME one of {', '.join(sources)}", key="--source-url")
        try:
            sources[name] = type(sources[name]).model_validate({**sources[name].model_dump(), "url": url})
        except ValueError as exc:
            raise ConfigError(f"{text!r}: {str(exc).splitlines()[-1].strip()}", key="--source-url") from None
    return config.model_copy(update={"edge": edge.model_copy(update={"sources": sources})})


def edge_plants(config: SiteConfig, group: str | None, plants: list[str]) -> list[str]:
    """The plants one process serves: ``--plant``s, a ``--group``, or every plant with a tag map."""
    edge = config.edge
    if edge is None:
        raise ConfigError(
            "the site has no edge: section; add edge.sources and edge.plants (docs/connectors.md)",
            source=config.source,
            key="edge",
        )
    if group is not None and plants:
        raise ConfigError("give --group or --plant, not both", key="--group")
    if group is not None:
        return edge.group(group)
    for plant in plants:
        if plant not in edge.plants:
            raise ConfigError(
                f"plant '{plant}' has no tag map under edge.plants (plants with one: {', '.join(edge.plants)})",
                key="--plant",
            )
    return plants or list(edge.plants)


def _configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # the protocol libraries log every session event; the edge's own lines say what matters
    logging.getLogger("kafka").setLevel(logging.ERROR)
    # asyncua logs a lost connection as an ERROR with a traceback: the source's one line says it
    logging.getLogger("asyncua").setLevel(logging.CRITICAL)


def _edge(args: argparse.Namespace) -> int:
    check_range("--metrics-port", args.metrics_port, 0, MAX_PORT, "a TCP port; 0 = any free one")
    if args.duration is not None:
        check_range("--duration", args.duration, 0, 10 * 365 * 86_400, "seconds to run; omit to run until stopped")
    config = with_source_urls(load_config(args.config), args.source_url)
    plants = edge_plants(config, args.group, args.plant)
    speed = Pacer.from_spec(args.speed).speed
    if speed is None:
        raise ConfigError("the edge's clock cannot run 'as fast as possible'; give realtime or xN", key="--speed")
    _configure_logging(args.log_level)
    bootstrap = bootstrap_of(args.broker)
    options = KafkaOptions.from_settings(config.kafka)
    ensure_site_topics(bootstrap, config, options=options, only=[config.topic("sensors", plant=p) for p in plants])
    metrics = EdgeMetrics(plants)
    runtime = EdgeRuntime(config, plants, metrics=metrics, speed=speed)
    publisher = RowPublisher(bootstrap, config, plants, runtime.timing.buffer_rows, options=options)
    runtime.publisher = publisher
    publisher.connect()
    last = publisher.last_seqs()
    port = metrics.serve(args.metrics_port, args.metrics_addr)
    metrics.set_probes(ready=runtime.ready)
    gaps = runtime.start(last)
    t = runtime.timing
    print(
        f"fedrca edge: {len(runtime.tags)} tags of {', '.join(plants)} from "
        f"{', '.join(s.name for s in runtime.sources)}; a row every {t.period:g} s (stale after {t.staleness:g} s, "
        f"buffer {t.buffer_rows} rows) to {config.site}.sensors.* at {args.broker}; metrics :{port}/metrics"
        + (f"; restart gap {sum(gaps.values())} rows" if any(gaps.values()) else ""),
        flush=True,
    )
    deadline = None if args.duration is None else time.monotonic() + args.duration
    stop = {"now": False}

    def ended() -> bool:
        return stop["now"] or (deadline is not None and time.monotonic() >= deadline)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda: stop.__setitem__("now", True))
        await runtime.run(until=ended)

    try:
        run_loop(main())
    finally:
        publisher.close(timeout=10.0)
        metrics.close()
    buffers = publisher.stats()
    print(
        "fedrca edge: stopped; rows published "
        + ", ".join(f"{p} {b.published} (dropped {b.dropped})" for p, b in buffers.items()),
        flush=True,
    )
    return 0


def register(sub: Any) -> None:
    """Add ``fedrca edge``."""
    parser = sub.add_parser(
        "edge",
        help="read plants' tags from OPC UA (and other industrial protocols) and publish their sensor rows to Kafka",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", required=True, help="the site configuration with an edge: section")
    parser.add_argument("--broker", required=True, help="kafka://host:port")
    parser.add_argument("--group", help="the plants of edge.groups.NAME (default: every plant with a tag map)")
    parser.add_argument("--plant", action="append", default=[], help="a plant to serve (repeatable)")
    parser.add_argument(
        "--source-url", action="append", default=[], metavar="NAME=URL",
        help="override a source's url (repeatable), e.g. tep-sim=opc.tcp://127.0.0.1:4841",
    )  # fmt: skip
    parser.add_argument(
        "--speed", default="realtime", help="realtime (default) or xN: a simulated plant N times faster"
    )
    parser.add_argument("--metrics-port", type=int, default=9465, help="Prometheus port (0 = any free one)")
    parser.add_argument(
        "--metrics-addr", default="127.0.0.1", help="address the metrics server binds (0.0.0.0 in a pod)"
    )
    parser.add_argument("--duration", type=float, default=None, help="stop after this many seconds (default: run)")
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    parser.set_defaults(func=_edge)
