"""Load from real OS threads inside a locust process: the senders of our users.

gevent's gRPC integration (`grpc.experimental.gevent.init_gevent`) runs every call's I/O through
the gevent hub, and locust's FastHttpSession runs each request through greenlets, event hooks and
a response wrapper. Measured on this project's machine against the field's reference generators
on the same server (Triton's perf_analyzer for gRPC, wrk for REST; tools/bench/generator.py), they
added 0.2-0.5 ms to each request at one user. So each user here owns one real OS thread and its
own connections: the thread runs the user's request loop with grpc's plain blocking call, or a
keep-alive HTTP/1.1 connection on an unpatched socket (`HttpSender`), both of which wait with the
GIL released, and times the call around nothing else. The users' greenlets only start,
watch and stop their threads.

Locust still sees every request: the threads hand their finished calls to one greenlet per
process (`Completions`), which fires locust's `request` event for each on the hub, in order, a few
milliseconds later. Everything that listens to that event (locust's stats, CSV and web UI, our
recorders, plugins) runs on the hub as before and needs no lock.

Nothing in a process that uses this module may call `init_gevent()`: grpc would then route these
threads' calls through the hub too.

Over TLS (`https://`) the same socket carries TLS through ssl's memory BIOs (HttpConnection does
so on a socket that blocks in the kernel): locust's patching leaves no other way that blocks one
thread alone. The patched `ssl` module's SSLContext wraps a socket in gevent's SSLSocket, which
waits on a hub of the thread's own (measured here: several times the memory BIOs' client CPU per
request), and the standard library's SSLContext no longer wraps at all under the patch (its
SSLSocket calls super() on gevent's class). gRPC's TLS is its own (C core), on the same threads
as before.
"""

from __future__ import annotations

import collections
import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar, Protocol

import gevent
import grpc
from gevent.monkey import get_original
from locust.exception import CatchResponseError

from graphserve.core.client import http_failure
from graphserve.core.httpclient import HttpConnection, blocking_connector
from graphserve.core.tls import ClientTls

__all__ = [
    "Bodies",
    "Completed",
    "Completions",
    "HttpSender",
    "LoopThread",
    "Posting",
    "RealLock",
    "http_connection",
    "real_sleep",
    "timed_call",
    "timed_exchange",
    "timed_post",
]

# Locust monkey-patches threading and time: these are the originals, which block one OS thread.
_start_new_thread = get_original("_thread", "start_new_thread")
RealLock: Callable[[], Any] = get_original("_thread", "allocate_lock")
real_sleep: Callable[[float], None] = get_original("time", "sleep")
# Sockets of the operating system's socket class, which block this OS thread alone: gevent's
# would send every call through the hub of the calling thread.
_connect_real = blocking_connector(
    get_original("socket", "socket"), get_original("socket", "getaddrinfo")
)


_PUMP_S = 0.005  # how often finished calls are fired as locust events
_WATCH_S = 0.05  # how often a user's greenlet looks at its thread


@dataclass(frozen=True, slots=True)
class Completed:
    """One finished call, as locust's `request` event takes it."""

    name: str
    start_time: float  # time.time() at the send
    response_time_ms: float
    response_length: int
    exception: BaseException | None
    context: dict[str, Any]
    after: Callable[[], None] | None = None  # runs on the hub right after the event


class Completions:
    """Finished calls from any thread, fired on the hub as `request_event` (one per process and
    event hook: `Completions.of`). A deque's append and popleft are atomic, so threads never
    wait on the hub."""

    _pumps: ClassVar[dict[tuple[int, str], Completions]] = {}

    @classmethod
    def of(cls, environment: Any, request_type: str) -> Completions:
        """The process's running pump into `environment`'s request event (call on the hub)."""
        key = (id(environment.events.request), request_type)
        if key not in cls._pumps:
            cls._pumps[key] = cls(environment.events.request, request_type)
        pump = cls._pumps[key]
        pump.start()
        return pump

    def __init__(self, request_event: Any, request_type: str = "grpc") -> None:
        self._event = request_event
        self._type = request_type
        self._items: collections.deque[Completed] = collections.deque()
        self._pump: gevent.Greenlet | None = None

    def put(self, item: Completed) -> None:
        self._items.append(item)

    def start(self) -> None:
        """Start the pump greenlet (once; from the hub)."""
        if self._pump is None or self._pump.dead:
            self._pump = gevent.spawn(self._pump_forever)

    def pump(self) -> int:
        """Fire every call finished so far; returns how many."""
        fired = 0
        while self._items:
            item = self._items.popleft()
            self._event.fire(
                request_type=self._type,
                name=item.name,
                response_time=item.response_time_ms,
                response_length=item.response_length,
                response=None,
                context=item.context,
                exception=item.exception,
                start_time=item.start_time,
            )
            if item.after is not None:
                item.after()
            fired += 1
        return fired

    def _pump_forever(self) -> None:
        while True:
            gevent.sleep(_PUMP_S)
            self.pump()


def timed_call(
    call: Callable[..., bytes], body: bytes, timeout: float
) -> tuple[float, float, int, BaseException | None]:
    """One blocking call: (time.time() at the send, milliseconds, reply bytes, the RpcError)."""
    start, t0 = time.time(), time.perf_counter()
    try:
        length = len(call(body, timeout=timeout))
        error: BaseException | None = None
    except grpc.RpcError as exc:
        length, error = 0, exc
    return start, (time.perf_counter() - t0) * 1000, length, error


def http_connection(
    address: str, timeout: float, *, keep_headers: bool = False, tls: ClientTls | None = None
) -> HttpConnection:
    """A keep-alive HttpConnection over the operating system's socket, for a user's thread;
    `keep_headers=False` is the lean one (see HttpSender). Over TLS with `tls` (an https://
    address alone: the system's CAs)."""
    return HttpConnection(
        address, timeout, connect=_connect_real, keep_headers=keep_headers, tls=tls
    )


class Posting(Protocol):
    """What `timed_post` times: `post()` sends a request and reads its whole answer."""

    def post(self) -> tuple[int, bytes]: ...


class Bodies:
    """The requests a load cycles through, in their recorded order: a traffic file's, each
    encoded once for its protocol before the load. Every sender given the same Bodies takes the
    next one in turn (a process's users share one per arm, so each arm is sent the file in the
    same order); `take` is itertools.count's next, atomic across threads.

    Over REST each body is framed as its whole HTTP request once per address (`requests`),
    not once per connection: the users of an arm share the bytes.
    """

    def __init__(self, bodies: Sequence[bytes]) -> None:
        if not bodies:
            raise ValueError("no request to cycle through")
        self.bodies = list(bodies)
        self._turns = itertools.count()
        self._framed: dict[tuple[str, str], list[bytes]] = {}
        self._lock = RealLock()

    def take(self) -> int:
        """The next record's number (from 0), cycling."""
        return next(self._turns) % len(self.bodies)

    def requests(self, key: tuple[str, str], frame: Callable[[bytes], bytes]) -> list[bytes]:
        """Every body framed by `frame` (an HTTP request), once per `key` (address, path)."""
        with self._lock:
            if key not in self._framed:
                self._framed[key] = [frame(body) for body in self.bodies]
            return self._framed[key]


class HttpSender:
    """POSTs one pre-encoded request again and again on one lean keep-alive HttpConnection
    (graphserve.core.httpclient, no headers kept) over the operating system's socket: the
    request's bytes are built once, the answer is parsed by httptools. The standard library's
    http.client spent 90-190 µs of CPU per request here, most of it building headers and
    parsing the answer's with the email package; this, as wrk does, spends about 12.

    Reconnects after the server closes the connection; a failed exchange closes it and raises
    OSError (graphserve.core.httpclient draws the tree).
    """

    post: Callable[[], tuple[int, bytes]]
    """Send the request, read the whole answer: (status, body)."""
    record: int = -1
    """With Bodies: the record the last `post` sent."""

    def __init__(
        self,
        address: str,
        path: str,
        body: bytes | Bodies,
        headers: Mapping[str, str],
        timeout: float,
        tls: ClientTls | None = None,
    ) -> None:
        connection = http_connection(address, timeout, tls=tls)
        self._connection = connection
        if isinstance(body, Bodies):
            requests = body.requests(
                (address, path), lambda b: connection.encode("POST", path, b, headers)
            )
            take, send = body.take, connection.send

            def post() -> tuple[int, bytes]:
                self.record = record = take()
                return send(requests[record])

            self.post = post
            return
        # the connection's own send: a Python call less on every request than a method here
        self.post = partial(connection.send, connection.encode("POST", path, body, headers))

    def close(self) -> None:
        self._connection.close()


def timed_post(sender: Posting) -> tuple[float, float, int, BaseException | None]:
    """One POST: (time.time() at the send, milliseconds, reply bytes, the failure). Anything but
    a 200 fails with `HTTP <status>: <start of the body>`, as locust's catch_response reports."""
    start, ms, body, error = timed_exchange(sender)
    return start, ms, len(body), error


def timed_exchange(sender: Posting) -> tuple[float, float, bytes, BaseException | None]:
    """`timed_post`, with the answer's body kept: (start, milliseconds, body, the failure)."""
    start, t0 = time.time(), time.perf_counter()
    try:
        status, body = sender.post()
    except OSError as exc:
        return start, (time.perf_counter() - t0) * 1000, b"", exc
    ms = (time.perf_counter() - t0) * 1000
    if status != 200:
        failure = http_failure(status, body.decode(errors="replace"))
        return start, ms, body, CatchResponseError(failure)
    return start, ms, body, None


class LoopThread:
    """Runs `step()` again and again on a real OS thread until `stop()` or until `step` returns
    False. `watch()` (from a user's greenlet) waits for the end without blocking the hub and
    raises what the thread raised; a greenlet killed while watching stops the thread, which
    finishes the call it is in first."""

    def __init__(self, step: Callable[[], bool]) -> None:
        self._step = step
        self._stopping = False
        self._started = False
        self._finished = False
        self._error: BaseException | None = None

    def start(self) -> LoopThread:
        self._started = True
        _start_new_thread(self._run, ())
        return self

    def stop(self) -> None:
        self._stopping = True

    @property
    def finished(self) -> bool:
        return self._finished

    def watch(self) -> None:
        try:
            while not self._finished:
                gevent.sleep(_WATCH_S)
        finally:
            self.stop()
        if self._error is not None:
            raise self._error

    def join(self, timeout_s: float) -> bool:
        """Stop the thread and wait (from a greenlet) until it has ended; False on the timeout.
        A thread never started has ended."""
        self.stop()
        deadline = time.monotonic() + timeout_s
        while self._started and not self._finished and time.monotonic() < deadline:
            gevent.sleep(0.005)
        return self._finished or not self._started

    def _run(self) -> None:
        try:
            while not self._stopping and self._step():
                pass
        except BaseException as exc:  # handed to the greenlet, which raises it where locust sees it
            self._error = exc
        finally:
            self._finished = True
