"""`python -m tools.bench soak` (`make soak`): the graph server for an hour under steady load, with
a version swap every minute; does its memory grow?

The real server (`graphserve serve graph`, a child process on loopback) serves the exported mlp.
Client threads send Predict at a steady total rate, each answer checked against the first one
(every version is a copy of one export). Every `swap_every` seconds a new version is pushed as
TF Serving needs it (copied under a temporary name, renamed into place); the soak waits until
it is AVAILABLE and the old one END, then removes the old directory. Every `sample_every`
seconds it reads the server's VmRSS and thread count from /proc and the p50/p99 of the requests
answered since the last sample.

The goal is Triton's memory-growth test's: RSS growth at most 100 MB over an hour, taken as the
slope of a line fitted to the samples after the warm-up (allocator arenas and gRPC's threads fill
up first), and zero failed requests.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from graphserve.core.processes import ServerProcess, proc_status
from tools.bench.measure import Sampler

__all__ = [
    "GOAL_RSS_GROWTH_MB_PER_H",
    "SoakPlan",
    "rss_figures",
    "run_soak",
    "soak_goals",
    "write_soak",
]

GOAL_RSS_GROWTH_MB_PER_H = 100.0  # Triton's L0_memory_growth allows the same
MODEL = "mlp"
REQUEST_TIMEOUT_S = 10.0
SWAP_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class SoakPlan:
    work_dir: Path
    duration_s: float = 3600.0
    swap_every_s: float = 60.0
    sample_every_s: float = 5.0
    warmup_s: float | None = None  # None: a tenth of the duration
    clients: int = 4
    rate: float = 100.0  # requests per second, all clients together
    poll_s: float = 1.0  # the server's --file_system_poll_wait_seconds (TF Serving's default)

    @property
    def warmup(self) -> float:
        return self.duration_s / 10 if self.warmup_s is None else self.warmup_s


@dataclass
class _Window:
    """What the clients saw since the last sample, under one lock."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    latencies_ms: list[float] = field(default_factory=list)
    ok: int = 0
    failed: int = 0
    failures: list[str] = field(default_factory=list)  # the first few, for the report

    def record(self, latency_ms: float, problem: str) -> None:
        with self.lock:
            if problem:
                self.failed += 1
                if len(self.failures) < 20:
                    self.failures.append(problem)
            else:
                self.ok += 1
                self.latencies_ms.append(latency_ms)

    def take(self) -> list[float]:
        with self.lock:
            taken, self.latencies_ms = self.latencies_ms, []
        return taken


class _Load:
    """`clients` threads sending Predict for the newest version, paced to `rate` in total."""

    def __init__(self, address: str, plan: SoakPlan, window: _Window) -> None:
        self.address, self.plan, self.window = address, plan, window
        self.expected: Any = None
        self._expected_lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._drive, args=(i,), name=f"soak-client-{i}", daemon=True)
            for i in range(plan.clients)
        ]

    def __enter__(self) -> _Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=REQUEST_TIMEOUT_S + 5)

    def _check(self, outputs: dict[str, Any]) -> str:
        with self._expected_lock:
            if self.expected is None:
                self.expected = outputs
        if outputs.keys() != self.expected.keys():
            return f"outputs {sorted(outputs)}, expected {sorted(self.expected)}"
        for name, value in outputs.items():
            if not np.allclose(value, self.expected[name], atol=1e-5):
                return f"output {name!r} differs from the first answer"
        return ""

    def _drive(self, index: int) -> None:
        import grpc

        from graphserve.core import client
        from graphserve.core.client import GrpcClient

        x = np.random.default_rng(7).normal(size=(1, 784)).astype(np.float32)
        request = client.predict_request(MODEL, {"images": x})
        interval = self.plan.clients / self.plan.rate
        due = time.monotonic() + interval * index / self.plan.clients  # spread the clients
        with GrpcClient.connect(self.address, timeout=REQUEST_TIMEOUT_S) as grpc_client:
            while not self._stop.wait(max(0.0, due - time.monotonic())):
                # An open loop: a late answer does not delay the next request, but a client
                # that fell behind skips ahead rather than sending a burst.
                due = max(due + interval, time.monotonic())
                started = time.perf_counter()
                try:
                    response = grpc_client.predict(request)
                    problem = self._check(client.predict_outputs(response))
                except grpc.RpcError as exc:
                    problem = client.grpc_error_text(exc)
                self.window.record((time.perf_counter() - started) * 1e3, problem)


def _sample(pid: int, window: _Window, t0: float) -> dict[str, Any]:
    """The server's RSS and threads now, and the latency percentiles of the window's answers
    since the last sample."""
    status = proc_status(pid)
    latencies = np.array(window.take())
    with window.lock:
        ok, failed = window.ok, window.failed
    p50, p99 = np.percentile(latencies, [50, 99]) if latencies.size else (None, None)
    return {
        "t_s": round(time.monotonic() - t0, 2),
        "rss_kb": status["VmRSS"],
        "threads": status["Threads"],
        "requests": int(latencies.size),
        "p50_ms": None if p50 is None else round(float(p50), 3),
        "p99_ms": None if p99 is None else round(float(p99), 3),
        "ok_total": ok,
        "failed_total": failed,
    }


def _state(address: str, version: int) -> str:
    from graphserve.core.client import model_status

    return next((s.state for s in model_status(address, MODEL) if s.version == version), "")


def _swap(
    server: ServerProcess, base: Path, pristine: Path, version: int, t0: float
) -> dict[str, Any]:
    """Push `version` (a copy of `pristine`) as TF Serving needs it, wait until it serves and
    `version - 1` is END, then remove the old directory. Raises RuntimeError on a timeout."""
    started = time.monotonic()
    staging = base.parent / f".staging-{version}"
    shutil.copytree(pristine, staging)
    staging.rename(base / str(version))  # whole or not at all, as export writes it
    available_s = None
    deadline = started + SWAP_TIMEOUT_S
    while True:
        new, old = _state(server.grpc_address, version), _state(server.grpc_address, version - 1)
        if new == "AVAILABLE" and available_s is None:
            available_s = time.monotonic() - t0
        if available_s is not None and old == "END":
            break
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"version {version} did not replace {version - 1} within {SWAP_TIMEOUT_S:.0f} s "
                f"(states {new or 'none'} / {old or 'none'}):\n{server.log_tail()}"
            )
        time.sleep(0.05)
    shutil.rmtree(base / str(version - 1))
    return {
        "version": version,
        "pushed_s": round(started - t0, 2),
        "available_s": round(available_s, 2),
        "old_end_s": round(time.monotonic() - t0, 2),
    }


def run_soak(plan: SoakPlan, say: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Export the mlp, serve it, load it, swap every `plan.swap_every_s` s for
    `plan.duration_s` s; the samples, the swaps, the request counts and the RSS figures.
    Raises RuntimeError when the server does not start or a swap does not complete."""
    from graphserve.exporter.api import ExportSpec, export_model
    from graphserve.loadtest.comparison.run import environment

    work = plan.work_dir
    result = export_model(ExportSpec("examples:mlp", MODEL, base_path=work / "models"))
    base = work / "models" / MODEL
    pristine = work / "pristine"
    shutil.rmtree(pristine, ignore_errors=True)
    shutil.copytree(result.path, pristine)
    for old in [p for p in base.iterdir() if p != result.path]:  # a work dir used before
        shutil.rmtree(old)
    version = int(result.path.name)
    args = ["graph", "--model-base-path", str(base), "--model-name", MODEL]
    args += ["--file_system_poll_wait_seconds", f"{plan.poll_s:g}"]
    server = ServerProcess.on_free_ports(args, MODEL, log_path=work / "server.log")
    window = _Window()
    swaps: list[dict[str, Any]] = []
    say(f"serving {base} at {server.grpc_address}")
    with server:
        assert server.process is not None
        pid, t0 = server.process.pid, time.monotonic()
        with (  # the load stops first, so the sampler's last sample counts every answer
            Sampler(
                lambda: _sample(pid, window, t0), plan.sample_every_s, at_start=False
            ) as sampler,
            _Load(server.grpc_address, plan, window),
        ):
            next_swap = t0 + plan.swap_every_s
            end = t0 + plan.duration_s
            while (now := time.monotonic()) < end:
                if now < next_swap:
                    time.sleep(min(next_swap, end) - now)
                    continue
                version += 1
                swaps.append(_swap(server, base, pristine, version, t0))
                say(
                    f"{now - t0:6.0f} s: version {version} serving, "
                    f"RSS {sampler.samples[-1]['rss_kb'] / 1024:.1f} MB"
                    if sampler.samples
                    else f"version {version} serving"
                )
                next_swap += plan.swap_every_s
        seconds = time.monotonic() - t0
        exit_code = server.stop()
    results: dict[str, Any] = {
        "environment": environment().to_json(),
        "plan": {
            "duration_s": plan.duration_s,
            "swap_every_s": plan.swap_every_s,
            "sample_every_s": plan.sample_every_s,
            "warmup_s": plan.warmup,
            "clients": plan.clients,
            "rate": plan.rate,
            "poll_s": plan.poll_s,
        },
        "server": {"args": server.args, "exit_code": exit_code},
        "seconds": round(seconds, 1),
        "requests": {"ok": window.ok, "failed": window.failed, "failures": window.failures},
        "swaps": swaps,
        "samples": sampler.samples,
        "rss": rss_figures(sampler.samples, plan.warmup),
    }
    results["goals"] = soak_goals(results)
    return results


def rss_figures(samples: list[dict[str, Any]], warmup_s: float) -> dict[str, Any]:
    """RSS at the start, after the warm-up and at the end (MB); growth first to last; and the
    growth per hour of a line fitted to the samples after the warm-up (None with fewer than
    three)."""
    mb = [(s["t_s"], s["rss_kb"] / 1024) for s in samples]
    after = [(t, r) for t, r in mb if t >= warmup_s]
    slope = None
    if len(after) >= 3:
        ts, rs = np.array(after).T
        slope = float(np.polyfit(ts, rs, 1)[0])  # MB per second
    return {
        "start_mb": round(mb[0][1], 1) if mb else None,
        "after_warmup_mb": round(after[0][1], 1) if after else None,
        "end_mb": round(mb[-1][1], 1) if mb else None,
        "max_mb": round(max(r for _, r in mb), 1) if mb else None,
        "first_to_last_mb": round(mb[-1][1] - mb[0][1], 1) if mb else None,
        "after_warmup_to_last_mb": round(after[-1][1] - after[0][1], 1) if after else None,
        "growth_mb_per_h": None if slope is None else round(slope * 3600, 1),
        "fit_samples": len(after),
    }


def soak_goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The soak's goals: RSS growth per hour (fitted) and failed requests."""
    growth = results["rss"]["growth_mb_per_h"]
    failed = results["requests"]["failed"]
    return [
        {
            "key": "S1",
            "what": "RSS growth per hour, linear fit after the warm-up",
            "value": growth,
            "goal": f"<= {GOAL_RSS_GROWTH_MB_PER_H:g} MB/h",
            "passed": growth is not None and growth <= GOAL_RSS_GROWTH_MB_PER_H,
        },
        {
            "key": "S2",
            "what": "failed requests",
            "value": failed,
            "goal": "0",
            "passed": failed == 0,
        },
    ]


def _mb(value: float | None) -> str:
    return "—" if value is None else f"{value:,.1f}"


def summary_lines(results: dict[str, Any]) -> list[str]:
    """What the soak prints: requests, swaps, RSS figures, then one line per goal."""
    rss, requests, swaps = results["rss"], results["requests"], results["swaps"]
    samples = results["samples"]
    p99 = [s["p99_ms"] for s in samples if s["p99_ms"] is not None]
    lines = [
        f"{results['seconds']:.0f} s, {len(swaps)} swaps, requests ok {requests['ok']:,} "
        f"failed {requests['failed']}",
        f"RSS {_mb(rss['start_mb'])} MB at the start, {_mb(rss['after_warmup_mb'])} MB after "
        f"the warm-up ({results['plan']['warmup_s']:.0f} s), {_mb(rss['end_mb'])} MB at the end "
        f"(max {_mb(rss['max_mb'])}): {rss['first_to_last_mb']:+.1f} MB first to last, "
        f"{_mb(rss['growth_mb_per_h'])} MB/h fitted after the warm-up",
    ]
    if p99:
        lines.append(
            f"p99 per {results['plan']['sample_every_s']:g} s sample: median "
            f"{np.median(p99):.2f} ms, max {max(p99):.2f} ms; first {p99[0]:.2f}, last "
            f"{p99[-1]:.2f} ms"
        )
    lines += [
        f"{g['key']} {'pass' if g['passed'] else 'MISS'}  {g['value']} (goal {g['goal']})  "
        f"{g['what']}"
        for g in results["goals"]
    ]
    return lines


def _markdown(results: dict[str, Any], lines: list[str]) -> str:
    env, plan = results["environment"], results["plan"]
    swaps = results["swaps"]
    to_available = [s["available_s"] - s["pushed_s"] for s in swaps]
    to_end = [s["old_end_s"] - s["pushed_s"] for s in swaps]
    out = [
        "# Soak: version swaps under steady load",
        "",
        f"{env['timestamp']} on `{env['hostname']}`: {env['cpus']} CPUs, {env['platform']}, "
        f"Python {env['python']}. `graphserve serve graph` of the mlp (a child process, "
        f"loopback, `--file_system_poll_wait_seconds {plan['poll_s']:g}`), {plan['clients']} "
        f"gRPC clients at {plan['rate']:g} requests/s in total, a new version every "
        f"{plan['swap_every_s']:g} s, sampled every {plan['sample_every_s']:g} s; the RSS line "
        f"is fitted after a warm-up of {plan['warmup_s']:g} s.",
        "",
        *[f"    {line}" for line in lines],
        "",
    ]
    if swaps:
        out += [
            f"Swaps: {len(swaps)}; from the push to the new version AVAILABLE: median "
            f"{np.median(to_available):.2f} s (max {max(to_available):.2f}); to the old one "
            f"END: median {np.median(to_end):.2f} s (max {max(to_end):.2f}).",
            "",
        ]
    if results["requests"]["failures"]:
        out += ["Failed requests (the first ones):", ""]
        out += [f"- `{f}`" for f in results["requests"]["failures"]] + [""]
    out += [
        "![RSS, threads and p99 over time, the swaps marked](soak.png)",
        "",
        "| t (s) | RSS (MB) | threads | requests | p50 (ms) | p99 (ms) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    every = max(1, round(60 / plan["sample_every_s"]))  # about one row a minute
    samples = results["samples"]
    shown = samples[::every] + ([samples[-1]] if (len(samples) - 1) % every else [])
    for s in shown:
        out.append(
            f"| {s['t_s']:.0f} | {s['rss_kb'] / 1024:.1f} | {s['threads']} | {s['requests']} | "
            f"{_ms(s['p50_ms'])} | {_ms(s['p99_ms'])} |"
        )
    return "\n".join(out) + "\n"


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def plot(results: dict[str, Any]) -> bytes:
    """RSS (with the fitted line), threads and p50/p99 over time, one panel each; every swap a
    thin line, the warm-up shaded."""
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    samples, plan, rss = results["samples"], results["plan"], results["rss"]
    t = np.array([s["t_s"] for s in samples]) / 60
    fig = Figure(figsize=(10.0, 7.2), dpi=100, layout="constrained")
    top, middle, bottom = fig.subplots(3, 1, sharex=True, height_ratios=(3, 1, 3))
    rss_mb = np.array([s["rss_kb"] / 1024 for s in samples])
    top.plot(t, rss_mb, marker=".", color="C0", label="server RSS")
    after = t >= plan["warmup_s"] / 60
    if rss["growth_mb_per_h"] is not None and after.sum() >= 3:
        slope, intercept = np.polyfit(t[after], rss_mb[after], 1)
        top.plot(t[after], slope * t[after] + intercept, color="C3", linestyle="--",
                 label=f"fit: {rss['growth_mb_per_h']:+.1f} MB/h")  # fmt: skip
    top.set_ylabel("RSS (MB)")
    top.set_title(
        f"graphserve serve graph, mlp: a swap every {plan['swap_every_s']:g} s under "
        f"{plan['rate']:g} req/s"
    )
    middle.plot(t, [s["threads"] for s in samples], marker=".", color="C2", label="threads")
    middle.set_ylabel("threads")
    for key, style in (("p50_ms", "-"), ("p99_ms", "--")):
        ys = np.array([np.nan if s[key] is None else s[key] for s in samples])
        bottom.plot(t, ys, linestyle=style, marker=".", color="C1", label=key.split("_")[0])
    bottom.set_ylabel("latency (ms)")
    bottom.set_xlabel("time (min)")
    for ax in (top, middle, bottom):
        ax.grid(True, alpha=0.3)
        ax.axvspan(0, plan["warmup_s"] / 60, color="0.9", zorder=0,
                   label="warm-up" if ax is top else "_nolegend_")  # fmt: skip
        for i, swap in enumerate(results["swaps"]):
            label = "swap" if ax is top and i == 0 else "_nolegend_"
            ax.axvline(swap["pushed_s"] / 60, color="0.55", linewidth=0.8, label=label, zorder=1)
        ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    p99 = [s["p99_ms"] for s in samples if s["p99_ms"] is not None]
    if p99 and max(p99) > 20 * float(np.median(p99)):  # one stall would flatten the rest
        bottom.set_yscale("log")
    else:
        bottom.set_ylim(bottom=0)
    buffer = io.BytesIO()
    FigureCanvasAgg(fig)  # attaches itself: Agg, whatever pyplot backend is configured
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


def render_soak(results: dict[str, Any]) -> str:
    """soak.md, from soak.json alone."""
    return _markdown(results, summary_lines(results))


def write_soak(results: dict[str, Any], out: Path) -> tuple[list[Path], list[str]]:
    """OUT/soak.json, soak.md and soak.png; the paths, and the summary lines."""
    from tools.bench.published import write

    return write("soak", results, out, {"soak.png": plot(results)}), summary_lines(results)
