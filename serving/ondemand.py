"""Many models on one server: each version loaded on its first request, the least recently used
unloaded to stay within a memory budget (`serve graph --load-on-demand`).

TF Serving loads every model of its config at start and keeps all of them resident. Here every
model and version of the config is known at start (GetModelStatus says START: "loads on its
first request") and loaded when a request first names it:

- **One load at a time**, on the loader thread, in the order first asked; concurrent requests for
  the same version share its load. A request waits within its deadline (DEADLINE_EXCEEDED past
  it; the load goes on, and the next request finds the version resident), and gets NOT_FOUND
  with the load's error when the version fails to load (tried again once its files change).
- **Measured, not guessed**: a version's resident bytes are what malloc's bytes in use grew by
  while it loaded (loads are serial; serving.heap.allocated_bytes: RSS's growth varied from 1.3
  to 2.5 MB over loads of one MLP, malloc's from 1.46 to 1.49), the least over its loads, as
  other threads allocate meanwhile, and at least its variables. Until a version has loaded
  once, its files' prediction stands in (core.savedmodel).
- **Eviction**: before a load, least recently used versions are unloaded until the budget
  (`--max-resident-bytes`, `--max-resident-models`) has room for it; with `--idle-unload`, a
  version unused that long is unloaded too. Never a version a request holds (registry.evict
  checks under the lock requests take), never a pinned one: a config pins a version with the
  version label `pinned`, which loads at start and stays. An evicted version is back to START.
- **Memory comes back**: an unloaded version's Session is closed, what it held collected (at most
  once a second: a collection holds the GIL) and the allocator's free pages returned.

The plain `ModelManager` (everything loaded at start) stays the default, as in TF Serving.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from graphserve.core.errors import (
    ConfigError,
    DeadlineExceeded,
    InvalidInput,
    ModelLoadError,
    NotFound,
    ServingError,
    Unavailable,
)
from graphserve.core.savedmodel import predicted_resident_bytes, variables_bytes
from graphserve.serving import heap
from graphserve.serving.config import ModelConfig
from graphserve.serving.loaders import load_version
from graphserve.serving.manager import ModelManager
from graphserve.serving.options import Residency, format_bytes
from graphserve.serving.registry import ModelRegistry
from graphserve.serving.runner import Runner
from graphserve.serving.servable import VersionRef

__all__ = ["PIN_LABEL", "OnDemandManager", "Residency", "format_bytes"]

log = logging.getLogger("graphserve.manager")

PIN_LABEL = "pinned"  # version_labels { key: "pinned" value: N } keeps version N resident
NOT_LOADED = "not loaded: loads on its first request (--load-on-demand)"
_COLLECT_EVERY = 1.0  # s: at most one collection of unloaded versions per second
_NO_DEADLINE = 1e7  # s: a deadline further away is none
_FRESH = 1.0  # s a version loaded on demand waits for its requests before it may be unloaded
_ROOM_WAIT = 2.0  # s a load waits for versions in use (or fresh) to be released, then gives up

Key = tuple[str, int]


def _settle(pending: Future[None], error: ServingError | None) -> None:
    """A load asked for is done: its requests go on, or get `error`."""
    if pending.done():  # a waiter gave up on it (cancelled); nothing to tell
        return
    if error is None:
        pending.set_result(None)
    else:
        pending.set_exception(error)


@dataclass
class ResidencyStats:
    """What /monitoring/prometheus/metrics reports (serving.metrics reads it at scrape time)."""

    loads: Counter[tuple[str, str]] = field(default_factory=Counter)  # (model, ok|failed)
    evictions: Counter[tuple[str, str]] = field(default_factory=Counter)  # (model, reason)
    load_seconds: float = 0.0  # spent loading, all models


class OnDemandManager(ModelManager):
    """A ModelManager that loads a version on its first request (`demand`) and unloads the least
    recently used ones to stay within `residency`."""

    def __init__(
        self,
        registry: ModelRegistry,
        models: Sequence[ModelConfig],
        load: Callable[[Path], Runner] = load_version,
        residency: Residency | None = None,
    ) -> None:
        super().__init__(registry, models, load)
        self.residency = residency or Residency()
        self.stats = ResidencyStats()
        self.measured: dict[Key, int] = {}  # resident bytes of each version loaded so far
        # Loads asked for, in order; a request waits on its Future (a thread, or a coroutine:
        # no thread is held while a load is awaited on an event loop)
        self._queue: OrderedDict[Key, Future[None]] = OrderedDict()
        self._wake = threading.Condition()
        self._loader: threading.Thread | None = None
        self._collected = 0.0  # when unloaded versions were last collected
        self._uncollected = 0  # versions unloaded since

    # -- start, stop --------------------------------------------------------------------------

    def start(self) -> OnDemandManager:
        """Check the budget against the models' predicted sizes (ConfigError when it cannot
        hold one), load the pinned versions, mark the rest START; raises ModelLoadError for a
        model with no version to serve or a pinned version that fails to load."""
        self._check_budget()
        self._prime()
        self.sync()
        problems = []
        for name in self.source.names():
            statuses = self.registry.known(name)
            if not statuses:
                problems.append(
                    f"model {name!r} has no servable version: {self.source.why_nothing(name)}"
                )
            problems += [
                f"model {name!r} version {v} is pinned and failed to load: "
                f"{self._errors.get((name, v), s.error)}"
                for v, s in statuses.items()
                if s.state == "END" and s.error and self._pinned((name, v))
            ]
        if problems:
            raise ModelLoadError("; ".join(problems))
        self._loader = threading.Thread(target=self._load_loop, name="model-loader", daemon=True)
        self._loader.start()
        return self

    def stop(self) -> None:
        """Stop polling and loading; requests still waiting for a load get UNAVAILABLE."""
        super().stop()
        with self._wake:
            waiting, self._queue = list(self._queue.values()), OrderedDict()
            self._wake.notify_all()
        for pending in waiting:
            _settle(pending, Unavailable("the server is shutting down; retry on another replica"))
        if self._loader is not None:
            self._loader.join(timeout=5)

    def _check_budget(self) -> None:
        budget = self.residency
        sizes: dict[Key, int] = {}
        for name in self.source.names():
            for version in self.source.aspired(name, self.source.versions(name)):
                where = self.source.where(name, version)
                if where is not None:
                    sizes[(name, version)] = predicted_resident_bytes(where)
        if not sizes:
            return
        pinned = [key for key in sizes if self._pinned(key)]
        if budget.max_models is not None and len(pinned) > budget.max_models:
            raise ConfigError(
                f"--max-resident-models {budget.max_models} is smaller than the {len(pinned)} "
                f"pinned versions ({_names(pinned)})"
            )
        if budget.max_bytes is None:
            return
        smallest = min(sizes, key=sizes.__getitem__)
        if sizes[smallest] > budget.max_bytes:
            raise ConfigError(
                f"--max-resident-bytes {format_bytes(budget.max_bytes)} is smaller than one "
                f"model: the smallest, {smallest[0]} version {smallest[1]}, is predicted to hold "
                f"{format_bytes(sizes[smallest])} (`graphserve inspect` shows it); give at least "
                "that"
            )
        held = sum(sizes[key] for key in pinned)
        if held > budget.max_bytes:
            raise ConfigError(
                f"--max-resident-bytes {format_bytes(budget.max_bytes)} is smaller than the "
                f"pinned versions' predicted {format_bytes(held)} ({_names(pinned)})"
            )

    def _prime(self) -> None:
        """Load one version and unload it before any is measured: TensorFlow's first load in a
        process allocates what every later one shares (kernels, thread pools: 19 MB here), which
        would otherwise be counted as that version's."""
        for name in self.source.names():
            for version in self.source.aspired(name, self.source.versions(name))[-1:]:
                try:
                    runner = self.source.load(name, version, self.source.where(name, version))
                except Exception as exc:  # its own load reports it, on demand
                    log.debug("priming with %s version %d failed: %s", name, version, exc)
                    continue
                runner.close()
                del runner
                heap.release(heap.epoch())
                heap.trim()
                return

    def _pinned(self, key: Key) -> bool:
        return self.source.labels(key[0]).get(PIN_LABEL) == key[1]

    # -- the manager's pass ---------------------------------------------------------------------

    def _sync_model(self, name: str) -> None:
        """Reload resident versions whose files changed, load the pinned version, unload what
        is no longer aspired, and show every aspired version that is not resident as START."""
        on_disk = self.source.versions(name)
        self._reload_changed(name)
        aspired = self.source.aspired(name, [v for v in on_disk if not self._broken(name, v)])
        resident = {s.version for s in self.registry.available(name)}
        for version in aspired:
            if version not in resident and self._pinned((name, version)):
                self._load_one(name, version)
        for version in sorted(resident):
            problem = self._problem(name, version)
            if version not in aspired:
                log.info("%s: unloading version %d", name, version)
                self._unload(name, version, problem)
            else:
                self._report_serving(name, version, problem)
        known = self.registry.known(name)
        for version in aspired:
            status = known.get(version)
            if status is None or (status.state == "END" and not status.error):
                self.registry.set_status(name, version, "START", NOT_LOADED)
        self.registry.set_labels(name, self.source.labels(name))

    def _report_serving(self, name: str, version: int, problem: str) -> None:
        if problem:
            super()._report_serving(name, version, problem)
            return
        note = self._resident_note((name, version))
        if self.registry.known(name)[version].error != note:
            self.registry.set_status(name, version, "AVAILABLE", note)

    def _resident_note(self, key: Key) -> str:
        """An AVAILABLE version's status message: what it holds (code OK; no error)."""
        held = self.measured.get(key)
        pinned = ", pinned" if self._pinned(key) else ""
        return f"resident: {format_bytes(held)} measured at load{pinned}" if held else ""

    # -- loading on demand -----------------------------------------------------------------------

    def demand(self, name: str, version: VersionRef, deadline: float | None) -> float | None:
        """Have `version` of `name` (a number, a label, None for the newest) loaded, waiting
        until `deadline` (time.monotonic()) at most; returns the seconds waited, or None when
        this manager has no such model (the caller's NotFound stands). Raises NotFound when
        the version is not one served or failed to load, InvalidInput for an unknown label,
        DeadlineExceeded, and Unavailable when the budget has no room."""
        asked = self._ask(name, version, deadline)
        if asked is None:
            return None
        key, pending, left = asked
        started = time.monotonic()
        try:
            pending.result(left)
        except TimeoutError:
            raise self._too_late(key) from None
        return time.monotonic() - started

    async def demand_async(
        self, name: str, version: VersionRef, deadline: float | None
    ) -> float | None:
        """`demand` for a coroutine: the request awaits its load holding no thread."""
        asked = self._ask(name, version, deadline)
        if asked is None:
            return None
        key, pending, left = asked
        started = time.monotonic()
        try:  # shielded: a request that stops waiting does not cancel the others' load
            await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(pending)), left)
        except TimeoutError:
            raise self._too_late(key) from None
        return time.monotonic() - started

    def _ask(
        self, name: str, version: VersionRef, deadline: float | None
    ) -> tuple[Key, Future[None], float | None] | None:
        """Queue the load of the version a request names (or join the one queued); the key,
        the load's Future and the seconds left to wait for it."""
        if name not in self.source.names():
            return None
        key = (name, self._number(name, version))
        with self._wake:
            pending = self._queue.get(key)
            if pending is None:
                pending = self._queue[key] = Future()
                self._wake.notify_all()
        left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        if left is not None and left > _NO_DEADLINE:  # gRPC's "none": the end of time
            left = None
        return key, pending, left

    def _too_late(self, key: Key) -> DeadlineExceeded:
        return DeadlineExceeded(
            f"the request's deadline passed while model {key[0]!r} version {key[1]} loaded on "
            f"demand ({len(self._queue)} loads queued); it will be resident for the next request"
        )

    def _number(self, name: str, version: VersionRef) -> int:
        """The version a request names, among those this server serves."""
        on_disk = self.source.versions(name)
        aspired = self.source.aspired(name, on_disk)
        if isinstance(version, str):
            labels = self.source.labels(name)
            if version not in labels:
                known = ", ".join(repr(k) for k in labels) or "none"
                raise InvalidInput(
                    f"Unrecognized servable version label: {version} (model {name!r} has labels "
                    f"{known})"
                )
            version = labels[version]
        loadable = [v for v in aspired if not self._broken(name, v)]
        if version is None:
            if loadable:
                return loadable[-1]
            version = aspired[-1] if aspired else None
        if version is None or version not in aspired:
            served = ", ".join(map(str, aspired)) or "none"
            raise NotFound(
                f"Servable not found for request: {_spec(name, version)}: the versions served "
                f"are {served} ({self.source.why_nothing(name) if not aspired else 'on demand'})"
            )
        if self._broken(name, version):
            raise NotFound(
                f"Servable not found for request: {_spec(name, version)}: it failed to load: "
                f"{self._errors.get((name, version), 'unknown error')}"
            )
        return version

    def _load_loop(self) -> None:
        """The loader thread: the queued loads, one at a time, in order; idle unloading."""
        idle = self.residency.idle_unload
        tick = min(max(idle / 4, 0.05), 1.0) if idle else 1.0
        while not self._stop.is_set():
            with self._wake:
                if not self._queue:
                    self._wake.wait(tick)
                key = next(iter(self._queue), None)
                pending = self._queue.get(key) if key is not None else None
            try:
                if key is not None and pending is not None:
                    error = self._load_demanded(key)
                    with self._wake:
                        self._queue.pop(key, None)
                    _settle(pending, error)
                if idle:
                    self._unload_idle(idle)
                self._collect()
            except Exception:  # the loader must outlive any one load
                log.exception("the on-demand loader failed")
                if pending is not None and not pending.done():
                    with self._wake:
                        self._queue.pop(key, None)  # type: ignore[arg-type]
                    _settle(pending, Unavailable(f"loading {key} failed unexpectedly; see the log"))

    def _load_demanded(self, key: Key) -> ServingError | None:
        """Load `key` for the requests waiting on it; the error they get, or None."""
        name, version = key
        with self._sync_lock:
            if name not in self.source.names():
                return NotFound(
                    f"Servable not found for request: {_spec(name, version)}: the "
                    "model was removed from the config while it waited to load"
                )
            if any(s.version == version for s in self.registry.available(name)):
                return None  # loaded meanwhile (pinned, or asked twice)
            try:
                self._load_one(name, version)
            except Unavailable as exc:
                return exc
        if any(s.version == version for s in self.registry.available(name)):
            return None
        return NotFound(
            f"Servable not found for request: {_spec(name, version)}: it failed to load: "
            f"{self._errors.get(key, 'unknown error')}"
        )

    def _load_one(self, name: str, version: int) -> None:
        """Make room, load, and measure what the load took (RSS before and after, loads being
        serial); raises Unavailable when the budget has no room for it."""
        key = (name, version)
        where = self.source.where(name, version)
        if key not in self._loaded:  # not a reload of a resident version (its files changed)
            expected = self.measured.get(key) or (
                predicted_resident_bytes(where) if where is not None else 0
            )
            self._make_room(key, expected)
        heap.trim()  # what unloading freed, returned to the system
        before = heap.allocated_bytes()
        started = time.perf_counter()
        super()._load_one(name, version)
        seconds = time.perf_counter() - started
        if key not in self._loaded:
            self.stats.loads[(name, "failed")] += 1
            return
        self.stats.loads[(name, "ok")] += 1
        self.stats.load_seconds += seconds
        self.measured[key] = self._measure(key, heap.allocated_bytes() - before, where)
        log.info(
            "%s: version %d loaded in %.0f ms, resident %s",
            name,
            version,
            seconds * 1e3,
            format_bytes(self.measured[key]),
        )
        self._report_serving(name, version, "")
        self._make_room(key, 0)  # measured more than predicted: others make way

    def _measure(self, key: Key, grown: int, where: Path | None) -> int:
        """What `key` holds: the least the allocator's bytes in use grew by over its loads so
        far (other threads allocate meanwhile, so one load can read high), and never less than
        its variables."""
        floor = variables_bytes(where) if where is not None else 1
        earlier = self.measured.get(key)
        least = grown if earlier is None else min(earlier, grown)
        return max(least, floor, 1)

    # -- eviction --------------------------------------------------------------------------------

    def resident(self) -> dict[Key, int]:
        """Each resident version's bytes (measured; predicted until measured)."""
        return {key: self.measured.get(key, 0) for key in list(self._loaded)}

    def _make_room(self, key: Key, expected: int) -> None:
        """Unload least recently used versions until `key` (`expected` bytes; resident already
        when `expected` is 0) fits the budget. Raises Unavailable when what is left is pinned
        or in use past `_ROOM_WAIT`."""
        budget = self.residency
        if budget.max_bytes is None and budget.max_models is None:
            return
        adding = 1 if expected else 0
        give_up = time.monotonic() + _ROOM_WAIT
        while True:
            resident = self.resident()
            over_models = budget.max_models is not None and (
                len(resident) + adding > budget.max_models
            )
            over_bytes = budget.max_bytes is not None and (
                sum(resident.values()) + expected > budget.max_bytes
            )
            if not (over_models or over_bytes):
                return
            reason = "models" if over_models else "bytes"
            for victim in self._least_recently_used(exclude=key):
                if self._evict(victim, reason):
                    break
            else:
                if time.monotonic() < give_up:
                    time.sleep(0.01)  # versions in use: wait for their requests to end
                    continue
                if expected == 0:
                    return  # resident already: it stays, and the next load makes room
                raise Unavailable(
                    f"no room to load model {key[0]!r} version {key[1]} "
                    f"({format_bytes(expected)}): the {len(resident)} resident versions hold "
                    f"{format_bytes(sum(resident.values()))} under {budget.describe()}, and "
                    "every one is pinned or serving requests; retry"
                )

    def _least_recently_used(self, exclude: Key) -> list[Key]:
        """Resident versions that may be unloaded, least recently used first: not pinned, not
        in use, and not loaded for requests that have yet to take it (under a small budget a
        version loaded for one request was unloaded for another's before the first ran, which
        then got NOT_FOUND)."""
        used: list[tuple[float, Key]] = []
        now = time.monotonic()
        for name in {key[0] for key in self._loaded}:
            for servable in self.registry.available(name):
                key = (name, servable.version)
                lease = servable.lease
                if key == exclude or self._pinned(key) or lease.count:
                    continue
                if not lease.taken and lease.last_used > now - _FRESH:
                    continue  # loaded for requests that have yet to take it
                used.append((lease.last_used, key))
        return [key for _, key in sorted(used)]

    def _evict(self, key: Key, reason: str) -> bool:
        """Unload `key` if no request holds it; it is back to START. True if it was."""
        name, version = key
        why = (
            f"unloaded after {self.residency.idle_unload or 0:g} s unused (--idle-unload)"
            if reason == "idle"
            else f"unloaded, least recently used under {self.residency.describe()}"
        )
        servable = self.registry.evict(name, version, f"{why}; loads again on its next request")
        if servable is None:
            return False
        self._loaded.pop(key, None)
        self._paths.pop(key, None)
        try:
            servable.runner.close()
        except Exception:
            log.exception("%s: closing version %d failed", name, version)
        del servable
        self.stats.evictions[(name, reason)] += 1
        self._uncollected += 1
        log.info("%s: version %d %s", name, version, why)
        return True

    def _unload_idle(self, idle: float) -> None:
        cutoff = time.monotonic() - idle
        with self._sync_lock:
            for key in self._least_recently_used(exclude=("", -1)):
                name, version = key
                servables = {s.version: s for s in self.registry.available(name)}
                servable = servables.get(version)
                if servable is not None and servable.lease.last_used < cutoff:
                    self._evict(key, "idle")

    def _collect(self) -> None:
        """Free what unloaded versions held in reference cycles (their graphs: about 150 objects
        and 0.6 MB for the MLP; closing frees the rest) and give it back to the system: at most
        once a second, as a collection holds the GIL."""
        if not self._uncollected:
            return
        now = time.monotonic()
        if now - self._collected < _COLLECT_EVERY:
            return
        heap.release(heap.epoch())
        heap.trim()
        self._collected, self._uncollected = now, 0


def _spec(name: str, version: int | None) -> str:
    return f"Latest({name})" if version is None else f"Specific({name}, {version})"


def _names(keys: Sequence[Key]) -> str:
    return ", ".join(f"{name} v{version}" for name, version in keys)
