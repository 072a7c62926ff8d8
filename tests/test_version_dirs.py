"""Version directories read as TensorFlow Serving reads them (file_system_storage_path_source):
any name that parses as a decimal integer is a version (`00000123` is 123, as in TF Serving's own
test data), and the directory is used as found on disk, never rebuilt from the number."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from graphserve.core.versions import existing_versions, next_version, version_dirs, version_path


def _dirs(base: Path, *names: str) -> Path:
    for name in names:
        (base / name).mkdir(parents=True)
    return base


def test_version_names_tf_serving_accepts(tmp_path: Path) -> None:
    names = ("non_numerical_child", "42", "00017", "+8", "3x", "-2", "1.5", ".tmp-9-1-ab")
    base = _dirs(tmp_path, *names)
    (tmp_path / "99").write_text("a file is not a version")
    assert version_dirs(base) == {8: base / "+8", 17: base / "00017", 42: base / "42"}
    assert existing_versions(base) == [8, 17, 42]
    assert next_version(base) == 43
    assert version_path(base, 17) == base / "00017"
    assert version_path(base, 5) == base / "5"  # absent: where an export would write it


def test_duplicate_names_for_one_version_keep_the_plain_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    base = _dirs(tmp_path, "0017", "17", "00017")
    assert version_dirs(base) == {17: base / "17"}
    assert "duplicate version directories for version 17" in caplog.text
    assert version_dirs(_dirs(tmp_path / "b", "0017", "00017")) == {17: tmp_path / "b" / "00017"}


def test_no_base_path_has_no_versions(tmp_path: Path) -> None:
    assert version_dirs(tmp_path / "missing") == {}


def test_zero_padded_version_serves_and_reports_its_number(mlp_export, tmp_path: Path) -> None:
    """The issue's failure: `…/123 does not exist: expected a SavedModel directory`."""
    import shutil

    from graphserve.serving import ModelRegistry, ModelServer, ServerOptions

    base = tmp_path / "mlp"
    shutil.copytree(mlp_export.version_dir, base / "00000123")
    registry = ModelRegistry()
    registry.load_graph("mlp", base)
    with ModelServer(registry, ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0)) as server:
        url = f"http://127.0.0.1:{server.rest_port}/v1/models/mlp"
        with urllib.request.urlopen(url, timeout=10) as response:
            status = json.load(response)
        assert status["model_version_status"][0]["version"] == "123"
        assert status["model_version_status"][0]["state"] == "AVAILABLE"
        body = json.dumps({"instances": [[0.0] * 784]}).encode()
        request = urllib.request.Request(f"{url}/versions/123:predict", data=body)
        with urllib.request.urlopen(request, timeout=10) as response:
            predictions = json.load(response)["predictions"]
        assert len(predictions) == 1 and len(predictions[0]) == 10


def test_export_sees_a_padded_version(tmp_path: Path) -> None:
    from graphserve.core.errors import VersionExistsError
    from graphserve.core.versions import ensure_version_free

    base = _dirs(tmp_path, "00000007")
    with pytest.raises(VersionExistsError, match="00000007"):
        ensure_version_free(base, 7)
    assert next_version(base) == 8
