"""The one locust user loop of graphserve's locustfiles, and the one open-loop schedule.

Each user sends from a real OS thread of its own (loadtest/generator/senders.py says why); its
greenlet only starts, watches and stops the thread. The thread runs `LoopUser._step` again and
again, one request a step:

    turn = traffic.turn               what the process sends now (None: nothing for now)
    traffic.budget.reserve()          at most --max-requests, counted before the wait
    due = turn.schedule.take()        open loop: the process's next arrival; wait for it
    sender.send()                     timed: gRPC's blocking call, or one keep-alive POST
    user.record(turn, sent)           the locustfile's own record; then locust's request event

A locustfile declares a `LoopUser` subclass with its `Traffic` (one per process, shared by its
users), the senders a user opens (one per arm) and, where it keeps more than locust's
statistics, what it records per request (`sending`, `record`). The hub changes what users do by
publishing a new `Turn`: a new phase, arm or rate. A `Schedule` is a turn's arrivals; it ends when
its turn is replaced, and a user waiting for one of its arrivals gives it back (and its budget
reservation) instead of sending it late into the next phase.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import gevent.event
import numpy as np
from locust import User, constant, task
from locust.env import Environment
from locust.exception import StopUser

from graphserve.core.client import JSON_HEADERS, GrpcClient
from graphserve.core.tls import ClientTls
from graphserve.loadtest.generator.senders import (
    Bodies,
    Completed,
    Completions,
    HttpSender,
    LoopThread,
    RealLock,
    real_sleep,
    timed_call,
    timed_exchange,
    timed_post,
)

__all__ = [
    "Bodies",
    "GrpcPredict",
    "LoopUser",
    "RequestBudget",
    "RestPredict",
    "Schedule",
    "Sender",
    "Sent",
    "Traffic",
    "Turn",
    "end_run",
    "predict_sender",
]

T = TypeVar("T")

# An open loop keeps up to --max-in-flight (64) users' threads waiting: these bound the wake-ups
# (64 threads at 2 ms were 32,000 a second), not the timing, since a thread sleeps exactly until
# its arrival when that is sooner, and looks at its schedule again before it sends.
_IDLE_S = 0.01  # how often a user with nothing to send looks again
_POLL_S = 0.02  # the longest a user's thread sleeps towards an arrival before looking again


class Schedule:
    """When the users of one process send: `rate` arrivals a second from `start` (time.time()),
    evenly spaced or a Poisson process seeded with `seed`, each taken by one user. Rate 0 is a
    closed loop: every user sends as soon as it can, from `start` on.

    A schedule ends when the phase it was made for does (`Traffic.publish`); the next phase, or
    the same at a new rate, gets a new one. Thread-safe.
    """

    def __init__(
        self, rate: float, start: float, *, poisson: bool = False, seed: int | Sequence[int] = 0
    ) -> None:
        self.rate, self.start = rate, start
        self.ended = False
        self._lock = RealLock()
        self._taken = 0  # evenly spaced: how many arrivals were handed out
        self._next = start  # Poisson: the next arrival
        self._rng = np.random.default_rng(seed) if poisson else None

    def take(self) -> float:
        """The next send time (time.time()), handed out once; a closed loop's is now."""
        if self.rate <= 0:
            return max(self.start, time.time())
        with self._lock:
            if self._rng is None:
                index, self._taken = self._taken, self._taken + 1
                return self.start + index / self.rate
            due = self._next
            self._next = due + float(self._rng.exponential(1.0 / self.rate))
            return due

    def wait(self, due: float) -> bool:
        """Sleep this thread until `due`; False when the schedule ends first (send nothing)."""
        while (delay := due - time.time()) > 0:
            if self.ended:
                return False
            real_sleep(min(delay, _POLL_S))
        return not self.ended

    def lag_ms(self, due: float) -> float:
        """How late a send at `due` goes out now (an open loop's; a closed loop is never late)."""
        return max(0.0, (time.time() - due) * 1000) if self.rate > 0 else 0.0

    def end(self) -> None:
        self.ended = True


class RequestBudget:
    """At most `limit` requests from this process (0: no bound).

    A user reserves a request before it waits for its send time and releases it when it does not
    send it, so the budget neither overshoots nor strands requests; `spend` counts those that
    went out. `complete` (a request listener, on the hub) counts the answers and runs `on_spent`
    once the last is in, so quitting never cuts off a request in flight. Thread-safe.
    """

    def __init__(self, limit: int = 0, on_spent: Callable[[], object] | None = None) -> None:
        self.limit, self.reserved, self.sent, self.done = limit, 0, 0, 0
        self._on_spent = on_spent
        self._lock = RealLock()

    def reserve(self) -> bool:
        """One more request, unless the whole budget is reserved."""
        if not self.limit:
            return True
        with self._lock:
            if self.reserved >= self.limit:
                return False
            self.reserved += 1
            return True

    def release(self) -> None:
        """A reserved request that will not be sent."""
        if self.limit:
            with self._lock:
                self.reserved -= 1

    def spend(self) -> None:
        """A reserved request goes out now."""
        if self.limit:
            with self._lock:
                self.sent += 1

    @property
    def spent(self) -> bool:
        """The whole budget has been sent (reservations do not count)."""
        return bool(self.limit) and self.sent >= self.limit

    def complete(self, **_: Any) -> None:
        self.done += 1
        if self.limit and self.done == self.limit and self._on_spent is not None:
            self._on_spent()


@dataclass(frozen=True, slots=True)
class Turn(Generic[T]):
    """What users send now: the locustfile's `tag` (the sweep's phase), the name locust files
    it under, which of a user's senders (`arm`), and when (`schedule`; None: back to back)."""

    tag: T
    name: str = "Predict"
    arm: int = 0
    schedule: Schedule | None = None


class Traffic(Generic[T]):
    """What the users of one process send: the current `Turn`, replaced whole on the hub and read
    by the users' threads in one step; the request budget; and the users' threads."""

    def __init__(self) -> None:
        self.turn: Turn[T] | None = None  # None: nothing to send for now
        self.budget = RequestBudget()
        self.stopped = False
        self.changed = gevent.event.Event()  # set (and replaced) at every publish
        self.threads: list[LoopThread] = []

    def publish(self, turn: Turn[T] | None) -> None:
        """Users send `turn` from now on; the schedule it replaces ends, so a user waiting for
        one of the old arrivals sends nothing (a user in a call finishes it)."""
        previous, self.turn = self.turn, turn
        old = previous.schedule if previous is not None else None
        if old is not None and (turn is None or turn.schedule is not old):
            old.end()
        self.changed.set()
        self.changed = gevent.event.Event()

    def end(self) -> None:
        """Users send nothing more: each thread finishes the call it is in and ends, and so does
        its user (locust then quits without waiting out its --stop-timeout)."""
        self.stopped = True
        self.publish(None)

    def stop(self, timeout_s: float) -> bool:
        """`end`, then wait (on the hub) until each thread has finished the call it is in. False
        when some had not after `timeout_s`."""
        self.end()
        deadline = time.monotonic() + timeout_s
        joined = [t.join(max(0.0, deadline - time.monotonic())) for t in self.threads]
        return all(joined)


@dataclass(frozen=True, slots=True)
class Sent:
    """One request as a user's loop sent it."""

    start: float  # time.time() at the send
    ms: float  # the call alone
    length: int  # the answer's bytes
    error: BaseException | None
    lag_ms: float  # open loop: how long after its arrival it went out
    reply: bytes  # gRPC: the answer, unparsed (b"" on failure); REST: b"" (kept with Bodies)
    record: int = -1  # with Bodies: the record sent

    def completed(
        self,
        name: str,
        context: dict[str, Any] | None = None,
        after: Callable[[], None] | None = None,
    ) -> Completed:
        """As locust's request event takes it (`after` runs on the hub, right after)."""
        return Completed(name, self.start, self.ms, self.length, self.error, context or {}, after)


class Sender(Protocol):
    """One user's way to one target; `send` is called from the user's thread only."""

    request_type: str  # locust's request_type: "grpc" | "POST"
    timeout_s: float

    @property
    def record(self) -> int:
        """With Bodies: the record the last send sent (-1: one body, sent every time)."""
        ...

    def send(self) -> tuple[float, float, int, BaseException | None, bytes]:
        """(time.time() at the send, milliseconds, answer bytes, the failure, the answer)."""
        ...

    def close(self) -> None: ...


class GrpcPredict:
    """Predict with one pre-serialized PredictRequest over a channel of its own (one shared by
    threads serializes them): the bytes go out as they are, the answer is not parsed. Over TLS
    with `tls` (a grpcs:// address alone: the system's CAs)."""

    request_type = "grpc"
    record = -1

    def __init__(
        self,
        address: str,
        body: bytes | Bodies,
        timeout_s: float,
        *,
        max_message_bytes: int | None = None,
        tls: ClientTls | None = None,
    ) -> None:
        self.timeout_s = timeout_s
        self._client = GrpcClient.connect(
            address, timeout=timeout_s, max_message_bytes=max_message_bytes, tls=tls
        )
        self._predict = self._client.raw("Predict")  # bytes in, bytes out
        self._bodies = body if isinstance(body, Bodies) else None
        self._body = body if isinstance(body, bytes) else b""
        self._reply = b""

    def _call(self, body: bytes, timeout: float) -> bytes:
        self._reply = self._predict(body, timeout=timeout)
        return self._reply

    def send(self) -> tuple[float, float, int, BaseException | None, bytes]:
        self._reply = b""
        if self._bodies is not None:
            self.record = self._bodies.take()
            self._body = self._bodies.bodies[self.record]
        start, ms, length, error = timed_call(self._call, self._body, self.timeout_s)
        return start, ms, length, error, self._reply

    def close(self) -> None:
        self._client.close()


class RestPredict:
    """POSTs one pre-encoded JSON body over a keep-alive connection (or, with Bodies, the next
    one, its answer kept); anything but 200 fails. Over TLS with `tls` (an https:// address
    alone: the system's CAs)."""

    request_type = "POST"

    def __init__(
        self,
        address: str,
        path: str,
        body: bytes | Bodies,
        timeout_s: float,
        tls: ClientTls | None = None,
    ) -> None:
        self.timeout_s = timeout_s
        self._http = HttpSender(address, path, body, JSON_HEADERS, timeout_s, tls)
        self._cycles = isinstance(body, Bodies)

    @property
    def record(self) -> int:
        return self._http.record

    def send(self) -> tuple[float, float, int, BaseException | None, bytes]:
        if self._cycles:
            start, ms, body, error = timed_exchange(self._http)
            return start, ms, len(body), error, body if error is None else b""
        return *timed_post(self._http), b""

    def close(self) -> None:
        self._http.close()


def predict_sender(
    protocol: str,
    address: str,
    body: bytes | Bodies,
    *,
    timeout_s: float,
    rest_path: str = "",
    max_message_bytes: int | None = None,
    tls: ClientTls | None = None,
) -> Sender:
    """The sender of `protocol` ("grpc" | "rest") to `address`, over TLS with `tls`; ValueError
    for a REST address that is not HOST:PORT or http(s)://HOST:PORT."""
    if protocol == "grpc":
        return GrpcPredict(address, body, timeout_s, max_message_bytes=max_message_bytes, tls=tls)
    return RestPredict(address, rest_path, body, timeout_s, tls)


class LoopUser(User):
    """A locust user whose requests go out from a real OS thread of its own, one per step of
    its loop, as its class's `traffic` says: back to back, or at the arrivals of a schedule
    shared by the process. Subclasses declare `traffic` and `senders`; `sending` and `record`
    add what a locustfile keeps of each request."""

    abstract = True
    wait_time = constant(0)
    traffic: ClassVar[Traffic[Any]]

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        self.loop = LoopThread(self._step)  # replaced by a running one when the task starts
        self._senders: list[Sender] = []
        self._completions: Completions | None = None

    # -- what a locustfile declares

    def senders(self) -> list[Sender]:
        """This user's senders, one per arm (a turn's `arm` indexes them); made on the hub."""
        raise NotImplementedError

    def sending(self, turn: Turn[Any]) -> None:
        """Runs on the user's thread just before `turn`'s request goes out."""

    def record(self, turn: Turn[Any], sent: Sent) -> Completed:
        """Runs on the user's thread once `sent` is back: what locust's request event gets."""
        return sent.completed(turn.name)

    # -- the loop

    @task
    def send(self) -> None:
        traffic = self.traffic
        if traffic.stopped:
            raise StopUser()
        if traffic.turn is None:  # nothing to send yet (a worker waiting for its plan)
            traffic.changed.wait(timeout=0.25)
            return
        if not self._senders:  # their channels made here, on the hub, not on the thread
            self._senders = self.senders()
        self._completions = Completions.of(self.environment, self._senders[0].request_type)
        self.loop = LoopThread(self._step).start()
        traffic.threads.append(self.loop)
        self.loop.watch()  # until the user stops, or the traffic does
        raise StopUser()

    def on_stop(self) -> None:
        # The request in flight ends (within its timeout) before its connection closes.
        self.loop.join(max((s.timeout_s for s in self._senders), default=0.0))
        for sender in self._senders:
            sender.close()

    def _step(self) -> bool:
        """One request, on this user's thread; False when the traffic has stopped."""
        traffic = self.traffic
        turn, budget = traffic.turn, traffic.budget
        if turn is None or not budget.reserve():
            if traffic.stopped:
                return False
            real_sleep(_IDLE_S)
            return True
        lag_ms = 0.0
        schedule = turn.schedule
        if schedule is not None:
            due = schedule.take()
            if not schedule.wait(due):  # its phase ended first: the arrival belongs to none
                budget.release()
                return True
            lag_ms = schedule.lag_ms(due)
        budget.spend()
        self.sending(turn)
        sender = self._senders[turn.arm]
        start, ms, length, error, reply = sender.send()
        sent = Sent(start, ms, length, error, lag_ms, reply, sender.record)
        completed = self.record(turn, sent)
        assert self._completions is not None  # set before the thread started
        self._completions.put(completed)
        return True


def end_run(
    environment: Environment, traffic: Traffic[Any], timeout_s: float, write: Callable[[], None]
) -> None:
    """End a run its controller stopped (on the hub): each user finishes the call it is in
    (for `timeout_s` at most), `write` keeps the records, and locust quits."""
    traffic.stop(timeout_s)
    write()
    if environment.runner is not None:
        environment.runner.quit()
