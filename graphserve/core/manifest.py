"""The manifest: `assets.extra/graphserve.json`, what an export did, next to what it wrote.

TF Serving ignores `assets.extra/`, so the manifest travels with the version directory without
changing what serves. It records the signatures, the TensorFlow and graphserve versions, the
source, a content hash of every other file in the version, the export options, parity results,
trace counts, warm-up records and the op scan: enough to tell later what a version is and how it
was checked.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

__all__ = ["FORMAT_VERSION", "MANIFEST_FILE", "content_hash", "read_manifest", "write_manifest"]

MANIFEST_FILE = Path("assets.extra") / "graphserve.json"
FORMAT_VERSION = 1


def content_hash(version_dir: Path) -> str:
    """sha256 over every file's relative path and bytes, in path order, except the manifest."""
    version_dir = Path(version_dir)
    digest = hashlib.sha256()
    for path in sorted(p for p in version_dir.rglob("*") if p.is_file()):
        relative = path.relative_to(version_dir)
        if relative == MANIFEST_FILE:
            continue
        digest.update(relative.as_posix().encode() + b"\0")
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        digest.update(b"\0")
    return "sha256:" + digest.hexdigest()


def write_manifest(version_dir: Path, manifest: dict[str, Any]) -> Path:
    path = Path(version_dir) / MANIFEST_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n")
    return path


def read_manifest(version_dir: Path) -> dict[str, Any] | None:
    """The manifest of `version_dir`, or None when it has none (not exported by graphserve)."""
    path = Path(version_dir) / MANIFEST_FILE
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    return data if isinstance(data, dict) else None
