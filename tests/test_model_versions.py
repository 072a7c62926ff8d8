"""Models and versions as TF Serving manages them: config files, policies, labels, polling,
availability-preserving swaps under traffic (a client thread, and real locust load), broken or
half-written versions beside good ones, and faults while a version serves: its directory deleted,
its files truncated or corrupted."""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import threading
import time
import urllib.error
import urllib.request
import weakref
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from graphserve.cli import app
from graphserve.core import client
from graphserve.core.client import GrpcClient, RestClient
from graphserve.exporter import ExportSpec, export_model, parse_input_spec
from graphserve.serving import ModelRegistry, ModelServer, ServerOptions
from graphserve.serving.config import (
    ModelConfig,
    ModelConfigError,
    VersionPolicy,
    load_model_config_file,
)
from graphserve.serving.manager import ModelManager

X = np.array([[1.0, 1.0, 1.0]], dtype=np.float32)


def _export(base: Path, name: str = "affine", version: int | None = None) -> Path:
    spec = ExportSpec(
        source="tests.factories:affine",
        name=name,
        base_path=base,
        version=version,
        inputs=[parse_input_spec("x:float32:-1,3")],
        parity_batches=1,
        warmup_samples=1,
    )
    return export_model(spec).path


def _wait_for(
    condition: Callable[[], bool],
    what: str,
    timeout: float = 30.0,
    why: Callable[[], str] = lambda: "",
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what} {why()}".rstrip())
        time.sleep(0.05)


@pytest.fixture
def serve() -> Iterator[Callable[[ModelManager], ModelServer]]:
    started: list[tuple[ModelManager, ModelServer]] = []

    def start(manager: ModelManager) -> ModelServer:
        server = ModelServer(
            manager.registry, ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0)
        ).start()
        started.append((manager, server))
        return server

    yield start
    for manager, server in started:
        server.stop(grace=1.0)
        manager.unload_all()  # and wait for the versions retired during the test


def _predict(
    server: ModelServer, name: str, version: int | None = None, label: str | None = None
) -> Any:
    request = client.predict_request(name, {"x": X}, version=version, label=label)
    with GrpcClient.connect(f"127.0.0.1:{server.grpc_port}") as grpc_client:
        return grpc_client.predict(request)


def _status(server: ModelServer, name: str) -> dict[int, tuple[str, str]]:
    with GrpcClient.connect(f"127.0.0.1:{server.grpc_port}") as grpc_client:
        response = grpc_client.status(client.status_request(name))
    return {s.version: (s.state, s.error_message) for s in client.version_statuses(response)}


def _rest_status(server: ModelServer, name: str) -> dict[int, tuple[str, str]]:
    """GET /v1/models/NAME as the same {version: (state, error_message)} as `_status`."""
    code, body = _http(server, f"/v1/models/{name}")
    assert code == 200, body
    return {
        int(s["version"]): (s["state"], s["status"]["error_message"])
        for s in body["model_version_status"]
    }


@dataclass
class Traffic:
    """What a client sending Predict back to back saw: answers by version, and failures."""

    seen: Counter[int] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)


@contextmanager
def _traffic(server: ModelServer) -> Iterator[Traffic]:
    """A client thread sending Predict for the newest version of "affine" until the block ends;
    a wrong answer or an error is a failure."""
    traffic = Traffic()
    stop = threading.Event()

    def drive() -> None:
        with GrpcClient.connect(f"127.0.0.1:{server.grpc_port}") as grpc_client:
            request = client.predict_request("affine", {"x": X})
            while not stop.is_set():
                try:
                    response = grpc_client.predict(request)
                    scores = client.predict_outputs(response)["scores"]
                    np.testing.assert_allclose(scores, [[3.75, 0.0]])
                    traffic.seen[response.model_spec.version.value] += 1
                except Exception as exc:  # any failure is a test failure, counted by the caller
                    traffic.failures.append(repr(exc))

    driver = threading.Thread(target=drive)
    driver.start()
    try:
        yield traffic
    finally:
        stop.set()
        driver.join()


def _http(server: ModelServer, path: str, body: Any = None) -> tuple[int, Any]:
    with RestClient(f"127.0.0.1:{server.rest_port}") as rest:
        reply = rest.get(path) if body is None else rest.post(path, body)
    return reply.status, reply.json()


CONFIG = """
# two models, as TF Serving reads them
model_config_list {
  config {
    name: "affine"
    base_path: "models/affine"
    model_platform: "tensorflow"
    model_version_policy { all {} }
    version_labels { key: "stable" value: 1 }
    version_labels { key: "canary" value: 2 }
  }
  config {
    name: "other"
    base_path: "models/other"
    model_version_policy { specific { versions: 1 } }
  }
}
"""


def test_config_file_policies_and_labels(tmp_path: Path, serve) -> None:
    for version in (1, 2):
        _export(tmp_path / "models", version=version)
    _export(tmp_path / "models", name="other", version=1)
    _export(tmp_path / "models", name="other", version=2)  # not aspired: specific {1}
    (tmp_path / "models.config").write_text(CONFIG)
    models = load_model_config_file(tmp_path / "models.config")
    assert models[0].policy == VersionPolicy("all")
    assert models[0].labels == {"stable": 1, "canary": 2}
    assert models[0].base_path == tmp_path / "models" / "affine"  # relative to the file

    server = serve(ModelManager(ModelRegistry(), models).start())
    assert _status(server, "affine") == {1: ("AVAILABLE", ""), 2: ("AVAILABLE", "")}
    assert _status(server, "other") == {1: ("AVAILABLE", "")}
    assert _predict(server, "affine", label="canary").model_spec.version.value == 2
    assert _predict(server, "affine", label="stable").model_spec.version.value == 1
    assert _predict(server, "affine").model_spec.version.value == 2  # newest by default

    status, body = _http(
        server, "/v1/models/affine/labels/stable:predict", {"instances": X.tolist()}
    )
    assert status == 200
    np.testing.assert_allclose(body["predictions"][0]["scores"], [3.75, 0.0])
    status, body = _http(server, "/v1/models/affine/labels/stable")
    assert status == 200 and body["model_version_status"][0]["version"] == "1"
    status, body = _http(
        server, "/v1/models/affine/labels/nope:predict", {"instances": [[1, 1, 1]]}
    )
    assert status == 400 and "Unrecognized servable version label: nope" in body["error"]
    with pytest.raises(grpc.RpcError) as err:
        _predict(server, "other", version=2)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("model_config_list { config { name: 'a' base_pth: '/x' } }", "base_pth"),
        ("model_config_list { config { name: 'a' } }", "needs a name and a base_path"),
        ("model_config_list { }", "lists no models"),
        (
            "model_config_list { config { name: 'a' base_path: '/x' model_platform: 'onnx' } }",
            "model_platform 'onnx'",
        ),
    ],
)
def test_bad_config_files_are_named(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.config"
    path.write_text(text)
    with pytest.raises(ModelConfigError, match=message):
        load_model_config_file(path)
    result = CliRunner().invoke(app, ["serve", "graph", "--model-config-file", str(path)])
    assert result.exit_code == 2 and message in result.stderr
    assert "Traceback" not in result.output + result.stderr


def test_new_version_swaps_in_under_traffic_with_no_failed_request(tmp_path: Path, serve) -> None:
    base = tmp_path / "models"
    _export(base)
    manager = ModelManager(ModelRegistry(), [ModelConfig("affine", base / "affine")]).start()
    server = serve(manager)
    manager.poll(0.1)
    with _traffic(server) as traffic:
        _wait_for(lambda: traffic.seen[1] > 20, "traffic on version 1")
        _export(base)  # version 2 appears atomically while requests flow
        _wait_for(lambda: traffic.seen[2] > 20, "traffic on version 2")
    assert traffic.failures == []
    # A policy unload: END without an error.
    assert _status(server, "affine") == {1: ("END", ""), 2: ("AVAILABLE", "")}


def _swap_twice_and_wait_until_freed(base: Path, manager: ModelManager) -> list[int]:
    """Versions 2 and 3 of affine exported and synced in; each retired version's graph must be
    freed. The heap epoch each version was loaded at, 1 to 3."""
    loaded_at: list[int] = []

    def loaded(version: int) -> weakref.ref[Any]:
        servable = next(s for s in manager.registry.available("affine") if s.version == version)
        loaded_at.append(servable.loaded_at)
        return weakref.ref(servable.runner._graph)  # type: ignore[attr-defined]

    models = {1: loaded(1)}
    for version in (2, 3):
        _export(base)
        manager.sync()
        models[version] = loaded(version)
        retired = models[version - 1]
        _wait_for(lambda: retired() is None, f"version {version - 1} to be freed")  # noqa: B023
    return loaded_at


@pytest.mark.alone
def test_a_retired_version_is_freed_whether_it_was_loaded_before_the_server_started_or_after(
    tmp_path: Path, serve
) -> None:
    """A loaded model holds reference cycles, so only a collection frees an unloaded version,
    and none frees one frozen with the heap when the server started (serving.heap). The CLI
    server grew by 0.3 MB a swap before retiring collected."""
    base = tmp_path / "models"
    _export(base)
    manager = ModelManager(ModelRegistry(), [ModelConfig("affine", base / "affine")]).start()
    server = serve(manager)  # freezes the heap, version 1 in it
    _swap_twice_and_wait_until_freed(base, manager)
    assert _status(server, "affine") == {1: ("END", ""), 2: ("END", ""), 3: ("AVAILABLE", "")}
    assert _predict(server, "affine").model_spec.version.value == 3


@pytest.mark.alone
def test_a_server_built_for_the_cli_frees_retired_versions_without_thawing_the_heap(
    tmp_path: Path,
) -> None:
    """`graphserve serve` (build_server) freezes TensorFlow's heap before any model loads, so a
    retired version, the first one included, is freed by a collection of what loaded since: the
    heap is never thawed (a thaw held the GIL for 0.3-0.6 s and stalled every request after
    each swap), and the freeze epoch stays where the build left it."""
    from graphserve.serving import ServeConfig, build_server, heap

    # Earlier tests' retired versions may still be freed in their threads (and re-freeze).
    def retiring() -> list[str]:
        return [t.name for t in threading.enumerate() if t.name.startswith("retire-")]

    _wait_for(lambda: not retiring(), "earlier tests' retired versions to be freed", 60.0,
              lambda: f"still retiring: {retiring()}")  # fmt: skip
    base = tmp_path / "models"
    _export(base)
    options = ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=None)
    server = build_server(ServeConfig(models=[ModelConfig("affine", base / "affine")],
                                      options=options))  # fmt: skip
    manager = server.manager
    assert manager is not None
    with server:
        epoch = heap.epoch()
        loaded_at = _swap_twice_and_wait_until_freed(base, manager)
        assert loaded_at == [epoch] * 3  # each loaded after the freeze: never frozen
        assert heap.epoch() == epoch


def _garbage_saved_model(version: Path) -> None:
    for child in version.iterdir():
        shutil.rmtree(child) if child.is_dir() else child.unlink()
    (version / "saved_model.pb").write_bytes(b"not a SavedModel")


def _partial_saved_model_only(version: Path) -> None:
    """What a copy stopped early leaves: saved_model.pb half written and nothing else."""
    saved_model = (version / "saved_model.pb").read_bytes()
    for child in version.iterdir():
        shutil.rmtree(child) if child.is_dir() else child.unlink()
    (version / "saved_model.pb").write_bytes(saved_model[: len(saved_model) // 2])


def _variables_missing(version: Path) -> None:
    shutil.rmtree(version / "variables")


def _variables_data_cut_short(version: Path) -> None:
    data = version / "variables" / "variables.data-00000-of-00001"
    os.truncate(data, data.stat().st_size // 2)


_UNPARSABLE = (
    "{version}/saved_model.pb",
    "Error parsing message with type 'tensorflow.SavedModel'",
)


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        pytest.param(_garbage_saved_model, _UNPARSABLE, id="garbage-saved-model"),
        pytest.param(_partial_saved_model_only, _UNPARSABLE, id="partial-saved-model-only"),
        pytest.param(
            _variables_missing,
            ("Failed to find any matching files for {version}/variables/",),
            id="variables-missing",
        ),
        pytest.param(
            _variables_data_cut_short,
            ("Read less bytes than requested (loading {version})",),
            id="variables-data-cut-short",
        ),
    ],
)
def test_broken_version_beside_a_good_one(
    tmp_path: Path, serve, damage: Callable[[Path], None], says: tuple[str, ...]
) -> None:
    base = tmp_path / "models"
    good = _export(base, version=1)
    broken = base / "affine" / "2"
    shutil.copytree(good, broken)  # a copy of a good version, then damaged: a half-written one
    damage(broken)
    manager = ModelManager(ModelRegistry(), [ModelConfig("affine", base / "affine")]).start()
    server = serve(manager)
    status = _status(server, "affine")
    assert status[1] == ("AVAILABLE", "")  # latest policy wanted 2; 1 keeps serving
    assert status[2][0] == "END"  # with the load error, naming what is wrong
    for fragment in says:
        assert fragment.format(version=broken) in status[2][1]
    assert _rest_status(server, "affine") == status
    assert _predict(server, "affine").model_spec.version.value == 1
    shutil.rmtree(broken)
    _export(base, version=2)  # a good version 2 replaces the broken one
    manager.sync()
    assert _status(server, "affine") == {1: ("END", ""), 2: ("AVAILABLE", "")}


def test_a_deleted_version_is_unloaded_and_the_others_keep_serving(tmp_path: Path, serve) -> None:
    base = tmp_path / "models"
    for version in (1, 2):
        _export(base, version=version)
    config = ModelConfig("affine", base / "affine", VersionPolicy("all"))
    manager = ModelManager(ModelRegistry(), [config]).start()
    server = serve(manager)
    shutil.rmtree(base / "affine" / "2")
    manager.sync()
    # END, and unlike a policy unload it says why.
    removed = f"version directory {base / 'affine' / '2'} was removed while serving"
    assert _status(server, "affine") == {1: ("AVAILABLE", ""), 2: ("END", removed)}
    assert _rest_status(server, "affine") == {1: ("AVAILABLE", ""), 2: ("END", removed)}
    assert _predict(server, "affine").model_spec.version.value == 1
    with pytest.raises(grpc.RpcError) as err:
        _predict(server, "affine", version=2)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


# -- faults while a version serves ----------------------------------------------------------

_DATA = Path("variables", "variables.data-00000-of-00001")
_NO_LONGER_LOADS = "its files changed on disk and no longer load: "
_IN_MEMORY = "; serving the copy in memory until a version can replace it"
_USERS = 4  # locust users sending back to back while version 2 is pushed


def _cut_in_half(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def _assert_answers(response: Any, version: int) -> None:
    assert response.model_spec.version.value == version
    np.testing.assert_allclose(client.predict_outputs(response)["scores"], [[3.75, 0.0]])


@pytest.mark.alone
def test_a_version_truncated_while_serving_is_unloaded_and_the_other_serves(
    tmp_path: Path, serve
) -> None:
    base = tmp_path / "models"
    for version in (1, 2):
        _export(base, version=version)
    config = ModelConfig("affine", base / "affine", VersionPolicy("all"))
    manager = ModelManager(ModelRegistry(), [config]).start()
    server = serve(manager)
    manager.poll(0.1)
    with _traffic(server) as traffic:
        _wait_for(lambda: traffic.seen[2] > 20, "traffic on version 2")
        _cut_in_half(base / "affine" / "2" / "saved_model.pb")
        _wait_for(lambda: _status(server, "affine")[2][0] == "END", "version 2 to be unloaded")
        _wait_for(lambda: traffic.seen[1] > 20, "traffic on version 1")
    assert traffic.failures == []
    status = _status(server, "affine")
    assert status[1] == ("AVAILABLE", "")
    assert status[2][1].startswith(_NO_LONGER_LOADS)
    assert f"{base / 'affine' / '2' / 'saved_model.pb'}" in status[2][1]
    assert _rest_status(server, "affine") == status
    assert _predict(server, "affine", version=1).model_spec.version.value == 1


def test_the_latest_version_corrupted_while_serving_gives_way_to_the_older_one(
    tmp_path: Path, serve
) -> None:
    base = tmp_path / "models"
    for version in (1, 2):
        _export(base, version=version)
    manager = ModelManager(ModelRegistry(), [ModelConfig("affine", base / "affine")]).start()
    server = serve(manager)
    assert _status(server, "affine") == {2: ("AVAILABLE", "")}  # latest: only 2 loaded
    manager.poll(0.1)
    with _traffic(server) as traffic:
        _wait_for(lambda: traffic.seen[2] > 20, "traffic on version 2")
        _cut_in_half(base / "affine" / "2" / _DATA)
        # Availability first: 1 loads and serves, then the broken 2 is unloaded.
        _wait_for(lambda: _status(server, "affine")[2][0] == "END", "version 2 to be unloaded")
        _wait_for(lambda: traffic.seen[1] > 20, "traffic on version 1")
    assert traffic.failures == []
    status = _status(server, "affine")
    assert status[1] == ("AVAILABLE", "")
    assert status[2] == (
        "END",
        f"{_NO_LONGER_LOADS}IndexError: Read less bytes than requested "
        f"(loading {base / 'affine' / '2'})",
    )
    assert _rest_status(server, "affine") == status


def test_a_sole_version_that_breaks_serves_from_memory_until_its_files_load_again(
    tmp_path: Path, serve
) -> None:
    base = tmp_path / "models"
    version = _export(base, version=1)
    manager = ModelManager(ModelRegistry(), [ModelConfig("affine", base / "affine")]).start()
    server = serve(manager)
    first = manager.registry.get("affine").runner
    intact = (version / _DATA).read_bytes()
    _cut_in_half(version / _DATA)
    manager.sync()
    # Nothing can replace it: it stays AVAILABLE from memory, and its status says what is wrong.
    state, message = _status(server, "affine")[1]
    assert state == "AVAILABLE"
    assert message.startswith(f"{_NO_LONGER_LOADS}IndexError: Read less bytes than requested")
    assert message.endswith(_IN_MEMORY)
    assert _rest_status(server, "affine") == {1: (state, message)}
    assert manager.registry.get("affine").runner is first
    _assert_answers(_predict(server, "affine"), version=1)

    (version / _DATA).write_bytes(intact)  # changed again, and loadable: the new load swaps in
    manager.sync()
    assert _status(server, "affine") == {1: ("AVAILABLE", "")}
    assert manager.registry.get("affine").runner is not first
    _assert_answers(_predict(server, "affine"), version=1)


def test_a_sole_version_deleted_while_serving_serves_from_memory_until_replaced(
    tmp_path: Path, serve
) -> None:
    base = tmp_path / "models"
    _export(base, version=1)
    manager = ModelManager(ModelRegistry(), [ModelConfig("affine", base / "affine")]).start()
    server = serve(manager)
    shutil.rmtree(base / "affine" / "1")
    manager.sync()
    removed = f"version directory {base / 'affine' / '1'} was removed while serving"
    assert _status(server, "affine") == {1: ("AVAILABLE", removed + _IN_MEMORY)}
    _assert_answers(_predict(server, "affine"), version=1)
    _export(base, version=2)
    manager.sync()
    assert _status(server, "affine") == {1: ("END", removed), 2: ("AVAILABLE", "")}
    assert _rest_status(server, "affine") == {1: ("END", removed), 2: ("AVAILABLE", "")}


# ---------------------------------------------------------------------------------------------
# A new version pushed while locust drives load against a server run as a user runs it


def _served_by_version(metrics_url: str) -> dict[tuple[str, str], float]:
    """graphserve_requests of model "affine" by (version, status), from the server's metrics."""
    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        text = response.read().decode()
    counts: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "graphserve_requests_total" and sample.labels["model"] == "affine":
                key = (sample.labels["version"], sample.labels["status"])
                counts[key] = counts.get(key, 0.0) + sample.value
    return counts


def _process_status(grpc_address: str) -> dict[int, tuple[str, str]]:
    from graphserve.core.client import model_status

    return {s.version: (s.state, s.error_message) for s in model_status(grpc_address, "affine")}


@pytest.mark.slow
def test_a_version_pushed_under_locust_load_swaps_in_with_no_failed_request(
    tmp_path: Path,
) -> None:
    from graphserve.core.defaults import DEFAULT_METRICS_PATH as METRICS_PATH
    from graphserve.core.processes import ServerProcess
    from graphserve.loadtest.comparison.run import Arm, CompareSpec, LoadSpec, compare
    from graphserve.loadtest.report.analysis import read_raw
    from graphserve.loadtest.results.stats import summarize

    base = tmp_path / "models"
    _export(base, version=1)
    out = tmp_path / "loadtest"
    server = ServerProcess.on_free_ports(
        ["graph", "--model-base-path", str(base / "affine"), "--model-name", "affine",
         "--metrics", "--file-system-poll-wait-seconds", "0.2"],
        "affine",
        log_path=tmp_path / "server.log",
    )  # fmt: skip
    with server:
        metrics_url = f"http://{server.rest_address}{METRICS_PATH}"
        spec = CompareSpec(
            arms=(Arm("graph", server.grpc_address, metrics_url),),
            model_name="affine",
            model_base_path=base / "affine",
            # users back to back for 1 s of warm-up and 6 windows of 1 s: about 7 s of load,
            # the swap (1 s in, done in about 0.6 s) well inside it
            load=LoadSpec(
                loads=(_USERS,), warmup_s=1.0, window_s=1.0, min_windows=6, max_windows=6
            ),
        )
        measuring = threading.Event()
        outcome: dict[str, Any] = {}

        def progress(event: dict[str, Any]) -> None:
            if event.get("event") == "phase" and event.get("kind") == "window":
                measuring.set()

        def run() -> None:
            try:
                outcome["report"] = compare(spec, out, progress)
            except Exception as exc:  # raised again below, in the test's thread
                outcome["error"] = exc

        load = threading.Thread(target=run)
        load.start()
        try:
            _wait_for(lambda: measuring.is_set() or not load.is_alive(), "locust to measure")
            time.sleep(1.0)  # a stretch of version 1 alone
            swap_started = time.time()
            _export(base, version=2)  # in this process, as a deployment script would
            swapped = {1: ("END", ""), 2: ("AVAILABLE", "")}
            _wait_for(lambda: _process_status(server.grpc_address) == swapped, "the swap")
            swap_ended = time.time()
        finally:
            load.join(timeout=120)
        if "error" in outcome:
            raise outcome["error"]
        served = _served_by_version(metrics_url)

    # Zero failures, as locust reports them and in the raw per-request records.
    arm = outcome["report"].steps[0].arms["graph"]
    assert arm.failures == 0 and arm.errors == {}
    with (out / "locust_stats.csv").open() as f:
        aggregated = next(row for row in csv.DictReader(f) if row["Name"] == "Aggregated")
    assert int(aggregated["Failure Count"]) == 0 and int(aggregated["Request Count"]) > 0
    raw = read_raw(out)
    records = raw.records
    assert raw.errors == [] and bool(records["ok"].all())
    # The swap happened inside the run, and both versions served.
    assert records["start"].min() < swap_started and records["start"].max() > swap_ended
    assert set(served) == {("1", "OK"), ("2", "OK")}, served
    assert served[("1", "OK")] > 0 and served[("2", "OK")] > 0

    # The latency of the requests that started from the push until 0.5 s after the swap.
    during = (records["start"] >= swap_started) & (records["start"] <= swap_ended + 0.5)
    swap = summarize(records["latency_ms"][during])
    result = {
        "swap_s": round(swap_ended - swap_started, 3),
        "requests_during_swap": int(during.sum()),
        "p50_ms_during_swap": swap["p50"],
        "p99_ms_during_swap": swap["p99"],
        "max_ms_during_swap": swap["max"],
        "p99_ms_outside_swap": summarize(records["latency_ms"][~during])["p99"],
        "requests": int(records["ok"].size),
        "users": _USERS,
    }
    (tmp_path / "swap_latency.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result))
    p99 = swap["p99"]
    assert during.any() and p99 is not None and math.isfinite(p99) and p99 > 0
