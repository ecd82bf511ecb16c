"""The live system's commands: ``run`` (a Kafka worker), ``replay-to-kafka``, ``publish-params``."""

from __future__ import annotations

import argparse
import gc
import logging
import socket
import sys
import time
from pathlib import Path
from typing import Any

from fedrca.application.fitted import FittedStore
from fedrca.application.outputs import Outputs, staged_folder
from fedrca.application.params import load_params
from fedrca.application.site import plant_runtime, rca_runtime, site_runtime
from fedrca.application.worker_lock import WorkerLock
from fedrca.cli import privacy_notice
from fedrca.config import SiteConfig, load_config, parameters_hash, resolve_plants
from fedrca.config.limits import (
    KAFKA_REQUEST_TIMEOUT,
    MAX_BATCH_SIZE,
    MAX_KAFKA_RECORD,
    MAX_PORT,
    MAX_SESSION_TIMEOUT,
    MEMORY_LIMIT,
    MIN_SESSION_TIMEOUT,
    TOPIC_CHARACTERS,
    artifact_record_problem,
    check_range,
    file_name_problem,
    gib,
    largest,
    rca_record_room,
    rca_state_bytes,
    stream_bytes,
)
from fedrca.connectors import replay
from fedrca.connectors.kafka import KafkaOptions, KafkaSink, bootstrap_of, ensure_site_topics, read_topic
from fedrca.connectors.names import SiteNames
from fedrca.contracts import (
    SERVER,
    ParameterArtifact,
    check_binding,
    decode_published_artifact,
    encode_published_artifact,
    save_artifact,
)
from fedrca.contracts.bounds import short
from fedrca.datasets.loader import load_dataset
from fedrca.datasets.text import check_file
from fedrca.drift import baseline_record_bytes, history_bytes
from fedrca.exceptions import ArtifactError, ConfigError
from fedrca.streams.runtime import RuntimeSettings
from fedrca.streams.startup import STANDBY, StartupTimeline

__all__ = ["register"]

log = logging.getLogger("fedrca.streams")


def _run(args: argparse.Namespace) -> int:
    timeline = StartupTimeline()
    entered = getattr(args, "entered_at", None)
    if entered is not None:
        timeline.mark("interpreter", at=entered)
    # Faust and its stack are imported by the one command that runs a worker (start-up cost of
    # every other command).
    import faust

    from fedrca.observability import SiteMetrics
    from fedrca.streams.app import SiteRoles, StreamSettings, Worker, create_app, parse_roles, use_uvloop, warm_up

    timeline.mark("imports")
    use_uvloop()
    named = args.worker_name is not None
    static_member = static_membership(args)
    if args.standby and not static_member:
        raise ConfigError(
            "a standby takes over its worker's static membership: give --worker-name NAME, the name of the worker "
            "it stands by for (and --static-membership auto or on)",
            key="--standby",
        )
    paths, trains = list(args.config), list(args.train or [])
    many = len(paths) > 1
    if len(trains) not in (0, 1, len(paths)):
        raise ConfigError(
            f"give --train once (for every site) or once per --config ({len(paths)}), not {len(trains)} times",
            key="--train",
        )
    if many and (args.plants or args.params):
        raise ConfigError(
            "--plants and --params are for a worker of one site; a worker of several sites serves every plant "
            "of each and reads each site's parameters from its params topic",
            key="--plants" if args.plants else "--params",
        )
    if many and not args.group:
        raise ConfigError("a worker of several sites (--config more than once) needs --group NAME", key="--group")
    if args.group is not None and (not TOPIC_CHARACTERS.match(args.group) or args.group in (".", "..")):
        raise ConfigError(
            f"'{args.group}' names the worker's consumer groups: give letters, digits, '.', '_' or '-'", key="--group"
        )
    inputs: dict[str, Any] = {"--config": paths[0], "--train": trains[0] if trains else None}
    if many or len(trains) > 1:
        inputs = {f"--config {path}": path for path in paths} | {f"--train {path}": path for path in trains}
    Outputs.plan(inputs, folders={"--data-dir": args.data_dir}, input_folders={"--params": args.params})
    # a named worker holds its local directory for its life (fedrca.application.worker_lock): refused at once
    # when one of its name runs there, unless it stands by to take over
    check_worker_name(args.worker_name)
    lock = WorkerLock(Path(args.data_dir) / args.worker_name, args.worker_name) if named else None
    if lock is not None and not args.standby:
        lock.acquire(wait=False)
    configs = [load_config(path) for path in paths]
    trains = trains * len(paths) if len(trains) == 1 else trains
    roles = parse_roles(args.roles)
    bootstrap = bootstrap_of(args.broker)
    if not trains and "plants" in roles:
        raise ConfigError(
            "--train is required for the plants role: the plant detectors are fitted on the plant's nominal data; "
            "a worker with --roles rca alone needs no plant data (give --params DIR, or let it read the artifacts "
            "published on the params topic)"
        )
    runtime_settings = RuntimeSettings(
        allowed_lateness=args.allowed_lateness, batch_size=args.batch_size, batch_within=args.batch_within
    )
    fitted: dict[Any, Any] = {}  # sites of the same design fit each plant model once
    sites = []
    warm = None
    for k, config in enumerate(configs):
        options = KafkaOptions.from_settings(config.kafka)
        served = _served_plants(config, args.plants)
        check_run_options(args, config, roles, served)
        train = trains[k] if trains else None
        if train is not None and "plants" in roles:
            check_file(train, "nominal data (--train)")
        if args.params is not None:
            # the artifacts before the broker: a wrong folder is refused at once, not after connecting
            load_params(args.params, config, plants=served if "rca" not in roles else None)
        timeline.mark("configuration")
        needed = SiteNames(config)
        ensure_site_topics(
            bootstrap,
            config,
            options=options,
            only={
                *(needed.plant_topics(served) if "plants" in roles else []),
                *(needed.rca_topics() if "rca" in roles else []),
            },
        )
        timeline.mark("topics")
        if warm is None:
            # the batches' modules import on a thread from here on, once the options and the broker are checked
            warm = warm_up(roles)
        plants = rca = None
        if "plants" in roles and "rca" not in roles:
            assert train is not None
            # the fitted detectors of this worker's last start, reused while their inputs are unchanged
            kept = Path(args.data_dir) / args.worker_name / "fitted"
            store = FittedStore(kept / config.site if many else kept, train)
            plants = plant_runtime(
                config,
                train,
                params_dir=args.params,
                plants=served,
                settings=runtime_settings,
                fitted=fitted,
                store=store,
            )
            print(f"fedrca run: site {config.site}: detectors {store.summary(served)}", file=sys.stderr, flush=True)
            config = plants.config  # plants given by match rules now list their columns
            timeline.mark("detectors")
        elif "plants" in roles:
            site = site_runtime(config, train, params_dir=args.params, settings=runtime_settings)
            plants, rca = site.plants, site.rca
            config = site.config
            timeline.mark("detectors")
        else:
            local = Path(args.data_dir) / args.worker_name
            published = local / "published-params" if not many else local / "published-params" / config.site
            params_dir = args.params or _published_params(bootstrap, config, published, options)
            timeline.mark("published parameters")
            try:
                rca = rca_runtime(config, params_dir=params_dir, settings=runtime_settings)
            except Exception as exc:
                if args.params is not None:
                    raise
                # published artifacts that decode and bind, yet do not make an engine: the defaults, said once
                print(f"fedrca run: site {config.site}: the published parameters do not make an RCA engine "
                      f"({type(exc).__name__}: {short(str(exc), 200)}); RCA engine with defaults",
                      file=sys.stderr)  # fmt: skip
                rca = rca_runtime(config, params_dir=None, settings=runtime_settings)
        if rca is not None and plants is None:
            timeline.mark("RCA engine")
        sites.append(SiteRoles(SiteNames(config), plants, rca))
    local = Path(args.data_dir) / args.worker_name
    local.mkdir(parents=True, exist_ok=True)
    security = tuple(KafkaOptions.from_settings(configs[0].kafka).aiokafka().items())
    settings = StreamSettings(
        bootstrap=bootstrap,
        worker_name=args.worker_name,
        data_dir=str(local),
        session_timeout=args.session_timeout,
        batch_size=args.batch_size,
        batch_within=args.batch_within,
        batch_every=args.batch_every,
        security=security,
        static_member=static_member,
    )
    worker = Worker(sites, settings, group=args.group, timeline=timeline, warm=warm)
    app = create_app(args.group or sites[0].names.site, settings, worker)
    site_metrics = {s.names.site: (s.plants or s.rca).metrics for s in sites}  # type: ignore[union-attr]
    metrics = next(iter(site_metrics.values())) if not many else SiteMetrics(site_metrics)
    metrics.set_probes(live=worker.live, ready=worker.ready)
    if args.standby:
        assert lock is not None
        # the full collection below, done before the wait: after the lock it would take its ~0.1 s out of the
        # take-over (the one below then finds little more to look at)
        gc.collect()
        gc.freeze()
        _stand_by(lock, args)
        timeline.mark(STANDBY)
    if args.metrics_port is not None:
        port = metrics.serve(args.metrics_port, addr=args.metrics_addr)
        print(
            f"fedrca run: metrics on http://127.0.0.1:{port}/metrics (probes /healthz, /readyz)",
            file=sys.stderr,
            flush=True,
        )
    for site_roles in sites:
        if site_roles.plants is not None:
            privacy_notice("run", site_roles.plants.config, now=True)
    groups = [loop.settings.group_id for loop in worker.loops]
    what = f"site {sites[0].names.site}" if not many else f"{len(sites)} sites"
    print(
        f"fedrca run: worker '{args.worker_name}' ({what}; roles {', '.join(roles)}; "
        f"groups {', '.join(groups)}{' as a static member' if static_member else ''}) on {bootstrap}",
        file=sys.stderr,
        flush=True,
    )
    faust_worker = faust.Worker(app, loglevel=args.log_level, quiet=True)
    # Faust's start-up spinner turns the root logger to DEBUG for good (every send/fetch then
    # builds a log record); without it the root logger stays at --log-level.
    faust_worker.spinner = None
    # Everything built so far (modules, fitted detectors) lives as long as the worker: keep it out
    # of the garbage collector's full passes, which otherwise pause the worker ~0.1 s each.
    gc.collect()
    gc.freeze()
    timeline.mark("worker built")
    faust_worker.execute_from_commandline()
    return 0


def _stand_by(lock: WorkerLock, args: argparse.Namespace) -> None:
    """Wait, ready to serve, until the worker of this name is gone; then hold its lock (``--standby``)."""
    began = time.monotonic()

    def waiting(pid: int | None) -> None:
        print(
            f"fedrca run: worker '{args.worker_name}' on standby, ready: waiting for the worker that holds "
            f"{lock.path}{f' (pid {pid})' if pid else ''} to stop",
            file=sys.stderr,
            flush=True,
        )

    lock.acquire(wait=True, on_wait=waiting)
    if time.monotonic() - began > 0.5:
        print(
            f"fedrca run: worker '{args.worker_name}' taking over after {time.monotonic() - began:.1f} s on standby",
            file=sys.stderr,
            flush=True,
        )
    if args.metrics_port is not None:  # the worker it stood by for held the port until now
        _check_listen(args.metrics_addr, args.metrics_port)


def static_membership(args: argparse.Namespace) -> bool:
    """Whether the worker joins its groups as a static member (``--static-membership``), and its name set.

    ``auto`` is on when ``--worker-name`` is given: a name given by its operator (a pod's, a
    StatefulSet's, a supervisor's) is unique among the group's workers and kept across restarts,
    which a static member needs (two live members of one name fence each other); the default
    name ``worker`` is neither. ``on`` without ``--worker-name`` is refused.

    Raises
    ------
    ConfigError
        ``--static-membership on`` without ``--worker-name``.
    """
    named = args.worker_name is not None
    if args.static_membership == "on" and not named:
        raise ConfigError(
            "a static member is known by its name: give --worker-name NAME, unique among the workers of its groups "
            "and the same across its restarts (or --static-membership auto/off)",
            key="--static-membership",
        )
    if not named:
        args.worker_name = "worker"
    return args.static_membership == "on" or (args.static_membership == "auto" and named)


def check_run_options(args: argparse.Namespace, config: SiteConfig, roles: tuple[str, ...], served: list[str]) -> None:
    """Refuse every number of ``fedrca run`` outside its bound before the worker touches the network.

    The bounds come from the transport and memory (docs/limits.md): a batch at most what one
    fetch can return, a session timeout the broker's group coordinator accepts, a fetch wait
    below the clients' request timeout, a port, the RCA's state record (pending rows of the
    allowed lateness and the evidence window) within one Kafka record, and the worker's
    streaming state (:func:`~fedrca.config.limits.stream_bytes`) within the memory limit.
    """
    check_worker_name(args.worker_name)
    check_range("--batch-size", args.batch_size, 1, MAX_BATCH_SIZE, "records per fetch; one fetch returns at most "
                f"{MAX_BATCH_SIZE:,} of fedrca's smallest records")  # fmt: skip
    check_range("--batch-within", args.batch_within, 0.001, KAFKA_REQUEST_TIMEOUT / 2,
                "seconds a fetch waits, 1 ms resolution, well below the clients' 30 s request timeout")  # fmt: skip
    check_range("--batch-every", args.batch_every, 0.0, 1.0,
                "seconds between two batches; every record may wait this long more")  # fmt: skip
    check_range("--session-timeout", args.session_timeout, MIN_SESSION_TIMEOUT, MAX_SESSION_TIMEOUT,
                "seconds; the broker's group.min/max.session.timeout.ms")  # fmt: skip
    if args.metrics_port is not None:
        check_range("--metrics-port", args.metrics_port, 0, MAX_PORT, "a TCP port; 0 = any free one")
        if not args.standby:  # a standby's is checked when it takes over (the worker it waits for holds it)
            _check_listen(args.metrics_addr, args.metrics_port)
    plants = config.plant_names
    room, horizon = rca_record_room(), config.rca.horizon if "rca" in roles else 0
    row = rca_state_bytes(plants, 1, 0) - rca_state_bytes(plants, 0, 0)
    if "rca" in roles and rca_state_bytes(plants, 0, horizon) > room:
        fits = largest(room, lambda h: rca_state_bytes(plants, 0, h), horizon)
        raise ConfigError(
            f"an evidence window of {horizon} rows over {len(plants)} plants makes the RCA's state record longer "
            f"than its {room:,} bytes of a Kafka record (docs/limits.md): set it to at most {fits}",
            source=config.source,
            key="rca.horizon",
        )
    most = (room - rca_state_bytes(plants, 0, horizon)) // row
    check_range("--allowed-lateness", args.allowed_lateness, 0, most,
                f"samples; the RCA's state record holds the pending rows, {row} bytes each, in at most "
                f"{room:,} bytes of a Kafka record")  # fmt: skip
    windows = len(served) if "plants" in roles else 0

    if config.drift.enabled and "plants" in roles:
        _check_drift(config, served)
        capacity = config.drift.rows("history", config.dataset.sample_seconds)
        kept = sum(history_bytes(capacity, len(config.plant(p).sensors)) for p in served)
    else:
        kept = 0

    def need(batch: int) -> int:  # the plants' histories are held in memory too (docs/drift.md)
        return stream_bytes(len(plants), windows, batch, args.allowed_lateness, config.privacy.window) + kept

    if kept > MEMORY_LIMIT // 2:
        raise ConfigError(
            f"the served plants' histories ({config.drift.history} each) take about {gib(kept)} of memory, over half "
            f"the {gib(MEMORY_LIMIT)} limit (docs/limits.md): keep a shorter history or serve fewer plants per worker",
            source=config.source,
            key="drift.history",
        )
    if need(args.batch_size) > MEMORY_LIMIT:
        fits = largest(MEMORY_LIMIT, need, args.batch_size)
        fix = f"give --batch-size at most {fits}" if fits else "serve fewer plants per worker (--plants)"
        raise ConfigError(
            f"the worker's streaming state needs about {gib(need(args.batch_size))}, over the {gib(MEMORY_LIMIT)} "
            f"limit (docs/limits.md): {fix}",
            key="--batch-size",
        )


def check_worker_name(name: str) -> None:
    """Refuse a ``--worker-name`` that is not one folder name and Kafka client id (before anything is made)."""
    if not TOPIC_CHARACTERS.match(name) or name in (".", ".."):
        raise ConfigError(
            f"'{name}' names a folder under --data-dir and the worker's Kafka client ids: give letters, digits, "
            "'.', '_' or '-'",
            key="--worker-name",
        )
    problem = file_name_problem(name)
    if problem is not None:
        raise ConfigError(f"the name {problem}", key="--worker-name")


def _check_drift(config: SiteConfig, served: list[str]) -> None:
    """Refuse a re-baselining plant whose baselines cannot be persisted: one baseline is one record of the plant's
    history topic (:func:`fedrca.drift.baseline_record_bytes`), within a Kafka record."""
    for plant in served:
        sensors = len(config.plant(plant).sensors)
        lambdas = len(config.plant(plant).scoring.ewma)
        size = baseline_record_bytes(sensors, lambdas)
        if size > MAX_KAFKA_RECORD:
            raise ConfigError(
                f"plant '{plant}' has {sensors} sensors: its baseline makes a record of about {size:,} bytes, over "
                f"the {MAX_KAFKA_RECORD:,} of a Kafka record (docs/limits.md); split the plant or set drift.enabled: "
                "false",
                source=config.source,
                key="drift.enabled",
            )


def _check_listen(addr: str, port: int) -> None:
    """Refuse a metrics address and port nothing can listen on (taken, not this machine's) before the work."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the metrics server binds
            probe.bind((addr, port))
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ConfigError(
            f"cannot listen on {addr}:{port} ({reason}); give a free port (0 = any) and an address of this machine "
            "(--metrics-addr)",
            key="--metrics-port",
        ) from None


def _served_plants(config: SiteConfig, text: str | None) -> list[str]:
    """The plants of ``--plants`` (all when not given)."""
    if not text:
        return list(config.plant_names)
    served = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in served if p not in config.plant_names]
    if unknown or not served:
        raise ConfigError(
            f"unknown plant(s) {unknown or served}; plants are {', '.join(config.plant_names)}", key="--plants"
        )
    return served


def _replay_to_kafka(args: argparse.Namespace) -> int:
    Outputs.plan({"--config": args.config, "--input": args.input, "--labels": args.labels})  # inputs only
    config = load_config(args.config)
    bootstrap = bootstrap_of(args.broker)
    pacer = replay.Pacer.from_spec(args.speed)
    dataset = load_dataset(config.dataset, args.input, labels_path=args.labels)
    # plants given by match rules take the file's columns
    config = resolve_plants(config, dataset.columns)
    rows = dataset.rows
    stop = rows if args.stop is None else args.stop
    check_range("--start", args.start, 0, rows - 1, f"the first row; {args.input} has {rows} rows")
    check_range("--stop", stop, args.start + 1, rows, f"the row after the last, after --start {args.start}; "
                f"{args.input} has {rows} rows")  # fmt: skip
    options = KafkaOptions.from_settings(config.kafka)
    sensors = [config.topic("sensors", plant=p) for p in config.plant_names]
    ensure_site_topics(bootstrap, config, options=options, only=sensors)
    groups = {p.name: list(p.sensors) for p in config.plants}
    sink = KafkaSink(bootstrap, config, options=options)
    started = time.perf_counter()
    try:
        stats = replay.replay(
            dataset,
            groups,
            sink,
            site=config.site,
            pacer=pacer,
            start=args.start,
            stop=stop,
            progress=replay.progress_printer("replay-to-kafka"),
        )
    finally:
        sink.close()
    elapsed = time.perf_counter() - started
    print(
        f"replayed {stats.rows} rows x {len(groups)} plants = {sink.sent} messages to {config.site}.sensors.* "
        f"in {elapsed:.2f} s ({sink.sent / max(elapsed, 1e-9):,.0f} msg/s)"
    )
    return 0


def _published_params(bootstrap: str, config: SiteConfig, directory: Path, options: KafkaOptions) -> Path | None:
    """Save the newest artifact of each plant and of the server on the params topic into ``directory``.

    What an RCA worker without ``--params`` starts from: the learned graph and the
    plants' nominal flag-state counts, as published by ``fedrca publish-params``.
    Returns None when nothing usable is published (the engine then uses its defaults).
    """
    newest: dict[str, ParameterArtifact] = {}
    expected = parameters_hash(config)
    skipped = 0
    for record in read_topic(bootstrap, config.topic("params"), options=options):
        try:
            plant, artifact = decode_published_artifact(record.value)
        except Exception as exc:  # decoding is total; a record of any other failure is skipped the same way
            skipped += 1
            log.warning("skipping the record at offset %d of %s: %s", record.offset, config.topic("params"), exc)
            continue
        if plant in config.plant_names or plant == SERVER:
            try:
                check_binding(artifact, expected, fix="publish parameters trained under this configuration")
            except ArtifactError as exc:
                skipped += 1
                log.warning("skipping the record at offset %d of %s: %s", record.offset, config.topic("params"), exc)
                continue
            newest[plant] = artifact  # the topic is in publication order: the last one wins
    if skipped:
        print(
            f"fedrca run: skipped {skipped} record(s) of {config.topic('params')} that are not parameter artifacts "
            "(the worker dead-letters them when they are published while it runs)",
            file=sys.stderr,
        )
    if not newest:
        print(f"fedrca run: no parameters on {config.topic('params')}; RCA engine with defaults", file=sys.stderr)
        return None
    # the published set replaces the previous one as a whole: staged, then moved in
    with staged_folder(directory, option="--data-dir") as stage:
        for artifact in newest.values():
            save_artifact(artifact, stage)
    fresh = {name for plant in newest for name in (f"{plant}.npz", f"{plant}.json")}
    for stale in (*directory.glob("*.npz"), *directory.glob("*.json")):
        if stale.name not in fresh:
            stale.unlink()
    versions = ", ".join(f"{p} {a.version}" for p, a in sorted(newest.items()))
    print(f"fedrca run: RCA engine from the published parameters ({versions})", file=sys.stderr, flush=True)
    return directory


def _publish_params(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    bootstrap = bootstrap_of(args.broker)
    artifacts = load_params(args.params, config)
    records = {plant: encode_published_artifact(artifact) for plant, artifact in artifacts.items()}
    for plant, record in records.items():
        problem = artifact_record_problem(f"{plant} of {args.params}", len(record))
        if problem is not None:
            raise ArtifactError(f"--params: {problem}")
    options = KafkaOptions.from_settings(config.kafka)
    topic = config.topic("params")
    ensure_site_topics(bootstrap, config, options=options, only=[topic])
    with KafkaSink(bootstrap, config, options=options) as sink:
        for plant, artifact in artifacts.items():
            # Keyed by plant on a compacted topic: the broker keeps the newest artifact of each plant.
            sink.send_raw(topic, plant.encode(), records[plant])
            print(f"published {plant} {artifact.version} ({artifact.manifest.get('sha256', '')[:12]}) to {topic}")
    return 0


def register(sub: Any) -> None:
    """Add ``run``, ``publish-params`` and ``replay-to-kafka``."""
    run = sub.add_parser(
        "run", help="run a worker of the live system (plant processors and/or the RCA) against a Kafka broker"
    )
    run.add_argument(
        "--config",
        required=True,
        action="append",
        help="the site's configuration; once per site for a worker of several sites (with --group)",
    )
    run.add_argument("--broker", required=True, help="kafka://host:port")
    run.add_argument(
        "--train",
        action="append",
        help="nominal data the plant detectors are fitted on (required for the plants role; once for every site, "
        "or once per --config)",
    )
    run.add_argument(
        "--group",
        help="consumer-group name of a worker of several sites: its roles' groups are fedrca-GROUP-plants and "
        "fedrca-GROUP-rca, shared by every worker of the same sites (required with several --config)",
    )
    run.add_argument(
        "--params",
        help="directory of training artifacts to start from (an RCA-only worker without it reads the params topic)",
    )
    run.add_argument(
        "--roles",
        default="plants,rca",
        help="comma list of plants, rca (params: following the params topic, implied); plants and rca in separate "
        "processes keep the RCA's consumer group off the sensor topics (default: both in one)",
    )
    run.add_argument(
        "--plants", help="comma list of the plants this worker serves (default all; one deployment per plant)"
    )
    run.add_argument(
        "--worker-name",
        default=None,
        help="names the worker (client ids, its local directory, its static membership; default 'worker'): unique "
        "among the workers of its groups, the same across its restarts (a StatefulSet's or a pod's name)",
    )
    run.add_argument(
        "--static-membership",
        choices=["auto", "on", "off"],
        default="auto",
        help="join the consumer groups as a static member named --worker-name (KIP-345), so a worker started again "
        "within the session timeout takes its partitions back at once (auto, the default: on when --worker-name is "
        "given)",
    )
    run.add_argument(
        "--standby",
        action="store_true",
        help="a hot standby of the worker named --worker-name on the same --data-dir: start (fit or load the "
        "detectors, read the parameters), then wait until that worker's process ends, however it ends, and take "
        "its partitions over at once (docs/streams.md, 'A hot standby')",
    )
    run.add_argument("--data-dir", default=".fedrca-faust", help="local directory of the worker")
    run.add_argument(
        "--metrics-port", type=int, default=None, help="serve /metrics, /healthz, /readyz (0 = any free port)"
    )
    run.add_argument("--metrics-addr", default="127.0.0.1", help="address the metrics server binds (0.0.0.0 in a pod)")
    run.add_argument(
        "--allowed-lateness",
        type=int,
        default=1000,
        help="samples a row waits for missing plants' flags before the RCA judges it without them (default 1000; "
        "at least the batch size, and longer than the processor outages to ride through)",
    )
    run.add_argument("--batch-size", type=int, default=2000, help="most records taken per fetch (default 2000)")
    run.add_argument(
        "--batch-within", type=float, default=0.02, help="seconds a fetch waits for records (default 0.02)"
    )
    run.add_argument(
        "--batch-every",
        type=float,
        default=0.0,
        help="least seconds between two batches of a worker: records arriving sooner wait for the next batch, "
        "so a trickle makes fewer, larger transactions (less CPU for the worker and the broker) at up to this "
        "much more latency (default 0: a batch as soon as records are there; docs/streams.md)",
    )
    run.add_argument(
        "--session-timeout", type=float, default=10.0, help="seconds before a silent worker's partitions move"
    )
    run.add_argument("--log-level", default="warn", choices=["crit", "error", "warn", "info", "debug"])
    run.set_defaults(func=_run)

    pp = sub.add_parser("publish-params", help="publish trained parameter artifacts to the site's params topic")
    pp.add_argument("--config", required=True)
    pp.add_argument("--params", required=True, help="directory written by fedrca train")
    pp.add_argument("--broker", required=True, help="kafka://host:port")
    pp.set_defaults(func=_publish_params)

    rk = sub.add_parser("replay-to-kafka", help="replay a recorded TEP/HAI/SWaT/CSV file into the sensors topics")
    rk.add_argument("--config", required=True)
    rk.add_argument("--input", required=True)
    rk.add_argument(
        "--labels",
        help="label file of HAI 23.05 / HAIEnd 23.05 data (label-test1.csv, label-test2.csv); other formats carry "
        "their labels in the data file",
    )
    rk.add_argument("--broker", required=True, help="kafka://host:port")
    rk.add_argument("--speed", default="asap", help="asap, realtime, or xN (e.g. x60)")
    rk.add_argument("--start", type=int, default=0, help="first row")
    rk.add_argument("--stop", type=int, default=None, help="row after the last")
    rk.set_defaults(func=_replay_to_kafka)
    logging.getLogger("kafka").setLevel(logging.ERROR)
