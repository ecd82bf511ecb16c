"""Processes of ``bench/bench_edge.py``: the tag server under load and the peer a user would write.

    python bench/edge_helpers.py serve --port P --plants 5 --tags 52 --seconds S [--rate HZ]
    python bench/edge_helpers.py serve --port P --seconds S --rate 1 --data d01_te.dat --nominal d00.dat \
        --from 150 --go F [--mqtt mqtt://H:P --site S --config C]
    python bench/edge_helpers.py peer --url opc.tcp://127.0.0.1:P --plants 5 --tags 52 --broker H:P --topic T --status F

``serve``: fedrca's asyncua tag server (``fedrca.edge.opcua_server.TagServer``) with tags ``p<i>_t<j>``,
writing a new value to every tag as fast as it can (or ``--rate`` times a second, each write at a
random phase of its second, its wall time recorded in ``--writes`` for the latency part). With
``--data FILE`` the tags are TEP's 52 columns and each write is a TEP row: ``--nominal``'s rows in a
loop until the file ``--go`` exists, then ``FILE``'s from row ``--from`` (only these are recorded);
``--mqtt URL --site S --config C`` publishes them to mosquitto instead (the simulated plant over MQTT,
``fedrca.edge.mqtt_plant.MqttPlant``: JSON per tag on ``S/sim/<column>``; with ``--sparkplug`` each plant a
Sparkplug B node of group ``S``).

``peer``: the simplest bridge a user would write instead of ``fedrca edge``: asyncua's documented
subscription pattern (a handler's ``datachange_notification``) producing one JSON message per tag
change to Kafka with kafka-python. It writes its count of updates to ``--status`` twice a second.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def tag_names(plants: int, tags: int) -> list[str]:
    """The bench's tag names, plant by plant."""
    return [f"p{i}_t{j}" for i in range(plants) for j in range(tags)]


class Rows:
    """The values each write puts on the tags: a counter per round, or TEP rows (``--data``): the
    ``--nominal`` file's rows in a loop until the ``--go`` file exists, then ``--data``'s from row ``--from``."""

    def __init__(self, names: list[str], args: argparse.Namespace) -> None:
        self.names = names
        self.go: Path | None = args.go
        self.started = self.go is None
        self.nominal = self.data = None
        if args.data is not None:
            from fedrca.datasets.tep import TEP_COLUMNS, load_tep

            self.names = list(TEP_COLUMNS)
            self.data = load_tep(args.data)[self.names].to_numpy()[args.start :]
            self.nominal = load_tep(args.nominal or args.data)[self.names].to_numpy()
        self.k = 0

    def next(self) -> dict[str, float]:
        """The values of the next write (and whether the measured part has begun: :attr:`started`)."""
        if self.data is None:
            k, self.k = self.k, self.k + 1
            return {n: float(k % 1000) + i * 1e-3 for i, n in enumerate(self.names)}
        if not self.started and self.go is not None and self.go.exists():
            self.started, self.k = True, 0
        table = self.data if self.started else self.nominal
        assert table is not None
        row = table[self.k % len(table)]
        self.k += 1
        return dict(zip(self.names, row.tolist(), strict=True))


async def serve(
    port: int, rows: Rows, seconds: float, rate: float | None, writes: Path | None, mqtt: str | None = None,
    site: str | None = None, config: Path | None = None, sparkplug: bool = False,
) -> None:  # fmt: skip
    from fedrca.edge.opcua_server import TagServer

    server: Any
    if mqtt is not None:  # the simulated plant over MQTT (JSON per tag, or Sparkplug B nodes) instead
        from fedrca.config import load_config
        from fedrca.edge.mqtt_plant import MqttPlant

        assert site is not None and config is not None, "--mqtt needs --site and --config"
        plants = {p.name: list(p.sensors) for p in load_config(config).plants}
        server = MqttPlant(plants, mqtt, site, sparkplug=sparkplug, group=site, columns=rows.names)
    else:
        server = TagServer(rows.names, port=port, folder="Bench")
    await server.start()
    print(f"serving {len(rows.names)} tags at {mqtt or server.url}", flush=True)
    rng = random.Random(0)
    end = time.monotonic() + seconds
    done = 0
    log = writes.open("w") if writes else None
    try:
        while time.monotonic() < end:
            if rate is not None:
                # the next write at a random phase of the next 1/rate interval
                slot = (int(time.time() * rate) + 1) / rate
                await asyncio.sleep(max(0.0, slot + rng.uniform(0.05, 0.95) / rate - time.time()))
            values = rows.next()
            stamp = time.time()
            await server.write(values, stamp)
            if log is not None and rows.started:
                log.write(f"{stamp:.6f}\n")
                log.flush()
            done += len(values)
            if rate is None:
                await asyncio.sleep(0)  # let the server publish and answer its clients between two rounds
    finally:
        if log is not None:
            log.close()
        await server.stop()
    print(f"wrote {done} tag values in {seconds:g} s", flush=True)


async def peer(url: str, names: list[str], bootstrap: str, topic: str, status: Path) -> None:
    from asyncua import Client
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    count = [0]

    class Handler:
        def datachange_notification(self, node, val, data):  # type: ignore[no-untyped-def]
            producer.send(topic, json.dumps({"node": node.nodeid.to_string(), "value": val}).encode())
            count[0] += 1

    async with Client(url) as client:
        ns = await client.get_namespace_index("urn:fedrca:tep-simulator")
        nodes = [client.get_node(f"ns={ns};s={n}") for n in names]
        sub = await client.create_subscription(100, Handler())
        await sub.subscribe_data_change(nodes, queuesize=10)
        while True:
            # written whole, then renamed: the bench never reads a half-written (empty) count
            status.with_suffix(".tmp").write_text(str(count[0]))
            os.replace(status.with_suffix(".tmp"), status)
            await asyncio.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/edge_helpers.py")
    sub = parser.add_subparsers(dest="what", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--plants", type=int, default=5)
    s.add_argument("--tags", type=int, default=52)
    s.add_argument("--seconds", type=float, required=True)
    s.add_argument("--rate", type=float, default=None)
    s.add_argument("--writes", type=Path, default=None)
    s.add_argument("--data", type=Path, default=None, help="a TEP file: its 52 columns are the tags")
    s.add_argument("--nominal", type=Path, default=None, help="the TEP file written in a loop before --go")
    s.add_argument("--from", dest="start", type=int, default=0, help="the first row of --data written")
    s.add_argument("--go", type=Path, default=None, help="--data is written once this file exists")
    s.add_argument("--mqtt", default=None, help="mqtt://HOST:PORT: publish the tags to this broker instead")
    s.add_argument("--site", default=None, help="with --mqtt: the site of the topics (SITE/sim/<column>)")
    s.add_argument("--config", type=Path, default=None, help="with --mqtt: the site configuration (its plants)")
    s.add_argument("--sparkplug", action="store_true", help="with --mqtt: each plant a Sparkplug B node (group SITE)")
    p = sub.add_parser("peer")
    p.add_argument("--url", required=True)
    p.add_argument("--plants", type=int, default=5)
    p.add_argument("--tags", type=int, default=52)
    p.add_argument("--broker", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--status", type=Path, required=True)
    args = parser.parse_args(argv)
    names = tag_names(args.plants, args.tags)
    if args.what == "serve":
        asyncio.run(serve(args.port, Rows(names, args), args.seconds, args.rate, args.writes, args.mqtt, args.site,
                          args.config, args.sparkplug))  # fmt: skip
    else:
        asyncio.run(peer(args.url, names, args.broker, args.topic, args.status))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO / "src"))
    sys.exit(main())
