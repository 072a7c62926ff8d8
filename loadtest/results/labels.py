"""How the report names things, shared by the text renderers (loadtest.report), the plots
(loadtest.plots) and the SLO gates' messages: loads as "4 users" or "200 req/s", plain numbers."""

from __future__ import annotations

import math
from typing import Any, TypeGuard

__all__ = ["NONE", "fmt_plain", "is_number", "load_label"]

NONE = "–"  # noqa: RUF001 (an en dash: a missing value)


def load_label(load: float | None, mode: str | None) -> str:
    """'4 users' (closed loop) or '200 req/s' (open loop)."""
    if load is None:
        return NONE
    if mode == "open":
        return f"{fmt_plain(load)} req/s"
    return f"{fmt_plain(load)} user" + ("" if load == 1 else "s")


def fmt_plain(value: Any) -> str:
    """Settings and loads as written: 4, 2.5, 1,500."""
    if not is_number(value):
        return NONE
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,g}"


def is_number(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
