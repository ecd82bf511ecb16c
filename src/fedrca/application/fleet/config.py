"""The ``fedrca fleet`` configuration: a small, strict YAML schema (validated, immutable).

::

    fleet: tep-fleet                 # name (Kafka topics are <fleet>.<run id>.peer.<participant>)
    data: {format: tep}              # a site's dataset section: format, columns, time_column, label_columns, ...
    participants:                    # one entry per participant: its own nominal data
      - {name: seg1, file: data/tep/d00.dat, rows: [0, 100]}
      - {name: seg2, file: data/tep/d00.dat, rows: [100, 200]}
      - {name: sim200, simulate: {seed: 200}}  # a cached nominal TEP simulator run (data.format tep)
    model: {components: 2, rho: 10.0, lambda0: 1.0}
    consensus: {chunks: 3, tolerance: 1.0e-12, step: degree}
    graph: {kind: expander}          # expander | ring | adjacency (+ neighbours: [[1, 4], [0, 2], ...])
    threshold: {folds: 5, percentile: 99.5, scope: participant, ewma: null}
    privacy: {l0: 2.0, noise: false}
    seed: 0
    evaluate:                        # optional: files the participants' detectors score
      participants: [seg1, seg2]     # whose plant the files come from (default: every participant)
      onset: 160
      nominal: [data/tep/d00_te.dat]
      faults: {"01": data/tep/d01_te.dat}

``data`` is a site's ``dataset`` section (:class:`~fedrca.config.DatasetSettings`: ``format``
tep/csv/hai/swat, ``time_column``, ``label_columns``, ``sample_seconds``, ``timezone``,
``time_format``), read by the loader every command uses, so a CSV's time and label columns
are never variables; ``columns`` lists the variables (default: every other column).
Names fit the transports and file systems they reach (``fedrca.config.limits``): a fleet and a
participant name together fit a Kafka topic, a participant name a file name. Numbers are
bounded where they set memory or run time (docs/limits.md); the bounds that depend on the
data (components, folds) are checked once the data is read (:mod:`fedrca.application.fleet.sources`).

Relative file paths are taken from the directory ``fedrca`` runs in. Every error
names the file, the key path and what would be valid.

Examples
--------
>>> cfg = parse_fleet_config({"fleet": "demo", "participants": [{"name": "a", "file": "x.csv"},
...                           {"name": "b", "file": "y.csv", "rows": [0, 50]}]})
>>> cfg.names, cfg.settings().chunks
(['a', 'b'], 3)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from fedrca.config import DatasetSettings
from fedrca.config._base import Strict
from fedrca.config._yaml import read_yaml
from fedrca.config.limits import MAX_TOPIC_LENGTH, file_name_problem, name_fits_topic
from fedrca.exceptions import ConfigError
from fedrca.fleet.collabdict import FleetSettings
from fedrca.fleet.consensus import PeerGraph

__all__ = ["FleetConfig", "ParticipantConfig", "SimulateSource", "load_fleet_config", "parse_fleet_config"]

_NAME = r"^[A-Za-z][A-Za-z0-9_-]*$"


class _Strict(Strict):
    # no inf or nan anywhere: every number of a fleet is a finite setting (and no boolean is one: Strict)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


#: Topic a participant reads over Kafka: ``<fleet>.<run id: 8 hex digits>.peer.<participant>``
#: (:func:`fedrca.application.fleet.kafka.peer_topic`; the run id is drawn per run).
PEER_TOPIC = "{fleet}.xxxxxxxx.peer.{participant}"
#: Largest settings that are not bounded by the data (run time and message sizes; docs/limits.md).
MAX_ITER, MAX_INIT, MAX_ROUNDS, MAX_CHUNKS, MAX_NOISE_SAMPLES, MAX_PARTICIPANTS = (
    10_000,
    1_000,
    1_000_000,
    64,
    1_000,
    1_000,
)


class DataSettings(DatasetSettings):
    """How every participant's file is read: a site's ``dataset`` section (the same loader and options);
    ``columns`` are the variables, in order (default: every column but the time and label columns)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    format: Literal["tep", "csv", "hai", "swat"] = "csv"
    columns: list[str] | None = Field(None, min_length=1, description="the variables, in order (default: every one)")

    @field_validator("columns")
    @classmethod
    def _distinct(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and len(set(value)) != len(value):
            repeated = sorted({c for c in value if value.count(c) > 1})
            raise ValueError(f"columns must not repeat a variable; repeated: {', '.join(repeated)}")
        return value


class SimulateSource(_Strict):
    """A nominal run of the TEP simulator (``fedrca.connectors.simulator``) as a participant's data.

    Read from the run cache (``$FEDRCA_CACHE/tep-library``, filled by ``python bench/tep_library.py``);
    with ``generate: true`` a missing run is simulated (needs ``fedrca[sim]``) and cached first.
    Seeds below 100 are the project's independent-check seeds: use them only for that check.
    """

    seed: int = Field(..., ge=0, lt=2**32)
    hours: float = Field(48.0, gt=0.0, le=10_000.0)
    mode: Literal["mode1", "mode2", "mode3", "mode4", "mode5", "mode6"] = "mode1"
    generate: bool = False


class ParticipantConfig(_Strict):
    """One participant and its nominal data: a file or a simulated nominal run, optionally rows [start, stop)."""

    name: str = Field(..., pattern=_NAME)
    file: str | None = Field(None, min_length=1)
    simulate: SimulateSource | None = None
    rows: tuple[int, int] | None = None

    @model_validator(mode="after")
    def _rows(self) -> ParticipantConfig:
        if (self.file is None) == (self.simulate is None):
            raise ValueError("give exactly one source: file: PATH or simulate: {seed: N}")
        if self.rows is not None and not 0 <= self.rows[0] < self.rows[1]:
            raise ValueError(f"rows must be [start, stop) with 0 <= start < stop, got {list(self.rows)}")
        return self

    @property
    def source(self) -> str:
        """The key of :data:`fedrca.application.fleet.sources.LOADERS` that reads this participant."""
        return "file" if self.file is not None else "simulate"


class ModelSection(_Strict):
    """The mixture: K, the priors, EM stopping and pruning."""

    components: int = Field(2, ge=1, description="at most the fleet's rows / (variables + 1) and the memory limit")
    rho: float = Field(10.0, ge=0.0)
    lambda0: float = Field(1.0, gt=0.0)
    max_iter: int = Field(100, ge=1, le=MAX_ITER)
    em_tol: float = Field(1e-6, ge=0.0)
    prune: float = Field(1e-3, ge=0.0, lt=1.0)
    n_init: int = Field(10, ge=1, le=MAX_INIT)


class ConsensusSection(_Strict):
    """Dynamical consensus and random chunking."""

    chunks: int = Field(3, ge=1, le=MAX_CHUNKS)
    tolerance: float = Field(1e-12, gt=0.0, lt=1.0)
    step: Literal["degree", "paper"] | float = "degree"
    max_rounds: int = Field(100_000, ge=1, le=MAX_ROUNDS)


class GraphSection(_Strict):
    """The peer graph over the participants (in the order they are listed)."""

    kind: Literal["expander", "ring", "adjacency"] = "expander"
    neighbours: list[list[int]] | None = None

    @model_validator(mode="after")
    def _adjacency(self) -> GraphSection:
        if (self.kind == "adjacency") != (self.neighbours is not None):
            raise ValueError("give neighbours: [[...], ...] exactly when kind is adjacency")
        return self


class ThresholdSection(_Strict):
    """The nominal-score thresholds: cross-fitting folds (0 = in-sample), percentile, whose
    threshold (each participant's own, or one for the fleet) and the statistic (score or its EWMA)."""

    folds: int = Field(5, ge=0, description="at most the fewest rows of a participant / 18")
    percentile: float = Field(99.5, gt=0.0, lt=100.0)
    scope: Literal["participant", "fleet"] = "participant"
    ewma: float | None = Field(None, gt=0.0, le=1.0, description="lambda of the smoothed score; null = the score")

    @model_validator(mode="after")
    def _folds(self) -> ThresholdSection:
        if self.folds == 1:
            raise ValueError("folds must be 0 (in-sample scores) or >= 2")
        return self


class PrivacySection(_Strict):
    """The entropy l-diversity monitor."""

    l0: float = Field(2.0, ge=1.0)
    diversity: Literal["max", "min"] = "max"
    noise: bool = False
    noise_samples: int = Field(10, ge=1, le=MAX_NOISE_SAMPLES)


class EvaluateSection(_Strict):
    """Files the participants' detectors score after learning (nominal: false alarms; faults: detection).

    ``participants``: whose plant the files come from (each one's threshold is calibrated for its own
    plant); None = every participant.
    """

    participants: list[str] | None = Field(None, min_length=1)
    onset: int = Field(0, ge=0, description="fault rows start here (TEP test files: 160)")
    nominal: list[str] = Field(default_factory=list)
    faults: dict[str, str] = Field(default_factory=dict)


class FleetConfig(_Strict):
    """A validated fleet configuration."""

    fleet: str = Field(..., pattern=_NAME)
    data: DataSettings = DataSettings()
    participants: list[ParticipantConfig] = Field(..., min_length=1, max_length=MAX_PARTICIPANTS)
    model: ModelSection = ModelSection()
    consensus: ConsensusSection = ConsensusSection()
    graph: GraphSection = GraphSection()
    threshold: ThresholdSection = ThresholdSection()
    privacy: PrivacySection = PrivacySection()
    seed: int = Field(0, ge=0, lt=2**32)
    evaluate: EvaluateSection | None = None
    source: str | None = Field(None, exclude=True)

    @model_validator(mode="after")
    def _unique(self) -> FleetConfig:
        names = [p.name for p in self.participants]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"participant names must be unique; repeated: {', '.join(dup)}")
        unknown = sorted(set(self.evaluate.participants or []) - set(names)) if self.evaluate else []
        if unknown:
            raise ValueError(f"evaluate.participants names no participant: {', '.join(unknown)}")
        simulated = [p.name for p in self.participants if p.simulate is not None]
        if simulated and self.data.format != "tep":
            raise ValueError(
                f"simulated participants ({', '.join(simulated)}) give TEP samples; set data: {{format: tep}}"
            )
        return self

    @property
    def names(self) -> list[str]:
        """Participant names in the fleet's agreed order."""
        return [p.name for p in self.participants]

    def inputs(self, config_path: str | Path) -> dict[str, str]:
        """Every file a run reads, by the option or key that names it (the outputs must not touch them)."""
        files = {"--config": str(config_path)}
        for k, p in enumerate(self.participants):
            if p.file is not None:
                files[f"participants[{k}].file"] = p.file
        if self.evaluate is not None:
            for k, path in enumerate(self.evaluate.nominal):
                files[f"evaluate.nominal[{k}]"] = path
            for label, path in self.evaluate.faults.items():
                files[f"evaluate.faults.{label}"] = path
        return files

    def settings(self) -> FleetSettings:
        """The core's :class:`~fedrca.fleet.collabdict.FleetSettings`."""
        m, c, t, p = self.model, self.consensus, self.threshold, self.privacy
        return FleetSettings(
            n_components=m.components,
            rho=m.rho,
            lambda0=m.lambda0,
            max_iter=m.max_iter,
            em_tol=m.em_tol,
            prune=m.prune,
            n_init=m.n_init,
            chunks=c.chunks,
            tolerance=c.tolerance,
            step=c.step,
            max_rounds=c.max_rounds,
            folds=t.folds,
            percentile=t.percentile,
            threshold_scope=t.scope,
            ewma=t.ewma,
            l0=p.l0,
            diversity=p.diversity,
            privacy_noise=p.noise,
            noise_samples=p.noise_samples,
            seed=self.seed,
        )

    def peer_graph(self) -> PeerGraph:
        """The configured peer graph (ConfigError naming ``graph`` when it is invalid)."""
        n = len(self.participants)
        try:
            if self.graph.kind == "ring":
                return PeerGraph.ring(n)
            if self.graph.kind == "adjacency":
                rows = self.graph.neighbours or []
                if len(rows) != n:
                    raise ConfigError(f"neighbours lists {len(rows)} participants, the fleet has {n}")
                return PeerGraph(rows)
            return PeerGraph.default(n)
        except ConfigError as exc:
            raise ConfigError(getattr(exc, "reason", str(exc)), source=self.source, key="graph") from None


def _key_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def parse_fleet_config(data: Any, source: str | None = None) -> FleetConfig:
    """Validate a fleet configuration mapping (already parsed from YAML).

    Raises
    ------
    ConfigError
        With the file, the key path and what would be valid.
    """
    if not isinstance(data, dict):
        raise ConfigError("the fleet configuration must be a mapping with keys fleet, participants, ...", source=source)
    try:
        config = FleetConfig.model_validate({**data, "source": source})
    except ValidationError as exc:
        first = exc.errors()[0]
        message = str(first["msg"]).removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            message = "unknown key (check the spelling; see fedrca.application.fleet.config for the valid keys)"
        raise ConfigError(message, source=source, key=_key_path(tuple(first["loc"]))) from None
    room = MAX_TOPIC_LENGTH - len(PEER_TOPIC.format(fleet=config.fleet, participant=""))
    if room < 1:
        raise ConfigError(
            f"a fleet name of {len(config.fleet)} characters leaves no room for participant names in the topics "
            f"{PEER_TOPIC} (Kafka allows {MAX_TOPIC_LENGTH}): give a fleet name of at most "
            f"{len(config.fleet) + room - 1} characters",
            source=source,
            key="fleet",
        )
    for k, p in enumerate(config.participants):
        # the name reaches a Kafka topic (with the fleet's) and a file name (participants/<name>.json)
        topic = PEER_TOPIC.format(fleet=config.fleet, participant=p.name)
        problem = name_fits_topic(topic, p.name, "participant name", PEER_TOPIC)
        in_file = file_name_problem(p.name, suffix=".json")
        problem = problem or (None if in_file is None else f"the participant name {in_file}")
        if problem is not None:
            raise ConfigError(problem, source=source, key=f"participants[{k}].name")
    try:
        config.settings()
    except ConfigError as exc:
        raise ConfigError(exc.reason, source=source, key=exc.key) from None
    return config


def load_fleet_config(path: str | Path) -> FleetConfig:
    """Read and validate a fleet YAML file (ConfigError naming the file and the key)."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError("no such fleet configuration; see config/fleet-tep.yaml for an example", source=str(path))
    # the site configuration's strict reader: a key given twice (in any style), alias bombs, deep nesting
    return parse_fleet_config(read_yaml(file, str(path)), source=str(path))
