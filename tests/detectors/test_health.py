"""Sensor health checks (fedrca.detectors.health): the vectorised class agrees with the row-by-row
definition in any chunking, each check finds its fault and only it, bounds come from nominal data."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedrca.contracts import Quality
from fedrca.detectors.health import CHECKS, SensorHealth, health_reference
from fedrca.exceptions import DataError, ModelError, NotFittedError

BAD, STALE = Quality.BAD, Quality.STALE


def _nominal(rng: np.random.Generator, T: int = 600, D: int = 4) -> np.ndarray:
    """Continuous noisy tags and one sample-and-hold tag (column 3 holds each value 3 rows)."""
    Y = rng.normal(size=(T, D)).cumsum(axis=0) * 0.05 + rng.normal(size=(T, D))
    Y[:, 3] = np.repeat(rng.normal(size=T // 3 + 1), 3)[:T]
    return Y


def _onsets(checks: np.ndarray) -> list[list[int]]:
    """(check, row, tag) where a check became active (from a fresh stream)."""
    before = np.concatenate([np.zeros_like(checks[:, :1]), checks[:, :-1]], axis=1)
    return np.argwhere(checks & ~before).tolist()


def _active(result, check: str) -> np.ndarray:
    return result.checks[CHECKS.index(check)]


def _random_stream(rng: np.random.Generator, T: int, D: int) -> tuple[np.ndarray, np.ndarray]:
    """Values on a coarse grid (repeats happen) with gaps, Bad codes, stuck, flat and out-of-range stretches."""
    Y = np.round(rng.normal(size=(T, D)) * 2.0) / 2.0
    for _ in range(rng.integers(0, 4)):
        j, a = int(rng.integers(D)), int(rng.integers(T))
        b = min(T, a + int(rng.integers(1, 12)))
        kind = rng.integers(4)
        if kind == 0:
            Y[a:b, j] = Y[a, j]  # stuck
        elif kind == 1:
            Y[a:b, j] = Y[a, j] + rng.normal(size=b - a) * 1e-3  # flat
        elif kind == 2:
            Y[a:b, j] = 50.0  # out of range
        else:
            Y[a:b, j] = np.nan
    Y[rng.random((T, D)) < 0.1] = np.nan
    Q = np.where(np.isnan(Y), np.where(rng.random((T, D)) < 0.5, BAD, STALE), 0).astype(np.uint8)
    return Y, Q


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), cuts=st.lists(st.integers(0, 80), max_size=6))
def test_any_chunking_gives_the_definition(seed, cuts):
    """SensorHealth.update over any split of the stream, and row by row, == health_reference over the whole."""
    _check_chunking(seed, cuts)


@pytest.mark.exhaustive
@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), cuts=st.lists(st.integers(0, 80), max_size=12))
def test_any_chunking_gives_the_definition_many_examples(seed, cuts):
    _check_chunking(seed, cuts)


def _check_chunking(seed: int, cuts: list[int]) -> None:
    rng = np.random.default_rng(seed)
    D = int(rng.integers(1, 5))
    nominal, _ = _random_stream(rng, 120, D)
    nominal = np.where(np.isnan(nominal), 0.0, nominal)
    health = SensorHealth(
        stale_after=int(rng.integers(1, 4)),
        stuck_slack=int(rng.integers(0, 3)),
        flat_moves=int(rng.integers(1, 6)),
        recover=int(rng.integers(1, 5)),
        limits={"0": (-3.0, 3.0)} if rng.random() < 0.5 else None,
    ).fit(nominal, segments=[60, 60])
    Y, Q = _random_stream(rng, 80, D)
    expected_values, expected_checks = health_reference(health.parameters, Y, Q)
    bounds = sorted({0, 80, *cuts})
    state = health.get_state()
    # in the given chunks, then one row at a time (a 1 Hz plant's batches: the single-row path)
    for chunks in (list(itertools.pairwise(bounds)), [(t, t + 1) for t in range(80)]):
        health.set_state(state)
        parts = [health.update(Y[a:b], Q[a:b]) for a, b in chunks]
        out = parts[0].concat(parts)
        np.testing.assert_array_equal(out.checks, expected_checks)
        np.testing.assert_array_equal(np.isnan(out.values), np.isnan(expected_values))
        np.testing.assert_array_equal(out.values[~np.isnan(out.values)], Y[~np.isnan(out.values)])
        assert out.fault.tolist() == expected_checks.any(axis=(0, 2)).tolist()
        assert out.fault_pub.tolist() == out.fault.tolist()  # epsilon inf: published as is
        assert sorted(map(tuple, out.onsets.tolist())) == sorted(map(tuple, _onsets(expected_checks)))


def test_nominal_data_raises_no_sensor_fault_and_each_fault_is_found_within_ten_samples():
    rng = np.random.default_rng(7)
    nominal = _nominal(rng, T=2000)
    health = SensorHealth(name="p").fit(nominal, segments=[1000, 1000])
    fresh = _nominal(np.random.default_rng(8), T=2000)
    assert not health.update(fresh).fault.any()
    onset = 100
    lo, hi = health.parameters.lo, health.parameters.hi
    for check, j in (("stuck", 0), ("stuck", 3), ("flatline", 1), ("range", 2), ("stale", 0), ("bad", 1)):
        health.reset()
        Y = _nominal(np.random.default_rng(9), T=300)
        Q = np.zeros(Y.shape, dtype=np.uint8)
        if check == "stuck":
            Y[onset:, j] = Y[onset - 1, j]
        elif check == "flatline":
            Y[onset:, j] = Y[onset - 1, j] + rng.normal(size=len(Y) - onset) * 1e-3 * health.parameters.scale[j]
        elif check == "range":
            Y[onset:, j] = hi[j] + (hi[j] - lo[j])
        else:
            Y[onset:, j] = np.nan
            Q[onset:, j] = BAD if check == "bad" else STALE
        out = health.update(Y, Q)
        found = np.flatnonzero(_active(out, check)[:, j])
        assert len(found) and onset <= found[0] < onset + 10, (check, j, found[:3])
        assert out.fault[:onset].sum() == 0, check
        # only this check (a value stuck on a rail is stuck and out of range), only this tag
        others = [c for c in CHECKS if c != check and not (check == "range" and c == "stuck")]
        assert not any(_active(out, c).any() for c in others), check
        assert not np.delete(out.checks, j, axis=2).any(), check
        if check in ("stuck", "flatline", "range"):
            assert np.isnan(out.values[found[0] :, j]).all() and out.excluded[found[0] :, j].all()


def test_a_tag_is_used_again_once_its_check_was_clear_for_recover_rows():
    rng = np.random.default_rng(3)
    health = SensorHealth(recover=4).fit(_nominal(rng))
    Y = _nominal(np.random.default_rng(4), T=60)
    Y[20:30, 0] = health.parameters.hi[0] + 1.0  # out of range for 10 rows
    out = health.update(Y)
    rows = np.flatnonzero(_active(out, "range")[:, 0])
    assert rows.tolist() == list(range(20, 33))  # 10 rows, then 3 more clear rows before it recovers
    assert np.isfinite(out.values[33:, 0]).all()
    assert out.started[CHECKS.index("range")] == 1


def test_configured_limits_replace_the_learned_range_and_saturation_is_not_stuck():
    rng = np.random.default_rng(5)
    nominal = _nominal(rng)
    nominal[:, 0] = np.clip(nominal[:, 0], -1.0, 1.0)  # a valve that saturates in nominal operation too
    health = SensorHealth(tags=["v", "a", "b", "c"], limits={"v": (-1.0, 1.0), "b": (math.nan, 5.0)}).fit(nominal)
    p = health.parameters
    # the limits widened by 5 % of their span (a measured position passes them by its noise); within 5 % of
    # one a value is pinned near its end stop (saturated)
    assert (p.lo[0], p.hi[0], p.lo[2]) == (-1.1, 1.1, -np.inf)
    assert (p.sat_lo[0], p.sat_hi[0], p.sat_lo[2]) == (-0.9, 0.9, -np.inf) and 4.0 < p.sat_hi[2] < 5.0
    Y = _nominal(np.random.default_rng(6), T=80)
    Y[:, 0] = np.clip(Y[:, 0], -1.0, 1.0)
    Y[30:, 0] = 1.0  # saturated at its limit for 50 rows: flat by physics
    Y[40:, 2] -= 1000.0  # no lower limit on b
    out = health.update(Y)
    assert not out.fault.any()
    Y[60:, 0] = 1.5
    health.reset()
    assert _active(health.update(Y), "range")[60:, 0].all()


def test_two_tags_breaking_at_once_are_a_process_excursion_not_sensor_faults():
    rng = np.random.default_rng(15)
    health = SensorHealth(recover=5).fit(_nominal(rng))
    hi = health.parameters.hi
    Y = _nominal(np.random.default_rng(16), T=120)
    Y[40:, 0] = hi[0] + 1.0 + rng.normal(size=80) * 0.01  # tag 0 leaves its range at row 40 ...
    Y[43:, 1] = Y[42, 1]  # ... and tag 1 freezes 3 rows later: the plant, not two sensors
    out = health.update(Y)
    # tag 0 alone is a sensor fault from row 40; once tag 1 is stuck too (its third repeat, row 45) both are
    # the plant's: tag 0 is used again after `recover` rows, tag 1 never counts
    assert out.checks[:, 40:45, 0].any() and not out.checks[:, 50:].any() and not out.checks[:, :, 1].any()
    # on their own, each is a sensor fault
    for j in (0, 1):
        alone = _nominal(np.random.default_rng(16), T=120)
        alone[:, j] = Y[:, j]
        health.reset()
        assert health.update(alone).checks[:, :, j].any()


def test_state_round_trips_through_json_and_continues_the_same():
    rng = np.random.default_rng(11)
    health = SensorHealth(epsilon=1.0, seed=3).fit(_nominal(rng))
    Y, Q = _random_stream(rng, 200, 4)
    health.update(Y[:90], Q[:90])
    state = json.loads(json.dumps(health.get_state()))
    expected = health.update(Y[90:], Q[90:])
    health.reset()
    health.set_state(state)
    again = health.update(Y[90:], Q[90:])
    np.testing.assert_array_equal(again.checks, expected.checks)
    np.testing.assert_array_equal(again.fault_pub, expected.fault_pub)


def test_a_state_with_every_array_deflated_restores_the_same():
    """A state record whose float arrays are deflated (level 1, as an earlier worker wrote them; this one
    stores them) is read back the same: a worker continues from its predecessor's record."""
    import base64
    import zlib

    rng = np.random.default_rng(12)
    health = SensorHealth().fit(_nominal(rng))
    Y, Q = _random_stream(rng, 120, 4)
    health.update(Y[:60], Q[:60])
    state = health.get_state()
    deflated = {
        name: base64.b64encode(zlib.compress(zlib.decompress(base64.b64decode(text)), 1)).decode("ascii")
        for name, text in state.items()
        if name != "privacy"
    }
    assert deflated["moves"] != state["moves"]  # the float arrays are written another way now
    expected = health.update(Y[60:], Q[60:])
    health.reset()
    health.set_state({**state, **deflated})
    again = health.update(Y[60:], Q[60:])
    np.testing.assert_array_equal(again.checks, expected.checks)
    np.testing.assert_array_equal(again.values, expected.values)


def test_the_published_bit_is_randomized_response():
    rng = np.random.default_rng(12)
    health = SensorHealth(epsilon=1.0, seed=0).fit(_nominal(rng))
    Y = _nominal(np.random.default_rng(13), T=4000)
    out = health.update(Y)
    assert not out.fault.any()
    flipped = out.fault_pub.mean()
    keep = math.e / (1 + math.e)
    # 4000 bits flipped with probability 1 - keep = 0.269: within 5 standard errors
    assert abs(flipped - (1 - keep)) < 5 * math.sqrt(keep * (1 - keep) / 4000)


def test_clear_errors():
    with pytest.raises(NotFittedError, match="call fit"):
        SensorHealth(name="reactor").update(np.zeros((2, 2)))
    with pytest.raises(ModelError, match="unknown tag"):
        SensorHealth(tags=["a", "b"], limits={"c": (0.0, 1.0)}).fit(np.random.default_rng(0).normal(size=(50, 2)))
    with pytest.raises(ModelError, match="low < high"):
        SensorHealth(tags=["a", "b"], limits={"a": (1.0, 0.0)}).fit(np.random.default_rng(0).normal(size=(50, 2)))
    health = SensorHealth().fit(np.random.default_rng(0).normal(size=(50, 2)))
    with pytest.raises(DataError, match=r"\(T, 2\)"):
        health.update(np.zeros((3, 3)))
