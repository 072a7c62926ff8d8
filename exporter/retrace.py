"""Retracing: a diagnosis shown with every export, and a gate only for real hazards.

Tracing is the tool's job. Each signature is traced once, by `model.trace`, with the declared
input signature, whatever the model is: an unsigned `tf.function`, a `tf.Module`, a Keras model.
So a model whose own `tf.function` retraces per batch shape when called eagerly exports fine, and
the probe here says so in a sentence (printed with the export, kept in the manifest) instead of
failing: "your own function retraces per batch shape when you call it eagerly; the exported one
does not".

What fails the export (RetraceError), each named with its argument and a fix, is what the
declared signature cannot express:

* a Python value the signature cannot carry: a parameter that no input fills (`check_arguments`),
  or a Python argument of the model's own tf.function whose value changes between eager calls
  (`probe_source`): the exported graph would keep only the value seen while tracing;
* a baked dimension, found by running the exported function next to the eager model at several
  batch sizes (`graphserve.exporter.hazards.check_dimensions`).

A `tf.function` whose own input_signature does not accept the declared one is a SignatureError
naming both. Finally `check_exported` calls each exported function at several batch sizes: none
may trace again.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf

from graphserve.core.contract import SignatureContract
from graphserve.core.errors import RetraceError, SignatureError
from graphserve.core.inputs import InputSource
from graphserve.core.results import JsonResult
from graphserve.core.signature import TensorSpec
from graphserve.model.domains import infer_ranges
from graphserve.model.trace import (
    Traced,
    call_signature,
    is_keras,
    parameters,
    resolve_function,
    signature_errors,
    takes_keywords,
)

__all__ = [
    "CHECK_BATCH_SIZES",
    "PROBE_BATCH_SIZES",
    "RetraceReport",
    "check_arguments",
    "check_exported",
    "entry_function",
    "model_label",
    "probe_source",
]

# Four distinct batch sizes for the eager probe: a function that relaxes shapes traces at most
# twice over them (the first shape, then a relaxed one); one that traces per shape, four times.
PROBE_BATCH_SIZES = (1, 2, 3, 5)
# The exported functions run at these, next to the eager model: 1 and 2 catch most sizes baked
# in while tracing, and 7 (odd, prime) a size that only happens to divide the usual ones.
CHECK_BATCH_SIZES = (1, 2, 7)
_RELAXED_TRACES = 2


@dataclass
class RetraceReport(JsonResult):
    """How the source's functions traced when called eagerly, how often each exported function
    traced, which dimensions were checked against the eager model, and one sentence on each."""

    batch_sizes: tuple[int, ...] = PROBE_BATCH_SIZES  # the eager probe
    checked_batch_sizes: tuple[int, ...] = CHECK_BATCH_SIZES  # exported next to eager
    exported: dict[str, int] = field(default_factory=dict)  # signature -> traces
    source_functions: dict[str, int] = field(default_factory=dict)  # function -> eager traces
    dimensions: dict[str, list[str]] = field(default_factory=dict)  # signature -> checked dims
    diagnosis: list[str] = field(default_factory=list)  # one sentence per function, then per sig


# -- before tracing: the arguments the signature gives -----------------------------------------


def check_arguments(model: Any, contracts: Sequence[SignatureContract]) -> None:
    """Fail on a parameter no input fills, and on a tf.function whose own input_signature does
    not accept the declared inputs. Raises RetraceError or SignatureError."""
    for contract in contracts:
        target = resolve_function(model, contract.function)
        if isinstance(target, tf.types.experimental.ConcreteFunction) or is_keras(target):
            continue  # a restored signature or Keras' call(inputs, training=...): both fit
        label = contract.function or model_label(model)
        names = [s.name for s in contract.inputs]
        keywords = takes_keywords(target, names)
        function = entry_function(target)
        if function is not None and function.input_signature is not None:
            _check_input_signature(label, function, contract, keywords)
        params = parameters(target)
        missing = _unfilled(params, names, keywords) if params is not None else []
        if missing:
            given = ", ".join(f"{s.name}: {s.describe()}" for s in contract.inputs)
            arg = missing[0]
            raise RetraceError(
                f"argument {arg!r} of {label!r} is a Python value the signature cannot carry: "
                f"signature {contract.name!r} passes only ({given}). Give {arg!r} a default or "
                f"bind it in your factory (functools.partial(fn, {arg}=...)); if it is a tensor, "
                f"declare it as an input too (--input {arg}:DTYPE:SHAPE): several inputs are "
                "passed by keyword to a function whose parameters carry their names"
            )


def entry_function(target: Any) -> Any:
    """The tf.function a call of `target` enters first: `target` itself, or its `__call__`."""
    polymorphic = tf.types.experimental.PolymorphicFunction
    if isinstance(target, polymorphic):
        return target
    # The bound `__call__` of a tf.Module whose __call__ is a tf.function (not callable(): the
    # question is what __call__ is, not whether there is one).
    call = getattr(target, "__call__", None)  # noqa: B004
    return call if isinstance(call, polymorphic) else None


def _unfilled(params: list[inspect.Parameter], names: list[str], keywords: bool) -> list[str]:
    """Required parameters that `call_signature`'s call leaves without a value."""
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    required = [p for p in params if p.default is p.empty and p.kind not in variadic]
    if keywords:
        return [p.name for p in required if p.name not in names]
    # One positional argument: the only input, or the dict of several.
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    first = next((p for p in params if p.kind in positional), None)
    return [p.name for p in required if p is not first]


def _check_input_signature(
    label: str, function: Any, contract: SignatureContract, keywords: bool
) -> None:
    declared = list(function.input_signature)
    if keywords:
        order = [p.name for p in parameters(function) or ()]
        pairs = {n: declared[order.index(n)] for n in order if n in _names(contract)}
    elif len(contract.inputs) == 1 and declared:
        pairs = {contract.inputs[0].name: declared[0]}
    else:
        return  # several inputs as one dict: the binding error, if any, says it
    ours = {s.name: s for s in contract.inputs}
    for name, theirs in pairs.items():
        if isinstance(theirs, tf.TensorSpec) and not _accepts(theirs, ours[name]):
            own = ", ".join(_describe_tf(s, i) for i, s in enumerate(declared))
            raise SignatureError(
                f"signature {contract.name!r} declares {name}: {ours[name].describe()}, but the "
                f"model's tf.function {label!r} has its own input_signature ({own}), which does "
                f"not accept it. Make the two agree: declare the function's signature (--input "
                f"{name}:{theirs.dtype.name}:{_shape_arg(theirs)}) or change its input_signature"
            )


def _names(contract: SignatureContract) -> set[str]:
    return {s.name for s in contract.inputs}


def _accepts(theirs: tf.TensorSpec, ours: TensorSpec) -> bool:
    """Whether a tensor of `ours` binds to `theirs`: same dtype, every fixed dimension of
    theirs fixed to the same size in ours (a free dimension in ours does not bind to a fixed)."""
    if theirs.dtype.name != ours.dtype:
        return False
    if theirs.shape.rank is None:
        return True
    dims = theirs.shape.as_list()
    if ours.shape is None:  # an unknown rank binds only to an unknown rank
        return False
    return len(dims) == len(ours.shape) and all(
        t is None or t == o for t, o in zip(dims, ours.shape, strict=True)
    )


def _describe_tf(spec: Any, index: int) -> str:
    if not isinstance(spec, tf.TensorSpec):
        return f"#{index}: {spec!r}"
    shape = "unknown rank" if spec.shape.rank is None else f"shape [{_shape_arg(spec, ', ')}]"
    return f"{spec.name or f'#{index}'}: {spec.dtype.name} of {shape}"


def _shape_arg(spec: tf.TensorSpec, sep: str = ",") -> str:
    dims = spec.shape.as_list() if spec.shape.rank is not None else []
    return sep.join("-1" if d is None else str(d) for d in dims)


# -- the eager probe: a diagnosis, and the Python-value gate --------------------------------------


def _probe_sizes(contract: SignatureContract, sizes: tuple[int, ...]) -> tuple[int, ...]:
    """Batch sizes a contract accepts: all of `sizes` if its batch is free, else its own."""
    first = contract.inputs[0].shape[0] if contract.inputs[0].shape else 1
    return sizes if first is None else (first,)


def probe_source(
    model: Any,
    contracts: Sequence[SignatureContract],
    report: RetraceReport,
    after_first_call: Callable[[], None] = lambda: None,
    inputs: InputSource | None = None,
) -> InputSource:
    """Call each contract eagerly at the probe batch sizes, as the eager server would, and say
    how the source's own tf.functions traced (`report.diagnosis`).

    Run it before tracing the exported functions: tracing them traces the source's functions for
    the relaxed (None) batch, which would then hide a per-shape retrace. The inputs come from
    `inputs` (the user's samples, else generated), with the ranges the model's graph tells added
    (`infer_ranges`, traced at a one-row batch after the trace counts are read, as the first
    eager call would trace); the source returned is the one every later step uses.
    `after_first_call` runs once the model's Python has run once, traced or eagerly (and built
    itself). Raises
    SignatureError when the model refuses the inputs (saying how they were made and how to give
    others), RetraceError when an argument of a tf.function is a Python value that changes
    between calls.
    """
    functions = _tf_functions(model, contracts)
    before = {
        name: (fn.experimental_get_tracing_count(), {id(c) for c in _concretes(fn)})
        for name, fn in functions.items()
    }
    source = inputs or InputSource()
    first = True
    for contract in contracts:
        if source.given(contract.name) is None:
            found = infer_ranges(model, contract)
            source = source.with_ranges(found or {})
            if found is not None and first:  # the model's Python ran (and built it) once
                after_first_call()
                first = False
    for contract in contracts:
        hint = "" if source.given(contract.name) is not None else source.refused(contract.inputs)
        for i, size in enumerate(_probe_sizes(contract, report.batch_sizes)):
            arrays = source.batch(contract.name, contract.inputs, size, seed=i)
            with signature_errors(contract, hint=hint):
                call_signature(model, contract, {k: tf.constant(v) for k, v in arrays.items()})
            if first:
                after_first_call()
                first = False
    for name, fn in functions.items():
        count, known = before[name]
        traces = fn.experimental_get_tracing_count() - count
        report.source_functions[name] = traces
        new = [c.structured_input_signature for c in _concretes(fn) if id(c) not in known]
        changes = _changes(_arg_names(fn), new)
        values = [c for c in changes if not c.shape]
        if values:
            change = values[0]
            raise RetraceError(
                f"argument {change.arg!r} of the model's tf.function {name!r} is a Python value "
                f"({change.values[0]!r}, then {change.values[1]!r}) that changes between calls: "
                "each value "
                "traces a new graph, and the exported graph would keep only the value seen while "
                "tracing, which the signature cannot carry. Pass it as a tensor (declare it as an "
                f"input, --input {change.arg}:DTYPE:SHAPE), or fix its value in your factory "
                f"(functools.partial(fn, {change.arg}=...))"
            )
        report.diagnosis.append(_diagnose(name, traces, changes, report.batch_sizes))
    return source


@dataclass
class _Change:
    arg: str  # the argument, with a path into it for a dict or list argument: x['a']
    values: list[Any]  # its distinct values, trace by trace: TensorSpecs or Python values
    shape: bool  # a tensor whose shape changed; else a Python value


def _changes(names: list[str], signatures: list[Any]) -> list[_Change]:
    """The arguments whose value differs between traces, with each value they took."""
    found: dict[str, _Change] = {}
    if not signatures:
        return []
    args0, kwargs0 = signatures[0]
    for args, kwargs in signatures[1:]:
        pairs = [
            *(
                (names[i] if i < len(names) else f"#{i}", a, b)
                for i, (a, b) in enumerate(zip(args0, args, strict=False))
            ),
            *((k, kwargs0[k], kwargs.get(k)) for k in kwargs0),
        ]
        for arg, a, b in pairs:
            for path, x, y in _leaves(arg, a, b):
                if _same(x, y):
                    continue
                shape = isinstance(x, tf.TensorSpec) and isinstance(y, tf.TensorSpec)
                change = found.setdefault(path, _Change(path, [x], shape))
                change.shape = change.shape and shape
                if not any(_same(y, v) for v in change.values):
                    change.values.append(y)
    return list(found.values())


def _leaves(path: str, a: Any, b: Any) -> Iterator[tuple[str, Any, Any]]:
    """Pairs of leaves of two arguments of the same structure (a dict of tensors, a list)."""
    if isinstance(a, Mapping) and isinstance(b, Mapping) and set(a) == set(b):
        for key in a:
            yield from _leaves(f"{path}[{key!r}]", a[key], b[key])
    elif isinstance(a, list | tuple) and isinstance(b, list | tuple) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            yield from _leaves(f"{path}[{i}]", x, y)
    else:
        yield path, a, b


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except (TypeError, ValueError):  # values whose == is elementwise or refused
        return a is b


def _diagnose(name: str, traces: int, changes: list[_Change], sizes: tuple[int, ...]) -> str:
    at = f"at batch sizes {', '.join(map(str, sizes))}"
    if traces == 0:
        return (
            f"tf.function {name!r} did not trace when the model ran eagerly {at} (it was traced "
            "for these shapes before, or is not on the path of a signature)"
        )
    if traces == 1:
        return f"tf.function {name!r} traced once when the model ran eagerly {at}"
    shapes = "; ".join(
        f"argument {c.arg!r} of shape {', '.join(_shape(v) for v in c.values)}" for c in changes
    )
    if traces <= _RELAXED_TRACES:
        return (
            f"tf.function {name!r} traced twice when the model ran eagerly {at}, the first "
            f"shape and then a relaxed one ({shapes or 'shapes relaxed'})"
        )
    fixes = [_relaxed_spec(c.values[0]) for c in changes if "[" not in c.arg]
    fix = (
        f"input_signature=[{', '.join(fixes)}] or " if fixes and len(fixes) == len(changes) else ""
    )
    return (
        f"your own tf.function {name!r} retraces per batch shape when you call it eagerly "
        f"({traces} traces {at}: {shapes or 'its inputs changed'}); the exported one does not: "
        "each signature is traced once, with the declared input signature and a free batch "
        f"dimension. To stop it retracing in your own eager code too, give it {fix}"
        "reduce_retracing=True"
    )


def _shape(spec: Any) -> str:
    if not isinstance(spec, tf.TensorSpec):
        return repr(spec)
    return str(tuple(spec.shape.as_list())) if spec.shape.rank is not None else "(unknown rank)"


def _relaxed_spec(spec: tf.TensorSpec) -> str:
    dims = spec.shape.as_list() if spec.shape.rank is not None else []
    shape = str([None, *dims[1:]]) if dims else "None"
    return f"tf.TensorSpec({shape}, tf.{spec.dtype.name})"


def _concretes(fn: Any) -> list[Any]:
    # Private, but the only way to see what each trace was for; without it the probe still
    # counts traces, it only cannot tell which argument changed.
    lister = getattr(fn, "_list_all_concrete_functions", None)
    return list(lister()) if lister else []


def _arg_names(fn: Any) -> list[str]:
    try:
        params = inspect.signature(fn.python_function).parameters
    except (TypeError, ValueError, AttributeError):
        return []
    return [p for p in params if p != "self"]


# -- after tracing: the exported functions --------------------------------------------------------


def check_exported(
    traced: Sequence[Traced], report: RetraceReport, inputs: InputSource | None = None
) -> None:
    """Call every exported function at the check batch sizes; none may trace again."""
    source = inputs or InputSource()
    for t in traced:
        sizes = _probe_sizes(t.contract, report.checked_batch_sizes)
        for i, size in enumerate(sizes):
            arrays = source.batch(t.contract.name, t.contract.inputs, size, seed=i)
            # A graph that fails at this size still shows whether it traced again;
            # check_dimensions names the cause of the failure.
            with contextlib.suppress(tf.errors.OpError):
                t.function(*(tf.constant(arrays[s.name]) for s in t.contract.inputs))
        count = t.function.experimental_get_tracing_count()
        report.exported[t.contract.name] = count
        described = ", ".join(f"{s.name}: {s.dtype} {s.shape_text()}" for s in t.contract.inputs)
        if count > 1 or t.trace_count > 1:
            raise RetraceError(
                f"signature {t.contract.name!r} ({described}) traced {max(count, t.trace_count)} "
                "times, expected once: its input signature is fixed, so something in the model "
                "forces a retrace; please report it with the model"
            )
        report.diagnosis.append(
            f"exported signature {t.contract.name!r} ({described}) traced once, and did not trace "
            f"again at batch sizes {', '.join(map(str, sizes))}"
        )


# -- the tf.functions a signature reaches ----------------------------------------------------------


def _tf_functions(model: Any, contracts: Sequence[SignatureContract]) -> dict[str, Any]:
    """The tf.functions a signature reaches: its target, the target's `__call__`, and those the
    target's closure cells, referenced module globals or object attributes hold."""
    found: dict[str, Any] = {}

    def visit(obj: Any, name: str, depth: int) -> None:
        if isinstance(obj, tf.types.experimental.PolymorphicFunction):
            if all(f is not obj for f in found.values()):
                found[name] = obj
            return
        if depth > 2:
            return
        if isinstance(obj, tf.Module):  # @tf.function methods, inherited ones included
            for klass in type(obj).__mro__:
                for attr, value in vars(klass).items():
                    if isinstance(value, tf.types.experimental.PolymorphicFunction):
                        visit(getattr(obj, attr), f"{name}.{attr}", depth + 1)
        code = getattr(obj, "__code__", None)
        if code is not None:  # a plain Python function: what it closes over or names
            for cell_name, cell in zip(code.co_freevars, obj.__closure__ or (), strict=False):
                visit(_cell_value(cell), cell_name, depth + 1)
            globals_ = getattr(obj, "__globals__", {})
            for global_name in code.co_names:
                if global_name in globals_:
                    visit(globals_[global_name], global_name, depth + 1)

    for contract in contracts:
        target = resolve_function(model, contract.function)
        if not isinstance(target, tf.types.experimental.ConcreteFunction):
            visit(target, contract.function or model_label(model), 0)
    return found


def _cell_value(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


def model_label(model: Any) -> str:
    """What to call the model in a message: its function's name, else its class name."""
    return getattr(model, "__name__", None) or type(model).__name__
