"""Faults that happen to a version while it serves (issue 7, "faults survived, nothing lost"):
its directory deleted, its files truncated or corrupted, and a new version pushed while locust
drives load. Servers and clients are real; the versions are real SavedModels in tmp_path."""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tensorflow_serving.apis import predict_pb2

from serving import ModelRegistry
from serving.codec import array_from_proto
from serving.config import ModelConfig, VersionPolicy
from serving.manager import ModelManager
from tests.test_model_versions import (
    _export,
    _predict,
    _rest_status,
    _status,
    _traffic,
    _wait_for,
)
from tests.test_model_versions import serve as _serve_fixture

serve = _serve_fixture  # the fixture, under the name the tests ask for

_DATA = Path("variables", "variables.data-00000-of-00001")
_NO_LONGER_LOADS = "its files changed on disk and no longer load: "
_IN_MEMORY = "; serving the copy in memory until a version can replace it"
_USERS = 4  # locust users sending back to back while version 2 is pushed


def _cut_in_half(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def _assert_answers(response: predict_pb2.PredictResponse, version: int) -> None:
    assert response.model_spec.version.value == version
    np.testing.assert_allclose(array_from_proto(response.outputs["scores"]), [[3.75, 0.0]])


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
    from deploy.wait import model_status

    return {s.version: (s.state, s.error_message) for s in model_status(grpc_address, "affine")}


@pytest.mark.slow
def test_a_version_pushed_under_locust_load_swaps_in_with_no_failed_request(
    tmp_path: Path,
) -> None:
    from graphserve.processes import ServerProcess
    from loadtest.analysis import read_raw
    from loadtest.compare import METRICS_PATH, Arm, CompareSpec, LoadSpec, compare
    from loadtest.stats import summarize

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
            # users back to back for 1 s of warm-up and 10 windows of 1 s: about 11 s of load
            load=LoadSpec(
                loads=(_USERS,), warmup_s=1.0, window_s=1.0, min_windows=10, max_windows=10
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
    arm = outcome["report"]["steps"][0]["arms"]["graph"]
    assert arm["failures"] == 0 and arm["errors"] == {}
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
