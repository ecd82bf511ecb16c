#!/usr/bin/env python3
"""Regenerate the vendored custom-resource schemas of ``k8s/schemas/`` from Maven Central artifacts.

Run by hand when moving to a newer Strimzi / Prometheus Operator (needs ``mvn``, ``java`` and
access to Maven Central); ``make test`` only reads the files this writes, offline.

* Strimzi ``KafkaTopic`` / ``KafkaUser`` CRDs: produced by Strimzi's own generator
  (``io.strimzi:crd-generator``) from its API model (``io.strimzi:api``) with the arguments of
  Strimzi's ``api/pom.xml``, so the files are the CRDs Strimzi installs (Apache-2.0).
* KEDA ``ScaledObject`` / ``TriggerAuthentication`` CRDs: copied as they are from KEDA's Go module
  (``github.com/kedacore/keda/v2``, its CRD bases, Apache-2.0) fetched with ``go mod download``
  from the Go module proxy: the CRDs KEDA installs.
* Prometheus Operator ``ServiceMonitor`` / ``PrometheusRule``: no registry ships those CRDs, so
  the JSON schema of fabric8's Java model of them (``io.fabric8:openshift-model-monitoring``,
  Apache-2.0) is converted to a strict JSON schema: unknown fields are refused (what
  ``kubectl apply --validate=strict`` does against the real CRD), int-or-string fields accept
  both, the Java-only annotations are dropped.

Usage: ``tools/k8s-schemas.py`` (writes k8s/schemas/strimzi/*.yaml, k8s/schemas/keda/*.yaml and
k8s/schemas/prometheus-operator/monitoring.coreos.com_v1.json); ``tools/k8s-schemas.py keda`` writes
the KEDA CRDs alone (needs ``go`` only).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "k8s" / "schemas"
STRIMZI_VERSION = "0.45.0"
FABRIC8_VERSION = "6.13.4"
KEDA_MODULE = "github.com/kedacore/keda/v2"
KEDA_VERSION = "v2.16.1"
#: The CRDs of the resources k8s/components/keda uses
KEDA_CRDS = ("keda.sh_scaledobjects.yaml", "keda.sh_triggerauthentications.yaml")

POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.fedrca</groupId><artifactId>k8s-schemas</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>io.strimzi</groupId><artifactId>api</artifactId><version>{strimzi}</version></dependency>
    <dependency><groupId>io.strimzi</groupId><artifactId>crd-generator</artifactId><version>{strimzi}</version></dependency>
    <dependency><groupId>io.fabric8</groupId><artifactId>openshift-model-monitoring</artifactId>
      <version>{fabric8}</version></dependency>
  </dependencies>
</project>
"""

#: Definitions of fabric8's schema kept for the two resources (and everything they reference).
MONITORING_ROOTS = {
    "ServiceMonitor": "os_monitoring_v1_ServiceMonitor",
    "PrometheusRule": "os_monitoring_v1_PrometheusRule",
}
JAVA_KEYS = {"existingJavaType", "javaType", "javaInterfaces", "javaOmitEmpty", "required", "default", "id"}


def strimzi_crds(lib: Path) -> None:
    out = OUT / "strimzi"
    out.mkdir(parents=True, exist_ok=True)
    # The arguments of Strimzi's api/pom.xml (execution generate-crd-co-install-v1-eo).
    cmd = [
        "java", "-cp", f"{lib}/*", "io.strimzi.crdgenerator.CrdGenerator",
        "--label", "app:strimzi", "--label", "strimzi.io/crd-install:true",
        "--target-kube", "1.16+", "--crd-api-version", "v1",
        "--api-versions", "v1alpha1,v1beta1,v1beta2", "--storage-version", "v1beta2", "--yaml",
        f"io.strimzi.api.kafka.model.topic.KafkaTopic={out / '043-Crd-kafkatopic.yaml'}",
        f"io.strimzi.api.kafka.model.user.KafkaUser={out / '044-Crd-kafkauser.yaml'}",
    ]  # fmt: skip
    subprocess.run(cmd, check=True)


def _convert(node: Any, definitions: dict[str, Any]) -> Any:
    """fabric8 JSON schema node -> strict JSON schema node (refs inlined as local $defs)."""
    if isinstance(node, list):
        return [_convert(n, definitions) for n in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if ref is not None:
        name = ref.split("/")[-1]
        if name.endswith("IntOrString"):
            return {"type": ["integer", "string"]}
        return {"$ref": f"#/$defs/{name}"}
    out = {k: _convert(v, definitions) for k, v in node.items() if k not in JAVA_KEYS}
    if out.get("type") == "object" and "properties" in out:
        out["additionalProperties"] = False  # a typo in a field name is an error, as with --validate=strict
    return out


def monitoring_schema(jar: Path) -> None:
    with zipfile.ZipFile(jar) as z:
        source = json.loads(z.read("schema/validation-schema.json"))
    definitions = source["definitions"]
    keep: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if ref is not None:
                name = ref.split("/")[-1]
                if name not in keep:
                    keep.add(name)
                    visit(definitions[name])
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    for root in MONITORING_ROOTS.values():
        keep.add(root)
        visit(definitions[root])
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$comment": (
            f"Generated by tools/k8s-schemas.py from io.fabric8:openshift-model-monitoring:{FABRIC8_VERSION} "
            "(schema/validation-schema.json, Apache-2.0); see k8s/schemas/README.md."
        ),
        "kinds": {kind: {"$ref": f"#/$defs/{root}"} for kind, root in MONITORING_ROOTS.items()},
        "$defs": {
            name: _convert(definitions[name], definitions) for name in sorted(keep) if not name.endswith("IntOrString")
        },
    }
    out = OUT / "prometheus-operator"
    out.mkdir(parents=True, exist_ok=True)
    (out / "monitoring.coreos.com_v1.json").write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n")


def keda_crds() -> None:
    """KEDA's CRDs as its Go module ships them (``go mod download`` from the Go module proxy)."""
    found = subprocess.run(
        ["go", "mod", "download", "-json", f"{KEDA_MODULE}@{KEDA_VERSION}"], check=True, capture_output=True, text=True
    )
    module = Path(json.loads(found.stdout)["Dir"])
    out = OUT / "keda"
    out.mkdir(parents=True, exist_ok=True)
    for name in KEDA_CRDS:
        (out / name).write_text((module / "config" / "crd" / "bases" / name).read_text(encoding="utf-8"))


def main(argv: list[str] | None = None) -> int:
    which = (sys.argv[1:] if argv is None else argv) or ["all"]
    keda_crds()
    if which == ["keda"]:
        print(f"k8s-schemas: wrote {OUT.relative_to(REPO)}/keda/*.yaml")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "pom.xml").write_text(POM.format(strimzi=STRIMZI_VERSION, fabric8=FABRIC8_VERSION))
        subprocess.run(
            ["mvn", "-q", "-f", str(work / "pom.xml"), "dependency:copy-dependencies", f"-DoutputDirectory={work}/lib"],
            check=True,
        )
        strimzi_crds(work / "lib")
        monitoring_schema(work / "lib" / f"openshift-model-monitoring-{FABRIC8_VERSION}.jar")
    print(f"k8s-schemas: wrote {OUT.relative_to(REPO)}/strimzi/*.yaml, keda/*.yaml and prometheus-operator/*.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
