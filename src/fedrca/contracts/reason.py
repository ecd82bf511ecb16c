"""Why a verdict says what it says: the reason a verdict carries, as bounded, validated value objects.

A :class:`~fedrca.contracts.messages.Verdict` of a root cause carries a :class:`Reason`:

* per plant (:class:`PlantReason`, the alarming plants first, in the order they started): when it
  started alarming relative to the first plant of the incident, in what share of the evidence rows,
  its dominant published flag pair ``(Z_c, Z_a)``, what the founding paper's two-plant look-up table
  (:mod:`fedrca.rca.table`) says of that pair next to the named root's, and which declared path or
  learned block of the interdependency graph carries the root's effect to it;
* the runner-up hypothesis, the log-evidence margin the named root holds over it, and one sentence
  on what would change the verdict.

Every field is bounded (:data:`MAX_CANDIDATES` candidates, :data:`MAX_PROPAGATED` propagated plants,
:data:`MAX_REASON_PLANTS` plants described, :data:`MAX_LINK_CHARS` characters of a link,
:data:`MAX_CHANGE_CHARS` of the sentence, names of at most :data:`MAX_VERDICT_NAME_CHARS`), so a verdict's
JSON stays within :data:`MAX_VERDICT_BYTES` whatever the site (``tests/contracts/test_reason.py`` encodes the largest).

Examples
--------
>>> r = Reason((PlantReason("reactor", 0, 0.97, (1, 1), "root_candidate", "", ""),), "stripper", 7.25, "")
>>> Reason.from_dict(r.to_dict()) == r
True
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fedrca.contracts.deadletter import DeadLetterReason as R
from fedrca.exceptions import MessageError

__all__ = [
    "MAX_CANDIDATES",
    "MAX_CHANGE_CHARS",
    "MAX_LINK_CHARS",
    "MAX_PROPAGATED",
    "MAX_REASON_PLANTS",
    "MAX_VERDICT_BYTES",
    "MAX_VERDICT_NAME_CHARS",
    "PLANT_STATES",
    "PlantReason",
    "Reason",
]

#: Most candidate roots a verdict lists (its coverage set is cut there; its probabilities then say
#: how much of the posterior the list holds).
MAX_CANDIDATES = 16
#: Most plants a verdict lists as showing the propagated effect (the engine keeps the clearest).
MAX_PROPAGATED = 64
#: Most plants a reason describes (the alarming plants first, in the order they started).
MAX_REASON_PLANTS = 12
#: Longest plant (or site) name a verdict carries: the longest that fits a Kafka topic name
#: (``{site}.sensors.{plant}`` with a one-character site: 249 - 10 characters).
MAX_VERDICT_NAME_CHARS = 239
#: Longest description of how an effect reaches a plant (a declared path, a learned block).
MAX_LINK_CHARS = 240
#: Longest sentence on what would change the verdict.
MAX_CHANGE_CHARS = 400
#: Largest verdict message (JSON bytes): the bounds above at the longest names fit it
#: (``tests/contracts/test_reason.py::test_the_largest_verdict_fits_its_bound``), far below a Kafka record.
MAX_VERDICT_BYTES = 32_768

#: A plant's own reading of its dominant flag pair (P1's states): (1, 1) a root-cause candidate, (1, 0)
#: a propagated effect, (0, 0) normal, (0, 1) imperfect training.
PLANT_STATES: dict[tuple[int, int], str] = {
    (1, 1): "root_candidate",
    (1, 0): "propagated",
    (0, 0): "normal",
    (0, 1): "imperfect_training",
}


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_VERDICT_NAME_CHARS:
        raise MessageError(
            R.BAD_FIELD, f"{what} must be a name of 1..{MAX_VERDICT_NAME_CHARS} characters, got {value!r:.80}"
        )
    return value


def _text(value: Any, what: str, limit: int) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise MessageError(R.BAD_FIELD, f"{what} must be text of at most {limit} characters")
    return value


def _probability(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= float(value) <= 1.0:
        raise MessageError(R.BAD_FIELD, f"{what} must be a number in [0, 1], got {value!r:.40}")
    return float(value)


@dataclass(frozen=True)
class PlantReason:
    """One plant's part of a verdict's reason.

    Attributes
    ----------
    plant : the plant
    onset : rows after the incident's first alarm at which this plant started alarming (0 = the first
        plant); None when it has not alarmed in the incident
    share : share of the evidence rows in which its proprietary flag Z_c is on (channel-inverted: the
        randomized response taken out), in [0, 1], 2 digits
    pair : its dominant true flag pair ``(Z_c, Z_a)`` over the evidence rows (the most likely one
        given the published pairs)
    state : P1's reading of ``pair`` alone (:data:`PLANT_STATES`)
    table : the two-plant look-up table's outcome for (the named root's pair, this pair)
        (:func:`fedrca.rca.table.lookup`, e.g. ``root_cause`` or ``multiple_roots``); empty for the
        root itself or when no root is named
    link : how the named root's effect reaches this plant: a declared path (``"a > b > c"``), a learned
        block, the complete graph, or ``"no declared path"``; empty for the root itself
    """

    plant: str
    onset: int | None
    share: float
    pair: tuple[int, int]
    state: str
    table: str
    link: str

    def __post_init__(self) -> None:
        _name(self.plant, "reason plant")
        if self.onset is not None and (isinstance(self.onset, bool) or not isinstance(self.onset, int)):
            raise MessageError(R.BAD_FIELD, f"reason onset must be an integer or null, got {self.onset!r:.40}")
        object.__setattr__(self, "share", round(_probability(self.share, "reason share"), 2))
        pair = tuple(self.pair)
        if len(pair) != 2 or any(b not in (0, 1) or isinstance(b, bool | float) for b in pair):
            raise MessageError(R.BAD_FIELD, f"reason pair must be [zc, za] of 0/1, got {self.pair!r:.40}")
        object.__setattr__(self, "pair", (int(pair[0]), int(pair[1])))
        if self.state not in PLANT_STATES.values():
            raise MessageError(R.BAD_FIELD, f"reason state must be one of {sorted(PLANT_STATES.values())}")
        _text(self.table, "reason table", 40)
        _text(self.link, "reason link", MAX_LINK_CHARS)

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract."""
        return {
            "plant": self.plant,
            "onset": self.onset,
            "share": self.share,
            "pair": list(self.pair),
            "state": self.state,
            "table": self.table,
            "link": self.link,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PlantReason:
        """Validate a decoded plant reason; :class:`MessageError` when it breaks the contract."""
        if not isinstance(data, Mapping):
            raise MessageError(R.BAD_FIELD, "a reason plant must be an object")
        try:
            return cls(
                data["plant"],
                data["onset"],
                data["share"],
                tuple(data["pair"]),
                data["state"],
                data["table"],
                data["link"],
            )
        except KeyError as exc:
            raise MessageError(R.MISSING_FIELD, f"no {exc} in a reason plant") from None
        except TypeError as exc:
            raise MessageError(R.BAD_FIELD, f"reason plant field of the wrong type ({exc})") from None


@dataclass(frozen=True)
class Reason:
    """Why a verdict names its root: the plants' evidence, the runner-up and what would change it.

    Attributes
    ----------
    plants : per plant (:class:`PlantReason`), the alarming ones first in the order they started, at
        most :data:`MAX_REASON_PLANTS`
    runner_up : the most likely other plant when a root is named, else the most likely other hypothesis
        (a plant, ``external``, ``none`` or ``unexplained``); None when nothing else is possible
    margin : log evidence (nats) of the named root (or the decided hypothesis) over the runner-up (>= 0;
        inf when nothing else is possible), 2 digits
    change : one sentence: what would change the verdict (at most :data:`MAX_CHANGE_CHARS`)
    """

    plants: tuple[PlantReason, ...]
    runner_up: str | None
    margin: float
    change: str

    def __post_init__(self) -> None:
        plants = tuple(self.plants)
        if len(plants) > MAX_REASON_PLANTS or not all(isinstance(p, PlantReason) for p in plants):
            raise MessageError(R.BAD_FIELD, f"a reason describes at most {MAX_REASON_PLANTS} plants")
        object.__setattr__(self, "plants", plants)
        if self.runner_up is not None:
            _name(self.runner_up, "reason runner_up")
        margin = self.margin
        if isinstance(margin, bool) or not isinstance(margin, int | float) or math.isnan(margin) or margin < 0:
            raise MessageError(R.BAD_FIELD, f"reason margin must be a non-negative number, got {margin!r:.40}")
        object.__setattr__(self, "margin", math.inf if math.isinf(margin) else round(float(margin), 2))
        _text(self.change, "reason change", MAX_CHANGE_CHARS)

    def plant(self, name: str) -> PlantReason | None:
        """The reason of plant ``name``, if it is described."""
        return next((p for p in self.plants if p.plant == name), None)

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract (an infinite margin is null: JSON has no infinity)."""
        return {
            "plants": [p.to_dict() for p in self.plants],
            "runner_up": self.runner_up,
            "margin": None if math.isinf(self.margin) else self.margin,
            "change": self.change,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Reason:
        """Validate a decoded reason; :class:`MessageError` when it breaks the contract."""
        if not isinstance(data, Mapping):
            raise MessageError(R.BAD_FIELD, "a verdict's reason must be an object")
        try:
            plants = data["plants"]
            if not isinstance(plants, Sequence) or isinstance(plants, str) or len(plants) > MAX_REASON_PLANTS:
                raise MessageError(R.BAD_FIELD, f"reason plants must be a list of at most {MAX_REASON_PLANTS}")
            margin = data["margin"]
            return cls(
                tuple(PlantReason.from_dict(p) for p in plants),
                data["runner_up"],
                math.inf if margin is None else margin,
                data["change"],
            )
        except KeyError as exc:
            raise MessageError(R.MISSING_FIELD, f"no {exc} in a verdict's reason") from None
