"""tools/mosquitto.py: idempotent start, leases, restart on the same port, credentials (real mosquitto)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tools" / "mosquitto.py"

pytestmark = pytest.mark.mqtt


def load_script():
    spec = importlib.util.spec_from_file_location("fedrca_mosquitto_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


mosquitto = load_script()


def run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "--home", str(home), *args],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


def test_start_reuse_lease_restart_and_stop(tmp_path: Path) -> None:
    home = tmp_path / "mq"
    first = run(home, "start", "--lease", "1", "--json")  # pid 1 is alive: a lease that holds
    assert first.returncode == 0, first.stderr
    state = json.loads(first.stdout)
    try:
        assert state["reused"] is False
        assert mosquitto.answers(state["address"])
        again = json.loads(run(home, "start", "--json").stdout)
        assert again["reused"] is True and again["address"] == state["address"]
        # the manual lease of the second start keeps the broker when lease 1 is released
        assert "still in use by manual" in run(home, "release", "--lease", "1").stderr
        restarted = run(home, "restart", "--down", "0.2")
        assert restarted.returncode == 0, restarted.stderr
        after = json.loads((home / "state.json").read_text())
        assert after["address"] == state["address"] and after["pid"] != state["pid"]
        assert mosquitto.answers(state["address"])
        status = run(home, "status")
        assert status.returncode == 0 and status.stdout.startswith(f"running {state['address']}")
    finally:
        stopped = run(home, "stop")
    assert stopped.returncode == 0 and "stopped pid" in stopped.stderr
    assert not mosquitto.answers(state["address"])
    assert run(home, "status").returncode == 1


def test_auth_listener_takes_only_the_user_and_password(tmp_path: Path) -> None:
    home = tmp_path / "mq"
    state = json.loads(run(home, "start", "--json").stdout)
    try:
        auth = state["auth_address"]
        assert mosquitto.connack(auth, state["user"], state["password"]) == 0
        # MQTT 3.1.1 CONNACK 5 = not authorised (wrong password, anonymous)
        assert mosquitto.connack(auth, state["user"], "wrong") == 5
        assert mosquitto.connack(auth) == 5
    finally:
        run(home, "stop")


def test_restart_without_a_broker_is_one_clear_error(tmp_path: Path) -> None:
    proc = run(tmp_path / "none", "restart")
    assert proc.returncode == 2
    assert "no running broker" in proc.stderr and "start one first" in proc.stderr
