"""Loaders: everything between a model version on disk (or in Python) and a Runner that serves it.

A loader loads, replays the version's warm-up records, and wraps the runner in TF Serving-style
batching when the server batches; what it made is closed with `runner.close()` (batch threads,
then the Session), which the manager calls once the version is unloaded and its last request has
finished. Sources hand the manager one loader per version (serving.sources).

    LoadOptions      what every loader of a server shares: allowed ops, batching parameters
    version_batching the batching parameters of one version (per-model ones, if asked)
    load_version     a SavedModel version directory (SessionRunner, or signature functions)
    load_eager       a Python model SOURCE run eagerly (EagerRunner)
    load_null        a SavedModel's signatures answering zeros (NullRunner)
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from graphserve.core.batchingparams import (
    PER_MODEL_BATCHING_FILE,
    BatchingParameters,
    load_batching_parameters,
)
from graphserve.core.errors import ExportError, ModelLoadError
from graphserve.core.execution import not_eager
from graphserve.core.signature import TensorSpec, ValueRange
from graphserve.serving.runner import Runner

__all__ = [
    "PER_MODEL_BATCHING_FILE",
    "LoadOptions",
    "load_eager",
    "load_null",
    "load_runner",
    "load_version",
    "version_batching",
]

log = logging.getLogger("graphserve.loaders")


@dataclass(frozen=True)
class LoadOptions:
    allow_ops: tuple[str, ...] = ()  # flagged ops served anyway (--allow-op)
    batching: BatchingParameters | None = None  # None: no batching
    # --enable-per-model-batching-parameters: a version's own PER_MODEL_BATCHING_FILE counts
    per_model_batching: bool = False


def version_batching(path: Path | None, options: LoadOptions) -> BatchingParameters | None:
    """The batching parameters of the version at `path` (None: no batching).

    With per-model batching parameters (TF Serving's `--enable_per_model_batching_parameters`),
    a version directory holding `batching_params.pbtxt` is batched by that file, all of it but
    the thread pool: `num_batch_threads` and `thread_pool_name` stay the global ones, as TF
    Serving uses only those from `--batching_parameters_file` then. A version directory without
    the file is served unbatched, as TF Serving serves it (GetPerModelBatchingParams); a model
    with no directory (an eager model's Python source) keeps the global parameters. Raises
    BatchingConfigError naming the file when it does not parse or holds values TF Serving
    refuses, which fails this version's load alone.
    """
    common = options.batching
    if common is None or not options.per_model_batching or path is None:
        return common
    own_file = Path(path) / PER_MODEL_BATCHING_FILE
    if not own_file.is_file():
        log.info("%s: no %s, served unbatched", path, PER_MODEL_BATCHING_FILE)
        return None
    own = dataclasses.replace(
        load_batching_parameters(own_file),
        num_batch_threads=common.num_batch_threads,
        thread_pool_name=common.thread_pool_name,
    )
    log.info(
        "%s: batched with its own %s (max_batch_size %d, batch_timeout_micros %d)",
        path,
        PER_MODEL_BATCHING_FILE,
        own.max_batch_size,
        own.batch_timeout_micros,
    )
    return own


def _batched(runner: Runner, params: BatchingParameters | None) -> Runner:
    if params is None:
        return runner
    from graphserve.serving.batching import BatchingRunner

    return BatchingRunner(runner, params, owns=True)


def load_runner(path: Path, allow_ops: Collection[str] = ()) -> Runner:
    """The graph server's runner for the SavedModel at `path`: a Session (SessionRunner), as TF
    Serving runs every SavedModel, TF1 or TF2; the signature functions (GraphRunner) for a model
    the Session cannot load, with a warning. If both fail, the error of the loader of the model's
    own format is raised (TF2's for a TF2 SavedModel, the Session's for a TF1 one).

    Chosen by measurement (`python -m tools.bench runners`; docs/guides/serve.md, "How the graph
    server runs a SavedModel"): on every model both load, TF1 exports and TF2 ones alike, the
    Session gave the same outputs and answered each call 1.3 to 9 times faster (one C++
    Session::Run against an eager function call); and only the Session loads TF1 reference
    variables and TF 1.0 graphs. The op scan runs once, before either (see `checked_meta_graph`).
    """
    from graphserve.serving.runners import GraphRunner, checked_meta_graph
    from graphserve.serving.session_runner import SessionRunner

    path = Path(path)
    graph = checked_meta_graph(path, allow_ops)
    written = "TF2" if graph.HasField("object_graph_def") else "TF1"
    try:
        runner: GraphRunner | SessionRunner = SessionRunner(path, meta_graph=graph)
    except Exception as session_error:
        log.warning(
            "%s: a %s SavedModel the Session could not load (%s); trying its signature functions",
            path,
            written,
            _first_line(session_error),
        )
        try:
            runner = GraphRunner(path, meta_graph=graph)
        except Exception as function_error:
            log.warning(
                "%s: its signature functions failed too (%s)", path, _first_line(function_error)
            )
            # A damaged version is best described by the loader of its own format ("Failed to
            # find any matching files for .../variables/variables" from TF2's, where TF1's says
            # "not a valid checkpoint").
            raise (function_error if written == "TF2" else session_error) from None
    log.info("%s: a %s SavedModel, served on the %s path", path, written, runner.execution)
    return runner


def _first_line(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]


def load_version(path: Path, options: LoadOptions = LoadOptions()) -> Runner:
    """Load one SavedModel version, run its warm-up records, batch it if asked. Raises on any
    failure (a graph with flagged ops not in `options.allow_ops` is refused; `load_runner`
    picks how it runs; a bad per-version batching file is BatchingConfigError, raised before
    anything loads)."""
    from graphserve.model.warmup import replay_warmup

    batching = version_batching(path, options)
    runner = load_runner(path, options.allow_ops)
    try:
        count = replay_warmup(path, runner.run)
    except Exception as exc:
        runner.close()
        raise ModelLoadError(f"warm-up record of {path} failed: {exc}") from exc
    if count:
        log.info("%s: replayed %d warm-up records", path, count)
    return _batched(runner, batching)


def load_eager(
    source: str,
    inputs: Sequence[TensorSpec] | None = None,
    options: LoadOptions = LoadOptions(),
    *,
    signature_file: Path | None = None,
    output_names: Sequence[str] | None = None,
    allow_unsafe: bool = False,
    imports: Sequence[str] = (),
    mode: str = "call",
    samples_file: Path | None = None,
    input_ranges: Mapping[str, ValueRange] | None = None,
) -> Runner:
    """A Python model source to run eagerly (`mode`: call, predict or function), its load
    check on `samples_file` or inputs generated within `input_ranges`; errors surface as
    ModelLoadError."""
    from graphserve.serving.runners import EagerRunner

    try:
        runner = EagerRunner(
            source,
            list(inputs) if inputs is not None else None,
            signature_file=signature_file,
            output_names=list(output_names or []),
            allow_unsafe=allow_unsafe,
            imports=imports,
            mode=mode,
            samples_file=samples_file,
            input_ranges=input_ranges,
        )
    except ExportError as exc:
        raise ModelLoadError(str(exc)) from exc
    warning = not_eager(runner.kind, runner.execution)
    if warning:
        log.warning("%s: %s", source, warning)
    return _batched(runner, options.batching)  # no version directory: the global parameters


def load_null(path: Path, options: LoadOptions = LoadOptions()) -> Runner:
    """The signatures of the SavedModel at `path`, answering zeros (no model work)."""
    from graphserve.serving.nullrunner import NullRunner

    batching = version_batching(path, options)
    try:
        return _batched(NullRunner(path), batching)
    except ExportError as exc:
        raise ModelLoadError(str(exc)) from exc
