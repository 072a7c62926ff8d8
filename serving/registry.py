"""The model registry: which models and versions this server holds, and how to find one.

For now a model is loaded at start-up: the newest version under its base path (TF Serving's
default `latest` version policy) for the graph server, warmed with the version's warm-up records,
or the Python source for the eager server.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from exporter.signature import TensorSpec
from exporter.versions import existing_versions
from exporter.warmup import replay_warmup
from serving.errors import NotFound
from serving.runners import EagerRunner, GraphRunner, Runner

__all__ = ["ModelLoadError", "ModelRegistry", "Servable"]


class ModelLoadError(Exception):
    """A model could not be loaded at start-up (missing base path, no versions, bad files)."""


@dataclass(frozen=True)
class Servable:
    """One loaded version of one model."""

    name: str
    version: int
    runner: Runner
    state: str = "AVAILABLE"


class ModelRegistry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._models: dict[str, dict[int, Servable]] = {}

    def add(self, servable: Servable) -> None:
        with self._lock:
            self._models.setdefault(servable.name, {})[servable.version] = servable

    def names(self) -> list[str]:
        return sorted(self._models)

    def versions(self, name: str) -> list[Servable]:
        """Every loaded version of `name`, ascending; raises NotFound for an unknown model."""
        versions = self._models.get(name)
        if not versions:
            raise NotFound(
                f"Servable not found for request: Latest({name}): this server serves "
                f"{', '.join(repr(n) for n in self.names()) or 'no models'}"
            )
        return [versions[v] for v in sorted(versions)]

    def get(self, name: str, version: int | None = None) -> Servable:
        """The requested version, or the newest when `version` is None."""
        servables = self.versions(name)
        if version is None:
            return servables[-1]
        for servable in servables:
            if servable.version == version:
                return servable
        loaded = ", ".join(str(s.version) for s in servables)
        raise NotFound(
            f"Servable not found for request: Specific({name}, {version}): loaded versions are "
            f"{loaded}"
        )

    # -- loading -------------------------------------------------------------------------

    def load_graph(self, name: str, base_path: Path) -> Servable:
        """Load the newest numeric version under `base_path`."""
        base_path = Path(base_path)
        if not base_path.is_dir():
            raise ModelLoadError(f"model base path {base_path} does not exist")
        versions = existing_versions(base_path)
        if not versions:
            raise ModelLoadError(
                f"no versions under {base_path}: expected numeric directories such as "
                f"{base_path / '1'} (run `graphserve export ... --base-path {base_path.parent}`)"
            )
        path = base_path / str(versions[-1])
        try:
            runner = GraphRunner(path)
        except Exception as exc:
            raise ModelLoadError(f"cannot load SavedModel {path}: {exc}") from exc
        try:
            # As TF Serving does: the version runs its warm-up records before it takes traffic.
            replay_warmup(path, runner.run)
        except Exception as exc:
            raise ModelLoadError(f"warm-up record of {path} failed: {exc}") from exc
        servable = Servable(name, versions[-1], runner)
        self.add(servable)
        return servable

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
    ) -> Servable:
        """Load a Python model source to run eagerly; errors surface as ModelLoadError."""
        from exporter.errors import ExportError

        try:
            runner = EagerRunner(
                source,
                inputs,
                signature_file=signature_file,
                output_names=output_names,
                allow_unsafe=allow_unsafe,
            )
        except ExportError as exc:
            raise ModelLoadError(str(exc)) from exc
        servable = Servable(name, version, runner)
        self.add(servable)
        return servable
