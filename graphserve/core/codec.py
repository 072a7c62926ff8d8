"""The tensor codec: numpy ⇄ TensorProto (gRPC) and numpy ⇄ TF Serving JSON (REST).

One codec for the servers and the load test alike. It never calls TensorFlow's Python tensor
utilities (`tf.make_ndarray`, `tf.make_tensor_proto`): numeric tensors travel as raw bytes in
`tensor_content` and are decoded with `np.frombuffer`, typed `*_val` fields are read when a client
sends those instead.

JSON follows TF Serving's REST API (g3doc/api_rest.md): the row format (`instances`) and the
columnar format (`inputs`), `{"b64": "..."}` for binary strings, and responses as `predictions`
or `outputs`. Numbers follow its reader (util/json_tensor.cc, rapidjson): a number is read as
the nearest double, and a text past double's range is a parse error; a float input takes the
double cast to its dtype, so a finite number past float32's range is ±inf and digits past its
precision are rounded away, silently. `decode_json_request(..., strict_numbers=True)` refuses
a finite number that would become ±inf instead (`serve --strict-json-numbers`).
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import orjson
from tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2

from graphserve.core import fastjson
from graphserve.core.defaults import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_JSON_DEPTH
from graphserve.core.errors import InvalidInput
from graphserve.core.signature import DTYPE_ENUMS, DTYPES, Shape, TensorSpec

__all__ = [
    "DTYPE_TO_ENUM",
    "ENUM_TO_DTYPE",
    "array_from_proto",
    "array_to_proto",
    "as_bytes",
    "decode_json_request",
    "encode_json_response",
    "encode_predict_response",
    "json_depth",
    "numpy_dtype_name",
    "parse_json_body",
    "parse_predict_body",
    "shape_hint",
    "signature_name_of",
    "tensor_json_values",
    "tf_type_name",
    "to_json_value",
    "validate_inputs",
]

DTYPE_TO_ENUM: dict[str, int] = DTYPE_ENUMS
ENUM_TO_DTYPE: dict[int, str] = {v: k for k, v in DTYPE_TO_ENUM.items()}

# Which repeated field of TensorProto carries each dtype when `tensor_content` is not used.
_VAL_FIELD: dict[str, str] = {
    "float16": "half_val",
    "float32": "float_val",
    "float64": "double_val",
    "int8": "int_val",
    "int16": "int_val",
    "int32": "int_val",
    "uint8": "int_val",
    "uint16": "int_val",
    "int64": "int64_val",
    "bool": "bool_val",
    "string": "string_val",
}


def shape_proto(shape: Shape) -> tensor_shape_pb2.TensorShapeProto:
    """TensorFlow's shape proto: -1 for a dimension of any size, `unknown_rank` for None."""
    if shape is None:
        return tensor_shape_pb2.TensorShapeProto(unknown_rank=True)
    return tensor_shape_pb2.TensorShapeProto(
        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=-1 if d is None else d) for d in shape]
    )


# ---------------------------------------------------------------------------------------------
# TensorProto


def array_to_proto(
    array: np.ndarray, dtype: str | None = None, *, typed_fields: bool = False
) -> tensor_pb2.TensorProto:
    """Encode `array` as a TensorProto: raw `tensor_content` for numbers (compact, the fast path
    for requests), or with `typed_fields` the typed `*_val` field of its dtype, as TF Serving
    writes every Predict response (Tensor::AsProtoField): clients that read `float_val` work.
    Strings always travel in `string_val`."""
    name = dtype or numpy_dtype_name(array)
    proto = tensor_pb2.TensorProto(dtype=DTYPE_TO_ENUM[name], tensor_shape=shape_proto(array.shape))
    if name == "string":
        proto.string_val.extend(as_bytes(v) for v in array.reshape(-1))
    elif not typed_fields:
        proto.tensor_content = np.ascontiguousarray(array, dtype=DTYPES[name]).tobytes()
    elif name == "float16":  # half_val holds each half's 16 bits
        proto.half_val.extend(np.asarray(array, np.float16).reshape(-1).view(np.uint16).tolist())
    else:
        getattr(proto, _VAL_FIELD[name]).extend(
            np.asarray(array, DTYPES[name]).reshape(-1).tolist()
        )
    return proto


# ---------------------------------------------------------------------------------------------
# PredictResponse, written out


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(tag: int, payload: bytes) -> bytes:
    """A length-delimited field: its tag byte (field number << 3 | 2), length, payload."""
    return bytes((tag,)) + _varint(len(payload)) + payload


# The typed fields whose packed encoding is the array's own little-endian bytes: TensorProto's
# float_val (5) and double_val (6), as tag bytes (field << 3 | 2).
_RAW_TYPED = {"float32": (0x2A, "<f4"), "float64": (0x32, "<f8")}


def encode_predict_response(
    model: str,
    version: int,
    signature_name: str,
    outputs: Mapping[str, tuple[np.ndarray, str]],
) -> bytes | None:
    """The serialized PredictResponse that `array_to_proto(..., typed_fields=True)` per output
    and a ModelSpec would make, written without building a message: the model's name, version
    and signature, and each output (array, declared dtype) in its typed field. None when an
    output is not float32 or float64, the dtypes whose typed field is the array's own bytes
    (the caller then builds the message). What protobuf parses from it equals that message
    (tests/test_codec.py)."""
    entries = []
    for name, (array, dtype) in outputs.items():
        raw = _RAW_TYPED.get(dtype)
        if raw is None:
            return None
        tag, layout = raw
        values = np.asarray(array, dtype=layout)  # tobytes() is C order, any strides
        dims = b"".join(_field(0x12, b"\x08" + _varint(d) if d else b"") for d in values.shape)
        tensor = b"\x08" + _varint(DTYPE_TO_ENUM[dtype]) + _field(0x12, dims)
        if values.size:
            tensor += _field(tag, values.tobytes())
        entries.append(_field(0x0A, _field(0x0A, name.encode()) + _field(0x12, tensor)))
    spec = (_field(0x0A, model.encode()) if model else b"") + _field(
        0x12, b"\x08" + _varint(version) if version else b""
    )
    if signature_name:
        spec += _field(0x1A, signature_name.encode())
    return b"".join(entries) + _field(0x12, spec)


MAX_RANK = 64  # numpy's limit on dimensions (TensorFlow's is 254; no served model comes close)


def array_from_proto(
    proto: tensor_pb2.TensorProto, input_name: str = "", max_bytes: int = DEFAULT_MAX_BODY_BYTES
) -> np.ndarray:
    """Decode a TensorProto; raises InvalidInput when its content does not match its shape.

    A single typed value fills the whole shape, as in TensorFlow, up to `max_bytes` (the
    server's message limit): a few bytes on the wire must not ask for gigabytes.
    """
    what = f"input {input_name!r}" if input_name else "tensor"
    if proto.dtype not in ENUM_TO_DTYPE:
        raise InvalidInput(
            f"{what} has dtype {_enum_name(proto.dtype)}, which this server does not decode; "
            f"supported: {', '.join(DTYPES)}"
        )
    name = ENUM_TO_DTYPE[proto.dtype]
    shape = tuple(d.size for d in proto.tensor_shape.dim)
    if len(shape) > MAX_RANK:
        raise InvalidInput(f"{what} has rank {len(shape)}; at most {MAX_RANK} is supported")
    if any(d < 0 for d in shape):
        raise InvalidInput(f"{what} has an unknown dimension in its shape {list(shape)}")
    if any(d > max_bytes for d in shape):  # even an empty tensor: numpy cannot shape it
        raise InvalidInput(
            f"{what} has shape {list(shape)}: a dimension past the {max_bytes}-byte message limit"
        )
    count = math.prod(shape)
    # Each read of a bytes field copies it out of the message: read it once.
    content = proto.tensor_content
    if content:
        dt = DTYPES[name]
        if name == "string" or len(content) != count * dt.itemsize:
            raise InvalidInput(
                f"{what}: tensor_content holds {len(content)} bytes, expected "
                f"{count * dt.itemsize} for {name} of shape {list(shape)}"
            )
        return np.frombuffer(content, dtype=dt).reshape(shape)
    values = getattr(proto, _VAL_FIELD[name])
    if name == "string":
        flat = np.empty(len(values), dtype=object)
        flat[:] = list(values)
    elif name == "float16":
        flat = np.asarray(values, dtype=np.uint16).view(np.float16)
    else:
        flat = np.asarray(values, dtype=DTYPES[name])
    if flat.size == count:
        return flat.reshape(shape)
    # TensorFlow fills a tensor from a single value (tf.make_tensor_proto does the same).
    if flat.size == 1:
        if count * flat.itemsize > max_bytes:
            raise InvalidInput(
                f"{what}: one value would fill shape {list(shape)}, {count * flat.itemsize} "
                f"bytes, more than the {max_bytes}-byte message limit"
            )
        return np.full(shape, flat[0], dtype=flat.dtype)
    raise InvalidInput(
        f"{what}: {_VAL_FIELD[name]} holds {flat.size} values, expected {count} for shape "
        f"{list(shape)}"
    )


def _enum_name(enum: int) -> str:
    try:
        return types_pb2.DataType.Name(enum)
    except ValueError:  # not a DataType at all
        return f"{enum} (not a DataType)"


def numpy_dtype_name(array: np.ndarray) -> str:
    if array.dtype.kind in "OSU":
        return "string"
    for name, dt in DTYPES.items():
        if dt == array.dtype:
            return name
    raise TypeError(f"numpy dtype {array.dtype} has no TensorFlow Serving dtype")


def as_bytes(value: object) -> bytes:
    """A string tensor element as bytes (numpy's bytes_ is bytes; text is UTF-8 encoded)."""
    return value if isinstance(value, bytes) else str(value).encode()


# ---------------------------------------------------------------------------------------------
# Validation against a signature


def validate_inputs(
    inputs: Mapping[str, np.ndarray], specs: Mapping[str, TensorSpec]
) -> dict[str, np.ndarray]:
    """Check names and dtypes against the signature; returns the inputs by name.

    Shapes are the graph's business, as in TF Serving: a request whose shape the graph cannot
    take fails there, and `shape_hint` adds what the signature declares to that error.
    Problems are reported in name order, so a request gets the same message from every server.
    """
    extra = sorted(set(inputs) - set(specs))
    missing = sorted(set(specs) - set(inputs))
    if extra or missing:
        raise InvalidInput(_names_mismatch(sorted(inputs), specs, extra, missing))
    checked: dict[str, np.ndarray] = {}
    for name in sorted(specs):
        spec = specs[name]
        array = inputs[name]
        got = numpy_dtype_name(array)
        if got != spec.dtype:  # ours, then TensorFlow's words, as TF Serving passes them on
            arg = sorted(specs).index(name)
            raise InvalidInput(
                f"input {name!r} expects {spec.describe()}, got {got} of shape "
                f"{list(array.shape)}: Expects arg[{arg}] to be {tf_type_name(spec.dtype)} but "
                f"{tf_type_name(got)} is provided"
            )
        checked[name] = array
    return checked


def _names_mismatch(
    sent: list[str], specs: Mapping[str, TensorSpec], extra: list[str], missing: list[str]
) -> str:
    """Ours first (which input, what was expected), then TF Serving's own sentence
    (predict_util.cc), which its tests and clients match on."""
    if extra:
        ours = f"unknown input {extra[0]!r}: this signature takes {_names(specs)}"
    elif len(missing) == 1:
        ours = f"missing input {missing[0]!r}: expected {specs[missing[0]].describe()}"
    else:
        ours = f"missing inputs {', '.join(map(repr, missing))}: expected all of them"
    return (
        f"{ours}. input size does not match signature: {len(sent)}!={len(specs)} "
        f"len({{{','.join(sent)}}}) != len({{{','.join(sorted(specs))}}}). Sent extra: "
        f"{{{','.join(extra)}}}. Missing but required: {{{','.join(missing)}}}."
    )


def shape_hint(inputs: Mapping[str, np.ndarray], specs: Mapping[str, TensorSpec]) -> str:
    """What the signature declares for each input whose shape does not fit it ("" when all
    fit): added to the graph's own error, which names tensors, not the signature's inputs."""
    hints = []
    for name in sorted(inputs):
        spec = specs.get(name)
        if spec is None or spec.shape is None or _shape_fits(inputs[name].shape, spec.shape):
            continue
        shape = inputs[name].shape
        hint = f"input {name!r} is declared {spec.describe()}, got shape {list(shape)}"
        fixed = spec.shape[0] if spec.shape else None
        batch_only = len(shape) == len(spec.shape) and _shape_fits(shape[1:], spec.shape[1:])
        if fixed is not None and batch_only and shape[0] != fixed:
            hint += f": the model's batch dimension is fixed at {fixed} rows"
        hints.append(hint)
    return "; ".join(hints)


def _shape_fits(shape: tuple[int, ...], expected: tuple[int | None, ...]) -> bool:
    if len(shape) != len(expected):
        return False
    return all(e is None or e == s for s, e in zip(shape, expected, strict=True))


def _names(specs: Mapping[str, TensorSpec]) -> str:
    return ", ".join(repr(n) for n in sorted(specs))


# ---------------------------------------------------------------------------------------------
# JSON (REST)


# A JSON string, escapes included (the unrolled form: no backtracking on long strings).
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
_LONG_DIGITS = re.compile(rb"[0-9]{19}")  # a run of digits that may be an integer past 64 bits
# A number whose text may be past double's range: an exponent of three digits, or 300 digits in
# a row. Only a body with one has the standard library's floats checked (a call per float).
_HUGE_NUMBER = re.compile(rb"[eE]\+?0*[1-9][0-9]{2}|[0-9]{300}")
NUMBER_TOO_BIG = "JSON Parse error: Number too big to be stored in double"  # rapidjson's words


def json_depth(body: bytes) -> int:
    """How deeply the arrays and objects of a JSON text nest, found without parsing it: strings
    are cut out, then the brackets are counted (numpy, so a 64 MiB body takes milliseconds)."""
    brackets = _JSON_STRING.sub(b"", body).translate(None, _NOT_BRACKETS)
    if not brackets:
        return 0
    codes = np.frombuffer(brackets, dtype=np.uint8)
    steps = np.where((codes == ord("[")) | (codes == ord("{")), 1, -1)
    return int(steps.cumsum().max())


def parse_json_body(body: bytes, max_depth: int = DEFAULT_MAX_JSON_DEPTH) -> dict[str, Any]:
    """The request body as a JSON object; raises InvalidInput saying what is wrong with it.

    NaN, Infinity and -Infinity are accepted, as TF Serving accepts them; a number past
    double's range (1e400) is refused in its words ("Number too big"). Arrays and objects
    nested deeper than `max_depth` are refused before parsing. orjson parses; a body it refuses
    (NaN and the infinities, anything that is not JSON) or may read otherwise (a 19-digit run:
    an integer past 64 bits) is parsed by the standard library, which reads those tokens and
    words the errors.
    """
    if not body.strip():
        raise InvalidInput(
            "JSON Parse error: The document is empty: expected a JSON object with 'instances' "
            "or 'inputs'"
        )
    depth = json_depth(body)
    if depth > max_depth:
        raise InvalidInput(
            f"request body nests JSON arrays and objects {depth} deep; the limit is "
            f"{max_depth} (--max-json-depth)"
        )
    try:
        # orjson reads an integer past 64 bits as a float; the standard library keeps it an
        # int (out of range for an integer input, not a float): such bodies go there.
        request = (
            _parse_stdlib(body, max_depth) if _LONG_DIGITS.search(body) else orjson.loads(body)
        )
    except orjson.JSONDecodeError:
        request = _parse_stdlib(body, max_depth)
    if not isinstance(request, dict):
        raise InvalidInput("request body must be a JSON object with 'instances' or 'inputs'")
    return request


def _finite_float(text: str) -> float:
    """A float literal as the standard library reads it, but InvalidInput past double's range,
    where TF Serving's reader (rapidjson) refuses it and the standard library reads ±inf (NaN
    and Infinity, the tokens, are read by both)."""
    value = float(text)
    if math.isinf(value):
        number = text if len(text) <= 40 else text[:40] + "..."
        raise InvalidInput(f"{NUMBER_TOO_BIG}: {number} is past float64's range")
    return value


def _parse_stdlib(body: bytes, max_depth: int) -> Any:
    floats = _finite_float if _HUGE_NUMBER.search(body) else None
    try:
        return json.loads(body, parse_float=floats)  # (InvalidInput from floats goes through)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an int past 4300 digits
        # TF Serving's parser (rapidjson) calls a token that starts no JSON value "Invalid value"
        what = "Invalid value: " if str(exc).startswith("Expecting value") else ""
        raise InvalidInput(
            f"JSON Parse error: {what}request body is not valid JSON: {exc}"
        ) from None
    except RecursionError:  # a limit above the interpreter's own
        raise InvalidInput(
            f"request body nests JSON too deeply for this server; the limit is {max_depth}"
        ) from None


def parse_predict_body(body: bytes, max_depth: int = DEFAULT_MAX_JSON_DEPTH) -> dict[str, Any]:
    """A predict body as `parse_json_body` reads it, except that its tensors, when they are
    numeric arrays (`instances`, `inputs`, or the values of an `inputs` object), come as numpy
    arrays read straight from the text (core.fastjson), not as lists of Python numbers: a
    224×224×3 image decodes in a few milliseconds instead of tens. `decode_json_request` takes
    either. Any other body, errors included, is `parse_json_body`'s."""
    fast = fastjson.read_predict_body(body, max_depth)
    return fast if fast is not None else parse_json_body(body, max_depth)


def signature_name_of(request: Mapping[str, Any]) -> str:
    """The body's `signature_name` ("" for the default); TF Serving refuses any other type."""
    name = request.get("signature_name", "")
    if not isinstance(name, str):
        raise InvalidInput(
            f"'signature_name' key must be a string value. Got {json.dumps(name)[:64]}"
        )
    return name


def decode_json_request(
    request: Mapping[str, Any], specs: Mapping[str, TensorSpec], *, strict_numbers: bool = False
) -> tuple[dict[str, np.ndarray], str]:
    """Arrays from a parsed TF Serving predict body, and its format: "row" (`instances`) or
    "columnar" (`inputs`). Tensors may be JSON lists or, from `parse_predict_body`, numpy
    arrays; both decode alike.

    A finite number past a float input's range becomes ±inf, as in TF Serving; with
    `strict_numbers` it is refused (InvalidInput), as is everything that does not fit."""
    has_rows, has_cols = "instances" in request, "inputs" in request
    if has_rows and has_cols:
        raise InvalidInput(
            "Not formatted correctly expecting only one of 'inputs' or 'instances' keys to "
            "exist: request has both 'instances' and 'inputs', use one format"
        )
    if has_rows:
        return _decode_rows(request["instances"], specs, strict_numbers), "row"
    if has_cols:
        return _decode_columns(request["inputs"], specs, strict_numbers), "columnar"
    raise InvalidInput("request must have 'instances' (row format) or 'inputs' (columnar format)")


def _decode_rows(
    instances: Any, specs: Mapping[str, TensorSpec], strict: bool
) -> dict[str, np.ndarray]:
    if isinstance(instances, np.ndarray):  # rows of numbers, read by parse_predict_body
        if len(specs) != 1:
            raise InvalidInput(
                f"each instance must be an object keyed by input name: this signature takes "
                f"{_names(specs)}"
            )
        (name,) = specs
        return {name: _to_array(instances, specs[name], strict)}
    if not isinstance(instances, list):
        raise InvalidInput(f"'instances' must be a list of rows, got {type(instances).__name__}")
    if not instances:
        raise InvalidInput("No values in 'instances' array: send at least one row")
    objects = [isinstance(row, dict) and not _is_b64(row) for row in instances]
    if any(objects) and not all(objects):  # TF Serving's words, by what the first row is
        first, other = ("object", "list") if objects[0] else ("value/list", "object")
        raise InvalidInput(
            f"Expecting {first} but got {other}: instance {objects.index(not objects[0])} is "
            f"{'not ' if objects[0] else ''}an object keyed by input name, instance 0 is "
            f"{'' if objects[0] else 'not '}one; every instance must be of one kind"
        )
    named = all(objects)
    if not named:
        if len(specs) != 1:
            raise InvalidInput(
                f"each instance must be an object keyed by input name: this signature takes "
                f"{_names(specs)}"
            )
        (name,) = specs
        return {name: _to_array(instances, specs[name], strict)}
    columns: dict[str, list[Any]] = {}
    for i, row in enumerate(instances):
        if set(row) != set(instances[0]):
            raise InvalidInput(
                f"instance {i} has inputs {sorted(row)}, instance 0 has {sorted(instances[0])}: "
                "every instance must name the same inputs"
            )
        for key, value in row.items():
            columns.setdefault(key, []).append(value)
    return {key: _to_array(values, specs.get(key), strict, key) for key, values in columns.items()}


def _decode_columns(
    inputs: Any, specs: Mapping[str, TensorSpec], strict: bool
) -> dict[str, np.ndarray]:
    if isinstance(inputs, dict) and not _is_b64(inputs):
        return {key: _to_array(value, specs.get(key), strict, key) for key, value in inputs.items()}
    if len(specs) != 1:
        raise InvalidInput(
            f"'inputs' must be an object keyed by input name: this signature takes {_names(specs)}"
        )
    (name,) = specs
    return {name: _to_array(inputs, specs[name], strict)}


def _is_b64(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"b64"}


def _to_array(value: Any, spec: TensorSpec | None, strict: bool, name: str = "") -> np.ndarray:
    if spec is None:
        # Unknown names are reported by validate_inputs with the list of valid ones.
        return np.asarray(0)
    if isinstance(value, np.ndarray):
        if spec.dtype not in ("string", "bool"):
            return _cast(value, spec, strict)
        value = value.tolist()  # numbers for a string or bool input: its errors speak of lists
    if spec.dtype == "string":
        return _string_array(value, spec.name)
    try:
        array = np.asarray(value)
    except ValueError:
        raise InvalidInput(
            f"input {spec.name!r} is ragged ({_ragged(value)}): every row must have the same "
            f"shape, expected {spec.describe()}"
        ) from None
    if array.dtype.kind in "US":
        raise InvalidInput(
            f"input {spec.name!r} expects {spec.describe()}, got strings (JSON value not of "
            f"expected type: {tf_type_name(spec.dtype)})"
        )
    return _cast(array, spec, strict)


# TensorFlow's own names for dtypes, as TF Serving's messages use them.
_TF_TYPE_NAMES = {"float32": "float", "float64": "double", "float16": "half"}


def tf_type_name(dtype: str) -> str:
    """TensorFlow's name of a dtype (DataTypeString: `float`, `double`, `int32`), as its
    messages and TF Serving's spell it."""
    return _TF_TYPE_NAMES.get(dtype, dtype)


def _ragged(value: Any) -> str:
    """Why nested lists do not make a tensor, in TF Serving's words: rows nested to different
    depths ("Expecting shape") or lists of different lengths ("Expecting tensor size")."""
    level = [value]
    while level:
        depths = {_depth(v) for v in level}
        if len(depths) > 1:
            return f"Expecting shape: rows nested {min(depths)} and {max(depths)} deep"
        lists = [v for v in level if isinstance(v, list)]
        sizes = sorted({len(v) for v in lists})
        if len(sizes) > 1:
            return f"Expecting tensor size: lists of {sizes[0]} and {sizes[-1]} values at one depth"
        level = [x for v in lists for x in v]
    return "Expecting shape"


def _depth(value: Any) -> int:
    """How deep lists nest, following first elements (how TF Serving reads a row's shape)."""
    depth = 0
    while isinstance(value, list):
        depth += 1
        value = value[0] if value else None
    return depth


def _cast(array: np.ndarray, spec: TensorSpec, strict: bool) -> np.ndarray:
    target = spec.np_dtype
    if array.dtype.kind == "O":
        array = _numbers(array, spec)
    kind = array.dtype.kind
    if spec.dtype == "bool":
        if kind != "b":
            raise InvalidInput(f"input {spec.name!r} expects bool values (true/false)")
        return array
    if kind == "b":
        raise InvalidInput(f"input {spec.name!r} expects {spec.describe()}, got true/false")
    if target.kind in "iu":
        if kind == "f":
            raise InvalidInput(
                f"input {spec.name!r} expects {spec.describe()}, got floating-point values "
                f"(JSON value not of expected type: {tf_type_name(spec.dtype)})"
            )
        info = np.iinfo(target)
        if array.size and (array.min() < info.min or array.max() > info.max):
            raise _out_of_range(spec, info.min, info.max)
        return array.astype(target, copy=False)
    # TF Serving casts the double it read (rapidjson's GetFloat()): a finite number past the
    # float's range becomes ±inf there, and so it does here unless `strict`
    # (--strict-json-numbers) refuses it.
    with np.errstate(over="ignore"):
        cast = array.astype(target, copy=False)
    if strict and cast is not array and _overflowed(array, cast):
        limit = float(np.finfo(target).max)
        raise InvalidInput(
            f"input {spec.name!r}: values out of range for {spec.dtype} [{-limit}, {limit}] "
            "(--strict-json-numbers; TF Serving reads such a number as ±inf)"
        )
    return cast


def _overflowed(array: np.ndarray, cast: np.ndarray) -> bool:
    """Some finite value of `array` is infinite in `cast`."""
    if np.isfinite(cast).all():
        return False
    return bool((np.isfinite(array) & ~np.isfinite(cast)).any())


def _out_of_range(spec: TensorSpec, low: int, high: int) -> InvalidInput:
    # ours, then TF Serving's words: it refuses an integer that does not fit (json_tensor.cc)
    return InvalidInput(
        f"input {spec.name!r}: values out of range for {spec.dtype} [{low}, {high}] (JSON value "
        f"not of expected type: {spec.dtype})"
    )


def _numbers(array: np.ndarray, spec: TensorSpec) -> np.ndarray:
    """An object array numpy built from JSON numbers it could not type (integers past int64),
    as numbers; anything else (null, {"b64": ...}, objects) is refused by its JSON type."""
    values = array.reshape(-1)
    for value in values:
        if _is_b64(value):
            raise InvalidInput(
                f'input {spec.name!r} is {spec.dtype}: {{"b64": ...}} is only for string inputs'
            )
        if not isinstance(value, int | float) or isinstance(value, bool):
            what = "null" if value is None else type(value).__name__
            raise InvalidInput(f"input {spec.name!r} expects {spec.describe()}, got {what}")
    if spec.np_dtype.kind in "iu":  # only integers past int64 make numpy fall back to objects
        info = np.iinfo(spec.np_dtype)
        raise _out_of_range(spec, info.min, info.max)
    try:
        return np.array(values.tolist(), dtype=np.float64).reshape(array.shape)
    except OverflowError:  # an integer past double's range: TF Serving's reader refuses it
        raise InvalidInput(
            f"{NUMBER_TOO_BIG}: input {spec.name!r} has an integer past float64's range"
        ) from None


def _string_array(value: Any, name: str) -> np.ndarray:
    def convert(v: Any) -> Any:
        if isinstance(v, list):
            return [convert(x) for x in v]
        if _is_b64(v):
            try:
                return base64.b64decode(v["b64"], validate=True)
            except (ValueError, TypeError):  # binascii.Error, or text that is not ASCII
                raise InvalidInput(f"input {name!r}: 'b64' value is not valid base64") from None
        if isinstance(v, str):
            try:
                return v.encode()
            except UnicodeEncodeError as exc:  # JSON's \ud800 escapes decode to lone surrogates
                raise InvalidInput(
                    f"input {name!r}: a string is not valid Unicode: {exc}"
                ) from None
        raise InvalidInput(f"input {name!r} expects strings, got {type(v).__name__}")

    converted = convert(value)
    try:
        array = np.array(converted, dtype=object)
    except ValueError:
        array = None
    # numpy builds an array of lists from ragged input rather than failing.
    if array is None or any(isinstance(v, list) for v in array.reshape(-1)):
        raise InvalidInput(
            f"input {name!r} is ragged ({_ragged(converted)}): every row must have the same shape"
        )
    return array


_SHORT_FLOATS = (np.dtype(np.float32), np.dtype(np.float16))


def encode_json_response(outputs: Mapping[str, np.ndarray], row_format: bool) -> bytes:
    """TF Serving's response: `predictions` (rows) or `outputs` (columns).

    A single output is written bare; several become objects keyed by output name (per row in the
    row format). Strings are UTF-8 text, or `{"b64": ...}` when the output name ends in `_bytes`
    or the bytes are not UTF-8. Numbers follow TF Serving's rules (see `tensor_json_values`).
    """
    values, fast = tensor_json_values(outputs)
    if not row_format:
        body: Any = next(iter(values.values())) if len(values) == 1 else values
        return _dump({"outputs": body}, fast)
    if len(values) == 1:
        return _dump({"predictions": next(iter(values.values()))}, fast)
    batch = {_rows(v) for v in values.values()}
    if len(batch) != 1 or -1 in batch:
        raise InvalidInput(
            "outputs do not share a batch dimension, so they cannot be returned as rows: "
            "use the columnar format ('inputs')"
        )
    (rows,) = batch
    predictions = [{name: value[i] for name, value in values.items()} for i in range(rows)]
    return _dump({"predictions": predictions}, fast)


def tensor_json_values(arrays: Mapping[str, np.ndarray]) -> tuple[dict[str, Any], bool]:
    """Each array as the JSON value TF Serving writes for it, and whether the body holding them
    may be written fast (orjson, via `core.fastjson.dump`).

    Floats take the fewest digits that read back as the same float (2.05 for a float32, not
    2.049999952316284), whole floats keep `.0`; NaN and the infinities are the bare tokens
    `NaN`, `Infinity`, `-Infinity`. orjson writes all of that from the numpy arrays themselves,
    except the non-finite tokens (it writes `null`): with one of those in any array, every
    value is a list (`to_json_value`) and fast is False, for the standard library's writer.
    """
    if any(a.dtype.kind == "f" and not np.isfinite(a).all() for a in arrays.values()):
        return {name: to_json_value(name, array) for name, array in arrays.items()}, False
    values = {}
    for name, array in arrays.items():
        value = fastjson.orjson_value(array)
        values[name] = to_json_value(name, array) if value is None else value
    return values, True


def _dump(body: Any, fast: bool) -> bytes:
    return fastjson.dump(body) if fast else json.dumps(body).encode()


def _rows(value: Any) -> int:
    """A JSON value's batch size: its length, or -1 for a scalar."""
    if isinstance(value, np.ndarray):
        return value.shape[0] if value.ndim else -1
    return len(value) if isinstance(value, list) else -1


def to_json_value(name: str, array: np.ndarray) -> Any:
    """`array` as Python lists and scalars for the standard library's JSON writer (TF Serving's
    number and string rules, as `tensor_json_values` says)."""
    if array.dtype in _SHORT_FLOATS:
        # The fewest digits that read back as the same float32 (2.05, not 2.049999952316284,
        # its float64 expansion), as TF Serving writes floats: numpy's str() is that shortest
        # form, and the float64 parsed from it prints the same digits.
        return array.astype(str).astype(np.float64).tolist()
    if array.dtype.kind not in "OSU":
        return array.tolist()
    as_b64 = name.endswith("_bytes")

    def text(v: Any) -> Any:
        raw = as_bytes(v)
        if not as_b64:
            try:
                return raw.decode()
            except UnicodeDecodeError:
                pass
        return {"b64": base64.b64encode(raw).decode()}

    return np.frompyfunc(text, 1, 1)(array).tolist() if array.ndim else text(array.item())
