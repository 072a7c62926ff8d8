"""What a rollout is asked for (`RolloutSpec`): the controller (rollouts.run) takes it, and the
report reads it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from graphserve.core.tls import ClientTls

__all__ = ["RolloutSpec"]


@dataclass(frozen=True)
class RolloutSpec:
    """One rollout. `rate` (open loop, req/s) or `users` (closed loop); neither: rate 200.
    `new_version` is the SavedModel directory to push; None with `push_existing`."""

    address: str
    model_base_path: Path
    new_version: Path | None = None
    push_existing: bool = False
    model_name: str | None = None  # None: the directory name of model_base_path
    signature_name: str = "serving_default"
    rate: float | None = None
    users: int | None = None
    max_in_flight: int = 16  # open loop: the users (threads) that send the arrivals
    before_s: float = 10.0
    after_s: float = 30.0
    timeout_s: float = 60.0  # for the push to come and the new version to become AVAILABLE
    poll_s: float = 0.05
    slo: tuple[str, ...] = ()
    batch_size: int = 1
    seed: int = 0
    first_requests: int = 20
    steady_requests: int = 200
    tls: ClientTls | None = None  # dial over TLS with these (a grpcs:// address alone: system CAs)
    traffic: Path | None = None  # a traffic file's predict requests, in order, cycling
    traffic_model: str | None = None  # its records of this model [default: the rollout's]

    @property
    def name(self) -> str:
        """The model: `model_name`, else the directory name of `model_base_path`."""
        return self.model_name or self.model_base_path.resolve().name

    @property
    def open_loop(self) -> bool:
        """Arrivals at `rate` req/s (the default), not `users` in a closed loop."""
        return self.users is None
