"""Fast JSON for tensors, behind core.codec's JSON functions: numeric arrays read straight from the
text into numpy (pysimdjson), and bodies written by orjson, which writes numpy arrays itself.

Both keep TF Serving's number rules (`util/json_tensor.cc`), or step aside for the slower path in
core.codec, which keeps them too:

- Reading: a decimal becomes the nearest float64 (simdjson rounds correctly, as Python and
  rapidjson do), cast to float32 later exactly as TF Serving's GetFloat() casts it. simdjson
  refuses `NaN`, `Infinity` and `-Infinity` (not JSON), and so does `read_predict_body`: such a
  body, and any body this module does not read whole and exactly, goes to the slower path.
- Writing: orjson writes a float32 with the fewest digits that read back as the same float32
  (`2.05`, not `2.049999952316284`), a whole float with `.0`, a float64 in its shortest form. It
  writes NaN and the infinities as `null`, and a float16 with a float32's digits, so
  `orjson_value` returns None for an array with one of those, and the caller writes that body
  the slower way, with bare `NaN`/`Infinity` tokens as TF Serving does.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import orjson
import simdjson

__all__ = ["dump", "orjson_value", "read_predict_body"]

# The keys whose numeric arrays are tensors: the row format's `instances`, the columnar format's
# `inputs` (one tensor, or an object of them).
_TENSOR_KEYS = ("instances", "inputs")
_STRUCTURE = b"[]{},:"
_NOT_STRUCTURE = bytes(sorted(set(range(256)) - set(_STRUCTURE)))
_OPEN = ord("[")
# An array with at most this many arrays in it (itself included) is proved rectangular by their
# lengths (about 0.2 µs each); a larger one by a scan of the text (about 1 ns a byte).
MEASURED_ARRAYS = 1024
_WRITABLE_KINDS = "biuf"  # bool, int, uint, float: what orjson writes from a numpy array


def dump(body: Any) -> bytes:
    """`body` as compact JSON; numpy arrays and scalars in it are written by orjson. Only for
    bodies whose arrays came from `orjson_value`."""
    return orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)


def orjson_value(array: np.ndarray) -> Any | None:
    """`array` as orjson writes it in TF Serving's form (a native, C-contiguous array, or a numpy
    scalar for rank 0), or None when orjson would not write it so: strings, float16, a NaN or
    an infinity."""
    if array.dtype.kind not in _WRITABLE_KINDS or array.dtype == np.float16:
        return None
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        return None
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    if array.ndim == 0:
        return array[()]
    return np.ascontiguousarray(array)


def read_predict_body(body: bytes, max_depth: int) -> dict[str, Any] | None:
    """A predict body whose tensors are numeric arrays, read without building a Python object per
    number: {key: value} with those arrays as numpy (int64 when every number is an integer, else
    float64, as numpy makes them from the same lists), other values as Python scalars.

    Returns None, to have the caller parse the body the ordinary way, for anything else: not
    JSON to simdjson (NaN, Infinity, an integer past 64 bits, bad syntax), a value that is not a
    scalar or a numeric array of `_TENSOR_KEYS`, a ragged array, an empty one, a repeated key,
    or nesting past `max_depth`. What it returns is what the ordinary path would give, with
    numpy arrays in place of the lists.
    """
    with _parser(len(body)) as parser:
        try:
            document = _parse(parser, body)
        except Exception:  # ValueError, RuntimeError (BIGINT_ERROR), ...: the slow path words it
            return None
        read = _Reader(max_depth)
        result = read.object(document, top=True) if isinstance(document, simdjson.Object) else None
        del document  # (its proxies hold the parser)
    if result is None or read.depth > max_depth:
        return None
    # simdjson flattens a ragged array as readily as a rectangular one. Each array was either
    # measured (every sub-array's length; then no array may hide among the numbers, so the text
    # has exactly as many `[` as the arrays counted), or is too large to measure in Python:
    # then the brackets, commas and colons of the text must be exactly those of the values read.
    if read.large:
        if body.translate(None, _NOT_STRUCTURE) != b"".join(read.structure):
            return None
    elif np.count_nonzero(np.frombuffer(body, np.uint8) == _OPEN) != read.arrays:
        return None
    return result


_REUSE_BELOW = 4 * 1024 * 1024  # bodies up to this size are parsed by a kept parser
_KEPT_PARSERS = 4
_idle: list[simdjson.Parser] = []  # kept parsers not in use, the most recently used last


@contextlib.contextmanager
def _parser(size: int) -> Iterator[simdjson.Parser]:
    """A parser for a body of `size` bytes. A parser is not thread-safe, and keeps the buffers
    its largest document needed: a fresh one faults their pages in on every parse, which
    doubled the time of a 1.7 MB image. So up to _KEPT_PARSERS are kept, shared by every thread
    and handed out the most recently used first (warm in the cache; reads hold the GIL, so two
    or three serve any number of threads). A body past _REUSE_BELOW gets a parser of its own,
    freed after it. The caller must let go of every value of its document before leaving."""
    if size > _REUSE_BELOW:
        yield simdjson.Parser()
        return
    try:
        parser = _idle.pop()  # (list.pop and append are atomic under the GIL)
    except IndexError:
        parser = simdjson.Parser()
    try:
        yield parser
    finally:
        if len(_idle) < _KEPT_PARSERS:
            _idle.append(parser)


def _parse(parser: simdjson.Parser, body: bytes) -> Any:
    try:
        return parser.parse(body)
    except RuntimeError as exc:
        if "re-use a parser" not in str(exc):
            raise
        # something still holds a value of this parser's last document: parse with a new one
        return simdjson.Parser().parse(body)


class _Reader:
    def __init__(self, max_depth: int) -> None:
        self.max_depth = max_depth
        self.structure: list[bytes] = []  # the text's structural bytes, as the values imply
        self.depth = 0
        self.arrays = 0  # arrays measured, for the count of `[` in the text
        self.large = False  # an array too large to measure: the text's structure is compared

    def object(self, value: simdjson.Object, top: bool, level: int = 1) -> dict[str, Any] | None:
        self.depth = max(self.depth, level)
        result: dict[str, Any] = {}
        keys = list(value.keys())
        if len(set(keys)) != len(keys):  # a repeated key: the slow path keeps the last, as json
            return None
        self.structure.append(b"{")
        for i, key in enumerate(keys):
            if not _plain(key):
                return None
            item = value[key]  # arrays and objects stay simdjson's (items() makes lists)
            self.structure.append(b",:" if i else b":")
            if isinstance(item, simdjson.Array) and (not top or key in _TENSOR_KEYS):
                array = self.array(item, level)
                if array is None:
                    return None
                result[key] = array
            elif isinstance(item, simdjson.Object) and top and key == "inputs":
                inputs = self.object(item, top=False, level=level + 1)
                if inputs is None:
                    return None
                result[key] = inputs
            elif isinstance(item, simdjson.Array | simdjson.Object) or (
                isinstance(item, str) and not _plain(item)
            ):
                return None
            else:
                result[key] = item
        self.structure.append(b"}")
        return result

    def array(self, value: simdjson.Array, level: int) -> np.ndarray | None:
        shape: list[int] = []
        first: Any = value
        while isinstance(first, simdjson.Array):  # TF Serving's shape: the first elements'
            if not len(first) or level + len(shape) >= self.max_depth:
                return None
            shape.append(len(first))
            first = first[0]
        if isinstance(first, bool) or not isinstance(first, int | float):
            return None  # strings, b64 objects, booleans, nulls: the slow path's
        self.depth = max(self.depth, level + len(shape))
        flat = _numbers(value, floats=isinstance(first, float))
        if flat is None or flat.size != math.prod(shape):
            return None
        self.structure.append(_rectangular(tuple(shape)))
        arrays = sum(math.prod(shape[:depth]) for depth in range(len(shape)))
        if arrays > MEASURED_ARRAYS:
            self.large = True
        elif _measure(value, shape):
            self.arrays += arrays
        else:
            return None
        return flat.reshape(shape)


def _numbers(value: simdjson.Array, floats: bool) -> np.ndarray | None:
    """Every number of a nested array, flat: int64 if all are integers, else float64; None if
    one is not a number or an integer does not fit in 64 bits. `floats`: the first is a float,
    so the array is float64 (integers are not tried)."""
    if not floats:
        try:
            return np.frombuffer(value.as_buffer(of_type="i"), dtype=np.int64)
        except TypeError:  # a float among them (or a non-number)
            pass
        except Exception:  # an integer past int64: numpy would make objects of them
            return None
    try:  # (an integer past 64 bits never gets here: simdjson refuses the body, BIGINT_ERROR)
        return np.frombuffer(value.as_buffer(of_type="d"), dtype=np.float64)
    except Exception:  # a bool, string or null among them
        return None


def _measure(value: simdjson.Array, shape: list[int]) -> bool:
    """Every array of `value` down to the innermost has its length in `shape`. (Whether the
    innermost hold numbers only is for the count of `[` to tell.)"""
    level: list[Any] = [value]
    for depth, size in enumerate(shape):
        if not all(isinstance(array, simdjson.Array) and len(array) == size for array in level):
            return False
        if depth + 1 < len(shape):
            level = [item for array in level for item in array]
    return True


@functools.lru_cache(maxsize=64)
def _rectangular(shape: tuple[int, ...]) -> bytes:
    """The brackets and commas of a rectangular array of `shape`."""
    inner = b"[" + b"," * (shape[-1] - 1) + b"]"
    for size in reversed(shape[:-1]):
        inner = b"[" + b",".join([inner] * size) + b"]"
    return inner


def _plain(text: str) -> bool:
    """A key or string without structural characters, so the structure check can count them."""
    return not any(c in text for c in "[]{},:")
