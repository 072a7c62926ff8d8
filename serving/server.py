"""ModelServer: one server, two front ends (gRPC and REST) over one DataPlane and registry.

The graph server and the eager server are this same class; only the registry's runners differ.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent import futures
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from graphserve.serving import heap
from graphserve.serving.dataplane import DataPlane
from graphserve.serving.grpc_api import (
    AsyncUndecodableRequests,
    UndecodableRequests,
    add_services,
)
from graphserve.serving.metrics import ServingMetrics
from graphserve.serving.ondemand import OnDemandManager
from graphserve.serving.options import ServerOptions
from graphserve.serving.registry import ModelRegistry

if TYPE_CHECKING:
    from graphserve.serving.config import ModelConfigWatcher
    from graphserve.serving.manager import ModelManager
from graphserve.serving.rest_api import RestOptions, RestServer

__all__ = ["ModelServer", "ServerOptions", "prime_threads"]

log = logging.getLogger("graphserve.server")

T = TypeVar("T")

PREDICTION_SERVICE = "tensorflow.serving.PredictionService"
MODEL_SERVICE = "tensorflow.serving.ModelService"


def prime_threads(
    pool: futures.ThreadPoolExecutor, count: int, work: Callable[[], object], timeout: float = 30.0
) -> None:
    """Start `count` threads of `pool` now and run `work` once on each.

    The first TensorFlow call on a thread sets up that thread's eager context, and the first
    pass through the request path runs cold code; warm-up records warm the model, not the
    threads. Done before the server takes requests, the first request after ready costs about
    what the next ones do. Each task waits for the others, so every one gets its own thread.
    """
    barrier = threading.Barrier(count, timeout=timeout)

    def prime() -> None:
        # A pool smaller than `count` breaks the barrier: prime the threads there are.
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait()
        work()

    for future in [pool.submit(prime) for _ in range(count)]:
        future.result()


class _LoopThread:
    """An asyncio loop running on a thread of its own, for the asyncio gRPC server. Its
    default executor is the gRPC thread pool: a runner that runs on its caller runs there."""

    def __init__(self, executor: futures.ThreadPoolExecutor) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop.set_default_executor(executor)
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="grpc-asyncio", daemon=True
        )
        self._thread.start()

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run `coroutine` on the loop; its result, or raise what it raised."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class _LoopHealth:
    """asyncio's health servicer, set from the server's threads as the threaded one is."""

    def __init__(self, loop: _LoopThread) -> None:
        self.servicer = health.aio.HealthServicer()
        self._loop = loop

    def set(self, service: str, status: health_pb2.HealthCheckResponse.ServingStatus) -> None:
        self._loop.call(self.servicer.set(service, status))

    def enter_graceful_shutdown(self) -> None:
        self._loop.call(self.servicer.enter_graceful_shutdown())


class ModelServer:
    """The gRPC and REST front ends over one servable map. Built by `build_server`, it owns the
    manager that fills the map (and a config-file watcher), and stops them when it stops; built
    over a registry directly (tests, scripts), the registry stays the caller's."""

    def __init__(
        self,
        registry: ModelRegistry,
        options: ServerOptions | None = None,
        *,
        manager: ModelManager | None = None,
    ) -> None:
        self.registry = registry
        self.options = options or ServerOptions()
        self.manager = manager
        self.watcher: ModelConfigWatcher | None = None
        on_demand = manager if isinstance(manager, OnDemandManager) else None
        metrics = (
            ServingMetrics(registry, self.options.metrics_path, on_demand)
            if self.options.metrics_path
            else None
        )
        self.plane = DataPlane(
            registry,
            metrics,
            method_name_check=self.options.method_name_check,
            demand=on_demand,
        )
        self.grpc_port = 0
        self.rest_port = 0
        self._grpc: grpc.Server | grpc.aio.Server | None = None
        self._loop: _LoopThread | None = None
        self._rest: RestServer | None = None
        self._health: health.HealthServicer | _LoopHealth | None = None
        self._stopped = threading.Event()
        self._stop_lock = threading.RLock()  # a second signal lands in the same thread
        self._stopping = False

    def start(self) -> ModelServer:
        """Bind the ports (and socket) asked for and start serving; raises OSError if one is
        taken."""
        opts = self.options
        workers = futures.ThreadPoolExecutor(opts.grpc_workers, thread_name_prefix="grpc")
        prime_threads(workers, opts.grpc_workers, self._warm_this_thread)
        heap.freeze_once()  # `graphserve serve` froze it before the models loaded
        if opts.grpc_asyncio:
            self._loop = _LoopThread(workers)
            try:
                self._grpc = self._loop.call(self._asyncio_grpc(workers))
            except BaseException:
                self._loop.close()
                self._loop = None
                raise
        else:
            self._health = health.HealthServicer()
            self._grpc = grpc.server(
                workers,
                interceptors=[UndecodableRequests()],
                options=self._grpc_options(),
                maximum_concurrent_rpcs=opts.max_concurrent_rpcs,
            )
            self._add_grpc_services(self._grpc, self._health)
        if opts.rest_port is not None:
            rest_options = RestOptions(
                max_body_bytes=opts.max_message_bytes,
                max_json_depth=opts.max_json_depth,
                default_timeout=opts.rest_timeout_ms / 1000 if opts.rest_timeout_ms else None,
                idle_timeout=opts.rest_idle_timeout,
                header_timeout=opts.rest_header_timeout,
                body_timeout=opts.rest_body_timeout,
                max_connections=opts.rest_max_connections,
                workers=opts.rest_workers or opts.grpc_workers,  # the same work as gRPC's
                strict_json_numbers=opts.strict_json_numbers,
            )
            self._rest = RestServer(
                opts.host,
                opts.rest_port,
                self.plane,
                rest_options,
                ssl=opts.tls.ssl_context() if opts.tls else None,
                reuse_port=opts.reuse_port,
            )
            self.rest_port = self._rest.port
        if self._rest is not None:
            # Primed before gRPC opens: a client that sees the model AVAILABLE over gRPC must not
            # race the REST threads' warm-up for the CPU (make bench's G5 measured a first
            # request of 16 ms against 2 ms when they ran after).
            self._rest.start()
            self._rest.prime(self._warm_this_thread)
        if isinstance(self._grpc, grpc.aio.Server):
            self._in_loop(self._grpc.start())
        else:
            self._grpc.start()
        assert self._health is not None
        for service in ("", PREDICTION_SERVICE, MODEL_SERVICE):
            self._health.set(service, health_pb2.HealthCheckResponse.SERVING)
        names = self.registry.names()
        shown = ", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "")
        log.info("serving %s: %s", shown, self.describe())
        return self

    def _grpc_options(self) -> list[tuple[str, int | str]]:
        limits: list[tuple[str, int | str]] = [
            ("grpc.max_receive_message_length", self.options.max_message_bytes),
            ("grpc.max_send_message_length", self.options.max_message_bytes),
        ]
        return [*limits, *self.options.grpc_arguments]

    async def _asyncio_grpc(self, workers: futures.ThreadPoolExecutor) -> grpc.aio.Server:
        """The asyncio gRPC server, made on its loop (grpc.aio binds a server to the loop it
        is made on). The threaded methods run on `workers`; health is asyncio's own, whose
        Watch streams end when the server stops (the threaded one's would hold a thread)."""
        server = grpc.aio.server(
            migration_thread_pool=workers,
            interceptors=[AsyncUndecodableRequests()],
            options=self._grpc_options(),
            maximum_concurrent_rpcs=self.options.max_concurrent_rpcs,
        )
        assert self._loop is not None
        self._health = _LoopHealth(self._loop)
        self._add_grpc_services(server, self._health.servicer)
        return server

    def _add_grpc_services(
        self,
        server: grpc.Server | grpc.aio.Server,
        health_servicer: health.HealthServicer | health.aio.HealthServicer,
    ) -> None:
        add_services(server, self.plane, self.options.max_message_bytes)
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        self._bind_grpc(server)

    def _in_loop(self, coroutine: Coroutine[Any, Any, T]) -> T:
        assert self._loop is not None
        return self._loop.call(coroutine)

    def _bind_grpc(self, server: grpc.Server | grpc.aio.Server) -> None:
        """The TCP port, the Unix socket, or both, as the options ask."""
        opts = self.options
        if opts.grpc_port is None and not opts.grpc_socket_path:
            raise OSError("no gRPC address: give a gRPC port or a Unix socket path")
        credentials = opts.tls.grpc_credentials() if opts.tls else None

        def bind(address: str) -> int:
            if credentials is None:
                return server.add_insecure_port(address)
            return server.add_secure_port(address, credentials)

        if opts.grpc_port is not None:
            address = f"[{opts.host}]" if ":" in opts.host else opts.host
            self.grpc_port = bind(f"{address}:{opts.grpc_port}")
            if self.grpc_port == 0:
                raise OSError(f"cannot bind gRPC port {opts.host}:{opts.grpc_port}")
        if opts.grpc_socket_path:
            # gRPC replaces a socket file at the path (left by a server that is gone), never
            # another kind of file; it removes its socket when it stops.
            try:
                bind(f"unix:{opts.grpc_socket_path}")
            except RuntimeError:
                raise OSError(
                    f"cannot listen on Unix socket {opts.grpc_socket_path}: its directory must "
                    "exist and be writable, and no file other than a socket may be there"
                ) from None

    def describe(self) -> str:
        """Where this server listens, for logs: "gRPC H:P, gRPC unix:PATH, REST http://H:P"
        (each gRPC address followed by " (asyncio)" on that front end, and by " (TLS)" or
        " (mutual TLS)" with an SSL config; REST is then https://)."""
        host = self.options.host
        where = []
        tls = self.options.tls
        front_end = " (asyncio)" if self.options.grpc_asyncio else ""
        if tls is not None:
            front_end += " (mutual TLS)" if tls.client_verify else " (TLS)"
        if self.options.grpc_port is not None:
            where.append(f"gRPC {host}:{self.grpc_port}{front_end}")
        if self.options.grpc_socket_path:
            where.append(f"gRPC unix:{self.options.grpc_socket_path}{front_end}")
        scheme = "https" if tls is not None else "http"
        where.append(f"REST {scheme}://{host}:{self.rest_port}" if self._rest else "REST off")
        return ", ".join(where)

    def _warm_this_thread(self) -> None:
        """Replay the warm-up records of every resident model's newest version on this thread, as
        the loader did on its own (TF Serving replays them at load; its threads need nothing more,
        ours each set up TensorFlow's per-thread state on first use). A model without records
        stays as cold as it is; the thread still runs one op to set up TensorFlow."""
        import tensorflow as tf

        from graphserve.model.warmup import replay_warmup

        tf.constant(0.0).numpy()
        for name in self.registry.names():
            resident = self.registry.available(name)  # none is loaded on demand for this
            if not resident:
                continue
            try:
                runner = resident[-1].runner
                version_dir = runner.path
                if version_dir is not None and runner.on_caller:
                    replay_warmup(version_dir, runner.run)
            except Exception as exc:  # warming must never keep a server from starting
                log.debug("warming a gRPC thread for %s skipped: %s", name, exc)

    def stop(self, grace: float = 5.0) -> None:
        """Stop accepting requests, let in-flight ones finish (up to `grace` s), then close.

        New requests get UNAVAILABLE from the moment draining starts (a status clients retry),
        health turns NOT_SERVING, and the transports close only once in-flight requests ended.
        """
        with self._stop_lock:  # once: a signal may ask again while it runs
            if self._stopping:
                return
            self._stopping = True
        started = time.monotonic()
        if self._health is not None:
            self._health.enter_graceful_shutdown()
        if not self.plane.drain(grace):
            log.warning("requests still in flight after %.1f s; stopping anyway", grace)
        remaining = max(grace - (time.monotonic() - started), 0.1)
        if self._rest is not None:
            self._rest.stop()
        if isinstance(self._grpc, grpc.aio.Server):
            self._in_loop(self._grpc.stop(remaining))
        elif self._grpc is not None:
            self._grpc.stop(remaining).wait()
        if self._loop is not None:
            self._loop.close()
        if self.watcher is not None:
            self.watcher.stop()
        if self.plane.request_logs is not None:
            self.plane.request_logs.close(remaining)  # what was answered is written
        if self.manager is not None:
            self.manager.unload_all()
        self._stopped.set()

    def wait(self) -> None:
        """Block until stopped. Wakes twice a second: Python runs signal handlers only in the main
        thread between bytecodes, and a SIGTERM delivered to one of TensorFlow's or gRPC's
        threads would not interrupt an untimed wait (grpc's wait_for_termination does the same)."""
        while not self._stopped.wait(0.5):
            pass

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop(grace=1.0)
