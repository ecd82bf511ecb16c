"""Sensor health: each plant checks its own tags, and tells a broken sensor from a process fault.

A *sensor fault* is a tag that no longer measures the process: its value is stale (no usable
value for ``stale_after`` samples), reported Bad by the device, stuck (more exact repeats than
nominal operation ever showed), flat (its recent moves far smaller than nominal noise allows)
or out of range (beyond the configured physical limits, else beyond the nominal range widened
by a margin). Such a tag is *excluded*: its value is set missing (NaN) before the plant's
detector sees it, so the detector scores the plant on the tags that still measure it
(:mod:`fedrca.detectors.missing`), until the check has been clear for ``recover`` samples.
What leaves the plant is one bit per sample, "this plant has a sensor fault"
(:attr:`HealthResult.fault_pub`, randomized response like the flags; docs/privacy.md): never
which tag, never a value.

Every bound comes from the plant's nominal data (or its configuration), never from faults:

========  =========================================================  ==========================
check     condition at row t (tag j)                                 bound learned on nominal
========  =========================================================  ==========================
stale     no usable value for ``u_t >= stale_after`` rows             configured
bad       as stale, and the device's quality code is Bad             configured
stuck     exact repeats of the last value ``r_t >= rep_j``            ``rep_j`` = longest nominal
                                                                     run of repeats
                                                                     + ``stuck_slack`` + 1
flatline  mean size of the last ``flat_moves`` moves (non-zero       ``flat_ratio`` x the
          changes, in units of the nominal move) ``f_t < flat_j``    smallest nominal ``f``
range     ``y_t < lo_j`` or ``y_t > hi_j``                             ``limits`` of the config
                                                                     +- 5 % of their span, else
                                                                     nominal [min, max]
                                                                     +- ``range_margin`` spans
========  =========================================================  ==========================

A check is *active* from the row its condition holds until it has been clear for ``recover`` rows.
Independent sensor failures rarely coincide, a process excursion (or a plant that stops) moves
several tags at once: while two or more tags of the plant have had a stuck, flat or out-of-range
condition within the last ``recover`` rows, none of these three checks holds for any tag of it (the
process left its nominal envelope, not a sensor). Stuck and flatline are not judged on a value
within 5 % of the limits' span of a configured limit or beyond it (a valve pinned near its end stop
moves little by physics); a reading is out of range only 5 % of the span beyond them (a measured
valve position reads 100.4 % with its noise). Without configured limits the learned range is a
plausibility range, far wider than the nominal one (``range_margin``, 100 spans): a process
excursion moves a tightly controlled tag tens of nominal spans, a broken transmitter reads beyond
any of them (a rail, a wrong unit). The sample-and-hold tags of an analyser (a value repeated for a
few samples by design) learn their longest nominal run, and their flatline statistic counts moves
only, so a hold is neither stuck nor flat.

Two implementations agree exactly (``tests/detectors/test_health.py``): :class:`SensorHealth`,
vectorised over a batch's rows and tags (cumulative sums and running maxima, no loop over
rows), and :func:`health_reference`, a plain loop over rows and tags, the definition.

Examples
--------
>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> nominal = rng.normal(size=(500, 3))
>>> health = SensorHealth(name="p", recover=3).fit(nominal)
>>> live = rng.normal(size=(12, 3))
>>> live[4:, 1] = live[3, 1]          # tag 1 sticks at its value from row 3 on
>>> out = health.update(live)
>>> out.fault.astype(int).tolist()    # reported from its third repeat (rows 4, 5, 6 repeat row 3)
[0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1]
>>> bool(np.isnan(out.values[6:, 1]).all()), bool(np.isfinite(out.values[:, [0, 2]]).all())
(True, True)
"""

from __future__ import annotations

import base64
import math
import zlib
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedrca.contracts import Quality
from fedrca.exceptions import DataError, ModelError, NotFittedError
from fedrca.privacy import RandomizedResponse

__all__ = ["CHECKS", "HealthParameters", "HealthResult", "SensorHealth", "health_reference"]

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]
IntArray = NDArray[np.int64]

#: The checks, in the order of :attr:`HealthResult.checks` and of the metric's ``check`` label.
CHECKS: tuple[str, ...] = ("stale", "bad", "stuck", "flatline", "range")
#: The checks that see a value and exclude it (stale and bad values are missing already).
VALUE_CHECKS: tuple[str, ...] = ("stuck", "flatline", "range")
#: Quality code of a value the device or protocol reported Bad.
_BAD = int(Quality.BAD)
#: "Rows since" of a condition that never held (large, far from int64 overflow).
_NEVER = 1 << 40
_VALUE = slice(CHECKS.index(VALUE_CHECKS[0]), CHECKS.index(VALUE_CHECKS[-1]) + 1)
assert CHECKS[_VALUE] == VALUE_CHECKS  # the value checks are the last ones, in order: a slice (a view, no copy)
_NO_ONSETS = np.empty((0, 3), dtype=np.int64)
#: Share of a configured limits' span a reading may pass them by before it is out of range (the noise of a
#: measured valve position at 100 %).
LIMIT_TOLERANCE = 0.05


@dataclass(frozen=True)
class HealthParameters:
    """The learned bounds of one plant's checks (from nominal data and the configuration).

    Attributes
    ----------
    lo, hi : (D,) range bounds, raw units (configured physical limits widened by
        :data:`LIMIT_TOLERANCE` of their span, else learned)
    sat_lo, sat_hi : (D,) the configured physical limits moved inwards by :data:`LIMIT_TOLERANCE` of
        their span: a value at or beyond one is saturated (pinned near its end stop), never stuck or
        flat (-inf, inf where none is configured)
    repeats : (D,) int, exact repeats from which a tag is stuck (``r_t >= repeats``)
    scale : (D,) nominal mean size of a move (non-zero change), raw units
    flat : (D,) flatline bound on the mean normalised size of the last ``flat_moves`` moves
        (0: the tag never made ``flat_moves`` moves in the nominal data; not judged)
    stale_after, flat_moves, recover : as in :class:`SensorHealth`
    """

    lo: FloatArray
    hi: FloatArray
    sat_lo: FloatArray
    sat_hi: FloatArray
    repeats: IntArray
    scale: FloatArray
    flat: FloatArray
    stale_after: int
    flat_moves: int
    recover: int

    @property
    def n_tags(self) -> int:
        """D, the plant's sensor count."""
        return len(self.lo)


@dataclass(frozen=True)
class HealthResult:
    """The checks of T rows of one plant with D tags.

    Attributes
    ----------
    values : (T, D) the rows as the detector gets them: excluded tags set NaN, the rest as given
    excluded : (T, D) bool, a value was there and is not used (stuck, flat or out of range)
    checks : (C, T, D) bool, check c active for tag j at row t (C = len(:data:`CHECKS`))
    fault : (T,) bool, the plant has a sensor fault at row t (any check, any tag)
    fault_pub : (T,) bool, ``fault`` after randomized response: what leaves the plant
    onsets : (K, 3) int, ``(check, row, tag)`` of every episode that began in these rows
    """

    values: FloatArray
    excluded: BoolArray
    checks: BoolArray
    fault: BoolArray
    fault_pub: BoolArray
    onsets: IntArray

    @property
    def started(self) -> IntArray:
        """(C,) int: episodes begun per check."""
        return np.bincount(self.onsets[:, 0], minlength=len(CHECKS)).astype(np.int64)

    def __len__(self) -> int:
        return len(self.fault)

    def faulty_tags(self) -> IntArray:
        """(T, C) int: tags with each check active, per row (the ``fedrca_sensor_faulty_tags`` gauge)."""
        return np.asarray(self.checks.sum(axis=2).T, dtype=np.int64)

    @classmethod
    def concat(cls, parts: Sequence[HealthResult]) -> HealthResult:
        """Results of consecutive batches as one."""
        offsets = np.cumsum([0] + [len(p) for p in parts[:-1]])
        onsets = [p.onsets + np.array([0, off, 0]) for p, off in zip(parts, offsets, strict=True)]
        return cls(
            np.concatenate([p.values for p in parts]),
            np.concatenate([p.excluded for p in parts]),
            np.concatenate([p.checks for p in parts], axis=1),
            np.concatenate([p.fault for p in parts]),
            np.concatenate([p.fault_pub for p in parts]),
            np.concatenate(onsets).astype(np.int64),
        )


# --------------------------------------------------------------------------------------------
# vectorised building blocks (column-wise over a batch; each carries its state across batches)
def _rows_since(event: BoolArray, before: IntArray) -> IntArray:
    """Rows since ``event`` (..., T, D) last held, per column (0 where it holds); ``before`` (..., D) = the
    same count at the row preceding the batch (:data:`_NEVER` when it never held). Leading axes are
    independent series (every check of a batch in one call)."""
    rows = np.arange(event.shape[-2])[:, None]
    last = np.maximum.accumulate(np.where(event, rows, -1), axis=-2)
    return np.where(last >= 0, rows - last, np.minimum(before[..., None, :] + rows + 1, _NEVER))


def _forward_fill(Y: FloatArray, last: FloatArray) -> FloatArray:
    """(T, D) the last observed value before each row (``last`` before the batch; NaN: none yet)."""
    T, D = Y.shape
    ext = np.empty((T + 1, D))
    ext[0], ext[1:] = last, Y
    index = np.maximum.accumulate(np.where(np.isnan(ext[:-1]), 0, np.arange(T)[:, None]), axis=0)
    return np.asarray(ext[index, np.arange(D)[None, :]])


def _last_moves_mean(moves: BoolArray, sizes: FloatArray, carried: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Mean of the last k moves at every row, per column, and the last k moves after the batch.

    ``moves`` (T, D) where a tag moved, ``sizes`` (T, D) its move sizes there; ``carried`` (k, D)
    the last k moves before the batch, oldest first, NaN for moves not made yet (the mean is NaN
    until k moves were made). With the carried moves as k rows on top and ``n_t`` the moves up to
    row t, the last k moves at row t are moves ``n_t - k + 1 .. n_t`` of their column: gathered by
    index (no loop over rows) and summed oldest first, as :meth:`SensorHealth._update_row` sums its
    ring of moves, so both give the same bits.
    """
    k, D = carried.shape
    T = len(moves)
    is_move = np.empty((k + T, D), dtype=bool)  # carried slots always count
    is_move[:k], is_move[k:] = True, moves
    value = np.empty((k + T, D))
    value[:k] = carried
    np.copyto(value[k:], sizes)
    value[k:][~moves] = 0.0
    n = np.cumsum(is_move, axis=0)  # moves up to each row (>= k from row k - 1 on)
    # the row of every move, column by column (column-major), and where each column's moves start
    per_column = is_move.sum(axis=0)
    start = np.cumsum(per_column) - per_column
    move_rows = np.nonzero(is_move.T)[1]
    cols = np.arange(D)[None, :]
    first = start[None, :] + n[k:] - k  # flat index of move n_t - k + 1 (1-based)
    # sum = m_1 + m_2 + ... + m_k, oldest first (NaN while one of them is not made yet); gathered at once (k, T, D)
    last_k = value[move_rows[first[None, :, :] + np.arange(k)[:, None, None]], cols[None, :, :]]
    total = last_k[0]
    for i in range(1, k):
        total = total + last_k[i]
    tail = start[:, None] + per_column[:, None] - k + np.arange(k)[None, :]  # (D, k) the last k moves
    kept = value[move_rows[tail], np.arange(D)[:, None]].T
    return np.asarray(total / k), np.asarray(kept)


@dataclass
class _Evidence:
    """The raw per-row quantities of the checks (before their bounds)."""

    observed: BoolArray  # (T, D) a usable value
    unusable: IntArray  # (T, D) consecutive rows without one, up to t
    repeats: IntArray  # (T, D) exact repeats of the last value, up to t
    flat: FloatArray  # (T, D) mean normalised size of the last k moves (NaN: fewer than k moves yet)
    state: dict[str, Any]


def _evidence(Y: FloatArray, scale: FloatArray, k: int, state: Mapping[str, Any]) -> _Evidence:
    observed = ~np.isnan(Y)
    # u_t: rows since the last usable value
    unusable = _rows_since(observed, state["unusable"])
    T, D = Y.shape
    prev = _forward_fill(Y, state["last"])
    # delta_t = y_t - (last value seen before t); NaN when either is missing
    delta = Y - prev
    same = delta == 0.0
    repeat = observed & same
    moved = observed & ~same  # a change, or the first value ever: a run starts
    # r_t: repeats since the last change (a missing value neither breaks nor extends a run)
    count = np.cumsum(repeat, axis=0)
    rows = np.arange(T)[:, None]
    last_break = np.maximum.accumulate(np.where(moved, rows, -1), axis=0)
    at_break = count[np.maximum(last_break, 0), np.arange(D)[None, :]]
    repeats = np.where(last_break >= 0, count - at_break, state["repeats"][None, :] + count)
    # moves: |delta| / nominal move size, where the tag changed from a known value (elsewhere NaN or 0, not read)
    real_move = moved & ~np.isnan(delta)
    flat, moves = _last_moves_mean(real_move, np.abs(delta) / scale[None, :], state["moves"])
    new_state = {
        "last": np.where(observed[-1], Y[-1], prev[-1]) if T else state["last"],
        "unusable": unusable[-1] if T else state["unusable"],
        "repeats": repeats[-1] if T else state["repeats"],
        "moves": moves,
    }
    return _Evidence(observed, unusable.astype(np.int64), repeats.astype(np.int64), flat, new_state)


def _fresh_state(D: int, k: int) -> dict[str, Any]:
    return {
        "last": np.full(D, np.nan),
        "unusable": np.zeros(D, dtype=np.int64),
        "repeats": np.zeros(D, dtype=np.int64),
        "moves": np.full((k, D), np.nan),
        "since": np.full((len(CHECKS), D), _NEVER, dtype=np.int64),
        "value_since": np.full(D, _NEVER, dtype=np.int64),
    }


def _conditions(
    params: HealthParameters, rows: FloatArray, quality: NDArray[np.uint8] | None, ev: _Evidence
) -> BoolArray:
    """(C, T, D) where each check's condition holds (before the coincidence rule and the recovery hysteresis)."""
    obs = ev.observed
    lo, hi, bound = params.lo[None, :], params.hi[None, :], params.flat[None, :]
    cond = np.empty((len(CHECKS), *obs.shape), dtype=bool)
    stale, bad, stuck, flat, out_of_range = cond
    with np.errstate(invalid="ignore"):
        saturated = obs & ((rows <= params.sat_lo[None, :]) | (rows >= params.sat_hi[None, :]))
        np.logical_and(obs, (rows < lo) | (rows > hi), out=out_of_range)
        np.logical_and(obs & (ev.flat < bound), ~saturated, out=flat)
    gone = ~obs & (ev.unusable >= params.stale_after)
    if quality is None:
        bad[...] = False
    else:
        np.logical_and(gone, quality == _BAD, out=bad)
    np.logical_and(gone, ~bad, out=stale)
    np.logical_and(obs & (ev.repeats >= params.repeats[None, :]), ~saturated, out=stuck)
    return cond


class SensorHealth:
    """The sensor checks of one plant (see the module docstring): fitted on nominal data, then
    updated batch by batch; processing a stream in any chunking gives the same result.

    Parameters
    ----------
    name : plant name (for messages)
    tags : the plant's sensor names, in column order (for messages; default ``0..D-1``)
    stale_after : rows without a usable value after which a tag is stale (or Bad, by its quality code)
    stuck_slack : a tag is stuck after ``slack + 1`` more exact repeats than its longest nominal run
    flat_moves, flat_ratio : a tag is flat when the mean size of its last ``flat_moves`` moves falls
        below ``flat_ratio`` times the smallest such mean in its nominal data
    range_margin : the learned range is the nominal [min, max] widened by this many spans each way (a
        plausibility range: 100 spans by default)
    limits : tag -> (lo, hi) physical limits (NaN for a side without one); they replace the learned
        range of that tag, and a value exactly at one is saturated, never stuck or flat
    recover : rows a check must stay clear before the tag is used again
    epsilon : privacy budget of the published bit (randomized response; inf = published as is)
    seed : seeds the randomized response
    """

    def __init__(
        self,
        name: str = "plant",
        tags: Sequence[str] | None = None,
        stale_after: int = 3,
        stuck_slack: int = 2,
        flat_moves: int = 8,
        flat_ratio: float = 0.25,
        range_margin: float = 100.0,
        limits: Mapping[str, tuple[float, float]] | None = None,
        recover: int = 5,
        epsilon: float = math.inf,
        seed: int = 0,
    ) -> None:
        if stale_after < 1 or recover < 1 or flat_moves < 1 or stuck_slack < 0:
            raise ModelError(
                f"plant '{name}': stale_after, recover and flat_moves must be >= 1 and stuck_slack >= 0, got "
                f"{stale_after}, {recover}, {flat_moves}, {stuck_slack}"
            )
        if not 0.0 <= flat_ratio < 1.0 or range_margin < 0.0:
            raise ModelError(f"plant '{name}': flat_ratio must be in [0, 1) and range_margin >= 0")
        self.name = name
        self.tags = None if tags is None else list(tags)
        self.stale_after = stale_after
        self.stuck_slack = stuck_slack
        self.flat_moves = flat_moves
        self.flat_ratio = flat_ratio
        self.range_margin = range_margin
        self.limits = dict(limits or {})
        self.recover = recover
        self.epsilon = epsilon
        self.seed = seed
        self._params: HealthParameters | None = None
        self._state: dict[str, Any] | None = None
        self._privacy = RandomizedResponse(epsilon, seed=seed)

    @property
    def parameters(self) -> HealthParameters:
        """The learned bounds; NotFittedError before :meth:`fit`."""
        if self._params is None:
            raise NotFittedError(f"plant '{self.name}': sensor health is not fitted; call fit(nominal) first")
        return self._params

    def _tag_names(self, D: int) -> list[str]:
        return self.tags if self.tags is not None else [str(j) for j in range(D)]

    def fit(self, Y: ArrayLike, segments: Sequence[int] | None = None) -> SensorHealth:
        """Learn every bound from nominal rows ``Y`` (T, D) (NaN = missing; ``segments`` = the lengths of
        the consecutive recordings it is made of, each a fresh stream)."""
        Y_arr = np.asarray(Y, dtype=np.float64)
        if Y_arr.ndim != 2 or len(Y_arr) < 2:
            raise DataError(f"plant '{self.name}': sensor health needs nominal rows (T >= 2, D), got {Y_arr.shape}")
        T, D = Y_arr.shape
        names = self._tag_names(D)
        if self.tags is not None and len(self.tags) != D:
            raise DataError(f"plant '{self.name}': {len(self.tags)} tag names for {D} columns")
        unknown = sorted(set(self.limits) - set(names))
        if unknown:
            raise ModelError(f"plant '{self.name}': limits for unknown tag(s) {unknown}; tags are {names}")
        lengths = [T] if segments is None else [int(n) for n in segments]
        if sum(lengths) != T:
            raise DataError(f"plant '{self.name}': segments {lengths} do not add up to {T} rows")
        # moves: non-zero changes between consecutive values of one recording
        with np.errstate(invalid="ignore"):
            lo_nom, hi_nom = np.nanmin(Y_arr, axis=0), np.nanmax(Y_arr, axis=0)
        span = hi_nom - lo_nom
        lo, hi = lo_nom - self.range_margin * span, hi_nom + self.range_margin * span
        sat_lo, sat_hi = np.full(D, -np.inf), np.full(D, np.inf)
        for tag, (low, high) in self.limits.items():
            j = names.index(tag)
            if not (math.isnan(low) or math.isnan(high)) and low >= high:
                raise ModelError(f"plant '{self.name}': limits of {tag} must have low < high, got [{low}, {high}]")
            # a reading passes a limit by its noise: LIMIT_TOLERANCE of the limits' span (of the nominal span
            # when only one side is configured)
            width = high - low if not (math.isnan(low) or math.isnan(high)) else float(span[j])
            tolerance = LIMIT_TOLERANCE * width
            lo[j] = -np.inf if math.isnan(low) else low - tolerance
            hi[j] = np.inf if math.isnan(high) else high + tolerance
            # a value pinned near its end stop (a valve at 0.2 %) moves little by physics: saturated
            sat_lo[j] = -np.inf if math.isnan(low) else low + tolerance
            sat_hi[j] = np.inf if math.isnan(high) else high - tolerance
        sizes = []
        start = 0
        for n in lengths:
            part = Y_arr[start : start + n]
            diff = np.abs(np.diff(part, axis=0))
            sizes.append(np.where(diff > 0, diff, np.nan))
            start += n
        all_sizes = np.vstack(sizes)
        count = np.count_nonzero(~np.isnan(all_sizes), axis=0)
        # the nominal move: mean size of a non-zero change (1 for a tag that never moved)
        scale = np.where(count > 0, np.nansum(all_sizes, axis=0) / np.maximum(count, 1), 1.0)
        # the evidence of every recording from a fresh state: longest run of repeats, smallest flat mean
        repeats = np.zeros(D, dtype=np.int64)
        flat_min = np.full(D, np.inf)
        start = 0
        for n in lengths:
            ev = _evidence(Y_arr[start : start + n], scale, self.flat_moves, _fresh_state(D, self.flat_moves))
            repeats = np.maximum(repeats, ev.repeats.max(axis=0))
            with np.errstate(invalid="ignore"):
                flat_min = np.fmin(flat_min, np.nanmin(np.where(np.isnan(ev.flat), np.inf, ev.flat), axis=0))
            start += n
        flat = np.where(np.isfinite(flat_min), self.flat_ratio * flat_min, 0.0)
        self._params = HealthParameters(
            lo=lo,
            hi=hi,
            sat_lo=sat_lo,
            sat_hi=sat_hi,
            repeats=repeats + self.stuck_slack + 1,
            scale=scale,
            flat=flat,
            stale_after=self.stale_after,
            flat_moves=self.flat_moves,
            recover=self.recover,
        )
        self.reset()
        return self

    def reset(self) -> None:
        """Forget the stream (a new recording): every tag healthy, no value seen (the bounds are kept)."""
        self._state = _fresh_state(self.parameters.n_tags, self.flat_moves)
        self._privacy = RandomizedResponse(self.epsilon, seed=self.seed)

    def update(self, Y: ArrayLike, quality: ArrayLike | None = None) -> HealthResult:
        """Check rows ``Y`` (T, D) (NaN = no usable value) with their quality codes (T, D) (None: unknown,
        then no value is judged Bad, a missing one is stale); advances the stream."""
        params = self.parameters
        Y_arr = np.asarray(Y, dtype=np.float64)
        if Y_arr.ndim != 2 or Y_arr.shape[1] != params.n_tags:
            raise DataError(f"plant '{self.name}': rows must be (T, {params.n_tags}), got shape {Y_arr.shape}")
        Q = None if quality is None else np.asarray(quality, dtype=np.uint8)
        if Q is not None and Q.shape != Y_arr.shape:
            raise DataError(f"plant '{self.name}': quality codes must be {Y_arr.shape} like the rows, got {Q.shape}")
        assert self._state is not None
        state = self._state
        if len(Y_arr) == 1:
            return self._update_row(Y_arr[0], None if Q is None else Q[0])
        ev = _evidence(Y_arr, params.scale, params.flat_moves, state)
        cond = _conditions(params, Y_arr, Q, ev)
        # two or more tags stuck, flat or out of range within the last `recover` rows: a process excursion
        value_since = _rows_since(np.asarray(cond[_VALUE].any(axis=0), dtype=bool), state["value_since"])
        excursion = np.count_nonzero(value_since < params.recover, axis=1) >= 2
        if excursion.any():
            cond[_VALUE] &= ~excursion[None, :, None]
        since = _rows_since(cond, state["since"])  # (C, T, D)
        # active from the row the condition holds until it was clear for `recover` rows
        active = since < params.recover
        began = np.empty_like(active)
        if len(Y_arr):
            np.logical_and(active[:, 0], state["since"] >= params.recover, out=began[:, 0])
            np.logical_and(active[:, 1:], ~active[:, :-1], out=began[:, 1:])
        # (check, row, tag) of each onset, row-major order
        onsets = np.argwhere(began).astype(np.int64) if began.any() else _NO_ONSETS
        excluded = active[_VALUE].any(axis=0) & ev.observed
        values = np.where(excluded, np.nan, Y_arr)
        fault = np.asarray(active.any(axis=(0, 2)), dtype=bool)
        self._state = {
            **ev.state,
            "since": since[:, -1] if len(Y_arr) else state["since"],
            "value_since": value_since[-1] if len(Y_arr) else state["value_since"],
        }
        fault_pub = self._privacy.perturb(fault[:, None])[:, 0] if len(fault) else fault.copy()
        return HealthResult(values, excluded, active, fault, np.asarray(fault_pub, dtype=bool), onsets)

    def _update_row(self, y: FloatArray, q: NDArray[np.uint8] | None) -> HealthResult:
        """:meth:`update` of one row (a 1 Hz plant's batch): the same quantities as the batch path, step by
        step on (D,) vectors (``tests/detectors/test_health.py`` checks that every chunking agrees)."""
        params = self.parameters
        state = self._state
        assert state is not None
        k, recover = params.flat_moves, params.recover
        observed = ~np.isnan(y)
        # u_t: rows since the last usable value
        unusable = np.where(observed, 0, np.minimum(state["unusable"] + 1, _NEVER))
        last = state["last"]
        delta = y - last
        repeat = observed & (delta == 0.0)
        moved = observed & ~(delta == 0.0)
        # r_t: repeats since the last change; a missing value neither breaks nor extends a run
        repeats = np.where(moved, 0, state["repeats"] + repeat)
        moves = state["moves"]
        real = moved & ~np.isnan(delta)
        if real.any():
            moves = moves.copy()
            cols = np.flatnonzero(real)
            moves[:-1, cols] = moves[1:, cols]
            moves[-1, cols] = np.abs(delta[cols]) / params.scale[cols]
        # mean of the last k moves, summed oldest first (NaN while one is not made yet)
        total = moves[0]
        for i in range(1, k):
            total = total + moves[i]
        flat_mean = total / k
        # the conditions of _conditions, on one row
        with np.errstate(invalid="ignore"):
            saturated = observed & ((y <= params.sat_lo) | (y >= params.sat_hi))
            out_of_range = observed & ((y < params.lo) | (y > params.hi))
            flat = observed & (flat_mean < params.flat) & ~saturated
        gone = ~observed & (unusable >= params.stale_after)
        bad = gone & (q == _BAD) if q is not None else np.zeros_like(gone)
        stuck = observed & (repeats >= params.repeats) & ~saturated
        cond = np.stack([gone & ~bad, bad, stuck, flat, out_of_range])
        # two or more tags stuck, flat or out of range within the last `recover` rows: a process excursion
        value_since = np.where(cond[_VALUE].any(axis=0), 0, np.minimum(state["value_since"] + 1, _NEVER))
        if np.count_nonzero(value_since < recover) >= 2:
            cond[_VALUE] = False
        since = np.where(cond, 0, np.minimum(state["since"] + 1, _NEVER))
        active = since < recover
        began = active & ~(state["since"] < recover)
        onsets = np.argwhere(began[:, None, :]).astype(np.int64) if began.any() else _NO_ONSETS
        excluded = active[_VALUE].any(axis=0) & observed
        values = np.where(excluded, np.nan, y)
        fault = np.array([bool(active.any())])
        self._state = {
            "last": np.where(observed, y, last),
            "unusable": unusable,
            "repeats": repeats,
            "moves": moves,
            "since": since,
            "value_since": value_since,
        }
        fault_pub = np.asarray(self._privacy.perturb(fault[:, None])[:, 0], dtype=bool)
        return HealthResult(values[None, :], excluded[None, :], active[:, None, :], fault, fault_pub, onsets)

    def describe(self, result: HealthResult) -> list[tuple[int, str, str]]:
        """``(row, tag, check)`` of every episode that began in a result, by row: for the plant's own log
        and report only (the tag never leaves the plant)."""
        names = self._tag_names(self.parameters.n_tags)
        order = np.lexsort((result.onsets[:, 2], result.onsets[:, 0], result.onsets[:, 1]))
        return [(int(t), names[int(j)], CHECKS[int(c)]) for c, t, j in result.onsets[order].tolist()]

    # -- streaming state -------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """The stream's state, JSON-friendly: each array's bytes as a zlib stream, base64-encoded (a plant
        worker writes it with every batch: 17 numbers a tag, about 100 kB for 1,000 tags instead of 250 kB
        of JSON numbers; exact, so a restarted plant continues bit for bit)."""
        assert self._state is not None
        out: dict[str, Any] = {
            name: _pack(np.asarray(self._state[name], dtype=dtype)) for name, dtype in _STATE_ARRAYS.items()
        }
        out["privacy"] = self._privacy.get_state()
        return out

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`get_state` output."""
        D, k = self.parameters.n_tags, self.flat_moves
        shapes = {"last": (D,), "unusable": (D,), "repeats": (D,), "moves": (k, D), "since": (len(CHECKS), D),
                  "value_since": (D,)}  # fmt: skip
        self._state = {name: _unpack(state[name], shapes[name], dtype) for name, dtype in _STATE_ARRAYS.items()}
        self._privacy.set_state(state["privacy"])


#: The arrays of a plant's health state, and their dtypes.
_STATE_ARRAYS = {"last": np.float64, "unusable": np.int64, "repeats": np.int64, "moves": np.float64,
                 "since": np.int64, "value_since": np.int64}  # fmt: skip


def _pack(array: NDArray[Any]) -> str:
    # the float arrays (last values, moves) are measurement noise: deflating them gains nothing and costs far
    # more than a stored (level 0) zlib stream, which reads back the same (a state deflated whole, as earlier
    # workers wrote it, too: test_a_state_with_every_array_deflated_restores_the_same); the integer counts
    # (mostly 0 and _NEVER) deflate well
    level = 0 if array.dtype.kind == "f" else 1
    return base64.b64encode(zlib.compress(np.ascontiguousarray(array).tobytes(), level)).decode("ascii")


def _unpack(text: str, shape: tuple[int, ...], dtype: Any) -> NDArray[Any]:
    raw = zlib.decompress(base64.b64decode(text))
    return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()


# --------------------------------------------------------------------------------------------
def health_reference(
    params: HealthParameters, Y: ArrayLike, quality: ArrayLike | None = None
) -> tuple[FloatArray, BoolArray]:
    """The definition, row by row and tag by tag from a fresh stream: ``(values, checks)`` as in
    :class:`HealthResult` (the pure-function twin of :meth:`SensorHealth.update`)."""
    Y_arr = np.asarray(Y, dtype=np.float64)
    T, D = Y_arr.shape
    Q = None if quality is None else np.asarray(quality, dtype=np.int64).reshape(T, D)
    checks = np.zeros((len(CHECKS), T, D), dtype=bool)
    values = Y_arr.copy()
    # 1. each tag's conditions, row by row
    cond = [[dict.fromkeys(CHECKS, False) for _ in range(D)] for _ in range(T)]
    for j in range(D):
        last = math.nan
        unusable = repeats = 0
        moves: deque[float] = deque(maxlen=params.flat_moves)
        for t in range(T):
            y, c = float(Y_arr[t, j]), cond[t][j]
            if math.isnan(y):
                unusable += 1
                if unusable >= params.stale_after:
                    c["bad" if Q is not None and Q[t, j] == _BAD else "stale"] = True
                continue
            unusable = 0
            if y == last:
                repeats += 1
            else:
                repeats = 0
                if not math.isnan(last):
                    moves.append(abs(y - last) / float(params.scale[j]))
            last = y
            saturated = y <= params.sat_lo[j] or y >= params.sat_hi[j]
            c["range"] = not params.lo[j] <= y <= params.hi[j]
            c["stuck"] = repeats >= params.repeats[j] and not saturated
            full = len(moves) == params.flat_moves
            c["flatline"] = full and sum(moves) / params.flat_moves < params.flat[j] and not saturated
    # 2. two or more tags with a value condition within the last `recover` rows: a process excursion
    raw = [[any(cond[t][j][v] for v in VALUE_CHECKS) for j in range(D)] for t in range(T)]
    for t in range(T):
        recent = range(max(0, t - params.recover + 1), t + 1)
        if sum(any(raw[u][j] for u in recent) for j in range(D)) >= 2:
            for j in range(D):
                for v in VALUE_CHECKS:
                    cond[t][j][v] = False
    # 3. active until clear for `recover` rows; a value check excludes the value
    for j in range(D):
        since = [_NEVER] * len(CHECKS)
        for t in range(T):
            for k, check in enumerate(CHECKS):
                since[k] = 0 if cond[t][j][check] else min(since[k] + 1, _NEVER)
                checks[k, t, j] = since[k] < params.recover
            if any(checks[CHECKS.index(v), t, j] for v in VALUE_CHECKS):
                values[t, j] = math.nan
    return values, checks
