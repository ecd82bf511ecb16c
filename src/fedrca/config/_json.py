"""A strict JSON reader for JSON a user writes: command-line arguments (``whatif --delta``) and graph files.

``json.loads`` keeps the last of a key given twice (``{"u1": 1, "u1": 5}`` is ``{"u1": 5}``),
reads ``NaN`` and ``Infinity`` and recurses as deep as the text nests. :func:`strict_json`
refuses each with one :class:`~fedrca.exceptions.ConfigError` naming the key or file
(``tests/config/test_yaml.py``, the YAML reader's twin).
"""

from __future__ import annotations

import json
from typing import Any

from fedrca.exceptions import ConfigError

__all__ = ["MAX_JSON_CHARS", "strict_json"]

#: Longest JSON text read this way (an argument, a graph file of a few thousand plants).
MAX_JSON_CHARS = 10_000_000


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            shown = key if len(key) <= 40 else key[:37] + "..."
            raise ConfigError(f"key {shown!r} is given twice; JSON would keep only the later one: give it once")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise ConfigError(f"{name} is not a JSON number: give a finite number")


def strict_json(text: str, *, key: str | None = None, source: str | None = None) -> Any:
    """The JSON value of ``text``, each object's keys given once, numbers finite, nesting bounded.

    Raises
    ------
    ConfigError
        Naming ``key`` (an option) or ``source`` (a file) and what is wrong.

    Examples
    --------
    >>> strict_json('{"u1": 1, "u2": [2.5]}')
    {'u1': 1, 'u2': [2.5]}
    >>> strict_json('{"u1": 1, "u1": 5}', key="--delta")
    Traceback (most recent call last):
    ...
    fedrca.exceptions.ConfigError: --delta: key 'u1' is given twice; JSON would keep only the later one: give it once
    """
    if len(text) > MAX_JSON_CHARS:
        raise ConfigError(f"{len(text):,} characters of JSON is more than {MAX_JSON_CHARS:,}", key=key, source=source)
    try:
        return json.loads(text, object_pairs_hook=_object, parse_constant=_no_constant)
    except ConfigError as exc:
        raise ConfigError(exc.reason, key=key, source=source) from None
    except RecursionError:
        raise ConfigError("nested too deeply to be a value of fedrca", key=key, source=source) from None
    except ValueError as exc:  # JSONDecodeError; an integer of too many digits
        raise ConfigError(f"not JSON ({' '.join(str(exc).split())[:200]})", key=key, source=source) from None
