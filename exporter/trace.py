"""Tracing: the model becomes one concrete function with a fixed input signature.

`call_model` is the single place that knows how a model is called on named tensors; the exporter
traces through it and the eager server runs it as is, so both execute the same Python.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from exporter.errors import SignatureError
from exporter.signature import TensorSpec

__all__ = [
    "Traced",
    "call_model",
    "normalize_outputs",
    "saveable",
    "spec_of",
    "to_tf_spec",
    "trace",
]


def to_tf_spec(spec: TensorSpec) -> tf.TensorSpec:
    return tf.TensorSpec(shape=spec.shape, dtype=tf.as_dtype(spec.dtype), name=spec.name)


def spec_of(name: str, tf_spec: tf.TensorSpec) -> TensorSpec:
    """Our TensorSpec for a TensorFlow one (`tf.string` is "string")."""
    shape = tuple(tf_spec.shape.as_list()) if tf_spec.shape.rank is not None else ()
    return TensorSpec(name, tf_spec.dtype.name, shape)


def _is_keras(model: Any) -> bool:
    import keras

    return isinstance(model, keras.layers.Layer)


def call_model(model: Any, inputs: Mapping[str, Any], specs: Sequence[TensorSpec]) -> dict:
    """Call `model` on named tensors: one input is passed bare, several as a dict by name.

    Keras models run with `training=False` (dropout off, batch-norm statistics frozen).
    """
    args: Any = (
        inputs[specs[0].name] if len(specs) == 1 else {s.name: inputs[s.name] for s in specs}
    )
    result = model(args, training=False) if _is_keras(model) else model(args)
    return normalize_outputs(result)


def normalize_outputs(result: Any) -> dict[str, Any]:
    """Name the outputs: a dict keeps its keys; a tensor is `output_0`; a sequence `output_i`.

    These are the names Keras' own `model.export()` gives unnamed outputs.
    """
    if isinstance(result, Mapping):
        return {str(k): v for k, v in result.items()}
    if isinstance(result, list | tuple):
        return {f"output_{i}": v for i, v in enumerate(result)}
    return {"output_0": result}


@dataclass
class Traced:
    function: Any  # the tf.function
    concrete: Any  # its ConcreteFunction for the signature
    trace_count: int


def trace(model: Any, specs: Sequence[TensorSpec], jit_compile: bool = False) -> Traced:
    """Trace `model` once into a concrete function over `specs`; raises SignatureError if the
    model cannot be called on tensors of that signature."""
    traces = 0
    names = [s.name for s in specs]

    def serve(*tensors: tf.Tensor) -> dict[str, tf.Tensor]:
        nonlocal traces
        traces += 1  # Python runs only while tracing: this counts traces, not calls.
        return call_model(model, dict(zip(names, tensors, strict=True)), specs)

    function = tf.function(
        serve, input_signature=[to_tf_spec(s) for s in specs], jit_compile=jit_compile
    )
    try:
        concrete = function.get_concrete_function()
    except (TypeError, ValueError, tf.errors.InvalidArgumentError) as exc:
        signature = ", ".join(f"{s.name}: {s.describe()}" for s in specs)
        raise SignatureError(
            f"the model cannot be traced with inputs ({signature}): {exc}"
        ) from exc
    return Traced(function, concrete, traces)


def saveable(model: Any, traced: Traced) -> tf.Module:
    """A tf.Module that tracks the model's variables next to the serving function."""
    root = tf.Module()
    if isinstance(model, tf.Module) or _is_keras(model):
        root.model = model
    root.serve = traced.function
    # Variables a plain function closes over are tracked here, or saving would refuse them.
    root.captured_variables = list(traced.concrete.variables)
    return root
