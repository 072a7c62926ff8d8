"""Wait until TF Serving (or an embedded server) reports every model AVAILABLE over gRPC.

`ModelService.GetModelStatus` through the official `tensorflow-serving-api` stubs. A model is
ready when each version the server reports is AVAILABLE (an END version that unloaded cleanly,
an older one replaced by a newer, does not count against it). A version that ENDed with an error
failed to load: that fails at once instead of at the timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from deploy.errors import NotAvailableError

__all__ = ["VersionStatus", "model_status", "wait_until_available"]


@dataclass(frozen=True)
class VersionStatus:
    version: int
    state: str  # START, LOADING, AVAILABLE, UNLOADING, END
    error_code: int  # tensorflow.error.Code; 0 is OK
    error_message: str

    def to_json(self) -> dict[str, object]:
        return {
            "version": self.version,
            "state": self.state,
            "error_code": self.error_code,
            "error_message": self.error_message,
        }


def model_status(address: str, model_name: str, timeout: float = 2.0) -> list[VersionStatus]:
    """The versions of `model_name` the server at `address` knows; [] when it is not reachable
    yet or does not know the model (yet)."""
    import grpc
    from tensorflow_serving.apis import get_model_status_pb2, model_service_pb2_grpc

    request = get_model_status_pb2.GetModelStatusRequest(model_spec={"name": model_name})
    # A fresh channel per poll: a channel that failed to connect backs off for longer and longer,
    # and would notice a server that has just come up late.
    with grpc.insecure_channel(address) as channel:
        stub = model_service_pb2_grpc.ModelServiceStub(channel)
        try:
            response = stub.GetModelStatus(request, timeout=timeout)
        except grpc.RpcError:
            return []
    state_name = get_model_status_pb2.ModelVersionStatus.State.Name
    return [
        VersionStatus(
            int(v.version), state_name(v.state), int(v.status.error_code), v.status.error_message
        )
        for v in response.model_version_status
    ]


def _ready(statuses: list[VersionStatus]) -> bool:
    live = [s for s in statuses if s.state != "END"]
    return bool(live) and all(s.state == "AVAILABLE" for s in live)


def wait_until_available(
    address: str,
    model_names: Iterable[str],
    *,
    timeout: float,
    interval: float = 1.0,
    check: Callable[[], None] | None = None,
) -> dict[str, list[VersionStatus]]:
    """Poll until every model is ready; returns the last status of each.

    `check`, called between polls, may raise to stop early (say, the container has exited).
    Raises NotAvailableError when a version failed to load, or at `timeout` seconds naming the
    models that are not ready and what the server last said about them.
    """
    names = list(model_names)
    deadline = time.monotonic() + timeout
    last: dict[str, list[VersionStatus]] = {name: [] for name in names}
    while True:
        for name in names:
            if _ready(last[name]):
                continue
            last[name] = model_status(address, name)
            for status in last[name]:
                if status.state == "END" and status.error_code != 0:
                    raise NotAvailableError(
                        f"model {name} version {status.version} failed to load: "
                        f"{status.error_message or f'error code {status.error_code}'}"
                    )
        pending = [name for name in names if not _ready(last[name])]
        if not pending:
            return last
        if time.monotonic() >= deadline:
            said = "; ".join(
                f"{name}: "
                + (", ".join(f"v{s.version} {s.state}" for s in last[name]) or "no answer")
                for name in pending
            )
            raise NotAvailableError(f"not AVAILABLE after {timeout:g}s at {address} ({said})")
        if check is not None:
            check()
        time.sleep(min(interval, max(deadline - time.monotonic(), 0.0)))
