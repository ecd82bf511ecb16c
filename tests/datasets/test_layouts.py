"""Every published layout on its format-faithful sample: columns, labels, times (in the dataset's zone), plants.

Expectations are read from the sample files independently of the loader (plain string
splits, openpyxl for the workbook), and the tag lists are the published ones
(docs/datasets.md), so a loader that drops, renames, shifts or mislabels anything fails.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import openpyxl
import pandas as pd
import pytest

from fedrca.config import load_config, resolve_plants
from fedrca.datasets import load_csv, load_dataset, load_hai, load_swat, swat_stage
from fedrca.exceptions import ConfigError, DataError

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "data" / "samples"
HAI = SAMPLES / "hai"
HAI_2007 = HAI / "hai-20.07-test1.csv"
HAI_2103 = HAI / "hai-21.03-test1.csv"
HAI_2204 = HAI / "hai-22.04-test1.csv"
HAI_2305_1 = HAI / "hai-23.05-test1.csv"
HAI_2305_2 = HAI / "hai-23.05-test2.csv"
LABEL_1 = HAI / "hai-23.05-label-test1.csv"
LABEL_2 = HAI / "hai-23.05-label-test2.csv"
HAIEND_2 = SAMPLES / "haiend" / "haiend-23.05-end-test2.csv"
SWAT_ATTACK = SAMPLES / "swat" / "SWaT_Dataset_Attack_v0-sample.csv"
SWAT_NORMAL = SAMPLES / "swat" / "SWaT_Dataset_Normal_v1-sample.csv"
SWAT_SEMICOLON = SAMPLES / "swat" / "SWaT_Dataset_Normal_v1-semicolon-sample.csv"
SWAT_XLSX = SAMPLES / "swat" / "SWaT_Dataset_Attack_v0-sample.xlsx"
GENERIC = SAMPLES / "csv" / "plant-log.csv"
HAI_CONFIG = load_config(REPO / "config" / "hai.yaml")
HAIEND_CONFIG = load_config(REPO / "config" / "haiend.yaml")
SWAT_CONFIG = load_config(REPO / "config" / "swat.yaml")
KST, SGT = "Asia/Seoul", "Asia/Singapore"


def raw(path: Path, sep: str = ",", skip: int = 0) -> tuple[list[str], list[list[str]]]:
    """Header and cells, read without the loader."""
    text = path.read_text(encoding="utf-8").splitlines()[skip:]
    return text[0].split(sep), [line.split(sep) for line in text[1:]]


def local_seconds(stamps: list[str], zone: str, fmt: str | None = None) -> np.ndarray:
    parsed = pd.to_datetime(pd.Series([s.strip() for s in stamps]), format=fmt)
    return np.asarray((parsed.dt.tz_localize(zone) - pd.Timestamp(0, tz="UTC")) / pd.Timedelta(seconds=1))


def numbers(rows: list[list[str]], cols: slice) -> np.ndarray:
    return np.array([[float(x.replace(",", ".")) for x in row[cols]] for row in rows])


def plants(config, columns):
    return {p.name: p.sensors for p in resolve_plants(config, columns).plants}


# -- HAI with label columns ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "sep", "n_tags", "present", "absent"),
    [
        (HAI_2007, ";", 59, ["P3_LT01", "P2_Auto", "P2_VT01e"], ["P3_FIT01", "P3_LIT01", "P3_PIT01", "P4_ST_GOV"]),
        (HAI_2103, ",", 79, ["P2_SIT02", "P2_HILout", "P3_LIT01", "P4_ST_GOV"], ["P2_VT01e", "P3_LT01"]),
    ],
)  # fmt: skip
def test_hai_2007_and_2103_carry_their_label_columns(path, sep, n_tags, present, absent):
    header, rows = raw(path, sep)
    data = load_dataset(HAI_CONFIG.dataset, path)
    assert header[0] == "time" and header[-4:] == ["attack", "attack_P1", "attack_P2", "attack_P3"]
    assert data.format == "hai" and data.rows == len(rows) == 120
    assert data.columns == header[1:-4] and len(data.columns) == n_tags
    assert set(present) <= set(data.columns) and not set(absent) & set(data.columns)
    np.testing.assert_array_equal(data.frame.to_numpy(), numbers(rows, slice(1, -4)))
    # local Korean time, one row per second
    np.testing.assert_array_equal(data.timestamps, local_seconds([r[0] for r in rows], KST))
    assert data.timestamps[0] == pd.Timestamp(rows[0][0]).tz_localize(KST).timestamp()
    assert list(data.labels.columns) == ["attack", "attack_P1", "attack_P2", "attack_P3"]
    for k, name in enumerate(data.labels.columns):
        assert data.labels[name].tolist() == [int(row[-4 + k]) for row in rows]
    assert data.labels["attack_P1"].sum() == 20 and data.labels["attack_P3"].sum() == 10
    groups = plants(HAI_CONFIG, data.columns)
    for plant, prefix in zip(("boiler", "turbine", "water", "hil"), ("P1_", "P2_", "P3_", "P4_")):
        assert groups[plant] == [c for c in data.columns if c.startswith(prefix)]


def test_hai_2204_has_one_attack_column_and_no_label_file():
    header, rows = raw(HAI_2204)
    data = load_dataset(HAI_CONFIG.dataset, HAI_2204)
    assert header[0] == "timestamp" and header[-1] == "Attack" and len(header) == 88
    assert data.columns == header[1:-1] and len(data.columns) == 86
    assert "P1_B2004" in data.columns and "P1_PP04D" not in data.columns
    assert list(data.labels.columns) == ["attack"]
    assert data.attack.tolist() == [int(r[-1]) for r in rows] and data.attack.sum() == 24
    np.testing.assert_array_equal(data.timestamps, local_seconds([r[0] for r in rows], KST))
    with pytest.raises(DataError, match=r"hai-22.04-test1.csv: has its own label column\(s\) Attack; drop the label"):
        load_dataset(HAI_CONFIG.dataset, HAI_2204, labels_path=LABEL_1)


# -- HAI 23.05 and HAIEnd with label files -------------------------------------------------------
def test_hai_2305_tags_and_label_test1_aligned_by_position():
    header, rows = raw(HAI_2305_1)
    _, labels = raw(LABEL_1)
    data = load_dataset(HAI_CONFIG.dataset, HAI_2305_1, labels_path=LABEL_1)
    assert header[0] == "timestamp" and data.columns == header[1:] and len(data.columns) == 86
    # 23.05 replaces the P1_B* setpoints of 22.04 by the DCS block outputs x10NN_..
    assert not [c for c in data.columns if c.startswith("P1_B")]
    assert "P1_PP04D" in data.columns and "x1001_05_SETPOINT_OUT" in data.columns
    assert len(labels) == len(rows) and [r[0] for r in labels] == [r[0] for r in rows]
    assert data.attack.tolist() == [int(r[1]) for r in labels] and data.attack.sum() == 24
    np.testing.assert_array_equal(data.timestamps, local_seconds([r[0] for r in rows], KST))
    groups = plants(HAI_CONFIG, data.columns)
    assert groups["boiler"] == [c for c in data.columns if c.startswith(("P1_", "x10"))]
    assert sum(map(len, groups.values())) == 86
    assert load_dataset(HAI_CONFIG.dataset, HAI_2305_1).labels is None


def test_label_test2_has_minute_times_crlf_and_one_row_per_data_row():
    raw_bytes = LABEL_2.read_bytes()
    assert raw_bytes.startswith(b"timestamp,label\r\n2022-08-17 0:00,0\r\n") and b"\n2022" not in raw_bytes.replace(
        b"\r\n", b""
    )
    _, labels = raw(LABEL_2)
    _, rows = raw(HAI_2305_2)
    assert len(labels) == len(rows) == 180
    assert (
        labels[0][0] == "2022-08-17 0:00" and labels[59][0] == "2022-08-17 0:00" and labels[60][0] == "2022-08-17 0:01"
    )
    data = load_dataset(HAI_CONFIG.dataset, HAI_2305_2, labels_path=LABEL_2)
    assert data.attack.tolist() == [int(r[1].strip()) for r in labels] and data.attack.sum() == 60
    np.testing.assert_array_equal(data.timestamps, local_seconds([r[0] for r in rows], KST))


def test_label_file_that_does_not_belong_to_the_data_is_refused(tmp_path):
    shifted = tmp_path / "label-test2.csv"
    text = LABEL_2.read_text().splitlines()
    shifted.write_text("\r\n".join([text[0], *text[2:], text[-1]]) + "\r\n")  # one row late from line 2 on
    with pytest.raises(
        DataError, match=r"label-test2.csv: line 61: label time 2022-08-17 00:01:00 KST is not the time of data row 60"
    ):
        load_dataset(HAI_CONFIG.dataset, HAI_2305_2, labels_path=shifted)
    with pytest.raises(DataError, match=r"180 label rows for 120 data rows .* the label times repeat"):
        load_dataset(HAI_CONFIG.dataset, HAI_2305_1, labels_path=LABEL_2)
    with pytest.raises(DataError, match=r"line 2: label time 2022-08-12 16:00:00 KST is not the time of data row 1"):
        load_dataset(HAI_CONFIG.dataset, HAI_2305_2, labels_path=_copy_labels(tmp_path))


def _copy_labels(tmp_path: Path) -> Path:
    """label-test1 rows cut to the 180 rows of test2 (second resolution, other day)."""
    text = LABEL_1.read_text().splitlines()
    extra = [f"2022-08-12 16:0{2 + i // 60}:{i % 60:02d},0" for i in range(60)]
    path = tmp_path / "label-test1.csv"
    path.write_text("\n".join([*text, *extra]) + "\n")
    return path


def test_label_file_covering_more_rows_is_matched_by_timestamp(tmp_path):
    longer = tmp_path / "labels.csv"
    text = LABEL_1.read_text().splitlines()
    longer.write_text("\n".join([text[0], "2022-08-12 15:59:58,1", "2022-08-12 15:59:59,1", *text[1:]]) + "\n")
    data = load_dataset(HAI_CONFIG.dataset, HAI_2305_1, labels_path=longer)
    assert data.attack.tolist() == [int(line.split(",")[1]) for line in text[1:]]
    short = tmp_path / "short.csv"
    short.write_text("\n".join(text[:40]) + "\n")
    with pytest.raises(
        DataError, match=r"short.csv: no label for 2022-08-12 16:00:39 KST \(.*hai-23.05-test1.csv line 41\)"
    ):
        load_dataset(HAI_CONFIG.dataset, HAI_2305_1, labels_path=short)


def test_haiend_225_points_with_the_shared_label_file():
    header, rows = raw(HAIEND_2)
    data = load_dataset(HAIEND_CONFIG.dataset, HAIEND_2, labels_path=LABEL_2)
    assert header[0] == "Timestamp" and data.columns == header[1:] and len(data.columns) == 225
    for point in ("1001.2-OUT", "DM-FT01", "DQ03-LCV01-D", "GATEOPEN", "PP04-SP-OUT", "1002.11-OUT2"):
        assert point in data.columns
    np.testing.assert_array_equal(data.frame.to_numpy(), numbers(rows, slice(1, None)))
    np.testing.assert_array_equal(data.timestamps, local_seconds([r[0] for r in rows], KST))
    # the labels of HAI 23.05 test2 are HAIEnd's too: same rows, same times
    hai = load_dataset(HAI_CONFIG.dataset, HAI_2305_2, labels_path=LABEL_2)
    np.testing.assert_array_equal(data.attack, hai.attack)
    np.testing.assert_array_equal(data.timestamps, hai.timestamps)
    groups = plants(HAIEND_CONFIG, data.columns)
    assert sorted(c for cols in groups.values() for c in cols) == sorted(data.columns)  # every point, once
    assert all(
        c.startswith("1001.") or c.startswith(("DM-PIT", "DM-PCV")) or c == "GATEOPEN" for c in groups["pressure"]
    )
    assert {"DQ03-LCV01-D", "DQ04-LCV01-DEV", "DM-LIT01"} <= set(groups["level"])
    assert "PP04-SP-OUT" in groups["cooling"] and "DM-CIP-START" in groups["tanks"]


# -- SWaT ---------------------------------------------------------------------------------------
def test_swat_csv_columns_day_first_times_in_singapore_and_misspelled_labels():
    header, rows = raw(SWAT_ATTACK)
    data = load_dataset(SWAT_CONFIG.dataset, SWAT_ATTACK)
    assert header[0] == " Timestamp" and " MV101" in header  # the published leading spaces
    assert data.format == "swat" and data.rows == 120 and len(data.columns) == 51
    assert data.columns == [h.strip() for h in header[1:-1]]
    np.testing.assert_array_equal(data.frame.to_numpy(), numbers(rows, slice(1, -1)))
    # day first, 12-hour clock across noon: 11:59:59 AM -> 12:00:00 PM is one second, in SGT
    assert rows[59][0] == " 28/12/2015 11:59:59 AM" and rows[60][0] == " 28/12/2015 12:00:00 PM"
    assert data.timestamps[0] == pd.Timestamp("2015-12-28 11:59:00", tz=SGT).timestamp()
    np.testing.assert_array_equal(np.diff(data.timestamps), np.ones(119))
    labels = [r[-1] for r in rows]
    assert {"A ttack", "Attack", "Normal"} <= set(labels)
    assert data.attack.tolist() == [int(label != "Normal") for label in labels] and data.attack.sum() == 24
    stages = plants(SWAT_CONFIG, data.columns)
    assert stages["raw_water"] == ["FIT101", "LIT101", "MV101", "P101", "P102"]
    assert stages["backwash"] == ["FIT601", "P601", "P602", "P603"]
    assert all(swat_stage(c) == k + 1 for k, cols in enumerate(stages.values()) for c in cols)


def test_swat_normal_export_with_a_leading_empty_line():
    assert SWAT_NORMAL.read_text().splitlines()[0].strip(",") == ""
    data = load_dataset(SWAT_CONFIG.dataset, SWAT_NORMAL)
    assert data.rows == 120 and data.attack.sum() == 0
    assert data.timestamps[0] == pd.Timestamp("2015-12-22 16:00:00", tz=SGT).timestamp()


def test_swat_semicolon_copy_with_decimal_commas():
    header, rows = raw(SWAT_SEMICOLON, ";")
    assert "," in rows[0][1] and "." not in rows[0][1]  # e.g. 99,98187
    data = load_dataset(SWAT_CONFIG.dataset, SWAT_SEMICOLON)
    assert data.columns == [h.strip() for h in header[1:-1]]
    np.testing.assert_array_equal(data.frame.to_numpy(), numbers(rows, slice(1, -1)))
    np.testing.assert_array_equal(data.timestamps, local_seconds([r[0] for r in rows], SGT, "%d/%m/%Y %I:%M:%S %p"))


def test_swat_owners_workbook_has_its_column_names_in_the_second_row():
    sheet = openpyxl.load_workbook(SWAT_XLSX, read_only=True).worksheets[0]
    first, second, *cells = [list(r) for r in sheet.iter_rows(values_only=True)]
    assert first[1] == "P1" and "Timestamp" not in [str(c).strip() for c in first]
    assert second[0] == " Timestamp" and second[-1] == "Normal/Attack"
    data = load_dataset(SWAT_CONFIG.dataset, SWAT_XLSX)
    assert data.columns == [str(c).strip() for c in second[1:-1]] and data.rows == len(cells) == 120
    np.testing.assert_array_equal(data.frame.to_numpy(), np.array([r[1:-1] for r in cells], dtype=float))
    np.testing.assert_array_equal(data.timestamps, local_seconds([r[0] for r in cells], SGT, "%d/%m/%Y %I:%M:%S %p"))
    assert data.attack.tolist() == [int(r[-1] != "Normal") for r in cells]


def test_swat_times_take_one_format_per_column(tmp_path):
    text = SWAT_NORMAL.read_text().splitlines()
    # a re-saved file with US (month-first) dates fails at its first row ...
    us = tmp_path / "us.csv"
    us.write_text("\n".join([text[1], *(line.replace(" 22/12/2015", " 12/22/2015") for line in text[2:])]) + "\n")
    with pytest.raises(DataError, match=r"us.csv: line 2, column 'Timestamp': '12/22/2015 4:00:00 PM' is not a time"):
        load_swat(us)
    # ... and one whose first rows read either way fails at the first row that does not match
    mixed = tmp_path / "mixed.csv"
    rows = [line.replace(" 22/12/2015", " 02/01/2016") for line in text[2:]]
    rows[5] = rows[5].replace(" 02/01/2016", " 01/13/2016")
    mixed.write_text("\n".join([text[1], *rows]) + "\n")
    with pytest.raises(
        DataError, match=r"mixed.csv: line 7, .*'01/13/2016 4:00:05 PM' does not match the column's time format "
        r"%d/%m/%Y %I:%M:%S %p \(set by line 2\)",
    ):  # fmt: skip
        load_swat(mixed)
    # the fix the message names
    data = load_swat(us, time_format="%m/%d/%Y %I:%M:%S %p")
    assert data.timestamps[0] == pd.Timestamp("2015-12-22 16:00:00", tz="UTC").timestamp()


# -- time zones ---------------------------------------------------------------------------------
def test_the_timezone_setting_shifts_local_times_and_utc_is_the_default(tmp_path):
    utc = load_hai(HAI_2103)
    kst = load_hai(HAI_2103, timezone=KST)
    np.testing.assert_array_equal(utc.timestamps - kst.timestamps, np.full(120, 9 * 3600.0))
    aware = tmp_path / "aware.csv"
    text = HAI_2103.read_text().splitlines()
    aware.write_text("\n".join([text[0], *(line.replace(",", "+09:00,", 1) for line in text[1:])]) + "\n")
    # times with an offset keep it, whatever the zone setting says
    np.testing.assert_array_equal(load_hai(aware, timezone="UTC").timestamps, kst.timestamps)
    with pytest.raises(ConfigError, match=r"dataset.timezone: unknown time zone 'Mars/Olympus'"):
        load_hai(HAI_2103, timezone="Mars/Olympus")


def test_daylight_saving_gaps_are_reported(tmp_path):
    path = tmp_path / "dst.csv"
    path.write_text("time,a\n2021-03-28 01:59:59,1\n2021-03-28 02:30:00,2\n")
    with pytest.raises(DataError, match=r"line 3, column 'time': 2021-03-28 02:30:00 does not exist or is ambiguous"):
        load_csv(path, time_column="time", timezone="Europe/Berlin")


# -- generic CSV --------------------------------------------------------------------------------
def test_generic_csv_with_time_and_label_columns():
    header, rows = raw(GENERIC)
    data = load_csv(GENERIC, time_column="t", label_columns=["fault"])
    assert data.columns == header[1:-1]
    np.testing.assert_array_equal(data.timestamps, [float(r[0]) for r in rows])
    assert data.labels["fault"].tolist() == [int(r[-1]) for r in rows]
    assert data.attack.tolist() == data.labels["fault"].tolist()
    no_time = load_csv(GENERIC, sample_seconds=2.0)
    assert "t" in no_time.columns and "fault" in no_time.columns
    np.testing.assert_array_equal(no_time.timestamps, np.arange(120) * 2.0)


def test_generic_csv_dates_and_mapping_errors(tmp_path):
    path = tmp_path / "dated.csv"
    path.write_text("when;a;b\n2024-01-01T00:00:00Z;1;2\n2024-01-01T00:00:10Z;3;4\n")
    data = load_csv(path, time_column="when")
    assert data.timestamps.tolist() == [1704067200.0, 1704067210.0] and data.columns == ["a", "b"]
    with pytest.raises(DataError, match=r"no time column 'time'; the header has when, a, b; fix dataset.time_column"):
        load_csv(path, time_column="time")
    with pytest.raises(DataError, match="no label column 'fault'"):
        load_csv(path, time_column="when", label_columns=["fault"])


def test_gzip_files_are_read_directly(tmp_path):
    path = tmp_path / "test1.csv.gz"
    path.write_bytes(gzip.compress(HAI_2103.read_bytes()))
    np.testing.assert_array_equal(load_hai(path).frame.to_numpy(), load_hai(HAI_2103).frame.to_numpy())


def test_a_label_file_is_only_taken_for_hai():
    with pytest.raises(ConfigError, match=r"only read for HAI 23\.05 / HAIEnd 23\.05 data, not for format 'swat'"):
        load_dataset(SWAT_CONFIG.dataset, SWAT_ATTACK, labels_path=LABEL_1)
