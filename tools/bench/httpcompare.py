"""HTTP servers compared for the REST front end, by measurement (issue 15 B).

    python tools/bench/httpcompare.py [--seconds 20] [--servers stdlib,graphserve,...] [--model mlp]
                                [--no-probes] [--noop] [--json OUT]

A child process runs every candidate server, each in its own thread(s) on its own loopback
port, in front of the same blocking handler. The graph server's data plane is blocking and
shared with the gRPC server in the same process, so every candidate must run in-process and
hand requests to threads; asyncio servers do that with a thread pool. The candidates:

    stdlib          ThreadingHTTPServer, a thread per connection (the REST front end before)
    stdlib-legacy   the same with the standard library's JSON (with --model: the whole front
                    end as it was before issue 15)
    graphserve      graphserve.serving.http_server: uvicorn + httptools on uvloop, the handler
                    on a pool, with timeouts, a connection cap and one write per answer added
    uvicorn, uvicorn-looppool, uvicorn-asyncio, uvicorn-inline, uvicorn-loops
                    plain uvicorn: run_in_executor, a leaner pool, the asyncio loop, the handler
                    on the loop itself, and one loop per thread sharing the listening socket
    granian         granian's embedded server (ASGI), the handler on a pool
    cheroot, waitress, tornado, aiohttp
                    (installed apart: pip install granian cheroot waitress tornado aiohttp;
                    those missing are left out)

The handler is a stand-in MLP batch-1 predict (784 floats in, a numpy forward pass, 10 floats
out), or with `--model mlp` (or `--model-dir BASE/NAME`) graphserve's own REST handler over a
graph data plane serving that SavedModel: the request path of `serve graph`, only the transport
differs. `--noop` answers a constant: what the transport alone costs.

This process is the client: graphserve's one HTTP client (graphserve.core.httpclient) with
prebuilt request bytes, so the client's own cost is small and the same for every server; the
probes write raw bytes and read the answers with the same parser. It measures, interleaved in
rounds whose order reverses each round (A B C, C B A):

- keep-alive p50/p99: one connection, one request at a time;
- new connection p50: connect, request, close, one at a time (curl, urllib);
- req/s at 16 clients, each on its own keep-alive connection;

and probes behaviour against second and third instances of each server started with short
limits (idle, header and body timeouts of 1 s; a cap of 4 connections): a chunked body,
`Expect: 100-continue`, whether an idle connection (used once, or never), a header sent a byte
at a time and a body cut short are closed, what the cap does with connections past it, and how
long a request takes next to 300 idle connections and a slow header. The table says what each
server did, not what its documentation says.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

from graphserve.core.httpclient import (
    HttpConnection,
    blocking_connector,
    read_response,
)

HOST = "127.0.0.1"
PATH = "/v1/models/mlp:predict"
WORKERS = 8  # threads that run the blocking handler, where the server does not bring its own


@dataclass(frozen=True)
class Limits:
    """What each candidate is asked to enforce; None: off."""

    idle_s: float | None = None
    header_s: float | None = None
    body_s: float | None = None
    max_connections: int | None = None


PERF = Limits(idle_s=60.0)
PROBE = Limits(idle_s=1.0, header_s=1.0, body_s=1.0)
CAPPED = Limits(idle_s=5.0, header_s=5.0, body_s=5.0, max_connections=4)


# ---------------------------------------------------------------------------------------------
# The handler every server runs: blocking, like the data plane


Handle = Callable[[str, bytes], tuple[int, bytes]]
_REAL: Handle | None = None  # set by --model
_NOOP = False  # set by --noop: a constant answer, so only the transport costs anything
_NOOP_ANSWER = json.dumps({"predictions": [[0.0] * 10]}).encode()
_LEGACY: Handle | None = None  # ... and the handler as it was before fast JSON


def _real_handlers(model: str | None, model_dir: str | None) -> tuple[Handle, Handle]:
    """graphserve's REST handler over a graph data plane serving the SavedModels under
    `model_dir` (or `examples:MODEL`, exported first), and the same handler with the standard
    library's JSON, as the REST front end was before issue 15."""
    import json as stdlib_json
    from pathlib import Path

    from graphserve.core import codec
    from graphserve.serving import rest_api
    from graphserve.serving.dataplane import DataPlane
    from graphserve.serving.http_server import Request
    from graphserve.serving.registry import ModelRegistry

    if model_dir is None:
        from graphserve.exporter import ExportSpec, export_model

        base = Path(tempfile.mkdtemp(prefix="httpcompare-"))
        export_model(ExportSpec(source=f"examples:{model}", name="mlp", base_path=base))
        model_dir = str(base / "mlp")
    registry = ModelRegistry()
    registry.load_graph("mlp", Path(model_dir))
    plane = DataPlane(registry)

    def stdlib_parse(body: bytes, max_depth: int) -> dict[str, Any]:
        """parse_json_body as it was: the depth check, then the standard library."""
        if body.strip() and codec.json_depth(body) <= max_depth:
            try:
                request = stdlib_json.loads(body)
            except ValueError:
                request = None
            if isinstance(request, dict):
                return request
        return codec.parse_json_body(body, max_depth)  # its errors

    class Legacy(rest_api._Handler):
        def _predict(
            self,
            name: str,
            version: Any,
            body: bytes,
            headers: list[tuple[str, str]],
            prepared: Any,
            here: bool = False,
        ) -> bytes:
            with rest_api._resolve(
                plane, name, version, body, stdlib_parse, 100, headers, prepared
            ) as resolved:
                servable, signature, request = resolved
                inputs, _ = codec.decode_json_request(request, signature.inputs)
                outputs = plane.predict(servable, signature, inputs)
                values = {k: codec.to_json_value(k, v) for k, v in outputs.items()}
                return stdlib_json.dumps({"predictions": next(iter(values.values()))}).encode()

    def serve(handler: rest_api._Handler) -> Handle:
        def run(method: str, body: bytes) -> tuple[int, bytes]:
            answer = handler(Request(method, PATH, {}, body))
            return answer.status, answer.body

        return run

    options = rest_api.RestOptions()
    return serve(rest_api._Handler(plane, options)), serve(Legacy(plane, options))


_rng = np.random.default_rng(0)
_W1 = _rng.standard_normal((784, 128)).astype(np.float32)
_W2 = _rng.standard_normal((128, 10)).astype(np.float32)


def handle(method: str, body: bytes) -> tuple[int, bytes]:
    if _REAL is not None:
        return _REAL(method, body)
    if _NOOP:
        return 200, _NOOP_ANSWER
    if method != "POST":
        return 200, b'{"model_version_status": []}'
    try:
        request = json.loads(body)
        x = np.asarray(request["instances"], dtype=np.float32)
    except (ValueError, KeyError, TypeError) as exc:
        return 400, json.dumps({"error": str(exc)}).encode()
    y = np.maximum(x @ _W1, 0) @ _W2
    return 200, json.dumps({"predictions": y.astype(str).astype(np.float64).tolist()}).encode()


# ---------------------------------------------------------------------------------------------
# Candidates: start(limits) -> port, stop()


class Candidate:
    name = ""
    port = 0

    def start(self, limits: Limits) -> int:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _listener() -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, 0))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


class StdlibServer(Candidate):
    """The old front end: ThreadingHTTPServer, a thread per connection, one write per answer;
    `legacy` (with --model): with the old JSON too, the REST front end before issue 15."""

    def __init__(self, legacy: bool = False) -> None:
        self.legacy = legacy
        self.name = "stdlib ThreadingHTTPServer" + (" + stdlib JSON (before)" if legacy else "")

    def start(self, limits: Limits) -> int:
        run = _LEGACY if self.legacy and _LEGACY is not None else handle

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            wbufsize = 64 * 1024
            disable_nagle_algorithm = True

            def do_GET(self) -> None:
                self._answer(*run("GET", b""))

            def do_POST(self) -> None:
                length = self.headers.get("Content-Length") or "0"
                if self.headers.get("Transfer-Encoding") or not length.isdigit():
                    self.close_connection = True
                    self._answer(400, b'{"error": "chunked bodies are not supported"}')
                    return
                self._answer(*run("POST", self.rfile.read(int(length))))

            def _answer(self, status: int, payload: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True
            request_queue_size = 1024

        self._server = Server((HOST, 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return int(self._server.server_address[1])

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class LoopPool:
    """Threads that run blocking calls for one event loop and hand the result straight back to
    it: a call is one SimpleQueue put and one call_soon_threadsafe, without the concurrent
    Future and its chaining that run_in_executor adds."""

    def __init__(self, loop: asyncio.AbstractEventLoop, threads: int) -> None:
        import queue

        self.loop = loop
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        for i in range(threads):
            threading.Thread(target=self._work, name=f"rest-{i}", daemon=True).start()

    def run(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        future = self.loop.create_future()
        self.queue.put((future, fn, args))
        return future

    def _work(self) -> None:
        get, call_soon = self.queue.get, self.loop.call_soon_threadsafe
        while True:
            future, fn, args = get()
            try:
                result = fn(*args)
            except BaseException as exc:
                call_soon(_set_exception, future, exc)
            else:
                call_soon(_set_result, future, result)


def _set_result(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():
        future.set_result(result)


def _set_exception(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)


class AsgiApp:
    """An ASGI app that reads the body on the loop and runs `handle` on a thread pool."""

    def __init__(self, pool: ThreadPoolExecutor | LoopPool | None) -> None:
        self.pool = pool

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        chunks = []
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if self.pool is None:
            status, payload = handle(scope["method"], body)
        elif isinstance(self.pool, LoopPool):
            status, payload = await self.pool.run(handle, scope["method"], body)
        else:
            loop = asyncio.get_running_loop()
            status, payload = await loop.run_in_executor(self.pool, handle, scope["method"], body)
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(payload)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": payload})


def _loop_thread(make_loop: Callable[[], asyncio.AbstractEventLoop]) -> asyncio.AbstractEventLoop:
    loop = make_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    return loop


def _new_uvloop() -> asyncio.AbstractEventLoop:
    import uvloop

    return uvloop.new_event_loop()


class UvicornServer(Candidate):
    """uvicorn + httptools on uvloop, in a thread with its own loop; handler on a pool."""

    def __init__(self, pool: str = "executor", loop: str = "uvloop") -> None:
        self.pool, self.loop_kind = pool, loop
        self.name = f"uvicorn+httptools ({loop}, handler: {pool})"

    def start(self, limits: Limits) -> int:
        import uvicorn

        self._loop = _loop_thread(
            _new_uvloop if self.loop_kind == "uvloop" else asyncio.new_event_loop
        )
        pool: ThreadPoolExecutor | LoopPool | None = None
        if self.pool == "executor":
            pool = ThreadPoolExecutor(WORKERS)
        elif self.pool == "looppool":
            pool = LoopPool(self._loop, WORKERS)
        config = uvicorn.Config(
            AsgiApp(pool),
            http="httptools",
            loop="none",
            lifespan="off",
            log_level="warning",
            access_log=False,
            timeout_keep_alive=int(limits.idle_s or 3600),
            limit_concurrency=limits.max_connections,
        )
        self._server = uvicorn.Server(config)
        sock = _listener()
        asyncio.run_coroutine_threadsafe(self._server.serve(sockets=[sock]), self._loop)
        while not self._server.started:
            time.sleep(0.01)
        return int(sock.getsockname()[1])

    def stop(self) -> None:
        self._server.should_exit = True


class UvicornLoops(Candidate):
    """N uvicorn servers, each on its own uvloop thread, sharing one listening socket; each runs
    the handler on its own loop, so a request crosses no thread: an idle loop accepts the next
    connection, a keep-alive connection stays with the loop that accepted it."""

    def __init__(self, loops: int = 4) -> None:
        self.loops = loops
        self.name = f"uvicorn+httptools ({loops} loops, handler on its loop)"

    def start(self, limits: Limits) -> int:
        import uvicorn

        sock = _listener()
        self._servers = []
        for _ in range(self.loops):
            config = uvicorn.Config(
                AsgiApp(None),
                http="httptools",
                loop="none",
                lifespan="off",
                log_level="warning",
                access_log=False,
                timeout_keep_alive=int(limits.idle_s or 3600),
                limit_concurrency=limits.max_connections,
            )
            server = uvicorn.Server(config)
            loop = _loop_thread(_new_uvloop)
            asyncio.run_coroutine_threadsafe(server.serve(sockets=[sock]), loop)
            while not server.started:
                time.sleep(0.01)
            self._servers.append(server)
        return int(sock.getsockname()[1])

    def stop(self) -> None:
        for server in self._servers:
            server.should_exit = True


class GraphserveServer(Candidate):
    """graphserve's REST transport (serving/http_server.py): uvicorn + httptools on uvloop, with
    timeouts, a cap and one write per answer added; the handler on its own thread pool."""

    name = "graphserve (uvicorn+httptools, pool)"

    def start(self, limits: Limits) -> int:
        from graphserve.serving.http_server import HttpServer, Request, Response, TransportLimits

        def handler(request: Request) -> Response:
            status, payload = handle(request.method, request.body)
            return Response(status, payload)

        transport = TransportLimits(
            max_body_bytes=64 * 1024 * 1024,
            idle_timeout=limits.idle_s,
            header_timeout=limits.header_s,
            body_timeout=limits.body_s,
            max_connections=limits.max_connections,
        )
        self._server = HttpServer(HOST, 0, handler, transport, workers=WORKERS).start()
        return self._server.port

    def stop(self) -> None:
        self._server.stop()


class GranianServer(Candidate):
    """granian's embedded server (ASGI) in a thread with its own asyncio loop."""

    name = "granian (embedded, ASGI)"

    def start(self, limits: Limits) -> int:
        from granian.constants import HTTPModes, Interfaces
        from granian.http import HTTP1Settings
        from granian.server.embed import Server

        port = _free_port()
        self._pool = ThreadPoolExecutor(WORKERS)
        self._server = Server(
            AsgiApp(self._pool),
            address=HOST,
            port=port,
            interface=Interfaces.ASGINL,
            http=HTTPModes.http1,
            websockets=False,
            backpressure=limits.max_connections,
            http1_settings=HTTP1Settings(header_read_timeout=int((limits.header_s or 30.0) * 1000)),
            log_level="warning",  # type: ignore[arg-type]
        )
        self._loop = _loop_thread(asyncio.new_event_loop)
        asyncio.run_coroutine_threadsafe(self._server.serve(), self._loop)
        _wait_listening(port)
        return port

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._server.stop)


class CherootServer(Candidate):
    """cheroot's WSGI server: a thread pool, keep-alive connections parked in a selector."""

    name = "cheroot"

    def start(self, limits: Limits) -> int:
        from cheroot import wsgi

        self._server = wsgi.Server(
            (HOST, 0),
            _wsgi_app,
            numthreads=WORKERS,
            timeout=int(limits.idle_s or 3600),
            accepted_queue_size=limits.max_connections or -1,
        )
        self._server.prepare()
        threading.Thread(target=self._server.serve, daemon=True).start()
        return int(self._server.bind_addr[1])

    def stop(self) -> None:
        self._server.stop()


class WaitressServer(Candidate):
    """waitress: one asyncore loop reads whole requests, a thread pool runs them."""

    name = "waitress"

    def start(self, limits: Limits) -> int:
        from waitress.server import create_server

        self._server = create_server(
            _wsgi_app,
            host=HOST,
            port=0,
            threads=WORKERS,
            channel_timeout=int(limits.idle_s or 3600),
            connection_limit=limits.max_connections or 10_000,
            clear_untrusted_proxy_headers=True,
        )
        threading.Thread(target=self._server.run, daemon=True).start()
        return int(self._server.effective_port)  # type: ignore[union-attr]

    def stop(self) -> None:
        self._server.close()


def _wsgi_app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    body = environ["wsgi.input"].read() if environ["REQUEST_METHOD"] == "POST" else b""
    status, payload = handle(environ["REQUEST_METHOD"], body)
    start_response(
        f"{status} {'OK' if status == 200 else 'Bad Request'}",
        [("Content-Type", "application/json"), ("Content-Length", str(len(payload)))],
    )
    return [payload]


class TornadoServer(Candidate):
    """tornado's HTTPServer on uvloop in a thread; the handler on a pool."""

    name = "tornado"

    def start(self, limits: Limits) -> int:
        from tornado import httputil
        from tornado.httpserver import HTTPServer

        pool = self._pool = ThreadPoolExecutor(WORKERS)

        async def app(request: httputil.HTTPServerRequest) -> None:
            loop = asyncio.get_running_loop()
            status, payload = await loop.run_in_executor(pool, handle, request.method, request.body)
            assert request.connection is not None
            request.connection.write_headers(
                httputil.ResponseStartLine("HTTP/1.1", status, "OK"),
                httputil.HTTPHeaders(
                    {"Content-Type": "application/json", "Content-Length": str(len(payload))}
                ),
                payload,
            )
            request.connection.finish()

        pending: set[asyncio.Future[None]] = set()

        def callback(request: httputil.HTTPServerRequest) -> None:
            task = asyncio.ensure_future(app(request))
            pending.add(task)
            task.add_done_callback(pending.discard)

        sock = _listener()
        self._loop = _loop_thread(_new_uvloop)

        async def serve() -> None:
            server = HTTPServer(
                callback,
                idle_connection_timeout=limits.idle_s,
                body_timeout=limits.body_s,
            )
            server.add_sockets([sock])

        asyncio.run_coroutine_threadsafe(serve(), self._loop).result()
        return int(sock.getsockname()[1])

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)


class AiohttpServer(Candidate):
    """aiohttp's low-level web.Server on uvloop in a thread; the handler on a pool."""

    name = "aiohttp"

    def start(self, limits: Limits) -> int:
        from aiohttp import web

        pool = self._pool = ThreadPoolExecutor(WORKERS)

        async def app(request: web.BaseRequest) -> web.Response:
            body = await request.read()
            loop = asyncio.get_running_loop()
            status, payload = await loop.run_in_executor(pool, handle, request.method, body)
            return web.Response(status=status, body=payload, content_type="application/json")

        sock = _listener()
        self._loop = _loop_thread(_new_uvloop)

        async def serve() -> web.ServerRunner:
            runner = web.ServerRunner(
                web.Server(app, keepalive_timeout=limits.idle_s or 3600), access_log=None
            )
            await runner.setup()
            await web.SockSite(runner, sock).start()
            return runner

        self._runner = asyncio.run_coroutine_threadsafe(serve(), self._loop).result()
        return int(sock.getsockname()[1])

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(5)


CANDIDATES: dict[str, Callable[[], Candidate]] = {
    "stdlib": StdlibServer,
    "stdlib-legacy": lambda: StdlibServer(legacy=True),
    "graphserve": GraphserveServer,
    "uvicorn": UvicornServer,
    "uvicorn-looppool": lambda: UvicornServer(pool="looppool"),
    "uvicorn-asyncio": lambda: UvicornServer(pool="looppool", loop="asyncio"),
    "uvicorn-inline": lambda: UvicornServer(pool="inline"),
    "uvicorn-loops": UvicornLoops,
    "granian": GranianServer,
    "cheroot": CherootServer,
    "waitress": WaitressServer,
    "tornado": TornadoServer,
    "aiohttp": AiohttpServer,
}


def _wait_listening(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=1):
            return
        time.sleep(0.02)
    raise RuntimeError(f"nothing listens on {HOST}:{port}")


def serve_all(
    names: list[str], ports_file: str, model: str | None, model_dir: str | None, noop: bool
) -> None:
    """The child process: every candidate, three times (perf, probe and capped limits); their
    ports written to `ports_file` (servers may log on stdout); then serve until stdin closes."""
    global _REAL, _LEGACY, _NOOP
    import logging

    _NOOP = noop
    logging.basicConfig(level=logging.ERROR)
    if model or model_dir:
        _REAL, _LEGACY = _real_handlers(model, model_dir)
    ports: dict[str, dict[str, int]] = {}
    for name in names:
        ports[name] = {}
        for kind, limits in (("perf", PERF), ("probe", PROBE), ("capped", CAPPED)):
            ports[name][kind] = CANDIDATES[name]().start(limits)
    with open(ports_file + ".tmp", "w") as f:
        json.dump(ports, f)
    os.replace(ports_file + ".tmp", ports_file)
    sys.stdin.read()
    os._exit(0)  # daemon threads and loops: nothing to wait for


# ---------------------------------------------------------------------------------------------
# Client side


def mlp_body() -> bytes:
    x = np.random.default_rng(1).random((1, 784), dtype=np.float32)
    instances = x.astype(str).astype(np.float64).tolist()
    return json.dumps({"signature_name": "serving_default", "instances": instances}).encode()


def post_bytes(body: bytes, extra: str = "") -> bytes:
    return (
        f"POST {PATH} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{extra}\r\n"
    ).encode() + body


def chunked_bytes(body: bytes, size: int = 1000) -> bytes:
    head = (
        f"POST {PATH} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    ).encode()
    chunks = [
        f"{len(body[i : i + size]):x}\r\n".encode() + body[i : i + size] + b"\r\n"
        for i in range(0, len(body), size)
    ]
    return head + b"".join(chunks) + b"0\r\n\r\n"


def connect(port: int, timeout: float = 10.0) -> socket.socket:
    """A raw socket for the probes, which write bytes of their own."""
    sock = socket.create_connection((HOST, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _check(status: int, body: bytes) -> None:
    if status != 200 or len(json.loads(body)["predictions"][0]) != 10:
        raise RuntimeError(f"bad answer {status}: {body[:200]!r}")


_CONNECT = blocking_connector()


class KeepAlive:
    """One kept-alive connection that sends `request` again and again (the one HTTP client's
    lean path); a connection the server closed is reopened on the next call."""

    def __init__(self, port: int, request: bytes) -> None:
        address = f"{HOST}:{port}"
        self.connection = HttpConnection(address, 10.0, connect=_CONNECT, keep_headers=False)
        self.request = request

    def __call__(self) -> None:
        _check(*self.connection.send(self.request))


def new_connection(port: int, request: bytes) -> None:
    call = KeepAlive(port, request)
    try:
        call()
    finally:
        call.connection.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(np.ceil(q * len(ordered))) - 1))]


def interleaved(
    calls: dict[str, Callable[[], None]], seconds: float, per_round: int = 50
) -> dict[str, list[float]]:
    order = list(calls)
    samples: dict[str, list[float]] = {name: [] for name in order}
    for name in order:  # warm-up
        for _ in range(20):
            calls[name]()
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for name in order:
            call, times = calls[name], samples[name]
            for _ in range(per_round):
                started = time.perf_counter()
                call()
                times.append((time.perf_counter() - started) * 1000)
        order.reverse()
    return samples


def throughput(port: int, request: bytes, clients: int, seconds: float) -> tuple[float, float, int]:
    """req/s and p99 (ms) of `clients` threads on keep-alive connections for `seconds`, and how
    many times a server closed a connection under a client (it reconnects and goes on)."""
    latencies: list[float] = []
    stop = time.perf_counter() + seconds
    errors: list[BaseException] = []
    closed = [0]

    def client() -> None:
        try:
            call = KeepAlive(port, request)
            while time.perf_counter() < stop:
                started = time.perf_counter()
                try:
                    call()
                except ConnectionError:  # closed, and reopened by the next call
                    closed[0] += 1
                    continue
                latencies.append((time.perf_counter() - started) * 1000)
            call.connection.close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"{len(errors)} clients failed: {errors[0]!r}")
    rate = len(latencies) / (time.perf_counter() - started)
    return rate, percentile(latencies, 0.99), closed[0]


# ---------------------------------------------------------------------------------------------
# Behaviour probes, against the `probe` (1 s limits) and `capped` (4 connections) instances


def closed_within(sock: socket.socket, seconds: float) -> float | None:
    """Seconds until the server closed `sock` (EOF or reset), or None if still open."""
    sock.settimeout(0.05)
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        try:
            data = sock.recv(65536)
            if not data:
                return time.monotonic() - started
        except TimeoutError:
            continue
        except OSError:
            return time.monotonic() - started
    return None


def probe_chunked(port: int, body: bytes) -> str:
    with connect(port) as sock:
        sock.sendall(chunked_bytes(body))
        try:
            response = read_response(sock)
        except OSError as exc:
            return f"no ({exc})"
        return "yes" if response.status == 200 else f"no ({response.status})"


def probe_continue(port: int, body: bytes) -> str:
    with connect(port, timeout=2.0) as sock:
        head = post_bytes(body, "Expect: 100-continue\r\n")[: -len(body)]
        sock.sendall(head)
        reader = HttpConnection.over(sock)  # keeps what came after the 100 for the next read
        try:
            first = read_response(sock, reader)
        except TimeoutError:
            first, reader = None, HttpConnection.over(sock)
        if first is not None and first.status != 100:
            return f"no (answered {first.status} before the body)"
        sock.sendall(body)
        response = read_response(sock, reader)
        if response.status != 200:
            return f"no ({response.status})"
        return "yes" if first is not None else "no 100 sent (body accepted after 2 s)"


def probe_idle(port: int, request: bytes) -> str:
    """An idle keep-alive connection after a request, and one that never sent anything: how
    long after going idle each is closed (watched together, 3 s at most)."""
    after = connect(port)
    after.sendall(request)
    read_response(after)
    fresh = connect(port)
    since = time.monotonic()
    results: dict[str, float | None] = {}
    with contextlib.ExitStack() as stack:
        watched = {stack.enter_context(after): "after a request"}
        watched[stack.enter_context(fresh)] = "never used"
        for what in watched.values():
            results[what] = None
        while watched and time.monotonic() - since < 3.0:
            readable, _, _ = select.select(list(watched), [], [], 0.05)
            for sock in readable:
                try:
                    data = sock.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    results[watched.pop(sock)] = time.monotonic() - since
    return "; ".join(
        f"{what}: {'open' if took is None else f'{took:.1f} s'}" for what, took in results.items()
    )


def probe_slow_header(port: int) -> str:
    """A header sent one byte every 0.2 s: is it cut after the 1 s header timeout?"""
    head = post_bytes(b"{}")
    with connect(port) as sock:
        started = time.monotonic()
        for byte in head[:-4]:
            try:
                sock.send(bytes([byte]))
            except OSError:
                return f"cut at {time.monotonic() - started:.1f} s"
            if closed_within(sock, 0.2) is not None:
                return f"cut at {time.monotonic() - started:.1f} s"
            if time.monotonic() - started > 4.0:
                return "open after 4 s"
    return "header completed"


def probe_slow_body(port: int) -> str:
    """Headers promise 1000 bytes, 10 arrive: is the connection cut (or answered)?"""
    with connect(port) as sock:
        sock.sendall(post_bytes(b"x" * 1000)[:-990])
        started = time.monotonic()
        sock.settimeout(4.0)
        try:
            response = read_response(sock)
            return f"{response.status} at {time.monotonic() - started:.1f} s"
        except TimeoutError:
            return "open after 4 s"
        except (ConnectionError, OSError):
            return f"cut at {time.monotonic() - started:.1f} s"


def probe_cap(port: int, request: bytes) -> str:
    """Cap 4: 8 connections each send one request; what happens to the ones past 4."""
    socks = [connect(port, timeout=2.0) for _ in range(4)]
    for s in socks:  # hold 4 connections open, each after one answered request
        s.sendall(request)
        read_response(s)
    outcomes = []
    for _ in range(4):
        try:
            extra = connect(port, timeout=2.0)
        except OSError as exc:
            outcomes.append(f"connect failed ({type(exc).__name__})")
            continue
        socks.append(extra)
        try:
            extra.sendall(request)
            outcomes.append(str(read_response(extra).status))
        except TimeoutError:
            outcomes.append("waits")
        except (ConnectionError, OSError):
            outcomes.append("closed")
    for s in socks:
        s.close()
    return ", ".join(sorted(set(outcomes)))


def probe_many_idle(port: int, request: bytes) -> str:
    """300 idle connections and one slow-header client: how long a normal request takes."""
    idle = [connect(port) for _ in range(300)]
    slow = connect(port)
    slow.send(b"POST ")
    try:
        started = time.monotonic()
        new_connection(port, request)
        return f"{(time.monotonic() - started) * 1000:.1f} ms"
    except (OSError, RuntimeError) as exc:
        return f"failed ({exc})"
    finally:
        for s in [*idle, slow]:
            s.close()


# ---------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="per measurement, all servers")
    parser.add_argument("--servers", default=",".join(CANDIDATES))
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--json", help="write every number here too")
    parser.add_argument("--model", help="serve examples:MODEL through graphserve's handler")
    parser.add_argument("--model-dir", help="... or the SavedModels under this base path")
    parser.add_argument("--no-probes", action="store_true", help="timings only")
    parser.add_argument("--noop", action="store_true", help="a constant answer: transport only")
    parser.add_argument("--serve", help=argparse.SUPPRESS)  # the child: where its ports go
    args = parser.parse_args()
    names = [n.strip() for n in args.servers.split(",") if n.strip()]
    if args.serve:
        serve_all(names, args.serve, args.model, args.model_dir, args.noop)
        return
    results = compare(
        names,
        seconds=args.seconds,
        clients=args.clients,
        model=args.model,
        model_dir=args.model_dir,
        probes=not args.no_probes,
        noop=args.noop,
    )
    print(render(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


_MODULES = {  # what each candidate imports, to leave out those not installed
    "granian": "granian",
    "cheroot": "cheroot",
    "waitress": "waitress",
    "tornado": "tornado",
    "aiohttp": "aiohttp",
}


def available(names: list[str]) -> list[str]:
    """The candidates of `names` whose server is installed (graphserve installs uvicorn; the
    others come with `pip install granian cheroot waitress tornado aiohttp`)."""
    import importlib.util

    return [
        n for n in names if n not in _MODULES or importlib.util.find_spec(_MODULES[n]) is not None
    ]


def compare(
    names: list[str],
    *,
    seconds: float,
    clients: int = 16,
    model: str | None = None,
    model_dir: str | None = None,
    probes: bool = True,
    noop: bool = False,
) -> dict[str, dict[str, Any]]:
    """Start the candidates of `names` that are installed in a child process and measure them
    (see the module docstring); every number and probe result, by candidate."""
    names = available(names)
    if not names:
        raise RuntimeError("none of the HTTP servers asked for is installed")
    with tempfile.TemporaryDirectory() as tmp:
        ports_file = os.path.join(tmp, "ports.json")
        command = [sys.executable, __file__, "--serve", ports_file, "--servers", ",".join(names)]
        command += ["--model", model] if model else []
        command += ["--model-dir", str(model_dir)] if model_dir else []
        command += ["--noop"] if noop else []
        log_path = os.path.join(tmp, "servers.log")  # what the servers say, probes included
        with open(log_path, "wb") as log:
            child = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT
            )
        try:
            while not os.path.exists(ports_file):
                if child.poll() is not None:
                    with open(log_path, errors="replace") as f:
                        tail = f.read()[-3000:]
                    raise RuntimeError(
                        f"the servers' process exited with {child.returncode}:\n{tail}"
                    )
                time.sleep(0.1)
            with open(ports_file) as f:
                ports = json.load(f)
            return measure(names, ports, seconds, clients, probes)
        finally:
            child.kill()
            child.wait()


def measure(
    names: list[str],
    ports: dict[str, dict[str, int]],
    seconds: float,
    clients: int,
    probes: bool = True,
) -> dict[str, dict[str, Any]]:
    body = mlp_body()
    request = post_bytes(body)
    results: dict[str, dict[str, Any]] = {name: {} for name in names}
    keep = interleaved({n: KeepAlive(ports[n]["perf"], request) for n in names}, seconds)
    fresh = interleaved(
        {n: partial(new_connection, ports[n]["perf"], request) for n in names}, seconds
    )
    for name in names:
        results[name]["keepalive_p50_ms"] = percentile(keep[name], 0.5)
        results[name]["keepalive_p99_ms"] = percentile(keep[name], 0.99)
        results[name]["new_connection_p50_ms"] = percentile(fresh[name], 0.5)
        results[name]["new_connection_p99_ms"] = percentile(fresh[name], 0.99)
    for name in names if clients else []:
        rate, p99, closed = throughput(ports[name]["perf"], request, clients, max(seconds / 4, 1.0))
        results[name]["rps"], results[name]["rps_p99_ms"] = rate, p99
        results[name]["rps_reconnects"] = closed
    checks: dict[str, Callable[[dict[str, int]], str]] = {
        "chunked": lambda p: probe_chunked(p["perf"], body),
        "100-continue": lambda p: probe_continue(p["perf"], body),
        "idle 1 s": lambda p: probe_idle(p["probe"], request),
        "header 1 s": lambda p: probe_slow_header(p["probe"]),
        "body 1 s": lambda p: probe_slow_body(p["probe"]),
        "cap 4": lambda p: probe_cap(p["capped"], request),
        "300 idle + slow header": lambda p: probe_many_idle(p["perf"], request),
    }

    def probe_all(name: str) -> None:
        for what, probe in checks.items():
            try:
                results[name][what] = probe(ports[name])
            except Exception as exc:
                results[name][what] = f"error: {type(exc).__name__}: {exc}"

    # Each server's probes wait on timeouts, not on the CPU: all servers are probed at once.
    threads = [threading.Thread(target=probe_all, args=(n,)) for n in (names if probes else [])]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def render(results: dict[str, dict[str, Any]]) -> str:
    """Markdown: the timings (keep-alive p50 also against ThreadingHTTPServer with the same
    handler, `stdlib`, and against the REST front end before issue 15, `stdlib-legacy`, where
    those ran), then what each server did in the probes."""
    bases = [(n, f"vs {n}") for n in ("stdlib", "stdlib-legacy") if n in results]
    lines = [
        "| server | keep-alive p50 / p99 | "
        + "".join(f"{title} | " for _, title in bases)
        + "new conn p50 / p99 | req/s (p99) |",
        "| --- | ---: | " + "---: | " * len(bases) + "---: | ---: |",
    ]
    for name, r in results.items():
        ratios = "".join(
            f"{r['keepalive_p50_ms'] / results[b]['keepalive_p50_ms']:.2f}× | " for b, _ in bases
        )
        rps = f"{r['rps']:.0f} ({r['rps_p99_ms']:.1f})" if "rps" in r else "—"
        if r.get("rps_reconnects"):
            rps += f", {r['rps_reconnects']} closed by the server"
        lines.append(
            f"| {name} | {r['keepalive_p50_ms']:.3f} / {r['keepalive_p99_ms']:.3f} | {ratios}"
            f"{r['new_connection_p50_ms']:.3f} / {r['new_connection_p99_ms']:.3f} | {rps} |"
        )
    probes = [
        k for k in next(iter(results.values())) if not k.endswith(("_ms", "rps", "reconnects"))
    ]
    if not probes:
        return "\n".join(lines)
    lines += ["", "| server | " + " | ".join(probes) + " |", "| --- |" + " --- |" * len(probes)]
    for name, r in results.items():
        lines.append(f"| {name} | " + " | ".join(str(r.get(p, "—")) for p in probes) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
