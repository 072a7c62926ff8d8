"""The plan of one load-test run: what the orchestrator decides and every locust process follows.

`compare` writes it as JSON (OUT/plan.json) and passes its path in $GRAPHSERVE_PLAN to the locust
master or the single local process. Workers, on this machine or another, are started with
$GRAPHSERVE_PLAN set to PLAN_FROM_MASTER: they read no file, and receive the plan and the request
body from the master over locust's messaging when they join. Only the standard library is
imported: the locust processes read the plan and the pre-encoded request body and never import
TensorFlow.

No TLS file travels in the plan: a target's scheme says whether it is TLS, and each process dials
with the options in its own environment (a worker's from its own command line).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

__all__ = ["PLAN_ENV", "PLAN_FROM_MASTER", "ArmTarget", "Plan"]

PLAN_ENV = "GRAPHSERVE_PLAN"
PLAN_FROM_MASTER = "from-master"  # $GRAPHSERVE_PLAN of a worker: the master sends the plan


@dataclass(frozen=True)
class ArmTarget:
    """One arm: its name, the address as given, what locust connects to, its metrics URL."""

    name: str
    address: str
    target: str  # gRPC: HOST:PORT or grpcs://HOST:PORT (TLS); REST: http(s)://HOST:PORT
    metrics_url: str | None = None


@dataclass(frozen=True)
class Plan:
    """Everything a locust process needs; times in seconds.

    mode "closed": `loads` are concurrent users, each sending back to back.
    mode "open": `loads` are target request rates (req/s for the whole run, split over the
    locust processes); arrivals are "constant" or "poisson" and `max_in_flight` users send them.
    `workers`: the worker processes the master waits for (local and remote), 0: no master.
    """

    arms: tuple[ArmTarget, ...]
    protocol: str  # "grpc" | "rest"
    body_file: str  # the request, encoded once: a serialized PredictRequest or a JSON body
    rest_path: str  # /v1/models/NAME:predict
    model_name: str
    mode: str
    loads: tuple[float, ...]
    out_dir: str
    arrivals: str = "constant"
    max_in_flight: int = 64
    warmup_s: float = 2.0
    window_s: float = 5.0
    min_windows: int = 3
    max_windows: int = 10
    stability_pct: float = 10.0
    seed: int = 0
    max_requests: int | None = None
    workers: int = 0
    workers_timeout_s: float = 60.0  # how long the master waits for its workers to join
    request_timeout_s: float = 30.0
    allow_remote: bool = False
    # a traffic file's requests, encoded once (generator/framed.py's REQUESTS), sent in order,
    # cycling, in place of body_file's one; "": one request, sent every time
    bodies_file: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def users(self, load: float) -> int:
        """Locust users for one step: the concurrency, or the open loop's in-flight cap."""
        return int(load) if self.mode == "closed" else self.max_in_flight

    def longest_s(self) -> float:
        """An upper bound of the run's length when nothing stalls (every step at max windows)."""
        per_step = len(self.arms) * (self.warmup_s + self.max_windows * self.window_s)
        return len(self.loads) * (per_step + 10.0)  # + spawning and settling per step

    def dump(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2))

    def to_dict(self) -> dict[str, Any]:
        """The plan as plain data (what the master sends a worker that joins)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Plan:
        """The inverse of `to_dict`; keys this version does not know are ignored."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in raw.items() if k in known}
        values["arms"] = tuple(ArmTarget(**arm) for arm in raw["arms"])
        values["loads"] = tuple(raw["loads"])
        return cls(**values)

    @classmethod
    def load(cls, path: Path) -> Plan:
        """Read a plan written by `dump`; ValueError names what is missing or wrong."""
        try:
            return cls.from_dict(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"load-test plan {str(path)!r} is unreadable: {exc}") from None
