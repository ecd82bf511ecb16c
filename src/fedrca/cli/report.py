"""Evaluation report: PNG plots and a small HTML page that shows them.

``write_report(directory, ...)`` writes

* ``scores.png`` — per plant, the proprietary and augmented distances d2 (log
  scale) with their thresholds, the published alarm flags underneath, and the
  fault onset;
* ``timeline.png`` — the published flag pairs of every plant over time, the
  RCA verdicts (named root per verdict, green when correct), the sensor events
  (a plant's sensor fault begins or ends: purple squares) and the posterior;
* ``graph.png`` / ``graph.json`` — the interdependency graph the engine used;
* ``metrics.json`` and ``index.html`` — the metrics table, the pictures and every incident with
  the candidate set and the reason of its latest verdict (:func:`incidents`: which plants alarmed and
  when, the look-up table's reading, the path of each effect, what would change the verdict).

The page sets ``data-images-loaded`` on its body once every picture has
loaded, so a headless browser can check that the plots really display.
"""

from __future__ import annotations

import html
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from numpy.typing import NDArray

from fedrca.application.outputs import write_file, write_with
from fedrca.contracts import SENSOR_FAULT, Verdict
from fedrca.detectors.health import CHECKS, HealthResult, SensorHealth
from fedrca.rca.graph import InterdependencyGraph

__all__ = [
    "Incident", "draw_graph", "graph_picture", "incidents", "plot_scores", "plot_timeline", "sensor_episodes",
    "write_report",
]  # fmt: skip

#: Most incidents a report page describes (the first ones; the page says how many more there were).
MAX_INCIDENTS = 50

_COLORS = ["#3465a4", "#cc0000", "#4e9a06", "#c4a000", "#75507b", "#ce5c00", "#06989a", "#8f5902"]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: str | Path) -> Path:
    """Save a figure as PNG whole through the output layer and close it."""
    try:
        return write_with(path, lambda f: fig.savefig(f, format="png"))
    finally:
        _pyplot().close(fig)


def plot_scores(
    path: str | Path,
    plants: Sequence[str],
    d2c: Mapping[str, NDArray[np.float64]],
    d2a: Mapping[str, NDArray[np.float64]],
    thresholds: Mapping[str, tuple[float, float]],
    published: NDArray[np.int64],
    fault_start: int | None = None,
) -> Path:
    """Per-plant d2 (proprietary and augmented) with thresholds and published flags -> PNG.

    ``published`` is (T, M, 2) of the flags as the RCA saw them.
    """
    plt = _pyplot()
    M = len(plants)
    fig, axes = plt.subplots(M, 1, figsize=(10, 1.9 * M + 0.6), sharex=True, dpi=100, squeeze=False)
    t = np.arange(published.shape[0])
    for m, name in enumerate(plants):
        ax = axes[m, 0]
        tau_c, tau_a = thresholds[name]
        floor = 1e-3 * max(tau_c, tau_a)
        ax.semilogy(t, np.maximum(d2c[name], floor), lw=0.8, color="#3465a4", label="d2 proprietary")
        ax.semilogy(t, np.maximum(d2a[name], floor), lw=0.8, color="#ce5c00", alpha=0.8, label="d2 augmented")
        ax.axhline(tau_c, color="#3465a4", ls="--", lw=0.8)
        ax.axhline(tau_a, color="#ce5c00", ls=":", lw=0.8)
        top = ax.get_ylim()[1]
        zc = published[:, m, 0] > 0
        za = published[:, m, 1] > 0
        # published flags as tick rows along the top of the panel
        ax.scatter(t[zc], np.full(zc.sum(), top * 0.7), marker="|", s=25, color="#3465a4", lw=0.6)
        ax.scatter(t[za], np.full(za.sum(), top * 0.45), marker="|", s=25, color="#ce5c00", lw=0.6)
        if fault_start is not None:
            ax.axvline(fault_start, color="#cc0000", lw=1.0)
        ax.set_ylabel(name, fontsize=9)
        if m == 0:
            ax.legend(loc="upper left", fontsize=7, ncol=2, frameon=False)
    axes[-1, 0].set_xlabel("sample")
    fig.suptitle("Per-plant distances d2 with thresholds (dashed) and published flags (ticks: Z_c, Z_a)", fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def plot_timeline(
    path: str | Path,
    plants: Sequence[str],
    published: NDArray[np.int64],
    verdicts: Sequence[Verdict],
    fault_start: int | None = None,
    root_cause: str | None = None,
) -> Path:
    """Published flag pairs per plant, RCA verdicts and their posterior over time -> PNG."""
    plt = _pyplot()
    from matplotlib.colors import ListedColormap

    M = len(plants)
    T = published.shape[0]
    fig, (ax_flags, ax_rca, ax_post) = plt.subplots(
        3, 1, figsize=(10, 2.2 + 0.35 * M + 3.2), sharex=True, dpi=100, gridspec_kw={"height_ratios": [M, M + 2, 2]}
    )
    codes = (2 * published[:, :, 0] + published[:, :, 1]).T  # (M, T)
    cmap = ListedColormap(["#f4f4f4", "#c4a000", "#fcaf3e", "#cc0000"])
    ax_flags.imshow(codes, aspect="auto", interpolation="nearest", cmap=cmap, vmin=0, vmax=3, extent=(0, T, M, 0))
    ax_flags.set_yticks(np.arange(M) + 0.5)
    ax_flags.set_yticklabels(plants, fontsize=8)
    ax_flags.set_title("published flag pairs: (0,0) light, (0,1) olive, (1,0) orange, (1,1) red", fontsize=9)
    labels = [*plants, "other", "none"]
    events = [v for v in verdicts if v.is_sensor_event]
    verdicts = [v for v in verdicts if not v.is_sensor_event]
    seqs = np.array([v.seq for v in verdicts], dtype=np.int64)
    rows = np.array(
        [
            plants.index(v.root_cause) if v.root_cause is not None else (M + 1 if v.outcome == "no_anomaly" else M)
            for v in verdicts
        ],
        dtype=np.int64,
    )
    if len(seqs):
        ok = np.array([v.root_cause is not None and v.root_cause == root_cause for v in verdicts])
        ax_rca.scatter(seqs[ok], rows[ok], s=14, color="#4e9a06", label="correct root")
        ax_rca.scatter(seqs[~ok], rows[~ok], s=14, color="#cc0000", marker="x", label="other verdict")
        ax_post.step(seqs, [v.posterior for v in verdicts], where="post", color="#333333", lw=0.8)
    for v in events:
        began = v.outcome == SENSOR_FAULT
        for plant in v.sensor_plants:
            ax_rca.scatter([v.seq], [plants.index(plant)], s=30, marker="s", color="#75507b",
                           facecolors="#75507b" if began else "none",
                           label="sensor fault" if began else "sensor recovered")  # fmt: skip
    ax_rca.set_yticks(np.arange(len(labels)))
    ax_rca.set_yticklabels(labels, fontsize=8)
    ax_rca.set_ylim(len(labels) - 0.5, -0.5)
    ax_rca.set_title(
        f"RCA verdicts (named root per verdict), sensor events (squares); true root: {root_cause or '-'}", fontsize=9
    )
    if len(seqs) or events:
        handles, names = ax_rca.get_legend_handles_labels()
        unique = dict(zip(names, handles, strict=True))
        ax_rca.legend(unique.values(), unique.keys(), loc="lower right", fontsize=7, frameon=False)
    ax_post.set_ylim(0, 1.05)
    ax_post.set_ylabel("posterior", fontsize=8)
    ax_post.set_xlabel("sample")
    for ax in (ax_flags, ax_rca, ax_post):
        if fault_start is not None:
            ax.axvline(fault_start, color="#cc0000", lw=1.0)
    ax_post.set_xlim(0, T)
    fig.tight_layout()
    return _save(fig, path)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if np.isnan(value):
            return "-"
        if np.isinf(value):
            return "inf"
        return f"{value:.3f}" if abs(value) < 1000 else f"{value:.0f}"
    return html.escape(str(value))


def _table(rows: Sequence[Mapping[str, Any]]) -> str:
    if not rows:
        return "<p>(none)</p>"
    keys = list(rows[0])
    head = "".join(f"<th>{html.escape(k)}</th>" for k in keys)
    body = "".join("<tr>" + "".join(f"<td>{_fmt(r[k])}</td>" for k in keys) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


@dataclass(frozen=True)
class Incident:
    """A run of verdicts between two clearances (``no_anomaly`` verdicts): what an operator handles as one."""

    verdicts: tuple[Verdict, ...]

    @property
    def start(self) -> int:
        """First row of the evidence of its first verdict."""
        return self.verdicts[0].evidence_window[0]

    @property
    def end(self) -> int:
        """Row of its last verdict."""
        return self.verdicts[-1].seq

    @property
    def latest(self) -> Verdict:
        """Its last verdict (the most evidence)."""
        return self.verdicts[-1]

    @property
    def roots(self) -> Counter[str]:
        """How many of its verdicts named each root."""
        return Counter(v.root_cause for v in self.verdicts if v.root_cause is not None)


def incidents(verdicts: Sequence[Verdict]) -> list[Incident]:
    """The verdicts grouped into incidents: a ``no_anomaly`` verdict ends one."""
    out: list[Incident] = []
    current: list[Verdict] = []
    for v in verdicts:
        if v.outcome == "no_anomaly":
            if current:
                out.append(Incident(tuple(current)))
            current = []
            continue
        current.append(v)
    if current:
        out.append(Incident(tuple(current)))
    return out


def _incident_html(k: int, incident: Incident, entries: frozenset[str]) -> str:
    v = incident.latest
    roots = incident.roots
    named = ", ".join(f"{html.escape(r)} ({n} of {len(incident.verdicts)} verdicts)" for r, n in roots.most_common())
    head = f"<h3>Incident {k}: samples {incident.start}..{incident.end} &mdash; {named or html.escape(v.outcome)}</h3>"
    if v.probabilities:
        listed = ", ".join(
            f"{html.escape(c)} {p:.2f}" + (" (unmeasured entry)" if c in entries else "")
            for c, p in zip(v.candidates, v.probabilities, strict=True)
        )
        level = "" if v.level is None else f" at {v.level:.2f}"
        kind = "uncalibrated: the engine's own posterior" if v.calibration is None else f"calibrated ({v.calibration})"
        sets = f"<p>Latest verdict (sample {v.seq}): candidates{level}: {listed} &mdash; {html.escape(kind)}</p>"
    else:
        sets = f"<p>Latest verdict (sample {v.seq}): {html.escape(v.outcome.replace('_', ' '))}</p>"
    reason = v.reason
    if reason is None:
        return head + sets
    rows = [
        {
            "plant": p.plant,
            "started (rows after the first alarm)": "-" if p.onset is None else f"+{p.onset}",
            "Z_c on": f"{p.share:.0%}",
            "(Z_c, Z_a)": f"({p.pair[0]}, {p.pair[1]})",
            "P1 reading": p.state.replace("_", " "),
            "look-up table with the root": p.table.replace("_", " ") or "-",
            "how the root reaches it": p.link or "-",
        }
        for p in reason.plants
    ]
    margin = "inf" if reason.margin == float("inf") else f"{reason.margin:.1f}"
    runner = f"runner-up {html.escape(reason.runner_up)}, {margin} nats behind" if reason.runner_up else "no runner-up"
    change = f"<p>What would change it ({runner}): {html.escape(reason.change)}</p>"
    return head + sets + _table(rows) + change


def _incidents_html(verdicts: Sequence[Verdict], entries: frozenset[str]) -> str:
    found = incidents(verdicts)
    if not found:
        return "<p>(no incident)</p>"
    parts = [_incident_html(k, inc, entries) for k, inc in enumerate(found[:MAX_INCIDENTS], 1)]
    if len(found) > MAX_INCIDENTS:
        parts.append(f"<p>... and {len(found) - MAX_INCIDENTS} more incidents (the verdicts JSON has them all)</p>")
    return "".join(parts)


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; color: #222; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }}
th, td {{ border: 1px solid #bbb; padding: 0.25em 0.6em; text-align: right; }}
th {{ background: #eee; }} td:first-child {{ text-align: left; }}
img {{ max-width: 100%; border: 1px solid #ddd; margin-bottom: 1.2em; }}
.graph {{ max-width: 420px; }}
</style></head>
<body data-images-loaded="0">
<h1>{title}</h1>
<p>{summary}</p>
<h2>Detection</h2>
{detection}
<h2>Root cause analysis</h2>
{rca}
<h2>Incidents: the candidate set and the reason of each</h2>
{incidents}

<h2>Sensor faults</h2>
<p>A broken tag (stale, Bad, stuck, flat or out of range) is left out of its plant's statistics and
reported as a sensor fault of the plant, never as a process root cause. The plant publishes one bit;
the tags below are the plants' own view.</p>
{sensors}
<h2>Distances and flags</h2>
<img src="scores.png" alt="per-plant d2 with thresholds and flags">
<h2>RCA timeline</h2>
<img src="timeline.png" alt="published flags and RCA verdicts over time">
{baselines}<h2>Interdependency graph</h2>
<img class="graph" src="graph.png" alt="interdependency graph">
<p><a href="graph.json">graph.json</a> &middot; <a href="metrics.json">metrics.json</a></p>
<script>
window.addEventListener("load", function () {{
  var imgs = Array.prototype.slice.call(document.images);
  var ok = imgs.filter(function (i) {{ return i.complete && i.naturalWidth > 0; }}).length;
  document.body.setAttribute("data-images-loaded", ok + "/" + imgs.length);
}});
</script>
</body></html>
"""


def draw_graph(graph: InterdependencyGraph, path: str | Path, title: str | None = None) -> Path:
    """Save a picture of the graph (PNG/SVG by extension) whole: plants on a circle, arrows by weight."""
    out = Path(path)
    return write_with(out, lambda f: graph_picture(graph, f, title=title, fmt=out.suffix))


def graph_picture(graph: InterdependencyGraph, stream: BinaryIO, title: str | None = None, fmt: str = "png") -> None:
    """Draw the graph into a binary stream in format ``fmt`` (``png``, ``svg``, ``.png`` ...; PNG when empty)."""
    plt = _pyplot()
    from matplotlib.patches import FancyArrowPatch

    M = graph.n_plants
    angles = np.pi / 2 - 2 * np.pi * np.arange(M) / max(M, 1)
    xy = np.column_stack([np.cos(angles), np.sin(angles)]) if M > 1 else np.zeros((1, 2))
    fig, ax = plt.subplots(figsize=(5.5, 5.5), dpi=110)
    strengths = graph.weight[graph.adjacency]
    top = float(strengths.max()) if strengths.size and strengths.max() > 0 else 1.0
    for n, m in zip(*np.nonzero(graph.adjacency)):
        width = 0.8 + 3.2 * float(graph.weight[n, m]) / top
        both = bool(graph.adjacency[m, n])
        arrow = FancyArrowPatch(
            tuple(xy[n]),
            tuple(xy[m]),
            arrowstyle="-|>",
            mutation_scale=16,
            lw=width,
            color="#3465a4",
            shrinkA=26,
            shrinkB=26,
            connectionstyle=f"arc3,rad={0.18 if both else 0.0}",
        )
        ax.add_patch(arrow)
    for k, name in enumerate(graph.plants):
        x, y = float(xy[k, 0]), float(xy[k, 1])
        ax.scatter([x], [y], s=2200, color="#f6f6f6", edgecolors="#333333", zorder=3)
        ax.text(x, y, name, ha="center", va="center", fontsize=9, zorder=4)
    ax.set_xlim(-1.45, 1.45)
    ax.set_ylim(-1.45, 1.45)
    ax.set_aspect("equal")
    ax.axis("off")
    label = title or f"interdependency graph ({graph.source}"
    if title is None:
        label += f", alpha {graph.threshold})" if graph.threshold is not None else ")"
    ax.set_title(label, fontsize=10)
    try:
        fig.savefig(stream, format=fmt.lstrip(".").lower() or "png", bbox_inches="tight")
    finally:
        plt.close(fig)


def write_report(
    directory: str | Path,
    *,
    title: str,
    summary: str,
    plants: Sequence[str],
    d2c: Mapping[str, NDArray[np.float64]],
    d2a: Mapping[str, NDArray[np.float64]],
    thresholds: Mapping[str, tuple[float, float]],
    published: NDArray[np.int64],
    verdicts: Sequence[Verdict],
    graph: InterdependencyGraph,
    metrics: Mapping[str, Any],
    detection_rows: Sequence[Mapping[str, Any]],
    rca_rows: Sequence[Mapping[str, Any]],
    fault_start: int | None = None,
    root_cause: str | None = None,
    sensor_rows: Sequence[Mapping[str, Any]] = (),
    baselines: Sequence[Mapping[str, Any]] | None = None,
    entries: Sequence[str] = (),
) -> Path:
    """Write the PNGs, graph.json, metrics.json and index.html into ``directory``; returns the page.

    ``entries``: the plants declared as unmeasured entries (``rca.unobserved_entry``), marked in the sets.
    ``sensor_rows``: the sensor-fault episodes (plant, tag, check, rows) the page lists; the
    sensor events among ``verdicts`` are counted and drawn on the timeline. ``baselines``: the
    refreshes of the plants' re-baselining loops (:meth:`RefreshReport.as_dict
    <fedrca.drift.RefreshReport.as_dict>`; None: the loop is off, no section).

    The caller stages ``directory`` (:func:`fedrca.application.outputs.staged_folder`) so that a
    report appears whole or not at all; every file is written whole by itself too.
    """
    out = Path(directory)
    plot_scores(out / "scores.png", plants, d2c, d2a, thresholds, published, fault_start)
    plot_timeline(out / "timeline.png", list(plants), published, verdicts, fault_start, root_cause)
    draw_graph(graph, out / "graph.png")
    write_file(out / "graph.json", graph.to_json() + "\n")
    write_file(out / "metrics.json", json.dumps(metrics, indent=2, default=_json_default) + "\n")
    events = Counter(p for v in verdicts if v.outcome == SENSOR_FAULT for p in v.sensor_plants)
    counts = [{"plant": p, "sensor faults reported": events.get(p, 0)} for p in plants]
    page = _PAGE.format(
        title=html.escape(title),
        summary=html.escape(summary),
        detection=_table(detection_rows),
        rca=_table(rca_rows),
        sensors=_table(counts) + _table(sensor_rows),
        baselines="" if baselines is None else f"<h2>Baselines (re-baselining loop)</h2>\n{_table(baselines)}\n",
        incidents=_incidents_html(verdicts, frozenset(entries)),
    )
    return write_file(out / "index.html", page)


def sensor_episodes(results: Mapping[str, HealthResult], checks: Mapping[str, SensorHealth]) -> list[dict[str, Any]]:
    """The plants' own sensor-fault episodes of a run: plant, tag, check, first and last sample (a report made
    where every plant's data is, e.g. ``fedrca demo`` or ``fedrca evaluate``, may name the tag; in the live
    system it never leaves its plant)."""
    rows = []
    for plant, checked in results.items():
        health = checks.get(plant)
        if health is None:
            continue
        for t, tag, check in health.describe(checked):
            column = health.tags.index(tag) if health.tags else int(tag)
            active = checked.checks[CHECKS.index(check), t:, column]
            last = t + (int(np.argmin(active)) - 1 if not active.all() else len(active) - 1)
            rows.append({"plant": plant, "tag": tag, "check": check, "from sample": t, "to sample": last})
    return rows


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
