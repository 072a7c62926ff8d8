"""Tracing: each signature becomes one concrete function with a fixed input signature.

`call_signature` is the single place that knows how a model is called on named tensors and how
its outputs are named; the exporter traces through it and the eager server runs it as is, so both
execute the same Python.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from graphserve.core.contract import SignatureContract
from graphserve.core.errors import SignatureError
from graphserve.core.execution import EAGER
from graphserve.core.signature import TensorSpec

__all__ = [
    "Traced",
    "call_signature",
    "execution_of",
    "is_keras",
    "name_outputs",
    "parameters",
    "plain_text",
    "predict_signature",
    "resolve_function",
    "saveable",
    "signature_errors",
    "spec_of",
    "takes_keywords",
    "to_tf_spec",
    "trace",
]


def to_tf_spec(spec: TensorSpec) -> tf.TensorSpec:
    return tf.TensorSpec(shape=spec.shape, dtype=tf.as_dtype(spec.dtype), name=spec.name)


def spec_of(name: str, tf_spec: tf.TensorSpec) -> TensorSpec:
    """Our TensorSpec for a TensorFlow one (`tf.string` is "string")."""
    shape = tuple(tf_spec.shape.as_list()) if tf_spec.shape.rank is not None else ()
    return TensorSpec(name, tf_spec.dtype.name, shape)


def is_keras(model: Any) -> bool:
    import keras

    return isinstance(model, keras.layers.Layer)


def resolve_function(model: Any, function: str | None) -> Any:
    """The callable a signature runs: the model, or a dotted attribute of it.

    `signatures.KEY` names a signature of a loaded SavedModel. Raises SignatureError when the
    attribute does not exist or is not callable.
    """
    if function is None:
        return model
    target = model
    parts = function.split(".")
    while parts:
        part = parts.pop(0)
        if part == "signatures" and parts and isinstance(getattr(target, part, None), Mapping):
            key = parts.pop(0)
            if key not in target.signatures:
                raise SignatureError(
                    f"the SavedModel has no signature {key!r}: it has {sorted(target.signatures)}"
                )
            target = target.signatures[key]
            continue
        if not hasattr(target, part):
            raise SignatureError(
                f"the model ({type(model).__name__}) has no attribute {function!r} to serve as a "
                "signature function"
            )
        target = getattr(target, part)
    if not callable(target):
        raise SignatureError(f"{function!r} of the model is not callable")
    return target


def call_signature(
    model: Any, contract: SignatureContract, inputs: Mapping[str, Any]
) -> dict[str, Any]:
    """Run `contract`'s function of `model` on named tensors; returns its outputs by name.

    One input is passed bare; several as keywords when the function has a parameter named after
    each (`def f(a, b)`), else as one dict by name; a SavedModel's signature functions take
    keyword arguments. Keras models run with `training=False` (dropout off, batch-norm frozen).
    """
    target = resolve_function(model, contract.function)
    names = [s.name for s in contract.inputs]
    if isinstance(target, tf.types.experimental.ConcreteFunction) or takes_keywords(target, names):
        result = target(**{n: inputs[n] for n in names})
    else:
        args: Any = inputs[names[0]] if len(names) == 1 else {n: inputs[n] for n in names}
        result = target(args, training=False) if is_keras(target) else target(args)
    return name_outputs(result, contract, _keras_output_names(target))


def execution_of(model: Any, contract: SignatureContract) -> str:
    """How `call_signature` runs `contract` on `model`, in graphserve.core.execution's words:
    "restored" for a SavedModel's concrete function, "tf.function" when the callable or its
    `__call__` is a tf.function, else "eager". (A whole SavedModel source is "restored": the
    caller knows it by the source's kind.)"""
    target = resolve_function(model, contract.function)
    if isinstance(target, tf.types.experimental.ConcreteFunction):
        return "restored"
    call = type(target).__call__ if not isinstance(target, type) else None
    if any(isinstance(f, tf.types.experimental.GenericFunction) for f in (target, call)):
        return "tf.function"
    return EAGER


def parameters(target: Any) -> list[inspect.Parameter] | None:
    """The Python parameters of `target` (a function, a tf.function, a bound method or an object
    with `__call__`), `self` excluded; None when Python cannot tell (a builtin, a C extension)."""
    try:
        return list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        return None


def takes_keywords(target: Any, names: Sequence[str]) -> bool:
    """Whether several inputs go to `target` as keyword tensors, `f(a=..., b=...)`: when each
    input names one of its parameters. Otherwise they go as one dict (Keras' convention for
    several inputs), and one input goes bare."""
    if len(names) < 2 or is_keras(target):
        return False
    try:
        return _keyword_names(target) >= set(names)
    except TypeError:  # unhashable: not cached, asked directly
        return _keyword_names.__wrapped__(target) >= set(names)


# Cached: the eager server asks on every request, and a bound method hashes as (self, function).
@functools.lru_cache(maxsize=256)
def _keyword_names(target: Any) -> frozenset[str]:
    keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return frozenset(p.name for p in parameters(target) or () if p.kind in keyword)


def predict_signature(
    model: Any, contract: SignatureContract, inputs: Mapping[str, Any]
) -> dict[str, Any]:
    """`model.predict(x)`, the Keras batch-inference path users compare with a direct call: the
    same argument convention and output names as `call_signature`. Keras models only."""
    if contract.function is not None or not is_keras(model):
        raise SignatureError(
            f"signature {contract.name!r}: model.predict needs a Keras model called as a whole"
        )
    names = [s.name for s in contract.inputs]
    args: Any = inputs[names[0]] if len(names) == 1 else {n: inputs[n] for n in names}
    result = model.predict(args, verbose=0)
    return name_outputs(result, contract, _keras_output_names(model))


def _keras_output_names(target: Any) -> list[str]:
    if not is_keras(target):
        return []
    try:
        return [str(n) for n in getattr(target, "output_names", None) or []]
    except (AttributeError, ValueError):  # subclassed models that were never built
        return []


def name_outputs(
    result: Any, contract: SignatureContract, default_names: Sequence[str] = ()
) -> dict[str, Any]:
    """Name the outputs.

    A dict keeps its keys, and declared output names must match them. A tensor or a sequence
    takes the declared names, else the Keras model's output layer names, else `output_i` (the
    names Keras' own `model.export()` gives). Raises SignatureError when the counts or names
    disagree.
    """
    declared = contract.output_names
    if isinstance(result, Mapping):
        named = {str(k): v for k, v in result.items()}
        if declared is not None and set(declared) != set(named):
            raise SignatureError(
                f"signature {contract.name!r}: the model returns outputs {sorted(named)}, the "
                f"signature declares {sorted(declared)}"
            )
        return named
    values = list(result) if isinstance(result, list | tuple) else [result]
    if declared is not None:
        if len(declared) != len(values):
            raise SignatureError(
                f"signature {contract.name!r} declares {len(declared)} output names "
                f"{list(declared)}, the model returns {len(values)} outputs"
            )
        names = list(declared)
    elif len(default_names) == len(values) and len(set(default_names)) == len(values):
        names = list(default_names)
    else:
        names = [f"output_{i}" for i in range(len(values))]
    return dict(zip(names, values, strict=True))


@dataclass
class Traced:
    contract: SignatureContract
    function: Any  # the tf.function, with the contract's input_signature
    concrete: Any  # its ConcreteFunction
    trace_count: int  # how often its Python ran; 1 unless something forced a retrace

    def outputs(self) -> list[TensorSpec]:
        return [
            spec_of(name, tf.TensorSpec(t.shape, t.dtype))
            for name, t in self.concrete.structured_outputs.items()
        ]


def trace(model: Any, contract: SignatureContract, jit_compile: bool = False) -> Traced:
    """Trace `contract`'s function of `model` once into a concrete function.

    Raises SignatureError if the model cannot be called on tensors of the contract's signature.
    """
    traced = Traced(contract, None, None, 0)
    names = [s.name for s in contract.inputs]

    def serve(*tensors: tf.Tensor) -> dict[str, tf.Tensor]:
        traced.trace_count += 1  # Python runs only while tracing: this counts traces, not calls.
        return call_signature(model, contract, dict(zip(names, tensors, strict=True)))

    serve.__name__ = f"serve_{contract.name}"
    traced.function = tf.function(
        serve, input_signature=[to_tf_spec(s) for s in contract.inputs], jit_compile=jit_compile
    )
    with signature_errors(contract, tracing=True):
        traced.concrete = traced.function.get_concrete_function()
    return traced


@contextmanager
def signature_errors(
    contract: SignatureContract, *, tracing: bool = False, hint: str = ""
) -> Iterator[None]:
    """Turn the errors a model raises on inputs it does not accept into a SignatureError;
    `tracing`: raised while tracing, where a free dimension is None (a hint says so); `hint`
    is added to the message (how the inputs were made, and how to give others)."""
    try:
        yield
    except SignatureError:
        raise
    except (TypeError, ValueError, AttributeError, tf.errors.InvalidArgumentError) as exc:
        signature = ", ".join(f"{s.name}: {s.describe()}" for s in contract.inputs)
        raise SignatureError(
            f"signature {contract.name!r}: the model cannot be called with inputs ({signature}): "
            f"{plain_text(str(exc))}{_free_dimension_hint(contract, exc) if tracing else ''}"
            f"{hint}"
        ) from exc


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def plain_text(message: str) -> str:
    """A model's error message without terminal escape codes (Keras colours its own), without
    the blank lines around its parts, and without the Python stack TensorFlow puts in a graph
    op's error ("Detected at node X defined at (most recent call last): File ...", one frame of
    TensorFlow's and the user's code a line): of that stack, the innermost frame is kept, the
    user's line that made the op. One paragraph in a graphserve error."""
    kept: list[str] = []
    frame: str | None = None
    for line in _ANSI.sub("", message).splitlines():
        text = line.strip()
        if frame is not None:  # inside the stack: its frames are indented, blank lines between
            if not text or line[:1].isspace():
                frame = text if text.startswith('File "') else frame
                continue
            kept.append(f"({frame})" if frame else "")
            frame = None
        if text.endswith("(most recent call last):"):
            kept.append(text.replace(" defined at (most recent call last):", ",").rstrip(":"))
            frame = ""
            continue
        kept.append(text)
    if frame:
        kept.append(f"({frame})")
    return " ".join(text for text in kept if text)


def _free_dimension_hint(contract: SignatureContract, exc: Exception) -> str:
    """A hint for the commonest tracing error: a free (-1) dimension is None while tracing, so
    `x.shape[0]` used as a Python int fails there, though it works when called eagerly."""
    free = any(d is None for s in contract.inputs for d in s.shape or ())
    # Python arithmetic or a reshape on that None; not a shape printed as (None, 784)
    symptoms = ("NoneType", "partially known", "None values not supported")
    if not free or not any(w in str(exc) for w in symptoms):
        return ""
    return (
        ". While tracing, a dimension the signature leaves free (-1) is None: compute sizes with "
        "tf.shape(x)[i] rather than x.shape[i], and use -1 in reshapes"
    )


def saveable(model: Any, traced: Sequence[Traced]) -> tf.Module:
    """A tf.Module holding only what the serving functions capture, for `tf.saved_model.save`.

    That is the variables they read, and the model's lookup tables and other resources whose
    handles they capture, which bring the assets (vocabulary files) their initializers read.
    Not the model itself: its own tf.functions would be saved with every concrete function the
    exporter's eager probe traced. Owners are found among the trackables reachable from the
    model (for a plain function, from the objects its closure and globals name). A captured
    resource no such trackable owns falls back to attaching the whole model, as before, so
    the export still succeeds; only bigger.
    """
    root = tf.Module()
    # Variables a plain function closes over are tracked here, or saving would refuse them.
    variables = [v for t in traced for v in t.concrete.variables]
    root.captured_variables = variables
    captured = {id(outer): outer for t in traced for outer, _ in t.concrete.graph.captures}
    owners = _owners(model)
    root.captured_resources = [owner for key, owner in owners.items() if key in captured]
    attributed = owners.keys() | {id(v.handle) for v in variables}
    unowned = any(t.dtype == tf.resource and key not in attributed for key, t in captured.items())
    trackable = isinstance(model, tf.Module) or is_keras(model) or hasattr(model, "signatures")
    if unowned and trackable:
        # The old way: saving finds what the model tracks, and saves its functions with it.
        root.model = model
    return root


def _owners(model: Any) -> dict[int, Any]:
    """The resources (tables) and assets reachable from `model`, by the id of the tensor a
    function captures to use them: the resource's handle, the asset's path. Variables are not
    needed here: a concrete function lists those it reads. Empty when the walk fails, which
    leaves every captured table unattributed."""
    owners: dict[int, Any] = {}
    try:
        for root in _roots(model):
            for trackable in tf.train.TrackableView(root).descendants():
                if isinstance(trackable, tf.saved_model.experimental.TrackableResource):
                    owners[id(trackable.resource_handle)] = trackable
                elif isinstance(trackable, tf.saved_model.Asset):
                    owners[id(trackable.asset_path)] = trackable
    except Exception:  # an object the walk cannot handle: fall back rather than fail
        return {}
    return owners


def _roots(model: Any) -> list[Any]:
    """Where the walk for owners starts: the model, and the trackables a plain function's
    closure and globals name (a function closing over a table is no trackable itself)."""
    trackable = tf.__internal__.tracking.Trackable
    roots = [model] if isinstance(model, trackable) else []
    function = getattr(model, "python_function", model)  # a tf.function's Python function
    try:
        names = inspect.getclosurevars(function)
    except (TypeError, ValueError):  # not a Python function (a tf.Module, a Keras model), or
        return roots  # a closure cell still empty
    named = [*names.nonlocals.values(), *names.globals.values(), getattr(model, "__self__", None)]
    return roots + [value for value in named if isinstance(value, trackable)]
