"""Parity: the SavedModel as written, reloaded, must compute what the eager model computes.

Every signature is compared output by output: floats within `atol + rtol * |eager|` with a
tolerance per dtype (half precision gets more room than float64), everything else exactly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import tensorflow as tf

from graphserve.core.contract import SignatureContract
from graphserve.core.errors import ParityError, SignatureError
from graphserve.core.results import JsonResult
from graphserve.core.signature import sample_inputs
from graphserve.model.trace import call_signature

__all__ = [
    "DEFAULT_TOLERANCES",
    "OutputParity",
    "ParityReport",
    "Samples",
    "check_parity",
    "load_samples",
]

# (atol, rtol) per float dtype; other dtypes compare exactly.
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float16": (1e-2, 1e-2),
    "bfloat16": (2e-2, 2e-2),
    "float32": (1e-5, 1e-4),
    "float64": (1e-9, 1e-7),
}

Samples = Mapping[str, Mapping[str, np.ndarray]]  # signature -> input -> array


@dataclass
class OutputParity:
    signature: str
    output: str
    dtype: str
    max_abs_error: float
    max_rel_error: float
    atol: float | None  # None: compared exactly
    rtol: float | None
    passed: bool


@dataclass
class ParityReport(JsonResult):
    """How far the reloaded graph is from the eager model, per signature and output."""

    json_keys: ClassVar = ("passed", "batches", "samples", "max_abs_error", "max_rel_error", ...)

    batches: int
    samples: str  # "random" or the samples file
    outputs: list[OutputParity] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.mismatches

    @property
    def max_abs_error(self) -> float:
        return max((o.max_abs_error for o in self.outputs), default=0.0)

    @property
    def max_rel_error(self) -> float:
        return max((o.max_rel_error for o in self.outputs), default=0.0)


def check_parity(
    loaded: Any,
    model: Any,
    contracts: Sequence[SignatureContract],
    *,
    batches: int = 3,
    batch_size: int = 4,
    tolerances: Mapping[str, tuple[float, float]] = DEFAULT_TOLERANCES,
    samples: Samples | None = None,
    samples_label: str = "random",
    seed: int = 0,
) -> ParityReport:
    """Compare every signature of `loaded` (the reloaded SavedModel) with `model` run eagerly.

    User `samples` replace the random batches for the signatures they cover. Raises ParityError
    naming the signature, the output and the error when they disagree.
    """
    report = ParityReport(batches=batches, samples=samples_label if samples else "random")
    for contract in contracts:
        if contract.name not in loaded.signatures:
            raise ParityError(f"the reloaded SavedModel has no signature {contract.name!r}")
        function = loaded.signatures[contract.name]
        worst: dict[str, OutputParity] = {}
        for arrays in _batches(contract, samples, batches, batch_size, seed):
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
        report.outputs.extend(worst.values())
    report.mismatches.extend(
        f"signature {o.signature!r} output {o.output!r} differs by up to {o.max_abs_error:.3g}"
        + (f" (atol {o.atol:g}, rtol {o.rtol:g})" if o.atol is not None else " (exact dtype)")
        for o in report.outputs
        if not o.passed
    )
    if report.mismatches:
        raise ParityError(
            "the reloaded SavedModel disagrees with the eager model: "
            + "; ".join(report.mismatches[:3])
        )
    return report


def _batches(
    contract: SignatureContract,
    samples: Samples | None,
    batches: int,
    batch_size: int,
    seed: int,
) -> list[dict[str, np.ndarray]]:
    user = (samples or {}).get(contract.name)
    fixed_batch = contract.inputs[0].shape[0] if contract.inputs[0].shape else None
    if user and fixed_batch is None:
        rows = len(next(iter(user.values())))
        step = max(batch_size, 1) if rows > 64 else rows
        return [{k: v[i : i + step] for k, v in user.items()} for i in range(0, rows, step)]
    return [sample_inputs(contract.inputs, batch_size=batch_size, seed=seed + b)
            for b in range(batches)]


def _merge(previous: OutputParity | None, result: OutputParity) -> OutputParity:
    """The worst of two batches' results for one output."""
    if previous is None:
        return result
    return replace(
        result,
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
    if got.shape != expected.shape:
        return None
    dtype = tf.as_dtype(expected.dtype).name if expected.dtype != object else "string"
    if expected.dtype.kind in "fc":
        atol, rtol = tolerances.get(dtype, DEFAULT_TOLERANCES["float32"])
        diff = np.abs(got.astype(np.float64) - expected.astype(np.float64))
        abs_err = float(np.nanmax(diff, initial=0.0))
        rel_err = float(np.nanmax(diff / np.maximum(np.abs(expected), 1e-12), initial=0.0))
        passed = bool(np.allclose(got, expected, atol=atol, rtol=rtol, equal_nan=True))
        return OutputParity(signature, name, dtype, abs_err, rel_err, atol, rtol, passed)
    passed = bool(np.array_equal(got, expected))
    if expected.dtype.kind in "iub" and got.dtype.kind in "iub":
        err = float(np.abs(got.astype(np.float64) - expected.astype(np.float64)).max(initial=0.0))
    else:
        err = 0.0 if passed else float("inf")
    return OutputParity(signature, name, dtype, err, err if not passed else 0.0, None, None, passed)


def load_samples(path: Path, contracts: Sequence[SignatureContract]) -> dict[str, dict]:
    """User samples for parity and warm-up, from `.npz` or a TF Serving predict body (`.json`).

    In `.npz`, a key `INPUT` feeds every signature with that input and `SIGNATURE/INPUT` one
    signature. A `.json` file holds one predict request body (row or columnar format, optional
    `signature_name`) or a list of them. Raises SignatureError when samples do not fit.
    """
    from graphserve.core.codec import (
        decode_json_request,
        parse_json_body,
        shape_hint,
        validate_inputs,
    )
    from graphserve.core.errors import ServingError

    path = Path(path)
    if not path.is_file():
        raise SignatureError(f"samples file {path} does not exist")
    by_name = {c.name: c for c in contracts}
    raw: dict[str, dict[str, np.ndarray]] = {}
    try:
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as npz:
                for key in npz.files:
                    sig, _, input_name = key.rpartition("/")
                    for contract in contracts if not sig else [by_name.get(sig)]:
                        if contract and any(s.name == input_name for s in contract.inputs):
                            raw.setdefault(contract.name, {})[input_name] = npz[key]
        elif path.suffix == ".json":
            body = parse_json_body(path.read_bytes())
            for request in body if isinstance(body, list) else [body]:
                key = request.get("signature_name") or contracts[0].name
                if key not in by_name:
                    raise SignatureError(f"samples file {path}: no signature {key!r} to export")
                specs = {s.name: s for s in by_name[key].inputs}
                raw[key] = decode_json_request(request, specs)[0]
        else:
            raise SignatureError(f"samples file {path}: expected a .npz or .json file")
        samples = {}
        for key, arrays in raw.items():
            specs = {s.name: s for s in by_name[key].inputs}
            cast = {n: _as_dtype(a, specs[n].np_dtype) for n, a in arrays.items() if n in specs}
            samples[key] = validate_inputs(cast, specs)
            # The servers leave shapes to the graph; samples must fit what is exported.
            mismatch = shape_hint(samples[key], specs)
            if mismatch:
                raise SignatureError(f"samples file {path}: {mismatch}")
    except ServingError as exc:
        raise SignatureError(f"samples file {path}: {exc}") from None
    except (OSError, ValueError) as exc:
        raise SignatureError(f"samples file {path} cannot be read: {exc}") from None
    if not samples:
        raise SignatureError(
            f"samples file {path} names none of the inputs "
            + ", ".join(f"{c.name}: {[s.name for s in c.inputs]}" for c in contracts)
        )
    return samples


def _as_dtype(array: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if dtype.kind == "O":
        return np.asarray(array).astype(object)
    if array.dtype.kind == dtype.kind or array.dtype.kind in "iub":
        return np.asarray(array).astype(dtype)
    return np.asarray(array)  # leave a mismatch for validate_inputs to name
