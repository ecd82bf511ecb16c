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

A worker may serve several sites (``--config`` once per site, ``--group NAME``): one loop per
role over all of them, in the groups ``fedrca-<NAME>-plants`` and ``fedrca-<NAME>-rca``, so the
sites' plants spread over the plant workers and the sites over the RCA workers
(:class:`Worker`; ``docs/sizing.md``, "Many sites")::

    fedrca run --config a.yaml --config b.yaml --group fleet --broker kafka://host:9092 --train d.dat --roles plants
    fedrca run --config a.yaml --config b.yaml --group fleet --broker kafka://host:9092 --roles rca
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import logging
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import TopicPartition

from fedrca.connectors.names import SiteNames
from fedrca.contracts import DeadLetterStage
from fedrca.exceptions import ConfigError
from fedrca.observability import Metrics
from fedrca.streams.agents import Heartbeat, ParamsFollower, PlantAgent, RCAAgent
from fedrca.streams.compat import FedrcaApp
from fedrca.streams.loop import BatchTimes, InputRecord, LoopSettings, TransactionalLoop
from fedrca.streams.runtime import PlantRuntime, RCARuntime, streaming_threads
from fedrca.streams.startup import STANDBY, StartupTimeline

__all__ = [
    "ROLES",
    "WARM_UP",
    "SiteRoles",
    "StreamSettings",
    "Worker",
    "create_app",
    "parse_roles",
    "plant_window",
    "use_uvloop",
    "warm_up",
]

log = logging.getLogger("fedrca.streams")

#: Roles a worker can take: plant processors, the central RCA, parameter following (implied by both).
ROLES = ("plants", "rca", "params")

#: Seconds a worker waits for the params topic to be read before it starts processing.
PARAMS_CATCH_UP = 60.0

#: Modules a role's batches import at their first use, not at the worker's start: ``scipy.signal`` (the
#: detectors' EWMAs and Kalman modes, :func:`scipy.signal.lfilter`; it imports ``scipy.stats`` and most of
#: scipy) is the largest part of a plant worker's imports. A worker imports them on a thread while its loops
#: join their groups and take their partitions (:func:`warm_up`: ``fedrca run`` starts it as soon as it knows its
#: roles), before its first batch.
WARM_UP: dict[str, tuple[str, ...]] = {"plants": ("scipy.signal",), "rca": ()}

#: Seconds the RCA's batches that issue no verdict (most of them) may wait uncommitted, their state carried
#: by the next transaction (``LoopSettings.defer_quiet``): a restarted RCA worker aligns at most that much
#: of its flags again.
RCA_DEFER_QUIET = 1.0

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
    batch_every : least seconds between two batches of a worker's loop (``LoopSettings.fetch_interval``;
        0: a batch as soon as records are there)
    security : aiokafka keyword arguments (SASL / TLS; :class:`fedrca.connectors.kafka.KafkaOptions`)
    data_dir : the worker's local directory (Faust's, and the RCA's copy of the published artifacts)
    static_member : join every group as a static member named ``worker_name`` (``LoopSettings.group_instance_id``):
        a worker started again under its name within the session timeout takes its partitions back at once.
        The name must then be unique among the group's workers and the same across the worker's restarts
    """

    bootstrap: str
    worker_name: str = "worker"
    data_dir: str = ".fedrca-faust"
    session_timeout: float = 10.0
    batch_size: int = 2000
    batch_within: float = 0.02
    batch_every: float = 0.0
    security: tuple[tuple[str, Any], ...] = ()
    static_member: bool = False


def plant_window(allowed_lateness: int) -> int:
    """Rows a site's plants may be apart while a plant worker works through a backlog (``LoopSettings.in_step``).

    Half the RCA's allowed lateness. A plant's flags are processed only within the window of what
    every other plant of the worker (not idle) has committed, so in the flags topic's log order no
    flag comes more than the window after a newer one of its site (``tests/streams/test_in_step.py``);
    the other half is left to seqs that advance more than one per record (rows skipped at the
    source): docs/streams.md, "A backlog in step".

    Examples
    --------
    >>> plant_window(1000)
    500
    >>> plant_window(0)
    1
    """
    return max(1, allowed_lateness // 2)


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


@dataclass(frozen=True)
class SiteRoles:
    """One site a worker serves: its Kafka names and the runtimes of the roles the worker takes there.

    Attributes
    ----------
    names : the site's Kafka names
    plants : the plant runtime (None: no plant role)
    rca : the RCA runtime (None: no RCA role)
    """

    names: SiteNames
    plants: PlantRuntime | None = None
    rca: RCARuntime | None = None


class Worker:
    """The roles of one worker process over one site or several, wired to their runtimes.

    A worker of several sites runs one transactional loop per role over all of them, in one
    consumer group per role (``fedrca-<group>-plants``, ``fedrca-<group>-rca``): the group's
    workers share every site's partitions, and a site's RCA is the worker that holds its flags
    partition (sites spread over the RCA workers, moved by the group's rebalances). Each site
    keeps its own topics, state, transactional ids, parameter follower and metrics.

    Parameters
    ----------
    sites : the sites and their runtimes (every site with the same roles)
    settings : connection and batching settings
    group : names the consumer groups of a worker of several sites (required then); None: the
        site's own groups (``fedrca-<site>-plants...``, ``fedrca-<site>-rca``)
    timeline : the worker's start-up timeline (:class:`~fedrca.streams.startup.StartupTimeline`; default: one
        since the process started), logged at INFO once the worker serves
    warm : the import of its batches' modules (:func:`warm_up`; None: the worker starts it when it runs)
    """

    def __init__(
        self,
        sites: Sequence[SiteRoles],
        settings: StreamSettings,
        group: str | None = None,
        timeline: StartupTimeline | None = None,
        warm: concurrent.futures.Future[float] | None = None,
    ) -> None:
        if not sites:
            raise ConfigError("a worker needs at least one site")
        roles = {(s.plants is not None, s.rca is not None) for s in sites}
        if len(roles) != 1 or roles == {(False, False)}:
            raise ConfigError("a worker needs the plants or the rca role, the same on every site it serves")
        if len({s.names.site for s in sites}) != len(sites):
            raise ConfigError("a worker serves each site once: two configurations name the same site")
        if group is None and len(sites) > 1:
            raise ConfigError("a worker of several sites needs a consumer group name", key="--group")
        self.sites = list(sites)
        self.settings = settings
        self.group = group
        self.heartbeat = Heartbeat()
        self.timeline = timeline if timeline is not None else StartupTimeline()
        # set once the published parameters are read and the batches' modules imported: the loops process nothing
        # before (run)
        self.prepared = asyncio.Event()
        self._served = False
        self._warm = warm
        # the loops and the followers hold one lock: a parameter switch never falls inside a batch
        self.lock = asyncio.Lock()
        security = dict(settings.security)
        self.followers = [
            ParamsFollower(settings.bootstrap, s.names, s.plants, s.rca, self.lock, security) for s in self.sites
        ]
        self._metrics: dict[str, Metrics] = {}  # input topic -> the metrics of its site
        self.loops: list[TransactionalLoop] = []
        first = self.sites[0]
        if first.plants is not None:
            agents: dict[str, PlantAgent] = {}
            sites_of: dict[str, SiteNames] = {}
            for site in self.sites:
                assert site.plants is not None
                for plant in site.plants.processors:
                    topic = site.names.sensors(plant)
                    agents[topic] = PlantAgent(site.plants, plant, site.names)
                    sites_of[topic] = site.names
                    self._metrics[topic] = site.plants.metrics
            plants_group = (
                f"fedrca-{group}-plants"
                if group is not None
                else first.names.processor_group(list(first.plants.processors))
            )
            lateness = min(site.plants.settings.allowed_lateness for site in self.sites if site.plants is not None)
            self.loops.append(
                TransactionalLoop(
                    self._loop_settings(plants_group, security, in_step=plant_window(lateness)),
                    sorted(agents),
                    lambda tp: agents[tp.topic],
                    lambda tp: sites_of[tp.topic].state(sites_of[tp.topic].plant_of(tp.topic)),
                    lambda tp: sites_of[tp.topic].transactional_id(tp.topic, tp.partition),
                    on_batch=self._on_plant_batch,
                    lock=self.lock,
                    deadletter_topic_for=lambda tp: sites_of[tp.topic].plant_deadletter(
                        sites_of[tp.topic].plant_of(tp.topic)
                    ),
                    stage=DeadLetterStage.PLANT,
                    on_refused=lambda tp, stage, error: self._metrics[tp.topic].record_deadletter(stage, error.reason),
                    step_group_for=lambda tp: sites_of[tp.topic].site,
                    start_after=self.prepared.wait,
                )
            )
        if first.rca is not None:
            rca_agents: dict[str, RCAAgent] = {}
            rca_sites: dict[str, SiteNames] = {}
            for site in self.sites:
                assert site.rca is not None
                topic = site.names.config.topic("flags")
                rca_agents[topic] = RCAAgent(site.rca, site.names)
                rca_sites[topic] = site.names
                self._metrics[topic] = site.rca.metrics
            self.loops.append(
                TransactionalLoop(
                    self._loop_settings(
                        f"fedrca-{group}-rca" if group is not None else first.names.rca_group,
                        security,
                        defer_quiet=RCA_DEFER_QUIET,
                    ),
                    sorted(rca_agents),
                    lambda tp: rca_agents[tp.topic],
                    lambda tp: rca_sites[tp.topic].config.topic("rca_state"),
                    lambda tp: rca_sites[tp.topic].rca_transactional_id(tp.partition),
                    on_batch=self._on_rca_batch,
                    lock=self.lock,
                    deadletter_topic_for=lambda tp: rca_sites[tp.topic].config.topic("deadletter"),
                    stage=DeadLetterStage.RCA,
                    on_refused=lambda tp, stage, error: self._metrics[tp.topic].record_deadletter(stage, error.reason),
                    start_after=self.prepared.wait,
                )
            )
        for site in self.sites:
            metrics = (site.plants or site.rca).metrics  # type: ignore[union-attr]
            metrics.set_probes(live=self.live, ready=self.ready)

    @property
    def roles(self) -> tuple[str, ...]:
        """The worker's roles (``plants``, ``rca``)."""
        first = self.sites[0]
        return tuple(role for role, runtime in (("plants", first.plants), ("rca", first.rca)) if runtime is not None)

    @property
    def names(self) -> SiteNames:
        """The names of the worker's (first) site."""
        return self.sites[0].names

    @property
    def plants(self) -> PlantRuntime | None:
        """The plant runtime of the worker's (first) site."""
        return self.sites[0].plants

    @property
    def rca(self) -> RCARuntime | None:
        """The RCA runtime of the worker's (first) site."""
        return self.sites[0].rca

    def _loop_settings(
        self, group: str, security: dict[str, Any], in_step: int | None = None, defer_quiet: float = 0.0
    ) -> LoopSettings:
        s = self.settings
        return LoopSettings(
            in_step=in_step,
            defer_quiet=defer_quiet,
            bootstrap=s.bootstrap,
            group_id=group,
            client_id=f"fedrca-{self.group or self.names.site}-{s.worker_name}",
            max_records=s.batch_size,
            fetch_wait=s.batch_within,
            fetch_interval=s.batch_every,
            session_timeout=s.session_timeout,
            group_instance_id=s.worker_name if s.static_member else None,
            security=security,
        )

    def _on_plant_batch(self, tp: TopicPartition, records: Sequence[InputRecord], times: BatchTimes) -> None:
        if not self._served:
            self._first_batch(times)
        metrics = self._metrics[tp.topic]
        metrics.record_stage_latencies(records, {"consume": times.fetched, "flags": times.committed})
        metrics.record_latency("plant_batch", times.committed - times.fetched)

    def _on_rca_batch(self, tp: TopicPartition, records: Sequence[InputRecord], times: BatchTimes) -> None:
        if not self._served:
            self._first_batch(times)
        metrics = self._metrics[tp.topic]
        metrics.record_stage_latency("aligned", records, now=times.processed)
        if not times.quiet:  # a batch that issued no verdict waits for none (LoopSettings.defer_quiet)
            metrics.record_stage_latency("verdict", records, now=times.committed)
        metrics.record_latency("rca_batch", times.committed - times.fetched)

    # -- probes -------------------------------------------------------------------------------
    def live(self) -> tuple[bool, str]:
        """Liveness: the event loop still beats."""
        age = self.heartbeat.age()
        return age < LIVENESS_LIMIT, f"event loop beat {age:.1f} s ago"

    def ready(self) -> tuple[bool, str]:
        """Readiness: the published parameters are read and every loop has joined its group."""
        reading = [f.names.site for f in self.followers if not f.caught_up.is_set()]
        if reading:
            return False, f"reading the published parameters ({', '.join(reading)})"
        waiting = [loop.settings.group_id for loop in self.loops if not loop.ready]
        if waiting:
            return False, f"joining {', '.join(waiting)}"
        return True, "ready"

    # -- running ------------------------------------------------------------------------------
    async def run(self) -> None:
        """Follow the parameters and run every loop until cancelled (the Faust worker stops it).

        The loops join their groups and take their partitions while the published parameters are
        read and the modules the batches need are imported (:func:`warm_up`); none processes a batch
        before both are over (the reading at most :data:`PARAMS_CATCH_UP` s), so the first batch runs
        with the parameters at the params topic's end, as when the loops started only after the
        reading (``tests/streams/test_startup.py``).
        """
        self.timeline.mark("worker started")
        beat = asyncio.ensure_future(self.heartbeat.run())
        follow = [asyncio.ensure_future(f.run()) for f in self.followers]
        prepare = asyncio.ensure_future(self._prepare())
        report = asyncio.ensure_future(self._report_start())
        blas = streaming_threads()  # the detectors are fitted: stream with one BLAS thread
        try:
            # the loops join their groups once the followers know where their topics end: a record published
            # once the worker is in its groups is new to it (dead-lettered if refused), as before the reading
            positioned = asyncio.ensure_future(asyncio.gather(*(f.positioned.wait() for f in self.followers)))
            waiting: list[asyncio.Future[Any]] = [positioned, *follow]
            try:
                await asyncio.wait(waiting, timeout=PARAMS_CATCH_UP, return_when=asyncio.FIRST_COMPLETED)
            finally:
                positioned.cancel()
            await asyncio.gather(*(loop.run() for loop in self.loops), *follow)
        finally:
            for loop in self.loops:
                loop.stop()
            for follower in self.followers:
                follower.stop()
            for task in (beat, prepare, report, *follow):
                task.cancel()
            blas.restore_original_limits()

    async def _prepare(self) -> None:
        """Open the loops' gate once every follower has read its params topic to its end (at most
        :data:`PARAMS_CATCH_UP` seconds) and the batches' modules are imported."""
        if self._warm is None:
            self._warm = warm_up(self.roles)
        warm = asyncio.wrap_future(self._warm)
        caught_up = asyncio.gather(*(f.caught_up.wait() for f in self.followers))
        try:
            await asyncio.wait_for(caught_up, PARAMS_CATCH_UP)
        except TimeoutError:
            log.error("the params topic was not read within %.0f s; starting with the parameters at hand",
                      PARAMS_CATCH_UP)  # fmt: skip
        self.timeline.mark("parameters read")
        self.timeline.mark("modules imported", at=await warm)
        self.prepared.set()

    async def _report_start(self) -> None:
        """Log the start-up timeline (INFO) once the parameters are read and every loop took its partitions."""
        await self.prepared.wait()
        await asyncio.gather(*(loop.taken.wait() for loop in self.loops))
        joined = [loop.joined_at for loop in self.loops if loop.joined_at is not None]
        if joined:
            self.timeline.mark("groups joined", at=max(joined))
        self.timeline.mark("partitions taken", at=max(loop.taken_at or 0.0 for loop in self.loops))
        log.info("%s", self.timeline.line())

    def _first_batch(self, times: BatchTimes) -> None:
        """The worker's first committed batch: on its start-up timeline, and logged (INFO)."""
        self._served = True
        self.timeline.mark("first batch committed", at=times.committed)
        took_over = self.timeline.at(STANDBY)
        since = "" if took_over is None else f", {times.committed - took_over:.2f} s after it took over on standby"
        log.info(
            "first batch committed %.2f s after the process started%s (fetched %.2f s, processed %.2f s before)",
            times.committed - self.timeline.origin, since, times.committed - times.fetched,
            times.committed - times.processed,
        )  # fmt: skip


def create_app(name: str, settings: StreamSettings, worker: Worker) -> FedrcaApp:
    """The Faust app hosting ``worker`` (``name``: its site or group): a task that runs it, no Kafka I/O of its own."""
    app = FedrcaApp(
        f"fedrca-{name}-{settings.worker_name}",
        broker=f"kafka://{settings.bootstrap}",
        store="memory://",
        datadir=settings.data_dir,
        web_enabled=False,
        autodiscover=False,
    )
    app.task(worker.run)
    return app


def warm_up(roles: Iterable[str]) -> concurrent.futures.Future[float]:
    """Import the modules the batches of ``roles`` use and a worker's start does not (:data:`WARM_UP`), on a
    thread of their own; the future gives the wall-clock time it was over.

    ``fedrca run`` starts it as soon as it knows the worker's roles, so the import runs while the worker
    reads its configuration, loads its detectors and joins its groups; the loops process no batch before it
    is over (:meth:`Worker.run`). A module that cannot be imported is left to the batch that uses it (which
    then says why).
    """
    modules = [module for role in dict.fromkeys(roles) for module in WARM_UP.get(role, ())]
    done: concurrent.futures.Future[float] = concurrent.futures.Future()

    def run() -> None:
        for module in modules:
            try:
                importlib.import_module(module)
            except ImportError as exc:
                log.warning("could not import %s ahead of the first batch (%s)", module, exc)
        done.set_result(time.time())

    threading.Thread(target=run, name="fedrca-warm-up", daemon=True).start()
    return done
