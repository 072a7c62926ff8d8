"""Input signature specs: parsing `NAME:DTYPE:SHAPE`, and sample inputs that fit a spec.

Pure numpy on purpose: the CLI, the load test and the codec use these without importing
TensorFlow. Conversion to `tf.TensorSpec` lives in `graphserve.model.trace`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphserve.core.errors import SignatureError
from graphserve.core.results import JsonResult, json_meta

__all__ = [
    "DTYPES",
    "DTYPE_ENUMS",
    "PREDICT_METHOD",
    "SERVING_DEFAULT",
    "ImageFormat",
    "Shape",
    "TensorSpec",
    "ValueRange",
    "Vocabulary",
    "dtype_name",
    "parse_input_spec",
    "parse_shape",
    "shape_of_tensor_info",
    "spec_from_tensor_info",
]

# TF Serving's names for the default signature and the Predict method.
SERVING_DEFAULT = "serving_default"
PREDICT_METHOD = "tensorflow/serving/predict"

# The dtypes a signature may declare, by the name users write (TensorFlow's names).
DTYPES: dict[str, np.dtype] = {
    "float16": np.dtype(np.float16),
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
    "int8": np.dtype(np.int8),
    "int16": np.dtype(np.int16),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "uint8": np.dtype(np.uint8),
    "uint16": np.dtype(np.uint16),
    "bool": np.dtype(np.bool_),
    "string": np.dtype(object),
}

# Their DataType enum values (tensorflow/core/framework/types.proto). A reference type, which a
# TF1 variable's output has (DT_FLOAT_REF), is its base type plus 100.
DTYPE_ENUMS: dict[str, int] = {
    "float16": 19,
    "float32": 1,
    "float64": 2,
    "int8": 6,
    "int16": 5,
    "int32": 3,
    "int64": 9,
    "uint8": 4,
    "uint16": 17,
    "bool": 10,
    "string": 7,
}
_ENUM_DTYPES = {v: k for k, v in DTYPE_ENUMS.items()}
_REF_OFFSET = 100

# A shape: None for a dimension of any size; the whole shape None when even the rank is unknown
# (a TF1 placeholder without a shape, or tf.Example inputs). `()` is a scalar, never "unknown".
Shape = tuple[int | None, ...] | None

# Signature input names become SavedModel signature keys and JSON keys: keep them plain.
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-/]*$")


def _shape_json(shape: Shape) -> list[int] | None:
    """A shape as JSON writes it: -1 for a dimension of any size, null for an unknown rank."""
    return None if shape is None else [-1 if d is None else d for d in shape]


@dataclass(frozen=True)
class TensorSpec(JsonResult):
    """One named tensor of a signature (an input or an output).

    `dtype` is a name from `DTYPES`; `shape` has None for a dimension of any size, and is None
    itself when the rank is unknown. Its JSON is {"dtype", "shape"}: the name is the key it is
    listed under. Raises SignatureError for a name a signature cannot have or an unknown dtype.
    """

    name: str = field(metadata=json_meta(skip=True))
    dtype: str
    shape: Shape = field(metadata=json_meta(value=_shape_json))

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise SignatureError(
                f"tensor name {self.name!r} is not valid: expected letters, digits, '_', '.', "
                "'-' or '/', starting with a letter or '_'"
            )
        if self.dtype not in DTYPES:
            raise SignatureError(
                f"tensor {self.name!r}: unknown dtype {self.dtype!r}, expected one of "
                f"{', '.join(DTYPES)}"
            )

    @property
    def np_dtype(self) -> np.dtype:
        return DTYPES[self.dtype]

    @property
    def batch_free(self) -> bool:
        """Its first dimension takes any size: the batch, for the servers and samples."""
        return bool(self.shape) and self.shape[0] is None  # type: ignore[index]

    def shape_text(self) -> str:
        """The shape as users write it: `[-1, 784]`, or `*` for an unknown rank."""
        if self.shape is None:
            return "*"
        return "[" + ", ".join("-1" if d is None else str(d) for d in self.shape) + "]"

    def describe(self) -> str:
        if self.shape is None:
            return f"{self.dtype} of unknown rank"
        return f"{self.dtype} of shape {self.shape_text()}"


@dataclass(frozen=True)
class ImageFormat(JsonResult):
    """Encoded images an input takes: their `format` (`jpeg`, `png`, `bmp` or `gif`, as the
    model's decode op reads them) and the `height` and `width` generated ones get."""

    format: str
    height: int
    width: int

    def text(self) -> str:
        return f"{self.format.upper()} images of {self.height}x{self.width}"


@dataclass(frozen=True)
class Vocabulary(JsonResult):
    """The keys a lookup table maps (a StringLookup's, IntegerLookup's or TextVectorization's
    vocabulary, a table over a vocabulary file): its first `words` (by id: the most frequent
    first, for an adapted layer), of `size` in all; `phrases` when the model splits its input
    into words before the lookup (sentences of these words, else one word per value);
    `integers` when the keys are integers (an IntegerLookup's), written here in decimal."""

    words: tuple[str, ...]
    size: int
    phrases: bool = False
    integers: bool = False

    @property
    def unit(self) -> str:
        """What its keys are called in messages: words, or keys for integers."""
        return "keys" if self.integers else "words"

    def text(self) -> str:
        what = "phrases of the words" if self.phrases else self.unit
        kept = f"the first {len(self.words):,} " if len(self.words) < self.size else ""
        return f"{what} of its vocabulary ({kept}{self.size:,} {self.unit})"


@dataclass(frozen=True)
class ValueRange(JsonResult):
    """The values an input takes, `low` to `high` inclusive, and who said so (`why`). A string
    input the model decodes as images has its `image`: each value is one encoded image whose
    pixels take `low` to `high`; one the model looks up in a table has its `vocabulary`."""

    low: float
    high: float
    why: str = field(default="", compare=False)
    image: ImageFormat | None = field(default=None, metadata=json_meta(omit_none=True))
    vocabulary: Vocabulary | None = field(
        default=None, compare=False, metadata=json_meta(omit_none=True)
    )

    def __post_init__(self) -> None:
        if not (math.isfinite(self.low) and math.isfinite(self.high)) or self.low > self.high:
            raise SignatureError(
                f"value range {self.low:g}:{self.high:g} is not valid: expected LOW:HIGH with "
                "finite numbers, LOW <= HIGH"
            )

    def text(self) -> str:
        """As `--input-range` takes it: `0:30521`."""
        return f"{self.low:g}:{self.high:g}"


def shape_of_tensor_info(info: Any) -> Shape:
    """The shape a SignatureDef's TensorInfo declares. A TensorInfo with no `tensor_shape` at all
    (TF 1.0 wrote them so) or with `unknown_rank` has an unknown shape (None), never a scalar."""
    if not info.HasField("tensor_shape") or info.tensor_shape.unknown_rank:
        return None
    return tuple(None if d.size < 0 else d.size for d in info.tensor_shape.dim)


def dtype_name(enum: int) -> str:
    """Our name for a DataType enum (`float32`), else TensorFlow's (`complex64`, `float_ref`).
    TensorFlow's protobuf module is imported only for dtypes we do not serve."""
    if enum in _ENUM_DTYPES:
        return _ENUM_DTYPES[enum]
    from tensorflow.core.framework import types_pb2

    try:
        return types_pb2.DataType.Name(enum).removeprefix("DT_").lower()
    except ValueError:
        return f"{enum} (not a DataType)"


def spec_from_tensor_info(name: str, info: Any) -> TensorSpec:
    """Our TensorSpec for a SignatureDef's TensorInfo: the one conversion, for the servers, the
    load test's payloads and `inspect` alike. A reference dtype (`float_ref`) is its base dtype,
    the dtype its values have. Raises SignatureError for a dtype no server here decodes."""
    enum = info.dtype - _REF_OFFSET if info.dtype > _REF_OFFSET else info.dtype
    dtype = _ENUM_DTYPES.get(enum)
    if dtype is None:
        raise SignatureError(
            f"tensor {name!r} has dtype {dtype_name(info.dtype)}, which graphserve does not "
            f"serve: supported are {', '.join(DTYPES)}"
        )
    return TensorSpec(name, dtype, shape_of_tensor_info(info))


def parse_shape(text: str) -> Shape:
    """Parse `-1,784` (or `[-1, 784]`, or `` for a scalar) into a shape; -1 or ? means any
    size, and `*` alone an unknown rank."""
    if text.strip() == "*":
        return None
    body = text.strip().strip("[]()").strip()
    if not body:
        return ()
    dims: list[int | None] = []
    for part in body.split(","):
        token = part.strip()
        if token in ("-1", "?", "None"):
            dims.append(None)
            continue
        try:
            value = int(token)
        except ValueError:
            raise SignatureError(
                f"shape {text!r}: dimension {token!r} is not an integer (use -1 for any size)"
            ) from None
        if value < 0:
            raise SignatureError(f"shape {text!r}: dimension {value} is negative (use -1 for any)")
        dims.append(value)
    return tuple(dims)


def parse_input_spec(text: str) -> TensorSpec:
    """Parse `NAME:DTYPE:SHAPE`, e.g. `images:float32:-1,784` (the export's `--input`).

    The dtype is a name from `DTYPES`, in any case; the shape is read as `parse_shape` reads it
    (-1 or ? for a dimension of any size, `*` for an unknown rank, nothing for a scalar). Raises
    SignatureError naming what does not fit.
    """
    parts = text.split(":")
    if len(parts) != 3:
        raise SignatureError(
            f"--input {text!r}: expected NAME:DTYPE:SHAPE, e.g. images:float32:-1,784"
        )
    name, dtype, shape = (p.strip() for p in parts)
    return TensorSpec(name=name, dtype=dtype.lower(), shape=parse_shape(shape))


def check_unique(specs: Sequence[TensorSpec]) -> None:
    seen: set[str] = set()
    for spec in specs:
        if spec.name in seen:
            raise SignatureError(f"input name {spec.name!r} is given more than once")
        seen.add(spec.name)
