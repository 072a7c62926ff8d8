"""`python -m tools.bench many` (`make bench-many`): one graph server, a thousand models, each
loaded on its first request (`serve graph --load-on-demand`); what that costs and what it gives
back.

Every server is `graphserve serve graph --model-config-file F --load-on-demand --metrics`, a child
process on loopback, serving copies of the exported mlp (hard links: a thousand copies take a
moment and no space). Requests are REST Predict calls of the project's HTTP client; an answer is
cold when it carries `x-graphserve-cold-load`. The server's own figures are read from its
Prometheus page (loads, load seconds, resident bytes and versions, RSS).

    M1 first answer   1,000 models against one, started alike: process start to the first 200
    M2 Zipf           Zipf(1.1) traffic over 1,000 models, 200 resident: failures, warm and cold
                      p50 (against a one-model server at the same rate, and the load time), RSS
    M3 isolation      a pinned model's p99 while 4 clients ask resident models, then cold ones
    M4 memory back    200 models loaded and unloaded after 2 s idle: RSS before and after, with
                      glibc (malloc_trim), oneDNN on, jemalloc and tcmalloc

The copies come from `graphserve loadtest copies` and the Zipf traffic from `graphserve loadtest
many` when this graphserve has them; otherwise from this module's stand-ins (hard links and a
config; open-loop client threads), and the results say which.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from graphserve.core.defaults import DEFAULT_METRICS_PATH
from graphserve.core.httpclient import HttpConnection
from graphserve.core.modelconfig import ModelConfig, model_config_text
from graphserve.core.processes import ServerProcess
from tools.bench.goals import Goal, evaluate
from tools.bench.measure import Sampler
from tools.bench.timing import timing_of
from tools.bench.tools import ToolMissing, debian_library

__all__ = [
    "ALLOCATORS",
    "MANY_GOALS",
    "PARTS",
    "ManyPlan",
    "hot_client",
    "many_goals",
    "render_many",
    "run_many",
    "write_many",
]

ROOT = Path(__file__).resolve().parents[2]
MODEL = "mlp"
INPUT, FEATURES = "images", 784  # the mlp's serving_default input
REQUEST_TIMEOUT_S = 60.0
PARTS = ("first", "zipf", "isolation", "memory")
OPEN_LOOP_THREADS = 64  # M2's senders: enough that requests waiting on loads leave some free
LOADTEST_TRAFFIC = "graphserve loadtest many"
STAND_IN_TRAFFIC = "tools/bench/many.py's stand-in (open-loop client threads)"
MB = 1e6
LIBS = Path("/usr/lib/x86_64-linux-gnu")
PACKAGES = {"jemalloc": "libjemalloc2", "tcmalloc": "libtcmalloc-minimal4"}  # Debian's
# M4's rows: what each server's environment sets (None: unset). Only "default" decides the goal.
ALLOCATORS: tuple[tuple[str, dict[str, str | None]], ...] = (
    ("default", {"TF_ENABLE_ONEDNN_OPTS": None, "LD_PRELOAD": None}),
    ("oneDNN on", {"TF_ENABLE_ONEDNN_OPTS": "1", "LD_PRELOAD": None}),
    ("jemalloc", {"TF_ENABLE_ONEDNN_OPTS": None, "LD_PRELOAD": str(LIBS / "libjemalloc.so.2")}),
    ("tcmalloc", {"TF_ENABLE_ONEDNN_OPTS": None,
                  "LD_PRELOAD": str(LIBS / "libtcmalloc_minimal.so.4")}),
)  # fmt: skip
DEFAULT_ENV = ALLOCATORS[0][1]  # every other server: the CLI's defaults, whatever the shell set

Say = Callable[[str], None]


@dataclass(frozen=True)
class ManyPlan:
    """What `run_many` measures, and how long. `models` copies serve M1, M2 and M4 (M4 asks
    `memory_models` of them); M3's server keeps at most `isolation_resident` resident."""

    work_dir: Path
    models: int = 1000
    first_runs: int = 3
    zipf_s: float = 1.1
    rate: float = 200.0  # req/s, M2 and its one-model baseline
    zipf_duration_s: float = 300.0
    baseline_duration_s: float = 60.0
    resident: int = 200  # M2's --max-resident-models
    isolation_phase_s: float = 45.0
    isolation_clients: int = 4
    isolation_resident: int = 8  # M3's --max-resident-models (the pinned hot model included)
    memory_models: int = 200
    idle_unload_s: float = 2.0
    memory_late_s: float = 10.0  # M4's last RSS reading, this long after "after"
    allocators: tuple[str, ...] = tuple(name for name, _ in ALLOCATORS)
    parts: tuple[str, ...] = PARTS
    stand_ins: bool = False  # use this module's copies and traffic even where loadtest has them

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "work_dir"}


# ---------------------------------------------------------------------------------------------
# Servers, requests and the server's metrics


class _Server(ServerProcess):
    """`serve graph --model-config-file CONFIG --load-on-demand --metrics ...`, ready when
    `probe_model` answers a Predict with 200 (M1's clock: `ready_s`), or, without one, when the
    REST port serves the metrics page."""

    probe_model: str | None = None
    cold_load_s: float | None = None  # the first answer's x-graphserve-cold-load

    def is_ready(self) -> bool:
        assert self.rest_address is not None
        connection = HttpConnection(self.rest_address, REQUEST_TIMEOUT_S)
        try:
            if self.probe_model is None:
                return connection.request("GET", DEFAULT_METRICS_PATH, None, {}).status == 200
            reply = _predict_reply(connection, self.probe_model)
        except OSError:
            return False
        finally:
            connection.close()
        if reply.status == 200:
            cold = reply.headers.get("x-graphserve-cold-load")
            self.cold_load_s = None if cold is None else float(cold)
        return reply.status == 200


@contextmanager
def _environment(changes: Mapping[str, str | None]) -> Iterator[None]:
    """os.environ with `changes` (None unsets) while the block runs: a server started in it
    inherits them (ServerProcess passes this process's environment on)."""
    saved = {name: os.environ.get(name) for name in changes}
    try:
        for name, value in changes.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextmanager
def _serving(
    config: Path,
    flags: Sequence[str],
    log: Path,
    *,
    probe_model: str | None = None,
    env: Mapping[str, str | None] = DEFAULT_ENV,
    record: list[dict[str, Any]] | None = None,
) -> Iterator[_Server]:
    """A started server of `config` with `flags`, stopped after the block; its command and exit
    code appended to `record`."""
    args = ["graph", "--model-config-file", str(config), "--load-on-demand", "--metrics", *flags]
    server = cast(_Server, _Server.on_free_ports(args, probe_model or "", log))  # cls's own
    server.probe_model = probe_model
    with _environment(env):
        server.start(timeout=300.0, poll_s=0.05)
    entry = {"args": server.args[2:], "env": dict(env), "ready_s": round(server.ready_s or 0, 3)}
    try:
        yield server
    finally:
        entry["exit_code"] = server.stop()
        if record is not None:
            record.append(entry)


def _body() -> bytes:
    x = np.random.default_rng(7).normal(size=(1, FEATURES)).round(4)
    return json.dumps({"inputs": {INPUT: x.tolist()}}).encode()


_BODY = _body()
_HEADERS = {"Content-Type": "application/json"}


def _predict_reply(connection: HttpConnection, model: str) -> Any:
    return connection.request("POST", f"/v1/models/{model}:predict", _BODY, _HEADERS)


@dataclass(frozen=True)
class _Answer:
    at: float  # time.monotonic() when sent
    ms: float
    cold_s: float | None  # the wait the server marked (x-graphserve-cold-load); None: warm
    problem: str  # "" when answered 200

    @property
    def cold(self) -> bool:
        return self.cold_s is not None


class _Client:
    """One keep-alive REST connection sending Predict for the mlp's input."""

    def __init__(self, address: str) -> None:
        self.connection = HttpConnection(address, REQUEST_TIMEOUT_S)

    def predict(self, model: str) -> _Answer:
        at = time.monotonic()
        started = time.perf_counter()
        try:
            reply = _predict_reply(self.connection, model)
        except OSError as exc:
            return _Answer(at, (time.perf_counter() - started) * 1e3, None, f"{model}: {exc}")
        ms = (time.perf_counter() - started) * 1e3
        cold = reply.headers.get("x-graphserve-cold-load")
        problem = "" if reply.status == 200 else f"{model}: {reply.status} {reply.text[:200]}"
        return _Answer(at, ms, None if cold is None else float(cold), problem)

    def close(self) -> None:
        self.connection.close()


@dataclass(frozen=True)
class _Scrape:
    at: float  # time.monotonic()
    rss: float  # process_resident_memory_bytes
    resident_bytes: float
    resident_versions: float
    loads: float  # graphserve_model_loads_total{outcome="ok"}, all models
    load_seconds: float
    evictions: float
    model_bytes: dict[str, float]  # graphserve_model_resident_bytes by model


def _scrape(address: str) -> _Scrape:
    """The server's metrics page, read; OSError when it does not answer 200."""
    from prometheus_client.parser import text_string_to_metric_families

    connection = HttpConnection(address, 10.0)
    try:
        reply = connection.request("GET", DEFAULT_METRICS_PATH, None, {})
    finally:
        connection.close()
    if reply.status != 200:
        raise OSError(f"{address}{DEFAULT_METRICS_PATH}: {reply.status}")
    total: dict[str, float] = {}
    model_bytes: dict[str, float] = {}
    for family in text_string_to_metric_families(reply.text):
        for sample in family.samples:
            if sample.labels.get("outcome") == "failed":
                continue
            if sample.name == "graphserve_model_resident_bytes":
                model_bytes[sample.labels["model"]] = sample.value
            total[sample.name] = total.get(sample.name, 0.0) + sample.value
    return _Scrape(
        at=time.monotonic(),
        rss=total.get("process_resident_memory_bytes", 0.0),
        resident_bytes=total.get("graphserve_resident_bytes", 0.0),
        resident_versions=total.get("graphserve_resident_versions", 0.0),
        loads=total.get("graphserve_model_loads_total", 0.0),
        load_seconds=total.get("graphserve_model_load_seconds_total", 0.0),
        evictions=total.get("graphserve_model_evictions_total", 0.0),
        model_bytes=model_bytes,
    )


def _sample(address: str, t0: float) -> dict[str, float] | None:
    """One scrape as a sample: RSS, resident bytes and versions, loads and evictions, by
    seconds since `t0`; None when the server did not answer."""
    started = time.perf_counter()
    try:
        s = _scrape(address)
    except OSError:
        return None
    return {
        "t_s": round(s.at - t0, 2),
        "rss_mb": round(s.rss / MB, 2),
        "resident_mb": round(s.resident_bytes / MB, 2),
        "resident_versions": s.resident_versions,
        "loads": s.loads,
        "evictions": s.evictions,
        "scrape_ms": round((time.perf_counter() - started) * 1e3, 1),
    }


def _wait_resident(address: str, versions: float, timeout: float, settle: float = 2.0) -> _Scrape:
    """Wait until the server holds `versions` resident versions, then `settle` s more; the
    scrape after. RuntimeError past `timeout`."""
    deadline = time.monotonic() + timeout
    while (s := _scrape(address)).resident_versions != versions:
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{address}: {s.resident_versions:g} versions resident after {timeout:g} s, "
                f"expected {versions:g}"
            )
        time.sleep(0.25)
    time.sleep(settle)
    return _scrape(address)


def _timing(values: Sequence[float]) -> dict[str, Any] | None:
    return timing_of(list(values)).to_json() if values else None


# ---------------------------------------------------------------------------------------------
# The copies and the Zipf traffic: loadtest's commands where this graphserve has them


def _has_loadtest_command(name: str) -> bool:
    """Whether `graphserve loadtest NAME` exists here (other engineers are adding them)."""
    done = subprocess.run(
        [sys.executable, "-m", "graphserve", "loadtest", name, "--help"],
        capture_output=True,
        cwd=ROOT,
    )
    return done.returncode == 0


def write_copies(
    version: Path, count: int, out: Path, pin: int, use_loadtest: bool
) -> tuple[Path, list[str], str]:
    """`count` copies of `version` as OUT/model-0000/1 ... and OUT/models.config, the first
    `pin` pinned; the config, the model names in order, and what wrote them."""
    if use_loadtest:
        command = [sys.executable, "-m", "graphserve", "loadtest", "copies", "--from",
                   str(version), "--count", str(count), "--out", str(out), "--force"]  # fmt: skip
        if pin:
            command += ["--pin", str(pin)]
        subprocess.run(command, check=True, cwd=ROOT, capture_output=True)
        how = "graphserve loadtest copies"
    else:
        shutil.rmtree(out, ignore_errors=True)
        for name in _names(count):
            shutil.copytree(version, out / name / "1", copy_function=os.link)
        models = [
            ModelConfig(name, out / name, labels={"pinned": 1} if i < pin else {})
            for i, name in enumerate(_names(count))
        ]
        (out / "models.config").write_text(model_config_text(models))
        how = "tools/bench/many.py's stand-in (hard links and a config)"
    return out / "models.config", _names(count), how


def _names(count: int) -> list[str]:
    width = max(4, len(str(count - 1)))
    return [f"model-{i:0{width}d}" for i in range(count)]


def _zipf_weights(count: int, s: float) -> np.ndarray:
    weights = 1.0 / np.arange(1, count + 1) ** s
    return np.asarray(weights / weights.sum())


def _open_loop(
    address: str,
    names: Sequence[str],
    s: float,
    rate: float,
    duration_s: float,
    threads: int = OPEN_LOOP_THREADS,
    seed: int = 0,
) -> dict[str, Any]:
    """The stand-in for `loadtest many`: request i, to a model drawn by Zipf(s) over `names`,
    is due at i / rate s; `threads` client threads send them (an open loop while one is free).
    A request not sent within 10 s after the end is not sent (`unsent`)."""
    picks = np.random.default_rng(seed).choice(
        len(names), size=round(rate * duration_s), p=_zipf_weights(len(names), s)
    )
    lock = threading.Lock()
    answers: list[tuple[_Answer, float]] = []  # and how late it was sent (s)
    following = iter(range(len(picks)))
    t0 = time.monotonic() + 0.2
    give_up = t0 + duration_s + 10.0

    def send() -> None:
        client = _Client(address)
        try:
            while True:
                with lock:
                    i = next(following, None)
                if i is None:
                    return
                due = t0 + i / rate
                if (wait := due - time.monotonic()) > 0:
                    time.sleep(wait)
                elif time.monotonic() > give_up:
                    return
                answer = client.predict(names[picks[i]])
                with lock:
                    answers.append((answer, answer.at - due))
        finally:
            client.close()

    workers = [threading.Thread(target=send, daemon=True) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return _traffic_summary([a for a, _ in answers], [late for _, late in answers], len(picks))


def _traffic_summary(
    answers: Sequence[_Answer], late_s: Sequence[float], scheduled: int
) -> dict[str, Any]:
    failed = [a for a in answers if a.problem]
    ok = [(a, late * 1e3) for a, late in zip(answers, late_s, strict=True) if not a.problem]
    warm = [(a.ms, lag) for a, lag in ok if a.cold_s is None]
    cold = [(a.ms, lag, a.cold_s * 1e3) for a, lag in ok if a.cold_s is not None]
    seconds = (max(a.at for a in answers) - min(a.at for a in answers)) if answers else 0.0
    return {
        "generator": STAND_IN_TRAFFIC,
        "scheduled": scheduled,
        "requests": len(answers),
        "unsent": scheduled - len(answers),
        "failures": len(failed),
        "failure_examples": sorted({a.problem for a in failed})[:10],
        **_latencies(warm, cold),
        "hit_ratio": round(len(warm) / len(answers), 4) if answers else None,
        "sent_per_s": round(len(answers) / seconds, 1) if seconds else None,
    }


def _latencies(
    warm: Sequence[tuple[float, float]], cold: Sequence[tuple[float, float, float]]
) -> dict[str, Any]:
    """Warm (ms, lag ms) and cold (ms, lag ms, marked wait ms) answers: their latencies from
    the actual send, from the scheduled send (the lag added: an open loop's view), and the
    cold ones' waits the server marked."""
    lags = [lag for _, lag in warm] + [lag for _, lag, _ in cold]
    return {
        "late_p50_ms": round(float(np.median(lags)), 1) if lags else None,
        "late_max_ms": round(max(lags), 1) if lags else None,
        "warm": _timing([ms for ms, _ in warm]),
        "cold": _timing([ms for ms, _, _ in cold]),
        "warm_scheduled": _timing([ms + lag for ms, lag in warm]),
        "cold_scheduled": _timing([ms + lag for ms, lag, _ in cold]),
        "cold_wait": _timing([wait for _, _, wait in cold]),
    }


def _loadtest_many(
    address: str, config: Path, s: float, rate: float, duration_s: float, out: Path
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """`graphserve loadtest many` against `address`, its `users` threads as many as the
    stand-in's (requests waiting on loads hold one each), scraping the server every second:
    its many.json in the stand-in's terms, and its scrapes as `_Sampler`'s samples (one
    scraper: a scrape costs the server time)."""
    users = OPEN_LOOP_THREADS
    command = [sys.executable, "-m", "graphserve", "loadtest", "many", "--target",
               f"http://{address}", "--models-from", str(config), "--zipf", f"{s:g}", "--rate",
               f"{rate:g}", "--users", str(users), "--duration", f"{duration_s:g}s",
               "--scrape-every", "1s", "--out", str(out)]  # fmt: skip
    subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    report = json.loads((out / "many.json").read_text())
    totals = report["totals"]
    # every request as the generator recorded it (loadtest/manymodels/analysis.py): latency
    # from the actual send, lag behind the schedule, the server's mark (NaN: warm), error (-1)
    records = np.load(out / "raw" / "records.npz")
    answered = records["error"] == -1
    ms, lag, cold_s = (records[k][answered].tolist() for k in ("latency_ms", "lag_ms", "cold_s"))
    warm = [(m, g) for m, g, c in zip(ms, lag, cold_s, strict=True) if np.isnan(c)]
    cold = [(m, g, c * 1e3) for m, g, c in zip(ms, lag, cold_s, strict=True) if not np.isnan(c)]
    scheduled = round(rate * duration_s)
    traffic = {
        "generator": LOADTEST_TRAFFIC,
        "command": command[1:],
        "scheduled": scheduled,
        "requests": totals["requests"],
        "unsent": max(scheduled - totals["requests"], 0),
        "failures": totals["failures"],
        "failure_examples": list(report.get("errors") or {})[:10],
        **_latencies(warm, cold),
        "hit_ratio": totals["hit_ratio"],
        "sent_per_s": totals["throughput_rps"],
    }
    samples = [
        {
            "t_s": m["t_s"],
            "rss_mb": round((m["rss_bytes"] or 0.0) / MB, 2),
            "resident_mb": round((m["resident_bytes"] or 0.0) / MB, 2),
            "resident_versions": m["resident_versions"],
            "loads": m["loads"],
            "evictions": m["evictions"],
            "scrape_ms": m.get("scrape_ms"),
        }
        for m in report["memory"]
    ]
    return traffic, samples


# ---------------------------------------------------------------------------------------------
# The parts


@dataclass
class _Run:
    """What the parts share: the plan, the copies, the servers started."""

    plan: ManyPlan
    version: Path  # the exported mlp's version directory
    say: Say
    loadtest_many: bool
    config: Path = Path()  # `plan.models` copies, none pinned
    pinned_config: Path = Path()  # the same, the first pinned (M3)
    one_config: Path = Path()  # one copy (M1's and M2's one-model servers)
    names: list[str] = field(default_factory=list)
    servers: list[dict[str, Any]] = field(default_factory=list)

    def log(self, name: str) -> Path:
        return self.plan.work_dir / "logs" / f"{name}-{len(self.servers)}.log"


def first_answer(run: _Run) -> dict[str, Any]:
    """M1: from process start to the first 200 for `names[0]`, the many-model config against a
    one-model config, alternating which starts first; the median of `first_runs` each."""
    rows = []
    for r in range(run.plan.first_runs):
        order = ("many", "one") if r % 2 == 0 else ("one", "many")
        for label in order:
            config = run.config if label == "many" else run.one_config
            with _serving(config, [], run.log(f"first-{label}"), probe_model=run.names[0],
                          record=run.servers) as server:  # fmt: skip
                seconds = round(server.ready_s or 0.0, 3)
                rows.append({"run": r, "config": label, "first_answer_s": seconds,
                             "cold_load_s": server.cold_load_s})  # fmt: skip
            run.say(f"M1 run {r + 1} {label}: first answer after {seconds:.2f} s")
    medians = {
        label: float(np.median([row["first_answer_s"] for row in rows if row["config"] == label]))
        for label in ("many", "one")
    }
    return {"models": run.plan.models, "runs": rows, "median_s": medians}


def _traffic(
    run: _Run, address: str, config: Path, names: Sequence[str], duration_s: float, tag: str
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Zipf traffic at the plan's rate: what the clients saw, and the server's RSS, resident
    bytes and versions scraped every second meanwhile."""
    plan = run.plan
    if run.loadtest_many:
        out = plan.work_dir / f"loadtest-many-{tag}"
        return _loadtest_many(address, config, plan.zipf_s, plan.rate, duration_s, out)
    t0 = time.monotonic()
    with Sampler(lambda: _sample(address, t0), 1.0) as sampler:
        traffic = _open_loop(address, names, plan.zipf_s, plan.rate, duration_s)
    return traffic, sampler.samples


def zipf(run: _Run) -> dict[str, Any]:
    """M2: the one-model server at the rate, then Zipf traffic over every model with at most
    `plan.resident` versions resident, the server scraped every second."""
    plan = run.plan
    flags = ["--max-resident-models", str(plan.resident)]
    with _serving(run.one_config, flags, run.log("zipf-one"), record=run.servers) as one:
        assert one.rest_address is not None
        baseline, _ = _traffic(run, one.rest_address, run.one_config, run.names[:1],
                               plan.baseline_duration_s, "one")  # fmt: skip
    run.say(f"M2 one model: warm p50 {_n((baseline['warm'] or {}).get('p50_ms'))} ms")
    with _serving(run.config, flags, run.log("zipf-many"), record=run.servers) as server:
        address = server.rest_address
        assert address is not None
        base = _wait_resident(address, 0, timeout=60.0)
        first = _scrape(address)
        traffic, samples = _traffic(run, address, run.config, run.names, plan.zipf_duration_s,
                                    "many")  # fmt: skip
        last = _scrape(address)
    loads = last.loads - first.loads
    budget = max((s["resident_mb"] for s in samples), default=0.0) * MB
    run.say(f"M2 {plan.models} models: warm p50 {_n((traffic['warm'] or {}).get('p50_ms'))} ms, "
            f"{loads:.0f} loads")  # fmt: skip
    return {
        "baseline": baseline,
        "traffic": traffic,
        "base_rss_bytes": base.rss,
        "base_rule": "process_resident_memory_bytes scraped once the server answered, held no "
        "version (graphserve_resident_versions 0) and 2 s passed, before the first request",
        "budget_bytes": budget,
        "budget_rule": "the largest graphserve_resident_bytes of the scrapes every second during "
        "the traffic",
        "rss_max_bytes": max((s["rss_mb"] for s in samples), default=0.0) * MB,
        "loads": loads,
        "load_ms_mean": (last.load_seconds - first.load_seconds) / loads * 1e3 if loads else None,
        "evictions": last.evictions - first.evictions,
        "model_bytes": sorted(last.model_bytes.values()),
        "samples": samples,
    }


def _closed_loop(
    address: str, models: Sequence[str], clients: int, seconds: float
) -> list[_Answer]:
    """`clients` threads asking `models` in turn (one shared cycle), each back to back."""
    lock = threading.Lock()
    answers: list[_Answer] = []
    turn = iter(range(10**12))
    end = time.monotonic() + seconds

    def ask() -> None:
        client = _Client(address)
        try:
            while time.monotonic() < end:
                with lock:
                    model = models[next(turn) % len(models)]
                answer = client.predict(model)
                with lock:
                    answers.append(answer)
        finally:
            client.close()

    threads = [threading.Thread(target=ask, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


class _HotClient:
    """The hot model's closed loop in a process of its own (`hot_client`), so that the other
    clients' threads do not share its interpreter's lock; its answers, after `stop`."""

    def __init__(self, address: str, model: str, out: Path) -> None:
        self.out = out
        command = [sys.executable, "-c", "from tools.bench.many import hot_client; hot_client()",
                   address, model, str(out)]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, cwd=ROOT, env=env)

    def stop(self) -> np.ndarray:
        """(sent at, ms, ok) rows."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        if self.process.wait(timeout=REQUEST_TIMEOUT_S + 30) != 0:
            raise RuntimeError(f"the hot model's client exited with {self.process.returncode}")
        return np.load(self.out)


def hot_client() -> None:
    """M3's hot client, as `_HotClient` runs it: argv ADDRESS MODEL OUT; Predict back to back
    until stdin closes, then OUT (.npy) holds (time.monotonic() sent, ms, ok) per answer."""
    address, model, out = sys.argv[1:4]
    stop = threading.Event()

    def wait_for_eof() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=wait_for_eof, daemon=True).start()
    client = _Client(address)
    rows = []
    while not stop.is_set():
        answer = client.predict(model)
        rows.append((answer.at, answer.ms, 0.0 if answer.problem else 1.0))
    client.close()
    np.save(out, np.array(rows, dtype=np.float64).reshape(-1, 3))


def isolation(run: _Run) -> dict[str, Any]:
    """M3: the pinned model asked back to back by its own client while `isolation_clients`
    others ask (a) the few models that stay resident, then (b) models that never are."""
    plan = run.plan
    hot, keep = run.names[0], plan.isolation_resident
    resident_set, cold_set = run.names[1:keep], run.names[keep:]
    flags = ["--max-resident-models", str(keep)]
    with _serving(run.pinned_config, flags, run.log("isolation"), record=run.servers) as server:
        address = server.rest_address
        assert address is not None
        warm = _Client(address)  # each resident-set model loads once, before the clock
        for model in resident_set:
            warm.predict(model)
        warm.close()
        client = _HotClient(address, hot, plan.work_dir / "hot.npy")
        try:
            time.sleep(1.0)  # its interpreter started and its first answers came
            phases = [
                _Phase.run(name, address, models, plan.isolation_clients, plan.isolation_phase_s)
                for name, models in (("resident", resident_set), ("cold", cold_set))
            ]
        finally:
            rows = client.stop()
    out: dict[str, Any] = {"hot_model": hot, "resident_set": len(resident_set),
                           "cold_set": len(cold_set), "phases": {}}  # fmt: skip
    for phase in phases:
        out["phases"][phase.name] = phase.summary(rows)
        hot_p99 = (out["phases"][phase.name]["hot"] or {}).get("p99_ms")
        run.say(f"M3 {phase.name}: hot p99 {_n(hot_p99)} ms, {phase.loads:.0f} loads")
    return out


@dataclass(frozen=True)
class _Phase:
    """One phase of M3: the other clients' answers, its clock, the server's loads during it."""

    name: str
    start: float
    end: float
    answers: list[_Answer]
    loads: float

    @classmethod
    def run(
        cls, name: str, address: str, models: Sequence[str], clients: int, seconds: float
    ) -> _Phase:
        before = _scrape(address)
        answers = _closed_loop(address, models, clients, seconds)
        after = _scrape(address)
        return cls(name, before.at, after.at, answers, after.loads - before.loads)

    def summary(self, hot_rows: np.ndarray) -> dict[str, Any]:
        """Its figures, with the hot client's answers sent within it ((at, ms, ok) rows)."""
        seconds = self.end - self.start
        inside = hot_rows[(hot_rows[:, 0] >= self.start) & (hot_rows[:, 0] < self.end)]
        return {
            "seconds": round(seconds, 2),
            "hot": _timing(inside[inside[:, 2] == 1.0, 1].tolist()),
            "hot_failures": int((inside[:, 2] == 0.0).sum()),
            "others": _timing([a.ms for a in self.answers if not a.problem]),
            "others_requests": len(self.answers),
            "others_cold": sum(a.cold for a in self.answers),
            "others_failures": sum(bool(a.problem) for a in self.answers),
            "loads": self.loads,
            "loads_per_s": round(self.loads / seconds, 2) if seconds else None,
        }


def memory(run: _Run) -> dict[str, Any]:
    """M4: per allocator, RSS before any load, at the peak while `memory_models` models load
    once each (unloaded `idle_unload_s` after their one request), once none is resident again
    (plus 2 s), and `memory_late_s` later."""
    plan = run.plan
    rows = []
    for label, env in ALLOCATORS:
        if label not in plan.allocators:
            continue
        library = env.get("LD_PRELOAD")
        if library:
            try:  # Debian's libjemalloc2 / libtcmalloc-minimal4, installed as root
                debian_library(Path(library), PACKAGES[label], f"M4's {label} row")
            except ToolMissing as exc:
                rows.append({"allocator": label, "env": env, "skipped": str(exc)})
                continue
        flags = ["--idle-unload", f"{plan.idle_unload_s:g}s"]
        with _serving(run.config, flags, run.log(f"memory-{label.replace(' ', '-')}"), env=env,
                      record=run.servers) as server:  # fmt: skip
            rows.append(_memory_row(server, run.names[: plan.memory_models], plan, label, env))
        row = rows[-1]
        run.say(f"M4 {label}: RSS {row['before_mb']:.0f} MB before, {row['peak_mb']:.0f} peak, "
                f"{row['after_mb']:.0f} after")  # fmt: skip
    return {"models": plan.memory_models, "idle_unload_s": plan.idle_unload_s, "rows": rows}


def _memory_row(
    server: _Server, models: Sequence[str], plan: ManyPlan, label: str, env: Mapping[str, Any]
) -> dict[str, Any]:
    address = server.rest_address
    assert address is not None
    before = _wait_resident(address, 0, timeout=60.0)
    client = _Client(address)
    with Sampler(lambda: _sample(address, before.at), 0.5) as sampler:
        answers = [client.predict(model) for model in models]
        loaded = _scrape(address)
    client.close()
    after = _wait_resident(address, 0, timeout=plan.idle_unload_s + 120.0)
    time.sleep(plan.memory_late_s)
    late = _scrape(address)
    peak = max([s["rss_mb"] for s in sampler.samples], default=0.0)
    return {
        "allocator": label,
        "env": dict(env),
        "requests": len(answers),
        "failures": sum(bool(a.problem) for a in answers),
        "cold": sum(a.cold for a in answers),
        "before_mb": round(before.rss / MB, 1),
        "loaded_mb": round(loaded.rss / MB, 1),
        "loaded_versions": loaded.resident_versions,
        "peak_mb": round(max(peak, loaded.rss / MB), 1),
        "peak_versions": max((s["resident_versions"] for s in sampler.samples), default=None),
        "after_mb": round(after.rss / MB, 1),
        "after_s": round(after.at - before.at, 1),
        "late_mb": round(late.rss / MB, 1),
        "late_s": round(late.at - before.at, 1),
        "evictions": late.evictions,
        "model_bytes": sorted(loaded.model_bytes.values()),
    }


def bytes_per_model(run: _Run, results: dict[str, Any]) -> dict[str, Any]:
    """core.savedmodel's prediction for the mlp against what the server measured at load (malloc's
    bytes in use grown while the version loaded): the models M4's default server loaded one
    after the other with no other request running, and those resident when M2's traffic ended."""
    from graphserve.core.savedmodel import predicted_resident_bytes

    def stats(measured: list[float]) -> dict[str, Any] | None:
        if not measured:
            return None
        return {"models": len(measured), "mean_bytes": float(np.mean(measured)),
                "median_bytes": float(np.median(measured)), "min_bytes": min(measured),
                "max_bytes": max(measured)}  # fmt: skip

    rows = (results.get("memory") or {}).get("rows") or []
    default: dict[str, Any] = next(
        (r for r in rows if r["allocator"] == "default" and "skipped" not in r), {}
    )
    alone = stats(default.get("model_bytes") or [])
    under_traffic = stats((results.get("zipf") or {}).get("model_bytes") or [])
    predicted = predicted_resident_bytes(run.version)
    basis = alone or under_traffic
    return {
        "predicted_bytes": predicted,
        "loaded_alone": alone,
        "under_traffic": under_traffic,
        "predicted_over_measured": predicted / basis["mean_bytes"] if basis else None,
    }


def run_many(plan: ManyPlan, say: Say = lambda _: None) -> dict[str, Any]:
    """Export the mlp, write its copies, run `plan.parts`; every number, the goals evaluated.
    Raises RuntimeError when a server does not start or settle, CalledProcessError when a
    loadtest command fails."""
    from graphserve.exporter.api import ExportSpec, export_model
    from graphserve.loadtest.comparison.run import environment

    started = time.perf_counter()
    work = plan.work_dir
    exported = export_model(ExportSpec("examples:mlp", MODEL, base_path=work / "models",
                                       overwrite=True))  # fmt: skip
    copies = not plan.stand_ins and _has_loadtest_command("copies")
    many_cmd = not plan.stand_ins and _has_loadtest_command("many")
    run = _Run(plan, exported.path, say, many_cmd)
    run.config, run.names, copies_how = write_copies(exported.path, plan.models,
                                                     work / "copies", 0, copies)  # fmt: skip
    run.pinned_config, _, _ = write_copies(exported.path, plan.models, work / "pinned", 1, copies)
    run.one_config, _, _ = write_copies(exported.path, 1, work / "one", 0, copies)
    say(f"{plan.models} copies of {exported.path} ({copies_how})")
    results: dict[str, Any] = {
        "environment": environment().to_json(),
        "plan": plan.to_json(),
        "copies": copies_how,
        "traffic_generator": LOADTEST_TRAFFIC if many_cmd else STAND_IN_TRAFFIC,
    }
    parts: dict[str, Callable[[_Run], dict[str, Any]]] = {
        "first": first_answer, "zipf": zipf, "isolation": isolation, "memory": memory,
    }  # fmt: skip
    for name, part in parts.items():
        if name in plan.parts:
            results[name] = part(run)
    results["bytes_per_model"] = bytes_per_model(run, results)
    results["servers"] = run.servers
    results["notes"] = _notes(results)
    results["seconds"] = round(time.perf_counter() - started, 1)
    results["goals"] = many_goals(results)
    return results


def _notes(results: dict[str, Any]) -> list[str]:
    """What a reader needs to weigh the numbers, from the results themselves."""
    notes = [f"Copies: {results['copies']}. Zipf traffic: {results['traffic_generator']}."]
    if "zipf" in results:
        notes += _zipf_notes(results["zipf"], results["plan"])
    memory_part = results.get("memory") or {}
    if memory_part:
        notes.append(
            f"M4: with --idle-unload {memory_part['idle_unload_s']:g}s the first models unload "
            "while the later ones load (one at a time), so the peak holds fewer than all of "
            "them: the peak's versions column says how many."
        )
    return notes


def _zipf_notes(z: dict[str, Any], plan: dict[str, Any]) -> list[str]:
    notes = []
    traffic = z["traffic"]
    if traffic.get("unsent"):
        notes.append(
            f"M2: {traffic['unsent']:,} of the {traffic['scheduled']:,} requests the rate "
            f"scheduled were not sent: every one of the generator's {OPEN_LOOP_THREADS} client "
            "threads was waiting on an answer (a request waiting for its model's load holds "
            "its thread). The open loop did not hold."
        )
    load_ms, hit = z.get("load_ms_mean"), traffic.get("hit_ratio")
    if load_ms and hit is not None:
        needed, seconds = (1 - hit) * plan["rate"], plan["zipf_duration_s"]
        notes.append(
            f"M2: the server loaded {z['loads']:,.0f} versions in the {seconds:g} s of traffic "
            f"({z['loads'] / seconds:.1f}/s), {load_ms:.0f} ms each on average under this "
            f"traffic, one at a time (at most {1e3 / load_ms:.1f}/s); {1 - hit:.0%} of the "
            f"requests sent were cold, {needed:.0f}/s at the scheduled {plan['rate']:g} req/s."
        )
    scrapes = [s["scrape_ms"] for s in z["samples"] if s.get("scrape_ms") is not None]
    if scrapes:
        notes.append(
            f"M2: one scrape of the metrics page took a median {np.median(scrapes):,.0f} ms "
            f"(max {max(scrapes):,.0f} ms) at {plan['models']:,} models, once a second."
        )
    return notes


# ---------------------------------------------------------------------------------------------
# Goals


def _m1(r: dict[str, Any]) -> tuple[float, str]:
    m = r["first"]["median_s"]
    return m["many"] - m["one"], (
        f"{r['first']['models']:,} models {m['many']:.2f} s - one model {m['one']:.2f} s "
        f"(median of {r['plan']['first_runs']} starts each, process start to the first 200)"
    )


def _m2_failures(r: dict[str, Any]) -> tuple[float, str]:
    t = r["zipf"]["traffic"]
    return float(t["failures"]), f"{t['failures']} of {t['requests']:,} requests sent failed"


def _m2_sent(r: dict[str, Any]) -> tuple[bool, str]:
    t = r["zipf"]["traffic"]
    sent = t["requests"] / t["scheduled"]
    return sent >= 0.99, f"{sent:.1%} of the {t['scheduled']:,} scheduled were sent (goal ≥ 99%)"


def _m2_warm(r: dict[str, Any]) -> tuple[float, str]:
    many, one = r["zipf"]["traffic"]["warm"]["p50_ms"], r["zipf"]["baseline"]["warm"]["p50_ms"]
    return many / one, (
        f"warm p50 {many:.2f} ms, {r['plan']['models']:,} models / one model {one:.2f} ms, "
        f"both at {r['plan']['rate']:g} req/s, from the actual send"
    )


def _m2_cold(r: dict[str, Any]) -> tuple[float, str]:
    z = r["zipf"]
    cold, load = z["traffic"]["cold"]["p50_ms"], z["load_ms_mean"]
    return cold / (load + 20.0), (
        f"cold p50 {cold:,.1f} ms from the actual send / (mean load {load:.1f} ms + 20 ms), "
        f"{z['loads']:,.0f} loads"
    )


def _m2_rss(r: dict[str, Any]) -> tuple[float, str]:
    z = r["zipf"]
    base, budget, top = z["base_rss_bytes"], z["budget_bytes"], z["rss_max_bytes"]
    return (top - base) / budget, (
        f"(max RSS {top / MB:,.0f} MB - base {base / MB:,.0f} MB) / largest resident "
        f"{budget / MB:,.0f} MB"
    )


def _m3(r: dict[str, Any]) -> tuple[float, str]:
    p = r["isolation"]["phases"]
    cold, warm = p["cold"]["hot"]["p99_ms"], p["resident"]["hot"]["p99_ms"]
    return cold / warm, (
        f"hot p99 {cold:.2f} ms with cold neighbours ({p['cold']['loads_per_s']:g} loads/s) / "
        f"{warm:.2f} ms with resident ones"
    )


def _m4(r: dict[str, Any]) -> tuple[float, str]:
    row = next(row for row in r["memory"]["rows"] if row["allocator"] == "default")
    allowed = max(0.1 * row["before_mb"], 50.0)
    grew = row["after_mb"] - row["before_mb"]
    return grew / allowed, (
        f"after - before {grew:+.1f} MB / allowed {allowed:.1f} MB (before {row['before_mb']:.0f} "
        f"MB, peak {row['peak_mb']:.0f} MB; glibc with malloc_trim, oneDNN off)"
    )


MANY_GOALS: tuple[Goal, ...] = (
    Goal("M1", "first answer: 1,000 models - one model (s)", "<=", 5.0, _m1),
    Goal("M2a", "Zipf: failed requests (and the load sent)", "<=", 0.0, _m2_failures, _m2_sent),
    Goal("M2b", "Zipf: warm p50 / one-model server's p50", "<=", 1.10, _m2_warm),
    Goal("M2c", "Zipf: cold p50 / (mean load time + 20 ms)", "<=", 1.0, _m2_cold),
    Goal("M2d", "Zipf: (max RSS - base) / max resident bytes", "<=", 1.10, _m2_rss),
    Goal("M3", "isolation: hot p99 with cold neighbours / with resident ones", "<=", 1.5, _m3),
    Goal("M4", "memory back: (after - before) / max(10% of before, 50 MB)", "<=", 1.0, _m4),
)


def many_goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    """MANY_GOALS evaluated against `results`; a part not run is a miss saying so."""
    return [g.to_json() for g in evaluate(results, MANY_GOALS)]


# ---------------------------------------------------------------------------------------------
# The page and the plot


def _n(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _row(cells: Iterable[object]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _header(columns: Sequence[str]) -> list[str]:
    """A table's head; a column named with a trailing ">" is right-aligned."""
    names = [c.rstrip(">") for c in columns]
    return [_row(names), _row("---:" if c.endswith(">") else "---" for c in columns)]


_TRAFFIC_COLUMNS = ("server", "scheduled>", "sent>", "failed>", "hit ratio>", "warm p50>",
                    "warm p99>", "cold p50>", "cold p99>", "load wait p50>", "answered/s>",
                    "sent late p50>", "warm p50 from schedule>",
                    "cold p50 from schedule>")  # fmt: skip
_ISOLATION_COLUMNS = ("others ask", "hot requests>", "hot p50>", "hot p99>", "others' requests>",
                      "cold>", "others' p50>", "loads/s>")  # fmt: skip
_BYTES_COLUMNS = ("measured on", "models>", "mean (MB)>", "median (MB)>", "min (MB)>", "max (MB)>")
_MEMORY_COLUMNS = ("allocator", "before (MB)>", "peak (MB)>", "versions at peak>", "after (MB)>",
                   "after - before>", "later (MB)>", "allowed (MB)>", "result")  # fmt: skip


def goal_lines(results: dict[str, Any]) -> list[str]:
    """One printed line per goal: key, pass/miss, value, target, what and how."""
    return [
        f"{g['key']} {'pass' if g['passed'] else 'MISS'}  {_n(g['value'], 3)} (goal {g['goal']})"
        f"  {g['what']}: {g['detail']}"
        for g in results["goals"]
    ]


def render_many(results: dict[str, Any]) -> str:
    """many.md, from many.json alone."""
    env = results["environment"]
    out = [
        "# Many models on one server: loading on demand",
        "",
        f"{env['timestamp']} on `{env['hostname']}`: {env['cpus']} CPUs, {env['platform']}, "
        f"Python {env['python']}, TensorFlow {env['versions'].get('tensorflow')}; the run took "
        f"{results['seconds']:.0f} s. Every server is `graphserve serve graph --model-config-file "
        "F --load-on-demand --metrics` (a child process on loopback) serving copies of the "
        "exported mlp; requests are REST Predict calls, cold when the answer carries "
        "`x-graphserve-cold-load`. Times are milliseconds unless marked.",
        "",
        "## Goals",
        "",
        _row(["goal", "what", "measured", "target", "result", "from"]),
        "| --- | --- | ---: | --- | --- | --- |",
    ]
    for g in results["goals"]:
        result = "pass" if g["passed"] else "**miss**"
        out.append(_row([g["key"], g["what"], _n(g["value"], 3), g["goal"], result, g["detail"]]))
    out += [""]
    for section in (_first_md, _zipf_md, _isolation_md, _memory_md, _bytes_md):
        out += section(results)
    out += ["## Notes", "", *[f"- {note}" for note in results["notes"]], ""]
    out += ["## Servers", "", _row(["command", "environment", "ready (s)", "exit"]),
            "| --- | --- | ---: | ---: |"]  # fmt: skip
    for s in results["servers"]:
        env_text = " ".join(f"{k}={v}" for k, v in s["env"].items() if v is not None) or "—"
        command = " ".join(a if "/" not in a else Path(a).name for a in s["args"])
        out.append(_row([f"`{command}`", env_text, _n(s["ready_s"]), s["exit_code"]]))
    return "\n".join(out) + "\n"


def _first_md(results: dict[str, Any]) -> list[str]:
    if "first" not in results:
        return []
    first = results["first"]
    out = [
        "## M1: first answer",
        "",
        f"Seconds from starting the process to the first 200 for one model, {first['models']:,} "
        "models in the config against one; the order alternates run by run. The load inside it "
        "is the answer's `x-graphserve-cold-load`.",
        "",
        _row(["run", "config", "first answer (s)", "its model's load (ms)"]),
        "| ---: | --- | ---: | ---: |",
    ]
    for row in first["runs"]:
        load = None if row["cold_load_s"] is None else row["cold_load_s"] * 1e3
        out.append(_row([row["run"] + 1, row["config"], _n(row["first_answer_s"]), _n(load, 1)]))
    return [*out, ""]


def _traffic_row(label: str, t: dict[str, Any]) -> str:
    def p50(key: str, digits: int = 2) -> str:
        return _n((t[key] or {}).get("p50_ms"), digits)

    return _row([
        label, f"{t['scheduled']:,}", f"{t['requests']:,}", t["failures"], _n(t["hit_ratio"], 3),
        p50("warm"), _n((t["warm"] or {}).get("p99_ms")), p50("cold", 1),
        _n((t["cold"] or {}).get("p99_ms"), 1), p50("cold_wait", 1), _n(t["sent_per_s"], 0),
        _n(t["late_p50_ms"], 0), p50("warm_scheduled", 1), p50("cold_scheduled", 1),
    ])  # fmt: skip


def _zipf_md(results: dict[str, Any]) -> list[str]:
    if "zipf" not in results:
        return []
    z, plan = results["zipf"], results["plan"]
    base, budget = z["base_rss_bytes"] / MB, z["budget_bytes"] / MB
    return [
        "## M2: Zipf traffic",
        "",
        f"Zipf({plan['zipf_s']:g}) over {plan['models']:,} models at {plan['rate']:g} req/s for "
        f"{plan['zipf_duration_s']:g} s, `--max-resident-models {plan['resident']}`; the "
        f"one-model server (the same flags) at the same rate for {plan['baseline_duration_s']:g} "
        f"s. Traffic: {results['traffic_generator']}. Latency is from the request's actual send "
        "(what the server took, the goals' figure) and, in the last columns, from the time "
        "the rate scheduled it (an open loop's view: a request sent late counts its lag); the "
        "load wait is what the server marked in `x-graphserve-cold-load`.",
        "",
        *_header(_TRAFFIC_COLUMNS),
        _traffic_row("one model", z["baseline"]),
        _traffic_row(f"{plan['models']:,} models", z["traffic"]),
        "",
        f"Loads {z['loads']:,.0f} (mean {_n(z['load_ms_mean'], 1)} ms each, from "
        f"graphserve_model_load_seconds_total / graphserve_model_loads_total over the run), "
        f"evictions {z['evictions']:,.0f}.",
        "",
        f"Memory: base {base:,.1f} MB, {z['base_rule']}; budget {budget:,.1f} MB, "
        f"{z['budget_rule']}; RSS (process_resident_memory_bytes, the same scrapes) at most "
        f"{z['rss_max_bytes'] / MB:,.1f} MB against base + budget + 10 % of the budget = "
        f"{base + 1.1 * budget:,.1f} MB.",
        "",
        "![RSS and resident bytes over time during M2](many.png)",
        "",
    ]


def _isolation_md(results: dict[str, Any]) -> list[str]:
    if "isolation" not in results:
        return []
    iso, plan = results["isolation"], results["plan"]
    out = [
        "## M3: isolation",
        "",
        f"`{iso['hot_model']}` (pinned) asked back to back by one client in a process of its "
        f"own; {plan['isolation_clients']} other clients, back to back, ask the "
        f"{iso['resident_set']} models that stay resident, then {iso['cold_set']} models that "
        f"never are (`--max-resident-models {plan['isolation_resident']}`: every request loads "
        f"one and evicts one), {plan['isolation_phase_s']:g} s each, the same server.",
        "",
        *_header(_ISOLATION_COLUMNS),
    ]
    for phase, p in iso["phases"].items():
        hot, others = p["hot"] or {}, p["others"] or {}
        out.append(_row([
            f"{phase} models", f"{hot.get('samples', 0):,}", _n(hot.get("p50_ms")),
            _n(hot.get("p99_ms")), f"{p['others_requests']:,}", f"{p['others_cold']:,}",
            _n(others.get("p50_ms")), _n(p["loads_per_s"]),
        ]))  # fmt: skip
    return [*out, ""]


def _memory_md(results: dict[str, Any]) -> list[str]:
    if "memory" not in results:
        return []
    mem = results["memory"]
    out = [
        "## M4: memory back",
        "",
        f"`--idle-unload {mem['idle_unload_s']:g}s`: RSS once the server answered and held "
        f"nothing (plus 2 s); the highest while {mem['models']} models were asked once each; "
        "once no version was resident again (plus 2 s); and later. Only the default row decides "
        "the goal: after ≤ before + max(10 % of before, 50 MB).",
        "",
        *_header(_MEMORY_COLUMNS),
    ]
    for row in mem["rows"]:
        if "skipped" in row:
            out.append(_row([row["allocator"], *["—"] * 7, f"skipped: {row['skipped']}"]))
            continue
        allowed = max(0.1 * row["before_mb"], 50.0)
        grew = row["after_mb"] - row["before_mb"]
        out.append(_row([
            row["allocator"], _n(row["before_mb"], 1), _n(row["peak_mb"], 1),
            _n(row["peak_versions"], 0), _n(row["after_mb"], 1), f"{grew:+.1f}",
            f"{_n(row['late_mb'], 1)} (at {row['late_s']:g} s)", _n(allowed, 1),
            "within" if grew <= allowed else "**above**",
        ]))  # fmt: skip
    return [*out, ""]


def _bytes_md(results: dict[str, Any]) -> list[str]:
    b = results["bytes_per_model"]
    out = [
        "## Bytes per model",
        "",
        f"core.savedmodel predicts {b['predicted_bytes'] / MB:.2f} MB for the mlp. What the "
        "server measured at load (malloc's bytes in use grown while the version loaded, "
        "graphserve_model_resident_bytes):",
        "",
        *_header(_BYTES_COLUMNS),
    ]
    for key, label in (("loaded_alone", "M4's default server, loaded one after another"),
                       ("under_traffic", "resident when M2's traffic ended")):  # fmt: skip
        if m := b[key]:
            mb = [_n(m[f"{stat}_bytes"] / MB) for stat in ("mean", "median", "min", "max")]
            out.append(_row([label, m["models"], *mb]))
    ratio = b["predicted_over_measured"]
    out += ["", f"Predicted / measured (the first row's mean): {_n(ratio)}×.", ""]
    return out


def plot(results: dict[str, Any]) -> bytes:
    """M2's RSS against its base and limit, and the resident bytes and versions, over time."""
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    z = results["zipf"]
    samples = z["samples"]
    t = np.array([s["t_s"] for s in samples])
    base, budget = z["base_rss_bytes"] / MB, z["budget_bytes"] / MB
    fig = Figure(figsize=(10.0, 6.4), dpi=100, layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    top.plot(t, [s["rss_mb"] for s in samples], marker=".", color="C0", label="server RSS")
    top.axhline(base, color="0.5", linestyle=":", label="base (nothing resident)")
    top.axhline(base + 1.1 * budget, color="C3", linestyle="--",
                label="base + max resident + 10 %")  # fmt: skip
    top.set_ylabel("RSS (MB)")
    top.set_title(
        f"Zipf({results['plan']['zipf_s']:g}) over {results['plan']['models']:,} models at "
        f"{results['plan']['rate']:g} req/s, --max-resident-models {results['plan']['resident']}"
    )
    bottom.plot(t, [s["resident_mb"] for s in samples], color="C1", label="resident bytes")
    bottom.set_ylabel("resident (MB)")
    bottom.set_xlabel("time (s)")
    versions = bottom.twinx()
    versions.plot(t, [s["resident_versions"] for s in samples], color="C2", linestyle="--",
                  label="resident versions")  # fmt: skip
    versions.set_ylabel("versions")
    versions.set_ylim(bottom=0)
    bottom.set_ylim(bottom=0)
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
    top.legend(fontsize=9, loc="lower right")
    handles = bottom.get_legend_handles_labels()
    more = versions.get_legend_handles_labels()
    bottom.legend(handles[0] + more[0], handles[1] + more[1], fontsize=9, loc="lower right")
    buffer = io.BytesIO()
    FigureCanvasAgg(fig)  # attaches itself: Agg, whatever pyplot backend is configured
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


def write_many(results: dict[str, Any], out: Path) -> list[Path]:
    """OUT/many.json, many.md and, when M2 ran, many.png."""
    from tools.bench.published import write

    plotted = "zipf" in results and results["zipf"]["samples"]
    return write("many", results, out, {"many.png": plot(results)} if plotted else {})
