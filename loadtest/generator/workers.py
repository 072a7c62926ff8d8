"""The report's "workers": which locust workers generated the load, where, how busy, and which
windows a lost worker missed.

Input: OUT/raw/phases.json as generator/sweepfile.py writes it ("nodes": each worker's hello, when
it joined, when its records last came and when the master noticed it gone; "cpu" and
"machine_cpu": per phase and worker). A run without workers (one local process) has none.

A worker is lost when it stops sending heartbeats; it was last alive when its last records came
(they come every half second), so every window that ended after that is one it missed: its users
ran on the other workers (locust moved them) or, in the phase it died in, not at all for up to
the heartbeat timeout. The report names those windows rather than let them pass as full ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from graphserve.loadtest.results.run import CpuSpread, LostAt, WindowRef, WorkerNode, Workers

__all__ = ["workers_section"]


def workers_section(
    document: Mapping[str, Any], arm_names: Sequence[str], remote: bool
) -> Workers | None:
    """The report's workers from phases.json's document; None when no worker took part."""
    nodes: Mapping[str, Mapping[str, Any]] = document.get("nodes") or {}
    expected = int(document.get("expected_workers") or 0)
    if not nodes and not expected:
        return None
    phases: list[Mapping[str, Any]] = document["phases"]
    windows = [p for p in phases if p["kind"] == "window"]
    t0 = phases[0]["started"] if phases else 0.0
    listed = []
    for worker, node in sorted(nodes.items(), key=lambda item: item[1].get("joined") or 0.0):
        lost = node.get("lost") is not None
        last_seen = node.get("last_seen") if lost else None
        mine = [p for p in windows if last_seen is None or (p["ended"] or 0.0) <= last_seen]
        listed.append(
            WorkerNode(
                id=worker,
                host=node.get("host"),
                pid=node.get("pid"),
                cpus=node.get("cpus"),
                platform=node.get("platform"),
                graphserve=node.get("graphserve"),
                joined_s=_since(node.get("joined"), t0),
                lost_s=_since(last_seen, t0),
                lost_at=_phase_at(phases, last_seen, arm_names),
                missed_windows=[
                    _where(p, arm_names)
                    for p in windows
                    if last_seen is not None and (p["ended"] or float("inf")) > last_seen
                ],
                cpu_pct=_spread(document.get("cpu") or {}, mine, worker),
                machine_cpu_pct=_spread(document.get("machine_cpu") or {}, mine, worker),
            )
        )
    return Workers(expected=expected, mode="remote" if remote else "local", nodes=listed)


def _since(moment: float | None, t0: float) -> float | None:
    return round(moment - t0, 3) if moment is not None else None


def _where(phase: Mapping[str, Any], arm_names: Sequence[str]) -> WindowRef:
    return WindowRef(step=phase["step"], arm=arm_names[phase["arm"]], window=phase["window"])


def _phase_at(
    phases: Sequence[Mapping[str, Any]], moment: float | None, arm_names: Sequence[str]
) -> LostAt | None:
    """The phase running at `moment` (where a lost worker was last heard of)."""
    if moment is None:
        return None
    for phase in phases:
        ended = phase["ended"] if phase["ended"] is not None else float("inf")
        if phase["started"] <= moment < ended and phase["arm"] >= 0:
            return LostAt(**_where(phase, arm_names).model_dump(), kind=phase["kind"])
    return None


def _spread(
    by_seq: Mapping[str, Mapping[str, float]], windows: Sequence[Mapping[str, Any]], worker: str
) -> CpuSpread:
    """Mean and max of one worker's CPU share over the windows it ran."""
    values = [
        float(by_seq[str(p["seq"])][worker])
        for p in windows
        if worker in by_seq.get(str(p["seq"]), {})
    ]
    if not values:
        return CpuSpread(mean=None, max=None)
    return CpuSpread(mean=round(sum(values) / len(values), 1), max=round(max(values), 1))
