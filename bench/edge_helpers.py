"""Processes of ``bench/bench_edge.py``: the tag server under load and the peer a user would write.

    python bench/edge_helpers.py serve --port P --plants 5 --tags 52 --seconds S [--rate HZ]
    python bench/edge_helpers.py peer --url opc.tcp://127.0.0.1:P --plants 5 --tags 52 --broker H:P --topic T --status F

``serve``: fedrca's asyncua tag server (``fedrca.edge.opcua_server.TagServer``) with tags ``p<i>_t<j>``,
writing a new value to every tag as fast as it can (or ``--rate`` times a second, each write at a
random phase of its second, its wall time recorded in ``--writes`` for the latency part).

``peer``: the simplest bridge a user would write instead of ``fedrca edge``: asyncua's documented
subscription pattern (a handler's ``datachange_notification``) producing one JSON message per tag
change to Kafka with kafka-python. It writes its count of updates to ``--status`` twice a second.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def tag_names(plants: int, tags: int) -> list[str]:
    """The bench's tag names, plant by plant."""
    return [f"p{i}_t{j}" for i in range(plants) for j in range(tags)]


async def serve(port: int, names: list[str], seconds: float, rate: float | None, writes: Path | None) -> None:
    from fedrca.edge.opcua_server import TagServer

    server = TagServer(names, port=port, folder="Bench")
    await server.start()
    print(f"serving {len(names)} tags at {server.url}", flush=True)
    rng = random.Random(0)
    end = time.monotonic() + seconds
    done, k = 0, 0
    log = writes.open("w") if writes else None
    try:
        while time.monotonic() < end:
            if rate is not None:
                # the next write at a random phase of the next 1/rate interval
                slot = (int(time.time() * rate) + 1) / rate
                await asyncio.sleep(max(0.0, slot + rng.uniform(0.05, 0.95) / rate - time.time()))
            stamp = time.time()
            await server.write({n: float(k % 1000) + i * 1e-3 for i, n in enumerate(names)}, stamp)
            if log is not None:
                log.write(f"{stamp:.6f}\n")
                log.flush()
            done += len(names)
            k += 1
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
            status.write_text(str(count[0]))
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
        asyncio.run(serve(args.port, names, args.seconds, args.rate, args.writes))
    else:
        asyncio.run(peer(args.url, names, args.broker, args.topic, args.status))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO / "src"))
    sys.exit(main())
