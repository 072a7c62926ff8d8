"""Self-managed comparisons: start the servers, load them, stop them.

    graphserve loadtest compare --model-base-path models/mlp --source examples:mlp

starts the embedded graph server on the SavedModel and the eager server on the source (and any
other runner asked for with --serve: eager-predict, eager-function; --calibrate adds the null
endpoint), each a child process on free loopback ports with metrics on, waits until each reports
its model AVAILABLE, runs the sweep against them, and stops them (SIGTERM, drain) whatever happens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from graphserve.core.defaults import DEFAULT_METRICS_PATH as METRICS_PATH
from graphserve.core.errors import LoadTestError, ServerStartError
from graphserve.core.processes import SERVER_KINDS, serve_args
from graphserve.loadtest.analysis import CALIBRATION_ARM
from graphserve.loadtest.compare import Arm, CompareSpec, compare, model_name_of
from graphserve.loadtest.results import ColdStartRun, Report

__all__ = ["SERVER_KINDS", "Run", "managed_servers", "run_managed"]

# What runs against the servers once they are up: `compare`, or a find-max search.
Run = Callable[[CompareSpec, Path, Callable[[dict[str, Any]], None] | None], Report]

assert CALIBRATION_ARM in SERVER_KINDS  # the null server is the calibration arm


@contextmanager
def managed_servers(
    kinds: Sequence[str],
    *,
    model_base_path: Path,
    source: str | None,
    model_name: str,
    protocol: str,
    log_dir: Path,
    say: Callable[[str], None] = lambda _message: None,
) -> Iterator[list[Arm]]:
    """Start one server per kind; yield their arms (address for `protocol`, metrics URL)."""
    from graphserve.core.processes import ServerProcess

    unknown = [k for k in kinds if k not in SERVER_KINDS]
    if unknown:
        raise LoadTestError(
            f"unknown server kind {', '.join(unknown)}: expected {', '.join(SERVER_KINDS)}"
        )
    if source is None and any("{source}" in SERVER_KINDS[k] for k in kinds):
        raise LoadTestError("the eager servers need --source (the model's Python source)")
    started: list[ServerProcess] = []
    arms: list[Arm] = []
    try:
        for kind in kinds:
            args = [*serve_args(kind, model_base_path, source), "--model-name", model_name]
            args += ["--metrics"]
            process = ServerProcess.on_free_ports(
                args, model_name, log_path=log_dir / f"{kind}-server.log"
            )
            say(f"starting the {kind} server")
            try:
                process.start()
            except RuntimeError as exc:
                raise ServerStartError(f"the {kind} server did not start: {exc}") from None
            started.append(process)
            rest = str(process.rest_address)
            arms.append(
                Arm(
                    name=kind,
                    address=process.grpc_address if protocol == "grpc" else rest,
                    metrics_url=f"http://{rest}{METRICS_PATH}",
                    details={
                        "runner": kind,
                        "managed": True,
                        "grpc": process.grpc_address,
                        "rest": rest,
                        "server_command": ["graphserve", *process.args[3:]],
                    },
                )
            )
            say(f"{kind} server ready: gRPC {process.grpc_address}, REST {rest}")
        yield arms
    finally:
        for process in started:
            process.stop()


def run_managed(
    spec: CompareSpec,
    out_dir: Path,
    *,
    kinds: Sequence[str],
    source: str | None,
    extra_arms: Sequence[Arm] = (),
    cold_start: bool = False,
    say: Callable[[str], None] = lambda _message: None,
    progress: Callable[[dict[str, Any]], None] | None = None,
    run: Run = compare,
) -> Report:
    """Start `kinds` on spec.model_base_path, add `extra_arms` (e.g. a TF Serving address),
    optionally measure cold starts first, `run` the comparison (or a find-max search: any
    function of the spec, the output directory and the progress callback), stop the servers."""
    base = spec.model_base_path
    if base is None:
        raise LoadTestError("a self-managed comparison needs --model-base-path BASE/NAME")
    # The servers serve the model under the name the load test asks for.
    spec = replace(spec, model_name=model_name_of(spec))
    cold: list[ColdStartRun] | None = None
    if cold_start:
        cold = _cold_start(spec, out_dir, source, say)
    with managed_servers(
        kinds,
        model_base_path=base,
        source=source,
        model_name=model_name_of(spec),
        protocol=spec.protocol,
        log_dir=out_dir,
        say=say,
    ) as arms:
        ordered = _order([*arms, *extra_arms])
        return run(replace(spec, arms=ordered, cold_start=cold), out_dir, progress)


def _order(arms: Sequence[Arm]) -> tuple[Arm, ...]:
    """Candidates first, eager baselines last (the very last is the default baseline), null
    endpoint in between: `graph, tfserving, null, eager-predict, eager`."""

    def rank(arm: Arm) -> int:
        if arm.name == "eager":
            return 3
        if arm.name.startswith("eager"):
            return 2
        return 1 if arm.name == CALIBRATION_ARM else 0

    return tuple(sorted(arms, key=rank))


def _cold_start(
    spec: CompareSpec, out_dir: Path, source: str | None, say: Callable[[str], None]
) -> list[ColdStartRun]:
    from graphserve.loadtest.coldstart import cold_start_suite
    from graphserve.loadtest.compare import payload_specs
    from graphserve.loadtest.payloads import build_payload

    assert spec.model_base_path is not None
    specs, _ = payload_specs(spec)
    payload = build_payload(specs, spec.batch_size, spec.seed)
    say("measuring cold starts (time to ready, first request against steady p50)")
    runs = cold_start_suite(
        spec.model_base_path,
        source,
        model_name_of(spec),
        payload,
        work_dir=out_dir / "cold-start",
        log=say,
    )
    return runs
