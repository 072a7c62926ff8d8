"""The parity rule: when two computations of one output agree. One rule for the exporter's
check of a SavedModel against its eager model (exporter/verify.py) and for the load test's
check of answers against answers (loadtest/results/answers.py).

Floats agree element by element within `atol * max(scale, 1) + rtol * |reference|`, where
`scale` is the reference's largest finite |value| (so a graph that reassociates float sums
passes on logits of 600 as on logits of 1), with a tolerance per dtype (half precision gets more
room than float64); infinities and NaNs must match. Everything else agrees exactly; integers
say how far apart they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

__all__ = ["DEFAULT_TOLERANCES", "Closeness", "closeness"]

# (atol, rtol) per float dtype, atol relative to the output's scale (at least 1); other dtypes
# compare exactly. float32's atol is about 1000 ulps at the scale: room for a graph that sums
# in another order, none for a changed weight.
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float16": (1e-2, 1e-2),
    "bfloat16": (2e-2, 2e-2),
    "float32": (1e-4, 1e-4),
    "float64": (1e-9, 1e-7),
}


@dataclass(frozen=True, slots=True)
class Closeness:
    """How far `got` is from the reference, and whether the rule lets it pass."""

    passed: bool
    max_abs_error: float
    max_rel_error: float
    atol: float | None = None  # None: compared exactly
    rtol: float | None = None
    scale: float | None = None  # the reference's largest finite |value|
    allowed_abs_error: float | None = None  # atol * max(scale, 1), before rtol * |reference|


def closeness(
    got: np.ndarray,
    reference: np.ndarray,
    dtype: str,
    tolerances: Mapping[str, tuple[float, float]] = DEFAULT_TOLERANCES,
) -> Closeness:
    """`got` against `reference` (of one shape) under the rule, with the tolerance of `dtype`
    (float32's for a float dtype `tolerances` does not list). Floats are judged when both
    sides are numbers and the reference is a float; anything else is compared exactly."""
    if reference.dtype.kind in "fc" and got.dtype.kind in "fciub" and dtype != "string":
        atol, rtol = tolerances.get(dtype, DEFAULT_TOLERANCES["float32"])
        wide = np.complex128 if reference.dtype.kind == "c" else np.float64
        mine, ref = got.astype(wide), reference.astype(wide)
        magnitude = np.abs(ref)
        scale = float(np.max(magnitude, where=np.isfinite(magnitude), initial=0.0))
        allowed = atol * max(scale, 1.0)
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(mine - ref)
            close = diff <= allowed + rtol * magnitude
            same = (mine == ref) | (np.isnan(mine) & np.isnan(ref))
            rel = float(np.nanmax(diff / np.maximum(magnitude, 1e-12), initial=0.0))
        passed = bool(np.all(np.where(np.isfinite(mine) & np.isfinite(ref), close, same)))
        return Closeness(
            passed, float(np.nanmax(diff, initial=0.0)), rel, atol, rtol, scale, allowed
        )
    passed = bool(np.array_equal(got, reference))
    if reference.dtype.kind in "iub" and got.dtype.kind in "iub":
        wide_diff = got.astype(np.float64) - reference.astype(np.float64)
        err = float(np.abs(wide_diff).max(initial=0.0))
    else:
        err = 0.0 if passed else float("inf")
    return Closeness(passed, err, err if not passed else 0.0)
