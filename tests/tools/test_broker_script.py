"""tools/kafka/broker.py: idempotent start, leases, clean stop, clear errors (real JVM, own state directory)."""

from __future__ import annotations

import argparse
import base64
import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.kafka_broker import _start, wait_until

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tools" / "kafka" / "broker.py"


def load_script():
    spec = importlib.util.spec_from_file_location("fedrca_broker_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


broker = load_script()


def run(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--home", str(home), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def port_open(bootstrap: str) -> bool:
    host, _, port = bootstrap.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
    except OSError:
        return False
    return True


@pytest.mark.kafka
def test_start_reuse_leases_and_clean_stop(tmp_path):
    home = tmp_path / "kafka"
    first = run(home, "start", "--json")
    assert first.returncode == 0, first.stderr
    state = json.loads(first.stdout)
    bootstrap, pid = state["bootstrap"], state["pid"]
    assert state["reused"] is False and bootstrap.startswith("127.0.0.1:")
    # a real Kafka answer: Metadata lists this broker on the advertised port
    assert broker.metadata_brokers("127.0.0.1", int(bootstrap.rpartition(":")[2])) == [
        (1, "127.0.0.1", int(bootstrap.rpartition(":")[2]))
    ]
    config = (home / "server.properties").read_text()
    assert "process.roles=broker,controller" in config and f"controller.quorum.voters=1@{state['controller']}" in config
    assert (home / "data" / "meta.properties").is_file()  # formatted by StorageTool

    # idempotent: the same broker again, under a lease of this process
    again = run(home, "start", "--lease", str(os.getpid()))
    assert again.returncode == 0 and again.stdout.strip() == bootstrap
    assert "reusing pid" in again.stderr
    status = run(home, "status")
    assert status.returncode == 0
    assert status.stdout.strip() == f"running {bootstrap} pid={pid} leases={os.getpid()},manual"

    # releasing our lease leaves the hand-started broker running
    released = run(home, "release", "--lease", str(os.getpid()))
    assert "still in use by manual" in released.stderr
    assert broker.answers(bootstrap)

    stopped = run(home, "stop")
    assert stopped.returncode == 0 and stopped.stderr.strip() == f"kafka-broker: stopped pid {pid}"
    assert not broker.pid_alive(pid) and not port_open(bootstrap)
    assert "[BrokerServer id=1] shut down completed" in (home / "logs" / "server.log").read_text()
    status = run(home, "status")
    assert (status.returncode, status.stdout.strip()) == (1, "not running")
    assert run(home, "stop").stderr.strip() == "kafka-broker: not running"

    # leases of dead processes do not keep a broker alive
    leased = run(home, "start", "--lease", str(dead_pid()), "--json")
    state = json.loads(leased.stdout)
    assert state["reused"] is False
    released = run(home, "release", "--lease", str(os.getpid()))
    assert released.stderr.strip() == f"kafka-broker: stopped pid {state['pid']}"
    wait_until(lambda: not broker.pid_alive(state["pid"]), 30, "the broker process to exit")


def test_missing_java_is_reported_with_the_fix(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)  # nothing on it: no java, no mvn
    proc = run(tmp_path / "kafka", "start", env=env)
    assert proc.returncode == 2
    assert "Java ('java') is not installed; run tools/ensure-system-deps.sh" in proc.stderr


def test_fixture_fails_clearly_without_java(monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(pytest.fail.Exception, match=r"need java, which are not installed; run tools/ensure-system"):
        _start()


def test_jar_check_and_cluster_ids(tmp_path):
    assert not broker.jars_present(tmp_path)
    for name in ("kafka_2.13-3.9.2.jar", "kafka-clients-3.9.2.jar"):
        (tmp_path / name).write_bytes(b"")
    assert not broker.jars_present(tmp_path)  # the SLF4J backend is missing
    (tmp_path / "slf4j-reload4j-1.7.36.jar").write_bytes(b"")
    assert broker.jars_present(tmp_path)
    ids = {broker.cluster_id() for _ in range(50)}
    assert len(ids) == 50 and all(len(i) == 22 and "=" not in i for i in ids)
    a, b = broker.free_ports(2)
    assert a != b


# -- the cluster id on the StorageTool command line ------------------------------------------
def kafka_storage_parser() -> argparse.ArgumentParser:
    """The options of ``kafka-storage format`` that the script uses, parsed the way kafka-storage does.

    kafka-storage parses with argparse4j, which follows Python's argparse here: a separate value
    that begins with ``-`` is read as an option ("argument --cluster-id/-t: expected one argument").
    """
    parser = argparse.ArgumentParser(prog="kafka-storage", exit_on_error=False)
    sub = parser.add_subparsers(dest="command", required=True)
    fmt = sub.add_parser("format", exit_on_error=False)
    fmt.add_argument("--cluster-id", "-t", required=True)
    fmt.add_argument("--config", "-c", required=True)
    return parser


def storage_args(command: list[str]) -> list[str]:
    """The arguments after the main class of a ``java ... kafka.tools.StorageTool ...`` command."""
    return command[command.index("kafka.tools.StorageTool") + 1 :]


def test_the_parser_model_reproduces_the_option_like_id_failure():
    with pytest.raises((argparse.ArgumentError, SystemExit)):
        kafka_storage_parser().parse_args(["format", "-t", "-" + "A" * 21, "-c", "/x/server.properties"])


ids = st.binary(min_size=16, max_size=16)
# first byte 0xF8..0xFB: the base64url text begins with "-" (63 in the first 6 bits is "_", 62 is "-")
dash_ids = st.integers(0xF8, 0xFB).flatmap(lambda b: st.binary(min_size=15, max_size=15).map(lambda r: bytes([b]) + r))


@example(raw=bytes([0xF8]) + bytes(15))
@example(raw=b"\xff" * 16)
@settings(max_examples=300, derandomize=True, database=None)
@given(raw=st.one_of(ids, dash_ids))
def test_every_cluster_id_reaches_kafka_storage_as_a_value(raw):
    cluster = broker.encode_id(raw)
    home = broker.Home(Path("/nonexistent/kafka-home"))
    command = broker.format_command("java", home, cluster)
    args = kafka_storage_parser().parse_args(storage_args(command))
    assert (args.command, args.cluster_id, args.config) == ("format", cluster, str(home.config))
    # nothing on the command line after the main class is an option-like separate value
    assert all(a == "format" or (a.startswith("--") and "=" in a) for a in storage_args(command))


def usable(raw: bytes) -> bool:
    return raw not in broker.RESERVED_IDS and not broker.encode_id(raw).startswith("-")


@settings(max_examples=300, derandomize=True, database=None)
@given(
    rejected=st.lists(st.one_of(dash_ids, st.sampled_from(broker.RESERVED_IDS)), max_size=5),
    good=ids.filter(usable),
    later=st.lists(ids, max_size=3),
)
def test_generated_cluster_ids_never_begin_with_a_dash_nor_are_reserved(rejected, good, later):
    draws = iter([*rejected, good, *later])
    cluster = broker.cluster_id(lambda: next(draws))
    assert cluster == broker.encode_id(good)  # drawn again exactly as often as needed, as Kafka does
    assert len(cluster) == 22 and not cluster.startswith("-")
    assert base64.urlsafe_b64decode(cluster + "==") == good


@pytest.mark.kafka
def test_kafka_storage_formats_with_a_cluster_id_that_begins_with_a_dash(tmp_path):
    # the real StorageTool, fed the id the old command line could not pass
    java = broker.java_binary()
    broker.fetch_jars()
    home = broker.Home(tmp_path / "kafka")
    home.logs.mkdir(parents=True)
    broker.write_config(home, *broker.free_ports(2), partitions=1, auto_create=False)
    cluster = broker.encode_id(bytes([0xF8]) + bytes(range(15)))
    assert cluster.startswith("-")
    proc = subprocess.run(broker.format_command(java, home, cluster), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    meta = (home.data / "meta.properties").read_text()
    assert f"cluster.id={cluster}\n" in meta
