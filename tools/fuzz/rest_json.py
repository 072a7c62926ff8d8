"""atheris harness: REST predict bodies through the codec, where only InvalidInput may come out.

    python -m tools.fuzz.rest_json -atheris_runs=100000 [-artifact_prefix=DIR/] [CORPUS_DIR ...]

Each input is a request body, decoded the way the REST server decodes it (`parse_json_body`,
`decode_json_request`, `validate_inputs` from graphserve.core.codec) against every signature in
SIGNATURES: the mlp's, examples:multi_io's (float32, int64 and string inputs) and one with an
input of every dtype the server decodes. A body is either rejected with InvalidInput (a 400) or
decoded into arrays that fit the signature. Any other exception, or an array that does not fit,
is a finding: atheris prints the input's traceback, writes it to `crash-<sha1>` under the
artifact prefix and exits non-zero. Only graphserve.core.codec is instrumented for coverage.

tests/test_fuzz.py uses `decode_body` and SIGNATURES from here, so its hypothesis tests and this
harness hold the decoder to one definition of "correct".
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence

import numpy as np

from graphserve.core import codec
from graphserve.core.errors import InvalidInput
from graphserve.core.signature import TensorSpec
from graphserve.model.examples import mlp, multi_io

__all__ = ["SIGNATURES", "assert_fits", "decode_body", "main", "test_one_input"]


def _by_name(specs: Sequence[TensorSpec]) -> dict[str, TensorSpec]:
    return {spec.name: spec for spec in specs}


SIGNATURES: dict[str, dict[str, TensorSpec]] = {
    "mlp": _by_name(mlp.INPUT_SIGNATURE),
    "multi_io": _by_name(multi_io.INPUT_SIGNATURE),
    "every_dtype": _by_name(
        [
            TensorSpec("half", "float16", (None, 2)),
            TensorSpec("single", "float32", (None,)),
            TensorSpec("double", "float64", (None, 1)),
            TensorSpec("i8", "int8", (None, 3)),
            TensorSpec("i16", "int16", (None,)),
            TensorSpec("i32", "int32", (None,)),
            TensorSpec("i64", "int64", (None, 2)),
            TensorSpec("u8", "uint8", (None,)),
            TensorSpec("u16", "uint16", (None,)),
            TensorSpec("flag", "bool", (None,)),
            TensorSpec("text", "string", (None, 2)),
        ]
    ),
}


def assert_fits(arrays: Mapping[str, np.ndarray], specs: Mapping[str, TensorSpec]) -> None:
    """Every input of `specs` is present and of its dtype. Shapes are the graph's to accept or
    refuse, as in TF Serving, so any shape may pass decoding."""
    assert set(arrays) == set(specs), f"decoded {sorted(arrays)}, signature has {sorted(specs)}"
    for name, spec in specs.items():
        array = arrays[name]
        assert isinstance(array, np.ndarray), f"{name}: {type(array).__name__}"
        assert array.dtype == spec.np_dtype, f"{name}: {array.dtype} for {spec.describe()}"
        if spec.dtype == "string":
            assert all(isinstance(v, bytes) for v in array.reshape(-1)), f"{name}: not bytes"


def decode_body(body: bytes, specs: Mapping[str, TensorSpec]) -> dict[str, np.ndarray] | None:
    """The inputs the REST server would run for `body`, or None when it answers 400.

    Raises AssertionError when the decoded arrays do not fit `specs`; any exception other than
    InvalidInput escapes, as it would from the server (a 500).
    """
    try:
        request = codec.parse_json_body(body)
        inputs, _ = codec.decode_json_request(request, specs)
        checked = codec.validate_inputs(inputs, specs)
    except InvalidInput:
        return None
    assert_fits(checked, specs)
    return checked


def test_one_input(data: bytes) -> None:
    for specs in SIGNATURES.values():
        decode_body(data, specs)


def main(argv: list[str]) -> None:
    import atheris

    # Coverage from the codec only: instrumenting TensorFlow and numpy would slow every run.
    for value in list(vars(codec).values()):
        if callable(value) and getattr(value, "__module__", None) == codec.__name__:
            atheris.instrument_func(value)
    atheris.Setup(argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
