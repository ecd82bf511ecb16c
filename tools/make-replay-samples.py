#!/usr/bin/env python3
"""Write the small sample files under data/samples/ (deterministic; needs openpyxl for the SWaT workbook).

The files imitate the published layouts of HAI 20.07, 21.03, 22.04, 23.05 (+ both label
files), HAIEnd 23.05, SWaT (the owners' .xlsx, CSV exports with ``,`` and with ``;`` and
decimal commas) and a generic CSV: the same headers, delimiters, line ends, time formats
and label spellings, with made-up values (seeded random walks around plausible levels;
every column moves, so every sample can also serve as nominal data). Nothing is copied
from the real datasets; where each layout comes from is in docs/datasets.md.

    .venv/bin/python tools/make-replay-samples.py     # rewrites data/samples/{hai,haiend,swat,csv}/
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import random
import re
import zipfile
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "data" / "samples"
ROWS = 120


def words(text: str) -> list[str]:
    return text.split()


# HAI 20.07: 59 tags (time;...;attack;attack_P1;attack_P2;attack_P3, ';'-separated)
HAI_2007_TAGS = words(
    "P1_B2004 P1_B2016 P1_B3004 P1_B3005 P1_B4002 P1_B4005 P1_B400B P1_B4022 P1_FCV01D P1_FCV01Z P1_FCV02D "
    "P1_FCV02Z P1_FCV03D P1_FCV03Z P1_FT01 P1_FT01Z P1_FT02 P1_FT02Z P1_FT03 P1_FT03Z P1_LCV01D P1_LCV01Z "
    "P1_LIT01 P1_PCV01D P1_PCV01Z P1_PCV02D P1_PCV02Z P1_PIT01 P1_PIT02 P1_TIT01 P1_TIT02 P2_24Vdc P2_Auto "
    "P2_Emgy P2_On P2_SD01 P2_SIT01 P2_TripEx P2_VT01e P2_VXT02 P2_VXT03 P2_VYT02 P2_VYT03 P3_LCP01D P3_LCV01D "
    "P3_LH P3_LL P3_LT01 P4_HT_FD P4_HT_LD P4_HT_PO P4_HT_PS P4_LD P4_ST_FD P4_ST_LD P4_ST_PO P4_ST_PS "
    "P4_ST_PT01 P4_ST_TT01"
)
# HAI 21.03: 79 tags (the technical manual says 78; the files have 79, with P2_SIT02)
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
# HAI 22.04: 86 tags (hai-22.04/summary/summary(train1.csv).txt), then the label column Attack
HAI_2204_TAGS = words(
    "P1_B2004 P1_B2016 P1_B3004 P1_B3005 P1_B4002 P1_B4005 P1_B400B P1_B4022 P1_FCV01D P1_FCV01Z P1_FCV02D "
    "P1_FCV02Z P1_FCV03D P1_FCV03Z P1_FT01 P1_FT01Z P1_FT02 P1_FT02Z P1_FT03 P1_FT03Z P1_LCV01D P1_LCV01Z "
    "P1_LIT01 P1_PCV01D P1_PCV01Z P1_PCV02D P1_PCV02Z P1_PIT01 P1_PIT01_HH P1_PIT02 P1_PP01AD P1_PP01AR "
    "P1_PP01BD P1_PP01BR P1_PP02D P1_PP02R P1_PP04 P1_PP04SP P1_SOL01D P1_SOL03D P1_STSP P1_TIT01 P1_TIT02 "
    "P1_TIT03 P2_24Vdc P2_ATSW_Lamp P2_AutoGO P2_AutoSD P2_Emerg P2_MASW P2_MASW_Lamp P2_ManualGO P2_ManualSD "
    "P2_OnOff P2_RTR P2_SCO P2_SCST P2_SIT01 P2_TripEx P2_VIBTR01 P2_VIBTR02 P2_VIBTR03 P2_VIBTR04 P2_VT01 "
    "P2_VTR01 P2_VTR02 P2_VTR03 P2_VTR04 P3_FIT01 P3_LCP01D P3_LCV01D P3_LH01 P3_LIT01 P3_LL01 P3_PIT01 "
    "P4_HT_FD P4_HT_PO P4_HT_PS P4_LD P4_ST_FD P4_ST_GOV P4_ST_LD P4_ST_PO P4_ST_PS P4_ST_PT01 P4_ST_TT01"
)
# HAI 23.05: 86 tags; the boiler setpoints P1_B* of 22.04 are replaced by seven DCS block outputs
# (x1001_05_SETPOINT_OUT .. x1003_24_SUM_OUT, aliases of HAIEnd's 1001.5-OUT ..), and P1_PP04D appears
HAI_2305_TAGS = [t for t in HAI_2204_TAGS if not t.startswith("P1_B")]
HAI_2305_TAGS.insert(HAI_2305_TAGS.index("P1_PP04SP"), "P1_PP04D")
HAI_2305_TAGS += words(
    "x1001_05_SETPOINT_OUT x1001_15_ASSIGN_OUT x1002_07_SETPOINT_OUT x1002_08_SETPOINT_OUT x1003_10_SETPOINT_OUT "
    "x1003_18_SETPOINT_OUT x1003_24_SUM_OUT"
)


def _outs(block: int, spec: str) -> list[str]:
    """Function-block outputs of one DCS drawing: '2 5 7:2' -> 1001.2-OUT, 1001.5-OUT, 1001.7-OUT1, 1001.7-OUT2."""
    out = []
    for item in spec.split():
        number, _, count = item.partition(":")
        if count:
            out += [f"{block}.{number}-OUT{k}" for k in range(1, int(count) + 1)]
        else:
            out.append(f"{block}.{number}-OUT")
    return out


# HAIEnd 23.05: 225 points of the boiler's Emerson Ovation DCS. The function-block outputs are the
# edge labels of the repository's DCS graphs (graph/boiler/dcs_10NNh.json); the field points are
# the DM-* (field devices), DQ* (alarms) and GATEOPEN / PP04-SP-OUT tags named by published loaders.
# That gives 224 names; the 225th, 1001.3-OUT (block 1001.3, labelled TEST-AOUT in the graph), is
# an assumption (docs/datasets.md).
HAIEND_POINTS = (
    _outs(1001, "2 3 5 7:2 8 9 13 14 15 16 17 20")
    + _outs(1002, "2 6 7 8 9 11:2 12 14 15 16:2 19 20 21 29 30 31 34")
    + _outs(1003, "5 7 10 11 12:2 13 17 18 23 24 25 26 27 29 30")
    + _outs(1004, "11:2 12:2 13 15:2 18:2 21 24 29 36 37 38 39 41 44 52 53 62 76 78 79 80")
    + _outs(1010, "2 3 4 5:4 7 8 9 10 11 12:2 16 17 19 23 30 31 33 35 38 39 41 42 44 46 47 50 54 56")
    + _outs(1011, "2 3 4 5:4 7 8 9 10 11 12:2 16 17 19 23 30 31 33 35 38 39 41 42 44 46 47 50 54 56")
    + _outs(1020, "2 3 4 5:2 9 10 11 13 14 15 18 20 21")
    + words(
        "DM-AIT-DO DM-AIT-PH DM-CIP-1ST DM-CIP-2ND DM-CIP-START DM-CIP-STEP1 DM-CIP-STEP11 DM-CIPH-1ST DM-CIPH-2ND "
        "DM-CIPH-START DM-CIPH-STEP1 DM-CIPH-STEP11 DM-COOL-ON DM-COOL-R DM-FCV01-D DM-FCV01-Z DM-FCV02-D "
        "DM-FCV02-Z DM-FCV03-D DM-FCV03-Z DM-FT01 DM-FT01Z DM-FT02 DM-FT02Z DM-FT03 DM-FT03Z DM-HT01-D DM-LCV01-D "
        "DM-LCV01-MIS DM-LCV01-Z DM-LIT01 DM-LSH-03 DM-LSH-04 DM-LSH01 DM-LSH02 DM-LSL-04 DM-LSL01 DM-LSL02 "
        "DM-PCV01-D DM-PCV01-DEV DM-PCV01-Z DM-PCV02-D DM-PCV02-Z DM-PIT01 DM-PIT01-HH DM-PIT02 DM-PP01-R "
        "DM-PP01A-D DM-PP01A-R DM-PP01B-D DM-PP01B-R DM-PP02-D DM-PP02-R DM-PP04-AO DM-PP04-D DM-PWIT-03 "
        "DM-SOL01-D DM-SOL02-D DM-SOL03-D DM-SOL04-D DM-SS01-RM DM-ST-SP DM-SW01-ST DM-SW02-SP DM-SW03-EM "
        "DM-TIT01 DM-TIT02 DM-TWIT-03 DM-TWIT-04 DM-TWIT-05 DQ03-LCV01-D DQ04-LCV01-DEV GATEOPEN PP04-SP-OUT"
    )
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
HAI_ATTACKS = {"P1": (40, 60), "P2": (), "P3": (80, 90)}
# HAI 22.04 Attack column and HAI 23.05 / HAIEnd label files: attack rows of the data file
HAI_ATTACK = (50, 74)
# SWaT attack rows and the rows spelled "A ttack" (a known misspelling in the published file)
SWAT_ATTACK = (60, 84)
SWAT_MISSPELLED = (66, 68)
# ZIP entries of the workbook get this date, so the file is the same on every run
FIXED_DATE = (2015, 12, 28, 0, 0, 0)


def level(tag: str, rng: random.Random) -> tuple[float, float, bool]:
    """(base level, step size, switch) of a made-up signal; switches toggle between states."""
    name = tag.strip()
    if any(key in name for key in ("PP0", "OnOff", "Auto", "Manual", "Emerg", "Emgy", "TripEx", "SOL", "Lamp")):
        return float(rng.choice((0, 1))), 1.0, True
    if name.startswith("P") and name[1:].isdigit():  # SWaT pumps P101..: state 1/2
        return float(rng.choice((1, 2))), 1.0, True
    if name.startswith("MV"):
        return float(rng.choice((0, 1))), 1.0, True
    if name.startswith(("DM-", "DQ")) and name.endswith(("-D", "-R", "-ST", "-SP", "-EM", "-RM", "DEV", "MIS")):
        return float(rng.choice((0, 1))), 1.0, True
    return rng.uniform(0.5, 500.0), rng.uniform(0.001, 0.02), False


def walks(tags: list[str], rows: int, seed: int) -> list[list[float]]:
    """Random walks (continuous tags) and 0/1-style switches that toggle a few times."""
    rng = random.Random(seed)
    params = [level(t, rng) for t in tags]
    toggles = [sorted(rng.sample(range(1, rows), 3)) if switch else [] for _, _, switch in params]
    values = [[base for base, _, _ in params]]
    for r in range(1, rows):
        row = []
        for v, (base, step, switch), flips in zip(values[-1], params, toggles):
            if switch:
                row.append(2 * base + step - v if r in flips else v)
            else:
                row.append(v + step * base * rng.gauss(0, 1))
        values.append(row)
    return values


def fmt(value: float, decimal: str = ".") -> str:
    text = f"{value:.5f}" if value != int(value) else str(int(value))
    return text.replace(".", decimal)


def write(path: Path, rows: list[list[str]], delimiter: str = ",", line_end: str = "\n") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle, delimiter=delimiter, lineterminator=line_end).writerows(rows)
    print(f"wrote {path.relative_to(OUT.parents[1])} ({len(rows) - 1} data rows)")


def in_block(row: int, block: tuple[int, ...]) -> bool:
    return bool(block) and block[0] <= row < block[1]


def stamp(when: dt.datetime) -> str:
    return when.strftime("%Y-%m-%d %H:%M:%S")


def hai_with_labels(version: str, tags: list[str], delimiter: str, start: dt.datetime, seed: int) -> None:
    header = ["time", *tags, *("attack", "attack_P1", "attack_P2", "attack_P3")]
    rows = [header]
    for r, values in enumerate(walks(tags, ROWS, seed)):
        stage = [int(in_block(r, HAI_ATTACKS[p])) for p in ("P1", "P2", "P3")]
        rows.append([stamp(start + dt.timedelta(seconds=r)), *map(fmt, values), str(max(stage)), *map(str, stage)])
    write(OUT / "hai" / f"hai-{version}-test1.csv", rows, delimiter)


def hai_2204() -> None:
    start = dt.datetime(2021, 7, 10, 5, 40, 0)
    rows = [["timestamp", *HAI_2204_TAGS, "Attack"]]
    for r, values in enumerate(walks(HAI_2204_TAGS, ROWS, 2204)):
        rows.append([stamp(start + dt.timedelta(seconds=r)), *map(fmt, values), str(int(in_block(r, HAI_ATTACK)))])
    write(OUT / "hai" / "hai-22.04-test1.csv", rows)


def hai_2305_data(path: str, time_column: str, tags: list[str], test: str, seed: int) -> None:
    start = TEST1_START if test == "1" else TEST2_START
    rows = [[time_column, *tags]]
    for r, values in enumerate(walks(tags, len(LABEL_ROWS[test]), seed)):
        rows.append([stamp(start + dt.timedelta(seconds=r)), *map(fmt, values)])
    write(OUT / path, rows)


# test1 starts at a whole second, test2 at a whole minute (its label file has minute times)
TEST1_START = dt.datetime(2022, 8, 12, 16, 0, 0)
TEST2_START = dt.datetime(2022, 8, 17, 0, 0, 0)
LABEL_ROWS = {"1": range(ROWS), "2": range(3 * 60)}


def hai_2305_labels() -> None:
    # label-test1.csv: timestamp,label at second resolution, one row per data row
    rows = [["timestamp", "label"]]
    for r in LABEL_ROWS["1"]:
        rows.append([stamp(TEST1_START + dt.timedelta(seconds=r)), str(int(in_block(r, HAI_ATTACK)))])
    write(OUT / "hai" / "hai-23.05-label-test1.csv", rows)
    # label-test2.csv: minute resolution, hours without zero padding, CRLF, still one row per data row
    rows = [["timestamp", "label"]]
    for r in LABEL_ROWS["2"]:
        when = TEST2_START + dt.timedelta(seconds=r)
        text = f"{when:%Y-%m-%d} {when.hour}:{when:%M}"
        rows.append([text, str(int(in_block(r, (70, 130))))])
    write(OUT / "hai" / "hai-23.05-label-test2.csv", rows, line_end="\r\n")


def swat_stamp(when: dt.datetime) -> str:
    # " 28/12/2015 10:00:00 AM": leading space, day first, hour without zero padding, 12-hour clock
    return f" {when.strftime('%d/%m/%Y')} {when.hour % 12 or 12}:{when.strftime('%M:%S %p')}"


def swat_rows(start: dt.datetime, seed: int, attack: bool) -> list[list[object]]:
    tags = SWAT_HEADER[1:-1]
    rows: list[list[object]] = []
    for r, values in enumerate(walks(tags, ROWS, seed)):
        label = "Normal"
        if attack and in_block(r, SWAT_ATTACK):
            label = "A ttack" if in_block(r, SWAT_MISSPELLED) else "Attack"
        rows.append([swat_stamp(start + dt.timedelta(seconds=r)), *values, label])
    return rows


def swat_csv(name: str, start: dt.datetime, seed: int, attack: bool, leading_blank: bool) -> None:
    rows = []
    if leading_blank:  # spreadsheet exports of the normal file start with an empty row
        rows.append([""] * len(SWAT_HEADER))
    rows.append(SWAT_HEADER)
    rows += [[r[0], *(fmt(v) for v in r[1:-1]), r[-1]] for r in swat_rows(start, seed, attack)]
    write(OUT / "swat" / name, rows)


def swat_semicolon(name: str, start: dt.datetime, seed: int) -> None:
    """The widely shared CSV copy: ';'-separated, decimal commas (168,563)."""
    rows = [SWAT_HEADER]
    rows += [[r[0], *(fmt(v, ",") for v in r[1:-1]), r[-1]] for r in swat_rows(start, seed, False)]
    write(OUT / "swat" / name, rows, ";")


def swat_xlsx(name: str, start: dt.datetime, seed: int) -> None:
    """The owners' workbook: stage names in the first row, column names in the second."""
    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "Combined Data"
    stages = [""] + [f"P{tag.strip()[-3]}" for tag in SWAT_HEADER[1:-1]] + [""]
    sheet.append([s if i == 0 or s != stages[i - 1] else None for i, s in enumerate(stages)])
    sheet.append(SWAT_HEADER)
    for row in swat_rows(start, seed, True):
        sheet.append([row[0], *(round(float(v), 5) for v in row[1:-1]), row[-1]])
    fixed = dt.datetime(*FIXED_DATE)
    book.properties.created = fixed
    book.properties.modified = fixed
    buffer = io.BytesIO()
    book.save(buffer)
    # re-pack with fixed entry dates so that the bytes do not depend on the day the tool ran
    path = OUT / "swat" / name
    with zipfile.ZipFile(io.BytesIO(buffer.getvalue())) as src, zipfile.ZipFile(path, "w") as dst:
        for info in src.infolist():
            entry = zipfile.ZipInfo(info.filename, date_time=FIXED_DATE)
            entry.compress_type = zipfile.ZIP_DEFLATED
            data = src.read(info.filename)
            if info.filename == "docProps/core.xml":  # openpyxl stamps the save time as 'modified'
                data = re.sub(rb"(<dcterms:modified[^>]*>)[^<]*", rb"\g<1>2015-12-28T00:00:00Z", data)
            dst.writestr(entry, data)
    print(f"wrote {path.relative_to(OUT.parents[1])} ({ROWS} data rows)")


def generic() -> None:
    tags = ["feed_flow", "feed_temp", "tank_level", "tank_temp", "pump_speed"]
    rows = [["t", *tags, "fault"]]
    for r, values in enumerate(walks(tags, ROWS, 7)):
        rows.append([f"{r * 0.5:.1f}", *map(fmt, values), str(int(90 <= r < 100))])
    write(OUT / "csv" / "plant-log.csv", rows)


def main() -> None:
    assert len(HAI_2007_TAGS) == 59 and len(HAI_2103_TAGS) == 79, "HAI 20.07 / 21.03 tag counts"
    assert len(HAI_2204_TAGS) == 86 and len(HAI_2305_TAGS) == 86, "HAI 22.04 / 23.05 tag counts"
    assert len(HAIEND_POINTS) == len(set(HAIEND_POINTS)) == 225, "HAIEnd: 225 unique points"
    hai_with_labels("20.07", HAI_2007_TAGS, ";", dt.datetime(2019, 9, 19, 14, 0, 0), 2007)
    hai_with_labels("21.03", HAI_2103_TAGS, ",", dt.datetime(2020, 7, 9, 15, 0, 0), 2103)
    hai_2204()
    hai_2305_data("hai/hai-23.05-test1.csv", "timestamp", HAI_2305_TAGS, "1", 2305)
    hai_2305_data("hai/hai-23.05-test2.csv", "timestamp", HAI_2305_TAGS, "2", 2306)
    hai_2305_data("haiend/haiend-23.05-end-test2.csv", "Timestamp", HAIEND_POINTS, "2", 2307)
    hai_2305_labels()
    swat_csv("SWaT_Dataset_Attack_v0-sample.csv", dt.datetime(2015, 12, 28, 11, 59, 0), 2015, True, False)
    swat_csv("SWaT_Dataset_Normal_v1-sample.csv", dt.datetime(2015, 12, 22, 16, 0, 0), 2016, False, True)
    swat_semicolon("SWaT_Dataset_Normal_v1-semicolon-sample.csv", dt.datetime(2015, 12, 22, 16, 0, 0), 2017)
    swat_xlsx("SWaT_Dataset_Attack_v0-sample.xlsx", dt.datetime(2015, 12, 28, 11, 59, 0), 2018)
    generic()


if __name__ == "__main__":
    main()
