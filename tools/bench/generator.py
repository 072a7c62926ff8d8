"""Our load generator against the field's reference generators, and what it can generate.

Agreement (`python -m tools.bench generator`, and in `make bench`): Triton's perf_analyzer (C++, TF
Serving's gRPC Predict) and wrk (C, HTTP) load the same server as `graphserve loadtest compare`
does, one after the other in alternating order, at the same numbers of clients. Where both
generators cost nothing, both report the server: the ratios say how much of what we report is our
generator. The compare runs also give our generator's CPU per request (loadtest/report/analysis.py).

Capacity: requests per second per CPU core that one locust process generates, for the gRPC and
the REST user of loadtest/generator/locustfile.py, against the null server (no model work, so
the server is never what limits). A user learns from it how many worker cores a load test
needs to drive a server at a given rate before the generator, not the server, is what gets
measured. The users run in a child process of their own (`python -m tools.bench.generator`), as in a
locust worker: it lets them settle, then reads its own CPU clock and locust's request count at
the start and at the end of a steady stretch, and prints what it measured.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from graphserve.core.processes import ServerProcess
from graphserve.core.results import JsonResult, to_jsonable
from tools.bench.tools import Tool

__all__ = [
    "Agreement",
    "AgreementPlan",
    "GeneratorCapacity",
    "PerfAnalyzerUnstable",
    "Point",
    "Stability",
    "agreement",
    "agreements",
    "generator_capacity",
    "stability_text",
]

USERS = {"grpc": "GrpcPredictUser", "rest": "RestPredictUser"}


@dataclass(frozen=True)
class Stability(JsonResult):
    """One perf_analyzer run: asked for its last `LAST_WINDOWS` windows' throughput and average
    latency each within `percent` % (largest / smallest - 1) in at most `windows` windows of
    `interval_ms`; whether it got there, after how many windows, and how far apart the last
    ones were (None: fewer ran)."""

    percent: float
    windows: int
    interval_ms: int
    stable: bool
    ran: int = 0
    throughput_spread_pct: float | None = None
    latency_spread_pct: float | None = None


@dataclass(frozen=True)
class Point(JsonResult):
    """One generator at one number of clients."""

    generator: str
    clients: int
    p50_ms: float | None
    p99_ms: float | None
    requests_per_s: float | None
    cpu_us_per_request: float | None = None  # ours: every locust process's CPU per request
    generator_bound: bool | None = None  # ours: the report's generator-bound flag
    note: str = ""
    # perf_analyzer's: each run of it, at the tolerance it asked for (None: another generator)
    stability: tuple[Stability, ...] | None = None


@dataclass
class Agreement(JsonResult):
    """Ours against a reference generator on one server over one protocol, per round."""

    server: str
    protocol: str
    reference: str  # "perf_analyzer 2.41.0"
    clients: tuple[int, ...]
    rounds: list[dict[str, list[Point]]] = field(default_factory=list)  # {"ours", "reference"}

    def rows(self) -> list[dict[str, Any]]:
        """Per number of clients: medians over the rounds, and ours / reference."""
        out = []
        for i, clients in enumerate(self.clients):
            ours = [r["ours"][i] for r in self.rounds]
            ref = [r["reference"][i] for r in self.rounds]
            p50 = _ratios([o.p50_ms for o in ours], [r.p50_ms for r in ref])
            rps = _ratios([o.requests_per_s for o in ours], [r.requests_per_s for r in ref])
            out.append(
                {
                    "clients": clients,
                    "ours_p50_ms": _median([o.p50_ms for o in ours]),
                    "reference_p50_ms": _median([r.p50_ms for r in ref]),
                    "p50_ratio": _median(p50),
                    "ours_rps": _median([o.requests_per_s for o in ours]),
                    "reference_rps": _median([r.requests_per_s for r in ref]),
                    "rps_ratio": _median(rps),
                    "cpu_us_per_request": _median([o.cpu_us_per_request for o in ours]),
                    "generator_bound": any(bool(o.generator_bound) for o in ours),
                    "reference_stability": [to_jsonable(r.stability) for r in ref],
                }
            )
        return out

    def to_json(self) -> dict[str, object]:
        return {
            "server": self.server,
            "protocol": self.protocol,
            "reference": self.reference,
            "clients": list(self.clients),
            "rows": self.rows(),
            "rounds": [{k: [p.to_json() for p in v] for k, v in r.items()} for r in self.rounds],
        }


def _median(values: Sequence[float | None]) -> float | None:
    measured = sorted(v for v in values if v is not None)
    if not measured:
        return None
    mid = len(measured) // 2
    return measured[mid] if len(measured) % 2 else (measured[mid - 1] + measured[mid]) / 2


def _ratios(ours: Sequence[float | None], ref: Sequence[float | None]) -> list[float | None]:
    """Ratios within each round (the two generators ran back to back), not of medians."""
    return [o / r if o is not None and r else None for o, r in zip(ours, ref, strict=True)]


# ---------------------------------------------------------------------------------------------
# The reference generators


LAST_WINDOWS = 3  # perf_analyzer's stability window: the windows that must agree


class PerfAnalyzerUnstable(RuntimeError):
    """perf_analyzer found no stable measurement at any tolerance tried."""

    def __init__(self, stability: tuple[Stability, ...]) -> None:
        text = stability_text([s.to_json() for s in stability])
        super().__init__(f"perf_analyzer found no stable measurement: {text}")
        self.stability = stability


def perf_analyzer_point(
    tool: Tool,
    address: str,
    model_name: str,
    shapes: Sequence[str],
    clients: int,
    *,
    window_ms: int,
    max_trials: int = 10,
    service_kind: str = "tfserving",
    extra: Sequence[str] = (),
) -> Point:
    """perf_analyzer at `clients` concurrent synchronous gRPC calls (`shapes` like
    'images:1,784', one per input): TF Serving's Predict, or with `service_kind` "triton" the
    V2 ModelInfer (`extra`: more of its arguments, such as a header), in windows of `window_ms`
    until three agree within 10 % (its default criterion). perf_analyzer reports nothing when
    they never agree: then it runs once more with a 25 % tolerance. The point's `stability`
    says what each run asked for and got; PerfAnalyzerUnstable when neither was stable,
    RuntimeError when it failed otherwise."""
    runs: list[Stability] = []
    for tolerance in (10, 25):
        command = [
            str(tool.program), "-m", model_name, "--service-kind", service_kind, "-i", "grpc",
            "-u", address, "-b", "1", *(f"--shape={shape}" for shape in shapes), *extra,
            "--concurrency-range", f"{clients}:{clients}", "-p", str(window_ms),
            "--max-trials", str(max_trials), "-s", str(tolerance), "-v",
        ]  # fmt: skip
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=300, check=False, env=tool.environ()
        )
        text = done.stdout + done.stderr
        p50, p99, rps = _perf_analyzer_numbers(text)
        measured = p50 is not None and rps is not None
        if not measured and _PERF_ANALYZER_UNSTABLE not in text:
            raise RuntimeError(
                f"perf_analyzer measured nothing (exit {done.returncode}): {text[-800:]}"
            )
        runs.append(_stability(text, Stability(tolerance, max_trials, window_ms, measured)))
        if measured:
            return Point("perf_analyzer", clients, p50, p99, rps, stability=tuple(runs))
    raise PerfAnalyzerUnstable(tuple(runs))


_PERF_ANALYZER_UNSTABLE = "Failed to obtain stable measurement"
# What `-v` prints per window ("pass")
_PASS = re.compile(r"Pass \[\d+\] throughput: ([\d.]+) infer/sec\. Avg latency: (\d+) usec")


def _stability(text: str, asked: Stability) -> Stability:
    """`asked` with what the run's `-v` output says of its windows (throughput, mean latency)."""
    passes = [(float(rps), float(us)) for rps, us in _PASS.findall(text)]
    last = passes[-LAST_WINDOWS:] if len(passes) >= LAST_WINDOWS else []

    def spread(values: list[float]) -> float | None:
        if not values or min(values) <= 0:
            return None
        return round((max(values) / min(values) - 1) * 100, 2)

    return replace(asked, ran=len(passes), throughput_spread_pct=spread([r for r, _ in last]),
                   latency_spread_pct=spread([u for _, u in last]))  # fmt: skip


def stability_text(stability: Sequence[Mapping[str, Any]] | None) -> str:
    """A perf_analyzer point's `stability`, as the pages say it: "not recorded" for results
    written before points carried it."""
    if not stability:
        return "stability not recorded"
    runs = []
    for s in stability:
        apart = ""
        if s["throughput_spread_pct"] is not None:
            apart = (f"; the last {LAST_WINDOWS} {s['throughput_spread_pct']:.1f} % apart in "
                     f"req/s, {s['latency_spread_pct']:.1f} % in latency")  # fmt: skip
        runs.append(
            f"{'stable' if s['stable'] else 'not stable'} within {s['percent']:g} % after "
            f"{s['ran']} of at most {s['windows']} windows of {s['interval_ms']} ms{apart}"
        )
    return ", then ".join(runs)


def _perf_analyzer_numbers(text: str) -> tuple[float | None, float | None, float | None]:
    """p50 and p99 in ms and requests per second from perf_analyzer's output (stdout then
    stderr); None for what it did not print."""
    p50 = _number(r"p50 latency: (\d+) usec", text)
    p99 = _number(r"p99 latency: (\d+) usec", text)
    rps = _number(r"Throughput: ([\d.]+) infer/sec", text)
    return (
        p50 / 1000 if p50 is not None else None,
        p99 / 1000 if p99 is not None else None,
        rps,
    )


_WRK_SCRIPT = """wrk.method = "POST"
local f = io.open("{body}", "rb"); wrk.body = f:read("*a"); f:close()
wrk.headers["Content-Type"] = "application/json"
"""


def wrk_point(
    tool: Tool, url: str, body_file: Path, clients: int, *, seconds: float, work_dir: Path
) -> Point:
    """wrk on one thread with `clients` keep-alive connections, POSTing `body_file` to `url`."""
    script = work_dir / "wrk-post.lua"
    script.write_text(_WRK_SCRIPT.format(body=body_file.resolve()))
    command = [
        str(tool.program), "-t1", f"-c{clients}", f"-d{max(1, round(seconds))}s", "--latency",
        "-s", str(script), url,
    ]  # fmt: skip
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=seconds + 60, check=False
    )
    text = done.stdout + done.stderr
    if done.returncode != 0 or "Non-2xx" in text:
        raise RuntimeError(f"wrk failed or got errors (exit {done.returncode}): {text[-800:]}")
    return Point("wrk", clients, *_wrk_numbers(text))


def _wrk_numbers(text: str) -> tuple[float | None, float | None, float | None]:
    """p50 and p99 in ms and requests per second from wrk's `--latency` output; None for what
    it did not print."""
    rps = _number(r"Requests/sec:\s+([\d.]+)", text)
    return _wrk_ms("50%", text), _wrk_ms("99%", text), rps


def _number(pattern: str, text: str) -> float | None:
    found = re.findall(pattern, text)
    return float(found[-1]) if found else None


def _wrk_ms(percentile: str, text: str) -> float | None:
    # wrk writes a latency in us, ms or s (format_time_us in its units.c); in minutes only from
    # 51 s, longer than any of our runs lasts.
    found = re.search(rf"^\s*{percentile}\s+([\d.]+)(us|ms|s)\s*$", text, re.MULTILINE)
    if found is None:
        return None
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[found.group(2)]
    return float(found.group(1)) * scale


# ---------------------------------------------------------------------------------------------
# Ours: `graphserve loadtest compare`, one arm, the same clients


def ours_points(
    server: str,
    address: str,
    protocol: str,
    model_name: str,
    clients: Sequence[int],
    *,
    window_s: float,
    out_dir: Path,
) -> tuple[list[Point], Path]:
    """One `loadtest compare` run of one arm over `clients` users; the points and the encoded
    request it sent (the reference generators send the same body where they can)."""
    from graphserve.loadtest.comparison.run import Arm, CompareSpec, LoadSpec, compare

    target = address if protocol == "grpc" else f"http://{address}"
    spec = CompareSpec(
        arms=(Arm(server, target),),
        protocol=protocol,
        model_name=model_name,
        load=LoadSpec(
            loads=tuple(float(c) for c in clients),
            warmup_s=window_s / 2,
            window_s=window_s,
            min_windows=3,
            max_windows=6,
        ),
    )
    report = compare(spec, out_dir)
    points = []
    for clients_n, step in zip(clients, report.steps, strict=True):
        arm = step.arms[server]
        points.append(
            Point(
                "graphserve",
                clients_n,
                arm.latency_ms.p50,
                arm.latency_ms.p99,
                arm.throughput_rps,
                cpu_us_per_request=arm.generator.cpu_us_per_request,
                generator_bound=arm.generator.bound,
                note=arm.generator.reason or "",
            )
        )
    return points, out_dir / "request.bin"


def agreement(
    server: str,
    address: str,
    protocol: str,
    model_name: str,
    reference: Tool,
    shapes: Sequence[str],
    *,
    clients: Sequence[int] = (1, 4, 16),
    rounds: int = 2,
    window_s: float = 3.0,
    work_dir: Path,
    say: Callable[[str], None] = lambda _m: None,
) -> Agreement:
    """`rounds` rounds of ours and `reference` on the same server, the order reversed each round
    (ours first, then the reference first, ...), so a drift of the machine hits both alike."""
    result = Agreement(server, protocol, f"{reference.name} {reference.version}", tuple(clients))
    for index in range(rounds):
        order = ("ours", "reference") if index % 2 == 0 else ("reference", "ours")
        measured: dict[str, list[Point]] = {}
        body = work_dir / f"{server}-{protocol}-body.bin"
        for who in order:
            say(f"generator agreement: {who} on the {server} server, {protocol}, round {index + 1}")
            if who == "ours":
                out = work_dir / f"{server}-{protocol}-round{index + 1}"
                measured[who], sent = ours_points(
                    server, address, protocol, model_name, clients, window_s=window_s, out_dir=out
                )
                body.write_bytes(sent.read_bytes())
            elif protocol == "grpc":
                measured[who] = [
                    perf_analyzer_point(
                        reference, address, model_name, shapes, c, window_ms=int(window_s * 1000)
                    )
                    for c in clients
                ]
            else:
                if not body.exists():  # the reference went first: ours writes the body later
                    _rest_body(address, model_name, body)
                url = f"http://{address}/v1/models/{model_name}:predict"
                measured[who] = [
                    wrk_point(reference, url, body, c, seconds=3 * window_s, work_dir=work_dir)
                    for c in clients
                ]
        result.rounds.append(measured)
    return result


@dataclass(frozen=True)
class AgreementPlan:
    """Which agreements to run and how long: `make bench` runs a short one, `python -m tools.bench
    generator` the whole matrix."""

    runs: tuple[tuple[str, str], ...] = (
        ("graph", "grpc"), ("graph", "rest"), ("null", "grpc"), ("null", "rest"),
    )  # fmt: skip
    clients: tuple[int, ...] = (1, 4, 16)
    rounds: int = 2
    window_s: float = 2.0


def agreements(
    servers: Mapping[str, ServerProcess],
    model_name: str,
    plan: AgreementPlan,
    work_dir: Path,
    say: Callable[[str], None] = lambda _m: None,
) -> list[dict[str, Any]]:
    """Every (server, protocol) of `plan` against its reference generator. A reference that is
    missing here (bench.tools.ToolMissing) or a run that fails is recorded with the reason
    (`not_measured`), not raised."""
    from graphserve.loadtest.generator.metadata import fetch_specs
    from tools.bench.tools import ToolMissing, perf_analyzer, wrk

    work_dir.mkdir(parents=True, exist_ok=True)
    out: list[dict[str, Any]] = []
    tools: dict[str, Tool | str] = {}
    for server, protocol in plan.runs:
        if protocol not in tools:
            try:
                tools[protocol] = perf_analyzer() if protocol == "grpc" else wrk()
            except ToolMissing as exc:
                tools[protocol] = str(exc)
        tool = tools[protocol]
        if isinstance(tool, str):
            out.append({"server": server, "protocol": protocol, "not_measured": tool})
            continue
        process = servers[server]
        address = process.grpc_address if protocol == "grpc" else str(process.rest_address)
        specs = fetch_specs("grpc", process.grpc_address, model_name, "serving_default")
        shapes = [
            f"{s.name}:{','.join(str(d or 1) for d in (1, *(s.shape or ())[1:]))}" for s in specs
        ]
        try:
            result = agreement(
                server, address, protocol, model_name, tool, shapes, clients=plan.clients,
                rounds=plan.rounds, window_s=plan.window_s, work_dir=work_dir, say=say,
            )  # fmt: skip
        except RuntimeError as exc:  # one generator failed: the others still run
            out.append({"server": server, "protocol": protocol, "not_measured": str(exc)})
            continue
        out.append(result.to_json())
    return out


def _rest_body(address: str, model_name: str, out: Path) -> None:
    """The REST body `loadtest compare` sends (built from the server's metadata, seed 0)."""
    from graphserve.loadtest.generator.metadata import fetch_specs
    from graphserve.loadtest.generator.payloads import build_payload, rest_body

    specs = fetch_specs("rest", f"http://{address}", model_name, "serving_default")
    out.write_bytes(rest_body(build_payload(specs, 1, 0), "serving_default"))


@dataclass(frozen=True)
class GeneratorCapacity(JsonResult):
    """One locust process driving the null server with one user class."""

    protocol: str
    users: int
    seconds: float  # the steady stretch measured
    requests: int
    failures: int
    cpu_s: float  # the process's user + system CPU over that stretch
    requests_per_s: float
    requests_per_core_s: float  # requests per second of one fully used core


def generator_capacity(
    protocol: str,
    address: str,
    model_name: str,
    *,
    users: int = 16,
    seconds: float = 6.0,
    settle_s: float = 2.0,
) -> GeneratorCapacity:
    """`users` of `protocol`'s locust user against `address`, in a process of their own, measured
    over `seconds` after `settle_s`. Raises RuntimeError when the users send nothing or meet
    failures, or the process fails."""
    command = [
        sys.executable, "-m", "tools.bench.generator", protocol, address, model_name,
        "--users", str(users), "--seconds", str(seconds), "--settle", str(settle_s),
    ]  # fmt: skip
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=settle_s + seconds + 120, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"the {protocol} generator exited with code {done.returncode}: {done.stderr[-600:]}"
        )
    result = GeneratorCapacity(**json.loads(done.stdout.strip().splitlines()[-1]))
    if result.requests <= 0 or result.failures:
        raise RuntimeError(
            f"the {protocol} generator sent {result.requests} requests, {result.failures} "
            f"failed: {done.stderr[-600:]}"
        )
    return result


def _measure(
    protocol: str, address: str, model_name: str, users: int, seconds: float, settle_s: float
) -> GeneratorCapacity:
    """In this process: start the users, let them settle, measure CPU and requests over
    `seconds`, stop them."""
    import gevent
    from locust.env import Environment

    from graphserve.loadtest.generator import locustfile

    user_class = getattr(locustfile, USERS[protocol])
    host = address if protocol == "grpc" else f"http://{address}"
    env = Environment(user_classes=[user_class], host=host, events=locustfile.events)
    env.parsed_options = argparse.Namespace(
        model_name=model_name, signature_name="serving_default", payload_file="", batch_size=1,
        seed=0, max_requests=0, allow_remote=False, headless=True,
    )  # fmt: skip
    env.events.init.fire(environment=env, runner=None, web_ui=None)
    runner = env.create_local_runner()
    runner.start(users, spawn_rate=users)
    gevent.sleep(settle_s)
    total = env.stats.total
    cpu0, wall0 = time.process_time(), time.monotonic()
    requests0, failures0 = total.num_requests, total.num_failures
    gevent.sleep(seconds)
    cpu1, wall1 = time.process_time(), time.monotonic()
    requests, failures = total.num_requests - requests0, total.num_failures - failures0
    runner.quit()
    cpu_s, wall_s = cpu1 - cpu0, wall1 - wall0
    return GeneratorCapacity(
        protocol=protocol,
        users=users,
        seconds=wall_s,
        requests=requests,
        failures=failures,
        cpu_s=cpu_s,
        requests_per_s=requests / wall_s,
        requests_per_core_s=requests / cpu_s if cpu_s > 0 else 0.0,
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.generator", description=__doc__)
    parser.add_argument("protocol", choices=sorted(USERS))
    parser.add_argument("address", help="HOST:PORT of the server (gRPC or REST port)")
    parser.add_argument("model_name")
    parser.add_argument("--users", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--settle", type=float, default=2.0)
    args = parser.parse_args()
    result = _measure(
        args.protocol, args.address, args.model_name, args.users, args.seconds, args.settle
    )
    print(json.dumps(result.to_json()))


if __name__ == "__main__":
    main()
