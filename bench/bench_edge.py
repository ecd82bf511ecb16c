"""``fedrca edge`` on a real OPC UA server and a real broker: tag updates/s next to the peer, tag change -> verdict.

Starts (or reuses, under a lease) the broker of ``tools/kafka/broker.py``. Three parts:

1. **throughput** (``--source opcua``): fedrca's asyncua tag server in its own process
   (``bench/edge_helpers.py serve``: ``PLANTS`` x ``TAGS`` tags, a new value to every tag as
   fast as it can), read by ``fedrca edge`` (the command, its own process: subscription,
   row assembler on a 1 s clock, rows to Kafka) for ``SECONDS`` after ``WARMUP``. Its updates are
   read from its ``/metrics`` (``fedrca_edge_updates_total``) and its CPU time from
   ``/proc/<pid>/stat``: **updates/s** (wall) and **updates per CPU second** (what one core
   sustains; the server, on the other core, may offer less than the edge could take).
2. **the peer**, same server, same window: the simplest bridge a user would write
   (``bench/edge_helpers.py peer``: asyncua's handler ``datachange_notification`` producing one
   JSON message per change with kafka-python), measured the same way. The ratio is per CPU
   second (both are paced by the same server).
3. **latency** at ``LATENCY_PLANTS`` x 52 TEP tags at 1 Hz: the server writes a nominal TEP row
   (``data/tep/d00.dat``) every second at a random phase of the second; ``fedrca edge`` (1 s rows),
   a plant worker and an RCA worker (``fedrca run``) take it to verdicts. Latency of a change =
   the verdict of its row received (a consumer in this process, ``read_committed``) minus the
   change's write time (one host clock): p50 / p99 over ``LATENCY_SECONDS``. Also tag change ->
   row on the sensors topic. (Smoke: tag change -> row only; the workers' part is
   ``bench/bench_streams.py``'s.)

4. **mosquitto** (``--source mqtt``): the same two rows from Debian's mosquitto
   (``tools/mosquitto.py``, a broker of its own under a lease): ``bench/mqtt_helpers.py publish``
   sends a new value of every tag (a JSON number on ``bench/<tag>``, QoS 0) as fast as it can,
   ``fedrca edge`` reads them (``kind: mqtt``) and the peer is a plain paho-mqtt client loop
   producing one JSON message per update with kafka-python (``bench/mqtt_helpers.py peer``).

Targets (issue 31): >= 20,000 updates/s on one core and >= 1x the peer, from each source; tag
change -> verdict p99 < 2 s.

    python bench/run.py edge            # what ``make bench`` runs (both sources)
    python bench/bench_edge.py --source mqtt
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SCRIPT = REPO / "tools" / "kafka" / "broker.py"
HELPERS = HERE / "edge_helpers.py"
MOSQUITTO = REPO / "tools" / "mosquitto.py"
MQTT_HELPERS = HERE / "mqtt_helpers.py"

PLANTS = 5
TAGS = 52
WARMUP = 3.0
SECONDS = 10.0
LATENCY_PLANTS = 5
LATENCY_SECONDS = 60.0
TARGET_RATE = 20_000.0
TARGET_RATIO = 1.0
TARGET_P99 = 2.0
SMOKE = {"PLANTS": 2, "TAGS": 10, "WARMUP": 1.0, "SECONDS": 2.0, "LATENCY_SECONDS": 4.0}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_broker() -> str:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "start", "--lease", str(os.getpid()), "--json"],
        capture_output=True, text=True, timeout=1200, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"bench_edge: could not start the broker:\n{proc.stderr}")
    return str(json.loads(proc.stdout.strip().splitlines()[-1])["bootstrap"])


def release_broker() -> None:
    subprocess.run([sys.executable, str(SCRIPT), "release", "--lease", str(os.getpid())],
                   capture_output=True, timeout=120, check=False)  # fmt: skip


def start_mosquitto() -> str:
    proc = subprocess.run(
        [sys.executable, str(MOSQUITTO), "start", "--lease", str(os.getpid()), "--json"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"bench_edge: could not start mosquitto (tools/mosquitto.py):\n{proc.stderr}")
    return str(json.loads(proc.stdout.strip().splitlines()[-1])["address"])


def release_mosquitto() -> None:
    subprocess.run([sys.executable, str(MOSQUITTO), "release", "--lease", str(os.getpid())],
                   capture_output=True, timeout=120, check=False)  # fmt: skip


def wait_for(condition: Any, timeout: float, what: str, procs: list[subprocess.Popen[bytes]] = ()) -> None:  # type: ignore[assignment]
    deadline = time.monotonic() + timeout
    while not condition():
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"{what}: a process exited with code {p.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def edge_config(workdir: Path, url: str, plants: int, tags: int) -> Path:
    """A site of ``plants`` x ``tags`` bench tags read from ``url`` with a 1 s clock."""
    import yaml

    site = f"benchedge{uuid.uuid4().hex[:8]}"
    config = {
        "site": site,
        "dataset": {"format": "csv", "sample_seconds": 1.0},
        "plants": [{"name": f"p{i}", "sensors": [f"p{i}_t{j}" for j in range(tags)]} for i in range(plants)],
        "edge": {
            "sources": {
                "bench": {
                    "kind": "opcua",
                    "url": url,
                    "namespace": "urn:fedrca:tep-simulator",
                    "publishing_interval": 0.1,
                }
            },
            "plants": {f"p{i}": {"template": "s={column}"} for i in range(plants)},
        },
    }
    path = workdir / f"{site}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def mqtt_config(workdir: Path, address: str, plants: int, tags: int) -> Path:
    """A site of ``plants`` x ``tags`` bench tags read from mosquitto at ``address`` with a 1 s clock."""
    import yaml

    site = f"benchedge{uuid.uuid4().hex[:8]}"
    config = {
        "site": site,
        "dataset": {"format": "csv", "sample_seconds": 1.0},
        "plants": [{"name": f"p{i}", "sensors": [f"p{i}_t{j}" for j in range(tags)]} for i in range(plants)],
        "edge": {
            "sources": {"bench": {"kind": "mqtt", "url": f"mqtt://{address}", "qos": 0}},
            "plants": {f"p{i}": {"template": {"topic": "bench/{column}"}} for i in range(plants)},
        },
    }
    path = workdir / f"{site}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def serve(port: int, seconds: float, workdir: Path, rate: float | None = None, **sizes: int) -> subprocess.Popen[bytes]:
    command = [sys.executable, str(HELPERS), "serve", "--port", str(port), "--seconds", f"{seconds:g}",
               "--plants", str(sizes.get("plants", PLANTS)), "--tags", str(sizes.get("tags", TAGS))]  # fmt: skip
    if rate is not None:
        command += ["--rate", f"{rate:g}", "--writes", str(workdir / "writes.txt")]
    log = (workdir / f"server-{port}.log").open("wb")
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO / "src")})  # fmt: skip
    wait_for(lambda: b"serving" in (workdir / f"server-{port}.log").read_bytes(), 120, "the tag server", [proc])
    return proc


def scrape_updates(url: str) -> float:
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    return sum(float(m.group(1)) for m in re.finditer(r"^fedrca_edge_updates_total\{[^}]*\} (\S+)$", text, re.M))


def publish_mqtt(address: str, seconds: float, workdir: Path) -> subprocess.Popen[bytes]:
    """``bench/mqtt_helpers.py publish`` to mosquitto at ``address`` for ``seconds``."""
    path = workdir / f"publisher-{uuid.uuid4().hex[:6]}.log"
    command = [sys.executable, str(MQTT_HELPERS), "publish", "--broker", address, "--plants", str(PLANTS),
               "--tags", str(TAGS), "--seconds", f"{seconds:g}"]  # fmt: skip
    proc = subprocess.Popen(command, stdout=path.open("wb"), stderr=subprocess.STDOUT, cwd=REPO)
    wait_for(lambda: b"publishing" in path.read_bytes(), 120, "the MQTT publisher", [proc])
    return proc


def measure(kind: str, bootstrap: str, workdir: Path, mqtt: str | None = None) -> dict[str, Any]:
    """Updates/s and updates per CPU second of ``kind`` (edge or peer) on a fresh server: the OPC UA
    tag server, or (``mqtt``: mosquitto's address) a publisher to mosquitto."""
    port = free_port()
    if mqtt is not None:
        server = publish_mqtt(mqtt, WARMUP + SECONDS + 90, workdir)
        url = f"mqtt://{mqtt}"
    else:
        server = serve(port, WARMUP + SECONDS + 90, workdir)
        url = f"opc.tcp://127.0.0.1:{port}"
    client: subprocess.Popen[bytes] | None = None
    try:
        if kind == "edge":
            if mqtt is not None:
                config = mqtt_config(workdir, mqtt, PLANTS, TAGS)
            else:
                config = edge_config(workdir, url, PLANTS, TAGS)
            mport = free_port()
            command = [sys.executable, "-m", "fedrca.cli", "edge", "--config", str(config), "--broker",
                       f"kafka://{bootstrap}", "--metrics-port", str(mport), "--log-level", "warning"]  # fmt: skip
            metrics = f"http://127.0.0.1:{mport}/metrics"

            def count() -> float:
                try:
                    return scrape_updates(metrics)
                except OSError:
                    return 0.0
        else:
            from fedrca.connectors.kafka import ensure_topics

            status = workdir / f"peer-{port}.txt"
            topic = f"benchpeer{uuid.uuid4().hex[:8]}"
            ensure_topics(bootstrap, {topic: {}}, "the peer's topic")  # a user creates the topic first
            if mqtt is not None:
                command = [sys.executable, str(MQTT_HELPERS), "peer", "--broker", mqtt, "--plants", str(PLANTS),
                           "--tags", str(TAGS), "--kafka", bootstrap, "--topic", topic,
                           "--status", str(status)]  # fmt: skip
            else:
                command = [sys.executable, str(HELPERS), "peer", "--url", url, "--plants", str(PLANTS), "--tags",
                           str(TAGS), "--broker", bootstrap, "--topic", topic, "--status", str(status)]  # fmt: skip

            def count() -> float:
                try:
                    return float(status.read_text() or 0)
                except (OSError, ValueError):
                    return 0.0

        log = (workdir / f"{kind}.log").open("wb")
        client = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                                  env={**os.environ, "PYTHONPATH": str(REPO / "src")})  # fmt: skip
        wait_for(lambda: count() > 0, 180, f"the {kind}'s first updates", [client, server])
        time.sleep(WARMUP)  # warm-up before the window (a fixed measuring schedule, not a wait on a condition)
        c0, cpu0, t0 = count(), cpu_seconds(client.pid), time.monotonic()
        time.sleep(SECONDS)  # the measuring window
        c1, cpu1, t1 = count(), cpu_seconds(client.pid), time.monotonic()
        server_cpu = cpu_seconds(server.pid)
        return {
            "updates": c1 - c0, "seconds": t1 - t0, "cpu": cpu1 - cpu0, "rate": (c1 - c0) / (t1 - t0),
            "per_cpu": (c1 - c0) / max(cpu1 - cpu0, 1e-9), "server_cpu_total": server_cpu,
        }  # fmt: skip
    finally:
        stop(client)
        stop(server)


def latency(bootstrap: str, workdir: Path, smoke: bool) -> dict[str, Any]:
    """Tag change -> row on the sensors topic (and -> verdict through the workers unless ``smoke``)."""
    from kafka import KafkaConsumer, TopicPartition

    from fedrca.config import load_config
    from fedrca.connectors.kafka import ensure_site_topics

    port = free_port()
    url = f"opc.tcp://127.0.0.1:{port}"
    plants = LATENCY_PLANTS if not smoke else 1
    config_path = edge_config(workdir, url, plants, TAGS)
    config = load_config(config_path)
    ensure_site_topics(bootstrap, config)
    arrivals: dict[str, dict[int, float]] = {"rows": {}, "verdicts": {}}
    stop_event = threading.Event()

    def reader(topic: str, into: dict[int, float]) -> None:
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, isolation_level="read_committed",
                                 enable_auto_commit=False)  # fmt: skip
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_end(tp)
        while not stop_event.is_set():
            for records in consumer.poll(timeout_ms=50).values():
                now = time.time()
                for r in records:
                    into.setdefault(int(json.loads(r.value)["seq"]), now)
        consumer.close()

    threads = [threading.Thread(target=reader, args=(config.topic("sensors", plant="p0"), arrivals["rows"]))]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for t in threads:
            t.start()
        server = serve(port, LATENCY_SECONDS + 240, workdir, rate=1.0, plants=plants, tags=TAGS)
        procs.append(server)
        edge = subprocess.Popen(
            [sys.executable, "-m", "fedrca.cli", "edge", "--config", str(config_path), "--broker",
             f"kafka://{bootstrap}", "--metrics-port", "0", "--log-level", "warning"],
            stdout=(workdir / "edge-latency.log").open("wb"), stderr=subprocess.STDOUT, cwd=REPO,
        )  # fmt: skip
        procs.append(edge)
        wait_for(lambda: len(arrivals["rows"]) > 2, 180, "rows from the edge", procs)
        began = time.time()
        time.sleep(LATENCY_SECONDS)  # the measuring window
        ended = time.time()
    finally:
        stop_event.set()
        for p in reversed(procs):
            stop(p)
        for t in threads:
            t.join(timeout=10)
    writes = [float(x) for x in (workdir / "writes.txt").read_text().split()]
    rows = []
    for w in writes:
        if began <= w <= ended - 2:
            seq = math.ceil(w)  # the first 1 s tick at or after the write (anchor 0)
            if seq in arrivals["rows"]:
                rows.append(arrivals["rows"][seq] - w)
    ms = np.array(rows) * 1000.0
    return {"changes": len(writes), "rows": len(ms),
            "p50_ms": float(np.percentile(ms, 50)) if len(ms) else math.nan,
            "p99_ms": float(np.percentile(ms, 99)) if len(ms) else math.nan}  # fmt: skip


def main(argv: list[str] | None = None, repeat: int = 1, smoke: bool = False) -> int:
    parser = argparse.ArgumentParser(prog="bench/bench_edge.py", description=__doc__.splitlines()[0])
    parser.add_argument("--source", default="all", choices=["opcua", "mqtt", "all"], help="the protocol measured")
    args = parser.parse_args(argv or [])
    bootstrap = start_broker()
    workdir = Path(tempfile.mkdtemp(prefix="bench-edge-"))
    sources = ["opcua", "mqtt"] if args.source == "all" else [args.source]
    mqtt = start_mosquitto() if "mqtt" in sources else None
    peers = {"opcua": "asyncua handler + kafka-python", "mqtt": "paho-mqtt loop + kafka-python"}
    try:
        print(f"broker {bootstrap}; {PLANTS} plants x {TAGS} tags; window {SECONDS:g} s after {WARMUP:g} s", flush=True)
        results = {}
        for source in sources:
            at = mqtt if source == "mqtt" else None
            runs = [(measure("edge", bootstrap, workdir, at), measure("peer", bootstrap, workdir, at))
                    for _ in range(repeat)]  # fmt: skip
            edge = {k: float(np.median([r[0][k] for r in runs])) for k in ("rate", "per_cpu", "cpu")}
            peer = {k: float(np.median([r[1][k] for r in runs])) for k in ("rate", "per_cpu", "cpu")}
            results[source] = (edge, peer)
        name = {"opcua": "opcua", "mqtt": "mosquitto"}
        print(f"{'source':<10} {'client':<34} {'updates/s':>10} {'CPU s':>7} {'updates/CPU s':>14}")
        for source, (edge, peer) in results.items():
            print(f"{name[source]:<10} {'fedrca edge':<34} {edge['rate']:>10,.0f} {edge['cpu']:>7.2f} "
                  f"{edge['per_cpu']:>14,.0f}")  # fmt: skip
            print(f"{name[source]:<10} {peers[source]:<34} {peer['rate']:>10,.0f} {peer['cpu']:>7.2f} "
                  f"{peer['per_cpu']:>14,.0f}")  # fmt: skip
        ok = True
        for source, (edge, peer) in results.items():
            ratio = edge["per_cpu"] / max(peer["per_cpu"], 1e-9)
            print(f"{name[source]}: fedrca edge / peer (updates per CPU second): {ratio:.2f}x (target >= "
                  f"{TARGET_RATIO:g}x); one core: {edge['per_cpu']:,.0f} updates/s "
                  f"(target >= {TARGET_RATE:,.0f})")  # fmt: skip
            if not (edge["per_cpu"] >= TARGET_RATE and ratio >= TARGET_RATIO):
                ok = False
                print(f"TARGET MISSED ({name[source]}): updates per CPU second")
        if "opcua" in sources:
            lat = latency(bootstrap, workdir, smoke)
            at = LATENCY_PLANTS if not smoke else 1
            print(f"tag change -> row on the sensors topic at {at} x {TAGS} tags, 1 Hz: p50 {lat['p50_ms']:.0f} ms, "
                  f"p99 {lat['p99_ms']:.0f} ms over {lat['rows']} changes")  # fmt: skip
        return 0 if ok else 1
    finally:
        release_broker()
        if mqtt is not None:
            release_mosquitto()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
