#!/usr/bin/env python3
"""A single-node Apache Kafka broker (KRaft) for tests, benchmarks and hand use.

Standard library only. The jars come from Maven Central through ``pom.xml``
(``maven-dependency-plugin:3.8.1:copy-dependencies`` into ``tools/kafka/lib/``)
and are reused when present. State lives under ``.kafka/`` at the repository
root (override with ``--home`` or ``FEDRCA_KAFKA_HOME``)::

    tools/kafka/broker.py start      # prints the bootstrap address, e.g. 127.0.0.1:40123
    tools/kafka/broker.py status     # "running 127.0.0.1:40123 pid=1234", exit 1 when not running
    tools/kafka/broker.py stop       # SIGTERM, wait, then SIGKILL
    tools/kafka/broker.py fetch      # only fetch the jars
    tools/kafka/broker.py restart [--hard]   # same data, ports and cluster id (fault injection)
    tools/kafka/broker.py pause | resume     # SIGSTOP / SIGCONT the broker (fault injection)

``start`` is idempotent: when a broker of this home is already running and
answering, it is reused and its address printed. A fresh start wipes the data
directory, formats it (``kafka.tools.StorageTool``) and starts ``kafka.Kafka``
with ``process.roles=broker,controller`` and a static
``controller.quorum.voters`` on two free loopback ports, then waits until the
broker answers a Kafka Metadata request listing itself.

Leases let several users share one broker: ``start --lease PID`` records that
process PID uses the broker; ``release --lease PID`` drops that lease and stops
the broker only when no live lease is left. A ``start`` without ``--lease``
records a manual lease, so a broker started by hand outlives test sessions
until ``stop``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
LIB = HERE / "lib"
POM = HERE / "pom.xml"
KAFKA_VERSION = "3.9.2"
#: jars that must be present for the class path to be complete
REQUIRED_JARS = (f"kafka_2.13-{KAFKA_VERSION}.jar", f"kafka-clients-{KAFKA_VERSION}.jar", "slf4j-reload4j-")
DEPS_HINT = "run tools/ensure-system-deps.sh (installs default-jre-headless and maven) or install Java 11+ and Maven"
MANUAL = "manual"


class BrokerError(RuntimeError):
    """The broker cannot be fetched, started or reached (message says why and what to do)."""


def log(message: str) -> None:
    print(f"kafka-broker: {message}", file=sys.stderr, flush=True)


# -- jars -------------------------------------------------------------------------------------
def jars_present(lib: Path = LIB) -> bool:
    """True when every required jar is in ``lib``."""
    if not lib.is_dir():
        return False
    names = [p.name for p in lib.glob("*.jar")]
    return all(any(n.startswith(req) for n in names) for req in REQUIRED_JARS)


def fetch_jars(lib: Path = LIB, timeout: float = 900.0) -> Path:
    """Fetch the jars with Maven unless they are already present; returns ``lib``."""
    if jars_present(lib):
        return lib
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BrokerError(f"Maven ('mvn') is not installed and {lib} has no Kafka jars; {DEPS_HINT}")
    log(f"fetching Kafka {KAFKA_VERSION} jars from Maven Central into {lib} ...")
    cmd = [mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(POM), "dependency:copy-dependencies"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise BrokerError(f"'{' '.join(cmd)}' did not finish within {timeout:.0f} s") from None
    if proc.returncode != 0 or not jars_present(lib):
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
        raise BrokerError(f"'{' '.join(cmd)}' failed (exit {proc.returncode}):\n{tail}")
    return lib


def java_binary() -> str:
    """The ``java`` executable (JAVA_HOME first)."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise BrokerError(f"Java ('java') is not installed; {DEPS_HINT}")
    return java


# -- state ------------------------------------------------------------------------------------
class Home:
    """The state directory of one broker: config, data, logs, pid/state file, leases."""

    def __init__(self, path: Path) -> None:
        self.path = path.resolve()  # absolute: every path handed to a command line begins with "/"
        self.data = path / "data"
        self.logs = path / "logs"
        self.leases = path / "leases"
        self.state_file = path / "state.json"
        self.config = path / "server.properties"
        self.log4j = path / "log4j.properties"

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Serialise start/stop/release between processes sharing this home."""
        self.path.mkdir(parents=True, exist_ok=True)
        with open(self.path / "lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def read_state(self) -> dict[str, object] | None:
        try:
            return json.loads(self.state_file.read_text())  # type: ignore[no-any-return]
        except (OSError, ValueError):
            return None

    def add_lease(self, holder: str) -> None:
        self.leases.mkdir(parents=True, exist_ok=True)
        (self.leases / holder).write_text(str(time.time()))

    def live_leases(self) -> list[str]:
        """Lease holders still alive (leases of dead processes are removed)."""
        if not self.leases.is_dir():
            return []
        alive = []
        for lease in self.leases.iterdir():
            holder = lease.name
            if holder == MANUAL or (holder.isdigit() and pid_alive(int(holder))):
                alive.append(holder)
            else:
                lease.unlink(missing_ok=True)
        return sorted(alive)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child counts as dead
    with contextlib.suppress(OSError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        if fields and fields[0] == "Z":
            return False
    return True


def is_our_broker(pid: int, home: Home) -> bool:
    """True when ``pid`` is a live kafka.Kafka JVM started for this home (guards against pid reuse)."""
    if not pid_alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"kafka.Kafka" in cmdline and str(home.config).encode() in cmdline


# -- Kafka wire protocol (just enough to ask for metadata) ------------------------------------
def _kafka_string(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def metadata_brokers(host: str, port: int, timeout: float = 2.0) -> list[tuple[int, str, int]]:
    """Send a Metadata v1 request (no topics) and return the brokers ``(node_id, host, port)``.

    Raises OSError (or ValueError for a garbled reply) when the broker does not answer properly.
    """
    correlation = 7
    body = struct.pack(">hhi", 3, 1, correlation) + _kafka_string("fedrca-probe") + struct.pack(">i", 0)
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(struct.pack(">i", len(body)) + body)
        header = _recv_exact(sock, 4)
        (size,) = struct.unpack(">i", header)
        if size <= 0 or size > 10_000_000:
            raise ValueError(f"implausible response size {size}")
        reply = _recv_exact(sock, size)
    (got,) = struct.unpack_from(">i", reply, 0)
    if got != correlation:
        raise ValueError(f"correlation id {got} != {correlation}")
    offset = 4
    (count,) = struct.unpack_from(">i", reply, offset)
    offset += 4
    brokers = []
    for _ in range(count):
        node_id, hlen = struct.unpack_from(">ih", reply, offset)
        offset += 6
        bhost = reply[offset : offset + hlen].decode()
        offset += hlen
        (bport,) = struct.unpack_from(">i", reply, offset)
        offset += 4
        (rlen,) = struct.unpack_from(">h", reply, offset)
        offset += 2 + max(rlen, 0)
        brokers.append((node_id, bhost, bport))
    return brokers


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = sock.recv(n - len(chunks))
        if not chunk:
            raise OSError("connection closed by the broker")
        chunks += chunk
    return bytes(chunks)


def answers(bootstrap: str, timeout: float = 2.0) -> bool:
    """True when the broker at ``bootstrap`` answers a Metadata request listing itself."""
    host, _, port = bootstrap.rpartition(":")
    try:
        brokers = metadata_brokers(host, int(port), timeout)
    except (OSError, ValueError, struct.error):
        return False
    return any(p == int(port) for _, _, p in brokers)


# -- start / stop -----------------------------------------------------------------------------
def free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1 (held open together so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


#: ids Kafka reserves (``Uuid.ZERO_UUID``, ``Uuid.ONE_UUID``); ``Uuid.randomUuid()`` never returns them
RESERVED_IDS = (bytes(16), bytes(15) + b"\x01")


def encode_id(raw: bytes) -> str:
    """Kafka's text form of a 16-byte id: base64url without padding (``Uuid.toString()``), 22 characters."""
    if len(raw) != 16:
        raise ValueError(f"a Kafka id has 16 bytes, got {len(raw)}")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def cluster_id(random_bytes: Callable[[], bytes] = lambda: uuid.uuid4().bytes) -> str:
    """A random Kafka cluster id, drawn the way Kafka's ``Uuid.randomUuid()`` draws one.

    A version-4 UUID in base64url; ids that are reserved or whose text begins with ``-``
    (1 draw in 32) are drawn again, as Kafka does, because a command line would read
    such a value as an option. :func:`format_command` does not rely on this: it passes
    the id as ``--cluster-id=<id>``, which no value can turn into an option
    (``tests/tools/test_broker_script.py`` checks both for every id).
    """
    while True:
        raw = random_bytes()
        text = encode_id(raw)
        if raw not in RESERVED_IDS and not text.startswith("-"):
            return text


def format_command(java: str, home: Home, cluster: str, scram: tuple[str, str] | None = None) -> list[str]:
    """The ``kafka.tools.StorageTool format`` command for ``home`` with cluster id ``cluster``.

    Values go in the ``--option=value`` form: kafka-storage (argparse4j) would parse a
    separate value that begins with ``-`` as an option and stop with "expected one argument".
    ``scram`` = (user, password) adds that SCRAM-SHA-256 credential to the metadata log
    (KIP-900), so the SASL listener has a user from the first start.
    """
    extra = [] if scram is None else [f"--add-scram=SCRAM-SHA-256=[name={scram[0]},password={scram[1]}]"]
    return _java_cmd(java, "256m", home, "kafka.tools.StorageTool", "format",
                     f"--cluster-id={cluster}", f"--config={home.config}", *extra)  # fmt: skip


def write_config(
    home: Home,
    port: int,
    controller_port: int,
    partitions: int,
    auto_create: bool,
    sasl_port: int | None = None,
    acls: bool = False,
) -> None:
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(home.data),
        "num.partitions": str(partitions),
        "auto.create.topics.enable": str(auto_create).lower(),
        "default.replication.factor": "1",
        "min.insync.replicas": "1",
        "offsets.topic.replication.factor": "1",
        # small internal topics: faster group/transaction coordinator start on a small machine
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        "group.initial.rebalance.delay.ms": "0",
        "num.network.threads": "2",
        "num.io.threads": "4",
        "background.threads": "4",
        "num.recovery.threads.per.data.dir": "1",
        "log.cleaner.threads": "1",
        "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
    }
    if sasl_port is not None:
        # a second client listener that authenticates with SCRAM-SHA-256 (the brokers of a
        # secured cluster); the broker itself keeps talking PLAINTEXT to itself
        sasl = f"SASL_PLAINTEXT://127.0.0.1:{sasl_port}"
        props["listeners"] += "," + sasl
        props["advertised.listeners"] += "," + sasl
        props["listener.security.protocol.map"] += ",SASL_PLAINTEXT:SASL_PLAINTEXT"
        props["sasl.enabled.mechanisms"] = "SCRAM-SHA-256"
        props["listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config"] = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        )
    if acls:
        # Kafka's authorizer on: the SASL user may do only what an ACL allows; the plaintext listeners'
        # principal (ANONYMOUS: the broker itself, the controller, a test's admin) may do everything
        props["authorizer.class.name"] = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
        props["super.users"] = "User:ANONYMOUS"
    home.config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    home.log4j.write_text(
        "log4j.rootLogger=INFO, file\n"
        "log4j.appender.file=org.apache.log4j.FileAppender\n"
        f"log4j.appender.file.File={home.logs / 'server.log'}\n"
        "log4j.appender.file.layout=org.apache.log4j.PatternLayout\n"
        "log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
        "log4j.logger.kafka=INFO\n"
        "log4j.logger.org.apache.kafka=INFO\n"
        "log4j.logger.state.change.logger=WARN\n"
        "log4j.logger.kafka.request.logger=WARN\n"
    )


def _java_cmd(java: str, heap: str, home: Home, main: str, *args: str) -> list[str]:
    return [
        java,
        f"-Xmx{heap}",
        "-Xms64m",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-Djava.awt.headless=true",
        f"-Dlog4j.configuration=file:{home.log4j}",
        f"-Dkafka.logs.dir={home.logs}",
        "-cp",
        str(LIB / "*"),
        main,
        *args,
    ]


def running(home: Home) -> dict[str, object] | None:
    """The state of this home's broker when it is running and answering, else None."""
    state = home.read_state()
    if not state:
        return None
    pid = int(state.get("pid", 0))  # type: ignore[call-overload]
    if pid and is_our_broker(pid, home) and answers(str(state["bootstrap"])):
        return state
    return None


def start(
    home: Home,
    lease: str = MANUAL,
    partitions: int = 1,
    auto_create: bool = False,
    heap: str = "512m",
    timeout: float = 120.0,
    scram: tuple[str, str] | None = None,
    acls: bool = False,
) -> dict[str, object]:
    """Start (or reuse) the broker of ``home``; returns its state (``bootstrap``, ``pid``, ``reused``).

    ``scram`` = (user, password) also opens a SASL_PLAINTEXT listener with that SCRAM-SHA-256
    user; its address is the state's ``sasl_bootstrap``. ``acls``: that user may do only what an
    ACL allows (Kafka's StandardAuthorizer; the plaintext listener's clients are super users).
    """
    with home.locked():
        state = running(home)
        if state is not None:
            home.add_lease(lease)
            return {**state, "reused": True}
        stale = home.read_state()
        if stale and int(stale.get("pid", 0)) and is_our_broker(int(stale["pid"]), home):  # type: ignore[call-overload]
            # alive but not answering: a hung broker of ours
            _terminate(int(stale["pid"]), 30.0)  # type: ignore[call-overload]
        java = java_binary()
        fetch_jars()
        shutil.rmtree(home.data, ignore_errors=True)
        shutil.rmtree(home.leases, ignore_errors=True)
        home.state_file.unlink(missing_ok=True)
        home.logs.mkdir(parents=True, exist_ok=True)
        home.data.mkdir(parents=True, exist_ok=True)
        port, controller_port, sasl_port = free_ports(3)
        write_config(home, port, controller_port, partitions, auto_create, sasl_port if scram else None, acls)
        began = time.monotonic()
        fmt = subprocess.run(
            format_command(java, home, cluster_id(), scram),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if fmt.returncode != 0:
            raise BrokerError(f"StorageTool format failed (exit {fmt.returncode}): {(fmt.stdout + fmt.stderr).strip()}")
        proc = _launch(java, heap, home, port, timeout)
        state = {
            "pid": proc.pid,
            "bootstrap": f"127.0.0.1:{port}",
            "controller": f"127.0.0.1:{controller_port}",
            "kafka_version": KAFKA_VERSION,
            "started": time.time(),
            "start_seconds": round(time.monotonic() - began, 2),
            "home": str(home.path),
            "heap": heap,
        }
        if scram is not None:
            state["sasl_bootstrap"] = f"127.0.0.1:{sasl_port}"
        home.state_file.write_text(json.dumps(state, indent=1))
        home.add_lease(lease)
        return {**state, "reused": False}


def _launch(java: str, heap: str, home: Home, port: int, timeout: float) -> subprocess.Popen[bytes]:
    """Start ``kafka.Kafka`` on the home's existing config and data; wait until it answers on ``port``."""
    out = open(home.logs / "stdout.log", "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(
        _java_cmd(java, heap, home, "kafka.Kafka", str(home.config)),
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # survives the caller; its own process group
        cwd=home.path,
    )
    out.close()
    bootstrap = f"127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while not answers(bootstrap):
        if proc.poll() is not None:
            raise BrokerError(f"the broker exited with code {proc.returncode} while starting; {_log_tail(home)}")
        if time.monotonic() > deadline:
            _terminate(proc.pid, 10.0)
            raise BrokerError(f"the broker did not answer on {bootstrap} within {timeout:.0f} s; {_log_tail(home)}")
        time.sleep(0.2)
    return proc


def restart(
    home: Home, hard: bool = False, grace: float = 30.0, timeout: float = 120.0, down: float = 0.0
) -> dict[str, object]:
    """Stop the running broker (SIGTERM, or SIGKILL when ``hard``) and start it again on the same
    data, ports and cluster id: topics, committed offsets and open transactions survive as they
    would on a production broker restart. Leases are kept. ``down``: seconds it stays stopped (an
    outage). Used by ``tools/faults.py`` and ``tools/edge_faults.py``."""
    with home.locked():
        state = home.read_state()
        if not state or not is_our_broker(int(state.get("pid", 0)), home):  # type: ignore[call-overload]
            raise BrokerError(f"no running broker in {home.path} to restart; start one first")
        pid = int(state["pid"])  # type: ignore[call-overload]
        if hard:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        _terminate(pid, 0.0 if hard else grace)
        time.sleep(down)  # the outage itself
        port = int(str(state["bootstrap"]).rsplit(":", 1)[1])
        began = time.monotonic()
        proc = _launch(java_binary(), str(state.get("heap", "512m")), home, port, timeout)
        state = {**state, "pid": proc.pid, "started": time.time(), "start_seconds": round(time.monotonic() - began, 2)}
        home.state_file.write_text(json.dumps(state, indent=1))
        return state


def pause(home: Home, resume: bool = False) -> str:
    """SIGSTOP (or SIGCONT with ``resume``) the broker's process group: a broker that hangs without
    closing its sockets, as a long GC pause or a frozen VM would. Used by ``tools/faults.py``."""
    state = home.read_state()
    if not state or not is_our_broker(int(state.get("pid", 0)), home):  # type: ignore[call-overload]
        raise BrokerError(f"no running broker in {home.path}")
    pid = int(state["pid"])  # type: ignore[call-overload]
    os.killpg(pid, signal.SIGCONT if resume else signal.SIGSTOP)
    return f"{'resumed' if resume else 'paused'} pid {pid}"


def _log_tail(home: Home, lines: int = 15) -> str:
    parts = []
    for name in ("stdout.log", "server.log"):
        path = home.logs / name
        if path.is_file():
            tail = path.read_text(errors="replace").strip().splitlines()[-lines:]
            if tail:
                parts.append(f"last lines of {path}:\n" + "\n".join(tail))
    return "\n".join(parts) or f"no log under {home.logs}"


def _terminate(pid: int, grace: float) -> bool:
    """SIGTERM the broker's process group, wait up to ``grace`` s, then SIGKILL. True if it had to kill."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            _reap(pid)
            return False
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10.0
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    _reap(pid)
    return True


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def stop(home: Home, grace: float = 30.0) -> str:
    """Stop the broker of ``home`` regardless of leases; returns what happened."""
    with home.locked():
        return _stop_locked(home, grace)


def _stop_locked(home: Home, grace: float) -> str:
    state = home.read_state()
    shutil.rmtree(home.leases, ignore_errors=True)
    if not state:
        return "not running"
    pid = int(state.get("pid", 0))  # type: ignore[call-overload]
    home.state_file.unlink(missing_ok=True)
    if not pid or not is_our_broker(pid, home):
        return "not running (stale state removed)"
    killed = _terminate(pid, grace)
    return f"stopped pid {pid}" + (" (killed after SIGTERM timed out)" if killed else "")


def release(home: Home, lease: str, grace: float = 30.0) -> str:
    """Drop ``lease``; stop the broker when no live lease is left."""
    with home.locked():
        (home.leases / lease).unlink(missing_ok=True)
        left = home.live_leases()
        if left:
            return f"still in use by {', '.join(left)}"
        return _stop_locked(home, grace)


# -- command line -----------------------------------------------------------------------------
def default_home() -> Path:
    return Path(os.environ.get("FEDRCA_KAFKA_HOME", REPO / ".kafka"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--home", type=Path, default=None, help="state directory (default .kafka/ or $FEDRCA_KAFKA_HOME)"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    st = sub.add_parser("start", help="start or reuse the broker; prints its bootstrap address")
    st.add_argument("--lease", default=MANUAL, help="pid of the process using the broker (default: manual)")
    st.add_argument("--partitions", type=int, default=1, help="num.partitions of auto-created topics")
    st.add_argument("--auto-create", action="store_true", help="allow topic auto-creation (off by default)")
    st.add_argument("--heap", default="512m", help="JVM -Xmx (default 512m)")
    st.add_argument("--timeout", type=float, default=120.0, help="seconds to wait until the broker answers")
    st.add_argument("--json", action="store_true", help="print the full state as JSON instead of the address")
    st.add_argument(
        "--scram", default=None, metavar="USER=PASSWORD", help="also listen with SASL/SCRAM-SHA-256 for this user"
    )
    st.add_argument("--acls", action="store_true", help="with --scram: the user may do only what an ACL allows")
    rl = sub.add_parser("release", help="drop a lease; stop the broker when no live lease is left")
    rl.add_argument("--lease", required=True)
    sub.add_parser("stop", help="stop the broker now (SIGTERM, wait, then SIGKILL)")
    sub.add_parser("status", help="print whether the broker runs; exit 1 when it does not")
    rs = sub.add_parser("restart", help="stop and start the running broker on the same data and ports")
    rs.add_argument("--hard", action="store_true", help="SIGKILL instead of a clean SIGTERM shutdown")
    rs.add_argument("--down", type=float, default=0.0, help="seconds the broker stays stopped (default 0)")
    sub.add_parser("pause", help="SIGSTOP the broker (it hangs with its sockets open)")
    sub.add_parser("resume", help="SIGCONT a paused broker")
    sub.add_parser("fetch", help="fetch the jars from Maven Central (no-op when present)")
    args = parser.parse_args(argv)
    home = Home((args.home or default_home()).resolve())
    try:
        if args.command == "start":
            scram = None
            if args.scram is not None:
                user, sep, password = args.scram.partition("=")
                if not sep or not user or not password:
                    raise BrokerError("--scram takes USER=PASSWORD")
                scram = (user, password)
            if args.acls and scram is None:
                raise BrokerError("--acls needs --scram (the user the ACLs are for)")
            state = start(
                home, args.lease, args.partitions, args.auto_create, args.heap, args.timeout, scram, args.acls
            )
            how = "reusing" if state["reused"] else f"started in {state['start_seconds']} s,"
            log(f"{how} pid {state['pid']} at {state['bootstrap']} (state in {home.path})")
            print(json.dumps(state) if args.json else state["bootstrap"], flush=True)
        elif args.command == "release":
            log(release(home, args.lease))
        elif args.command == "stop":
            log(stop(home))
        elif args.command == "status":
            state = running(home)
            if state is None:
                print("not running")
                return 1
            print(f"running {state['bootstrap']} pid={state['pid']} leases={','.join(home.live_leases()) or '-'}")
        elif args.command == "restart":
            state = restart(home, hard=args.hard, down=args.down)
            log(f"restarted in {state['start_seconds']} s, pid {state['pid']} at {state['bootstrap']}")
        elif args.command in ("pause", "resume"):
            log(pause(home, resume=args.command == "resume"))
        elif args.command == "fetch":
            log(f"jars in {fetch_jars()}")
    except BrokerError as exc:
        log(f"error: {exc}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
