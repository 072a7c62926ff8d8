"""One server, many models: `graphserve loadtest many`.

    popularity = Popularity.zipf(models_from_config(Path("copies/models.config")), s=1.1)
    spec = ManySpec(target="grpc://127.0.0.1:8500", popularity=popularity, rate=200,
                    duration_s=60, rest_port=8501)
    report = many(spec, Path("reports/many"))

Locust (loadtest/manymodels/locustfile.py, in a subprocess) sends each request to a model drawn
by popularity, and records every request with the server's cold-load mark. This process is the
controller: it builds one payload per distinct input signature (read from each model's SavedModel
when its base path is on this machine, else from the server's metadata, which may load it),
starts the load, scrapes the server's Prometheus metrics every `scrape_every_s` (loads, evictions,
cold requests, resident bytes and versions, RSS), stops the load after `duration_s` (or when the
request cap is spent) and writes OUT/many.{json,md,html,csv} and the plots.

Targets: `grpc://HOST:PORT` or a bare HOST:PORT (gRPC), `http://HOST:PORT` (REST), over TLS
`grpcs://` or `https://` (or a bare HOST:PORT with the --tls-* options: `ManySpec.tls`);
loopback only (loadtest/generator/targets.py). The metrics are the REST port's
/monitoring/prometheus/metrics: a REST target's own, a gRPC target's with `rest_port` (over
HTTPS for a TLS target: the servers serve metrics with the same certificate), or `metrics_url`.
A server or metrics endpoint that cannot be reached for TLS stops the run before any load,
saying why. TensorFlow (through the payload and metadata modules) is imported when a run
starts, not at import.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graphserve.core.defaults import DEFAULT_METRICS_PATH
from graphserve.core.errors import LoadTestError
from graphserve.core.tls import ClientTls
from graphserve.loadtest.generator.locustrun import (
    read_records,
    start_locust,
    stop_locust,
    wait_started,
)
from graphserve.loadtest.generator.reach import check_metrics_tls, check_tls
from graphserve.loadtest.generator.targets import check_loopback, dial, host_of, scheme_tls
from graphserve.loadtest.manymodels.scrapes import Scrapes
from graphserve.loadtest.manymodels.spec import ManySpec, Target
from graphserve.loadtest.results.many import ManyReport, PayloadGroup
from graphserve.loadtest.results.run import PayloadInput

__all__ = ["LOCUSTFILE", "ManySpec", "Scrapes", "Target", "many", "metrics_url_of", "parse_target"]

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
_START_TIMEOUT_S = 90.0  # locust's start-up, on a busy machine
_STOP_TIMEOUT_S = 45.0  # the users finish the call they are in (a cold one waits for a load)
_BOUND_MARGIN_S = 60.0  # locust's own -t, past the controller's end
# What a run writes into OUT/raw, and removes first when OUT holds an earlier run's
_RAW_FILES = ("plan.json", "requests.npz", "started.json", "stop", "records.npz", "scrapes.jsonl")

Say = Callable[[dict[str, Any]], None]


def parse_target(text: str, tls: ClientTls | None = None) -> Target:
    """`grpc://HOST:PORT` or HOST:PORT (gRPC), `http://HOST:PORT` (REST), `grpcs://` and
    `https://` over TLS; with the options `tls`, over TLS with them. Raises RemoteTargetError
    for an address off loopback or one that cannot be read, TlsConfigError for `grpc://` or
    `http://` with options."""
    text = text.strip()
    scheme = text.partition("://")[0].lower() if "://" in text else ""
    protocol = "rest" if scheme in ("http", "https") else "grpc"
    check_loopback(text)  # an address it cannot read is refused before its scheme is
    address, dialed = dial(protocol, text, tls)
    return Target(protocol, address, dialed)


def metrics_url_of(target: Target, metrics_url: str | None, rest_port: int | None) -> str | None:
    """The Prometheus URL to scrape: `metrics_url`, else the REST port's metrics path (the REST
    target's, or the gRPC target's host at `rest_port`, https:// for a TLS target); None for a
    gRPC target without either. Raises RemoteTargetError for a URL off loopback."""
    if metrics_url:
        check_loopback(metrics_url)
        return metrics_url
    if target.protocol == "rest":
        return target.address + DEFAULT_METRICS_PATH
    if rest_port is not None:
        host = host_of(target.address)
        host = f"[{host}]" if ":" in host else host
        scheme = "https" if target.tls is not None else "http"
        return f"{scheme}://{host}:{rest_port}{DEFAULT_METRICS_PATH}"
    return None


def many(spec: ManySpec, out_dir: Path, progress: Say | None = None) -> ManyReport:
    """Run the load, write OUT/many.{json,md,html,csv} and the plots; return the report.

    Raises RemoteTargetError (a target or metrics URL off loopback), SloError (a gate that cannot
    be read), LoadTestError (a spec that cannot work), PayloadError (a model whose inputs cannot
    be read or built), LocustRunError (locust failed or left no records). Missed gates are not
    raised: they are in report.slo. ServerUnreachable when TLS is why the server or its metrics
    cannot be reached (TlsConfigError for options that contradict the target's scheme).
    """
    from graphserve.loadtest.manymodels.analysis import build_report, parse_gates
    from graphserve.loadtest.manymodels.report import write_many

    target = parse_target(spec.target, spec.tls)
    metrics_url = metrics_url_of(target, spec.metrics_url, spec.rest_port)
    metrics_tls = scheme_tls(metrics_url, target.tls) if metrics_url else None
    _check(spec)
    gates = parse_gates(spec.slo)
    if spec.popularity.names:  # before any load: TLS that cannot work, said once
        first = spec.popularity.names[0]
        check_tls("the server", target.protocol, target.address, target.tls, first)
    if metrics_url is not None:
        check_metrics_tls(metrics_url, metrics_tls)
    say = progress or (lambda _event: None)
    raw = out_dir / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for stale in _RAW_FILES:
        (raw / stale).unlink(missing_ok=True)
    say({"event": "payload", "models": len(spec.popularity.names)})
    payloads = _payloads(spec, target, out_dir)
    scrapes = Scrapes(metrics_url, raw / "scrapes.jsonl", metrics_tls)
    scrapes.take()  # before the load: the counters' baseline
    if metrics_url is not None and scrapes.first is None:
        say({"event": "warning", "message": f"{metrics_url} did not answer: no server counters"})
    process = _start_locust(spec, target, out_dir)
    try:
        t0 = _drive(spec, process, raw, scrapes, say)
    finally:
        (raw / "stop").touch()
        stop_locust(process, _STOP_TIMEOUT_S)
    scrapes.take()  # after the load: the counters' end
    records = read_records(raw, out_dir / "locust.log")
    report = build_report(spec, target, metrics_url, payloads, records, t0, scrapes, gates)
    write_many(report, out_dir)
    return report


# ---------------------------------------------------------------------------------------------


def _check(spec: ManySpec) -> None:
    if spec.rate is not None and spec.rate <= 0:
        raise LoadTestError(f"--rate {spec.rate:g}: the rate must be above 0 req/s")
    if spec.users < 1 or spec.duration_s <= 0 or spec.scrape_every_s <= 0 or spec.batch_size < 1:
        raise LoadTestError(
            "users and batch size must be 1 or more; duration and scrape period above 0 s"
        )
    if spec.max_requests is not None and spec.max_requests < 1:
        raise LoadTestError(f"--max-requests {spec.max_requests}: at least 1")
    for name, ratio in (("--max-failure-ratio", spec.max_failure_ratio),
                        ("--min-hit-ratio", spec.min_hit_ratio)):  # fmt: skip
        if ratio is not None and not 0 <= ratio <= 1:
            raise LoadTestError(f"{name} {ratio:g}: a ratio between 0 and 1")


@dataclass
class _Group:
    inputs: dict[str, Any]
    source: str
    specs: tuple[Any, ...] = ()
    models: int = 0
    shapes: list[str] = field(default_factory=list)  # --traffic: each request's shape


def _payloads(spec: ManySpec, target: Target, out_dir: Path) -> list[PayloadGroup]:
    """One payload per distinct input signature; OUT/payload-<g>.npz and OUT/raw/requests.npz
    (see the locustfile), and OUT/raw/plan.json. A signature is read once per saved_model.pb
    file (hard-linked copies share one) and a payload built once per signature."""
    import numpy as np

    from graphserve.core.client import predict_request
    from graphserve.loadtest.generator.payloads import grpc_request_bytes, rest_body, save_payload

    popularity = spec.popularity
    by_file: dict[tuple[int, int], int] = {}
    by_specs: dict[tuple[Any, ...], int] = {}
    groups: list[_Group] = []
    member: list[int] = []
    for name, base in zip(popularity.names, popularity.base_paths, strict=True):
        key = _file_key(base)
        group = by_file.get(key) if key is not None else None
        if group is None:
            group = _group_of(spec, target, name, base, by_specs, groups)
            if key is not None:
                by_file[key] = group
        groups[group].models += 1
        member.append(group)
    arrays: dict[str, Any] = {"group": np.asarray(member, np.int32)}
    recorded = _recorded(spec, target, groups) if spec.traffic is not None else None
    for index, made in enumerate(groups):
        save_payload(out_dir / f"payload-{index}.npz", made.inputs)
        if recorded is not None:
            bodies = recorded[index]
        elif target.protocol == "grpc":
            bodies = [grpc_request_bytes(made.inputs, "", spec.signature_name)]
        else:
            bodies = [rest_body(made.inputs, spec.signature_name)]
        arrays[f"body_{index}"] = np.frombuffer(b"".join(bodies), np.uint8)
        arrays[f"body_lengths_{index}"] = np.asarray([len(b) for b in bodies], np.int64)
    if target.protocol == "grpc":
        heads = [predict_request(name, {}).SerializeToString() for name in popularity.names]
        arrays["heads"] = np.frombuffer(b"".join(heads), np.uint8)
        arrays["head_lengths"] = np.asarray([len(h) for h in heads], np.int64)
    with (out_dir / "raw" / "requests.npz").open("wb") as f:
        np.savez(f, **arrays)
    plan = {
        "protocol": target.protocol,
        "names": list(popularity.names),
        "weights": list(popularity.weights),
        "seed": spec.seed,
        "rate": spec.rate,
        "max_requests": spec.max_requests,
    }
    (out_dir / "raw" / "plan.json").write_text(json.dumps(plan))
    return [
        PayloadGroup(
            models=made.models,
            source=made.source,
            file=f"payload-{index}.npz",
            inputs={
                n: PayloadInput(dtype=str(a.dtype), shape=list(a.shape))
                for n, a in made.inputs.items()
            },
            traffic_requests=len(made.shapes) if spec.traffic is not None else None,
            traffic_shapes=dict(Counter(made.shapes).most_common()) if made.shapes else None,
        )
        for index, made in enumerate(groups)
    ]


def _recorded(spec: ManySpec, target: Target, groups: list[_Group]) -> list[list[bytes]]:
    """Under --traffic: each group's bodies, the file's predict requests (of --traffic-model,
    else of any model) whose inputs fit the group's signature, encoded once with no model
    named (gRPC: each model's head names it; REST: its path). TrafficError for a file that
    cannot be read, TrafficLoadError for a group no request fits."""
    from graphserve.core.signature import SERVING_DEFAULT
    from graphserve.loadtest.generator.recorded import TrafficLoadError, prepare
    from graphserve.model.traffic import TrafficError, check_fits, read_traffic

    assert spec.traffic is not None
    records = read_traffic(spec.traffic).records
    signature = spec.signature_name or SERVING_DEFAULT
    numbers = [
        n for n, r in enumerate(records)
        if r.kind == "predict" and r.signature == signature
        and spec.traffic_model in (None, r.model)
    ]  # fmt: skip
    out = []
    for group in groups:
        fits = []
        for n in numbers:
            try:
                check_fits(n, records[n], group.specs, "")
            except TrafficError:
                continue
            fits.append(n)
        if not fits:
            whose = f"of model {spec.traffic_model!r} " if spec.traffic_model else ""
            raise TrafficLoadError(
                f"--traffic {spec.traffic}: no predict request {whose}of signature "
                f"{signature!r} fits the inputs of the models read from {group.source} ("
                + ", ".join(s.describe() for s in group.specs)
                + "): name the file's model with --traffic-model, or leave --traffic out"
            )
        prepared = prepare([records[n] for n in fits], indices=fits, model="")
        group.shapes = [p.shape for p in prepared]
        if target.protocol == "grpc":
            out.append([_unnamed(p.grpc) for p in prepared])
        else:
            out.append([p.rest_body or b"" for p in prepared])
    return out


def _unnamed(request: bytes) -> bytes:
    """A serialized PredictRequest without its model's name, version or label: each model's
    head names the model (the locustfile sends head + body)."""
    from tensorflow_serving.apis import predict_pb2

    message = predict_pb2.PredictRequest.FromString(request)
    message.model_spec.ClearField("name")
    message.model_spec.ClearField("version_choice")
    return message.SerializeToString()


def _file_key(base: Path | None) -> tuple[int, int] | None:
    """(device, inode) of the newest version's saved_model.pb: hard links share it."""
    if base is None:
        return None
    from graphserve.core.savedmodel import find_saved_model_file
    from graphserve.core.versions import version_dirs

    versions = version_dirs(base)
    found = find_saved_model_file(versions[max(versions)]) if versions else None
    if found is None:
        return None
    stat = found.stat()
    return stat.st_dev, stat.st_ino


def _group_of(
    spec: ManySpec,
    target: Target,
    name: str,
    base: Path | None,
    by_specs: dict[tuple[Any, ...], int],
    groups: list[_Group],
) -> int:
    """The group of `name`'s signature, read from its SavedModel (`base`) or the server's
    metadata; a new group, with its payload, for a signature not seen before."""
    from graphserve.core.signature import SERVING_DEFAULT
    from graphserve.loadtest.comparison.run import Arm, CompareSpec, payload_specs
    from graphserve.loadtest.generator.payloads import build_payload

    asked = CompareSpec(
        arms=(Arm("target", target.address, tls=target.tls),),
        protocol=target.protocol,
        model_name=name,
        signature_name=spec.signature_name,
        model_base_path=base,
    )
    specs, origin, recorded = payload_specs(asked)
    key = tuple(specs)
    if key not in by_specs:
        signature = spec.signature_name or SERVING_DEFAULT
        inputs = build_payload(specs, spec.batch_size, spec.seed, recorded, signature)
        by_specs[key] = len(groups)
        groups.append(_Group(inputs, origin, key))
    return by_specs[key]


def _start_locust(spec: ManySpec, target: Target, out_dir: Path) -> subprocess.Popen[bytes]:
    bound = spec.duration_s + _START_TIMEOUT_S + _BOUND_MARGIN_S
    options = ["--many-dir", str((out_dir / "raw").resolve())]
    log = out_dir / "locust.log"
    return start_locust(LOCUSTFILE, target.address, spec.users, bound, log, options, target.tls)


def _drive(
    spec: ManySpec, process: subprocess.Popen[bytes], raw: Path, scrapes: Scrapes, say: Say
) -> float:
    """Wait for the load to start, scrape while it runs, return when it should end (after
    `duration_s`, or when locust quit on the request cap); the load's t0."""
    t0 = wait_started(process, raw, raw.parent / "locust.log", _START_TIMEOUT_S)
    say({"event": "load_started"})
    end_at, next_scrape = t0 + spec.duration_s, time.time()
    while process.poll() is None and time.time() < end_at:
        if time.time() >= next_scrape:
            scrapes.take()
            next_scrape += spec.scrape_every_s
        time.sleep(max(0.0, min(0.05, next_scrape - time.time())))
    say({"event": "stopping"})
    return t0
