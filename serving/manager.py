"""The model manager: what TF Serving's ServerCore does for a file-system model source.

For each configured model it lists the numeric versions under the base path, picks the ones the
version policy aspires to, loads new ones (GraphRunner, then the version's warm-up records) and
only when they are AVAILABLE unloads the versions no longer aspired to: availability first, as
TF Serving's default AvailabilityPreservingPolicy. A version that fails to load is reported in
status (END, with the error) and does not disturb the others; it is retried only when its files
change. `start()` loads synchronously; `poll(seconds)` repeats that in a background thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from exporter.versions import existing_versions
from exporter.warmup import replay_warmup
from serving.config import ModelConfig
from serving.registry import ModelLoadError, ModelRegistry, Servable
from serving.runners import GraphRunner, Runner

__all__ = ["ModelManager", "load_version"]

log = logging.getLogger("graphserve.manager")

Fingerprint = tuple[int, int] | None


def load_version(path: Path) -> Runner:
    """Load one SavedModel version and run its warm-up records; raises on any failure."""
    runner = GraphRunner(path)
    try:
        count = replay_warmup(path, runner.run)
    except Exception as exc:
        raise ModelLoadError(f"warm-up record of {path} failed: {exc}") from exc
    if count:
        log.info("%s: replayed %d warm-up records", path, count)
    return runner


def _fingerprint(path: Path) -> Fingerprint:
    try:
        stat = (path / "saved_model.pb").stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


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
        self._failed: dict[tuple[str, int], Fingerprint] = {}
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

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def sync(self) -> None:
        """One pass over every model: load what is aspired and new, then unload what is not."""
        with self._sync_lock:
            for model in self.models:
                self._sync_model(model)

    def _sync_model(self, model: ModelConfig) -> None:
        on_disk = existing_versions(model.base_path)
        self._load_missing(model, model.policy.aspired(on_disk))
        # A version that fails to load does not count: with `latest`, the newest loadable
        # version serves in its place (a corrupt new version beside a good one).
        aspired = model.policy.aspired([v for v in on_disk if not self._broken(model, v)])
        self._load_missing(model, aspired)
        available = {s.version for s in self.registry.available(model.name)}
        for version in sorted(available - set(aspired)):
            # Availability first: keep an old version until an aspired one serves in its place.
            if available & set(aspired):
                log.info("%s: unloading version %d", model.name, version)
                self.registry.set_status(model.name, version, "UNLOADING")
                self.registry.remove(model.name, version)
        self.registry.set_labels(model.name, model.labels)

    def _load_missing(self, model: ModelConfig, versions: list[int]) -> None:
        loaded = {s.version for s in self.registry.available(model.name)}
        for version in versions:
            if version not in loaded and not self._broken(model, version):
                self._load_one(model, version)

    def _broken(self, model: ModelConfig, version: int) -> bool:
        """It failed to load, and its files have not changed since."""
        key = (model.name, version)
        return key in self._failed and self._failed[key] == _fingerprint(
            model.base_path / str(version)
        )

    def _load_one(self, model: ModelConfig, version: int) -> None:
        path = model.base_path / str(version)
        fingerprint = _fingerprint(path)
        key = (model.name, version)
        log.info("%s: loading version %d from %s", model.name, version, path)
        self.registry.set_status(model.name, version, "LOADING")
        try:
            runner = self._load(path)
        except Exception as exc:
            message = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
            log.error("%s: version %d failed to load: %s", model.name, version, message)
            self.registry.set_status(model.name, version, "END", message)
            self._failed[key] = fingerprint
            return
        self._failed.pop(key, None)
        self.registry.add(Servable(model.name, version, runner))
        log.info("%s: version %d is AVAILABLE", model.name, version)
