"""``fedrca detect``: every plant's sensor checks and detector offline over a file; flags as JSON lines and a
summary table (with each plant's sensor faults: the plant's own view names the tag)."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from fedrca.application.outputs import Outputs
from fedrca.application.site import build_detectors, run_detectors
from fedrca.cli import privacy_notice
from fedrca.config import load_config, resolve_plants
from fedrca.datasets.loader import PlantData, check_warmup, load_frame, plant_frames
from fedrca.detectors.factory import fit_health, frame_segments
from fedrca.detectors.plant import DetectionResult, PlantDetector

__all__ = ["flags_jsonl", "register"]


#: What a line adds for a degraded row (and for any other).
_DEGRADED: dict[bool, dict[str, bool]] = {True: {"degraded": True}, False: {}}
#: What a line adds for a row with a sensor fault (and for any other).
_SENSOR: dict[bool, dict[str, bool]] = {True: {"sensor_fault": True}, False: {}}


def flags_jsonl(
    results: dict[str, DetectionResult], published: bool = False, sensor: Mapping[str, NDArray[np.bool_]] | None = None
) -> tuple[str, int]:
    """One JSON line per sample and plant (sample-major order); (the text, the line count).

    Lines: ``{"plant", "seq", "zc", "za", "d2c", "d2a"}`` plus ``zc_pub``/``za_pub`` when
    ``published`` is true; plants that grade their alarms (``scoring.severity_levels``) add
    ``level`` (and ``level_pub``, the level the RCA saw); a row the plant could not score (too
    few usable sensors, docs/missing.md) adds ``"degraded": true`` (its flags are 0); a row where
    the plant has a sensor fault (``sensor``: plant -> (T,) bool; docs/sensors.md) adds
    ``"sensor_fault": true``.
    """
    plants = list(results)
    if not plants:
        return "", 0
    fields = ["zc", "za", "zc_pub", "za_pub"] if published else ["zc", "za"]
    T = len(results[plants[0]])
    if all(len(results[p].level) == T and (results[p].level >= 0).all() for p in plants):
        fields += ["level", "level_pub"] if published else ["level"]
    columns = {
        name: {
            **{f: getattr(results[name], f).astype(int).tolist() for f in fields},
            "d2c": np.round(results[name].d2_c, 6).tolist(),
            "d2a": np.round(results[name].d2_a, 6).tolist(),
        }
        for name in plants
    }
    keys = [*fields, "d2c", "d2a"]
    degraded = {name: results[name].degraded.tolist() for name in plants}
    faulty = {name: np.asarray((sensor or {}).get(name, np.zeros(T, dtype=bool))).tolist() for name in plants}
    lines = [
        json.dumps(
            {
                "plant": name,
                "seq": t,
                **{k: columns[name][k][t] for k in keys},
                **_DEGRADED[degraded[name][t]],
                **_SENSOR[faulty[name][t]],
            },
            separators=(",", ":"),
        )
        for t in range(len(results[plants[0]]))
        for name in plants
    ]
    return "".join(line + "\n" for line in lines), len(lines)


def _detect(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    inputs = {"--config": args.config, "--train": args.train, "--input": args.input}
    with Outputs.plan(inputs, {"--out": args.out}) as out:
        config = load_config(args.config)
        privacy_notice("detect", config)
        train = load_frame(config, args.train)
        # plants given by match rules take the nominal file's columns; the input must have them all
        config = resolve_plants(config, [str(c) for c in train.columns])
        data = load_frame(config, args.input)
        check_warmup(config, len(data), f"the {len(data):,} rows of {args.input}")
        detectors = build_detectors(config, train, source=str(args.train))
        checks = fit_health(config, plant_frames(config, train, str(args.train)), segments=frame_segments(train))
        fitted = time.perf_counter()
        arrays = plant_frames(config, data, str(args.input))
        # each plant checks its tags first: a broken one is left out of its detector (docs/sensors.md)
        checked = {name: health.update(arrays[name].Y) for name, health in checks.items()}
        arrays.update({name: PlantData(c.values, arrays[name].U) for name, c in checked.items()})
        results = run_detectors(detectors, arrays)
        processed = time.perf_counter()
        text, n_lines = flags_jsonl(results, sensor={name: c.fault for name, c in checked.items()})
        out.write("--out", text)
    rows = []
    for name, det in detectors.items():
        r = results[name]
        first = np.flatnonzero(r.zc)
        rows.append(
            {
                "plant": name,
                "sensors": r.r_c.shape[1],
                "states": det.proprietary.state_dim if isinstance(det, PlantDetector) else "-",  # fleet: none
                "threshold": round(det.thresholds[0], 2),
                "Z_c rate": f"{r.zc.mean():.3f}",
                "Z_a rate": f"{r.za.mean():.3f}",
                "first Z_c": int(first[0]) if len(first) else "-",
                "sensor faults": " ".join(
                    f"{tag} {check}@{t}" for t, tag, check in checks[name].describe(checked[name])
                )
                if name in checked and len(checked[name].onsets)
                else "-",
            }
        )
    any_flag = np.any([r.zc for r in results.values()], axis=0)
    print(pd.DataFrame(rows).to_string(index=False))
    print(
        f"\n{len(any_flag)} samples, any-plant Z_c rate {any_flag.mean():.3f}; "
        f"wrote {n_lines} lines to {args.out}; fit {fitted - started:.2f} s, "
        f"detect {processed - fitted:.3f} s, total {time.perf_counter() - started:.2f} s"
    )
    return 0


def register(sub: Any) -> None:
    """Add ``fedrca detect``."""
    detect = sub.add_parser("detect", help="run every plant's detector offline and write flags as JSON lines")
    detect.add_argument("--config", required=True, help="site configuration YAML (e.g. config/tep.yaml)")
    detect.add_argument("--train", required=True, help="nominal data to fit on (e.g. data/tep/d00.dat)")
    detect.add_argument("--input", required=True, help="data to score (e.g. data/tep/d04_te.dat)")
    detect.add_argument("--out", required=True, help="output JSON-lines file of flags")
    detect.set_defaults(func=_detect)
