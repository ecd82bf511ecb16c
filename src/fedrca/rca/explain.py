"""A verdict as issued: its candidate set with probabilities, and its reason (pure functions of the evidence).

:func:`annotate` turns an engine decision and its :class:`~fedrca.rca.evidence.Evidence` into the
verdict an operator is shown:

* **probabilities**: P(root = k) for every plant, from the calibration map when the site has one
  (:mod:`fedrca.rca.calibration`), else the engine's own root posterior (then ``calibration`` is
  None: the verdict says it is uncalibrated);
* **candidates**: the named root first, then the other plants by probability, until their
  probabilities reach ``rca.coverage`` (0.9): the smallest such set (capped at
  :data:`~fedrca.contracts.reason.MAX_CANDIDATES`);
* **reason** (:class:`~fedrca.contracts.reason.Reason`): per plant when it started alarming relative
  to the incident's first alarm, in what share of the rows, its dominant flag pair with P1's reading
  and the look-up table's outcome next to the root's pair (:func:`fedrca.rca.table.lookup`), and the
  declared path or learned block that carries the root's effect to it; the runner-up (the best
  other plant when a root is named), the margin in nats, and what would change the verdict (the
  onset order or the window's flags, whichever decides it: the evidence is scored again without
  the order).

:func:`describe` writes it for people (``fedrca demo``, the report).

Examples
--------
>>> from fedrca.contracts import Verdict
>>> v = Verdict("s", 0.0, 3, "a", (), 0.95, (1, 3), "root_cause", ("a", "b"), (0.7, 0.25), 0.9)
>>> describe(v).splitlines()[0]
'root cause a (p 0.70, uncalibrated); candidates at 0.90: a 0.70, b 0.25'
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections import deque

import numpy as np

from fedrca.config import RCASettings
from fedrca.contracts import Verdict
from fedrca.contracts.reason import (
    MAX_CHANGE_CHARS,
    MAX_LINK_CHARS,
    MAX_REASON_PLANTS,
    PLANT_STATES,
    PlantReason,
    Reason,
)
from fedrca.rca.calibration import CalibrationMap, candidate_set
from fedrca.rca.evidence import Evidence, FloatArray
from fedrca.rca.graph import InterdependencyGraph
from fedrca.rca.table import NO_ANOMALY, lookup

__all__ = ["annotate", "candidate_set", "describe", "link", "shortest_path"]

#: the words of a flag pair's reading
_STATE_WORDS = {
    "root_candidate": "root candidate",
    "propagated": "propagated effect",
    "normal": "normal",
    "imperfect_training": "imperfect training",
}


def shortest_path(graph: InterdependencyGraph, source: int, target: int) -> list[int] | None:
    """The shortest directed path source -> ... -> target in the graph (plant indices), None when none."""
    if source == target:
        return [source]
    previous = {source: source}
    queue = deque([source])
    while queue:
        n = queue.popleft()
        for m in np.flatnonzero(graph.adjacency[n]).tolist():
            if m in previous:
                continue
            previous[m] = n
            if m == target:
                path = [m]
                while path[-1] != source:
                    path.append(previous[path[-1]])
                return path[::-1]
            queue.append(m)
    return None


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def link(graph: InterdependencyGraph, root: int, plant: int) -> str:
    """How the graph carries root's effect to plant: the declared path, the learned blocks, or why none."""
    if graph.source == "complete":
        return "complete graph: every unit may affect every other"
    path = shortest_path(graph, root, plant)
    names = graph.plants
    if path is None:
        return _clip(f"no path from {names[root]} in the {graph.source} graph", MAX_LINK_CHARS)
    text = " > ".join(names[i] for i in path)
    if graph.source == "learned" and graph.pvalue is not None:
        worst = max(float(graph.pvalue[a, b]) for a, b in itertools.pairwise(path))
        return _clip(f"learned blocks {text} (p <= {worst:.2g})", MAX_LINK_CHARS)
    return _clip(f"{graph.source} path {text}", MAX_LINK_CHARS)


def _hypothesis_label(plants: tuple[str, ...], h: int) -> str:
    M = len(plants)
    if h == 0:
        return "none"
    if h <= M:
        return plants[h - 1]
    return "external" if h == M + 1 else "unexplained"


def _pair(code: int) -> tuple[int, int]:
    return (int(code) >> 1, int(code) & 1)


#: :func:`~fedrca.rca.table.lookup`'s outcome of every two pairs (root's, plant's), computed once: a reason
#: names it for each listed plant of every issued verdict (tests/rca/test_explain.py::test_the_table_is_the_lookup)
_TABLE = {(a, b): lookup(a, b).outcome for a in map(_pair, range(4)) for b in map(_pair, range(4))}


def _change(evidence: Evidence, named: int, runner: int, margin: float) -> str:
    """One sentence: what would change the verdict (hypothesis indices into the log evidence)."""
    plants = evidence.plants
    M = len(plants)
    if runner < 0:
        return "no other hypothesis is possible under the engine's model"
    name, other = _hypothesis_label(plants, named), _hypothesis_label(plants, runner)
    if runner == 0:
        return f"the verdict clears when the alarms stop (no anomaly is {margin:.1f} nats behind)"
    if runner == M + 1:
        return (
            f"a root outside the monitored plants is {margin:.1f} nats behind: it would lead if {name}'s own "
            "alarms stopped while the others persist"
        )
    if runner == M + 2:
        return f"no single root explains the flags {margin:.1f} nats less well"
    if named > M:
        return f"{other} would be named if its alarms were {margin:.1f} nats more root-like"
    k, r = named - 1, runner - 1
    flags = float(evidence.unordered[named] - evidence.unordered[runner])
    share = evidence.share
    first = evidence.first
    if flags <= 0.0 and first[k] >= 0 and first[k] == first[r]:
        # both began in the same row: the onset order says nothing, the severity order decides
        # (tests/rca/test_severity.py::test_the_reason_names_the_severity_order_when_both_began_together)
        text = (
            f"the severity order decides: {name} and {other} began alarming in the same row, {name} reached "
            f"the higher alarm levels first; on the window's flags alone {other} would lead by {-flags:.1f} "
            f"nats: {other} would be named had it reached them first"
        )
    elif flags <= 0.0:
        when = ""
        if first[k] >= 0 and first[r] >= 0:
            when = f" ({int(first[r] - first[k])} rows after {name})"
        elif first[r] < 0:
            when = " (it has not alarmed in this incident)"
        text = (
            f"the onset order decides: {name} alarmed before {other}{when}; on the window's flags alone {other} "
            f"would lead by {-flags:.1f} nats: {other} would be named had it alarmed first"
        )
    else:
        text = (
            f"the window's flags decide ({flags:.1f} of {margin:.1f} nats): {name} alarms in {share[k]:.0%} of "
            f"the rows, {other} in {share[r]:.0%}; {other} would be named if its alarms grew as persistent as "
            f"{name}'s, or {name}'s stopped"
        )
    return _clip(text, MAX_CHANGE_CHARS)


def _reason(
    decision: Verdict, evidence: Evidence, graph: InterdependencyGraph, settings: RCASettings, shown: list[int]
) -> Reason:
    plants = evidence.plants
    M = len(plants)
    named = 1 + plants.index(decision.root_cause) if decision.root_cause is not None else None
    # plain floats and ints: one numpy call per array, not one per hypothesis or plant
    ev = evidence.log_evidence.tolist()
    h = named if named is not None else int(np.argmax(evidence.log_evidence))
    # the competitor an operator weighs a named root against is another plant: the best other root
    # hypothesis (any other hypothesis when none is possible, or when no root is named)
    pool = range(1, M + 1) if named is not None else range(len(ev))
    finite = [math.isfinite(x) for x in ev]
    others = [i for i in pool if i != h and finite[i]] or [i for i in range(len(ev)) if i != h and finite[i]]
    runner = max(others, key=ev.__getitem__) if others else -1
    margin = ev[h] - ev[runner] if runner >= 0 else float("inf")
    root = None if named is None else named - 1
    first = evidence.first.tolist()
    began = [f >= 0 for f in first]
    start = min((f for f in first if f >= 0), default=None)  # Evidence.incident_start
    share = evidence.share.tolist()
    pairs = evidence.pairs.tolist()
    # the plants of the incident in the order they started, then the candidates, then the rest by share
    order = sorted((m for m in range(M) if began[m]), key=lambda m: (first[m], m))
    rest = [m for m in shown if m not in order]
    rest += sorted((m for m in range(M) if m not in order and m not in rest), key=lambda m: -share[m])
    listed = (order + rest)[:MAX_REASON_PLANTS]
    if root is not None and root not in listed:
        listed[-1] = root
    declared = set(settings.unobserved_entry)
    items = []
    for m in listed:
        pair = _pair(pairs[m])
        table, via = "", ""
        if root is not None and m != root:
            table = _TABLE[_pair(pairs[root]), pair]
            if plants[m] in declared and graph.adjacency[m, root]:
                via = f"declared unmeasured entry into {plants[root]}: what enters here can show there first"
            else:
                via = link(graph, root, m)
        items.append(
            PlantReason(
                plants[m],
                first[m] - start if began[m] and start is not None else None,
                min(max(share[m], 0.0), 1.0),
                pair,
                PLANT_STATES[pair],
                table,
                _clip(via, MAX_LINK_CHARS),
            )
        )
    return Reason(
        tuple(items),
        _hypothesis_label(plants, runner) if runner >= 0 else None,
        max(margin, 0.0),
        _change(evidence, h, runner, margin),
    )


def annotate(
    decision: Verdict,
    evidence: Evidence,
    graph: InterdependencyGraph,
    settings: RCASettings,
    calibration: CalibrationMap | None = None,
    calibrated: FloatArray | None = None,
) -> Verdict:
    """The verdict as issued: ``decision`` with its candidates, probabilities, level, calibration id and reason.

    ``calibration`` is a :class:`~fedrca.rca.calibration.CalibrationMap` (None: the engine's root
    posterior, uncalibrated); ``calibrated`` its probabilities (M,) at this verdict when already
    computed (:meth:`~fedrca.rca.calibration.CalibrationMap.probabilities_block`). A ``no_anomaly``
    decision is returned as it is.
    """
    if decision.outcome == NO_ANOMALY:
        return decision
    if calibration is not None:
        probabilities = calibration.probabilities(evidence, graph, settings) if calibrated is None else calibrated
        map_id: str | None = calibration.id
    else:
        probabilities, map_id = evidence.root_posterior(), None
    plants = evidence.plants
    root = None if decision.root_cause is None else plants.index(decision.root_cause)
    # the set reaches the map's threshold for the configured coverage (CalibrationMap.threshold; the coverage
    # itself without a map): tests/rca/test_explain.py::test_the_set_reaches_the_maps_threshold_for_its_coverage
    if calibration is None:
        shown = candidate_set(probabilities, settings.coverage, first=root)
    else:  # the map's rule and its threshold for the coverage (CalibrationMap.candidates)
        shown = calibration.candidates(probabilities, settings.coverage, first=root)
    reason = _reason(decision, evidence, graph, settings, shown)
    return dataclasses.replace(
        decision,
        candidates=tuple(plants[i] for i in shown),
        probabilities=tuple(float(probabilities[i]) for i in shown),
        level=settings.coverage,
        calibration=map_id,
        reason=reason,
    )


def describe(verdict: Verdict, entries: frozenset[str] | set[str] = frozenset()) -> str:
    """The verdict for people: one line with the root, its probability and the candidate set, then one line
    per described plant and one on what would change it (``entries``: declared unmeasured entries,
    marked in the candidate list)."""
    head = verdict.outcome.replace("_", " ") if verdict.root_cause is None else f"root cause {verdict.root_cause}"
    if verdict.probabilities:
        p = dict(zip(verdict.candidates, verdict.probabilities, strict=True))
        if verdict.root_cause in p:
            head += f" (p {p[verdict.root_cause]:.2f}"
        else:
            head += " ("
            head += "p -"
        head += ", uncalibrated)" if verdict.calibration is None else ")"
        level = f" at {verdict.level:.2f}" if verdict.level is not None else ""
        listed = ", ".join(
            f"{c} {q:.2f}" + (" (unmeasured entry)" if c in entries else "")
            for c, q in zip(verdict.candidates, verdict.probabilities, strict=True)
        )
        head += f"; candidates{level}: {listed}"
    elif verdict.candidates:
        head += f"; candidates: {', '.join(verdict.candidates)}"
    lines = [head]
    reason = verdict.reason
    if reason is None:
        return "\n".join(lines)
    for item in reason.plants:
        if item.onset is None and item.share < 0.05 and item.plant != verdict.root_cause:
            continue
        when = "not alarming" if item.onset is None else f"+{item.onset} rows"
        parts = [f"{when}, Z_c on in {item.share:.0%} of rows", f"{item.pair} {_STATE_WORDS[item.state]}"]
        if item.table:
            parts.append(f"table with the root: {item.table.replace('_', ' ')}")
        if item.link:
            parts.append(item.link)
        lines.append(f"  {item.plant}: " + "; ".join(parts))
    if reason.change:
        lines.append(f"  would change: {reason.change}")
    return "\n".join(lines)
