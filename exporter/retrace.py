"""The retrace guard: every served function must trace once, whatever the batch size.

Retracing is the classic `tf.function` trap: a new Python value, or a new shape on a function
that does not relax shapes, traces a new graph on the request path. The guard checks two things:

* the source's own `tf.function`s (the model, its `__call__`, signature methods, and functions
  they reach through closures or module globals), called eagerly at several batch sizes as the
  eager server calls them: more traces than a shape-relaxing function needs fails, naming the
  argument that changed;
* the exported functions, called at those batch sizes after tracing: they must not trace again.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf

from exporter.contract import SignatureContract
from exporter.errors import RetraceError
from exporter.signature import sample_inputs
from exporter.trace import Traced, call_signature, resolve_function, signature_errors

__all__ = ["PROBE_BATCH_SIZES", "RetraceReport", "check_exported", "probe_source"]

# Four distinct batch sizes: a function that relaxes shapes traces at most twice over them (the
# first shape, then a relaxed one); one that traces per shape traces four times.
PROBE_BATCH_SIZES = (1, 2, 3, 5)
_RELAXED_TRACES = 2


@dataclass
class RetraceReport:
    batch_sizes: tuple[int, ...] = PROBE_BATCH_SIZES
    exported: dict[str, int] = field(default_factory=dict)  # signature -> traces
    source_functions: dict[str, int] = field(default_factory=dict)  # function -> eager traces

    def to_json(self) -> dict[str, Any]:
        return {
            "batch_sizes": list(self.batch_sizes),
            "exported": self.exported,
            "source_functions": self.source_functions,
        }


def _probe_sizes(contract: SignatureContract) -> tuple[int, ...]:
    """Batch sizes a contract accepts: all probe sizes if its batch is free, else its own."""
    first = contract.inputs[0].shape[0] if contract.inputs[0].shape else 1
    return PROBE_BATCH_SIZES if first is None else (first,)


def probe_source(model: Any, contracts: Sequence[SignatureContract], report: RetraceReport) -> None:
    """Call each contract eagerly at the probe batch sizes and count the source's traces.

    Run it before tracing the exported functions: tracing them traces the source's functions for
    the relaxed (None) batch, which would then hide a per-shape retrace. Raises RetraceError.
    """
    functions = _tf_functions(model, contracts)
    before = {name: fn.experimental_get_tracing_count() for name, fn in functions.items()}
    for contract in contracts:
        sizes = _probe_sizes(contract)
        for i, size in enumerate(sizes):
            arrays = sample_inputs(contract.inputs, batch_size=size, seed=i)
            with signature_errors(contract):
                call_signature(model, contract, {k: tf.constant(v) for k, v in arrays.items()})
    for name, fn in functions.items():
        traces = fn.experimental_get_tracing_count() - before[name]
        report.source_functions[name] = traces
        if traces > _RELAXED_TRACES:
            raise RetraceError(
                f"the model's tf.function {name!r} traced {traces} times when called eagerly at "
                f"batch sizes {', '.join(map(str, report.batch_sizes))}: {_culprit(fn)}"
            )


def check_exported(traced: Sequence[Traced], report: RetraceReport) -> None:
    """Call every exported function at the probe batch sizes; none may trace again."""
    for t in traced:
        for i, size in enumerate(_probe_sizes(t.contract)):
            arrays = sample_inputs(t.contract.inputs, batch_size=size, seed=i)
            t.function(*(tf.constant(arrays[s.name]) for s in t.contract.inputs))
        count = t.function.experimental_get_tracing_count()
        report.exported[t.contract.name] = count
        if count > 1 or t.trace_count > 1:
            raise RetraceError(
                f"signature {t.contract.name!r} traced {max(count, t.trace_count)} times, "
                f"expected once: {_culprit(t.function)}"
            )


def _culprit(fn: Any) -> str:
    """Name the argument whose value differs between the first two traces of `fn`."""
    # Private, but the only way to see what each trace was for; degrade to a generic hint.
    lister = getattr(fn, "_list_all_concrete_functions", None)
    concretes = list(lister()) if lister else []
    signatures = [c.structured_input_signature for c in concretes]
    if len(signatures) >= 2:
        names = _arg_names(fn)
        (args_a, kwargs_a), (args_b, kwargs_b) = signatures[0], signatures[1]
        pairs = [
            *(
                (names[i] if i < len(names) else f"#{i}", a, b)
                for i, (a, b) in enumerate(zip(args_a, args_b, strict=False))
            ),
            *((k, kwargs_a[k], kwargs_b.get(k)) for k in kwargs_a),
        ]
        reasons = []
        for arg, a, b in pairs:
            if a == b:
                continue
            if isinstance(a, tf.TensorSpec) and isinstance(b, tf.TensorSpec):
                reasons.append(
                    f"argument {arg!r} changed shape {_shape(a)} -> {_shape(b)} and the function "
                    f"does not relax shapes; give it input_signature=[tf.TensorSpec("
                    f"{_relaxed(a)}, tf.{a.dtype.name})] or reduce_retracing=True"
                )
            else:  # a Python value: the likelier culprit, so it goes first
                reasons.insert(
                    0,
                    f"argument {arg!r} is a Python value ({a!r}, then {b!r}) where a tensor was "
                    "expected; each new value traces a new graph: pass it as a tensor",
                )
        if reasons:
            return "; ".join(reasons)
    return (
        "something other than the tensor arguments changed between calls (a Python value or a "
        "shape); give the function an input_signature"
    )


def _arg_names(fn: Any) -> list[str]:
    try:
        params = inspect.signature(fn.python_function).parameters
    except (TypeError, ValueError, AttributeError):
        return []
    return [p for p in params if p != "self"]


def _shape(spec: tf.TensorSpec) -> str:
    return str(tuple(spec.shape.as_list())) if spec.shape.rank is not None else "(unknown rank)"


def _relaxed(spec: tf.TensorSpec) -> str:
    dims = spec.shape.as_list() if spec.shape.rank is not None else []
    return str([None, *dims[1:]]) if dims else "None"


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
            visit(target, contract.function or _label(model), 0)
    return found


def _cell_value(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


def _label(model: Any) -> str:
    return getattr(model, "__name__", None) or type(model).__name__
