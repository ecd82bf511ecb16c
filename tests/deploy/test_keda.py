"""Scaling on consumer lag: the KEDA component (``k8s/components/keda``) and its example overlay.

Every worker group gets a ``ScaledObject`` on its own consumer group's lag, bounded by the
group's partition count (a replica beyond it would idle), with the group's own Kafka principal;
no CPU HPA is left on a Deployment KEDA scales (two HPAs on one target fight each other).
The resources validate against KEDA's own CRDs (``k8s/schemas/keda``, ``test_schemas.py``).
"""

from __future__ import annotations

import copy

import pytest

from tests.deploy import support
from tests.deploy.support import of_kind

OVERLAY = "example-site-keda"


def test_the_component_is_generated(sync):
    files = sync.render_keda()
    present = {p.relative_to(sync.KEDA).as_posix() for p in sync.KEDA.rglob("*") if p.is_file()}
    assert present == set(files), f"files in k8s/components/keda/ the generator does not write: {present - set(files)}"
    stale = [n for n, text in files.items() if (sync.KEDA / n).read_text(encoding="utf-8") != text]
    assert not stale, f"k8s/components/keda/{stale} differ from tools/sync-k8s.py's output: run `make k8s`"


def test_every_worker_group_scales_on_its_own_lag_within_its_partitions(rendered, site_config, sync):
    docs = rendered[OVERLAY]
    every = {d["metadata"]["name"]: d for d in of_kind(docs, "Deployment")}
    # fedrca edge reads a plant's OPC UA/MQTT/Modbus tags, not Kafka: one replica per plant, no lag to scale on
    deployments = {n: d for n, d in every.items() if d["metadata"]["labels"]["app.kubernetes.io/component"] != "edge"}
    assert len(deployments) < len(every)
    scaled = {s["spec"]["scaleTargetRef"]["name"]: s for s in of_kind(docs, "ScaledObject")}
    assert set(scaled) == set(deployments), "one ScaledObject per worker Deployment"
    assert not of_kind(docs, "HorizontalPodAutoscaler"), "a CPU HPA left next to KEDA's"
    site = sync.Site(site_config)
    partitions = {t["metadata"]["name"]: t["spec"]["partitions"] for t in of_kind(docs, "KafkaTopic")}
    for name, deployment in deployments.items():
        (trigger,) = scaled[name]["spec"]["triggers"]
        meta = trigger["metadata"]
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        if deployment["metadata"]["labels"]["app.kubernetes.io/component"] == "rca":
            group, topic = site.rca_group(), site.topic("flags")
        else:
            plant = args[args.index("--plants") + 1]
            group, topic = site.processor_group(plant), site.topic("sensors", plant)
        assert (meta["consumerGroup"], meta["topic"]) == (group, topic), name
        topic_resource = sync.k8s_name(topic)
        assert scaled[name]["spec"]["maxReplicaCount"] == partitions[topic_resource], name
        assert scaled[name]["spec"]["minReplicaCount"] == 1 and meta["allowIdleConsumers"] == "false"
        # the scaler connects as the group's own principal, to the cluster the workers use
        auth = {a["metadata"]["name"]: a for a in of_kind(docs, "TriggerAuthentication")}[
            trigger["authenticationRef"]["name"]
        ]
        (env,) = deployment["spec"]["template"]["spec"]["containers"][0]["env"][-2:-1]
        assert env["name"] == "FEDRCA_KAFKA_SASL_USERNAME"
        assert auth["spec"]["env"][0]["name"] == env["name"]
        password = {r["parameter"]: r for r in auth["spec"]["secretTargetRef"]}["password"]
        assert password["name"] == env["value"], "the password of the group's own user"
        (kafka,) = [cm["data"] for cm in of_kind(docs, "ConfigMap") if "FEDRCA_KAFKA_BOOTSTRAP" in cm.get("data", {})]
        assert meta["bootstrapServers"] == kafka["FEDRCA_KAFKA_BOOTSTRAP"]


def test_keda_resources_validate_and_a_misspelt_field_is_refused(rendered):
    docs = rendered[OVERLAY]
    scaled = copy.deepcopy(of_kind(docs, "ScaledObject")[0])
    assert support.schema_errors(scaled, support.MIN_KUBERNETES) == []
    scaled["spec"]["maxReplicas"] = 3
    assert any("maxReplicas" in e for e in support.schema_errors(scaled, support.MIN_KUBERNETES))
    auth = copy.deepcopy(of_kind(docs, "TriggerAuthentication")[0])
    assert support.schema_errors(auth, support.MIN_KUBERNETES) == []
    auth["spec"]["secretTargetRef"][0]["secret"] = "x"
    assert any("secret" in e for e in support.schema_errors(auth, support.MIN_KUBERNETES))


@pytest.mark.parametrize("kustomization", ["base", "example-site"])
def test_without_the_component_nothing_needs_keda(rendered, kustomization):
    assert not [d for d in rendered[kustomization] if d["apiVersion"].startswith("keda.sh/")]
