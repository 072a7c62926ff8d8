"""Tracing hazards found by running the model: Python side effects and baked dimensions.

Python in a model runs on every call when the model runs eagerly, but only once, while tracing,
in the exported graph. Two consequences are checked here:

* **Side effects** (`SideEffects`): output printed from Python, draws from Python's or numpy's
  global random generator, Python state the model changes (a counter, a list that grows). In the
  graph they happen once, at export, never per request. They are warnings, not failures: a
  debugging print does no harm, and when the graph computes something else parity fails anyway.
* **Baked dimensions** (`check_dimensions`): a size read while tracing (`x.shape[0]`, a fixed
  number in a reshape) where the signature leaves the dimension free. The exported function
  runs next to the eager model at batch sizes 1, 2, 7, and every other free dimension at sizes
  1, 2, 7; if it fails where the eager model runs, or answers with another shape, the export
  fails (RetraceError) naming the dimension and the fix. Values are compared by `check_parity`
  at each of those sizes, so the graph is the model at more than one batch size.
"""

from __future__ import annotations

import contextlib
import functools
import io
import random
import re
import sys
import types
from collections.abc import Callable, Iterator, Mapping, MutableMapping, MutableSequence, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import tensorflow as tf

from graphserve.core.contract import SignatureContract
from graphserve.core.errors import ParityError, RetraceError
from graphserve.core.inputs import InputSource, sample_inputs
from graphserve.core.signature import TensorSpec
from graphserve.exporter.retrace import RetraceReport, model_label
from graphserve.exporter.verify import DEFAULT_TOLERANCES, check_parity
from graphserve.model.trace import call_signature, is_keras, resolve_function

__all__ = ["SideEffects", "check_dimensions"]

# -- side effects ------------------------------------------------------------------------------


class SideEffects:
    """Watches the model's Python while the export runs it (the eager probe, then tracing).

    `watch()` captures what Python prints (so it cannot reach the stdout of `--output json`) and
    the global random generators' state; `settle()`, called once the model has run once (and
    built itself: a Keras model creates its weights), snapshots the Python state the model's
    code can change; `warnings()` then says what happened, naming the functions and the fix.
    """

    def __init__(self, model: Any, contracts: Sequence[SignatureContract]) -> None:
        self._label = model_label(model)
        self._functions = _python_functions(model, contracts)
        self._watched = _watched_state(model, self._functions)
        self._stdout = io.StringIO()
        self._rng_before: Any = None
        self._rng_after: Any = None
        self._state: dict[str, Any] | None = None
        self._state_after: dict[str, Any] = {}

    @contextlib.contextmanager
    def watch(self) -> Iterator[None]:
        self._rng_before = _global_rng()
        try:
            # Process-wide, like every redirect of sys.stdout: an export is one step at a time.
            with contextlib.redirect_stdout(self._stdout):
                yield
        except BaseException:
            sys.stderr.write(self._stdout.getvalue())  # the user's prints, for their debugging
            raise
        self._rng_after = _global_rng()
        if self._state is not None:
            self._state_after = _snapshot(self._watched)

    def settle(self) -> None:
        # What the first run did is building, not serving: a model that draws its initial
        # weights from Python's random (tf-keras does, when it builds on its first call) or
        # sets its attributes then is not warned about; only what later runs do is.
        self._state = _snapshot(self._watched)
        self._rng_before = _global_rng()

    def warnings(self) -> list[str]:
        messages = []
        printed = self._stdout.getvalue().strip()
        if printed:
            first = printed.splitlines()[0][:80]
            messages.append(
                f"{self._who('print')} prints from Python ({first!r}): in the exported graph "
                "print runs once, while tracing, never per request; use tf.print to print on "
                "every call"
            )
        if self._rng_before is not None and not _same_rng(self._rng_before, self._rng_after):
            messages.append(
                f"{self._who('random')} draws from Python's random or numpy.random: in the "
                "exported graph the draw happens once, while tracing, and its value is a "
                "constant; use tf.random (tf.random.uniform, tf.random.Generator) to draw per "
                "request"
            )
        before, after = self._state or {}, self._state_after
        changed = [
            _describe_change(where, before[where], after.get(where))
            for where in before
            if not _same(before[where], after.get(where))
        ]
        if changed:
            messages.append(
                f"{self._who()} changes Python state when it runs ({'; '.join(changed)}): in "
                "the exported graph that code runs once, while tracing, not per request; keep "
                "per-request state in a tf.Variable (v.assign_add(1)) or drop the side effect"
            )
        return messages

    def _who(self, name: str | None = None) -> str:
        """The functions whose code names `name` (print, random), else the model."""
        if name is not None:
            found = [f.__qualname__ for f in self._functions if name in f.__code__.co_names]
            if found:
                return ", ".join(repr(f) for f in dict.fromkeys(found))
        return f"the model {self._label!r}"


_LIBRARIES = ("keras", "tensorflow", "tf_keras")


def _python_functions(
    model: Any, contracts: Sequence[SignatureContract]
) -> list[types.FunctionType]:
    """The Python functions a signature calls first: the function, or the object's `__call__`
    (Keras' `call`), through tf.function and bound-method wrappers."""
    functions: list[types.FunctionType] = []
    for contract in contracts:
        target = resolve_function(model, contract.function)
        candidates = [target]
        if not isinstance(_unwrap(target), types.FunctionType):
            candidates = [getattr(type(target), "call" if is_keras(target) else "__call__", None)]
        for candidate in candidates:
            function = _unwrap(candidate)
            # Keras' and TensorFlow's own code keeps caches that calls change by design.
            library = (getattr(function, "__module__", None) or "").split(".")[0] in _LIBRARIES
            if (
                isinstance(function, types.FunctionType)
                and not library
                and function not in functions
            ):
                functions.append(function)
    return functions


def _unwrap(obj: Any) -> Any:
    if isinstance(obj, tf.types.experimental.PolymorphicFunction):
        obj = obj.python_function
    return getattr(obj, "__func__", obj)  # a bound method's function


def _watched_state(model: Any, functions: list[types.FunctionType]) -> dict[str, Callable[[], Any]]:
    """Readers of the Python state the model's code can change: the model's public attributes,
    and the module globals and closure variables its functions name."""
    watched: dict[str, Callable[[], Any]] = {}
    if not isinstance(model, types.FunctionType) and hasattr(model, "__dict__"):
        for attr in list(vars(model)):
            if not attr.startswith("_"):
                watched[f"attribute {attr!r}"] = functools.partial(vars(model).get, attr)
    for function in functions:
        for name in function.__code__.co_names:
            if name in function.__globals__:
                reader = functools.partial(function.__globals__.get, name)
                watched.setdefault(f"global {name!r}", reader)
        cells = zip(function.__code__.co_freevars, function.__closure__ or (), strict=False)
        for name, cell in cells:
            watched.setdefault(f"closure variable {name!r}", functools.partial(_cell, cell))
    return watched


def _cell(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


def _snapshot(watched: Mapping[str, Callable[[], Any]]) -> dict[str, Any]:
    state = {}
    for where, read in watched.items():
        fingerprint = _fingerprint(read())
        if fingerprint is not None:
            state[where] = fingerprint
    return state


def _fingerprint(value: Any) -> Any:
    """A comparable summary of state a call could change, or None for what is not watched:
    numbers and strings by value, containers by size, random generators by state."""
    if isinstance(value, bool | int | float | str):
        return ("value", value)
    if isinstance(value, MutableSequence | MutableMapping | set):
        return ("items", len(value))
    if isinstance(value, random.Random):
        return ("rng", value.getstate())
    if isinstance(value, np.random.Generator):
        return ("rng", repr(value.bit_generator.state))
    if isinstance(value, np.random.RandomState):
        return ("rng", repr(value.get_state(legacy=False)))
    return None


def _same(a: Any, b: Any) -> bool:
    return bool(a == b)


def _describe_change(where: str, before: Any, after: Any) -> str:
    if after is None:
        return f"{where} went away"
    kind, old = before
    new = after[1]
    if kind == "items":
        return f"{where} went from {old} to {new} items"
    if kind == "rng":
        return f"{where} (a random generator) was drawn from"
    return f"{where} went from {old!r} to {new!r}"


def _global_rng() -> tuple[Any, str]:
    return random.getstate(), repr(np.random.get_state(legacy=False))


def _same_rng(a: tuple[Any, str], b: tuple[Any, str]) -> bool:
    return a[0] == b[0] and a[1] == b[1]


# -- baked dimensions ------------------------------------------------------------------------------

_FIX = (
    "Compute sizes with tf.shape(x)[i] (and -1 in reshapes) rather than x.shape[i] or a fixed "
    "number, or declare the size the model takes"
)


def check_dimensions(
    loaded: Any,
    model: Any,
    contracts: Sequence[SignatureContract],
    report: RetraceReport,
    *,
    tolerances: Mapping[str, tuple[float, float]] = DEFAULT_TOLERANCES,
    inputs: InputSource | None = None,
) -> list[str]:
    """Run every signature of `loaded` next to `model` with each free dimension at the check
    sizes; returns warnings. Raises RetraceError for a dimension baked into the graph, and
    ParityError when the values differ at one of those sizes."""
    warnings: list[str] = []
    source = inputs or InputSource()
    for contract in contracts:
        function = loaded.signatures[contract.name]
        checked = report.dimensions.setdefault(contract.name, [])
        for plan in _plans(contract, report.checked_batch_sizes, source):
            ran, both_fail = [], []
            for size in plan.sizes:
                arrays = plan.inputs(size)
                tensors = {k: tf.constant(v) for k, v in arrays.items()}
                graph, graph_error = _run(functools.partial(function, **tensors))
                eager, eager_error = _run(
                    functools.partial(call_signature, model, contract, tensors)
                )
                where = plan.where(size)
                if graph_error and eager_error:  # the model's own limit, or unfit inputs
                    both_fail.append((size, graph_error))
                    continue
                if eager_error:
                    warnings.append(
                        f"signature {contract.name!r}: the eager model fails at {where} where "
                        f"the exported function runs: {eager_error}"
                    )
                    continue
                if graph_error:
                    raise RetraceError(
                        f"signature {contract.name!r} leaves {plan.dimension} free, but the "
                        f"exported function fails at {where} where the eager model runs: "
                        f"{graph_error}. A size was baked into the graph while tracing"
                        f"{_static_hint(function, plan)}. {_FIX} ({plan.declare})"
                    )
                _compare_shapes(contract, plan, where, graph, eager, function)
                _compare_values(loaded, model, contract, arrays, where, tolerances)
                ran.append(size)
            if both_fail and plan.batch:  # the signature says any batch size: say it does not
                failed = ", ".join(str(size) for size, _ in both_fail)
                given = source.given(contract.name) is not None
                hint = "" if given else " (generated inputs: --samples-file gives ones it takes)"
                warnings.append(
                    f"signature {contract.name!r} declares any batch size, but the model fails "
                    f"at batch sizes {failed}, eagerly and exported alike{hint}: {both_fail[0][1]}"
                )
            sizes = ", ".join(map(str, ran or plan.sizes))
            checked.append(plan.label(sizes) + ("" if ran else " (none ran, eager or exported)"))
        if checked:
            report.diagnosis.append(
                f"exported signature {contract.name!r} matches the eager model at "
                + " and at ".join(checked)
            )
    return warnings


class _Plan:
    """One free dimension (the batch, or the other free dimensions together) and its sizes."""

    def __init__(
        self,
        contract: SignatureContract,
        sizes: tuple[int, ...],
        batch: bool,
        source: InputSource,
    ) -> None:
        self.contract, self.sizes, self.batch, self._source = contract, sizes, batch, source
        self._samples = source.given(contract.name)
        first = contract.inputs[0]
        if batch:
            self.names = ""
            self.dimension = f"the batch dimension (dimension 0 of {first.name!r})"
            self.declare = f"--input {first.name}:{first.dtype}:{_shape_text(first, {0})}"
        else:
            free = [(s, i) for s in contract.inputs for i in _free(s)]
            self.names = ", ".join(f"{s.name}[{i}]" for s, i in free)
            self.dimension = f"dimension{'s' if len(free) > 1 else ''} {self.names}"
            spec, _ = free[0]
            self.declare = f"--input {spec.name}:{spec.dtype}:{_shape_text(spec, set(_free(spec)))}"

    def where(self, size: int) -> str:
        return f"batch size {size}" if self.batch else f"{self.names} = {size}"

    def label(self, sizes: str) -> str:
        return f"batch sizes {sizes}" if self.batch else f"sizes {sizes} of {self.names}"

    def inputs(self, size: int) -> dict[str, np.ndarray]:
        if self._samples is not None:  # the user's rows, cycled to the batch size
            return {
                k: np.take(v, np.arange(size) % len(v), axis=0) for k, v in self._samples.items()
            }
        ranges = self._source.ranges
        if self.batch:
            return sample_inputs(self.contract.inputs, batch_size=size, seed=size, ranges=ranges)
        sized = [
            replace(s, shape=tuple(size if i in _free(s) else d for i, d in enumerate(s.shape)))
            if s.shape is not None
            else s
            for s in self.contract.inputs
        ]
        return sample_inputs(sized, batch_size=2, seed=size, ranges=ranges)


def _plans(contract: SignatureContract, sizes: tuple[int, ...], source: InputSource) -> list[_Plan]:
    first = contract.inputs[0]
    if not first.shape or first.shape[0] is not None:
        return []  # a fixed batch (a NAME_batchB variant, or declared so)
    plans = [_Plan(contract, sizes, batch=True, source=source)]
    if source.given(contract.name) is None and any(_free(s) for s in contract.inputs):
        plans.append(_Plan(contract, sizes, batch=False, source=source))
    return plans


def _free(spec: TensorSpec) -> list[int]:
    """The free dimensions of `spec` other than the batch."""
    return [i for i, d in enumerate(spec.shape or ()) if d is None and i > 0]


def _shape_text(spec: TensorSpec, fixed: set[int]) -> str:
    return ",".join(
        "N" if i in fixed else ("-1" if d is None else str(d))
        for i, d in enumerate(spec.shape or ())
    )


def _run(call: Callable[[], Any]) -> tuple[dict[str, np.ndarray], str]:
    """The outputs as arrays, or the first line of the error the call raised."""
    try:
        return {k: np.asarray(v) for k, v in call().items()}, ""
    except Exception as exc:  # any error of the model's, graph or eager, is the finding
        return {}, _error_text(exc)


# The lines of a TensorFlow error that locate it rather than say it.
_NOISE = re.compile(
    r"^(Graph execution error:|Detected at node|<stack traces unavailable>|File |\[\[)"
)


def _error_text(exc: Exception) -> str:
    """What went wrong, in one line: a graph error's message without its node and stack lines."""
    text = getattr(exc, "message", None) or str(exc)
    for line in text.splitlines():
        line = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", line).strip()
        if line and not _NOISE.match(line):
            return line[:300]
    return type(exc).__name__


def _compare_shapes(
    contract: SignatureContract,
    plan: _Plan,
    where: str,
    graph: dict[str, np.ndarray],
    eager: dict[str, np.ndarray],
    function: Any,
) -> None:
    for name in sorted(graph.keys() & eager.keys()):
        got, expected = graph[name].shape, eager[name].shape
        if got == expected:
            continue
        if len(got) == len(expected):
            dims = [i for i, (g, e) in enumerate(zip(got, expected, strict=True)) if g != e]
            which = f"dimension {dims[0]} of {name!r} was fixed while tracing"
        else:
            which = f"the rank of {name!r} was fixed while tracing"
        static = _static_shape(function, name)
        raise RetraceError(
            f"signature {contract.name!r} leaves {plan.dimension} free, but at {where} the "
            f"exported function returns {name!r} of shape {got}, the eager model {expected}: "
            f"{which}{f' (graph shape {static})' if static else ''}. {_FIX} ({plan.declare})"
        )


def _compare_values(
    loaded: Any,
    model: Any,
    contract: SignatureContract,
    arrays: dict[str, np.ndarray],
    where: str,
    tolerances: Mapping[str, tuple[float, float]],
) -> None:
    """`check_parity` on exactly these inputs: one definition of "the same values"."""
    try:
        check_parity(
            loaded,
            model,
            [contract],
            batches=1,
            tolerances=tolerances,
            inputs=InputSource({contract.name: arrays}),
        )
    except ParityError as exc:
        raise ParityError(f"at {where}: {exc}") from None


def _static_shape(function: Any, name: str) -> str:
    outputs = getattr(function, "structured_outputs", None) or {}
    tensor = outputs.get(name) if isinstance(outputs, Mapping) else None
    if tensor is None or tensor.shape.rank is None:
        return ""
    return "[" + ", ".join("-1" if d is None else str(d) for d in tensor.shape.as_list()) + "]"


def _static_hint(function: Any, plan: _Plan) -> str:
    """For the batch: outputs whose first dimension the graph fixed though the batch is free."""
    if not plan.batch:
        return ""
    outputs = getattr(function, "structured_outputs", None) or {}
    fixed = [
        f"{name!r} has the fixed first dimension {t.shape[0]}"
        for name, t in (outputs.items() if isinstance(outputs, Mapping) else ())
        if t.shape.rank and t.shape[0] is not None
    ]
    return f" ({'; '.join(fixed)} in the graph)" if fixed else ""
