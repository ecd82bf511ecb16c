"""The Kubernetes manifests stay in step with the code: commands parse, config and rules are the shipped ones."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml

from fedrca.cli import build_parser
from fedrca.config import parse_config

REPO = Path(__file__).resolve().parents[1]


def documents():
    for path in sorted((REPO / "k8s").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc:
                yield path.name, doc


def containers():
    for name, doc in documents():
        spec = doc.get("spec", {})
        pod = spec.get("template", {}).get("spec") or spec.get("jobTemplate", {}).get("spec", {}).get(
            "template", {}
        ).get("spec")
        for container in (pod or {}).get("containers", []):
            yield name, container


def fedrca_invocations():
    """Every ``fedrca ...`` command line the containers run (args, or an sh -c script)."""
    for name, container in containers():
        args = [str(a) for a in container.get("args", [])]
        if container.get("command", [])[:2] == ["sh", "-c"]:
            for part in " ".join(args).split("&&"):
                yield name, shlex.split(part)
        else:
            yield name, args


def test_every_manifest_command_is_a_valid_fedrca_command():
    seen = set()
    for name, argv in fedrca_invocations():
        assert argv[0] == "fedrca", name
        args = build_parser().parse_args(argv[1:])  # exits (fails the test) on an unknown option
        seen.add(args.command)
        if args.command == "run":
            assert args.metrics_addr == "0.0.0.0", f"{name}: a pod's metrics must be reachable"
    assert {"run", "train", "publish-params"} <= seen


def test_rca_worker_and_processors_are_separate_consumer_groups():
    roles = {}
    for name, argv in fedrca_invocations():
        if argv[1] == "run":
            roles[name] = build_parser().parse_args(argv[1:]).roles
    assert roles["rca.yaml"] == "rca"
    assert "rca" not in roles["processors.yaml"].split(",")


def test_the_rca_pod_gets_no_plant_data():
    # Privacy contract: the central RCA sees flags and published artifacts only.
    (rca,) = [c for name, c in containers() if name == "rca.yaml"]
    args = build_parser().parse_args([str(a) for a in rca["args"]][1:])
    assert args.train is None
    assert [m["mountPath"] for m in rca.get("volumeMounts", [])] == ["/etc/fedrca"]


def test_configmap_is_the_shipped_site_configuration():
    configmap = next(doc for name, doc in documents() if doc["kind"] == "ConfigMap")
    shipped = (REPO / "config" / "tep.yaml").read_text(encoding="utf-8")
    assert configmap["data"]["site.yaml"] == shipped, "config/tep.yaml changed: run `make k8s`"
    parse_config(yaml.safe_load(configmap["data"]["site.yaml"]))


def test_prometheus_rule_is_the_shipped_alert_rules():
    rule = next(doc for name, doc in documents() if doc["kind"] == "PrometheusRule")
    shipped = yaml.safe_load((REPO / "config" / "prometheus" / "alerts.yml").read_text(encoding="utf-8"))
    assert rule["spec"] == shipped, "config/prometheus/alerts.yml changed: run `make k8s`"


@pytest.mark.parametrize("kind", ["sensors", "flags", "verdicts", "deadletter", "params"])
def test_topics_of_the_site_are_declared(kind):
    config = parse_config(yaml.safe_load((REPO / "config" / "tep.yaml").read_text(encoding="utf-8")))
    names = {doc["metadata"]["name"] for _, doc in documents() if doc["kind"] == "KafkaTopic"}
    wanted = {config.topic(kind, plant=p) for p in config.plant_names} if kind == "sensors" else {config.topic(kind)}
    assert wanted <= names
