"""`run_bench`: every suite in one run, the goals evaluated on it, the results written.

    in-process   mlp b1 and b32, power, cnn: concrete / eager / predict / function / xla
    codec        224×224×3 float32: tensor_content vs typed fields vs JSON
    json         the REST JSON codec before (standard library) and after (pysimdjson, orjson)
    cold start   per model: graph with and without warm-up records, and eager
    served       per model: graph, eager, null and peer at concurrency 1 (gRPC and REST), and
                 batching off vs on at 16 clients; the image model's served p50 for the codec goal;
                 MobileNetV2 (graph and null at concurrency 1, graph batching off vs on), the
                 model whose own time dominates, for the first batching goal
    generator    one locust process per protocol against mlp's null server: requests per second
                 per CPU core the load generator spends; and our generator against perf_analyzer
                 (gRPC) and wrk (REST) on mlp's graph and null servers (tools/bench/generator.py)

Order matters on a small machine: the in-process suites run first, before any server exists;
cold starts run next, one server at a time; each model's servers run only while that model is
measured.
Results go to OUT/results.json and OUT/results.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tools.bench.generator import AgreementPlan
from tools.bench.goals import evaluate
from tools.bench.served import SERVER_KINDS

if TYPE_CHECKING:
    from graphserve.core.processes import ServerProcess

__all__ = ["MODELS", "BenchModel", "BenchSpec", "run_bench", "write_results"]


@dataclass(frozen=True)
class BenchModel:
    name: str
    source: str
    batch_sizes: tuple[int, ...] = (1,)


MODELS: tuple[BenchModel, ...] = (
    BenchModel("mlp", "examples:mlp", (1, 32)),
    BenchModel("power", "examples:power"),
    BenchModel("cnn", "examples:cnn"),
)
IMAGE = BenchModel("image", "tools.bench.models:image")  # the 224×224×3 request of the codec goal
MOBILENET = BenchModel("mobilenet", "tools.bench.mobilenet:mobilenet")  # batching's goal G4a
MOBILENET_KINDS = ("graph", "null", "graph-batching")


@dataclass
class BenchSpec:
    """How long each part measures; `quick()` is the seconds-long variant the tests run."""

    work_dir: Path
    models: tuple[BenchModel, ...] = MODELS
    in_process_s: float = 4.0  # per model and batch size, all five methods interleaved
    codec_s: float = 4.0
    served_s: float = 10.0  # per model and batch size, all seven arms interleaved
    batching_s: float = 10.0  # per model and runner, off and on together
    batching_clients: int = 16
    cold_start_steady: int = 200
    cold_start_runs: int = 3  # the first request is one sample: the goal takes the median run
    cold_start: bool = True
    image: bool = True
    mobilenet: bool = True
    json_s: float = 4.0  # per shape, the REST JSON codec before and after issue 15
    generator_s: float = 6.0  # per protocol: one locust process against the null server
    # Ours against perf_analyzer (gRPC) and wrk (REST) on mlp's graph and null servers (both
    # installed on first use, tools/bench/tools.py); None: not run. `python -m tools.bench
    # generator` runs the whole matrix.
    agreement: AgreementPlan | None = field(
        default_factory=lambda: AgreementPlan(
            runs=(("graph", "grpc"), ("graph", "rest"), ("null", "grpc")),
            clients=(1, 16),
            rounds=1,
        )
    )

    @classmethod
    def quick(cls, work_dir: Path, models: tuple[BenchModel, ...] = MODELS[:1]) -> BenchSpec:
        return cls(
            work_dir,
            models,
            in_process_s=0.3,
            codec_s=0.3,
            served_s=0.5,
            batching_s=1.0,
            cold_start_steady=20,
            cold_start_runs=1,
            json_s=0.3,
            generator_s=1.0,
            agreement=AgreementPlan(
                runs=(("graph", "grpc"), ("graph", "rest")), clients=(1, 16), rounds=1, window_s=0.5
            ),
        )


@dataclass
class _Run:
    spec: BenchSpec
    say: Callable[[str], None]
    results: dict[str, Any] = field(default_factory=dict)


def run_bench(spec: BenchSpec, say: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """Run every suite of `spec` and return the results with the goals evaluated.

    Raises what the parts raise: SourceError/SignatureError/ExportError for a model that cannot
    be loaded or exported, RuntimeError for a server that does not start or answers wrongly.
    """
    from graphserve.loadtest.comparison.run import environment

    started = time.perf_counter()
    run = _Run(spec, say)
    run.results.update(
        environment=environment().to_json(),
        in_process={},
        codec={},
        json={},
        served={},
        cold_start={},
        generator={},
    )
    _in_process(run)
    _codec(run)
    _json(run)
    bases = {model.name: _export(run, model) for model in spec.models}
    if spec.cold_start:  # first, while this process has no channels or servers of its own
        for model in spec.models:
            _cold_start(run, model, bases[model.name])
    for model in spec.models:
        _served(run, model, bases[model.name])
    if spec.image:
        _served(run, IMAGE, _export(run, IMAGE), kinds=("graph",), batching=False)
    if spec.mobilenet:
        _served(run, MOBILENET, _export(run, MOBILENET), kinds=MOBILENET_KINDS)
    run.results["seconds"] = time.perf_counter() - started
    run.results["goals"] = [g.to_json() for g in evaluate(run.results)]
    return run.results


def _in_process(run: _Run) -> None:
    from tools.bench.inprocess import in_process

    for model in run.spec.models:
        for batch in model.batch_sizes:
            run.say(f"in-process: {model.name} batch {batch}")
            result = in_process(model.name, model.source, batch, budget_s=run.spec.in_process_s)
            run.results["in_process"][f"{model.name}/b{batch}"] = result.to_json()


def _codec(run: _Run) -> None:
    from tools.bench.wire import codec_suite

    run.say("codec: 224×224×3 float32")
    for timing in codec_suite(budget_s=run.spec.codec_s):
        run.results["codec"][timing.encoding] = timing.to_json()


def _json(run: _Run) -> None:
    from tools.bench.wire import json_suite

    run.say("JSON codec: before and after issue 15")
    for name, timings in json_suite(budget_s=run.spec.json_s).items():
        run.results["json"][name] = {t.encoding: t.to_json() for t in timings}


def _export(run: _Run, model: BenchModel) -> Path:
    from graphserve.exporter.api import ExportSpec, export_model

    base = run.spec.work_dir / "models"
    result = export_model(
        ExportSpec(model.source, model.name, base_path=base, overwrite=True, version=1)
    )
    run.say(f"exported {model.name} to {result.path} ({result.seconds:.1f} s)")
    return base / model.name


def _served(
    run: _Run,
    model: BenchModel,
    base: Path,
    kinds: tuple[str, ...] = SERVER_KINDS,
    batching: bool = True,
) -> None:
    from graphserve.loadtest.generator.metadata import fetch_specs
    from graphserve.loadtest.generator.payloads import build_payload
    from tools.bench.served import (
        batching_load,
        encode_requests,
        model_servers,
        served_latency,
        server_kinds_json,
    )

    run.say(f"starting {', '.join(kinds)} servers for {model.name}")
    with model_servers(model.name, base, model.source, run.spec.work_dir, kinds) as servers:
        specs = fetch_specs("grpc", servers["graph"].grpc_address, model.name, "serving_default")
        started = server_kinds_json(servers)
        for batch in model.batch_sizes:
            key = f"{model.name}/b{batch}"
            run.say(f"served: {key} at concurrency 1")
            requests = encode_requests(model.name, build_payload(specs, batch_size=batch))
            entry: dict[str, Any] = {
                "servers": started,
                "request_bytes": {"grpc": len(requests.grpc), "rest": len(requests.rest_body)},
            }
            latency = served_latency(servers, requests, budget_s=run.spec.served_s)
            entry["latency"] = {arm: t.to_json() for arm, t in latency.items()}
            for runner in ("graph", "eager"):
                if batching and batch == 1 and f"{runner}-batching" in servers:
                    clients = run.spec.batching_clients
                    run.say(f"served: {key}, {runner}, {clients} clients, batching off/on")
                    entry[f"{runner}_batching"] = batching_load(
                        servers,
                        requests,
                        clients=clients,
                        seconds=run.spec.batching_s,
                        runner=runner,
                    ).to_json()
            run.results["served"][key] = entry
        if model.name == "mlp" and "null" in servers:
            _generator(run, servers, model.name)


def _generator(run: _Run, servers: Mapping[str, ServerProcess], model_name: str) -> None:
    from tools.bench.generator import agreements, generator_capacity

    null = servers["null"]
    for protocol, address in (("grpc", null.grpc_address), ("rest", str(null.rest_address))):
        run.say(f"load generator: one locust process, {protocol} user, against the null server")
        capacity = generator_capacity(protocol, address, model_name, seconds=run.spec.generator_s)
        run.results["generator"][protocol] = capacity.to_json()
    if run.spec.agreement is not None:
        work = run.spec.work_dir / "agreement"
        run.results["agreement"] = agreements(
            servers, model_name, run.spec.agreement, work, run.say
        )


def _cold_start(run: _Run, model: BenchModel, base: Path) -> None:
    from graphserve.loadtest.comparison.coldstart import cold_start_suite
    from graphserve.loadtest.generator.payloads import build_payload
    from graphserve.model.sources import load_source, resolve_contracts

    contract = resolve_contracts(load_source(model.source))[0]
    run.say(f"cold start: {model.name}")
    starts = cold_start_suite(
        base,
        model.source,
        model.name,
        build_payload(contract.inputs, batch_size=1),
        work_dir=run.spec.work_dir / "cold-start" / model.name,
        steady_requests=run.spec.cold_start_steady,
        runs=run.spec.cold_start_runs,
        log=run.say,
    )
    run.results["cold_start"][model.name] = [s.to_json() for s in starts]


def write_results(
    results: dict[str, Any], out_dir: Path, name: str = "results"
) -> tuple[Path, Path]:
    """Write OUT/NAME.json and OUT/NAME.md (the suite's); returns their paths."""
    from tools.bench.published import write

    json_path, md_path = write(name, results, out_dir)
    return json_path, md_path
