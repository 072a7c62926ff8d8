"""Durations and sizes given as options: the core's parsers (graphserve.core.units), their
errors made usage errors that name the option (typer reports them, exit 2)."""

from __future__ import annotations

import typer

from graphserve.core.units import parse_bytes, parse_duration

__all__ = ["option_bytes", "option_seconds"]


def option_seconds(text: str, option: str = "--duration", minimum: float = 1.0) -> float:
    """The seconds `option` gives (`20s`, `1m30s`, `90`), at least `minimum`; typer.BadParameter
    naming the option otherwise."""
    try:
        return parse_duration(text, minimum)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None


def option_bytes(text: str, option: str) -> int:
    """The bytes `option` gives (`300MB`, `2GiB`, `1500000`); typer.BadParameter naming the option
    otherwise."""
    try:
        return parse_bytes(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None
