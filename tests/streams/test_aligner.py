"""Flag alignment: order, lateness, duplicates, determinism, restarts."""

from __future__ import annotations

import base64
import copy
import dataclasses
import json
import random
import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from fedrca.contracts import FlagColumns, FlagMessage
from fedrca.streams.aligner import AlignedRow, FlagAligner

PLANTS = ["a", "b", "c"]


def flag(plant, seq, zc=0, za=0):
    return FlagMessage("s", plant, float(seq), seq, zc, za, 1.0, "v")


def feed(aligner, flags):
    rows, statuses = [], []
    for f in flags:
        out, status = aligner.add(f)
        rows += out
        statuses.append(status)
    return rows + aligner.flush(), statuses


def test_rows_released_in_order_once_complete():
    al = FlagAligner(PLANTS, allowed_lateness=10)
    assert al.add(flag("a", 1))[0] == []  # seq 1 cannot pass seq 0
    assert al.add(flag("a", 0))[0] == []
    assert al.add(flag("b", 0))[0] == []
    rows, _ = al.add(flag("c", 0))
    assert [r.seq for r in rows] == [0]
    rows, _ = al.add(flag("b", 1))
    rows2, _ = al.add(flag("c", 1, zc=1))
    assert rows == [] and [(r.seq, r.flags["c"], r.complete) for r in rows2] == [(1, (1, 0), True)]


def test_missing_plant_released_after_lateness_then_late_flag_reported():
    al = FlagAligner(PLANTS, allowed_lateness=2)
    for p in ("a", "b"):
        al.add(flag(p, 0))
    released = []
    for seq in (1, 2, 3):
        for p in PLANTS:
            released += al.add(flag(p, seq))[0]
    assert released[0].seq == 0 and not released[0].complete and set(released[0].flags) == {"a", "b"}
    assert [r.seq for r in released] == [0, 1, 2, 3]
    assert al.add(flag("c", 0))[1] == "late"
    assert al.add(flag("a", 0))[1] == "duplicate"  # same bits as released: a redelivery
    assert al.add(flag("a", 0, zc=1))[1] == "late"  # different bits: new information, too late


def test_conflicting_duplicate_keeps_first():
    al = FlagAligner(PLANTS, allowed_lateness=5)
    al.add(flag("a", 0, zc=1))
    assert al.add(flag("a", 0, zc=0))[1] == "conflict"
    assert al.add(flag("a", 0, zc=1))[1] == "duplicate"
    al.add(flag("b", 0))
    rows, _ = al.add(flag("c", 0))
    assert rows[0].flags["a"] == (1, 0)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 40))
def test_any_arrival_order_within_lateness_gives_the_same_rows(seed, n):
    rng = random.Random(seed)
    flags = [flag(p, s, rng.randint(0, 1), rng.randint(0, 1)) for s in range(n) for p in PLANTS]
    in_order, _ = feed(FlagAligner(PLANTS, allowed_lateness=3), flags)
    # shuffle locally: every flag moves at most 2 samples from its place, after the stream's first row (the
    # start is the first row released: test_a_row_older_than_the_first_released_is_late)
    start = [f for f in flags if f.seq == 0]
    shuffled = start + sorted((f for f in flags if f.seq > 0), key=lambda f: f.seq + rng.uniform(0, 2))
    shuffled_rows, statuses = feed(FlagAligner(PLANTS, allowed_lateness=3), shuffled)
    assert "late" not in statuses
    assert [(r.seq, r.flags) for r in shuffled_rows] == [(r.seq, r.flags) for r in in_order]
    # redelivering everything adds nothing
    al = FlagAligner(PLANTS, allowed_lateness=3)
    _first, _ = feed(al, flags)
    again = []
    for f in flags:
        again += al.add(f)[0]
    assert again == []


def test_a_row_older_than_the_first_released_is_late():
    """The stream starts at its first released row: a complete row 1 goes out at once (no wait for a row 0
    nobody announced), and row 0's flags coming after it are late, whatever the lateness."""
    al = FlagAligner(PLANTS, allowed_lateness=3)
    assert [al.add(flag(p, 1))[1] for p in PLANTS] == ["buffered"] * 3
    assert al.add(flag("a", 0))[1] == "late"
    rows, _ = feed(al, [flag(p, 2) for p in PLANTS])
    assert [r.seq for r in rows] == [2]


def test_state_round_trip_mid_stream():
    flags = [flag(p, s, s % 2, 0) for s in range(20) for p in PLANTS if not (s == 5 and p == "b")]
    al = FlagAligner(PLANTS, allowed_lateness=2)
    head = []
    for f in flags[:30]:
        head += al.add(f)[0]
    saved = copy.deepcopy(al.get_state())
    tail_expected, _ = feed(al, flags[30:])
    restored = FlagAligner(PLANTS, allowed_lateness=2)
    restored.set_state(saved)
    tail, _ = feed(restored, flags[30:])
    assert [(r.seq, r.flags) for r in tail] == [(r.seq, r.flags) for r in tail_expected]
    assert [r.seq for r in head + tail] == list(range(20))
    # the restored memory of released rows still tells a redelivery from new information
    again = FlagAligner(PLANTS, allowed_lateness=2)
    again.set_state(json.loads(json.dumps(al.get_state())))
    assert again.add(flag("a", 3, 1, 0))[1] == "duplicate"
    assert again.add(flag("a", 3, 0, 0))[1] == "late"
    assert again.add(flag("b", 5, 1, 0))[1] == "late"  # b never reported seq 5


def test_state_round_trip_keeps_the_memory():
    """Runs + compressed codes restore every remembered (seq, code), gaps and the memory bound included."""
    al = FlagAligner(PLANTS, allowed_lateness=1, memory=500)
    # seqs 0..699 with 100..109 never reported (skipped) and plant c missing at 300 (released without it)
    for s in [s for s in range(700) if not 100 <= s < 110]:
        for p in PLANTS:
            if not (s == 300 and p == "c"):
                al.add(flag(p, s, s % 2, (s // 3) % 2))
    state = json.loads(json.dumps(al.get_state()))
    assert len(json.dumps(state)) < 2_000  # compact: written with every batch
    restored = FlagAligner(PLANTS, allowed_lateness=1, memory=500)
    restored.set_state(state)
    assert list(restored._released) == list(al._released)
    assert restored._released[0][0] == al._released[0][0] and len(restored._released) == 500
    assert restored.get_state() == state  # the kept serialised form follows evictions
    assert restored.add(flag("a", 650, 0, 0))[1] == "duplicate"  # 650: zc = 650 % 2, za = (650 // 3) % 2
    assert restored.add(flag("a", 650, 1, 1))[1] == "late"
    assert restored.add(flag("c", 300, 0, 0))[1] == "late"
    # states in the forms of earlier releases still restore: the codes compressed whole, and uncompressed
    whole = {k: v for k, v in state.items() if k not in ("released_blocks_z", "released_skip")}
    codes = "".join(code for _, code in al._released).encode("ascii")
    whole["released_codes_z"] = base64.b64encode(zlib.compress(codes, 1)).decode("ascii")
    legacy = FlagAligner(PLANTS, allowed_lateness=1, memory=500)
    legacy.set_state(whole)
    assert list(legacy._released) == list(al._released)
    old = dict(whole)
    del old["released_runs"], old["released_codes_z"]
    old["released_seqs"] = [s for s, _ in al._released]
    old["released_codes"] = "".join(code for _, code in al._released)
    legacy = FlagAligner(PLANTS, allowed_lateness=1, memory=500)
    legacy.set_state(old)
    assert list(legacy._released) == list(al._released)


def _released_stream(aligner, lo, hi):
    """Rows lo..hi-1 of every plant, a few skipped and a few without plant c, the codes varying."""
    for s in range(lo, hi):
        if s % 97 == 13:
            continue  # a sample nobody reported
        for p in PLANTS:
            if not (s % 89 == 7 and p == "c"):
                aligner.add(flag(p, s, (s // 5) % 2, (s // 7) % 2))


def test_a_batch_state_compresses_only_the_rows_after_the_last_full_block(monkeypatch):
    """The memory's codes are compressed by blocks as each fills: a state written after every batch compresses
    at most one block's rows (a memory of 2,000 rows was compressed whole, 2,000 rows, every time)."""
    import fedrca.streams.aligner as aligner_module

    al = FlagAligner(PLANTS, allowed_lateness=1, memory=2000)
    _released_stream(al, 0, 5000)
    compressed = []
    real = zlib.compress

    def counted(data, level=-1):
        compressed.append(len(data))
        return real(data, level)

    monkeypatch.setattr(aligner_module.zlib, "compress", counted)
    for lo in range(5000, 5600, 50):
        _released_stream(al, lo, lo + 50)
        compressed.clear()
        al.get_state()
        assert compressed and max(compressed) < aligner_module._BLOCK_ROWS * len(PLANTS), compressed


def test_the_blocks_round_trip_and_keep_forgetting_the_oldest_rows():
    """Restored at any point (the first block partly forgotten, a block just full, a memory smaller than a block),
    an aligner writes the state it was restored from, and the same states as the one never restored after more
    rows."""
    for memory, cut in [(1, 40), (7, 700), (499, 1300), (500, 1000), (501, 1502), (1234, 3000), (2000, 2999)]:
        al = FlagAligner(PLANTS, allowed_lateness=1, memory=memory)
        _released_stream(al, 0, cut)
        state = json.loads(json.dumps(al.get_state()))
        restored = FlagAligner(PLANTS, allowed_lateness=1, memory=memory)
        restored.set_state(state)
        assert restored.get_state() == state, memory
        assert list(restored._released) == list(al._released)
        for lo in range(cut, cut + 1600, 400):
            _released_stream(al, lo, lo + 400)
            _released_stream(restored, lo, lo + 400)
            assert restored.get_state() == al.get_state(), (memory, lo)
        fresh = FlagAligner(PLANTS, allowed_lateness=1, memory=memory)
        fresh.set_state(json.loads(json.dumps(al.get_state())))
        assert list(fresh._released) == list(al._released)
        # a memory of another size restores the rows it holds (its blocks rebuilt)
        other = FlagAligner(PLANTS, allowed_lateness=1, memory=max(1, memory // 2))
        other.set_state(json.loads(json.dumps(al.get_state())))
        assert list(other._released) == list(al._released)[-max(1, memory // 2) :]
        _released_stream(other, cut + 1600, cut + 2200)
        _released_stream(al, cut + 1600, cut + 2200)
        assert list(other._released) == list(al._released)[-max(1, memory // 2) :]


def test_severity_levels_travel_with_their_row_and_survive_a_restart():
    al = FlagAligner(PLANTS, allowed_lateness=10)
    al.add(FlagMessage("s", "a", 0.0, 0, 1, 1, 1.0, "v", level=2))
    al.add(FlagMessage("s", "b", 0.0, 0, 0, 0, 1.0, "v", level=0))
    restored = FlagAligner(PLANTS, allowed_lateness=10)
    restored.set_state(json.loads(json.dumps(al.get_state())))
    rows, _ = restored.add(flag("c", 0))  # a plant without levels (FlagMessage.level None)
    assert [(r.seq, r.levels) for r in rows] == [(0, {"a": 2, "b": 0})]
    rows, _ = feed(restored, [flag(p, 1) for p in PLANTS])
    assert [r.levels for r in rows] == [{}]


@settings(max_examples=30, deadline=None, derandomize=True, database=None)
@given(
    times=st.lists(
        st.lists(st.sampled_from([0.0, 180.0, 180.5, 359.0, 1e9, 1e9 + 0.25]), min_size=1, max_size=3),
        min_size=1,
        max_size=8,
    ),
    skew=st.sampled_from([float("inf"), 0.3, 100.0]),
    codes=st.lists(st.sampled_from([(0, 0), (0, 1), (1, 0), (1, 1)]), min_size=3, max_size=3),
)
def test_clock_fast_path_equals_the_median(times, skew, codes):
    """A row's time is the median of its plants' times, each offset the plant's time minus it, and the code of its
    pairs what the memory keeps, whether its plants agree on the time (the aligner's fast path) or not."""
    aligner = FlagAligner(PLANTS, allowed_lateness=0, max_clock_skew=skew)
    rows = []
    for seq, row_times in enumerate(times):
        present = PLANTS[: len(row_times)]
        for plant, t, (zc, za) in zip(present, row_times, codes, strict=False):
            rows += aligner.add(FlagMessage("s", plant, t, seq, zc, za, 1.0, "v"))[0]
    rows += aligner.flush()
    assert [r.seq for r in rows] == list(range(len(times)))
    for row, row_times in zip(rows, times, strict=True):
        values = sorted(row_times)
        n = len(values)
        median = values[n // 2] if n % 2 else 0.5 * (values[n // 2 - 1] + values[n // 2])
        assert row.ts == median
        assert row.offsets == {p: t - median for p, t in zip(PLANTS, row_times, strict=False)}
        off = {p for p, t in zip(PLANTS, row_times, strict=False) if abs(t - median) > skew}
        assert set(row.clock) == (off if n - len(off) >= 2 else set())
    state = aligner.get_state()
    fresh = FlagAligner(PLANTS, allowed_lateness=0, max_clock_skew=skew)
    fresh.set_state(json.loads(json.dumps(state)))
    assert fresh._released == aligner._released
    codes_kept = "".join(code for _, code in aligner._released)
    assert all(len(code) == len(PLANTS) for _, code in aligner._released)
    assert set(codes_kept) <= set("0123-")


def test_a_common_row_is_an_ordinary_row():
    """The common row (every plant's flag with evidence, at one time), built without the dataclass's __init__,
    is the row __init__ builds: every field, in the class's order."""
    aligner = FlagAligner(PLANTS, allowed_lateness=0)
    rows = []
    for seq in range(3):
        for m, plant in enumerate(PLANTS):
            level = m if seq else None
            rows += aligner.add(FlagMessage("s", plant, 9.0, seq, m % 2, seq % 2, 1.0, "v", level=level))[0]
    assert [r.seq for r in rows] == [0, 1, 2]
    for row in rows:
        assert list(vars(row)) == [f.name for f in dataclasses.fields(AlignedRow)]
        again = AlignedRow(
            row.seq, row.ts, dict(row.flags), levels=dict(row.levels), sensor=dict(row.sensor),
            offsets=dict(row.offsets),
        )  # fmt: skip
        assert row == again and repr(row) == repr(again)


# -- a batch of plain flags at once (FlagAligner.add_columns): the same rows and state as flag by flag --
def columns_of(flags):
    return FlagColumns(
        "s",
        *(tuple(getattr(f, name) for f in flags) for name in ("plant", "ts", "seq", "zc", "za", "eps")),
        tuple(f.model_version for f in flags),
        tuple(f.level for f in flags),
        tuple(f.level_eps for f in flags),
        tuple(f.sensor_fault for f in flags) if any(f.sensor_fault for f in flags) else None,
    )


def by_batches(aligner, flags, cuts):
    """Rows released and the state after each batch: add_columns when it takes the batch, else flag by flag;
    and how many batches it took whole."""
    rows, states, taken, lo = [], [], 0, 0
    for hi in [*sorted(cuts), len(flags)]:
        batch = flags[lo:hi]
        released = aligner.add_columns(columns_of(batch))
        if released is None:
            released = [row for f in batch for row in aligner.add(f)[0]]
        else:
            taken += 1
        rows += released
        states.append(json.dumps(aligner.get_state()))
        lo = max(lo, hi)
    return [repr(r) for r in rows], states, taken


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(1, 60),
    lateness=st.integers(0, 6),
    cuts=st.lists(st.integers(0, 200), max_size=8),
    shuffle=st.integers(0, 3),
    odd=st.floats(0.0, 0.3),
)
def test_columns_equal_flag_by_flag(seed, n, lateness, cuts, shuffle, odd):
    rng = random.Random(seed)
    streams = {plant: [] for plant in PLANTS}  # each plant's flags in its order
    for seq in range(n):
        for plant in PLANTS:
            if rng.random() < odd:  # lost, or sent twice (the same or a different pair)
                if rng.random() < 0.5:
                    continue
                streams[plant].append(flag(plant, seq, rng.randint(0, 1), rng.randint(0, 1)))
            ts = float(seq) + (rng.random() if rng.random() < odd else 0.0)  # a plant's clock off
            level = rng.choice([None, 0, 1, 2]) if rng.random() < 0.5 else None
            sensor = rng.random() < odd  # a sensor fault of the plant: its bit released with the row
            zc, za = rng.randint(0, 1), rng.randint(0, 1)
            streams[plant].append(FlagMessage("s", plant, ts, seq, zc, za, 1.0, "v", level=level, sensor_fault=sensor))
    # the plants' partitions interleaved at random paces: a plant runs ahead of the others, beyond the lateness too
    flags = []
    while any(streams.values()):
        plant = rng.choice([p for p in PLANTS if streams[p]])
        k = rng.randint(1, 3)
        flags += streams[plant][:k]
        del streams[plant][:k]
    for _ in range(shuffle):  # arrivals out of order
        i, j = rng.randrange(len(flags)), rng.randrange(len(flags))
        flags[i], flags[j] = flags[j], flags[i]
    cut = [min(c, len(flags)) for c in cuts]
    reference = FlagAligner(PLANTS, allowed_lateness=lateness)
    rows, states = [], []
    lo = 0
    for hi in [*sorted(cut), len(flags)]:
        rows += [repr(r) for f in flags[lo:hi] for r in reference.add(f)[0]]
        states.append(json.dumps(reference.get_state()))
        lo = max(lo, hi)
    batched = FlagAligner(PLANTS, allowed_lateness=lateness)
    got_rows, got_states, _ = by_batches(batched, flags, cut)
    assert got_rows == rows and got_states == states
    assert [repr(r) for r in batched.flush()] == [repr(r) for r in reference.flush()]


def flag_by_flag(flags, cuts, lateness):
    reference = FlagAligner(PLANTS, allowed_lateness=lateness)
    rows, states, lo = [], [], 0
    for hi in [*sorted(cuts), len(flags)]:
        rows += [repr(r) for f in flags[lo:hi] for r in reference.add(f)[0]]
        states.append(json.dumps(reference.get_state()))
        lo = max(lo, hi)
    return rows, states


def test_columns_carry_the_plants_sensor_fault_bits():
    """A batch with sensor-fault bits is taken whole, and its rows carry the bits as flag by flag."""
    flags = [
        FlagMessage("s", p, float(seq), seq, seq % 2, 0, 1.0, "v", sensor_fault=(seq + m) % 7 == 0)
        for seq in range(40)
        for m, p in enumerate(PLANTS)
    ]
    aligner = FlagAligner(PLANTS, allowed_lateness=3)
    rows, states, taken = by_batches(aligner, flags, [10, 30, 60, 90])
    assert (rows, states) == flag_by_flag(flags, [10, 30, 60, 90], 3)
    assert taken == 4 and sum("': 1" in r.split("sensor=")[1] for r in rows) >= 10


def test_columns_take_an_ordinary_stream_whole_and_refuse_what_flag_by_flag_treats_apart():
    flags = [flag(p, seq, zc=seq % 2) for seq in range(40) for p in PLANTS]
    rows, states, taken = by_batches(FlagAligner(PLANTS, allowed_lateness=3), flags, [10, 30, 60, 90])
    assert (rows, states) == flag_by_flag(flags, [10, 30, 60, 90], 3)
    assert len(rows) == 40 and taken == 4  # every batch after the first (the stream starts flag by flag)
    start = flags[:30]  # rows 0..9 released
    for extra, cuts in [
        ([flag("a", 9, zc=1), flag("a", 10), flag("a", 12)], [30]),  # a released row's flag (late)
        ([flag("a", 10), flag("a", 10, zc=1), flag("b", 10), flag("c", 10)], [30]),  # a conflict in the batch
        ([flag("a", 10), flag("a", 10, zc=1), flag("b", 10), flag("c", 10)], [30, 31]),  # ... with a held flag
        ([flag("a", s) for s in range(10, 15)] + [flag("b", 10), flag("c", 10)], [30]),  # overdue before b, c came
        ([flag("a", 16), flag("a", 13)], [30]),  # rows 10..15 skipped (none came), then one of them comes
    ]:
        got = by_batches(FlagAligner(PLANTS, allowed_lateness=3), start + extra, cuts)
        assert got[:2] == flag_by_flag(start + extra, cuts, 3)
