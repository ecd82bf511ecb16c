"""CLI commands of the streaming runtime: ``run`` (Faust worker), ``replay-to-kafka``, ``publish-params``."""

from __future__ import annotations

import argparse
import gc
import logging
import sys
import time
from pathlib import Path
from typing import Any

from fedrca.config import SiteConfig, load_config, resolve_plants
from fedrca.exceptions import ConfigError

__all__ = ["register"]

log = logging.getLogger("fedrca.streams")


def _run(args: argparse.Namespace) -> int:
    import faust

    from fedrca.connectors.kafka import bootstrap_of, ensure_site_topics, read_topic, verdict_ids
    from fedrca.exceptions import FedrcaError
    from fedrca.streams.agents import install
    from fedrca.streams.app import StreamSettings, app_id, create_app, use_uvloop
    from fedrca.streams.runtime import Runtime, RuntimeSettings
    from fedrca.streams.topics import declare_topics

    use_uvloop()
    config = load_config(args.config)
    roles = tuple(r.strip() for r in args.roles.split(",") if r.strip())
    group = app_id(config.site, roles)
    bootstrap = bootstrap_of(args.broker)
    needs_data = sorted({"plants", "params"} & set(roles))
    if args.train is None and needs_data:
        raise ConfigError(
            f"--train is required for the role(s) {', '.join(needs_data)}: the plant detectors are fitted on the "
            "plant's nominal data; a worker with --roles rca alone needs no plant data (give --params DIR, or let "
            "it read the artifacts published on the params topic)"
        )
    ensure_site_topics(bootstrap, config, partitions=args.partitions)
    runtime_settings = RuntimeSettings(
        allowed_lateness=args.allowed_lateness, batch_size=args.batch_size, batch_within=args.batch_within
    )
    if args.train is None:
        params_dir = args.params or _published_params(
            bootstrap, config, Path(args.data_dir) / args.worker_name / "published-params"
        )
        runtime = Runtime.for_rca(config, params_dir=params_dir, settings=runtime_settings)
    else:
        runtime = Runtime.from_nominal(config, args.train, params_dir=args.params, settings=runtime_settings)
    config = runtime.config  # plants given by match rules now list their columns
    if "params" in roles:
        # Start from the newest published parameters, before the first sensor batch.
        for record in read_topic(bootstrap, config.topic("params")):
            try:
                runtime.offer_published_artifact(record.value)
            except FedrcaError:
                continue  # logged and counted; the tail task dead-letters artifacts refused while running
    settings = StreamSettings(
        broker=f"kafka://{bootstrap}",
        partitions=args.partitions,
        data_dir=args.data_dir,
        worker_name=args.worker_name,
        session_timeout=args.session_timeout,
    )
    app = create_app(config, settings, roles)
    topics = declare_topics(app, config, args.partitions)
    install(app, topics, runtime, bootstrap, roles, args.partitions, read_verdict_ids=verdict_ids)
    if args.metrics_port is not None:
        port = runtime.metrics.serve(args.metrics_port, addr=args.metrics_addr)
        print(f"fedrca run: metrics on http://127.0.0.1:{port}/metrics", file=sys.stderr, flush=True)
    print(
        f"fedrca run: worker '{args.worker_name}' of group {group} (roles {', '.join(roles)}) on {bootstrap}",
        file=sys.stderr,
        flush=True,
    )
    worker = faust.Worker(app, loglevel=args.log_level, quiet=True)
    # Faust's start-up spinner turns the root logger to DEBUG for good (every send/fetch then
    # builds a log record); without it the root logger stays at --log-level.
    worker.spinner = None
    # Everything built so far (modules, fitted detectors) lives as long as the worker: keep it out
    # of the garbage collector's full passes, which otherwise pause the worker ~0.1 s each.
    gc.collect()
    gc.freeze()
    worker.execute_from_commandline()
    return 0


def _replay_to_kafka(args: argparse.Namespace) -> int:
    from fedrca.connectors import replay
    from fedrca.connectors.kafka import KafkaSink, bootstrap_of, ensure_site_topics

    config = load_config(args.config)
    bootstrap = bootstrap_of(args.broker)
    pacer = replay.Pacer.from_spec(args.speed)
    dataset = load_dataset(config, args.input, args.labels)
    # plants given by match rules take the file's columns
    config = resolve_plants(config, dataset.columns)
    ensure_site_topics(bootstrap, config, partitions=args.partitions)
    groups = {p.name: list(p.sensors) for p in config.plants}
    sink = KafkaSink(bootstrap, config)
    started = time.perf_counter()
    try:
        stats = replay.replay(
            dataset,
            groups,
            sink,
            site=config.site,
            pacer=pacer,
            start=args.start,
            stop=args.stop,
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


def _published_params(bootstrap: str, config: SiteConfig, directory: Path) -> Path | None:
    """Save the newest artifact of each plant and of the server on the params topic into ``directory``.

    What an RCA worker without ``--params`` starts from: the learned graph and the
    plants' nominal flag-state counts, as published by ``fedrca publish-params``.
    Returns None when nothing usable is published (the engine then uses its defaults).
    """
    from fedrca.connectors.kafka import read_topic
    from fedrca.exceptions import FedrcaError
    from fedrca.training.artifacts import SERVER, decode_published_artifact, save_artifact

    newest: dict[str, Any] = {}
    for record in read_topic(bootstrap, config.topic("params")):
        try:
            plant, artifact = decode_published_artifact(record.value)
        except FedrcaError as exc:
            log.warning("skipping a record of %s: %s", config.topic("params"), exc)
            continue
        if plant in config.plant_names or plant == SERVER:
            newest[plant] = artifact  # the topic is in publication order: the last one wins
    if not newest:
        print(f"fedrca run: no parameters on {config.topic('params')}; RCA engine with defaults", file=sys.stderr)
        return None
    for stale in (*directory.glob("*.npz"), *directory.glob("*.json")):
        stale.unlink()
    for artifact in newest.values():
        save_artifact(artifact, directory)
    versions = ", ".join(f"{p} {a.version}" for p, a in sorted(newest.items()))
    print(f"fedrca run: RCA engine from the published parameters ({versions})", file=sys.stderr, flush=True)
    return directory


def _publish_params(args: argparse.Namespace) -> int:
    from fedrca.connectors.kafka import KafkaSink, bootstrap_of, ensure_site_topics
    from fedrca.training.artifacts import SERVER, encode_published_artifact, load_artifact, load_site_artifacts

    config = load_config(args.config)
    bootstrap = bootstrap_of(args.broker)
    artifacts = dict(load_site_artifacts(args.params))
    if (Path(args.params) / f"{SERVER}.json").is_file():
        artifacts[SERVER] = load_artifact(args.params, SERVER)
    unknown = sorted(set(artifacts) - {*config.plant_names, SERVER})
    if unknown:
        raise ConfigError(
            f"{args.params} holds artifacts of plants {unknown} that site '{config.site}' does not have; "
            "publish the artifacts trained with this configuration",
            source=args.config,
        )
    ensure_site_topics(bootstrap, config, partitions=args.partitions)
    topic = config.topic("params")
    with KafkaSink(bootstrap, config) as sink:
        for plant, artifact in artifacts.items():
            # Keyed by plant on a compacted topic: the broker keeps the newest artifact of each plant.
            sink.send_raw(topic, plant.encode(), encode_published_artifact(artifact))
            print(f"published {plant} {artifact.version} ({artifact.manifest.get('sha256', '')[:12]}) to {topic}")
    return 0


def load_dataset(config: SiteConfig, path: str | Path, labels: str | None = None) -> Any:
    """Load a recorded file for replay in the configured dataset format (the loader every command uses)."""
    from fedrca.datasets.loader import load_dataset as load

    return load(config.dataset, path, labels_path=labels)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``run`` and ``replay-to-kafka``."""
    run = sub.add_parser("run", help="run the site's stream processors as a Faust worker against a Kafka broker")
    run.add_argument("--config", required=True)
    run.add_argument("--broker", required=True, help="kafka://host:port")
    run.add_argument(
        "--train", help="nominal data the plant detectors are fitted on (required for the plants and params roles)"
    )
    run.add_argument(
        "--params",
        help="directory of training artifacts to start from (an RCA-only worker without it reads the params topic)",
    )
    run.add_argument("--partitions", type=int, default=2, help="partitions of the sensor topics (default 2)")
    run.add_argument(
        "--roles",
        default="plants,rca,params",
        help="comma list of plants, rca, params; plants and rca in separate processes keep the RCA's "
        "consumer group off the sensor topics (default: all in one)",
    )
    run.add_argument("--worker-name", default="worker", help="distinguishes the local state of several workers")
    run.add_argument("--data-dir", default=".fedrca-faust")
    run.add_argument("--metrics-port", type=int, default=None, help="serve Prometheus metrics (0 = any free port)")
    run.add_argument("--metrics-addr", default="127.0.0.1", help="address the metrics server binds (0.0.0.0 in a pod)")
    run.add_argument(
        "--allowed-lateness",
        type=int,
        default=1000,
        help="samples a row waits for missing plants' flags before the RCA judges it without them (default 1000; "
        "at least the batch size, and longer than the processor outages to ride through)",
    )
    run.add_argument("--batch-size", type=int, default=500, help="most messages an agent takes per batch")
    run.add_argument("--batch-within", type=float, default=0.05, help="seconds an agent waits to fill a batch")
    run.add_argument(
        "--session-timeout", type=float, default=10.0, help="seconds before a silent worker's partitions move"
    )
    run.add_argument("--log-level", default="warn", choices=["crit", "error", "warn", "info", "debug"])
    run.set_defaults(func=_run)

    pp = sub.add_parser("publish-params", help="publish trained parameter artifacts to the site's params topic")
    pp.add_argument("--config", required=True)
    pp.add_argument("--params", required=True, help="directory written by fedrca train")
    pp.add_argument("--broker", required=True, help="kafka://host:port")
    pp.add_argument("--partitions", type=int, default=2, help="partitions of the sensor topics if they are created")
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
    rk.add_argument("--partitions", type=int, default=2)
    rk.set_defaults(func=_replay_to_kafka)
    logging.getLogger("kafka").setLevel(logging.ERROR)
