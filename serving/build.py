"""`build_server(ServeConfig)`: the one way to assemble a server, for the CLI and for scripts.

    from graphserve.serving import ServeConfig, ServerOptions, build_server
    from graphserve.serving.config import ModelConfig

    config = ServeConfig(models=(ModelConfig("mlp", Path("models/mlp")),),
                         options=ServerOptions(grpc_port=0, rest_port=0))
    with build_server(config) as server:      # loaded here; started by `with` (or .start())
        print(server.grpc_port, server.rest_port)

The pieces, TF Serving's: a source per kind of model (file system for SavedModels, static for
the eager and null servers), loaders that load, warm and batch, one manager per source writing
the servable map, and the data plane with its gRPC and REST front ends reading it. Stopping the
server drains requests, stops polling and closes every runner.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import replace

from graphserve.serving import heap
from graphserve.serving.config import ModelConfig
from graphserve.serving.loaders import LoadOptions, load_eager, load_null, load_version
from graphserve.serving.manager import Agreement, ModelManager
from graphserve.serving.ondemand import OnDemandManager
from graphserve.serving.options import EagerModel, Residency, ServeConfig
from graphserve.serving.registry import ModelRegistry
from graphserve.serving.requestlog import LogSettings, RequestLogs, log_settings
from graphserve.serving.runner import Runner
from graphserve.serving.server import ModelServer
from graphserve.serving.sources import StaticModel, StaticSource

__all__ = ["EagerModel", "ServeConfig", "build_server"]


log = logging.getLogger("graphserve.server")


def build_server(config: ServeConfig, agreement: Agreement | None = None) -> ModelServer:
    """Load every model of `config` (with `on_demand`, only the pinned ones) and return the
    server, not yet listening. Raises ModelLoadError when a model has no version that loads,
    ConfigError when a residency budget cannot hold one model, RuntimeError when TensorFlow's
    thread pools are set already, ValueError for a config that mixes kinds or asks for
    per-model batching parameters without batching. With an `agreement`, this server is one
    worker of several, loading each version together with the others (serving.workers)."""
    if bool(config.models) == bool(config.eager):
        raise ValueError("a ServeConfig serves SavedModels (models) or Python sources (eager)")
    if config.per_model_batching and config.batching is None:
        raise ValueError("per_model_batching needs batching: give the global parameters too")
    if config.residency != Residency() and not config.on_demand:
        raise ValueError("a residency budget needs on_demand: evicted models load on demand")
    if config.on_demand and config.eager:
        raise ValueError("on_demand serves SavedModels (models), not Python sources")
    logged = _log_settings([*config.models, *config.eager])  # a bad one stops us here
    intra, inter = _pool_sizes(config)
    chosen = (intra, inter) != (config.intra_op_threads, config.inter_op_threads)
    try:
        _thread_pools(intra, inter)
    except RuntimeError:
        if not chosen:
            raise  # asked for: say they cannot be
        # chosen for batching, in a program whose TensorFlow runs already: its pools stand
        log.info("TensorFlow's thread pools were set up already in this process: kept")
    else:
        if chosen:
            log.info(
                "batching on %d cores: TensorFlow's thread pools sized to %d thread(s) each, "
                "the cores shared out between the batch threads "
                "(--tensorflow-intra-op-parallelism and --tensorflow-inter-op-parallelism size "
                "them)",
                len(os.sched_getaffinity(0)),
                intra,
            )
    options = LoadOptions(
        allow_ops=config.allow_ops,
        batching=config.batching,
        per_model_batching=config.per_model_batching,
    )
    if not config.null:
        # TensorFlow's heap frozen before any model loads: a retired version is then freed by
        # a collection of what loaded since, not a thaw of everything (serving.heap)
        import tensorflow  # noqa: F401

        heap.freeze_once()
    registry = ModelRegistry()
    if config.eager:
        static = StaticSource([_static(m, options) for m in config.eager])
        manager = ModelManager(registry, static, agreement=agreement)
    else:
        load = load_null if config.null else load_version
        models, loader = list(config.models), lambda path: load(path, options)
        manager = (
            OnDemandManager(registry, models, loader, config.residency)
            if config.on_demand
            else ModelManager(registry, models, loader, agreement)
        )
    manager.start()
    manager.poll(config.file_system_poll_seconds)
    server_options = config.options
    if server_options.grpc_asyncio is None:  # a waiting request would hold a gRPC thread
        waits = config.batching is not None or config.on_demand  # for a batch, or a load
        server_options = replace(server_options, grpc_asyncio=waits)
    server = ModelServer(registry, server_options, manager=manager)
    watched = config.model_config_file is not None and config.model_config_poll_seconds > 0
    logs = None
    if logged or watched:  # a reloaded file may start logging
        metrics = server.plane.metrics
        registry_ = metrics.prometheus if metrics is not None else None
        logs = RequestLogs(logged, config.request_log_limits, registry_)
        server.plane.request_logs = logs
        for settings in logged:
            log.info(
                "model %s: logging %g of its requests to %s-*.tfrecord",
                settings.model,
                settings.rate,
                settings.prefix,
            )
    if watched:
        from graphserve.serving.config import ModelConfigWatcher

        def apply(models: list[ModelConfig]) -> None:
            settings = _log_settings(models)  # checked before anything changes
            manager.reconfigure(models)
            if logs is not None:
                logs.configure(settings)

        assert config.model_config_file is not None
        server.watcher = ModelConfigWatcher(
            config.model_config_file,
            config.model_config_poll_seconds,
            apply,
            list(config.models),
        ).start()
    return server


def _log_settings(models: Sequence[ModelConfig | EagerModel]) -> list[LogSettings]:
    """The request log settings of the models that log; raises ModelConfigError naming a
    model whose logging_config cannot work."""
    settings = (log_settings(model.name, model.logging) for model in models if model.logging)
    return [s for s in settings if s is not None]


def _static(model: EagerModel, options: LoadOptions) -> StaticModel:
    def load() -> Runner:
        return load_eager(
            model.source,
            model.inputs,
            options,
            signature_file=model.signature_file,
            output_names=model.output_names,
            allow_unsafe=model.allow_unsafe,
            imports=model.imports,
            mode=model.mode,
            samples_file=model.samples_file,
            input_ranges=model.input_ranges,
        )

    return StaticModel(model.name, load, model.version)


def _pool_sizes(config: ServeConfig) -> tuple[int, int]:
    """TensorFlow's intra-op and inter-op pool sizes: as given; with batching and neither
    given, the cores shared out between the batch threads, at least one thread each (one on
    this project's 2 cores with TF Serving's default of a batch thread per core). TensorFlow's
    own choice, TF Serving's default, gives every batch all the cores: the batch threads then
    contend for its pools and each run hands its ops between their threads. MobileNetV2 batched
    at 32 clients on 2 cores answered 1.6 times the requests with one-thread pools (`python -m
    bench frontend` measures it). Without batching, TensorFlow's choice stands."""
    intra, inter = config.intra_op_threads, config.inter_op_threads
    if config.batching is None or intra or inter:
        return intra, inter
    cores = len(os.sched_getaffinity(0))  # as TF Serving's and BatchingParameters' default
    share = max(1, cores // config.batching.num_batch_threads)
    return share, share


def _thread_pools(intra: int, inter: int) -> None:
    """TensorFlow fixes its thread pools at the first op: set before anything runs."""
    if not (intra or inter):
        return
    import tensorflow as tf

    if intra:
        tf.config.threading.set_intra_op_parallelism_threads(intra)
    if inter:
        tf.config.threading.set_inter_op_parallelism_threads(inter)
