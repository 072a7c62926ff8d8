"""A `.keras` file with a custom layer registered by the user's own module: `export` and
`serve eager` import that module first (`--import MODULE`), the manifest records it, and a
self-managed `loadtest compare` gives it to the eager server it starts (`export_flags`). Without
it, the export is refused with the flag to pass.

The CLI runs in child processes from the user's project directory, as a user runs it: a module
imported once in a process registers its layers for good, so an in-process refusal could not
fail."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from graphserve.core.manifest import read_manifest
from graphserve.core.processes import export_flags

LAYERS = """
    import keras


    @keras.saving.register_keras_serializable(package="userproject")
    class Scale(keras.layers.Layer):
        def __init__(self, factor=2.0, **kwargs):
            super().__init__(**kwargs)
            self.factor = factor

        def call(self, x):
            return x * self.factor

        def get_config(self):
            return {**super().get_config(), "factor": self.factor}
"""

SAVE = """
    import keras
    import custom_layers

    keras.utils.set_random_seed(0)
    inputs = keras.Input((3,), name="features")
    outputs = custom_layers.Scale(3.0)(keras.layers.Dense(2)(inputs))
    keras.Model(inputs, outputs).save("model.keras")
"""


def _run(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.run(
        [sys.executable, *args], cwd=project, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("custom_project")
    (root / "custom_layers.py").write_text(textwrap.dedent(LAYERS).lstrip())
    saved = _run(root, "-c", textwrap.dedent(SAVE))
    assert saved.returncode == 0, saved.stderr
    return root


def test_a_custom_layer_unregistered_is_refused_with_the_flag_to_pass(project: Path) -> None:
    done = _run(project, "-m", "graphserve", "export", "model.keras", "--name", "m",
                "--base-path", "refused")  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    text = " ".join((done.stdout + done.stderr).split())
    assert "cannot load Keras file 'model.keras'" in text
    assert "userproject>Scale" in text  # Keras' name for the class it could not find
    assert "Pass --import MODULE for the module of your project that defines it" in text
    assert not (project / "refused").exists()


def test_import_registers_it_for_export_and_the_manifest_keeps_it(project: Path) -> None:
    done = _run(project, "-m", "graphserve", "export", "model.keras", "--name", "m",
                "--base-path", "models", "--import", "custom_layers")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "loading model.keras after importing custom_layers" in done.stdout + done.stderr
    version = project / "models" / "m" / "1"
    manifest = read_manifest(version)
    assert manifest is not None
    assert manifest["options"]["imports"] == ["custom_layers"]
    flags, missing = export_flags(manifest["options"])
    assert flags[-2:] == ["--import", "custom_layers"] and missing == []
    # The export runs without the module: the layer's Python is traced into the graph.
    check = _run(project / "models", "-c", textwrap.dedent(f"""
        import json, numpy as np, tensorflow as tf
        f = tf.saved_model.load({str(version)!r}).signatures["serving_default"]
        out = f(features=tf.constant(np.ones((1, 3), np.float32)))
        print(json.dumps({{k: v.numpy().tolist() for k, v in out.items()}}))
    """))  # fmt: skip
    assert check.returncode == 0, check.stderr
    outputs = json.loads(check.stdout.strip().splitlines()[-1])
    assert np.asarray(next(iter(outputs.values()))).shape == (1, 2)


def test_the_eager_server_loads_it_with_import(project: Path) -> None:
    code = textwrap.dedent("""
        import numpy as np
        from graphserve.serving.runners import EagerRunner

        runner = EagerRunner("model.keras", imports=["custom_layers"])
        print(sorted(runner.signatures))
    """)
    done = _run(project, "-c", code)
    assert done.returncode == 0, done.stderr
    assert "['serving_default']" in done.stdout
    refused = _run(project, "-c", code.replace('imports=["custom_layers"]', "imports=[]"))
    assert refused.returncode == 1
    assert "Pass --import MODULE" in refused.stderr
    wrong = _run(project, "-c", code.replace('"custom_layers"', '"no_such_module"'))
    assert wrong.returncode == 1
    assert "--import no_such_module: cannot import it: ModuleNotFoundError" in wrong.stderr
