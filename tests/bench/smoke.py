"""``bench/run.py --smoke`` from the suite: which benchmarks, one run of them, and its per-benchmark verdict.

Two test modules share the benchmarks so that ``make test``'s processes run them side by side
(``--dist loadfile`` gives one module to one process): ``tests/bench/test_smoke_broker.py`` the ones
that talk to the session's Kafka broker (:data:`BROKER`), ``tests/bench/test_smoke.py`` every other one.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
ALL = sorted(p.stem for p in BENCH.glob("bench_*.py"))

#: benchmarks without a smoke entry, and why (each one a TODO for its owner)
OWNED_ELSEWHERE = {
    # TODO(fleet): its participants are config/fleet-tep-sim.yaml's five d00.dat segments plus the 48-h
    # simulated training seeds, read from the library cache; a smoke mode needs a tiny fleet configuration.
    "bench_fleet_library": "needs the 48-h simulated library cache and config/fleet-tep-sim.yaml's fleet",
}
SMOKED = [name for name in ALL if name not in OWNED_ELSEWHERE]
#: the benchmarks that start brokers' clients, workers or edges (the session's broker, leased by
#: ``tools/kafka/broker.py``); about half of the smoke's time
BROKER = ("bench_edge", "bench_kafka", "bench_sites", "bench_streams")
OFFLINE = [name for name in SMOKED if name not in BROKER]


def run_smoke(names: list[str]) -> str:
    """The output of one ``bench/run.py --smoke`` over ``names`` (one interpreter for all of them)."""
    # one BLAS thread: the smoke sizes are tiny, and threads that spin on a loaded 2-core machine
    # make a 1 ms solve take tens of ms (bench/bench_detect.py docstring)
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(
        [sys.executable, str(BENCH / "run.py"), "--smoke", *(name.removeprefix("bench_") for name in names)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=2400,  # a bound on a hang, not on speed (make bench measures speed)
        check=False,
    )
    return proc.stdout + proc.stderr


def check_section(output: str, name: str) -> str:
    """``name``'s section of ``output``, which ran to its end without a traceback (AssertionError if not)."""
    match = re.search(rf"^=== {name} \(smoke\) ===$(.*?)(?=^=== |\Z)", output, re.S | re.M)
    assert match, f"bench/run.py --smoke printed no section for {name}:\n{output[-3000:]}"
    section = match.group(1)
    assert "Traceback" not in section, f"{name} crashed at smoke sizes:\n{section[-4000:]}"
    assert re.search(rf"^--- {name}: ran \(", section, re.M), f"{name} did not run to the end:\n{section[-4000:]}"
    return section
