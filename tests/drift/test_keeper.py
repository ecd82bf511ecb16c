"""One plant's loop (fedrca.drift.BaselineKeeper): drift absorbed, faults refused, any chunking, restarts, operators."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from fedrca.detectors.base import DetectionResult
from fedrca.detectors.plant import PlantDetector
from fedrca.drift import BaselineKeeper, KeeperSettings, RowHistory
from fedrca.drift.history import CHUNK_ROWS
from fedrca.exceptions import ModelError
from tests.drift.conftest import plant_rows


def _alarm_rate(out) -> float:  # type: ignore[no-untyped-def]
    return float(np.mean(out.zc | out.za))


def test_the_loop_follows_slow_nominal_drift(fitted: PlantDetector, settings: KeeperSettings) -> None:
    """4,000 rows whose operating point moves slowly (0.04 noise standard deviations per 400 rows along a
    direction that is not the states'): without the loop the plant alarms on most of the last rows, with it
    on few."""
    rows = plant_rows(2, 4000, drift_per_row=0.0001)
    off = fitted.step_batch(rows)
    fitted.reset()
    keeper = BaselineKeeper(fitted, settings)
    on = keeper.process(rows, seqs=np.arange(4000))
    late = slice(2000, 4000)
    assert float(np.mean((off.zc | off.za)[late])) > 0.5
    assert float(np.mean((on.zc | on.za)[late])) < 0.05
    assert [r.seq for r in keeper.reports] == list(range(400, 4000, 400))
    assert keeper.version >= 8


def test_a_refresh_is_refused_while_a_slow_fault_alarms(fitted: PlantDetector, settings: KeeperSettings) -> None:
    """Issue 36, acceptance 2: a slow fault (one sensor drifting out of calibration, from row 1,000) that alarms
    when a refresh falls due is never absorbed: the refresh is refused with the reason, the baseline stays, and
    the plant keeps alarming for as long as the fault lasts."""
    rows = plant_rows(3, 2400)
    ramp = np.zeros(2400)
    ramp[1000:] = np.arange(1400) * 0.004  # +0.4 per 100 rows on sensor 2: a slow instrument drift
    rows[:, 2] += ramp
    keeper = BaselineKeeper(fitted, settings)
    out = keeper.process(rows, seqs=np.arange(2400))
    by_seq = {r.seq: r for r in keeper.reports}
    assert by_seq[400].outcome in ("applied", "limited") and by_seq[800].outcome in ("applied", "limited")
    for seq in (1200, 1600, 2000):
        report = by_seq[seq]
        assert report.outcome == "refused", report.line()
        assert "alarms now" in report.reason
        assert report.version == 2  # the baseline of seq 800, never one fitted on the fault
    alarm = out.zc | out.za
    assert float(np.mean(alarm[1300:])) > 0.9  # never absorbed: the fault alarms to the end
    # the rows a refused refresh would have read: the guard band keeps the fault's first alarms out too
    assert keeper.baseline.seq == 800


def test_a_large_move_is_limited(fitted: PlantDetector) -> None:
    """A jump of the operating point (a new production rate, say) moves the baseline a bounded step per
    refresh, never the whole jump at once, while the guards let the refreshes through."""
    settings = KeeperSettings(every=400, window=400, history=800, guard=0, recent=1, min_rows=200,
                              max_shift=0.3, max_scale=0.25)  # fmt: skip
    rows = plant_rows(4, 1200) + np.array([1.5, 1.0, -0.8, 0.6])
    keeper = BaselineKeeper(fitted, settings)
    keeper.process(rows[:401], seqs=np.arange(401))
    report = keeper.reports[-1]
    assert report.outcome in ("limited", "refused")
    if report.outcome == "limited":
        assert report.shift > 0.3 and report.applied < 1.0


def test_a_new_recording_counts_the_drift_allowance_from_its_start(fitted: PlantDetector) -> None:
    """After :meth:`reset` (a new recording, seqs from 0 again) the baseline in force is kept and its drift
    allowance (``per``: a rate) accrues from the recording's start. Counted from the seq it took in the previous
    recording (800), the first refresh of the next one (seq 400) would be allowed no step at all."""
    settings = KeeperSettings(every=400, window=800, history=1600, guard=20, recent=60, min_rows=200,
                              max_shift=0.5, max_scale=0.25, per=400)  # fmt: skip
    keeper = BaselineKeeper(fitted, settings)
    keeper.process(plant_rows(5, 900, drift_per_row=0.0002), seqs=np.arange(900))
    assert keeper.version == 2 and keeper.baseline.seq == 800
    keeper.reset()
    assert keeper.version == 2 and keeper.baseline.seq == 0
    keeper.process(plant_rows(6, 401, drift_per_row=0.0002, start=900), seqs=np.arange(401))
    report = keeper.reports[-1]
    assert report.seq == 400 and report.outcome in ("applied", "limited"), report.line()
    assert report.applied > 0.0, report.line()


@pytest.mark.parametrize("batch", [1, 7, 500])
def test_any_chunking_gives_the_same_flags_and_baselines(fitted: PlantDetector, settings: KeeperSettings,
                                                         batch: int) -> None:  # fmt: skip
    n = 900  # two refreshes, at 400 and 800
    rows = plant_rows(5, n, drift_per_row=0.0001)
    one = BaselineKeeper(copy.deepcopy(fitted), settings)
    whole = one.process(rows, seqs=np.arange(n))
    other = BaselineKeeper(copy.deepcopy(fitted), settings)
    parts = [other.process(rows[i : i + batch], seqs=np.arange(i, min(i + batch, n))) for i in range(0, n, batch)]
    np.testing.assert_array_equal(np.concatenate([p.zc for p in parts]), whole.zc)
    np.testing.assert_array_equal(np.concatenate([p.za for p in parts]), whole.za)
    assert one.version == 2 and other.baseline.digest() == one.baseline.digest()


def test_a_restart_from_the_records_continues_exactly(fitted: PlantDetector, settings: KeeperSettings) -> None:
    """What a plant worker writes with its batches (history chunks, baselines, the small state) is enough for
    another worker to continue the stream with the same flags: restore at every kind of point."""
    rows = plant_rows(6, 1300, drift_per_row=0.0001)
    reference = BaselineKeeper(copy.deepcopy(fitted), settings)
    expected = reference.process(rows, seqs=np.arange(1300))
    for cut in (400, 401, 1034):
        first = BaselineKeeper(copy.deepcopy(fitted), settings)
        topic: dict[bytes, bytes] = {}
        heads = []
        for lo in range(0, cut, 150):  # batches, each writing what it changed (compacted: newest per key)
            heads.append(first.process(rows[lo : min(lo + 150, cut)], seqs=np.arange(lo, min(lo + 150, cut))))
            topic.update(first.pending_records())
        head = DetectionResult.concat(heads)
        state = (first.get_state(), first.detector.get_state())
        # a new worker: the detector as fitted, then the records and the state
        second = BaselineKeeper(copy.deepcopy(fitted), settings)
        second.restore_records(topic, cut - 1)
        second.set_state(state[0])
        second.detector.set_state(state[1])
        tail = second.process(rows[cut:], seqs=np.arange(cut, 1300))
        np.testing.assert_array_equal(np.concatenate([head.zc, tail.zc]), expected.zc, err_msg=f"cut {cut}")
        np.testing.assert_array_equal(np.concatenate([head.za, tail.za]), expected.za, err_msg=f"cut {cut}")
        assert second.baseline.digest() == reference.baseline.digest()
    assert reference.version == 3


def test_a_limited_step_keeps_its_target_across_a_restart(fitted: PlantDetector) -> None:
    """A limited step's baseline carries the re-fit it stopped short of (its target: where the explaining refresh
    measures the plant's move from); its record keeps it exactly, the record passes the history topic's checks,
    and a worker that restores the records continues with the same targets (a record written without one, by a
    loop before targets, is taken back as the baseline's own means)."""
    import json

    settings = KeeperSettings(every=200, window=800, history=1600, min_rows=200, max_shift=1.0, per=400,
                              covariances=False, trend=True, explain=True, explain_shift=1.4)  # fmt: skip
    rows = plant_rows(28, 1500, drift_per_row=0.0008)
    first = BaselineKeeper(copy.deepcopy(fitted), settings)
    first.process(rows, seqs=np.arange(1500))
    topic = dict(first.pending_records())
    limited = [r.version for r in first.reports if r.outcome == "limited" and r.version in first.versions]
    assert limited, [r.line() for r in first.reports]
    second = BaselineKeeper(copy.deepcopy(fitted), settings)
    for key, value in topic.items():
        second.check_record(key, value)
    second.restore_records(topic, 1499)
    second.set_state(first.get_state())
    for v in first.versions:
        want, got = first._baselines[v].target, second._baselines[v].target
        assert (want is None) == (got is None), v
        for name in want or {}:
            np.testing.assert_array_equal(got[name], want[name])  # type: ignore[index]
    assert all(first._baselines[v].target is not None for v in limited)
    # a baseline record without a target (written before targets): its own means
    key = second.baseline_key(limited[-1])
    doc = json.loads(topic[key])
    doc["arrays"] = {k: v for k, v in doc["arrays"].items() if not k.startswith("t")}
    old = json.dumps(doc).encode()
    second.check_record(key, old)
    assert second.load_baseline(old) == limited[-1] and second._baselines[limited[-1]].target is None


def _hostile_history(topic: dict[bytes, bytes]) -> list[tuple[bytes, bytes]]:
    import base64
    import json

    rows, baseline = json.loads(topic[b"rows/1"]), json.loads(topic[b"baseline/1"])

    def with_(doc: dict, **change: object) -> bytes:
        return json.dumps({**doc, **change}).encode()

    narrow = {**baseline, "arrays": {k: [[1], v[1]] for k, v in baseline["arrays"].items()}}
    return [
        (b"rows/1", b"[" * 100_000),
        (b"rows/1", b'{"chunk":' * 50_000),
        (b"rows/1", with_(rows, chunk=-17)),
        (b"rows/1", with_(rows, chunk=2**70)),
        (b"rows/1", with_(rows, chunk=True)),
        (b"rows/1", with_(rows, chunk=0)),  # chunk 0 is kept under rows/0
        (b"rows/1", with_(rows, y=base64.b64encode(b"\x00" * 24).decode())),
        (b"rows/1", with_(rows, alarm="")),
        (b"rows/1", with_(rows, present=[1])),
        (b"rows/1", topic[b"rows/1"][:100]),
        (b"rows/0", with_(rows, present="x" * 1_100_000)),
        (b"baseline/1", json.dumps(narrow).encode()),
        (b"baseline/1", with_(baseline, version=0)),
        (b"baseline/2", with_(baseline, version=1)),  # baseline 1 under the slot of 2
        (b"baseline/1", with_(baseline, arrays={})),
        (b"baseline/1", b"garbage"),
        (b"reports", b'{"not": "a list"}'),
        (b"reports", b'[{"plant": "x"}]'),
        (b"reports", b"[[1, 2]]"),
        (b"junk", b"{}"),
    ]


def test_history_records_the_loop_cannot_take_back_are_refused_before_any_is_taken(
    fitted: PlantDetector, settings: KeeperSettings
) -> None:
    """Issue 34: a hostile record on a plant's history topic is a MessageError (the worker dead-letters it and
    takes the record before it, tests/streams/test_drift_kafka.py), never another exception nor taken."""
    from fedrca.contracts import DeadLetterReason
    from fedrca.exceptions import MessageError

    keeper = BaselineKeeper(copy.deepcopy(fitted), settings)
    keeper.process(plant_rows(8, 450, drift_per_row=0.0001), seqs=np.arange(450))
    topic = dict(keeper.pending_records())
    assert keeper.version == 1 and {b"rows/1", b"baseline/1", b"reports"} <= set(topic)
    for key, value in topic.items():  # what the loop writes passes
        keeper.check_record(key, value)
    for key, value in _hostile_history(topic):
        with pytest.raises(MessageError) as refused:
            keeper.check_record(key, value)
        assert DeadLetterReason(refused.value.reason) in (
            DeadLetterReason.BAD_STATE, DeadLetterReason.TOO_DEEP, DeadLetterReason.TOO_LARGE,
            DeadLetterReason.MALFORMED_JSON,
        ), (key, refused.value)  # fmt: skip
        assert len(str(refused.value)) < 600 and "\n" not in str(refused.value)


def test_pin_rollback_and_force(fitted: PlantDetector, settings: KeeperSettings) -> None:
    rows = plant_rows(7, 2000, drift_per_row=0.0001)
    keeper = BaselineKeeper(fitted, settings)
    keeper.process(rows[:900], seqs=np.arange(900))
    assert keeper.version == 2, [r.line() for r in keeper.reports]
    keeper.pin(at=900)
    keeper.process(rows[900:1300], seqs=np.arange(900, 1300))
    assert keeper.reports[-1].outcome == "pinned" and keeper.version == 2
    keeper.rollback(1, at=1300)
    assert keeper.version == 3 and keeper.pinned
    assert keeper.baseline.digest() == keeper._baselines[1].digest()
    with pytest.raises(ModelError, match="b99 is not held"):
        keeper.rollback(99, at=1300)
    keeper.unpin(at=1300)
    report = keeper.refresh(at=1300, force=True)
    assert report.outcome == "forced" and keeper.version == 4
    assert len(keeper.versions) <= settings.keep + 1


def test_the_history_is_bounded_and_its_records_exact() -> None:
    history = RowHistory(n_sensors=3, capacity=500)
    rng = np.random.default_rng(8)
    Y = rng.normal(size=(5000, 3))
    alarm = rng.random(5000) < 0.1
    seqs = np.arange(5000)
    seqs = seqs[rng.random(5000) > 0.05]  # gaps: missing samples
    history.add(seqs, Y[seqs], None, alarm[seqs])
    assert len(history) <= 500 + CHUNK_ROWS
    held, rows, _, alarms = history.window(5000, 500)
    keep = seqs[seqs >= 4500]
    np.testing.assert_array_equal(held, keep)
    np.testing.assert_array_equal(rows, Y[keep])
    np.testing.assert_array_equal(alarms, alarm[keep])
    copy = RowHistory(n_sensors=3, capacity=500)
    records = {history.slot(c): history.record(c) for c in sorted(history.take_dirty())}
    assert len(records) <= history.slots
    for raw in records.values():
        copy.load(raw, newest=4999)
    copy.settle(4999)
    for a, b in zip(copy.window(5000, 500), (held, rows, None, alarms), strict=True):
        if b is not None:
            np.testing.assert_array_equal(a, b)


def test_rows_with_missing_values_are_left_out_of_a_refresh(fitted: PlantDetector, settings: KeeperSettings) -> None:
    """A history row with a missing value (issue 30's degraded rows, or partly observed ones) is treated as a gap:
    the refresh reads the observed rows only, and its re-fit is finite."""
    rows = plant_rows(9, 500, drift_per_row=0.0001)
    keeper = BaselineKeeper(fitted, settings)
    keeper.process(rows[:399], seqs=np.arange(399))
    gappy = rows[:399].copy()
    gappy[::7, 1] = np.nan
    keeper.history.clear()
    keeper.history.add(np.arange(399), gappy, None, np.zeros(399, dtype=bool))
    report = keeper.refresh(at=399)
    assert report.outcome in ("applied", "limited"), report.line()
    state_c, _ = keeper.detector.baseline
    assert np.isfinite(state_c.innovation.mean).all() and np.isfinite(state_c.level.whitening).all()


def _history_fuzz(fitted: PlantDetector, settings: KeeperSettings, examples: int) -> dict:
    """Records of a history topic, mutated (tests/contracts/test_fuzz_decoders.py's strategies): a record the
    check accepts is one the loop takes back without an exception."""
    from hypothesis import strategies as st

    from tests.contracts.test_fuzz_decoders import _fuzz, _mangle, json_records

    keeper = BaselineKeeper(copy.deepcopy(fitted), settings)
    keeper.process(plant_rows(8, 450, drift_per_row=0.0001), seqs=np.arange(450))
    topic = dict(keeper.pending_records())
    import json

    valid = {key: json.loads(value) for key, value in topic.items() if key != b"reports"}
    scratch = BaselineKeeper(copy.deepcopy(fitted), settings)

    @st.composite
    def records(draw: st.DrawFn) -> tuple[bytes, bytes]:
        key = draw(st.sampled_from([*valid, b"reports", b"rows/0", b"baseline/0", b"junk"]))
        if key in valid and draw(st.booleans()):
            return key, draw(json_records(valid[key]))
        return key, _mangle(draw, topic.get(key, topic[b"rows/1"]))

    def take(record: tuple[bytes, bytes]) -> bool:
        keeper.check_record(*record)
        scratch.restore_records({record[0]: record[1]}, 449)  # accepted: taken back without an exception
        return True

    return _fuzz(records(), take, bool, examples)


def test_history_records_fuzzed_are_taken_back_or_refused(fitted: PlantDetector, settings: KeeperSettings) -> None:
    counts = _history_fuzz(fitted, settings, 100)
    assert counts["ok"] > 0 and counts["refused"] > 0, counts


@pytest.mark.slow
@pytest.mark.exhaustive
def test_history_records_fuzzed_are_taken_back_or_refused_slow(fitted: PlantDetector, settings: KeeperSettings) -> None:
    """Issue 34 acceptance 2 for the history topic's records: 10,000 examples (``make exhaustive``)."""
    counts = _history_fuzz(fitted, settings, 10_000)
    print(f"\nfuzz history: {sum(counts.values())} examples, {counts['ok']} decoded, {counts['refused']} refused")
    assert sum(counts.values()) >= 10_000


def test_a_refresh_holds_blas_at_one_thread_and_gives_it_back(fitted: PlantDetector, settings: KeeperSettings) -> None:
    """The re-fit runs on one BLAS thread whatever the process set, and the process's setting is back after it
    (the keeper's controller lists the libraries once, at its first refresh)."""
    from threadpoolctl import threadpool_info, threadpool_limits

    def blas_threads() -> set[int]:
        return {lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"}

    keeper = BaselineKeeper(fitted, settings)
    seen: list[set[int]] = []
    refit = keeper._refresh

    def spy(at: int, force: bool):  # type: ignore[no-untyped-def]
        seen.append(blas_threads())
        return refit(at, force)

    keeper._refresh = spy  # type: ignore[method-assign]
    with threadpool_limits(limits=2, user_api="blas"):
        keeper.process(plant_rows(2, 900), seqs=np.arange(900))
        assert blas_threads() == {2}
    assert [r.seq for r in keeper.reports] == [400, 800]
    assert seen == [{1}, {1}]
