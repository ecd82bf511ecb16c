"""Sensor faults injected into a plant's rows: how ``fedrca demo`` and ``bench/bench_sensors.py`` break a tag.

Five kinds (docs/sensors.md), each from row ``start`` to ``stop`` of one column:

* ``stuck``: the tag repeats its last value before ``start``;
* ``flatline``: that value plus noise of 1 % of the tag's nominal move (its mean non-zero change);
* ``range``: a broken transmitter loop: an open 4-20 mA loop reads 0 mA, 25 % of the instrument's
  span below its zero; the tag's ``limits`` (its configured physical limits, or the plausibility
  range a plant learns, :mod:`fedrca.detectors.health`) stand for the instrument's range, else 25
  nominal spans below the nominal minimum;
* ``stale``: no value (NaN), quality code Stale;
* ``bad``: no value (NaN), quality code Bad.

The nominal move and span come from the plant's nominal rows (``nominal``; else the rows before
``start``).

Examples
--------
>>> import numpy as np
>>> Y = np.arange(12, dtype=float).reshape(6, 2)
>>> out, quality = inject_sensor_fault(Y, 1, "stuck", 3, 6)
>>> out[:, 1].tolist(), int(quality.sum())
([1.0, 3.0, 5.0, 5.0, 5.0, 5.0], 0)
>>> out, quality = inject_sensor_fault(Y, 0, "bad", 4, 6)
>>> out[4:, 0].tolist(), quality[4:, 0].tolist()
([nan, nan], [1, 1])
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from fedrca.exceptions import DataError

__all__ = ["SENSOR_FAULT_KINDS", "inject_sensor_fault", "parse_sensor_fault"]

#: The kinds of :func:`inject_sensor_fault`.
SENSOR_FAULT_KINDS = ("stuck", "flatline", "range", "stale", "bad")
_STALE, _BAD = 2, 1  # fedrca.contracts.Quality (datasets imports nothing of contracts)


def inject_sensor_fault(
    Y: NDArray[np.float64],
    column: int,
    kind: str,
    start: int,
    stop: int,
    nominal: NDArray[np.float64] | None = None,
    seed: int | np.random.Generator = 0,
    limits: tuple[float, float] | None = None,
) -> tuple[NDArray[np.float64], NDArray[np.uint8]]:
    """``Y`` (T, D) with a sensor fault of ``kind`` in ``column`` over rows [start, stop), and the (T, D)
    quality codes (non-zero where the fault leaves no value); ``limits``: the tag's range (``range``)."""
    if kind not in SENSOR_FAULT_KINDS:
        raise DataError(f"unknown sensor fault '{kind}'; kinds are {', '.join(SENSOR_FAULT_KINDS)}")
    out = np.array(Y, dtype=np.float64, copy=True)
    T, D = out.shape
    if not 0 <= column < D or not 1 <= start < T:
        raise DataError(f"a sensor fault needs a column in 0..{D - 1} and a start in 1..{T - 1}")
    quality = np.zeros((T, D), dtype=np.uint8)
    a, b = start, min(stop, T)
    reference = np.asarray(out[:start, column] if nominal is None else nominal, dtype=np.float64)
    reference = reference[np.isfinite(reference)]
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    if kind == "stuck":
        out[a:b, column] = out[a - 1, column]
    elif kind == "flatline":
        moves = np.abs(np.diff(reference))
        move = float(moves[moves > 0].mean()) if (moves > 0).any() else 1.0
        out[a:b, column] = out[a - 1, column] + rng.normal(0.0, 0.01 * move, size=b - a)
    elif kind == "range" and limits is not None and np.isfinite(limits).all():
        # an open 4-20 mA loop: 0 mA, 25 % of the span below the range's zero
        out[a:b, column] = limits[0] - 0.25 * (limits[1] - limits[0])
    elif kind == "range":
        low, high = (float(reference.min()), float(reference.max())) if len(reference) else (0.0, 1.0)
        out[a:b, column] = low - 25.0 * max(high - low, 1e-9)
    else:
        out[a:b, column] = np.nan
        quality[a:b, column] = _STALE if kind == "stale" else _BAD
    return out, quality


def parse_sensor_fault(text: str) -> tuple[str, int, str]:
    """``TAG@SAMPLE[:KIND]`` -> (tag, first row, kind); the kind is ``stuck`` when left out.

    Examples
    --------
    >>> parse_sensor_fault("XMEAS(13)@100"), parse_sensor_fault("XMV(3)@40:bad")
    (('XMEAS(13)', 100, 'stuck'), ('XMV(3)', 40, 'bad'))
    """
    tag, _, rest = text.rpartition("@")
    row, _, kind = rest.partition(":")
    kind = kind or "stuck"
    if not tag or not row.isdigit() or kind not in SENSOR_FAULT_KINDS:
        raise DataError(
            f"a sensor fault is TAG@SAMPLE[:KIND] with KIND one of {', '.join(SENSOR_FAULT_KINDS)}, got {text!r}"
        )
    return tag, int(row), kind
