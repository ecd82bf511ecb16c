"""Sensor-health settings: the ``health:`` section of a plant (or of ``defaults``).

Each plant checks its own tags for sensor faults (stale, Bad, stuck, flatline, out of range;
:mod:`fedrca.detectors.health`, docs/sensors.md). Every bound is learned from the plant's
nominal data except ``limits``, the physical limits an operator knows (an OPC UA tag's
``EURange``, a valve's 0-100 %).

Examples
--------
>>> h = HealthSettings.model_validate({"limits": {"XMV(1)": [0, 100], "XMEAS(1)": [0, None]}})
>>> h.enabled, h.stale_after, h.limits["XMEAS(1)"]
(True, 3, (0.0, None))
"""

from __future__ import annotations

from pydantic import Field, model_validator

from fedrca.config._base import Strict

__all__ = ["HealthSettings"]


class HealthSettings(Strict):
    """A plant's sensor checks (docs/sensors.md).

    ``stale_after``: rows without a usable value (null, Bad, stale) after which a tag is a sensor
    fault (``bad`` when its quality code says Bad, else ``stale``). ``stuck_slack``: a tag is stuck
    after ``stuck_slack + 1`` more exact repeats than its longest nominal run. ``flat_moves`` /
    ``flat_ratio``: a tag is flat when the mean size of its last ``flat_moves`` moves falls below
    ``flat_ratio`` x the smallest such mean of its nominal data. ``range_margin``: the learned range
    is the nominal [min, max] widened by this many spans each way (a plausibility range, not an
    operating range: a process excursion moves a tightly controlled tag tens of nominal spans);
    ``limits`` (tag -> [low, high], ``null`` for no limit on a side) replace it for a tag, and a
    value exactly at one is saturated, never stuck or flat. ``recover``: rows a check must stay
    clear before the tag is used again.
    """

    enabled: bool = True
    stale_after: int = Field(3, ge=1, le=1_000_000)
    stuck_slack: int = Field(2, ge=0, le=1_000_000)
    flat_moves: int = Field(8, ge=1, le=10_000)
    flat_ratio: float = Field(0.25, ge=0.0, lt=1.0)
    range_margin: float = Field(100.0, ge=0.0, le=1e6)
    limits: dict[str, tuple[float | None, float | None]] = Field(default_factory=dict)
    recover: int = Field(5, ge=1, le=1_000_000)

    @model_validator(mode="after")
    def _ordered_limits(self) -> HealthSettings:
        for tag, (low, high) in self.limits.items():
            if low is not None and high is not None and not low < high:
                raise ValueError(f"limits of {tag!r} must be [low, high] with low < high, got [{low}, {high}]")
        return self
