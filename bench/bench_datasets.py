"""File loading benchmark (``make bench``): fedrca's bounded, checked HAI loader next to plain pandas.

A HAI 22.04-like file (timestamp, 86 tags, Attack; 60,000 rows, about 40 MB) is written once
to a temporary directory, then read by

* the peer: ``pandas.read_csv`` of the whole file plus ``pandas.to_datetime`` of the time
  column (what a loader without chunking or checks does), and
* fedrca: ``fedrca.datasets.load_hai`` (bounded text reader, per-chunk parsing, field-count,
  number, time-format and label checks, local-time conversion).

Target: fedrca takes at most 3x the peer's time (the checks cost, the memory bound must not).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from fedrca.datasets import load_hai

ROWS = 60_000
TAGS = 86
TARGET_RATIO = 3.0
SMOKE = {"ROWS": 2_000}  # bench/run.py --smoke


def write_file(path: Path) -> None:
    rng = np.random.default_rng(0)
    values = rng.normal(size=(ROWS, TAGS)).cumsum(axis=0)
    frame = pd.DataFrame(values, columns=[f"P{1 + j % 4}_T{j:02d}" for j in range(TAGS)]).round(5)
    stamps = pd.date_range("2021-07-10 00:00:00", periods=ROWS, freq="s").strftime("%Y-%m-%d %H:%M:%S")
    frame.insert(0, "timestamp", stamps)
    frame["Attack"] = (rng.random(ROWS) < 0.01).astype(int)
    frame.to_csv(path, index=False)


def peer(path: Path) -> int:
    frame = pd.read_csv(path)
    pd.to_datetime(frame["timestamp"], format="ISO8601")
    return len(frame)


def best_of(fn, path: Path, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn(path)
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> int:
    """Print both load times and their ratio; 0 when fedrca is within the target."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "test1.csv"
        write_file(path)
        size = path.stat().st_size / 1e6
        assert load_hai(path, timezone="Asia/Seoul").rows == peer(path) == ROWS
        t_peer = best_of(peer, path)
        t_fedrca = best_of(lambda p: load_hai(p, timezone="Asia/Seoul"), path)
    ratio = t_fedrca / t_peer
    print(f"HAI-like file: {ROWS:,} rows x {TAGS} tags, {size:.0f} MB")
    print(f"  pandas.read_csv + to_datetime (peer): {t_peer:.2f} s ({size / t_peer:.0f} MB/s)")
    print(f"  fedrca.datasets.load_hai:             {t_fedrca:.2f} s ({size / t_fedrca:.0f} MB/s)")
    print(f"  ratio fedrca / peer: {ratio:.2f} (target <= {TARGET_RATIO})")
    return 0 if ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    raise SystemExit(main())
