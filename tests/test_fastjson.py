"""Fast JSON (graphserve/core/fastjson.py behind core.codec) keeps TF Serving's number rules and
reads every body exactly as the standard library's path does.

- decoding: a decimal becomes the nearest float64, then float32 by a cast, as TF Serving's
  rapidjson GetFloat() does (past float32's range: +-inf; past double's: refused, as rapidjson
  refuses it); the fast path (pysimdjson) and the slow one (the standard library) give the same
  arrays, bit for bit, or the same error;
- encoding: a float32 in the fewest digits that read back as the same float32, whole floats
  with `.0`, float64 in its shortest form, NaN and the infinities as bare tokens.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphserve.core import fastjson
from graphserve.core.codec import (
    decode_json_request,
    encode_json_response,
    parse_json_body,
    parse_predict_body,
)
from graphserve.core.errors import InvalidInput
from graphserve.core.signature import TensorSpec

RNG = np.random.default_rng(15)


def _spec(dtype: str, rank: int = 2) -> dict[str, TensorSpec]:
    return {"x": TensorSpec("x", dtype, (None,) * rank)}


def _both(body: bytes, specs: dict[str, TensorSpec], strict: bool = False) -> tuple[Any, Any]:
    """What the fast and the slow path make of `body`: the array, or the error's message."""
    out = []
    for parse in (parse_predict_body, parse_json_body):
        try:
            out.append(decode_json_request(parse(body), specs, strict_numbers=strict)[0]["x"])
        except InvalidInput as exc:
            out.append(exc.message)
    return out[0], out[1]


@contextlib.contextmanager
def _proved_by(proof: str) -> Iterator[None]:
    """Arrays proved rectangular by their lengths (small ones, as served) or by a scan of the
    text (large ones; here every one)."""
    kept = fastjson.MEASURED_ARRAYS
    fastjson.MEASURED_ARRAYS = kept if proof == "lengths" else 0
    try:
        yield
    finally:
        fastjson.MEASURED_ARRAYS = kept


_PROOFS = pytest.mark.parametrize("proof", ["lengths", "scan"])


def _same(fast: Any, slow: Any) -> None:
    if isinstance(slow, str) or isinstance(fast, str):
        assert fast == slow
        return
    assert fast.dtype == slow.dtype and fast.shape == slow.shape
    assert fast.tobytes() == slow.tobytes()  # bit for bit, NaN payloads and -0.0 included


def _decimals(n: int) -> list[str]:
    """Decimal texts that test rounding: shortest float32 forms, 17-25 significant digits,
    subnormals, values next to float32's largest (3.40282356e38 still rounds to it), integers
    past 2**24."""
    x32 = RNG.standard_normal(n).astype(np.float32) * np.float32(10.0) ** RNG.integers(-30, 30, n)
    texts = [str(v) for v in x32]
    texts += [f"{RNG.random():.{d}f}" for d in RNG.integers(17, 26, n)]
    texts += [f"{RNG.random() * 10:.20e}" for _ in range(n)]
    texts += ["1.4e-45", "1e-46", "3.4028235e38", "3.40282356e38", "1.17549435e-38", "16777217"]
    texts += ["0.1", "2.05", "-0.0", "0", "-0", "1e-300", "123456789012345678"]
    return texts


def test_decimals_decode_as_the_nearest_double_cast_to_float32() -> None:
    texts = _decimals(300)
    body = ('{"instances": [' + ", ".join(texts) + "]}").encode()
    assert fastjson.read_predict_body(body, 100) is not None  # the fast path read it
    got32 = decode_json_request(parse_predict_body(body), _spec("float32", 1))[0]["x"]
    got64 = decode_json_request(parse_predict_body(body), _spec("float64", 1))[0]["x"]
    doubles = np.array([float(t) for t in texts], np.float64)
    np.testing.assert_array_equal(got64, doubles)
    # TF Serving: static_cast<float>(GetDouble())
    np.testing.assert_array_equal(got32, doubles.astype(np.float32))


def _innermost(nested: list[Any]) -> list[list[Any]]:
    if not isinstance(nested[0][0], list):
        return nested
    return [inner for item in nested for inner in _innermost(item)]


@_PROOFS
@pytest.mark.parametrize("shape", [(3,), (3, 3), (1, 4, 4, 3), (2, 1, 1, 1, 2)])
def test_rectangular_arrays_are_read_fast_and_ragged_ones_are_left_to_the_slow_path(
    shape: tuple[int, ...], proof: str
) -> None:
    values = RNG.standard_normal(shape).round(3)
    body = json.dumps({"inputs": {"a": values.tolist(), "b": [[1, 2]]}}).encode()
    with _proved_by(proof):
        read = fastjson.read_predict_body(body, 100)
        assert read is not None
        np.testing.assert_array_equal(read["inputs"]["a"], values)
        # one number moved from the last innermost array to the second: the first arrays, and
        # so the shape they imply, and the count of numbers stay as they were
        ragged = values.tolist()
        innermost = [ragged] if len(shape) == 1 else _innermost(ragged)
        if len(innermost) >= 3:
            innermost[1].append(innermost[-1].pop())
            body = json.dumps({"inputs": {"a": ragged, "b": [[1, 2]]}}).encode()
            assert fastjson.read_predict_body(body, 100) is None


def test_a_float_past_float32s_range_is_infinity_on_both_paths_or_refused_when_strict() -> None:
    """TF Serving casts the double it read to float32 (GetFloat()): a finite number past
    float32's range is +-inf there and here; with strict numbers (--strict-json-numbers) both
    paths refuse it, in the same words. Past float16's range likewise."""
    body = b'{"instances": [[1.0, 3.5e38, -1e39, 3.40282356e38]]}'
    fast, slow = _both(body, _spec("float32"))
    _same(fast, slow)
    largest = float(np.finfo(np.float32).max)  # 3.40282356e38 still rounds to it
    assert fast.tolist() == [[1.0, np.inf, -np.inf, largest]]
    fast, slow = _both(body, _spec("float32"), strict=True)
    _same(fast, slow)
    assert fast == (
        "input 'x': values out of range for float32 [-3.4028234663852886e+38, "
        "3.4028234663852886e+38] (--strict-json-numbers; TF Serving reads such a number as ±inf)"
    )
    half = b'{"instances": [[1, 70000, 65504.0]]}'
    assert _both(half, _spec("float16"))[0].tolist() == [[1.0, np.inf, 65504.0]]
    refused = _both(half, _spec("float16"), strict=True)[0]
    assert "values out of range for float16 [-65504.0, 65504.0]" in refused
    # within float32's range nothing changes, strict or not: only overflow is refused
    fine = b'{"instances": [[1435774380, 1e-50, 2.22507e-308]]}'
    for strict in (False, True):
        got = _both(fine, _spec("float32"), strict=strict)[0]
        assert got.tolist() == [[1435774336.0, 0.0, 0.0]]


@pytest.mark.parametrize(
    "number",
    [b"1e400", b"-1e400", b"1" + b"0" * 400 + b".0", b"17976931348623159e292", b"1" + b"0" * 400],
)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_number_past_doubles_range_is_refused_as_tf_servings_parser_refuses_it(
    number: bytes, dtype: str
) -> None:
    """rapidjson, TF Serving's parser, refuses a number it cannot hold in a double
    (kParseErrorNumberTooBig), where the standard library would read inf: both paths refuse
    it in rapidjson's words, strict or not. NaN and Infinity, the tokens, are still read."""
    body = b'{"instances": [[1.5, ' + number + b"]]}"
    for strict in (False, True):
        fast, slow = _both(body, _spec(dtype), strict=strict)
        assert fast == slow
        assert fast.startswith("JSON Parse error: Number too big to be stored in double: ")
    tokens = _both(b'{"instances": [[NaN, Infinity, -Infinity, 1e308]]}', _spec(dtype))[0]
    assert np.isnan(tokens[0, 0]) and tokens[0, 1:3].tolist() == [np.inf, -np.inf]


@pytest.mark.parametrize(
    "body",
    [
        b'{"instances": [[1, 2], [3, 4, 5], [6]]}',  # ragged, as many numbers as a 3x2
        b'{"instances": [[1, 2], [3, [4]]]}',
        b'{"instances": [[1, 2], 3]}',
        b'{"instances": [[1.5, true]]}',
        b'{"instances": [[1.5, null]]}',
        b'{"instances": [[1, "2"]]}',
        b'{"instances": [[]]}',
        b'{"instances": []}',
        b'{"instances": [[NaN, Infinity, -Infinity]]}',
        b'{"instances": [[1e400]]}',
        b'{"instances": [[1, 18446744073709551616]]}',
        b'{"instances": [[9223372036854775808]]}',
        b'{"instances": [[1.5]], "instances": [[2.5]]}',
        b'{"inputs": {"x": [[1, 2]], "x": [[3, 4]]}}',
        b'{"inputs": {"x": [[1, 2]]}, "signature_name": "a,b"}',
        b'{"inputs": [[0.5, -0.0]], "signature_name": "serving_default"}',
        b'{"inputs": {"x": [[0.5, 1e-310]]}}',
        b'{"instances": [[1, 2]], "context": [1]}',
        b'{"instances": [{"x": [1, 2]}]}',
        b'{"instances": [[1, 2]], "inputs": [[1, 2]]}',
        b'{"signature_name": 5, "instances": [[1, 2]]}',
        b' \n{ "instances" :\t[ [ 1 , 2 ] ] } \n',
        b'{"instances": [[[1, 2], [3]], [[4, 5, 6], [7, 8]]]}',  # ragged inside, as many as 2x2x2
        b'{"instances": [[1, 2], [[], 3]]}',
        b'{"inputs": {"x": [[1, 2], [3, 4]], "y": [[1, 2], [3, [4]]]}}',
    ],
)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "bool", "string"])
@_PROOFS
def test_the_fast_path_reads_every_body_as_the_slow_path(
    body: bytes, dtype: str, proof: str
) -> None:
    with _proved_by(proof):
        fast, slow = _both(body, _spec(dtype))
    _same(fast, slow)


_numbers = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.floats(width=32, allow_nan=False, allow_infinity=False),
)
_leaf = st.one_of(_numbers, st.booleans())
_nested = st.recursive(
    st.lists(_leaf, min_size=0, max_size=4),
    lambda inner: st.lists(inner, min_size=0, max_size=3),
    max_leaves=24,
)


@settings(max_examples=300, deadline=None)
@given(value=_nested, dtype=st.sampled_from(["float32", "float64", "int32", "int64", "uint8"]))
@_PROOFS
def test_any_nested_list_reads_alike_on_both_paths(value: Any, dtype: str, proof: str) -> None:
    body = json.dumps({"instances": value}).encode()
    with _proved_by(proof):
        fast, slow = _both(body, {"x": TensorSpec("x", dtype, None)})
    _same(fast, slow)


# -- encoding ---------------------------------------------------------------------------------

_NUMBER = re.compile(rb"-?[0-9][0-9.e+-]*|NaN|-?Infinity")


def _tokens(text: bytes) -> list[bytes]:
    return _NUMBER.findall(text)


def _digits(token: bytes) -> str:
    """The significant digits of a number's text."""
    mantissa = token.lower().split(b"e")[0].replace(b"-", b"").replace(b".", b"")
    return mantissa.decode().strip("0")


def test_float32_is_written_in_the_fewest_digits_that_read_back() -> None:
    values = RNG.standard_normal(5000).astype(np.float32) * np.float32(10.0) ** RNG.integers(
        -38, 38, 5000
    ).astype(np.float32)
    values = values[np.isfinite(values)]
    text = encode_json_response({"y": values}, row_format=True)
    tokens = _tokens(text)
    assert len(tokens) == values.size
    back = np.array([float(t) for t in tokens], np.float64).astype(np.float32)
    np.testing.assert_array_equal(back, values)  # every one reads back as the same float32
    for token, value in zip(tokens, values, strict=True):  # ... in the fewest digits
        shortest = np.format_float_scientific(value, unique=True)
        assert len(_digits(token)) <= len(_digits(shortest.encode())), (token, shortest)


def test_numbers_as_tf_serving_writes_them() -> None:
    floats = np.array([[2.05, 1.0, -0.0, 0.1, 16777216.0, 3.4028235e38]], np.float32)
    assert json.loads(encode_json_response({"y": floats}, row_format=True)) == {
        "predictions": [[2.05, 1.0, -0.0, 0.1, 16777216.0, 3.4028235e38]]
    }
    text = encode_json_response({"y": floats}, row_format=True)
    assert b"2.05," in text and b"2.049999" not in text  # not the float64 expansion
    assert b"1.0," in text and b"16777216.0" in text  # whole floats keep .0
    doubles = np.array([0.1, 1 / 3, 1e-300, 2.0], np.float64)
    assert _tokens(encode_json_response({"y": doubles}, row_format=False)) == [
        repr(float(v)).encode() for v in doubles
    ]
    ints = np.array([[-(2**63), 2**63 - 1]], np.int64)
    assert json.loads(encode_json_response({"y": ints}, row_format=True)) == {
        "predictions": [[-(2**63), 2**63 - 1]]
    }
    half = np.array([0.1, 2.05], np.float16)  # float16: its own shortest digits
    assert json.loads(encode_json_response({"y": half}, row_format=True)) == {
        "predictions": [0.1, 2.05]
    }


def test_nan_and_the_infinities_are_bare_tokens_in_any_output() -> None:
    outputs = {
        "a": np.array([[1.5, np.nan]], np.float32),
        "b": np.array([[np.inf, -np.inf]], np.float64),
        "c": np.array([[1, 2]], np.int32),
    }
    text = encode_json_response(outputs, row_format=False)
    assert b"NaN" in text and b"-Infinity" in text and b"null" not in text
    decoded = json.loads(text)["outputs"]
    assert decoded["c"] == [[1, 2]] and decoded["a"][0][0] == 1.5


def test_rows_of_several_outputs_and_scalars() -> None:
    outputs = {"s": np.array([1.5, 2.5], np.float32), "m": np.array([[1, 2], [3, 4]], np.int64)}
    assert json.loads(encode_json_response(outputs, row_format=True)) == {
        "predictions": [{"s": 1.5, "m": [1, 2]}, {"s": 2.5, "m": [3, 4]}]
    }
    scalar = {"z": np.array(2.05, np.float32)}
    assert json.loads(encode_json_response(scalar, row_format=False)) == {"outputs": 2.05}
    noncontiguous = {"t": np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]}
    assert json.loads(encode_json_response(noncontiguous, row_format=False)) == {
        "outputs": [[0.0, 2.0], [4.0, 6.0], [8.0, 10.0]]
    }
    big_endian = {"b": np.array([1.5, 2.05], ">f4")}
    assert json.loads(encode_json_response(big_endian, row_format=False)) == {
        "outputs": [1.5, 2.05]
    }


def test_threads_reading_at_once_each_get_their_own_body() -> None:
    """Parsers are shared by every thread, one at a time each."""
    bodies = [
        json.dumps({"instances": RNG.standard_normal((8, 50)).round(4).tolist()}).encode()
        for _ in range(6)
    ]
    expected = [np.array(json.loads(body)["instances"]) for body in bodies]
    wrong: list[int] = []

    def read(i: int) -> None:
        for _ in range(200):
            got = fastjson.read_predict_body(bodies[i], 100)
            if got is None or not np.array_equal(got["instances"], expected[i]):
                wrong.append(i)

    threads = [threading.Thread(target=read, args=(i,)) for i in range(len(bodies))]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often, inside reads too
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert not wrong
    assert len(fastjson._idle) <= fastjson._KEPT_PARSERS
