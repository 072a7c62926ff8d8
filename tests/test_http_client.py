"""The one HTTP/1.1 client (graphserve/core/httpclient.py) against real servers on 127.0.0.1:
a small threaded server written here that misbehaves on purpose (answers cut in the head, the
body or a chunk; no answer at all; a kept-alive connection closed between requests; not HTTP),
graphserve's own REST transport (serving/http_server.py), and the load test's HttpSender in a
process that gevent patched, as locust's are.

Every failure must come back as a clear OSError within the timeout: none may hang or spin.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest

from graphserve.core.httpclient import (
    HttpConnection,
    IncompleteResponse,
    MalformedResponse,
    blocking_connector,
    connect_tcp,
    read_response,
)
from graphserve.serving.http_server import HttpServer, Request, Response, TransportLimits

pytestmark = pytest.mark.timeout(60)

# What the server does after reading a request: bytes are written, a float sleeps, "close"
# closes the connection, "hang" keeps it open and silent until the server stops.
Action = bytes | float | str


@dataclass(frozen=True)
class Seen:
    """A request as the server read it, and which connection (0, 1, ...) it came on."""

    connection: int
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class ScriptedServer:
    """A threaded HTTP/1.1 server whose answers are scripted: `script(n, request)` gives the
    actions for the n-th request it reads (counting over all connections)."""

    script: Callable[[int, Seen], list[Action]]
    port: int = 0
    connections: int = 0
    requests: list[Seen] = field(default_factory=list)
    _stopping: threading.Event = field(default_factory=threading.Event)

    def start(self) -> ScriptedServer:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._stopping.set()
        self._listener.close()

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            number, self.connections = self.connections, self.connections + 1
            threading.Thread(target=self._serve, args=(sock, number), daemon=True).start()

    def _serve(self, sock: socket.socket, number: int) -> None:
        buffer = bytearray()
        with sock:
            while (seen := _read_request(sock, buffer, number)) is not None:
                self.requests.append(seen)
                for action in self.script(len(self.requests) - 1, seen):
                    if action == "close":
                        return
                    if action == "hang":
                        self._stopping.wait(30)
                        return
                    if isinstance(action, float):
                        time.sleep(action)
                    else:
                        assert isinstance(action, bytes)
                        sock.sendall(action)


def _read_request(sock: socket.socket, buffer: bytearray, connection: int) -> Seen | None:
    """One request (Content-Length bodies only: the client sends no other); None at the close."""
    while b"\r\n\r\n" not in buffer:
        data = sock.recv(65536)
        if not data:
            return None
        buffer += data
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        data = sock.recv(65536)
        if not data:
            return None
        rest += data
    buffer[:] = rest[length:]
    return Seen(connection, method, path, headers, rest[:length])


@contextmanager
def scripted(script: Callable[[int, Seen], list[Action]]) -> Iterator[ScriptedServer]:
    server = ScriptedServer(script).start()
    try:
        yield server
    finally:
        server.stop()


def answer(body: bytes, status: str = "200 OK", *headers: str) -> bytes:
    extra = "".join(f"{header}\r\n" for header in headers)
    return f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


def chunked(body: bytes, size: int, *headers: str) -> bytes:
    extra = "".join(f"{header}\r\n" for header in headers)
    chunks = [body[i : i + size] for i in range(0, len(body), size)]
    return (
        f"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n{extra}\r\n".encode()
        + b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for chunk in chunks)
        + b"0\r\n\r\n"
    )


def echo(n: int, seen: Seen) -> list[Action]:
    return [answer(f"{n} {seen.method} {seen.path} {seen.body.decode()}".encode())]


@contextmanager
def within(seconds: float) -> Iterator[None]:
    """The block must end (return or raise) within `seconds`: a failure must not hang."""
    started = time.monotonic()
    yield
    assert time.monotonic() - started < seconds


CONNECTORS = {"connect_tcp": connect_tcp, "blocking": blocking_connector()}


# ---------------------------------------------------------------------------------------------
# Keep-alive, framing, bodies


@pytest.mark.parametrize("connector", CONNECTORS)
def test_one_connection_carries_every_request(connector: str) -> None:
    with scripted(echo) as server:
        connection = HttpConnection(server.address, 5.0, connect=CONNECTORS[connector])
        for n in range(20):
            method, body = ("POST", f"body {n}".encode()) if n % 2 else ("GET", None)
            reply = connection.request(method, f"/r/{n}", body, {"X-Test": "yes"})
            assert reply.status == 200
            assert reply.body == f"{n} {method} /r/{n} {(body or b'').decode()}".encode()
            assert reply.headers == {"content-length": str(len(reply.body))}
        connection.close()
    assert server.connections == 1 and len(server.requests) == 20
    first, second = server.requests[:2]
    assert first.headers == {"host": server.address, "x-test": "yes"}  # a GET: no length
    assert second.headers["content-length"] == "6" and second.body == b"body 1"


def test_the_request_is_framed_as_http_client_framed_it() -> None:
    with scripted(echo) as server:
        connection = HttpConnection(f"http://{server.address}/ignored", 5.0)
        connection.request("POST", "/empty", None, {})
        connection.request("PUT", "/own-host", b"abc", {"Host": "elsewhere", "Content-Length": "3"})
        connection.close()
    empty, own = server.requests
    assert empty.headers == {"host": server.address, "content-length": "0"}
    assert own.headers == {"host": "elsewhere", "content-length": "3"} and own.body == b"abc"


@pytest.mark.parametrize("size", [1, 7, 4096])
def test_a_chunked_body_is_joined(size: int) -> None:
    body = bytes(range(256)) * 40
    with scripted(lambda n, seen: [chunked(body, size, f"X-N: {n}")]) as server:
        connection = HttpConnection(server.address, 5.0)
        for n in range(3):
            reply = connection.request("GET", "/", None, {})
            assert (reply.status, reply.body, reply.headers["x-n"]) == (200, body, str(n))
        connection.close()
    assert server.connections == 1


def test_an_answer_in_pieces_is_read_whole() -> None:
    whole = chunked(b"0123456789" * 30, 16)
    pieces: list[Action] = []
    for i in range(0, len(whole), 13):
        pieces += [whole[i : i + 13], 0.001]
    with scripted(lambda n, seen: pieces) as server:
        connection = HttpConnection(server.address, 5.0)
        assert connection.request("GET", "/", None, {}).body == b"0123456789" * 30
        connection.close()


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_large_bodies(framing: str) -> None:
    body = bytes(range(251)) * (48 * 1024 * 1024 // 251)  # 48 MB, not a multiple of any chunk
    reply_bytes = answer(body) if framing == "content-length" else chunked(body, 1 << 20)
    with scripted(lambda n, seen: [reply_bytes]) as server:
        connection = HttpConnection(server.address, 10.0)
        for _ in range(2):
            reply = connection.request("POST", "/", body[:1_000_000], {})
            assert reply.status == 200 and len(reply.body) == len(body) and reply.body == body
        connection.close()
    assert server.connections == 1 and len(server.requests[0].body) == 1_000_000


def test_answers_without_a_body() -> None:
    """204, and 304 and a HEAD's answer whose Content-Length describes a body not sent: none is
    waited for, and the connection carries on."""
    answers = [
        b"HTTP/1.1 204 No Content\r\n\r\n",
        b"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\nETag: x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n",  # to the HEAD
        answer(b"after"),
    ]
    with scripted(lambda n, seen: [answers[n]]) as server:
        connection = HttpConnection(server.address, 2.0)
        with within(1.5):
            assert connection.request("DELETE", "/", None, {}).status == 204
            not_modified = connection.request("GET", "/", None, {})
            assert (not_modified.status, not_modified.body) == (304, b"")
            head = connection.request("HEAD", "/", None, {})
            assert (head.status, head.body, head.headers["content-length"]) == (200, b"", "1000")
            assert connection.request("GET", "/", None, {}).body == b"after"
        connection.close()
    assert server.connections == 1


def test_interim_answers_are_skipped_and_a_reader_keeps_what_follows() -> None:
    both = b"HTTP/1.1 100 Continue\r\n\r\n" + answer(b"done")
    with scripted(lambda n, seen: [both]) as server:
        connection = HttpConnection(server.address, 5.0)
        reply = connection.request("POST", "/", b"{}", {})
        assert (reply.status, reply.body) == (200, b"done")
        connection.close()
        # The probes' way: one reader over a raw socket sees the 100, then the answer that
        # came in the same segment.
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(connection.encode("POST", "/", b"{}", {}))
            reader = HttpConnection.over(sock)
            assert read_response(sock, reader).status == 100
            assert read_response(sock, reader).body == b"done"


def test_a_socket_of_the_callers_stays_open_after_a_timeout() -> None:
    """The probes' case: no 100 Continue within the socket's timeout, then the body is sent on
    the same socket and its answer read."""

    def script(n: int, seen: Seen) -> list[Action]:
        return [answer(seen.body)]

    with (
        scripted(script) as server,
        socket.create_connection(("127.0.0.1", server.port), timeout=0.3) as sock,
    ):
        sock.sendall(b"POST / HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
        with within(1.5), pytest.raises(TimeoutError, match=r"did not answer within 0\.3 s"):
            read_response(sock)
        sock.sendall(b"body")
        assert read_response(sock).body == b"body"


def test_the_lean_connection_reads_no_head() -> None:
    connection = HttpConnection("127.0.0.1:1", keep_headers=False)
    with pytest.raises(ValueError, match="keep_headers=True"):
        connection.request("HEAD", "/", None, {})


def test_a_body_that_runs_to_the_close() -> None:
    """No Content-Length, not chunked: the body ends where the server closes, the connection
    is not reused. Without headers kept, such a body cannot be told from a cut one."""
    to_close: list[Action] = [b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it", "close"]
    with scripted(lambda n, seen: to_close) as server:
        connection = HttpConnection(server.address, 5.0)
        for _ in range(2):
            assert connection.request("GET", "/", None, {}).body == b"all of it"
        lean = HttpConnection(server.address, 5.0, keep_headers=False)
        with pytest.raises(IncompleteResponse, match=r"before the answer's end \(9 body bytes"):
            lean.send(lean.encode("GET", "/", None, {}))
    assert server.connections == 3


def test_connection_close_is_honoured() -> None:
    with scripted(lambda n, seen: [answer(b"bye", "200 OK", "Connection: close")]) as server:
        connection = HttpConnection(server.address, 5.0)
        for _ in range(3):
            assert connection.request("GET", "/", None, {}).body == b"bye"
            assert connection._sock is None  # closed by us, as the answer asked
    assert server.connections == 3


# ---------------------------------------------------------------------------------------------
# Failures: each a clear OSError, in bounded time


CUT = {
    "head": (b"HTTP/1.1 200 OK\r\nContent-Le", "inside the answer's head"),
    "body": (
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 40,
        "after 40 of the 100 body bytes",
    ),
    "chunk": (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n0123456789abcdef\r\n"
        b"100\r\nonly a little",
        "inside the chunked body, after 29 bytes",
    ),
    "between chunks": (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n",
        "inside the chunked body, after 4 bytes",
    ),
}


@pytest.mark.parametrize("where", CUT)
@pytest.mark.parametrize("connector", CONNECTORS)
def test_an_answer_cut_short_raises_and_the_next_request_reconnects(
    where: str, connector: str
) -> None:
    sent, message = CUT[where]

    def script(n: int, seen: Seen) -> list[Action]:
        return [sent, "close"] if n == 0 else [answer(b"fine")]

    with scripted(script) as server:
        connection = HttpConnection(server.address, 30.0, connect=CONNECTORS[connector])
        with within(2.0), pytest.raises(IncompleteResponse, match=message) as caught:
            connection.request("GET", "/", None, {})
        assert caught.value.answered and isinstance(caught.value, ConnectionError)
        assert connection._sock is None
        assert connection.request("GET", "/", None, {}).body == b"fine"
        connection.close()
    assert server.connections == 2


@pytest.mark.parametrize("where", CUT)
def test_the_probes_reader_raises_on_a_cut_answer_without_spinning(where: str) -> None:
    """Raw-byte callers (the fuzzer) read through the same parser: a cut chunk used to spin
    forever."""
    sent, message = CUT[where]
    with (
        scripted(lambda n, seen: [sent, "close"]) as server,
        socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock,
    ):
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        cpu = time.process_time()
        with within(2.0), pytest.raises(IncompleteResponse, match=message):
            read_response(sock)
        assert time.process_time() - cpu < 0.5


@pytest.mark.parametrize("connector", CONNECTORS)
def test_a_server_that_never_answers_times_out(connector: str) -> None:
    with scripted(lambda n, seen: ["hang"]) as server:
        connection = HttpConnection(server.address, 0.5, connect=CONNECTORS[connector])
        started = time.monotonic()
        with pytest.raises(TimeoutError, match=rf"{server.address} did not answer within 0.5 s"):
            connection.request("GET", "/", None, {})
        assert 0.4 < time.monotonic() - started < 2.0
        assert connection._sock is None


@pytest.mark.parametrize("connector", CONNECTORS)
def test_a_server_that_stops_mid_body_times_out(connector: str) -> None:
    stalls: list[Action] = [b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", "hang"]
    with scripted(lambda n, seen: stalls) as server:
        connection = HttpConnection(server.address, 0.5, connect=CONNECTORS[connector])
        with within(2.0), pytest.raises(TimeoutError):
            connection.request("GET", "/", None, {})


def test_a_kept_alive_connection_closed_while_idle_fails_once_then_reconnects() -> None:
    """As http.client did (RemoteDisconnected): the request sent on the connection the server
    closed fails, and is not sent again; the next request opens a new connection."""

    def script(n: int, seen: Seen) -> list[Action]:
        return [answer(b"first")] if n == 0 else ["close"] if n == 1 else echo(n, seen)

    with scripted(script) as server:
        connection = HttpConnection(server.address, 5.0)
        assert connection.request("GET", "/a", None, {}).body == b"first"
        with within(2.0), pytest.raises(IncompleteResponse) as caught:
            connection.request("GET", "/b", None, {})
        assert not caught.value.answered
        assert "before answering on a connection kept alive after 1 answer(s)" in str(caught.value)
        assert connection.request("GET", "/c", None, {}).body == b"2 GET /c "
        connection.close()
    assert [(seen.connection, seen.path) for seen in server.requests] == [
        (0, "/a"),
        (0, "/b"),
        (1, "/c"),
    ]


def test_a_connection_the_server_closed_between_requests_is_replaced() -> None:
    """The server closes right after answering (without saying so): whichever way the next
    send learns it (the close, or a reset), it fails as a ConnectionError and the one after
    succeeds on a new connection."""
    with scripted(lambda n, seen: [*echo(n, seen), "close"]) as server:
        connection = HttpConnection(server.address, 5.0)
        assert connection.request("GET", "/", None, {}).status == 200
        time.sleep(0.2)
        with within(2.0), pytest.raises(ConnectionError):
            connection.request("GET", "/", None, {})
        assert connection.request("GET", "/", None, {}).status == 200
    assert server.connections == 2


def test_not_http_raises_malformed_response() -> None:
    with scripted(lambda n, seen: [b"SSH-2.0-OpenSSH_9.6\r\n\r\n"]) as server:
        connection = HttpConnection(server.address, 5.0)
        with within(2.0), pytest.raises(MalformedResponse, match=r"not HTTP/1\.x"):
            connection.request("GET", "/", None, {})
        assert isinstance(MalformedResponse(), OSError) and connection._sock is None


def test_nothing_listening_is_connection_refused() -> None:
    with socket.create_server(("127.0.0.1", 0)) as placeholder:
        port = placeholder.getsockname()[1]
    for connector in CONNECTORS.values():
        with pytest.raises(ConnectionRefusedError):
            HttpConnection(f"127.0.0.1:{port}", 2.0, connect=connector).request(
                "GET", "/", None, {}
            )


@pytest.mark.parametrize("address", ["", "ftp://host:1", "http://:80"])
def test_an_address_that_is_not_http_is_refused(address: str) -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        HttpConnection(address)


# ---------------------------------------------------------------------------------------------
# graphserve's REST transport


def _handler(request: Request) -> Response:
    if request.path == "/big":
        return Response(200, b"z" * (8 * 1024 * 1024), "application/octet-stream")
    body = json.dumps({"path": request.path, "length": len(request.body)}).encode()
    return Response(404 if request.path == "/missing" else 200, body)


@contextmanager
def rest_transport(idle_timeout: float | None = None) -> Iterator[HttpServer]:
    limits = TransportLimits(
        max_body_bytes=64 * 1024 * 1024,
        idle_timeout=idle_timeout,
        header_timeout=None,
        body_timeout=None,
        max_connections=None,
    )
    server = HttpServer("127.0.0.1", 0, _handler, limits, workers=2, started=1).start()
    try:
        yield server
    finally:
        server.stop()


def test_graphserve_rest_transport_keeps_one_connection() -> None:
    with rest_transport() as server:
        connection = HttpConnection(f"127.0.0.1:{server.port}", 10.0)
        request = connection.encode("POST", "/v1/models/m:predict", b"{}" * 100, {})
        connection.send(request)
        kept = sock_of(connection).getsockname()
        for _ in range(50):
            status, body = connection.send(request)
            assert (status, json.loads(body)) == (
                200,
                {"path": "/v1/models/m:predict", "length": 200},
            )
        missing = connection.request("GET", "/missing", None, {})
        assert missing.status == 404 and missing.headers["content-type"] == "application/json"
        big = connection.request("GET", "/big", None, {})
        assert big.body == b"z" * (8 * 1024 * 1024)
        assert sock_of(connection).getsockname() == kept  # one connection throughout
        connection.close()


def test_graphserve_rest_transport_idle_timeout_then_reconnect() -> None:
    with rest_transport(idle_timeout=0.3) as server:
        connection = HttpConnection(f"127.0.0.1:{server.port}", 5.0)
        assert connection.request("GET", "/a", None, {}).status == 200
        time.sleep(1.0)  # the server closes the idle connection
        with within(2.0), pytest.raises(ConnectionError):
            connection.request("GET", "/b", None, {})
        assert connection.request("GET", "/c", None, {}).status == 200
        connection.close()


def sock_of(connection: HttpConnection) -> socket.socket:
    assert connection._sock is not None
    return connection._sock


# ---------------------------------------------------------------------------------------------
# The load test's sender, in a process gevent patched (as locust's are)

_SENDER = """
import json, sys
from graphserve.loadtest.generator.senders import HttpSender, timed_post  # patches, as locust
import socket
assert "gevent" in socket.socket.__module__
address = sys.argv[1]
sender = HttpSender(address, "/predict", b'{"instances": [1]}', {"Content-Type": "x/y"}, 2.0)
out = {"posts": [list(map(lambda v: v.decode() if isinstance(v, bytes) else v, sender.post()))
                 for _ in range(5)]}
for _ in range(3):  # a 500, an answer cut short, an answer that never comes
    start, ms, length, error = timed_post(sender)
    out.setdefault("failures", []).append([type(error).__name__, str(error), ms])
sender.close()
print(json.dumps(out))
"""


def test_the_load_test_sender_uses_the_one_client_on_unpatched_sockets() -> None:
    def script(n: int, seen: Seen) -> list[Action]:
        if n < 5:
            return [answer(b"ok %d" % n)]
        if n == 5:
            return [answer(b'{"error": "bad"}', "500 Internal Server Error")]
        if n == 6:
            return [b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc", "close"]
        return ["hang"]

    with scripted(script) as server:
        run = subprocess.run(
            [sys.executable, "-c", _SENDER, server.address],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 0, run.stderr
        out = json.loads(run.stdout)
    assert out["posts"] == [[200, f"ok {n}"] for n in range(5)]
    (error, text, _), (cut, cut_text, _), (late, late_text, late_ms) = out["failures"]
    assert (error, text) == ("CatchResponseError", 'HTTP 500: {"error": "bad"}')
    assert (cut, cut_text) == (
        "IncompleteResponse",
        "the server closed the connection before the answer's end (3 body bytes came)",
    )
    assert late == "TimeoutError" and "did not answer within 2 s" in late_text
    assert 1900 < late_ms < 4000
    # one connection for the first six requests, a new one after the cut answer
    assert [seen.connection for seen in server.requests] == [0] * 7 + [1]
    assert server.requests[0].headers == {
        "host": server.address,
        "content-type": "x/y",
        "content-length": "18",
    }
