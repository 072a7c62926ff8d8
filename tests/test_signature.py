import numpy as np
import pytest

from graphserve.core.errors import SignatureError
from graphserve.core.inputs import sample_inputs
from graphserve.core.signature import TensorSpec, parse_input_spec, parse_shape


def test_parse_input_spec_keeps_name_dtype_and_shape() -> None:
    spec = parse_input_spec("images:float32:-1,784")
    assert spec == TensorSpec("images", "float32", (None, 784))
    assert spec.describe() == "float32 of shape [-1, 784]"


@pytest.mark.parametrize(
    ("text", "shape"),
    [("-1,784", (None, 784)), ("[-1, 28, 28, 3]", (None, 28, 28, 3)), ("", ()), ("?,4", (None, 4))],
)
def test_parse_shape_forms(text: str, shape: tuple) -> None:
    assert parse_shape(text) == shape


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("images:float32", "expected NAME:DTYPE:SHAPE"),
        ("images:float99:-1,4", "unknown dtype 'float99'"),
        ("images:float32:-1,x", "dimension 'x' is not an integer"),
        ("images:float32:-1,-3", "dimension -3 is negative"),
        ("1bad:float32:-1", "tensor name '1bad' is not valid"),
    ],
)
def test_parse_input_spec_errors_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(SignatureError, match=message):
        parse_input_spec(text)


def test_sample_inputs_fit_specs_and_repeat_with_seed() -> None:
    specs = [
        TensorSpec("x", "float32", (None, 3)),
        TensorSpec("ids", "int64", (None, None)),
        TensorSpec("text", "string", (None,)),
        TensorSpec("mask", "bool", (2,)),
    ]
    first = sample_inputs(specs, batch_size=5, seed=7)
    again = sample_inputs(specs, batch_size=5, seed=7)
    assert first["x"].shape == (5, 3) and first["x"].dtype == np.float32
    assert first["ids"].shape == (5, 8) and first["ids"].dtype == np.int64
    assert first["text"].shape == (5,) and isinstance(first["text"][0], bytes)
    assert first["mask"].shape == (2,) and first["mask"].dtype == np.bool_
    for name in first:
        np.testing.assert_array_equal(first[name], again[name])
    other = sample_inputs(specs, batch_size=5, seed=8)
    assert not np.array_equal(first["x"], other["x"])


def test_unknown_rank_is_a_shape_of_its_own() -> None:
    """`*` (or a whole shape of null in a signature file) is an unknown rank: never a scalar,
    sampled as one value per row, written back as `*`."""
    from graphserve.core.contract import contracts_from_mapping

    assert parse_shape("*") is None
    assert parse_shape("") == ()
    spec = TensorSpec("t", "string", None)
    assert spec.describe() == "string of unknown rank"
    assert spec.shape_text() == "*"
    assert spec.to_json() == {"dtype": "string", "shape": None}
    assert not spec.batch_free
    assert sample_inputs([spec], batch_size=3)["t"].shape == (3,)
    (contract,) = contracts_from_mapping(
        {
            "signatures": {
                "serving_default": {
                    "inputs": {
                        "t": {"dtype": "string", "shape": "*"},
                        "u": {"dtype": "int64", "shape": None},
                    }
                }
            }
        },
        "test",
    )
    assert [s.shape for s in contract.inputs] == [None, None]
