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
    where = r"line \d+, column 1: key 'privacy' is given twice \(first on line \d+, column 1\)"
    with pytest.raises(ConfigError, match=where):
        load_config(_write(tmp_path, text))


def test_duplicate_keys_nested_anywhere_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="key 'rounds' is given twice"):
        read_yaml(_write(tmp_path, "training:\n  rounds: 3\n  rounds: 4\n"), "x")


@pytest.mark.parametrize(
    "text, where",
    [
        # one line, flow style: the duplicate check once compared line numbers, and this one switched
        # randomized response off (issue 34)
        ("privacy: {flag_epsilon: 1.0, seed: 0, flag_epsilon: .inf}\n", "line 1, column 39: key 'flag_epsilon'"),
        ("model: {components: 1, components: 2}\n", "line 1, column 24: key 'components'"),
        ("a: [{x: 1, x: 2}]\n", "line 1, column 12: key 'x'"),
        ("{a: 1, b: 2, a: 3}\n", "line 1, column 14: key 'a'"),
        ("a: {1: x, 1.0: y}\n", "key 1.0"),  # one dict key in Python: equal as values
        ('a: {"k": 1, k: 2}\n', "key 'k'"),  # quoted or plain, one key
    ],
)
def test_flow_style_duplicates_are_refused(tmp_path, text, where):
    with pytest.raises(ConfigError, match=f"{where}.* is given twice"):
        read_yaml(_write(tmp_path, text), "x")


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
    with pytest.raises(ConfigError, match="is a directory; give the configuration's YAML file"):
        load_config(tmp_path)


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400) | st.text(max_size=400).map(lambda t: t.encode("utf-8")))
def test_any_bytes_give_a_configuration_or_a_config_error(tmp_path_factory, raw):
    path = tmp_path_factory.mktemp("fuzz") / "site.yaml"
    path.write_bytes(raw)
    try:
        load_config(path)
    except ConfigError as exc:
        assert str(exc).startswith(str(path))


#: Pieces a mutation splices into a valid configuration: YAML syntax, wrong types, odd values.
_TOKENS = [
    "",
    ":",
    ": ",
    "- ",
    "  ",
    "\t",
    "\n",
    "\r\n",
    "{",
    "}",
    "[",
    "]",
    ",",
    "&a ",
    "*a",
    "<<: *a",
    "!!python/object ",
    "~",
    "null",
    "inf",
    "-inf",
    ".nan",
    "1e309",
    "-1",
    "0",
    "1.5",
    "true",
    "'",
    '"',
    "#",
    "\x00",
    "\ufeff",
    "é",
    "plants:",
    "site:",
    "privacy:",
    "sensors: []",
    "match: {prefix: X}",
    "kind: plugin",
    "folds: 0",
    "causal:",
    "causal: {mode: vote, epsilon: 2}",
    "mode: pooled-stats",
    "max_cond: -1",
    "epsilon: 1e309",
    "---",
    "...",
    "? ",
    "|",
    ">",
    "%YAML 1.1",
    "\xff",
]


@st.composite
def mutated_configs(draw: st.DrawFn) -> bytes:
    """A shipped configuration with a few lines deleted, duplicated, swapped or spliced with tokens."""
    lines = TEP.splitlines(keepends=True)
    for _ in range(draw(st.integers(1, 4))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        action = draw(st.sampled_from(["delete", "duplicate", "splice", "swap", "indent"]))
        if action == "delete":
            del lines[i]
        elif action == "duplicate":
            lines.insert(i, lines[i])
        elif action == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif action == "indent":
            lines[i] = draw(st.sampled_from(["  ", "    ", "\t", ""])) + lines[i].lstrip(" ")
        else:
            at = draw(st.integers(0, len(lines[i])))
            lines[i] = lines[i][:at] + draw(st.sampled_from(_TOKENS)) + lines[i][at:]
    return "".join(lines).encode("utf-8", errors="surrogatepass")


def _config_fuzz(tmp_path_factory: pytest.TempPathFactory, examples: int) -> dict[str, int]:
    directory = tmp_path_factory.mktemp("config-fuzz")
    counts = {"ok": 0, "error": 0}

    @settings(
        max_examples=examples, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck)
    )
    @given(mutated_configs() | st.binary(max_size=600))
    def run(raw: bytes) -> None:
        path = directory / "site.yaml"
        path.write_bytes(raw)
        try:
            config = load_config(path)
        except ConfigError as exc:
            message = str(exc)
            assert message.startswith(str(path)) and "\n" not in message.strip(), message
            counts["error"] += 1
            return
        assert config.plants and config.site  # a result is a whole, validated configuration
        counts["ok"] += 1

    run()
    return counts


def test_mutated_configurations_give_a_configuration_or_one_config_error_line(tmp_path_factory):
    counts = _config_fuzz(tmp_path_factory, 300)
    assert counts["ok"] + counts["error"] >= 300


@pytest.mark.slow
@pytest.mark.exhaustive
def test_config_loader_fuzz_slow(tmp_path_factory):
    """Issue 12 acceptance 3: 10,000 examples of the configuration loader (``make exhaustive``)."""
    counts = _config_fuzz(tmp_path_factory, 10_000)
    print(f"\nfuzz config: {sum(counts.values())} examples, {counts['ok']} loaded, {counts['error']} ConfigError")
    assert sum(counts.values()) >= 10_000
