"""The one strict base of every configuration model, and the one translator of its errors.

Every section of a site configuration (plants, privacy, topics, ``training``,
``rca``, ...) is a frozen pydantic model on :class:`Strict` (unknown keys are
errors), validated in one pass by :func:`fedrca.config.load_config`. A
validation error becomes one :class:`~fedrca.exceptions.ConfigError` naming the
file, the key path (``plants[2].sensors[3]``, ``rca.graph.alpha``) and what would
be valid (:func:`translate`).
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator

from fedrca.config.limits import MAX_SEED
from fedrca.exceptions import ConfigError

__all__ = ["Strict", "key_path", "parse_inf", "parse_seed", "translate"]

#: Spellings of "no limit" accepted wherever a number may be infinite.
_INF_WORDS = ("inf", "infinity", ".inf", "none", "off")


class Strict(BaseModel):
    """Frozen model that refuses unknown keys, and booleans where a number is meant.

    A field may carry a ``json_schema_extra={"hint": "..."}``: any error on that
    field is then reported with the hint (clearer than pydantic's message for
    unions such as ``float | 'auto'``).

    pydantic reads ``true`` as 1 for a number (``energy: true`` was an energy of 1.0):
    a boolean is accepted only where the field's type admits one, in lists and
    mappings too (``tests/config/test_site.py``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if field is not None and _bool_where_not_admitted(field.annotation, value):
            raise ValueError(
                f"{value!r} is a boolean, not a number: give a number"
                if isinstance(value, bool)
                else f"a boolean among {_short(value)} where numbers are meant: give numbers"
            )
        return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:28]} ... {text[-27:]}"


def _bool_where_not_admitted(annotation: Any, value: Any) -> bool:
    """True when ``value`` holds a boolean (itself, or in a list / mapping) where ``annotation`` takes numbers only."""
    if isinstance(value, bool):
        return _numbers_only(annotation)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _bool_where_not_admitted(args[0], value)
    if origin in (typing.Union, types.UnionType):
        return any(_bool_where_not_admitted(a, value) for a in args if _container_of(a, value))
    if isinstance(value, list | tuple) and _container_of(annotation, value):
        if origin is tuple and args and args[-1] is not Ellipsis and len(args) == len(value):
            return any(_bool_where_not_admitted(a, v) for a, v in zip(args, value, strict=True))
        return bool(args) and any(_bool_where_not_admitted(args[0], v) for v in value)
    if isinstance(value, dict) and _container_of(annotation, value) and len(args) == 2:
        return any(_bool_where_not_admitted(args[1], v) for v in value.values())
    return False


def _container_of(annotation: Any, value: Any) -> bool:
    origin = typing.get_origin(annotation)
    if isinstance(value, list | tuple):
        return origin in (list, tuple, set, frozenset, Sequence)
    return isinstance(value, dict) and origin in (dict, Mapping)


def _numbers_only(annotation: Any) -> bool:
    """The annotation takes numbers (int, float, ``float | None``, ``int | 'auto'``) and no boolean."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _numbers_only(args[0])
    if origin in (typing.Union, types.UnionType):
        return any(_numbers_only(a) for a in args) and not any(_takes_bool(a) for a in args)
    return isinstance(annotation, type) and annotation is not bool and issubclass(annotation, int | float)


def _takes_bool(annotation: Any) -> bool:
    if annotation is bool or annotation is Any or annotation is object:
        return True
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return any(isinstance(a, bool) for a in args)
    if origin in (typing.Union, types.UnionType, typing.Annotated):
        return any(_takes_bool(a) for a in (args[:1] if origin is typing.Annotated else args))
    return False


def parse_seed(value: Any) -> Any:
    """A seed written as a float (``1.0e+38``) named as what it is not (a ``mode="before"`` validator)."""
    if isinstance(value, float) and not (value.is_integer() and 0 <= value <= MAX_SEED):
        raise ValueError(f"a seed is an integer in 0..{MAX_SEED}, got {value:g}")
    return value


def parse_inf(value: Any) -> Any:
    """``inf`` / ``off`` / ``none`` (any case) as ``math.inf``; other values unchanged (a ``mode="before"`` validator).

    A number written so large that it overflows (``1e400``) is refused: no limit is spelled out.

    Examples
    --------
    >>> parse_inf("Off"), parse_inf(3)
    (inf, 3)
    """
    if isinstance(value, str) and value.strip().lower() in _INF_WORDS:
        return math.inf
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return value  # pydantic names what it is not
        if math.isinf(number):
            # "1e400" (PyYAML reads it as text): no limit as the effect of a typo, never
            raise ValueError(f"{value.strip()} overflows to infinity: write inf (or off) to mean no limit")
    return value


def key_path(parts: Sequence[str | int]) -> str:
    """``("plants", 2, "sensors", 3)`` -> ``plants[2].sensors[3]``.

    Examples
    --------
    >>> key_path(["rca", "graph", "alpha"]), key_path(["plants", 2, "sensors", 3])
    ('rca.graph.alpha', 'plants[2].sensors[3]')
    """
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The model classes an annotation may hold (through Optional, unions, lists, dicts)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    out: list[type[BaseModel]] = []
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, list, tuple, dict, typing.Annotated):
        for arg in typing.get_args(annotation):
            out += _models_in(arg)
    return out


def _is_type_tag(part: str, info: Any) -> bool:
    """True for the union-member names pydantic puts in error locations (``float``, ``literal['auto']``)."""
    if "[" in part or part in ("float", "int", "str", "bool", "none"):
        return True
    return info is not None and any(part == m.__name__ for m in _models_in(info.annotation))


def _walk(model: type[BaseModel], loc: Sequence[Any]) -> tuple[list[str | int], type[BaseModel], Any]:
    """Follow a pydantic error location through the models.

    Returns the key path (union-member names dropped), the innermost model reached and
    the field info of the last field named (None when no field was named).
    """
    path: list[str | int] = []
    current: type[BaseModel] | None = model
    info: Any = None
    for part in loc:
        if isinstance(part, int):
            path.append(part)
        elif current is not None and part in current.model_fields:
            path.append(part)
            info = current.model_fields[part]
            models = _models_in(info.annotation)
            current = models[0] if models else None
        elif not _is_type_tag(str(part), info):
            path.append(str(part))  # a key the model does not have
    return path, current or model, info


def translate(
    exc: ValidationError, model: type[BaseModel], *, source: str | None, prefix: Sequence[str] = ()
) -> ConfigError:
    """The :class:`ConfigError` of the first error of ``exc`` (raised validating ``model``).

    ``prefix`` is the key path of ``model`` inside the file (``("rca",)`` for the RCA section).
    """
    first = exc.errors()[0]
    loc = tuple(first["loc"])
    path, _, info = _walk(model, loc)
    message = str(first["msg"])
    if first["type"] == "extra_forbidden":
        _, parent_model, _ = _walk(model, loc[:-1])
        message = f"unknown key; valid keys are {', '.join(parent_model.model_fields)}"
    elif info is not None and isinstance(info.json_schema_extra, dict) and "hint" in info.json_schema_extra:
        message = str(info.json_schema_extra["hint"])
    elif message.startswith("Value error, "):
        message = message.removeprefix("Value error, ")
    return ConfigError(message, source=source, key=key_path([*prefix, *path]) or None)


SectionT = TypeVar("SectionT", bound=BaseModel)


def parse_section(model: type[SectionT], key: str, what: str, data: Any, source: str | None = None) -> SectionT:
    """Validate one section of a configuration (``key:``, e.g. ``rca``) on its own with ``model``.

    ``None`` is the empty section; ``what`` names its keys for the error when it is not a mapping.

    Raises
    ------
    ConfigError
        Naming ``key.<field>`` and what would be valid.
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"must be a mapping of {what}", source=source, key=key)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise translate(exc, model, source=source, prefix=(key,)) from None
