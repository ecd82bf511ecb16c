"""The RCA stage's memory does not grow with the rows and verdicts of a long stream (issue 32, the soak).

The soak (``tools/soak.py``) replays fault files over and over, seq continuing: the RCA worker issues
a verdict every few dozen rows for an hour. What the stage keeps between batches (the aligner's
memory of released rows, the engine's evidence, the verdict ids it emitted) must be bounded and
reach its size early: the bytes of every object reachable from the stage after one stretch of the
stream and after a second, longer one are the same to a few hundred bytes, however many verdicts
the second stretch issued (a set of the verdict ids, the stage's earlier memory, grew by about
100 bytes a verdict until 13,797 of them).
"""

from __future__ import annotations

import math
import sys
import types
from typing import Any

import numpy as np
import pytest

from fedrca.application.site import rca_runtime
from fedrca.config import load_config
from fedrca.config.limits import MAX_REMEMBERED_VERDICTS
from fedrca.contracts import FlagMessage, encode_flags
from fedrca.exceptions import DataError
from fedrca.streams.aligner import FlagAligner
from fedrca.streams.rca_stage import VerdictIds

#: rows of one incident cycle: half quiet, half one plant alarming alone (the root named changes every cycle)
_CYCLE = 24
_SKIP = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)


def _flags(site: str, plants: list[str], lo: int, hi: int) -> list[FlagMessage]:
    out = []
    for seq in range(lo, hi):
        cycle, row = divmod(seq, _CYCLE)
        root = cycle % len(plants) if row >= _CYCLE // 2 else -1
        for m, plant in enumerate(plants):
            pair = (1, 1) if m == root else (0, 0)
            out.append(FlagMessage(site, plant, float(seq), seq, *pair, math.inf, "v0"))
    return out


def _deep_bytes(root: Any) -> int:
    """Bytes of every object reachable from ``root`` (each once; numpy arrays with their data; classes,
    modules and functions left out)."""
    seen: set[int] = set()
    stack = [root]
    total = 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _SKIP):
            continue
        seen.add(id(obj))
        if isinstance(obj, np.ndarray):
            total += sys.getsizeof(obj) + (obj.nbytes if obj.base is not None else 0)
            continue
        total += sys.getsizeof(obj)
        if isinstance(obj, dict):
            stack += [*obj.keys(), *obj.values()]
        elif isinstance(obj, (list, tuple, set, frozenset)) or type(obj).__name__ == "deque":
            stack += list(obj)
        if hasattr(obj, "__dict__"):
            stack.append(vars(obj))
        for slot in getattr(type(obj), "__slots__", ()):
            if hasattr(obj, slot):
                stack.append(getattr(obj, slot))
    return total


def test_a_long_stream_of_incidents_leaves_the_stage_as_large_as_it_was() -> None:
    config = load_config("config/tep.yaml")
    runtime = rca_runtime(config)
    plants = config.plant_names
    # a shorter memory of released rows than the worker's 10,000 (the test's time): full after the first stretch
    stage = runtime.stage
    stage.aligner = FlagAligner(plants, allowed_lateness=stage.aligner.allowed_lateness, memory=1000)
    verdicts = [0, 0]

    def stream(lo: int, hi: int, stretch: int) -> int:
        for start in range(lo, hi, 50):
            issued, rejected = runtime.process_flags(
                encode_flags(_flags(config.site, plants, start, min(start + 50, hi)))
            )
            assert not rejected
            stage.get_state()  # as the worker does after every batch
            verdicts[stretch] += len(issued)
        return _deep_bytes(stage)

    before = stream(0, 1500, 0)
    after = stream(1500, 9500, 1)
    # the second stretch issued hundreds of verdicts, fewer than the ids remembered ...
    assert 150 <= verdicts[1] < MAX_REMEMBERED_VERDICTS
    assert len(stage._emitted) == sum(verdicts)
    # ... and left the stage as large as it was (the aligner's buffer of codes moves within its allocation)
    assert abs(after - before) < 1024, (after - before, verdicts)


def test_the_remembered_ids_forget_the_oldest_first() -> None:
    ids = VerdictIds(3)
    names = [f"{k:016x}" for k in range(5)]
    assert [ids.add(v) for v in names[:3]] == [True, True, True]
    assert not ids.add(names[1])
    assert ids.add(names[3]) and ids.add(names[4])
    assert ids.ids() == names[2:] and len(ids) == 3
    assert names[0] not in ids and names[4] in ids
    assert ids.text() == "".join(names[2:])
    with pytest.raises(DataError):
        ids.add("not-a-verdict-id")
    loaded = VerdictIds(3)
    loaded.load(names)  # at once, as one by one
    assert loaded.ids() == names[2:] and names[1] not in loaded and not loaded.add(names[4])
    assert loaded.add(names[0]) and loaded.ids() == [*names[3:], names[0]]


def test_an_earlier_state_with_a_list_of_ids_reads_back() -> None:
    config = load_config("config/tep.yaml")
    runtime = rca_runtime(config)
    stage = runtime.stage
    names = [f"{k:016x}" for k in range(MAX_REMEMBERED_VERDICTS + 3)]
    stage.remember(names)
    state = stage.get_state()
    assert state["emitted"] == "".join(names[3:])
    stage.set_state({**state, "emitted": names})  # the list of ids of earlier states: the newest kept
    assert stage._emitted.ids() == names[3:]
    stage.set_state(state)
    assert stage._emitted.ids() == names[3:]
