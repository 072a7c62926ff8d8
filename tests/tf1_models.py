"""TF 1.x SavedModels for tests, written the way TensorFlow Serving's own generators wrote its test
models (graph mode, reference variables, `SavedModelBuilder`), rebuilt here in our own code.

    write_tf1_half_plus_two    y = 0.5 * x + 2 from tf.Examples: five signatures, an asset and an
                               init op (main_op, or legacy_init_op as TF 1.1 wrote it)
    write_tf1_half_plus_three  y = 0.5 * x + 3 as TF 1.0 wrote it: placeholders with the old empty
                               shape attribute, SignatureDef tensors with no tensor_shape
    write_tf1_counter          a stateful counter: no-input signatures whose outputs are
                               reference-typed (float_ref), and one input of unknown rank

Each takes the version directory to create and returns it. Variables are TF1 reference variables
(VariableV2, `float_ref` tensors), which is what makes these models hard for TF2's loader.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2, tensor_shape_pb2, types_pb2
from tensorflow.core.protobuf import meta_graph_pb2, saved_model_pb2

__all__ = [
    "ASSET_CONTENTS",
    "write_tf1_counter",
    "write_tf1_half_plus_three",
    "write_tf1_half_plus_two",
]

v1 = tf.compat.v1

ASSET_CONTENTS = "asset-file-contents"
_PREDICT = "tensorflow/serving/predict"
_CLASSIFY = "tensorflow/serving/classify"
_REGRESS = "tensorflow/serving/regress"
# TF 1.0 wrote GraphDefs at producer 21; at <= 21 a Placeholder's empty `shape` attr means
# "unknown", after it a scalar (TensorFlow's Placeholder shape function keys on this).
_TF1_0_PRODUCER = 21


@contextmanager
def _reference_variables() -> Iterator[None]:
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


def _signature(
    inputs: dict[str, tf.Tensor], outputs: dict[str, tf.Tensor], method: str
) -> meta_graph_pb2.SignatureDef:
    info = v1.saved_model.utils.build_tensor_info
    return v1.saved_model.signature_def_utils.build_signature_def(
        {k: info(t) for k, t in inputs.items()}, {k: info(t) for k, t in outputs.items()}, method
    )


def _asset_init(asset_dir: Path) -> tf.Operation:
    """An asset file in the ASSET_FILEPATHS collection, and the op TF Serving's half_plus_two
    runs at load: it assigns the asset's name to a variable outside every collection (so the
    Saver does not save it, and only the init op gives it a value)."""
    asset = asset_dir / "foo.txt"
    asset.write_text(ASSET_CONTENTS)
    v1.add_to_collection(v1.GraphKeys.ASSET_FILEPATHS, tf.constant(str(asset)))
    filename = v1.Variable("foo.txt", name="filename_tensor", trainable=False, collections=[])
    return filename.assign("foo.txt").op


def _save(
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


def _edit_saved_model(path: Path, edit: Callable[[saved_model_pb2.SavedModel], None]) -> None:
    """Rewrite `path/saved_model.pb` in place: how the files of older TF releases are recreated,
    since today's writer no longer produces them."""
    pb = path / "saved_model.pb"
    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString(pb.read_bytes())
    edit(saved)
    pb.write_bytes(saved.SerializeToString())


def _as_legacy_init_op(saved: saved_model_pb2.SavedModel) -> None:
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
        _reference_variables(),
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
        assign = _asset_init(Path(asset_dir))
        extra = [v1.saved_model.main_op.main_op()] if init == "main_op" else []
        signatures = {
            "serving_default": _signature({"x": x}, {"y": y}, _PREDICT),
            "regress_x_to_y": _signature({"inputs": serialized}, {"outputs": y}, _REGRESS),
            "regress_x_to_y2": _signature({"inputs": serialized}, {"outputs": y2}, _REGRESS),
            "regress_x2_to_y3": _signature({"inputs": x2}, {"outputs": y3}, _REGRESS),
            "classify_x_to_y": _signature({"inputs": serialized}, {"scores": y}, _CLASSIFY),
        }
        session.run(v1.global_variables_initializer())
        _save(path, session, signatures, tf.group(*extra, assign))
    if init == "legacy_init_op":
        _edit_saved_model(path, _as_legacy_init_op)
    return path


def write_tf1_half_plus_three(path: Path) -> Path:
    """TF Serving's half_plus_three (y = 0.5 * x + 3) laid out as TF 1.0 wrote it.

        serving_default              predict  x → y
        tensorflow/serving/regress   regress  tf_example → outputs: y   (TF 1.0's default key)

    `tf_example` and `x2` are placeholders whose `shape` attr is the empty TensorShapeProto
    (TF 1.0's "unknown"; a scalar in today's TF), the GraphDef's producer is 21, and the
    SignatureDef tensors carry no `tensor_shape` (and the regress input claims DT_FLOAT, as in TF
    Serving's file). `x` is not a placeholder: clients feed the
    parsed-example identity directly. The init op is a legacy_init_op assigning the asset name.
    """
    graph = tf.Graph()
    with (
        _reference_variables(),
        graph.as_default(),
        v1.Session(graph=graph) as session,
        tempfile.TemporaryDirectory() as asset_dir,
    ):
        a = v1.Variable(0.5, name="a")
        b = v1.Variable(3.0, name="b")
        c = v1.Variable(3.0, name="c")
        serialized = v1.placeholder(tf.string, None, name="tf_example")
        # TF 1.0's parse_example op (today's emits ParseExampleV2, which accepts any rank).
        parsed = tf.raw_ops.ParseExample(
            serialized=serialized,
            names=tf.constant([], tf.string),
            sparse_keys=[],
            dense_keys=[tf.constant("x")],
            dense_defaults=[tf.constant([], tf.float32)],
            sparse_types=[],
            dense_shapes=[[1]],
        )
        x = tf.identity(parsed.dense_values[0], name="x")
        y = tf.add(a * x, b, name="y")
        x2 = v1.placeholder(tf.float32, None, name="x2")
        tf.add(a * x2, c, name="y2")
        assign = _asset_init(Path(asset_dir))
        signatures = {
            "serving_default": _signature({"x": x}, {"y": y}, _PREDICT),
            _REGRESS: _signature({"inputs": serialized}, {"outputs": tf.identity(y)}, _REGRESS),
        }
        session.run(v1.global_variables_initializer())
        _save(path, session, signatures, tf.group(assign))
    _edit_saved_model(path, _as_tf1_0)
    return path


def _as_tf1_0(saved: saved_model_pb2.SavedModel) -> None:
    _as_legacy_init_op(saved)
    (graph,) = saved.meta_graphs
    graph.meta_info_def.tensorflow_version = "1.0.0"
    graph.graph_def.versions.producer = _TF1_0_PRODUCER
    for node in graph.graph_def.node:
        if node.op == "Placeholder":
            node.attr["shape"].CopyFrom(
                attr_value_pb2.AttrValue(shape=tensor_shape_pb2.TensorShapeProto())
            )
    for signature in graph.signature_def.values():
        for info in [*signature.inputs.values(), *signature.outputs.values()]:
            info.ClearField("tensor_shape")
    # TF Serving's shipped file declares the regress input (the string `tf_example`) DT_FLOAT:
    # servers must feed the serialized examples whatever dtype the signature claims.
    graph.signature_def[_REGRESS].inputs["inputs"].dtype = types_pb2.DT_FLOAT


def write_tf1_counter(path: Path) -> Path:
    """TF Serving's counter model: one float32 reference variable, starting at 0.

        get_counter      no inputs        → output: the counter
        incr_counter     no inputs        → output: counter += 1
        reset_counter    no inputs        → output: counter = 0
        incr_counter_by  delta (any rank) → output: counter += delta

    Every output is a `float_ref` tensor of shape [] (DT_FLOAT_REF in the SignatureDefs).
    """
    graph = tf.Graph()
    with _reference_variables(), graph.as_default(), v1.Session(graph=graph) as session:
        counter = v1.Variable(0.0, dtype=tf.float32, name="counter")
        with tf.name_scope("incr_counter_op"):
            incr = counter.assign_add(1.0)
        delta = v1.placeholder(tf.float32, name="delta")
        with tf.name_scope("incr_counter_by_op"):
            incr_by = counter.assign_add(delta)
        with tf.name_scope("reset_counter_op"):
            reset = counter.assign(0.0)
        session.run(v1.global_variables_initializer())
        signatures = {
            "get_counter": _signature({}, {"output": counter}, _PREDICT),
            "incr_counter": _signature({}, {"output": incr}, _PREDICT),
            "incr_counter_by": _signature({"delta": delta}, {"output": incr_by}, _PREDICT),
            "reset_counter": _signature({}, {"output": reset}, _PREDICT),
        }
        _save(path, session, signatures)
    return path
