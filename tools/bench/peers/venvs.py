"""Each peer in a virtual environment of its own under the bench's work directory, installed on
first use: `python -m venv`, then pip with the peer's requirements and our TensorFlow's exact
version (the same SavedModel runs on the same TensorFlow everywhere). None of it enters
graphserve's dependencies. A stamp file names what was installed; another requirement set, or a
half-finished install, makes a new environment.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from tools.bench.peers.base import Peer

__all__ = ["PeerEnv", "PeerInstallError", "peer_env"]

_STAMP = ".graphserve-peer.json"


class PeerInstallError(RuntimeError):
    """pip could not install a peer: the message has pip's last words."""


@dataclass(frozen=True)
class PeerEnv:
    python: Path
    version: str  # the peer distribution's version in its environment
    versions: dict[str, str]  # every installed distribution: name -> version
    install_s: float | None  # None: it was already installed


def _requirements(peer: Peer) -> list[str]:
    return [f"tensorflow=={metadata.version('tensorflow')}", *peer.requirements]


def peer_env(peer: Peer, root: Path, say: object = None) -> PeerEnv:
    """The environment of `peer` under `root`/venvs, created and installed if it is not yet.
    Raises PeerInstallError when pip fails."""
    where = root.resolve() / "venvs" / peer.name  # absolute: apps run from their log dir
    python = where / "bin" / "python"
    wanted = _requirements(peer)
    key = hashlib.sha256(json.dumps([peer.interpreter, wanted]).encode()).hexdigest()[:16]
    stamp = where / _STAMP
    if stamp.exists() and json.loads(stamp.read_text()).get("key") == key and python.exists():
        recorded = json.loads(stamp.read_text())
        return PeerEnv(python, recorded["version"], recorded["versions"], None)
    if callable(say):
        say(f"installing {peer.title} into {where} (first use): {' '.join(wanted)}")
    started = time.perf_counter()
    interpreter = peer.interpreter or sys.executable
    _run([interpreter, "-m", "venv", "--clear", str(where)], f"making the venv of {peer.title}")
    _run([str(python), "-m", "pip", "install", "--quiet", "--upgrade", "pip"], "upgrading pip")
    _run(
        [str(python), "-m", "pip", "install", "--quiet", *wanted],
        f"pip install {' '.join(wanted)} for {peer.title}",
    )
    install_s = time.perf_counter() - started
    versions = _freeze(python)
    version = versions.get(peer.distribution.lower().replace("_", "-"), "unknown")
    stamp.write_text(json.dumps({"key": key, "version": version, "versions": versions}))
    return PeerEnv(python, version, versions, install_s)


def _freeze(python: Path) -> dict[str, str]:
    done = subprocess.run(
        [str(python), "-m", "pip", "list", "--format", "json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return {p["name"].lower().replace("_", "-"): p["version"] for p in json.loads(done.stdout)}


def _run(command: list[str], what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise PeerInstallError(f"{what} failed (exit {done.returncode}): {done.stderr[-1500:]}")
