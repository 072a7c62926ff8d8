"""What the benchmarks read off a server process, each read one way, for every benchmark that
needs it (frontend, peers, tls, many, soak).

    process tree    a server and every process under it (/proc/PID/task/*/children): a peer's
                    workers, Triton's server and its proxies count as the server, as they cost
                    the machine as much as the server's own process does
    CPU window      `clients` closed-loop clients in this process (not the server's: their CPU
                    is not counted as the server's) load the server for `seconds` while the
                    server tree's user + system CPU (/proc) and this process's are read around
                    the window; over the requests answered, the server's CPU per request. The
                    clients connect (TLS handshakes included) before the clocks start, so the
                    window holds requests and nothing else
    idle            the server tree's CPU over a second with no request at all, in cores: what
                    it spends polling, nothing served
    memory          RSS and PSS summed over the tree (smaps_rollup): PSS splits a shared page
                    between the processes sharing it, so a tree of forked workers is not
                    counted twice
    pause, alone    SIGSTOP and SIGCONT to a whole tree: with several servers on one machine,
                    only the one measured runs (`alone`), so an idle neighbour's polling costs
                    it nothing and every server starts and is measured on a quiet machine
    sampler         a reading taken every few seconds in a thread of its own while a load runs
                    (the soak's RSS and threads, the many-models bench's metrics scrapes)
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Protocol, TypeVar, runtime_checkable

from tools.bench.clients import Load, closed_loop

__all__ = [
    "CpuWindow",
    "Sampler",
    "alive",
    "alone",
    "cpu_window",
    "idle_cores",
    "pause",
    "resume",
    "tree",
    "tree_cpu_s",
    "tree_memory_mb",
]

_TICK = os.sysconf("SC_CLK_TCK")
T = TypeVar("T")


def tree(pid: int) -> list[int]:
    """`pid` and all its descendants (/proc/PID/task/*/children)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                todo += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
    return found


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie has exited; its parent has not reaped it yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of `pid` and every live descendant."""
    total = 0
    for each in tree(pid):
        try:
            fields = Path(f"/proc/{each}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / _TICK


def tree_memory_mb(pid: int) -> dict[str, float]:
    """RSS summed over the process tree, and PSS, in MB; the processes too."""
    rss = pss = 0
    pids = tree(pid)
    for each in pids:
        try:
            for line in Path(f"/proc/{each}/smaps_rollup").read_text().splitlines():
                key, _, value = line.partition(":")
                if key == "Rss":
                    rss += int(value.split()[0])
                elif key == "Pss":
                    pss += int(value.split()[0])
        except OSError:
            continue
    return {"rss_mb": rss / 1024, "pss_mb": pss / 1024, "processes": float(len(pids))}


# ---------------------------------------------------------------------------------------------
# CPU


@dataclass(frozen=True)
class CpuWindow:
    """One window of closed-loop load on a server, and the CPU spent over it."""

    load: Load
    cpu_s: float  # the server tree's user + system CPU
    client_cpu_s: float  # this process's: the clients'

    @property
    def cpu_us_per_request(self) -> float | None:
        return self.cpu_s / self.load.requests * 1e6 if self.load.requests else None

    @property
    def cores(self) -> float | None:
        return self.cpu_s / self.load.seconds if self.load.seconds else None


@runtime_checkable
class _Closes(Protocol):
    def close(self) -> None: ...


def cpu_window(
    make_call: Callable[[], Callable[[], object]],
    pid: int,
    *,
    clients: int,
    seconds: float,
    warmup_s: float = 0.0,
) -> CpuWindow:
    """The CPU window (the module's docstring): `clients` callers from `make_call` warm up for
    `warmup_s`, then fresh ones load the server `pid` for `seconds`; a caller with a `close`
    is closed after it."""
    if warmup_s > 0:
        closed_loop(make_call, clients=clients, seconds=warmup_s)
    callers: list[Callable[[], object]] = []
    try:
        for _ in range(clients):  # one by one: those made are closed if a later one fails
            callers.append(make_call())
        made = iter(callers)
        server, client = tree_cpu_s(pid), time.process_time()
        load = closed_loop(lambda: next(made), clients=clients, seconds=seconds)
        return CpuWindow(load, tree_cpu_s(pid) - server, time.process_time() - client)
    finally:
        for call in callers:
            if isinstance(call, _Closes):
                call.close()


def idle_cores(pid: int, seconds: float = 1.0) -> float:
    """The server tree's CPU over `seconds` with no request sent, in cores."""
    before = tree_cpu_s(pid)
    time.sleep(seconds)
    return (tree_cpu_s(pid) - before) / seconds


# ---------------------------------------------------------------------------------------------
# One server at a time


def _signal(pid: int, sig: int) -> None:
    """`sig` to every process of the tree (a peer's workers may sit in sessions of their own,
    as BentoML's do, out of reach of a process group's signal)."""
    for each in tree(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(each, sig)


def pause(pid: int) -> None:
    """Stop the tree of `pid` (SIGSTOP) until `resume`."""
    _signal(pid, signal.SIGSTOP)


def resume(pid: int) -> None:
    _signal(pid, signal.SIGCONT)


@contextlib.contextmanager
def alone(pid: int | None, servers: Iterable[int]) -> Iterator[None]:
    """Only the server `pid` runs while the block does (None: none of `servers`): every other
    one of `servers` paused, and `pid` paused again after it."""
    for other in servers:
        if other != pid:
            pause(other)
    if pid is None:
        yield
        return
    resume(pid)
    try:
        yield
    finally:
        pause(pid)


# ---------------------------------------------------------------------------------------------
# Readings over time


class Sampler(Generic[T]):
    """`read()` every `every` s in a thread of its own while the block runs, what it returns
    kept in `samples` (None: nothing this time): the first reading at once (after `every`
    without `at_start`), the last as the block ends."""

    def __init__(
        self, read: Callable[[], T | None], every: float, *, at_start: bool = True
    ) -> None:
        self.read, self.every, self.at_start = read, every, at_start
        self.samples: list[T] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def __enter__(self) -> Sampler[T]:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._take()

    def _run(self) -> None:
        if self.at_start:
            self._take()
        while not self._stop.wait(self.every):
            self._take()

    def _take(self) -> None:
        if (sample := self.read()) is not None:
            self.samples.append(sample)
