"""What ``kubectl kustomize`` renders is valid for the API server: every resource against its schema.

Built-in kinds against the Kubernetes JSON schemas of ``kubernetes-validate`` (strict) for the
oldest supported and the newest known Kubernetes; Strimzi and Prometheus Operator resources
against the schemas vendored in ``k8s/schemas/``.
"""

from __future__ import annotations

import copy

import kubernetes_validate
import pytest

from tests.deploy import support

VERSIONS = [support.MIN_KUBERNETES, kubernetes_validate.latest_version()]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("kustomization", list(support.KUSTOMIZATIONS))
def test_every_rendered_resource_validates(rendered, kustomization, version):
    problems = {}
    for doc in rendered[kustomization]:
        errors = support.schema_errors(doc, version)  # LookupError (fails) for a kind without a schema
        if errors:
            problems[f"{doc['kind']}/{doc['metadata']['name']}"] = errors
    assert not problems, problems


def first(docs: list[support.Doc], kind: str) -> support.Doc:
    return copy.deepcopy(support.of_kind(docs, kind)[0])


@pytest.mark.parametrize(
    ("kind", "mutate", "where"),
    [
        # a misspelt field is refused, for built-in kinds and for each custom resource
        ("Deployment", lambda d: d["spec"].update(replica=2), "replica"),
        ("Deployment", lambda d: d["spec"]["template"]["spec"]["containers"][0].update(port=[]), "port"),
        ("KafkaTopic", lambda d: d["spec"].update(partitons=3), "partitons"),
        ("KafkaTopic", lambda d: d["spec"].update(partitions="three"), "three"),
        ("KafkaUser", lambda d: d["spec"]["authorization"]["acls"][0]["resource"].update(type="topics"), "topics"),
        ("KafkaUser", lambda d: d["spec"]["authentication"].update(type="scram-sha-256"), "scram-sha-256"),
        ("ServiceMonitor", lambda d: d["spec"].update(endpoint=[]), "endpoint"),
        ("PrometheusRule", lambda d: d["spec"]["groups"][0]["rules"][0].update(expression="up"), "expression"),
        ("KafkaTopic", lambda d: d["metadata"].update(name="Tep_Sensors"), "Tep_Sensors"),
    ],
)
def test_the_schemas_refuse_what_the_api_server_would(base, kind, mutate, where):
    doc = first(base, kind)
    assert support.schema_errors(doc, support.MIN_KUBERNETES) == []
    mutate(doc)
    errors = support.schema_errors(doc, support.MIN_KUBERNETES)
    assert errors and any(where in e for e in errors), errors


def test_a_kind_without_a_schema_is_an_error():
    with pytest.raises(LookupError, match="no schema"):
        support.schema_errors({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}, "1.30")
