"""Calibrated root probabilities: a map from the engine's evidence to P(the root is plant k).

The engine's posterior is a product of per-row likelihoods that treats the rows of a window as
independent; smoothed flags come in runs, so it is over-confident (0.99 where it is right 90 % of
the time, and 1.00 on faults its flags cannot separate: TEP's stream-4 composition faults). A
**calibration map** corrects that. For a verdict with evidence ``e`` (:class:`~fedrca.rca.evidence.Evidence`)
every plant k gets a feature vector ``x_k(e)`` (:data:`FEATURES`, none of which names a plant: the map
carries to another site of the same process), and::

    P(root = k | e) = exp(w . x_k) / sum_j exp(w . x_j)        (a conditional logit)

The weights ``w`` are fitted by maximum likelihood (L2-penalised) on verdicts of a fault library
whose true roots are known (:func:`fit`; TEP: ``bench/bench_faults.py`` on the simulated library,
cross-validated over seeds and disturbances before a figure is reported), and shipped as a JSON
artifact the RCA worker loads (:class:`CalibrationMap`; ``rca.calibration.path``). The first feature
is the engine's own log posterior, so ``w[0]`` is an inverse temperature; the others let the map move
probability to what the flags cannot see, e.g. to a declared unmeasured entry
(``rca.unobserved_entry``) when the unit the engine names is one its disturbance enters.

**Families.** A map of the family ``features`` (the default) weighs :data:`FEATURES` alone. A map of the family
``plants`` (:data:`FAMILIES`, :func:`design`) also weighs, per plant j, a bias and the plant's ``named`` and ``share``
features: it learns which of *its site's* units a kind of evidence usually points to, so it is fitted on one site's
faults and does not carry to another process; it is written as a ``fedrca-calibration/4`` map naming its family and
its plants, and refused (:meth:`CalibrationMap.check`) by a site whose plants differ.

**Candidate sets.** Summing calibrated probabilities to the configured coverage overshoots it: the
probabilities are calibrated on average over kinds of evidence the flags cannot tell apart (a reactor named
right on a reactor fault looks like a reactor named wrong on a stream-4 fault), and a true root *set* (TEP's
stream 4: the feed or the stripper) holds the truth with the mass of several plants. So a map also carries,
per coverage level c, the **threshold** t(c) the set's probabilities must reach so that the sets hold a true
root on at least c of the fitting library's verdicts (every run weighing one) in each of its settings,
measured on probabilities of maps that did not see those runs (:func:`fit_thresholds`; split-conformal
calibration of the set size). A verdict's set is the smallest set, the named root first, whose calibrated
probabilities reach ``t(rca.coverage)`` (:meth:`CalibrationMap.threshold`).

Without a map the verdicts carry the engine's root posterior and say so (``calibration: null``).
:func:`expected_calibration_error` and :func:`reliability` measure a set of probabilities against
the truth.

Examples
--------
>>> import numpy as np
>>> x = np.zeros((2, 3, len(FEATURES))); x[:, :, 0] = np.log([[0.8, 0.1, 0.1], [0.3, 0.6, 0.1]])
>>> truth = np.array([[True, False, False], [False, True, False]])
>>> m = fit(x, truth, np.ones(2), ("a", "b", "c"), penalty=0.0)
>>> p = m.apply(x)
>>> bool(np.allclose(p.sum(axis=1), 1.0)), bool(p[0, 0] > 0.5)
(True, True)
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedrca.config import RCASettings
from fedrca.contracts.reason import MAX_CANDIDATES
from fedrca.exceptions import ArtifactError
from fedrca.rca.evidence import Evidence, softmax
from fedrca.rca.graph import InterdependencyGraph

__all__ = [
    "FAMILIES",
    "FEATURES",
    "FORMAT",
    "FORMAT_PLANTS",
    "KEYS",
    "MAPS_FORMAT",
    "RULES",
    "CalibrationMap",
    "CalibrationMaps",
    "add_coverage",
    "candidate_set",
    "coverage_by_threshold",
    "design",
    "expected_calibration_error",
    "features",
    "fit",
    "fit_thresholds",
    "fit_weights",
    "n_weights",
    "plant_set",
    "reliability",
    "threshold_steps",
    "thresholds_of_coverage",
]

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]

#: The artifact's format tag (a ``fedrca-calibration/1`` map, without set thresholds, and a ``/2`` map, without a set
#: rule, are still read: their sets follow the ``mass`` rule).
FORMAT = "fedrca-calibration/3"
#: The format tag of a map of the family ``plants`` (per-plant terms: :data:`FAMILIES`): a fedrca that reads only the
#: plant-agnostic maps refuses it by its format instead of misreading its weights.
FORMAT_PLANTS = "fedrca-calibration/4"
FORMATS = ("fedrca-calibration/1", "fedrca-calibration/2", FORMAT, FORMAT_PLANTS)
#: What a map's weights weigh (:func:`design`): ``features``, :data:`FEATURES` alone, none of which names a plant (a map
#: says how far to trust a *kind* of evidence); ``plants``, also per plant j of the site a bias, its ``named`` and its
#: ``share`` feature (3 M more weights): a **site-specific** map that learns which of its site's units a kind of
#: evidence usually points to, fitted on that site's faults; it does not carry to another process, and a site whose
#: plants differ refuses it (:meth:`CalibrationMap.check`).
FAMILIES = ("features", "plants")
#: How a candidate set is built from a verdict's probabilities p and the map's threshold t for the coverage (the named
#: root first in both): ``mass``, the most probable plants until their probabilities sum to t (:func:`candidate_set`);
#: ``plant``, every other plant of probability at least t (:func:`plant_set`: the least ambiguous set-valued
#: classifier, Sadinle, Lei and Wasserman 2019, the smallest sets on average of any rule at a given coverage when the
#: probabilities are calibrated: it adds no plant of small probability to make up a sum).
RULES = ("mass", "plant")
#: Floor of the engine's log root posterior in the first feature (nats): beyond it the engine's
#: evidence against a plant says nothing the other features do not.
LOG_FLOOR = -30.0

#: The features of a plant k at a verdict (none names a plant; "the named root" is the engine's most
#: likely root):
#:
#: * ``log_posterior``: the engine's log posterior of "root k" among the roots, floored at LOG_FLOOR;
#: * ``log_flags``: the same without the onset-order evidence (what the window's flags alone say);
#: * ``named``: k is the named root;
#: * ``named_entry``: k is the named root and a declared unmeasured entry (``rca.unobserved_entry``);
#: * ``named_breadth``: k is the named root, times the share of the other plants that alarm (a root
#:   named while every unit alarms is named on thinner evidence);
#: * ``share``: share of the window's rows in which k's true proprietary flag is on;
#: * ``first``: k is among the first plants to alarm in the incident;
#: * ``entry``: k is a declared unmeasured entry whose direct successors include the named root, which
#:   is not itself a declared entry (the disturbance may have entered unseen through k);
#: * ``entry_alarming``: ``entry`` and k alarms now.
FEATURES: tuple[str, ...] = (
    "log_posterior",
    "log_flags",
    "named",
    "named_entry",
    "named_breadth",
    "share",
    "first",
    "entry",
    "entry_alarming",
)


def share_of_others(alarming: NDArray[np.bool_], top: int) -> float:
    """The share of the plants but ``top`` that alarm (0 without other plants): ``np.delete(alarming, top).mean()``,
    as the count over the number (the same float: a count of bools is exact,
    ``tests/rca/test_explain.py::test_share_of_others_is_the_mean``), without copying the array."""
    M = len(alarming)
    return (int(np.count_nonzero(alarming)) - int(alarming[top])) / (M - 1) if M > 1 else 0.0


def features(evidence: Evidence, graph: InterdependencyGraph, settings: RCASettings) -> FloatArray:
    """The feature matrix (M, F) of every plant at a verdict (:data:`FEATURES`, in order)."""
    M = evidence.n_plants
    log_post = np.log(np.maximum(evidence.root_posterior(), 1e-300))
    log_flags = np.log(np.maximum(softmax(evidence.unordered[1 : M + 1]), 1e-300))
    top = int(np.argmax(evidence.roots))
    named = np.zeros(M)
    named[top] = 1.0
    first = evidence.first
    began = first >= 0
    earliest = first[began].min() if began.any() else -1
    is_first = began & (first == earliest)
    declared = np.array([p in settings.unobserved_entry for p in evidence.plants], dtype=bool)
    breadth = share_of_others(evidence.alarming, top)
    entry = declared & graph.adjacency[:, top] & (np.arange(M) != top) & (not declared[top])
    return np.column_stack(
        [
            np.maximum(log_post, LOG_FLOOR),
            np.maximum(log_flags, LOG_FLOOR),
            named,
            named * declared,
            named * breadth,
            evidence.share.astype(np.float64),
            is_first.astype(np.float64),
            entry.astype(np.float64),
            (entry & evidence.alarming).astype(np.float64),
        ]
    )


def design(x: ArrayLike, family: str = "features") -> FloatArray:
    """The columns a map of ``family`` (:data:`FAMILIES`) weighs, from the features ``x`` (..., M, F) of M plants.

    ``features``: ``x`` itself (F columns). ``plants``: ``x``, then per plant j 1[the row is plant j], then that times
    the row's ``named`` feature, then that times its ``share`` (F + 3 M columns, in that order): a weight per plant
    for each, so the map can move probability toward one unit of the site, which a plant-agnostic map cannot.

    Examples
    --------
    >>> x = np.zeros((2, len(FEATURES))); x[1, FEATURES.index("named")] = 1.0; x[:, FEATURES.index("share")] = 0.5
    >>> design(x, "plants")[:, len(FEATURES):].tolist()
    [[1.0, 0.0, 0.0, 0.0, 0.5, 0.0], [0.0, 1.0, 0.0, 1.0, 0.0, 0.5]]
    >>> design(x, "features") is x
    True
    """
    X = np.asarray(x, dtype=np.float64)
    if family == "features":
        return X
    if family != "plants":
        raise ValueError(f"family {family!r}: one of {', '.join(FAMILIES)}")
    M = X.shape[-2]
    # eye[..., k, j] = 1[plant k is plant j]
    eye = np.broadcast_to(np.eye(M), (*X.shape[:-1], M))
    named = X[..., FEATURES.index("named")][..., None]
    share = X[..., FEATURES.index("share")][..., None]
    return np.concatenate([X, eye, eye * named, eye * share], axis=-1)


def n_weights(family: str, n_plants: int) -> int:
    """The number of weights of a map of ``family`` for a site of ``n_plants`` plants (:func:`design`'s columns).

    >>> n_weights("features", 5) == len(FEATURES), n_weights("plants", 5) - len(FEATURES)
    (True, 15)
    """
    if family not in FAMILIES:
        raise ValueError(f"family {family!r}: one of {', '.join(FAMILIES)}")
    return len(FEATURES) + (3 * n_plants if family == "plants" else 0)


def candidate_set(probabilities: ArrayLike, level: float, first: int | None = None) -> list[int]:
    """Indices of the smallest set, most probable first (``first`` leads when given), whose probabilities
    sum to at least ``level`` (at most :data:`~fedrca.contracts.reason.MAX_CANDIDATES`; plants of zero
    probability never): the ``mass`` rule.

    Examples
    --------
    >>> candidate_set(np.array([0.05, 0.6, 0.35]), 0.9)
    [1, 2]
    >>> candidate_set(np.array([0.05, 0.6, 0.35]), 0.9, first=2)
    [2, 1]
    """
    p = np.asarray(probabilities, dtype=np.float64)
    order = [int(i) for i in np.argsort(-p, kind="stable") if p[i] > 0.0]
    if first is not None and first in order:
        order.remove(first)
        order.insert(0, first)
    chosen: list[int] = []
    held = 0.0
    for i in order[:MAX_CANDIDATES]:
        chosen.append(i)
        held += float(p[i])
        # float sums of probabilities that reach the level exactly must count as reaching it
        if held >= level - 1e-9:
            break
    return chosen


def plant_set(probabilities: ArrayLike, floor: float, first: int | None = None) -> list[int]:
    """Indices of ``first`` (without it, the most probable plant), then every other plant of probability at least
    ``floor``, most probable first (at most :data:`~fedrca.contracts.reason.MAX_CANDIDATES`; plants of zero
    probability never): the ``plant`` rule.

    Examples
    --------
    >>> plant_set(np.array([0.05, 0.6, 0.35]), 0.2)
    [1, 2]
    >>> plant_set(np.array([0.05, 0.6, 0.2, 0.15]), 0.2, first=0)
    [0, 1, 2]
    """
    p = np.asarray(probabilities, dtype=np.float64)
    first = int(np.argmax(p)) if first is None else int(first)
    order = [int(i) for i in np.argsort(-p, kind="stable") if p[i] > 0.0 and i != first]
    lead = [] if p[first] <= 0.0 else [first]
    # a probability equal to the floor up to float rounding counts as reaching it
    return (lead + [i for i in order if p[i] >= floor - 1e-12])[:MAX_CANDIDATES]


def _softmax_rows(a: FloatArray) -> FloatArray:
    """:func:`~fedrca.rca.evidence.softmax` of each row of ``a`` (E, M) on its own: a row whose largest log
    weight is not finite is uniform (the same floats as one row at a time: every operation is per row)."""
    top = np.max(a, axis=-1, keepdims=True)
    finite = np.isfinite(top)
    with np.errstate(invalid="ignore"):  # inf - inf in a row that is uniform anyway
        w = np.exp(a - np.where(finite, top, 0.0))
        p = w / w.sum(axis=-1, keepdims=True)
    return np.where(finite, p, 1.0 / a.shape[-1])


def features_block(evidences: Sequence[Evidence], graph: InterdependencyGraph, settings: RCASettings) -> FloatArray:
    """The feature matrices (E, M, F) of E verdicts at once: row e is :func:`features` of ``evidences[e]``, the
    same floats (every operation is per verdict and per plant;
    ``tests/rca/test_calibration_block.py::test_block_features_equal_one_at_a_time``)."""
    E = len(evidences)
    first_ev = evidences[0]
    M = first_ev.n_plants
    log_evidence = np.stack([ev.log_evidence for ev in evidences])  # (E, M + 3)
    unordered = np.stack([ev.unordered for ev in evidences])
    first = np.stack([ev.first for ev in evidences])  # (E, M)
    alarming = np.stack([ev.alarming for ev in evidences])
    share = np.stack([ev.share for ev in evidences]).astype(np.float64)
    roots = log_evidence[:, 1 : M + 1]
    log_post = np.log(np.maximum(_softmax_rows(roots), 1e-300))
    log_flags = np.log(np.maximum(_softmax_rows(unordered[:, 1 : M + 1]), 1e-300))
    top = np.argmax(roots, axis=1)  # (E,)
    rows = np.arange(E)
    named = np.zeros((E, M))
    named[rows, top] = 1.0
    began = first >= 0
    # each verdict's earliest onset (a verdict without one has no first plant)
    earliest = np.where(began, first, np.iinfo(np.int64).max).min(axis=1)
    is_first = began & (first == earliest[:, None])
    declared = np.array([p in settings.unobserved_entry for p in first_ev.plants], dtype=bool)
    # share_of_others per verdict: the alarming plants but the top one, over the others
    others = np.count_nonzero(alarming, axis=1) - alarming[rows, top].astype(np.int64)
    breadth = others / (M - 1) if M > 1 else np.zeros(E)
    entry = (
        declared[None, :]
        & graph.adjacency[:, top].T
        & (np.arange(M)[None, :] != top[:, None])
        & ~declared[top][:, None]
    )
    return np.stack(
        [
            np.maximum(log_post, LOG_FLOOR),
            np.maximum(log_flags, LOG_FLOOR),
            named,
            named * declared,
            named * breadth[:, None],
            share,
            is_first.astype(np.float64),
            entry.astype(np.float64),
            (entry & alarming).astype(np.float64),
        ],
        axis=-1,
    )


@dataclass(frozen=True)
class CalibrationMap:
    """The fitted weights of the conditional logit over :data:`FEATURES` (and, family ``plants``, per-plant terms), and
    where they come from.

    Attributes
    ----------
    weights : (F,) one weight per column of :func:`design` (:func:`n_weights`: one per feature, family ``plants`` 3 M
        more)
    plants : the plants of the site it was fitted for (a site with other plants is refused)
    fitted_on : what the fit saw (library, settings, runs, verdicts), for the record
    scores : the cross-validated figures of the fit (e.g. the expected calibration error per setting)
    thresholds : ``((coverage, threshold), ...)``, the coverage increasing: the threshold t of the set ``rule`` at
        which the candidate sets held a true root on ``coverage`` of the fitting runs (:func:`fit_thresholds`): for
        ``mass`` the probability a set must reach (increasing with the coverage; empty: the coverage itself), for
        ``plant`` the probability a plant needs to join the named root (decreasing; empty: 1 - the coverage)
    features : the feature names, in order (must be :data:`FEATURES`)
    rule : how a candidate set is built (:data:`RULES`)
    family : what the weights weigh (:data:`FAMILIES`): ``features``, a map that names no plant; ``plants``, a map of
        per-plant terms fitted for the site of :attr:`plants` alone
    id : ``<name>-<digest>``: the digest of the weights, plants, thresholds, a ``plant`` rule and a ``plants`` family;
        verdicts name it
    """

    weights: tuple[float, ...]
    plants: tuple[str, ...]
    fitted_on: Mapping[str, Any] = field(default_factory=dict)
    scores: Mapping[str, Any] = field(default_factory=dict)
    features: tuple[str, ...] = FEATURES
    name: str = "calibration"
    thresholds: tuple[tuple[float, float], ...] = ()
    rule: str = "mass"
    family: str = "features"
    id: str = field(init=False)

    def __post_init__(self) -> None:
        if tuple(self.features) != FEATURES:
            raise ArtifactError(
                f"calibration map of features {list(self.features)}; this fedrca computes {list(FEATURES)}: "
                "fit it again (python bench/bench_faults.py --calibration PATH)"
            )
        if self.family not in FAMILIES:
            raise ArtifactError(f"calibration map family {self.family!r}: one of {', '.join(FAMILIES)}")
        w = tuple(float(x) for x in self.weights)
        expected = n_weights(self.family, len(self.plants))
        if len(w) != expected or not all(math.isfinite(x) for x in w):
            per_plant = f" ({len(FEATURES)} + 3 per plant: family plants)" if self.family == "plants" else ""
            raise ArtifactError(
                f"calibration weights must be {expected} finite numbers{per_plant}, got {list(self.weights)}"
            )
        object.__setattr__(self, "weights", w)
        object.__setattr__(self, "plants", tuple(self.plants))
        if self.rule not in RULES:
            raise ArtifactError(f"calibration set rule {self.rule!r}: one of {', '.join(RULES)}")
        table = tuple((float(c), float(t)) for c, t in self.thresholds)
        levels, limits = [c for c, _ in table], [t for _, t in table]
        mass = self.rule == "mass"
        ordered = levels == sorted(set(levels)) and limits == sorted(limits, reverse=not mass)
        if not ordered or not all(0.0 < x <= 1.0 for x in levels) or not all(0.0 < x <= 1.0 or (
                not mass and x == 0.0) for x in limits):  # fmt: skip
            raise ArtifactError(
                f"calibration thresholds must be (coverage, threshold) pairs in (0, 1], the coverage increasing, the "
                f"threshold {'increasing' if mass else 'decreasing'} with it (rule {self.rule}), got {list(table)}"
            )
        object.__setattr__(self, "thresholds", table)
        # a map without thresholds keeps the id it had before thresholds existed, a mass map the one it had before rules
        key: list[Any] = [w, list(self.plants)] + ([[list(x) for x in table]] if table else [])
        key += [] if mass else [self.rule]
        key += [] if self.family == "features" else [["family", self.family]]
        digest = hashlib.sha256(json.dumps(key).encode()).hexdigest()[:12]
        object.__setattr__(self, "id", f"{self.name}-{digest}")

    def check(self, plants: Sequence[str]) -> None:
        """Refuse a site whose plants differ from the ones the map was fitted for (a map of the family ``plants`` says
        that its per-plant terms do not carry to other plants, and how to fit one or use a plant-agnostic one)."""
        if tuple(plants) != self.plants and self.family == "plants":
            raise ArtifactError(
                f"calibration map {self.id} is a per-plant map (family plants) fitted on the faults of a site of "
                f"plants {list(self.plants)}, the site has {list(plants)}: its per-plant terms do not carry to other "
                "plants. "
                "Fit one on this site's own faults (python bench/bench_faults.py --family plants --calibration PATH), "
                "point rca.calibration.path at a map of family features fitted for these plants, or remove "
                "rca.calibration.path (verdicts are then uncalibrated)"
            )
        if tuple(plants) != self.plants:
            raise ArtifactError(
                f"calibration map {self.id} was fitted for plants {list(self.plants)}, the site has {list(plants)}: "
                "fit one for this site, or remove rca.calibration (verdicts are then uncalibrated)"
            )

    def threshold(self, coverage: float) -> float:
        """The probability a candidate set must reach to hold a true root with ``coverage``: the fitted threshold
        (linear between fitted levels), the coverage itself outside them or without thresholds.

        Examples
        --------
        >>> m = CalibrationMap((1.0,) + (0.0,) * (len(FEATURES) - 1), ("a", "b"), thresholds=((0.8, 0.6), (0.9, 0.8)))
        >>> m.threshold(0.9), round(m.threshold(0.85), 6), m.threshold(0.95)
        (0.8, 0.7, 0.95)
        """
        unfitted = float(coverage) if self.rule == "mass" else 1.0 - float(coverage)
        if not self.thresholds:
            return unfitted
        levels = [c for c, _ in self.thresholds]
        if not levels[0] - 1e-12 <= coverage <= levels[-1] + 1e-12:
            return unfitted
        return float(np.interp(coverage, levels, [t for _, t in self.thresholds]))

    def candidates(self, probabilities: ArrayLike, coverage: float, first: int | None = None) -> list[int]:
        """The candidate set (plant indices, ``first`` leading) of a verdict's calibrated probabilities (M,) at
        ``coverage``: the map's :attr:`rule` at its :meth:`threshold`."""
        t = self.threshold(coverage)
        return candidate_set(probabilities, t, first) if self.rule == "mass" else plant_set(probabilities, t, first)

    def apply(self, x: ArrayLike) -> FloatArray:
        """Probabilities (..., M) from features (..., M, F): softmax over the plants of ``design(x) @ w``
        (:func:`design` of the map's family)."""
        return softmax(design(x, self.family) @ np.asarray(self.weights))

    def probabilities(self, evidence: Evidence, graph: InterdependencyGraph, settings: RCASettings) -> FloatArray:
        """Calibrated P(root = k) (M,) at a verdict."""
        return self.apply(features(evidence, graph, settings))

    def probabilities_block(
        self, evidences: Sequence[Evidence], graph: InterdependencyGraph, settings: RCASettings
    ) -> list[FloatArray]:
        """:meth:`probabilities` of E verdicts, their features computed at once (:func:`features_block`); each
        verdict's (M, F) matrix goes through :meth:`apply` on its own, the same product as one at a time."""
        if not evidences:
            return []
        x = features_block(evidences, graph, settings)
        return [self.apply(x[e]) for e in range(len(evidences))]

    def to_dict(self) -> dict[str, Any]:
        """The JSON artifact."""
        out: dict[str, Any] = {
            "format": FORMAT if self.family == "features" else FORMAT_PLANTS,
            "name": self.name,
            "id": self.id,
            "features": list(self.features),
            "weights": list(self.weights),
            "plants": list(self.plants),
            "fitted_on": dict(self.fitted_on),
            "scores": dict(self.scores),
            "thresholds": [list(x) for x in self.thresholds],
            "rule": self.rule,
        }
        # a plant-agnostic map is written as it was before families existed
        return out if self.family == "features" else {**out, "family": self.family}

    def to_json(self) -> str:
        """The artifact as indented JSON text."""
        return json.dumps(self.to_dict(), indent=1, allow_nan=False) + "\n"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CalibrationMap:
        """Validate an artifact (:class:`ArtifactError` naming what is wrong)."""
        if not isinstance(data, Mapping) or data.get("format") not in FORMATS:
            raise ArtifactError(f"not a calibration map (format {FORMAT})")
        try:
            weights = data["weights"]
            plants = data["plants"]
            if not isinstance(weights, list) or not isinstance(plants, list):
                raise ArtifactError("calibration weights and plants must be lists")
            if not all(isinstance(p, str) for p in plants) or not all(
                isinstance(x, int | float) and not isinstance(x, bool) for x in weights
            ):
                raise ArtifactError("calibration plants must be names and weights numbers")
            table = data.get("thresholds", [])
            if not isinstance(table, list) or not all(
                isinstance(row, list) and len(row) == 2 and all(
                    isinstance(x, int | float) and not isinstance(x, bool) for x in row) for row in table
            ):  # fmt: skip
                raise ArtifactError("calibration thresholds must be a list of [coverage, threshold] pairs")
            family = data.get("family", "features")
            if family != "features" and data["format"] != FORMAT_PLANTS:
                raise ArtifactError(f"calibration map of family {family!r} in format {data['format']}; a map of "
                                    f"per-plant terms is format {FORMAT_PLANTS}: fit it again")  # fmt: skip
            made = cls(
                tuple(weights),
                tuple(plants),
                dict(data.get("fitted_on", {})),
                dict(data.get("scores", {})),
                tuple(data.get("features", ())),
                str(data.get("name", "calibration")),
                tuple((row[0], row[1]) for row in table),
                str(data.get("rule", "mass")),
                str(family),
            )
        except KeyError as exc:
            raise ArtifactError(f"calibration map without {exc}") from None
        except (TypeError, ValueError) as exc:
            raise ArtifactError(f"calibration map field of the wrong type ({exc})") from None
        return _same_id(data, made, "calibration map", "its weights")

    @classmethod
    def from_json(cls, text: str) -> CalibrationMap:
        """Parse an artifact's JSON text."""
        return cls.from_dict(_parsed(text))


#: The format tag of a file of maps keyed by what a site knows of itself (:class:`CalibrationMaps`); a file of one
#: map (:data:`FORMATS`) is read as one map for every site.
MAPS_FORMAT = "fedrca-calibration-maps/1"
#: What a map of a :class:`CalibrationMaps` may be keyed by: the nominal rows its site's detectors were trained on
#: (the smallest over the plants: :func:`fedrca.rca.engine.training_rows`) and the site's published flag epsilon
#: (``privacy.flag_epsilon``, inf: randomized response off).
KEYS = ("training rows", "flag epsilon")
#: The smallest value of each key (a range must start at or below it for the ranges to cover every site).
KEY_FLOOR = {"training rows": 1.0, "flag epsilon": 0.0}


def _in_range(value: float, low: float, high: float) -> bool:
    """``value`` in [low, high); an unbounded range (high = inf) holds inf too (flag epsilon inf)."""
    return low <= value < high or (math.isinf(high) and value == high)


def _range_text(key: str, low: float, high: float) -> str:
    top = "null" if math.isinf(high) else f"{high:g}"
    return f"{key!r} [{low:g}, {top}]"


@dataclass(frozen=True)
class CalibrationMaps:
    """Calibration maps keyed by what a site knows of itself: each map serves the sites whose training rows (and flag
    epsilon) fall in its ranges, and the ranges of a file cover every site exactly once.

    A map fitted on the fault library at one training size says how far to trust the engine's evidence *at that
    size*: detectors trained on fewer nominal rows false-alarm more and name a wrong root more often, so one map pooled
    over sizes is too confident at one and too cautious at the other (docs/rca.md, "What the probabilities mean"). The
    RCA side knows its plants' training rows from what they publish (:func:`fedrca.rca.engine.training_rows`) and its
    flag epsilon from the configuration; :meth:`select` picks the map.

    Attributes
    ----------
    maps : the maps (same plants, same features)
    ranges : per map, ``{key: (low, high)}`` for the keys it is restricted by (:data:`KEYS`; a key left out: every
        value), each the half-open [low, high), high = inf unbounded (flag epsilon: inf included)
    name : the file's name
    fitted_on, scores : what the fit saw and its cross-validated figures, for the record
    id : ``<name>-<digest>`` of the maps' ids and ranges
    """

    maps: tuple[CalibrationMap, ...]
    ranges: tuple[Mapping[str, tuple[float, float]], ...]
    name: str = "calibration"
    fitted_on: Mapping[str, Any] = field(default_factory=dict)
    scores: Mapping[str, Any] = field(default_factory=dict)
    id: str = field(init=False)

    def __post_init__(self) -> None:
        maps, ranges = tuple(self.maps), tuple({str(k): (float(lo), float(hi)) for k, (lo, hi) in r.items()}
                                               for r in self.ranges)  # fmt: skip
        if not maps or len(maps) != len(ranges):
            raise ArtifactError(f"calibration maps: {len(maps)} maps and {len(ranges)} ranges; one range per map")
        for i, r in enumerate(ranges):
            for key, (low, high) in r.items():
                if key not in KEYS:
                    raise ArtifactError(f"calibration maps[{i}]: key {key!r}; a map is keyed by {', '.join(KEYS)}")
                if not (math.isfinite(low) and low < high):
                    raise ArtifactError(
                        f"calibration maps[{i}]: {_range_text(key, low, high)} must be [low, high] with low < high "
                        "(high null: no upper bound)"
                    )
        if len({m.plants for m in maps}) > 1:
            raise ArtifactError(f"calibration maps of different plants {sorted({m.plants for m in maps})}: one site")
        object.__setattr__(self, "maps", maps)
        object.__setattr__(self, "ranges", ranges)
        self._check_cover()
        content = [[m.id, {k: [lo, None if math.isinf(hi) else hi] for k, (lo, hi) in sorted(r.items())}]
               for m, r in zip(maps, ranges, strict=True)]  # fmt: skip
        digest = hashlib.sha256(json.dumps(content).encode()).hexdigest()[:12]
        object.__setattr__(self, "id", f"{self.name}-{digest}")

    def _check_cover(self) -> None:
        """Every site (every combination of key values) must have exactly one map: checked at one value per cell of
        the grid every range's bounds make (a range is a union of cells)."""
        keys = [k for k in KEYS if any(k in r for r in self.ranges)]
        points = []
        for k in keys:
            bounds = {KEY_FLOOR[k]} | {b for r in self.ranges if k in r for b in r[k] if math.isfinite(b)}
            points.append(sorted(b for b in bounds if b >= KEY_FLOOR[k]))
        for values in itertools.product(*points):
            site = dict(zip(keys, values, strict=True))
            held = [i for i, r in enumerate(self.ranges) if all(_in_range(site[k], *r[k]) for k in r)]
            where = " and ".join(f"{k} {v:g}" for k, v in site.items())
            if not held:
                raise ArtifactError(
                    f"calibration maps: no map for a site of {where}: the ranges of each key must cover every value "
                    f"from {', '.join(f'{k} {KEY_FLOOR[k]:g}' for k in keys)} up (the last range's high null)"
                )
            if len(held) > 1:
                raise ArtifactError(
                    f"calibration maps: maps {held} all serve a site of {where}: the ranges must not overlap "
                    "([low, high) each, the next one's low = this one's high)"
                )

    @classmethod
    def single(cls, calibration: CalibrationMap) -> CalibrationMaps:
        """One map for every site (a file of one map)."""
        return cls((calibration,), ({},), calibration.name, calibration.fitted_on, calibration.scores)

    @classmethod
    def of(cls, calibration: CalibrationMap | CalibrationMaps) -> CalibrationMaps:
        """``calibration`` as maps (one map: for every site)."""
        return calibration if isinstance(calibration, CalibrationMaps) else cls.single(calibration)

    @property
    def plants(self) -> tuple[str, ...]:
        """The plants of the site the maps were fitted for."""
        return self.maps[0].plants

    def keyed_by(self, key: str) -> bool:
        """Whether the map a site gets depends on ``key`` (:data:`KEYS`)."""
        return len(self.maps) > 1 and any(key in r for r in self.ranges)

    def check(self, plants: Sequence[str]) -> None:
        """Refuse a site whose plants differ from the ones the maps were fitted for."""
        self.maps[0].check(plants)

    def select(self, training_rows: float | None, flag_epsilon: float) -> CalibrationMap | None:
        """The map of a site whose detectors were trained on ``training_rows`` nominal rows (None: unknown) at flag
        epsilon ``flag_epsilon``; None when the training rows are unknown and the maps are keyed by them.

        Examples
        --------
        >>> w = (1.0,) + (0.0,) * (len(FEATURES) - 1)
        >>> few, many = CalibrationMap(w, ("a", "b"), name="few"), CalibrationMap(w, ("a", "b"), name="many")
        >>> maps = CalibrationMaps((few, many), ({"training rows": (1, 1200)}, {"training rows": (1200, math.inf)}))
        >>> maps.select(1000, math.inf).name, maps.select(2880, 2.0).name, maps.select(None, 2.0)
        ('few', 'many', None)
        """
        if training_rows is None and self.keyed_by("training rows"):
            return None
        site = {"flag epsilon": float(flag_epsilon)}
        if training_rows is not None:
            site["training rows"] = float(training_rows)
        for m, r in zip(self.maps, self.ranges, strict=True):
            if all(_in_range(site[k], *r[k]) for k in r if k in site):
                return m
        raise ArtifactError(f"calibration maps {self.id}: no map for {site}")  # the ranges cover every site

    def to_dict(self) -> dict[str, Any]:
        """The JSON artifact (a range's unbounded high as null); one map for every site: the map's own artifact
        (:data:`FORMAT`)."""
        if len(self.maps) == 1 and not self.ranges[0]:
            return self.maps[0].to_dict()
        return {
            "format": MAPS_FORMAT,
            "name": self.name,
            "id": self.id,
            "keys": [k for k in KEYS if self.keyed_by(k)],
            "maps": [
                {**{k: [lo, None if math.isinf(hi) else hi] for k, (lo, hi) in r.items()}, "map": m.to_dict()}
                for m, r in zip(self.maps, self.ranges, strict=True)
            ],
            "fitted_on": dict(self.fitted_on),
            "scores": dict(self.scores),
        }

    def to_json(self) -> str:
        """The artifact as indented JSON text."""
        return json.dumps(self.to_dict(), indent=1, allow_nan=False) + "\n"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CalibrationMaps:
        """Validate an artifact: a file of keyed maps (:data:`MAPS_FORMAT`) or of one map (:data:`FORMATS`, then one
        map for every site); :class:`ArtifactError` naming the key that is wrong and the fix."""
        if isinstance(data, Mapping) and data.get("format") in FORMATS:
            return cls.single(CalibrationMap.from_dict(data))
        if not isinstance(data, Mapping) or data.get("format") != MAPS_FORMAT:
            raise ArtifactError(f"not a calibration map (format {MAPS_FORMAT} or {FORMAT})")
        entries = data.get("maps")
        if not isinstance(entries, list) or not entries:
            raise ArtifactError("calibration maps: 'maps' must be a non-empty list of {ranges..., 'map': {...}}")
        maps, ranges = [], []
        for i, entry in enumerate(entries):
            if not isinstance(entry, Mapping) or "map" not in entry:
                raise ArtifactError(f"calibration maps[{i}]: an object with 'map' and its ranges ({', '.join(KEYS)})")
            unknown = sorted(set(entry) - {"map", *KEYS})
            if unknown:
                raise ArtifactError(
                    f"calibration maps[{i}]: unknown key(s) {unknown}; a map is keyed by {', '.join(KEYS)}"
                )
            r = {}
            for key in KEYS:
                if key not in entry:
                    continue
                value = entry[key]
                if not (isinstance(value, list) and len(value) == 2 and isinstance(value[0], int | float)
                        and not isinstance(value[0], bool) and (value[1] is None or (
                            isinstance(value[1], int | float) and not isinstance(value[1], bool)))):  # fmt: skip
                    raise ArtifactError(
                        f"calibration maps[{i}]: {key!r} must be [low, high] (numbers; high null: no upper bound), "
                        f"got {value!r}"
                    )
                r[key] = (float(value[0]), math.inf if value[1] is None else float(value[1]))
            try:
                maps.append(CalibrationMap.from_dict(entry["map"]))
            except ArtifactError as exc:
                raise ArtifactError(f"calibration maps[{i}]: {exc}") from None
            ranges.append(r)
        made = cls(tuple(maps), tuple(ranges), str(data.get("name", "calibration")),
                   dict(data.get("fitted_on", {})), dict(data.get("scores", {})))  # fmt: skip
        return _same_id(data, made, "calibration maps", "its maps and ranges")

    @classmethod
    def from_json(cls, text: str) -> CalibrationMaps:
        """Parse an artifact's JSON text (keyed maps, or one map)."""
        return cls.from_dict(_parsed(text))


def fit(
    x: ArrayLike,
    truth: ArrayLike,
    weight: ArrayLike,
    plants: Sequence[str],
    penalty: float = 1e-2,
    family: str = "features",
    **metadata: Any,
) -> CalibrationMap:
    """Fit the map on verdicts with known roots (:func:`fit_weights` over the columns :func:`design` makes of the
    :data:`FEATURES` for ``family``).

    Parameters
    ----------
    x : (N, M, F) features of N verdicts (:func:`features`)
    truth : (N, M) bool, the true roots of each verdict's incident (a set: any of them counts)
    weight : (N,) weight of each verdict (e.g. 1 / verdicts of its run, so every run counts once)
    plants : the site's plants (M)
    penalty : L2 penalty on the weights, relative to the total weight
    family : :data:`FAMILIES`: ``features`` (a map that names no plant) or ``plants`` (per-plant terms too: a map of
        this site's plants alone)
    metadata : ``fitted_on``, ``scores``, ``name`` of the map
    """
    X = np.asarray(x, dtype=np.float64)
    if X.ndim != 3 or X.shape[2] != len(FEATURES):
        raise ValueError(f"features (N, M, {len(FEATURES)}), truth (N, M) and weight (N,) expected")
    if len(plants) != X.shape[1]:
        raise ValueError(f"{len(plants)} plants for features of {X.shape[1]}")
    w = fit_weights(design(X, family), truth, weight, penalty)
    return CalibrationMap(
        tuple(w.tolist()),
        tuple(plants),
        metadata.get("fitted_on", {}),
        metadata.get("scores", {}),
        name=metadata.get("name", "calibration"),
        family=family,
    )


def fit_weights(x: ArrayLike, truth: ArrayLike, weight: ArrayLike, penalty: float = 1e-2) -> FloatArray:
    """The conditional logit's weights (F,) over any F features of N verdicts (x (N, M, F), truth (N, M), weight
    (N,) as in :func:`fit`; e.g. :data:`FEATURES` and their products with a part of a library, to fit one map per
    part shrunk toward a shared one).

    The loss is ``-sum_n weight_n log sum_{k in truth_n} P(root = k | x_n) + penalty W ||w||^2``
    (W = sum of the weights), convex in ``w``; scipy's L-BFGS with the exact gradient, started at the
    engine's own posterior (weight 1 on the first feature).
    """
    X = np.asarray(x, dtype=np.float64)
    T = np.asarray(truth, dtype=bool)
    v = np.asarray(weight, dtype=np.float64)
    if X.ndim != 3 or T.shape != X.shape[:2] or v.shape != X.shape[:1]:
        raise ValueError("features (N, M, F), truth (N, M) and weight (N,) expected")
    keep = T.any(axis=1)
    X, T, v = X[keep], T[keep], v[keep]
    total = float(v.sum()) or 1.0
    # the (N M, F) view makes both products one matrix-vector product (the fit is the calibration bench's time)
    flat = X.reshape(-1, X.shape[2])

    def loss(w: FloatArray) -> tuple[float, FloatArray]:
        # logits z (N, M); log P(k) = z_k - logsumexp(z); log P(truth) = logsumexp over the truth set
        z = (flat @ w).reshape(T.shape)
        top = z.max(axis=1, keepdims=True)
        ez = np.exp(z - top)
        p = ez / ez.sum(axis=1, keepdims=True)
        pt = np.where(T, p, 0.0)
        held = pt.sum(axis=1)
        nll = -float(np.sum(v * np.log(np.maximum(held, 1e-300)))) + penalty * total * float(w @ w)
        # d/dw -log sum_T p = sum_k (p_k - p_k 1[k in T] / held) x_k
        r = p - pt / np.maximum(held, 1e-300)[:, None]
        # grad = sum_n v_n sum_m r_nm x_nm
        grad = (v[:, None] * r).ravel() @ flat + 2.0 * penalty * total * w
        return nll, grad

    w0 = np.zeros(X.shape[2])
    w0[0] = 1.0  # start at the engine's own posterior
    from scipy.optimize import minimize  # at first use (a fit): a worker starts without it

    result = minimize(loss, w0, jac=True, method="L-BFGS-B")
    return np.asarray(result.x, dtype=np.float64)


def expected_calibration_error(confidence: ArrayLike, correct: ArrayLike, weight: ArrayLike | None = None,
                               bins: int = 10) -> float:  # fmt: skip
    """ECE = sum over equal-width confidence bins of (bin weight share) x |accuracy - mean confidence|.

    Examples
    --------
    >>> round(expected_calibration_error([0.9, 0.9, 0.6, 0.6], [1, 1, 1, 0]), 12)
    0.1
    """
    table = reliability(confidence, correct, weight, bins)
    total = sum(row["weight"] for row in table)
    if not total:
        return float("nan")
    return float(sum(row["weight"] / total * abs(row["accuracy"] - row["confidence"]) for row in table))


def reliability(
    confidence: ArrayLike, correct: ArrayLike, weight: ArrayLike | None = None, bins: int = 10
) -> list[dict[str, float]]:
    """The reliability diagram's bins: for each non-empty bin of equal width in [0, 1], its lower and
    upper edge, the (weighted) mean confidence, the share correct and the weight in it."""
    c = np.asarray(confidence, dtype=np.float64)
    y = np.asarray(correct, dtype=np.float64)
    w = np.ones_like(c) if weight is None else np.asarray(weight, dtype=np.float64)
    # bin b holds (b/bins, (b+1)/bins]; a confidence of exactly 0 goes to the first bin
    b = np.clip(np.ceil(c * bins).astype(np.int64) - 1, 0, bins - 1)
    rows = []
    for k in range(bins):
        sel = b == k
        total = float(w[sel].sum())
        if total <= 0:
            continue
        rows.append(
            {
                "low": k / bins,
                "high": (k + 1) / bins,
                "confidence": float(np.sum(w[sel] * c[sel]) / total),
                "accuracy": float(np.sum(w[sel] * y[sel]) / total),
                "weight": total,
            }
        )
    return rows


def fit_thresholds(
    probabilities: ArrayLike,
    truth: ArrayLike,
    named: ArrayLike,
    weight: ArrayLike,
    groups: ArrayLike | None = None,
    levels: Sequence[float] = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95),
    grid: int = 100,
    rule: str = "mass",
) -> tuple[tuple[float, float], ...]:
    """The set thresholds of a map (:attr:`CalibrationMap.thresholds`): for each coverage level c, the threshold t
    on a grid of ``grid`` steps in [0, 1] that gives the smallest sets of the ``rule`` (:data:`RULES`) holding a true
    root on at least c of the verdicts, by weight, in every group (split-conformal calibration of the set; every run
    weighing one when ``weight`` = 1 / its verdicts): ``mass``, the smallest t in (0, 1] the sets (the named root
    first, then the most probable plants) must reach; ``plant``, the largest t a plant other than the named root
    needs to join it.

    Parameters
    ----------
    probabilities : (N, M) calibrated probabilities of N verdicts, from maps that did not see them
    truth : (N, M) bool, the true roots of each verdict's incident
    named : (N,) index of each verdict's named root
    weight : (N,) weight of each verdict
    groups : (N,) a label per verdict (e.g. the library's setting): the coverage must hold in each; None: one group
    levels : the coverage levels (increasing)

    Examples
    --------
    >>> p = np.array([[0.6, 0.3, 0.1]] * 10); truth = np.zeros((10, 3), bool); truth[:, 0] = True
    >>> fit_thresholds(p, truth, np.zeros(10, int), np.ones(10), levels=(0.9,))
    ((0.9, 0.01),)
    >>> truth[:5] = [False, True, False]  # half the verdicts: the second plant (0.3) is the root
    >>> fit_thresholds(p, truth, np.zeros(10, int), np.ones(10), levels=(0.5, 0.9), rule="plant")
    ((0.5, 1.0), (0.9, 0.3))
    """
    # the search of coverage_by_threshold's table of these verdicts: the pooled tables of several sets of verdicts
    # (bench/rca_calibration.py, the inner folds of the nested cross-validation) are searched the same way
    table = coverage_by_threshold(probabilities, truth, named, weight, groups, grid, rule)
    return thresholds_of_coverage(table, levels, grid, rule)


def threshold_steps(grid: int = 100, rule: str = "mass") -> FloatArray:
    """The candidate thresholds of :func:`fit_thresholds`, in the order it tries them (from the smallest sets up):
    ``mass`` 1/grid .. 1 increasing, ``plant`` 1 .. 0 decreasing.

    >>> threshold_steps(4, "mass").tolist(), threshold_steps(4, "plant").tolist()
    ([0.25, 0.5, 0.75, 1.0], [1.0, 0.75, 0.5, 0.25, 0.0])
    """
    if rule not in RULES:
        raise ValueError(f"set rule {rule!r}: one of {', '.join(RULES)}")
    return np.arange(1, grid + 1) / grid if rule == "mass" else np.arange(grid, -1, -1) / grid


def coverage_by_threshold(
    probabilities: ArrayLike,
    truth: ArrayLike,
    named: ArrayLike,
    weight: ArrayLike,
    groups: ArrayLike | None = None,
    grid: int = 100,
    rule: str = "mass",
) -> dict[Any, tuple[FloatArray, float]]:
    """Per group: the weight of the verdicts whose set of the ``rule`` at each of the :func:`threshold_steps` holds a
    true root (S,), and the group's total weight. Tables of several sets of verdicts add up (the covered weights and
    the totals of a label) into the table of all of them: :func:`thresholds_of_coverage` fits on either.

    Parameters are :func:`fit_thresholds`'; ``groups`` None: one group, labelled None.
    """
    steps = threshold_steps(grid, rule)
    P = np.asarray(probabilities, dtype=np.float64)
    T = np.asarray(truth, dtype=bool)
    root = np.asarray(named, dtype=np.int64)
    w = np.asarray(weight, dtype=np.float64)
    labels = np.full(len(P), None, dtype=object) if groups is None else np.asarray(groups)
    n = np.arange(len(P))
    # the set reaching t holds a true root iff the mass taken before the first true plant is below t: order the
    # plants as the set does (named first, then by probability) and find the mass before the first true one
    rest = np.where(np.arange(P.shape[1])[None, :] == root[:, None], np.inf, P)
    order = np.concatenate([root[:, None], np.argsort(-rest, axis=1, kind="stable")[:, 1:]], axis=1)
    ranked = P[n[:, None], order]
    # a set never holds more than MAX_CANDIDATES plants (fedrca.rca.explain.candidate_set)
    true_ranked = T[n[:, None], order] & (np.arange(P.shape[1]) < MAX_CANDIDATES)[None, :]
    if rule == "mass":
        before = np.cumsum(ranked, axis=1) - ranked
        # mass before the first true plant (inf when no plant of positive probability is true: never held)
        score = np.where(true_ranked & (ranked > 0), before, np.inf).min(axis=1)
    else:
        # plant: the set holds a true root iff the named root is one, or a true plant among the first
        # MAX_CANDIDATES - 1 others has a probability of at least t (the most probable true one decides)
        named_true = T[n, root] & (P[n, root] > 0)
        others_true = true_ranked[:, 1:] & (ranked[:, 1:] > 0)
        score = np.where(named_true, np.inf, np.where(others_true, ranked[:, 1:], -np.inf).max(
            axis=1, initial=-np.inf))  # fmt: skip
    out: dict[Any, tuple[FloatArray, float]] = {}
    for label in dict.fromkeys(labels.tolist()):
        mine = labels == label if groups is not None else np.ones(len(P), dtype=bool)
        s, v = score[mine], w[mine]
        # the same sums, step by step, as the search of one table always made (the same floats: the same thresholds)
        held = [np.sum(v[s < t - 1e-9]) if rule == "mass" else np.sum(v[s >= t - 1e-12]) for t in steps]
        out[label] = (np.asarray(held, dtype=np.float64), float(np.sum(v)))
    return out


def add_coverage(
    tables: Sequence[Mapping[Any, tuple[FloatArray, float]]],
) -> dict[Any, tuple[FloatArray, float]]:
    """The :func:`coverage_by_threshold` table of the verdicts of several tables together (per label, the sums)."""
    out: dict[Any, tuple[FloatArray, float]] = {}
    for table in tables:
        for label, (held, total) in table.items():
            if label in out:
                out[label] = (out[label][0] + held, out[label][1] + total)
            else:
                out[label] = (np.array(held, dtype=np.float64), float(total))
    return out


def thresholds_of_coverage(
    table: Mapping[Any, tuple[FloatArray, float]],
    levels: Sequence[float] = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95),
    grid: int = 100,
    rule: str = "mass",
) -> tuple[tuple[float, float], ...]:
    """For each coverage level c, the first of the :func:`threshold_steps` (the smallest sets) whose sets hold a true
    root on at least c of the weight in every group of ``table`` (:func:`coverage_by_threshold`); none: 1 (``mass``)
    or 0 (``plant``)."""
    steps = threshold_steps(grid, rule)
    out = []
    for level in levels:
        chosen = 1.0 if rule == "mass" else 0.0
        for j, t in enumerate(steps):
            if all(held[j] >= level * total - 1e-12 for held, total in table.values()):
                chosen = float(t)
                break
        out.append((float(level), round(chosen, 6)))
    # thresholds increase (mass) or decrease (plant) with the level by construction; ties kept
    return tuple(out)


def _parsed(text: str) -> Any:
    """A calibration file's JSON; :class:`ArtifactError` when it is not JSON."""
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ArtifactError(f"calibration map is not JSON ({exc})") from None


_Made = TypeVar("_Made", "CalibrationMap", "CalibrationMaps")


def _same_id(data: Mapping[str, Any], made: _Made, what: str, of: str) -> _Made:
    """``made`` when the file's ``id`` (if it gives one) is the id of what it holds; :class:`ArtifactError`
    otherwise (a file edited by hand)."""
    if "id" in data and data["id"] != made.id:
        raise ArtifactError(f"{what} id {data['id']!r} does not match {of} ({made.id}): edited by hand?")
    return made
