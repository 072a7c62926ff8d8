"""Versioned model directories: `BASE/NAME/VERSION/`, written whole or not at all.

TensorFlow Serving watches `BASE/NAME` for numeric children. The exporter writes a version into a
hidden sibling (`.tmp-VERSION-<random>`, which no server treats as a version) and renames it into
place once it is complete and verified; a rename within one directory is atomic on POSIX.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from exporter.errors import VersionExistsError

__all__ = ["atomic_version_dir", "existing_versions", "next_version"]

TMP_PREFIX = ".tmp-"


def existing_versions(model_dir: Path) -> list[int]:
    """Numeric version directories under `model_dir`, ascending (none if it does not exist)."""
    if not model_dir.is_dir():
        return []
    return sorted(int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit())


def next_version(model_dir: Path) -> int:
    versions = existing_versions(model_dir)
    return versions[-1] + 1 if versions else 1


@contextmanager
def atomic_version_dir(model_dir: Path, version: int) -> Iterator[Path]:
    """Yield a temporary directory; on normal exit it becomes `model_dir/version`.

    On an exception the temporary directory is removed and nothing appears. Raises
    VersionExistsError if the version exists (before writing, and again at the rename).
    """
    final = model_dir / str(version)
    if final.exists():
        raise VersionExistsError(f"version {version} already exists at {final}")
    model_dir.mkdir(parents=True, exist_ok=True)
    tmp = model_dir / f"{TMP_PREFIX}{version}-{uuid.uuid4().hex[:8]}"
    try:
        yield tmp
        try:
            os.rename(tmp, final)
        except OSError as exc:
            raise VersionExistsError(
                f"version {version} appeared at {final} while exporting: {exc}"
            ) from exc
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
