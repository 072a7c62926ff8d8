"""In-process: the same model called five ways, p50 per call, no server in between.

    concrete    the traced ConcreteFunction with the fixed input signature (what the export saves)
    eager       `model(x)`: every op dispatched from Python
    predict     Keras `model.predict(x)`: its data-adapter and batch machinery on every call
    function    `tf.function` without an input signature: dispatch on every call, a trace per new
                input shape
    xla         the concrete function compiled with XLA (`jit_compile=True`)

`predict` exists only for Keras models called as a whole; for others it is reported as skipped,
with the reason.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphserve.core.results import JsonResult
from tools.bench.timing import Timing, interleave

__all__ = ["METHODS", "InProcess", "in_process"]

METHODS = ("concrete", "eager", "predict", "function", "xla")


@dataclass
class InProcess(JsonResult):
    """One model at one batch size: a Timing per method, and why a method was not measured."""

    model: str
    batch_size: int
    timings: dict[str, Timing]
    skipped: dict[str, str] = field(default_factory=dict)
    function_traces: int = 0  # traces of the signature-less tf.function over the whole run

    def p50(self, method: str) -> float | None:
        timing = self.timings.get(method)
        return None if timing is None else timing.p50_ms


def in_process(
    name: str, source: str, batch_size: int, *, budget_s: float = 4.0, seed: int = 0
) -> InProcess:
    """Time every method on one random batch of `batch_size` rows of `source`'s serving_default
    signature. Raises what loading or tracing the source raises (SourceError, SignatureError)."""
    import tensorflow as tf

    from graphserve.core.errors import SignatureError
    from graphserve.core.inputs import sample_inputs
    from graphserve.model.sources import load_source, resolve_contracts
    from graphserve.model.trace import call_signature, predict_signature, trace

    loaded = load_source(source)
    model, contract = loaded.model, resolve_contracts(loaded)[0]
    arrays = sample_inputs(contract.inputs, batch_size=batch_size, seed=seed)
    tensors = {k: tf.constant(v) for k, v in arrays.items()}
    positional = [tensors[s.name] for s in contract.inputs]

    concrete = trace(model, contract).concrete
    xla = trace(model, contract, jit_compile=True).concrete
    untyped = tf.function(functools.partial(call_signature, model, contract))
    calls: dict[str, Callable[[], object]] = {
        "concrete": lambda: concrete(*positional),
        "eager": lambda: call_signature(model, contract, tensors),
        "function": lambda: untyped(tensors),
        "xla": lambda: xla(*positional),
    }
    skipped: dict[str, str] = {}
    try:
        predict_signature(model, contract, arrays)
        calls["predict"] = lambda: predict_signature(model, contract, arrays)
    except SignatureError as exc:
        skipped["predict"] = str(exc)
    _check_agree(calls, concrete(*positional))
    timings = interleave(calls, budget_s=budget_s)
    return InProcess(
        model=name,
        batch_size=batch_size,
        timings={m: timings[m] for m in METHODS if m in timings},
        skipped=skipped,
        function_traces=untyped.experimental_get_tracing_count(),
    )


def _check_agree(calls: dict[str, Callable[[], object]], reference: dict[str, Any]) -> None:
    """Every method must compute the same thing before its speed means anything (XLA may differ
    in the last bits of floating point, hence the tolerance)."""
    expected = {k: np.asarray(v) for k, v in reference.items()}
    for method, call in calls.items():
        got = {k: np.asarray(v) for k, v in dict(call()).items()}  # type: ignore[call-overload]
        for key, value in expected.items():
            if key not in got or not np.allclose(got[key], value, rtol=1e-4, atol=1e-5):
                raise RuntimeError(
                    f"in-process method {method!r} disagrees with the concrete function on "
                    f"output {key!r}: benchmarking it would compare different computations"
                )
