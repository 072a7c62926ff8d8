"""Cold-start measurements against real servers started as child processes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from graphserve.core.errors import LoadTestError, ServerStartError
from graphserve.loadtest.comparison.coldstart import (
    ColdStartError,
    cold_start_suite,
    measure_cold_start,
    without_warmup_copy,
)
from graphserve.model.warmup import WARMUP_FILE

PAYLOAD = {"images": np.random.default_rng(7).standard_normal((1, 784)).astype(np.float32)}
KEYS = {
    "server",
    "warmup_records",
    "ready_s",
    "first_request_ms",
    "steady_p50_ms",
    "first_over_steady",
    "steady_requests",
}


def _fake_model(base: Path, versions: list[int]) -> Path:
    for version in versions:
        extra = base / str(version) / "assets.extra"
        extra.mkdir(parents=True)
        (base / str(version) / "saved_model.pb").write_bytes(b"pb %d" % version)
        (extra / "graphserve.json").write_text("{}")
        (base / str(version) / WARMUP_FILE).write_bytes(b"records")
    return base


def test_without_warmup_copy_drops_only_the_warmup_records(tmp_path: Path) -> None:
    model = _fake_model(tmp_path / "models" / "m", [1, 3])
    copy = without_warmup_copy(model, tmp_path / "bare")
    assert copy == tmp_path / "bare" / "m"
    for version in ("1", "3"):
        assert not (copy / version / WARMUP_FILE).exists()
        assert (copy / version / "assets.extra" / "graphserve.json").is_file()
        assert (copy / version / "saved_model.pb").read_bytes() == f"pb {version}".encode()
        assert (model / version / WARMUP_FILE).is_file()  # the original keeps them

    (copy / "stale").mkdir()
    assert without_warmup_copy(model, tmp_path / "bare") == copy  # replaces an earlier copy
    assert sorted(p.name for p in copy.iterdir()) == ["1", "3"]


def test_without_warmup_copy_needs_version_directories(tmp_path: Path) -> None:
    with pytest.raises(LoadTestError, match="holds no numeric version directories"):
        without_warmup_copy(tmp_path, tmp_path / "bare")


def test_graph_cold_starts_with_and_without_warmup_records(mlp_export, tmp_path: Path) -> None:
    lines: list[str] = []
    results = cold_start_suite(
        mlp_export.model_dir,
        None,
        "mlp",
        PAYLOAD,
        work_dir=tmp_path,
        runs=1,
        steady_requests=50,
        log=lines.append,
    )
    assert [(r.server, r.warmup_records) for r in results] == [("graph", True), ("graph", False)]
    for result in results:
        assert result.ready_s > 0
        assert result.first_request_ms > 0
        assert result.steady_p50_ms > 0
        assert result.steady_requests == 50
        assert result.first_over_steady == result.first_request_ms / result.steady_p50_ms
        assert set(result.to_json()) == KEYS
    assert len(lines) == 2

    assert (mlp_export.version_dir / WARMUP_FILE).is_file()
    assert not (tmp_path / "without-warmup" / "mlp" / "1" / WARMUP_FILE).exists()
    # What the two servers did at load: only the first replayed the records.
    assert "replayed 4 warm-up records" in (tmp_path / "graph-warmup-run1.log").read_text()
    assert "warm-up" not in (tmp_path / "graph-no-warmup-run1.log").read_text()


def test_a_server_that_cannot_start_is_a_server_start_error(tmp_path: Path) -> None:
    missing = tmp_path / "nothing"
    with pytest.raises(ServerStartError) as error:
        measure_cold_start(
            ["graph", "--model-base-path", str(missing), "--model-name", "m"],
            "m",
            server="graph",
            warmup_records=False,
            payload=PAYLOAD,
            log_path=tmp_path / "server.log",
        )
    assert "did not become ready: server exited with code 1" in str(error.value)
    assert f"base path {missing} does not exist" in str(error.value)


def test_a_failing_predict_is_a_cold_start_error_with_the_log(mlp_export, tmp_path: Path) -> None:
    with pytest.raises(ColdStartError) as error:
        measure_cold_start(
            ["null", "--model-base-path", str(mlp_export.model_dir), "--model-name", "mlp"],
            "mlp",
            server="null",
            warmup_records=False,
            payload={"images": PAYLOAD["images"].astype(np.int64)},
            log_path=tmp_path / "server.log",
        )
    message = str(error.value)
    assert "INVALID_ARGUMENT" in message
    assert "images" in message
    assert "serving mlp v1 (null)" in message  # the log tail
