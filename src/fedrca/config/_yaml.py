"""A strict, bounded YAML reader for configuration files.

``yaml.safe_load`` accepts what a configuration must not: a key given twice (the
later one silently wins: a second ``privacy:`` block once switched the flags
off), aliases that expand a few kilobytes into gigabytes (a "billion laughs"
under a plug-in's arguments), nesting deep enough to exhaust the recursion
limit, and bytes that are not UTF-8. :func:`read_yaml` refuses each with one
:class:`~fedrca.exceptions.ConfigError` line that names the file, the place and
the fix (``tests/config/test_yaml.py``; its flow-style duplicates and arbitrary documents are
fuzzed by ``tests/config/test_fuzz_yaml.py``).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.nodes import MappingNode, Node, ScalarNode

from fedrca.exceptions import ConfigError

__all__ = ["MAX_CONFIG_BYTES", "MAX_DEPTH", "MAX_EXPANDED_NODES", "read_yaml"]

#: Largest configuration file read (a site's configuration is a few kilobytes).
MAX_CONFIG_BYTES = 1_000_000
#: Deepest nesting of mappings and sequences.
MAX_DEPTH = 50
#: Most values the document may hold once every alias is expanded.
MAX_EXPANDED_NODES = 100_000


class _Limits(yaml.SafeLoader):
    """SafeLoader that bounds nesting depth while composing and refuses duplicate keys."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise ConfigError(
                    f"line {mark.line + 1}: nested more than {MAX_DEPTH} levels deep; a configuration is a few "
                    "levels of mappings and lists"
                )
            return Composer.compose_node(self, parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        # every key of the mapping once, whatever its style: block, flow ({a: 1, a: 2} on one line) or
        # keys that are equal as values (1, 1.0 and true are one dict key); a merge (<<) may override
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            if isinstance(key_node, ScalarNode) and key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node.start_mark)
            except TypeError:
                continue  # an unhashable key: the base class names it
            if first is not key_node.start_mark:
                here, there = key_node.start_mark, first
                raise ConfigError(
                    f"line {here.line + 1}, column {here.column + 1}: key {_quoted(key)} is given twice (first on "
                    f"line {there.line + 1}, column {there.column + 1}); YAML would keep only the later one: merge "
                    "the two or delete one"
                )
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_float(self, node: ScalarNode) -> float:
        value = super().construct_yaml_float(node)
        if math.isinf(value) and not _INF_SPELLING.fullmatch(str(node.value)):
            # 1.0e+400: no limit as the effect of a number too large, never (.inf is the spelling)
            raise ConfigError(
                f"line {node.start_mark.line + 1}, column {node.start_mark.column + 1}: {node.value} overflows to "
                "infinity; write .inf (or inf, off) to mean no limit, or give a finite number"
            )
        return value


_Limits.add_constructor("tag:yaml.org,2002:float", _Limits.construct_yaml_float)

#: YAML's spellings of infinity.
_INF_SPELLING = re.compile(r"[-+]?\.(?:inf|Inf|INF)")


def _quoted(key: Any) -> str:
    text = repr(key)
    return text if len(text) <= 60 else f"{text[:28]} ... {text[-27:]}"


def _expanded_size(root: Node) -> int:
    """Number of values of the document with every alias expanded (memoised over the node graph)."""
    sizes: dict[int, int] = {}
    # iterative post-order: aliases make the node tree a DAG, never a cycle for safe YAML
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        if isinstance(node, ScalarNode):
            sizes[id(node)] = 1
            continue
        children = [n for pair in node.value for n in pair] if isinstance(node, MappingNode) else list(node.value)
        if not done:
            stack.append((node, True))
            stack.extend((child, False) for child in children if id(child) not in sizes)
            continue
        total = 1 + sum(sizes.get(id(child), 1) for child in children)
        sizes[id(node)] = min(total, MAX_EXPANDED_NODES + 1)
    return sizes[id(root)]


def read_yaml(path: Path, source: str) -> Any:
    """The YAML document of a configuration file, read strictly (see the module docstring).

    Raises
    ------
    ConfigError
        When the file is missing, unreadable, too large, not UTF-8, not YAML, has a
        duplicate key, expands beyond :data:`MAX_EXPANDED_NODES` values or nests deeper
        than :data:`MAX_DEPTH`.
    """
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise ConfigError(
                f"{size:,} bytes is not a configuration file (at most {MAX_CONFIG_BYTES:,}); is it the right file?",
                source=source,
            )
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read the configuration ({exc.strerror or exc})", source=source) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); save the configuration as UTF-8",
            source=source,
        ) from None
    if "\x00" in text:
        raise ConfigError("holds NUL bytes: not a YAML text file; is it the right file?", source=source)
    loader = None
    try:
        loader = _Limits(text)  # the reader refuses non-printable characters right here
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_size(node) > MAX_EXPANDED_NODES:
            raise ConfigError(
                f"expands to more than {MAX_EXPANDED_NODES:,} values through YAML aliases (&anchor / *alias); "
                "write the values out instead of nesting aliases",
                source=source,
            )
        return loader.construct_document(node)
    except ConfigError as exc:
        if exc.source is None:
            raise ConfigError(exc.reason, source=source) from None
        raise
    except yaml.reader.ReaderError as exc:
        char = exc.character
        code = (
            char
            if isinstance(char, int)
            else (char[0] if isinstance(char, bytes) and char else ord(str(char)[:1] or "\0"))
        )
        raise ConfigError(
            f"character #x{code:04x} at position {exc.position} is not allowed in YAML text; is it the right file?",
            source=source,
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())  # one line, whatever PyYAML says
        raise ConfigError(f"{where}not valid YAML ({problem})", source=source) from None
    except RecursionError:
        raise ConfigError(f"nested too deeply (more than {MAX_DEPTH} levels)", source=source) from None
    finally:
        if loader is not None:
            loader.dispose()
