"""`run_peers`: graphserve's graph server against the servers users pick instead, on one machine,
one SavedModel, one generator.

For each model (the mlp, where the server's own cost dominates a request, and MobileNetV2, where
the model does):

1. export it once; every server serves that SavedModel;
2. the limit (tools/bench/peers/limit.py): the model called in process, at batch sizes 1-16;
3. start every server one at a time (start-up time alone on the machine): graphserve's graph
   server batching off and on, each peer batching off, and on where it batches; check each
   route's first answer against the model's own output; read memory after a warm-up;
4. the ladder: at each number of clients (1, 4, 16, 32), every route in turn, the order
   reversed at each step as `loadtest compare` interleaves its arms, with every other server
   paused (tools/bench/measure.py's `alone`): a warm-up, then a CPU window (measure.py) of
   closed-loop clients (tools/bench/clients.py: one pre-encoded request, the same bytes for every
   server speaking the same API). A route stops climbing once its p99 passes the model's
   budget; its most req/s within the budget is its `max_rps`;
5. perf_analyzer, the second generator, at 1 and 16 clients on every gRPC route it speaks (TF
   Serving's API, and V2 on the peers that serve it).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tools.bench.clients import closed_loop
from tools.bench.measure import alone, cpu_window, idle_cores, pause, resume, tree_memory_mb
from tools.bench.peers import PEER_NAMES, load_peer
from tools.bench.peers.limit import in_process_limit, limit_at
from tools.bench.peers.servers import (
    BATCH_TIMEOUT_MS,
    MAX_BATCH_SIZE,
    Served,
    Target,
    start_graphserve,
    start_peer,
)
from tools.bench.peers.venvs import PeerEnv, PeerInstallError, peer_env

__all__ = ["PEER_MODELS", "PeersSpec", "run_peers"]

Say = Callable[[str], None]

# name -> (source, p99 budget in ms for the most req/s)
PEER_MODELS: dict[str, tuple[str, float]] = {
    "mlp": ("examples:mlp", 25.0),
    "mobilenet": ("tools.bench.mobilenet:mobilenet", 250.0),
}
LIMIT_BATCH_SIZES = (1, 2, 4, 8, 16)


@dataclass
class PeersSpec:
    work_dir: Path
    models: tuple[str, ...] = tuple(PEER_MODELS)
    peers: tuple[str, ...] = PEER_NAMES
    clients: tuple[int, ...] = (1, 4, 16, 32)
    warmup_s: float = 1.0
    window_s: float = 4.0
    limit_s: float = 3.0
    perf_analyzer: bool = True
    perf_window_ms: int = 3000
    budgets_ms: dict[str, float] = field(
        default_factory=lambda: {name: budget for name, (_, budget) in PEER_MODELS.items()}
    )

    @classmethod
    def quick(cls, work_dir: Path, models: Sequence[str], peers: Sequence[str]) -> PeersSpec:
        return cls(
            work_dir, tuple(models), tuple(peers), clients=(1, 16), warmup_s=0.2, window_s=0.5,
            limit_s=0.3, perf_analyzer=False,
        )  # fmt: skip


def run_peers(spec: PeersSpec, say: Say = lambda _m: None) -> dict[str, Any]:
    """Every model against every server of `spec`; the results dictionary
    (tools/bench/results/peers.json)."""
    from graphserve.loadtest.comparison.run import environment

    started = time.perf_counter()
    spec.work_dir = spec.work_dir.resolve()  # the apps run from their log directory
    envs, installs = _install(spec, say)
    results: dict[str, Any] = {
        "environment": environment().to_json(),
        "spec": {
            "clients": list(spec.clients),
            "window_s": spec.window_s,
            "warmup_s": spec.warmup_s,
            "budgets_ms": spec.budgets_ms,
            "max_batch_size": MAX_BATCH_SIZE,
            "batch_timeout_ms": BATCH_TIMEOUT_MS,
        },
        "peers": installs,
        "models": {},
    }
    for model in spec.models:
        results["models"][model] = _model(spec, model, envs, say)
    from tools.bench.goals import PEER_GOALS, evaluate

    results["goals"] = [g.to_json() for g in evaluate(results, PEER_GOALS)]
    results["seconds"] = time.perf_counter() - started
    return results


def _install(spec: PeersSpec, say: Say) -> tuple[dict[str, PeerEnv], dict[str, Any]]:
    envs: dict[str, PeerEnv] = {}
    installs: dict[str, Any] = {}
    for name in spec.peers:
        peer = load_peer(name)
        try:
            env = peer_env(peer, spec.work_dir, say)
        except PeerInstallError as exc:
            installs[name] = {"title": peer.title, "not_installed": str(exc)}
            say(f"{peer.title} left out: {exc}")
            continue
        envs[name] = env
        installs[name] = {
            "title": peer.title, "version": env.version, "install_s": env.install_s,
            "note": peer.note, "tensorflow": env.versions.get("tensorflow"),
            "batching": peer.batching,
        }  # fmt: skip
    return envs, installs


def _inputs(model_dir: Path) -> dict[str, np.ndarray]:
    """One row per input of `serving_default`, values k/16 (short in JSON, exact in float32),
    seeded: the same request for every server."""
    import tensorflow as tf

    function = tf.saved_model.load(str(model_dir)).signatures["serving_default"]
    rng = np.random.default_rng(0)
    specs = function.structured_input_signature[1]
    return {
        name: (rng.integers(0, 17, (1, *spec.shape[1:])) / 16).astype(spec.dtype.as_numpy_dtype)
        for name, spec in specs.items()
    }


def _reference(model_dir: Path, inputs: dict[str, np.ndarray]) -> np.ndarray:
    import tensorflow as tf

    function = tf.saved_model.load(str(model_dir)).signatures["serving_default"]
    (output,) = function(**{k: tf.constant(v) for k, v in inputs.items()}).values()
    return np.asarray(output, dtype=np.float32)


def _model(spec: PeersSpec, model: str, envs: dict[str, PeerEnv], say: Say) -> dict[str, Any]:
    from graphserve.exporter.api import ExportSpec, export_model

    source, _ = PEER_MODELS[model]
    budget = spec.budgets_ms[model]
    base = spec.work_dir / "models"
    say(f"{model}: exporting {source}")
    export_model(ExportSpec(source, model, base_path=base, overwrite=True))
    model_base = base / model
    version_dir = max(model_base.iterdir(), key=lambda p: int(p.name))
    inputs = _inputs(version_dir)
    say(f"{model}: the in-process limit at batch sizes {LIMIT_BATCH_SIZES}")
    limit = in_process_limit(version_dir, inputs, LIMIT_BATCH_SIZES, seconds=spec.limit_s)
    logs = spec.work_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {
        "budget_ms": budget,
        "input_shapes": {k: list(v.shape) for k, v in inputs.items()},
        "limit_points": [p.to_json() for p in limit],
        "servers": {},
        "targets": {},
        "perf_analyzer": {},
    }
    with _servers(spec, model, model_base, version_dir, inputs, envs, logs, say) as running:
        for served, failure in running:
            out["servers"][_server_key(served)] = _server_json(served, failure)
        live = [s for s, failure in running if failure is None]
        targets = [t for s in live for t in s.targets]
        owner = {t.key: s for s in live for t in s.targets}
        for served in live:  # what each costs idle, all paused but it
            with alone(served.pid, _pids(live)):
                out["servers"][_server_key(served)]["idle_cores"] = idle_cores(served.pid)
        points = _ladder(spec, model, targets, owner, live, budget, say)
        for target in targets:
            out["targets"][target.key] = _target_json(target, points[target.key], budget)
        if spec.perf_analyzer:
            out["perf_analyzer"] = _perf_analyzer(spec, model, inputs, live, say)
    _limits(out)
    return out


def _server_key(served: Served) -> str:
    return f"{served.name}/{'batching' if served.config == 'batching on' else 'plain'}"


@contextlib.contextmanager
def _servers(
    spec: PeersSpec,
    model: str,
    model_base: Path,
    version_dir: Path,
    inputs: dict[str, np.ndarray],
    envs: dict[str, PeerEnv],
    logs: Path,
    say: Say,
) -> Iterator[list[tuple[Served, str | None]]]:
    """Start every server one after the other, check its answers and warm it; yield them with
    the reason one failed its check (None: it answers right); stop them all at the end."""
    reference = _reference(version_dir, inputs)
    running: list[tuple[Served, str | None]] = []
    plans: list[tuple[str, bool]] = [("graphserve", False), ("graphserve", True)]
    for name in spec.peers:
        if name in envs:
            plans.append((name, False))
            if load_peer(name).batching:
                plans.append((name, True))
    try:
        for name, batching in plans:
            label = f"{name} (batching {'on' if batching else 'off'})"
            say(f"{model}: starting {label}")
            try:
                if name == "graphserve":
                    served = start_graphserve(model_base, model, inputs, batching, logs)
                else:
                    env = envs[name]
                    served = start_peer(
                        load_peer(name), env.python, env.version, version_dir, model, inputs,
                        batching, logs,
                    )  # fmt: skip
            except RuntimeError as exc:
                say(f"{model}: {label} did not start: {exc}")
                continue
            failure = _check(served, reference)
            if failure:
                say(f"{model}: {label} left out: {failure}")
            served.info["memory_after_warmup"] = tree_memory_mb(served.pid)
            running.append((served, failure))
            pause(served.pid)  # the next one starts alone
        yield running
    finally:
        for served, _ in running:
            resume(served.pid)
            served.stop()


def _check(served: Served, reference: np.ndarray, warm: int = 50) -> str | None:
    """Each route's answer against the model's own output, then `warm` requests more."""
    for target in served.targets:
        try:
            call = target.make_call()
            answer = target.read(call())
            np.testing.assert_allclose(answer, reference, rtol=1e-4, atol=1e-5)
            for _ in range(warm):
                call()
        except AssertionError as exc:
            return f"{target.route.label} answered other values: {str(exc).strip()[:400]}"
        except Exception as exc:  # any client error: the route does not work
            return f"{target.route.label} failed: {type(exc).__name__}: {str(exc)[:400]}"
    return None


def _pids(servers: Sequence[Served]) -> list[int]:
    return [served.pid for served in servers]


def _ladder(
    spec: PeersSpec,
    model: str,
    targets: list[Target],
    owner: dict[str, Served],
    live: list[Served],
    budget_ms: float,
    say: Say,
) -> dict[str, list[dict[str, Any]]]:
    points: dict[str, list[dict[str, Any]]] = {t.key: [] for t in targets}
    climbing = {t.key for t in targets}
    order = list(targets)
    for clients in spec.clients:
        say(f"{model}: {clients} client(s), {len(climbing)} route(s)")
        for target in order:
            if target.key not in climbing:
                continue
            served = owner[target.key]
            with alone(served.pid, _pids(live)):
                point = _window(spec, target, served, clients)
            points[target.key].append(point)
            over = point["p99_ms"] is None or point["p99_ms"] > budget_ms or point["errors"]
            if over:
                climbing.discard(target.key)
        order.reverse()
    return points


def _window(spec: PeersSpec, target: Target, served: Served, clients: int) -> dict[str, Any]:
    """A warm-up, then one measured window of `clients` closed-loop clients."""
    closed_loop(target.make_call, clients=clients, seconds=spec.warmup_s)
    batches = _batch_counts(served)  # the batches formed in the window alone
    window = cpu_window(target.make_call, served.pid, clients=clients, seconds=spec.window_s)
    formed = _formed(batches, _batch_counts(served))
    return {
        "clients": clients,
        **window.load.summary(),
        "cpu_us_per_request": window.cpu_us_per_request,
        "server_cores": window.cores,
        "mean_batch": formed,
    }


def _batch_counts(served: Served) -> tuple[float, float] | None:
    """graphserve's batcher counters (requests, batches) from its metrics; None elsewhere."""
    if served.name != "graphserve" or served.config != "batching on":
        return None
    from graphserve.core.defaults import DEFAULT_METRICS_PATH
    from graphserve.core.httpclient import HttpConnection

    connection = HttpConnection(str(served.info["rest_address"]), 10.0)
    try:
        reply = connection.request("GET", DEFAULT_METRICS_PATH, None, {})
    finally:
        connection.close()
    if reply.status != 200:
        raise RuntimeError(
            f"GET {DEFAULT_METRICS_PATH} answered {reply.status}: {reply.text[:200]}"
        )
    text = reply.text
    counts = {"graphserve_batched_requests_total": 0.0, "graphserve_batches_total": 0.0}
    for line in text.splitlines():
        name = line.split("{")[0].split(" ")[0]
        if name in counts:
            counts[name] += float(line.rsplit(" ", 1)[1])
    return counts["graphserve_batched_requests_total"], counts["graphserve_batches_total"]


def _formed(before: tuple[float, float] | None, after: tuple[float, float] | None) -> float | None:
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


def _server_json(served: Served, failure: str | None) -> dict[str, Any]:
    return {
        "title": served.title,
        "version": served.version,
        "config": served.config,
        "startup_s": served.startup_s,
        "memory_after_warmup": served.info.get("memory_after_warmup"),
        "failure": failure,
        "log": str(served.log_path) if served.log_path else None,
    }


def _target_json(target: Target, points: list[dict[str, Any]], budget: float) -> dict[str, Any]:
    within = [p for p in points if not p["errors"] and p["p99_ms"] is not None
              and p["p99_ms"] <= budget]  # fmt: skip
    best = max(within, key=lambda p: p["rps"], default=None)
    one = next((p for p in points if p["clients"] == 1), None)
    sixteen = next((p for p in points if p["clients"] == 16), None)
    return {
        "server": target.server,
        "config": target.config,
        "route": target.route.label,
        "protocol": target.route.protocol,
        "api": target.route.api,
        "points": points,
        "p50_1_ms": one["p50_ms"] if one else None,
        "p99_1_ms": one["p99_ms"] if one else None,
        "max_rps": best["rps"] if best else None,
        "max_rps_clients": best["clients"] if best else None,
        "rps_16": sixteen["rps"] if sixteen and not sixteen["errors"] else None,
        "cpu_us_per_request_16": sixteen["cpu_us_per_request"] if sixteen else None,
        "mean_batch_16": sixteen["mean_batch"] if sixteen else None,
    }


def _limits(out: dict[str, Any]) -> None:
    """The limit at the batch sizes the servers formed, and every route's fraction of it."""
    from tools.bench.peers.limit import LimitPoint

    points = [LimitPoint(**p) for p in out["limit_points"]]
    formed = [t["mean_batch_16"] for t in out["targets"].values() if t["mean_batch_16"]]
    sizes = [1.0, *formed]
    at = {f"{size:.2f}": limit_at(points, size) for size in sizes}
    limit = max(at.values())
    out["limit"] = {"rows_per_s": limit, "at_batch_sizes": at}
    for target in out["targets"].values():
        target["max_fraction_of_limit"] = target["max_rps"] / limit if target["max_rps"] else None
        target["fraction_of_limit_16"] = target["rps_16"] / limit if target["rps_16"] else None


def _perf_analyzer(
    spec: PeersSpec, model: str, inputs: dict[str, np.ndarray], live: list[Served], say: Say
) -> dict[str, Any]:
    """perf_analyzer at 1 and 16 clients on every gRPC route it speaks."""
    from tools.bench.generator import PerfAnalyzerUnstable, perf_analyzer_point
    from tools.bench.tools import ToolMissing, perf_analyzer

    try:
        tool = perf_analyzer()
    except ToolMissing as exc:
        return {"not_measured": str(exc)}
    out: dict[str, Any] = {"version": tool.version}
    for served in live:
        for target in served.targets:
            if target.route.protocol != "grpc":
                continue
            why_not = "" if served.name == "graphserve" else load_peer(served.name).no_perf_analyzer
            if why_not:
                out[target.key] = [{"clients": 0, "not_measured": why_not}]
                continue
            address = str(
                served.info.get("grpc_address") or f"127.0.0.1:{served.info['grpc_port']}"
            )
            extra: tuple[str, ...] = ()
            if target.route.api == "tfserving":
                kind = "tfserving"
                shapes = [f"{k}:{','.join(map(str, v.shape))}" for k, v in inputs.items()]
            else:
                kind = "triton"
                token = served.info.get("access_token")
                if token:
                    extra = ("-H", f"triton-grpc-protocol-triton-access-token:{token}")
                shapes = [f"{k}:{','.join(map(str, v.shape[1:]))}" for k, v in inputs.items()]
            rows = []
            say(f"{model}: perf_analyzer on {target.key}")
            with alone(served.pid, _pids(live)):
                for clients in (1, 16):
                    try:
                        point = perf_analyzer_point(
                            tool, address, model, shapes, clients, window_ms=spec.perf_window_ms,
                            service_kind=kind, extra=extra,
                        )  # fmt: skip
                        rows.append(point.to_json())
                    except RuntimeError as exc:
                        rows.append({"clients": clients, "not_measured": str(exc)[-600:]})
                        if isinstance(exc, PerfAnalyzerUnstable):
                            rows[-1]["stability"] = [s.to_json() for s in exc.stability]
            out[target.key] = rows
    return out
