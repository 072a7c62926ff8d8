"""The REST front end's HTTP/1.1 transport: uvicorn (httptools parser, uvloop) in-process, in a
thread of its own, in front of a blocking handler run on a pool of threads.

    loop thread (uvloop)                          pool threads (up to `workers`, as needed)
    accept · parse (httptools) · read the body    handler(Request) -> Response: the data plane,
    timeouts · connection cap · write the answer  which blocks (the model, batching queues)

Chosen by measurement (docs/benchmarks/history/http.md has the table, dated). Every candidate that
can share this process's models hands a request from an event loop to a thread and back, which
costs 0.1-0.15 ms on a keep-alive request next to ThreadingHTTPServer's thread per connection
(granian's embedded mode, aiohttp, tornado, waitress, cheroot: the same or more). Of those,
uvicorn with httptools was the fastest on a keep-alive connection and on a new one (faster than
ThreadingHTTPServer there), reads chunked bodies and answers `Expect: 100-continue` as TF
Serving does, and keeps idle connections on the loop, where they cost no thread. What uvicorn
does not do itself is added here, thinly, on its protocol class (`_Protocol`):

- an idle timeout that also covers a connection that never sends a request (uvicorn arms its
  keep-alive timer only after a response);
- a header timeout (from a request's first byte to the end of its headers: a header sent a byte
  at a time is cut, 408) and a body timeout (from the end of the headers to the end of the body,
  408); uvicorn has neither;
- a connection cap: a connection past `max_connections` gets 503 and is closed, the connections
  within the cap are served as usual (uvicorn's `limit_concurrency` refuses every request once the
  count is reached, on old connections too);
- one write per response (uvicorn writes the head and the body separately: with Nagle off they
  leave as two segments, and the client wakes twice);
- a refused body is read and dropped before the connection closes (up to LINGER_BYTES, for up to
  LINGER_S), so a client still sending it reads the 413 instead of a reset connection;
- errors as TF Serving's `{"error": "..."}` JSON, with a cap on the request head (431).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import queue
import socket
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from http import HTTPStatus
from ssl import SSLContext
from typing import Any, cast

import uvicorn
import uvloop
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from graphserve.core.defaults import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_GRPC_WORKERS,
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_MAX_CONNECTIONS,
)
from graphserve.serving.deadline import Cancellation

__all__ = [
    "AWAIT",
    "DEFAULT_BODY_TIMEOUT_S",
    "DEFAULT_HEADER_TIMEOUT_S",
    "DEFAULT_IDLE_TIMEOUT_S",
    "DEFAULT_MAX_CONNECTIONS",
    "LINGER_BYTES",
    "LINGER_S",
    "LOOP",
    "MAX_HEAD_BYTES",
    "THREAD",
    "HttpServer",
    "Request",
    "Response",
    "TransportLimits",
    "error_body",
]

log = logging.getLogger("graphserve.rest")


MAX_HEAD_BYTES = 64 * 1024  # request line and headers; more is refused with 431
_HEAD_TOO_LARGE = f"request line and headers exceed {MAX_HEAD_BYTES} bytes"
LINGER_BYTES = 64 * 1024 * 1024  # the most of a refused body read (and dropped) after answering
LINGER_S = 1.0  # ... and for how long


@dataclass(frozen=True)
class TransportLimits:
    """Timeouts (seconds; None: none) and sizes the transport enforces before the handler runs."""

    max_body_bytes: int
    idle_timeout: float | None
    header_timeout: float | None
    body_timeout: float | None
    max_connections: int | None
    body_limit_hint: str = ""  # how to raise the body limit, for the 413 message


@dataclass(frozen=True)
class Request:
    """One request, body read whole. Header names are lower case; a repeated header keeps its
    last value."""

    method: str
    path: str  # as sent, query string included
    headers: Mapping[str, str]
    body: bytes
    prepared: Any = None  # what the handler's `prepare` did for it on the event loop
    here: str = "thread"  # where it is served: THREAD, LOOP or AWAIT (`Here`)


@dataclass
class Response:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: list[tuple[str, str]] = field(default_factory=list)


Handler = Callable[[Request], Response]
# Awaited on the event loop before a request goes to a worker thread (what is awaited there holds
# no thread); returns the request, its `prepared` filled in.
Prepare = Callable[[Request], Awaitable[Request]]
# Where a request (method, target, body size) is served: THREAD, handed to a worker thread;
# LOOP, run on the event loop it arrived on (for one that takes well under a millisecond, the
# hand-off, a thread woken and the answer handed back, costs more than the request); AWAIT, the
# handler's coroutine on the loop (a request that waits for others, a batch, holds no thread).
Here = Callable[[str, str, int], str]
THREAD, LOOP, AWAIT = "thread", "loop", "await"
AsyncHandler = Callable[[Request], Awaitable[Response]]


def error_body(message: str) -> bytes:
    """TF Serving's error body."""
    return json.dumps({"error": message}).encode()


# ---------------------------------------------------------------------------------------------
# The pool that runs the blocking handler


class _Pool:
    """Threads that run blocking calls for one event loop and hand each result straight back to
    it (a put to the thread, one call_soon_threadsafe back, without the concurrent Future and the
    chaining that run_in_executor adds: about 40 µs of a keep-alive request).

    The most recently idle thread takes the next call: its stack and caches are warm, and a few
    threads serve any load that needs no more at once. A thread is started only for a call that
    finds every one busy, up to `size` (with batching, enough to fill the batches), and first
    runs `prepare` (the warm-up the started ones got from `prime`); the call waits for whichever
    thread frees first, that one or a busy one."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, size: int, name: str, *, started: int
    ) -> None:
        self.loop = loop
        self.size = size
        self.name = name
        self.prepare: Callable[[], object] | None = None
        self.threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[Any]] = []  # each idle thread's inbox, last idle last
        self._pending: collections.deque[Any] = collections.deque()
        self._starting = 0
        self._closed = False
        with self._lock:
            for _ in range(min(started, size)):
                self._start_thread()

    def run(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        future = self.loop.create_future()
        task = (future, fn, args)
        with self._lock:
            if not self._idle:
                self._pending.append(task)
                if self._starting < len(self._pending) and len(self.threads) < self.size:
                    self._start_thread()
                return future
            inbox = self._idle.pop()
        inbox.put(task)
        return future

    @property
    def waiting(self) -> int:
        """Calls waiting for a thread now."""
        return len(self._pending)

    def close(self) -> None:
        """Each thread ends once the calls already given are done."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for inbox in idle:
            inbox.put(None)

    def _start_thread(self) -> None:  # under the lock
        self._starting += 1
        thread = threading.Thread(
            target=self._work, name=f"{self.name}-{len(self.threads)}", daemon=True
        )
        self.threads.append(thread)
        thread.start()

    def _work(self) -> None:
        prepare = self.prepare
        if prepare is not None:
            try:
                prepare()
            except Exception:  # the calls themselves will show what is wrong, if anything
                log.exception("preparing REST thread %s failed", threading.current_thread().name)
        with self._lock:
            self._starting -= 1
        inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        call_soon = self.loop.call_soon_threadsafe
        while (task := self._next(inbox)) is not None:
            future, fn, args = task
            settle: Callable[[asyncio.Future[Any], Any], None]
            try:
                settle, outcome = _set_result, fn(*args)
            except BaseException as exc:  # handed to the awaiting request
                settle, outcome = _set_exception, exc
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
                call_soon(settle, future, outcome)

    def _next(self, inbox: queue.SimpleQueue[Any]) -> Any:
        with self._lock:
            if self._pending:
                return self._pending.popleft()
            if self._closed:
                return None
            self._idle.append(inbox)
        return inbox.get()


def _set_result(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():
        future.set_result(result)


def _set_exception(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)


# ---------------------------------------------------------------------------------------------
# uvicorn's protocol, with what it lacks


class _Transport:
    """The connection's transport as uvicorn's protocol sees it: a response head is held until
    the body's first write, so that both leave in one send, and a close while the request's
    body is still arriving waits for it, reading and dropping it."""

    def __init__(self, transport: asyncio.Transport, protocol: _Protocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self._head: bytes | None = None
        self._lingering = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def write(self, data: bytes) -> None:
        if self._head is not None:
            data, self._head = self._head + data, None
        elif data.startswith(b"HTTP/1.1 ") and not data.startswith(b"HTTP/1.1 100 "):
            self._head = data  # uvicorn writes the head alone; its body follows at once
            return
        if not self._transport.is_closing():
            self._transport.write(data)

    def flush(self) -> None:
        if self._head is not None:
            head, self._head = self._head, None
            if not self._transport.is_closing():
                self._transport.write(head)

    def is_closing(self) -> bool:
        return self._lingering or self._transport.is_closing()

    def close(self) -> None:
        self.flush()
        if self._lingering or self._transport.is_closing():
            return
        if self._protocol.in_body:
            self._lingering = True
            self._protocol.linger()
        else:
            self._transport.close()

    def close_now(self) -> None:
        self.flush()
        self._transport.close()


class _Protocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with an idle timeout from the first moment, header and body
    timeouts, a connection cap, one write per response, lingering, and JSON errors.

    Found by tools/fuzz/http_raw.py, where uvicorn falls short on raw requests: a request refused
    behind pipelined ones is answered after their answers, in order (uvicorn wrote the error
    first and dropped theirs), and nothing after it is read or answered, nor after an answer
    that closes; bytes that begin no request (CR LF) leave the idle timeout armed; a head is
    measured from its own first byte, not from the read's; and an Upgrade request with a body
    is refused, as httptools skips that body and would read it as the next request."""

    limits: TransportLimits
    _UPGRADE_WITH_BODY = (
        "Malformed HTTP request: an Upgrade request with a body is not served (this server "
        "speaks HTTP/1.1 only): send it without 'Connection: upgrade'"
    )

    def __init__(self, *args: Any, limits: TransportLimits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        self.in_body = False  # headers done, body not yet
        self._in_head = False  # a request's first byte seen, headers not yet
        self._head_bytes = 0
        self._refusal: tuple[int, str] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._lingered = 0
        self._body: list[bytes] = []  # the request body so far
        self._body_size = 0
        self._current: Any = None  # the cycle of the request being read, once its head is
        self._deferred: tuple[int, str] | None = None  # a refusal waiting for earlier answers

    # -- connection

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(cast(asyncio.Transport, _Transport(transport, self)))
        cap = self.limits.max_connections
        if cap is not None and len(self.connections) > cap:
            # Served a 503 once its request head arrives (said at once, a client still writing
            # its request would read a reset instead), then closed.
            self._refusal = (
                HTTPStatus.SERVICE_UNAVAILABLE,
                f"the server has {cap} connections open, its limit (--rest-max-connections): "
                "retry, or reuse a connection",
            )
        self._arm_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        super().connection_lost(exc)

    def _arm_idle(self) -> None:
        # uvicorn's own keep-alive timer, which data_received cancels; armed here too, so that a
        # connection that never sends a request is closed like one that stopped sending.
        idle = self.limits.idle_timeout
        if idle is not None and self.timeout_keep_alive_task is None:
            self.timeout_keep_alive_task = self.loop.call_later(
                idle, self.timeout_keep_alive_handler
            )

    # -- parsing

    def data_received(self, data: bytes) -> None:
        if self._deferred is not None:
            return  # a request was refused behind others: nothing after it is read
        super().data_received(data)
        if self.transport.is_closing() or self._deferred is not None:
            return
        # The header and body timers are armed only for a request still incomplete once what
        # has arrived is parsed: most arrive whole in one read and never need one.
        limits = self.limits
        if self._in_head:
            if self._head_bytes < 0:  # begun in this read, maybe after other requests' bytes
                self._head_bytes = len(self.url) + sum(len(k) + len(v) + 4 for k, v in self.headers)
            else:
                self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._refuse(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, _HEAD_TOO_LARGE)
            elif self._timer is None and limits.header_timeout is not None:
                self._start_timer(limits.header_timeout, self._head_timed_out)
        elif self.in_body:
            if self._timer is None and limits.body_timeout is not None:
                self._start_timer(limits.body_timeout, self._body_timed_out)
        elif self.cycle is None or self.cycle.response_complete:
            self._arm_idle()  # what came began no request (CR LF between requests): still idle

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head, self._head_bytes, self._current = True, -1, None

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._cancel_timer()
        self.in_body = True
        if self._deferred is not None or self.transport.is_closing():
            return  # after a refused request, or an answer that closes: dropped
        refusal = self._refusal
        if len(self.url) + sum(len(k) + len(v) + 4 for k, v in self.headers) > MAX_HEAD_BYTES:
            refusal = (HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, _HEAD_TOO_LARGE)
        length = next((v for k, v in self.headers if k == b"content-length"), b"")
        if refusal is None and length.isdigit() and int(length) > self.limits.max_body_bytes:
            # refused before its body is read (nor asked for: no 100 Continue)
            what = f"request body of {int(length)} bytes"
            refusal = (HTTPStatus.REQUEST_ENTITY_TOO_LARGE, self._too_large(what))
        chunked = any(k == b"transfer-encoding" for k, _ in self.headers)
        has_body = chunked or (length.isdigit() and int(length) > 0)
        if refusal is None and has_body and self.parser.should_upgrade():
            refusal = (HTTPStatus.BAD_REQUEST, self._UPGRADE_WITH_BODY)
        if refusal is not None:
            self._refuse(*refusal)
            return
        super().on_headers_complete()
        self._current = self.cycle

    def on_body(self, body: bytes) -> None:
        transport = self.transport
        if isinstance(transport, _Transport) and transport.is_closing():
            self._lingered += len(body)
            if self._lingered > LINGER_BYTES:
                transport.close_now()
            return
        if self._deferred is not None or self.cycle.response_complete:
            return
        # Unlike uvicorn, which appends each read to a bytearray, wakes the application for it
        # and pauses reading past 64 KiB until the bytes are taken, the body is gathered here
        # and handed over whole, joined once, when its last byte arrives (on_message_complete).
        self._body.append(body)
        self._body_size += len(body)
        if self._body_size > self.limits.max_body_bytes:  # chunked: no length to check first
            what = "chunked request body"
            self._refuse(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, self._too_large(what))

    def _too_large(self, what: str) -> str:
        hint = self.limits.body_limit_hint
        limit = self.limits.max_body_bytes
        return f"{what} exceeds the limit of {limit} bytes" + (f" ({hint})" if hint else "")

    def on_message_complete(self) -> None:
        self.in_body = False
        self._cancel_timer()
        if self._deferred is not None:  # the refused request's, or one after it
            self._body, self._body_size = [], 0
            return
        if self._body:
            chunks, self._body, self._body_size = self._body, [], 0
            cycle = self.cycle
            if cycle is not None and not cycle.response_complete:
                # bytes, not a bytearray: uvicorn's receive() hands it on without a copy
                body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                cycle.body = body  # type: ignore[assignment]
        if isinstance(self.transport, _Transport) and self.transport.is_closing():
            self.transport.close_now()  # the refused body has been read: close now
            return
        super().on_message_complete()

    def on_response_complete(self) -> None:
        if isinstance(self.transport, _Transport):
            self.transport.flush()  # a head with no body (HEAD, 204, 304)
        if self._deferred is not None and not self.pipeline:  # the answers before it are out
            deferred, self._deferred = self._deferred, None
            self._write_error(*deferred)
        super().on_response_complete()

    # -- refusing

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request httptools cannot parse, as JSON."""
        self._refuse(HTTPStatus.BAD_REQUEST, f"Malformed HTTP request: {msg}")

    def _refuse(self, status: int, message: str) -> None:
        """Answer `status` without running the handler, and close the connection: once the
        requests before it on the connection (pipelined) have their answers."""
        if self._deferred is not None or self.transport.is_closing():
            return  # one refusal, and nothing after an answer that closes the connection
        self._cancel_timer()
        cycle, self._current = self._current, None
        queued = False
        if cycle is not None and not cycle.response_complete:  # its application stops quietly
            cycle.disconnected = True
            cycle.message_event.set()
            for entry in [p for p in self.pipeline if p[0] is cycle]:
                self.pipeline.remove(entry)
                queued = True
        earlier = self.cycle if cycle is None else None  # refused before its head was whole
        if queued or self.pipeline or (earlier is not None and not earlier.response_complete):
            self._deferred = (status, message)  # on_response_complete writes it
        else:
            self._write_error(status, message)

    def _write_error(self, status: int, message: str) -> None:
        body = error_body(message)
        head = (
            f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n"
        ).encode()
        self.transport.write(head + body)
        self.transport.close()

    def _head_timed_out(self) -> None:
        self._timer = None
        self._refuse(
            HTTPStatus.REQUEST_TIMEOUT,
            f"request headers not received within {self.limits.header_timeout:g} s",
        )

    def _body_timed_out(self) -> None:
        self._timer = None
        if self.cycle is None or not self.cycle.response_started:
            self._refuse(
                HTTPStatus.REQUEST_TIMEOUT,
                f"request body not received within {self.limits.body_timeout:g} s",
            )
        if isinstance(self.transport, _Transport) and self._deferred is None:
            self.transport.close_now()  # no lingering: the body is what is not coming

    def linger(self) -> None:
        """The response is out and the connection is to close, but its request's body is still
        arriving: read and drop it, then close (LINGER_BYTES and LINGER_S at most)."""
        self._start_timer(LINGER_S, self._linger_over)
        with contextlib.suppress(RuntimeError):  # not paused: older loops refuse a resume
            self.transport.resume_reading()  # uvicorn pauses reading while a body waits

    def _linger_over(self) -> None:
        self._timer = None
        if isinstance(self.transport, _Transport):
            self.transport.close_now()

    def _start_timer(self, seconds: float, callback: Callable[[], None]) -> None:
        self._cancel_timer()
        self._timer = self.loop.call_later(seconds, callback)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


# ---------------------------------------------------------------------------------------------
# The application: read the body, run the handler on the pool, answer


class _App:
    """The ASGI application: the request, body read whole, goes to the handler on the pool, or
    where `here` says: the handler on the loop (nothing awaited before its answer), or the
    async handler's coroutine on the loop.

    A client that closes its connection before its answer stops its request where it is: the
    handler runs in the request's `Cancellation` (graphserve.serving.deadline), which asks
    uvicorn's request cycle whether the connection was lost (its protocol's connection_lost
    sets `disconnected`). So a request whose client left while it waited for a thread ends at
    the data plane's door, its JSON unparsed and the model not run, and the batcher drops one
    from its queue when its batch comes up. Asked where it matters, never awaited: no task or
    callback per request."""

    def __init__(
        self,
        handler: Handler,
        prepare: Prepare | None = None,
        here: Here | None = None,
        handler_async: AsyncHandler | None = None,
    ) -> None:
        self.handler = handler
        self.prepare = prepare
        self.here = here
        self.handler_async = handler_async
        self.pool: _Pool | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":  # lifespan is off and websockets are not served
            return
        chunks: list[bytes] = []
        while True:  # _Protocol hands the body over whole, in one message, within its limits
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        target = scope["raw_path"].decode("latin-1")
        if scope["query_string"]:
            target += "?" + scope["query_string"].decode("latin-1")
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        method = scope["method"]
        here = self.here(method, target, len(body)) if self.here is not None else THREAD
        request = Request(method, target, headers, body, here=here)
        cycle = receive.__self__  # uvicorn's RequestResponseCycle
        cancellation = Cancellation(lambda: cycle.disconnected)
        assert self.pool is not None
        try:
            if here == LOOP:
                response = self._handle(request, cancellation)
            elif here == AWAIT and self.handler_async is not None:
                with cancellation:
                    response = await self.handler_async(request)
            else:
                if self.prepare is not None:
                    request = await self.prepare(request)
                response = await self.pool.run(self._handle, request, cancellation)
        except Exception as exc:  # the handler answers its own errors; this is a bug in it
            log.exception("REST handler failed on %s %s", request.method, request.path)
            response = Response(
                HTTPStatus.INTERNAL_SERVER_ERROR, error_body(f"{type(exc).__name__}: {exc}")
            )
        await _answer(send, response)

    def _handle(self, request: Request, cancellation: Cancellation) -> Response:
        """The handler, on a pool thread (or the loop: `here`), in the request's Cancellation."""
        with cancellation:
            return self.handler(request)


async def _answer(send: Any, response: Response) -> None:
    headers = [
        (b"content-type", response.content_type.encode("latin-1")),
        (b"content-length", str(len(response.body)).encode()),
    ]
    headers += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers]
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    await send({"type": "http.response.body", "body": response.body})


# ---------------------------------------------------------------------------------------------


class HttpServer:
    """`handler` served over HTTP/1.1 on host:port (0: a free port), from `start()` until
    `stop()`. The handler runs on one of up to `workers` threads (`started` of them at once, the
    rest as load needs them), or on the event loop for a request `here` picks (`handler`, or
    the coroutine of `handler_async`); everything else on the event loop."""

    def __init__(
        self,
        host: str,
        port: int,
        handler: Handler,
        limits: TransportLimits,
        *,
        workers: int,
        started: int = DEFAULT_GRPC_WORKERS,
        name: str = "rest",
        prepare: Prepare | None = None,
        here: Here | None = None,
        handler_async: AsyncHandler | None = None,
        ssl: SSLContext | None = None,
        reuse_port: bool = False,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self.limits = limits
        self.workers = workers
        self.started = started
        self.name = name
        self.ssl = ssl  # HTTPS: the handshake on the loop, before the first request byte
        self._app = _App(handler, prepare, here, handler_async)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:  # the workers of one server listen on one port (serving.workers)
            self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            self._socket.bind((host, port))
            self._socket.listen(2048)
        except OSError:
            self._socket.close()
            raise
        self._socket.setblocking(False)
        self.port: int = self._socket.getsockname()[1]
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: uvicorn.Server | None = None
        self._serving: Any = None

    def start(self) -> HttpServer:
        """Serve in background threads; returns once the port accepts connections."""
        loop = self._loop = uvloop.new_event_loop()
        self._app.pool = _Pool(loop, self.workers, self.name, started=self.started)
        protocol = partial(_Protocol, limits=self.limits)
        config = uvicorn.Config(
            self._app,
            http=cast(type[asyncio.Protocol], protocol),
            loop="none",
            lifespan="off",
            ws="none",
            interface="asgi3",
            log_config=None,
            log_level=logging.WARNING,
            access_log=False,
            proxy_headers=False,
            server_header=False,
            # uvicorn's keep-alive timer; _Protocol arms it from the first moment as well
            timeout_keep_alive=self.limits.idle_timeout or 10**9,  # type: ignore[arg-type]
            timeout_graceful_shutdown=1,
        )
        config.load()
        config.ssl = self.ssl  # a context of ours, where uvicorn's options would take files
        server = self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=loop.run_forever, name=self.name, daemon=True)
        self._thread.start()
        self._serving = asyncio.run_coroutine_threadsafe(server.serve(sockets=[self._socket]), loop)
        started = threading.Event()
        loop.call_soon_threadsafe(self._when_started, started)
        if not started.wait(10.0) or self._serving.done():
            failure = self._serving.exception() if self._serving.done() else None
            self.stop()
            raise RuntimeError(f"the REST server did not start on port {self.port}: {failure!r}")
        return self

    def _when_started(self, started: threading.Event) -> None:
        assert self._server is not None and self._loop is not None
        if self._server.started or self._serving.done():
            started.set()
        else:
            self._loop.call_later(0.005, self._when_started, started)

    def prime(self, work: Callable[[], object], timeout: float = 30.0) -> None:
        """Run `work` once on every pool thread (each waits for the others, so every thread gets
        one), on each thread started later before its first request, and on the event loop's
        when it serves requests (`here`): e.g. to set up per-thread state."""
        pool = self._app.pool
        if pool is None:
            raise RuntimeError("prime() needs a started server")
        pool.prepare = work
        barrier = threading.Barrier(len(pool.threads), timeout=timeout)

        def each() -> None:
            with contextlib.suppress(threading.BrokenBarrierError):  # a thread busy: the rest
                barrier.wait()
            work()

        async def all_threads() -> None:
            await asyncio.gather(*(pool.run(each) for _ in pool.threads))
            if self._app.here is not None:
                work()  # and the loop's, which serves the requests `here` picks

        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(all_threads(), self._loop).result(timeout)

    def stop(self, timeout: float = 5.0) -> None:
        """Close the listener and every connection (requests in flight get up to about a second
        to answer), then the threads."""
        if self._server is None or self._loop is None:
            self._socket.close()
            return
        self._server.should_exit = True
        try:
            self._serving.result(timeout)
        except Exception as exc:
            log.debug("REST server stopped with %r", exc)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout)
            if not self._thread.is_alive():
                self._loop.close()
        if self._app.pool is not None:
            self._app.pool.close()
        self._socket.close()
        self._server = None
