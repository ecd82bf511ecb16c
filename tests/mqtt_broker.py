"""The ``mqtt_broker`` fixture: a real Eclipse Mosquitto broker for the session.

Started with ``tools/mosquitto.py start --lease <pytest pid>`` (Debian's ``mosquitto``,
installed by ``make system-deps``; a broker already running for this checkout is
reused) and released at the end of the session: it stops when no other user still
holds it. ``private_mosquitto`` starts a broker of a test's own (its own state
directory) for tests that stop, restart or pause it.

``FEDRCA_MQTT_BROKER=host:port`` makes the shared fixture use that broker instead
(never started nor stopped here; the credential tests then need
``FEDRCA_MQTT_AUTH=host:port,user,password``). Tests that use a broker are marked
``@pytest.mark.mqtt``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tools" / "mosquitto.py"

__all__ = ["MqttBroker", "mqtt_broker", "private_mosquitto"]


@dataclass(frozen=True)
class MqttBroker:
    """A running broker: ``address`` accepts anonymous clients, ``auth_address`` only ``user``/``password``."""

    address: str
    auth_address: str
    user: str
    password: str
    home: Path | None = None

    @property
    def host(self) -> str:
        return self.address.rpartition(":")[0]

    @property
    def port(self) -> int:
        return int(self.address.rpartition(":")[2])

    @property
    def url(self) -> str:
        return f"mqtt://{self.address}"

    def tool(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run ``tools/mosquitto.py`` on this broker's home (restart, pause, resume, stop)."""
        if self.home is None:
            pytest.fail("this broker was not started here (FEDRCA_MQTT_BROKER): it cannot be restarted")
        proc = subprocess.run(
            [sys.executable, str(SCRIPT), "--home", str(self.home), *args],
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            pytest.fail(f"tools/mosquitto.py {' '.join(args)} failed:\n{proc.stderr.strip()}", pytrace=False)
        return proc


def _start(home: Path | None, lease: str) -> MqttBroker:
    cmd = [sys.executable, str(SCRIPT)]
    if home is not None:
        cmd += ["--home", str(home)]
    proc = subprocess.run([*cmd, "start", "--lease", lease, "--json"],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    if proc.returncode != 0:
        pytest.fail(f"could not start mosquitto (tools/mosquitto.py start):\n{proc.stderr.strip()}", pytrace=False)
    state = json.loads(proc.stdout.strip().splitlines()[-1])
    return MqttBroker(
        str(state["address"]), str(state["auth_address"]), str(state["user"]), str(state["password"]),
        Path(str(state["home"])),
    )  # fmt: skip


@pytest.fixture(scope="session")
def mqtt_broker() -> Iterator[MqttBroker]:
    """A real Mosquitto broker for the whole session (see the module docstring)."""
    external = os.environ.get("FEDRCA_MQTT_BROKER")
    if external:
        auth = os.environ.get("FEDRCA_MQTT_AUTH", f"{external},fedrca,").split(",")
        yield MqttBroker(external, auth[0], auth[1], auth[2] if len(auth) > 2 else "")
        return
    broker = _start(None, str(os.getpid()))
    try:
        yield broker
    finally:
        subprocess.run([sys.executable, str(SCRIPT), "release", "--lease", str(os.getpid())],
                       capture_output=True, text=True, timeout=60, check=False)  # fmt: skip


@contextmanager
def private_mosquitto(home: Path) -> Iterator[MqttBroker]:
    """A broker of the caller's own under ``home``, stopped on exit (for restart / pause tests)."""
    broker = _start(home, str(os.getpid()))
    try:
        yield broker
    finally:
        subprocess.run([sys.executable, str(SCRIPT), "--home", str(home), "stop"],
                       capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
