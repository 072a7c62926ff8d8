"""What a many-models run is asked for (`ManyPlan`) and what its parts share (`Run`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ALLOCATORS", "DEFAULT_ENV", "PARTS", "ManyPlan", "Run", "Say"]

PARTS = ("first", "zipf", "isolation", "memory")
LIBS = Path("/usr/lib/x86_64-linux-gnu")
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

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "work_dir"}


@dataclass
class Run:
    """What the parts share: the plan, the copies, the servers started."""

    plan: ManyPlan
    version: Path  # the exported mlp's version directory
    say: Say
    config: Path = Path()  # `plan.models` copies, none pinned
    pinned_config: Path = Path()  # the same, the first pinned (M3)
    one_config: Path = Path()  # one copy (M1's and M2's one-model servers)
    names: list[str] = field(default_factory=list)
    servers: list[dict[str, Any]] = field(default_factory=list)

    def log(self, name: str) -> Path:
        return self.plan.work_dir / "logs" / f"{name}-{len(self.servers)}.log"
