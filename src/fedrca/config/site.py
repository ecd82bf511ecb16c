"""The site configuration: YAML validated into immutable objects in one pass.

A configuration names the site, its plants (ordered sensor columns, optional
input columns, model settings), the privacy settings and the topic names.
Settings under ``defaults`` apply to every plant; a plant overrides any of them
under its own ``model`` / ``augmentation`` / ``scoring`` keys.

Every error names the file, the key path and what would be valid, e.g.::

    config/tep.yaml: plants[2].sensors[3]: unknown column 'XMEAS(44)'; columns are
    XMEAS(1)..XMEAS(41), XMV(1)..XMV(11)

Examples
--------
>>> cfg = load_config("config/tep.yaml")
>>> cfg.plant_names
['feed', 'reactor', 'separator', 'stripper', 'compressor']
>>> cfg.topic("sensors", plant="reactor")
'tep.sensors.reactor'
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from fedrca.config._base import Strict, parse_inf, parse_seed, translate
from fedrca.config._yaml import read_yaml
from fedrca.config.causal import CausalSettings
from fedrca.config.drift import DriftSettings
from fedrca.config.edge import EdgeSettings, check_edge, parse_edge
from fedrca.config.formats import KNOWN_COLUMNS
from fedrca.config.health import HealthSettings
from fedrca.config.limits import (
    MAX_PRIVACY_WINDOW,
    MAX_SEED,
    MAX_SEVERITY_LEVELS,
    MAX_TOPIC_LENGTH,
    MEMORY_LIMIT,
    file_name_problem,
    gib,
    largest,
    name_fits_topic,
    rca_bytes,
    render_topic,
)
from fedrca.config.rca import RCASettings
from fedrca.config.training import TrainingSettings
from fedrca.exceptions import ConfigError

__all__ = [
    "AugmentationSettings",
    "ColumnMatch",
    "DatasetSettings",
    "DetectorSettings",
    "GraphSettings",
    "KafkaSettings",
    "ModelSettings",
    "PlantConfig",
    "PrivacySettings",
    "ScoringSettings",
    "SiteConfig",
    "TopicSettings",
    "compress_columns",
    "group_columns",
    "load_config",
    "parse_config",
    "resolve_plants",
]

_NAME = r"^[A-Za-z][A-Za-z0-9_-]*$"
#: ``package.module:attribute`` (or ``package.module.attribute``): a Python import reference.
_PLUGIN = r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*(:|\.)[A-Za-z_]\w*"


class ModelSettings(Strict):
    """The plant's fixed (proprietary) filter."""

    kind: Literal["identified", "plugin"] = "identified"
    plugin: str | None = Field(None, description="'package.module:factory' when kind is plugin")
    plugin_args: dict[str, Any] = Field(default_factory=dict)
    n_states: int | None = Field(None, ge=1, description="fixed state dimension; None = by energy")
    energy: float = Field(0.9, gt=0.0, le=1.0)
    steady_state: bool = True
    use_inputs: bool = Field(
        True,
        description="the filter is driven by the plant's inputs; false: they reach only the federated learner "
        "and the what-if (inputs that are also sensors, e.g. TEP's XMVs, stay as the detector used them)",
    )

    @model_validator(mode="after")
    def _plugin_named(self) -> ModelSettings:
        if self.kind == "plugin" and not self.plugin:
            raise ValueError("kind 'plugin' needs plugin: 'package.module:factory'")
        if self.plugin is not None and not re.fullmatch(_PLUGIN, self.plugin):
            raise ValueError(
                f"plugin {self.plugin!r} is not a reference 'package.module:factory' (e.g. "
                "'fedrca.training.oracle:true_local_filter')"
            )
        return self


class AugmentationSettings(Strict):
    """Feature map of the learned augmentation."""

    features: Literal["identity", "rff"] = "identity"
    n_features: int = Field(64, ge=1)
    lengthscale: float = Field(1.0, gt=0.0)


class SmoothingSettings(Strict):
    """EWMA smoothing of the distance (``d2``) or of the residual vector (``residual``, MEWMA)."""

    ewma: float = Field(..., gt=0.0, le=1.0)
    target: Literal["d2", "residual"] = "d2"


Statistic = Literal["innovation", "mewma", "level", "reconstruction", "dispersion"]
_STATISTICS: tuple[Statistic, ...] = ("innovation", "mewma", "level", "reconstruction")
_RESIDUAL_ONLY = ("threshold", "percentile", "smoothing", "margin")
_FAMILY_ONLY = ("statistics", "ewma", "base_quantile", "tail", "confidence", "dispersion")


class ScoringSettings(Strict):
    """How a plant turns its models' evidence into flags (thresholds from nominal data only).

    ``method: residual`` (default): P1's flags, the Mahalanobis distance of each model's
    prediction residual against a ``percentile`` (or ``chi2``) threshold times ``margin``,
    optionally ``smoothing``. ``method: family``: the statistic family of
    :mod:`fedrca.detectors.statistics` (``statistics``, MEWMA constants ``ewma``), with
    ``alpha`` the plant's family-wise false-alarm rate per sample over both flags and
    every statistic; the threshold is fitted to the upper ``tail`` share of held-out nominal
    scores and taken at its ``confidence`` upper bound (more margin for short nominal data).
    ``warmup``: samples after a reset without flags (both methods). ``min_sensors``: the
    fewest usable sensors a row is scored with, a count (>= 1) or a share of the plant's
    sensors (< 1); a row with fewer is published *degraded* (no evidence; docs/missing.md).
    ``severity_levels``
    (K, 0 = off) and ``severity_base`` (b): with its flags the plant publishes the severity
    level of its proprietary score, 0 without an alarm, else ``1 + floor(log_b(score / tau))``
    capped at K - 1, through k-ary randomized response (``privacy.level_epsilon``).
    """

    method: Literal["residual", "family"] = "residual"
    threshold: Literal["percentile", "chi2"] = "percentile"
    percentile: float = Field(99.0, gt=0.0, lt=100.0)
    alpha: float = Field(0.01, gt=0.0, lt=1.0)
    smoothing: SmoothingSettings | None = None
    margin: float = Field(1.0, ge=1.0)
    statistics: list[Statistic] = Field(default_factory=lambda: list(_STATISTICS), min_length=1)
    ewma: list[float] = Field(default_factory=lambda: [0.1], min_length=1)
    base_quantile: float = Field(0.99, gt=0.5, lt=1.0)
    tail: float = Field(0.1, gt=0.0, lt=0.5)
    confidence: float = Field(0.5, ge=0.5, lt=1.0)
    dispersion: float = Field(0.2, gt=0.0, le=1.0)
    warmup: int = Field(0, ge=0)
    min_sensors: float = Field(
        0.5, gt=0.0, description="fewest usable sensors a row is scored with: a count, or a share below 1"
    )
    severity_levels: int = Field(
        0, ge=0, le=MAX_SEVERITY_LEVELS, description="levels published with the flags (0 = none, else >= 3)"
    )
    severity_base: float = Field(10.0, gt=1.0)
    calibration: Literal["cv", "in-sample"] = "cv"
    folds: int = Field(5, ge=2)

    @field_validator("min_sensors")
    @classmethod
    def _whole_count(cls, value: float) -> float:
        if value >= 1 and value != int(value):
            raise ValueError("a count of sensors (>= 1) must be whole, e.g. 3; or a share below 1, e.g. 0.5")
        return value

    @field_validator("ewma")
    @classmethod
    def _smoothing_constants(cls, value: list[float]) -> list[float]:
        if any(not 0.0 < v <= 1.0 for v in value):
            raise ValueError("must be a list of EWMA smoothing constants in (0, 1], e.g. [0.1]")
        return value

    @model_validator(mode="after")
    def _keys_of_the_method(self) -> ScoringSettings:
        foreign = _FAMILY_ONLY if self.method == "residual" else _RESIDUAL_ONLY
        # a key of the other method, set to something else than its default (a dumped configuration
        # carries every default and must load again)
        fields = type(self).model_fields
        given = [
            k
            for k in foreign
            if k in self.model_fields_set and getattr(self, k) != fields[k].get_default(call_default_factory=True)
        ]
        if given:
            other = "family" if self.method == "residual" else "residual"
            raise ValueError(
                f"{', '.join(given)} only apply to method '{other}'; this plant's scoring method is "
                f"'{self.method}' (set method: {other} or drop the key)"
            )
        if self.method == "family" and len(set(self.statistics)) != len(self.statistics):
            raise ValueError("statistics must not repeat a statistic")
        if self.severity_levels in (1, 2):
            raise ValueError("severity_levels must be 0 (no levels) or at least 3 (0 = no alarm, 1, 2, ...)")
        return self


class DetectorSettings(Strict):
    """Which detector the plant runs: its own (``plant``: filter, augmentation, residual scorer),
    the fleet's CollabDict model (``fleet``, docs/fleet.md; yields Z_c only) or a plug-in
    (``plugin``: any :class:`fedrca.detectors.Detector` built by ``plugin`` with ``plugin_args``,
    docs/plugins.md)."""

    kind: Literal["plant", "fleet", "plugin"] = "plant"
    plugin: str | None = Field(
        None, description="plugin: 'package.module:factory' of a fedrca.detectors.Detector (docs/plugins.md)"
    )
    plugin_args: dict[str, Any] = Field(default_factory=dict, description="plugin: keyword arguments of the factory")
    model: str | None = Field(None, description="fleet model file written by `fedrca fleet`; None = learn alone")
    components: int = Field(2, ge=1, description="patterns K when the plant learns alone")
    rho: float = Field(10.0, ge=0.0)
    percentile: float = Field(99.5, gt=0.0, lt=100.0)
    folds: int = Field(5, ge=0)
    ewma: float | None = Field(None, gt=0.0, le=1.0, description="fleet: lambda of the smoothed score; None = score")
    participant: str | None = Field(
        None, description="fleet: this plant's participants/<name>.json from `fedrca fleet` (its calibration)"
    )

    @model_validator(mode="after")
    def _fleet_keys(self) -> DetectorSettings:
        for key in ("model", "ewma", "participant"):
            if self.kind != "fleet" and getattr(self, key) is not None:
                raise ValueError(f"{key}: belongs to the fleet detector (kind 'fleet'); remove it or set kind: fleet")
        if self.kind == "plugin" and not self.plugin:
            raise ValueError("kind 'plugin' needs plugin: 'package.module:factory' (docs/plugins.md)")
        if self.kind != "plugin" and (self.plugin is not None or self.plugin_args):
            raise ValueError("plugin, plugin_args: belong to a plug-in detector (kind 'plugin'); remove them or set it")
        if self.plugin is not None and not re.fullmatch(_PLUGIN, self.plugin):
            raise ValueError(
                f"plugin {self.plugin!r} is not a reference 'package.module:factory' (e.g. 'my_detector:ZScore')"
            )
        if self.folds == 1:
            raise ValueError("folds must be 0 (in-sample threshold) or >= 2")
        return self


class ColumnMatch(Strict):
    """A plant's sensors given by a rule over a data file's columns (resolved by :func:`resolve_plants`).

    Exactly one of ``prefix`` / ``regex`` (``re.search`` semantics; anchor it with ``^...$``);
    ``exclude`` drops named columns (e.g. constant tags). Matched columns keep the file's order.

    Examples
    --------
    >>> ColumnMatch(prefix="P1_").matches("P1_FT01")
    True
    >>> ColumnMatch(regex=r"^[A-Z]+1\\d\\d$").matches("AIT201")
    False
    """

    prefix: str | None = Field(None, min_length=1)
    regex: str | None = Field(None, min_length=1)
    exclude: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_rule(self) -> ColumnMatch:
        if (self.prefix is None) == (self.regex is None):
            raise ValueError("give exactly one of prefix: 'P1_' or regex: '^FIT1\\d\\d$'")
        if self.regex is not None:
            try:
                re.compile(self.regex)
            except re.error as exc:
                raise ValueError(f"regex {self.regex!r} does not compile ({exc})") from None
        return self

    def matches(self, column: str) -> bool:
        """True when ``column`` is selected by the rule (and not excluded)."""
        if column in self.exclude:
            return False
        if self.prefix is not None:
            return column.startswith(self.prefix)
        return re.search(str(self.regex), column) is not None

    def describe(self) -> str:
        """The rule as written in YAML."""
        return f"{{prefix: '{self.prefix}'}}" if self.prefix is not None else f"{{regex: '{self.regex}'}}"


class PlantConfig(Strict):
    """One plant: its sensor columns (in message order) or a rule selecting them, inputs and settings."""

    name: str = Field(..., pattern=_NAME)
    sensors: list[str] = Field(default_factory=list, description="explicit columns; or give match")
    match: ColumnMatch | None = Field(None, description="rule resolved against a data file's columns")
    inputs: list[str] = Field(default_factory=list)
    model: ModelSettings = ModelSettings()
    augmentation: AugmentationSettings = AugmentationSettings()
    scoring: ScoringSettings = ScoringSettings()
    detector: DetectorSettings = DetectorSettings()
    health: HealthSettings = HealthSettings()

    @model_validator(mode="after")
    def _sensors_or_match(self) -> PlantConfig:
        if self.match is None and not self.sensors:
            raise ValueError("give the sensor columns (sensors: [...]) or a rule (match: {prefix: 'P1_'})")
        if self.match is not None and self.sensors:
            raise ValueError("give either sensors: [...] or match: {...}, not both")
        unknown = sorted(set(self.health.limits) - set(self.sensors)) if self.sensors else []
        if unknown:
            raise ValueError(f"health.limits names {unknown}, not sensors of this plant; its sensors: {self.sensors}")
        return self

    @property
    def resolved(self) -> bool:
        """False while the sensors are a rule not yet resolved against a file (see :func:`resolve_plants`)."""
        return self.match is None

    def data_schema(self) -> dict[str, list[str]]:
        """The plant's data schema: its sensor and input columns, in message order (bound into its artifacts)."""
        return {"sensors": list(self.sensors), "inputs": list(self.inputs)}


class PrivacySettings(Strict):
    """Flag privacy (randomized response) and the plant's whole-life privacy ledger (docs/privacy.md).

    ``budget`` is the total epsilon (at ``delta``) a plant may spend: its training releases
    (from the artifact it runs) composed with the randomized-response bits it published over
    the last ``window`` samples. ``on_exhausted`` says what a plant processor does when the
    next flags would pass it: ``warn`` (publish, log and export the overrun) or ``stop``
    (publish withheld flags that carry no bits; the verdicts say ``privacy_withheld``).
    """

    flag_epsilon: float = Field(math.inf, gt=0.0, description="per published flag; inf = off")
    level_epsilon: float = Field(
        math.inf, gt=0.0, description="per published severity level (k-ary randomized response); inf = off"
    )
    seed: int = Field(0, ge=0, le=MAX_SEED, description="seed of the randomized response (0..2^32 - 1)")
    budget: float = Field(math.inf, gt=0.0, description="total epsilon per plant (training + flags of a window)")
    delta: float = Field(1e-5, gt=0.0, lt=1.0, description="delta every epsilon is reported at")
    window: int = Field(3600, ge=1, le=MAX_PRIVACY_WINDOW, description="samples over which published flags compose")
    on_exhausted: Literal["warn", "stop"] = "warn"

    _inf = field_validator("flag_epsilon", "budget", "level_epsilon", mode="before")(parse_inf)
    _seed = field_validator("seed", mode="before")(parse_seed)

    @field_validator("flag_epsilon", "level_epsilon")
    @classmethod
    def _off_is_spelled_out(cls, value: float) -> float:
        # a finite epsilon this large keeps every bit (float64 keep probability 1.0): privacy off in
        # effect while the configuration reads as on; off is the word, never the effect of a number
        if math.isfinite(value) and value > MAX_RR_EPSILON:
            raise ValueError(
                f"{value:g} publishes every value unchanged, as inf does; write inf (or off) to switch "
                f"randomized response off, or give at most {MAX_RR_EPSILON:g}"
            )
        return value


#: Largest finite randomized-response epsilon: above it ``e^-eps`` is below float64's resolution of 1
#: (2^-53, eps > 36.7), so the keep probability is exactly 1 and no bit is ever flipped.
MAX_RR_EPSILON = 36.0


class TopicSettings(Strict):
    """Topic name templates; ``{site}`` and ``{plant}`` are substituted.

    Plant-private topics (a plant's sensors, its dead letters, its processor's state)
    carry ``{plant}`` so that each can get the ACLs of its own plant (docs/deploy.md).
    """

    sensors: str = "{site}.sensors.{plant}"
    flags: str = "{site}.flags"
    verdicts: str = "{site}.verdicts"
    params: str = "{site}.params"
    deadletter: str = "{site}.deadletter"
    plant_deadletter: str = "{site}.deadletter.{plant}"
    state: str = "{site}.state.{plant}"
    rca_state: str = "{site}.state.rca"
    train: str = "{site}.train.{plant}"
    history: str = "{site}.history.{plant}"
    control: str = "{site}.control"


class KafkaSettings(Strict):
    """How the workers and tools connect to a secured Kafka cluster (all optional; plaintext by default).

    Secrets never live in the file: the SASL password is read from the environment
    variable named by ``sasl_password_env``. Every value can also be given (and is
    overridden) by the environment: ``FEDRCA_KAFKA_SECURITY_PROTOCOL``,
    ``FEDRCA_KAFKA_SASL_MECHANISM``, ``FEDRCA_KAFKA_SASL_USERNAME``,
    ``FEDRCA_KAFKA_SSL_CAFILE``, ``FEDRCA_KAFKA_SSL_CERTFILE``, ``FEDRCA_KAFKA_SSL_KEYFILE``
    (docs/deploy.md).
    """

    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    sasl_username: str | None = None
    sasl_password_env: str = Field("FEDRCA_KAFKA_SASL_PASSWORD", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None

    @model_validator(mode="after")
    def _sasl_complete(self) -> KafkaSettings:
        if self.security_protocol.startswith("SASL") and (self.sasl_mechanism is None or not self.sasl_username):
            raise ValueError(
                f"security_protocol {self.security_protocol} needs sasl_mechanism (e.g. SCRAM-SHA-512) "
                "and sasl_username"
            )
        return self


class DatasetSettings(Strict):
    """Where the columns come from: a known format or an explicit column list.

    ``missing``: ``refuse`` (default) refuses a file with an empty cell (or ``nan``, ``NA``,
    ``null``); ``allow`` reads it as a missing value (NaN) that every command scores as plant
    data: the detectors use the observed sensors, training estimates on the observed
    entries, and a nominal column missing in more than half of its rows is refused
    (docs/missing.md).
    """

    format: Literal["tep", "csv", "hai", "swat", "synthetic"] = "csv"
    missing: Literal["refuse", "allow"] = Field(
        "refuse", description="refuse: an empty cell is an error; allow: a missing value, scored as such"
    )
    columns: list[str] | None = None
    time_column: str | None = None
    sample_seconds: float = Field(1.0, gt=0.0)
    label_columns: list[str] = Field(default_factory=list, description="generic CSV: 0/1 label columns")
    timezone: str = Field("UTC", description="IANA zone of times without offset (HAI Asia/Seoul, SWaT Asia/Singapore)")
    time_format: str | None = Field(None, description="strftime format of the time column; default: per format")

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a name too long for a file name
            raise ValueError(f"unknown time zone '{value}'; use an IANA name such as UTC, Asia/Seoul") from None
        return value

    def known_columns(self) -> list[str] | None:
        """The valid column names, when the format fixes them."""
        if self.columns is not None:
            return list(self.columns)
        known = KNOWN_COLUMNS.get(self.format)
        return None if known is None else list(known)


class GraphSettings(Strict):
    """Interdependency graph given by hand: directed edges ``[from, to]``."""

    edges: list[tuple[str, str]] = Field(default_factory=list)


class SiteConfig(Strict):
    """A validated site configuration."""

    site: str = Field(..., pattern=_NAME)
    dataset: DatasetSettings = DatasetSettings()
    plants: list[PlantConfig] = Field(..., min_length=1)
    privacy: PrivacySettings = PrivacySettings()
    topics: TopicSettings = TopicSettings()
    kafka: KafkaSettings = KafkaSettings()
    graph: GraphSettings | None = None
    training: TrainingSettings = TrainingSettings()
    rca: RCASettings = RCASettings()
    causal: CausalSettings = CausalSettings()
    drift: DriftSettings = DriftSettings()
    edge: EdgeSettings | None = Field(None, description="fedrca edge: the plants' tags on their protocols")
    source: str | None = Field(None, exclude=True)

    @property
    def plant_names(self) -> list[str]:
        """Plant names in configuration order."""
        return [p.name for p in self.plants]

    @property
    def resolved(self) -> bool:
        """True when every plant's sensors are explicit columns (no unresolved ``match`` rule)."""
        return all(p.resolved for p in self.plants)

    @property
    def severity_levels(self) -> int:
        """K of the severity levels every plant publishes (0 = none); one value per site (validated)."""
        return max((p.scoring.severity_levels for p in self.plants), default=0)

    def privacy_off(self, *, training: bool = False) -> str | None:
        """One sentence naming the settings that switch privacy off, for a command's output (None: all on).

        Off is always spelled out in the configuration (``inf`` / ``off``; a number that only
        overflows to infinity, or that keeps every bit, is refused), and the commands that
        publish flags (``training``: that train) say so when they start.

        Examples
        --------
        >>> from fedrca.config import load_config
        >>> print(load_config("config/synthetic_linear.yaml").privacy_off())
        randomized response off (privacy.flag_epsilon: inf): every published flag is the plant's own alarm bit
        """
        off: list[str] = []
        if training:
            t = self.training.privacy
            if math.isinf(t.state_epsilon) and math.isinf(t.gradient_epsilon) and math.isinf(t.moment_epsilon):
                off.append(
                    "training releases not noised (training.privacy.state_epsilon, gradient_epsilon, moment_epsilon: "
                    "inf): states, gradients and moments leave the plants as they are"
                )
            return "; ".join(off) or None
        if math.isinf(self.privacy.flag_epsilon):
            off.append(
                "randomized response off (privacy.flag_epsilon: inf): every published flag is the plant's own alarm bit"
            )
        if self.severity_levels and math.isinf(self.privacy.level_epsilon):
            off.append("severity levels published as they are (privacy.level_epsilon: inf)")
        return "; ".join(off) or None

    def plant(self, name: str) -> PlantConfig:
        """The plant called ``name``."""
        for p in self.plants:
            if p.name == name:
                return p
        raise ConfigError(f"unknown plant '{name}'; plants are {', '.join(self.plant_names)}", source=self.source)

    def topic(self, kind: str, plant: str | None = None) -> str:
        """Resolved topic name of ``kind`` (sensors, flags, verdicts, params, deadletter, train)."""
        template = getattr(self.topics, kind, None)
        if template is None:
            raise ConfigError(f"unknown topic kind '{kind}'; kinds are {', '.join(TopicSettings.model_fields)}")
        if "{plant}" in template and plant is None:
            raise ConfigError(f"topic '{kind}' is per plant; pass plant=")
        names = {"site": self.site} if plant is None else {"site": self.site, "plant": plant}
        return render_topic(str(template), **names)


_SECTIONS = ("model", "augmentation", "scoring", "health")


def parameters_hash(config: SiteConfig) -> str:
    """sha256 of what trained parameters depend on: the plants (names, inputs, models, scoring) and ``training``.

    Topics, Kafka, the RCA settings, the graph, flag privacy, ``scoring.min_sensors`` and the
    plants' sensor checks (``health``) are left out: changing them needs no retraining. The
    sensor columns are left out too, because a plant given by a ``match`` rule only has them
    once a data file resolved it; they are bound
    separately as each plant artifact's ``schema`` (:meth:`PlantConfig.data_schema`), checked
    wherever the plant's data is read. A training checkpoint and every artifact carry
    this hash, and an artifact is refused under a configuration with another one
    (:func:`fedrca.contracts.check_binding`; ``tests/training/test_artifacts.py``).
    """
    part = {
        # scoring.min_sensors only decides which rows are scored, health which tags: no retraining
        "plants": [
            plant.model_dump(
                mode="python",
                exclude={
                    "sensors": True,
                    "match": True,
                    "health": True,
                    "scoring": {"min_sensors"},
                    # a plant without a plug-in detector hashes as before the plug-in keys existed
                    **({} if plant.detector.kind == "plugin" else {"detector": {"plugin", "plugin_args"}}),
                },
            )
            for plant in config.plants
        ],
        "training": config.training.model_dump(mode="python"),
    }
    payload = json.dumps(part, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def compress_columns(columns: list[str]) -> str:
    """Human summary of a column list, collapsing numbered runs.

    Examples
    --------
    >>> compress_columns(["XMEAS(1)", "XMEAS(2)", "XMEAS(3)", "XMV(1)", "flow"])
    'XMEAS(1)..XMEAS(3), XMV(1), flow'
    """
    pattern = re.compile(r"^(.*?)(\d+)(\D*)$")
    parts: list[str] = []
    run: list[tuple[str, int, str, str]] = []

    def flush() -> None:
        if run:
            parts.append(run[0][3] if len(run) == 1 else f"{run[0][3]}..{run[-1][3]}")
            run.clear()

    for col in columns:
        match = pattern.match(col)
        if match is None:
            flush()
            parts.append(col)
            continue
        prefix, number, suffix = match.group(1), int(match.group(2)), match.group(3)
        if run and (run[-1][0], run[-1][2]) == (prefix, suffix) and run[-1][1] + 1 == number:
            run.append((prefix, number, suffix, col))
        else:
            flush()
            run.append((prefix, number, suffix, col))
    flush()
    return ", ".join(parts)


def _defaults_for(defaults: dict[str, Any], plant: dict[str, Any]) -> dict[str, Any]:
    """The ``defaults`` sections for one plant: site-wide ``health.limits`` keep only the plant's own sensors
    (a plant's own ``health.limits`` must name its sensors; the defaults may name every tag of the site)."""
    out = {k: defaults.get(k, {}) for k in _SECTIONS}
    health, sensors = out.get("health"), plant.get("sensors")
    if isinstance(health, dict) and isinstance(health.get("limits"), dict) and isinstance(sensors, list):
        own = {s for s in sensors if isinstance(s, str)}  # a malformed entry is reported by the plant's own check
        out["health"] = {**health, "limits": {t: v for t, v in health["limits"].items() if t in own}}
    return out


def parse_config(data: Any, source: str | None = None) -> SiteConfig:
    """Validate a configuration mapping (already parsed from YAML).

    Raises
    ------
    ConfigError
        With the file, the key path and the valid choices.
    """
    if not isinstance(data, dict):
        raise ConfigError("the configuration must be a mapping with keys site, plants, ...", source=source)
    data = copy.deepcopy(data)
    defaults = data.pop("defaults", None) or {}
    if not isinstance(defaults, dict):
        raise ConfigError(
            "must be a mapping of model/augmentation/scoring/health settings", source=source, key="defaults"
        )
    unknown = set(defaults) - set(_SECTIONS)
    if unknown:
        raise ConfigError(
            f"unknown section(s) {sorted(unknown)}; defaults may hold {', '.join(_SECTIONS)}",
            source=source,
            key="defaults",
        )
    plants = data.get("plants")
    if isinstance(plants, list):
        data["plants"] = [_merge(_defaults_for(defaults, p), p) if isinstance(p, dict) else p for p in plants]
    for section in ("training", "rca", "causal", "drift"):
        if data.get(section, ...) is None:
            data[section] = {}  # an empty section in YAML means "the defaults"
    if "edge" in data:
        data["edge"] = parse_edge(data["edge"], source)
    try:
        config = SiteConfig.model_validate({**data, "source": source})
    except ValidationError as exc:
        raise translate(exc, SiteConfig, source=source) from None
    _check_names(config, source)
    _check_columns(config, source)
    try:
        if config.drift.enabled:  # its durations count only when the loop runs (a 0.2 s site keeps no 2 weeks)
            config.drift.check_rows(config.dataset.sample_seconds)
    except ValueError as exc:
        raise ConfigError(f"{exc} at dataset.sample_seconds {config.dataset.sample_seconds:g}", source=source,
                          key="drift") from None  # fmt: skip
    known = config.dataset.known_columns()
    if known is not None and not config.resolved:
        config = resolve_plants(config, known)
    if config.edge is not None:
        check_edge(config.edge, {p.name: p.sensors if p.resolved else None for p in config.plants}, config.site, source)
    return config


def _check_names(config: SiteConfig, source: str | None) -> None:
    """Refuse site and plant names (and topic templates) that do not fit a Kafka topic or a file name."""
    for kind, template in config.topics.model_dump().items():
        per_plant = "{plant}" in template
        for i, plant in enumerate(config.plants if per_plant else config.plants[:1]):
            names = {"site": config.site, "plant": plant.name} if per_plant else {"site": config.site}
            try:
                topic = render_topic(template, **names)
            except ValueError as exc:
                raise ConfigError(str(exc), source=source, key=f"topics.{kind}") from None
            name, what, key = (
                (plant.name, "plant name", f"plants[{i}].name") if per_plant else (config.site, "site name", "site")
            )
            if per_plant and len(topic) - len(plant.name) >= MAX_TOPIC_LENGTH:
                # no plant name fits: the site name (or the template) is the one to shorten
                name, what, key = config.site, "site name", "site"
            problem = name_fits_topic(topic, name, what, template)
            if problem is not None:
                if len(topic) <= MAX_TOPIC_LENGTH:
                    key = f"topics.{kind}"
                raise ConfigError(problem, source=source, key=key)
    need = rca_bytes(config.rca.horizon, len(config.plants))
    if need > MEMORY_LIMIT:
        most = largest(MEMORY_LIMIT, lambda h: rca_bytes(h, len(config.plants)), config.rca.horizon)
        raise ConfigError(
            f"an evidence window of {config.rca.horizon} rows over {len(config.plants)} plants needs about "
            f"{gib(need)}, over the {gib(MEMORY_LIMIT)} limit (docs/limits.md): set it to at most {most}",
            source=source,
            key="rca.horizon",
        )
    for i, plant in enumerate(config.plants):
        # the longest file a plant's name is in: its training checkpoint's client-<plant>.json
        problem = file_name_problem(plant.name, "client-", ".json")
        if problem is not None:
            raise ConfigError(f"the plant name {problem}", source=source, key=f"plants[{i}].name")


def _check_columns(config: SiteConfig, source: str | None) -> None:
    known = config.dataset.known_columns()
    owner: dict[str, tuple[str, str]] = {}
    for i, plant in enumerate(config.plants):
        if plant.name in [p.name for p in config.plants[:i]]:
            raise ConfigError(f"duplicate plant name '{plant.name}'", source=source, key=f"plants[{i}].name")
        for kind in ("sensors", "inputs"):
            for j, column in enumerate(getattr(plant, kind)):
                key = f"plants[{i}].{kind}[{j}]"
                if known is not None and column not in known:
                    raise ConfigError(
                        f"unknown column '{column}'; columns are {compress_columns(known)}", source=source, key=key
                    )
                # A plant's control column may be both its sensor (its detector watches the valve) and its
                # input (the learner's u): TEP's XMVs (tests/config/test_site.py::test_a_control_column_*).
                if column in owner and (kind == "sensors" or owner[column] != (plant.name, "sensors")):
                    raise ConfigError(
                        f"column '{column}' is already used by plant '{owner[column][0]}'; each column belongs to "
                        "one plant, once as a sensor and at most once as that plant's input",
                        source=source,
                        key=key,
                    )
                owner[column] = (plant.name, kind)
    levels = {p.scoring.severity_levels for p in config.plants}
    if len(levels) > 1:
        raise ConfigError(
            f"plants publish different numbers of severity levels {sorted(levels)}; the RCA reads one scale: "
            "set scoring.severity_levels under defaults",
            source=source,
            key="plants[].scoring.severity_levels",
        )
    if levels != {0} and math.isfinite(config.privacy.budget):
        # The inference ledger (privacy/ledger.py FlagWindow) composes the randomized-response
        # bits of the flags; the severity levels' k-ary release is not in it yet.
        raise ConfigError(
            "severity levels are not accounted in the privacy ledger: with a finite privacy.budget set "
            "scoring.severity_levels: 0, or privacy.budget: inf",
            source=source,
            key="privacy.budget",
        )
    names = set(config.plant_names)
    for k, entry in enumerate(config.rca.unobserved_entry):
        if entry not in names:
            raise ConfigError(
                f"unknown plant '{entry}'; plants are {', '.join(config.plant_names)}",
                source=source,
                key=f"rca.unobserved_entry[{k}]",
            )
    if config.rca.graph.source == "config" and (config.graph is None or not config.graph.edges):
        raise ConfigError(
            "graph source 'config' needs the graph's edges under graph.edges: [[from, to], ...]",
            source=source,
            key="rca.graph.source",
        )
    if config.graph is not None:
        for k, (src, dst) in enumerate(config.graph.edges):
            for end, name in (("from", src), ("to", dst)):
                if name not in names:
                    raise ConfigError(
                        f"edge {end} unknown plant '{name}'; plants are {', '.join(config.plant_names)}",
                        source=source,
                        key=f"graph.edges[{k}]",
                    )


def group_columns(columns: Sequence[str], rules: Mapping[str, ColumnMatch | Mapping[str, Any]]) -> dict[str, list[str]]:
    """Group a file's columns into plants by rules (plant name -> rule); file order is kept.

    Raises
    ------
    ConfigError
        When a rule selects no column, or a column is selected by two plants' rules.

    Examples
    --------
    >>> rules = {"boiler": {"prefix": "P1_"}, "turbine": {"regex": "^P2_"}}
    >>> group_columns(["P1_FT01", "P1_LIT01", "P2_SIT01"], rules)
    {'boiler': ['P1_FT01', 'P1_LIT01'], 'turbine': ['P2_SIT01']}
    """
    parsed: dict[str, ColumnMatch] = {}
    for plant, rule in rules.items():
        if isinstance(rule, ColumnMatch):
            parsed[plant] = rule
            continue
        try:
            parsed[plant] = ColumnMatch.model_validate(rule)
        except ValidationError as exc:
            raise ConfigError(exc.errors()[0]["msg"], key=f"{plant}.match") from None
    return _apply_rules([str(c) for c in columns], parsed, claimed={})


def _apply_rules(
    columns: list[str],
    rules: Mapping[str, ColumnMatch],
    claimed: Mapping[str, str],
    source: str | None = None,
    keys: Mapping[str, str] | None = None,
) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {plant: [] for plant in rules}
    owner: dict[str, str] = {}
    for column in columns:
        if column in claimed:
            continue
        for plant, rule in rules.items():
            if not rule.matches(column):
                continue
            if column in owner:
                raise ConfigError(
                    f"column '{column}' matches the rules of plants '{owner[column]}' and '{plant}'; "
                    "narrow one rule or add the column to its exclude list",
                    source=source,
                    key=(keys or {}).get(plant, f"{plant}.match"),
                )
            owner[column] = plant
            groups[plant].append(column)
    for plant, cols in groups.items():
        if not cols:
            raise ConfigError(
                f"rule {rules[plant].describe()} of plant '{plant}' selects no column; "
                f"the data has {compress_columns(columns)}",
                source=source,
                key=(keys or {}).get(plant, f"{plant}.match"),
            )
    return groups


def resolve_plants(config: SiteConfig, columns: Sequence[str]) -> SiteConfig:
    """The configuration with every ``match`` rule replaced by the columns it selects in ``columns``.

    Columns listed explicitly by any plant (sensors or inputs) are never taken by a rule; the
    selected columns keep the order of ``columns``. A configuration without rules is returned
    as it is.

    Parameters
    ----------
    config : a validated configuration
    columns : the data file's sensor columns, in file order

    Raises
    ------
    ConfigError
        When a rule selects no column or two plants' rules select the same column.

    Examples
    --------
    >>> cfg = parse_config({"site": "hai", "plants": [{"name": "boiler", "match": {"prefix": "P1_"}},
    ...                                               {"name": "turbine", "match": {"prefix": "P2_"}}]})
    >>> cfg.resolved
    False
    >>> resolve_plants(cfg, ["P1_FT01", "P2_SIT01", "P1_LIT01"]).plant("boiler").sensors
    ['P1_FT01', 'P1_LIT01']
    """
    if config.resolved:
        return config
    names = [str(c) for c in columns]
    claimed = {c: p.name for p in config.plants for c in (*p.sensors, *p.inputs)}
    rules = {p.name: p.match for p in config.plants if p.match is not None}
    keys = {p.name: f"plants[{i}].match" for i, p in enumerate(config.plants)}
    groups = _apply_rules(names, rules, claimed, source=config.source, keys=keys)
    plants = [
        p if p.match is None else p.model_copy(update={"sensors": groups[p.name], "match": None}) for p in config.plants
    ]
    return config.model_copy(update={"plants": plants})


def load_config(path: str | Path) -> SiteConfig:
    """Read and validate a YAML configuration file.

    Raises
    ------
    ConfigError
        When the file is missing, unreadable, not strict YAML (see :mod:`fedrca.config._yaml`)
        or fails validation; the message names the file, the key path and what would be valid.
    """
    file = Path(path)
    source = str(path)
    if file.is_dir():
        raise ConfigError("is a directory; give the configuration's YAML file, e.g. config/tep.yaml", source=source)
    if not file.is_file():
        raise ConfigError(
            "no such configuration file; see config/ for examples (tep.yaml, synthetic.yaml)", source=source
        )
    return parse_config(read_yaml(file, source), source=source)
