"""`serve graph|eager --workers N`: N worker processes serving as one server.

The supervisor (this module, in the process the user started) holds the ports, starts the
workers, restarts one that dies and stops them all on SIGTERM. It never imports TensorFlow: each
worker (serving.worker) is a fresh Python process (spawned, not forked: TensorFlow's thread
pools do not survive a fork) that builds the same server from the same ServeConfig and binds the
same ports with SO_REUSEPORT, so the kernel shares the connections out between them. A worker
holds its own copy of each model.

To its clients it is one server:
- versions: a worker that loads a version (a new one, a reload, a config change) says so to the
  supervisor and waits for every serving worker to have loaded it too; then each takes requests
  for it, and only once all do does any report it AVAILABLE. If one worker cannot load it, none
  serves it (serving.manager.Agreement). A worker still starting loads what it finds alone: it
  takes no traffic until it serves.
- metrics: a scrape reaching any worker gathers every worker's families through the supervisor
  and sums them (serving.metrics.merge_families): one page, with each process's own figures
  under a `worker` label, and a dead worker's counts carried into the sums.

The link between them: serving.link, a socket pair per worker.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from graphserve.serving.link import Link, LinkClosed

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from graphserve.serving.options import ServeConfig

__all__ = [
    "SUPERVISOR", "Supervisor", "TooMuchMemory", "WorkerSettings", "WorkersFailed", "worker_count",
]  # fmt: skip

log = logging.getLogger("graphserve.workers")

SUPERVISOR = "supervisor"  # the worker label of the supervisor's own process metrics
# Seconds before starting again a worker that died: doubled each time one dies soon after it
# started, back to the first once a worker has served for _STEADY seconds.
_BACK_OFF = (0.2, 1.0, 2.0, 5.0, 10.0, 30.0)
_STEADY = 60.0
_ROUND_PATIENCE = 300.0  # s a version waits for the workers that have not loaded it yet
_GATHER_TIMEOUT = 5.0  # s a scrape waits for a worker's families


class WorkersFailed(RuntimeError):
    """A worker exited before it served: the server does not start (the worker said why)."""


class TooMuchMemory(RuntimeError):
    """The workers asked for would hold more than --max-memory: the server does not start."""


def _resident(pid: int) -> int:
    """A process's resident memory in bytes (0 once it is gone)."""
    from graphserve.core.processes import proc_status

    try:
        return proc_status(pid)["VmRSS"] * 1024
    except (OSError, KeyError):
        return 0


@dataclass(frozen=True)
class WorkerSettings:
    """What a worker needs besides the ServeConfig: how to log."""

    log_format: str = "text"
    verbose: bool = False


def worker_count(text: str) -> int:
    """--workers: a count of at least 1, or `auto`, the cores this process may run on. Raises
    ValueError naming what is expected."""
    if text == "auto":
        return len(os.sched_getaffinity(0))
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"--workers takes a count of at least 1 or 'auto', not {text!r}")
    return int(text)


def _exit_reason(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit code {code}"


class _Round:
    """One version's agreement among the serving workers: who must say, and what they said."""

    def __init__(self, required: set[int]) -> None:
        self.required = required
        self.said: dict[int, str] = {}
        self.started = time.monotonic()
        self.result: str | None = None


class _Rounds:
    """The agreements in progress (serving.manager.Agreement's two steps, keyed by step,
    model, version and files), and those decided a moment ago for a late worker."""

    def __init__(self, serving: Callable[[], set[int]]) -> None:
        self._serving = serving
        self._changed = threading.Condition()
        self._open: dict[Hashable, _Round] = {}
        self._decided: dict[Hashable, tuple[float, str]] = {}

    def arrive(self, worker: int, key: Hashable, error: str) -> str:
        """Worker `worker` reached `key` (`error`: why it failed); returns once every serving
        worker has: "" if none failed, else who failed and why."""
        with self._changed:
            decided = self._decided.get(key)
            if decided is not None and time.monotonic() - decided[0] < _ROUND_PATIENCE:
                return decided[1]
            serving = self._serving()
            if worker not in serving:
                return error  # still starting: it takes no traffic yet
            round_ = self._open.get(key)
            if round_ is None:
                round_ = self._open[key] = _Round(serving)
            round_.said[worker] = error
            self._changed.notify_all()
            while round_.result is None:
                self._decide(key, round_)
                if round_.result is None:
                    self._changed.wait(1.0)
            return round_.result

    def changed(self) -> None:
        """A worker died or started serving: rounds waiting for it may be decided."""
        with self._changed:
            self._changed.notify_all()

    def _decide(self, key: Hashable, round_: _Round) -> None:
        waiting = (round_.required & self._serving()) - set(round_.said)
        late = time.monotonic() - round_.started > _ROUND_PATIENCE
        if waiting and not late:
            return
        if waiting:
            log.warning(
                "%s: worker(s) %s did not load it within %.0f s; the others serve it",
                key, ", ".join(map(str, sorted(waiting))), _ROUND_PATIENCE,
            )  # fmt: skip
        failed = [f"worker {w}: {e}" for w, e in sorted(round_.said.items()) if e]
        round_.result = f"it did not load in every worker ({'; '.join(failed)})" if failed else ""
        now = time.monotonic()
        self._decided = {k: v for k, v in self._decided.items() if now - v[0] < _ROUND_PATIENCE}
        self._decided[key] = (now, round_.result)
        del self._open[key]
        self._changed.notify_all()


class _Worker:
    """One worker process, its link, and what it said last."""

    def __init__(self, index: int, process: subprocess.Popen[bytes], link: Link) -> None:
        self.index = index
        self.process = process
        self.link = link
        self.started = time.monotonic()
        self.serving = threading.Event()
        self.described: tuple[str, str] = ("", "")  # what it serves, where
        self.families: list[Metric] = []  # its last, for when it is gone


class Supervisor:
    """`count` workers serving `config` as one server. `start()` returns once every worker
    serves (WorkersFailed if one exits first); `wait()` until `stop()`."""

    def __init__(
        self,
        config: ServeConfig,
        count: int,
        settings: WorkerSettings | None = None,
        grace: float = 5.0,
        max_memory: int | None = None,
    ) -> None:
        if count < 1:
            raise ValueError(f"count must be at least 1, got {count}")
        if config.options.grpc_socket_path:
            raise ValueError(
                "--grpc_socket_path: a Unix socket is bound by one process; serve it with "
                "--workers 1 (a deviation of --workers: TF Serving's one process serves both)"
            )
        self.count = count
        self.max_memory = max_memory  # what all the workers may hold, predicted from the first
        self.grpc_port: int | None = None  # the ports held, once started
        self.rest_port: int | None = None
        self.settings = settings or WorkerSettings()
        self.grace = grace
        self._config = config
        self._held: list[socket.socket] = []
        self._lock = threading.Lock()
        self._workers: dict[int, _Worker] = {}
        self._rounds = _Rounds(self._serving)
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._failures = 0  # deaths in a row, each soon after its start: the back-off's step
        self._departed: list[Metric] = []  # the counts of workers gone, summed
        self._own: Any = None  # the supervisor's own process metrics (a CollectorRegistry)

    # -- life -----------------------------------------------------------------------------

    def start(self) -> Supervisor:
        """Hold the ports, start the workers and wait for each to serve. Raises OSError if a
        port is taken, WorkersFailed if a worker exits before it serves."""
        options = self._config.options
        grpc_port = self.grpc_port = self._hold(options.host, options.grpc_port)
        rest_port = self.rest_port = self._hold(options.host, options.rest_port)
        self._config = replace(
            self._config,
            options=replace(options, grpc_port=grpc_port, rest_port=rest_port, reuse_port=True),
        )
        from prometheus_client import CollectorRegistry, ProcessCollector

        self._own = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=self._own)
        try:
            first = 1
            if self.max_memory is not None:  # the first alone: what one holds, measured
                self._wait_serving(self._spawn(1))
                self._check_memory()
                first = 2
            for worker in [self._spawn(index) for index in range(first, self.count + 1)]:
                self._wait_serving(worker)
        except BaseException:
            self.stop()
            raise
        return self

    def _check_memory(self) -> None:
        """Refuse (TooMuchMemory) a worker count whose predicted memory, the first worker's as
        it serves times the count, and the supervisor's, is past max_memory."""
        from graphserve.serving.options import format_bytes

        assert self.max_memory is not None
        each = _resident(self._workers[1].process.pid)
        predicted = self.count * each + _resident(os.getpid())
        if predicted <= self.max_memory:
            return
        fits = max((self.max_memory - _resident(os.getpid())) // max(each, 1), 0)
        raise TooMuchMemory(
            f"{self.count} workers would hold about {format_bytes(predicted)}: worker 1 holds "
            f"{format_bytes(each)} serving its models (each worker holds its own copy), past "
            f"--max-memory {format_bytes(self.max_memory)}; give --workers {fits} or fewer, or "
            "a higher --max-memory"
            if fits
            else f"one worker alone holds {format_bytes(each)} serving its models, past "
            f"--max-memory {format_bytes(self.max_memory)}"
        )

    def memory(self) -> tuple[int, int]:
        """The workers' resident bytes together, and the supervisor's."""
        return sum(_resident(pid) for pid in self.pids), _resident(os.getpid())

    def _hold(self, host: str, port: int | None) -> int | None:
        """Bind `port` (0: a free one) with SO_REUSEPORT and keep it bound, not listening: the
        port stays ours while workers come and go, and the kernel hands connections only to the
        workers' listening sockets."""
        if port is None:
            return None
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            sock.bind((host, port))
        except OSError:
            sock.close()
            raise
        self._held.append(sock)
        return int(sock.getsockname()[1])

    def _spawn(self, index: int) -> _Worker:
        ours, theirs = socket.socketpair()
        fd = theirs.fileno()
        process = subprocess.Popen(
            [sys.executable, "-m", "graphserve.serving.worker", str(fd)], pass_fds=(fd,)
        )
        theirs.close()
        handlers = self._handlers(index)
        worker = _Worker(index, process, Link(ours, handlers, name=f"worker-{index}"))
        with self._lock:
            self._workers[index] = worker
        threading.Thread(
            target=self._watch, args=(worker,), name=f"watch-worker-{index}", daemon=True
        ).start()
        return worker

    def _wait_serving(self, worker: _Worker) -> None:
        while not worker.serving.wait(0.2):
            code = worker.process.poll()
            if code is not None:
                raise WorkersFailed(
                    f"worker {worker.index} (pid {worker.process.pid}) exited before it served: "
                    f"{_exit_reason(code)}"
                )

    def _watch(self, worker: _Worker) -> None:
        """Wait for `worker` to exit; unless the server is stopping, start another after the
        back-off, and say so."""
        code = worker.process.wait()
        worker.link.close()
        with self._lock:
            if self._workers.get(worker.index) is worker:
                del self._workers[worker.index]
            self._carry(worker)
        self._rounds.changed()
        if self._stopping.is_set() or not worker.serving.is_set():
            return  # stopping, or failed at start (start() says so, or the next _watch)
        lived = time.monotonic() - worker.started
        self._failures = 1 if lived > _STEADY else self._failures + 1
        pause = self._back_off()
        log.error(
            "worker %d (pid %d) exited: %s; starting another in %.1f s",
            worker.index, worker.process.pid, _exit_reason(code), pause,
        )  # fmt: skip
        while not self._stopping.wait(pause):
            replacement = self._spawn(worker.index)
            try:
                self._wait_serving(replacement)
            except WorkersFailed as exc:
                self._failures += 1
                pause = self._back_off()
                log.error("%s; starting another in %.1f s", exc, pause)
                continue
            log.info(
                "worker %d (pid %d) serves in place of pid %d",
                worker.index, replacement.process.pid, worker.process.pid,
            )  # fmt: skip
            return

    def _back_off(self) -> float:
        return _BACK_OFF[min(self._failures, len(_BACK_OFF)) - 1]

    def _carry(self, worker: _Worker) -> None:
        """Fold a dead worker's last counts into the departed ones: the server's counters never
        go back (counted since its last scrape are lost with it). Under self._lock."""
        from graphserve.serving.metrics import merge_families

        counted = [f for f in worker.families if f.type in ("counter", "histogram", "summary")]
        counted = [f for f in counted if not f.name.startswith("process_")]
        if counted:
            parts = [("departed", self._departed), (str(worker.index), counted)]
            self._departed = merge_families(parts, [])

    def stop(self) -> None:
        """SIGTERM every worker (each drains its requests), SIGKILL one still running after
        the grace time and a little more, then let the ports go."""
        if self._stopping.is_set():
            self._stopped.wait()
            return
        self._stopping.set()
        with self._lock:
            workers = list(self._workers.values())
        for worker in workers:
            with contextlib.suppress(ProcessLookupError):
                worker.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.grace + 5.0
        for worker in workers:
            try:
                worker.process.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                log.error("worker %d did not stop in time: killed", worker.index)
                worker.process.kill()
                worker.process.wait()
        for sock in self._held:
            sock.close()
        self._held = []
        self._stopped.set()

    def wait(self) -> None:
        """Block until stopped (waking to let the main thread run signal handlers)."""
        while not self._stopped.wait(0.5):
            pass

    # -- what the start line says ---------------------------------------------------------

    def describe(self) -> tuple[str, str]:
        """What the server serves and where, as its first worker said, the workers added."""
        with self._lock:
            workers = sorted(self._workers.values(), key=lambda w: w.index)
        from graphserve.serving.options import format_bytes

        served, where = workers[0].described if workers else ("", "")
        pids = ", ".join(str(w.process.pid) for w in workers)
        held, own = self.memory()
        return served, (
            f"{where}, {len(workers)} workers (pids {pids}) holding {format_bytes(held)} "
            f"resident, each its own copy of the models (the supervisor {format_bytes(own)})"
        )

    @property
    def pids(self) -> list[int]:
        with self._lock:
            return [w.process.pid for w in sorted(self._workers.values(), key=lambda w: w.index)]

    # -- what the workers ask ---------------------------------------------------------------

    def _serving(self) -> set[int]:
        with self._lock:
            return {i for i, w in self._workers.items() if w.serving.is_set()}

    def _handlers(self, index: int) -> dict[str, Callable[..., Any]]:
        def hello() -> tuple[ServeConfig, int, WorkerSettings]:
            return self._config, index, self.settings

        def serving(served: str, where: str) -> None:
            worker = self._workers[index]
            worker.described = (served, where)
            worker.serving.set()
            self._rounds.changed()

        def agree(key: Hashable, error: str) -> str:
            return self._rounds.arrive(index, key, error)

        return {"hello": hello, "serving": serving, "agree": agree, "gather": self._gather}

    def _gather(self) -> list[tuple[str, list[Metric]]]:
        """Every serving worker's families (its last, if it does not answer in time), the
        departed workers' counts, and the supervisor's own process."""
        with self._lock:
            workers = [w for w in self._workers.values() if w.serving.is_set()]
        parts: list[tuple[str, list[Metric]]] = []
        for worker in sorted(workers, key=lambda w: w.index):
            with contextlib.suppress(LinkClosed, TimeoutError):
                worker.families = worker.link.call("families", timeout=_GATHER_TIMEOUT)
            parts.append((str(worker.index), worker.families))
        with self._lock:
            if self._departed:
                parts.append(("departed", self._departed))
        parts.append((SUPERVISOR, list(self._own.collect())))
        return parts
