"""Writing generated files: YAML that reads well in a review, replaced atomically."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

__all__ = ["dump_yaml", "write_atomic"]


class _Dumper(yaml.SafeDumper):
    """No `&id001` anchors for repeated values; multi-line strings as `|` blocks."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump_yaml(document: Any) -> str:
    return str(yaml.dump(document, Dumper=_Dumper, sort_keys=False))


def write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """Write `text` to `path` through a temporary sibling and a rename, so a reader (TF Serving
    polling models.config) sees the old file or the new one, never half of one. `mode`: 0o644,
    readable by the container's user; 0o600 for a file that holds a secret."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
