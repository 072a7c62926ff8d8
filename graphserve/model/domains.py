"""What values a model's inputs take, read from its graph: the ranges generated inputs keep to.

A model says more about its inputs than their dtypes. `infer_ranges` traces the signature once
at the shapes of a one-row batch (the trace an eager call at that batch makes too, so the
exporter's retrace probe counts nothing more) and follows each input through ops that carry its
values unchanged (casts, reshapes, slices, Keras' wrap of negative ids) to an op that bounds them:

* an index into a table: `GatherV2` on a tensor of N rows, `ResourceGather` on a variable of N
  rows (an `Embedding`), `OneHot` of depth N: the input takes 0 to N-1;
* a `Rescaling` at the input, `x * s + o` with a small scale s (Keras Applications, 1/255 or
  1/127.5): the input is pixels, 0 to (1 - o) / s, whose output is 0..1 or -1..1.

Nested tf.functions are followed into their graphs. What cannot be read (a model that does not
trace at a fixed shape, an op this does not know) gives no range: it is a best effort, and the
generated values fall back to graphserve's defaults (`graphserve.core.inputs`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import tensorflow as tf

from graphserve.core.contract import SignatureContract
from graphserve.core.inputs import sample_shape
from graphserve.core.signature import ValueRange
from graphserve.model.trace import call_signature

__all__ = ["infer_ranges"]

# Ops whose output carries the values of the followed input unchanged (for the inputs listed;
# None: every input). SelectV2 is how Keras 3 wraps negative ids (where(x < 0, x + N, x)).
_CARRY: dict[str, tuple[int, ...] | None] = {
    "Identity": None,
    "IdentityN": None,
    "Cast": (0,),
    "Reshape": (0,),
    "ExpandDims": (0,),
    "Squeeze": (0,),
    "StopGradient": (0,),
    "EnsureShape": (0,),
    "CheckNumerics": (0,),
    "StridedSlice": (0,),
    "Slice": (0,),
    "Transpose": (0,),
    "Tile": (0,),
    "BroadcastTo": (0,),
    "SelectV2": (1, 2),
    "Select": (1, 2),
    "ConcatV2": None,
    "Pack": None,
}
_CALLS = ("PartitionedCall", "StatefulPartitionedCall")
# A scale this small at the input is a Rescaling of pixels (1/255, 1/127.5), not a learned weight.
_PIXEL_SCALE = (1 / 1000, 1 / 50)
_MAX_DEPTH = 4  # nested function calls followed


def infer_ranges(model: Any, contract: SignatureContract) -> dict[str, ValueRange] | None:
    """The ranges the model's graph tells for `contract`'s inputs, by input name (none for an
    input it says nothing about); None when the model does not trace (its Python did not run
    through, so it still has its first call ahead)."""
    specs = [
        tf.TensorSpec(sample_shape(s, 1) if s.shape is not None else None, s.dtype, name=s.name)
        for s in contract.inputs
    ]
    names = [s.name for s in contract.inputs]

    def call(*tensors: tf.Tensor) -> Any:
        return call_signature(model, contract, dict(zip(names, tensors, strict=True)))

    try:
        with _quiet():
            concrete = tf.function(call).get_concrete_function(*specs)
    except Exception:  # a best effort: the probe says why the model fails
        return None
    graph = concrete.graph
    shapes = _captured_shapes(concrete)
    found: dict[str, ValueRange] = {}
    for name, tensor in zip(names, graph.inputs[: len(names)], strict=True):
        spans = list(_ranges_of(tensor, shapes, depth=0))
        if spans:
            found[name] = min(spans, key=lambda r: r.high - r.low)
    return found


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Tracing here is a look, not a step: Keras' and TensorFlow's logging stay out of the
    export's output."""
    logger = tf.get_logger()
    level = logger.level
    logger.setLevel("ERROR")
    try:
        yield
    finally:
        logger.setLevel(level)


def _captured_shapes(concrete: Any) -> dict[str, tuple[int | None, ...]]:
    """The shape of each variable the function captures, by the name of its placeholder inside
    the graph (a ResourceGather's resource is one)."""
    by_handle = {id(v.handle): v for v in concrete.variables}
    shapes = {}
    for external, internal in concrete.graph.captures:
        variable = by_handle.get(id(external))
        if variable is not None:
            shapes[internal.name] = tuple(variable.shape.as_list())
    return shapes


def _ranges_of(
    tensor: tf.Tensor, shapes: dict[str, tuple[int | None, ...]], depth: int
) -> Iterator[ValueRange]:
    """Follow `tensor` through the ops that carry its values to the ops that bound them."""
    seen: set[str] = set()
    frontier = [tensor]
    while frontier:
        current = frontier.pop()
        if current.name in seen:
            continue
        seen.add(current.name)
        for op in current.consumers():
            positions = [i for i, t in enumerate(op.inputs) if t is current]
            carry = _CARRY.get(op.type, ())
            if op.type in _CARRY and (carry is None or any(p in carry for p in positions)):
                frontier.extend(op.outputs)
            elif op.type in _CALLS and depth < _MAX_DEPTH:
                yield from _through_call(op, positions, shapes, depth)
            else:
                yield from _bound(op, positions, shapes)


def _bound(
    op: Any, positions: list[int], shapes: dict[str, tuple[int | None, ...]]
) -> Iterator[ValueRange]:
    if op.type == "GatherV2" and 1 in positions and _constant(op.inputs[2]) == 0:
        rows = op.inputs[0].shape[0] if op.inputs[0].shape.rank else None
        if rows:
            yield ValueRange(0, rows - 1, f"it indexes a table of {rows} rows ({_layer(op)})")
    elif op.type == "ResourceGather" and 1 in positions and op.get_attr("batch_dims") == 0:
        rows = shapes.get(op.inputs[0].name, (None,))[0]
        if rows:
            yield ValueRange(0, rows - 1, f"it indexes a table of {rows} rows ({_layer(op)})")
    elif op.type == "OneHot" and 0 in positions:
        depth = _constant(op.inputs[1])
        if depth:
            yield ValueRange(0, int(depth) - 1, f"a one-hot of depth {int(depth)} ({_layer(op)})")
    elif op.type == "Mul" and op.outputs[0].dtype.is_floating:
        scale = _constant(op.inputs[1 - positions[0]]) if len(positions) == 1 else None
        if scale is not None and _PIXEL_SCALE[0] <= scale <= _PIXEL_SCALE[1]:
            offset = _offset_after(op)
            low = ((-1 if offset < 0 else 0) - offset) / scale
            high = (1 - offset) / scale
            yield ValueRange(
                round(max(low, 0.0), 3),
                round(high, 3),
                f"pixels: the input is rescaled by {scale:.4g} ({_layer(op)})",
            )


def _offset_after(mul: Any) -> float:
    """The constant added right after a rescaling `x * s`, if any (`x * s + o`)."""
    for op in mul.outputs[0].consumers():
        if op.type in ("AddV2", "Add", "BiasAdd"):
            other = [t for t in op.inputs if t is not mul.outputs[0]]
            value = _constant(other[0]) if other else None
            if value is not None:
                return value
    return 0.0


def _through_call(
    op: Any, positions: list[int], shapes: dict[str, tuple[int | None, ...]], depth: int
) -> Iterator[ValueRange]:
    """Into a nested tf.function: its graph's argument at the same position."""
    graph = _function_graph(op)
    if graph is None:
        return
    inner = dict(shapes)
    for i, arg in enumerate(graph.inputs):  # a captured variable's shape, carried inside
        outer = op.inputs[i] if i < len(op.inputs) else None
        if outer is not None and outer.name in shapes:
            inner[arg.name] = shapes[outer.name]
    for position in positions:
        if position < len(graph.inputs):
            yield from _ranges_of(graph.inputs[position], inner, depth + 1)


def _function_graph(op: Any) -> Any:
    from tensorflow.python.framework.function_def_to_graph import function_def_to_graph

    name = op.get_attr("f").name
    function = op.graph._get_function(name)
    if function is None:
        return None
    try:
        return function_def_to_graph(function.cached_definition)
    except Exception:  # a graph this cannot rebuild tells nothing
        return None


def _constant(tensor: tf.Tensor) -> float | None:
    """A scalar constant's value (through Identity and Cast), else None."""
    op = tensor.op
    while op.type in ("Identity", "Cast") and op.inputs:
        op = op.inputs[0].op
    if op.type != "Const":
        return None
    value = tf.make_ndarray(op.get_attr("value"))
    if value.size != 1:
        return None
    number = float(np.asarray(value).reshape(()))
    return number


def _layer(op: Any) -> str:
    """The op's layer, as its name scope says: `token_embedding` of `bert_backbone/...`."""
    parts = [p for p in op.name.split("/")[:-1] if p]
    return f"'{'/'.join(parts[-2:])}'" if parts else f"op {op.name!r}"
