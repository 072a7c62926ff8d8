"""M1, the first answer: from process start to the first 200, a thousand models in the config
against one."""

from __future__ import annotations

from typing import Any

import numpy as np

from tools.bench.many.plan import Run
from tools.bench.many.servers import serving

__all__ = ["first_answer"]


def first_answer(run: Run) -> dict[str, Any]:
    """M1: from process start to the first 200 for `names[0]`, the many-model config against a
    one-model config, alternating which starts first; the median of `first_runs` each."""
    rows = []
    for r in range(run.plan.first_runs):
        order = ("many", "one") if r % 2 == 0 else ("one", "many")
        for label in order:
            config = run.config if label == "many" else run.one_config
            with serving(config, [], run.log(f"first-{label}"), probe_model=run.names[0],
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
