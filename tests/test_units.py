"""Durations and sizes: the core parses them (ValueError saying what is expected); the command
line's wrappers (graphserve.clikit) make that a usage error naming the option."""

from __future__ import annotations

import pytest
import typer

from graphserve.clikit import option_bytes, option_seconds
from graphserve.core.units import parse_bytes, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("20s", 20), ("1m", 60), ("90", 90), ("1m30s", 90), ("2h", 7200), (" 5S ", 5)],
)
def test_parse_duration(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "0s", "-5", "0.5s", "5d", "s"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match=r"not a duration|at least 1 s"):
        parse_duration(text)


def test_parse_duration_takes_a_smaller_minimum() -> None:
    assert parse_duration("0.5s", minimum=0.1) == 0.5


@pytest.mark.parametrize(
    ("text", "count"),
    [("300MB", 300 * 10**6), ("300m", 300 * 10**6), ("2GiB", 2 * 2**30), ("2Gi", 2 * 2**30),
     ("1500000", 1_500_000), ("1.5GB", 1_500_000_000), ("4 KiB", 4096)],
)  # fmt: skip
def test_parse_bytes(text: str, count: int) -> None:
    assert parse_bytes(text) == count


@pytest.mark.parametrize("text", ["", "MB", "-1MB", "0", "3 parsecs"])
def test_parse_bytes_rejects(text: str) -> None:
    with pytest.raises(ValueError, match=r"not a size|more than 0 bytes"):
        parse_bytes(text)


def test_the_cli_wrappers_name_the_option() -> None:
    assert option_seconds("1m", "--window", minimum=0.5) == 60
    assert option_bytes("2KiB", "--max-resident-bytes") == 2048
    with pytest.raises(typer.BadParameter, match="not a duration") as duration:
        option_seconds("5d", "--warmup")
    assert duration.value.param_hint == "--warmup"
    with pytest.raises(typer.BadParameter, match="more than 0 bytes") as size:
        option_bytes("0B", "--max-resident-bytes")
    assert size.value.param_hint == "--max-resident-bytes"
