"""The strict YAML reader, fuzzed: a document with a key given twice is refused in every style; nothing else raises.

Documents are drawn as trees of mappings (keys drawn from a few spellings so that
duplicates are common, ``1``, ``1.0`` and ``true`` among them: one key for Python) and
lists, rendered in block style, flow style (``{a: 1, a: 2}`` on one line: the check once
compared line numbers) or a mix, sometimes spliced with YAML syntax. The property, for
every example: :func:`~fedrca.config._yaml.read_yaml` raises
:class:`~fedrca.exceptions.ConfigError` (one line) exactly when some mapping of the
document holds one key twice (or the text is not valid YAML), and otherwise returns the
document, every mapping with all its keys; no other exception.

``make test`` runs :data:`FAST` examples; ``make exhaustive`` runs :data:`SLOW`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedrca.config._yaml import read_yaml
from fedrca.exceptions import ConfigError

FAST = 60
SLOW = 10_000

#: Key spellings: distinct texts, some of them one value in Python (1, 1.0, true; "x" and x).
KEYS = ["a", "b", "flag_epsilon", "seed", "1", "1.0", "true", "'x'", "x", "components"]
SCALARS = ["1", "2.5", ".inf", "-1", "null", "'s'", "yes", "0x10", "1e3", "~"]


@st.composite
def trees(draw: st.DrawFn, depth: int = 0) -> Any:
    """("map", [(key text, subtree)]) | ("list", [subtree]) | ("scalar", text)."""
    kind = draw(st.sampled_from(["map", "map", "list", "scalar"] if depth < 3 else ["scalar"]))
    if kind == "scalar":
        return ("scalar", draw(st.sampled_from(SCALARS)))
    n = draw(st.integers(0, 4))
    if kind == "list":
        return ("list", [draw(trees(depth + 1)) for _ in range(n)])
    return ("map", [(draw(st.sampled_from(KEYS)), draw(trees(depth + 1))) for _ in range(n)])


def flow(tree: Any) -> str:
    kind, body = tree
    if kind == "scalar":
        return body
    if kind == "list":
        return "[" + ", ".join(flow(t) for t in body) + "]"
    return "{" + ", ".join(f"{k}: {flow(v)}" for k, v in body) + "}"


def block(tree: Any, indent: int, styles: list[bool]) -> list[str]:
    """Lines of ``tree`` as a block node at ``indent`` (a node drawn as flow when its style says so)."""
    kind, body = tree
    pad = " " * indent
    if kind == "scalar" or not body or (styles and styles.pop()):
        return [pad + flow(tree)]
    lines: list[str] = []
    for item in body:
        key, value = item if kind == "map" else ("-", item)
        head = f"{pad}{key}:" if kind == "map" else f"{pad}-"
        if value[0] == "scalar" or not value[1]:
            lines.append(f"{head} {flow(value)}")
        else:
            lines.append(head)
            lines += block(value, indent + 2, styles)
    return lines


def has_duplicate(tree: Any) -> bool:
    kind, body = tree
    if kind == "scalar":
        return False
    if kind == "list":
        return any(has_duplicate(t) for t in body)
    seen: list[Any] = []
    for key, value in body:
        k = yaml.safe_load(key)
        if any(k == s and hash(k) == hash(s) for s in seen):
            return True
        seen.append(k)
        if has_duplicate(value):
            return True
    return False


@st.composite
def documents(draw: st.DrawFn) -> tuple[str, bool, bool]:
    """(YAML text, whether a key is given twice, whether the text was spliced)."""
    tree = ("map", [(draw(st.sampled_from(KEYS)), draw(trees(1))) for _ in range(draw(st.integers(1, 4)))])
    styles = draw(st.lists(st.booleans(), max_size=20))
    text = "\n".join(block(tree, 0, styles)) + "\n"
    spliced = draw(st.integers(0, 9)) == 0
    if spliced:
        at = draw(st.integers(0, len(text)))
        splice = draw(st.sampled_from([":", "- ", "[", "{", "&a ", "*a", "\t", "'", "<<: ", ", a: 1"]))
        text = text[:at] + splice + text[at:]
    return text, has_duplicate(tree), spliced


def _fuzz(tmp: Path, examples: int) -> dict[str, int]:
    counts = {"read": 0, "duplicate": 0, "other": 0}
    path = tmp / "c.yaml"

    @settings(
        max_examples=examples, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck)
    )
    @given(documents())
    def run(doc: tuple[str, bool, bool]) -> None:
        text, duplicate, spliced = doc
        path.write_text(text, encoding="utf-8")
        try:
            value = read_yaml(path, "c.yaml")
        except ConfigError as exc:
            message = str(exc)
            assert "\n" not in message and message.startswith("c.yaml: "), message
            if "given twice" in message:
                counts["duplicate"] += 1
                assert duplicate or spliced, (text, message)
            else:
                counts["other"] += 1
                assert spliced, (text, message)  # only a splice makes a text that is not YAML
            return
        assert not duplicate or spliced, text  # a splice may change a key
        counts["read"] += 1
        if not spliced:
            assert value == yaml.safe_load(text)

    run()
    return counts


def test_yaml_documents_are_read_whole_or_refused_for_their_duplicate(tmp_path):
    counts = _fuzz(tmp_path, FAST)
    assert counts["read"] > 0 and counts["duplicate"] > 0, counts


@pytest.mark.slow
@pytest.mark.exhaustive
def test_yaml_documents_are_read_whole_or_refused_for_their_duplicate_slow(tmp_path):
    """Issue 34 acceptance 2: 10,000 documents, flow-style duplicates among them (``make exhaustive``)."""
    counts = _fuzz(tmp_path, SLOW)
    print(f"\nfuzz yaml: {sum(counts.values())} documents, {counts['read']} read, {counts['duplicate']} duplicates "
          f"refused, {counts['other']} other errors")  # fmt: skip
    assert sum(counts.values()) >= SLOW
