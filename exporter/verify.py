"""Parity: the SavedModel as written, reloaded, must compute what the eager model computes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from exporter.errors import ParityError
from exporter.signature import SERVING_DEFAULT, TensorSpec, sample_inputs
from exporter.trace import call_model

__all__ = ["ParityReport", "check_parity"]


@dataclass
class ParityReport:
    """How far the reloaded graph is from the eager model, over `batches` random batches."""

    batches: int
    batch_size: int
    atol: float
    rtol: float
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    passed: bool = True
    mismatches: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def check_parity(
    saved_dir: Path,
    model: Any,
    specs: Sequence[TensorSpec],
    *,
    batches: int = 3,
    batch_size: int = 4,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    seed: int = 0,
) -> ParityReport:
    """Reload `saved_dir` and compare `serving_default` with `model` called eagerly.

    Floats must agree within `atol + rtol * |eager|`; other dtypes exactly. Raises ParityError
    naming the output and the error when they do not.
    """
    signature = tf.saved_model.load(str(saved_dir)).signatures[SERVING_DEFAULT]
    report = ParityReport(batches=batches, batch_size=batch_size, atol=atol, rtol=rtol)
    for b in range(batches):
        arrays = sample_inputs(specs, batch_size=batch_size, seed=seed + b)
        tensors = {name: tf.constant(a) for name, a in arrays.items()}
        graph = {k: v.numpy() for k, v in signature(**tensors).items()}
        eager = {k: np.asarray(v) for k, v in call_model(model, tensors, specs).items()}
        if set(graph) != set(eager):
            raise ParityError(
                f"the SavedModel returns outputs {sorted(graph)}, the eager model {sorted(eager)}"
            )
        for name, expected in eager.items():
            _compare(report, name, graph[name], expected)
    if report.mismatches:
        report.passed = False
        raise ParityError(
            "the reloaded SavedModel disagrees with the eager model: "
            + "; ".join(report.mismatches[:3])
            + f" (max abs error {report.max_abs_error:.3g}, atol {atol:g}, rtol {rtol:g})"
        )
    return report


def _compare(report: ParityReport, name: str, got: np.ndarray, expected: np.ndarray) -> None:
    if got.shape != expected.shape:
        report.mismatches.append(f"output {name!r} has shape {got.shape}, eager {expected.shape}")
        return
    if expected.dtype.kind in "fc":
        diff = np.abs(got.astype(np.float64) - expected.astype(np.float64))
        abs_err = float(diff.max(initial=0.0))
        rel_err = float((diff / np.maximum(np.abs(expected), 1e-12)).max(initial=0.0))
        report.max_abs_error = max(report.max_abs_error, abs_err)
        report.max_rel_error = max(report.max_rel_error, rel_err)
        if not np.allclose(got, expected, atol=report.atol, rtol=report.rtol, equal_nan=True):
            report.mismatches.append(f"output {name!r} differs by up to {abs_err:.3g}")
    elif not np.array_equal(got, expected):
        report.mismatches.append(f"output {name!r} differs ({expected.dtype}, compared exactly)")
