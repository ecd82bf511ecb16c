"""Static membership (KIP-345) of a named worker, on the repository's broker.

A worker killed with ``kill -9`` and started again under its name (a supervisor's restart) takes its
partitions back without waiting for the broker to declare the dead process gone (the session
timeout), and a plant worker loads the detectors it fitted before (``fedrca.application.fitted``);
a named worker that stops (SIGTERM) still leaves its group at once, so the others take its
partitions without that wait either (``fedrca.streams.loop.leave_on_stop``). The session timeout is
long here (60 s) so that waiting for it cannot pass for either.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tools.cluster import Cluster, group_assignment, site_config

from tests.kafka_broker import unique_name, wait_until

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "data" / "tep" / "d00.dat"
SESSION = 60.0
#: the most a restart may take here: its process start and its join, well under the session timeout
#: (a dynamic member's restart waits the session timeout less at most one heartbeat interval, 48 s)
WITHIN = 40.0
SERVED = "resuming at offset"  # fedrca.streams.loop: a partition taken (its state read back, its offset sought)
TIMELINE = "start-up (s since the process started):"  # fedrca.streams.startup

pytestmark = pytest.mark.kafka


def _cluster(kafka_broker, tmp_path: Path) -> tuple[Cluster, str]:
    site = unique_name("static")
    return Cluster(site_config(tmp_path, site), kafka_broker.bootstrap, TRAIN, tmp_path), site


def _rca(cluster: Cluster, name: str, *extra: str):
    return cluster.add(name, "rca", extra=["--session-timeout", f"{SESSION:g}", *extra], plant_data=False)


def test_a_plant_worker_started_again_under_its_name_serves_again_before_the_session_timeout_without_a_fit(
    kafka_broker, tmp_path: Path
) -> None:
    cluster, site = _cluster(kafka_broker, tmp_path)
    plants = 5  # config/tep.yaml: one sensors partition each

    def served(worker) -> bool:
        return worker.log_tail(100_000).count(SERVED) >= plants or not worker.alive

    try:
        worker = cluster.add("p1", "plants,params", extra=["--session-timeout", f"{SESSION:g}"])
        wait_until(lambda: served(worker), 180, "the plant worker to serve every plant")
        assert worker.alive, cluster.diagnostics()
        assert "detectors fitted: " in worker.log_tail(100_000)
        worker.kill9()
        killed = time.monotonic()
        worker.start()
        wait_until(lambda: served(worker), 2 * SESSION, "the restart to serve every plant")
        took = time.monotonic() - killed
        log = worker.log_tail(100_000)
        assert worker.alive, cluster.diagnostics()
        assert "as a static member" in log
        # the same training file and configuration: the detectors of the first start, not a fit
        assert "detectors loaded as fitted before" in log and "detectors fitted" not in log, log
        assert took < WITHIN, f"served again {took:.1f} s after the kill (session timeout {SESSION:g} s)"
        # where the restart went (fedrca.streams.startup), logged at INFO once the worker serves
        wait_until(lambda: TIMELINE in worker.log_tail(100_000), 60, "the start-up timeline")
        steps = worker.log_tail(100_000).rsplit(TIMELINE, 1)[1].splitlines()[0]
        for step in ("interpreter", "imports", "detectors", "worker started", "parameters read", "partitions taken"):
            assert f" {step} +" in steps, steps
        # the group holds the restarted process alone, not a member waiting to expire beside it
        members = group_assignment(kafka_broker.bootstrap, f"fedrca-{site}-plants")
        assert members is not None and len(members) == 1, members
    finally:
        cluster.stop_all()


def test_a_named_worker_that_stops_leaves_its_group_at_once(kafka_broker, tmp_path: Path) -> None:
    cluster, site = _cluster(kafka_broker, tmp_path)
    group = f"fedrca-{site}-rca"
    try:
        first = _rca(cluster, "r1")
        wait_until(lambda: SERVED in first.log_tail(10_000) or not first.alive, 180, "the first worker to serve")
        second = _rca(cluster, "r2")
        wait_until(
            lambda: len(group_assignment(kafka_broker.bootstrap, group) or []) == 2 or not second.alive,
            180,
            "the second worker to join",
        )
        # the one partition is the first worker's (static member ids sort by name); the second idles
        holder = first if SERVED not in second.log_tail(10_000) else second
        idle = second if holder is first else first
        idle_served = idle.log_tail(10_000).count(SERVED)
        holder.stop()
        stopped = time.monotonic()
        wait_until(
            lambda: idle.log_tail(10_000).count(SERVED) > idle_served or not idle.alive,
            2 * SESSION,
            "the other worker to take the partition",
        )
        took = time.monotonic() - stopped
        assert idle.alive, cluster.diagnostics()
        assert took < SESSION / 2, f"taken {took:.1f} s after the stop (session timeout {SESSION:g} s)"
    finally:
        cluster.stop_all()
