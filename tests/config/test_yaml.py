"""The strict configuration reader: every hostile YAML gets one clear ConfigError, nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedrca.config import load_config
from fedrca.config._yaml import MAX_DEPTH, MAX_EXPANDED_NODES, read_yaml
from fedrca.exceptions import ConfigError

REPO = Path(__file__).resolve().parents[2]
TEP = (REPO / "config" / "tep.yaml").read_text(encoding="utf-8")


def _write(tmp_path: Path, text: str | bytes, name: str = "site.yaml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_a_key_given_twice_is_refused_with_both_lines(tmp_path):
    text = TEP + "\nprivacy:\n  flag_epsilon: 1.0\n"  # the second privacy block would silently win
    with pytest.raises(ConfigError, match=r"line \d+: key 'privacy' is given twice \(first on line \d+\)"):
        load_config(_write(tmp_path, text))


def test_duplicate_keys_nested_anywhere_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="key 'rounds' is given twice"):
        read_yaml(_write(tmp_path, "training:\n  rounds: 3\n  rounds: 4\n"), "x")


def test_merge_keys_are_not_duplicates(tmp_path):
    doc = read_yaml(_write(tmp_path, "a: &base {x: 1}\nb:\n  <<: *base\n  y: 2\n"), "x")
    assert doc == {"a": {"x": 1}, "b": {"x": 1, "y": 2}}


def test_an_alias_bomb_is_refused_before_it_expands(tmp_path):
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for k in range(1, 10):
        lines.append(f"a{k}: &a{k} [" + ", ".join([f"*a{k - 1}"] * 9) + "]")
    path = _write(tmp_path, "\n".join(lines) + "\n")
    assert path.stat().st_size < 4000
    with pytest.raises(ConfigError, match=f"more than {MAX_EXPANDED_NODES:,} values through YAML aliases"):
        read_yaml(path, "bomb.yaml")


def test_a_few_aliases_are_fine(tmp_path):
    doc = read_yaml(_write(tmp_path, "a: &x [1, 2]\nb: *x\nc: *x\n"), "x")
    assert doc == {"a": [1, 2], "b": [1, 2], "c": [1, 2]}


def test_deep_nesting_is_refused_without_recursion(tmp_path):
    deep = "a: " + "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5) + "\n"
    with pytest.raises(ConfigError, match=f"nested more than {MAX_DEPTH} levels"):
        read_yaml(_write(tmp_path, deep), "x")
    very_deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(ConfigError, match="nested"):
        read_yaml(_write(tmp_path, very_deep), "x")


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ("site: caf\xe9\n".encode("latin-1"), r"not UTF-8 text \(byte 0xe9 at offset 9\)"),
        (b"\x00" * 64, "NUL bytes"),
        (b"site: [unclosed\n", "line 2, column 1: not valid YAML"),
        (b"site: !!python/object:os.system ls\n", "not valid YAML"),
    ],
)
def test_unreadable_text_gets_one_line(tmp_path, raw, fragment):
    with pytest.raises(ConfigError, match=fragment) as info:
        load_config(_write(tmp_path, raw))
    assert "\n" not in str(info.value)


def test_a_utf8_bom_is_accepted(tmp_path):
    assert load_config(_write(tmp_path, "\ufeff" + TEP)).site == "tep"


def test_a_huge_file_is_refused_by_its_size(tmp_path):
    path = _write(tmp_path, "# " + "x" * 2_000_000 + "\n")
    with pytest.raises(ConfigError, match="is not a configuration file"):
        load_config(path)


def test_a_directory_is_not_a_configuration(tmp_path):
    with pytest.raises(ConfigError, match="no such configuration file"):
        load_config(tmp_path)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400) | st.text(max_size=400).map(lambda t: t.encode("utf-8")))
def test_any_bytes_give_a_configuration_or_a_config_error(tmp_path_factory, raw):
    path = tmp_path_factory.mktemp("fuzz") / "site.yaml"
    path.write_bytes(raw)
    try:
        load_config(path)
    except ConfigError as exc:
        assert str(exc).startswith(str(path))
