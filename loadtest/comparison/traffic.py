"""`loadtest compare --traffic FILE`: the requests a comparison cycles through, and the check of
every arm's answers to them.

Before the load, the file's predict requests of the model (`--traffic-model` names the file's
model when the servers serve it under another name) and of the run's signature are checked
against the signature the payload would have been built from (the SavedModel's, or the first
arm's metadata), sent to the run's model with any version they pinned dropped, and encoded once
for the run's protocol into OUT/requests.bin (generator/framed.py). Every arm is sent them in
their order, cycling, in every window.

After the load, each arm's first answer to each request (OUT/raw/answers.bin) is judged with the
exporter's parity rule (graphserve.core.parity, through loadtest/results/answers.py) against the
answer the log holds and against the baseline arm's; the requests that disagree most are saved
under OUT/answers, each with the `loadtest replay` command (and over REST the `curl`) that sends
it again.
"""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from graphserve.core.signature import SERVING_DEFAULT
from graphserve.loadtest.generator.framed import REQUESTS, read_answers, write_requests
from graphserve.loadtest.generator.recorded import (
    Prepared,
    TrafficLoadError,
    predict_records,
    prepare,
)
from graphserve.loadtest.results.answers import (
    Answer,
    grpc_answer,
    judge,
    manifest_tolerances,
    rest_answer,
)
from graphserve.loadtest.results.run import AnswersCheck, TrafficPayload

__all__ = ["answers_check", "traffic_requests"]

# `spec` below is comparison/run.py's CompareSpec (not imported: run imports this module).

_WORST = 5


def traffic_requests(
    spec: Any, model: str, specs: Sequence[Any], origin: str, out_dir: Path
) -> tuple[list[Prepared], TrafficPayload]:
    """The requests to cycle through, written to OUT/requests.bin (and the first to
    OUT/request.bin); TrafficError for a file that cannot be read or holds a request that does
    not fit `specs` (the signature's inputs, read from `origin`), TrafficLoadError for one with
    no predict request of the model and signature."""
    from graphserve.model.traffic import check_fits, read_traffic

    assert spec.traffic is not None
    records = read_traffic(spec.traffic).records
    wanted = spec.traffic_model or model
    signature = spec.signature_name or SERVING_DEFAULT
    try:
        numbers = predict_records(records, wanted, "--traffic-model", signature)
    except TrafficLoadError as exc:
        raise TrafficLoadError(f"--traffic {spec.traffic}: {exc}") from None
    for number in numbers:
        check_fits(number, records[number], specs, f"signature {signature!r} of {origin}")
    prepared = prepare(
        [records[n] for n in numbers],
        indices=numbers,
        model=model,
        columnar=True if spec.rest_format == "columnar" else None,
    )
    bodies = [p.grpc if spec.protocol == "grpc" else p.rest_body or b"" for p in prepared]
    write_requests(out_dir / REQUESTS, bodies)
    (out_dir / "request.bin").write_bytes(bodies[0])
    shapes = Counter(p.shape for p in prepared)
    return prepared, TrafficPayload(
        file=str(spec.traffic.resolve()),
        model=wanted,
        records=len(records),
        requests=len(prepared),
        shapes=dict(shapes.most_common()),
    )


def answers_check(
    spec: Any,
    requests: Sequence[Prepared],
    out_dir: Path,
    baseline: str,
    manifest: Mapping[str, Any] | None,
) -> AnswersCheck:
    """Every arm's first answer to each request, against the log's and the baseline's; the
    requests that disagree most saved under OUT/answers."""
    kept = read_answers(out_dir / "raw")  # (place in requests.bin, arm) -> the answer's bytes
    read = grpc_answer if spec.protocol == "grpc" else rest_answer
    answers: dict[str, list[Answer | None]] = {}
    unread: dict[str, int] = {}
    for index, arm in enumerate(spec.arms):
        answers[arm.name] = []
        for place, request in enumerate(requests):
            body = kept.get((place, index))
            answer = None
            if body is not None:
                try:
                    answer = read(request.kind, body)
                except (ValueError, KeyError, TypeError):
                    unread[arm.name] = unread.get(arm.name, 0) + 1
            answers[arm.name].append(answer)
    tolerances, where = manifest_tolerances(manifest)
    found, worst = judge(
        baseline, answers, [r.logged for r in requests], [(r.index, r.shape) for r in requests],
        tolerances, _WORST,
    )  # fmt: skip
    by_record = {r.index: r for r in requests}
    saved = out_dir / "answers"
    for d in worst:
        saved.mkdir(exist_ok=True)
        request = by_record[d.record]
        d.files = [f"answers/request-{d.record}.pb"]
        (saved / f"request-{d.record}.pb").write_bytes(request.grpc)
        if request.rest_body is not None:
            d.files.append(f"answers/request-{d.record}.json")
            (saved / f"request-{d.record}.json").write_bytes(request.rest_body)
        d.command = _again(spec, d.record)
        if spec.protocol == "rest":
            address = next(a.address for a in spec.arms if a.name == d.arm)
            base = address if "://" in address else f"http://{address}"
            d.curl = request.curl(base.rstrip("/"))
    return AnswersCheck(
        requests=len(requests),
        answered={name: sum(a is not None for a in got) for name, got in answers.items()},
        tolerances={k: list(v) for k, v in sorted(tolerances.items())},
        tolerances_from=where,
        agreements={name: [a.to_json() for a in agreed] for name, agreed in found.items()},
        worst=[d.to_json() for d in worst],
        unread=unread,
    )


def _again(spec: Any, record: int) -> str:
    """The command that sends `record` alone to the same arms again."""
    words = ["graphserve", "loadtest", "replay", str(spec.traffic), "--records", str(record),
             "--rate", "1", "--protocol", spec.protocol]  # fmt: skip
    for arm in spec.arms:
        words += ["--arm", f"{arm.name}={arm.address}"]
    return shlex.join([*words, "--model", str(spec.model_name)])  # sent where the run sent it
