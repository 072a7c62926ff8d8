"""Versioned model directories: `BASE/NAME/VERSION/`, written whole or not at all.

TensorFlow Serving watches `BASE/NAME` for numeric children. The exporter writes a version into a
hidden sibling (`.tmp-VERSION-PID-<random>`, which no server treats as a version) and renames it
into place once it is complete and verified; a rename within one directory is atomic on POSIX.
Its files are flushed to disk before the rename and the rename after it, so that a crash of the
machine, not only of the process, cannot leave a version whose files are empty.
A temporary left by an export that was killed is removed by the next export, once its process is
gone. `--overwrite` swaps the new directory with the old one in one step where Linux allows it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from graphserve.core.errors import VersionExistsError

__all__ = [
    "TMP_PREFIX",
    "atomic_version_dir",
    "clean_stale_temporaries",
    "ensure_version_free",
    "existing_versions",
    "next_version",
    "prune_versions",
    "served_versions",
    "version_dirs",
    "version_path",
]

TMP_PREFIX = ".tmp-"


# A version directory's name, as TF Serving parses it (absl::SimpleAtoi into an int64): decimal
# digits, leading zeros allowed (its own test data is `00000123`), an optional '+'. Negative
# numbers parse there too but name no version a client can ask for, so they are not served.
_VERSION_NAME = re.compile(r"^\+?[0-9]+$")
_MAX_VERSION = 2**63 - 1

log = logging.getLogger("graphserve.versions")


def version_dirs(model_dir: Path) -> dict[int, Path]:
    """Version number -> its directory as found on disk (`00000123` stays `00000123`), ascending.

    Empty if `model_dir` does not exist. Two names for one number (`17` and `00017`): the plain
    one wins, else the first in name order, with a warning, as TF Serving warns and keeps one.
    """
    if not model_dir.is_dir():
        return {}
    found: dict[int, list[Path]] = {}
    for path in model_dir.iterdir():
        if _VERSION_NAME.match(path.name) and path.is_dir():
            number = int(path.name)
            if number <= _MAX_VERSION:
                found.setdefault(number, []).append(path)
    chosen = {}
    for number in sorted(found):
        paths = sorted(found[number], key=lambda p: (p.name != str(number), p.name))
        if len(paths) > 1:
            log.warning(
                "duplicate version directories for version %d: loading %s, ignoring %s",
                number,
                paths[0],
                ", ".join(str(p) for p in paths[1:]),
            )
        chosen[number] = paths[0]
    return chosen


def existing_versions(model_dir: Path) -> list[int]:
    """Version numbers under `model_dir`, ascending (none if it does not exist)."""
    return list(version_dirs(model_dir))


def bare_savedmodel(model_dir: Path) -> bool:
    """`model_dir` is a SavedModel itself (a Keras `model.export()` archive, a `tf.saved_model.save`
    directory) with no numeric version directory: the graph server serves it as version 1,
    where TF Serving serves nothing (it loads version directories only)."""
    return served_versions(model_dir).get(1) == Path(model_dir)


def served_versions(model_dir: Path) -> dict[int, Path]:
    """What the graph server serves under `model_dir`: its version directories (`version_dirs`),
    or {1: model_dir} for a bare SavedModel; one listing of the directory."""
    dirs = version_dirs(model_dir)
    if not dirs and (Path(model_dir) / "saved_model.pb").is_file():
        return {1: Path(model_dir)}
    return dirs


def version_path(model_dir: Path, version: int) -> Path:
    """The directory of `version` as found on disk; `model_dir/version` when there is none."""
    return version_dirs(model_dir).get(version, model_dir / str(version))


def next_version(model_dir: Path) -> int:
    versions = existing_versions(model_dir)
    return versions[-1] + 1 if versions else 1


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def clean_stale_temporaries(model_dir: Path) -> list[Path]:
    """Remove temporaries whose exporting process is gone; returns what was removed."""
    if not model_dir.is_dir():
        return []
    removed = []
    for path in model_dir.iterdir():
        if not path.name.startswith(TMP_PREFIX):
            continue
        parts = path.name[len(TMP_PREFIX) :].split("-")
        pid = int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None
        if pid is not None and pid != os.getpid() and _pid_alive(pid):
            continue  # another export is writing it right now
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def prune_versions(model_dir: Path, keep: int, protect: int) -> list[int]:
    """Delete the oldest versions so that `keep` remain; never `protect`. Returns deleted ones."""
    if keep < 1:
        raise ValueError("keep must be at least 1")
    dirs = version_dirs(model_dir)
    versions = list(dirs)
    doomed = [v for v in versions[: max(len(versions) - keep, 0)] if v != protect]
    for version in doomed:
        # Rename first so a server never sees a half-deleted version directory.
        trash = model_dir / f"{TMP_PREFIX}{version}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        os.rename(dirs[version], trash)
        shutil.rmtree(trash, ignore_errors=True)
    return doomed


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError:  # some file systems cannot sync a directory; the files are synced
        pass
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    """Flush every file and directory under `root` to disk.

    Without it the rename can reach the disk before the data (ext4 and XFS delay allocation), and
    after a power loss the version directory would exist with empty or truncated files.
    """
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(dirpath))


_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two directories atomically (Linux renameat2); False where that is unavailable."""
    libc_name = ctypes.util.find_library("c")
    if not libc_name:
        return False
    libc = ctypes.CDLL(libc_name, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    rc = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    return rc == 0


def ensure_version_free(model_dir: Path, version: int) -> None:
    """Raise VersionExistsError if `version` exists under `model_dir` (`00000007` is 7)."""
    final = version_path(model_dir, version)
    if final.exists():
        raise VersionExistsError(
            f"version {version} already exists at {final}: choose another --version, or pass "
            "--overwrite to replace it"
        )


@contextmanager
def atomic_version_dir(model_dir: Path, version: int, *, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary directory; on normal exit it becomes `model_dir/version`.

    On an exception the temporary directory is removed and nothing appears: not even the model
    directory (or its parents), if this call made it. Without `overwrite`, raises
    VersionExistsError if the version exists (before writing, and again at the rename). With
    `overwrite`, an existing version is replaced where it is (`00000007` stays its name).
    """
    final = version_path(model_dir, version)
    if not overwrite:
        ensure_version_free(model_dir, version)
    made = [d for d in (model_dir, *model_dir.parents) if not d.exists()]  # deepest first
    model_dir.mkdir(parents=True, exist_ok=True)
    tmp = model_dir / f"{TMP_PREFIX}{version}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        try:
            yield tmp
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            for directory in made:
                with suppress(OSError):  # not empty: someone else wrote there
                    directory.rmdir()
            raise
        _fsync_tree(tmp)
        if overwrite and final.exists():
            if not _exchange(tmp, final):  # two renames: the version is briefly absent
                old = tmp.with_name(tmp.name + "-old")
                os.rename(final, old)
                os.rename(tmp, final)
                tmp = old
            _fsync_dir(model_dir)
            return  # `tmp` now holds the old version; the finally clause removes it
        try:
            os.rename(tmp, final)
        except OSError as exc:
            raise VersionExistsError(
                f"version {version} appeared at {final} while exporting: {exc}"
            ) from exc
        _fsync_dir(model_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
