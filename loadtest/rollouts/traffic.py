"""A rollout under recorded traffic: the requests its locust users cycle through, from the
traffic file's predict records of the model, each sent to the rollout's model with no version
pinned, so whichever version serves answers. They travel in OUT/raw/requests.bin, and each
version's first answer to each record comes back in OUT/raw/answers.bin
(graphserve.loadtest.generator.framed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from graphserve.loadtest.rollouts.spec import RolloutSpec

__all__ = ["traffic_requests"]


def traffic_requests(spec: RolloutSpec) -> list[bytes]:
    """The predict requests of `spec.traffic` for `spec.traffic_model` (default: the rollout's
    model), each sent to the rollout's model. TrafficError for a file that cannot be read,
    TrafficLoadError for one with no such request."""
    from graphserve.loadtest.generator.recorded import TrafficLoadError, predict_records
    from graphserve.model.traffic import read_traffic

    assert spec.traffic is not None
    records = read_traffic(spec.traffic).records
    wanted = spec.traffic_model or spec.name
    try:
        kept = [records[n] for n in predict_records(records, wanted, "--traffic-model")]
    except TrafficLoadError as exc:
        raise TrafficLoadError(f"--traffic {spec.traffic}: {exc}") from None
    out = []
    for record in kept:
        request = type(record.log.predict_log.request)()
        request.CopyFrom(record.log.predict_log.request)
        request.model_spec.name = spec.name
        request.model_spec.ClearField("version_choice")
        if spec.signature_name and not request.model_spec.signature_name:
            request.model_spec.signature_name = spec.signature_name
        out.append(request.SerializeToString())
    return out
