"""The front end's cost: what the graph server spends per request beyond its model.

For the mlp at batch 1, no batching, `graphserve serve graph` in a child process (the server of
`make bench-peers`, metrics on), in one run:

    model in process  the SavedModel's Session callable called back to back from one thread in
                      this process, no server: CPU per call through TensorFlow's inter-op pool
                      (`run`, how the gRPC front end runs it) and on the calling thread
                      (`run_inline`, how REST runs it on its event loop)
    server            16 closed-loop clients in this process (so their CPU is not the
                      server's), per protocol, in windows that alternate between the protocols:
                      the server process tree's CPU (/proc) per request answered, the one way
                      every benchmark measures it (tools/bench/measure.py's CPU window)
    front end         the server's CPU per request minus the model's CPU per call in process,
                      the model called as that protocol's front end calls it
    idle              the server's CPU with no request at all, in cores: nothing spins
    grpcio's floor    a bare `grpc.server` in a process of its own, as many threads as the graph
                      server's, answering every Predict with the graph server's own answer bytes
                      (no parsing, no Python of ours): what grpcio's threaded server costs a
                      request here before any serving code runs, the floor of the gRPC figure
    profile           `perf record` of the server over one more window per protocol: the share
                      of its CPU samples by shared object (kernel, Python, gRPC's core,
                      TensorFlow, protobuf, numpy, the C and C++ libraries), shown as µs of the
                      CPU per request measured without perf (Debian's linux-perf, installed as
                      root on first use)

Measured against the model in the same run, the figure does not move with the machine's phase
the way a CPU time taken alone does: the MLP's in-process limit here was 25,000 rows/s in one
run and 86,000 in another (tools/bench/results/peers.json's history), and every CPU figure of the
slow run was twice as large.

MobileNetV2 (alpha 0.35, 96 px) with batching is `make bench-peers`' measure run on graphserve
alone (bench.peers.run): the most req/s within its p99 budget over gRPC and REST, as a fraction
of the SavedModel's in-process limit at the batch size the server formed.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np

__all__ = ["FrontendSpec", "profile_by_library", "run_frontend"]

Say = Callable[[str], None]
PROTOCOLS = ("grpc", "rest")
# The libraries a profile's samples are grouped by (the shared object's name starts with one).
LIBRARIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("kernel", ("[kernel",)),
    ("Python", ("libpython",)),
    ("gRPC core", ("cygrpc",)),
    ("TensorFlow", ("libtensorflow", "_pywrap_tf", "lib_pywrap_tensorflow", "_pywrap_tensorflow")),
    ("protobuf", ("_message",)),
    ("numpy", ("_multiarray",)),
    ("C and C++ libraries", ("libc.", "libstdc++", "ld-linux", "libm.", "[vdso]")),
)
OTHER = "other"


@dataclass
class FrontendSpec:
    """How long each part measures; `quick()` is the seconds-long variant the tests run."""

    work_dir: Path
    clients: int = 16
    rounds: int = 3  # windows per protocol, alternating
    window_s: float = 4.0
    warmup_s: float = 1.0
    in_process_calls: int = 3000
    profile: bool = True
    mobilenet: bool = True
    mobilenet_quick: bool = False  # bench.peers' quick ladder (tests)
    # The server's code: None, this checkout; else another checkout of graphserve (its root;
    # `python -m graphserve` is run from there).
    server_code: Path | None = None
    # How the server's REST front end calls the model: run_inline (on its event loop, today) or
    # run (on a worker thread, before issue 42). gRPC calls `run`.
    rest_model_call: str = "run_inline"
    # A second server, e.g. the code before a change, measured in the same run (`baseline`).
    baseline: Path | None = None
    baseline_rest_model_call: str = "run"

    @classmethod
    def quick(cls, work_dir: Path) -> FrontendSpec:
        return cls(
            work_dir, clients=4, rounds=1, window_s=0.5, warmup_s=0.2, in_process_calls=200,
            profile=False, mobilenet_quick=True,
        )  # fmt: skip


def run_frontend(spec: FrontendSpec, say: Say = lambda _m: None) -> dict[str, Any]:
    """The mlp's figures (and MobileNet's with `spec.mobilenet`) for this checkout's server,
    and with `spec.baseline` the same for that checkout's, measured in the same run: their
    windows alternate, one server paused (SIGSTOP) while the other is measured."""
    from graphserve.exporter.api import ExportSpec, export_model
    from graphserve.loadtest.comparison.run import environment
    from graphserve.loadtest.generator.payloads import grpc_request_bytes
    from tools.bench.goals import FRONTEND_GOALS, evaluate
    from tools.bench.measure import alone, resume
    from tools.bench.peers.run import _inputs

    started = time.perf_counter()
    base = (spec.work_dir / "frontend").resolve()
    say("front end: exporting examples:mlp")
    export_model(ExportSpec("examples:mlp", "mlp", base_path=base / "models", overwrite=True))
    model_base = base / "models" / "mlp"
    version_dir = max(model_base.iterdir(), key=lambda p: int(p.name))
    inputs = _inputs(version_dir)
    say("front end: the model's CPU per call in process")
    model = model_cpu_per_call(version_dir, inputs, spec.in_process_calls)
    (base / "logs").mkdir(parents=True, exist_ok=True)
    codes = {"now": (spec.server_code, spec.rest_model_call)}
    if spec.baseline is not None:
        codes["baseline"] = (spec.baseline, spec.baseline_rest_model_call)
    servers = {name: _Server.start(name, code, call, model_base, inputs, base)
               for name, (code, call) in codes.items()}  # fmt: skip
    live = [server.served.pid for server in servers.values()]
    try:
        arms: dict[str, tuple[Callable[[], Callable[[], object]], Any]] = {}
        for server in servers.values():
            with alone(server.served.pid, live):
                server.warm(spec)
            for protocol in PROTOCOLS:
                arms[f"{server.name}/{protocol}"] = (server.targets[protocol].make_call, server)
        windows: dict[str, list[dict[str, Any]]] = {arm: [] for arm in arms}
        windows["grpcio"] = []
        with alone(servers["now"].served.pid, live):
            answer = servers["now"].targets["grpc"].make_call()()  # type: ignore[operator]
        request = grpc_request_bytes(inputs, "mlp")
        with _bare_grpc(answer, request, base) as (bare_pid, bare_call):
            order = [*arms, "grpcio"]
            for round_ in range(spec.rounds):
                for arm in order if round_ % 2 == 0 else order[::-1]:
                    say(f"front end: {arm}, {spec.clients} clients, round {round_ + 1}")
                    if arm == "grpcio":
                        with alone(None, live):
                            windows[arm].append(_window(bare_call, bare_pid, spec))
                        continue
                    make_call, server = arms[arm]
                    with alone(server.served.pid, live):
                        windows[arm].append(_window(make_call, server.served.pid, spec))
        for server in servers.values():
            with alone(server.served.pid, live):
                server.reference = _perf_analyzer(server.address, inputs, spec, say)
                if spec.profile:
                    for protocol in PROTOCOLS:
                        say(f"front end: perf record, {server.name}/{protocol}")
                        server.profiles[protocol] = _profile(
                            server.targets[protocol].make_call, server.served.pid, spec
                        )
    finally:
        for server in servers.values():
            resume(server.served.pid)
            server.served.stop()
    out: dict[str, Any] = {
        "environment": environment().to_json(),
        "model": "mlp",
        "clients": spec.clients,
        "window_s": spec.window_s,
        "rounds": spec.rounds,
        "model_cpu_us": model,
        "grpcio_floor": {
            "windows": windows["grpcio"],
            "server_cpu_us": median(w["cpu_us_per_request"] for w in windows["grpcio"]),
            "rps": median(w["rps"] for w in windows["grpcio"]),
        },
        **servers["now"].figures(windows, model),
    }
    if "baseline" in servers:
        out["baseline"] = servers["baseline"].figures(windows, model)
    if spec.mobilenet:
        for name, (code, _) in codes.items():
            with _running_from(code):
                mobilenet = mobilenet_batching(base / name, say, quick=spec.mobilenet_quick)
            (out if name == "now" else out["baseline"])["mobilenet"] = mobilenet
    out["seconds"] = time.perf_counter() - started
    out["goals"] = [g.to_json() for g in evaluate(out, FRONTEND_GOALS)]
    return out


@dataclass
class _Server:
    """One graph server of the run: this checkout's ("now") or the baseline's."""

    name: str
    code: Path | None
    rest_model_call: str
    served: Any  # bench.peers.servers.Served
    idle_cores: float = 0.0
    reference: dict[str, Any] = field(default_factory=dict)
    profiles: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def start(
        cls,
        name: str,
        code: Path | None,
        rest_model_call: str,
        model_base: Path,
        inputs: Mapping[str, np.ndarray],
        base: Path,
    ) -> _Server:
        from tools.bench.measure import pause
        from tools.bench.peers.servers import start_graphserve

        logs = base / "logs" / name
        logs.mkdir(parents=True, exist_ok=True)
        with _running_from(code):
            served = start_graphserve(model_base, "mlp", dict(inputs), False, logs)
        pause(served.pid)  # the next starts alone; each runs only while measured
        return cls(name, code, rest_model_call, served)

    @property
    def targets(self) -> dict[str, Any]:
        return {t.route.protocol: t for t in self.served.targets}

    @property
    def address(self) -> str:
        return str(self.served.info["grpc_address"])

    def warm(self, spec: FrontendSpec) -> None:
        """A warm-up per protocol (the first REST requests pick its path), then a second with
        no request: its idle CPU."""
        from tools.bench.clients import closed_loop
        from tools.bench.measure import idle_cores

        for target in self.targets.values():
            closed_loop(target.make_call, clients=spec.clients, seconds=spec.warmup_s)
        self.idle_cores = idle_cores(self.served.pid)

    def figures(
        self, windows: Mapping[str, list[dict[str, Any]]], model: Mapping[str, float]
    ) -> dict[str, Any]:
        protocols = {}
        for protocol in PROTOCOLS:
            mine = windows[f"{self.name}/{protocol}"]
            server = median(w["cpu_us_per_request"] for w in mine)
            call = self.rest_model_call if protocol == "rest" else "run"
            own = model["inline" if call == "run_inline" else "pool"]
            protocols[protocol] = {
                "windows": mine,
                "server_cpu_us": server,
                "model_cpu_us": own,
                "model_call": call,
                "front_end_cpu_us": server - own,
                "rps": median(w["rps"] for w in mine),
                "p50_ms": median(w["p50_ms"] for w in mine),
                "profile": self.profiles.get(protocol) or {"not_measured": "not asked for"},
            }
        return {
            "server_code": _commit(self.code),
            "idle_cores": self.idle_cores,
            "perf_analyzer": self.reference,
            "protocols": protocols,
        }


def _perf_analyzer(
    address: str, inputs: Mapping[str, np.ndarray], spec: FrontendSpec, say: Say
) -> dict[str, Any]:
    """Triton's perf_analyzer at 1 client over gRPC (TF Serving's API), the field's
    reference for the p50 a client sees."""
    from tools.bench.generator import perf_analyzer_point
    from tools.bench.tools import ToolMissing, perf_analyzer

    try:
        tool = perf_analyzer()
    except ToolMissing as exc:
        return {"not_measured": str(exc)}
    say(f"front end: perf_analyzer, 1 client, gRPC, {address}")
    shapes = [f"{k}:{','.join(map(str, v.shape))}" for k, v in inputs.items()]
    window_ms = int(spec.window_s * 1000)
    point = perf_analyzer_point(tool, address, "mlp", shapes, 1, window_ms=window_ms)
    return {
        "version": tool.version,
        "window_ms": window_ms,
        "p50_ms": point.p50_ms,
        "p99_ms": point.p99_ms,
        "requests_per_s": point.requests_per_s,
        "stability": [s.to_json() for s in point.stability or ()],
    }


# A bare grpcio server: every Predict answered with the bytes in argv[1]'s file, by as many
# threads as argv[2]; it prints its port.
_BARE_GRPC = """
import sys
from concurrent import futures
import grpc
answer = open(sys.argv[1], "rb").read()
server = grpc.server(futures.ThreadPoolExecutor(int(sys.argv[2])))
method = grpc.unary_unary_rpc_method_handler(lambda request, context: answer)
server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
    "tensorflow.serving.PredictionService", {"Predict": method}),))
print(server.add_insecure_port("127.0.0.1:0"), flush=True)
server.start()
server.wait_for_termination()
"""


@contextlib.contextmanager
def _bare_grpc(
    answer: bytes, request: bytes, where: Path
) -> Iterator[tuple[int, Callable[[], Callable[[], object]]]]:
    """grpcio's floor: a bare server answering `answer`; its pid, and callers sending
    `request`."""
    import sys

    from graphserve.core.defaults import DEFAULT_GRPC_WORKERS
    from tools.bench.clients import grpc_caller

    path = where / "answer.bin"
    path.write_bytes(answer)
    process = subprocess.Popen(
        [sys.executable, "-c", _BARE_GRPC, str(path), str(DEFAULT_GRPC_WORKERS)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        yield process.pid, lambda: grpc_caller(f"127.0.0.1:{port}", request)
    finally:
        process.kill()
        process.wait()


@contextlib.contextmanager
def _running_from(root: Path | None) -> Iterator[None]:
    """Servers started inside run `python -m graphserve` from `root` (None: this checkout)."""
    if root is None:
        yield
        return
    here = Path.cwd()
    os.chdir(root)
    try:
        yield
    finally:
        os.chdir(here)


def _commit(root: Path | None) -> str:
    """The commit a server's code is at (`git describe`), "+" when it has changes."""
    where = root or Path(__file__).resolve().parents[2]
    described = subprocess.run(
        ["git", "-C", str(where), "describe", "--always", "--dirty=+"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return described.stdout.strip() or "unknown"


def _window(
    make_call: Callable[[], Callable[[], object]], pid: int, spec: FrontendSpec
) -> dict[str, Any]:
    from tools.bench.measure import cpu_window

    window = cpu_window(
        make_call, pid, clients=spec.clients, seconds=spec.window_s, warmup_s=spec.warmup_s
    )
    load = window.load
    if load.errors or not load.requests:
        raise RuntimeError(f"{load.errors} of the front end's requests failed")
    return {
        **load.summary(),
        "cpu_us_per_request": window.cpu_us_per_request,
        "cores": window.cores,
    }


def model_cpu_per_call(
    version_dir: Path, inputs: Mapping[str, np.ndarray], calls: int, rounds: int = 3
) -> dict[str, float]:
    """The served Session's CPU per call in this process, from one thread, through the pool
    (`run`) and on the caller (`run_inline`), in alternating rounds: the median round each.
    The process's CPU clock counts TensorFlow's threads too."""
    from graphserve.serving.session_runner import SessionRunner

    runner = SessionRunner(version_dir)
    try:
        feed = dict(inputs)
        ways = {"pool": runner.run, "inline": runner.run_inline}
        samples: dict[str, list[float]] = {way: [] for way in ways}
        for call in ways.values():
            for _ in range(max(calls // 10, 20)):
                call("serving_default", feed)
        for _ in range(rounds):
            for way, call in ways.items():
                began = time.process_time()
                for _ in range(calls):
                    call("serving_default", feed)
                samples[way].append((time.process_time() - began) / calls * 1e6)
        return {way: median(values) for way, values in samples.items()}
    finally:
        runner.close()


# ---------------------------------------------------------------------------------------------
# where the CPU went: perf


def _profile(
    make_call: Callable[[], Callable[[], object]], pid: int, spec: FrontendSpec
) -> dict[str, Any]:
    """`perf record` of `pid` over one window: the share of its CPU samples by library."""
    from tools.bench.tools import ToolMissing
    from tools.bench.tools import perf as install_perf

    try:
        perf = str(install_perf())
    except ToolMissing as exc:
        return {"not_measured": str(exc)}
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "perf.data"
        recorder = subprocess.Popen(
            [perf, "record", "-F", "999", "-p", str(pid), "-o", str(data), "--",
             "sleep", str(spec.window_s + spec.warmup_s + 1.0)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        time.sleep(0.5)  # perf attached
        window = _window(make_call, pid, spec)
        recorder.wait(timeout=60)
        report = subprocess.run(
            [perf, "report", "-i", str(data), "--no-children", "--sort", "dso", "--stdio"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    shares = profile_by_library(report.stdout)
    if not shares:
        return {"not_measured": f"perf report gave no samples: {report.stderr.strip()[:300]}"}
    # perf's own cost inflates this window's CPU: the page applies the shares to the CPU per
    # request measured without perf.
    return {"cpu_us_per_request_under_perf": window["cpu_us_per_request"], "shares": shares}


_DSO_LINE = re.compile(r"^\s*([\d.]+)%\s+(\S.*?)\s*$")


def profile_by_library(report: str) -> dict[str, float]:
    """`perf report --sort dso --stdio` text grouped by LIBRARIES: each group's share of the
    samples (0-1), largest first."""
    groups: dict[str, float] = {}
    for line in report.splitlines():
        if line.startswith("#"):
            continue
        match = _DSO_LINE.match(line)
        if not match:
            continue
        percent, dso = float(match[1]), match[2]
        name = next(
            (group for group, prefixes in LIBRARIES if dso.startswith(prefixes)),
            OTHER,
        )
        groups[name] = groups.get(name, 0.0) + percent / 100
    return dict(sorted(groups.items(), key=lambda kv: -kv[1]))


# ---------------------------------------------------------------------------------------------
# MobileNet with batching: the peers' measure, on graphserve alone


def mobilenet_batching(work_dir: Path, say: Say, *, quick: bool = False) -> dict[str, Any]:
    """`make bench-peers`' MobileNet figures for graphserve only: per route, the most req/s
    within the p99 budget as a fraction of the in-process limit at the batch size formed."""
    from tools.bench.peers.run import PeersSpec, run_peers

    where = work_dir / "frontend" / "peers"
    if quick:
        spec = PeersSpec.quick(where, ("mobilenet",), ())
    else:
        spec = PeersSpec(where, models=("mobilenet",), peers=(), perf_analyzer=False)
    results = run_peers(spec, say)
    model = results["models"]["mobilenet"]
    routes = {}
    for target in model["targets"].values():
        if target["config"] != "batching on":
            continue
        routes[target["protocol"]] = {
            "max_rps": target["max_rps"],
            "max_rps_clients": target["max_rps_clients"],
            "mean_batch_16": target["mean_batch_16"],
            "fraction_of_limit": target["max_fraction_of_limit"],
            "cpu_us_per_request_16": target["cpu_us_per_request_16"],
        }
    return {"budget_ms": model["budget_ms"], "limit": model["limit"], "routes": routes}
