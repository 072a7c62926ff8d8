"""many.md and many.png from many.json alone, and the lines `python -m tools.bench many`
prints."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tools.bench.many.servers import MB

__all__ = ["goal_lines", "plot", "render_many", "shown", "write_many"]


def shown(value: float | None, digits: int = 2) -> str:
    """A figure as the page shows it: "—" for one not measured."""
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
        f"{g['key']} {'pass' if g['passed'] else 'MISS'}  {shown(g['value'], 3)} (goal {g['goal']})"
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
        out.append(
            _row([g["key"], g["what"], shown(g["value"], 3), g["goal"], result, g["detail"]])
        )
    out += [""]
    for section in (_first_md, _zipf_md, _isolation_md, _memory_md, _bytes_md):
        out += section(results)
    out += ["## Notes", "", *[f"- {note}" for note in results["notes"]], ""]
    out += ["## Servers", "", _row(["command", "environment", "ready (s)", "exit"]),
            "| --- | --- | ---: | ---: |"]  # fmt: skip
    for s in results["servers"]:
        env_text = " ".join(f"{k}={v}" for k, v in s["env"].items() if v is not None) or "—"
        command = " ".join(a if "/" not in a else Path(a).name for a in s["args"])
        out.append(_row([f"`{command}`", env_text, shown(s["ready_s"]), s["exit_code"]]))
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
        out.append(
            _row([row["run"] + 1, row["config"], shown(row["first_answer_s"]), shown(load, 1)])
        )
    return [*out, ""]


def _traffic_row(label: str, t: dict[str, Any]) -> str:
    def p50(key: str, digits: int = 2) -> str:
        return shown((t[key] or {}).get("p50_ms"), digits)

    return _row([
        label, f"{t['scheduled']:,}", f"{t['requests']:,}", t["failures"], shown(t["hit_ratio"], 3),
        p50("warm"), shown((t["warm"] or {}).get("p99_ms")), p50("cold", 1),
        shown((t["cold"] or {}).get("p99_ms"), 1), p50("cold_wait", 1), shown(t["sent_per_s"], 0),
        shown(t["late_p50_ms"], 0), p50("warm_scheduled", 1), p50("cold_scheduled", 1),
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
        f"Loads {z['loads']:,.0f} (mean {shown(z['load_ms_mean'], 1)} ms each, from "
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
            f"{phase} models", f"{hot.get('samples', 0):,}", shown(hot.get("p50_ms")),
            shown(hot.get("p99_ms")), f"{p['others_requests']:,}", f"{p['others_cold']:,}",
            shown(others.get("p50_ms")), shown(p["loads_per_s"]),
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
            row["allocator"], shown(row["before_mb"], 1), shown(row["peak_mb"], 1),
            shown(row["peak_versions"], 0), shown(row["after_mb"], 1), f"{grew:+.1f}",
            f"{shown(row['late_mb'], 1)} (at {row['late_s']:g} s)", shown(allowed, 1),
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
            mb = [shown(m[f"{stat}_bytes"] / MB) for stat in ("mean", "median", "min", "max")]
            out.append(_row([label, m["models"], *mb]))
    ratio = b["predicted_over_measured"]
    out += ["", f"Predicted / measured (the first row's mean): {shown(ratio)}×.", ""]
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
