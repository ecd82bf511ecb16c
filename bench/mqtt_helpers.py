"""The processes of ``bench/bench_edge.py``'s mosquitto rows: a publisher of bench tags, and the peer.

    python bench/mqtt_helpers.py publish --broker HOST:PORT --plants 5 --tags 52 --seconds 60
    python bench/mqtt_helpers.py peer --broker HOST:PORT --plants 5 --tags 52 --kafka HOST:PORT --topic T --status F
    python bench/mqtt_helpers.py publish --sparkplug ...    # the same as Sparkplug B nodes
    python bench/mqtt_helpers.py peer --sparkplug ...

``publish``: a new value of every tag (topic ``bench/p<i>_t<j>``, a JSON number, QoS 0) as fast as
the broker takes it for ``--seconds``: MQTT PUBLISH packets encoded ahead and written in blocks on a
plain socket (a load generator that costs next to nothing, so the clients measured are the limit).
``peer``: the simplest bridge a user would write: a paho-mqtt client loop whose ``on_message``
produces one JSON message per update to Kafka with kafka-python, writing its count to ``--status``
every 0.5 s.

``--sparkplug``: plant ``p<i>`` is a Sparkplug B edge node ``spBv1.0/bench/NDATA/p<i>`` whose metrics
are its tags (Doubles, by alias after the birth, as a node reporting every tag at once sends them).
The publisher encodes 256 messages of each node ahead (an NBIRTH, seq 0, then NDATA seq 1..255, all
stamped with the time of encoding) and publishes them in order, then encodes the next 256: the seq
runs without a gap, and a host that connects late has a birth within 256 messages (it asks for one
with an NCMD, which this plain-socket publisher does not read). The peer decodes each payload with
the Sparkplug protobuf (Eclipse Tahu's ``Payload``) and produces one JSON message per metric.
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

#: the Sparkplug group of the bench's nodes (``--sparkplug``)
SPARKPLUG_GROUP = "bench"


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
    sock = _connect(broker, "bench-publisher")
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


def _connect(broker: str, name: str) -> socket.socket:
    """A plain socket with an MQTT 3.1.1 session (CONNECT accepted)."""
    host, _, port = broker.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    # CONNECT: protocol MQTT 3.1.1 (level 4), clean session, keep-alive 60 s, a client id
    sock.sendall(packet(0x10, _string("MQTT") + bytes([4, 0x02]) + struct.pack(">H", 60)
                         + _string(f"{name}-{time.monotonic_ns()}")))  # fmt: skip
    connack = sock.recv(4)
    if len(connack) < 4 or connack[0] != 0x20 or connack[3] != 0:
        raise SystemExit(f"the broker refused the publisher: CONNACK {connack!r}")
    return sock


def publish_sparkplug(broker: str, plants: int, tags: int, seconds: float) -> None:
    """Offer a flood of Sparkplug B messages: every node's next 256 messages (NBIRTH, then NDATA seq 1..255, each
    with every metric) encoded ahead and written to the socket in blocks of one message per node."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from fedrca.edge.sparkplug import SparkplugNode

    nodes = [SparkplugNode(SPARKPLUG_GROUP, f"p{i}", [f"p{i}_t{j}" for j in range(tags)]) for i in range(plants)]
    topics = {kind: [_string(n.topic(kind)) for n in nodes] for kind in ("NBIRTH", "NDATA")}
    sock = _connect(broker, "bench-sparkplug")

    def cycle() -> list[bytes]:
        """The next 256 blocks: births (seq 0), then data seq 1..255; values differ from message to message."""
        now = time.time()
        blocks = [b"".join(packet(0x30, t + n.birth([0.5 + j for j in range(tags)], now))
                           for t, n in zip(topics["NBIRTH"], nodes))]  # fmt: skip
        for k in range(1, 256):
            blocks.append(b"".join(packet(0x30, t + n.data([k + 0.5 + j for j in range(tags)], now))
                                   for t, n in zip(topics["NDATA"], nodes)))  # fmt: skip
        return blocks

    print("publishing", flush=True)
    done, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        for block in cycle():
            sock.sendall(block)  # blocks while the broker's socket buffer is full: paced by it
            done += plants * tags
    sock.sendall(packet(0xE0, b""))  # DISCONNECT
    sock.close()
    print(f"published {done} metric values in {seconds:g} s", flush=True)


def peer(broker: str, names: list[str], kafka: str, topic: str, status: Path, sparkplug: bool = False) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=kafka, linger_ms=5)
    count = [0]

    def on_message(client: paho.Client, userdata: object, message: paho.MQTTMessage) -> None:
        producer.send(topic, json.dumps({"topic": message.topic, "value": float(message.payload)}).encode())
        count[0] += 1

    if sparkplug:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
        from fedrca.edge._tahu import Payload  # the Sparkplug B protobuf (Eclipse Tahu's), as a user's bridge has it

        def on_sparkplug(client: paho.Client, userdata: object, message: paho.MQTTMessage) -> None:
            node = message.topic.rpartition("/")[2]
            for metric in Payload.FromString(message.payload).metrics:
                if metric.name == "bdSeq":
                    continue
                doc = {"node": node, "alias": metric.alias, "value": metric.double_value, "ts": metric.timestamp}
                producer.send(topic, json.dumps(doc).encode())
                count[0] += 1

    def on_connect(client: paho.Client, *args: object) -> None:
        if sparkplug:
            client.subscribe([(f"spBv1.0/{SPARKPLUG_GROUP}/{kind}/+", 0) for kind in ("NBIRTH", "NDATA")])
        else:
            client.subscribe([(f"bench/{n}", 0) for n in names])

    client = _client(broker, "bench-peer")
    client.on_message = on_sparkplug if sparkplug else on_message
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
    p.add_argument("--sparkplug", action="store_true", help="as Sparkplug B nodes, one per plant")
    q = sub.add_parser("peer")
    q.add_argument("--broker", required=True)
    q.add_argument("--plants", type=int, default=5)
    q.add_argument("--tags", type=int, default=52)
    q.add_argument("--kafka", required=True)
    q.add_argument("--topic", required=True)
    q.add_argument("--status", type=Path, required=True)
    q.add_argument("--sparkplug", action="store_true", help="read Sparkplug B nodes, one per plant")
    args = parser.parse_args(argv)
    names = tag_names(args.plants, args.tags)
    if args.command == "publish" and args.sparkplug:
        publish_sparkplug(args.broker, args.plants, args.tags, args.seconds)
    elif args.command == "publish":
        publish(args.broker, names, args.seconds)
    else:
        peer(args.broker, names, args.kafka, args.topic, args.status, args.sparkplug)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
