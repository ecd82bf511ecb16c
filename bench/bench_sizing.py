"""What one plant costs a plant worker, by plant size: the inputs of ``docs/sizing.md`` (issue 14, item 4).

For plants of 50, 200 and 1,000 sensors (one plant, ``config/tep.yaml``'s detector
settings, sensors ``s0..s{D-1}``), in-process, no broker:

* **fit**: a detector and the plant's sensor checks (``health``, docs/sensors.md) fitted on
  ``train_rows(D)`` rows of synthetic nominal data (a latent AR(1) of D/5 factors mixed into
  D sensors plus sensor noise);
* **memory per plant**: bytes the fitted detector and its processor hold (``tracemalloc``,
  allocated by building and fitting it and still alive after, garbage collected);
* **CPU per message**: what the plant worker's handler (:class:`fedrca.streams.agents.PlantAgent`:
  decode and validate the JSON message, check the sensors, ``step_batch``, encode the flag,
  serialise the state) costs per message at batch size 1 (a 1 Hz plant: each fetch holds one message of
  it) and at batch size 200 (a backlog), CPU seconds (``time.process_time``, all threads) over
  ``MESSAGES`` messages, with the one BLAS thread a streaming worker runs with
  (:func:`fedrca.streams.runtime.streaming_threads`);
* **state per batch**: bytes of the state record the worker writes to the plant's state
  topic in every transaction.

The Kafka side of a batch (fetch, one transaction) is measured by ``bench_streams.py``
("plant worker CPU per batch"); ``docs/sizing.md`` adds the two.

    python bench/run.py sizing
    python bench/bench_sizing.py --sizes 50 200
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
SIZES = (50, 200, 1000)
MESSAGES = {50: 3000, 200: 1500, 1000: 400}
SMOKE = {"SIZES": (50,), "MESSAGES": {50: 50}}  # bench/run.py --smoke
#: issue 24: handler CPU per message at batch size 1 (us) and fit (s), by plant size
TARGET_BS1_US = {50: 200.0, 1000: 2000.0}
TARGET_FIT_S = {1000: 60.0}


def train_rows(d: int) -> int:
    """Nominal rows a plant of ``d`` sensors is fitted on (enough for a d x d covariance)."""
    return max(3000, 5 * d)


def site(d: int, workdir: Path) -> Any:
    """``config/tep.yaml`` with one plant ``p0`` of ``d`` sensors (csv data, 1 s samples)."""
    from fedrca.config import load_config

    doc = yaml.safe_load((REPO / "config" / "tep.yaml").read_text(encoding="utf-8"))
    doc["site"] = f"size{d}"
    doc["dataset"] = {"format": "csv", "sample_seconds": 1}
    doc["plants"] = [{"name": "p0", "sensors": [f"s{i}" for i in range(d)]}]
    doc.pop("rca", None)  # TEP's RCA and edge settings name TEP's plants
    doc.pop("edge", None)
    # the re-baselining loop keeps D x D baselines in one Kafka record: fedrca run refuses it for 1,000 sensors
    doc.pop("drift", None)
    path = workdir / f"size{d}.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return load_config(path)


def nominal(d: int, rows: int, seed: int) -> np.ndarray:
    """(rows, d) sensor data: a latent AR(1) of d/5 factors, mixed, plus independent sensor noise."""
    rng = np.random.default_rng(seed)
    k = max(2, d // 5)
    x = np.zeros((rows, k))
    for t in range(1, rows):
        x[t] = 0.9 * x[t - 1] + rng.standard_normal(k)
    mix = rng.standard_normal((k, d)) / np.sqrt(k)
    return np.round(50.0 + x @ mix + 0.3 * rng.standard_normal((rows, d)), 5)


def messages(d: int, values: np.ndarray, site_name: str) -> list[bytes]:
    """The sensors-topic messages of plant ``p0`` (the replay contract)."""
    return [
        json.dumps(
            {"site": site_name, "plant": "p0", "ts": float(i), "seq": i, "values": row}, separators=(",", ":")
        ).encode()
        for i, row in enumerate(values.tolist())
    ]


def measure(d: int, workdir: Path) -> dict[str, float]:
    from fedrca.connectors.names import SiteNames
    from fedrca.detectors.factory import build_detector, build_health
    from fedrca.streams.agents import PlantAgent
    from fedrca.streams.loop import InputRecord
    from fedrca.streams.runtime import PlantRuntime, streaming_threads

    config = site(d, workdir)
    train = nominal(d, train_rows(d), seed=d)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    started = time.perf_counter()
    detector = build_detector(config, config.plants[0]).fit(train)
    checks = build_health(config, config.plants[0])
    health = {} if checks is None else {"p0": checks.fit(train)}
    fit_s = time.perf_counter() - started
    runtime = PlantRuntime(config, {"p0": detector}, health=health)
    agent = PlantAgent(runtime, "p0", SiteNames(config))
    agent.restore(None)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()

    n = MESSAGES[d]
    raw = messages(d, nominal(d, 2 * n + 200, seed=d + 1), config.site)
    records = [InputRecord(i, b"p0", value, 0) for i, value in enumerate(raw)]
    agent.process(records[:100])  # warm caches
    out: dict[str, float] = {"fit_s": fit_s, "memory_mb": held / 2**20}
    # the worker streams with one BLAS thread (fedrca.streams.runtime.streaming_threads; Worker.run)
    with streaming_threads():
        for label, size, chunk in (
            ("bs1", 1, records[100 : 100 + n]),
            ("bs200", 200, records[100 + n : 100 + 2 * n]),
        ):
            state_bytes = 0
            cpu = time.process_time()
            for k in range(0, len(chunk), size):
                state_bytes = len(agent.process(chunk[k : k + size]).state)
            out[f"{label}_us"] = 1e6 * (time.process_time() - cpu) / len(chunk)
            out["state_kb"] = state_bytes / 1024
    out["message_kb"] = len(raw[0]) / 1024
    return out


def main(argv: list[str] | None = None) -> int:
    """Print the table (``docs/sizing.md`` turns it into plants per worker) and the targets of issue 24
    (handler CPU per message at batch size 1 <= 200 us at 50 sensors and <= 2 ms at 1,000; fit of a
    1,000-sensor plant <= 60 s); non-zero when a measured size misses one.

    ``--sizes 50 200`` measures only those plant sizes (default: 50 200 1000).
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), choices=SIZES)
    args = parser.parse_args([] if argv is None else argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="fedrca-bench-sizing-") as tmp:
        for d in args.sizes:
            print(f"  plant of {d} sensors", file=sys.stderr, flush=True)
            rows.append((d, measure(d, Path(tmp))))
            print(f"  {d} sensors: {rows[-1][1]}", file=sys.stderr, flush=True)
    print("one plant, config/tep.yaml detector settings; CPU = time.process_time of the handler (decode, detect,")
    print("encode, state) per message; memory = tracemalloc of the fitted detector + processor")
    print(
        f"{'sensors':>8}{'fit s':>8}{'memory MiB':>12}{'us/msg bs=1':>13}{'us/msg bs=200':>15}"
        f"{'state kB':>10}{'msg kB':>8}"
    )
    for d, r in rows:
        print(
            f"{d:>8}{r['fit_s']:>8.1f}{r['memory_mb']:>12.2f}{r['bs1_us']:>13.0f}{r['bs200_us']:>15.0f}"
            f"{r['state_kb']:>10.1f}{r['message_kb']:>8.1f}"
        )
    missed = []
    for d, r in rows:
        checks = [("us/msg bs=1", r["bs1_us"], TARGET_BS1_US.get(d), "{:,.0f} us")]
        checks.append(("fit", r["fit_s"], TARGET_FIT_S.get(d), "{:,.1f} s"))
        for what, value, target, fmt in checks:
            if target is None:
                continue
            met = value <= target
            verdict = "met" if met else "MISSED"
            print(f"target {d} sensors {what}: {fmt.format(value)} <= {fmt.format(target)}  {verdict}")
            if not met:
                missed.append(f"{d} sensors {what}")
    if missed:
        print(f"bench_sizing: TARGET MISSED ({', '.join(missed)})")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
