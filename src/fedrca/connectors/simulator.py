"""Live Tennessee Eastman simulator source (optional extra ``fedrca[sim]`` = ``tep-studio``).

Runs the revised TEP model of Bathelt, Ricker & Jelali (2015, the ``temexd_mod``
kernel) under its decentralised multi-loop PI control (Ricker 1996), as packaged
by ``tep-studio``, and produces samples in the 52-column layout of the recorded
Braatz files that :func:`fedrca.datasets.tep.load_tep` reads:

* ``XMEAS(1..41)`` = ``measurement.*`` of the package's schema, in schema order
  (22 continuous measurements, then the reactor-feed, purge and product analysers);
* ``XMV(1..11)`` = the **implemented** actions of the first 11 manipulated
  variables in schema order (the 11 valves of Downs & Vogel; the 12th, the reactor
  agitator speed, is not a TEP XMV column);
* one row every ``sample_seconds`` (180 s = 3 minutes), row k holding the plant at
  time ``(k + 1) * sample_seconds``.

The column map is checked against the schema at run time (:func:`column_map`) and
against Downs & Vogel's order by ``tests/connectors/test_simulator.py``.

The core install does not need the simulator: ``tep_studio`` is imported only when
a simulation is built, and its absence is a :class:`fedrca.exceptions.ModelError`
naming ``pip install 'fedrca[sim]'``.

Slowly varying conditions (:class:`Variation`): a cycle or a ramp of a disturbance's
activation (the kernel then scales its disturbances continuously, ``SCALED_IDV``), of a
controller setpoint (relative to the mode's) or of a measurement's calibration (a bias the
controller and the record both see): the seasons, load cycles, new operating points and
sensor drifts of a plant that runs for weeks (``bench/bench_drift.py``).

Runs are deterministic in ``seed`` (the kernel's measurement-noise and random
disturbance generator). :func:`cached_run` keeps finished runs under
``$FEDRCA_CACHE`` (default ``~/.cache/fedrca``)``/tep-library``, keyed by every
setting and the ``tep-studio`` version.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import json
import math
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, BinaryIO

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from fedrca.connectors.replay import Pacer, ReplayStats, Sink
from fedrca.contracts import SensorMessage
from fedrca.contracts.artifacts import arrays_sha256, read_npz, special_file
from fedrca.contracts.bounds import parse_json
from fedrca.datasets.tep import TEP_COLUMNS
from fedrca.exceptions import ArtifactError, ConfigError, DataError, MessageError, ModelError

__all__ = [
    "DESIGN_CONTROL_INTERVAL_H",
    "MAX_HOURS",
    "SCALED_IDV",
    "SIM_EXTRA_HINT",
    "TEP_MODES",
    "Disturbance",
    "SimulatedRun",
    "SimulationSpec",
    "TEPSimulator",
    "Variation",
    "cached_run",
    "column_map",
    "default_cache_dir",
    "dump_tep_dat",
    "load_tep_studio",
    "parse_disturbance",
    "simulate",
    "simulator_version",
    "stream_simulation",
    "write_tep_dat",
]

FloatArray = NDArray[np.float64]

#: Longest simulated run, h: 200,000 samples of 52 columns (83 MB of values; docs/limits.md).
MAX_HOURS = 10_000.0

#: What to run when the optional simulator is missing.
SIM_EXTRA_HINT = "pip install 'fedrca[sim]'"
#: Operating modes of the revised model.
TEP_MODES = ("mode1", "mode2", "mode3", "mode4", "mode5", "mode6")
#: Sample time (h) of the decentralised controller's loops (tep-studio's ``RICKER_MODE1``
#: ``ts_base``). Sampling the controller slower changes the plant: at 0.01 h the reactor
#: temperature and pressures vary 2-3x more than at the design rate (measured, see
#: docs/connectors.md), so the design rate is the default.
DESIGN_CONTROL_INTERVAL_H = 0.0005
#: Most integration steps (control intervals) of one run: the longest run (:data:`MAX_HOURS`) at the design
#: rate, 20 million (47 min on the reference machine, docs/limits.md). A finer control interval is for a
#: shorter run: ``--control-interval 1e-9`` made 50 million steps for each 3-minute sample.
MAX_INTEGRATION_STEPS = round(MAX_HOURS / DESIGN_CONTROL_INTERVAL_H)
#: Number of TEP disturbances (IDV 1..28) in the revised model.
N_IDV = 28
#: Kernel flag bit (``MSFlag``) of the revised model: an IDV activation in [0, 1] scales its disturbance
#: instead of switching it on at 0.5 (tep-studio's default flags, 0x0F, leave it off). Set only for the
#: runs that need it, so the cache keys and rows of every other run stay as they were.
SCALED_IDV = 0x80
#: tep-studio's default kernel flags (measurement noise and the random disturbances on).
DEFAULT_MS_FLAG = 0x0F
#: Controller setpoints a :class:`Variation` may move (``setpoint:<name>``; tep-studio's ControllerSetpoints).
SETPOINTS = (
    "reactor_level",
    "reactor_pressure",
    "reactor_temperature",
    "separator_level",
    "stripper_level",
    "pct_g",
    "production_rate",
)


def load_tep_studio() -> ModuleType:
    """Import ``tep_studio`` or raise a one-line :class:`ModelError` naming the extra."""
    try:
        return importlib.import_module("tep_studio")
    except ImportError as exc:
        raise ModelError(
            f"the TEP simulator needs the optional extra 'sim' (tep-studio): {SIM_EXTRA_HINT} ({exc})"
        ) from None


def simulator_version() -> str:
    """The installed ``tep-studio`` version (ModelError when the extra is missing)."""
    return str(load_tep_studio().__version__)


def column_map() -> list[tuple[str, str]]:
    """``(TEP column, tep-studio schema variable)`` for the 52 columns, checked against the schema.

    Returns
    -------
    list of (str, str)
        ``("XMEAS(i)", "measurement.<name>")`` for i = 1..41 and
        ``("XMV(j)", "implemented_action.<name>")`` for j = 1..11.

    Raises
    ------
    ModelError
        When the installed schema does not have 41 measurements and at least 11
        manipulated variables, or its analysers do not carry the legacy XMEAS(23..41)
        numbers (a tep-studio release with another layout).
    """
    schema = load_tep_studio().TEP_SCHEMA
    measurements = schema.measurements
    valves = schema.manipulated_variables
    if len(measurements) != 41 or len(valves) < 11:
        raise ModelError(
            f"tep-studio schema has {len(measurements)} measurements and {len(valves)} manipulated variables; "
            f"fedrca needs 41 and >= 11 (install a supported version: {SIM_EXTRA_HINT})"
        )
    for i, var in enumerate(measurements):
        legacy = getattr(var, "legacy_index", None)
        if var.index != i or (legacy is not None and legacy != i + 1):
            raise ModelError(
                f"tep-studio measurement {var.name!r} is at index {var.index} (legacy XMEAS {legacy}), "
                f"expected XMEAS({i + 1}); this tep-studio version is not supported ({SIM_EXTRA_HINT})"
            )
    pairs = [(f"XMEAS({i + 1})", f"measurement.{v.name}") for i, v in enumerate(measurements)]
    pairs += [(f"XMV({j + 1})", f"implemented_action.{valves[j].name}") for j in range(11)]
    return pairs


@dataclass(frozen=True)
class Disturbance:
    """One TEP disturbance IDV(``idv``) switched on at ``onset_h`` hours (latched, as in TEP).

    Examples
    --------
    >>> Disturbance(14, 8.0).name
    'idv_14'
    """

    idv: int
    onset_h: float = 0.0
    magnitude: float = 1.0
    end_h: float = math.inf

    def __post_init__(self) -> None:
        if not 1 <= self.idv <= N_IDV:
            raise ConfigError(f"IDV {self.idv} does not exist; TEP disturbances are 1..{N_IDV}", key="--idv")
        if not (math.isfinite(self.onset_h) and self.onset_h >= 0):
            raise ConfigError(f"IDV {self.idv}: onset {self.onset_h} h must be a finite time >= 0", key="--idv")
        if not 0.0 <= self.magnitude <= 1.0:
            raise ConfigError(f"IDV {self.idv}: magnitude {self.magnitude} must be in [0, 1]", key="--idv")
        if not self.end_h > self.onset_h:
            raise ConfigError(f"IDV {self.idv}: it ends at {self.end_h} h, before its onset {self.onset_h} h",
                              key="--idv")  # fmt: skip

    def active(self, time_h: float) -> bool:
        """Whether the disturbance is on during the interval that starts at ``time_h``."""
        return self.onset_h - 1e-9 <= time_h < self.end_h - 1e-9

    @property
    def name(self) -> str:
        """The schema name, ``idv_NN``."""
        return f"idv_{self.idv:02d}"


def parse_disturbance(text: str) -> Disturbance:
    """Parse ``"14"`` (on from the start) or ``"14@8"`` (on from hour 8) into a :class:`Disturbance`.

    Examples
    --------
    >>> parse_disturbance("14@8")
    Disturbance(idv=14, onset_h=8.0, magnitude=1.0, end_h=inf)
    """
    number, _, onset = text.strip().partition("@")
    try:
        idv = int(number.lower().removeprefix("idv").removeprefix("_"))
        onset_h = float(onset) if onset else 0.0
    except ValueError:
        raise ConfigError(f"{text!r} is not a disturbance; write IDV[@HOURS], e.g. 14@8", key="--idv") from None
    return Disturbance(idv, onset_h)


@dataclass(frozen=True)
class Variation:
    """A slow change of the plant's conditions during a run.

    ``target`` is what changes:

    * ``idv:N``: the activation of disturbance IDV N, in [0, 1] (the kernel scales the
      disturbance, :data:`SCALED_IDV`; the terms of one IDV add up, clipped to [0, 1]);
    * ``setpoint:NAME``: a controller setpoint (:data:`SETPOINTS`), relative to the mode's
      (0.02 = 2 % above it; the controller rate-limits its production and %G targets);
    * ``sensor:XMEAS(i)``: a bias of measurement i in its units, seen by the controller and
      recorded (an instrument drifting out of calibration).

    ``shape`` ``cycle``: ``amplitude (1 - cos(2 pi (t - start_h) / period_h + phase)) / 2``, between 0
    and ``amplitude`` (a season, a daily load cycle); ``ramp``: from 0 at ``start_h`` to ``amplitude``
    at ``full_h``, held after. Both are 0 before ``start_h`` and from ``end_h`` on.

    Examples
    --------
    >>> v = Variation("idv:5", "cycle", 0.5, period_h=24.0)
    >>> round(v.value(0.0), 3), round(v.value(12.0), 3)
    (0.0, 0.5)
    >>> Variation("sensor:XMEAS(22)", "ramp", 2.0, start_h=10.0, full_h=20.0, end_h=30.0).value(15.0)
    1.0
    """

    target: str
    shape: str
    amplitude: float
    start_h: float = 0.0
    end_h: float = math.inf
    period_h: float = 0.0
    full_h: float = 0.0
    phase: float = 0.0

    def __post_init__(self) -> None:
        kind, _, name = self.target.partition(":")
        if kind == "idv":
            if not name.isdigit() or not 1 <= int(name) <= N_IDV:
                raise ConfigError(f"variation of {self.target!r}: IDVs are idv:1..idv:{N_IDV}", key="variations")
        elif kind == "setpoint":
            if name not in SETPOINTS:
                raise ConfigError(
                    f"variation of {self.target!r}: setpoints are {', '.join(SETPOINTS)}", key="variations"
                )
        elif kind == "sensor":
            if not re.fullmatch(r"XMEAS\(([1-9]|[1-3][0-9]|4[01])\)", name):
                raise ConfigError(f"variation of {self.target!r}: sensors are XMEAS(1)..XMEAS(41)", key="variations")
        else:
            raise ConfigError(
                f"variation target {self.target!r}: write idv:N, setpoint:NAME or sensor:XMEAS(i)", key="variations"
            )
        values = (self.amplitude, self.start_h, self.period_h, self.full_h, self.phase)
        if not all(math.isfinite(v) for v in values) or self.start_h < 0 or not self.end_h > self.start_h:
            raise ConfigError(f"variation of {self.target}: finite numbers, 0 <= start_h < end_h", key="variations")
        if self.shape == "cycle" and self.period_h <= 0:
            raise ConfigError(f"cycle of {self.target}: period_h must be > 0", key="variations")
        if self.shape == "ramp" and self.full_h <= self.start_h:
            raise ConfigError(f"ramp of {self.target}: full_h must be after start_h", key="variations")
        if self.shape not in ("cycle", "ramp"):
            raise ConfigError(f"variation shape {self.shape!r}: cycle or ramp", key="variations")

    @property
    def kind(self) -> str:
        """``idv``, ``setpoint`` or ``sensor``."""
        return self.target.partition(":")[0]

    @property
    def name(self) -> str:
        """The IDV number, setpoint name or sensor column."""
        return self.target.partition(":")[2]

    def value(self, time_h: float) -> float:
        """The term at ``time_h`` hours."""
        if time_h < self.start_h - 1e-9 or time_h >= self.end_h - 1e-9:
            return 0.0
        if self.shape == "cycle":
            # A (1 - cos(2 pi (t - t0) / P + phase)) / 2
            angle = 2.0 * math.pi * (time_h - self.start_h) / self.period_h + self.phase
            return self.amplitude * (1.0 - math.cos(angle)) / 2.0
        # A min(1, (t - t0) / (t_full - t0))
        return self.amplitude * min(1.0, (time_h - self.start_h) / (self.full_h - self.start_h))

    def as_list(self) -> list[Any]:
        """JSON-friendly settings (cache key and metadata)."""
        return [self.target, self.shape, self.amplitude, self.start_h, self.end_h, self.period_h, self.full_h,
                self.phase]  # fmt: skip


@dataclass(frozen=True)
class SimulationSpec:
    """Everything that determines a simulated run (and its cache key).

    Parameters
    ----------
    hours : simulated time, h (> 0)
    seed : the kernel's noise / random-disturbance seed (an integer >= 0)
    disturbances : IDVs switched on during the run
    mode : operating mode, ``mode1`` .. ``mode6``
    control_interval : controller sample time and integration interval, h
    sample_seconds : interval between recorded rows, s (a multiple of the control interval)
    variations : slowly varying conditions (seasons, load cycles, setpoints, sensor drifts)
    """

    hours: float
    seed: int
    disturbances: tuple[Disturbance, ...] = ()
    mode: str = "mode1"
    control_interval: float = DESIGN_CONTROL_INTERVAL_H
    sample_seconds: float = 180.0
    variations: tuple[Variation, ...] = ()

    def __post_init__(self) -> None:
        if not (math.isfinite(self.hours) and 0 < self.hours <= MAX_HOURS):
            raise ConfigError(
                f"hours must be in (0, {MAX_HOURS:g}] (at most {MAX_HOURS * 20:,.0f} samples; docs/limits.md), "
                f"got {self.hours}",
                key="--hours",
            )
        if self.n_samples < 1:
            raise ConfigError(
                f"{self.hours:g} h is shorter than one {self.sample_seconds:g}-second sample: the run would write "
                f"nothing; give at least {self.sample_seconds / 3600:g} h",
                key="--hours",
            )
        if int(self.seed) != self.seed or not 0 <= self.seed < 2**32:
            raise ConfigError(f"seed must be an integer in 0..{2**32 - 1}, got {self.seed}", key="--seed")
        if self.mode not in TEP_MODES:
            raise ConfigError(f"unknown mode {self.mode!r}; modes are {', '.join(TEP_MODES)}", key="--mode")
        if not (0 < self.control_interval <= 0.05):
            raise ConfigError(
                f"control interval {self.control_interval} h must be in (0, 0.05]", key="--control-interval"
            )
        if (
            self.steps_per_sample < 1
            or abs(self.steps_per_sample * self.control_interval * 3600 - self.sample_seconds) > 1e-6
        ):
            raise ConfigError(
                f"sample interval {self.sample_seconds} s must be a multiple of the control interval "
                f"{self.control_interval} h ({self.control_interval * 3600:g} s)",
                key="--sample-seconds",
            )
        steps = self.n_samples * self.steps_per_sample
        if steps > MAX_INTEGRATION_STEPS:
            finest = self.hours / MAX_INTEGRATION_STEPS
            raise ConfigError(
                f"{self.control_interval:g} h makes {self.steps_per_sample:,} integration steps a sample, {steps:,} "
                f"in the {self.hours:g} h run: more than the {MAX_INTEGRATION_STEPS:,} of the longest run at the "
                f"design rate (docs/limits.md); give a control interval of at least {finest:.3g} h, or fewer --hours",
                key="--control-interval",
            )
        if len({d.idv for d in self.disturbances}) != len(self.disturbances):
            raise ConfigError("each IDV may be given once", key="--idv")
        late = [d for d in self.disturbances if d.onset_h >= self.hours]
        if late:
            raise ConfigError(
                f"IDV {late[0].idv} starts at {late[0].onset_h:g} h, after the {self.hours:g} h run ends; give an "
                "onset before the end (or more --hours)",
                key="--idv",
            )

    @property
    def steps_per_sample(self) -> int:
        """Control intervals per recorded row."""
        return round(self.sample_seconds / (self.control_interval * 3600))

    @property
    def n_samples(self) -> int:
        """Rows of a run that does not shut down."""
        return round(self.hours * 3600 / self.sample_seconds)

    @property
    def scaled(self) -> bool:
        """Whether the kernel must scale its disturbances (an IDV varies or has a magnitude strictly inside (0, 1))."""
        return any(v.kind == "idv" for v in self.variations) or any(0.0 < d.magnitude < 1.0 for d in self.disturbances)

    @property
    def ms_flag(self) -> int:
        """The kernel flags of the run (:data:`SCALED_IDV` only when :attr:`scaled`)."""
        return DEFAULT_MS_FLAG | SCALED_IDV if self.scaled else DEFAULT_MS_FLAG

    def idv_vector(self, time_h: float) -> FloatArray:
        """The 28 IDV activations in force during the interval that starts at ``time_h``."""
        vec = np.zeros(N_IDV)
        for d in self.disturbances:
            if d.active(time_h):
                vec[d.idv - 1] = d.magnitude
        for v in self.variations:
            if v.kind == "idv":
                vec[int(v.name) - 1] += v.value(time_h)
        return np.clip(vec, 0.0, 1.0) if self.variations else vec

    def setpoint_offsets(self, time_h: float) -> dict[str, float]:
        """Relative setpoint changes at ``time_h`` (``{name: fraction}``; empty when none varies)."""
        out: dict[str, float] = {}
        for v in self.variations:
            if v.kind == "setpoint":
                out[v.name] = out.get(v.name, 0.0) + v.value(time_h)
        return out

    def sensor_bias(self, time_h: float) -> FloatArray | None:
        """The bias (41,) of the measurements at ``time_h`` (None when no sensor drifts)."""
        terms = [v for v in self.variations if v.kind == "sensor"]
        if not terms:
            return None
        bias = np.zeros(41)
        for v in terms:
            bias[int(v.name[6:-1]) - 1] += v.value(time_h)
        return bias

    def key(self, version: str) -> str:
        """File-name-safe cache key naming every setting and the simulator ``version``."""
        idv = "-".join(
            f"{d.idv}@{d.onset_h:g}x{d.magnitude:g}" + ("" if math.isinf(d.end_h) else f"to{d.end_h:g}")
            for d in sorted(self.disturbances, key=lambda d: d.idv)
        )
        varied = ""
        if self.variations:
            text = json.dumps([v.as_list() for v in self.variations])
            varied = "_var" + hashlib.sha256(text.encode()).hexdigest()[:12]
        return (
            f"{self.mode}_seed{self.seed}_idv{idv or 'none'}_h{self.hours:g}_ci{self.control_interval:g}"
            f"_s{self.sample_seconds:g}{varied}_tep-studio-{version}"
        )

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly settings."""
        return {
            "hours": self.hours,
            "seed": self.seed,
            "disturbances": [
                [d.idv, d.onset_h, d.magnitude, *([] if math.isinf(d.end_h) else [d.end_h])] for d in self.disturbances
            ],
            "mode": self.mode,
            "control_interval": self.control_interval,
            "sample_seconds": self.sample_seconds,
            **({"variations": [v.as_list() for v in self.variations]} if self.variations else {}),
        }


@dataclass(frozen=True)
class SimulatedRun:
    """A finished run: ``values`` (T, 52) in :data:`TEP_COLUMNS` order and how it ended."""

    spec: SimulationSpec
    values: FloatArray
    terminated: bool
    shutdown: str | None
    version: str
    cpu_seconds: float = field(default=0.0, compare=False)

    @property
    def frame(self) -> pd.DataFrame:
        """The run as :func:`fedrca.datasets.tep.load_tep` returns a file."""
        return pd.DataFrame(self.values, columns=list(TEP_COLUMNS))


class TEPSimulator:
    """A live closed-loop TEP plant that yields one 52-value row per sample interval.

    Parameters
    ----------
    spec : what to simulate

    ``TEPSimulator(SimulationSpec(hours=0.1, seed=123)).rows()`` yields two rows of
    shape (52,) (``tests/connectors/test_simulator.py`` runs it).
    """

    def __init__(self, spec: SimulationSpec) -> None:
        tep = load_tep_studio()
        config = importlib.import_module("tep_studio.ui.config")
        service = importlib.import_module("tep_studio.ui.service")
        self.spec = spec
        self.version = str(tep.__version__)
        column_map()  # fail early on an unsupported schema
        # The package's own scenario builders: the mode's setpoints and the controller
        # with its safety overrides on (tep-studio's default for a closed-loop scenario).
        scenario = config.ScenarioConfig(mode=spec.mode, control_interval=spec.control_interval, horizon=spec.hours)
        self._sim = service.build_simulator(scenario)
        self._controller = service.build_controller(scenario)
        self.terminated = False
        self.shutdown: str | None = None
        #: the lean step (see :meth:`_lean_step`) when this tep-studio has its internals
        self.lean = all(hasattr(self._sim, a) for a in ("_integrate_fixed", "kernel")) and hasattr(
            self._sim.kernel, "outputs"
        )
        self._shutdown_code: Callable[[], float] | None = None
        native = importlib.import_module("tep_studio.simulation.native")
        if self.lean and hasattr(native.lib, "tep_shutdown_code") and hasattr(self._sim.kernel, "_handle"):
            kernel = self._sim.kernel
            self._shutdown_code = lambda: float(native.lib.tep_shutdown_code(kernel._handle))
        else:
            self.lean = False

    def _lean_step(self, action: FloatArray, idv: FloatArray) -> tuple[FloatArray, FloatArray, bool]:
        """One control interval: what ``TennesseeEastmanProcess.advance`` computes, without its bookkeeping.

        ``advance`` also snapshots the kernel, builds a result record with ten array
        copies, constraint margins and cost terms every interval; at the design rate
        that is ~40% of the run time. The plant trajectory is bitwise the same
        (``tests/connectors/test_simulator.py::test_lean_step_equals_advance``).
        Returns (measurements (41,), implemented action (12,), shut down?).
        """
        sim, kernel = self._sim, self._sim.kernel
        implemented = np.clip(np.asarray(action, dtype=np.float64), 0.0, 100.0)
        kernel.set_inputs(implemented, idv)
        start = sim.time
        end = start + self.spec.control_interval
        state, _ = sim._integrate_fixed(start, end)
        if not np.isfinite(state).all():
            raise ModelError(f"TEP integration diverged at {start:.4f} h; use a smaller --control-interval")
        sim.state = state
        sim.time = end
        kernel.state = state.copy()
        kernel.time = end
        measurements = kernel.outputs(end, state)["measurements"]
        assert self._shutdown_code is not None
        return measurements, implemented, self._shutdown_code() != 0.0

    def _advance_step(self, action: FloatArray, idv: FloatArray) -> tuple[FloatArray, FloatArray, bool]:
        """One control interval through the package's public ``advance``."""
        result = self._sim.advance(action, control_interval=self.spec.control_interval, disturbances=idv)
        return result.measurements, result.implemented_action, bool(result.shutdown_status["terminated"])

    def rows(self) -> Iterator[tuple[int, FloatArray]]:
        """Yield ``(k, row)`` for k = 0, 1, ... with row (52,) the plant at ``(k + 1) * sample_seconds``.

        Stops after :attr:`SimulationSpec.n_samples` rows, or earlier when the plant
        shuts down (:attr:`terminated`, :attr:`shutdown` then say why).
        """
        spec = self.spec
        sim, controller = self._sim, self._controller
        if spec.scaled:
            meas, _ = sim.reset(mode=spec.mode, seed=float(spec.seed), ms_flag=spec.ms_flag)
        else:
            meas, _ = sim.reset(mode=spec.mode, seed=float(spec.seed))
        controller.reset(meas, time=sim.time)
        base = controller.setpoints
        moves = any(v.kind == "setpoint" for v in spec.variations)
        drifts = any(v.kind == "sensor" for v in spec.variations)
        self.terminated, self.shutdown = False, None
        step = self._lean_step if self.lean else self._advance_step
        row = np.empty(len(TEP_COLUMNS))
        implemented = np.zeros(12)
        for k in range(spec.n_samples):
            for _ in range(spec.steps_per_sample):
                t = sim.time
                if moves:
                    # sp(t) = sp_mode (1 + sum of the setpoint's terms)
                    offsets = spec.setpoint_offsets(t)
                    controller.setpoints = dataclasses.replace(
                        base, **{name: getattr(base, name) * (1.0 + v) for name, v in offsets.items()}
                    )
                action, _ = controller.compute_action(meas, time=t)
                meas, implemented, down = step(action, spec.idv_vector(t))
                if drifts:
                    bias = spec.sensor_bias(sim.time)
                    assert bias is not None
                    # the instrument reads the plant plus its bias: the controller and the record see it
                    meas = meas + bias
                if down:
                    self.terminated = True
                    self.shutdown = str(sim.kernel.shutdown_status()[1]).strip() or "plant shutdown"
                    return
            # XMEAS(1..41) = the 41 measurements; XMV(1..11) = the valves as implemented
            row[:41] = meas
            row[41:] = implemented[:11]
            yield k, row.copy()


def simulate(spec: SimulationSpec, progress: Callable[[int, int], None] | None = None) -> SimulatedRun:
    """Run ``spec`` to the end (or to a shutdown) and return the rows.

    ``progress(k, n)`` is called after every row when given.
    """
    sim = TEPSimulator(spec)
    started = time.process_time()
    rows = []
    for k, row in sim.rows():
        rows.append(row)
        if progress is not None:
            progress(k + 1, spec.n_samples)
    values = np.array(rows, dtype=np.float64).reshape(-1, len(TEP_COLUMNS))
    return SimulatedRun(spec, values, sim.terminated, sim.shutdown, sim.version, time.process_time() - started)


def stream_simulation(
    simulator: TEPSimulator,
    plants: Mapping[str, Sequence[str]],
    sink: Sink,
    *,
    site: str,
    pacer: Pacer | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ReplayStats:
    """Send a live run to ``sink`` as it is simulated: one sensors message per plant and sample.

    Sample k (the plant at ``(k + 1) * sample_seconds``) becomes, for every plant, a
    :class:`~fedrca.contracts.SensorMessage` with ``seq = k``, ``ts`` its simulated time in
    seconds and the plant's columns in its configured order, released by ``pacer`` at that
    time scaled by its speed (``Pacer.from_spec("realtime")``, ``"x60"``; default as fast as
    the simulator goes). The sink is flushed at the end (a Kafka sink raises on any message
    not delivered).

    Parameters
    ----------
    simulator : the live plant (its spec says how long, which disturbances, from when)
    plants : plant -> its TEP columns in message order (``XMEAS(i)``, ``XMV(j)``)
    sink : receives the messages (:class:`~fedrca.connectors.kafka.KafkaSink`, a list, ...)
    site : the site name written into every message
    pacer : release schedule
    progress : called as ``progress(samples_sent, samples_planned)`` after every sample

    Raises
    ------
    DataError
        When a plant names a column that is not a TEP column.
    """
    position = {c: i for i, c in enumerate(TEP_COLUMNS)}
    unknown = sorted({c for cols in plants.values() for c in cols} - set(position))
    if unknown:
        raise DataError(f"the simulated TEP plant has no column(s) {unknown}; columns are {TEP_COLUMNS[0]}..")
    index = {p: np.array([position[c] for c in cols], dtype=np.int64) for p, cols in plants.items()}
    spec = simulator.spec
    pacer = pacer or Pacer(None)
    started = time.perf_counter()
    pacer.begin(spec.sample_seconds)
    sent = messages = 0
    for k, row in simulator.rows():
        t = (k + 1) * spec.sample_seconds
        pacer.wait(t)
        for plant, columns in index.items():
            sink.send(SensorMessage(site, plant, t, k, row[columns]))
        messages += len(index)
        sent = k + 1
        if progress is not None:
            progress(sent, spec.n_samples)
    flush = getattr(sink, "flush", None)
    if callable(flush):
        flush()
    return ReplayStats(sent, messages, 0, sent, time.perf_counter() - started, pacer.slept, pacer.max_lag)


def default_cache_dir() -> Path:
    """``$FEDRCA_CACHE/tep-library`` (default ``~/.cache/fedrca/tep-library``)."""
    root = os.environ.get("FEDRCA_CACHE") or str(Path.home() / ".cache" / "fedrca")
    return Path(root) / "tep-library"


def cached_run(
    spec: SimulationSpec,
    cache_dir: str | Path | None = None,
    *,
    generate: bool = True,
    rebuild: bool = False,
    fix: str = "delete it, and the run is simulated again",
) -> SimulatedRun | None:
    """The run of ``spec`` from the cache, simulated and stored first when missing (or with ``rebuild``).

    With ``generate=False`` a missing run returns None instead of simulating.
    Files: ``<key>.npz`` (values) and ``<key>.json`` (settings, how it ended, CPU time, the sha256 of
    the values and their shape), each written to a temporary file and renamed into place, the
    ``.json`` last: a run is in the cache once its ``.json`` is. A cached run is an artifact: its
    values are read within the npz bound (:func:`~fedrca.contracts.artifacts.read_npz`) and must
    match the ``.json``'s digest and shape; anything else is one :class:`DataError` naming the file
    and ``fix`` (the command's way to rebuild it). The folder is checked writable before a run is
    simulated, so a read-only cache is refused before the work.
    """
    version = simulator_version()
    directory = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    key = spec.key(version)
    data_file, meta_file = directory / f"{key}.npz", directory / f"{key}.json"
    if directory.exists() and not directory.is_dir():
        raise DataError(f"{directory}: the simulator's run cache is a file, not a folder; set FEDRCA_CACHE to a folder")
    if not rebuild:
        run = _read_cached(spec, version, data_file, meta_file, fix)
        if run is not None:
            return run
    if not generate:
        return None
    _check_writable(directory)
    run = simulate(spec)
    meta = {
        "spec": spec.as_dict(),
        "terminated": run.terminated,
        "shutdown": run.shutdown,
        "rows": len(run.values),
        "cpu_seconds": run.cpu_seconds,
        "tep_studio": version,
        "sha256": arrays_sha256({"values": run.values}),
    }
    try:
        _replace(data_file, lambda f: np.savez_compressed(f, values=run.values))
        _replace(meta_file, lambda f: f.write(json.dumps(meta, indent=1).encode()))  # last: the run is in
    except OSError as exc:
        raise DataError(f"{directory}: cannot write the simulator's run cache ({exc.strerror or exc})") from None
    return run


def _replace(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write ``path`` through a temporary file beside it and a rename (no reader ever sees half of it)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as stream:
            write(stream)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _check_writable(directory: Path) -> None:
    """Refuse a cache folder that cannot be written before the run is simulated (a probe file, removed)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise DataError(
            f"{directory}: the simulator's run cache cannot be written ({exc.strerror or exc}); set FEDRCA_CACHE to a "
            "folder you can write"
        ) from None


#: Keys and types of a cached run's ``.json`` (``sha256`` from the caches that record it).
_META_TYPES: dict[str, tuple[type, ...]] = {
    "terminated": (bool,),
    "shutdown": (str, type(None)),
    "rows": (int,),
}


def _read_cached(spec: SimulationSpec, version: str, data_file: Path, meta_file: Path, fix: str) -> SimulatedRun | None:
    """The cached run, None when it is not in the cache (no ``.json``), DataError when the cache is corrupted."""
    if not meta_file.exists() and not meta_file.is_symlink():
        return None  # never written, or cut short before its .json: simulated again

    def corrupted(file: Path, what: str) -> DataError:
        return DataError(f"{file}: the simulator's run cache is corrupted ({what}); {fix}")

    for file in (meta_file, data_file):
        kind = special_file(file)
        if kind is not None:
            raise corrupted(file, f"a {kind}, not a regular file")
    try:
        raw = meta_file.read_bytes()[: 1 << 20]
        meta = parse_json(raw, "its description", max_depth=8, max_bytes=(1 << 20) - 1)
    except OSError as exc:
        raise corrupted(meta_file, str(exc.strerror or exc)) from None
    except MessageError as exc:
        raise corrupted(meta_file, exc.detail) from None
    if not isinstance(meta, dict) or any(not isinstance(meta.get(k), t) for k, t in _META_TYPES.items()):
        raise corrupted(meta_file, f"not the description of a run: {', '.join(_META_TYPES)} are expected")
    if not data_file.is_file():
        raise corrupted(data_file, "its values are missing")
    try:
        arrays = read_npz(data_file)
    except ArtifactError as exc:
        raise corrupted(data_file, str(exc).removeprefix(f"{data_file}: ")) from None
    values = arrays.get("values")
    rows = meta["rows"]
    if (
        set(arrays) != {"values"}
        or values is None
        or values.dtype != np.float64
        or values.shape != (rows, len(TEP_COLUMNS))
    ):
        shape = None if values is None else (values.dtype.str, values.shape)
        raise corrupted(data_file, f"{shape} is not the ({rows}, {len(TEP_COLUMNS)}) float64 values of its description")
    expected = meta.get("sha256")
    if expected is not None and expected != arrays_sha256({"values": values}):
        raise corrupted(data_file, "its values do not match the sha256 of its description")
    cpu = meta.get("cpu_seconds", 0.0)
    cpu = float(cpu) if type(cpu) in (int, float) else 0.0
    return SimulatedRun(spec, values, meta["terminated"], meta["shutdown"], version, cpu)


def dump_tep_dat(values: FloatArray, stream: BinaryIO) -> None:
    """Write rows (T, 52) to a binary stream in the whitespace-separated TEP ``.dat`` layout (the Braatz files)."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] != len(TEP_COLUMNS):
        raise DataError(f"a TEP file has {len(TEP_COLUMNS)} columns, got shape {arr.shape}")
    np.savetxt(stream, arr, fmt="%.10g")


def write_tep_dat(values: FloatArray, path: str | Path) -> Path:
    """Write rows (T, 52) as a whitespace-separated TEP ``.dat`` file (the Braatz layout)."""
    out = Path(path)
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        # whole or not at all: a run cut short leaves no truncated .dat that reads as data
        with tmp.open("wb") as stream:
            dump_tep_dat(values, stream)
        os.replace(tmp, out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise DataError(f"{out}: cannot write ({exc.strerror}); pass a writable --out path") from None
    except DataError as exc:
        tmp.unlink(missing_ok=True)
        raise DataError(f"{out}: {exc}") from None
    return out
