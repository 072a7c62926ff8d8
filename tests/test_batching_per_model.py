"""Per-model batching parameters (`--enable-per-model-batching-parameters`), TF Serving's way.

`graphserve serve graph` runs as a user runs it (a child process on loopback), started with TF
Serving's spellings and a global parameters file. Versions are real MLP exports, some with their
own `batching_params.pbtxt` (written by `BatchingParameters.to_text`), written whole into the
base path while the server runs, as the batching tuner writes its candidates. Which parameters a
version batches with shows over the wire: a request one row over its max_batch_size is
INVALID_ARGUMENT naming that limit, one at the limit is answered.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from graphserve.core.batchingparams import BatchingParameters
from graphserve.core.client import VersionStatus, model_status
from graphserve.core.codec import array_from_proto, array_to_proto
from graphserve.core.errors import BatchingConfigError
from graphserve.core.modelconfig import ModelConfig, VersionPolicy, model_config_text
from graphserve.core.processes import ServerProcess
from graphserve.serving.batching import BatchingRunner
from graphserve.serving.loaders import PER_MODEL_BATCHING_FILE, LoadOptions, load_version

NAME = "mlp"
X = np.random.default_rng(3).standard_normal((16, 784)).astype(np.float32)
LOAD_TIMEOUT_S = 60.0
# The global file: the thread pool every version keeps (a version without a file of its own is
# served unbatched).
GLOBAL = BatchingParameters(
    max_batch_size=8, batch_timeout_micros=0, num_batch_threads=1, thread_pool_name="global_pool"
)


def _own(max_batch_size: int) -> str:
    """A version's own file: its limit, a thread pool the server must not take from it."""
    return BatchingParameters(
        max_batch_size=max_batch_size,
        batch_timeout_micros=500,
        num_batch_threads=7,
        thread_pool_name="its_own_pool",
    ).to_text()


def _write_version(source: Path, base: Path, version: int, own: str | None) -> None:
    """A copy of `source` as `base/version`, with `own` as its batching_params.pbtxt, renamed
    into place whole (as export and the tuner write versions)."""
    staging = base.parent / f".staging-{version}"
    shutil.copytree(source, staging)
    if own is not None:
        (staging / PER_MODEL_BATCHING_FILE).write_text(own)
    staging.rename(base / str(version))


def _status(address: str, version: int) -> VersionStatus | None:
    return next((s for s in model_status(address, NAME) if s.version == version), None)


def _wait_state(server: ServerProcess, version: int, state: str) -> VersionStatus:
    deadline = time.monotonic() + LOAD_TIMEOUT_S
    while True:
        status = _status(server.grpc_address, version)
        if status is not None and status.state == state:
            return status
        assert time.monotonic() < deadline, (
            f"version {version} never became {state}: {model_status(server.grpc_address, NAME)}"
            f"\n{server.log_tail()}"
        )
        time.sleep(0.1)


def _predict(address: str, rows: int, version: int | None = None) -> grpc.RpcError | None:
    """Predict `rows` rows (of `version`, or the newest): None when answered with one row of
    logits per row, else the error."""
    request = predict_pb2.PredictRequest()
    request.model_spec.name = NAME
    if version is not None:
        request.model_spec.version.value = version
    request.inputs["images"].CopyFrom(array_to_proto(X[:rows]))
    with grpc.insecure_channel(address) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        try:
            response = stub.Predict(request, timeout=30)
        except grpc.RpcError as exc:
            return exc
    assert array_from_proto(response.outputs["logits"]).shape == (rows, 10)
    return None


def _assert_limit(address: str, limit: int, version: int | None = None) -> None:
    """`limit` rows are answered; one more is INVALID_ARGUMENT naming the limit."""
    assert _predict(address, limit, version) is None
    error = _predict(address, limit + 1, version)
    assert error is not None, f"{limit + 1} rows were answered: the limit is not {limit}"
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"Task size {limit + 1} is larger than maximum input batch size {limit}" in (
        error.details() or ""
    )


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[Any]:
    """Start `graphserve serve graph` with TF Serving's flags, batching on with GLOBAL and
    per-model parameters enabled, over `base` (all versions with `all_versions`)."""
    started: list[ServerProcess] = []

    def start(base: Path, *, all_versions: bool) -> ServerProcess:
        pool = tmp_path / "batching_parameters.txt"
        pool.write_text(GLOBAL.to_text())
        if all_versions:
            config = tmp_path / "models.config"
            config.write_text(model_config_text([ModelConfig(NAME, base, VersionPolicy("all"))]))
            models = ["--model_config_file", str(config)]
        else:
            models = ["--model_base_path", str(base), "--model_name", NAME]
        server = ServerProcess.on_free_ports(
            [
                "graph",
                *models,
                "--enable_batching=true",
                "--batching_parameters_file",
                str(pool),
                "--enable_per_model_batching_parameters=true",
                "--file_system_poll_wait_seconds",
                "0.2",
            ],
            NAME,
            log_path=tmp_path / "server.log",
        )
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.stop()


def test_each_version_batches_by_its_own_file_also_one_written_while_serving(
    mlp_export: Any, tmp_path: Path, start_server: Any
) -> None:
    base = tmp_path / NAME
    base.mkdir()
    _write_version(mlp_export.version_dir, base, 1, _own(4))
    server = start_server(base, all_versions=True)
    _assert_limit(server.grpc_address, 4, version=1)

    _write_version(mlp_export.version_dir, base, 2, _own(6))  # as the tuner writes a candidate
    _wait_state(server, 2, "AVAILABLE")
    _assert_limit(server.grpc_address, 6, version=2)
    _assert_limit(server.grpc_address, 4, version=1)  # each version keeps its own

    _write_version(mlp_export.version_dir, base, 3, None)
    _wait_state(server, 3, "AVAILABLE")
    # No file of its own: served unbatched, as TF Serving serves it (no batch-size limit).
    assert _predict(server.grpc_address, 16, version=3) is None
    _assert_limit(server.grpc_address, 4, version=1)


def test_a_malformed_file_fails_that_version_and_the_previous_serves_on(
    mlp_export: Any, tmp_path: Path, start_server: Any
) -> None:
    base = tmp_path / NAME
    base.mkdir()
    _write_version(mlp_export.version_dir, base, 1, _own(4))
    server = start_server(base, all_versions=False)
    _assert_limit(server.grpc_address, 4)

    _write_version(mlp_export.version_dir, base, 2, "max_batch_size { value: 4 }\nmax_batch: 2\n")
    failed = _wait_state(server, 2, "END")
    assert failed.error_code != 0
    assert f"batching parameters file {base / '2' / PER_MODEL_BATCHING_FILE}" in (
        failed.error_message
    )
    assert 'has no field named "max_batch"' in failed.error_message
    status = _status(server.grpc_address, 1)
    assert status is not None and status.state == "AVAILABLE"
    _assert_limit(server.grpc_address, 4)  # version 1 answers, with its own limit


def test_a_version_keeps_the_global_thread_pool_and_takes_the_rest_from_its_file(
    mlp_export: Any, tmp_path: Path
) -> None:
    version = tmp_path / "1"
    shutil.copytree(mlp_export.version_dir, version)
    (version / PER_MODEL_BATCHING_FILE).write_text(_own(4))
    runner = load_version(version, LoadOptions(batching=GLOBAL, per_model_batching=True))
    assert isinstance(runner, BatchingRunner)
    with runner:
        assert runner.params == BatchingParameters(
            max_batch_size=4,
            batch_timeout_micros=500,
            num_batch_threads=GLOBAL.num_batch_threads,
            thread_pool_name=GLOBAL.thread_pool_name,
        )
        names = {t.name for t in threading.enumerate()}
        assert "global_pool_0" in names and not any(n.startswith("its_own_pool") for n in names)
    # Without the flag, the file is not read: the global parameters, as TF Serving.
    runner = load_version(version, LoadOptions(batching=GLOBAL))
    assert isinstance(runner, BatchingRunner)
    with runner:
        assert runner.params == GLOBAL


def test_a_file_tf_serving_would_refuse_fails_the_load_naming_it(
    mlp_export: Any, tmp_path: Path
) -> None:
    version = tmp_path / "1"
    shutil.copytree(mlp_export.version_dir, version)
    (version / PER_MODEL_BATCHING_FILE).write_text(
        "max_batch_size { value: 8 }\nallowed_batch_sizes: [4, 6]\n"
    )
    with pytest.raises(BatchingConfigError) as caught:
        load_version(version, LoadOptions(batching=GLOBAL, per_model_batching=True))
    assert str(caught.value) == (
        f"batching parameters file {version / PER_MODEL_BATCHING_FILE}: Last entry in "
        "allowed_batch_sizes must match max_batch_size; last entry was 6; expected 8"
    )


@pytest.mark.parametrize(
    "flag",
    ["--enable-per-model-batching-parameters", "--enable_per_model_batching_parameters=true"],
)
def test_per_model_parameters_need_batching_on(tmp_path: Path, flag: str) -> None:
    from typer.testing import CliRunner

    from graphserve.cli import app

    result = CliRunner().invoke(app, ["serve", "graph", "--model-base-path", "models/m", flag])
    assert result.exit_code == 2, result.output
    said = " ".join(result.stderr.split())  # rich wraps long lines
    assert "--enable-per-model-batching-parameters batches each version by its own" in said
    assert "turn batching on too, with --enable-batching" in said


def test_build_server_refuses_per_model_parameters_without_batching(mlp_export: Any) -> None:
    from graphserve.serving.build import ServeConfig, build_server
    from graphserve.serving.config import ModelConfig

    config = ServeConfig(models=(ModelConfig(NAME, mlp_export.model_dir),), per_model_batching=True)
    with pytest.raises(ValueError, match="per_model_batching needs batching"):
        build_server(config)
