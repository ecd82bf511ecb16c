"""The RCA runtime's batch path (a batch of plain flags decoded as columns and aligned at once) gives what
the flag-by-flag path gives: the same verdicts, dead letters (reason and detail) and state record after
every batch, whatever the stream (late, duplicate, withheld, malformed flags, plants drifting apart)."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrca.application.site import rca_runtime
from fedrca.config import load_config
from fedrca.contracts import FlagMessage, encode_flags
from fedrca.streams.runtime import RuntimeSettings

CONFIG = load_config("config/tep.yaml")
PLANTS = list(CONFIG.plant_names)


def stream(seed: int, rows: int, odd: float, pace: int = 12) -> list[bytes]:
    """Flags of ``rows`` samples: faults that come and go (so verdicts are issued), levels, sensor faults, each plant's
    partition read at its own pace; with probability ``odd`` a flag is lost, sent twice, withheld or
    replaced by a malformed message; up to ``pace`` flags of a plant are read at a time."""
    rng = random.Random(seed)
    faulty = {p: False for p in PLANTS}
    partitions: dict[str, list[bytes]] = {p: [] for p in PLANTS}
    for seq in range(rows):
        for m, plant in enumerate(PLANTS):
            if rng.random() < 0.05:
                faulty[plant] = not faulty[plant]
            zc = int(faulty[plant] or rng.random() < 0.02)
            sensor = rng.random() < 0.01  # a sensor fault's bit (the batch path takes it)
            flag = FlagMessage(
                CONFIG.site, plant, 180.0 * seq, seq, zc, zc, 2.0, "v", level=2 * zc, sensor_fault=sensor
            )
            raw = encode_flags([flag])[0]
            if rng.random() < odd:
                raw = rng.choice([
                    b"",  # lost
                    raw + b"\n" + raw,  # not JSON
                    raw.replace(b'"zc":' + str(zc).encode(), b'"zc":true'),
                    encode_flags([FlagMessage(CONFIG.site, plant, 180.0 * seq, seq, 0, 0, 2.0, "v", withheld=True)])[0],
                    encode_flags([FlagMessage(CONFIG.site, plant, 180.0 * seq + m, seq, 1 - zc, 0, 2.0, "v")])[0],
                ])  # fmt: skip
                if raw and rng.random() < 0.5:
                    partitions[plant].append(encode_flags([flag])[0])  # sent twice (or its conflict)
            if raw:
                partitions[plant].append(raw)
    out: list[bytes] = []
    while any(partitions.values()):
        waiting = [p for p in PLANTS if partitions[p]]
        # the plant furthest behind most of the time: the plants stay within a few samples of each other
        plant = max(waiting, key=lambda p: len(partitions[p])) if rng.random() < 0.7 else rng.choice(waiting)
        k = rng.randint(1, pace)
        out += partitions[plant][:k]
        del partitions[plant][:k]
    return out


def run(raws: list[bytes], cuts: list[int], batch_align: bool) -> tuple[list[object], int]:
    runtime = rca_runtime(CONFIG, settings=RuntimeSettings(allowed_lateness=8))
    runtime.batch_align = batch_align
    taken = 0
    calls = runtime.stage.align_columns

    def counted(flags):  # type: ignore[no-untyped-def]
        nonlocal taken
        rows = calls(flags)
        taken += rows is not None
        return rows

    runtime.stage.align_columns = counted  # type: ignore[method-assign]
    out: list[object] = []
    lo = 0
    for hi in [*sorted(cuts), len(raws)]:
        verdicts, rejected = runtime.process_flags(raws[lo:hi])
        out.append([v.encode() for v in verdicts])
        out.append([(raw, err.reason, err.detail) for raw, err in rejected])
        out.append(json.dumps(runtime.stage.get_state()))
        lo = max(lo, hi)
    out.append([v.encode() for v in runtime.flush()])
    return out, taken


@pytest.mark.parametrize("odd", [0.0, 0.02])
def test_batches_give_what_flag_by_flag_gives(odd):
    raws = stream(7, 300, odd, pace=3)
    cuts = list(range(0, len(raws), 97))
    batched, taken = run(raws, cuts, True)
    reference, _ = run(raws, cuts, False)
    assert batched == reference
    assert any(v for v in batched[0::3]), "the stream issues verdicts"
    if odd == 0.0:
        assert taken >= len(cuts) - 2  # the batch path takes an ordinary stream (but its start)


@pytest.mark.exhaustive  # many streams (make exhaustive); test_batches_give_what_flag_by_flag_gives guards make test
@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(seed=st.integers(0, 10_000), odd=st.floats(0.0, 0.1), cuts=st.lists(st.integers(0, 600), max_size=6))
def test_random_streams_and_batches_give_what_flag_by_flag_gives(seed, odd, cuts):
    raws = stream(seed, 120, odd)
    assert run(raws, cuts, True)[0] == run(raws, cuts, False)[0]


def test_rows_released_while_a_plant_withholds_are_marked_on_the_batch_path_too():
    """A plant withholds at the end of one batch; the next batch, all plain flags, completes those rows before
    the plant's next flag: verdicts there say ``privacy_withheld``, as flag by flag."""

    def flag(plant: str, seq: int, withheld: bool = False) -> bytes:
        zc = int(plant == PLANTS[2] and seq >= 22 and not withheld)  # a fault from row 22
        message = FlagMessage(CONFIG.site, plant, 180.0 * seq, seq, zc, zc, 2.0, "v", withheld=withheld)
        return encode_flags([message])[0]

    first = [flag(p, s) for s in range(25) for p in PLANTS] + [flag(PLANTS[0], s, True) for s in range(25, 30)]
    second = [flag(p, s) for s in range(25, 30) for p in PLANTS[1:]]
    second += [flag(p, s) for s in range(30, 60) for p in PLANTS]
    batched, _ = run(first + second, [len(first)], True)
    assert batched == run(first + second, [len(first)], False)[0]
    assert any(b'"outcome":"privacy_withheld"' in v for v in batched[3]), "a verdict of the second batch is marked"
