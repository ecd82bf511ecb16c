"""The two-plant look-up table of P1 on (Z_c, Z_a) flag pairs, and its outcome codes.

Each plant's state is the pair of its flags ``(Z_c, Z_a)``: the proprietary
detector and the detector augmented with the learned interdependencies.

* ``(1, 1)`` both alarm: the augmented model cannot explain the anomaly with
  the other plants either, so the plant is a **root-cause candidate**;
* ``(1, 0)`` only the proprietary detector alarms: the learned
  interdependencies explain it, so the plant shows a **propagated effect**;
* ``(0, 0)`` normal;
* ``(0, 1)`` only the augmented detector alarms: the learned interdependency
  predicts something that did not happen (**imperfect training**, or plants
  that are in fact independent).

The published table (rows = plant C1, columns = plant C2)::

    C1 \\ C2 | (0,0)          (0,1)          (1,0)          (1,1)
    ---------+----------------------------------------------------------------
    (0,0)    | no_anomaly     imperfect*     external*      root C2
    (0,1)    | imperfect*     independent    imperfect*     imperfect
    (1,0)    | external*      imperfect*     external       root C2, C1 prop.
    (1,1)    | root C1        imperfect      root C1, C2 p. multiple_roots

Entries marked ``*`` are not in the published table; fedrca decides them as
documented in :func:`lookup`:

* ``(1,0)&(0,0)`` / ``(0,0)&(1,0)``: a propagated effect with no visible root:
  the root cause lies outside the monitored plants (``external_root``; the
  effect-showing plant is listed as propagated) — the same reading as
  ``(1,0)&(1,0)`` ("neither is root, both propagated");
* ``(0,1)&(0,0)``, ``(0,0)&(0,1)``, ``(0,1)&(1,0)``, ``(1,0)&(0,1)``: one
  plant's augmented model alarms on its own: ``imperfect_training`` (only
  *both* plants in ``(0,1)`` read as ``independent`` plants, as published).

Examples
--------
>>> lookup((1, 1), (1, 0))
TableDecision(outcome='root_cause', root_cause=0, propagated=(1,))
>>> lookup((0, 0), (0, 0)).outcome
'no_anomaly'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fedrca.exceptions import DataError

__all__ = [
    "EXTERNAL_ROOT",
    "IMPERFECT_TRAINING",
    "INDEPENDENT",
    "MULTIPLE_ROOTS",
    "NO_ANOMALY",
    "OUTCOMES",
    "ROOT_CAUSE",
    "UNEXPLAINED",
    "TableDecision",
    "classify_pattern",
    "lookup",
]

#: No plant is anomalous.
NO_ANOMALY = "no_anomaly"
#: One plant is the root cause (``root_cause`` set); ``propagated`` lists the effects.
ROOT_CAUSE = "root_cause"
#: Only propagated effects are visible: the root lies outside the monitored plants.
EXTERNAL_ROOT = "external_root"
#: The augmented models alarm where the proprietary ones do not, in every flagged plant (>= 2).
INDEPENDENT = "independent"
#: Augmented-only alarms next to other evidence: the learned interdependencies are off.
IMPERFECT_TRAINING = "imperfect_training"
#: Two or more plants look like roots: the single-root-cause assumption is violated.
MULTIPLE_ROOTS = "multiple_roots"
#: The flags fit no hypothesis and none of the patterns above (e.g. an effect upstream
#: of the only candidate in a directed graph).
UNEXPLAINED = "unexplained"

#: Every outcome code, in a fixed order.
OUTCOMES: tuple[str, ...] = (
    NO_ANOMALY,
    ROOT_CAUSE,
    EXTERNAL_ROOT,
    INDEPENDENT,
    IMPERFECT_TRAINING,
    MULTIPLE_ROOTS,
    UNEXPLAINED,
)


@dataclass(frozen=True)
class TableDecision:
    """A look-up decision: outcome code, root plant index (or None), propagated plant indices."""

    outcome: str
    root_cause: int | None
    propagated: tuple[int, ...]


def _state(pair: Sequence[int], which: str) -> tuple[int, int]:
    if len(pair) != 2 or any(int(v) not in (0, 1) for v in pair):
        raise DataError(f"{which}: a plant state is a pair of 0/1 flags (Z_c, Z_a), got {tuple(pair)!r}")
    return int(pair[0]), int(pair[1])


def classify_pattern(states: Sequence[tuple[int, int]]) -> TableDecision:
    """The outcome of a flag pattern that no single-root hypothesis explains (any number of plants).

    Used by the engine when the flags fit neither "no anomaly", nor "plant k is
    the root", nor "the root is outside": augmented-only ``(0, 1)`` states mean
    ``independent`` (every flagged plant, at least two) or ``imperfect_training``;
    otherwise two or more ``(1, 1)`` plants mean ``multiple_roots``; anything
    else is ``unexplained``.

    Examples
    --------
    >>> classify_pattern([(0, 1), (0, 1), (0, 0)]).outcome
    'independent'
    >>> classify_pattern([(1, 1), (1, 1), (1, 0)]).outcome
    'multiple_roots'
    """
    flagged = [s for s in states if s != (0, 0)]
    if any(s == (0, 1) for s in states):
        if len(flagged) >= 2 and all(s == (0, 1) for s in flagged):
            return TableDecision(INDEPENDENT, None, ())
        return TableDecision(IMPERFECT_TRAINING, None, ())
    if sum(s == (1, 1) for s in states) >= 2:
        return TableDecision(MULTIPLE_ROOTS, None, ())
    return TableDecision(UNEXPLAINED, None, ())


def lookup(c1: Sequence[int], c2: Sequence[int]) -> TableDecision:
    """Decide the two-plant case from the states ``(Z_c, Z_a)`` of plants C1 (index 0) and C2 (index 1).

    Raises
    ------
    DataError
        When a state is not a pair of 0/1 flags.

    Examples
    --------
    >>> lookup((1, 0), (1, 1))
    TableDecision(outcome='root_cause', root_cause=1, propagated=(0,))
    >>> lookup((1, 0), (1, 0))
    TableDecision(outcome='external_root', root_cause=None, propagated=(0, 1))
    >>> lookup((1, 1), (1, 1)).outcome
    'multiple_roots'
    """
    s1, s2 = _state(c1, "C1"), _state(c2, "C2")
    states = (s1, s2)
    if states == ((0, 0), (0, 0)):
        return TableDecision(NO_ANOMALY, None, ())
    if (0, 1) not in states:
        roots = [i for i, s in enumerate(states) if s == (1, 1)]
        effects = tuple(i for i, s in enumerate(states) if s == (1, 0))
        if len(roots) == 1:
            return TableDecision(ROOT_CAUSE, roots[0], effects)
        if not roots:
            return TableDecision(EXTERNAL_ROOT, None, effects)
    return classify_pattern(states)
