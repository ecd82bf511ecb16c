"""The Faust application of a worker: it hosts the worker's exactly-once loops, its parameter follower and probes.

Layout follows the Faust examples: ``app`` (this module: the App, the worker's
settings and how its roles are wired), the message records (:mod:`fedrca.contracts`),
the Kafka names (:mod:`fedrca.connectors.names`), ``agents`` (thin handlers that
decode, call the runtimes, emit). The Kafka I/O is the transactional loop of
:mod:`fedrca.streams.loop`; Faust supplies the worker around it (lifecycle, signals,
logging, the event loop) and does no Kafka I/O of its own (:mod:`fedrca.streams.compat`).

Roles: ``plants`` processes the sensor topics of the plants the worker serves
(consumer group ``fedrca-<site>-plants``, or one group per subset of plants);
``rca`` processes the flags topic (group ``fedrca-<site>-rca``), so the RCA's consumer
group never subscribes to raw sensor data (the privacy contract); every worker
follows the params topic (``params`` is accepted and implied). Run several plant
workers with the same configuration to share the plants::

    fedrca run --config config/tep.yaml --broker kafka://host:9092 --train data/tep/d00.dat --roles plants
    fedrca run --config config/tep.yaml --broker kafka://host:9092 --roles rca
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import TopicPartition

from fedrca.connectors.names import SiteNames
from fedrca.contracts import DeadLetterStage
from fedrca.exceptions import ConfigError
from fedrca.streams.agents import Heartbeat, ParamsFollower, PlantAgent, RCAAgent
from fedrca.streams.compat import FedrcaApp
from fedrca.streams.loop import BatchTimes, InputRecord, LoopSettings, TransactionalLoop
from fedrca.streams.runtime import PlantRuntime, RCARuntime, streaming_threads

__all__ = ["ROLES", "StreamSettings", "Worker", "create_app", "parse_roles", "use_uvloop"]

log = logging.getLogger("fedrca.streams")

#: Roles a worker can take: plant processors, the central RCA, parameter following (implied by both).
ROLES = ("plants", "rca", "params")

#: Seconds a worker waits for the params topic to be read before it starts processing.
PARAMS_CATCH_UP = 60.0

#: Seconds without an event-loop beat after which the liveness probe fails.
LIVENESS_LIMIT = 30.0


@dataclass(frozen=True)
class StreamSettings:
    """How a worker connects and batches.

    Attributes
    ----------
    bootstrap : ``host:port`` of a broker
    worker_name : names the worker (client ids, logs)
    session_timeout : seconds after which the broker declares a silent worker dead and
        hands its partitions to the others
    batch_size : most records taken per fetch
    batch_within : seconds a fetch waits for records: the batching latency
    security : aiokafka keyword arguments (SASL / TLS; :class:`fedrca.connectors.kafka.KafkaOptions`)
    data_dir : the worker's local directory (Faust's, and the RCA's copy of the published artifacts)
    """

    bootstrap: str
    worker_name: str = "worker"
    data_dir: str = ".fedrca-faust"
    session_timeout: float = 10.0
    batch_size: int = 2000
    batch_within: float = 0.02
    security: tuple[tuple[str, Any], ...] = ()


def parse_roles(text: str) -> tuple[str, ...]:
    """``"plants,rca"`` -> ``("plants", "rca")``.

    Raises
    ------
    ConfigError
        For an unknown or empty role list.

    Examples
    --------
    >>> parse_roles("plants, params")
    ('plants', 'params')
    """
    roles = tuple(r.strip() for r in text.split(",") if r.strip())
    unknown = [r for r in roles if r not in ROLES]
    if unknown or not roles:
        raise ConfigError(f"unknown role(s) {unknown or list(roles)}; roles are {', '.join(ROLES)} (comma separated)")
    return roles


def use_uvloop() -> bool:
    """Run the worker's event loop on uvloop when it is installed; True when it is.

    Call it before the Faust worker starts (it sets the event-loop policy).
    """
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    import mode.loop

    mode.loop.use("uvloop")
    return True


class Worker:
    """The roles of one worker process, wired to their runtimes (see the module docstring).

    Parameters
    ----------
    names : the site's Kafka names
    settings : connection and batching settings
    plants : the plant runtime (None: no plant role)
    rca : the RCA runtime (None: no RCA role)
    """

    def __init__(
        self, names: SiteNames, settings: StreamSettings, plants: PlantRuntime | None, rca: RCARuntime | None
    ) -> None:
        if plants is None and rca is None:
            raise ConfigError("a worker needs the plants or the rca role")
        self.names = names
        self.settings = settings
        self.plants = plants
        self.rca = rca
        self.heartbeat = Heartbeat()
        # the loops and the follower hold one lock: a parameter switch never falls inside a batch
        self.lock = asyncio.Lock()
        security = dict(settings.security)
        self.follower = ParamsFollower(settings.bootstrap, names, plants, rca, self.lock, security)
        self.loops: list[TransactionalLoop] = []
        if plants is not None:
            served = list(plants.processors)
            agents = {names.sensors(p): PlantAgent(plants, p, names) for p in served}
            self.loops.append(
                TransactionalLoop(
                    self._loop_settings(names.processor_group(served), security),
                    sorted(agents),
                    lambda tp: agents[tp.topic],
                    lambda tp: names.state(names.plant_of(tp.topic)),
                    lambda tp: names.transactional_id(tp.topic, tp.partition),
                    on_batch=self._on_plant_batch,
                    lock=self.lock,
                    deadletter_topic_for=lambda tp: names.plant_deadletter(names.plant_of(tp.topic)),
                    stage=DeadLetterStage.PLANT,
                    on_refused=lambda tp, stage, error: plants.metrics.record_deadletter(stage, error.reason),
                )
            )
        if rca is not None:
            agent = RCAAgent(rca, names)
            self.loops.append(
                TransactionalLoop(
                    self._loop_settings(names.rca_group, security),
                    [names.config.topic("flags")],
                    lambda tp: agent,
                    lambda tp: names.config.topic("rca_state"),
                    lambda tp: names.rca_transactional_id(tp.partition),
                    on_batch=self._on_rca_batch,
                    lock=self.lock,
                    deadletter_topic_for=lambda tp: names.config.topic("deadletter"),
                    stage=DeadLetterStage.RCA,
                    on_refused=lambda tp, stage, error: rca.metrics.record_deadletter(stage, error.reason),
                )
            )
        metrics = (plants or rca).metrics  # type: ignore[union-attr]
        metrics.set_probes(live=self.live, ready=self.ready)

    def _loop_settings(self, group: str, security: dict[str, Any]) -> LoopSettings:
        s = self.settings
        return LoopSettings(
            bootstrap=s.bootstrap,
            group_id=group,
            client_id=f"fedrca-{self.names.site}-{s.worker_name}",
            max_records=s.batch_size,
            fetch_wait=s.batch_within,
            session_timeout=s.session_timeout,
            security=security,
        )

    def _on_plant_batch(self, tp: TopicPartition, records: Sequence[InputRecord], times: BatchTimes) -> None:
        assert self.plants is not None
        metrics = self.plants.metrics
        metrics.record_stage_latency("consume", records, now=times.fetched)
        metrics.record_stage_latency("flags", records, now=times.committed)
        metrics.record_latency("plant_batch", times.committed - times.fetched)

    def _on_rca_batch(self, tp: TopicPartition, records: Sequence[InputRecord], times: BatchTimes) -> None:
        assert self.rca is not None
        metrics = self.rca.metrics
        metrics.record_stage_latency("aligned", records, now=times.processed)
        metrics.record_stage_latency("verdict", records, now=times.committed)
        metrics.record_latency("rca_batch", times.committed - times.fetched)

    # -- probes -------------------------------------------------------------------------------
    def live(self) -> tuple[bool, str]:
        """Liveness: the event loop still beats."""
        age = self.heartbeat.age()
        return age < LIVENESS_LIMIT, f"event loop beat {age:.1f} s ago"

    def ready(self) -> tuple[bool, str]:
        """Readiness: the published parameters are read and every loop has joined its group."""
        if not self.follower.caught_up.is_set():
            return False, "reading the published parameters"
        waiting = [loop.settings.group_id for loop in self.loops if not loop.ready]
        if waiting:
            return False, f"joining {', '.join(waiting)}"
        return True, "ready"

    # -- running ------------------------------------------------------------------------------
    async def run(self) -> None:
        """Follow the parameters, then run every loop until cancelled (the Faust worker stops it)."""
        beat = asyncio.ensure_future(self.heartbeat.run())
        follow = asyncio.ensure_future(self.follower.run())
        blas = streaming_threads()  # the detectors are fitted: stream with one BLAS thread
        try:
            try:
                await asyncio.wait_for(asyncio.shield(self.follower.caught_up.wait()), PARAMS_CATCH_UP)
            except TimeoutError:
                log.error(
                    "the params topic was not read within %.0f s; starting with the parameters at hand", PARAMS_CATCH_UP
                )
            await asyncio.gather(*(loop.run() for loop in self.loops), follow)
        finally:
            for loop in self.loops:
                loop.stop()
            self.follower.stop()
            for task in (beat, follow):
                task.cancel()
            blas.restore_original_limits()


def create_app(names: SiteNames, settings: StreamSettings, worker: Worker) -> FedrcaApp:
    """The Faust app hosting ``worker``: one task that runs it; no Kafka I/O of Faust's own."""
    app = FedrcaApp(
        f"fedrca-{names.site}-{settings.worker_name}",
        broker=f"kafka://{settings.bootstrap}",
        store="memory://",
        datadir=settings.data_dir,
        web_enabled=False,
        autodiscover=False,
    )
    app.task(worker.run)
    return app
