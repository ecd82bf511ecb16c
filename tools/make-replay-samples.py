#!/usr/bin/env python3
"""Write the small replay sample files under data/samples/ (deterministic; standard library only).

The files imitate the published layouts of HAI (20.07, 21.03, 23.05 + label file),
SWaT (attack and normal exports) and a generic CSV: the same headers, delimiters,
time formats and label spellings, with made-up values (seeded random walks around
plausible levels). Nothing is copied from the real datasets.

    python3 tools/make-replay-samples.py        # rewrites data/samples/{hai,swat,csv}/
"""

from __future__ import annotations

import csv
import datetime as dt
import random
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "data" / "samples"
ROWS = 60


def words(text: str) -> list[str]:
    return text.split()



HAI_2007_TAGS = words(
    "P1_B2004 P1_B2016 P1_B3004 P1_B3005 P1_B4002 P1_B4005 P1_B400B P1_B4022 P1_FCV01D P1_FCV01Z P1_FCV02D "
    "P1_FCV02Z P1_FCV03D P1_FCV03Z P1_FT01 P1_FT01Z P1_FT02 P1_FT02Z P1_FT03 P1_FT03Z P1_LCV01D P1_LCV01Z "
    "P1_LIT01 P1_PCV01D P1_PCV01Z P1_PCV02D P1_PCV02Z P1_PIT01 P1_PIT02 P1_TIT01 P1_TIT02 P2_24Vdc P2_Auto "
    "P2_Emgy P2_On P2_SD01 P2_SIT01 P2_TripEx P2_VT01e P2_VXT02 P2_VXT03 P2_VYT02 P2_VYT03 P3_FIT01 P3_LCP01D "
    "P3_LCV01D P3_LH P3_LIT01 P3_LL P3_PIT01 P4_HT_FD P4_HT_LD P4_HT_PO P4_HT_PS P4_LD P4_ST_FD P4_ST_GOV "
    "P4_ST_LD P4_ST_PO P4_ST_PS P4_ST_PT01 P4_ST_TT01"
)
HAI_2103_TAGS = words(
    "P1_B2004 P1_B2016 P1_B3004 P1_B3005 P1_B4002 P1_B4005 P1_B400B P1_B4022 P1_FCV01D P1_FCV01Z P1_FCV02D "
    "P1_FCV02Z P1_FCV03D P1_FCV03Z P1_FT01 P1_FT01Z P1_FT02 P1_FT02Z P1_FT03 P1_FT03Z P1_LCV01D P1_LCV01Z "
    "P1_LIT01 P1_PCV01D P1_PCV01Z P1_PCV02D P1_PCV02Z P1_PIT01 P1_PIT02 P1_PP01AD P1_PP01AR P1_PP01BD "
    "P1_PP01BR P1_PP02D P1_PP02R P1_STSP P1_TIT01 P1_TIT02 P2_24Vdc P2_ASD P2_AutoGO P2_CO_rpm P2_Emerg "
    "P2_HILout P2_MSD P2_ManualGO P2_OnOff P2_RTR P2_SIT01 P2_SIT02 P2_TripEx P2_VT01 P2_VTR01 P2_VTR02 "
    "P2_VTR03 P2_VTR04 P2_VXT02 P2_VXT03 P2_VYT02 P2_VYT03 P3_FIT01 P3_LCP01D P3_LCV01D P3_LH P3_LIT01 P3_LL "
    "P3_PIT01 P4_HT_FD P4_HT_LD P4_HT_PO P4_HT_PS P4_LD P4_ST_FD P4_ST_GOV P4_ST_LD P4_ST_PO P4_ST_PS "
    "P4_ST_PT01 P4_ST_TT01"
)
HAI_2305_TAGS = words(
    "P1_B2004 P1_B2016 P1_B3004 P1_B3005 P1_B4002 P1_B4005 P1_B400B P1_B4022 P1_FCV01D P1_FCV01Z P1_FCV02D "
    "P1_FCV02Z P1_FCV03D P1_FCV03Z P1_FT01 P1_FT01Z P1_FT02 P1_FT02Z P1_FT03 P1_FT03Z P1_LCV01D P1_LCV01Z "
    "P1_LIT01 P1_PCV01D P1_PCV01Z P1_PCV02D P1_PCV02Z P1_PIT01 P1_PIT01_HH P1_PIT02 P1_PP01AD P1_PP01AR "
    "P1_PP01BD P1_PP01BR P1_PP02D P1_PP02R P1_PP04 P1_PP04D P1_PP04SP P1_SOL01D P1_SOL03D P1_STSP P1_TIT01 "
    "P1_TIT02 P1_TIT03 P2_24Vdc P2_ATSW_Lamp P2_AutoGO P2_AutoSD P2_Emerg P2_MASW P2_MASW_Lamp P2_ManualGO "
    "P2_ManualSD P2_OnOff P2_RTR P2_SCO P2_SCST P2_SIT01 P2_TripEx P2_VIBTR01 P2_VIBTR02 P2_VIBTR03 "
    "P2_VIBTR04 P2_VT01 P2_VTR01 P2_VTR02 P2_VTR03 P2_VTR04 P3_FIT01 P3_LCP01D P3_LCV01D P3_LH01 P3_LIT01 "
    "P3_LL01 P3_PIT01 P4_HT_FD P4_HT_PO P4_HT_PS P4_LD P4_ST_FD P4_ST_GOV P4_ST_LD P4_ST_PO P4_ST_PS "
    "P4_ST_PT01 P4_ST_TT01"
)
# SWaT A1/A2 (Dec 2015) header: note the leading spaces of some names, as published.
SWAT_HEADER = [
    " Timestamp", "FIT101", "LIT101", " MV101", "P101", "P102", " AIT201", "AIT202", "AIT203", "FIT201",
    " MV201", " P201", " P202", "P203", " P204", "P205", "P206", "DPIT301", "FIT301", "LIT301", "MV301",
    "MV302", " MV303", "MV304", "P301", "P302", "AIT401", "AIT402", "FIT401", "LIT401", "P401", "P402",
    "P403", "P404", "UV401", "AIT501", "AIT502", "AIT503", "AIT504", "FIT501", "FIT502", "FIT503", "FIT504",
    "P501", "P502", "PIT501", "PIT502", "PIT503", "FIT601", "P601", "P602", "P603", "Normal/Attack",
]  # fmt: skip

# HAI 20.07/21.03 attack blocks per process (rows, inclusive start, exclusive end)
HAI_ATTACKS = {"P1": (20, 30), "P2": (), "P3": (40, 45)}
# HAI 23.05 label file: attack rows of the data file
HAI_2305_ATTACK = (25, 37)
# SWaT attack rows and the rows spelled "A ttack" (a known misspelling in the published file)
SWAT_ATTACK = (30, 42)
SWAT_MISSPELLED = (33, 34)


def level(tag: str, rng: random.Random) -> tuple[float, float]:
    """(base level, step size) of a made-up signal; switches and states are constant."""
    if any(key in tag for key in ("PP0", "OnOff", "Auto", "Manual", "Emerg", "Emgy", "TripEx", "SOL", "Lamp")):
        return float(rng.choice((0, 1))), 0.0
    if tag.startswith(("P", " P")) and tag.strip()[1:].isdigit():  # SWaT pumps P101..: state 1/2
        return float(rng.choice((1, 2))), 0.0
    if "MV" in tag:
        return float(rng.choice((0, 1, 2))), 0.0
    return rng.uniform(0.5, 500.0), rng.uniform(0.001, 0.02)


def walks(tags: list[str], rows: int, seed: int) -> list[list[float]]:
    rng = random.Random(seed)
    params = [level(t, rng) for t in tags]
    values = [[base for base, _ in params]]
    for _ in range(1, rows):
        values.append(
            [v + (step * base * rng.gauss(0, 1) if step else 0.0) for v, (base, step) in zip(values[-1], params)]
        )
    return values


def fmt(value: float) -> str:
    return f"{value:.5f}" if value != int(value) else str(int(value))


def write(path: Path, rows: list[list[str]], delimiter: str = ",") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        csv.writer(handle, delimiter=delimiter, lineterminator="\n").writerows(rows)
    print(f"wrote {path.relative_to(OUT.parents[1])} ({len(rows) - 1} data rows)")


def in_block(row: int, block: tuple[int, ...]) -> bool:
    return bool(block) and block[0] <= row < block[1]


def hai_with_labels(version: str, tags: list[str], delimiter: str, start: dt.datetime, seed: int) -> None:
    header = ["time", *tags, *("attack", "attack_P1", "attack_P2", "attack_P3")]
    rows = [header]
    for r, values in enumerate(walks(tags, ROWS, seed)):
        stage = [int(in_block(r, HAI_ATTACKS[p])) for p in ("P1", "P2", "P3")]
        stamp = (start + dt.timedelta(seconds=r)).strftime("%Y-%m-%d %H:%M:%S")
        rows.append([stamp, *map(fmt, values), str(max(stage)), *map(str, stage)])
    write(OUT / "hai" / f"hai-{version}-test1.csv", rows, delimiter)


def hai_2305() -> None:
    start = dt.datetime(2022, 8, 12, 16, 0, 0)
    rows = [["timestamp", *HAI_2305_TAGS]]
    for r, values in enumerate(walks(HAI_2305_TAGS, ROWS, 2305)):
        rows.append([(start + dt.timedelta(seconds=r)).strftime("%Y-%m-%d %H:%M:%S"), *map(fmt, values)])
    write(OUT / "hai" / "hai-23.05-test1.csv", rows)
    # The label file starts 5 s before the data file: labels are matched by timestamp, not by position.
    labels = [["timestamp", "label"]]
    for r in range(-5, ROWS):
        stamp = (start + dt.timedelta(seconds=r)).strftime("%Y-%m-%d %H:%M:%S")
        labels.append([stamp, str(int(in_block(r, HAI_2305_ATTACK)))])
    write(OUT / "hai" / "hai-23.05-label-test1.csv", labels)


def swat_stamp(when: dt.datetime) -> str:
    # " 28/12/2015 10:00:00 AM": leading space, day first, hour without zero padding, 12-hour clock
    return f" {when.strftime('%d/%m/%Y')} {when.hour % 12 or 12}:{when.strftime('%M:%S %p')}"


def swat(name: str, start: dt.datetime, seed: int, attack: bool, leading_blank: bool) -> None:
    tags = SWAT_HEADER[1:-1]
    rows = []
    if leading_blank:  # spreadsheet exports of the normal file start with an empty row
        rows.append([""] * len(SWAT_HEADER))
    rows.append(SWAT_HEADER)
    for r, values in enumerate(walks(tags, ROWS, seed)):
        label = "Normal"
        if attack and in_block(r, SWAT_ATTACK):
            label = "A ttack" if in_block(r, SWAT_MISSPELLED) else "Attack"
        rows.append([swat_stamp(start + dt.timedelta(seconds=r)), *map(fmt, values), label])
    write(OUT / "swat" / name, rows)


def generic() -> None:
    tags = ["feed_flow", "feed_temp", "tank_level", "tank_temp", "pump_speed"]
    rows = [["t", *tags, "fault"]]
    for r, values in enumerate(walks(tags, ROWS, 7)):
        rows.append([f"{r * 0.5:.1f}", *map(fmt, values), str(int(45 <= r < 55))])
    write(OUT / "csv" / "plant-log.csv", rows)


def main() -> None:
    hai_with_labels("20.07", HAI_2007_TAGS, ";", dt.datetime(2019, 9, 19, 14, 0, 0), 2007)
    hai_with_labels("21.03", HAI_2103_TAGS, ",", dt.datetime(2020, 7, 9, 15, 0, 0), 2103)
    hai_2305()
    swat("SWaT_Dataset_Attack_v0-sample.csv", dt.datetime(2015, 12, 28, 11, 59, 30), 2015, True, False)
    swat("SWaT_Dataset_Normal_v1-sample.csv", dt.datetime(2015, 12, 22, 16, 0, 0), 2016, False, True)
    generic()


if __name__ == "__main__":
    main()
