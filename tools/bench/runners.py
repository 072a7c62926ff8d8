"""Session or function: the two ways the graph server runs a SavedModel, timed side by side.

    python -m tools.bench runners [PATH ...] [--mlp] [--batch N ...] [--budget SECONDS]

For each SavedModel version directory, both runners load it: `session` (SessionRunner: a TF1
Session, a callable per signature, as TF Serving runs it) and `function` (GraphRunner: the
signature functions of `tf.saved_model.load`). The same random batch of the signature runs
through both, whose outputs must agree, then both are timed per call in interleaved rounds
(bench.timing). A path that cannot load the model is reported with its error: that is the other
half of the choice `serving.runners.load_runner` makes. `--mlp` first exports `examples:mlp`
(a TF2 SavedModel, as `graphserve export` writes it) to a temporary directory.
"""

from __future__ import annotations

import functools
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tools.bench.timing import Timing, interleave

__all__ = ["RunnerComparison", "compare_runners", "run_runners"]

PATHS = ("session", "function")


@dataclass
class RunnerComparison:
    """One model, one signature, one batch size: load time and per-call Timing per path, and
    why a path was not measured."""

    model: str
    signature: str
    batch_size: int
    load_s: dict[str, float] = field(default_factory=dict)
    timings: dict[str, Timing] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    def ratio(self) -> float | None:
        """session p50 / function p50 (below 1: the Session is faster)."""
        if set(PATHS) - set(self.timings):
            return None
        return self.timings["session"].p50_ms / self.timings["function"].p50_ms

    def line(self) -> str:
        parts = [f"{self.model} {self.signature} b{self.batch_size}:"]
        for path in PATHS:
            if path in self.timings:
                t = self.timings[path]
                parts.append(
                    f"{path} p50 {t.p50_ms:.3f} ms p99 {t.p99_ms:.3f} ms "
                    f"(load {self.load_s[path]:.2f} s, {t.samples} calls);"
                )
            else:
                parts.append(f"{path} failed: {self.failed.get(path, '?')};")
        ratio = self.ratio()
        if ratio is not None:
            parts.append(f"session/function {ratio:.2f}x")
        return " ".join(parts)


def _load(path: Path, kind: str) -> Any:
    from graphserve.serving.runners import GraphRunner
    from graphserve.serving.session_runner import SessionRunner

    return SessionRunner(path) if kind == "session" else GraphRunner(path)


def compare_runners(
    path: Path,
    signature: str = "serving_default",
    batch_sizes: Sequence[int] = (1, 32),
    *,
    budget_s: float = 3.0,
    seed: int = 0,
) -> list[RunnerComparison]:
    """Load `path` on both paths and time `signature` at each batch size (random inputs from
    its declared specs; an unknown dimension or rank is taken as a batch of one-element rows).
    Raises AssertionError when both load and disagree on an output."""
    from graphserve.core.inputs import sample_inputs
    from graphserve.core.signature import TensorSpec

    runners: dict[str, Any] = {}
    load_s: dict[str, float] = {}
    failed: dict[str, str] = {}
    for kind in PATHS:
        started = time.perf_counter()
        try:
            runners[kind] = _load(path, kind)
        except Exception as exc:
            failed[kind] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
            continue
        load_s[kind] = time.perf_counter() - started
    results = []
    for batch in batch_sizes:
        result = RunnerComparison(path.parent.name, signature, batch, load_s, failed=failed)
        if runners:
            specs = next(iter(runners.values())).signatures[signature].inputs.values()
            known = [
                TensorSpec(s.name, s.dtype, (None, 1) if s.shape is None else s.shape)
                for s in specs
            ]
            inputs = sample_inputs(known, batch_size=batch, seed=seed)
            outputs = {kind: runner.run(signature, inputs) for kind, runner in runners.items()}
            if len(outputs) == len(PATHS):
                for name, value in outputs["session"].items():
                    np.testing.assert_allclose(value, outputs["function"][name], rtol=1e-5)
            result.timings = interleave(
                {
                    kind: functools.partial(runner.run, signature, inputs)
                    for kind, runner in runners.items()
                },
                budget_s=budget_s,
            )
        results.append(result)
    for runner in runners.values():
        close = getattr(runner, "close", None)
        if close is not None:
            close()
    return results


def run_runners(
    paths: Sequence[Path], mlp: bool, batches: Sequence[int], budget_s: float, signature: str
) -> Iterator[str]:
    """One line per runner and batch size, for each SavedModel version directory (and the
    example mlp, exported here, with `mlp`)."""
    with tempfile.TemporaryDirectory() as tmp:
        todo = list(paths)
        if mlp:
            from graphserve.exporter import ExportSpec, export_model

            exported = export_model(
                ExportSpec(source="examples:mlp", name="mlp", base_path=Path(tmp))
            )
            todo.append(exported.path)
        for path in todo:
            for result in compare_runners(Path(path), signature, batches, budget_s=budget_s):
                yield result.line()
