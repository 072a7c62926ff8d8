"""The model manager: what TF Serving's ServerCore does for a file-system model source.

For each configured model it lists the numeric versions under the base path, picks the ones the
version policy aspires to, loads new ones (GraphRunner, then the version's warm-up records) and
only when they are AVAILABLE unloads the versions no longer aspired to: availability first, as
TF Serving's default AvailabilityPreservingPolicy. A version that fails to load is reported in
status (END, with the error) and does not disturb the others; it is retried only when its files
change. `start()` loads synchronously; `poll(seconds)` repeats that in a background thread.

Each pass also fingerprints the files of every loaded version (relative path, size, mtime). When
they changed, the version is loaded again: if that works the new load is swapped in; if not, the
version counts as broken, like one that never loaded, and is unloaded once another aspired version
is AVAILABLE. A loaded version that is broken or whose directory was removed, and that nothing can
replace, keeps serving the copy in memory; its status (AVAILABLE, or END once unloaded) says why.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from graphserve.core.versions import existing_versions, version_path
from graphserve.model.warmup import replay_warmup
from graphserve.serving.config import ModelConfig
from graphserve.serving.registry import ModelLoadError, ModelRegistry, Servable
from graphserve.serving.runners import Runner, load_runner

__all__ = ["ModelManager", "load_version"]

log = logging.getLogger("graphserve.manager")

# A version directory's files as (relative path, size, mtime_ns); None when the directory is gone.
Fingerprint = tuple[tuple[str, int, int], ...] | None


def load_version(path: Path, allow_ops: Collection[str] = ()) -> Runner:
    """Load one SavedModel version and run its warm-up records; raises on any failure (a graph
    with flagged ops not in `allow_ops` is refused; `load_runner` picks how it runs)."""
    runner = load_runner(path, allow_ops)
    try:
        count = replay_warmup(path, runner.run)
    except Exception as exc:
        raise ModelLoadError(f"warm-up record of {path} failed: {exc}") from exc
    if count:
        log.info("%s: replayed %d warm-up records", path, count)
    return runner


def _fingerprint(path: Path) -> Fingerprint:
    """What changes when any file of the version changes; stat calls only, cheap enough for every
    poll."""
    if not path.is_dir():
        return None
    files = []
    for root, _dirs, names in os.walk(path):
        for name in names:
            file = Path(root, name)
            try:
                stat = file.stat()
            except OSError:  # removed while we looked: the next pass sees the change
                continue
            files.append((str(file.relative_to(path)), stat.st_size, stat.st_mtime_ns))
    return tuple(sorted(files))


def _load_error(exc: Exception, path: Path) -> str:
    """One line for status: the error, and the version directory if the error does not name it
    (a truncated variables file says only "Read less bytes than requested")."""
    message = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
    return message if str(path) in message else f"{message} (loading {path})"


class ModelManager:
    def __init__(
        self,
        registry: ModelRegistry,
        models: Sequence[ModelConfig],
        load: Callable[[Path], Runner] = load_version,
    ) -> None:
        self.registry = registry
        self.models = list(models)
        self._load = load
        # Versions whose files failed to load: those files' fingerprint, and the error.
        self._failed: dict[tuple[str, int], tuple[Fingerprint, str]] = {}
        # Loaded versions: the fingerprint of the files they were loaded from.
        self._loaded: dict[tuple[str, int], Fingerprint] = {}
        # ... and the directory they were loaded from, as it was named on disk.
        self._paths: dict[tuple[str, int], Path] = {}
        self._sync_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> ModelManager:
        """Load every model's aspired versions now; raises ModelLoadError naming each model that
        ends up with no available version (a server that cannot serve should not start)."""
        self.sync()
        problems = []
        for model in self.models:
            statuses = self.registry.known(model.name)
            if not any(s.state == "AVAILABLE" for s in statuses.values()):
                errors = [f"version {s.version}: {s.error}" for s in statuses.values() if s.error]
                reason = "; ".join(errors) if errors else self._why_nothing(model)
                problems.append(f"model {model.name!r} has no servable version: {reason}")
        if problems:
            raise ModelLoadError("; ".join(problems))
        return self

    def _why_nothing(self, model: ModelConfig) -> str:
        if not model.base_path.is_dir():
            return f"base path {model.base_path} does not exist"
        on_disk = existing_versions(model.base_path)
        if not on_disk:
            return (
                f"no versions: expected numeric directories such as {model.base_path / '1'} "
                f"(run `graphserve export ... --base-path {model.base_path.parent}`)"
            )
        return f"the {model.policy.describe()} policy picks none of versions {on_disk}"

    def poll(self, seconds: float) -> None:
        """Re-scan the base paths every `seconds` in a daemon thread until `stop()`."""
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
        with self._sync_lock:
            before = {m.name: m for m in self.models}
            self.models = list(models)
            after = {m.name: m for m in self.models}
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
                    self.registry.set_status(name, servable.version, "UNLOADING")
                    self.registry.remove(name, servable.version)
                    self._loaded.pop(key, None)
                if name not in after:
                    self.registry.set_labels(name, {})
        self.sync()
        for model in models:  # a failed load is logged where it fails; nothing tried is not
            if model.name not in before and not self.registry.known(model.name):
                log.error("%s: added, nothing to load: %s", model.name, self._why_nothing(model))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def sync(self) -> None:
        """One pass over every model: reload loaded versions whose files changed, load what is
        aspired and new, then unload what is not (or is broken) once something else serves."""
        with self._sync_lock:
            for model in self.models:
                self._sync_model(model)

    def _sync_model(self, model: ModelConfig) -> None:
        on_disk = existing_versions(model.base_path)
        self._reload_changed(model)
        self._load_missing(model, model.policy.aspired(on_disk))
        # A version that fails to load does not count: with `latest`, the newest loadable
        # version serves in its place (a corrupt new version beside a good one).
        aspired = model.policy.aspired([v for v in on_disk if not self._broken(model, v)])
        self._load_missing(model, aspired)
        available = {s.version for s in self.registry.available(model.name)}
        for version in sorted(available):
            problem = self._problem(model, version)
            # Availability first: keep an old version until an aspired one serves in its place.
            if version not in aspired and available & set(aspired):
                log.info("%s: unloading version %d", model.name, version)
                self.registry.set_status(model.name, version, "UNLOADING", problem)
                self.registry.remove(model.name, version, problem)
                self._loaded.pop((model.name, version), None)
                self._paths.pop((model.name, version), None)
            else:
                self._report_serving(model, version, problem)
        self.registry.set_labels(model.name, model.labels)

    def _reload_changed(self, model: ModelConfig) -> None:
        """Load again each loaded version whose files changed since it was loaded (unless those
        files already failed; a removed directory has nothing to load)."""
        for servable in self.registry.available(model.name):
            key = (model.name, servable.version)
            fingerprint = _fingerprint(self._path(model, servable.version))
            if fingerprint is None or fingerprint == self._loaded.get(key):
                continue
            if not self._broken(model, servable.version):
                log.info("%s: the files of version %d changed", model.name, servable.version)
                self._load_one(model, servable.version)

    def _load_missing(self, model: ModelConfig, versions: list[int]) -> None:
        loaded = {s.version for s in self.registry.available(model.name)}
        for version in versions:
            if version not in loaded and not self._broken(model, version):
                self._load_one(model, version)

    def _broken(self, model: ModelConfig, version: int) -> bool:
        """It failed to load, and its files have not changed since."""
        failed = self._failed.get((model.name, version))
        return failed is not None and failed[0] == _fingerprint(self._path(model, version))

    def _path(self, model: ModelConfig, version: int) -> Path:
        """Where a version was loaded from (a removed directory keeps its name), else where it
        is on disk now (`00000123` as found, never rebuilt from the number)."""
        return self._paths.get((model.name, version)) or version_path(model.base_path, version)

    def _problem(self, model: ModelConfig, version: int) -> str:
        """Why a loaded version should stop serving, "" when nothing is wrong with it."""
        path = self._path(model, version)
        if not path.is_dir():
            return f"version directory {path} was removed while serving"
        failed = self._failed.get((model.name, version))
        return f"its files changed on disk and no longer load: {failed[1]}" if failed else ""

    def _report_serving(self, model: ModelConfig, version: int, problem: str) -> None:
        """Keep a version that still serves AVAILABLE, its status saying what is wrong if
        anything (and no longer once that is fixed)."""
        message = f"{problem}; serving the copy in memory until a version can replace it"
        message = message if problem else ""
        if self.registry.known(model.name)[version].error != message:
            if message:
                log.warning("%s: version %d: %s", model.name, version, message)
            self.registry.set_status(model.name, version, "AVAILABLE", message)

    def _load_one(self, model: ModelConfig, version: int) -> None:
        """Load a version and make it AVAILABLE (a loaded one is replaced by the new load), or
        record why it failed (a loaded one keeps serving; `_sync_model` decides its fate)."""
        path = version_path(model.base_path, version)
        fingerprint = _fingerprint(path)
        key = (model.name, version)
        serving = key in self._loaded  # a reload: the version serves on meanwhile
        log.info("%s: loading version %d from %s", model.name, version, path)
        if not serving:
            self.registry.set_status(model.name, version, "LOADING")
        try:
            runner = self._load(path)
        except Exception as exc:
            message = _load_error(exc, path)
            log.error("%s: version %d failed to load: %s", model.name, version, message)
            self._failed[key] = (fingerprint, message)
            if not serving:
                self.registry.set_status(model.name, version, "END", message)
            return
        self._failed.pop(key, None)
        self._loaded[key] = fingerprint
        self._paths[key] = path
        self.registry.add(Servable(model.name, version, runner))
        log.info("%s: version %d is AVAILABLE", model.name, version)
