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


def _run(
    args: list[str], cwd: Path, timeout: float = 240, returncode: int = 0
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == returncode, (
        f"{args} exited {done.returncode}, not {returncode}:\n{done.stdout}\n{done.stderr}"
    )
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


def test_refused_samples_are_refused_as_the_page_shows(tmp_path: Path) -> None:
    """byom.md: the tf.py_function and the ragged input are refused with the words the page
    quotes and nothing on disk; the module rewritten as the message says exports, and answers
    as the ragged one does on the same rows."""
    work = _copy("refused", tmp_path)
    said = {
        "python_tokenizer": "so no server can run it: TF Serving has no Python, and graphserve's "
        "graph server is another process (here it passes parity only because this process still "
        "holds the function). Write that part with TensorFlow ops, or serve the model from "
        "Python: graphserve serve eager python_tokenizer:build",
        "ragged_tokens": "input 'tokens' is a ragged tensor, and TF Serving's Predict API (REST "
        "and gRPC) carries dense tensors only, so no client could send it. Take it padded, as a "
        "dense tokens:int64:-1,-1 with a mask of its real values tokens_mask:int64:-1,-1",
    }
    for module, words in said.items():
        export = [str(BIN / "graphserve"), "export", f"{module}:build", "--name", module]
        done = _run(export, work, returncode=1)
        assert words in " ".join(done.stderr.split())
        assert "Traceback" not in done.stderr
        assert not (work / "models" / module).exists()

    done = _run([str(BIN / "graphserve"), "export", "ragged_padded:build", "--name", "p"], work)
    assert done.stdout.strip() == "models/p/1"
    check = """
import numpy as np, tensorflow as tf
import ragged_padded, ragged_tokens
rows = tf.ragged.constant([[3, 5], [7, 9, 11, 13], [2]], tf.int64)
padded, mask = rows.to_tensor(), tf.ones_like(rows).to_tensor()
ragged_model, padded_model = ragged_tokens.build(), ragged_padded.build()
want = ragged_model(rows).numpy()
padded_model(padded, mask)  # builds its layers, then takes the ragged model's weights
for layer in ("embed", "dense"):
    getattr(padded_model, layer).set_weights(getattr(ragged_model, layer).get_weights())
got = padded_model(padded, mask).numpy()
print(want.shape, float(np.abs(got - want).max()))
"""
    shape, error = _run([sys.executable, "-c", check], work).stdout.strip().rsplit(" ", 1)
    assert shape == "(3, 2)"
    assert float(error) <= 1e-6


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
