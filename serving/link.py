"""A two-way call link between the supervisor of `serve --workers N` and one worker.

One socket pair per worker carries pickled messages both ways: either side calls the other
(`call(op, *args)` blocks for the answer; `tell` does not wait) and answers the other's calls with
its `handlers`, each in a thread of its own, so a call that waits (a worker waiting for the
others to load a version) holds up nothing else on the link. Both ends are processes of the same
program, spawned by it: pickle is safe here, as multiprocessing's own pipes use it.

    ("call", id, op, args)   -> ("answer", id, True, result) or ("answer", id, False, error)
    ("tell", 0, op, args)    (no answer)

A link whose other end is gone fails every call waiting on it with LinkClosed and calls
`on_close` once.
"""

from __future__ import annotations

import itertools
import logging
import socket
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["Link", "LinkClosed"]

log = logging.getLogger("graphserve.workers")

Handler = Callable[..., Any]


class LinkClosed(ConnectionError):
    """The other end of a link is gone (its process exited, or it closed the link)."""


class Link:
    """Calls over a connected socket (one end of `socket.socketpair()`), both ways."""

    def __init__(
        self,
        sock: socket.socket,
        handlers: Mapping[str, Handler],
        on_close: Callable[[], None] | None = None,
        name: str = "link",
    ) -> None:
        sock.setblocking(True)
        self._sock = sock
        self._connection = Connection(sock.detach())
        self._handlers = dict(handlers)
        self._on_close = on_close
        self._name = name
        self._ids = itertools.count(1)
        self._waiting: dict[int, Future[Any]] = {}
        self._lock = threading.Lock()  # one message at a time on the wire; guards _waiting
        self._closed = False
        self._reader = threading.Thread(target=self._read, name=f"{name}-reader", daemon=True)
        self._reader.start()

    def call(self, op: str, *args: Any, timeout: float | None = None) -> Any:
        """Run the other end's handler for `op` on `args` and return its result, or raise
        what it raised (rebuilt by pickle), LinkClosed, or TimeoutError after `timeout` s."""
        future: Future[Any] = Future()
        with self._lock:
            if self._closed:
                raise LinkClosed(f"{self._name}: closed")
            ident = next(self._ids)
            self._waiting[ident] = future
            self._send(("call", ident, op, args))
        try:
            return future.result(timeout)
        finally:
            with self._lock:
                self._waiting.pop(ident, None)

    def tell(self, op: str, *args: Any) -> None:
        """Run the other end's handler for `op`, without waiting for it; LinkClosed if gone."""
        with self._lock:
            if self._closed:
                raise LinkClosed(f"{self._name}: closed")
            self._send(("tell", 0, op, args))

    def close(self) -> None:
        """Close this end: the other end sees the link gone."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._connection.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def _send(self, message: tuple[Any, ...]) -> None:
        try:
            self._connection.send(message)
        except (OSError, ValueError) as exc:  # the other end went away mid-send
            raise LinkClosed(f"{self._name}: {exc}") from None

    def _read(self) -> None:
        try:
            while True:
                kind, ident, *rest = self._connection.recv()
                if kind == "answer":
                    with self._lock:
                        future = self._waiting.get(ident)
                    if future is not None:
                        ok, value = rest
                        if ok:
                            future.set_result(value)
                        else:
                            future.set_exception(value)
                    continue
                op, args = rest
                threading.Thread(
                    target=self._answer, args=(kind, ident, op, args),
                    name=f"{self._name}-{op}", daemon=True,
                ).start()  # fmt: skip
        except (EOFError, OSError):
            pass
        finally:
            self._gone()

    def _answer(self, kind: str, ident: int, op: str, args: tuple[Any, ...]) -> None:
        handler = self._handlers.get(op)
        try:
            if handler is None:
                raise LookupError(f"{self._name}: no handler for {op!r}")
            result, ok = handler(*args), True
        except Exception as exc:  # the caller gets it, rebuilt
            if kind == "tell":
                log.exception("%s: %s failed", self._name, op)
            result, ok = exc, False
        if kind != "call":
            return
        try:
            with self._lock:
                if not self._closed:
                    self._send(("answer", ident, ok, result))
        except LinkClosed:
            pass
        except Exception as exc:  # an answer pickle cannot carry: say so instead of hanging
            with self._lock:
                self._send(("answer", ident, False, RuntimeError(f"{op}: {exc}")))

    def _gone(self) -> None:
        with self._lock:
            was_closed, self._closed = self._closed, True
            waiting, self._waiting = list(self._waiting.values()), {}
        for future in waiting:
            if not future.done():
                future.set_exception(LinkClosed(f"{self._name}: the other end is gone"))
        if not was_closed:
            self._connection.close()
        if self._on_close is not None:
            self._on_close()
