"""A locust run in a child process, driven by a controller in the CLI's process (`loadtest
rollout`, `loadtest many`): start it, wait for its load to begin, stop it, read its records.

The locustfile and the controller share a directory (OUT/raw): the locustfile writes
started.json ({"t0": the first send's time.time()}) when its load begins and records.npz when its
users have stopped; the controller creates `stop` to end the run. Locust's own `-t` bounds a run
whose controller never asks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from graphserve.core.errors import LocustRunError
from graphserve.core.tls import ClientTls
from graphserve.loadtest.generator.targets import tls_env

__all__ = ["log_tail", "read_records", "start_locust", "stop_locust", "wait_started"]


def start_locust(
    locustfile: Path,
    host: str,
    users: int,
    bound_s: float,
    log: Path,
    options: Sequence[str],
    tls: ClientTls | None = None,
) -> subprocess.Popen[bytes]:
    """Headless locust on `locustfile` with `users` (all spawned within a second) against
    `host`, for at most `bound_s`, the locustfile's `options` after locust's; output to `log`.
    `tls`: the options a `grpcs://` or `https://` host is dialed with (in its environment)."""
    from graphserve.core.logs import QUIET_TF_LOG_LEVEL, TF_LOG_LEVEL

    command = [
        sys.executable, "-m", "locust", "-f", str(locustfile), "--headless",
        "-u", str(users), "-r", str(max(users, 100)), "-t", f"{bound_s:.0f}s",
        "--host", host, "--only-summary", "--stop-timeout", "5", "--loglevel", "WARNING",
        *options,
    ]  # fmt: skip
    env = tls_env({TF_LOG_LEVEL: QUIET_TF_LOG_LEVEL, **os.environ}, tls)
    with log.open("wb") as f:
        return subprocess.Popen(command, stdout=f, stderr=subprocess.STDOUT, env=env)


def wait_started(process: subprocess.Popen[bytes], raw: Path, log: Path, timeout_s: float) -> float:
    """The load's t0 (time.time()), once it has come; LocustRunError when locust exits or has
    not begun within `timeout_s`."""
    path = raw / "started.json"
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            raise LocustRunError(f"locust did not start the load: {log_tail(log)}")
        time.sleep(0.05)
    t0 = float(json.loads(path.read_text())["t0"])
    time.sleep(max(0.0, t0 - time.time()))
    return t0


def stop_locust(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Wait `timeout_s` for locust to end (after `stop`), then terminate it, then kill it."""
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def read_records(raw: Path, log: Path) -> dict[str, Any]:
    """raw/records.npz, field -> array; LocustRunError when locust wrote none."""
    import numpy as np

    path = raw / "records.npz"
    if not path.exists():
        raise LocustRunError(f"locust wrote no records: {log_tail(log)}")
    with np.load(path, allow_pickle=False) as npz:
        return {key: npz[key] for key in npz.files}


def log_tail(log: Path) -> str:
    """The last lines of locust's output, on one line."""
    lines = log.read_text(errors="replace").strip().splitlines()[-8:] if log.exists() else []
    return " | ".join(lines) or "(no output)"
