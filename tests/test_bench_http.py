"""`python -m tools.bench http`: the REST transport against the HTTP servers it was chosen from, a
real quick run (the mlp exported, each server started in a child process, real sockets). Its numbers
are not data; the test checks that both goals are computed from the measurements they name and
that the markdown says what the JSON holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.bench.goals import HTTP_GOALS
from tools.bench.run import HttpSpec, run_http, write_results


@pytest.mark.slow
def test_a_quick_http_run_measures_g11_and_g12(tmp_path: Path) -> None:
    results = run_http(HttpSpec.quick(tmp_path / "work"))
    servers = results["http"]["servers"]
    assert set(servers) == {"stdlib-legacy", "graphserve"}
    goals = {g["key"]: g for g in results["goals"]}
    assert list(goals) == [g.key for g in HTTP_GOALS] == ["G11", "G12"]
    keep_alive = {name: s["keepalive_p50_ms"] for name, s in servers.items()}
    assert goals["G11"]["value"] == pytest.approx(
        keep_alive["graphserve"] / keep_alive["stdlib-legacy"]
    )
    json_path, md_path = write_results(results, tmp_path / "out", "http")
    assert json.loads(json_path.read_text())["goals"] == results["goals"]
    markdown = md_path.read_text()
    assert markdown.startswith("# HTTP servers for the REST front end")
    for goal in goals.values():
        assert f"| {goal['key']} | {goal['what']} |" in markdown
        assert goal["detail"] in markdown
    for name in servers:
        assert f"| {name} |" in markdown
