"""The codec benchmark: every encoding measured, request sizes, round trips, a sanity ratio."""

from __future__ import annotations

import math

import numpy as np
import pytest
from tensorflow_serving.apis import predict_pb2

from tools.bench import wire
from tools.bench.wire import CodecMismatchError, CodecTiming, codec_suite

SMALL = (1, 8, 8, 3)


@pytest.fixture(scope="module")
def small_suite() -> dict[str, CodecTiming]:
    return {t.encoding: t for t in codec_suite(SMALL, budget_s=0.3, min_samples=7)}


def test_every_encoding_is_timed(small_suite: dict[str, CodecTiming]) -> None:
    assert list(small_suite) == list(wire.ENCODINGS)
    for timing in small_suite.values():
        assert timing.decode_ms > 0
        assert timing.encode_ms > 0
        assert timing.samples >= 7
        assert timing.total_ms == timing.decode_ms + timing.encode_ms
        assert timing.to_json()["total_ms"] == timing.total_ms


def test_tensor_content_request_is_raw_bytes_plus_a_small_header(
    small_suite: dict[str, CodecTiming],
) -> None:
    raw = 4 * math.prod(SMALL)
    assert raw < small_suite["tensor_content"].request_bytes <= raw + 200
    # float_val is packed too, but JSON spells every value out in text.
    assert small_suite["json"].request_bytes > small_suite["tensor_content"].request_bytes


def test_min_samples_run_even_without_budget() -> None:
    timings = codec_suite(SMALL, budget_s=0, min_samples=3)
    assert all(t.samples >= 3 for t in timings)


def test_typed_fields_request_decodes_to_the_array_sent() -> None:
    array = np.random.default_rng(1).standard_normal(SMALL).astype(np.float32)
    body = wire._typed_request_bytes(array)
    decoded = wire._decode_grpc(body)
    assert decoded.dtype == np.float32
    np.testing.assert_array_equal(decoded, array)
    # The values travel in float_val: no tensor_content at all.
    proto = predict_pb2.PredictRequest.FromString(body).inputs["images"]
    assert proto.tensor_content == b""
    assert len(proto.float_val) == array.size


def test_every_path_round_trips_exactly() -> None:
    array = np.random.default_rng(2).standard_normal(SMALL).astype(np.float32)
    for codec in wire._codecs(array):
        wire._check_round_trip(codec, array)


def test_a_broken_path_fails_before_it_is_timed() -> None:
    array = np.random.default_rng(3).standard_normal(SMALL).astype(np.float32)
    codec = wire._codecs(array)[2]
    lossy = wire._Codec(
        codec.encoding,
        codec.request,
        lambda body: codec.decode(body).astype(np.float16).astype(np.float32),
        codec.encode,
        codec.read_response,
    )
    with pytest.raises(CodecMismatchError, match=r"json: decoding the request gave float32"):
        wire._check_round_trip(lossy, array)


@pytest.mark.parametrize(
    ("shape", "budget_s", "min_samples"),
    [((), 1.0, 5), ((1, 0, 3), 1.0, 5), (SMALL, -1.0, 5), (SMALL, 1.0, 0)],
)
def test_bad_arguments_are_refused(
    shape: tuple[int, ...], budget_s: float, min_samples: int
) -> None:
    with pytest.raises(ValueError):
        codec_suite(shape, budget_s=budget_s, min_samples=min_samples)


def test_tensor_content_beats_typed_fields_on_an_image() -> None:
    # A sanity check, not a timed goal: the gap is 10-100x, far beyond machine noise.
    timings = {t.encoding: t for t in codec_suite(budget_s=1.5)}
    assert timings["tensor_content"].total_ms < timings["typed_fields"].total_ms
    assert timings["tensor_content"].request_bytes > 4 * 224 * 224 * 3
