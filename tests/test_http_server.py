"""The REST transport at the socket level (serving/http_server.py under serving/rest_api.py): a
real RestServer on 127.0.0.1 in front of TF Serving's half_plus_two, driven over raw sockets.

Chunked bodies and `Expect: 100-continue` are answered as TF Serving (an ordinary HTTP/1.1
server) answers them; idle connections cost no thread and are closed after the idle timeout; a
header sent a byte at a time and a body that stops coming are cut (408); a connection past the
cap is answered 503 and closed while those within it are served. Timeouts are set short here so
each test takes a few seconds at most.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from graphserve.serving.dataplane import DataPlane
from graphserve.serving.http_server import HttpServer, Request, Response, TransportLimits
from graphserve.serving.registry import ModelRegistry
from graphserve.serving.rest_api import RestOptions, RestServer

PATH = "/v1/models/hp2:predict"
BODY = b'{"instances": [1.0, 2.0, 5.0]}'
ANSWER = {"predictions": [2.5, 3.0, 4.5]}  # y = 0.5 x + 2


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> DataPlane:
    from tests.savedmodels import write_half_plus_two

    base = tmp_path_factory.mktemp("http") / "hp2"
    write_half_plus_two(base / "1")
    registry = ModelRegistry()
    registry.load_graph("hp2", base)
    return DataPlane(registry)


@contextmanager
def serving(plane: DataPlane, **options: Any) -> Iterator[RestServer]:
    server = RestServer("127.0.0.1", 0, plane, RestOptions(**options)).start()
    try:
        yield server
    finally:
        server.stop()


def connect(server: RestServer, timeout: float = 5.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=timeout)


def head(length: int | None = None, extra: str = "") -> bytes:
    framing = f"Content-Length: {length}\r\n" if length is not None else ""
    return (
        f"POST {PATH} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
        f"{framing}{extra}\r\n"
    ).encode()


def chunked(body: bytes, size: int) -> bytes:
    parts = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def response(sock: socket.socket) -> tuple[int, dict[str, str], Any]:
    """The next response on `sock`: status, headers (lower-case names), parsed JSON body."""
    reply = http.client.HTTPResponse(sock)
    reply.begin()
    headers = {k.lower(): v for k, v in reply.getheaders()}
    return reply.status, headers, json.loads(reply.read())


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes `sock` (after any answer it sends) within `seconds`."""
    sock.settimeout(seconds)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except OSError:  # reset: closed too
        pass
    return True


def test_a_chunked_body_is_served(plane: DataPlane) -> None:
    """TF Serving (libevent) reads chunked request bodies; curl sends one for a streamed file."""
    with serving(plane) as server, connect(server) as sock:
        sock.sendall(head(extra="Transfer-Encoding: chunked\r\n") + chunked(BODY, 7))
        status, _, answer = response(sock)
        assert (status, answer) == (200, ANSWER)
        # the connection stays usable: the chunked framing was read to its end
        sock.sendall(head(len(BODY)) + BODY)
        assert response(sock)[::2] == (200, ANSWER)


def test_a_chunked_body_past_the_limit_is_refused(plane: DataPlane) -> None:
    with serving(plane, max_body_bytes=64) as server, connect(server) as sock:
        sock.sendall(head(extra="Transfer-Encoding: chunked\r\n") + chunked(b" " * 200 + BODY, 50))
        status, headers, answer = response(sock)
        assert status == 413 and headers["connection"] == "close"
        assert answer["error"] == "chunked request body exceeds the limit of 64 bytes " + (
            "(--max-message-bytes)"
        )


def test_expect_100_continue_gets_continue_then_the_answer(plane: DataPlane) -> None:
    """As TF Serving: `100 Continue` before the body is sent, then the answer to it."""
    with serving(plane) as server, connect(server, timeout=2.0) as sock:
        sock.sendall(head(len(BODY), "Expect: 100-continue\r\n"))
        interim = b""
        while b"\r\n\r\n" not in interim:
            interim += sock.recv(1024)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(BODY)
        assert response(sock)[::2] == (200, ANSWER)


def test_expect_100_continue_past_the_limit_gets_413_without_continue(plane: DataPlane) -> None:
    """A body that would be refused is not asked for: the final answer comes instead of 100."""
    with serving(plane, max_body_bytes=16) as server, connect(server) as sock:
        sock.sendall(head(len(BODY), "Expect: 100-continue\r\n"))
        status, headers, answer = response(sock)
        assert status == 413 and headers["connection"] == "close"
        assert "exceeds the limit of 16 bytes" in answer["error"]
        assert closed_within(sock, 3.0)  # the client never sends the body; the server closes


def test_idle_connections_cost_no_thread_and_are_closed_after_the_idle_timeout(
    plane: DataPlane,
) -> None:
    """300 idle keep-alive connections and a client sending its header a byte a second: a
    normal request is still answered within a second; the idle connections are closed after
    the idle timeout, the slow header after the header timeout."""
    idle_s, header_s = 1.5, 2.5
    with serving(plane, idle_timeout=idle_s, header_timeout=header_s) as server:
        threads = threading.active_count()
        opened = time.monotonic()
        idle = [connect(server) for _ in range(300)]
        used = idle[:20]  # some after a request, as a load generator leaves them
        for sock in used:
            sock.sendall(head(len(BODY)) + BODY)
            assert response(sock)[0] == 200
        slow = connect(server)
        slow_head = head(len(BODY))
        stop = threading.Event()

        def trickle() -> None:  # one byte a second, until the server cuts it
            for byte in slow_head:
                if stop.wait(1.0):
                    return
                try:
                    slow.send(bytes([byte]))
                except OSError:
                    return

        trickler = threading.Thread(target=trickle)
        trickler.start()
        try:
            started = time.monotonic()
            with connect(server) as sock:
                sock.sendall(head(len(BODY)) + BODY)
                assert response(sock)[::2] == (200, ANSWER)
            assert time.monotonic() - started < 1.0
            assert threading.active_count() <= threads + 1  # + the trickler: none per connection
            # every idle connection closed by the server once the idle timeout has passed
            left = opened + idle_s + 1.0 - time.monotonic()
            assert all(closed_within(sock, max(left, 0.05)) for sock in idle)
            assert time.monotonic() - opened >= idle_s - 0.1  # ... and not before
            # the slow header is cut after the header timeout, with a 408
            status, _, answer = response(slow)
            assert status == 408
            assert answer["error"] == f"request headers not received within {header_s:g} s"
        finally:
            stop.set()
            trickler.join()
            for sock in [*idle, slow]:
                sock.close()


def test_a_body_that_stops_coming_is_cut_after_the_body_timeout(plane: DataPlane) -> None:
    with serving(plane, body_timeout=0.5) as server, connect(server) as sock:
        sock.sendall(head(len(BODY)) + BODY[:10])
        started = time.monotonic()
        status, headers, answer = response(sock)
        assert 0.4 <= time.monotonic() - started < 2.0
        assert status == 408 and headers["connection"] == "close"
        assert answer["error"] == "request body not received within 0.5 s"
        assert closed_within(sock, 1.0)


def test_a_connection_past_the_cap_is_answered_503_and_the_others_are_served(
    plane: DataPlane,
) -> None:
    """With max_connections=2, a third connection's request gets 503 and the connection is
    closed; the two within the cap keep being served, and a slot freed is taken again."""
    with serving(plane, max_connections=2) as server:
        first, second = connect(server), connect(server)
        for sock in (first, second):
            sock.sendall(head(len(BODY)) + BODY)
            assert response(sock)[::2] == (200, ANSWER)
        with connect(server) as third:
            third.sendall(head(len(BODY)) + BODY)
            status, headers, answer = response(third)
            assert status == 503 and headers["connection"] == "close"
            assert answer["error"] == (
                "the server has 2 connections open, its limit (--rest-max-connections): "
                "retry, or reuse a connection"
            )
            assert closed_within(third, 2.0)
        first.sendall(head(len(BODY)) + BODY)
        assert response(first)[::2] == (200, ANSWER)
        second.close()
        time.sleep(0.2)  # the server sees the close
        with connect(server) as fourth:
            fourth.sendall(head(len(BODY)) + BODY)
            assert response(fourth)[::2] == (200, ANSWER)
        first.close()


def test_malformed_framing_is_answered_400_as_json(plane: DataPlane) -> None:
    with serving(plane) as server, connect(server) as sock:
        sock.sendall(head(extra="Content-Length: 5\r\nTransfer-Encoding: chunked\r\n") + b"{}")
        status, headers, answer = response(sock)
        assert status == 400 and headers["connection"] == "close"
        assert answer["error"].startswith("Malformed HTTP request")


def test_a_request_head_past_64_kib_is_refused(plane: DataPlane) -> None:
    with serving(plane) as server, connect(server) as sock:
        sock.sendall(head(len(BODY), "X-Filler: " + "a" * 70_000 + "\r\n") + BODY)
        status, _, answer = response(sock)
        assert status == 431
        assert answer["error"] == "request line and headers exceed 65536 bytes"


def test_stop_closes_the_listener_and_every_connection(plane: DataPlane) -> None:
    server = RestServer("127.0.0.1", 0, plane, RestOptions()).start()
    port = server.port
    idle = connect(server)
    server.stop()
    assert closed_within(idle, 2.0)
    idle.close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_options_default_to_bounded_timeouts_and_a_cap() -> None:
    options = RestOptions()
    assert options.idle_timeout and options.header_timeout and options.body_timeout
    assert options.max_connections and options.workers >= 1


def test_the_port_is_bound_before_start(plane: DataPlane) -> None:
    server = RestServer("127.0.0.1", 0, plane, RestOptions())
    try:
        assert server.port > 0
        with pytest.raises(OSError):  # taken: a second server cannot bind it
            RestServer("127.0.0.1", server.port, plane, RestOptions())
    finally:
        server.stop()


# -- the threads that run requests ------------------------------------------------------------


@contextmanager
def http_server(handler: Any, workers: int, started: int) -> Iterator[HttpServer]:
    limits = TransportLimits(1 << 20, 30.0, 10.0, 60.0, None)
    server = HttpServer("127.0.0.1", 0, handler, limits, workers=workers, started=started).start()
    try:
        yield server
    finally:
        server.stop()


def _thread_name(request: Request) -> Response:
    delay = float(request.body or b"0")
    time.sleep(delay)
    return Response(200, json.dumps(threading.current_thread().name).encode())


def _post(port: int, body: bytes) -> Any:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", "/", body)
        reply = conn.getresponse()
        assert reply.status == 200
        return json.loads(reply.read())
    finally:
        conn.close()


def _at_once(port: int, clients: int, body: bytes) -> list[Any]:
    """What `clients` requests sent at once answered."""
    results: list[Any] = []
    threads = [
        threading.Thread(target=lambda: results.append(_post(port, body))) for _ in range(clients)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    return results


def test_one_request_at_a_time_runs_on_the_last_thread_used_and_starts_no_other() -> None:
    with http_server(_thread_name, workers=8, started=3) as server:
        names = {_post(server.port, b"0") for _ in range(30)}
        assert len(names) == 1  # the warmest thread, every time (FIFO would take all three)
        assert len(server._app.pool.threads) == 3


def test_threads_start_as_load_needs_them_up_to_workers() -> None:
    """Six requests of 0.3 s at once on a pool of at most four, two started: four threads run
    them, none waits for one that will never come, and no fifth is started."""
    with http_server(_thread_name, workers=4, started=2) as server:
        results = _at_once(server.port, 6, b"0.3")
        assert len(results) == 6
        assert len(set(results)) == 4
        assert len(server._app.pool.threads) == 4


def test_a_thread_started_later_is_primed_before_its_first_request() -> None:
    primed: list[str] = []
    with http_server(_thread_name, workers=3, started=1) as server:
        server.prime(lambda: primed.append(threading.current_thread().name))
        assert primed == ["rest-0"]
        results = _at_once(server.port, 3, b"0.3")
        assert sorted(results) == ["rest-0", "rest-1", "rest-2"]
        assert sorted(primed) == ["rest-0", "rest-1", "rest-2"]
