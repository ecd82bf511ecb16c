"""The Grafana dashboard loads, and every PromQL expression in it names metrics the exporter exports.

The exported names come from the exporter's own registry (:class:`fedrca.observability.Metrics`),
with the sample suffixes of each type: ``_total`` (counter), ``_bucket``/``_sum``/``_count``
(histogram), the bare name (gauge).
"""

from __future__ import annotations

import json
import re

import promql_parser
import pytest

from fedrca.edge.metrics import EdgeMetrics
from tests.deploy import support
from tests.deploy.support import of_kind

DASHBOARD = support.K8S / "base" / "grafana" / "fedrca-dashboard.json"

#: Grafana's built-in variables, replaced by values of the right kind before parsing.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def exported_names() -> set[str]:
    names = set()
    # the workers' exporter, and fedrca edge's (its series in the same kind of registry)
    for family in EdgeMetrics(plants=["reactor"]).registry.collect():
        assert family.type in SUFFIXES, f"{family.name}: metric type {family.type} not handled here"
        names |= {family.name + suffix for suffix in SUFFIXES[family.type]}
    return names


def metric_names(expr: str) -> list[str]:
    """Names of the series an expression selects (every selector must name one)."""
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    names: list[str] = []

    def visit(node: object) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            assert node.name, f"a selector without a metric name in {expr!r}"
            names.append(node.name)

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names


def expressions(dashboard: dict) -> list[str]:
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            # label_values(<series selector>, <label>) is Grafana's, its first argument is PromQL
            match = re.fullmatch(r"label_values\((.*),\s*\w+\)", query["query"])
            assert match, query
            exprs.append(match.group(1))
    return exprs


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def test_every_expression_names_exported_metrics_only(dashboard):
    exported = exported_names()
    used = set()
    for expr in expressions(dashboard):
        names = metric_names(expr)
        assert names, f"no metric in {expr!r}"
        unknown = set(names) - exported
        assert not unknown, f"{expr!r} names {sorted(unknown)}, which fedrca's exporter does not export"
        used |= set(names)
    # what the dashboard is for: per-plant d2 and flags, verdicts and why, lag, dead letters, privacy spend
    wanted = {
        "fedrca_root_probability",
        "fedrca_alarm_onset_rows",
        "fedrca_verdict_reason_info",
        "fedrca_verdict_change_info",
        "fedrca_d2_bucket",
        "fedrca_flags_total",
        "fedrca_root_cause",
        "fedrca_verdicts_total",
        "fedrca_consumer_lag",
        "fedrca_deadletters_total",
        "fedrca_privacy_epsilon_spent",
    }
    assert wanted <= used, sorted(wanted - used)


def test_the_name_check_sees_an_unknown_metric():
    exported = exported_names()
    assert "fedrca_d2_bucket" in exported and "fedrca_messages_in_total" in exported
    assert "fedrca_d2" not in exported and "fedrca_messages_in" not in exported  # bare names of a histogram, counter
    assert set(metric_names("sum(rate(fedrca_no_such_metric_bucket[$__rate_interval]))")) - exported
    with pytest.raises(ValueError):
        metric_names("sum(rate(fedrca_d2_bucket[5m])")  # unbalanced: PromQL syntax error


def test_alert_rules_name_exported_metrics_only(base):
    exported = exported_names()
    (rule,) = of_kind(base, "PrometheusRule")
    for group in rule["spec"]["groups"]:
        for r in group["rules"]:
            assert set(metric_names(r["expr"])) <= exported, r["alert"]


def test_dashboard_structure(dashboard):
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    text = json.dumps(dashboard)
    for used in set(re.findall(r"\$\{?([a-z][a-z_]*)", text)):
        assert used in variables, f"${used} is not a dashboard variable"
    for panel in dashboard["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24
        if panel["type"] != "row":
            assert panel["targets"] and panel["datasource"]["uid"] == "${datasource}"
            assert all(t["refId"] for t in panel["targets"])


@pytest.mark.parametrize("kustomization", list(support.KUSTOMIZATIONS))
def test_dashboard_ships_as_a_grafana_sidecar_configmap(rendered, kustomization):
    (cm,) = [
        c
        for c in of_kind(rendered[kustomization], "ConfigMap")
        if c["metadata"].get("labels", {}).get("grafana_dashboard")
    ]
    (content,) = cm["data"].values()
    assert json.loads(content) == json.loads(DASHBOARD.read_text(encoding="utf-8"))
