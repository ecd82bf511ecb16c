"""The processes of ``bench/bench_edge.py``'s mosquitto rows: a publisher of bench tags, and the peer.

    python bench/mqtt_helpers.py publish --broker HOST:PORT --plants 5 --tags 52 --seconds 60
    python bench/mqtt_helpers.py peer --broker HOST:PORT --plants 5 --tags 52 --kafka HOST:PORT --topic T --status F

``publish``: paho-mqtt publishing a new value of every tag (topic ``bench/p<i>_t<j>``, a JSON
number, QoS 0) as fast as it can for ``--seconds``. ``peer``: the simplest bridge a user would
write: a paho-mqtt client loop whose ``on_message`` produces one JSON message per update to
Kafka with kafka-python, writing its count to ``--status`` every 0.5 s.
"""

from __future__ import annotations

import argparse
import json
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


def publish(broker: str, names: list[str], seconds: float) -> None:
    client = _client(broker, "bench-publisher")
    client.loop_start()
    topics = [f"bench/{n}" for n in names]
    print("publishing", flush=True)
    done, k, end = 0, 0, time.monotonic() + seconds
    while time.monotonic() < end:
        k += 1
        for topic in topics:
            client.publish(topic, b"%d.5" % k, qos=0)
        done += len(topics)
    client.loop_stop()
    client.disconnect()
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
            status.write_text(str(count[0]))
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
