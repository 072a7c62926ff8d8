"""`graphserve serve graph` run the way `tensorflow_model_server` is run: TF Serving's flag
spellings and their meanings, the model config file re-read while serving, a malformed config
refused in TF Serving's words, and gRPC on a Unix domain socket; checked over REST and gRPC."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from graphserve.cli import app
from graphserve.core import client
from graphserve.core.client import GrpcClient, RestClient
from graphserve.core.modelconfig import model_config_text
from graphserve.core.processes import ServerProcess, free_ports
from graphserve.serving import ModelRegistry, ModelServer, ServerOptions
from graphserve.serving.config import ModelConfig, ModelConfigWatcher, load_model_config_file
from graphserve.serving.flags import ServeFlags
from graphserve.serving.manager import ModelManager
from tests.savedmodels import write_clean, write_half_plus_two

PARSE_ERROR = "Error parsing text-format tensorflow.serving.ModelServerConfig"
HALF_PLUS_TWO_X = np.array([1.0, 2.0], np.float32)  # y = 0.5 x + 2
CLEAN_X = np.array([[1.0, 1.0]], np.float32)  # y = x * [1.5, -2.0]


def _config(*models: tuple[str, Path]) -> str:
    return model_config_text(ModelConfig(name, path) for name, path in models)


def _write(path: Path, text: str) -> None:
    """Replace the file whole, as a deploy tool would: a poll never reads half of it."""
    partial = path.with_suffix(".partial")
    partial.write_text(text)
    partial.replace(path)


def _grpc_predict(address: str, name: str, x: np.ndarray) -> np.ndarray:
    with GrpcClient.connect(address) as grpc_client:
        response = grpc_client.predict(client.predict_request(name, {"x": x}))
    return client.predict_outputs(response)["y"]


def _grpc_status(address: str, name: str) -> dict[int, str]:
    with GrpcClient.connect(address) as grpc_client:
        response = grpc_client.status(client.status_request(name))
    return {s.version: s.state for s in client.version_statuses(response)}


def _rest(address: str, path: str, body: Any = None) -> tuple[int, Any]:
    """(status, JSON body); the text of a successful answer outside TF Serving's /v1/ API."""
    with RestClient(address) as rest:
        reply = rest.get(path) if body is None else rest.post(path, body)
    json_body = path.startswith("/v1/") or reply.status >= 400
    return reply.status, reply.json() if json_body else reply.text


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


# -- TF Serving's flag spellings ---------------------------------------------------------


@pytest.mark.slow
def test_a_tensorflow_model_server_command_line_serves_unchanged(tmp_path: Path) -> None:
    """TF Serving's spellings and forms (`--flag=value`, `--flag value`, `--flag=true`), the
    model named 'default' as there, gRPC over TCP and the Unix socket, REST, and metrics."""
    base = write_half_plus_two(tmp_path / "half_plus_two" / "1").parent
    (tmp_path / "monitoring.config").write_text(
        'prometheus_config { enable: true, path: "/monitoring/prometheus/metrics" }'
    )
    socket = tmp_path / "gs.sock"
    grpc_port, rest_port = free_ports(2)
    server = ServerProcess(
        [
            "graph",
            f"--port={grpc_port}",
            "--rest_api_port", str(rest_port),
            f"--model_base_path={base}",
            "--enable_batching=true",
            "--file_system_poll_wait_seconds=1",
            "--rest_api_timeout_in_ms=5000",
            "--enable_signature_method_name_check=false",
            "--grpc_channel_arguments=grpc.so_reuseaddr=1",
            f"--monitoring_config_file={tmp_path / 'monitoring.config'}",
            f"--grpc_socket_path={socket}",
        ],
        grpc_address=f"127.0.0.1:{grpc_port}",
        model_name="default",
        log_path=tmp_path / "server.log",
        rest_address=f"127.0.0.1:{rest_port}",
    )  # fmt: skip
    rest = f"127.0.0.1:{rest_port}"
    with server:
        for address in (server.grpc_address, f"unix:{socket}"):
            y = _grpc_predict(address, "default", HALF_PLUS_TWO_X)
            np.testing.assert_allclose(y, [2.5, 3.0])
        assert _grpc_status(f"unix:{socket}", "default") == {1: "AVAILABLE"}
        status, body = _rest(rest, "/v1/models/default:predict", {"instances": [1.0, 2.0]})
        assert (status, body) == (200, {"predictions": [2.5, 3.0]})
        status, metrics = _rest(rest, "/monitoring/prometheus/metrics")
        assert status == 200 and 'model="default"' in metrics
        assert server.stop() == 0, server.log_tail()
    assert f"gRPC unix:{socket}" in server.log_tail(50)
    assert not socket.exists()  # gRPC removes its socket when it stops


@pytest.mark.parametrize(
    ("flags", "listen"),
    [
        ({}, (8500, 8501)),
        ({"grpc_port": 0, "rest_port": 0}, (0, 0)),  # ours: 0 is a free port
        ({"port": 9000}, (9000, None)),  # TF Serving: REST only on a port it is given
        ({"port": 9000, "rest_api_port": 9001}, (9000, 9001)),
        ({"port": 9000, "rest_port": 9001}, (9000, 9001)),
        ({"rest_api_port": 0}, (8500, None)),  # TF Serving: 0 is no REST
        ({"port": 0, "grpc_socket_path": "/tmp/x.sock"}, (None, None)),  # socket only
    ],
)
def test_tfserving_port_flags_mean_what_they_mean_there(
    flags: dict[str, Any], listen: tuple[int | None, int | None]
) -> None:
    assert ServeFlags(default_ports=(8500, 8501), **flags).listen() == listen


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"port": 0}, "give --grpc_socket_path too"),
        ({"port": 9000, "grpc_port": 9001}, "--port and --grpc-port name different gRPC ports"),
        ({"port": 9000, "rest_api_port": 9000}, "cannot share port 9000"),
    ],
)
def test_contradicting_port_flags_are_refused(
    flags: dict[str, Any], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(typer.Exit) as exit_:
        ServeFlags(default_ports=(8500, 8501), **flags).listen()
    assert exit_.value.exit_code == 2
    assert message in capsys.readouterr().err


def test_tfserving_flags_reach_the_server_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the server is built with: no gRPC TCP port with `--port=0`, the socket, the REST
    timeout, the method-name check and the gRPC arguments (a stand-in server records them)."""
    import graphserve.serving.build
    import graphserve.serving.flags

    base = write_half_plus_two(tmp_path / "half_plus_two" / "1").parent
    built: list[tuple[ModelRegistry, ServerOptions]] = []

    class RecordingServer:
        grpc_port = rest_port = 0

        def __init__(
            self, registry: ModelRegistry, options: ServerOptions, *, manager: object = None
        ) -> None:
            self.registry = registry
            built.append((registry, options))

        def start(self) -> RecordingServer:
            return self

        def describe(self) -> str:
            return "recorded"

        def wait(self) -> None:
            pass

    monkeypatch.setattr(graphserve.serving.build, "ModelServer", RecordingServer)
    monkeypatch.setattr(graphserve.serving.flags, "configure_logging", lambda fmt: None)
    monkeypatch.setattr(graphserve.serving.flags.signal, "signal", lambda *args: None)
    result = CliRunner().invoke(
        app,
        [
            "serve", "graph",
            "--port=0",
            "--grpc_socket_path", str(tmp_path / "gs.sock"),
            "--rest_api_port=8601",
            f"--model_base_path={base}",
            "--file_system_poll_wait_seconds=0",
            "--rest_api_timeout_in_ms=2500",
            "--enable_signature_method_name_check",
            "--grpc_channel_arguments=grpc.max_connection_age_ms=2000,grpc.primary_user_agent=x",
            "--rest-idle-timeout=5",
            "--rest-max-connections=0",
            "--rest_api_num_threads=6",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output + result.stderr
    registry, options = built[0]
    assert [s.version for s in registry.available("default")] == [1]
    assert (options.grpc_port, options.rest_port) == (None, 8601)
    assert options.grpc_socket_path == str(tmp_path / "gs.sock")
    assert options.rest_timeout_ms == 2500
    assert options.method_name_check is True
    assert options.rest_workers == 6
    assert (options.rest_idle_timeout, options.rest_max_connections) == (5.0, None)
    assert (options.rest_header_timeout, options.rest_body_timeout) == (10.0, 60.0)  # defaults
    assert options.grpc_arguments == (
        ("grpc.max_connection_age_ms", 2000),
        ("grpc.primary_user_agent", "x"),
    )


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--prefer_tflite_model=true", "unknown flag --prefer_tflite_model"),
        ("--rest_api_enable_cors_support", "unknown flag --rest_api_enable_cors_support"),
        ("--enable_batching=maybe", "--enable_batching takes true or false, not 'maybe'"),
        ("--grpc_channel_arguments=grpc.max_receive_message_length=9", "--max-message-bytes"),
    ],
)
def test_a_tfserving_flag_not_taken_is_named(tmp_path: Path, flag: str, message: str) -> None:
    result = CliRunner().invoke(
        app, ["serve", "graph", flag, f"--model_base_path={tmp_path}", "--port=8500"]
    )
    assert result.exit_code == 2
    assert message in result.stderr
    if "unknown flag" in message:  # and the ones that are taken
        for taken in ("--model_base_path", "--rest_api_port", "--grpc_socket_path"):
            assert taken in result.stderr
    assert "Traceback" not in result.output + result.stderr


# -- a malformed model config ------------------------------------------------------------


@pytest.mark.parametrize("spelling", ["--model_config_file", "--model-config-file"])
def test_a_malformed_model_config_fails_in_tf_servings_words(tmp_path: Path, spelling: str) -> None:
    config = tmp_path / "bad_model_config.txt"
    config.write_text("improperly formatted file")  # TF Serving's own bad config
    result = CliRunner().invoke(app, ["serve", "graph", f"{spelling}={config}"])
    assert result.exit_code == 2
    assert PARSE_ERROR in result.stderr and str(config) in result.stderr
    assert "Traceback" not in result.output + result.stderr


# -- the model config file re-read while serving -----------------------------------------


@pytest.fixture
def models(tmp_path: Path) -> dict[str, Path]:
    """Base paths: two of half_plus_two, one of the clean model (y = x * [1.5, -2])."""
    return {
        "hp2": write_half_plus_two(tmp_path / "hp2" / "1").parent,
        "hp2_again": write_half_plus_two(tmp_path / "hp2_again" / "1").parent,
        "clean": write_clean(tmp_path / "clean" / "1").parent,
    }


@pytest.fixture
def serving(
    tmp_path: Path, models: dict[str, Path]
) -> Iterator[tuple[ModelServer, ModelConfigWatcher, Path]]:
    """A server on the model config file `models.config` (model "a": half_plus_two), its
    watcher as the CLI sets it up (re-read here with `check()`), and the file."""
    config = tmp_path / "models.config"
    _write(config, _config(("a", models["hp2"])))
    manager = ModelManager(ModelRegistry(), load_model_config_file(config)).start()
    watcher = ModelConfigWatcher(config, 1.0, manager.reconfigure, manager.models)
    options = ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0)
    server = ModelServer(manager.registry, options).start()
    try:
        yield server, watcher, config
    finally:
        server.stop(grace=1.0)


def test_a_reread_config_loads_added_unloads_removed_and_keeps_the_rest(
    serving: tuple[ModelServer, ModelConfigWatcher, Path],
    models: dict[str, Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, watcher, config = serving
    grpc_address, rest = f"127.0.0.1:{server.grpc_port}", f"127.0.0.1:{server.rest_port}"
    registry = server.registry
    a_runner = registry.get("a").runner

    _write(config, _config(("a", models["hp2"]), ("b", models["clean"])))
    assert watcher.check()
    np.testing.assert_allclose(_grpc_predict(grpc_address, "b", CLEAN_X), [[1.5, -2.0]])
    status, body = _rest(rest, "/v1/models/b:predict", {"instances": [[1.0, 1.0]]})
    assert (status, body) == (200, {"predictions": [[1.5, -2.0]]})
    assert registry.get("a").runner is a_runner  # unchanged: not loaded again

    _write(config, _config(("b", models["clean"])))
    assert watcher.check()
    with pytest.raises(grpc.RpcError) as err:
        _grpc_predict(grpc_address, "a", HALF_PLUS_TWO_X)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    status, body = _rest(rest, "/v1/models/a:predict", {"instances": [1.0]})
    assert status == 404 and "a" in body["error"]
    # As in TF Serving, whose status monitor keeps the states of unloaded versions.
    assert _grpc_status(grpc_address, "a") == {1: "END"}
    status, body = _rest(rest, "/v1/models/a")
    assert status == 200 and body["model_version_status"][0]["state"] == "END"
    np.testing.assert_allclose(_grpc_predict(grpc_address, "b", CLEAN_X), [[1.5, -2.0]])

    _write(config, "model_config_list { config { name: 'b' base_pth: '/x' } }")
    assert not watcher.check()  # logged; the models serve on as they are
    assert not watcher.check()  # an unchanged file: nothing to do
    np.testing.assert_allclose(_grpc_predict(grpc_address, "b", CLEAN_X), [[1.5, -2.0]])

    _write(config, _config(("b", models["hp2_again"])))  # the same name at another path
    assert watcher.check()
    np.testing.assert_allclose(_grpc_predict(grpc_address, "b", HALF_PLUS_TWO_X), [2.5, 3.0])
    status, body = _rest(rest, "/v1/models/b:predict", {"instances": [1.0, 2.0]})
    assert (status, body) == (200, {"predictions": [2.5, 3.0]})

    _write(config, _config(("a", models["hp2"]), ("b", models["hp2_again"])))
    assert watcher.check()  # a removed model comes back
    assert _grpc_status(grpc_address, "a") == {1: "AVAILABLE"}

    missing = config.parent / "missing"
    _write(config, _config(("a", models["hp2"]), ("c", missing)))
    with caplog.at_level(logging.ERROR, logger="graphserve.manager"):
        assert watcher.check()
    assert f"c: added, nothing to load: base path {missing} does not exist" in caplog.text
    np.testing.assert_allclose(_grpc_predict(grpc_address, "a", HALF_PLUS_TWO_X), [2.5, 3.0])


def test_the_config_file_is_polled_at_its_period_and_read_once_at_zero(
    tmp_path: Path, models: dict[str, Path]
) -> None:
    config = tmp_path / "models.config"
    _write(config, _config(("a", models["hp2"])))
    current = load_model_config_file(config)
    applied: dict[float, list[list[ModelConfig]]] = {0.0: [], 0.05: []}
    watchers = [
        ModelConfigWatcher(config, seconds, got.append, current).start()
        for seconds, got in applied.items()
    ]
    _write(config, _config(("b", models["clean"])))
    try:
        _wait_for(lambda: bool(applied[0.05]), "the 50 ms watcher", timeout=10)
        time.sleep(0.3)
        assert [[m.name for m in config_models] for config_models in applied[0.05]] == [["b"]]
        assert applied[0.0] == []  # 0: read once, at start-up
    finally:
        for watcher in watchers:
            watcher.stop()


@pytest.mark.slow
def test_the_server_rereads_its_model_config_while_serving(
    tmp_path: Path, models: dict[str, Path]
) -> None:
    """The command line wiring: --model_config_file_poll_wait_seconds=1 over REST and gRPC."""
    config = tmp_path / "models.config"
    _write(config, _config(("a", models["hp2"])))
    grpc_port, rest_port = free_ports(2)
    rest = f"127.0.0.1:{rest_port}"
    server = ServerProcess(
        [
            "graph",
            f"--port={grpc_port}",
            f"--rest_api_port={rest_port}",
            f"--model_config_file={config}",
            "--model_config_file_poll_wait_seconds=1",
        ],
        grpc_address=f"127.0.0.1:{grpc_port}",
        model_name="a",
        log_path=tmp_path / "server.log",
        rest_address=rest,
    )
    with server:
        np.testing.assert_allclose(
            _grpc_predict(server.grpc_address, "a", HALF_PLUS_TWO_X), [2.5, 3.0]
        )
        _write(config, _config(("b", models["clean"])))
        _wait_for(
            lambda: _rest(rest, "/v1/models/b:predict", {"instances": [[1.0, 1.0]]})[0] == 200, "b"
        )
        np.testing.assert_allclose(_grpc_predict(server.grpc_address, "b", CLEAN_X), [[1.5, -2.0]])
        assert _rest(rest, "/v1/models/a:predict", {"instances": [1.0]})[0] == 404
        with pytest.raises(grpc.RpcError) as err:
            _grpc_predict(server.grpc_address, "a", HALF_PLUS_TWO_X)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        _write(config, "improperly formatted file")
        _wait_for(lambda: PARSE_ERROR in server.log_tail(), "the parse error in the log")
        np.testing.assert_allclose(_grpc_predict(server.grpc_address, "b", CLEAN_X), [[1.5, -2.0]])
        assert server.stop() == 0, server.log_tail()


# -- gRPC on a Unix domain socket --------------------------------------------------------


def test_grpc_is_served_on_a_unix_socket_beside_or_instead_of_tcp(
    tmp_path: Path, models: dict[str, Path]
) -> None:
    registry = ModelRegistry()
    registry.load_graph("hp2", models["hp2"])
    socket = tmp_path / "gs.sock"
    socket.write_bytes(b"")  # not a socket: refused, never replaced
    with pytest.raises(OSError, match="Unix socket"):
        ModelServer(
            registry, ServerOptions(grpc_port=0, rest_port=0, grpc_socket_path=str(socket))
        ).start()
    socket.unlink()
    for grpc_port in (0, None):  # beside a TCP port, and alone
        options = ServerOptions(grpc_port=grpc_port, rest_port=0, grpc_socket_path=str(socket))
        with ModelServer(registry, options) as server:
            y = _grpc_predict(f"unix:{socket}", "hp2", HALF_PLUS_TWO_X)
            np.testing.assert_allclose(y, [2.5, 3.0])
            assert _grpc_status(f"unix:{socket}", "hp2") == {1: "AVAILABLE"}
            if grpc_port is not None:
                y = _grpc_predict(f"127.0.0.1:{server.grpc_port}", "hp2", HALF_PLUS_TWO_X)
                np.testing.assert_allclose(y, [2.5, 3.0])
            status, body = _rest(f"127.0.0.1:{server.rest_port}", "/v1/models/hp2")
            assert status == 200 and body["model_version_status"][0]["state"] == "AVAILABLE"
        assert not socket.exists()
