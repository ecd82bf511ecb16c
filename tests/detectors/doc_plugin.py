"""The plug-in example of docs/plugins.md, copied out of the page (the docs are the one source)."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import yaml

DOC = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"
#: The first line of the example module's block in docs/plugins.md.
MARKER = "# my_detector.py"


def blocks(language: str) -> list[str]:
    """The fenced code blocks of ``language`` in docs/plugins.md, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```", DOC.read_text(encoding="utf-8"), flags=re.S | re.M)


def example_source() -> str:
    """The complete plug-in module (the python block starting with :data:`MARKER`)."""
    found = [b for b in blocks("python") if b.startswith(MARKER + "\n")]
    assert len(found) == 1, f"docs/plugins.md must hold one python block starting with '{MARKER}'"
    return found[0]


def check_snippet() -> str:
    """The page's snippet that runs check_detector on the example."""
    found = [b for b in blocks("python") if "check_detector(" in b and not b.startswith(MARKER)]
    assert len(found) == 1, "docs/plugins.md must hold one python block running check_detector"
    return found[0]


def config_snippet() -> dict:
    """The plant's ``detector`` settings the page shows (its yaml block)."""
    found = [yaml.safe_load(b) for b in blocks("yaml")]
    found = [b for b in found if isinstance(b, dict) and "detector" in b]
    assert len(found) == 1, "docs/plugins.md must hold one yaml block with a plant's detector settings"
    return found[0]["detector"]


def example_module() -> types.ModuleType:
    """The example imported as the module ``my_detector`` (registered, so its detectors pickle by name)."""
    module = sys.modules.get("my_detector")
    if module is None or getattr(module, "__source__", None) != example_source():
        module = types.ModuleType("my_detector")
        module.__source__ = example_source()  # type: ignore[attr-defined]
        sys.modules["my_detector"] = module
        exec(compile(module.__source__, str(DOC) + ":my_detector.py", "exec"), module.__dict__)
    return module
