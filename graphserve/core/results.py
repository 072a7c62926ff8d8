"""Typed results as JSON: one conversion for every dataclass graphserve writes (`--output json`,
manifests, inspect, deploy summaries, benchmark results).

A result is a dataclass; `to_jsonable` writes its fields in order, Paths as strings, tuples as
lists, enums as their values, numpy scalars and arrays as Python numbers and lists, nested
results (and pydantic models) likewise. What a result writes differently is declared in the
field's metadata or a class variable, never hand-written:

    field(metadata=json_meta(name="traces"))    the key differs from the field's name
    field(metadata=json_meta(skip=True))        the field is not written
    field(metadata=json_meta(value=round_3))    the value goes through a function first
    field(metadata=json_meta(flatten=True))     a nested result's keys replace the field
    json_keys = ("passed", ..., "seconds")      (ClassVar) the keys in this order: fields,
                                                properties and zero-argument methods by name,
                                                ("key", "a.b") for attribute path a.b as "key",
                                                and ... for the fields not named (at the end
                                                when there is no ...).

`JsonResult` gives a dataclass a `to_json()` that calls `to_jsonable`.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from pathlib import PurePath
from types import EllipsisType
from typing import Any, ClassVar

__all__ = ["JsonKeys", "JsonResult", "json_meta", "to_jsonable"]

_META = "graphserve.json"

# The type of `json_keys`. A subclass writes `json_keys: ClassVar[JsonKeys]`, subscripted: a bare
# `ClassVar` is a dataclass field to griffe, which would put it in the documented signature.
JsonKeys = tuple[str | tuple[str, str] | EllipsisType, ...]


def json_meta(
    *,
    name: str | None = None,
    skip: bool = False,
    value: Callable[[Any], Any] | None = None,
    flatten: bool = False,
    omit_none: bool = False,
) -> dict[str, Any]:
    """Field metadata: `to_jsonable` writes the field under `name`, not at all (`skip`), not
    when it is None (`omit_none`), through `value`, or merged into its parent (`flatten`)."""
    return {
        _META: {
            "name": name,
            "skip": skip,
            "value": value,
            "flatten": flatten,
            "omit_none": omit_none,
        }
    }


class JsonResult:
    """A dataclass result with `to_json()`: its JSON form by `to_jsonable`."""

    json_keys: ClassVar[JsonKeys] = ()

    def to_json(self) -> dict[str, Any]:
        return to_jsonable(self)


def to_jsonable(obj: Any) -> Any:
    """`obj` as plain JSON values (dict, list, str, int, float, bool, None)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _result(obj)
    if isinstance(obj, Mapping):
        return {_key(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, PurePath):
        return str(obj)
    if isinstance(obj, enum.Enum):
        return to_jsonable(obj.value)
    if type(obj).__module__ == "numpy" and hasattr(obj, "tolist"):
        return obj.tolist()  # an array as lists, a numpy scalar as a Python number
    if hasattr(obj, "model_dump"):  # a pydantic model
        return obj.model_dump(mode="json")
    return obj


def _key(key: Any) -> Any:
    if isinstance(key, PurePath):
        return str(key)
    return key.value if isinstance(key, enum.Enum) else key


def _result(obj: Any) -> dict[str, Any]:
    fields = {f.name: f for f in dataclasses.fields(obj)}
    keys = tuple(getattr(obj, "json_keys", ()))
    named = {entry[1] if isinstance(entry, tuple) else entry for entry in keys}
    if ... not in keys:
        keys = (*keys, ...)
    out: dict[str, Any] = {}
    for entry in keys:
        if entry is ...:
            for name, field in fields.items():
                if name not in named:
                    _write_field(out, obj, field, None)
            continue
        key, path = entry if isinstance(entry, tuple) else (entry, entry)
        if path in fields:
            _write_field(out, obj, fields[path], key if isinstance(entry, tuple) else None)
            continue
        value: Any = obj
        for part in path.split("."):
            value = getattr(value, part)
        out[key] = to_jsonable(value() if callable(value) else value)
    return out


def _write_field(
    out: dict[str, Any], obj: Any, field: dataclasses.Field[Any], key: str | None
) -> None:
    spec = field.metadata.get(_META, {})
    if spec.get("skip"):
        return
    value = getattr(obj, field.name)
    if value is None and spec.get("omit_none"):
        return
    if spec.get("value") is not None:
        value = spec["value"](value)
    if spec.get("flatten"):
        out.update(to_jsonable(value))
        return
    out[key or spec.get("name") or field.name] = to_jsonable(value)
