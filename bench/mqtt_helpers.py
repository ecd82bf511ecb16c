"""The processes of ``bench/bench_edge.py``'s mosquitto rows: a publisher of bench tags, and the peer.

    python bench/mqtt_helpers.py publish --broker HOST:PORT --plants 5 --tags 52 --seconds 60
    python bench/mqtt_helpers.py peer --broker HOST:PORT --plants 5 --tags 52 --kafka HOST:PORT --topic T --status F

``publish``: a new value of every tag (topic ``bench/p<i>_t<j>``, a JSON number, QoS 0) as fast as
the broker takes it for ``--seconds``: MQTT PUBLISH packets encoded ahead and written in blocks on a
plain socket (a load generator that costs next to nothing, so the clients measured are the limit).
``peer``: the simplest bridge a user would write: a paho-mqtt client loop whose ``on_message``
produces one JSON message per update to Kafka with kafka-python, writing its count to ``--status``
every 0.5 s.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import sys
import threading
import time
from pathlib import Path

import paho.mqtt.client as paho


def tag_names(plants: int, tags: int) -> list[str]:
    return [f"p{i}_t{j}" for i in range(plants) for j in range(tags)]


def _client(broker: str, name: str) -> paho.Client:
    host, _, port = broker.rpartition(":")
    client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=f"{name}-{time.monotonic_ns()}")
    client.max_queued_messages_set(0)
    client.connect(host, int(port), keepalive=30)
    return client


def remaining_length(n: int) -> bytes:
    """MQTT's Remaining Length (3.1.1, 2.2.3): 7 bits a byte, low first."""
    out = bytearray()
    while True:
        n, digit = n >> 7, n & 0x7F
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def packet(kind: int, body: bytes) -> bytes:
    """An MQTT control packet: its first byte ``kind`` (type and flags), the Remaining Length, ``body``."""
    return bytes([kind]) + remaining_length(len(body)) + body


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">H", len(raw)) + raw


def publish(broker: str, names: list[str], seconds: float, rounds: int = 8) -> None:
    """Offer a flood: PUBLISH packets (QoS 0) of every tag encoded ahead, ``rounds`` values each, written
    to the socket in blocks, so that the load generator is not what limits the clients measured (paho
    spends ~20 us of Python per publish; a loaded machine then offers the clients a trickle)."""
    host, _, port = broker.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    # CONNECT: protocol MQTT 3.1.1 (level 4), clean session, keep-alive 60 s, a client id
    sock.sendall(packet(0x10, _string("MQTT") + bytes([4, 0x02]) + struct.pack(">H", 60)
                         + _string(f"bench-publisher-{time.monotonic_ns()}")))  # fmt: skip
    connack = sock.recv(4)
    if len(connack) < 4 or connack[0] != 0x20 or connack[3] != 0:
        raise SystemExit(f"the broker refused the publisher: CONNACK {connack!r}")
    topics = [_string(f"bench/{n}") for n in names]
    blocks = [b"".join(packet(0x30, t + b"%d.5" % k) for t in topics) for k in range(1, rounds + 1)]
    print("publishing", flush=True)
    done, k, end = 0, 0, time.monotonic() + seconds
    while time.monotonic() < end:
        sock.sendall(blocks[k % rounds])  # blocks while the broker's socket buffer is full: paced by it
        done += len(topics)
        k += 1
    sock.sendall(packet(0xE0, b""))  # DISCONNECT
    sock.close()
    print(f"published {done} tag values in {seconds:g} s", flush=True)


def peer(broker: str, names: list[str], kafka: str, topic: str, status: Path) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=kafka, linger_ms=5)
    count = [0]

    def on_message(client: paho.Client, userdata: object, message: paho.MQTTMessage) -> None:
        producer.send(topic, json.dumps({"topic": message.topic, "value": float(message.payload)}).encode())
        count[0] += 1

    def on_connect(client: paho.Client, *args: object) -> None:
        client.subscribe([(f"bench/{n}", 0) for n in names])

    client = _client(broker, "bench-peer")
    client.on_message = on_message
    client.on_connect = on_connect

    def report() -> None:
        while True:
            # written whole, then renamed: the bench never reads a half-written (empty) count
            status.with_suffix(".tmp").write_text(str(count[0]))
            os.replace(status.with_suffix(".tmp"), status)
            time.sleep(0.5)

    threading.Thread(target=report, daemon=True).start()
    client.loop_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/mqtt_helpers.py")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("publish")
    p.add_argument("--broker", required=True)
    p.add_argument("--plants", type=int, default=5)
    p.add_argument("--tags", type=int, default=52)
    p.add_argument("--seconds", type=float, required=True)
    q = sub.add_parser("peer")
    q.add_argument("--broker", required=True)
    q.add_argument("--plants", type=int, default=5)
    q.add_argument("--tags", type=int, default=52)
    q.add_argument("--kafka", required=True)
    q.add_argument("--topic", required=True)
    q.add_argument("--status", type=Path, required=True)
    args = parser.parse_args(argv)
    names = tag_names(args.plants, args.tags)
    if args.command == "publish":
        publish(args.broker, names, args.seconds)
    else:
        peer(args.broker, names, args.kafka, args.topic, args.status)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
