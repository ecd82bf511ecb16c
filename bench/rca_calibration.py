"""Calibrated root probabilities and candidate sets on the fault library (issue 35): the figures of docs/faults.md.

``bench/bench_faults.py`` runs fedrca on every library run in four settings (2,880 or 500 training
rows, flag epsilon inf or 2) and keeps, for every verdict, the calibration features of the engine's
evidence when it issued it (:func:`fedrca.rca.calibration.features`). This module

1. **collects** the verdicts that name a root from the fault's onset on, in the runs a setting
   detects (FDR >= 0.5) whose IDV has a unit truth (:func:`collect`); each run counts once (its
   verdicts share a weight of 1);
2. **cross-validates** the calibration map (:func:`cross_validate`): the runs are split by fault seed
   and by IDV group (IDV mod 4), and every run's probabilities come from a map fitted on the runs of
   the *other* seeds *and* the other IDV groups (one map per fold, the four settings pooled), its set
   thresholds (:func:`fedrca.rca.calibration.fit_thresholds`) from the same cross-validation inside
   the fold's runs: no figure is scored on a run, a seed or a disturbance its map has seen;
3. **scores** probabilities (:func:`score`): the expected calibration error of the named root's
   probability (10 equal bins, run-weighted) and what it would be were the probabilities exactly
   calibrated (:func:`ece_floor`), the reliability diagram, the candidate sets at the configured level
   (the named root first, then the map's set rule at its threshold for it:
   :meth:`fedrca.rca.calibration.CalibrationMap.candidates`) and, per run, the set an operator is shown
   (the plants in at least half of its verdicts' sets): how often it holds a true root, its mean
   size, on the stream-4 (IDV 2, 8) and kinetics (IDV 13) faults apart;
4. makes the **peers** into sets on the same runs: the first-alarm peer's first k plants to alarm
   (:func:`first_alarm_sets`), and the centralised RBC-PCA reference's k units of the largest
   contribution per alarm row (:func:`ranking_sets`; its contributions, normalised per row, are its
   probabilities); both at the smallest k that holds a true root as often as fedrca's sets;
5. **fits** the maps shipped for TEP (:func:`final_maps`: one per training size, each on every run of its
   settings, keyed by the training rows the RCA side learns from its plants; their thresholds on the
   out-of-fold probabilities of every inner fold of the nested cross-validation together: the maps each
   fold's own thresholds come from, so that the threshold the file carries is fitted as the thresholds the
   figures are scored with, on maps of as many runs, :data:`SHIPPED_THRESHOLDS_FROM`), and scores the same
   out-of-fold probabilities at the file's threshold too (``bench_faults.calibration_section``).

Every map weighs the plant-agnostic features (the family ``features``, what ships) or, the family ``plants``
(:data:`fedrca.rca.calibration.FAMILIES`), also a bias and the ``named`` and ``share`` features of each plant: a map
of one site's plants, fitted per site. Both go through the same nested cross-validation (:func:`family_figures`:
the map *and* the set threshold of every run fitted on the runs of the other seeds and IDV groups alone);
``bench/bench_faults.py --compare-families plants`` scores the second next to the first.

``python bench/bench_faults.py --calibration config/tep.calibration.json`` writes the shipped map.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedrca.rca.calibration import (
    FAMILIES,
    FEATURES,
    KEY_FLOOR,
    CalibrationMap,
    CalibrationMaps,
    add_coverage,
    candidate_set,
    coverage_by_threshold,
    design,
    expected_calibration_error,
    fit,
    fit_weights,
    reliability,
    thresholds_of_coverage,
)
from fedrca.rca.evidence import softmax

__all__ = [
    "FAMILIES",
    "IDV_GROUPS",
    "KINETICS",
    "MAPS_BY",
    "SET_RULE",
    "STREAM_4",
    "THRESHOLDS_BY",
    "FamilyFigures",
    "Samples",
    "bounds",
    "collect",
    "cross_validate",
    "family_bar",
    "family_figures",
    "final_map",
    "final_maps",
    "first_alarm_sets",
    "ranking_sets",
    "reliability_figure",
    "score",
    "setting_key",
    "threshold_key",
]

#: the stream-4 composition faults and the kinetics drift: the faults the published flags cannot separate
STREAM_4, KINETICS = (2, 8), (13,)
#: runs are held out by fault seed and by IDV group (IDV mod IDV_GROUPS)
IDV_GROUPS = 4
#: the L2 penalty of the fit (relative to the total weight)
PENALTY = 1e-2
#: the coverage levels a map's set thresholds are fitted for (rca.coverage must be one of them, or between two)
LEVELS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
#: how the candidate sets are built (fedrca.rca.calibration.RULES): every plant of probability at least the threshold
#: joins the named root (the mass rule, the most probable plants until their sum reaches it, made larger sets at the
#: same coverage on the library: docs/rca.md, "The set thresholds")
SET_RULE = "plant"
#: what one set threshold or one map is fitted for in the cross-validation (:func:`threshold_key`)
THRESHOLDS_BY = ("pooled", "rows", "setting")
#: what one map is fitted for: as THRESHOLDS_BY, or one per training size shrunk toward a shared one, or one per setting
#: shrunk toward its training size's (_fit_keyed)
MAPS_BY = (*THRESHOLDS_BY, "rows-shrunk", "setting-shrunk")
#: what config/tep.calibration.json ships: one map per training size (the RCA side learns its plants' training rows
#: from what they publish: fedrca.rca.engine.training_rows), one set threshold for every setting (a threshold per
#: training size collapses at 2,880 rows: docs/rca.md, "A threshold or a map per setting")
SHIPPED_MAPS, SHIPPED_THRESHOLDS = "rows", "pooled"
#: what the shipped set thresholds are fitted on (:func:`final_maps`): ``inner``, the inner folds of the nested
#: cross-validation pooled (every (outer, inner) fold's out-of-fold probabilities, from maps that saw neither of two
#: seeds and two IDV groups: the maps whose thresholds each fold's figures are scored with); ``outer``, the
#: cross-validation's out-of-fold probabilities (maps that saw all but one seed and one IDV group): a threshold of
#: maps one IDV group richer than those the figures' thresholds come from (docs/rca.md, "Which threshold ships")
THRESHOLDS_FROM = ("inner", "outer")
SHIPPED_THRESHOLDS_FROM = "inner"
#: the family of the shipped maps (fedrca.rca.calibration.FAMILIES): ``features``, plant-agnostic maps. The family
#: ``plants`` (per-plant terms: a map of TEP's five units alone, fitted per site) is scored by the same nested
#: cross-validation (``bench/bench_faults.py --family plants``, or next to the shipped family with
#: ``--compare-families plants``) and written with ``--family plants --calibration PATH``; it ships only if its
#: held-out figures meet the bars of issue 35 (docs/rca.md, "A map per plant")
SHIPPED_FAMILY = "features"
#: how finely each part of the library is cut (a set threshold's part must hold a whole map's)
_GRAIN = {"pooled": 0, "rows": 1, "rows-shrunk": 1, "setting": 2, "setting-shrunk": 2}


def shippable(maps_by: str, thresholds_by: str) -> bool:
    """Whether maps per ``maps_by`` with set thresholds per ``thresholds_by`` make one file (every map has one
    threshold table: the thresholds are not fitted per finer parts than the maps).

    >>> shippable("rows", "pooled"), shippable("pooled", "rows")
    (True, False)
    """
    return _GRAIN[thresholds_by] <= _GRAIN[maps_by]


@dataclass(frozen=True)
class Samples:
    """The scored verdicts of one or more settings, one row per verdict (N).

    ``x`` (N, M, F) features, ``truth`` (N, M) the IDV's true units, ``root`` (N,) the named root's index,
    ``weight`` (N,) 1 / verdicts of its run, ``run`` (N,) a run id, ``setting``/``idv``/``seed`` (N,).
    """

    x: np.ndarray
    truth: np.ndarray
    root: np.ndarray
    weight: np.ndarray
    run: np.ndarray
    setting: np.ndarray
    idv: np.ndarray
    seed: np.ndarray

    @classmethod
    def from_rows(cls, rows: Sequence[tuple[Any, ...]]) -> Samples:
        """The samples of per-verdict rows ``(x, truth, root, weight, run, setting, idv, seed)`` (the fields in order;
        none: empty samples of no plant)."""
        if not rows:
            empty = np.zeros((0, 0, len(FEATURES)))
            return cls(empty, np.zeros((0, 0), bool), *(np.zeros(0, int) for _ in range(6)))  # type: ignore[arg-type]
        return cls(*(np.asarray(column) for column in zip(*rows, strict=True)))

    def __len__(self) -> int:
        return len(self.root)

    def where(self, mask: np.ndarray) -> Samples:
        return Samples(*(getattr(self, f)[mask] for f in self.__dataclass_fields__))

    @property
    def engine(self) -> np.ndarray:
        """(N, M) the engine's own root posterior (uncalibrated: the first feature is its log)."""
        return softmax(self.x[:, :, 0])


def collect(
    outputs: Mapping[str, Mapping[tuple[int, int], Any]],
    truth: Mapping[int, frozenset[str] | None],
    onset: int,
    detected: float = 0.5,
) -> Samples:
    """The verdicts naming a root from ``onset`` on, in the detected runs with a unit truth, of every setting
    (``outputs[setting][(idv, seed)]`` a monitor output with ``features``)."""
    rows: list[tuple[Any, ...]] = []
    run_id = 0
    for setting, runs in outputs.items():
        for (idv, seed), out in sorted(runs.items()):
            units = truth.get(idv)
            if units is None or out.features is None or len(out.alarm) <= onset:
                continue
            if float(np.mean(out.alarm[onset:])) < detected:
                continue
            plants = list(out.plants)
            picked = [i for i, v in enumerate(out.verdicts) if v.seq >= onset and v.root is not None]
            if not picked:
                continue
            mask = np.array([p in units for p in plants])
            for i in picked:
                root = plants.index(out.verdicts[i].root)
                rows.append((out.features[i], mask, root, 1.0 / len(picked), run_id, setting, idv, seed))
            run_id += 1
    return Samples.from_rows(rows)


def _fit(
    samples: Samples, plants: Sequence[str], thresholds: tuple[tuple[float, float], ...] = (),
    family: str = "features", **metadata: Any,
) -> CalibrationMap:  # fmt: skip
    m = fit(samples.x, samples.truth, samples.weight, plants, penalty=PENALTY, family=family, **metadata)
    return dataclasses.replace(m, thresholds=thresholds) if thresholds else m


def _folds(samples: Samples) -> Iterable[tuple[np.ndarray, np.ndarray]]:
    """(train, test) masks: every fault seed x IDV group held out in turn; train = the other seeds and the other
    groups (with one fault seed, as in the smoke run, the other groups alone)."""
    group = samples.idv % IDV_GROUPS
    one_seed = len(np.unique(samples.seed)) < 2
    for s in np.unique(samples.seed):
        for g in np.unique(group):
            test = (samples.seed == s) & (group == g)
            train = (group != g) & ((samples.seed != s) | one_seed)
            if test.any():
                yield train, test


def _fit_keyed(samples: Samples, plants: Sequence[str], by: str, family: str = "features") -> dict[str, CalibrationMap]:
    """One map per part of the library (:func:`threshold_key`: ``pooled`` one for every setting); ``rows-shrunk``:
    one per training size, all fitted at once as a shared map plus one difference per training size (the features
    and their products with "this verdict's training size is k", every weight under the same L2 penalty), so a
    size's map leaves the shared one only as far as its own runs show; ``setting-shrunk``: one per setting, those of
    each training size fitted at once in the same way (a map of the size plus one difference per flag epsilon).
    ``family``: what each map weighs (:data:`FAMILIES`; :func:`fedrca.rca.calibration.design`)."""
    keys = np.array([threshold_key(s, by) for s in samples.setting])
    parts = [str(k) for k in np.unique(keys)]
    if by not in ("rows-shrunk", "setting-shrunk"):
        return {k: _fit(samples.where(keys == k), plants, family=family) for k in parts}
    if by == "rows-shrunk":
        return _fit_shrunk(samples, plants, keys, parts, family)
    sizes = np.array([threshold_key(s, "rows") for s in samples.setting])
    out: dict[str, CalibrationMap] = {}
    for size in np.unique(sizes):
        mine = sizes == size
        out.update(_fit_shrunk(samples.where(mine), plants, keys[mine], [k for k in parts if k in set(keys[mine])],
                               family))  # fmt: skip
    return out


def _fit_shrunk(
    samples: Samples, plants: Sequence[str], keys: np.ndarray, parts: Sequence[str], family: str = "features"
) -> dict[str, CalibrationMap]:
    """One map per part (``keys`` (N,) the part of each verdict) fitted at once: a shared map plus one difference per
    part, every weight under the same L2 penalty (each over the columns of ``family``)."""
    x = design(samples.x, family)
    F = x.shape[2]
    # x_joint = [x, x 1[part 1], ..., x 1[part K]]; the map of part k: w_shared + w_k
    joint = np.concatenate([x] + [x * (keys == k)[:, None, None] for k in parts], axis=2)
    w = fit_weights(joint, samples.truth, samples.weight, PENALTY)
    return {k: CalibrationMap(tuple((w[:F] + w[F * (1 + i) : F * (2 + i)]).tolist()), tuple(plants), family=family)
            for i, k in enumerate(parts)}  # fmt: skip


def _apply_keyed(maps: Mapping[str, CalibrationMap], samples: Samples, by: str) -> np.ndarray:
    """(N, M) every verdict's probabilities from the map of its part of the library (NaN: no map for its part)."""
    probs = np.full(samples.truth.shape, np.nan)
    keys = np.array([threshold_key(s, by) for s in samples.setting])
    for k, m in maps.items():
        probs[keys == k] = m.apply(samples.x[keys == k])
    return probs


class _Fits:
    """The maps of :func:`_fit_keyed` on subsets of one library, each fitted once: an inner fold of the nested
    cross-validation fits on the runs of neither of two seeds and neither of two IDV groups, and the (outer, inner)
    folds (s, g)/(s', g'), (s', g')/(s, g), (s, g')/(s', g) and (s', g)/(s, g') all fit on those same runs (the same
    rows in the same order, hence the same weights:
    ``tests/bench/test_rca_calibration.py::test_shared_inner_fits_are_the_fits_of_each_fold``)."""

    def __init__(self, samples: Samples, plants: Sequence[str], maps_by: str, family: str = "features") -> None:
        self.samples, self.plants, self.maps_by, self.family = samples, plants, maps_by, family
        self._done: dict[bytes, dict[str, CalibrationMap]] = {}

    def __call__(self, mask: np.ndarray) -> dict[str, CalibrationMap]:
        """The maps fitted on the rows ``mask`` (N,) of the library."""
        key = np.packbits(mask).tobytes()
        if key not in self._done:
            self._done[key] = _fit_keyed(self.samples.where(mask), self.plants, self.maps_by, self.family)
        return self._done[key]


def _out_of_fold(
    samples: Samples, plants: Sequence[str], maps_by: str = "pooled", fits: _Fits | None = None,
    rows: np.ndarray | None = None, family: str = "features",
) -> np.ndarray:  # fmt: skip
    """(N, M) every verdict's probabilities from the logit of a map that saw neither its seed nor its IDV group
    (NaN where no such map exists). ``fits``: the maps of a library ``samples`` is the part ``rows`` of (each
    fitted once over the whole nested cross-validation, of the family it was made for); without them, maps of
    ``family``."""
    probs = np.full(samples.truth.shape, np.nan)
    for train, test in _folds(samples):
        if not train.any():
            continue
        if fits is None or rows is None:
            fitted = _fit_keyed(samples.where(train), plants, maps_by, family)
        else:
            mask = np.zeros(len(fits.samples), dtype=bool)
            mask[rows[train]] = True
            fitted = fits(mask)
        probs[test] = _apply_keyed(fitted, samples.where(test), maps_by)
    return probs


def threshold_key(setting: str, by: str) -> str:
    """The part of the library a set threshold or a map is fitted for (``by`` one of :data:`MAPS_BY`): ``pooled``
    one for every setting, ``rows`` (and ``rows-shrunk``) one per training size, ``setting`` (and
    ``setting-shrunk``) one per setting (a site knows its training size and flag epsilon)."""
    if by == "pooled":
        return "all"
    if by in ("rows", "rows-shrunk"):  # settings are named fedrca-<rows>-<eps>
        return setting.split("-")[1]
    if by in ("setting", "setting-shrunk"):
        return setting
    raise ValueError(f"a map or a set threshold by {by!r}: one of {', '.join(MAPS_BY)}")


Coverage = dict[Any, tuple[np.ndarray, float]]


def _coverage(samples: Samples, probs: np.ndarray, rule: str = "mass") -> Coverage:
    """The :func:`fedrca.rca.calibration.coverage_by_threshold` table of the verdicts with probabilities, one group per
    setting."""
    known = ~np.isnan(probs).any(axis=1)
    if not known.any():
        return {}
    part = samples.where(known)
    return coverage_by_threshold(probs[known], part.truth, part.root, part.weight, groups=part.setting, rule=rule)


def _tables(coverage: Coverage, by: str = "pooled", rule: str = "mass") -> dict[str, tuple[tuple[float, float], ...]]:
    """The set thresholds of a coverage table (:func:`_coverage`, or several added up), per part of the library
    (:func:`threshold_key`): the coverage must hold in every setting of the part."""
    parts: dict[str, Coverage] = {}
    for setting, entry in coverage.items():
        parts.setdefault(threshold_key(str(setting), by), {})[setting] = entry
    return {key: thresholds_of_coverage(parts[key], LEVELS, rule=rule) for key in sorted(parts)}


def _thresholds(
    samples: Samples, probs: np.ndarray, by: str = "pooled", rule: str = "mass"
) -> dict[str, tuple[tuple[float, float], ...]]:
    """The set thresholds (:func:`fedrca.rca.calibration.fit_thresholds`) of out-of-fold probabilities, per part of
    the library (:func:`threshold_key`): the coverage must hold in every setting of the part."""
    return _tables(_coverage(samples, probs, rule), by, rule)


def cross_validate(
    samples: Samples, plants: Sequence[str], thresholds_by: str = "pooled", maps_by: str = "pooled",
    rule: str = SET_RULE, inner: list[Coverage] | None = None, family: str = "features",
) -> tuple[np.ndarray, list[CalibrationMap]]:  # fmt: skip
    """(N, M) the calibrated probabilities of every verdict from a map that saw neither its seed nor its IDV
    group (with one fault seed, as in the smoke run, the IDV groups alone), and the map of each verdict's fold
    (its set thresholds fitted by the same cross-validation inside the fold's runs: no threshold has seen the
    runs it is scored on). ``maps_by`` and ``thresholds_by`` (:func:`threshold_key`) say what one map and one
    threshold are fitted for: ``pooled`` (the four settings pooled), ``rows``, ``setting`` or (maps only)
    ``rows-shrunk``; ``rule`` how a set is built (:data:`fedrca.rca.calibration.RULES`). ``inner``: a list each
    fold's coverage table (:func:`_coverage` of its inner out-of-fold probabilities) is appended to, for the
    shipped thresholds (:func:`final_maps`, :data:`SHIPPED_THRESHOLDS_FROM`). ``family``: what every map weighs
    (:data:`FAMILIES`). Nothing of a held-out run reaches its fold's map or threshold: its truth, changed, changes none
    of its probabilities or thresholds (``tests/bench/test_rca_nested.py``)."""
    probs = np.full(samples.truth.shape, np.nan)
    maps: list[CalibrationMap | None] = [None] * len(samples)
    fits = _Fits(samples, plants, maps_by, family)
    for train, test in _folds(samples):
        if not train.any():
            raise SystemExit("bench_faults: calibration needs runs of two IDV groups to cross-validate")
        inside, outside = samples.where(train), samples.where(test)
        fitted = fits(train)
        coverage = _coverage(inside, _out_of_fold(inside, plants, maps_by, fits, np.flatnonzero(train)), rule)
        if inner is not None:
            inner.append(coverage)
        table = _tables(coverage, thresholds_by, rule)
        probs[test] = _apply_keyed(fitted, outside, maps_by)
        keyed: dict[tuple[str, str], CalibrationMap] = {}
        for i, setting in zip(np.flatnonzero(test), outside.setting, strict=True):
            key = (threshold_key(str(setting), maps_by), threshold_key(str(setting), thresholds_by))
            if key[0] not in fitted:
                raise SystemExit(f"bench_faults: no runs of {key[0]} to fit its map on in a fold")
            if key not in keyed:  # a part the fold's runs do not hold: its sets reach the coverage itself
                keyed[key] = dataclasses.replace(fitted[key[0]], thresholds=table.get(key[1], ()), rule=rule)
            maps[i] = keyed[key]
    return probs, maps  # type: ignore[return-value]


def setting_key(setting: str) -> tuple[int, float]:
    """(training rows, flag epsilon) of a setting named ``fedrca-<rows>-<eps>``.

    >>> setting_key("fedrca-500-2"), setting_key("fedrca-2880-inf")
    ((500, 2.0), (2880, inf))
    """
    _, rows, eps = setting.split("-")
    return int(rows), float(eps)


def _flip(epsilon: float) -> float:
    """P(a published flag is flipped) at flag epsilon ``epsilon`` (randomized response: 1 / (1 + e^eps); 0 at inf)."""
    return 0.0 if math.isinf(epsilon) else 1.0 / (1.0 + math.exp(epsilon))


def bounds(values: Sequence[float], key: str) -> list[tuple[float, float]]:
    """The ranges of the keyed maps (:class:`fedrca.rca.calibration.CalibrationMaps`) fitted at ``values`` (sorted):
    each serves the sites nearest its value, and together they cover every site. ``training rows``: nearest on a log
    scale (the bound between two fitted sizes is their geometric mean: a detector's nominal estimates err as one over
    the square root of its rows, a ratio of sizes is what moves them); ``flag epsilon``: nearest in the flip
    probability 1 / (1 + e^eps) (the bound between eps 2 and inf, flip 0.119 and 0, is eps 2.76).

    >>> bounds([500, 2880], "training rows")
    [(1.0, 1200.0), (1200.0, inf)]
    >>> bounds([2.0, math.inf], "flag epsilon")
    [(0.0, 2.76), (2.76, inf)]
    """
    cuts = []
    for a, b in itertools.pairwise(values):
        if key == "training rows":
            cuts.append(float(round(math.sqrt(a * b))))
        else:
            q = (_flip(a) + _flip(b)) / 2.0
            cuts.append(round(math.log((1.0 - q) / q), 2))
    edges = [KEY_FLOOR[key], *cuts, math.inf]
    return list(itertools.pairwise(edges))


def final_maps(
    samples: Samples, plants: Sequence[str], scores: Mapping[str, Any], fitted_on: Mapping[str, Any],
    probs: np.ndarray, rule: str = SET_RULE, maps_by: str = "pooled", thresholds_by: str = "pooled",
    inner: Sequence[Coverage] | None = None, family: str = "features",
) -> CalibrationMaps:  # fmt: skip
    """The maps shipped for TEP: one per part of the library (``maps_by``, :func:`threshold_key`; ``pooled``: one
    map, fitted on every verdict of every setting), each fitted on every verdict of its part, its set thresholds (of
    the set ``rule``, one table per ``thresholds_by`` part, which must not be finer than ``maps_by``) fitted on the
    coverage tables ``inner`` of :func:`cross_validate` added up (every inner fold of the nested cross-validation:
    the maps the cross-validated figures' thresholds come from) or, without them, on the cross-validated
    probabilities ``probs`` of every verdict of that part; the maps keyed by the training rows (and, per setting, the
    flag epsilon) they were fitted at, in the ranges :func:`bounds` gives; ``family``: what every map weighs
    (:data:`FAMILIES`; ``plants``: maps of these plants alone, named ``...-plants``)."""
    fitted = _fit_keyed(samples, plants, maps_by, family)
    # a plant-agnostic file is written as before families existed
    library = "tep-library" if family == "features" else f"tep-library-{family}"
    fitted_on = dict(fitted_on) if family == "features" else {**fitted_on, "family": family}
    if inner is None:
        tables = _thresholds(samples, probs, thresholds_by, rule)
    else:
        tables = _tables(add_coverage(inner), thresholds_by, rule)
    settings = sorted({str(s) for s in samples.setting}, key=setting_key)
    rows = sorted({setting_key(s)[0] for s in settings})
    epsilons = sorted({setting_key(s)[1] for s in settings})
    row_range = dict(zip(rows, bounds(rows, "training rows"), strict=True))
    eps_range = dict(zip(epsilons, bounds(epsilons, "flag epsilon"), strict=True))
    maps, ranges = [], []
    members_of = {part: [s for s in settings if threshold_key(s, maps_by) == part] for part in fitted}
    # the maps in the order of their training rows (and flag epsilon): the order of their ranges
    for part in sorted(fitted, key=lambda p: setting_key(members_of[p][0])):
        m, members = fitted[part], members_of[part]
        table_keys = {threshold_key(s, thresholds_by) for s in members}
        if len(table_keys) != 1:
            raise SystemExit(f"bench_faults: set thresholds by {thresholds_by} are finer than maps by {maps_by}")
        n_rows, eps = setting_key(members[0])
        r: dict[str, tuple[float, float]] = {}
        name = library
        if maps_by != "pooled":
            r["training rows"] = row_range[n_rows]
            name += f"-rows{n_rows}"
        if maps_by in ("setting", "setting-shrunk"):
            r["flag epsilon"] = eps_range[eps]
            name += f"-eps{eps:g}"
        mine = np.isin(samples.setting, members)
        part_on: dict[str, Any] = {"settings": members, "runs": len(np.unique(samples.run[mine])),
                                   "verdicts": int(mine.sum())}  # fmt: skip
        if maps_by != "pooled":
            part_on["training rows"] = n_rows
        if maps_by in ("setting", "setting-shrunk"):
            part_on["flag epsilon"] = "inf" if math.isinf(eps) else eps
        cv = scores.get("cross-validated", {})
        part_scores: dict[str, Any] = {"cross-validated": {s: v for s, v in cv.items() if s in members}}
        if maps_by == "pooled":  # one map for every site: its file is the map itself, with what the fit saw
            part_on, part_scores = dict(fitted_on), dict(scores)
        maps.append(dataclasses.replace(m, name=name, fitted_on=part_on, scores=part_scores, rule=rule,
                                        thresholds=tables.get(next(iter(table_keys)), ())))  # fmt: skip
        ranges.append(r)
    if maps_by == "pooled":
        return CalibrationMaps.single(maps[0])
    return CalibrationMaps(tuple(maps), tuple(ranges), library, dict(fitted_on, maps=maps_by,
                           thresholds=thresholds_by), dict(scores))  # fmt: skip


def final_map(
    samples: Samples, plants: Sequence[str], scores: Mapping[str, Any], fitted_on: Mapping[str, Any],
    probs: np.ndarray, rule: str = SET_RULE,
) -> CalibrationMap:  # fmt: skip
    """The one map fitted on every verdict of every setting, its set thresholds (of the set ``rule``) fitted on the
    cross-validated probabilities ``probs`` of every verdict (:func:`final_maps` pooled)."""
    return final_maps(samples, plants, scores, fitted_on, probs, rule).maps[0]


def _run_sets(
    samples: Samples, probs: np.ndarray, level: float, maps: Sequence[CalibrationMap] | None
) -> dict[int, tuple[list[int], list[list[int]]]]:
    """Per run: the set an operator is shown (plants in at least half of its verdicts' sets) and every set (each
    verdict's set: its map's at ``level``, :meth:`CalibrationMap.candidates`; without maps, reaching ``level``)."""
    out: dict[int, tuple[list[int], list[list[int]]]] = {}
    for run in np.unique(samples.run):
        idx = np.flatnonzero(samples.run == run)
        sets = [candidate_set(probs[i], level, first=int(samples.root[i])) if maps is None
                else maps[i].candidates(probs[i], level, first=int(samples.root[i])) for i in idx]  # fmt: skip
        shown = Counter(m for s in sets for m in s)
        majority = sorted(m for m, n in shown.items() if 2 * n >= len(sets))
        out[int(run)] = (majority, sets)
    return out


def score(
    samples: Samples, probs: np.ndarray, level: float, maps: Sequence[CalibrationMap] | None = None
) -> dict[str, Any]:
    """ECE, reliability bins, top-1 and the candidate sets' coverage and size of one setting's verdicts (each
    set its map's at ``level``, :meth:`CalibrationMap.candidates`; without maps, the smallest reaching ``level``)."""
    if not len(samples):
        return {}
    idx = np.arange(len(samples))
    confidence = probs[idx, samples.root]
    correct = samples.truth[idx, samples.root]
    reach = np.array([level if maps is None else maps[i].threshold(level) for i in idx])
    sets = _run_sets(samples, probs, level, maps)
    runs = sorted(sets)
    first = {int(r): int(np.flatnonzero(samples.run == r)[0]) for r in runs}
    holds = {r: bool(samples.truth[first[r]][sets[r][0]].any()) for r in runs}
    size = {r: len(sets[r][0]) for r in runs}
    per_verdict = np.array([bool(samples.truth[i][s].any()) for r in runs for i, s in zip(
        np.flatnonzero(samples.run == r), sets[r][1], strict=True)])  # fmt: skip
    verdict_w = np.concatenate([samples.weight[samples.run == r] for r in runs])
    majority = {
        r: Counter(samples.root[samples.run == r].tolist()).most_common(1)[0][0] for r in runs
    }  # ties: the first named
    top1 = {r: bool(samples.truth[first[r]][majority[r]]) for r in runs}

    def share(kind: Iterable[int], what: Mapping[int, bool]) -> tuple[float, int]:
        chosen = [r for r in runs if int(samples.idv[first[r]]) in set(kind)]
        return (float(np.mean([what[r] for r in chosen])) if chosen else float("nan")), len(chosen)

    stream4, n4 = share(STREAM_4, holds)
    kinetics, nk = share(KINETICS, holds)
    return {
        "runs": len(runs),
        "verdicts": len(samples),
        "ece": expected_calibration_error(confidence, correct, samples.weight),
        "reliability": reliability(confidence, correct, samples.weight),
        "top1": float(np.mean(list(top1.values()))),
        "coverage": float(np.mean(list(holds.values()))),
        "size": float(np.mean(list(size.values()))),
        "verdict coverage": float(np.average(per_verdict, weights=verdict_w)),
        "stream-4": stream4,
        "stream-4 runs": n4,
        "kinetics": kinetics,
        "kinetics runs": nk,
        "mean confidence": float(np.average(confidence, weights=samples.weight)),
        "threshold": float(np.average(reach, weights=samples.weight)),
        "thresholds": (float(reach.min()), float(reach.max())),
    }


def ece_interval(samples: Samples, probs: np.ndarray, draws: int = 400, seed: int = 0) -> tuple[float, float]:
    """A 90 % bootstrap interval of the ECE over runs (runs drawn with replacement): how much a library of
    this many runs can say."""
    rng = np.random.default_rng(seed)
    runs = np.unique(samples.run)
    idx = np.arange(len(samples))
    confidence, correct = probs[idx, samples.root], samples.truth[idx, samples.root]
    members = {r: np.flatnonzero(samples.run == r) for r in runs}
    values = []
    for _ in range(draws):
        picked = rng.choice(runs, size=len(runs), replace=True)
        rows = np.concatenate([members[r] for r in picked])
        values.append(expected_calibration_error(confidence[rows], correct[rows], samples.weight[rows]))
    return float(np.quantile(values, 0.05)), float(np.quantile(values, 0.95))


def ece_floor(samples: Samples, probs: np.ndarray, draws: int = 400, seed: int = 0) -> tuple[float, float, float]:
    """What the ECE of these probabilities would be were they exactly calibrated: the truth of every run drawn
    once (its verdicts share their evidence, so a run is right or wrong as a whole) with the run's mean
    probability of its named root; (mean, 5 %, 95 %) over ``draws``. An ECE at this floor is as calibrated as
    this many runs can show; a lower ECE needs sharper probabilities (more runs near 0 or 1), not a better map."""
    rng = np.random.default_rng(seed)
    idx = np.arange(len(samples))
    confidence = probs[idx, samples.root]
    runs, inverse = np.unique(samples.run, return_inverse=True)
    mean = np.bincount(inverse, samples.weight * confidence) / np.maximum(np.bincount(inverse, samples.weight), 1e-300)
    values = [
        expected_calibration_error(confidence, (rng.random(len(runs)) < mean)[inverse], samples.weight)
        for _ in range(draws)
    ]
    return float(np.mean(values)), float(np.quantile(values, 0.05)), float(np.quantile(values, 0.95))


@dataclass
class FamilyFigures:
    """The nested cross-validation of one family of maps on every setting of a library (:func:`family_figures`), and
    the file fitted on every run.

    Attributes
    ----------
    family : what every map weighs (:data:`FAMILIES`)
    probs : (N, M) every verdict's probabilities from a map that saw neither its fault seed nor its IDV group
    maps : (N,) each verdict's fold map, its set thresholds from the cross-validation inside the fold's runs
    calibration : the file (:func:`final_maps`: maps fitted on every run, thresholds per ``thresholds_from``)
    fold : per setting, :func:`score` with each verdict's fold map (map and threshold both held out: the nested
        cross-validation)
    file : per setting, :func:`score` of the same probabilities at the file's threshold (the threshold fitted on every
        run, these included: not held out)
    interval : per setting, :func:`ece_interval` of the probabilities
    floor : per setting, :func:`ece_floor` of the probabilities
    file_threshold : per setting, the file's threshold at the level
    """

    family: str
    probs: np.ndarray
    maps: list[CalibrationMap]
    calibration: CalibrationMaps
    fold: dict[str, dict[str, Any]]
    file: dict[str, dict[str, Any]]
    interval: dict[str, tuple[float, float]]
    floor: dict[str, tuple[float, float, float]]
    file_threshold: dict[str, float]


def family_figures(
    samples: Samples, plants: Sequence[str], level: float, family: str = SHIPPED_FAMILY,
    thresholds_by: str = SHIPPED_THRESHOLDS, maps_by: str = SHIPPED_MAPS, rule: str = SET_RULE,
    thresholds_from: str = SHIPPED_THRESHOLDS_FROM, fitted_on: Mapping[str, Any] | None = None,
    settings: Sequence[str] | None = None,
) -> FamilyFigures:  # fmt: skip
    """The figures of one family of maps (``family``, :data:`FAMILIES`) on ``samples``: the nested cross-validation
    (:func:`cross_validate`: each run's map fitted without its fault seed and IDV group, its set threshold from the
    cross-validation inside the fold's runs), scored per setting (``settings``, in that order; None: every setting of
    ``samples``) at the coverage ``level``, and the file fitted on every run (:func:`final_maps`; its thresholds from
    the inner folds pooled when ``thresholds_from`` is ``inner``), scored on the same probabilities."""
    if family not in FAMILIES:
        raise ValueError(f"family {family!r}: one of {', '.join(FAMILIES)}")
    order = list(settings) if settings is not None else sorted({str(s) for s in samples.setting}, key=setting_key)
    inner: list[Coverage] = []
    probs, maps = cross_validate(samples, plants, thresholds_by, maps_by, rule, inner=inner, family=family)
    fold, interval, floor, scores = {}, {}, {}, {}
    for setting in order:
        sel = samples.setting == setting
        part = samples.where(sel)
        fold[setting] = score(part, probs[sel], level, [m for m, k in zip(maps, sel, strict=True) if k])
        interval[setting] = ece_interval(part, probs[sel])
        floor[setting] = ece_floor(part, probs[sel])
        mine = fold[setting]
        scores[setting] = {"ece": round(mine["ece"], 4), "ece if calibrated": round(floor[setting][0], 4),
                           "coverage": round(mine["coverage"], 4), "size": round(mine["size"], 4),
                           "runs": mine["runs"]}  # fmt: skip
    # an ablation that makes no file (set thresholds finer than the maps) gets the maps with one threshold
    final_thresholds = thresholds_by if shippable(maps_by, thresholds_by) else "pooled"
    calibration = final_maps(samples, plants, {"cross-validated": scores}, dict(fitted_on or {}), probs, rule,
                             maps_by, final_thresholds, inner if thresholds_from == "inner" else None,
                             family)  # fmt: skip
    file, file_threshold = {}, {}
    for setting in order:
        sel = samples.setting == setting
        part = samples.where(sel)
        file_map = calibration.select(*setting_key(setting))
        if file_map is None:  # maps keyed by training rows: a setting always names its rows
            raise SystemExit(f"bench_faults: no map of the file for {setting}")
        file[setting] = score(part, probs[sel], level, [file_map] * len(part))
        file_threshold[setting] = file_map.threshold(level)
    return FamilyFigures(family, probs, maps, calibration, fold, file, interval, floor, file_threshold)


def family_bar(setting: str, figures: FamilyFigures) -> str:
    """Issue 35's bars (point 1: holds >= 0.9, mean size <= 1.5, stream-4 and kinetics >= 2/3; point 2: ECE <= 0.05)
    for one family in one setting (``setting`` a key of ``figures.fold``): the fold sets (map and threshold held
    out) and the file's threshold on the same probabilities."""

    def of(r: Mapping[str, Any], kind: str) -> str:
        n = int(r[f"{kind} runs"])
        return f"{round(r[kind] * n)}/{n}" if n else "-"

    def met(ok: bool) -> str:
        return "met" if ok else "MISSED"

    def sets(r: Mapping[str, Any]) -> str:
        kinds = all(x >= 2 / 3 - 1e-12 for x in (r["stream-4"], r["kinetics"]) if not math.isnan(x))
        return (f"holds {r['coverage']:.3f} of {r['runs']} runs, mean size {r['size']:.2f} -> "
                f"{met(r['coverage'] >= 0.9 and r['size'] <= 1.5)}; stream-4 {of(r, 'stream-4')}, kinetics "
                f"{of(r, 'kinetics')} -> {met(kinds)}")  # fmt: skip

    fold, file = figures.fold[setting], figures.file[setting]
    low, high = figures.interval[setting]
    floor = figures.floor[setting]
    return (
        f"{setting}, maps of family {figures.family}: nested (map and threshold held out): {sets(fold)}; ECE "
        f"{fold['ece']:.3f} (90 % over runs {fmt_interval(low, high)}; exactly calibrated {floor[0]:.3f}, 90 % "
        f"{fmt_interval(floor[1], floor[2])}; bar 0.05) -> {met(fold['ece'] <= 0.05)}; the file's threshold "
        f"({figures.file_threshold[setting]:.2f}, fitted on every run) on the same probabilities: {sets(file)}"
    )


def first_alarm_sets(
    outputs: Mapping[tuple[int, int], Any],
    truth: Mapping[int, frozenset[str] | None],
    onset: int,
    order: Callable[[Any, int], list[int]],
    detected: float = 0.5,
) -> dict[int, dict[str, float]]:
    """The first-alarm peer made into sets: for k = 1..M, the first k plants to alarm after the onset, on the
    detected runs with a unit truth: how often the set holds a true unit and its mean size."""
    orders = []
    for (idv, _), out in sorted(outputs.items()):
        units = truth.get(idv)
        if units is None or len(out.alarm) <= onset or float(np.mean(out.alarm[onset:])) < detected:
            continue
        plants = list(out.plants)
        orders.append(([plants[m] for m in order(out, onset)], units, idv))
    if not orders:
        return {}
    M = max(len(out.plants) for out in outputs.values())
    out_k = {}
    for k in range(1, M + 1):
        holds = [bool(units & set(o[:k])) for o, units, _ in orders]
        out_k[k] = {
            "coverage": float(np.mean(holds)),
            "size": float(np.mean([len(o[:k]) for o, _, _ in orders])),
            "runs": len(orders),
            **_kinds(holds, [idv for *_, idv in orders]),
        }
    return out_k


def _kinds(holds: Sequence[bool], idvs: Sequence[int]) -> dict[str, float]:
    """Coverage on the stream-4 and the kinetics runs apart."""
    out = {}
    for name, kind in (("stream-4", STREAM_4), ("kinetics", KINETICS)):
        chosen = [h for h, i in zip(holds, idvs, strict=True) if i in kind]
        out[name] = float(np.mean(chosen)) if chosen else float("nan")
    return out


def ranking_sets(
    outputs: Mapping[tuple[int, int], Any],
    truth: Mapping[int, frozenset[str] | None],
    onset: int,
    detected: float = 0.5,
) -> dict[int, dict[str, float]]:
    """The centralised reference ranked by contribution, made into sets: for k = 1..M, per alarm row after the
    onset its k units of the largest contribution, per run the units in at least half of those sets; and its
    calibration error (each row's contributions normalised into probabilities, the top unit's scored)."""
    per_run = []
    confidence, correct, weight = [], [], []
    for (idv, _), out in sorted(outputs.items()):
        units = truth.get(idv)
        if units is None or out.ranking is None or len(out.alarm) <= onset:
            continue
        if float(np.mean(out.alarm[onset:])) < detected:
            continue
        rows = onset + np.flatnonzero(out.alarm[onset:])
        if not len(rows):
            continue
        contributions = np.maximum(out.ranking[rows], 0.0)
        plants = list(out.plants)
        mask = np.array([p in units for p in plants])
        per_run.append((np.argsort(-contributions, axis=1, kind="stable"), mask, idv))
        p = contributions / np.maximum(contributions.sum(axis=1, keepdims=True), 1e-300)
        top = p.argmax(axis=1)
        confidence.extend(p[np.arange(len(rows)), top].tolist())
        correct.extend(mask[top].tolist())
        weight.extend([1.0 / len(rows)] * len(rows))
    if not per_run:
        return {}
    M = per_run[0][0].shape[1]
    out_k: dict[int, dict[str, float]] = {}
    for k in range(1, M + 1):
        holds, sizes = [], []
        for ranked, mask, _ in per_run:
            shown = Counter(m for row in ranked[:, :k] for m in row.tolist())
            majority = [m for m, n in shown.items() if 2 * n >= len(ranked)]
            holds.append(bool(mask[majority].any()))
            sizes.append(len(majority))
        out_k[k] = {
            "coverage": float(np.mean(holds)),
            "size": float(np.mean(sizes)),
            "runs": len(per_run),
            **_kinds(holds, [idv for *_, idv in per_run]),
        }
    ece = expected_calibration_error(confidence, correct, weight)
    for row in out_k.values():
        row["ece"] = ece
    return out_k


def smallest_reaching(
    sets: Mapping[int, Mapping[str, float]], coverage: float
) -> tuple[int, Mapping[str, float]] | None:
    """The smallest k whose sets hold a true unit at least as often as ``coverage`` (None: no k does)."""
    for k in sorted(sets):
        if sets[k]["coverage"] >= coverage - 1e-12:
            return k, sets[k]
    return None


def reliability_figure(
    path: str | Path, panels: Sequence[tuple[str, Sequence[Mapping[str, float]], Sequence[Mapping[str, float]]]]
) -> Path:
    """A PNG of reliability diagrams: per setting, the calibrated and the engine's bins (accuracy against
    confidence, marker area by weight) next to the diagonal."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(panels)
    fig, axes = plt.subplots(1, n, figsize=(3.2 * n, 3.4), dpi=110, squeeze=False)
    for ax, (title, calibrated, engine) in zip(axes[0], panels, strict=True):
        ax.plot([0, 1], [0, 1], color="#888888", lw=0.8, ls="--")
        for bins, color, label in ((engine, "#cc0000", "engine (uncalibrated)"), (calibrated, "#3465a4", "calibrated")):
            if not bins:
                continue
            total = sum(b["weight"] for b in bins)
            x = [b["confidence"] for b in bins]
            y = [b["accuracy"] for b in bins]
            size = [400 * b["weight"] / total + 8 for b in bins]
            ax.plot(x, y, color=color, lw=0.8)
            ax.scatter(x, y, s=size, color=color, alpha=0.6, label=label)
        ax.set_xlim(0, 1.02)
        ax.set_ylim(0, 1.02)
        ax.set_title(title, fontsize=8)
        ax.set_xlabel("probability of the named root", fontsize=7)
        ax.tick_params(labelsize=7)
    axes[0, 0].set_ylabel("share of verdicts whose named root is right", fontsize=7)
    axes[0, 0].legend(fontsize=6, loc="upper left", frameon=False)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, format="png")
    plt.close(fig)
    return out


def fmt_interval(low: float, high: float) -> str:
    return f"{low:.3f}-{high:.3f}" if math.isfinite(low) else "-"
