"""The benchmarks that talk to a Kafka broker still run: ``bench/run.py --smoke`` over
:data:`tests.bench.smoke.BROKER` against the session's broker (``tests/bench/test_smoke.py`` runs the
others, on another of ``make test``'s processes)."""

from __future__ import annotations

import re

import pytest

from tests.bench.smoke import BROKER, check_section, run_smoke
from tests.kafka_broker import KafkaBroker


@pytest.fixture(scope="module")
def smoke_output(kafka_broker: KafkaBroker) -> str:
    """The output of ``bench/run.py --smoke`` over :data:`~tests.bench.smoke.BROKER` (the benchmarks lease
    the session's broker through ``tools/kafka/broker.py``)."""
    return run_smoke(list(BROKER))


@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.timeout(2500)  # the module's fixture runs every smoke in this test's setup
@pytest.mark.parametrize("name", BROKER)
def test_benchmark_runs_at_smoke_sizes(smoke_output: str, name: str) -> None:
    check_section(smoke_output, name)


@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.timeout(2500)
def test_streams_reports_the_rca_workers_memory(smoke_output: str) -> None:
    """The RCA worker's resident memory is read while it works (a stopped worker has none: it read nan)."""
    section = check_section(smoke_output, "bench_streams")
    found = re.search(r"resident memory at most (\S+) MiB while it worked", section)
    assert found, f"bench_streams printed no RCA worker memory:\n{section[-3000:]}"
    assert float(found.group(1)) > 0, f"the RCA worker's resident memory read {found.group(1)} MiB"


@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.timeout(2500)
def test_streams_accounts_every_flag_and_verdict(smoke_output: str) -> None:
    """The streams phase's account: no verdict lost or duplicated, no flag the RCA dead-lettered late.

    The lead it prints is not bounded here: the plant worker's in-step window bounds what it fetches, not the
    order in which its partitions' transactions reach the flags topic (a full-size run led by 1,331 rows with a
    window of 500, docs/streams.md "A backlog in step")."""
    section = check_section(smoke_output, "bench_streams")
    account = r"run 1: (\d+) lost, (\d+) duplicated, (\d+) late of (\d+) RCA dead letters, lead (\d+) rows"
    found = re.search(account, section)
    assert found, f"bench_streams printed no account of its flags and verdicts:\n{section[-3000:]}"
    lost, duplicated, late, dead, _lead = map(int, found.groups())
    assert (lost, duplicated, late, dead) == (0, 0, 0, 0), found.group(0)


@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.timeout(2500)
def test_streams_reports_the_plant_handlers_with_and_without_drift(smoke_output: str) -> None:
    """The plant handlers' CPU per message with the site's re-baselining loop and without it (its ablation), and
    its refreshes (at smoke size two scheduled refreshes per plant fall inside the rows: their CPU is a number)."""
    section = check_section(smoke_output, "bench_streams")
    found = re.search(
        r"plant handlers alone.*?: (\S+) us per message with the site's re-baselining loop, (\S+) us without it",
        section,
    )
    assert found, f"bench_streams printed no plant handler cost:\n{section[-3000:]}"
    assert float(found.group(1)) > 0 and float(found.group(2)) > 0, found.group(0)
    refreshes = re.search(r"its refreshes: every .*?, (\d+) in those rows, (\S+) ms of CPU each", section)
    assert refreshes, f"bench_streams printed no refresh cost:\n{section[-3000:]}"
    assert int(refreshes.group(1)) > 0 and float(refreshes.group(2)) > 0, refreshes.group(0)


@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.timeout(2500)
def test_streams_reports_the_cores_each_process_kept_busy(smoke_output: str) -> None:
    """The latency phase says what shared the cores: each worker, the broker, the load generator and the verdict
    reader, each read off /proc while the segment ran (a worker or broker gone or unknown would read nan)."""
    section = check_section(smoke_output, "bench_streams")
    found = re.search(
        r"cores busy over the segment: plant worker (\S+), RCA worker (\S+), broker (\S+), load generator (\S+),"
        r" verdict reader (\S+); (\S+) of \d+ in all",
        section,
    )
    assert found, f"bench_streams printed no cores line:\n{section[-3000:]}"
    plant, rca, broker, generator, reader, total = map(float, found.groups())
    assert min(plant, rca, broker, generator) > 0 and reader >= 0, found.group(0)
    assert total == pytest.approx(plant + rca + broker + generator + reader, abs=0.011), found.group(0)


@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.timeout(2500)
def test_sites_accounts_every_flag_and_verdict_against_the_replay(smoke_output: str) -> None:
    """The many-sites scenario compares every site's flags and verdicts with its in-process replay, field for
    field (the flags' ``degraded`` too: a comparison that left it out counted every flag as different)."""
    section = check_section(smoke_output, "bench_sites")
    account = r"exactly once against the in-process replay: (\d+) verdicts and (\d+) flags compared; (\d+) lost, (\d+) duplicated, (\d+) different"  # noqa: E501
    found = re.search(account, section)
    assert found, f"bench_sites printed no account of its flags and verdicts:\n{section[-3000:]}"
    verdicts, flags, lost, duplicated, different = map(int, found.groups())
    assert flags > 0 and verdicts > 0, found.group(0)
    assert (lost, duplicated, different) == (0, 0, 0), found.group(0)
