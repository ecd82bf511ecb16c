"""The Kubernetes manifests (k8s/) stay in step with the code, the configuration and each other.

Every check runs on the output of ``kubectl kustomize`` for the base and every overlay, i.e. on
what ``kubectl apply -k`` would send.
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from fedrca.cli import build_parser
from fedrca.config import parse_config
from fedrca.connectors.names import SiteNames, topic_specs
from tests.deploy import support
from tests.deploy.support import REPO, containers, label_selector_matches, of_kind, pod_specs

SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|JAAS|PRIVATE", re.IGNORECASE)


def env_values(docs: list[support.Doc], container: support.Doc) -> dict[str, str]:
    """The container's environment as Kubernetes expands ``$(VAR)`` in args (secrets as placeholders)."""
    configmaps = {cm["metadata"]["name"]: cm.get("data", {}) for cm in of_kind(docs, "ConfigMap")}
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(configmaps[source["configMapRef"]["name"]])
    for var in container.get("env", []):
        env[var["name"]] = var.get("value", f"<{var['name']}>")
    return env


def expand(arg: str, env: dict[str, str]) -> str:
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), arg)


def pod_of(owner: support.Doc) -> support.Doc:
    """The pod spec of a Deployment or CronJob."""
    return next(pod for o, pod in pod_specs([owner]))


def command_lines(docs: list[support.Doc]):
    """(owner, container, argv after ``fedrca``) of every container."""
    for owner, container in containers(docs):
        assert container.get("command") == ["fedrca"], (
            f"{owner['metadata']['name']}: command must be the image's fedrca"
        )
        env = env_values(docs, container)
        argv = [expand(str(a), env) for a in container.get("args", [])]
        unexpanded = [a for a in argv if "$(" in a]
        assert not unexpanded, f"{owner['metadata']['name']}: variables not in the container's env: {unexpanded}"
        yield owner, container, argv


@pytest.mark.parametrize("kustomization", list(support.KUSTOMIZATIONS))
def test_every_container_runs_a_real_fedrca_command(rendered, site_config, kustomization):
    docs = rendered[kustomization]
    seen = set()
    for owner, container, argv in command_lines(docs):
        name = owner["metadata"]["name"]
        args = build_parser().parse_args(argv)  # exits (fails the test) on an unknown option
        seen.add(args.command)
        mounts = {m["mountPath"]: m for m in container.get("volumeMounts", [])}
        for config in args.config if isinstance(args.config, list) else [args.config]:  # run: once per site
            assert str(Path(config).parent) in mounts, f"{name}: --config {config} is not on a mounted volume"
        if args.command == "run":
            # the pod's containers share its network: the port may be declared by another of them (a standby's)
            ports = {p["name"]: p["containerPort"] for c in pod_of(owner)["containers"] for p in c.get("ports", [])}
            assert args.metrics_addr == "0.0.0.0", f"{name}: a pod's metrics must be reachable"
            assert args.metrics_port == ports["metrics"], f"{name}: --metrics-port is not the port named metrics"
            assert args.data_dir in mounts and not mounts[args.data_dir].get("readOnly"), f"{name}: --data-dir"
            assert args.broker.startswith("kafka://") and "$(" not in args.broker
        if args.command == "run" and args.plants:
            assert args.plants in site_config.plant_names, f"{name}: unknown plant {args.plants}"
    assert {"run", "train", "publish-params"} <= seen


def test_each_processor_is_one_plant_and_the_rca_gets_no_plant_data(base, site_config):
    processed = []
    for owner, _, argv in command_lines(base):
        args = build_parser().parse_args(argv)
        component = owner["metadata"]["labels"]["app.kubernetes.io/component"]
        if component == "processor":
            plant = args.plants
            processed.append(plant)
            assert args.roles == "plants"
            assert owner["metadata"]["labels"]["fedrca/plant"] == support.sync_module().k8s_name(plant)
            claims = [v["persistentVolumeClaim"]["claimName"] for v in owner["spec"]["template"]["spec"]["volumes"]
                      if "persistentVolumeClaim" in v]  # fmt: skip
            assert claims == [f"fedrca-{site_config.site}-nominal-{plant}"], "a processor mounts its own plant's data"
        elif component == "rca":
            # Privacy contract: the central RCA sees flags and published artifacts only.
            assert args.roles == "rca" and args.train is None
            volumes = owner["spec"]["template"]["spec"]["volumes"]
            assert not [v for v in volumes if "persistentVolumeClaim" in v]
    assert sorted(processed) == sorted(site_config.plant_names)
    (rca,) = [d for d in of_kind(base, "Deployment") if d["metadata"]["labels"]["app.kubernetes.io/component"] == "rca"]
    assert rca["spec"]["replicas"] == 1 and rca["spec"]["strategy"]["type"] == "Recreate"


def test_generated_files_are_up_to_date(sync):
    files = sync.render()
    stale = [n for n, text in files.items() if (sync.BASE / n).read_text(encoding="utf-8") != text]
    present = {p.relative_to(sync.BASE).as_posix() for p in sync.BASE.rglob("*") if p.is_file()}
    assert not stale, f"k8s/base/{stale} differ from tools/sync-k8s.py's output: run `make k8s`"
    assert present == set(files), f"files in k8s/base/ the generator does not write: {present - set(files)}"


@pytest.mark.parametrize("kustomization", list(support.KUSTOMIZATIONS))
def test_configmap_is_the_shipped_site_configuration(rendered, kustomization):
    docs = rendered[kustomization]
    (configmap,) = [cm for cm in of_kind(docs, "ConfigMap") if "site.yaml" in cm.get("data", {})]
    shipped = (REPO / "config" / "tep.yaml").read_text(encoding="utf-8")
    assert configmap["data"]["site.yaml"] == shipped, "config/tep.yaml changed: run `make k8s`"
    parse_config(yaml.safe_load(configmap["data"]["site.yaml"]))
    for owner, pod in pod_specs(docs):
        names = [v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v]
        assert names == [configmap["metadata"]["name"]], f"{owner['metadata']['name']} mounts {names}"


@pytest.mark.parametrize("kustomization", list(support.KUSTOMIZATIONS))
def test_prometheus_rule_is_the_shipped_alert_rules(rendered, kustomization):
    (rule,) = of_kind(rendered[kustomization], "PrometheusRule")
    shipped = yaml.safe_load((REPO / "config" / "prometheus" / "alerts.yml").read_text(encoding="utf-8"))
    assert rule["spec"] == shipped, "config/prometheus/alerts.yml changed: run `make k8s`"


def test_promtool_checks_the_rendered_rules(base, tmp_path, promtool):
    (rule,) = of_kind(base, "PrometheusRule")
    path = tmp_path / "prometheusrule.yml"
    path.write_text(yaml.safe_dump(rule["spec"]), encoding="utf-8")
    out = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    n = sum(len(g["rules"]) for g in rule["spec"]["groups"])
    assert f"SUCCESS: {n} rules found" in out.stdout


def topics_by_name(docs: list[support.Doc]) -> dict[str, support.Doc]:
    return {t["spec"].get("topicName", t["metadata"]["name"]): t for t in of_kind(docs, "KafkaTopic")}


def test_every_topic_of_the_site_is_declared_as_the_code_creates_it(base, site_config, sync):
    declared = topics_by_name(base)
    for name, spec in topic_specs(site_config).items():
        assert name in declared, f"topic {name} (fedrca.connectors.names.topic_specs) has no KafkaTopic"
        topic = declared[name]["spec"]
        assert topic["partitions"] == spec["num_partitions"], name
        wanted = spec.get("configs", {}).get("cleanup.policy", "delete")
        assert topic["config"]["cleanup.policy"] == wanted, name
        # a compacted topic's segments are small enough to be cleaned while it is written (a take-over reads
        # the uncleaned ones back: docs/streams.md, "A worker started again")
        segment = spec.get("configs", {}).get("segment.bytes")
        if segment is not None:
            assert str(topic["config"].get("segment.bytes")) == segment, name
    names = SiteNames(site_config)
    for plant in site_config.plant_names:
        for name in (names.plant_deadletter(plant), site_config.topic("train", plant=plant), names.state(plant)):
            assert name in declared, name
        assert declared[names.state(plant)]["spec"]["config"]["cleanup.policy"] == "compact"
    for topic in declared.values():
        assert topic["spec"]["config"]["min.insync.replicas"] < topic["spec"]["replicas"]


def test_each_plant_is_one_partition_and_a_standby_at_most(base, site_config):
    declared = topics_by_name(base)
    names = SiteNames(site_config)
    assert {declared[names.sensors(p)]["spec"]["partitions"] for p in site_config.plant_names} == {1}
    for hpa in of_kind(base, "HorizontalPodAutoscaler"):
        # one worker processes a plant; one more is a warm standby, more would only idle
        assert hpa["spec"]["minReplicas"] == 1 and hpa["spec"]["maxReplicas"] == 2


@pytest.mark.parametrize("kustomization", list(support.KUSTOMIZATIONS))
def test_credentials_come_from_the_strimzi_user_secrets_only(rendered, kustomization):
    docs = rendered[kustomization]
    assert not of_kind(docs, "Secret"), "no Secret in the manifests: Strimzi's User Operator writes them"
    users = {u["metadata"]["name"] for u in of_kind(docs, "KafkaUser")}
    for cm in of_kind(docs, "ConfigMap"):
        assert not [k for k in cm.get("data", {}) if SECRET_NAME.search(k)], cm["metadata"]["name"]
    for owner, container in containers(docs):
        env = {v["name"]: v for v in container.get("env", [])}
        for name, var in env.items():
            if SECRET_NAME.search(name):
                assert "value" not in var, f"{owner['metadata']['name']}: literal {name}"
                ref = var["valueFrom"]["secretKeyRef"]
                assert ref["name"] in users, f"{name} of {owner['metadata']['name']} is not a KafkaUser's secret"
                assert env["FEDRCA_KAFKA_SASL_USERNAME"]["value"] == ref["name"], "username and password of one user"


@pytest.mark.parametrize("kustomization", list(support.KUSTOMIZATIONS))
def test_workloads_have_resources_probes_and_run_unprivileged(rendered, kustomization):
    docs = rendered[kustomization]
    dockerfile_user = re.search(r"^USER (\d+):(\d+)$", (REPO / "Dockerfile").read_text(), re.M)
    assert dockerfile_user is not None
    for owner, pod in pod_specs(docs):
        name = owner["metadata"]["name"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == int(dockerfile_user.group(1)), f"{name}: the image's user"
        assert pod.get("automountServiceAccountToken") is False
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            resources = container["resources"]
            for kind in ("cpu", "memory"):
                assert kind in resources["requests"] and kind in resources["limits"], f"{name}: {kind}"
            security = container["securityContext"]
            assert security["readOnlyRootFilesystem"] and not security["allowPrivilegeEscalation"]
            assert security["capabilities"]["drop"] == ["ALL"]
            if owner["kind"] == "Deployment":
                # a probe names a port of its container, or gives the number of one its pod declares (the pod's
                # containers share its network: k8s/components/standby)
                names = {p["name"] for p in container.get("ports", [])}
                numbers = {p["containerPort"] for c in pod["containers"] for p in c.get("ports", [])}
                for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                    port = container[probe]["httpGet"]["port"]
                    assert port in (names if isinstance(port, str) else numbers), f"{name}: {probe} on a declared port"


@pytest.mark.parametrize("kustomization", list(support.KUSTOMIZATIONS))
def test_selectors_find_their_pods(rendered, kustomization):
    docs = rendered[kustomization]
    pods = {
        o["metadata"]["name"]: (o, o["spec"]["template"]["metadata"]["labels"]) for o in of_kind(docs, "Deployment")
    }
    for deployment, labels in pods.values():
        assert label_selector_matches(deployment["spec"]["selector"], labels)
    for pdb in of_kind(docs, "PodDisruptionBudget"):
        assert [n for n, (_, lbl) in pods.items() if label_selector_matches(pdb["spec"]["selector"], lbl)] == [
            pdb["metadata"]["name"]
        ]
    for hpa in of_kind(docs, "HorizontalPodAutoscaler"):
        target = hpa["spec"]["scaleTargetRef"]
        assert target["kind"] == "Deployment" and target["name"] in pods
        assert "replicas" not in pods[target["name"]][0]["spec"], "the HPA owns the replica count"
    services = of_kind(docs, "Service")
    for name, (_, labels) in pods.items():
        assert [s for s in services if label_selector_matches({"matchLabels": s["spec"]["selector"]}, labels)], name
    (monitor,) = of_kind(docs, "ServiceMonitor")
    scraped = [s for s in services if label_selector_matches(monitor["spec"]["selector"], s["metadata"]["labels"])]
    assert scraped == services, "the ServiceMonitor scrapes every worker Service"
    for endpoint in monitor["spec"]["endpoints"]:
        for s in services:
            assert endpoint["port"] in {p["name"] for p in s["spec"]["ports"]}
    policies = of_kind(docs, "NetworkPolicy")
    for owner, _ in pod_specs(docs):
        spec = owner["spec"] if owner["kind"] == "Deployment" else owner["spec"]["jobTemplate"]["spec"]
        labels = spec["template"]["metadata"]["labels"]
        applying = [p for p in policies if label_selector_matches(p["spec"]["podSelector"], labels)]
        assert any(not p["spec"].get("ingress") and not p["spec"].get("egress") for p in applying), (
            f"{owner['metadata']['name']}: no default-deny NetworkPolicy"
        )
        if owner["kind"] == "Deployment":
            ports = [p["ports"] for pol in applying for p in pol["spec"].get("ingress", [])]
            assert [{"protocol": "TCP", "port": 9400}] in ports, f"{owner['metadata']['name']}: metrics not reachable"


@pytest.mark.parametrize("kustomization", list(support.KUSTOMIZATIONS))
def test_everything_points_at_one_kafka_cluster(rendered, kustomization):
    docs = rendered[kustomization]
    clusters = {
        d["metadata"]["labels"]["strimzi.io/cluster"]
        for d in [*of_kind(docs, "KafkaTopic"), *of_kind(docs, "KafkaUser")]
    }
    assert len(clusters) == 1
    (cluster,) = clusters
    for owner, pod in pod_specs(docs):
        (ca,) = [v["secret"]["secretName"] for v in pod["volumes"] if v["name"] == "kafka-ca"]
        assert ca == f"{cluster}-cluster-ca-cert", owner["metadata"]["name"]
    (kafka,) = [cm["data"] for cm in of_kind(docs, "ConfigMap") if "FEDRCA_KAFKA_BOOTSTRAP" in cm.get("data", {})]
    assert kafka["FEDRCA_KAFKA_BOOTSTRAP"].startswith(f"{cluster}-kafka-bootstrap")
    egress = [
        peer["podSelector"]["matchLabels"]["strimzi.io/cluster"]
        for pol in of_kind(docs, "NetworkPolicy")
        for rule in pol["spec"].get("egress", [])
        for peer in rule["to"]
        if "strimzi.io/cluster" in peer.get("podSelector", {}).get("matchLabels", {})
    ]
    assert egress == [cluster]


def test_overlay_image_is_the_package_version(rendered):
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    for name, docs in rendered.items():
        images = {c["image"] for _, c in containers(docs)}
        assert len(images) == 1, f"{name}: one image for every container, got {images}"
        if name != "base":
            assert images.pop().endswith(f":{version}"), f"{name}: the image tag is the package version {version}"
