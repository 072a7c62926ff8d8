"""Sources: where the versions a server should serve come from, as TF Serving's sources are.

A source names its models and, for each, the versions that exist, the ones it aspires to serve,
a fingerprint per version (what changes when its files change) and how to load one. The manager
(serving.manager) polls sources and is the only one that loads, swaps and unloads.

    FileSystemSource   numeric version directories under each model's base path, picked by the
                       model's version policy (TF Serving's FileSystemStoragePathSource)
    StaticSource       models fixed at start: the eager server's Python model, the null server
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from graphserve.core.versions import served_versions
from graphserve.serving.config import ModelConfig
from graphserve.serving.runner import Runner

__all__ = ["FileSystemSource", "Fingerprint", "Source", "StaticModel", "StaticSource"]

# A version's files as (relative path, size, mtime_ns); None when its directory is gone.
Fingerprint = tuple[tuple[str, int, int], ...] | None


class Source(Protocol):
    def names(self) -> list[str]: ...

    def versions(self, name: str) -> list[int]:
        """The versions that exist now, ascending."""
        ...

    def aspired(self, name: str, versions: list[int]) -> list[int]:
        """Of `versions`, the ones to serve (the model's version policy)."""
        ...

    def where(self, name: str, version: int) -> Path | None:
        """Where the version lives (a directory), None for a model in Python."""
        ...

    def fingerprint(self, where: Path | None) -> Fingerprint: ...

    def load(self, name: str, version: int, where: Path | None) -> Runner: ...

    def labels(self, name: str) -> dict[str, int]: ...

    def why_nothing(self, name: str) -> str:
        """Why no version of `name` can be served, for an error message."""
        ...


def fingerprint_dir(path: Path | None) -> Fingerprint:
    """What changes when any file of a version directory changes; stat calls only, cheap enough
    for every poll."""
    if path is None or not path.is_dir():
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


class FileSystemSource:
    """SavedModel versions under base paths; `load(path)` loads one (serving.loaders)."""

    def __init__(self, models: Sequence[ModelConfig], load: Callable[[Path], Runner]) -> None:
        self.models = {m.name: m for m in models}
        self._load = load
        self._listed: dict[str, dict[int, Path]] = {}  # each model's last listing, by version

    def configure(self, models: Sequence[ModelConfig]) -> None:
        self.models = {m.name: m for m in models}
        self._listed.clear()

    def names(self) -> list[str]:
        return list(self.models)

    def versions(self, name: str) -> list[int]:
        self._listed[name] = served_versions(self.models[name].base_path)
        return list(self._listed[name])

    def aspired(self, name: str, versions: list[int]) -> list[int]:
        return self.models[name].policy.aspired(versions)

    def where(self, name: str, version: int) -> Path | None:
        # `00000123` as found on disk by the last listing (a poll lists, then asks for each
        # version), never rebuilt from the number; a bare SavedModel is 1
        base = self.models[name].base_path
        listed = self._listed.get(name)
        if listed is None or version not in listed:
            listed = self._listed[name] = served_versions(base)
        return listed.get(version, base / str(version))

    def fingerprint(self, where: Path | None) -> Fingerprint:
        return fingerprint_dir(where)

    def load(self, name: str, version: int, where: Path | None) -> Runner:
        assert where is not None
        return self._load(where)

    def labels(self, name: str) -> dict[str, int]:
        return dict(self.models[name].labels)

    def why_nothing(self, name: str) -> str:
        model = self.models[name]
        if not model.base_path.is_dir():
            return f"base path {model.base_path} does not exist"
        on_disk = list(served_versions(model.base_path))
        if not on_disk:
            return (
                f"no versions: expected numeric directories such as {model.base_path / '1'} "
                f"(run `graphserve export ... --base-path {model.base_path.parent}`)"
            )
        return f"the {model.policy.describe()} policy picks none of versions {on_disk}"


@dataclass(frozen=True)
class StaticModel:
    name: str
    load: Callable[[], Runner]
    version: int = 1
    labels: dict[str, int] = field(default_factory=dict)


class StaticSource:
    """Models fixed at start (more versions may be `add`ed): each version loaded once, never
    changing."""

    _SAME: Fingerprint = ()

    def __init__(self, models: Sequence[StaticModel] = ()) -> None:
        self.models: dict[str, dict[int, StaticModel]] = {}
        for model in models:
            self.add(model)

    def add(self, model: StaticModel) -> None:
        self.models.setdefault(model.name, {})[model.version] = model

    def names(self) -> list[str]:
        return list(self.models)

    def versions(self, name: str) -> list[int]:
        return sorted(self.models[name])

    def aspired(self, name: str, versions: list[int]) -> list[int]:
        return versions

    def where(self, name: str, version: int) -> Path | None:
        return None

    def fingerprint(self, where: Path | None) -> Fingerprint:
        return self._SAME

    def load(self, name: str, version: int, where: Path | None) -> Runner:
        return self.models[name][version].load()

    def labels(self, name: str) -> dict[str, int]:
        labels: dict[str, int] = {}
        for model in self.models[name].values():
            labels.update(model.labels)
        return labels

    def why_nothing(self, name: str) -> str:
        return "it failed to load"
