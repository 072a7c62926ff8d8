"""report.json's typed shape (loadtest/results/run.py): the published JSON schema stays the models',
a written report validates against it with a JSON-schema library that is not ours, the previous
version still loads, and anything else fails naming its version."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

from graphserve.core.errors import LoadTestError
from graphserve.loadtest.cli import app
from graphserve.loadtest.report.render import write_report
from graphserve.loadtest.results.run import (
    READABLE_SCHEMAS,
    REPORT_SCHEMA,
    Report,
    load_report,
    report_json_schema,
)
from tests.test_loadtest_report import make_report, make_report_document, write_records

SCHEMA_FILE = Path(__file__).parent.parent / "docs" / "report.schema.json"


def published_schema() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(SCHEMA_FILE.read_text())
    return document


def test_the_published_schema_is_the_models() -> None:
    generated = json.dumps(report_json_schema(), indent=2, sort_keys=True) + "\n"
    assert SCHEMA_FILE.read_text() == generated, (
        "docs/report.schema.json is stale: regenerate it from "
        "graphserve.loadtest.results.run.report_json_schema()"
    )


def test_a_written_report_validates_against_the_published_schema(tmp_path: Path) -> None:
    report = make_report()
    write_records(tmp_path, report)
    write_report(report, tmp_path)
    document = json.loads((tmp_path / "report.json").read_text())
    assert document["schema"] == REPORT_SCHEMA
    jsonschema.validate(document, published_schema())
    # and the check can fail: a misspelt key, a count as text
    broken = copy.deepcopy(document)
    broken["steps"][0]["arms"]["graph"]["failurs"] = 0
    with pytest.raises(jsonschema.ValidationError, match="failurs"):
        jsonschema.validate(broken, published_schema())
    broken = copy.deepcopy(document)
    broken["steps"][0]["arms"]["graph"]["requests"] = "many"
    with pytest.raises(jsonschema.ValidationError, match="many"):
        jsonschema.validate(broken, published_schema())


def _previous_version(tmp_path: Path) -> Path:
    """A report as graphserve.loadtest/2 wrote it before the machine's CPU was measured."""
    report = make_report_document()
    report["schema"] = "graphserve.loadtest/2"
    for step in report["steps"]:
        for arm in step["arms"].values():
            arm["generator"].pop("machine_cpu_pct", None)  # some arms share one dict
            for window in arm["windows"]:
                window.pop("machine_cpu_pct", None)
    report["headline"], report["files"] = [], None
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    return path


def test_the_previous_version_loads(tmp_path: Path) -> None:
    loaded = load_report(_previous_version(tmp_path))
    assert isinstance(loaded, Report) and loaded.schema_version == REPORT_SCHEMA
    arm = loaded.steps[0].arms["graph"]
    assert arm.generator.machine_cpu_pct is None and arm.windows[0].machine_cpu_pct is None
    assert arm.latency_ms.p99_9 == pytest.approx(0.473 * 3.6)
    assert loaded.settings.expect_workers == 0 and loaded.workers is None
    assert loaded.slo is not None and not loaded.slo.passed


def test_a_version_3_report_loads_without_find_max(tmp_path: Path) -> None:
    document = make_report_document()
    assert "find_max" not in document  # /3 had no such key
    document["schema"] = "graphserve.loadtest/3"
    path = tmp_path / "report.json"
    path.write_text(json.dumps(document))
    loaded = load_report(path)
    assert loaded.schema_version == REPORT_SCHEMA and loaded.find_max is None
    assert loaded.steps[1].arms["eager"].generator.bound


@pytest.mark.parametrize("version", ["graphserve.loadtest/1", "graphserve.loadtest/5", None])
def test_another_version_fails_naming_it(tmp_path: Path, version: str | None) -> None:
    report = make_report_document()
    report["schema"] = version
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    with pytest.raises(LoadTestError) as caught:
        load_report(path)
    message = str(caught.value)
    assert repr(version) in message and all(v in message for v in READABLE_SCHEMAS)


def test_a_report_of_another_shape_fails_naming_the_field(tmp_path: Path) -> None:
    report = make_report_document()
    report["steps"][0]["arms"]["graph"]["latency_ms"]["p50"] = "fast"
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    with pytest.raises(LoadTestError, match=r"steps\.0\.arms\.graph\.latency_ms\.p50"):
        load_report(path)


def test_the_report_command_renders_the_previous_version_as_this_one(tmp_path: Path) -> None:
    _previous_version(tmp_path)
    result = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 0, result.output
    document = json.loads((tmp_path / "report.json").read_text())
    assert document["schema"] == REPORT_SCHEMA
    jsonschema.validate(document, published_schema())
    assert (tmp_path / "report.html").stat().st_size > 0


def test_the_report_command_refuses_an_unknown_version(tmp_path: Path) -> None:
    (tmp_path / "report.json").write_text(json.dumps({"schema": "graphserve.loadtest/9"}))
    result = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 1
    assert "'graphserve.loadtest/9'" in " ".join(result.output.split())
