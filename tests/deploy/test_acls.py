"""The privacy boundary on the broker: the KafkaUser ACLs, evaluated as Kafka's authorizer does.

Raw sensor values never leave their plant's boundary: a plant's sensors topic, its dead-letter
topic (sensor dead letters carry the original bytes) and its state (changelog, derived from the
raw values) are readable by the plant's own processor and by no other principal.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import pytest
import yaml

from fedrca.config import parse_config
from tests.deploy import support
from tests.deploy.support import of_kind


@dataclass(frozen=True)
class Rule:
    principal: str
    allow: bool
    resource: str  # topic, group, cluster, transactionalId
    name: str
    prefix: bool
    operations: frozenset[str]


#: Operations that imply Describe (Kafka's AclAuthorizer: Read, Write, Delete, Alter imply Describe).
IMPLIES_DESCRIBE = {"Read", "Write", "Delete", "Alter"}


def rules_of(users: list[support.Doc]) -> list[Rule]:
    rules = []
    for user in users:
        auth = user["spec"]["authorization"]
        assert auth["type"] == "simple"
        for acl in auth["acls"]:
            resource = acl["resource"]
            ops = acl.get("operations") or [acl["operation"]]
            rules.append(
                Rule(
                    principal=user["metadata"]["name"],
                    allow=acl.get("type", "allow") == "allow",
                    resource=resource["type"],
                    name=resource.get("name", "kafka-cluster"),
                    prefix=resource.get("patternType", "literal") == "prefix",
                    operations=frozenset(ops),
                )
            )
    return rules


def covers(rule: Rule, resource: str, name: str, operation: str) -> bool:
    if rule.resource != resource:
        return False
    if rule.name == "*" and not rule.prefix:
        hit = True  # the literal wildcard matches every name
    elif rule.prefix:
        hit = name.startswith(rule.name)
    else:
        hit = name == rule.name
    ops = rule.operations
    return hit and ("All" in ops or operation in ops or (operation == "Describe" and bool(ops & IMPLIES_DESCRIBE)))


def can(rules: list[Rule], principal: str, operation: str, resource: str, name: str) -> bool:
    mine = [r for r in rules if r.principal == principal and covers(r, resource, name, operation)]
    return any(r.allow for r in mine) and not any(not r.allow for r in mine)  # a deny wins


def principals_that(rules: list[Rule], operation: str, resource: str, name: str) -> set[str]:
    return {p for p in {r.principal for r in rules} if can(rules, p, operation, resource, name)}


@pytest.fixture(scope="module")
def site(site_config):
    return support.sync_module().Site(site_config)


@pytest.mark.parametrize("kustomization", list(support.KUSTOMIZATIONS))
def test_only_a_plants_own_processor_reads_its_private_topics(rendered, site, kustomization):
    rules = rules_of(of_kind(rendered[kustomization], "KafkaUser"))
    for plant in site.plants:
        own = {site.processor_user(plant)}
        private = [site.topic("sensors", plant), site.plant_deadletter(plant), site.plant_state(plant)]
        # the re-baselining loop's history holds the plant's raw rows (docs/drift.md)
        history = [site.plant_history(plant)] if site.drift else []
        for topic in private + history:
            assert principals_that(rules, "Read", "topic", topic) <= own, f"another principal reads {topic}"
        # ... and the processor can read what it needs
        for topic in (site.topic("sensors", plant), site.plant_state(plant), *history):
            assert principals_that(rules, "Read", "topic", topic) == own, topic
            assert principals_that(rules, "Write", "topic", topic) <= own | {site.source_user(plant)}, topic
        # and only the plant's data source writes its sensor data
        assert principals_that(rules, "Write", "topic", site.topic("sensors", plant)) == {
            site.source_user(plant),
        }
        # nobody else joins its consumer group or takes over its transactions
        group = site.processor_group(plant)
        assert principals_that(rules, "Read", "group", group) == own
        names = site.names
        own_id = names.transactional_id(site.topic("sensors", plant), 0)
        assert principals_that(rules, "Write", "transactionalId", own_id) == own


@pytest.mark.parametrize("kustomization", list(support.KUSTOMIZATIONS))
def test_topics_marked_private_are_readable_by_their_owner_only(rendered, kustomization):
    docs = rendered[kustomization]
    rules = rules_of(of_kind(docs, "KafkaUser"))
    private = [t for t in of_kind(docs, "KafkaTopic") if "fedrca/private-to" in t["metadata"].get("annotations", {})]
    assert private
    for topic in private:
        owner = topic["metadata"]["annotations"]["fedrca/private-to"]
        name = topic["spec"]["topicName"]
        assert principals_that(rules, "Read", "topic", name) <= {owner}, name


def readable(rules: list[Rule], principal: str, topics: list[str]) -> set[str]:
    return {t for t in topics if can(rules, principal, "Read", "topic", t)}


def writable(rules: list[Rule], principal: str, topics: list[str]) -> set[str]:
    return {t for t in topics if can(rules, principal, "Write", "topic", t)}


def test_what_the_central_principals_may_touch(base, site):
    rules = rules_of(of_kind(base, "KafkaUser"))
    topics = [t["spec"]["topicName"] for t in of_kind(base, "KafkaTopic")]
    rca_state = {site.rca_state()}
    # the RCA: published flags, the artifacts and its own state; it writes verdicts, dead letters, state
    assert readable(rules, site.rca_user(), topics) == {site.topic("flags"), site.topic("params"), *rca_state}
    assert writable(rules, site.rca_user(), topics) == {site.topic("verdicts"), site.topic("deadletter"), *rca_state}
    train = {site.topic("train", p) for p in site.plants}
    assert readable(rules, site.training_user(), topics) == train
    assert writable(rules, site.training_user(), topics) == train
    assert readable(rules, site.publisher_user(), topics) == set()
    assert writable(rules, site.publisher_user(), topics) == {site.topic("params")}
    assert readable(rules, site.operator_user(), topics) == {
        site.topic("verdicts"),
        site.topic("flags"),
        site.topic("deadletter"),
    }
    # operators command the plants' loops (fedrca baseline), and write nothing else
    assert writable(rules, site.operator_user(), topics) == ({site.control()} if site.drift else set())
    for plant in site.plants:
        user = site.processor_user(plant)
        assert writable(rules, user, topics) == {
            site.topic("flags"),
            site.plant_deadletter(plant),
            site.plant_state(plant),
            *([site.plant_history(plant)] if site.drift else []),
        }


def test_no_wildcards_and_no_cluster_powers(base):
    for rule in rules_of(of_kind(base, "KafkaUser")):
        assert rule.allow, "no deny rules are needed: nothing is allowed that is not listed"
        assert rule.name != "*" and "All" not in rule.operations, rule
        if rule.resource == "cluster":
            assert rule.operations == {"IdempotentWrite"}, rule
        if rule.prefix:
            assert len(rule.name) > 4 and rule.name.endswith((".", "-")), f"a prefix ends at a separator: {rule}"


def test_every_worker_runs_as_its_own_principal(base, site):
    users = {u["metadata"]["name"] for u in of_kind(base, "KafkaUser")}
    for owner, container in support.containers(base):
        env = {v["name"]: v for v in container.get("env", [])}
        assert env["FEDRCA_KAFKA_SASL_USERNAME"]["value"] in users
        if owner["metadata"]["labels"].get("app.kubernetes.io/component") == "processor":
            plant_label = owner["metadata"]["labels"]["fedrca/plant"]
            (plant,) = [p for p in site.plants if support.sync_module().k8s_name(p) == plant_label]
            assert env["FEDRCA_KAFKA_SASL_USERNAME"]["value"] == site.processor_user(plant)


def test_the_check_catches_a_leak(base, site):
    """The evaluation above is not vacuous: one extra rule anywhere breaks the boundary and is seen."""
    users = copy.deepcopy(of_kind(base, "KafkaUser"))
    rules = rules_of(users)
    sensors = site.topic("sensors", site.plants[0])
    assert principals_that(rules, "Read", "topic", sensors) == {site.processor_user(site.plants[0])}
    for leak in (
        {"resource": {"type": "topic", "name": sensors, "patternType": "literal"}, "operations": ["Read"]},
        {"resource": {"type": "topic", "name": f"{site.site}.", "patternType": "prefix"}, "operations": ["Read"]},
        {"resource": {"type": "topic", "name": "*", "patternType": "literal"}, "operations": ["All"]},
    ):
        leaky = copy.deepcopy(users)
        rca = next(u for u in leaky if u["metadata"]["name"] == site.rca_user())
        rca["spec"]["authorization"]["acls"].append(leak)
        assert site.rca_user() in principals_that(rules_of(leaky), "Read", "topic", sensors), leak
    # a deny rule takes the permission away again
    denied = copy.deepcopy(users)
    own = next(u for u in denied if u["metadata"]["name"] == site.processor_user(site.plants[0]))
    own["spec"]["authorization"]["acls"].append(
        {"type": "deny", "resource": {"type": "topic", "name": sensors}, "operations": ["Read"]}
    )
    assert principals_that(rules_of(denied), "Read", "topic", sensors) == set()


def test_plant_names_whose_prefixes_overlap_are_refused(site_config):
    raw = yaml.safe_load((support.REPO / "config" / "tep.yaml").read_text(encoding="utf-8"))
    raw["plants"][1]["name"] = f"{raw['plants'][0]['name']}-2"  # feed, feed-2: feed's prefix ACL covers feed-2
    raw.pop("edge")  # its tag map names the plant renamed here
    site = support.sync_module().Site(parse_config(raw))
    with pytest.raises(SystemExit, match="would cover the producers of"):
        site.check()
