"""`run_many`: the mlp exported and copied, then the parts the plan asks for, then the notes and
the goals."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from tools.bench.many.first import first_answer
from tools.bench.many.goals import many_goals
from tools.bench.many.isolation import isolation
from tools.bench.many.memory import bytes_per_model, memory
from tools.bench.many.plan import ManyPlan, Run, Say
from tools.bench.many.servers import MODEL
from tools.bench.many.zipf import TRAFFIC, USERS, zipf

__all__ = ["COPIES", "run_many"]

COPIES = "graphserve loadtest copies"


def run_many(plan: ManyPlan, say: Say = lambda _: None) -> dict[str, Any]:
    """Export the mlp, write its copies (`graphserve loadtest copies`' library), run
    `plan.parts`; every number, the goals evaluated. Raises RuntimeError when a server does
    not start or settle, LoadTestError when the copies or `loadtest many` cannot be made or
    run (LocustRunError when its load fails)."""
    from graphserve.exporter.api import ExportSpec, export_model
    from graphserve.loadtest.comparison.run import environment
    from graphserve.loadtest.manymodels.copies import CopiesResult, CopiesSpec, write_copies

    started = time.perf_counter()
    work = plan.work_dir
    exported = export_model(ExportSpec("examples:mlp", MODEL, base_path=work / "models",
                                       overwrite=True))  # fmt: skip

    def copies(count: int, out: str, pin: int = 0) -> CopiesResult:
        return write_copies(CopiesSpec(exported.path, count, work / out, pin=pin, force=True))

    run = Run(plan, exported.path, say)
    written = copies(plan.models, "copies")
    run.config, run.names = written.config, list(written.names)
    run.pinned_config = copies(plan.models, "pinned", pin=1).config
    run.one_config = copies(1, "one").config
    say(f"{plan.models} copies of {exported.path} ({COPIES}: {written.method})")
    results: dict[str, Any] = {
        "environment": environment().to_json(),
        "plan": plan.to_json(),
        "copies": COPIES,
        "traffic_generator": TRAFFIC,
    }
    parts: dict[str, Callable[[Run], dict[str, Any]]] = {
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
            f"scheduled were not sent: every one of the generator's {USERS} client "
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
