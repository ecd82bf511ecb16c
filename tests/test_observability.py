"""Prometheus side of fedrca: the exporter's exact values, its HTTP endpoint, and promtool on the rules."""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import yaml
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from fedrca.contracts import PlantReason, Reason, Verdict
from fedrca.detectors.base import DetectionResult
from fedrca.edge.metrics import EdgeMetrics
from fedrca.exceptions import ConfigError, FedrcaError
from fedrca.observability import D2_BUCKETS, LATENCY_BUCKETS, Metrics, numeric_version

REPO = Path(__file__).resolve().parents[1]
PROM_DIR = REPO / "config" / "prometheus"
ALERTS = PROM_DIR / "alerts.yml"
ALERTS_TEST = PROM_DIR / "alerts_test.yml"
PROM_CONFIG = PROM_DIR / "prometheus.yml"

EXPECTED_ALERTS = {
    "FedrcaRootCauseIdentified",
    "FedrcaPlantAnomalous",
    "FedrcaDeadLetterRate",
    "FedrcaConsumerLagHigh",
    "FedrcaStaleParameters",
    "FedrcaPrivacyBudgetExhausted",
    "FedrcaSensorFault",
    "FedrcaRowsWithoutPlant",
    "FedrcaBaselineRefreshRefused",
    "FedrcaBaselinePinned",
}
#: The alerts of fedrca edge (group fedrca-edge; fedrca.edge.metrics).
EXPECTED_EDGE_ALERTS = {
    "FedrcaEdgeSourceDown",
    "FedrcaEdgeStaleTags",
    "FedrcaEdgeBadTags",
    "FedrcaEdgeRowsMissed",
    "FedrcaEdgeBuffering",
}

# Every metric of the brief, with its exposition type.
EXPECTED_TYPES = {
    "fedrca_messages_in_total": "counter",
    "fedrca_messages_out_total": "counter",
    "fedrca_deadletters_total": "counter",
    "fedrca_d2": "histogram",
    "fedrca_flags_total": "counter",
    "fedrca_verdicts_total": "counter",
    "fedrca_processing_latency_seconds": "histogram",
    "fedrca_consumer_lag": "gauge",
    "fedrca_parameter_version": "gauge",
    "fedrca_parameter_loaded_timestamp_seconds": "gauge",
    "fedrca_privacy_epsilon_spent": "gauge",
    "fedrca_privacy_epsilon_budget": "gauge",
    "fedrca_plant_anomalous": "gauge",
    "fedrca_root_cause": "gauge",
    "fedrca_rca_parameter_version": "gauge",
    "fedrca_rca_reloads_total": "counter",
    "fedrca_stage_latency_seconds": "histogram",
    "fedrca_sensor_faulty_tags": "gauge",
    "fedrca_sensor_fault_episodes_total": "counter",
    "fedrca_sensor_fault": "gauge",
    "fedrca_rows_without_plant_total": "counter",
    "fedrca_clock_offset_seconds": "gauge",
    "fedrca_baseline_version": "gauge",
    "fedrca_baseline_age_seconds": "gauge",
    "fedrca_baseline_pinned": "gauge",
    "fedrca_baseline_refused_streak": "gauge",
    "fedrca_baseline_refreshes_total": "counter",
    "fedrca_root_probability": "gauge",
    "fedrca_root_candidate": "gauge",
    "fedrca_alarm_onset_rows": "gauge",
    "fedrca_verdict_calibrated": "gauge",
    "fedrca_verdict_margin_nats": "gauge",
    "fedrca_verdict_reason_info": "gauge",
    "fedrca_verdict_change_info": "gauge",
}


# -- helpers -------------------------------------------------------------------------------
def reasoned_verdict(root: str | None = "reactor") -> Verdict:
    """A verdict with a candidate set and a reason."""
    reason = Reason(
        (
            PlantReason("reactor", 0, 0.97, (1, 1), "root_candidate", "", ""),
            PlantReason("separator", 4, 0.5, (1, 0), "propagated", "root_cause", "config path reactor > separator"),
            PlantReason("feed", None, 0.0, (0, 0), "normal", "root_cause", "complete graph"),
        ),
        "separator",
        6.5,
        "the onset order decides",
    )
    return Verdict("tep", 1.0, 9, root, (), 0.97, (1, 9), "root_cause", ("reactor", "separator"), (0.8, 0.15),
                   0.9, "tep-abc", reason)  # fmt: skip


def samples(m: Metrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of ``m.render()`` parsed back: (name, labels) -> value."""
    out = {}
    for family in text_string_to_metric_families(m.render().decode()):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def sample(m: Metrics, name: str, **labels: str) -> float:
    """One sample of the rendered exposition (KeyError if absent)."""
    return samples(m)[(name, frozenset(labels.items()))]


def expected_cumulative(values: np.ndarray, bounds) -> list[float]:
    """Prometheus ``le`` buckets computed independently with numpy: count of values <= bound."""
    return [float(np.count_nonzero(values <= b)) for b in bounds] + [float(values.size)]


def rendered_buckets(m: Metrics, name: str, bounds, **labels: str) -> list[float]:
    parsed = samples(m)
    les = [repr(float(b)) for b in bounds] + ["+Inf"]
    return [parsed[(f"{name}_bucket", frozenset({**labels, "le": le}.items()))] for le in les]


def detection(d2_c, d2_a, zc, za, zc_pub, za_pub) -> DetectionResult:
    t = len(d2_c)
    empty = np.zeros((t, 1))
    arrays = [np.asarray(a) for a in (d2_c, d2_a)] + [np.asarray(a, dtype=bool) for a in (zc, za, zc_pub, za_pub)]
    return DetectionResult(empty, empty, empty, empty, *arrays)


@pytest.fixture
def metrics():
    m = Metrics()
    yield m
    m.close()


# -- (a) every metric, exact values ------------------------------------------------------------
def test_every_metric_rendered_with_help_and_type(metrics):
    m = metrics
    m.record_messages_in("plant", "reactor", 3)
    m.record_messages_out("plant", "tep.flags", 3)
    m.record_deadletter("plant", "bad-json")
    m.observe_d2("reactor", "c", [1.0, 2.0])
    m.record_flags("reactor", {"zc": [True, False]})
    m.record_verdict("reactor")
    m.record_reason(reasoned_verdict())
    m.record_latency("plant", 0.01)
    m.record_stage_latency("plant", [])
    m.set_consumer_lag("plant", "tep.sensors.reactor", 0, 12)
    m.set_parameter_version("reactor", "v2")
    m.set_privacy("reactor", 1.0, 4.0)
    m.set_plant_anomalous("reactor", True)
    m.set_baseline("reactor", 2, 3600.0, pinned=False)
    m.record_refresh("reactor", "applied")
    text = m.render().decode()
    for name, kind in EXPECTED_TYPES.items():
        assert f"# TYPE {name} {kind}\n" in text, name
        help_line = re.search(rf"^# HELP {name} (.+)$", text, re.MULTILINE)
        assert help_line and len(help_line.group(1)) > 20, f"{name} needs a real help text"
    extras = {"fedrca_d2_dropped_total", "fedrca_degraded_rows_total", "fedrca_parameter_info"}
    declared = {n for n in re.findall(r"^# TYPE (\S+)", text, re.MULTILINE) if not n.endswith("_created")}
    assert declared == set(EXPECTED_TYPES) | extras


def test_baseline_metrics_and_the_refused_streak(metrics):
    m = metrics
    m.set_baseline("reactor", 3, 86400.0, pinned=True)
    assert sample(m, "fedrca_baseline_version", plant="reactor") == 3.0
    assert sample(m, "fedrca_baseline_age_seconds", plant="reactor") == 86400.0
    assert sample(m, "fedrca_baseline_pinned", plant="reactor") == 1.0
    for outcome in ("refused", "refused", "pinned", "refused"):
        m.record_refresh("reactor", outcome)
    # a pinned refresh leaves the streak as it is; an applied one ends it
    assert sample(m, "fedrca_baseline_refused_streak", plant="reactor") == 3.0
    assert sample(m, "fedrca_baseline_refreshes_total", plant="reactor", outcome="refused") == 3.0
    m.record_refresh("reactor", "limited")
    assert sample(m, "fedrca_baseline_refused_streak", plant="reactor") == 0.0


def test_the_latest_verdict_says_why(metrics):
    m = metrics
    m.record_verdict("reactor", plants=["feed", "reactor", "separator"])
    m.record_reason(reasoned_verdict())
    got = samples(m)
    assert got[("fedrca_root_probability", frozenset({("plant", "reactor")}))] == 0.8
    assert got[("fedrca_root_probability", frozenset({("plant", "feed")}))] == 0.0
    assert got[("fedrca_root_candidate", frozenset({("plant", "separator")}))] == 1.0
    assert got[("fedrca_alarm_onset_rows", frozenset({("plant", "separator")}))] == 4.0
    assert got[("fedrca_alarm_onset_rows", frozenset({("plant", "feed")}))] == -1.0
    assert got[("fedrca_verdict_calibrated", frozenset())] == 1.0
    assert got[("fedrca_verdict_margin_nats", frozenset())] == 6.5
    labels = frozenset(
        {("plant", "separator"), ("pair", "(1,0)"), ("state", "propagated"), ("table", "root_cause"),
         ("link", "config path reactor > separator")}
    )  # fmt: skip
    assert got[("fedrca_verdict_reason_info", labels)] == 1.0
    change = frozenset({("root_cause", "reactor"), ("runner_up", "separator"), ("change", "the onset order decides")})
    assert got[("fedrca_verdict_change_info", change)] == 1.0
    # the next verdict replaces the reason; one without a reason clears it
    m.record_reason(Verdict("tep", 2.0, 20, None, (), 0.99, (10, 20), "no_anomaly"))
    got = samples(m)
    assert not [k for k in got if k[0] in ("fedrca_verdict_reason_info", "fedrca_verdict_change_info")]
    assert got[("fedrca_root_candidate", frozenset({("plant", "separator")}))] == 0.0


def test_counters_increment_exactly(metrics):
    m = metrics
    m.record_messages_in("plant", "reactor", 500)
    m.record_messages_in("plant", "reactor", 20)
    m.record_messages_in("rca", "all", 7)
    m.record_messages_out("plant", "tep.flags", 520)
    m.record_messages_out("rca", "tep.verdicts")
    m.record_deadletter("plant", "bad-json")
    m.record_deadletter("plant", "bad-json", 4)
    m.record_deadletter("rca", "late")
    assert sample(m, "fedrca_messages_in_total", stage="plant", plant="reactor") == 520
    assert sample(m, "fedrca_messages_in_total", stage="rca", plant="all") == 7
    assert sample(m, "fedrca_messages_out_total", stage="plant", topic="tep.flags") == 520
    assert sample(m, "fedrca_messages_out_total", stage="rca", topic="tep.verdicts") == 1
    assert sample(m, "fedrca_deadletters_total", stage="plant", reason="bad-json") == 5
    assert sample(m, "fedrca_deadletters_total", stage="rca", reason="late") == 1
    with pytest.raises(ValueError):  # prometheus_client's own refusal of a negative increment
        m.record_messages_in("plant", "reactor", -1)


def test_d2_histogram_matches_numpy(metrics):
    m = metrics
    rng = np.random.default_rng(0)
    batch1 = rng.chisquare(df=10, size=5000)
    # values exactly on bounds (le is inclusive), below the first and above the last bound
    batch2 = np.concatenate([np.array(D2_BUCKETS), [0.0, 0.1, 1000.0001, 5e4], rng.chisquare(df=40, size=777)])
    assert m.observe_d2("reactor", "c", batch1) == batch1.size
    assert m.observe_d2("reactor", "c", batch2.reshape(-1, 1)) == batch2.size  # any shape
    every = np.concatenate([batch1, batch2])
    assert sample(m, "fedrca_d2_count", plant="reactor", kind="c") == every.size
    assert sample(m, "fedrca_d2_sum", plant="reactor", kind="c") == pytest.approx(every.sum(), rel=1e-12)
    assert rendered_buckets(m, "fedrca_d2", D2_BUCKETS, plant="reactor", kind="c") == expected_cumulative(
        every, D2_BUCKETS
    )
    # non-cumulative counts equal numpy.histogram's on right-closed bins (-inf, b0], (b0, b1], ...
    cumulative = np.array(rendered_buckets(m, "fedrca_d2", D2_BUCKETS, plant="reactor", kind="c"))
    edges = np.concatenate([[-np.inf], D2_BUCKETS, [np.inf]])
    per_bin = np.array([np.count_nonzero((every > lo) & (every <= hi)) for lo, hi in itertools.pairwise(edges)])
    np.testing.assert_array_equal(np.diff(cumulative, prepend=0.0), per_bin)
    # off-bound values only: numpy.histogram gives the same bins
    plain = rng.chisquare(df=5, size=1000)
    m.observe_d2("separator", "a", plain)
    hist, _ = np.histogram(plain, bins=np.concatenate([[-1.0], D2_BUCKETS, [np.inf]]))
    got = np.diff(rendered_buckets(m, "fedrca_d2", D2_BUCKETS, plant="separator", kind="a"), prepend=0.0)
    np.testing.assert_array_equal(got, hist)
    # the other kind of the same plant is a separate series
    assert ("fedrca_d2_count", frozenset({"plant": "reactor", "kind": "a"}.items())) not in samples(m)


def test_d2_nonfinite_values_are_dropped_and_counted(metrics):
    m = metrics
    assert m.observe_d2("reactor", "a", [1.0, np.nan, np.inf, 3.0, -np.inf]) == 2
    assert sample(m, "fedrca_d2_count", plant="reactor", kind="a") == 2
    assert sample(m, "fedrca_d2_sum", plant="reactor", kind="a") == 4.0
    assert sample(m, "fedrca_d2_dropped_total", plant="reactor", kind="a") == 3
    with pytest.raises(ConfigError, match="kind"):
        m.observe_d2("reactor", "x", [1.0])


def test_d2_buckets_are_log_spaced_from_half_to_1000():
    b = np.array(D2_BUCKETS)
    assert b[0] == 0.5 and b[-1] == 1000.0
    ratios = b[1:] / b[:-1]
    assert np.all(ratios > 1.38) and np.all(ratios < 1.45)
    assert LATENCY_BUCKETS[0] == 0.0005 and LATENCY_BUCKETS[-1] == 5.0


def test_record_detection_flags_and_anomalous(metrics):
    m = metrics
    res = detection(
        d2_c=[1.0, 50.0, 200.0],
        d2_a=[2.0, 3.0, 4.0],
        zc=[0, 1, 1],
        za=[0, 0, 0],
        zc_pub=[1, 1, 0],
        za_pub=[0, 0, 1],
    )
    m.record_detection("reactor", res)
    assert sample(m, "fedrca_flags_total", plant="reactor", kind="zc") == 2
    assert sample(m, "fedrca_flags_total", plant="reactor", kind="za") == 0
    assert sample(m, "fedrca_flags_total", plant="reactor", kind="zc_pub") == 2
    assert sample(m, "fedrca_flags_total", plant="reactor", kind="za_pub") == 1
    assert sample(m, "fedrca_d2_count", plant="reactor", kind="c") == 3
    assert sample(m, "fedrca_d2_sum", plant="reactor", kind="c") == 251.0
    assert sample(m, "fedrca_d2_sum", plant="reactor", kind="a") == 9.0
    assert sample(m, "fedrca_plant_anomalous", plant="reactor") == 1  # last row: za_pub raised
    m.record_detection("reactor", detection([1.0], [1.0], [1], [1], [0], [0]))
    assert sample(m, "fedrca_plant_anomalous", plant="reactor") == 0  # raw flags do not count, published do
    assert sample(m, "fedrca_flags_total", plant="reactor", kind="zc") == 3
    assert sample(m, "fedrca_flags_total", plant="reactor", kind="za") == 1
    m.set_plant_anomalous("separator", True)
    assert sample(m, "fedrca_plant_anomalous", plant="separator") == 1
    with pytest.raises(ConfigError, match="flag kind"):
        m.record_flags("reactor", {"zz": [1]})


def test_verdicts_and_root_cause_gauge(metrics):
    m = metrics
    m.record_verdict("reactor", plants=["reactor", "separator", "stripper"])
    assert sample(m, "fedrca_verdicts_total", root_cause="reactor") == 1
    assert [sample(m, "fedrca_root_cause", plant=p) for p in ("reactor", "separator", "stripper")] == [1, 0, 0]
    m.record_verdict("separator")
    m.record_verdict("separator")
    assert sample(m, "fedrca_verdicts_total", root_cause="separator") == 2
    assert [sample(m, "fedrca_root_cause", plant=p) for p in ("reactor", "separator", "stripper")] == [0, 1, 0]
    m.record_verdict(None)
    assert sample(m, "fedrca_verdicts_total", root_cause="none") == 1
    assert [sample(m, "fedrca_root_cause", plant=p) for p in ("reactor", "separator", "stripper")] == [0, 0, 0]
    # plants seen by any plant-labelled metric are known too
    m2 = Metrics()
    m2.record_messages_in("plant", "a", 1)
    m2.observe_d2("b", "c", [1.0])
    m2.record_verdict("c")
    assert m2.plants == ["b", "c"]  # messages_in's plant label may be "all": not a plant
    assert [sample(m2, "fedrca_root_cause", plant=p) for p in ("b", "c")] == [0, 1]


def test_latency_histogram_matches_numpy(metrics):
    m = metrics
    lat = np.array([0.0001, 0.0005, 0.003, 0.02, 0.02, 0.7, 5.0, 12.0])
    for x in lat:
        m.record_latency("rca", float(x))
    with m.latency_timer("rca"):
        time.sleep(0.002)
    assert sample(m, "fedrca_processing_latency_seconds_count", stage="rca") == lat.size + 1
    total = sample(m, "fedrca_processing_latency_seconds_sum", stage="rca")
    assert lat.sum() + 0.002 <= total < lat.sum() + 1.0
    m2 = Metrics()
    for x in lat:
        m2.record_latency("plant", float(x))
    assert sample(m2, "fedrca_processing_latency_seconds_sum", stage="plant") == pytest.approx(lat.sum(), rel=1e-12)
    assert rendered_buckets(
        m2, "fedrca_processing_latency_seconds", LATENCY_BUCKETS, stage="plant"
    ) == expected_cumulative(lat, LATENCY_BUCKETS)


def test_gauges_lag_parameters_privacy(metrics):
    m = metrics
    m.set_consumer_lag("plant", "tep.sensors.reactor", 0, 12345)
    m.set_consumer_lag("plant", "tep.sensors.reactor", 1, 7)
    m.set_consumer_lag("plant", "tep.sensors.reactor", 0, 100)
    assert sample(m, "fedrca_consumer_lag", stage="plant", topic="tep.sensors.reactor", partition="0") == 100
    assert sample(m, "fedrca_consumer_lag", stage="plant", topic="tep.sensors.reactor", partition="1") == 7

    before = time.time()
    m.set_parameter_version("reactor", "proprietary")
    assert sample(m, "fedrca_parameter_version", plant="reactor") == 0
    assert before <= sample(m, "fedrca_parameter_loaded_timestamp_seconds", plant="reactor") <= time.time()
    m.set_parameter_version("reactor", "v12", loaded_at=1_700_000_000.0)
    assert sample(m, "fedrca_parameter_version", plant="reactor") == 12
    assert sample(m, "fedrca_parameter_loaded_timestamp_seconds", plant="reactor") == 1_700_000_000.0
    assert sample(m, "fedrca_parameter_info", plant="reactor", version="v12") == 1
    assert ("fedrca_parameter_info", frozenset({"plant": "reactor", "version": "proprietary"}.items())) not in samples(
        m
    )
    m.set_parameter_version("separator", 3)
    assert sample(m, "fedrca_parameter_version", plant="separator") == 3

    m.set_privacy("reactor", spent=2.5, budget=4.0)
    m.set_privacy("reactor", spent=1.5, budget=4.0, mechanism="gaussian")
    m.set_privacy("separator", spent=1.0)
    assert sample(m, "fedrca_privacy_epsilon_spent", plant="reactor", mechanism="all") == 2.5
    assert sample(m, "fedrca_privacy_epsilon_spent", plant="reactor", mechanism="gaussian") == 1.5
    with pytest.raises(ConfigError, match="privacy mechanism kind must be one of"):
        m.set_privacy("reactor", spent=1.0, mechanism="laplace")
    assert sample(m, "fedrca_privacy_epsilon_budget", plant="reactor") == 4.0
    assert sample(m, "fedrca_privacy_epsilon_budget", plant="separator") == np.inf


@pytest.mark.parametrize(
    ("version", "number"),
    [(5, 5.0), (2.5, 2.5), ("7", 7.0), ("v3", 3.0), ("round-14", 14.0), ("proprietary", 0.0), ("trained", 0.0)],
)
def test_numeric_version(version, number):
    assert numeric_version(version) == number


def test_registries_are_isolated():
    a, b = Metrics(), Metrics()
    a.record_verdict("reactor")
    assert b.value("fedrca_verdicts_total", root_cause="reactor") is None
    assert a.value("fedrca_verdicts_total", root_cause="reactor") == 1
    assert REGISTRY.get_sample_value("fedrca_verdicts_total", {"root_cause": "reactor"}) is None


# -- (b) HTTP ----------------------------------------------------------------------------------
def test_serve_on_free_port_and_scrape(metrics):
    m = metrics
    m.record_verdict("reactor")
    port = m.serve(0)
    assert isinstance(port, int) and 0 < port < 65536
    assert m.port == port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        assert resp.status == 200
        body = resp.read().decode()
    assert 'fedrca_verdicts_total{root_cause="reactor"} 1.0' in body
    assert 'fedrca_root_cause{plant="reactor"} 1.0' in body
    with pytest.raises(FedrcaError, match="already served"):
        m.serve(0)
    m.close()
    assert m.port is None
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)


# -- (c) promtool --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail(
            "promtool not found on PATH: install the Debian package 'prometheus' "
            "(apt-get install prometheus; `make test` does it through tools/ensure-system-deps.sh)"
        )
    return path


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=300, cwd=REPO)


def test_promtool_check_rules(promtool):
    out = run(promtool, "check", "rules", ALERTS)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(EXPECTED_ALERTS) + len(EXPECTED_EDGE_ALERTS)} rules found" in out.stdout


def test_promtool_test_rules(promtool):
    out = run(promtool, "test", "rules", ALERTS_TEST)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout and "FAILED" not in out.stdout


def test_promtool_check_config(promtool):
    out = run(promtool, "check", "config", PROM_CONFIG)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "is valid prometheus config file syntax" in out.stdout
    assert "SUCCESS: 1 rule files found" in out.stdout


def test_rules_structure_and_metric_names():
    rules = yaml.safe_load(ALERTS.read_text())
    group, edge = rules["groups"]
    assert (group["name"], edge["name"]) == ("fedrca", "fedrca-edge")
    alerts = {r["alert"]: r for r in group["rules"]}
    assert set(alerts) == EXPECTED_ALERTS
    edge_alerts = {r["alert"]: r for r in edge["rules"]}
    assert set(edge_alerts) == EXPECTED_EDGE_ALERTS
    for name, rule in alerts.items():
        assert {"summary", "description"} <= set(rule["annotations"]), name
        assert rule["labels"]["severity"] in {"warning", "critical"}, name
    assert alerts["FedrcaRootCauseIdentified"]["labels"]["severity"] == "critical"
    assert "{{ $labels.plant }}" in alerts["FedrcaRootCauseIdentified"]["annotations"]["summary"]
    assert alerts["FedrcaPlantAnomalous"]["for"] == "5m"
    assert alerts["FedrcaConsumerLagHigh"]["for"] == "10m"
    # every metric an alert reads is one the exporter defines (the edge's: its own exporter)
    text = Metrics().render().decode() + EdgeMetrics().render().decode()
    for rule in [*alerts.values(), *edge_alerts.values()]:
        for metric in re.findall(r"fedrca_[a-z_]+", rule["expr"]):
            assert f"# TYPE {metric} " in text, metric


def test_each_alert_has_firing_and_quiet_unit_tests():
    spec = yaml.safe_load(ALERTS_TEST.read_text())
    cases = [c for group in spec["tests"] for c in group["alert_rule_test"]]
    for name in EXPECTED_ALERTS | EXPECTED_EDGE_ALERTS:
        mine = [c for c in cases if c["alertname"] == name]
        assert any(c.get("exp_alerts") for c in mine), f"{name}: no case where it fires"
        assert any(not c.get("exp_alerts") for c in mine), f"{name}: no case where it stays quiet"


# -- (d) the checks can fail --------------------------------------------------------------------
@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("expr: fedrca_root_cause == 1", "expr: fedrca_root_cause == "),  # PromQL syntax error
        ("for: 10m", "for: ten minutes"),  # bad duration
        ('summary: "Root cause identified: plant {{ $labels.plant }}"', 'summary: "plant {{ $labels.plant "'),
    ],
)
def test_promtool_check_rules_rejects_broken_rules(promtool, tmp_path, old, new):
    text = ALERTS.read_text()
    assert old in text
    broken = tmp_path / "alerts.yml"
    broken.write_text(text.replace(old, new, 1))
    out = run(promtool, "check", "rules", broken)
    assert out.returncode != 0
    assert "FAILED" in out.stdout + out.stderr


def test_promtool_test_rules_catches_a_changed_threshold(promtool, tmp_path):
    text = ALERTS.read_text()
    assert "fedrca_consumer_lag > 10000" in text
    (tmp_path / "alerts.yml").write_text(text.replace("fedrca_consumer_lag > 10000", "fedrca_consumer_lag > 100000"))
    shutil.copy(ALERTS_TEST, tmp_path / "alerts_test.yml")
    assert run(promtool, "check", "rules", tmp_path / "alerts.yml").returncode == 0  # valid, but wrong
    out = run(promtool, "test", "rules", tmp_path / "alerts_test.yml")
    assert out.returncode != 0
    assert "FAILED" in out.stdout + out.stderr and "FedrcaConsumerLagHigh" in out.stdout + out.stderr


def test_the_server_answers_metrics_and_both_probes(metrics):
    import urllib.error
    import urllib.request

    state = {"ready": False}
    metrics.set_probes(live=lambda: (True, "event loop beat 0.2 s ago"), ready=lambda: (state["ready"], "waiting"))
    port = metrics.serve(0)
    try:
        base = f"http://127.0.0.1:{port}"
        assert b"fedrca_messages_in_total" in urllib.request.urlopen(base + "/metrics", timeout=5).read()
        assert urllib.request.urlopen(base + "/healthz", timeout=5).read() == b"event loop beat 0.2 s ago\n"
        with pytest.raises(urllib.error.HTTPError) as not_ready:
            urllib.request.urlopen(base + "/readyz", timeout=5)
        assert not_ready.value.code == 503
        state["ready"] = True
        assert urllib.request.urlopen(base + "/readyz", timeout=5).status == 200
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(base + "/nothing", timeout=5)
        assert missing.value.code == 404
    finally:
        metrics.close()


def test_stage_latency_observes_every_record_of_a_batch(metrics):
    from types import SimpleNamespace

    now = 1_700_000_000.0
    records = [SimpleNamespace(timestamp_ms=(now - age) * 1000.0) for age in (0.004, 0.03, 0.3, 2.0)]
    metrics.record_stage_latency("plant", records, now=now)
    assert sample(metrics, "fedrca_stage_latency_seconds_count", stage="plant") == 4
    assert sample(metrics, "fedrca_stage_latency_seconds_sum", stage="plant") == pytest.approx(2.334)
    assert sample(metrics, "fedrca_stage_latency_seconds_bucket", stage="plant", le="0.005") == 1
    assert sample(metrics, "fedrca_stage_latency_seconds_bucket", stage="plant", le="0.05") == 2


def test_a_batch_at_several_stages_is_each_stage_observed_on_its_own():
    from types import SimpleNamespace

    now = 1_700_000_000.0
    records = [SimpleNamespace(timestamp_ms=(now - age) * 1000.0) for age in (0.004, 0.03, 0.3, 2.0, -1.0)]
    both, apart = Metrics(), Metrics()
    both.record_stage_latencies(records, {"consume": now, "flags": now + 0.02})
    apart.record_stage_latency("consume", records, now=now)
    apart.record_stage_latency("flags", records, now=now + 0.02)

    def stages(m: Metrics) -> list[bytes]:
        return [line for line in m.render().splitlines() if line.startswith(b"fedrca_stage_latency_seconds")]

    assert stages(both) == stages(apart) and len(stages(both)) > 10
    assert sample(both, "fedrca_stage_latency_seconds_bucket", stage="flags", le="0.05") == 3
