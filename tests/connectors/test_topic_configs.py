"""An existing compacted topic gets fedrca's segment settings when fedrca ensures its topics.

A topic an earlier fedrca created kept the broker's defaults (1 GiB or 7-day segments), which a
take-over reads whole (docs/streams.md, "Compacted topics"). :func:`fedrca.connectors.kafka.ensure_topics`
brings ``segment.bytes``, ``segment.ms`` and ``min.cleanable.dirty.ratio`` down to
``fedrca.connectors.names.COMPACTED``, keeps a stricter value an operator set and every other
setting, and warns, without stopping, where the broker refuses (a broker of its own with Kafka's
authorizer on: ``tools/kafka/broker.py start --scram USER=PASSWORD --acls``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from kafka import KafkaAdminClient
from kafka.admin import (
    ACL,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ConfigResource,
    ConfigResourceType,
    ResourcePattern,
    ResourceType,
)
from tools.cluster import own_broker

from fedrca.config import SiteConfig, parse_config
from fedrca.connectors.kafka import AT_MOST, KafkaOptions, ensure_site_topics, ensure_topics
from fedrca.connectors.names import COMPACTED, SiteNames
from tests.kafka_broker import unique_name, wait_until

pytestmark = pytest.mark.kafka

REPO = Path(__file__).resolve().parents[2]
USER = "fedrca-worker"
#: the broker's defaults (a segment closes at 1 GiB or after 7 days; the cleaner waits for half a log)
DEFAULTS = {"segment.bytes": str(1 << 30), "segment.ms": str(7 * 24 * 3600 * 1000), "min.cleanable.dirty.ratio": "0.5"}
FEDRCA = {key: COMPACTED[key] for key in AT_MOST}


def _site(site: str) -> SiteConfig:
    data = yaml.safe_load((REPO / "config" / "tep.yaml").read_text())
    data["site"] = site
    return parse_config(data, source=f"tep.yaml as {site}")


def _as_created_earlier(bootstrap: str, topics: dict[str, dict[str, str]]) -> None:
    """Create ``topics`` compacted with these configs only (as an earlier fedrca did: the segment defaults)."""
    specs = {
        name: {"num_partitions": 1, "replication_factor": 1, "configs": {"cleanup.policy": "compact", **configs}}
        for name, configs in topics.items()
    }
    ensure_topics(bootstrap, specs, "an earlier fedrca's topics")


def _configs(bootstrap: str, topics: list[str], keys: tuple[str, ...] = AT_MOST) -> dict[str, dict[str, str]]:
    """``keys`` of each topic as the broker reports them (its defaults included)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        described = admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, t) for t in topics], config_filter="all"
        )["topic"]
    finally:
        admin.close()
    return {t: {k: described[t][k]["value"] for k in keys} for t in topics}


def _ours(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "fedrca.connectors"]


def test_an_earlier_fedrcas_compacted_topics_get_the_segment_settings(kafka_broker, caplog):
    bootstrap = kafka_broker.bootstrap
    cfg = _site(unique_name("oldtopics"))
    names = SiteNames(cfg)
    state, history, params = names.state("reactor"), names.history("reactor"), cfg.topic("params")
    # an operator made the params topic's segments close sooner and set its retention
    stricter = {"segment.ms": "30000", "min.cleanable.dirty.ratio": "0.05"}
    _as_created_earlier(bootstrap, {state: {}, history: {}, params: {**stricter, "retention.ms": "3600000"}})
    assert _configs(bootstrap, [state, history]) == {state: DEFAULTS, history: DEFAULTS}

    with caplog.at_level(logging.WARNING, logger="fedrca.connectors"):
        ensure_site_topics(bootstrap, cfg)
    keys = (*AT_MOST, "cleanup.policy", "retention.ms")

    # the controller has the change when the alter returns; the broker's view follows it
    def altered() -> bool:
        configs = _configs(bootstrap, [state, history, params]).values()
        return all(c["segment.bytes"] == FEDRCA["segment.bytes"] for c in configs)

    wait_until(altered, 30, "the altered configs on the broker")
    after = _configs(bootstrap, [state, history, params], keys)
    assert {k: after[state][k] for k in AT_MOST} == {k: after[history][k] for k in AT_MOST} == FEDRCA
    # the stricter values and every other setting are kept (an incremental alter of the laxer keys alone)
    assert after[params] == {
        "segment.bytes": FEDRCA["segment.bytes"], **stricter, "cleanup.policy": "compact", "retention.ms": "3600000"
    }  # fmt: skip
    assert after[state]["cleanup.policy"] == "compact"
    # one line per topic that changed, naming each change once; the topics created now needed none
    lines = {r.getMessage().split()[1].rstrip(":"): r.getMessage() for r in _ours(caplog)}
    assert len(_ours(caplog)) == 3 and set(lines) == {state, history, params}, lines
    for topic in (state, history):
        for key in AT_MOST:
            assert f"{key} {DEFAULTS[key]} -> {FEDRCA[key]}" in lines[topic], lines[topic]
    assert f"segment.bytes {DEFAULTS['segment.bytes']} -> {FEDRCA['segment.bytes']}" in lines[params]
    assert "segment.ms" not in lines[params] and "min.cleanable" not in lines[params], lines[params]

    # the next start finds nothing to change and says nothing
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="fedrca.connectors"):
        ensure_site_topics(bootstrap, cfg)
    assert not _ours(caplog), [r.getMessage() for r in _ours(caplog)]
    assert _configs(bootstrap, [state, history, params], keys) == after


@dataclass(frozen=True)
class AclBroker:
    bootstrap: str  # plaintext: a super user
    sasl_bootstrap: str  # USER, who may do only what an ACL allows
    password: str


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory, kafka_broker) -> Iterator[AclBroker]:
    # kafka_broker: the jars and Java are checked (and fetched) by the shared fixture first
    password = uuid.uuid4().hex
    with own_broker(tmp_path_factory.mktemp("acl-broker"), "--scram", f"{USER}={password}", "--acls") as state:
        yield AclBroker(state["bootstrap"], state["sasl_bootstrap"], password)


def _allow(bootstrap: str, grants: dict[str, list[ACLOperation]]) -> None:
    """Let USER do these operations on these topics (literal names), and nothing else."""
    acls = [
        ACL(f"User:{USER}", "*", op, ACLPermissionType.ALLOW,
            ResourcePattern(ResourceType.TOPIC, topic, ACLResourcePatternType.LITERAL))
        for topic, ops in grants.items()
        for op in ops
    ]  # fmt: skip
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        result = admin.create_acls(acls)
    finally:
        admin.close()
    assert not result["failed"], result


def _visible(bootstrap: str, options: KafkaOptions) -> set[str]:
    """The topics USER sees (Describe)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **options.kafka_python())
    try:
        return set(admin.list_topics())
    finally:
        admin.close()


def test_a_broker_that_refuses_the_change_gets_a_warning_naming_the_topic_the_keys_and_the_fix(acl_broker, caplog):
    cfg = _site(unique_name("acltopics"))
    names = SiteNames(cfg)
    state, params, unread = names.state("reactor"), cfg.topic("params"), names.state("feed")
    _as_created_earlier(acl_broker.bootstrap, {state: {}, params: {"segment.ms": "30000"}, unread: {}})
    # the worker may see the topics and read their configs, not alter them; one topic's configs it may not read
    seen = [ACLOperation.DESCRIBE, ACLOperation.DESCRIBE_CONFIGS]
    _allow(acl_broker.bootstrap, {state: seen, params: seen, unread: [ACLOperation.DESCRIBE]})
    options = KafkaOptions("SASL_PLAINTEXT", "SCRAM-SHA-256", USER, acl_broker.password)
    wait_until(lambda: _visible(acl_broker.sasl_bootstrap, options) >= {state, params, unread}, 30, "the ACLs in force")

    with caplog.at_level(logging.INFO, logger="fedrca.connectors"):
        got = ensure_site_topics(acl_broker.sasl_bootstrap, cfg, options=options, only=[state, params, unread])
    assert got == sorted([state, params, unread])  # no crash: the worker goes on with the topics as they are
    assert _configs(acl_broker.bootstrap, [state, params, unread]) == {
        state: DEFAULTS, params: {**DEFAULTS, "segment.ms": "30000"}, unread: DEFAULTS
    }  # fmt: skip
    warnings = {r.getMessage().split()[1]: r.getMessage() for r in _ours(caplog) if r.levelno == logging.WARNING}
    assert set(warnings) == {state, params}, warnings
    for topic, keys in ((state, AT_MOST), (params, ("segment.bytes", "min.cleanable.dirty.ratio"))):
        line = warnings[topic]
        assert "refused" in line and "TopicAuthorizationFailed" in line, line
        fix = ",".join(f"{key}={FEDRCA[key]}" for key in keys)
        assert f"--alter --entity-type topics --entity-name {topic} --add-config {fix}" in line, line
    assert "segment.ms" not in warnings[params], warnings[params]
    infos = [r.getMessage() for r in _ours(caplog) if r.levelno == logging.INFO]
    assert len(infos) == 1 and unread in infos[0] and "DescribeConfigs" in infos[0], infos
