"""The re-baselining loop's settings: the ``drift:`` section of a site configuration (docs/drift.md).

Every key is optional; without the section (or with ``enabled: false``) a plant keeps the
baseline it was fitted with. Durations are samples (an integer) or a time with a unit
(``"36h"``, ``"1d"``, ``"2w"``; ``s``, ``min``, ``h``, ``d``, ``w``) turned into samples with the
dataset's ``sample_seconds`` (:meth:`DriftSettings.rows`). Errors name the key path
(``drift.max_shift``) and what would be valid.

Examples
--------
>>> s = parse_drift_settings({"enabled": True, "every": "1d", "window": "3d"})
>>> s.rows("every", 180.0), s.rows("window", 180.0), s.rows("history", 180.0)
(480, 1440, 6720)
>>> s.federated.every is None
True
"""

from __future__ import annotations

import math
import re
from typing import Any

from pydantic import Field, field_validator, model_validator

from fedrca.config._base import Strict, parse_inf, parse_section

__all__ = ["DURATION_UNITS", "MAX_HISTORY_ROWS", "DriftSettings", "FederatedRefresh", "parse_drift_settings", "to_rows"]

#: Seconds of each duration unit.
DURATION_UNITS = {"s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
#: Most rows a plant's history may keep (docs/limits.md: the history's bound; 2^22 rows of a 12-sensor
#: TEP plant are 400 MB in memory, 8 weeks of a 1 Hz plant are 4.8 million).
MAX_HISTORY_ROWS = 1 << 22
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|min|h|d|w)\s*$")
_HINT = "samples (an integer) or a time such as '36h', '1d', '2w'"


def to_rows(value: int | str, sample_seconds: float) -> int:
    """A duration in samples (rounded to the nearest sample, at least 1).

    Examples
    --------
    >>> to_rows(480, 180.0), to_rows("1d", 180.0), to_rows("90min", 180.0)
    (480, 480, 30)
    """
    if isinstance(value, int):
        return value
    match = _DURATION.match(value)
    if match is None:
        raise ValueError(f"{value!r} is not a duration; give {_HINT}")
    seconds = float(match.group(1)) * DURATION_UNITS[match.group(2)]
    return max(1, round(seconds / sample_seconds))


def _duration(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError(f"must be {_HINT}")
    if isinstance(value, int):
        if value < 1:
            raise ValueError(f"must be at least 1 sample; give {_HINT}")
        return value
    if isinstance(value, str):
        to_rows(value, 1.0)  # checks the form
        return value.strip()
    raise ValueError(f"must be {_HINT}")


class FederatedRefresh(Strict):
    """The cross-plant part's refresh: a federated training round on the plants' nominal history.

    ``every``: the cadence of the rounds (None: no scheduled round; ``fedrca train`` by hand). Each
    round releases what ``training.privacy`` says (estimator ``moments``: the states once, the lag
    moments once) and is charged to every plant's whole-life ledger next to the earlier rounds'
    (``privacy.budget``); a round that would pass it is refused and the plants keep their last
    Theta (docs/drift.md, "What it costs"). ``lifetime``: how long the budget must last (the
    cadence check of ``bench/bench_drift.py``). ``state_epsilon`` / ``moment_epsilon``: a refresh
    round's releases, when they differ from the commissioning training's (``training.privacy``).
    ``budget``: the whole-life epsilon of a plant's training releases, the commissioning run and every
    refresh round composed (next to ``privacy.budget``, which also counts the published flags); a round
    that would pass it is refused.
    """

    every: int | str | None = Field(None, description="cadence of the federated rounds; None = none scheduled")
    lifetime: int | str = Field("52w", description="how long privacy.budget must carry the rounds")
    schedule: str = Field("0 3 * * 0", description="cron schedule of the training CronJob (k8s/)")
    state_epsilon: float | None = Field(
        None, gt=0.0, description="a refresh round's state release (pure epsilon); None = training.privacy's"
    )
    moment_epsilon: float | None = Field(
        None, gt=0.0, description="a refresh round's moments release (epsilon at delta); None = training.privacy's"
    )
    budget: float = Field(
        math.inf, gt=0.0, description="whole-life epsilon of a plant's training releases (every round); inf = none"
    )

    _durations = field_validator("lifetime", mode="before")(_duration)
    _inf = field_validator("state_epsilon", "moment_epsilon", "budget", mode="before")(parse_inf)

    @field_validator("every", mode="before")
    @classmethod
    def _every(cls, value: Any) -> Any:
        return None if value is None else _duration(value)

    @field_validator("schedule")
    @classmethod
    def _cron(cls, value: str) -> str:
        if len(value.split()) != 5:
            raise ValueError("must be a cron schedule of five fields, e.g. '0 3 * * 0' (Sundays 03:00)")
        return value


class DriftSettings(Strict):
    """How each plant re-baselines on its own recent nominal history (docs/drift.md).

    Every ``every`` samples a plant re-fits its statistics' means and covariances (the
    family's moments; the filter, Theta, the scales and the threshold are kept) on the
    last ``window`` rows of its history that are neither alarms nor within ``guard``
    rows of one. A refresh is refused (and reported) when the plant alarms now (more
    alarms in the last ``recent`` rows than its nominal rate explains), or fewer than
    ``min_rows`` rows are usable; a mean moves at most ``max_shift`` of the statistic's
    standard deviations per ``per`` (since the baseline in force took effect; unset: per
    refresh) and a covariance's eigenvalues at most by a factor ``exp(max_scale)``. With
    ``trend`` a mean is its window's linear trend at the refresh; with ``explain`` a refresh
    that falls due while the plant alarms takes the means of the last ``min_rows`` rows when
    they moved within ``explain_shift`` per ``per`` (the fastest nominal drift; unset:
    ``max_shift``) and explain the alarms. The plant keeps ``history`` rows
    (plant-private) and the last ``keep`` baselines for a rollback.
    """

    enabled: bool = False
    every: int | str = Field("1d", description="samples between two local refreshes")
    window: int | str = Field("3d", description="most recent history rows a refresh reads")
    history: int | str = Field("2w", description="rows the plant keeps (its own storage)")
    guard: int = Field(20, ge=0, le=100_000, description="rows left out on either side of an alarm")
    recent: int = Field(60, ge=1, le=100_000, description="last rows whose alarms stop a refresh")
    min_rows: int = Field(240, ge=20, description="fewest usable rows a refresh needs")
    max_shift: float = Field(0.5, gt=0.0, le=100.0, description="most a mean moves per refresh (standard deviations)")
    max_scale: float = Field(0.25, gt=0.0, le=10.0, description="most log-eigenvalue change per refresh")
    keep: int = Field(8, ge=1, le=64, description="baselines kept for a rollback")
    covariances: bool = Field(True, description="re-fit the covariances too (false: only the means move)")
    per: int | str | None = Field(
        None, description="the time max_shift and max_scale are per (a rate); None = per refresh (every)"
    )
    trend: bool = Field(False, description="a mean is its window's linear trend at the refresh (false: the average)")
    explain: bool = Field(
        False, description="while the plant alarms, take a refresh whose means explain the alarms within the rate"
    )
    explain_shift: float | None = Field(
        None,
        gt=0.0,
        le=100.0,
        description="the explaining refresh's rate: most nominal drift moves a mean per `per`, measured from where the "
        "plant was last measured (standard deviations; None = max_shift)",
    )
    federated: FederatedRefresh = FederatedRefresh()

    _durations = field_validator("every", "window", "history", mode="before")(_duration)

    @field_validator("per", mode="before")
    @classmethod
    def _per(cls, value: Any) -> Any:
        return None if value is None else _duration(value)

    def rows(self, name: str, sample_seconds: float) -> int:
        """The duration ``name`` (``every``, ``window``, ``history``, ``per``) in samples."""
        return to_rows(getattr(self, name), sample_seconds)

    @model_validator(mode="after")
    def _consistent(self) -> DriftSettings:
        # the checks that need no sample time; the others are in check_rows (the site knows its sample time)
        if isinstance(self.window, int) and isinstance(self.history, int) and self.window > self.history:
            raise ValueError(f"window ({self.window}) must be at most history ({self.history})")
        return self

    def check_rows(self, sample_seconds: float) -> None:
        """Refuse durations that cannot work at ``sample_seconds`` (ValueError naming the key)."""
        every, window, history = (self.rows(k, sample_seconds) for k in ("every", "window", "history"))
        if window > history:
            raise ValueError(f"window ({window} samples) must be at most history ({history} samples)")
        if history > MAX_HISTORY_ROWS:
            raise ValueError(f"history ({history} samples) must be at most {MAX_HISTORY_ROWS:,} rows (docs/limits.md)")
        if self.min_rows > window:
            raise ValueError(f"min_rows ({self.min_rows}) must be at most window ({window} samples)")
        if every < 1 or math.isinf(every):
            raise ValueError("every must be at least one sample")


def parse_drift_settings(data: Any, source: str | None = None) -> DriftSettings:
    """Validate a ``drift:`` mapping on its own.

    Raises
    ------
    ConfigError
        Naming the key (e.g. ``drift.max_shift``) and the valid values.
    """
    return parse_section(DriftSettings, "drift", "re-baselining settings (enabled, every, window, ...)", data, source)
