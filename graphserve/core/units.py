"""Durations and sizes as people type them (`1m30s`, `300MB`, `2GiB`).

Both raise ValueError saying what was wrong and what is expected; the command line names the
option (graphserve.clikit.option_seconds and option_bytes turn it into a usage error, exit 2).
"""

from __future__ import annotations

import re

__all__ = ["parse_bytes", "parse_duration"]

_DURATION = re.compile(r"^(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>\d+(?:\.\d+)?)s?)?$")
_SIZE = re.compile(r"^(?P<n>\d+(?:\.\d+)?)\s*(?P<unit>[kmgt]?i?b?)$")
_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}


def parse_duration(text: str, minimum: float = 1.0) -> float:
    """Seconds in `20s`, `1m`, `1m30s`, `2h`, `0.5s` or a bare `90`; ValueError unless it is a
    duration of at least `minimum` seconds."""
    match = _DURATION.match(text.strip().lower())
    if not text.strip() or match is None:
        raise ValueError(f"{text!r} is not a duration: use e.g. 20s, 1m, 1m30s or 90")
    parts = {k: float(v) if v else 0.0 for k, v in match.groupdict().items()}
    seconds = parts["h"] * 3600 + parts["m"] * 60 + parts["s"]
    if seconds < minimum:
        raise ValueError(f"{text!r}: must be at least {minimum:g} s")
    return seconds


def parse_bytes(text: str) -> int:
    """Bytes in `300MB` / `300M` (10^6), `2GiB` / `2Gi` (2^30), `1500000` or `1.5GB`; ValueError
    unless it is a size of more than 0 bytes."""
    match = _SIZE.match(text.strip().lower())
    if match is None:
        raise ValueError(f"{text!r} is not a size: use e.g. 300MB, 2GiB or a number of bytes")
    unit = match["unit"].rstrip("b")
    scale = _UNITS[unit[:1]]
    if unit.endswith("i"):
        scale = 1024 ** "kmgt".index(unit[0]) * 1024
    count = int(float(match["n"]) * scale)
    if count <= 0:
        raise ValueError(f"{text!r}: must be more than 0 bytes")
    return count
