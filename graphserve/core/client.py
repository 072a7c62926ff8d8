"""The one client of the TensorFlow Serving APIs, for everything that talks to a server: the load
test's users, the benchmarks, cold start, deploy's wait, and the tests. Against TF Serving itself
or the embedded servers alike.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["VersionStatus", "model_status"]


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
