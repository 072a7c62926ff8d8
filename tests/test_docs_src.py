"""The manual's code samples, run as a reader runs them, so none of them rots.

Every sample is a file under docs_src/ that a page includes (pymdownx.snippets; `mkdocs build
--strict` fails on a snippet whose file is gone). Each test copies a sample into a fresh
directory and runs it there: the command the page shows, the script with the venv's Python, the
shell script with the venv on PATH. The samples are the pages' only copies of this code.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import MlpExport

ROOT = Path(__file__).resolve().parent.parent
DOCS_SRC = ROOT / "docs_src"
BIN = Path(sys.executable).parent


def _run(args: list[str], cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


def _copy(sample_dir: str, to: Path) -> Path:
    shutil.copytree(DOCS_SRC / sample_dir, to, dirs_exist_ok=True)
    return to


def test_every_sample_is_on_a_page() -> None:
    pages = "\n".join(p.read_text() for p in (ROOT / "docs").rglob("*.md"))
    samples = sorted(p.relative_to(ROOT).as_posix() for p in DOCS_SRC.rglob("*") if p.is_file())
    assert samples, "docs_src/ holds no sample"
    assert [s for s in samples if f'--8<-- "{s}"' not in pages] == []


def test_export_samples_write_verified_versions(tmp_path: Path) -> None:
    """export.md: the unsigned tf.function exported as the page shows, then the deployment
    script, then the shell script; each writes the next version of `doubler`."""
    work = _copy("export", tmp_path)
    done = _run([str(BIN / "graphserve"), "export", "mymodel:build", "--name", "doubler"], work)
    progress = " ".join(done.stderr.split())  # what the page quotes, on stderr
    assert "exported signature 'serving_default' (x: float32 [-1, 3]) traced once" in progress
    assert done.stdout.strip() == "models/doubler/1"
    assert (work / "models" / "doubler" / "1" / "saved_model.pb").is_file()

    done = _run([sys.executable, "deploy_script.py"], work)
    path, version, max_abs_error, content_hash = done.stdout.strip().splitlines()[-1].split()
    assert (path, version) == ("models/doubler/2", "2")
    assert float(max_abs_error) <= 1e-5
    assert content_hash.startswith("sha256:")
    assert (work / "models" / "doubler" / "2" / "saved_model.pb").is_file()

    done = _run(["bash", "deploy.sh"], work)
    assert "serving_default" in done.stdout
    # --keep 3 after the third version: all three stay, with the fixed-batch signatures
    assert sorted(p.name for p in (work / "models" / "doubler").iterdir()) == ["1", "2", "3"]
    assert "serving_default_batch32" in done.stdout


def test_build_server_sample_listens_on_free_ports(tmp_path: Path, mlp_export: MlpExport) -> None:
    """serve.md: build_server(ServeConfig) on a model under models/mlp."""
    work = _copy("serve", tmp_path)
    shutil.copytree(mlp_export.model_dir, work / "models" / "mlp")
    done = _run([sys.executable, "build_server.py"], work)
    grpc_port, rest_port = (int(p) for p in done.stdout.strip().splitlines()[-1].split())
    assert grpc_port > 0 and rest_port > 0 and grpc_port != rest_port


@pytest.mark.slow
def test_compare_sample_returns_the_report_it_wrote(tmp_path: Path, mlp_export: MlpExport) -> None:
    """loadtest.md: both servers in the script, compared at 1 and 4 users, the report read back."""
    work = _copy("loadtest", tmp_path)
    shutil.copytree(mlp_export.model_dir, work / "models" / "mlp")
    done = _run([sys.executable, "compare_in_process.py"], work, timeout=300)
    p99, throughput, ratio = (float(v) for v in done.stdout.strip().splitlines()[-1].split())
    assert p99 > 0 and throughput > 0
    assert 0 < ratio < 1, f"graph/eager p50 {ratio}: the graph server should answer faster"
    report = (work / "reports" / "api" / "report.json").read_text()
    assert re.search(r'"schema": "graphserve\.loadtest/\d+"', report)
