"""The `graphserve` command as users run it: CliRunner for export, child processes for serve."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from graphserve.cli import app
from graphserve.core import client
from graphserve.core.processes import ServerProcess
from graphserve.model.examples import mlp

runner = CliRunner()


def test_help_lists_commands_without_importing_tensorflow() -> None:
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from graphserve.cli import app\n"
        "result = CliRunner().invoke(app, ['--help'])\n"
        "assert result.exit_code == 0, result.output\n"
        "print(result.output)\n"
        "print('TF_IMPORTED' if 'tensorflow' in sys.modules else 'TF_NOT_IMPORTED')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "TF_NOT_IMPORTED" in out.stdout
    for command in ("export", "serve", "loadtest", "demo"):
        assert command in out.stdout


def test_export_json_output_is_only_json_on_stdout(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "export",
            "examples:mlp",
            "--name",
            "mlp",
            "--base-path",
            str(tmp_path),
            "--output",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["path"] == str(tmp_path / "mlp" / "1")
    assert report["version"] == 1
    assert report["signatures"]["serving_default"]["inputs"]["images"]["shape"] == [-1, 784]
    assert report["parity"]["passed"] is True


def test_export_with_explicit_input_and_version(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "export",
            "tests.factories:affine",
            "--name",
            "affine",
            "--base-path",
            str(tmp_path),
            "--input",
            "x:float32:-1,3",
            "--version",
            "5",
            "--output",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["version"] == 5
    assert (tmp_path / "affine" / "5" / "saved_model.pb").is_file()


def test_export_parity_failure_exits_1_and_writes_nothing(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "export",
            "tests.factories:drifting",
            "--name",
            "drift",
            "--base-path",
            str(tmp_path),
            "--input",
            "x:float32:-1,4",
        ],
    )
    assert result.exit_code == 1
    assert "disagrees with the eager model" in result.stderr
    assert not (tmp_path / "drift").exists()  # no version, and not the model directory it made


def test_export_bad_input_spec_is_a_usage_error(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["export", "examples:mlp", "--name", "m", "--base-path", str(tmp_path), "--input", "x"]
    )
    assert result.exit_code == 2
    assert "expected NAME:DTYPE:SHAPE" in result.stderr


def test_serve_graph_reports_a_missing_base_path(tmp_path: Path) -> None:
    missing = tmp_path / "nothing"
    result = runner.invoke(
        app, ["serve", "graph", "--model-base-path", str(missing), "--model-name", "m"]
    )
    assert result.exit_code == 1
    assert f"model 'm' has no servable version: base path {missing} does not exist" in (
        result.stderr
    )


def _predict(address: str, x: np.ndarray) -> np.ndarray:
    with client.GrpcClient.connect(address) as grpc_client:
        response = grpc_client.predict(client.predict_request("mlp", {"images": x}))
    return client.predict_outputs(response)["logits"]


@pytest.mark.slow
def test_served_as_a_user_runs_them_and_stopped_by_sigterm(mlp_export, tmp_path: Path) -> None:
    """`graphserve serve graph` and `serve eager` as child processes, on free loopback ports."""
    x = np.random.default_rng(5).standard_normal((2, 784)).astype(np.float32)
    expected = mlp.build()(x).numpy()
    graph = ["graph", "--model-base-path", str(mlp_export.model_dir)]
    arms = {
        "graph": graph,
        "eager": ["eager", "examples:mlp"],
        # batching on: gRPC on the asyncio front end, which the log line names
        "graph-batching": [*graph, "--enable-batching"],
    }
    for arm, args in arms.items():
        server = ServerProcess.on_free_ports(
            [*args, "--model-name", "mlp"], "mlp", log_path=tmp_path / f"{arm}.log"
        )
        with server:
            np.testing.assert_allclose(_predict(server.grpc_address, x), expected, atol=1e-5)
        assert server.stop() == 0, server.log_tail()
        assert "SIGTERM: draining and stopping" in server.log_tail()
        asyncio = f"gRPC {server.grpc_address} (asyncio)" in server.log_tail()
        assert asyncio is (arm == "graph-batching"), server.log_tail()


@pytest.mark.slow
def test_demo_json_is_the_export_and_the_report(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "graphserve",
            "demo",
            "--base-path",
            str(tmp_path / "models"),
            "--out",
            str(tmp_path / "report"),
            "--duration",
            "2s",
            "--output",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    assert result["export"]["path"] == str(tmp_path / "models" / "mlp" / "1")
    assert result["export"]["warmup_records"] == 4
    report = result["report"]
    assert set(report["arms"]) == {"graph", "eager"}
    assert all(arm["managed"] and arm["metrics_url"] for arm in report["arms"].values())
    (step,) = report["steps"]
    for arm in step["arms"].values():
        assert arm["measured_requests"] > 0 and arm["failures"] == 0
        assert arm["server"]["requests"] == arm["requests"]
    assert step["ratios"]["graph/eager"]["p50"]["value"] > 0
    assert report["manifest"]["model_name"] == "mlp"
    assert (tmp_path / "report" / "report.html").is_file()


# TensorFlow's C++ log lines: absl's "I0000 00:00:1795450031.162587    3570 file.cc:31] ..."
_TF_LOG_LINE = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:[\d.]+ +\d+ \S+:\d+\] ", re.MULTILINE)


def _export_stderr(tmp_path: Path, tf_log_level: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    if tf_log_level is not None:
        env["TF_CPP_MIN_LOG_LEVEL"] = tf_log_level
    done = subprocess.run(
        [sys.executable, "-m", "graphserve", "export", "examples:mlp", "--name", "m",
         "--base-path", str(tmp_path / f"level-{tf_log_level}")],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stderr


@pytest.mark.slow
def test_tensorflow_start_up_lines_are_quiet_unless_the_user_sets_the_level(
    tmp_path: Path,
) -> None:
    # Unset, as in a plain shell: no "E0000 ... failed call to cuInit" (which reads as a failure
    # on every machine without a GPU), no absl start-up notice, no TensorFlow log line at all.
    quiet = _export_stderr(tmp_path, None)
    assert "cuInit" not in quiet and "absl::InitializeLog" not in quiet
    assert not _TF_LOG_LINE.search(quiet), quiet
    assert "exported" in quiet  # graphserve's own progress still shows
    # A level the user set wins: at 0 TensorFlow prints its lines as it always does.
    loud = _export_stderr(tmp_path, "0")
    assert _TF_LOG_LINE.search(loud), loud


# ---------------------------------------------------------------------------------------------
# Usage errors read the same on every machine (tests/conftest.py sets the terminal)

_LONG = "x" * 300  # longer than any terminal's width: a box wrapped at one would fold it


def test_a_usage_error_reads_whole_in_process_whatever_the_terminal(tmp_path: Path) -> None:
    import typer.rich_utils

    assert typer.rich_utils.MAX_WIDTH == 1000  # the conftest's width reached typer in time
    missing = tmp_path / _LONG / "no.crt"
    result = runner.invoke(
        app, ["conformance", "127.0.0.1:9", "--tls-ca", str(missing)], env={"COLUMNS": "40"}
    )
    assert result.exit_code == 2, result.output
    assert f"{missing}: cannot read it" in result.output  # one line of the box, unbroken
    assert "\x1b[" not in result.output


def test_a_usage_error_reads_whole_in_a_child_whatever_the_terminal(tmp_path: Path) -> None:
    """A child process inherits the conftest's settings, which win over a narrow terminal and
    over CI's colour switches."""
    missing = tmp_path / _LONG / "no.crt"
    env = {**os.environ, "COLUMNS": "40", "FORCE_COLOR": "1", "GITHUB_ACTIONS": "true"}
    done = subprocess.run(
        [sys.executable, "-m", "graphserve", "conformance", "127.0.0.1:9", "--tls-ca",
         str(missing)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"{missing}: cannot read it" in done.stderr
    assert "\x1b[" not in done.stderr
