"""Helpers of the deployment tests: render kustomizations, validate resources against their schemas.

Built-in kinds are validated with the Kubernetes JSON schemas of ``kubernetes-validate`` (strict:
unknown fields are errors); the custom resources with the schemas vendored under ``k8s/schemas/``
(see its README for their sources): Strimzi's and KEDA's CRDs (openAPIV3Schema converted to JSON
schema, unknown fields refused like ``kubectl --validate=strict`` does) and the Prometheus Operator
resources' JSON schema.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import yaml
from referencing import Registry, Resource

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "k8s"
SCHEMAS = K8S / "schemas"
KUSTOMIZATIONS = {
    "base": K8S / "base",
    "example-site": K8S / "overlays" / "example-site",
    # the example site with its worker groups scaled on consumer lag by KEDA (k8s/components/keda)
    "example-site-keda": K8S / "overlays" / "example-site-keda",
    # the example site with a hot standby of every worker in its pod (k8s/components/standby)
    "example-site-standby": K8S / "overlays" / "example-site-standby",
}

#: Oldest Kubernetes the manifests support (autoscaling/v2, policy/v1, CronJob timeZone are GA).
MIN_KUBERNETES = "1.27"

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

Doc = dict[str, Any]

#: libyaml's loader when PyYAML has it (the CRDs are large), else the pure-Python one.
Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def sync_module() -> ModuleType:
    """``tools/sync-k8s.py`` imported as a module (its file name has a dash)."""
    spec = importlib.util.spec_from_file_location("fedrca_sync_k8s", REPO / "tools" / "sync-k8s.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


#: Where tools/ensure-system-deps.sh builds kustomize (from the Go module proxy) on a machine without kubectl.
KUSTOMIZE = REPO / "tools" / "bin" / "kustomize"


def kustomize_command() -> list[str]:
    """``kubectl kustomize`` when kubectl is installed, else the kustomize built by ``make system-deps``."""
    path = shutil.which("kubectl")
    if path is not None:
        return [path, "kustomize"]
    if KUSTOMIZE.is_file():
        return [str(KUSTOMIZE), "build"]
    raise AssertionError(
        "neither kubectl nor tools/bin/kustomize is installed: run tools/ensure-system-deps.sh "
        "(make system-deps), which builds kustomize v5 when kubectl is missing"
    )


def render(directory: Path) -> list[Doc]:
    """``kustomize build DIR`` as a list of resources."""
    cmd = [*kustomize_command(), str(directory)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"{' '.join(cmd)} failed:\n{out.stderr}"
    return [doc for doc in yaml.load_all(out.stdout, Loader=Loader) if doc]


def of_kind(docs: list[Doc], kind: str) -> list[Doc]:
    return [d for d in docs if d["kind"] == kind]


def pod_specs(docs: list[Doc]) -> Iterator[tuple[Doc, Doc]]:
    """(owner, pod spec) of every Deployment and CronJob."""
    for doc in docs:
        if doc["kind"] == "Deployment":
            yield doc, doc["spec"]["template"]["spec"]
        elif doc["kind"] == "CronJob":
            yield doc, doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]


def containers(docs: list[Doc]) -> Iterator[tuple[Doc, Doc]]:
    """(owner, container) of every container and init container."""
    for owner, pod in pod_specs(docs):
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            yield owner, container


def label_selector_matches(selector: Doc, labels: dict[str, str]) -> bool:
    """Kubernetes label-selector semantics (matchLabels and matchExpressions)."""
    for key, value in selector.get("matchLabels", {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions", []):
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        if (
            (op == "In" and labels.get(key) not in values)
            or (op == "NotIn" and labels.get(key) in values)
            or (op == "Exists" and key not in labels)
            or (op == "DoesNotExist" and key in labels)
        ):
            return False
    return True


# ------------------------------------------------------------------------------ built-in kinds
def _schema_directory(version: str) -> str:
    """kubernetes-validate's strict schemas of the newest release not newer than ``version``."""
    from kubernetes_validate import utils

    resolved = [v for v in utils.all_versions() if utils.major_minor(v) <= utils.major_minor(version)][-1]
    return f"kubernetes-json-schema/v{resolved}-local-strict"


@functools.cache
def _core_definitions(version: str) -> Any:
    from kubernetes_validate import utils

    return utils.schema_contents(f"{_schema_directory(version)}/_definitions.json", version)


@functools.cache
def _core_validator(version: str, kind: str, api_version: str) -> jsonschema.protocols.Validator:
    """What ``kubernetes_validate.validate(doc, version, strict=True)`` does, built once per kind."""
    from kubernetes_validate import utils

    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    schema = utils.schema_contents(f"{_schema_directory(version)}/{kind.lower()}-{group}.json", version)
    definitions = Resource.from_contents(_core_definitions(version))
    registry: Registry = definitions @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


# ------------------------------------------------------------------------------ custom resources
def _openapi_to_jsonschema(node: Any) -> Any:
    """A CRD's structural openAPIV3Schema as a strict JSON schema."""
    if isinstance(node, list):
        return [_openapi_to_jsonschema(n) for n in node]
    if not isinstance(node, dict):
        return node
    skip = {"description", "x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string", "nullable"}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in skip:
            continue
        if key == "properties":
            out[key] = {name: _openapi_to_jsonschema(sub) for name, sub in value.items()}
        else:
            out[key] = _openapi_to_jsonschema(value)
    if node.get("x-kubernetes-int-or-string"):
        out["type"] = ["integer", "string"]
    if node.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    if (
        out.get("type") == "object"
        and "properties" in out
        and "additionalProperties" not in out
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False  # what the API server prunes, --validate=strict refuses
    return out


@functools.cache
def _custom_validators() -> dict[tuple[str, str], jsonschema.protocols.Validator]:
    validators: dict[tuple[str, str], jsonschema.protocols.Validator] = {}
    for path in sorted([*(SCHEMAS / "strimzi").glob("*.yaml"), *(SCHEMAS / "keda").glob("*.yaml")]):
        crd = yaml.load(path.read_text(encoding="utf-8"), Loader=Loader)
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schema = _openapi_to_jsonschema(version["schema"]["openAPIV3Schema"])
            validators[(f"{group}/{version['name']}", kind)] = jsonschema.Draft202012Validator(schema)
    monitoring = json.loads((SCHEMAS / "prometheus-operator" / "monitoring.coreos.com_v1.json").read_text())
    for kind, ref in monitoring["kinds"].items():
        schema = {"$ref": ref["$ref"], "$defs": monitoring["$defs"]}
        validators[("monitoring.coreos.com/v1", kind)] = jsonschema.Draft202012Validator(schema)
    return validators


def _metadata_errors(doc: Doc) -> list[str]:
    meta = doc.get("metadata", {})
    errors = []
    name = meta.get("name", "")
    if not DNS_SUBDOMAIN.match(name) or len(name) > 253:
        errors.append(f"metadata.name {name!r} is not a DNS-1123 subdomain")
    for key, value in (meta.get("labels") or {}).items():
        if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.match(value):
            errors.append(f"label {key}={value!r} is not a valid label value")
    return errors


def schema_errors(doc: Doc, version: str) -> list[str]:
    """Why ``doc`` is invalid for Kubernetes ``version`` (empty when it is valid).

    Raises
    ------
    LookupError
        When no schema is known for the resource's kind.
    """
    custom = _custom_validators().get((doc.get("apiVersion", ""), doc.get("kind", "")))
    if custom is not None:
        validator = custom
        errors = _metadata_errors(doc)
    else:
        from kubernetes_validate import utils

        try:
            validator = _core_validator(version, doc["kind"], doc["apiVersion"])
        except (FileNotFoundError, utils.SchemaNotFoundError) as exc:
            raise LookupError(f"no schema for {doc.get('apiVersion')} {doc.get('kind')}") from exc
        errors = []
    for error in validator.iter_errors(doc):
        path = ".".join(str(p) for p in error.absolute_path)
        errors.append(f"{path or '<root>'}: {error.message[:300]}")
    return errors
