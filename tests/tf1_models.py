"""TF 1.x SavedModels for tests, written the way TensorFlow Serving's own generators wrote its test
models (graph mode, reference variables, `SavedModelBuilder`), rebuilt here in our own code.

    write_tf1_half_plus_two    y = 0.5 * x + 2 from tf.Examples: five signatures, an asset and an
                               init op (main_op, or legacy_init_op as TF 1.1 wrote it); it lives
                               in graphserve.conformance.models (`conformance write-models`)
    write_tf1_half_plus_three  y = 0.5 * x + 3 as TF 1.0 wrote it: placeholders with the old empty
                               shape attribute, SignatureDef tensors with no tensor_shape
    write_tf1_counter          a stateful counter: no-input signatures whose outputs are
                               reference-typed (float_ref), and one input of unknown rank

Each takes the version directory to create and returns it. Variables are TF1 reference variables
(VariableV2, `float_ref` tensors), which is what makes these models hard for TF2's loader.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2, tensor_shape_pb2, types_pb2
from tensorflow.core.protobuf import saved_model_pb2

from graphserve.conformance.models import (
    ASSET_CONTENTS,
    as_legacy_init_op,
    asset_init,
    edit_saved_model,
    reference_variables,
    save_session,
    signature_def,
    write_tf1_half_plus_two,
)

__all__ = [
    "ASSET_CONTENTS",
    "write_tf1_counter",
    "write_tf1_half_plus_three",
    "write_tf1_half_plus_two",
]

v1 = tf.compat.v1

_PREDICT = "tensorflow/serving/predict"
_REGRESS = "tensorflow/serving/regress"
# TF 1.0 wrote GraphDefs at producer 21; at <= 21 a Placeholder's empty `shape` attr means
# "unknown", after it a scalar (TensorFlow's Placeholder shape function keys on this).
_TF1_0_PRODUCER = 21


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
        reference_variables(),
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
        assign = asset_init(Path(asset_dir))
        signatures = {
            "serving_default": signature_def({"x": x}, {"y": y}, _PREDICT),
            _REGRESS: signature_def({"inputs": serialized}, {"outputs": tf.identity(y)}, _REGRESS),
        }
        session.run(v1.global_variables_initializer())
        save_session(path, session, signatures, tf.group(assign))
    edit_saved_model(path, _as_tf1_0)
    return path


def _as_tf1_0(saved: saved_model_pb2.SavedModel) -> None:
    as_legacy_init_op(saved)
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
    with reference_variables(), graph.as_default(), v1.Session(graph=graph) as session:
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
            "get_counter": signature_def({}, {"output": counter}, _PREDICT),
            "incr_counter": signature_def({}, {"output": incr}, _PREDICT),
            "incr_counter_by": signature_def({"delta": delta}, {"output": incr_by}, _PREDICT),
            "reset_counter": signature_def({}, {"output": reset}, _PREDICT),
        }
        save_session(path, session, signatures)
    return path
