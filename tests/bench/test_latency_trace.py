"""``bench/latency_trace.py``'s breakdown of a traced latency run, on a trace written by hand: each verdict's way
is cut at the right points (the plant batch holding the row's last flag's sensor record, the RCA batch that
carried the verdict), and what the workers' loops and collectors did meanwhile is found."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from types import ModuleType

import pytest

from tests.bench.smoke import BENCH


@pytest.fixture
def lt(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))
    import latency_trace

    return latency_trace


def _txn(tp: str, lo: int, hi: int, at: float, steps: list[float], **extra: object) -> dict[str, object]:
    """A batch transaction's record: fetch called / returned, handler start / end, committed at ``at`` + steps."""
    fc, f, s, p, c = (at + x for x in steps)
    return {"k": "txn", "tp": tp, "lo": lo, "hi": hi, "n": hi - lo + 1, "fc": fc, "f": f, "s": s, "p": p, "c": c,
            "sent": p + 0.001, "q": p, "cpu": 0.0005, "prev": 0, "off": False, "quiet": [], "nout": 1, "vids": [],
            **extra}  # fmt: skip


def _write(path: Path, records: list[dict[str, object]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"k": "txn", "cut', encoding="utf-8")


def test_each_verdict_is_cut_at_its_own_batches(lt: ModuleType, tmp_path: Path) -> None:
    t0 = 1_000.0
    # two plants; row 1's last flag is b's (offset 3 of the flags topic); the sensor records of row 1 are
    # offsets 11 (a) and 21 (b) of their topics
    bench = {
        "plants": ["a", "b"],
        "topics": {"a": "s.sensors.a", "b": "s.sensors.b"},
        "offsets": [[10, 20], [11, 21]],
        "segments": [[0, 2]],
        "spans": [[t0 - 1, t0 + 5]],
        "offered": [1000.0],
        "sent_ns": [int((t0 - 0.1) * 1e9), int(t0 * 1e9)],
        "got": [["v1", 1, int((t0 + 0.200) * 1e9), 0]],
        "flags": [["a", 0, 0], ["b", 0, 1], ["a", 1, 2], ["b", 1, 3]],
        "what_if": "refreeze=1",
    }
    (tmp_path / "bench.json").write_text(json.dumps(bench), encoding="utf-8")
    plant = [
        # a's row 0 (its flag first in the flags topic) committed 2 ms after b's row 1: the RCA sees neither before
        _txn("s.sensors.a", 10, 10, t0 - 0.1, [0.001, 0.003, 0.004, 0.005, 0.162]),
        _txn("s.sensors.a", 11, 11, t0, [0.001, 0.003, 0.004, 0.005, 0.020]),
        # b: the fetch was called 2 ms before the record was sent; it committed 60 ms after
        _txn("s.sensors.b", 20, 21, t0, [-0.002, 0.010, 0.012, 0.014, 0.060], off=True, prev=1),
        {"k": "lag", "t": t0 + 0.030, "d": 0.025, "cpu": 0.004},
        # what the stall sampler saw in that stall: the loop's thread runnable, waiting for a core
        {
            "k": "stall",
            "t": t0 + 0.031,
            "d": 0.024,
            "n": 6,
            "late": 0.002,
            "pcpu": 0.003,
            "sched": [3_000_000, 20_000_000],
            "sys": {"user": 4, "idle": 1},
            "states": {"R": 5, "S": 1},
            "wchan": {"0": 6},
            "frames": {"loop.py:1 _run": 6},
        },
    ]
    rca = [
        # the RCA batch of flags 2..3 issued v1: its fetch, called before b's commit, returned 3 ms after it
        _txn("s.flags", 2, 3, t0, [0.055, 0.063, 0.070, 0.075, 0.150], vids=["v1"]),
        {"k": "gc", "t": t0 + 0.100, "g": 2, "d": 0.030, "n": 5},
        {"k": "gc", "t": t0 + 0.900, "g": 2, "d": 0.030, "n": 5},  # after the verdict arrived: not on its way
    ]
    _write(tmp_path / "plants.trace.jsonl", plant)
    _write(tmp_path / "rca.trace.jsonl", rca)
    lines = lt.breakdown(tmp_path)
    text = "\n".join(lines)
    assert lines[0] == "what-ifs of these runs: refreeze=1"
    assert "1,000 msgs/s: 1 verdicts traced (0 not matched" in text
    names = {name for name, _ in lt.STAGES}
    stages = {line[2:18].strip(): float(line[18:27]) for line in lines if line[2:18].strip() in names}
    # plant b: loop busy 0 (its fetch was waiting), fetch 10 ms, wait 2, handler 2, its records in the logs 1 ms
    # after, committed 45 ms after that; then 2 ms for a's row 0 (the LSO); RCA: its fetch was waiting (0) and
    # returned 1 ms after, wait 7, handler 5, records 1 ms after, committed 74 ms after; the consumer 50 ms
    assert stages["plant loop busy"] == pytest.approx(0.0, abs=1e-6)
    assert stages["plant fetch"] == pytest.approx(10.0, abs=1e-6)
    assert stages["plant send"] == pytest.approx(1.0, abs=1e-6)
    assert stages["plant commit"] == pytest.approx(45.0, abs=1e-6)
    assert stages["LSO wait"] == pytest.approx(2.0, abs=1e-6)
    assert stages["RCA fetch"] == pytest.approx(1.0, abs=1e-6)
    assert stages["RCA commit"] == pytest.approx(74.0, abs=1e-6)
    slowest = next(line for line in lines if line.strip().startswith("seq 1 b: 200 = "))
    assert slowest.split("=")[1].split(";")[0].split(" + ") == [
        " 0", "10", "2", "2", "1", "45", "2", "0", "1", "7", "5", "1", "74", "50"
    ]  # fmt: skip
    assert "1 txn before it in flight (+ group offset)" in slowest
    assert "plant worker meanwhile: 1 loop stalls >= 5 ms, 25 ms (longest 25 ms, 4 ms of it on the CPU)" in text
    assert (
        "its longest stall, sampled: 6 samples; thread state R 5, S 1; kernel wait 0 6; the loop thread on a core 3"
        " ms, runnable waiting for one 20 ms (from the sampler's first look); process CPU 3 ms; the machine's CPU"
        " meanwhile: user 40 ms, idle 10 ms; sampler woke up to 2 ms late; Python frames: loop.py:1 _run 6"
    ) in text
    assert "RCA worker meanwhile: no loop stall; collections gen2 30.0 ms" in text
    assert "plant txn with the group offset 100 / 100 %" in text
    assert "a gen-2 collection in a worker 100 / 100 %" in text


def _hold_the_loop(tracer: object, samples: int, limit: float) -> None:
    """Keep the event loop's thread busy until the stall sampler has looked at it ``samples`` times."""
    deadline = time.monotonic() + limit
    while (tracer.stall is None or tracer.stall["n"] < samples) and time.monotonic() < deadline:  # type: ignore[attr-defined]
        pass


def test_the_stall_sampler_names_what_holds_the_loop(lt: ModuleType, tmp_path: Path) -> None:
    """A loop held by a function: the sampler's ``stall`` record, once the loop is free, has its samples, the
    function among the loop thread's frames and the thread's time on a core (on Linux, from /proc)."""
    tracer = lt._Tracer(tmp_path / "t.trace.jsonl")

    async def main() -> list[dict[str, object]]:
        tracer.start_monitor()
        first = tracer.tick
        while tracer.tick == first:  # the monitor looked at the loop once
            await asyncio.sleep(0.001)
        _hold_the_loop(tracer, samples=3, limit=60.0)
        for _ in range(60_000):  # the record comes once the loop is free: at most a minute
            found = [r for r in tracer._pending if r["k"] == "stall"]
            if found:
                return found
            await asyncio.sleep(0.001)
        return []

    found = asyncio.run(main())
    assert found, "the sampler wrote no stall record"
    stall = found[0]
    assert stall["n"] >= 3 and sum(stall["states"].values()) == stall["n"]
    assert stall["d"] * 1000 >= lt.STALL_MS
    assert any(where.startswith("test_latency_trace.py:") and "_hold_the_loop" in where for where in stall["frames"])
    if Path("/proc/self/task").exists():
        assert stall["sched"][0] > 0, "the loop thread spun, yet /proc says it was on no core"
