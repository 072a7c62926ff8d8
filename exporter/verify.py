"""Parity: the SavedModel as written, reloaded, must compute what the eager model computes.

Every signature is compared output by output with graphserve.core.parity's rule: floats element
by element within `atol * max(scale, 1) + rtol * |eager|`, where `scale` is the output's largest
finite |eager| value in the batch, with a tolerance per dtype; everything else exactly.

Passing is only worth something when the output depends on the input more than the tolerance
allows: an untrained softmax answers 0.001 for every input, and any graph near that passes. So
each output's spread across all inputs compared is measured too, and an output that varies by
no more than `DISCRIMINATION` times its allowed error is marked (`discriminates` false) with a
sentence in `ParityReport.warnings`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np
import tensorflow as tf

from graphserve.core.contract import SignatureContract
from graphserve.core.errors import ParityError
from graphserve.core.inputs import InputSource, Samples, load_samples, sample_inputs
from graphserve.core.parity import DEFAULT_TOLERANCES, closeness
from graphserve.core.results import JsonResult
from graphserve.model.trace import call_signature

__all__ = [
    "DEFAULT_TOLERANCES",
    "DISCRIMINATION",
    "OutputParity",
    "ParityReport",
    "Samples",
    "VocabularyCoverage",
    "check_parity",
    "load_samples",
]

# An output that varies across inputs by no more than this many times its allowed absolute
# error cannot tell a wrong graph from a right one.
DISCRIMINATION = 10.0


@dataclass
class OutputParity:
    """One output of one signature: how far the graph is from the eager model, what was
    allowed, and whether the check could have told (`discriminates`)."""

    signature: str
    output: str
    dtype: str
    max_abs_error: float
    max_rel_error: float
    atol: float | None  # None: compared exactly
    rtol: float | None
    passed: bool
    scale: float | None = None  # the largest finite |eager| value (of the batches, the largest)
    allowed_abs_error: float | None = None  # atol * max(scale, 1), before rtol * |eager|
    variation: float | None = None  # max over elements of (max - min across inputs); floats
    rows: int = 0  # the inputs (rows along the first dimension) the variation covers
    discriminates: bool = True  # varies across inputs by more than the check allows


@dataclass
class VocabularyCoverage(JsonResult):
    """How much of an input's vocabulary (a table the model looks it up in) the generated
    batches the check compared held: `covered` of the `size` words (or integer keys)."""

    signature: str
    input: str
    covered: int
    size: int
    unit: str = "words"

    def text(self) -> str:
        share = f"{100 * self.covered / self.size:.0f} %" if self.size else "none"
        return (
            f"the parity check covered {self.covered:,} of the {self.size:,} {self.unit} "
            f"({share}) of the vocabulary of input {self.input!r} ({self.signature})"
        )


@dataclass
class ParityReport(JsonResult):
    """How far the reloaded graph is from the eager model, per signature and output; and for
    an input looked up in a vocabulary, how much of it the generated batches covered."""

    json_keys: ClassVar = ("passed", "batches", "samples", "max_abs_error", "max_rel_error", ...)

    batches: int
    samples: str  # "random" or the samples file
    outputs: list[OutputParity] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    vocabularies: list[VocabularyCoverage] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.mismatches

    @property
    def max_abs_error(self) -> float:
        return max((o.max_abs_error for o in self.outputs), default=0.0)

    @property
    def max_rel_error(self) -> float:
        return max((o.max_rel_error for o in self.outputs), default=0.0)

    @property
    def warnings(self) -> list[str]:
        """A sentence for each output too constant across the inputs for the check to tell a
        wrong graph from a right one."""
        return [
            f"output {o.output!r} of signature {o.signature!r} {_constancy(o)}: the parity "
            "check cannot tell a wrong graph from this one; export with real samples "
            "(--samples-file) to check it"
            for o in self.outputs
            if not o.discriminates
        ]


def check_parity(
    loaded: Any,
    model: Any,
    contracts: Sequence[SignatureContract],
    *,
    batches: int = 3,
    batch_size: int = 4,
    tolerances: Mapping[str, tuple[float, float]] = DEFAULT_TOLERANCES,
    inputs: InputSource | None = None,
    seed: int = 0,
) -> ParityReport:
    """Compare every signature of `loaded` (the reloaded SavedModel) with `model` run eagerly.

    The user's samples in `inputs` (all their rows) replace the generated batches (within its
    ranges) for the signatures they cover. Raises ParityError naming the signature, the output
    and the error when they disagree.
    """
    source = inputs or InputSource()
    report = ParityReport(batches=batches, samples=source.label or "random")
    for contract in contracts:
        if contract.name not in loaded.signatures:
            raise ParityError(f"the reloaded SavedModel has no signature {contract.name!r}")
        function = loaded.signatures[contract.name]
        worst: dict[str, OutputParity] = {}
        spreads: dict[str, _Spread] = {}
        generated = source.given(contract.name) is None
        words: dict[str, set[str]] = {}
        for arrays in _batches(contract, source, batches, batch_size, seed):
            if generated:
                _collect_words(arrays, source, words)
            tensors = {name: tf.constant(a) for name, a in arrays.items()}
            graph = {k: v.numpy() for k, v in function(**tensors).items()}
            eager = {k: np.asarray(v) for k, v in call_signature(model, contract, tensors).items()}
            if set(graph) != set(eager):
                raise ParityError(
                    f"signature {contract.name!r}: the SavedModel returns outputs "
                    f"{sorted(graph)}, the eager model {sorted(eager)}"
                )
            for name, expected in eager.items():
                result = _compare(contract.name, name, graph[name], expected, tolerances)
                if result is None:
                    report.mismatches.append(
                        f"signature {contract.name!r} output {name!r} has shape "
                        f"{graph[name].shape}, eager {expected.shape}"
                    )
                    continue
                worst[name] = _merge(worst.get(name), result)
                spreads.setdefault(name, _Spread()).add(expected)
        report.outputs.extend(spreads[name].judge(result) for name, result in worst.items())
        for name, seen in words.items():
            vocabulary = source.ranges[name].vocabulary
            assert vocabulary is not None  # _collect_words keeps only those
            covered = len(seen & set(vocabulary.words))
            report.vocabularies.append(
                VocabularyCoverage(contract.name, name, covered, vocabulary.size, vocabulary.unit)
            )
    report.mismatches.extend(_mismatch(o) for o in report.outputs if not o.passed)
    if report.mismatches:
        raise ParityError(
            "the reloaded SavedModel disagrees with the eager model: "
            + "; ".join(report.mismatches[:3])
        )
    return report


def _collect_words(
    arrays: Mapping[str, np.ndarray], source: InputSource, into: dict[str, set[str]]
) -> None:
    """The words of each input with a vocabulary in `source.ranges`, added to `into`."""
    for name, array in arrays.items():
        span = source.ranges.get(name)
        if span is None or span.vocabulary is None:
            continue
        seen = into.setdefault(name, set())
        for value in np.asarray(array).reshape(-1):
            text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
            seen.update(text.split(" ") if span.vocabulary.phrases else [text])


def _batches(
    contract: SignatureContract, source: InputSource, batches: int, batch_size: int, seed: int
) -> list[dict[str, np.ndarray]]:
    user = source.given(contract.name)
    fixed_batch = contract.inputs[0].shape[0] if contract.inputs[0].shape else None
    if user and fixed_batch is None:
        rows = len(next(iter(user.values())))
        step = max(batch_size, 1) if rows > 64 else rows
        return [{k: v[i : i + step] for k, v in user.items()} for i in range(0, rows, step)]
    return [
        sample_inputs(contract.inputs, batch_size=batch_size, seed=seed + b, ranges=source.ranges)
        for b in range(batches)
    ]


def _merge(previous: OutputParity | None, result: OutputParity) -> OutputParity:
    """The worst of two batches' results for one output; the scale and allowed error of a
    failing batch, else of the larger scale."""
    if previous is None:
        return result
    kept = max(previous, result, key=lambda o: (not o.passed, o.scale or 0.0))
    return replace(
        kept,
        max_abs_error=max(previous.max_abs_error, result.max_abs_error),
        max_rel_error=max(previous.max_rel_error, result.max_rel_error),
        passed=previous.passed and result.passed,
    )


def _compare(
    signature: str,
    name: str,
    got: np.ndarray,
    expected: np.ndarray,
    tolerances: Mapping[str, tuple[float, float]],
) -> OutputParity | None:
    """One batch of one output, graph (`got`) against eager (`expected`); None when the shapes
    differ. Floats pass element by element within `atol * max(scale, 1) + rtol * |eager|`;
    infinities and NaNs must match."""
    if got.shape != expected.shape:
        return None
    dtype = tf.as_dtype(expected.dtype).name if expected.dtype != object else "string"
    c = closeness(got, expected, dtype, tolerances)
    return OutputParity(
        signature, name, dtype, c.max_abs_error, c.max_rel_error, c.atol, c.rtol, c.passed,
        c.scale, c.allowed_abs_error,
    )  # fmt: skip


class _Spread:
    """How much one eager output varies between inputs: each element's running min and max
    over the rows (first dimension) of every batch compared. A batch whose rows have another
    shape than the first batch's is left out: elements only line up between equal shapes."""

    def __init__(self) -> None:
        self.rows = 0
        self.shape: tuple[int, ...] | None = None  # of a row
        self.first: Any = None  # the first row, for outputs compared exactly
        self.differs = False  # a row differs from the first
        self.low: np.ndarray | None = None  # floats: per element, NaNs ignored
        self.high: np.ndarray | None = None

    def add(self, batch: np.ndarray) -> None:
        rows = batch[np.newaxis] if batch.ndim == 0 else batch
        if len(rows) == 0 or self.shape not in (None, rows.shape[1:]):
            return
        if self.shape is None:
            self.shape, self.first = rows.shape[1:], rows[0]
        self.rows += len(rows)
        if batch.dtype.kind not in "fc":
            self.differs = self.differs or any(not np.array_equal(r, self.first) for r in rows)
            return
        values = _real(rows)
        low, high = np.fmin.reduce(values, axis=0), np.fmax.reduce(values, axis=0)
        self.low = low if self.low is None else np.fmin(self.low, low)
        self.high = high if self.high is None else np.fmax(self.high, high)

    def judge(self, result: OutputParity) -> OutputParity:
        """`result` with the variation, and whether it is more than the check allows."""
        if self.low is None or self.high is None:
            return replace(result, rows=self.rows, discriminates=self.rows > 1 and self.differs)
        with np.errstate(invalid="ignore"):
            variation = float(np.nanmax(self.high - self.low, initial=0.0))
        allowed = result.allowed_abs_error or 0.0
        return replace(
            result,
            variation=variation,
            rows=self.rows,
            discriminates=self.rows > 1 and variation > DISCRIMINATION * allowed,
        )


def _real(array: np.ndarray) -> np.ndarray:
    """Floats as float64; complex numbers as their real and imaginary parts side by side."""
    if array.dtype.kind == "c":
        return np.stack([array.real, array.imag], axis=-1).astype(np.float64)
    return array.astype(np.float64)


def _mismatch(o: OutputParity) -> str:
    where = f"signature {o.signature!r} output {o.output!r} differs by up to {o.max_abs_error:.3g}"
    if o.atol is None or o.rtol is None:
        return where + " (exact dtype)"
    return (
        f"{where}, more than {o.allowed_abs_error:.3g} + {o.rtol:g} * |eager| allows "
        f"(atol {o.atol:g} at scale {o.scale:.3g})"
    )


def _constancy(o: OutputParity) -> str:
    """What made `o` unable to tell graphs apart, for ParityReport.warnings."""
    if o.rows <= 1:
        return f"was compared on {'a single input' if o.rows else 'no input'}"
    if o.variation is None:
        return f"is the same for all {o.rows} inputs compared"
    return (
        f"varies by at most {o.variation:.3g} across the {o.rows} inputs compared, within "
        f"{DISCRIMINATION:g}x its tolerance {o.allowed_abs_error:.3g}"
    )
