"""Untrusted models: "models are programs" (TensorFlow's SECURITY.md).

The graph server scans every version's ops before loading it and refuses one with ops that touch
files, processes or the network unless `--allow-op` names each of them (logged); `.keras` files
load with Keras's safe mode unless `--allow-unsafe` (logged); and the servers bind loopback
unless told otherwise.
"""

from __future__ import annotations

import ipaddress
import json
import logging
from pathlib import Path

import numpy as np
import psutil
import pytest
from typer.testing import CliRunner

from graphserve.cli import app
from graphserve.core.processes import ServerProcess
from graphserve.serving import ModelRegistry
from graphserve.serving.config import ModelConfig
from graphserve.serving.loaders import LoadOptions, load_version
from graphserve.serving.manager import ModelManager
from tests.savedmodels import write_clean, write_lambda_keras, write_with_read_file

X = np.array([[1.0, 2.0]], dtype=np.float32)
REFUSAL = "its graph has ops that touch files, the network or processes: ReadFile (file) in "


def test_a_flagged_version_is_refused_and_the_clean_one_keeps_serving(tmp_path: Path) -> None:
    base = tmp_path / "m"
    write_clean(base / "1")
    write_with_read_file(base / "2")  # the newest: the latest policy wants it
    registry = ModelRegistry()
    ModelManager(registry, [ModelConfig("m", base)]).start()
    assert [s.version for s in registry.available("m")] == [1]
    status = registry.known("m")[2]
    assert status.state == "END"
    assert f"refusing to serve {base / '2'}: {REFUSAL}" in status.error
    assert "--allow-op OP" in status.error
    outputs = registry.get("m").runner.run("serving_default", {"x": X})
    np.testing.assert_allclose(outputs["y"], X * [1.5, -2.0])


def test_allow_op_serves_it_and_logs_each_allowed_op(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write_with_read_file(tmp_path / "m" / "1")
    with caplog.at_level(logging.WARNING, logger="graphserve.runners"):
        runner = load_version(path, LoadOptions(allow_ops=("ReadFile",)))
    hostname = Path("/etc/hostname").read_bytes()
    outputs = runner.run("serving_default", {"x": X})
    np.testing.assert_allclose(outputs["y"], X * [1.5, -2.0] + len(hostname))
    assert any(
        "ReadFile (file)" in r.getMessage() and "allowed by --allow-op" in r.getMessage()
        for r in caplog.records
    )
    with pytest.raises(Exception, match="ReadFile"):
        # allowing another op is not allowing this one
        load_version(path, LoadOptions(allow_ops=("WriteFile",)))


def test_serve_graph_refuses_a_flagged_model_in_one_line(tmp_path: Path) -> None:
    write_with_read_file(tmp_path / "m" / "1")
    result = CliRunner().invoke(
        app, ["serve", "graph", "--model-base-path", str(tmp_path / "m"), "--grpc-port", "0"]
    )
    assert result.exit_code == 1
    assert "cannot load" in result.stderr and "ReadFile (file)" in result.stderr
    assert "--allow-op" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_serve_eager_refuses_a_keras_file_with_code_without_allow_unsafe(tmp_path: Path) -> None:
    file = write_lambda_keras(tmp_path / "lambda.keras")
    result = CliRunner().invoke(
        app, ["serve", "eager", str(file), "--model-name", "m", "--grpc-port", "0"]
    )
    assert result.exit_code == 1
    assert "--allow-unsafe" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.slow
def test_allowed_models_are_served_with_a_logged_warning_on_loopback_only(tmp_path: Path) -> None:
    """The real CLI, as an operator runs it: the graph server with --allow-op, the eager server
    with --allow-unsafe, JSON logs. Each serves; each logs what it was allowed; neither listens
    anywhere but 127.0.0.1, since --host was not given."""
    write_with_read_file(tmp_path / "flagged" / "1")
    keras_file = write_lambda_keras(tmp_path / "lambda.keras")
    graph = ServerProcess.on_free_ports(
        ["graph", "--model-base-path", str(tmp_path / "flagged"), "--model-name", "flagged",
         "--allow-op", "ReadFile", "--log-format", "json"],
        "flagged", tmp_path / "graph.log",
    )  # fmt: skip
    eager = ServerProcess.on_free_ports(
        ["eager", str(keras_file), "--model-name", "lambda", "--allow-unsafe",
         "--log-format", "json"],
        "lambda", tmp_path / "eager.log",
    )  # fmt: skip
    with graph, eager:
        for server in (graph, eager):
            assert server.process is not None
            listening = [
                ipaddress.ip_address(c.laddr.ip)
                for c in psutil.Process(server.process.pid).net_connections("inet")
                if c.status == psutil.CONN_LISTEN
            ]
            assert len(listening) == 2  # gRPC and REST
            assert all(_loopback(ip) for ip in listening), listening
    assert graph.process is not None and graph.process.returncode == 0
    warnings = [_json_lines(graph.log_path), _json_lines(eager.log_path)]
    assert any("--allow-op ReadFile" in w["message"] for w in warnings[0])
    assert any("ReadFile (file)" in w["message"] for w in warnings[0])
    assert any("--allow-unsafe: Keras safe mode is off" in w["message"] for w in warnings[1])


def _loopback(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """127.0.0.1, ::1, or 127.0.0.1 as gRPC's dual-stack socket shows it (::ffff:127.0.0.1)."""
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def _json_lines(path: Path) -> list[dict]:
    """The warnings among a server's JSON log lines (TensorFlow's own stderr lines are not
    JSON and are skipped)."""
    records = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and record.get("level") == "warning":
            records.append(record)
    return records
