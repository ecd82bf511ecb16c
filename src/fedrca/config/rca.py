"""RCA settings: the ``rca:`` section of a site configuration.

Every key is optional; the defaults suit sustained faults in process plants.
Errors name the key path (``rca.horizon``) and what would be valid.

Examples
--------
>>> s = parse_rca_settings({"horizon": 40, "graph": {"source": "config"}})
>>> s.horizon, s.graph.source, s.min_posterior
(40, 'config', 0.9)
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic.json_schema import JsonDict

from fedrca.config._base import Strict, parse_inf, parse_section

#: Graph sources learned from finite nominal data (server block test, FedPC, a graph file):
#: their missing edges are doubted more than an operator's (``unlisted_path`` auto).
LEARNED_GRAPH_SOURCES = frozenset({"learned", "fedpc", "file"})

__all__ = ["CalibrationOptions", "GraphOptions", "RCASettings", "parse_rca_settings"]

_PROBABILITY = "must be 'auto' or a probability in [0, 1]"
_SEPARATION = "must be 'auto' or a list of probabilities, e.g. [0.1, 0.5, 0.9]"
_UNLISTED = "must be 'auto' or a probability in [0, 1)"


def _hint(text: str) -> JsonDict:
    return {"hint": text}


class GraphOptions(Strict):
    """Where the interdependency graph comes from.

    ``source``: ``auto`` = the config's ``graph.edges`` when given, else the
    trained server parameters when available, else the complete graph (every
    plant may affect every other); or force one of ``config``, ``learned``,
    ``complete``, or ``file``: the graph JSON at ``path`` (relative to the
    working directory), e.g. written by ``fedrca graph`` (FedPC, docs/fedpc.md).
    ``alpha``: significance level of the block test on the learned transition
    (Bonferroni-corrected over the M (M - 1) blocks).
    """

    source: Literal["auto", "config", "learned", "complete", "file"] = "auto"
    alpha: float = Field(0.01, gt=0.0, lt=1.0)
    path: str | None = None

    @model_validator(mode="after")
    def _file_needs_path(self) -> GraphOptions:
        if self.source == "file" and not self.path:
            raise ValueError("source 'file' needs graph.path, the graph JSON written by fedrca graph --out PATH")
        return self


class CalibrationOptions(Strict):
    """Where the calibration map of the verdicts' probabilities comes from (docs/rca.md, "What the
    probabilities mean").

    ``path``: the map's JSON (``fedrca.rca.calibration.CalibrationMap``), relative to the
    configuration file's folder (the shipped TEP map sits beside config/tep.yaml); None = no map:
    verdicts carry the engine's own root posterior and say they are uncalibrated
    (``"calibration": null``). A file may hold one map per training size (and flag epsilon)
    (``fedrca.rca.calibration.CalibrationMaps``): the engine takes the one of the rows its plants'
    detectors were trained on, which it reads from their nominal flags or published parameters.

    ``training_rows``: the plants' training rows when neither says (an RCA worker started before the
    plants published parameters); None = uncalibrated verdicts until they do. Used only by maps keyed by
    training rows; the published count wins over it (a disagreement is logged).
    """

    path: str | None = None
    training_rows: int | None = Field(None, ge=1)


class RCASettings(Strict):
    """Settings of the RCA engine (``docs/rca.md`` explains the model they parametrise).

    Attributes
    ----------
    horizon : rows of flags the evidence is accumulated over (sliding window), >= 1
    min_posterior : a verdict is issued when the best hypothesis reaches this posterior
    heartbeat : rows after which an unchanged verdict is issued again (0 = only on change)
    miss_rate : values of P(a root plant's proprietary flag is off in a row while its fault
        is active) the root role mixes over (a step keeps its unit alarming, a random
        variation or a sticking valve makes it alarm on and off)
    leak : P(a root plant's augmented model explains its own fault, flag pair (1, 0));
        ``auto`` = 0.05 with trained parameters, 0 without (Z_a equals Z_c)
    visibility : values of P(an effect is visible in a row) the propagated role mixes over
    separation : values of P(a visible effect is explained by the augmented model, pair
        (1, 0)) the propagated role mixes over; ``auto`` = [0.1, 0.5, 0.9] with trained
        parameters, [0] without (then Z_a equals Z_c)
    imperfect : P(an active anomaly shows only in the augmented flag, pair (0, 1));
        ``auto`` = 0.05 with trained parameters, 0 without
    effect_absent : P(a plant downstream of the root shows no effect in the window)
    unlisted_path : P(a plant the graph does not reach from the root shows its effect
        anyway): the doubt in the graph's missing edges (0 = the graph is the whole
        truth); ``auto`` = 0.02 for a graph from the config (operator knowledge), 0.2
        for a learned graph, also one learned by FedPC (a test on finite nominal data misses weak paths)
    false_alarm_rate : per-flag nominal alarm rate used when no nominal flags are
        given to estimate it; ``min_false_alarm`` floors estimates (nominal data
        is finite and new data has heavier tails)
    order_violation : P(an effect starts alarming more than ``onset_slack`` rows
        before its root), the onset-order evidence
    onset_slack : rows of tolerance in the onset order (and in the severity order)
    severity_violation : P(an effect reaches a severity level more than ``onset_slack`` rows
        before its root, or one its root never reaches), per level; the severity-order
        evidence when the plants publish severity levels (an effect is weaker than its cause)
    cusum_threshold : log-likelihood ratio (nats) at which a plant counts as alarming
        (per-plant CUSUM on its published flags; gives onsets and episodes)
    prior_anomaly : prior probability of an anomaly hypothesis against "no anomaly"
        (spread over the root hypotheses and "root outside")
    prior_external : the share of ``prior_anomaly`` on "the root is outside the monitored
        plants" (an unobserved root is the less economical explanation of a root-like plant)
    prior_unexplained : prior probability of the catch-all "unexplained" hypothesis
    unobserved_entry : plants through which a disturbance can enter **unseen**: their own
        sensors do not measure what the disturbance changes (a feed unit with flow meters
        and valves but no analysers sees a feed-composition change only when the control
        loops move its flows, after the units it feeds). For such a plant the hypothesis
        "root k" also admits that k's direct successors in the graph start alarming
        before k itself: the onset order is then timed from the entry (the earliest onset
        among k and its direct successors). With the complete graph every plant is a direct
        successor, so the variant drops the order rule for k: the onset order then says
        nothing for or against k (what config/tep.yaml uses for TEP's feed and stripper).
    unobserved_weight : prior share of the unseen-entry variant within such a plant's root
        hypothesis (the rest keeps the ordinary onset order)
    coverage : the probability a verdict's candidate set reaches: the smallest set of plants,
        most likely first, whose root probabilities (calibrated when a map is configured) sum
        to at least this; with calibrated probabilities the set holds the true root about this
        often (docs/faults.md measures it)
    calibration : the calibration map of the root probabilities (:class:`CalibrationOptions`)
    incident_gap : rows without any alarm that end an incident (the engine remembers when each
        plant first alarmed in the incident, across quiet rows between alarm episodes)
    incident_rows : rows a plant must have alarmed in an incident before its early start
        counts against a root that cannot reach it in the graph (one false alarm is no history)
    max_clock_skew : seconds a plant's time may differ from the median time of the plants in
        its row before the row is judged without it (its row stands for another moment; at
        least two plants must agree); ``auto`` = one sampling interval
        (``dataset.sample_seconds``), ``inf`` = never (docs/streams.md, "Time")
    """

    horizon: int = Field(30, ge=1)
    min_posterior: float = Field(0.9, ge=0.5, lt=1.0)
    heartbeat: int = Field(10, ge=0)
    miss_rate: list[float] = Field(
        default_factory=lambda: [0.1, 0.5],
        min_length=1,
        json_schema_extra=_hint("must be a list of probabilities in [0, 1)"),
    )
    leak: float | Literal["auto"] = Field("auto", json_schema_extra=_hint(_PROBABILITY))
    visibility: list[float] = Field(
        default_factory=lambda: [0.3, 0.9],
        min_length=1,
        json_schema_extra=_hint("must be a list of probabilities in (0, 1]"),
    )
    separation: list[float] | Literal["auto"] = Field("auto", json_schema_extra=_hint(_SEPARATION))
    imperfect: float | Literal["auto"] = Field("auto", json_schema_extra=_hint(_PROBABILITY))
    effect_absent: float = Field(0.5, gt=0.0, lt=1.0)
    unlisted_path: float | Literal["auto"] = Field("auto", json_schema_extra=_hint(_UNLISTED))
    false_alarm_rate: float = Field(0.01, ge=0.0, lt=0.5)
    min_false_alarm: float = Field(0.002, ge=0.0, lt=0.5)
    order_violation: float = Field(0.01, gt=0.0, le=1.0)
    onset_slack: int = Field(0, ge=0)
    severity_violation: float = Field(0.05, gt=0.0, le=1.0)
    cusum_threshold: float = Field(3.0, gt=0.0)
    prior_anomaly: float = Field(1e-3, gt=0.0, lt=1.0)
    prior_external: float = Field(0.01, gt=0.0, lt=1.0)
    prior_unexplained: float = Field(1e-6, gt=0.0, lt=1.0)
    unobserved_entry: list[str] = Field(default_factory=list)
    unobserved_weight: float = Field(0.5, gt=0.0, lt=1.0)
    coverage: float = Field(0.9, gt=0.0, le=1.0)
    calibration: CalibrationOptions = CalibrationOptions()
    incident_gap: int = Field(240, ge=1)
    incident_rows: int = Field(10, ge=1)
    max_clock_skew: float | Literal["auto"] = Field(
        "auto", json_schema_extra=_hint("must be 'auto', 'inf' or seconds >= 0")
    )
    graph: GraphOptions = GraphOptions()

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        if isinstance(data, dict) and "candidate_mass" in data:
            raise ValueError(
                "candidate_mass is replaced by rca.coverage (the probability the candidate set reaches, "
                "default 0.9): rename the key"
            )
        return data

    @field_validator("max_clock_skew", mode="before")
    @classmethod
    def _skew(cls, value: Any) -> Any:
        value = parse_inf(value)
        if value != "auto" and not (isinstance(value, int | float) and not isinstance(value, bool) and value >= 0):
            raise ValueError("must be 'auto', 'inf' or seconds >= 0")
        return value

    def max_clock_skew_for(self, sample_seconds: float) -> float:
        """Seconds of clock skew tolerated: the configured value, or ``auto`` = one sampling interval."""
        return float(sample_seconds) if self.max_clock_skew == "auto" else float(self.max_clock_skew)

    @field_validator("leak", "imperfect")
    @classmethod
    def _probability(cls, value: float | str) -> float | str:
        if value != "auto" and not 0.0 <= float(value) <= 1.0:
            raise ValueError(_PROBABILITY)
        return value

    @field_validator("unlisted_path")
    @classmethod
    def _open_probability(cls, value: float | str) -> float | str:
        if value != "auto" and not 0.0 <= float(value) < 1.0:
            raise ValueError(_UNLISTED)
        return value

    @field_validator("separation")
    @classmethod
    def _probabilities(cls, value: list[float] | str) -> list[float] | str:
        if not isinstance(value, str) and any(not 0.0 <= x <= 1.0 for x in value):
            raise ValueError(_SEPARATION)
        return value

    @field_validator("miss_rate")
    @classmethod
    def _miss_rates(cls, value: list[float]) -> list[float]:
        if any(not 0.0 <= m < 1.0 for m in value):
            raise ValueError("must be a list of probabilities in [0, 1)")
        return value

    @field_validator("visibility")
    @classmethod
    def _visibilities(cls, value: list[float]) -> list[float]:
        if any(not 0.0 < v <= 1.0 for v in value):
            raise ValueError("must be a list of probabilities in (0, 1]")
        return value

    def separation_for(self, trained: bool) -> tuple[float, ...]:
        """The separation grid: the configured values, or the ``auto`` choice."""
        if self.separation == "auto":
            return (0.1, 0.5, 0.9) if trained else (0.0,)
        return tuple(float(x) for x in self.separation)

    def unlisted_path_for(self, graph_source: str) -> float:
        """P(effect at a plant the graph does not reach): the configured value, or the ``auto`` choice."""
        if self.unlisted_path == "auto":
            return 0.2 if graph_source in LEARNED_GRAPH_SOURCES else 0.02
        return float(self.unlisted_path)

    def leak_for(self, trained: bool) -> float:
        """P((1, 0) | root): the configured value, or the ``auto`` choice."""
        if self.leak == "auto":
            return 0.05 if trained else 0.0
        return float(self.leak)

    def imperfect_for(self, trained: bool) -> float:
        """P((0, 1) | active anomaly): the configured value, or the ``auto`` choice."""
        if self.imperfect == "auto":
            return 0.05 if trained else 0.0
        return float(self.imperfect)


def parse_rca_settings(data: Any, source: str | None = None) -> RCASettings:
    """Validate an ``rca:`` mapping on its own (a site configuration validates its section in one pass).

    Raises
    ------
    ConfigError
        Naming the key (e.g. ``rca.horizon``) and the valid values.
    """
    return parse_section(RCASettings, "rca", "RCA settings (horizon, min_posterior, ...)", data, source)
