"""A user's project for the export tests: small modules written to a directory on sys.path, the
way a user's own code is importable as `module:factory` from where they run graphserve."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def user_project(root: Path, modules: Mapping[str, str]) -> Iterator[Path]:
    """`modules` (name -> source, dedented) written under `root` and importable until exit; then
    off sys.path and out of sys.modules, so the next project's modules of the same name load."""
    for name, source in modules.items():
        (root / f"{name}.py").write_text(textwrap.dedent(source).lstrip())
    sys.path.insert(0, str(root))
    try:
        yield root
    finally:
        sys.path.remove(str(root))
        for name in modules:
            sys.modules.pop(name, None)
