"""TF Serving's half_plus_two test models, rebuilt the way its generators build them (read in
tensorflow/serving: `servables/tensorflow/testdata/saved_model_half_plus_two.py`; none of its
code or files are copied), and a model config that serves them as the reference table expects.

    write_reference_models(DIR)      DIR/tf1/00000123     TF1: SavedModelBuilder, reference
                                                          variables, tf.Example inputs, an asset
                                                          and its init op, zero-padded version
                                     DIR/tf2/00000123     TF2: tf.saved_model.save, every
                                                          signature's method predict
                                     DIR/two/0000012{3,4} two versions of the TF1 model
                                     DIR/tf1.config       `default` = tf1, `two` with labels
                                     DIR/tf2.config       `default` = tf2, `two` with labels

The building blocks of TF1 exports (`reference_variables`, `signature_def`, `save_session`, ...)
are public: the tests build TF Serving's other TF1 test models with them.
TensorFlow is imported here: the CLI imports this module only for `write-models`.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import tensorflow as tf
from tensorflow.core.protobuf import meta_graph_pb2, saved_model_pb2

from graphserve.conformance.reference import LABELS
from graphserve.core.modelconfig import ModelConfig, VersionPolicy, model_config_text
from graphserve.core.results import JsonResult

__all__ = [
    "ASSET_CONTENTS",
    "LABELS",
    "ReferenceModels",
    "as_legacy_init_op",
    "asset_init",
    "edit_saved_model",
    "reference_variables",
    "save_session",
    "signature_def",
    "write_reference_models",
    "write_tf1_half_plus_two",
    "write_tf2_half_plus_two",
]

v1 = tf.compat.v1

ASSET_CONTENTS = "asset-file-contents"
PREDICT = "tensorflow/serving/predict"
CLASSIFY = "tensorflow/serving/classify"
REGRESS = "tensorflow/serving/regress"


@contextmanager
def reference_variables() -> Iterator[None]:
    """TF1's variables (VariableV2, `*_ref` tensors) while building; the process's setting after.

    `disable_resource_variables` is process-wide, and other tests in the process build TF2
    models, so it is restored on the way out.
    """
    enabled = v1.resource_variables_enabled()
    v1.disable_resource_variables()
    try:
        yield
    finally:
        if enabled:
            v1.enable_resource_variables()


def signature_def(
    inputs: dict[str, tf.Tensor], outputs: dict[str, tf.Tensor], method: str
) -> meta_graph_pb2.SignatureDef:
    info = v1.saved_model.utils.build_tensor_info
    return v1.saved_model.signature_def_utils.build_signature_def(
        {k: info(t) for k, t in inputs.items()}, {k: info(t) for k, t in outputs.items()}, method
    )


def asset_init(asset_dir: Path) -> tf.Operation:
    """An asset file in the ASSET_FILEPATHS collection, and the op TF Serving's half_plus_two
    runs at load: it assigns the asset's name to a variable outside every collection (so the
    Saver does not save it, and only the init op gives it a value)."""
    asset = asset_dir / "foo.txt"
    asset.write_text(ASSET_CONTENTS)
    v1.add_to_collection(v1.GraphKeys.ASSET_FILEPATHS, tf.constant(str(asset)))
    filename = v1.Variable("foo.txt", name="filename_tensor", trainable=False, collections=[])
    return filename.assign("foo.txt").op


def save_session(
    path: Path,
    session: tf.compat.v1.Session,
    signatures: dict[str, meta_graph_pb2.SignatureDef],
    init_op: tf.Operation | None = None,
) -> None:
    builder = v1.saved_model.Builder(str(path))
    builder.add_meta_graph_and_variables(
        session,
        [tf.saved_model.SERVING],
        signature_def_map=signatures,
        assets_collection=v1.get_collection(v1.GraphKeys.ASSET_FILEPATHS),
        main_op=init_op,
    )
    builder.save()


def edit_saved_model(path: Path, edit: Callable[[saved_model_pb2.SavedModel], None]) -> None:
    """Rewrite `path/saved_model.pb` in place: how the files of older TF releases are recreated,
    since today's writer no longer produces them."""
    pb = path / "saved_model.pb"
    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString(pb.read_bytes())
    edit(saved)
    pb.write_bytes(saved.SerializeToString())


def as_legacy_init_op(saved: saved_model_pb2.SavedModel) -> None:
    """Move the init op to the `legacy_init_op` collection, where TF <= 1.1 put it."""
    (graph,) = saved.meta_graphs
    graph.collection_def[v1.saved_model.LEGACY_INIT_OP_KEY].CopyFrom(
        graph.collection_def[v1.saved_model.MAIN_OP_KEY]
    )
    del graph.collection_def[v1.saved_model.MAIN_OP_KEY]


def write_tf1_half_plus_two(
    path: Path, init: Literal["main_op", "legacy_init_op"] = "main_op"
) -> Path:
    """TF Serving's half_plus_two as its TF1 generator builds it (a = 0.5, b = 2, c = 3).

    Serialized tf.Examples (`tf_example`, string [-1]) parse into x and x2 (float32 [-1, 1];
    x2 defaults to 0). `x`, `x2` and the outputs are named identities, so they can be fed and
    fetched by name:

        serving_default   predict   x → y = a * x + b
        regress_x_to_y    regress   tf_example → y
        regress_x_to_y2   regress   tf_example → y2 = a * x + c
        regress_x2_to_y3  regress   x2 → y3 = a2 * x2 + c2
        classify_x_to_y   classify  tf_example → scores: y

    The asset `foo.txt` is copied into `assets/`; at load an init op assigns its name to a
    variable. `init` picks where that op is recorded: `main_op` (with TF1's main_op, which also
    re-initializes variables after the restore) or `legacy_init_op` (the assign alone).
    """
    graph = tf.Graph()
    with (
        reference_variables(),
        graph.as_default(),
        v1.Session(graph=graph) as session,
        tempfile.TemporaryDirectory() as asset_dir,
    ):
        a = v1.Variable(0.5, name="a")
        b = v1.Variable(2.0, name="b")
        c = v1.Variable(3.0, name="c")
        serialized = v1.placeholder(tf.string, [None], name="tf_example")
        features = v1.io.parse_example(
            serialized,
            {
                "x": v1.io.FixedLenFeature([1], tf.float32),
                "x2": v1.io.FixedLenFeature([1], tf.float32, default_value=[0.0]),
            },
        )
        x = tf.identity(features["x"], name="x")
        y = tf.identity(a * x + b, name="y")
        y2 = tf.identity(a * x + c, name="y2")
        x2 = tf.identity(features["x2"], name="x2")
        # Separate variables for the x2 path, as the original has (so optimizers cannot fuse it).
        a2 = v1.Variable(0.5, name="a2")
        c2 = v1.Variable(3.0, name="c2")
        y3 = tf.identity(a2 * x2 + c2, name="y3")
        assign = asset_init(Path(asset_dir))
        extra = [v1.saved_model.main_op.main_op()] if init == "main_op" else []
        signatures = {
            "serving_default": signature_def({"x": x}, {"y": y}, PREDICT),
            "regress_x_to_y": signature_def({"inputs": serialized}, {"outputs": y}, REGRESS),
            "regress_x_to_y2": signature_def({"inputs": serialized}, {"outputs": y2}, REGRESS),
            "regress_x2_to_y3": signature_def({"inputs": x2}, {"outputs": y3}, REGRESS),
            "classify_x_to_y": signature_def({"inputs": serialized}, {"scores": y}, CLASSIFY),
        }
        session.run(v1.global_variables_initializer())
        save_session(path, session, signatures, tf.group(*extra, assign))
    if init == "legacy_init_op":
        edit_saved_model(path, as_legacy_init_op)
    return path


class _HalfPlusTwoTf2(tf.Module):
    """half_plus_two as TF Serving's generator writes it in TF2 mode: tf.saved_model.save, x of
    shape [1], regress and classify over serialized tf.Examples."""

    def __init__(self) -> None:
        super().__init__()
        self.a = tf.Variable(0.5, name="a")
        self.b = tf.Variable(2.0, name="b")

    def _x(self, serialized: tf.Tensor) -> tf.Tensor:
        return tf.io.parse_example(serialized, {"x": tf.io.FixedLenFeature([1], tf.float32)})["x"]

    @tf.function(input_signature=[tf.TensorSpec([1], tf.float32)])
    def predict(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"y": self.a * x + self.b}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def regress(self, serialized: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"outputs": self.a * self._x(serialized) + self.b}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def classify(self, serialized: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"scores": self.a * self._x(serialized) + self.b}


def write_tf2_half_plus_two(path: Path) -> Path:
    """half_plus_two as the generator's TF2 mode writes it, at `path` (the version directory)."""
    model = _HalfPlusTwoTf2()
    signatures = {
        "serving_default": model.predict,
        "regress_x_to_y": model.regress,
        "classify_x_to_y": model.classify,
    }
    tf.saved_model.save(model, str(path), signatures=signatures)
    return path


@dataclass(frozen=True)
class ReferenceModels(JsonResult):
    """What `write_reference_models` wrote: the model directories and one config per flavour."""

    root: Path
    tf1: Path
    tf2: Path
    two: Path
    tf1_config: Path
    tf2_config: Path


def write_reference_models(root: Path, serve_from: str | None = None) -> ReferenceModels:
    """TF Serving's reference models under `root` (which must not hold them yet) and the two
    configs. `serve_from` is where the server will see `root` (a container's mount point, say);
    the configs' base paths start there (default: `root`, absolute)."""
    root = root.resolve()
    where = (serve_from or str(root)).rstrip("/")
    models = ReferenceModels(
        root=root,
        tf1=root / "tf1",
        tf2=root / "tf2",
        two=root / "two",
        tf1_config=root / "tf1.config",
        tf2_config=root / "tf2.config",
    )
    existing = [p for p in (models.tf1, models.tf2, models.two) if p.exists()]
    if existing:
        raise FileExistsError(f"{existing[0]} exists already: write the models into a new DIR")
    root.mkdir(parents=True, exist_ok=True)
    logger = tf.get_logger()
    level = logger.level
    logger.setLevel("ERROR")  # TF1's builders warn that they are TF1's, once per call
    try:
        with tempfile.TemporaryDirectory(dir=root, prefix=".writing-") as staging:
            # whole or not at all: built in a sibling, then renamed into place
            stage = Path(staging)
            write_tf1_half_plus_two(stage / "tf1" / "00000123")
            write_tf2_half_plus_two(stage / "tf2" / "00000123")
            for version in ("00000123", "00000124"):
                shutil.copytree(stage / "tf1" / "00000123", stage / "two" / version)
            for name in ("tf1", "tf2", "two"):
                (stage / name).rename(root / name)
    finally:
        logger.setLevel(level)
    # `default` from its flavour's base path; `two`, every version, labelled, from another
    two = ModelConfig("two", Path(f"{where}/two"), VersionPolicy("all"), dict(LABELS))
    for config, flavour in ((models.tf1_config, "tf1"), (models.tf2_config, "tf2")):
        default = ModelConfig("default", Path(f"{where}/{flavour}"))
        config.write_text(model_config_text([default, two]))
    return models
