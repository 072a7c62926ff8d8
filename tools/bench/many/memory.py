"""M4, memory back: per allocator (glibc with malloc_trim, oneDNN on, jemalloc, tcmalloc), RSS
before any load, at the peak while models load once each and unload when idle, once none is
resident again, and later; and the bytes a model takes, predicted against measured."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tools.bench.many.plan import ALLOCATORS, ManyPlan, Run
from tools.bench.many.servers import (
    MB,
    Client,
    Server,
    scrape,
    scrape_sample,
    serving,
    wait_resident,
)
from tools.bench.measure import Sampler
from tools.bench.tools import ToolMissing, debian_library

__all__ = ["bytes_per_model", "memory"]

PACKAGES = {"jemalloc": "libjemalloc2", "tcmalloc": "libtcmalloc-minimal4"}  # Debian's


def memory(run: Run) -> dict[str, Any]:
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
        with serving(run.config, flags, run.log(f"memory-{label.replace(' ', '-')}"), env=env,
                      record=run.servers) as server:  # fmt: skip
            rows.append(_memory_row(server, run.names[: plan.memory_models], plan, label, env))
        row = rows[-1]
        run.say(f"M4 {label}: RSS {row['before_mb']:.0f} MB before, {row['peak_mb']:.0f} peak, "
                f"{row['after_mb']:.0f} after")  # fmt: skip
    return {"models": plan.memory_models, "idle_unload_s": plan.idle_unload_s, "rows": rows}


def _memory_row(
    server: Server, models: Sequence[str], plan: ManyPlan, label: str, env: Mapping[str, Any]
) -> dict[str, Any]:
    address = server.rest_address
    assert address is not None
    before = wait_resident(address, 0, timeout=60.0)
    client = Client(address)
    with Sampler(lambda: scrape_sample(address, before.at), 0.5) as sampler:
        answers = [client.predict(model) for model in models]
        loaded = scrape(address)
    client.close()
    after = wait_resident(address, 0, timeout=plan.idle_unload_s + 120.0)
    time.sleep(plan.memory_late_s)
    late = scrape(address)
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


def bytes_per_model(run: Run, results: dict[str, Any]) -> dict[str, Any]:
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
