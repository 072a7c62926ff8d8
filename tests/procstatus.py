"""A server process's memory and threads, as /proc reports them (soak and swap tests)."""

from __future__ import annotations

from pathlib import Path


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS (kB) and Threads of process `pid`."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "Threads"):
            fields[key] = int(value.split()[0])
    return fields
