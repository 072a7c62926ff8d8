"""The one HTTP/1.1 client: RestClient's transport, the load test's senders (OS threads inside
locust's processes), the benchmarks' REST callers, the peers harness, and the raw-request
fuzzer, which writes raw bytes but reads every answer here.

    HttpConnection   one connection kept alive, opened on first use and after a close:
                     `request(method, path, body, headers)` answers an HttpReply; `encode` once
                     and `send` again and again is the lean path of load generators;
                     `HttpConnection.over(sock)` reads answers off a socket the caller writes to
    read_response    one answer off such a socket
    connect_tcp      the default connector; `blocking_connector(...)` makes one whose sockets
                     block in the kernel alone (the senders pass gevent's unpatched originals)

Answers are parsed by httptools (llhttp, which our REST server runs too). A body comes by
Content-Length, chunked, or up to the server's close; a HEAD's answer has no body; `request`
skips 1xx answers before the real one, as http.client skipped 100 Continue. A request's bytes
are built by `encode` (not by the email package, as in http.client): about 12 µs of CPU per
request on the lean path (`keep_headers=False`) against a local server, where http.client
spent 90-190.

Every failure is an OSError, and a failed exchange closes the connection (the next request opens
a new one):

    OSError
     ├── TimeoutError            connecting, or one send or receive, took longer than the timeout
     ├── ConnectionError         refused, reset, broken pipe (the socket's own errors)
     │    ├── IncompleteResponse the server closed the connection before its answer was whole
     │    └── TlsError           the TLS handshake failed, or TLS is on one side only: why,
     │                           and what to give (graphserve.core.tls.explain)
     └── MalformedResponse       what came back is not an HTTP/1.x answer

A kept-alive connection that the server closed while it was idle fails the next request sent on
it (IncompleteResponse, `answered` False): the client never sends a request twice on its own,
exactly as http.client behaved before.
"""

from __future__ import annotations

import collections
import json
import socket
import ssl
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlsplit

import httptools

from graphserve.core.tls import ClientTls, diagnose, explain

__all__ = [
    "Connector",
    "HttpConnection",
    "HttpReply",
    "IncompleteResponse",
    "MalformedResponse",
    "RawHeaders",
    "TlsError",
    "blocking_connector",
    "connect_tcp",
    "decode_headers",
    "read_response",
]

RawHeaders = list[tuple[bytes, bytes]]
# (host, port, timeout) -> a connected socket
Connector = Callable[[str, int, float], socket.socket]

_RECV_BYTES = 65536
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})  # Content-Length: 0 when sent without a body


class IncompleteResponse(ConnectionError):
    """The server closed the connection before its answer was whole. `answered` is False when
    not one byte of the answer came (on a kept-alive connection: the server closed it idle)."""

    def __init__(self, message: str, *, answered: bool = True) -> None:
        super().__init__(message)
        self.answered = answered


class MalformedResponse(OSError):
    """What the server sent is not an HTTP/1.x answer (httptools' error is the cause)."""


class TlsError(ConnectionError):
    """The TLS handshake failed, or one side speaks TLS and the other does not: the message
    says which, and what to give."""


@dataclass(frozen=True)
class HttpReply:
    """One HTTP answer: status, body, and headers by lower-case name."""

    status: int
    body: bytes
    headers: Mapping[str, str]

    def json(self) -> Any:
        """The body parsed as JSON (NaN and Infinity included, as TF Serving writes them);
        ValueError when it is not JSON."""
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode(errors="replace")


def decode_headers(raw: RawHeaders) -> dict[str, str]:
    """Headers by lower-case name (Latin-1, as HTTP/1.1 sends them); a repeated one keeps its
    last value."""
    return {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in raw}


# ---------------------------------------------------------------------------------------------
# Connectors


def connect_tcp(host: str, port: int, timeout: float) -> socket.socket:
    """A TCP connection with Nagle off, its timeouts kept by Python's socket: in a process that
    gevent patched, the socket is gevent's and waits on the hub."""
    sock = socket.create_connection((host, port), timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def blocking_connector(
    socket_class: Callable[..., socket.socket] = socket.socket,
    getaddrinfo: Callable[..., Any] = socket.getaddrinfo,
) -> Connector:
    """A connector whose sockets block in the kernel, with the timeout set as SO_RCVTIMEO and
    SO_SNDTIMEO: Python's own timeout polls before every send and receive, which doubles the
    system calls per request. Only for OS threads on real sockets: inside locust's processes,
    pass gevent's originals (`get_original("socket", "socket")` and its getaddrinfo), or the
    socket would wait forever on a hub that never runs."""

    def connect(host: str, port: int, timeout: float) -> socket.socket:
        error: OSError | None = None
        for family, kind, proto, _, address in getaddrinfo(host, port, 0, socket.SOCK_STREAM):
            sock = socket_class(family, kind, proto)
            try:
                sock.settimeout(timeout)
                sock.connect(address)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.settimeout(None)
                limit = struct.pack("ll", int(timeout), int(timeout % 1 * 1e6))
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, limit)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, limit)
                return sock
            except OSError as exc:
                error = exc
                sock.close()
        raise error or OSError(f"no address for {host}:{port}")

    return connect


class _BioTls:
    """TLS over a socket that blocks in the kernel (`blocking_connector`'s): the context's
    record layer in ssl's memory BIOs, the socket's own blocking send and receive below, and
    `sendall`, `recv` and `close` as HttpConnection asks of a socket. Python's SSLSocket cannot
    take such a socket: OpenSSL retries SO_RCVTIMEO's EAGAIN forever, so a server that stops
    answering is never timed out; and inside locust's processes the patched `ssl` module would
    wrap it in gevent's SSLSocket, which waits on a hub. The socket's errors pass through as
    they are (SO_RCVTIMEO's BlockingIOError: the connection's timeout); TLS's are ssl.SSLError,
    but for a close without close_notify, which reads as the end of the stream."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, server_hostname: str) -> None:
        self._sock = sock
        self._incoming, self._outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = context.wrap_bio(
            self._incoming, self._outgoing, server_hostname=server_hostname
        )
        self._run(self._tls.do_handshake)

    def _run(self, operation: Callable[..., Any], *args: Any) -> Any:
        """`operation` on the TLS object, fed from the socket until it has what it needs; what
        it wrote goes out before it returns."""
        incoming, outgoing, sock = self._incoming, self._outgoing, self._sock
        while True:
            try:
                result = operation(*args)
            except ssl.SSLWantReadError:
                if outgoing.pending:
                    sock.sendall(outgoing.read())
                data = sock.recv(_RECV_BYTES)
                if data:
                    incoming.write(data)
                else:
                    incoming.write_eof()
                continue
            if outgoing.pending:
                sock.sendall(outgoing.read())
            return result

    def sendall(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[self._run(self._tls.write, view) :]

    def recv(self, size: int) -> bytes:
        try:
            data: bytes = self._run(self._tls.read, size)
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
            return b""
        return data

    def close(self) -> None:
        self._sock.close()


# ---------------------------------------------------------------------------------------------
# Parsing answers

# status, body, headers, whether the connection stays open
_Answer = tuple[int, bytes, RawHeaders, bool]


class _Answers:
    """httptools' parser over one connection and the answers it has parsed, in order: bytes past
    an answer (the answer after a 100 Continue, arrived with it) make the next one. The
    callbacks are httptools'; `at_close` is told when the server closes the connection.
    """

    keep_headers = True

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.done: collections.deque[_Answer] = collections.deque()
        self._headers: RawHeaders = []
        self._body: list[bytes] = []
        self.begun = False  # a byte of the current answer has come
        self._in_body = False  # ... and its whole head (kept headers only)
        self.head = False  # the request was a HEAD: its answer has no body
        self.stale = False  # the parser still expects the body of a HEAD's answer

    # httptools' callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._in_body = True
        if self.head:  # the parser cannot be told: it would wait for Content-Length bytes
            self.stale = True
            self._finish(self.parser.should_keep_alive())

    def on_body(self, chunk: bytes) -> None:
        self._body.append(chunk)

    def on_message_complete(self) -> None:
        # Read here: once the message is complete the parser resets for the next one.
        if not self.stale:
            self._finish(self.parser.should_keep_alive())

    def _finish(self, keep_alive: bool) -> None:
        status = self.parser.get_status_code()
        self.done.append((status, b"".join(self._body), self._headers, keep_alive))
        self._body = []
        if self.keep_headers:
            self._headers = []
        self.begun = self._in_body = False

    def renew(self) -> None:
        """A new parser, after a HEAD's answer: the old one waits for a body that never comes."""
        self.parser = httptools.HttpResponseParser(self)
        self._headers, self._body = [], []
        self.begun = self._in_body = self.stale = False

    def at_close(self) -> None:
        """The server closed the connection: the end of a body that runs to the close, or an
        answer cut short (IncompleteResponse)."""
        closed = "the server closed the connection"
        if not self.begun:
            raise IncompleteResponse(f"{closed} before answering", answered=False)
        got = sum(len(chunk) for chunk in self._body)
        if not self.keep_headers:
            raise IncompleteResponse(f"{closed} before the answer's end ({got} body bytes came)")
        if not self._in_body:
            raise IncompleteResponse(f"{closed} inside the answer's head")
        headers = decode_headers(self._headers)
        if "chunked" in headers.get("transfer-encoding", "").lower():
            raise IncompleteResponse(f"{closed} inside the chunked body, after {got} bytes")
        if "content-length" in headers:
            raise IncompleteResponse(
                f"{closed} after {got} of the {headers['content-length']} body bytes its "
                "Content-Length promised"
            )
        self._finish(False)  # neither: the body ran to the close, and is whole


class _LeanAnswers(_Answers):
    """The answers of load generators, which read status and body: httptools calls back into
    Python only for the body and the answer's end, as each call back costs CPU on every request.
    No headers are kept, no HEAD's answer is read, and every close before an answer's end is a
    cut (a body that runs to the close, with no Content-Length and not chunked, needs the
    headers). Switched off as class attributes: putting them in the instance's __dict__ would
    slow down every attribute access of the callbacks that remain."""

    keep_headers = False
    on_header = None  # type: ignore[assignment]
    on_headers_complete = None  # type: ignore[assignment]


# ---------------------------------------------------------------------------------------------
# The connection


class HttpConnection:
    """One keep-alive HTTP/1.1 connection to `address` (HOST:PORT, http://HOST:PORT or
    https://...), opened on first use and reopened after the server closes it. `timeout` bounds
    connecting and each send and receive (seconds). `connect` opens the socket (see
    `connect_tcp`, `blocking_connector`). `keep_headers=False` makes the lean connection of load
    generators: no headers kept, no HEAD, no body that runs to the close. `tls` dials HTTPS with
    those options (an https:// address alone: the system's CAs). A failed exchange closes the
    connection and raises OSError (the tree in this module's docstring)."""

    def __init__(
        self,
        address: str,
        timeout: float = 30.0,
        *,
        connect: Connector = connect_tcp,
        keep_headers: bool = True,
        tls: ClientTls | None = None,
    ) -> None:
        parts = urlsplit(address if "://" in address else f"http://{address}")
        if parts.hostname is None or parts.scheme not in ("http", "https"):
            raise ValueError(f"{address!r} is not HOST:PORT or http(s)://HOST:PORT")
        self.tls_options = ClientTls.for_address(address, tls)[1]
        self.tls = self.tls_options is not None
        self._ssl: ssl.SSLContext | None = None  # made on first connection
        self.host = parts.hostname
        self.port = parts.port or (443 if self.tls else 80)
        self.timeout = timeout
        self.keep_headers = keep_headers
        self.answer_headers: RawHeaders = []  # the last answer's, as sent
        self._authority = parts.netloc.encode("latin-1")  # the Host header
        self._connect = connect
        self._sock: socket.socket | None = None
        self._owns_socket = True
        self._answers = _Answers() if keep_headers else _LeanAnswers()
        self._answered = 0  # answers read on this socket

    @classmethod
    def over(cls, sock: socket.socket, *, keep_headers: bool = True) -> HttpConnection:
        """A connection that reads the answers to what the caller writes on `sock` (a connected
        socket of the caller's, with its timeout: the raw-request fuzzer, which writes raw bytes):
        `send(b"")` reads the next one, 1xx included. The socket stays the caller's: it is
        neither closed nor reopened."""
        host, port = sock.getpeername()[:2]
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        timeout = sock.gettimeout() or 0.0
        connection = cls(address, timeout, connect=_reopen_refused, keep_headers=keep_headers)
        connection._sock, connection._owns_socket = sock, False
        return connection

    def encode(
        self, method: str, path: str, body: bytes | None, headers: Mapping[str, str]
    ) -> bytes:
        """The request's bytes, for `send`: the request line, Host (unless among `headers`),
        `headers`, Content-Length (unless `headers` frame the body themselves) and the body.
        POST, PUT and PATCH without a body send Content-Length: 0, as http.client did."""
        names = {name.lower() for name in headers}
        lines = [f"{method} {path} HTTP/1.1".encode("latin-1")]
        if "host" not in names:
            lines.append(b"Host: " + self._authority)
        lines += [f"{name}: {value}".encode("latin-1") for name, value in headers.items()]
        framed = "content-length" in names or "transfer-encoding" in names
        if not framed and (body is not None or method.upper() in _BODY_METHODS):
            lines.append(b"Content-Length: %d" % len(body or b""))
        return b"\r\n".join(lines) + b"\r\n\r\n" + (body or b"")

    def send(self, request: bytes, head: bool = False) -> tuple[int, bytes]:
        """Send `request` (from `encode`; b"" sends nothing) and read the next answer, a 1xx
        included: (status, body); its headers are in `answer_headers`. `head`: the request is
        a HEAD, whose answer has no body."""
        # The whole exchange in one function, the read loop inlined: this is the load
        # generators' hot path, where every Python call costs CPU on every request.
        if head and not self.keep_headers:
            raise ValueError("a HEAD's answer is read with keep_headers=True")
        try:
            sock = self._sock or self._open()
            if request:
                sock.sendall(request)
            answers = self._answers
            answers.head, done = head, answers.done
            while not done:
                data = sock.recv(_RECV_BYTES)
                if data:
                    answers.begun = True  # (the answer that completes in this feed resets it)
                    answers.parser.feed_data(data)
                else:
                    answers.at_close()
            if answers.stale:
                answers.renew()
            status, body, self.answer_headers, keep_alive = done.popleft()
        except IncompleteResponse as exc:
            reused = self._answered
            self.close()
            if not reused and not exc.answered:
                self._tls_failure(exc)
            if reused and not exc.answered:
                raise IncompleteResponse(
                    f"{exc} on a connection kept alive after {reused} answer(s): the server "
                    "may have closed it as idle (the next request opens a new one)",
                    answered=False,
                ) from None
            raise
        except (TimeoutError, BlockingIOError):  # BlockingIOError: SO_RCVTIMEO ran out
            self.close()
            raise TimeoutError(
                f"{self.host}:{self.port} did not answer within {self.timeout:g} s"
            ) from None
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self.close()
            self._tls_failure(exc, probe=False)
            raise MalformedResponse(f"the answer is not HTTP/1.x: {exc}") from exc
        except ssl.SSLError as exc:  # an alert after the handshake: a refused client certificate
            self.close()
            self._tls_failure(exc)
            raise
        except OSError:
            self.close()
            raise
        if keep_alive:
            self._answered += 1
        else:
            self.close()
        return status, body

    def request(
        self, method: str, path: str, body: bytes | None, headers: Mapping[str, str]
    ) -> HttpReply:
        """Send one request, read its whole answer (any status; 1xx answers skipped)."""
        head = method.upper() == "HEAD"
        status, payload = self.send(self.encode(method, path, body, headers), head)
        while status < 200:  # 100 Continue, 103 Early Hints: the answer comes next
            if self._sock is None:
                raise IncompleteResponse(f"the server closed the connection after a {status}")
            status, payload = self.send(b"", head)
        return HttpReply(status, payload, decode_headers(self.answer_headers))

    def close(self) -> None:
        """Close the socket (the next request opens a new one); one from `over` is only let go."""
        if self._sock is not None:
            if self._owns_socket:
                self._sock.close()
            self._sock = None

    def _open(self) -> socket.socket:
        sock = self._connect(self.host, self.port, self.timeout)
        if self.tls_options is not None:
            if self._ssl is None:
                self._ssl = self.tls_options.ssl_context()
            name = self.tls_options.server_name or self.host
            try:
                if sock.gettimeout() is None:  # blocks in the kernel: blocking_connector's
                    sock = cast(socket.socket, _BioTls(sock, self._ssl, name))
                else:
                    sock = self._ssl.wrap_socket(sock, server_hostname=name)
            except ssl.SSLError as exc:
                sock.close()
                self._tls_failure(exc)
                raise
            except OSError:
                sock.close()
                raise
        self._sock, self._answered = sock, 0
        self._answers = _Answers() if self.keep_headers else _LeanAnswers()
        return sock

    def _tls_failure(self, exc: Exception, *, probe: bool = True) -> None:
        """Raise TlsError if TLS is why this exchange failed (a handshake error, an alert, a
        server on the other side of the TLS line: `probe` asks with a handshake of our own
        when the error's text does not say); return if not."""
        meaning = explain(str(exc), tls=self.tls)
        if meaning is None and probe:
            meaning = diagnose(self.host, self.port, self.tls_options, grpc=False)
        if meaning is not None:
            scheme = "https" if self.tls else "http"
            raise TlsError(f"{scheme}://{self.host}:{self.port}: {meaning} ({exc})") from exc


def _reopen_refused(host: str, port: int, timeout: float) -> socket.socket:
    raise ConnectionError(f"the socket to {host}:{port} was the caller's, and is gone")


def read_response(sock: socket.socket, connection: HttpConnection | None = None) -> HttpReply:
    """The next answer on `sock`, to what the caller wrote on it, 1xx included. To read several
    answers off one socket, pass the same `connection` (`HttpConnection.over(sock)`): bytes past
    one answer are the next one's. Raises as HttpConnection.send does."""
    connection = connection or HttpConnection.over(sock)
    status, body = connection.send(b"")
    return HttpReply(status, body, decode_headers(connection.answer_headers))
