"""The ``kafka_broker`` fixture: a real single-node Apache Kafka broker for the session.

Started with ``tools/kafka/broker.py start --lease <pytest pid>`` (jars fetched from
Maven Central when missing; a broker already running for this checkout is reused)
and released at the end of the session: the broker stops when no other user (a
concurrent test session, or a broker started by hand) still holds it.

``FEDRCA_KAFKA_BOOTSTRAP=host:port`` makes the tests use that broker instead
(never started nor stopped here). Tests that use the fixture are marked
``@pytest.mark.kafka``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tools.cluster import unique_name

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tools" / "kafka" / "broker.py"
DEPS_HINT = "run tools/ensure-system-deps.sh (or `make system-deps`) to install Java and Maven"

__all__ = ["KafkaBroker", "kafka_broker", "unique_name", "wait_until"]


@dataclass(frozen=True)
class KafkaBroker:
    """A running broker: ``bootstrap`` is ``127.0.0.1:<port>``."""

    bootstrap: str
    started_here: bool
    start_seconds: float

    @property
    def url(self) -> str:
        """Faust-style ``kafka://host:port``."""
        return f"kafka://{self.bootstrap}"


def wait_until(condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.1) -> None:
    """Poll ``condition`` until true; fail the test naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def _start() -> KafkaBroker:
    missing = [tool for tool in ("java",) if shutil.which(tool) is None and not os.environ.get("JAVA_HOME")]
    lib = REPO / "tools" / "kafka" / "lib"
    if not any(lib.glob("kafka_2.13-*.jar")) and shutil.which("mvn") is None:
        missing.append("mvn")
    if missing:
        needs = " and ".join(missing)
        pytest.fail(f"the Kafka tests need {needs}, which are not installed; {DEPS_HINT}", pytrace=False)
    began = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "start", "--lease", str(os.getpid()), "--json"],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"could not start the Kafka broker (tools/kafka/broker.py start):\n{proc.stderr.strip()}", pytrace=False
        )
    state = json.loads(proc.stdout.strip().splitlines()[-1])
    return KafkaBroker(str(state["bootstrap"]), not state["reused"], time.monotonic() - began)


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[KafkaBroker]:
    """A real Kafka broker for the whole session (see the module docstring)."""
    external = os.environ.get("FEDRCA_KAFKA_BOOTSTRAP")
    if external:
        yield KafkaBroker(external, started_here=False, start_seconds=0.0)
        return
    broker = _start()
    try:
        yield broker
    finally:
        subprocess.run(
            [sys.executable, str(SCRIPT), "release", "--lease", str(os.getpid())],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
