"""What values a model's inputs take, read from its graph: the ranges generated inputs keep to.

A model says more about its inputs than their dtypes. `infer_ranges` traces the signature once
at the shapes of a one-row batch (the trace an eager call at that batch makes too, so the
exporter's retrace probe counts nothing more) and follows each input through ops that carry its
values unchanged (casts, reshapes, slices, Keras' wrap of negative ids) to an op that bounds them:

* an index into a table: `GatherV2` on a tensor of N rows, `ResourceGather` on a variable of N
  rows (an `Embedding`), `OneHot` of depth N: the input takes 0 to N-1;
* a `Rescaling` at the input, `x * s + o` with a small scale s (Keras Applications, 1/255 or
  1/127.5): the input is pixels, 0 to (1 - o) / s, whose output is 0..1 or -1..1;
* a string input that reaches an image decode op (`DecodeJpeg`, `DecodePng`, `DecodeImage`, ...),
  through any op, a `tf.map_fn`'s loop or a nested function: the input is encoded images of that
  format, generated at the size the model resizes them to (else 224x224);
* a string input looked up in a table (`LookupTableFindV2`: a StringLookup, TextVectorization,
  a table over a vocabulary file), through any string op: the input is words of the table's
  keys, read from the table itself, or phrases of them when the model splits it first; an
  integer input looked up in one (an IntegerLookup), through the ops that carry its values: the
  table's integer keys;
* a float input the model buckets (`Bucketize`, a Discretization): the span of its bins, one
  bin's width beyond each end; one it standardises (`(x - mean) / std` with constants, an
  adapted Normalization): mean ± 2 standard deviations.

Nested tf.functions are followed into their graphs. What cannot be read (a model that does not
trace at a fixed shape, an op this does not know) gives no range: it is a best effort, and the
generated values fall back to graphserve's defaults (`graphserve.core.inputs`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import tensorflow as tf

from graphserve.core.contract import SignatureContract
from graphserve.core.inputs import sample_shape
from graphserve.core.signature import ImageFormat, ValueRange, Vocabulary
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
# Image decode ops, and the format generated images get for each (DecodeImage reads any).
_DECODE = {
    "DecodeJpeg": "jpeg",
    "DecodeAndCropJpeg": "jpeg",
    "DecodeImage": "jpeg",
    "DecodePng": "png",
    "DecodeBmp": "bmp",
    "DecodeGif": "gif",
}
# A function-calling op's graphs, by attribute, and the first of its inputs the graph's first
# argument takes (If's condition is no argument).
_BODIES = {
    "PartitionedCall": (("f",), 0),
    "StatefulPartitionedCall": (("f",), 0),
    "While": (("body", "cond"), 0),
    "StatelessWhile": (("body", "cond"), 0),
    "If": (("then_branch", "else_branch"), 1),
    "StatelessIf": (("then_branch", "else_branch"), 1),
}
_RESIZE = (
    "ResizeBilinear",
    "ResizeNearestNeighbor",
    "ResizeBicubic",
    "ResizeArea",
    "ScaleAndTranslate",
)
_RESIZE_REACH = 64  # tensors looked through after a decode for its resize
_IMAGE_SIDE = 224  # a decoded image the model does not resize: Keras Applications' size
_FOLLOWED = ("string", "variant")  # what carries encoded bytes: strings, tensor lists
_LOOKUPS = ("LookupTableFindV2", "LookupTableFind")
# Ops that cut a string into words: generated values are then phrases of the table's keys.
_SPLITS = ("StringSplit", "StringSplitV2", "RegexSplitWithOffsets", "UnicodeDecodeWithOffsets")
VOCABULARY_KEPT = 1000  # the words kept of a larger vocabulary (in the manifest too)
_STANDARD_DEVIATIONS = 2  # a standardised input's generated span, each side of its mean


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
        if tensor.dtype == tf.string:
            strings = _decoded_as(tensor, graph, depth=0) or _looked_up(tensor, concrete)
            if strings is not None:
                found[name] = strings
            continue
        keys = _looked_up(tensor, concrete) if tensor.dtype.is_integer else None
        spans = [keys] if keys is not None else list(_ranges_of(tensor, shapes, depth=0))
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


class _Walk:
    """The ops that consume tensors, from `start` on, each tensor once: `for current, op in
    walk` visits every consumer `op` of `current`; `walk.follow(tensors)` goes on through them."""

    def __init__(self, *start: tf.Tensor) -> None:
        self.seen: set[str] = set()
        self._frontier = list(start)

    def follow(self, tensors: Iterable[tf.Tensor]) -> None:
        self._frontier.extend(tensors)

    def __iter__(self) -> Iterator[tuple[tf.Tensor, Any]]:
        while self._frontier:
            current = self._frontier.pop()
            if current.name in self.seen:
                continue
            self.seen.add(current.name)
            for op in current.consumers():
                yield current, op


def _ranges_of(
    tensor: tf.Tensor, shapes: dict[str, tuple[int | None, ...]], depth: int
) -> Iterator[ValueRange]:
    """Follow `tensor` through the ops that carry its values to the ops that bound them."""
    walk = _Walk(tensor)
    for current, op in walk:
        positions = [i for i, t in enumerate(op.inputs) if t is current]
        carry = _CARRY.get(op.type, ())
        if op.type in _CARRY and (carry is None or any(p in carry for p in positions)):
            walk.follow(op.outputs)
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
    elif op.type == "Bucketize" and 0 in positions:
        edges = [float(b) for b in op.get_attr("boundaries")]
        if edges:
            width = (edges[-1] - edges[0]) / max(len(edges) - 1, 1) or 1.0
            yield ValueRange(
                round(edges[0] - width, 6),
                round(edges[-1] + width, 6),
                f"its bins: {len(edges)} boundaries from {edges[0]:.4g} to {edges[-1]:.4g} "
                f"({_layer(op)})",
            )
    elif op.type == "Sub" and positions == [0] and op.outputs[0].dtype.is_floating:
        spread = _standardised(op)
        if spread is not None:
            mean, deviation = spread
            reach = _STANDARD_DEVIATIONS * deviation
            yield ValueRange(
                round(mean - reach, 6),
                round(mean + reach, 6),
                f"its statistics: mean {mean:.4g}, standard deviation {deviation:.4g} "
                f"({_layer(op)})",
            )
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


def _decoded_as(tensor: tf.Tensor, root: Any, depth: int) -> ValueRange | None:
    """Images, when `tensor`'s strings reach an image decode op: through any op whose output is
    still strings or a tensor list, and into the graphs of calls, loops and conditionals."""
    walk = _Walk(tensor)
    for current, op in walk:
        if op.type in _DECODE:
            height, width = _resized_to(op) or (_IMAGE_SIDE, _IMAGE_SIDE)
            image = ImageFormat(_DECODE[op.type], height, width)
            return ValueRange(0, 255, f"it is decoded by {op.type} ({_layer(op)})", image)
        if op.type in _BODIES and depth < _MAX_DEPTH:
            attrs, first = _BODIES[op.type]
            positions = [i - first for i, t in enumerate(op.inputs) if t is current]
            for attr in attrs:
                graph = _function_graph(op, attr, root)
                for position in positions:
                    if graph is not None and 0 <= position < len(graph.inputs):
                        found = _decoded_as(graph.inputs[position], root, depth + 1)
                        if found is not None:
                            return found
        walk.follow(t for t in op.outputs if t.dtype.name in _FOLLOWED)
    return None


def _looked_up(tensor: tf.Tensor, concrete: Any) -> ValueRange | None:
    """Words, when `tensor`'s strings reach a table lookup (a StringLookup or TextVectorization
    layer, a table over a file): through any op whose output is still strings, and into nested
    functions; the keys read from the table the lookup captures, and whether the strings were
    split into words on the way (then phrases of them)."""
    captured = {internal.name: external for external, internal in concrete.graph.captures}
    return _lookup_in(tensor, captured, concrete.graph, depth=0, split=False)


def _lookup_in(
    tensor: tf.Tensor, captured: dict[str, Any], root: Any, depth: int, split: bool
) -> ValueRange | None:
    walk = _Walk(tensor)
    for current, op in walk:
        split = split or op.type in _SPLITS
        if op.type in _LOOKUPS and op.inputs[0].name in captured and current is op.inputs[1]:
            keys = _table_keys(captured[op.inputs[0].name], op)
            if keys:
                return _vocabulary_range(keys, op, split)
        if op.type in _CALLS and depth < _MAX_DEPTH:
            graph = _function_graph(op, "f", root)
            if graph is not None:
                inner = {  # the tables it is given, by the names of its arguments
                    graph.inputs[i].name: captured[t.name]
                    for i, t in enumerate(op.inputs[: len(graph.inputs)])
                    if t.name in captured
                }
                for i, t in enumerate(op.inputs[: len(graph.inputs)]):
                    if t is current:
                        found = _lookup_in(graph.inputs[i], inner, root, depth + 1, split)
                        if found is not None:
                            return found
        if tensor.dtype == tf.string:
            walk.follow(t for t in op.outputs if t.dtype == tf.string)
        elif op.type in _CARRY:  # integer keys: only through ops that keep their values
            walk.follow(t for t in op.outputs if t.dtype.is_integer)
    return None


def _vocabulary_range(keys: list[str | int], lookup: Any, split: bool) -> ValueRange:
    """The range of an input looked up in a table of `keys`: its vocabulary, and for integer
    keys their span."""
    where = _layer(lookup)
    if all(isinstance(k, str) for k in keys):
        vocabulary = Vocabulary(tuple(map(str, keys[:VOCABULARY_KEPT])), len(keys), split)
        why = f"it is looked up in a table of {len(keys):,} words ({where})"
        return ValueRange(0, 0, why, vocabulary=vocabulary)
    numbers = [int(k) for k in keys]
    kept = tuple(str(k) for k in numbers[:VOCABULARY_KEPT])
    vocabulary = Vocabulary(kept, len(keys), integers=True)
    why = f"it is looked up in a table of {len(keys):,} integer keys ({where})"
    return ValueRange(min(numbers), max(numbers), why, vocabulary=vocabulary)


def _table_keys(handle: Any, lookup: Any) -> list[str | int]:
    """A table's keys (strings, or integers for an integer table), in the order of their values
    (ids: an adapted layer's most frequent keys first); empty when the table cannot be read (its
    type exports nothing)."""
    try:
        keys, values = tf.raw_ops.LookupTableExportV2(
            table_handle=handle, Tkeys=lookup.get_attr("Tin"), Tvalues=lookup.get_attr("Tout")
        )
        ordered = keys.numpy()[np.argsort(values.numpy(), kind="stable")]
    except Exception:  # a best effort: a table that does not export gives no vocabulary
        return []
    if ordered.dtype.kind in "iu":
        return [int(k) for k in ordered]
    return [k.decode("utf-8", "replace") for k in ordered]


def _standardised(sub: Any) -> tuple[float, float] | None:
    """(mean, standard deviation) when `sub` is `x - mean` with a constant mean, divided next by
    a constant (a Normalization: `(x - mean) / maximum(sqrt(variance), epsilon)`)."""
    mean = _constant(sub.inputs[1])
    if mean is None:
        return None
    for op in sub.outputs[0].consumers():
        if op.type in ("RealDiv", "Div") and op.inputs[0] is sub.outputs[0]:
            deviation = _evaluated(op.inputs[1])
            if deviation is not None and deviation > 0:
                return mean, deviation
    return None


def _evaluated(tensor: tf.Tensor) -> float | None:
    """A scalar computed from constants by Sqrt and Maximum (a standard deviation from a
    variance), else None."""
    op = tensor.op
    if op.type == "Sqrt":
        value = _evaluated(op.inputs[0])
        return None if value is None or value < 0 else float(np.sqrt(value))
    if op.type == "Maximum":
        values = [_evaluated(t) for t in op.inputs]
        return None if None in values else max(v for v in values if v is not None)
    return _constant(tensor)


def _resized_to(decode: Any) -> tuple[int, int] | None:
    """The constant size the decoded image is resized to, a few ops on (tf.image.resize, Keras'
    Resizing), if the graph says so here."""
    walk = _Walk(*decode.outputs)
    for _current, op in walk:
        if len(walk.seen) > _RESIZE_REACH:
            break
        if op.type in _RESIZE:
            size = _constant_vector(op.inputs[1])
            if size is not None and len(size) == 2 and all(v > 0 for v in size):
                return int(size[0]), int(size[1])
        walk.follow(op.outputs)
    return None


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


def _function_graph(op: Any, attr: str = "f", root: Any = None) -> Any:
    """The graph of the function `op` calls (by its attribute `attr`), from `op`'s graph's
    library or, for a function rebuilt from its definition (whose library is empty), from the
    traced `root` graph's, which holds every function nested in it."""
    from tensorflow.python.framework.function_def_to_graph import function_def_to_graph

    name = op.get_attr(attr).name
    function = op.graph._get_function(name)
    if function is None and root is not None:
        function = root._get_function(name)
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


def _constant_vector(tensor: tf.Tensor) -> list[float] | None:
    """A constant vector's values (through Identity and Cast), else None."""
    op = tensor.op
    while op.type in ("Identity", "Cast") and op.inputs:
        op = op.inputs[0].op
    if op.type != "Const":
        return None
    return [float(v) for v in np.asarray(tf.make_ndarray(op.get_attr("value"))).reshape(-1)]


def _layer(op: Any) -> str:
    """The op's layer, as its name scope says: `token_embedding` of `bert_backbone/...`."""
    parts = [p for p in op.name.split("/")[:-1] if p]
    return f"'{'/'.join(parts[-2:])}'" if parts else f"op {op.name!r}"
