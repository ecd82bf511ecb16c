#!/usr/bin/env python3
"""A local Eclipse Mosquitto MQTT broker (Debian's ``mosquitto``) for tests, benchmarks and hand use.

Standard library only; the broker itself comes from ``tools/ensure-system-deps.sh``
(``make system-deps``). State lives under ``.mosquitto/`` at the repository root
(override with ``--home`` or ``FEDRCA_MOSQUITTO_HOME``)::

    tools/mosquitto.py start      # prints the address, e.g. 127.0.0.1:40123
    tools/mosquitto.py status     # "running 127.0.0.1:40123 pid=1234", exit 1 when not running
    tools/mosquitto.py stop       # SIGTERM, wait, then SIGKILL
    tools/mosquitto.py restart [--hard] [--down SECONDS]   # same ports and password (fault injection)
    tools/mosquitto.py pause | resume                      # SIGSTOP / SIGCONT (a hung broker)

The broker listens on two free loopback ports: ``address`` accepts anonymous clients,
``auth_address`` only the user ``fedrca`` with the password in ``state.json`` (made with
``mosquitto_passwd``; the wrong-credentials tests use it). ``start`` is idempotent: a
running broker of this home that answers an MQTT CONNECT is reused. It waits until the
broker answers CONNECT with CONNACK before printing the address.

Leases work as in ``tools/kafka/broker.py`` (whose lease directory this reuses):
``start --lease PID`` records a user, ``release --lease PID`` stops the broker when no
live lease is left; a ``start`` without ``--lease`` is a manual lease kept until ``stop``.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import importlib.util
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEPS_HINT = "run tools/ensure-system-deps.sh (or `make system-deps`) to install Debian's mosquitto"
USER = "fedrca"
MANUAL = "manual"


def _load_broker() -> ModuleType:
    """``tools/kafka/broker.py``: its state home with leases, free ports and process handling."""
    spec = importlib.util.spec_from_file_location("fedrca_kafka_broker_tool", HERE / "kafka" / "broker.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_broker = _load_broker()
free_ports = _broker.free_ports
pid_alive = _broker.pid_alive


class MosquittoError(RuntimeError):
    """The broker cannot be started or reached (the message says why and what to do)."""


def log(message: str) -> None:
    print(f"mosquitto: {message}", file=sys.stderr, flush=True)


class Home(_broker.Home):  # type: ignore[misc, name-defined]
    """The state directory of one broker: config, password file, log, state file, leases."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.config = self.path / "mosquitto.conf"
        self.passwords = self.path / "passwords"


def mosquitto_binary() -> str:
    """The ``mosquitto`` executable (Debian installs it in /usr/sbin, often not on a user's PATH)."""
    found = shutil.which("mosquitto") or shutil.which("mosquitto", path="/usr/sbin:/usr/local/sbin")
    if found is None:
        raise MosquittoError(f"'mosquitto' is not installed; {DEPS_HINT}")
    return found


def _passwd_binary() -> str:
    found = shutil.which("mosquitto_passwd") or shutil.which("mosquitto_passwd", path="/usr/sbin:/usr/local/sbin")
    if found is None:
        raise MosquittoError(f"'mosquitto_passwd' is not installed; {DEPS_HINT}")
    return found


# -- MQTT wire protocol (just enough to see CONNACK) ------------------------------------------
def connect_packet(client_id: str, user: str | None = None, password: str | None = None) -> bytes:
    """An MQTT 3.1.1 CONNECT packet (clean session, keep-alive 10 s)."""

    def field(text: str) -> bytes:
        raw = text.encode()
        return len(raw).to_bytes(2, "big") + raw

    flags = 0x02 | (0x80 if user is not None else 0) | (0x40 if password is not None else 0)
    body = field("MQTT") + bytes([4, flags]) + (10).to_bytes(2, "big") + field(client_id)
    body += field(user) if user is not None else b""
    body += field(password) if password is not None else b""
    assert len(body) < 128  # one-byte remaining length is enough for a probe
    return bytes([0x10, len(body)]) + body


def connack(address: str, user: str | None = None, password: str | None = None, timeout: float = 2.0) -> int:
    """Connect to ``address``, send CONNECT and return CONNACK's return code (0 = accepted).

    Raises OSError when nothing answers as an MQTT broker.
    """
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(connect_packet(f"fedrca-probe-{os.getpid()}", user, password))
        reply = b""
        while len(reply) < 4:
            chunk = sock.recv(4 - len(reply))
            if not chunk:
                raise OSError("connection closed before CONNACK")
            reply += chunk
        with contextlib.suppress(OSError):
            sock.sendall(b"\xe0\x00")  # DISCONNECT
    if reply[0] != 0x20 or reply[1] != 0x02:
        raise OSError(f"not a CONNACK: {reply!r}")
    return reply[3]


def answers(address: str, timeout: float = 2.0) -> bool:
    """True when an MQTT broker at ``address`` accepts an anonymous CONNECT."""
    try:
        return connack(address, timeout=timeout) == 0
    except OSError:
        return False


# -- start / stop -----------------------------------------------------------------------------
def write_config(home: Home, port: int, auth_port: int) -> None:
    lines = [
        "# written by tools/mosquitto.py",
        "per_listener_settings true",
        # stay the user that started it: the log and password file are this user's
        f"user {getpass.getuser()}",
        "persistence false",
        f"log_dest file {home.logs / 'mosquitto.log'}",
        "log_type error",
        "log_type warning",
        "log_type notice",
        "connection_messages true",
        "log_timestamp true",
        # benchmarks and floods send bursts far above the defaults (1000 queued, 20 in flight)
        "max_queued_messages 1000000",
        "max_inflight_messages 1000",
        f"listener {port} 127.0.0.1",
        "allow_anonymous true",
        f"listener {auth_port} 127.0.0.1",
        "allow_anonymous false",
        f"password_file {home.passwords}",
    ]
    home.config.write_text("\n".join(lines) + "\n")


def _launch(home: Home, address: str, timeout: float) -> subprocess.Popen[bytes]:
    """Start mosquitto on the home's config; wait until it answers CONNECT on ``address``."""
    home.logs.mkdir(parents=True, exist_ok=True)
    out = open(home.logs / "stdout.log", "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(
        [mosquitto_binary(), "-c", str(home.config)],
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # survives the caller; its own process group
        cwd=home.path,
    )
    out.close()
    deadline = time.monotonic() + timeout
    while not answers(address):
        if proc.poll() is not None:
            raise MosquittoError(f"mosquitto exited with code {proc.returncode} while starting; {_log_tail(home)}")
        if time.monotonic() > deadline:
            _broker._terminate(proc.pid, 5.0)
            raise MosquittoError(f"mosquitto did not answer on {address} within {timeout:.0f} s; {_log_tail(home)}")
        time.sleep(0.05)
    return proc


def _log_tail(home: Home, lines: int = 15) -> str:
    parts = []
    for name in ("stdout.log", "mosquitto.log"):
        path = home.logs / name
        if path.is_file():
            tail = path.read_text(errors="replace").strip().splitlines()[-lines:]
            if tail:
                parts.append(f"last lines of {path}:\n" + "\n".join(tail))
    return "\n".join(parts) or f"no log under {home.logs}"


def is_our_broker(pid: int, home: Home) -> bool:
    """True when ``pid`` is a live mosquitto started on this home's config (guards against pid reuse)."""
    if not pid_alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(part.endswith(b"mosquitto") for part in cmdline[:1]) and str(home.config).encode() in cmdline


def running(home: Home) -> dict[str, object] | None:
    """The state of this home's broker when it is running and answering, else None."""
    state = home.read_state()
    if not state:
        return None
    pid = int(state.get("pid", 0))  # type: ignore[call-overload]
    if pid and is_our_broker(pid, home) and answers(str(state["address"])):
        return state
    return None


def start(home: Home, lease: str = MANUAL, timeout: float = 30.0) -> dict[str, object]:
    """Start (or reuse) the broker of ``home``; returns its state (``address``, ``auth_address``,
    ``user``, ``password``, ``pid``, ``reused``)."""
    with home.locked():
        state = running(home)
        if state is not None:
            home.add_lease(lease)
            return {**state, "reused": True}
        stale = home.read_state()
        if stale and int(stale.get("pid", 0)) and is_our_broker(int(stale["pid"]), home):  # type: ignore[call-overload]
            _broker._terminate(int(stale["pid"]), 5.0)  # type: ignore[call-overload]
        shutil.rmtree(home.leases, ignore_errors=True)
        home.state_file.unlink(missing_ok=True)
        home.path.mkdir(parents=True, exist_ok=True)
        password = secrets.token_hex(12)
        home.passwords.unlink(missing_ok=True)
        made = subprocess.run(
            [_passwd_binary(), "-b", "-c", str(home.passwords), USER, password],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        if made.returncode != 0:
            raise MosquittoError(f"mosquitto_passwd failed (exit {made.returncode}): {made.stderr.strip()}")
        home.passwords.chmod(0o600)
        port, auth_port = free_ports(2)
        write_config(home, port, auth_port)
        began = time.monotonic()
        address = f"127.0.0.1:{port}"
        proc = _launch(home, address, timeout)
        state = {
            "pid": proc.pid,
            "address": address,
            "auth_address": f"127.0.0.1:{auth_port}",
            "user": USER,
            "password": password,
            "started": time.time(),
            "start_seconds": round(time.monotonic() - began, 2),
            "home": str(home.path),
        }
        home.state_file.write_text(json.dumps(state, indent=1))
        home.add_lease(lease)
        return {**state, "reused": False}


def restart(home: Home, hard: bool = False, down: float = 0.0, timeout: float = 30.0) -> dict[str, object]:
    """Stop the running broker (SIGTERM, or SIGKILL when ``hard``), stay down ``down`` seconds,
    and start it again on the same ports and password. Leases are kept; client sessions are not
    (``persistence false``), as after a broker host's reboot."""
    with home.locked():
        state = home.read_state()
        if not state or not is_our_broker(int(state.get("pid", 0)), home):  # type: ignore[call-overload]
            raise MosquittoError(f"no running broker in {home.path} to restart; start one first")
        pid = int(state["pid"])  # type: ignore[call-overload]
        if hard:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        _broker._terminate(pid, 0.0 if hard else 10.0)
        time.sleep(max(0.0, down))
        began = time.monotonic()
        proc = _launch(home, str(state["address"]), timeout)
        state = {**state, "pid": proc.pid, "started": time.time(), "start_seconds": round(time.monotonic() - began, 2)}
        home.state_file.write_text(json.dumps(state, indent=1))
        return state


def pause(home: Home, resume: bool = False) -> str:
    """SIGSTOP (or SIGCONT with ``resume``) the broker: it hangs with its sockets open."""
    state = home.read_state()
    if not state or not is_our_broker(int(state.get("pid", 0)), home):  # type: ignore[call-overload]
        raise MosquittoError(f"no running broker in {home.path}")
    pid = int(state["pid"])  # type: ignore[call-overload]
    os.killpg(pid, signal.SIGCONT if resume else signal.SIGSTOP)
    return f"{'resumed' if resume else 'paused'} pid {pid}"


def stop(home: Home) -> str:
    """Stop the broker of ``home`` regardless of leases; returns what happened."""
    with home.locked():
        return _stop_locked(home)


def _stop_locked(home: Home) -> str:
    state = home.read_state()
    shutil.rmtree(home.leases, ignore_errors=True)
    if not state:
        return "not running"
    pid = int(state.get("pid", 0))  # type: ignore[call-overload]
    home.state_file.unlink(missing_ok=True)
    if not pid or not is_our_broker(pid, home):
        return "not running (stale state removed)"
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGCONT)  # a paused broker cannot act on SIGTERM
    killed = _broker._terminate(pid, 10.0)
    return f"stopped pid {pid}" + (" (killed after SIGTERM timed out)" if killed else "")


def release(home: Home, lease: str) -> str:
    """Drop ``lease``; stop the broker when no live lease is left."""
    with home.locked():
        (home.leases / lease).unlink(missing_ok=True)
        left = home.live_leases()
        if left:
            return f"still in use by {', '.join(left)}"
        return _stop_locked(home)


# -- command line -----------------------------------------------------------------------------
def default_home() -> Path:
    return Path(os.environ.get("FEDRCA_MOSQUITTO_HOME", REPO / ".mosquitto"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--home", type=Path, default=None,
                        help="state directory (default .mosquitto/ or $FEDRCA_MOSQUITTO_HOME)")  # fmt: skip
    sub = parser.add_subparsers(dest="command", required=True)
    st = sub.add_parser("start", help="start or reuse the broker; prints its address")
    st.add_argument("--lease", default=MANUAL, help="pid of the process using the broker (default: manual)")
    st.add_argument("--timeout", type=float, default=30.0, help="seconds to wait until the broker answers")
    st.add_argument("--json", action="store_true", help="print the full state as JSON instead of the address")
    rl = sub.add_parser("release", help="drop a lease; stop the broker when no live lease is left")
    rl.add_argument("--lease", required=True)
    sub.add_parser("stop", help="stop the broker now (SIGTERM, wait, then SIGKILL)")
    sub.add_parser("status", help="print whether the broker runs; exit 1 when it does not")
    rs = sub.add_parser("restart", help="stop and start the running broker on the same ports")
    rs.add_argument("--hard", action="store_true", help="SIGKILL instead of a clean SIGTERM shutdown")
    rs.add_argument("--down", type=float, default=0.0, help="seconds to stay down between stop and start")
    sub.add_parser("pause", help="SIGSTOP the broker (it hangs with its sockets open)")
    sub.add_parser("resume", help="SIGCONT a paused broker")
    args = parser.parse_args(argv)
    home = Home((args.home or default_home()).resolve())
    try:
        if args.command == "start":
            state = start(home, args.lease, args.timeout)
            how = "reusing" if state["reused"] else f"started in {state['start_seconds']} s,"
            log(f"{how} pid {state['pid']} at {state['address']} (state in {home.path})")
            print(json.dumps(state) if args.json else state["address"], flush=True)
        elif args.command == "release":
            log(release(home, args.lease))
        elif args.command == "stop":
            log(stop(home))
        elif args.command == "status":
            running_state = running(home)
            if running_state is None:
                print("not running")
                return 1
            leases = ",".join(home.live_leases()) or "-"
            print(f"running {running_state['address']} pid={running_state['pid']} leases={leases}")
        elif args.command == "restart":
            state = restart(home, hard=args.hard, down=args.down)
            log(f"restarted in {state['start_seconds']} s, pid {state['pid']} at {state['address']}")
        elif args.command in ("pause", "resume"):
            log(pause(home, resume=args.command == "resume"))
    except MosquittoError as exc:
        log(f"error: {exc}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
