"""The servable map: which models and versions this server holds, their states, and labels.

`ModelRegistry` is passive: it answers requests (the AVAILABLE servables by name and version or
label, and the state of every version it has heard of: loading, available, failed to load,
unloaded, which is what GetModelStatus reports), and only the manager (serving.manager) writes
to it (the manager names only what it writes: serving.manager.ServableMap). A request holds a
lease on the servable it resolved (`acquire`/`release`), so a version the manager unloads is
closed only after its last request ended. `load_graph`, `load_eager` and `load_null` are
one-model shortcuts for scripts and tests: each runs a manager over its source.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

from graphserve.core.errors import InvalidInput, ModelLoadError, NotFound
from graphserve.core.signature import TensorSpec
from graphserve.serving.runner import Runner
from graphserve.serving.servable import Servable, VersionRef, VersionStatus

if TYPE_CHECKING:
    from graphserve.serving.sources import StaticSource

__all__ = ["ModelLoadError", "ModelRegistry", "Servable", "VersionRef", "VersionStatus"]


def _listed(names: list[str], most: int = 20) -> str:
    """`names` for an error message: the first `most`, then how many more (a server may hold
    thousands)."""
    shown = ", ".join(repr(n) for n in names[:most])
    return f"{shown} and {len(names) - most} more" if len(names) > most else shown


class ModelRegistry:
    """The servable map: each model's AVAILABLE versions, by number and label, and the state of
    every version seen, as GetModelStatus reports it. The manager writes it; a request resolves
    a servable with `acquire` and gives it back with `release`. Raises NotFound for a model or
    version it does not serve, InvalidInput for a label it does not know."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._servables: dict[str, dict[int, Servable]] = {}
        self._status: dict[str, dict[int, VersionStatus]] = {}
        self._labels: dict[str, dict[str, int]] = {}
        self._static: StaticSource | None = None  # the load_eager shortcut's source

    # -- what the loaders call -------------------------------------------------------------

    def add(self, servable: Servable, state: str = "AVAILABLE") -> Servable | None:
        """Make `servable` AVAILABLE: from now on requests reach it (its status says `state`:
        LOADING while the other workers of a server take it too). Returns the servable it
        replaced (a reload of the same version), which the caller retires."""
        with self._lock:
            versions = self._servables.setdefault(servable.name, {})
            replaced = versions.get(servable.version)
            versions[servable.version] = servable
            self._status.setdefault(servable.name, {})[servable.version] = VersionStatus(
                servable.version, state
            )
        return replaced

    def remove(self, name: str, version: int, error: str = "") -> Servable | None:
        """Unload: new requests no longer reach it (in-flight ones finish on their lease);
        `error` says why when something went wrong (its directory was removed, ...). Returns
        the servable removed, which the caller retires."""
        with self._lock:
            removed = self._servables.get(name, {}).pop(version, None)
            self._status.setdefault(name, {})[version] = VersionStatus(version, "END", error)
        return removed

    def evict(self, name: str, version: int, why: str) -> Servable | None:
        """Unload a version no request holds (checked under the lock `acquire` takes, so none
        can take it meanwhile): it goes back to START, `why` in its status, to be loaded again
        on demand. Returns the servable removed, or None when it is in use or not loaded."""
        with self._lock:
            versions = self._servables.get(name, {})
            servable = versions.get(version)
            if servable is None or servable.lease.count:
                return None
            del versions[version]
            self._status.setdefault(name, {})[version] = VersionStatus(version, "START", why)
        return servable

    def set_status(self, name: str, version: int, state: str, error: str = "") -> None:
        with self._lock:
            self._status.setdefault(name, {})[version] = VersionStatus(version, state, error)

    def set_labels(self, name: str, labels: dict[str, int]) -> None:
        with self._lock:
            self._labels[name] = dict(labels)

    def available(self, name: str) -> list[Servable]:
        """The AVAILABLE versions of `name`, ascending (empty when there are none)."""
        versions = self._servables.get(name, {})
        return [versions[v] for v in sorted(versions)]

    def known(self, name: str) -> dict[int, VersionStatus]:
        """Every version of `name` seen so far, by number (empty when none)."""
        return dict(self._status.get(name, {}))

    # -- what requests call ----------------------------------------------------------------

    def knows(self, name: str) -> bool:
        """Whether `name` is a model seen, loaded or not."""
        return name in self._servables or name in self._status

    def names(self) -> list[str]:
        """Every model seen, loaded or not, sorted."""
        return sorted(set(self._servables) | set(self._status))

    def versions(self, name: str) -> list[Servable]:
        """Every AVAILABLE version of `name`, ascending; raises NotFound when there is none."""
        versions = self._servables.get(name)
        if not versions:
            known = _listed(self.names()) or "no models"
            state = "no version of it is available" if name in self._status else "it is unknown"
            raise NotFound(
                f"Servable not found for request: Latest({name}): {state}; this server serves "
                f"{known}"
            )
        return [versions[v] for v in sorted(versions)]

    def get(self, name: str, version: VersionRef = None) -> Servable:
        """The requested version (a number or a label), or the newest when `version` is None.
        Raises NotFound when it is not AVAILABLE, InvalidInput for an unknown label."""
        servables = self.versions(name)
        if version is None:
            return servables[-1]
        if isinstance(version, str):
            labels = self._labels.get(name, {})
            if version not in labels:
                known = ", ".join(repr(k) for k in labels) or "none"
                raise InvalidInput(
                    f"Unrecognized servable version label: {version} (model {name!r} has labels "
                    f"{known})"
                )
            number = labels[version]
        else:
            number = version
        for servable in servables:
            if servable.version == number:
                return servable
        loaded = ", ".join(str(s.version) for s in servables)
        raise NotFound(
            f"Servable not found for request: Specific({name}, {number}): available versions "
            f"are {loaded}"
        )

    def acquire(self, name: str, version: VersionRef = None) -> Servable:
        """`get`, holding a lease on the servable until `release` (taken under the map's lock,
        so a version being unloaded is either leased here or no longer found)."""
        with self._lock:
            servable = self.get(name, version)
            servable.lease.take()
        return servable

    @staticmethod
    def release(servable: Servable) -> None:
        """Give back the lease `acquire` took; an unloaded version closes with its last one."""
        servable.lease.give_back()

    def statuses(self, name: str, version: VersionRef = None) -> list[VersionStatus]:
        """The state of every version of `name` ever seen, or of one; NotFound if unknown."""
        known = self._status.get(name)
        if not known:
            raise NotFound(f"Could not find any versions of model {name}")
        if version is None:
            return [known[v] for v in sorted(known)]
        number = self.get(name, version).version if isinstance(version, str) else version
        if number not in known:
            raise NotFound(f"Could not find version {number} of model {name}")
        return [known[number]]

    # -- one-model shortcuts ---------------------------------------------------------------

    def load_graph(self, name: str, base_path: Path) -> Servable:
        """Load the newest numeric version under `base_path`, warmed with its warm-up records."""
        from graphserve.serving.config import ModelConfig
        from graphserve.serving.manager import ModelManager

        ModelManager(self, [ModelConfig(name, Path(base_path))]).start()
        return self.get(name)

    def load_null(self, name: str, base_path: Path) -> Servable:
        """Serve the newest numeric version under `base_path` with NullRunner (its signatures,
        zeros for answers, no model work); errors surface as ModelLoadError."""
        from graphserve.serving.config import ModelConfig
        from graphserve.serving.loaders import load_null
        from graphserve.serving.manager import ModelManager

        ModelManager(self, [ModelConfig(name, Path(base_path))], load=load_null).start()
        return self.get(name)

    def load_eager(
        self,
        name: str,
        source: str,
        inputs: list[TensorSpec] | None = None,
        version: int = 1,
        *,
        signature_file: Path | None = None,
        output_names: list[str] | None = None,
        allow_unsafe: bool = False,
        mode: str = "call",
    ) -> Servable:
        """Load a Python model source to run eagerly (`mode`: call, predict or function);
        errors surface as ModelLoadError."""
        from graphserve.serving.loaders import load_eager
        from graphserve.serving.manager import ModelManager
        from graphserve.serving.sources import StaticModel, StaticSource

        def load() -> Runner:
            return load_eager(
                source,
                inputs,
                signature_file=signature_file,
                output_names=output_names,
                allow_unsafe=allow_unsafe,
                mode=mode,
            )

        # One static source per registry, so versions added one by one serve side by side.
        if self._static is None:
            self._static = StaticSource()
        self._static.add(StaticModel(name, load, version))
        ModelManager(self, self._static).start()
        return self.get(name, version)
