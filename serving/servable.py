"""A loaded version of a model (`Servable`), and the lease that keeps it open while requests use
it. The manager makes them, the servable map holds them, the data plane leases them. A version's
state as GetModelStatus reports it (`VersionStatus`), which the manager sets in the map."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from graphserve.serving.runner import Runner

__all__ = ["Lease", "RunTime", "Servable", "VersionRef", "VersionStatus"]

# A request names a version by number, by label (a string), or not at all (the newest).
VersionRef = int | str | None


class Lease:
    """How many requests hold a servable, and when one last took it (time.monotonic(): what
    least-recently-used eviction goes by); `wait_idle` returns once none holds it."""

    def __init__(self) -> None:
        self.count = 0
        self.last_used = time.monotonic()
        self.taken = False  # by any request yet
        self._idle = threading.Condition()

    def take(self) -> None:
        with self._idle:
            self.count += 1
            self.last_used = time.monotonic()
            self.taken = True

    def give_back(self) -> None:
        with self._idle:
            self.count -= 1
            if self.count == 0:
                self._idle.notify_all()

    def wait_idle(self, timeout: float | None = None) -> bool:
        with self._idle:
            return self._idle.wait_for(lambda: self.count == 0, timeout)


class RunTime:
    """How long a servable's model runs lately (seconds, a moving average of its runs; None
    before its first): what a front end goes by to run a request where it arrived, on its event
    loop, rather than hand it to a thread (graphserve.serving.rest_api)."""

    __slots__ = ("mean",)

    WEIGHT = 0.1  # of the newest run
    # A run counts this long at most: one held up waiting for the GIL (another thread's Python,
    # such as the request log's writer) moves the mean by a fifth of a millisecond at most,
    # not by its wait, while a model that runs longer still averages past any threshold below
    # this (REST's 1 ms). Uncapped, the request log's writer sent 28 % of the REST predicts of
    # a 0.3 ms model to worker threads (T1 of `bench traffic`).
    LONGEST = 0.002

    def __init__(self) -> None:
        self.mean: float | None = None

    def observe(self, seconds: float) -> None:
        seconds = min(seconds, self.LONGEST)
        mean = self.mean
        self.mean = seconds if mean is None else mean + self.WEIGHT * (seconds - mean)


@dataclass(frozen=True)
class Servable:
    """One loaded version of one model."""

    name: str
    version: int
    runner: Runner
    lease: Lease = field(default_factory=Lease, compare=False, repr=False)
    loaded_at: int = field(default=0, compare=False, repr=False)  # serving.heap's epoch
    run_time: RunTime = field(default_factory=RunTime, compare=False, repr=False)


@dataclass(frozen=True)
class VersionStatus:
    """A version's state as GetModelStatus reports it: START, LOADING, AVAILABLE, UNLOADING,
    END; `error` is why a load failed or a loaded version was unloaded (state END), or what is
    wrong with a version that still serves (AVAILABLE)."""

    version: int
    state: str
    error: str = ""
