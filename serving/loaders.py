"""Loaders: everything between a model version on disk (or in Python) and a Runner that serves it.

A loader loads, replays the version's warm-up records, and wraps the runner in TF Serving-style
batching when the server batches; what it made is closed with `runner.close()` (batch threads,
then the Session), which the manager calls once the version is unloaded and its last request has
finished. Sources hand the manager one loader per version (serving.sources).

    LoadOptions      what every loader of a server shares: allowed ops, batching parameters
    load_version     a SavedModel version directory (SessionRunner, or signature functions)
    load_eager       a Python model SOURCE run eagerly (EagerRunner)
    load_null        a SavedModel's signatures answering zeros (NullRunner)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from graphserve.core.batchingparams import BatchingParameters
from graphserve.core.errors import ExportError, ModelLoadError
from graphserve.core.signature import TensorSpec
from graphserve.serving.runner import Runner

__all__ = ["LoadOptions", "load_eager", "load_null", "load_version"]

log = logging.getLogger("graphserve.loaders")


@dataclass(frozen=True)
class LoadOptions:
    allow_ops: tuple[str, ...] = ()  # flagged ops served anyway (--allow-op)
    batching: BatchingParameters | None = None  # None: no batching


def _batched(runner: Runner, options: LoadOptions) -> Runner:
    if options.batching is None:
        return runner
    from graphserve.serving.batching import BatchingRunner

    return BatchingRunner(runner, options.batching, owns=True)


def load_version(path: Path, options: LoadOptions = LoadOptions()) -> Runner:
    """Load one SavedModel version, run its warm-up records, batch it if asked. Raises on any
    failure (a graph with flagged ops not in `options.allow_ops` is refused; `load_runner`
    picks how it runs)."""
    from graphserve.model.warmup import replay_warmup
    from graphserve.serving.runners import load_runner

    runner = load_runner(path, options.allow_ops)
    try:
        count = replay_warmup(path, runner.run)
    except Exception as exc:
        runner.close()
        raise ModelLoadError(f"warm-up record of {path} failed: {exc}") from exc
    if count:
        log.info("%s: replayed %d warm-up records", path, count)
    return _batched(runner, options)


def load_eager(
    source: str,
    inputs: Sequence[TensorSpec] | None = None,
    options: LoadOptions = LoadOptions(),
    *,
    signature_file: Path | None = None,
    output_names: Sequence[str] | None = None,
    allow_unsafe: bool = False,
    mode: str = "call",
) -> Runner:
    """A Python model source to run eagerly (`mode`: call, predict or function); errors
    surface as ModelLoadError."""
    from graphserve.serving.runners import EagerRunner

    try:
        runner = EagerRunner(
            source,
            list(inputs) if inputs is not None else None,
            signature_file=signature_file,
            output_names=list(output_names or []),
            allow_unsafe=allow_unsafe,
            mode=mode,
        )
    except ExportError as exc:
        raise ModelLoadError(str(exc)) from exc
    return _batched(runner, options)


def load_null(path: Path, options: LoadOptions = LoadOptions()) -> Runner:
    """The signatures of the SavedModel at `path`, answering zeros (no model work)."""
    from graphserve.serving.nullrunner import NullRunner

    try:
        return _batched(NullRunner(path), options)
    except ExportError as exc:
        raise ModelLoadError(str(exc)) from exc
