"""Cold start: how long a server takes to become ready, and what its first request costs.

Each measurement starts `graphserve serve ...` as a child process on free loopback ports and takes

    ready_s            from just before the process is started to the first GetModelStatus that
                       reports the model AVAILABLE (asked every 10 ms)
    first_request_ms   the first Predict after ready (over an already connected channel)
    steady_p50_ms      the median (nearest rank) of the next `steady_requests` Predicts, in turn

then stops the server with SIGTERM. `cold_start_suite` runs the graph server with the SavedModel's
warm-up records, the graph server on a copy without them, and the eager server, to show what the
records buy: a first request close to steady state.

Failures raise LoadTestError subclasses: ServerStartError when the server exits or is not ready
in time, ColdStartError when a Predict fails; both carry the end of the server's log.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import grpc
import numpy as np

from graphserve.core.client import GrpcClient, predict_outputs
from graphserve.core.errors import ColdStartError, LoadTestError, ServerStartError
from graphserve.core.processes import ServerProcess, serve_args
from graphserve.core.versions import version_dirs
from graphserve.loadtest.generator.payloads import grpc_request_bytes
from graphserve.loadtest.results.run import ColdStartRun
from graphserve.loadtest.results.stats import percentile
from graphserve.model.warmup import WARMUP_FILE

__all__ = [
    "ColdStartError",
    "ColdStartRun",
    "cold_start_suite",
    "measure_cold_start",
    "without_warmup_copy",
]

_POLL_S = 0.01
_RPC_TIMEOUT_S = 60.0  # a cold first request may compile kernels; far above any steady one


def measure_cold_start(
    serve_args: Sequence[str],
    model_name: str,
    *,
    server: str,
    warmup_records: bool,
    payload: Mapping[str, np.ndarray],
    signature_name: str = "serving_default",
    steady_requests: int = 200,
    log_path: Path,
    timeout_s: float = 180.0,
) -> ColdStartRun:
    """Start `graphserve serve *serve_args` (ports are added), time ready and the first Predict
    of `payload` against `steady_requests` more, stop it; `server` and `warmup_records` only
    label the result. Raises ServerStartError or ColdStartError with the server's log tail."""
    if steady_requests < 1:
        raise ColdStartError(f"steady_requests must be at least 1, got {steady_requests}")
    request = grpc_request_bytes(payload, model_name, signature_name)
    process = ServerProcess.on_free_ports(serve_args, model_name, log_path)
    command = " ".join(["graphserve", "serve", *serve_args])
    try:
        try:
            process.start(timeout=timeout_s, poll_s=_POLL_S)
        except RuntimeError as exc:
            raise ServerStartError(f"`{command}` did not become ready: {exc}") from None
        assert process.ready_s is not None  # set by a successful start()
        try:
            first_ms, steady_ms = _time_predicts(process.grpc_address, request, steady_requests)
        except grpc.RpcError as exc:
            reason = f"{exc.code().name}: {exc.details()}"
        except grpc.FutureTimeoutError:
            reason = f"no connection to {process.grpc_address} within {_RPC_TIMEOUT_S:g} s"
        except ColdStartError as exc:
            reason = str(exc)
        else:
            reason = ""
        if reason:
            raise ColdStartError(f"Predict to `{command}` failed: {reason}\n{process.log_tail()}")
    finally:
        process.stop()
    return ColdStartRun.measured(
        server=server,
        warmup_records=warmup_records,
        ready_s=process.ready_s,
        first_request_ms=first_ms,
        steady_p50_ms=percentile(np.sort(np.asarray(steady_ms)), 0.5),
        steady_requests=steady_requests,
    )


def _time_predicts(address: str, request: bytes, steady: int) -> tuple[float, list[float]]:
    """The first Predict's time and `steady` more, in ms. The channel connects before the first
    is timed, so it measures the server, not the TCP and HTTP/2 handshake."""
    with GrpcClient.connect(address) as client:
        client.wait_until_connected(_RPC_TIMEOUT_S)
        # Raw: the pre-serialized request goes out as it is (as the locust user).
        predict = client.raw("Predict")
        started = time.perf_counter()
        reply = predict(request, timeout=_RPC_TIMEOUT_S)
        first_ms = (time.perf_counter() - started) * 1000
        if not predict_outputs(reply):
            raise ColdStartError("the first answer has no outputs")
        times = []
        for _ in range(steady):
            started = time.perf_counter()
            predict(request, timeout=_RPC_TIMEOUT_S)
            times.append((time.perf_counter() - started) * 1000)
    return first_ms, times


def without_warmup_copy(model_base_path: Path, dest_base: Path) -> Path:
    """Copy the model base path BASE/NAME (its version directories) to `dest_base`/NAME without
    `assets.extra/tf_serving_warmup_requests` in any version; returns the copy's base path.

    An earlier copy at that place is replaced. The versions' graphserve manifests are copied as
    they are, so their content hash no longer matches (servers do not check it). Raises
    LoadTestError when `model_base_path` holds no numeric version directory.
    """
    source = Path(model_base_path)
    dirs = version_dirs(source)
    if not dirs:
        raise LoadTestError(
            f"{source} holds no numeric version directories: expected a model base path such "
            f"as models/NAME with NAME/1, NAME/2, ..."
        )
    dest = Path(dest_base) / source.name
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for path in dirs.values():
        shutil.copytree(path, dest / path.name)
        (dest / path.name / WARMUP_FILE).unlink(missing_ok=True)
    return dest


def cold_start_suite(
    model_base_path: Path,
    source: str | None,
    model_name: str,
    payload: Mapping[str, np.ndarray],
    *,
    work_dir: Path,
    runs: int = 1,
    steady_requests: int = 200,
    log: Callable[[str], object] | None = None,
    source_flags: Sequence[str] = (),
) -> list[ColdStartRun]:
    """Cold starts of the graph server with the warm-up records, without them (a copy under
    `work_dir`) and, when `source` is given, of the eager server on it (with `source_flags`, e.g.
    the export's --input): `runs` rounds, each measuring every server once, every run reported.
    Server logs go to `work_dir`.

    When the newest version has no warm-up records there is nothing to remove: the graph server
    is measured once per round, labelled without them. Raises as `measure_cold_start`.
    """
    model_base_path = Path(model_base_path)
    dirs = version_dirs(model_base_path)
    has_records = bool(dirs) and (dirs[max(dirs)] / WARMUP_FILE).is_file()
    named = ["--model-name", model_name]
    arms: list[tuple[str, bool, list[str]]] = []
    if has_records:
        bare = without_warmup_copy(model_base_path, Path(work_dir) / "without-warmup")
        arms += [
            ("graph", True, ["graph", "--model-base-path", str(model_base_path), *named]),
            ("graph", False, ["graph", "--model-base-path", str(bare), *named]),
        ]
    else:
        if log is not None:
            log(f"{model_base_path}: the newest version has no warm-up records")
        arms.append(("graph", False, ["graph", "--model-base-path", str(model_base_path), *named]))
    if source is not None:
        eager = serve_args("eager", model_base_path, source, source_flags)
        arms.append(("eager", False, [*eager, *named]))

    results = []
    for run in range(1, runs + 1):
        for server, records, args in arms:
            label = f"{server}-{'warmup' if records else 'no-warmup'}-run{run}"
            result = measure_cold_start(
                args,
                model_name,
                server=server,
                warmup_records=records,
                payload=payload,
                steady_requests=steady_requests,
                log_path=Path(work_dir) / f"{label}.log",
            )
            results.append(result)
            if log is not None:
                log(
                    f"{label}: ready {result.ready_s:.2f} s, first request "
                    f"{result.first_request_ms:.2f} ms, steady p50 {result.steady_p50_ms:.3f} ms "
                    f"({result.first_over_steady or float('inf'):.1f}x)"
                )
    return results
