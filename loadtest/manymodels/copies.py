"""`graphserve loadtest copies`: many models out of one, for a many-models load test.

    result = write_copies(CopiesSpec(source=Path("models/mlp"), count=1000, out=Path("copies")))

Writes OUT/<prefix>-0000/1 ... as copies of one SavedModel version, and OUT/models.config, a TF
Serving ModelServerConfig (text proto, written with TF Serving's own proto) that serves each under
its directory's name; the first `pin` models carry `version_labels { key: "pinned" value: 1 }`,
the label a server loading on demand keeps resident. Every file is a hard link to the source's
when OUT is on its file system (a thousand copies take a moment and no space), else a copy.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from graphserve.core.errors import LoadTestError
from graphserve.core.modelconfig import ModelConfig, model_config_text
from graphserve.core.results import JsonResult

__all__ = [
    "CONFIG_FILE",
    "PIN_LABEL",
    "CopiesResult",
    "CopiesSpec",
    "source_version",
    "write_copies",
]

CONFIG_FILE = "models.config"
PIN_LABEL = "pinned"
_VERSION = 1  # every copy's one version
# What os.link raises when it cannot link across these two places: copy instead.
_CANNOT_LINK = (errno.EXDEV, errno.EPERM, errno.ENOTSUP, errno.EMLINK)


@dataclass(frozen=True)
class CopiesSpec:
    """`count` copies of `source` (a version directory, or a model directory: its newest
    version) into `out`, named `<prefix>-0000` on; the first `pin` pinned. `force` writes into an
    `out` that holds files already (its old copies and config are replaced)."""

    source: Path
    count: int
    out: Path
    prefix: str = "model"
    pin: int = 0
    force: bool = False


@dataclass(frozen=True)
class CopiesResult(JsonResult):
    source: Path  # the version directory copied
    out: Path
    config: Path
    count: int
    pinned: int
    method: str  # "hard links" | "copies"
    names: tuple[str, ...]


def source_version(source: Path) -> Path:
    """The version directory `source` names: itself when it holds a SavedModel, else the newest
    numbered version under it. Raises LoadTestError when it is neither."""
    from graphserve.core.savedmodel import find_saved_model_file
    from graphserve.core.versions import version_dirs

    if not source.is_dir():
        raise LoadTestError(f"--from {source}: no such directory")
    if find_saved_model_file(source) is not None:
        return source
    versions = version_dirs(source)
    if not versions:
        raise LoadTestError(
            f"--from {source}: neither a SavedModel (no saved_model.pb) nor a model directory "
            "with numbered versions (BASE/MODEL/1, ...)"
        )
    newest = versions[max(versions)]
    if find_saved_model_file(newest) is None:
        raise LoadTestError(f"--from {source}: its newest version {newest} has no saved_model.pb")
    return newest


def check_copies(spec: CopiesSpec) -> Path:
    """The version to copy, after checking the spec; LoadTestError naming what is wrong."""
    if spec.count < 1:
        raise LoadTestError(f"--count {spec.count}: copy at least one")
    if not 0 <= spec.pin <= spec.count:
        raise LoadTestError(f"--pin {spec.pin}: between 0 and --count ({spec.count})")
    if not spec.prefix or not spec.prefix.replace("-", "").replace("_", "").isalnum():
        raise LoadTestError(f"--prefix {spec.prefix!r}: use letters, digits, '-' and '_'")
    version = source_version(spec.source)
    if spec.out.exists() and not spec.out.is_dir():
        raise LoadTestError(f"--out {spec.out} is a file, not a directory")
    if spec.out.is_dir() and any(spec.out.iterdir()) and not spec.force:
        raise LoadTestError(
            f"--out {spec.out} is not empty: name a new directory, or pass --force to replace "
            "its copies and models.config"
        )
    if spec.out.resolve().is_relative_to(version.resolve()):
        raise LoadTestError(f"--out {spec.out} is inside the version it copies ({version})")
    return version


def write_copies(spec: CopiesSpec) -> CopiesResult:
    """Write the copies and OUT/models.config; LoadTestError for a spec that cannot work, OSError
    when a file cannot be written."""
    version = check_copies(spec)
    out = spec.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    width = max(4, len(str(spec.count - 1)))
    names = tuple(f"{spec.prefix}-{i:0{width}d}" for i in range(spec.count))
    for stale in out.glob(f"{spec.prefix}-*"):
        if stale.is_dir():
            shutil.rmtree(stale)
    link = _linker(version, out)
    for name in names:
        shutil.copytree(version, out / name / str(_VERSION), copy_function=link)
    config = out / CONFIG_FILE
    models = [
        ModelConfig(name, out / name, labels={PIN_LABEL: _VERSION} if i < spec.pin else {})
        for i, name in enumerate(names)
    ]
    config.write_text(model_config_text(models))
    return CopiesResult(
        source=version,
        out=out,
        config=config,
        count=spec.count,
        pinned=spec.pin,
        method="hard links" if link is os.link else "copies",
        names=names,
    )


def _linker(version: Path, out: Path) -> Callable[[str, str], object]:
    """os.link when a file of `version` can be linked into `out`, else shutil.copy2."""
    probe_source = next((p for p in version.rglob("*") if p.is_file()), None)
    if probe_source is None:
        return shutil.copy2
    probe = out / f".link-probe-{os.getpid()}"
    try:
        os.link(probe_source, probe)
    except OSError as exc:
        if exc.errno in _CANNOT_LINK:
            return shutil.copy2
        raise
    probe.unlink()
    return os.link
