"""How the report names things, shared by the text renderers (loadtest.report) and the plots
(loadtest.plots): the arms in display order, loads as "4 users" or "200 req/s", plain numbers."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypeGuard

__all__ = ["NONE", "arm_order", "fmt_plain", "is_number", "load_label", "settings", "steps"]

NONE = "–"  # noqa: RUF001 (an en dash: a missing value)
Report = Mapping[str, Any]


def arm_order(report: Report) -> list[str]:
    """Arm names in display order: settings.arm_order, then any other arm the steps mention."""
    names = list(settings(report).get("arm_order") or [])
    for source in [report.get("arms") or {}, *((s.get("arms") or {}) for s in steps(report))]:
        names += [n for n in source if n not in names]
    return names


def load_label(load: float | None, mode: str | None) -> str:
    """'4 users' (closed loop) or '200 req/s' (open loop)."""
    if load is None:
        return NONE
    if mode == "open":
        return f"{fmt_plain(load)} req/s"
    return f"{fmt_plain(load)} user" + ("" if load == 1 else "s")


def settings(report: Report) -> Mapping[str, Any]:
    return report.get("settings") or {}


def steps(report: Report) -> list[Mapping[str, Any]]:
    return list(report.get("steps") or [])


def fmt_plain(value: Any) -> str:
    """Settings and loads as written: 4, 2.5, 1,500."""
    if not is_number(value):
        return NONE
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,g}"


def is_number(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
