"""``fedrca baseline``: look at and steer a plant's re-baselining loop (docs/drift.md).

    fedrca baseline status   --config C --broker kafka://HOST:PORT [--plant P]
    fedrca baseline pin      --config C --broker kafka://HOST:PORT --plant P
    fedrca baseline unpin    --config C --broker kafka://HOST:PORT --plant P
    fedrca baseline rollback --config C --broker kafka://HOST:PORT --plant P --to b3
    fedrca baseline refresh  --config C --broker kafka://HOST:PORT --plant P

``status`` reads the plant's own topics (its state and its history: plant-private, so it needs
the plant operator's credentials) and prints the baseline in force, the ones held for a rollback
and the last refreshes. The others publish a command on ``<site>.control``; the plant's worker
applies it once, before the plant's next batch (``refresh``: a re-baseline now from the history,
past the guards and the bounds, for an operator who judged the alarms to be a new operating point).
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from typing import Any

from fedrca.config import SiteConfig, load_config
from fedrca.connectors.kafka import KafkaOptions, KafkaSink, bootstrap_of, ensure_site_topics, read_topic
from fedrca.connectors.names import SiteNames
from fedrca.contracts import BaselineCommand
from fedrca.contracts.bounds import parse_json
from fedrca.exceptions import ConfigError, MessageError
from fedrca.streams.loop import StateScan

__all__ = ["register"]


def _config(args: argparse.Namespace) -> SiteConfig:
    config = load_config(args.config)
    if not config.drift.enabled:
        raise ConfigError(
            "the plants of this site run no re-baselining loop; set drift.enabled: true (docs/drift.md)",
            source=config.source,
            key="drift.enabled",
        )
    if getattr(args, "plant", None) is not None and args.plant not in config.plant_names:
        raise ConfigError(f"unknown plant '{args.plant}'; plants are {', '.join(config.plant_names)}", key="--plant")
    return config


def _version(text: str) -> int:
    body = text.strip().lower().removeprefix("b")
    if not body.isdigit():
        raise ConfigError(f"{text!r} is not a baseline version; write b<N> as fedrca baseline status lists them",
                          key="--to")  # fmt: skip
    return int(body)


def _command(args: argparse.Namespace) -> int:
    config = _config(args)
    bootstrap = bootstrap_of(args.broker)
    version = _version(args.to) if args.action == "rollback" else None
    command = BaselineCommand(config.site, args.plant, args.action, version, uuid.uuid4().hex, time.time())
    options = KafkaOptions.from_settings(config.kafka)
    names = SiteNames(config)
    ensure_site_topics(bootstrap, config, options=options, only=[names.control])
    with KafkaSink(bootstrap, config, options=options) as sink:
        # keyed by the plant on a compacted topic: the newest command of each plant is kept
        sink.send_raw(names.control, args.plant.encode(), command.encode())
    target = f" b{version}" if version is not None else ""
    print(f"{config.site}: {args.action}{target} of plant {args.plant} published to {names.control} (id {command.id}); "
          "the plant's worker applies it before its next batch")  # fmt: skip
    return 0


def _latest(bootstrap: str, topic: str, options: KafkaOptions) -> dict[bytes, bytes]:
    latest: dict[bytes, bytes] = {}
    for record in read_topic(bootstrap, topic, timeout=30, options=options):
        if record.key is not None and record.value is not None:
            latest[record.key] = record.value
    return latest


def _newest_state(bootstrap: str, topic: str, key: bytes, options: KafkaOptions) -> dict[str, Any] | None:
    """The newest record under ``key`` of a state topic that is a state (a hostile one is passed over, as the
    worker passes over it: :class:`fedrca.streams.loop.StateScan`)."""
    scan = StateScan()
    for record in read_topic(bootstrap, topic, timeout=30, options=options):
        if record.key == key and record.value is not None:
            scan.add(record.value)
    for _, _, state in scan.result().candidates:
        doc = json.loads(state)
        if isinstance(doc, dict):
            return doc
    return None


def _history_doc(value: bytes) -> Any:
    """A history record's JSON, or None for a record the plant's worker refuses (it dead-letters it)."""
    try:
        return parse_json(value, "a history record", max_depth=4)
    except MessageError:
        return None


def _status(args: argparse.Namespace) -> int:
    config = _config(args)
    bootstrap = bootstrap_of(args.broker)
    options = KafkaOptions.from_settings(config.kafka)
    names = SiteNames(config)
    for plant in [args.plant] if args.plant else config.plant_names:
        state = _newest_state(bootstrap, names.state(plant), f"{names.sensors(plant)}:0".encode(), options)
        drift: Any = None
        last_seq: Any = -1
        if state is not None:
            drift, last_seq = state.get("drift"), state.get("last_seq", -1)
        history = _latest(bootstrap, names.history(plant), options)
        if not isinstance(drift, dict) or not isinstance(last_seq, int) or not {"version", "next_due"} <= set(drift):
            print(f"{plant}: no state yet (no worker has processed this plant with the loop on)")
            continue
        pinned = " (pinned)" if drift.get("pinned") else ""
        print(f"{plant}: baseline b{drift['version']}{pinned}; {last_seq + 1} samples processed; next scheduled "
              f"refresh at seq {drift['next_due']}")  # fmt: skip
        made = []
        skipped = 0
        for k, value in history.items():
            if k.startswith(b"baseline/"):
                doc = _history_doc(value)
                try:
                    made.append((int(doc["version"]), int(doc["seq"]), str(doc["outcome"])[:80]))
                except (KeyError, TypeError, ValueError, OverflowError):
                    skipped += 1
        held = drift.get("held", [])
        held = set(held) if isinstance(held, list) and all(isinstance(v, int) for v in held) else set()
        for version, seq, outcome in sorted(made):
            if version in held:
                print(f"  b{version}: made at seq {seq} ({outcome})")
        reports = _history_doc(history.get(b"reports", b"[]"))
        if not isinstance(reports, list) or not all(
            isinstance(r, dict) and {"seq", "outcome", "version"} <= set(r) for r in reports
        ):
            reports, skipped = [], skipped + 1
        for report in reports[-args.last :]:
            reason = f": {str(report['reason'])[:200]}" if report.get("reason") else ""
            print(f"  seq {report['seq']}: {report['outcome']} -> b{report['version']}{reason}")
        if skipped:
            print(f"  ({skipped} record(s) of {names.history(plant)} are not the loop's: not shown; the plant's "
                  "worker dead-letters them)")  # fmt: skip
    return 0


#: What each action does (``fedrca baseline ACTION``).
ACTIONS = {
    "status": "the baseline in force, the ones held, the last refreshes",
    "pin": "hold the baseline in force (scheduled refreshes are skipped)",
    "unpin": "let scheduled refreshes run again",
    "rollback": "run an earlier baseline again (--to b<N>) and pin it",
    "refresh": "re-baseline now, past the guards (the alarms are a new operating point)",
}


def _baseline(args: argparse.Namespace) -> int:
    if args.action != "status" and args.plant is None:
        raise ConfigError(f"{args.action} needs the plant: --plant NAME", key="--plant")
    if args.action == "rollback" and args.to is None:
        raise ConfigError("a rollback names the baseline to run again: --to b<N> (fedrca baseline status lists them)",
                          key="--to")  # fmt: skip
    if args.action != "rollback" and args.to is not None:
        raise ConfigError(f"only a rollback takes --to, not {args.action}", key="--to")
    return _status(args) if args.action == "status" else _command(args)


def register(sub: Any) -> None:
    """Add ``fedrca baseline``."""
    parser = sub.add_parser(
        "baseline",
        help="look at and steer the plants' re-baselining loops (docs/drift.md)",
        description="; ".join(f"{k}: {v}" for k, v in ACTIONS.items()),
    )
    parser.add_argument("action", choices=list(ACTIONS), help="what to do")
    parser.add_argument("--config", required=True)
    parser.add_argument("--broker", required=True, help="kafka://host:port")
    parser.add_argument("--plant", help="the plant (status: default all)")
    parser.add_argument("--to", help="rollback: the baseline to run again, e.g. b3")
    parser.add_argument("--last", type=int, default=8, help="status: refreshes to list (default 8)")
    parser.set_defaults(func=_baseline)
