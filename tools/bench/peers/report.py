"""tools/bench/results/peers.json, peers.md and peers.png from `run_peers`' results."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["peer_table", "write_peers"]


def _f(value: float | None, spec: str = ".2f", suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def _stability(point: dict[str, Any]) -> str:
    """A perf_analyzer point's stability; why it failed when it has none."""
    from tools.bench.generator import stability_text

    if "not_measured" in point and "stability" not in point:
        return "failed: " + point["not_measured"].replace("|", "/").splitlines()[-1][:200]
    return stability_text(point.get("stability")) if point else "-"


def _rows(results: dict[str, Any], model: str) -> list[dict[str, Any]]:
    """Every measured route of `model`, graphserve first, then by best req/s."""
    m = results["models"][model]
    rows = []
    for key, t in m["targets"].items():
        server = m["servers"][key.rsplit("/", 1)[0]]
        rows.append({"key": key, **t, "server_info": server})
    return sorted(rows, key=lambda r: (r["server"] != "graphserve", -(r["max_rps"] or 0.0)))


def peer_table(results: dict[str, Any], model: str) -> list[str]:
    """The markdown table of `model`: one row per server, configuration and route."""
    m = results["models"][model]
    lines = [
        f"| server | batching | route | p50 / p99, 1 client (ms) | most req/s, p99 ≤ "
        f"{m['budget_ms']:g} ms (clients) | × limit | server CPU µs/req, 16 clients | "
        "start-up (s) | memory, RSS / PSS (MB) |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in _rows(results, model):
        s = r["server_info"]
        memory = s.get("memory_after_warmup") or {}
        version = results["peers"].get(r["server"], {}).get("version") or s.get("version")
        lines.append(
            f"| {s['title']} {version} | {'on' if r['config'] == 'batching on' else 'off'} "
            f"| {r['route']} | {_f(r['p50_1_ms'])} / {_f(r['p99_1_ms'])} "
            f"| {_most(r, m['budget_ms'])} "
            f"| {_f(r.get('max_fraction_of_limit'), '.2f')} "
            f"| {_f(r['cpu_us_per_request_16'], ',.0f')} | {_f(s['startup_s'], '.1f')} "
            f"| {_f(memory.get('rss_mb'), ',.0f')} / {_f(memory.get('pss_mb'), ',.0f')} |"
        )
    return lines


def _most(row: dict[str, Any], budget_ms: float) -> str:
    """The most req/s within the budget and at how many clients, or why there is none."""
    if row["max_rps"] is not None:
        return f"{row['max_rps']:,.0f} ({row['max_rps_clients']})"
    first = row["points"][0] if row["points"] else None
    if first is None:
        return "-"
    if first["errors"]:
        return f"- ({first['errors']} errors at {first['clients']} client(s))"
    return f"- (p99 {first['p99_ms']:,.0f} ms > {budget_ms:g} at {first['clients']} client(s))"


def render_peers(results: dict[str, Any]) -> str:
    """peers.md, from peers.json alone."""
    env = results["environment"]
    spec = results["spec"]
    out = [
        "# graphserve against the servers users pick instead",
        "",
        f"Measured {env['timestamp'][:10]} on {env['cpus']} cores ({env['platform']}), "
        f"TensorFlow {env['versions'].get('tensorflow', '?')}, "
        f"{results['seconds'] / 60:.0f} min. Every server serves the same exported SavedModel, "
        "each peer from its own virtual environment; one generator (closed-loop client threads "
        "sending one pre-encoded request, the same bytes for every server of an API), every "
        "other server paused during a window. Batching where a server has it: at most "
        f"{spec['max_batch_size']} rows, {spec['batch_timeout_ms']:g} ms. Clients "
        f"{', '.join(map(str, spec['clients']))}, windows of {spec['window_s']:g} s after "
        f"{spec['warmup_s']:g} s of warm-up; a route stops climbing once its p99 passes the "
        "budget.",
        "",
        "## Peers",
        "",
        "| peer | version | how it serves the model | installed in |",
        "| --- | --- | --- | ---: |",
    ]
    for p in results["peers"].values():
        if "not_installed" in p:
            out.append(f"| {p['title']} | - | not installed: {p['not_installed'][:200]} | - |")
            continue
        took = "cached" if p["install_s"] is None else f"{p['install_s']:.0f} s"
        out.append(f"| {p['title']} | {p['version']} | {p['note']} | {took} |")
    for model, m in results["models"].items():
        limit = m["limit"]
        at = ", ".join(f"{float(b):g}: {v:,.0f}" for b, v in limit["at_batch_sizes"].items())
        out += [
            "",
            f"## {model} (inputs {m['input_shapes']})",
            "",
            f"**The limit**: {limit['rows_per_s']:,.0f} rows/s, the SavedModel called in "
            f"process at the batch sizes the servers formed (batch size: rows/s, {at}).",
            "",
            *peer_table(results, model),
        ]
        failed = {k: s for k, s in m["servers"].items() if s.get("failure")}
        for key, s in failed.items():
            out.append(f"\n{key} left out: {s['failure']}")
        idle = [f"{k} {s['idle_cores']:.2f}" for k, s in m["servers"].items()
                if s.get("idle_cores") is not None and s["idle_cores"] >= 0.02]  # fmt: skip
        if idle:
            out.append(f"\nIdle CPU (cores, alone, no requests): {', '.join(idle)}.")
        pa = m.get("perf_analyzer") or {}
        if pa.get("not_measured"):
            out.append(f"\nperf_analyzer not run: {pa['not_measured']}")
        elif len(pa) > 1:
            out += [
                "",
                f"perf_analyzer {pa['version']}, the second generator (gRPC):",
                "",
                "| route | p50, 1 client (ms) | stability | req/s, 16 clients | stability |",
                "| --- | ---: | --- | ---: | --- |",
            ]
            for key, points in pa.items():
                if key == "version":
                    continue
                if points[0]["clients"] == 0:  # a route it cannot drive
                    why = points[0]["not_measured"].replace("|", "/").splitlines()[-1][:200]
                    out.append(f"| {key} | not measured: {why} | - | - | - |")
                    continue
                by = {p["clients"]: p for p in points}
                one, sixteen = by.get(1, {}), by.get(16, {})
                rps = _f(sixteen.get("requests_per_s"), ",.0f")
                mark = "" if "not_measured" not in sixteen else " (failed)"
                out.append(f"| {key} | {_f(one.get('p50_ms'))} | {_stability(one)} | {rps}{mark} "
                           f"| {_stability(sixteen)} |")  # fmt: skip
    out += ["", "## Goals", "", "| goal | what | target | measured | | detail |",
            "| --- | --- | ---: | ---: | --- | --- |"]  # fmt: skip
    for g in results["goals"]:
        value = "-" if g["value"] is None else f"{g['value']:.3g}"
        verdict = "pass" if g["passed"] else "**miss**"
        out.append(
            f"| {g['key']} | {g['what']} | {g['goal']} | {value} | {verdict} | {g['detail']} |"
        )
    out.append("")
    return "\n".join(out)


def _plot(results: dict[str, Any]) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    models = list(results["models"])
    figure = Figure(figsize=(13, 4.2 * len(models)), layout="constrained")
    axes = figure.subplots(len(models), 2, squeeze=False)
    for row, model in enumerate(models):
        m = results["models"][model]
        rows = _rows(results, model)[::-1]
        labels = [f"{r['server_info']['title']} {r['route']}"
                  f"{' +batch' if r['config'] == 'batching on' else ''}" for r in rows]  # fmt: skip
        colors = ["tab:green" if r["server"] == "graphserve" else "tab:gray" for r in rows]
        y = np.arange(len(rows))
        left, right = axes[row]
        left.barh(y, [r["p50_1_ms"] or 0 for r in rows], color=colors)
        left.set_yticks(y, labels, fontsize=8)
        left.set_xlabel("p50 at 1 client (ms), lower is better")
        left.set_title(f"{model}: latency")
        right.barh(y, [r["max_rps"] or 0 for r in rows], color=colors)
        right.axvline(m["limit"]["rows_per_s"], color="tab:red", linestyle="--",
                      label="in-process limit")  # fmt: skip
        right.set_yticks(y, [""] * len(rows))
        right.set_xlabel(f"most req/s with p99 ≤ {m['budget_ms']:g} ms, higher is better")
        right.set_title(f"{model}: throughput")
        right.legend(loc="lower right", fontsize=8)
    buffer = io.BytesIO()
    FigureCanvasAgg(figure).print_png(buffer)
    return buffer.getvalue()


def write_peers(results: dict[str, Any], out: Path) -> list[Path]:
    """OUT/peers.json, peers.md and peers.png."""
    from tools.bench.published import write

    return write("peers", results, out, {"peers.png": _plot(results)})
