"""Every benchmark still runs: ``bench/run.py --smoke`` over every ``bench/bench_*.py``.

One run of ``bench/run.py --smoke`` (one interpreter for all of them: each benchmark at
its ``SMOKE`` sizes, through the same code path, its targets not counted), then one test
per benchmark that reads its section of the output: it ran to the end, without a
traceback. A new ``bench/bench_*.py`` is picked up by the glob; a benchmark that cannot
have a smoke mode yet is listed in :data:`OWNED_ELSEWHERE` with the reason, and
:func:`test_every_benchmark_is_smoked_or_listed` keeps that list honest. Speed is never
asserted here (the benchmarks are the record of speed, ``make bench``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kafka_broker import KafkaBroker

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


@pytest.fixture(scope="module")
def smoke_output(kafka_broker: KafkaBroker) -> str:
    """The output of ``bench/run.py --smoke`` over :data:`SMOKED` (the benchmarks that need a broker
    reuse the session's, leased by ``tools/kafka/broker.py``)."""
    # one BLAS thread: the smoke sizes are tiny, and threads that spin on a loaded 2-core machine
    # make a 1 ms solve take tens of ms (bench/bench_detect.py docstring)
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    names = [name.removeprefix("bench_") for name in SMOKED]
    proc = subprocess.run(
        [sys.executable, str(BENCH / "run.py"), "--smoke", *names],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=2400,  # a bound on a hang, not on speed (make bench measures speed): every smoke in one process
        check=False,
    )
    return proc.stdout + proc.stderr


def _section(output: str, name: str) -> str:
    match = re.search(rf"^=== {name} \(smoke\) ===$(.*?)(?=^=== |\Z)", output, re.S | re.M)
    assert match, f"bench/run.py --smoke printed no section for {name}:\n{output[-3000:]}"
    return match.group(1)


@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.timeout(2500)  # the module's fixture runs every smoke in this test's setup
@pytest.mark.parametrize("name", SMOKED)
def test_benchmark_runs_at_smoke_sizes(smoke_output: str, name: str) -> None:
    section = _section(smoke_output, name)
    assert "Traceback" not in section, f"{name} crashed at smoke sizes:\n{section[-4000:]}"
    assert re.search(rf"^--- {name}: ran \(", section, re.M), f"{name} did not run to the end:\n{section[-4000:]}"


def test_every_benchmark_is_smoked_or_listed() -> None:
    assert set(OWNED_ELSEWHERE) <= set(ALL), f"listed but gone: {sorted(set(OWNED_ELSEWHERE) - set(ALL))}"
    assert SMOKED, "no benchmark to smoke"
    for name in SMOKED:
        text = (BENCH / f"{name}.py").read_text(encoding="utf-8")
        # a smoke run shrinks the module's sizes (SMOKE) or the module handles smoke itself (main(smoke=...))
        assert re.search(r"^SMOKE = ", text, re.M) or "smoke" in text, f"{name} has no SMOKE sizes"


@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.timeout(2500)
def test_streams_reports_the_rca_workers_memory(smoke_output: str) -> None:
    """The RCA worker's resident memory is read while it works (a stopped worker has none: it read nan)."""
    section = _section(smoke_output, "bench_streams")
    found = re.search(r"resident memory at most (\S+) MiB while it worked", section)
    assert found, f"bench_streams printed no RCA worker memory:\n{section[-3000:]}"
    assert float(found.group(1)) > 0, f"the RCA worker's resident memory read {found.group(1)} MiB"
