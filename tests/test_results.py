"""Typed results as JSON (graphserve.core.results): one conversion, declared differences."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np

from graphserve.core.results import JsonResult, json_meta, to_jsonable


class Colour(enum.Enum):
    RED = "red"


@dataclass(frozen=True)
class Inner(JsonResult):
    path: Path
    sizes: tuple[int, ...]


@dataclass
class Outer(JsonResult):
    json_keys: ClassVar = ("ok", "inner", ("where", "inner.path"), ..., "colour")

    inner: Inner
    colour: Colour
    seconds: float = field(metadata=json_meta(value=lambda s: round(s, 3)))
    hidden: str = field(default="x", metadata=json_meta(skip=True))
    renamed: int = field(default=2, metadata=json_meta(name="count"))
    values: dict[str, np.ndarray] = field(default_factory=dict)
    flat: Inner | None = field(default=None, metadata=json_meta(flatten=True))

    @property
    def ok(self) -> bool:
        return self.renamed > 0


def test_plain_values_and_declared_differences() -> None:
    inner = Inner(Path("/a/b"), (1, 2))
    outer = Outer(
        inner,
        Colour.RED,
        seconds=1.23456,
        values={"x": np.array([1.5], np.float32)},
        flat=Inner(Path("c"), ()),
    )
    got = outer.to_json()
    assert got == {
        "ok": True,
        "inner": {"path": "/a/b", "sizes": [1, 2]},
        "where": "/a/b",
        "seconds": 1.235,
        "count": 2,
        "values": {"x": [1.5]},
        "path": "c",
        "sizes": [],
        "colour": "red",
    }
    assert list(got) == [
        "ok",
        "inner",
        "where",
        "seconds",
        "count",
        "values",
        "path",
        "sizes",
        "colour",
    ]
    assert json.loads(json.dumps(got)) == got
    assert to_jsonable([inner, (np.int64(3), np.float32(0.5))]) == [
        {"path": "/a/b", "sizes": [1, 2]},
        [3, 0.5],
    ]
