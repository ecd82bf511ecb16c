"""Real ``fedrca run`` worker processes and topic readers on the repo's broker.

Used by the crash scenarios (``tools/faults.py``) and by the Kafka integration tests
(``tests/streams/``); tools never import the tests, the tests may import this module.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kafka.admin import KafkaAdminClient
from kafka.errors import KafkaError
from kafka.structs import TopicPartition

from fedrca.connectors.kafka import read_topic

if TYPE_CHECKING:
    from fedrca.config import SiteConfig
    from fedrca.streams.embedded import EmbeddedRun
    from fedrca.streams.runtime import SiteRuntime

REPO = Path(__file__).resolve().parents[1]
FEDRCA = [sys.executable, "-m", "fedrca.cli"]


def unique_name(prefix: str = "t") -> str:
    """A fresh site/topic-safe name, so runs never see each other's topics."""
    return f"{prefix}{uuid.uuid4().hex[:10]}"


def site_config(tmp: Path, site: str, base: str = "config/tep.yaml", *, missing: bool = False) -> Path:
    """A copy of ``base`` under a fresh site name (fresh topics and consumer groups); with ``missing``, its
    ``dataset`` section allows missing values (``missing: allow``, docs/missing.md)."""
    text = (REPO / base).read_text(encoding="utf-8")
    lines = [f"site: {site}" if line.startswith("site:") else line for line in text.splitlines()]
    if missing:
        at = lines.index("dataset:") + 1
        lines.insert(at, "  missing: allow")
    path = tmp / f"{site}.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@dataclass
class Worker:
    """One ``fedrca run`` process (killable, restartable with the same name and state dir)."""

    name: str
    command: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    def start(self) -> Worker:
        self.starts += 1
        log = open(self.log_path.with_suffix(f".{self.starts}.log"), "wb")  # noqa: SIM115 - kept by the child
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        log.close()
        return self

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        """SIGKILL: no shutdown, no final commit, no flush."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)

    def log_tail(self, lines: int = 30) -> str:
        path = self.log_path.with_suffix(f".{self.starts}.log")
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


@dataclass
class Cluster:
    """The workers of one test site."""

    config: Path
    bootstrap: str
    train: Path
    workdir: Path
    workers: dict[str, Worker] = field(default_factory=dict)

    def add(
        self, name: str, roles: str, extra: Sequence[str] = (), plant_data: bool = True, worker_name: str | None = None
    ) -> Worker:
        """Start a ``fedrca run`` worker; ``plant_data=False`` leaves out ``--train`` (an RCA-only worker).
        ``worker_name`` (default ``name``) is its ``--worker-name``: a standby's is that of the worker it stands
        by for, under a name of its own here."""
        train = ["--train", str(self.train)] if plant_data else []
        command = [
            sys.executable,
            "-m",
            "fedrca.cli",
            "run",
            "--config",
            str(self.config),
            "--broker",
            f"kafka://{self.bootstrap}",
            *train,
            "--roles",
            roles,
            "--worker-name",
            worker_name or name,
            "--data-dir",
            str(self.workdir / "state"),
            "--session-timeout",
            "6",
            "--log-level",
            "info",
            *extra,
        ]
        worker = Worker(name, command, self.workdir / f"{name}")
        self.workers[name] = worker
        return worker.start()

    def stop_all(self) -> None:
        for worker in self.workers.values():
            worker.stop()

    def diagnostics(self) -> str:
        return "\n".join(f"--- {n} (alive={w.alive}):\n{w.log_tail()}" for n, w in self.workers.items())


def group_assignment(bootstrap: str, group: str) -> list[dict[str, list[int]]] | None:
    """Per member of a Stable consumer group: topic -> assigned partitions (None when not Stable)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="fedrca-test")
    try:
        described = admin.describe_groups([group])[group]
    except KafkaError:
        return None  # e.g. no group coordinator yet on a fresh broker: not ready
    finally:
        admin.close()
    if described.get("error") or described.get("group_state") != "Stable":
        return None
    members = []
    for member in described["members"]:
        assigned = member["member_assignment"]["assigned_partitions"]
        members.append({a["topic"]: list(a["partitions"]) for a in assigned})
    return members


def consumed_everything(bootstrap: str, group: str, topic: str) -> bool:
    """True when ``group`` has committed past the last record of ``topic`` (partition 0).

    The flags topic is written in transactions: its end offset also counts the commit
    markers, so the last *record's* offset is what a caught-up consumer has passed.
    """
    offsets = [r.offset for r in read_topic(bootstrap, topic, timeout=30)]
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="fedrca-test")
    try:
        committed = admin.list_group_offsets(group).get(group, {}).get(TopicPartition(topic, 0))
    finally:
        admin.close()
    return bool(offsets) and committed is not None and committed.offset > max(offsets)


def json_records(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """Every record of ``topic`` decoded as JSON (in partition/offset order)."""
    return [json.loads(r.value) for r in read_topic(bootstrap, topic, timeout=30)]


def count(bootstrap: str, topic: str) -> int:
    """Records currently in ``topic``."""
    return sum(1 for _ in read_topic(bootstrap, topic, timeout=30))


def train_site(config_path: Path, train: Path, out: Path, *options: str) -> Path:
    """Train a site's plants on ``train`` into ``out`` (``fedrca train --quiet``, then ``options`` such as
    ``--rounds 2``); returns ``out``."""
    subprocess.run(
        [*FEDRCA, "train", "--config", str(config_path), "--data", str(train), "--out", str(out), "--quiet", *options],
        check=True,
        cwd=REPO,
        capture_output=True,
    )
    return out


@dataclass(frozen=True)
class PublishedSite:
    """A fresh site on the broker: trained, its topics made, its artifacts on its params topic."""

    config_path: Path
    config: SiteConfig
    params: Path
    #: the in-process pipeline built as the workers build theirs
    runtime: SiteRuntime
    #: what that pipeline makes of the fault file: every flag and verdict the workers must write
    expected: EmbeddedRun


def publish_site(
    tmp: Path,
    bootstrap: str,
    prefix: str,
    train: Path,
    fault: Path,
    allowed_lateness: int | None = None,
    *,
    base: str = "config/tep.yaml",
    train_options: Sequence[str] = (),
    sample_seconds: float = 180.0,
) -> PublishedSite:
    """A copy of ``base`` under a fresh site name (``prefix`` + random) trained on ``train``
    (``fedrca train`` with ``train_options``), the in-process run of ``fault`` it must equal (rows
    ``sample_seconds`` apart; ``allowed_lateness`` None: the runtime's default), the site's topics, and
    the artifacts published (``fedrca publish-params``): what a Kafka test has before its workers start."""
    from fedrca.application.site import site_runtime
    from fedrca.config import load_config
    from fedrca.connectors.kafka import ensure_site_topics
    from fedrca.datasets.loader import load_frame, plant_frames
    from fedrca.streams.embedded import replay_frame
    from fedrca.streams.runtime import RuntimeSettings

    config_path = site_config(tmp, unique_name(prefix), base)
    config = load_config(config_path)
    params = train_site(config_path, train, tmp / "params", *train_options)
    settings = RuntimeSettings() if allowed_lateness is None else RuntimeSettings(allowed_lateness=allowed_lateness)
    runtime = site_runtime(config, train, params_dir=params, settings=settings)
    data = plant_frames(config, load_frame(config, fault))
    expected = replay_frame(runtime, {p: d.Y for p, d in data.items()}, sample_seconds=sample_seconds)
    ensure_site_topics(bootstrap, config)
    subprocess.run(
        [*FEDRCA, "publish-params", "--config", str(config_path), "--params", str(params), "--broker",
         f"kafka://{bootstrap}"],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return PublishedSite(config_path, config, params, runtime, expected)


def replay_file(
    config: SiteConfig, bootstrap: str, path: Path, speed: str, start: int = 0, stop: int | None = None
) -> None:
    """Replay rows ``start:stop`` of a data file into the site's sensors topics at ``speed`` (``x9000``: 50 rows/s)."""
    from fedrca.connectors import replay
    from fedrca.connectors.kafka import KafkaSink
    from fedrca.datasets import load_dataset

    dataset = load_dataset(config.dataset, path)
    groups = {p.name: list(p.sensors) for p in config.plants}
    with KafkaSink(bootstrap, config) as sink:
        replay.replay(
            dataset, groups, sink, site=config.site, pacer=replay.Pacer.from_spec(speed), start=start, stop=stop
        )


@contextmanager
def own_broker(home: Path, *start: str) -> Iterator[dict[str, Any]]:
    """A broker of its own in ``home`` (``tools/kafka/broker.py --home HOME start --json START...``, e.g.
    ``--scram USER=PASSWORD``), stopped on exit; yields its state (``bootstrap``, ``sasl_bootstrap`` ...)."""
    script = [sys.executable, str(REPO / "tools" / "kafka" / "broker.py"), "--home", str(home)]
    proc = subprocess.run(
        [*script, "start", "--json", *start], capture_output=True, text=True, timeout=600, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"tools/kafka/broker.py start {' '.join(start)} failed: {proc.stderr.strip()}")
    try:
        yield json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        subprocess.run([*script, "stop"], capture_output=True, timeout=120, check=False)
