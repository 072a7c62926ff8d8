"""The committed figures are current: each page is what today's renderer makes of its committed
JSON, each result carries today's goals with the values today's `evaluate` computes from the same
measurements, and the sample report reads back under today's schema. A result written by older
code (a goal added since, a renamed field, a column the renderer no longer writes) fails here;
`python -m tools.bench figures` (tools/bench/published.py) writes them all again."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tools.bench.published import BY_NAME, PUBLISHED, SAMPLE_REPORT, Published


def _committed(item: Published) -> dict[str, Any]:
    assert item.json_path.is_file(), (
        f"{item.json_path} is missing: run python -m tools.bench figures"
    )
    data: dict[str, Any] = json.loads(item.json_path.read_text())
    return data


@pytest.mark.parametrize("item", [p for p in PUBLISHED if p.render], ids=lambda p: f"{p.name}.json")
def test_each_page_is_its_json_rendered_by_todays_code(item: Published) -> None:
    results = _committed(item)
    assert item.md_path.read_text() == item.page(results), (
        f"{item.md_path.name} is not what today's renderer makes of {item.json_path.name}: "
        f"regenerate it ({item.command_line})"
    )


@pytest.mark.parametrize("item", [p for p in PUBLISHED if p.goals], ids=lambda p: f"{p.name}.json")
def test_each_result_carries_todays_goals_as_evaluated_today(item: Published) -> None:
    assert item.goals is not None
    results = _committed(item)
    stored = {g["key"]: g for g in results["goals"]}
    today = {g["key"]: g for g in item.goals(results)}
    assert list(stored) == list(today), f"{item.json_path.name}: goals of older code"
    for key, goal in today.items():
        assert goal["value"] is not None, f"{item.json_path.name}: {key} {goal['detail']}"
        assert stored[key]["value"] == pytest.approx(goal["value"]), key
        assert (stored[key]["passed"], stored[key]["goal"]) == (goal["passed"], goal["goal"]), key


def test_the_readme_shows_the_demo_figure_its_json_holds() -> None:
    from tools.bench.demo import END, README, START, readme_block

    results = _committed(BY_NAME["demo"])
    shown = README.read_text().partition(START)[2].partition(END)[0].strip()
    assert shown == readme_block(results), "README's demo figure: python -m tools.bench demo"


def test_the_sample_report_reads_under_todays_schema_and_renders_as_committed() -> None:
    from graphserve.loadtest.report.render import render_markdown
    from graphserve.loadtest.results.run import REPORT_SCHEMA, load_report

    path = SAMPLE_REPORT / "report.json"
    assert json.loads(path.read_text())["schema"] == REPORT_SCHEMA  # not an older one, upgraded
    report = load_report(path)
    plots = report.files.plots if report.files else []
    for name in plots:
        assert (SAMPLE_REPORT / name).is_file(), name
    expected = render_markdown(report, {name: name for name in plots})
    assert (SAMPLE_REPORT / "report.md").read_text() == expected
