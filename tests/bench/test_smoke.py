"""Every benchmark still runs: ``bench/run.py --smoke`` over every ``bench/bench_*.py``.

One run of ``bench/run.py --smoke`` (one interpreter for all of them: each benchmark at
its ``SMOKE`` sizes, through the same code path, its targets not counted), then one test
per benchmark that reads its section of the output: it ran to the end, without a
traceback. This module runs the benchmarks that need no broker, ``test_smoke_broker.py``
the others (:mod:`tests.bench.smoke`). A new ``bench/bench_*.py`` is picked up by the glob;
a benchmark that cannot have a smoke mode yet is listed in ``OWNED_ELSEWHERE`` with the
reason, and :func:`test_every_benchmark_is_smoked_or_listed` keeps that list honest. Speed
is never asserted here (the benchmarks are the record of speed, ``make bench``).
"""

from __future__ import annotations

import re

import pytest

from tests.bench.smoke import ALL, BENCH, BROKER, OFFLINE, OWNED_ELSEWHERE, SMOKED, check_section, run_smoke


@pytest.fixture(scope="module")
def smoke_output() -> str:
    """The output of ``bench/run.py --smoke`` over :data:`~tests.bench.smoke.OFFLINE`."""
    return run_smoke(OFFLINE)


@pytest.mark.slow
@pytest.mark.timeout(2500)  # the module's fixture runs every smoke in this test's setup
@pytest.mark.parametrize("name", OFFLINE)
def test_benchmark_runs_at_smoke_sizes(smoke_output: str, name: str) -> None:
    check_section(smoke_output, name)


def test_every_benchmark_is_smoked_or_listed() -> None:
    assert set(OWNED_ELSEWHERE) <= set(ALL), f"listed but gone: {sorted(set(OWNED_ELSEWHERE) - set(ALL))}"
    assert set(BROKER) <= set(SMOKED), f"broker benchmarks that are gone: {sorted(set(BROKER) - set(SMOKED))}"
    assert SMOKED, "no benchmark to smoke"
    for name in SMOKED:
        text = (BENCH / f"{name}.py").read_text(encoding="utf-8")
        # a smoke run shrinks the module's sizes (SMOKE) or the module handles smoke itself (main(smoke=...))
        assert re.search(r"^SMOKE = ", text, re.M) or "smoke" in text, f"{name} has no SMOKE sizes"
