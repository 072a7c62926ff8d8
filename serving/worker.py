"""One worker of `serve --workers N` (serving.workers): `python -m graphserve.serving.worker FD`.

FD is this worker's end of the link to the supervisor, which hands it the ServeConfig. The
worker builds the server as a lone one would (serving.flags.start_server), agrees each version
with the other workers through the supervisor, serves on the ports the supervisor holds, and
drains and exits on SIGTERM, or when the supervisor is gone.
"""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import socket
import sys
import threading
from typing import TYPE_CHECKING

from graphserve.serving.link import Link

if TYPE_CHECKING:
    from graphserve.serving.sources import Fingerprint

__all__ = ["LinkAgreement", "main"]

log = logging.getLogger("graphserve.workers")


class LinkAgreement:
    """serving.manager.Agreement over the link: each step waits for the other workers."""

    def __init__(self, link: Link) -> None:
        self._link = link

    def loaded(self, name: str, version: int, fingerprint: Fingerprint, error: str) -> str:
        return str(self._link.call("agree", ("loaded", *_key(name, version, fingerprint)), error))

    def added(self, name: str, version: int, fingerprint: Fingerprint) -> None:
        self._link.call("agree", ("added", *_key(name, version, fingerprint)), "")


def _key(name: str, version: int, fingerprint: Fingerprint) -> tuple[str, int, str]:
    """A version's files, as every worker names them (a digest: a listing can be long)."""
    return name, version, hashlib.sha256(repr(fingerprint).encode()).hexdigest()[:16]


class _Named(logging.Filter):
    """Names the worker in each of its log lines' logger names (graphserve.manager[worker 2])."""

    def __init__(self, index: int) -> None:
        super().__init__()
        self._suffix = f"[worker {index}]"

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.endswith(self._suffix):
            record.name += self._suffix
        return True


def main(fd: int) -> None:
    from graphserve.core.logs import configure_logging, quiet_tensorflow
    from graphserve.serving.flags import start_server

    stopped = threading.Event()
    server_box: list[object] = []

    def families() -> list[object]:
        server = server_box[0] if server_box else None
        metrics = getattr(getattr(server, "plane", None), "metrics", None)
        return metrics.families() if metrics is not None else []

    def gone() -> None:  # the supervisor exited (or was killed): so do we
        if not stopped.is_set():
            os.kill(os.getpid(), signal.SIGTERM)

    link = Link(socket.socket(fileno=fd), {"families": families}, on_close=gone, name="supervisor")
    config, index, settings = link.call("hello")
    configure_logging(settings.log_format)
    for handler in logging.getLogger().handlers:  # each line says which worker wrote it
        handler.addFilter(_Named(index))
    if settings.verbose:
        logging.getLogger("graphserve").setLevel(logging.DEBUG)
    quiet_tensorflow()
    server = start_server(config, LinkAgreement(link))
    server_box.append(server)
    metrics = server.plane.metrics
    if metrics is not None:
        metrics.gather = lambda: link.call("gather", timeout=30.0)
    from graphserve.serving.flags import served_line

    link.call("serving", served_line(server.registry), server.describe())
    log.info("worker %d (pid %d) serving", index, os.getpid())
    server.wait()
    stopped.set()
    link.close()


if __name__ == "__main__":
    import typer

    try:
        main(int(sys.argv[1]))
    except typer.Exit as exc:  # start_server said why it cannot serve, as a lone server does
        sys.exit(exc.exit_code)
