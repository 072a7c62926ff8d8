"""The model manager: what TF Serving's AspiredVersionsManager does, over one source.

The manager is the only writer of the servable map (serving.registry). For each model of its
source (serving.sources) it asks which versions exist and which are aspired, loads new ones through
the source's loader (serving.loaders: load, warm-up, batching) and only when they are AVAILABLE
unloads the versions no longer aspired to: availability first, as TF Serving's default
AvailabilityPreservingPolicy. An unloaded or replaced version is retired: once its last request
has finished, its runner is closed (batch threads stop, the Session is freed).

A version that fails to load is reported in status (END, with the error) and does not disturb
the others; it is retried only when its files change. `start()` loads synchronously;
`poll(seconds)` repeats that in a background thread.

Each pass also fingerprints the files of every loaded version (relative path, size, mtime). When
they changed, the version is loaded again: if that works the new load is swapped in; if not, the
version counts as broken, like one that never loaded, and is unloaded once another aspired version
is AVAILABLE. A loaded version that is broken or whose directory was removed, and that nothing can
replace, keeps serving the copy in memory; its status (AVAILABLE, or END once unloaded) says why.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from graphserve.core.errors import GraphserveError, ModelLoadError
from graphserve.serving import heap
from graphserve.serving.config import ModelConfig
from graphserve.serving.loaders import load_version
from graphserve.serving.runner import Runner
from graphserve.serving.servable import Servable, VersionStatus
from graphserve.serving.sources import FileSystemSource, Fingerprint, Source

__all__ = ["Agreement", "ModelManager", "ServableMap", "load_version", "retire"]

log = logging.getLogger("graphserve.manager")


_RELEASE_PAUSES = (0.0, 0.05, 0.25, 1.0, 5.0)  # s before each collection of a retired version


def retire(servable: Servable, say_every: float = 30.0, free: bool = True) -> threading.Thread:
    """Close `servable`'s runner once its last request has finished, in a daemon thread (the
    manager's pass goes on), then, with `free`, collect what it held (serving.heap). TF Serving
    waits for the last handle the same way."""
    held: list[object] = [servable]  # emptied by the thread once closed, before it collects
    thread = threading.Thread(
        target=_close, args=(held, say_every, free), name=f"retire-{servable.name}", daemon=True
    )
    thread.start()
    return thread


def _close(held: list[object], say_every: float, free: bool) -> None:
    servable = held[0]
    assert isinstance(servable, Servable)
    while not servable.lease.wait_idle(say_every):
        log.warning(
            "%s: version %d is unloaded but still has %d requests in flight",
            servable.name,
            servable.version,
            servable.lease.count,
        )
    try:
        servable.runner.close()
    except Exception:
        log.exception("%s: closing version %d failed", servable.name, servable.version)
    log.info("%s: version %d closed", servable.name, servable.version)
    loaded_at = servable.loaded_at
    try:
        runner: Callable[[], object | None] = weakref.ref(servable.runner)
    except TypeError:  # a runner that takes no weak reference: one collection, as before
        runner = lambda: None  # noqa: E731
    del servable
    held.clear()  # our last reference: what the version held is garbage once the manager's is
    if not free:
        return
    # The manager's pass may still hold the version (its `_unload` frame) when this thread gets
    # here: a collection then finds it alive, and it would wait for a later full collection. So
    # collect again, a little later each time, until it is gone.
    for pause in _RELEASE_PAUSES:
        time.sleep(pause)
        heap.release(loaded_at)
        if runner() is None:
            return
    log.warning(
        "a retired version is still referenced after %d collections: it is freed when that "
        "reference goes",
        len(_RELEASE_PAUSES),
    )


def _load_error(exc: Exception, path: Path | None) -> str:
    """The error, and the version directory if the error does not name it (a truncated
    variables file says only "Read less bytes than requested"). Our own errors say what to do
    already; TensorFlow's get their type."""
    message = str(exc) if isinstance(exc, GraphserveError) else f"{type(exc).__name__}: {exc}"
    return message if path is None or str(path) in message else f"{message} (loading {path})"


def _status_line(message: str) -> str:
    """A load error as GetModelStatus reports it: one line, bounded."""
    return message.strip().splitlines()[0][:500] if message.strip() else message


class ServableMap(Protocol):
    """What the managers (this one, and serving.ondemand's) read and write of the servable map,
    serving.registry.ModelRegistry: named here, so that the map, whose one-model shortcuts run
    a manager, is not imported back."""

    def add(self, servable: Servable, state: str = "AVAILABLE") -> Servable | None: ...

    def remove(self, name: str, version: int, error: str = "") -> Servable | None: ...

    def evict(self, name: str, version: int, why: str) -> Servable | None: ...

    def set_status(self, name: str, version: int, state: str, error: str = "") -> None: ...

    def set_labels(self, name: str, labels: dict[str, int]) -> None: ...

    def available(self, name: str) -> list[Servable]: ...

    def known(self, name: str) -> Mapping[int, VersionStatus]: ...


class Agreement(Protocol):
    """How the managers of several workers serving as one server (serving.workers) agree on
    each version they load: every worker loads it, then all serve it, or none does."""

    def loaded(self, name: str, version: int, fingerprint: Fingerprint, error: str) -> str:
        """This worker loaded the version (`error` "") or failed to (why); returns once every
        worker has said, "" when all loaded it, else why it is not served."""
        ...

    def added(self, name: str, version: int, fingerprint: Fingerprint) -> None:
        """This worker takes requests for the version (its status still LOADING); returns once
        every worker does, for each to report it AVAILABLE."""
        ...


class ModelManager:
    """Loads, swaps and unloads what `source` aspires to; `models` (ModelConfig) make a
    FileSystemSource loading each version with `load`. With an `agreement`, the workers of one
    server load each version together (serving.workers)."""

    def __init__(
        self,
        registry: ServableMap,
        models: Sequence[ModelConfig] | Source,
        load: Callable[[Path], Runner] = load_version,
        agreement: Agreement | None = None,
    ) -> None:
        self.registry = registry
        self.agreement = agreement
        self.source: Source = (
            models if not isinstance(models, Sequence) else FileSystemSource(models, load)
        )
        # Versions whose files failed to load: those files' fingerprint, and the error.
        self._failed: dict[tuple[str, int], tuple[Fingerprint, str]] = {}
        # Loaded versions: the fingerprint of the files they were loaded from.
        self._loaded: dict[tuple[str, int], Fingerprint] = {}
        # ... and where they were loaded from, as it was named on disk.
        self._paths: dict[tuple[str, int], Path | None] = {}
        # The last load error of each version, whole (status shows its first line).
        self._errors: dict[tuple[str, int], str] = {}
        self._sync_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Versions being retired (closed, then collected): a server that stops waits for them.
        self._retiring: list[threading.Thread] = []

    @property
    def models(self) -> list[ModelConfig]:
        """The configured models of a file-system source ([] for a static one)."""
        source = self.source
        return list(source.models.values()) if isinstance(source, FileSystemSource) else []

    def start(self) -> ModelManager:
        """Load every model's aspired versions now; raises ModelLoadError naming each model that
        ends up with no available version (a server that cannot serve should not start)."""
        self.sync()
        problems = []
        for name in self.source.names():
            statuses = self.registry.known(name)
            if not any(s.state == "AVAILABLE" for s in statuses.values()):
                errors = [
                    f"version {s.version}: {self._errors.get((name, s.version), s.error)}"
                    for s in statuses.values()
                    if s.error
                ]
                reason = "; ".join(errors) if errors else self.source.why_nothing(name)
                problems.append(f"model {name!r} has no servable version: {reason}")
        if problems:
            raise ModelLoadError("; ".join(problems))
        return self

    def poll(self, seconds: float) -> None:
        """Re-scan the source every `seconds` in a daemon thread until `stop()`."""
        if seconds <= 0 or self._thread is not None:
            return

        def loop() -> None:
            while not self._stop.wait(seconds):
                try:
                    self.sync()
                except Exception:  # never let one bad scan end polling
                    log.exception("model poll failed")

        self._thread = threading.Thread(target=loop, name="model-poll", daemon=True)
        self._thread.start()

    def reconfigure(self, models: Sequence[ModelConfig]) -> None:
        """Serve `models` from now on (a model config file re-read while serving): load the
        added ones, unload every version of the removed ones, keep the unchanged ones as they
        are. A model whose base path changed loads its versions from the new path, each one
        replacing its old copy once loaded (availability first). As in TF Serving, a removed
        model's versions stay in its status as END, and requests for it get NOT_FOUND."""
        source = self.source
        if not isinstance(source, FileSystemSource):
            raise TypeError("only a file-system source can be reconfigured")
        with self._sync_lock:
            before = dict(source.models)
            source.configure(models)
            after = source.models
            for name, model in before.items():
                if name in after and after[name].base_path == model.base_path:
                    continue
                for key in [k for k in {*self._failed, *self._paths} if k[0] == name]:
                    self._failed.pop(key, None)
                    self._paths.pop(key, None)
                for servable in self.registry.available(name):
                    key = (name, servable.version)
                    if name in after:  # the next pass loads it from the new base path
                        self._loaded[key] = None
                        continue
                    log.info("%s: removed from the config, unloading version %d", *key)
                    self._unload(name, servable.version, "")
                if name not in after:
                    self.registry.set_labels(name, {})
        self.sync()
        for model in models:  # a failed load is logged where it fails; nothing tried is not
            if model.name not in before and not self.registry.known(model.name):
                log.error(
                    "%s: added, nothing to load: %s", model.name, source.why_nothing(model.name)
                )

    def stop(self) -> None:
        """Stop polling (what is loaded keeps serving)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def unload_all(self, timeout: float = 5.0) -> None:
        """Stop polling, unload every version and close each runner once its requests ended
        (up to `timeout` s each): what a server that stops does."""
        self.stop()
        with self._sync_lock:
            for name in self.source.names():
                for servable in self.registry.available(name):
                    # (a server that stops has no heap to keep small)
                    self._unload(name, servable.version, "", free=False)
            retiring, self._retiring = self._retiring, []
        for thread in retiring:  # those retired earlier too: none outlives the server
            thread.join(timeout)

    def sync(self) -> None:
        """One pass over every model: reload loaded versions whose files changed, load what is
        aspired and new, then unload what is not (or is broken) once something else serves."""
        with self._sync_lock:
            for name in self.source.names():
                self._sync_model(name)

    def _sync_model(self, name: str) -> None:
        on_disk = self.source.versions(name)
        self._reload_changed(name)
        self._load_missing(name, self.source.aspired(name, on_disk))
        # A version that fails to load does not count: with `latest`, the newest loadable
        # version serves in its place (a corrupt new version beside a good one).
        aspired = self.source.aspired(name, [v for v in on_disk if not self._broken(name, v)])
        self._load_missing(name, aspired)
        available = {s.version for s in self.registry.available(name)}
        for version in sorted(available):
            problem = self._problem(name, version)
            # Availability first: keep an old version until an aspired one serves in its place.
            if version not in aspired and available & set(aspired):
                log.info("%s: unloading version %d", name, version)
                self._unload(name, version, problem)
            else:
                self._report_serving(name, version, problem)
        self.registry.set_labels(name, self.source.labels(name))

    def _unload(self, name: str, version: int, problem: str, free: bool = True) -> None:
        """Take a version out of the map (new requests no longer reach it) and retire it."""
        self.registry.set_status(name, version, "UNLOADING", problem)
        removed = self.registry.remove(name, version, problem)
        self._loaded.pop((name, version), None)
        self._paths.pop((name, version), None)
        if removed is not None:
            self._retire(removed, free)

    def _retire(self, servable: Servable, free: bool = True) -> None:
        self._retiring = [t for t in self._retiring if t.is_alive()]
        self._retiring.append(retire(servable, free=free))

    def _reload_changed(self, name: str) -> None:
        """Load again each loaded version whose files changed since it was loaded (unless those
        files already failed; a removed directory has nothing to load)."""
        for servable in self.registry.available(name):
            key = (name, servable.version)
            fingerprint = self.source.fingerprint(self._path(name, servable.version))
            if fingerprint is None or fingerprint == self._loaded.get(key):
                continue
            if not self._broken(name, servable.version):
                log.info("%s: the files of version %d changed", name, servable.version)
                self._load_one(name, servable.version)

    def _load_missing(self, name: str, versions: list[int]) -> None:
        loaded = {s.version for s in self.registry.available(name)}
        for version in versions:
            if version not in loaded and not self._broken(name, version):
                self._load_one(name, version)

    def _broken(self, name: str, version: int) -> bool:
        """It failed to load, and its files have not changed since."""
        failed = self._failed.get((name, version))
        return failed is not None and failed[0] == self.source.fingerprint(
            self._path(name, version)
        )

    def _path(self, name: str, version: int) -> Path | None:
        """Where a version was loaded from (a removed directory keeps its name), else where it
        is now."""
        key = (name, version)
        return self._paths[key] if key in self._paths else self.source.where(name, version)

    def _problem(self, name: str, version: int) -> str:
        """Why a loaded version should stop serving, "" when nothing is wrong with it."""
        path = self._path(name, version)
        if path is not None and not path.is_dir():
            return f"version directory {path} was removed while serving"
        failed = self._failed.get((name, version))
        return f"its files changed on disk and no longer load: {failed[1]}" if failed else ""

    def _report_serving(self, name: str, version: int, problem: str) -> None:
        """Keep a version that still serves AVAILABLE, its status saying what is wrong if
        anything (and no longer once that is fixed)."""
        message = f"{problem}; serving the copy in memory until a version can replace it"
        message = message if problem else ""
        if self.registry.known(name)[version].error != message:
            if message:
                log.warning("%s: version %d: %s", name, version, message)
            self.registry.set_status(name, version, "AVAILABLE", message)

    def _load_one(self, name: str, version: int) -> None:
        """Load a version and make it AVAILABLE (a loaded one is replaced by the new load and
        retired), or record why it failed (a loaded one keeps serving; `_sync_model` decides
        its fate)."""
        path = self.source.where(name, version)
        fingerprint = self.source.fingerprint(path)
        if path is not None and fingerprint is None:
            # Removed since this pass listed it (a pusher cleaning up a broken version): there
            # is nothing to load, and trying would replace why it failed with "does not exist".
            return
        key = (name, version)
        serving = key in self._loaded  # a reload: the version serves on meanwhile
        log.info("%s: loading version %d%s", name, version, f" from {path}" if path else "")
        if not serving:
            self.registry.set_status(name, version, "LOADING")
        loaded_at = heap.epoch()
        agreement = self.agreement
        try:
            runner = self.source.load(name, version, path)
        except Exception as exc:
            message = _load_error(exc, path)
            verbose = log.isEnabledFor(logging.DEBUG)  # serve --verbose
            log.error(
                "%s: version %d failed to load: %s%s", name, version, message,
                "" if verbose else " (--verbose logs the error's full traceback)",
                exc_info=exc if verbose else None,
            )  # fmt: skip
            if agreement is not None:  # the other workers must not serve it either
                agreement.loaded(name, version, fingerprint, _status_line(message))
            self._load_failed(key, fingerprint, message, serving)
            return
        if agreement is not None:
            refused = agreement.loaded(name, version, fingerprint, "")
            if refused:
                log.error("%s: version %d is not served: %s", name, version, refused)
                self._retire(Servable(name, version, runner, loaded_at=loaded_at))
                self._load_failed(key, fingerprint, refused, serving)
                return
        self._failed.pop(key, None)
        self._loaded[key] = fingerprint
        self._paths[key] = path
        together = agreement is not None and not serving
        servable = Servable(name, version, runner, loaded_at=loaded_at)
        replaced = self.registry.add(servable, "LOADING" if together else "AVAILABLE")
        if replaced is not None:
            self._retire(replaced)
        if together:
            assert agreement is not None
            agreement.added(name, version, fingerprint)  # every worker takes requests for it
            self.registry.set_status(name, version, "AVAILABLE")
        log.info("%s: version %d is AVAILABLE", name, version)

    def _load_failed(
        self, key: tuple[str, int], fingerprint: Fingerprint, message: str, serving: bool
    ) -> None:
        """Record why a version did not load (a loaded copy keeps serving meanwhile)."""
        self._failed[key] = (fingerprint, _status_line(message))
        self._errors[key] = message
        if not serving:
            self.registry.set_status(*key, "END", _status_line(message))
