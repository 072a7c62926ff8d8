"""PyTriton serving a SavedModel's `serving_default` signature.

Follows PyTriton's quick start ("Binding models"): an infer function decorated with `@batch`,
bound with `Triton(config=TritonConfig(...)).bind(model_name, infer_func, inputs=[Tensor],
outputs=[Tensor], config=ModelConfig(...))`, tensors declared without the batch dimension. The
wheel's tritonserver serves HTTP and gRPC (V2). Batching on: Triton's dynamic batcher
(`DynamicBatcher(max_queue_delay_microseconds)` and `max_batch_size`). Batching off: the same
batched model config without a dynamic batcher (`batcher=None`: Triton's default scheduler runs
each request alone, [1, ...] as the client sent it), so clients and perf_analyzer see the same
model in both modes; `ModelConfig(batching=False)` would instead make the batch dimension a model
dimension (max_batch_size 0, shape [-1, ...]).

The infer function runs in this process; Triton's server and the Python backend stub are children
that die with it. SIGTERM stops them (`triton.stop()`, which also deletes PyTriton's workspace
under ~/.cache/pytriton) and exits.
"""

import argparse
import json
import signal
import threading
from multiprocessing import resource_tracker

import numpy as np
import tensorflow as tf
from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig

parser = argparse.ArgumentParser()
parser.add_argument("--model-dir", required=True)
parser.add_argument("--model-name", required=True)
parser.add_argument("--http-port", type=int, required=True)
parser.add_argument("--grpc-port", type=int, required=True)
parser.add_argument("--max-batch-size", type=int, default=0)
parser.add_argument("--batch-timeout-ms", type=float, default=0.0)
parser.add_argument("--info")
args = parser.parse_args()

stopping = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stopping.set())

signature = tf.saved_model.load(args.model_dir).signatures["serving_default"]
((input_name, input_spec),) = signature.structured_input_signature[1].items()
((output_name, output_spec),) = signature.structured_outputs.items()


def tensor(name, spec):
    """The Triton tensor of a signature's TensorSpec, without the batch dimension."""
    dims = tuple(-1 if d is None else d for d in spec.shape.as_list()[1:])
    return Tensor(name=name, dtype=spec.dtype.as_numpy_dtype, shape=dims)


@batch
def infer_func(**inputs):
    outputs = signature(**{input_name: tf.constant(inputs[input_name])})
    return {output_name: np.asarray(outputs[output_name])}


if args.max_batch_size > 0:
    model_config = ModelConfig(
        max_batch_size=args.max_batch_size,
        batcher=DynamicBatcher(max_queue_delay_microseconds=int(args.batch_timeout_ms * 1000)),
    )
else:  # no dynamic batcher: every request runs alone
    model_config = ModelConfig(max_batch_size=16, batcher=None)

config = TritonConfig(
    http_address="127.0.0.1",
    http_port=args.http_port,
    grpc_address="127.0.0.1",
    grpc_port=args.grpc_port,
    allow_metrics=False,
    log_verbose=0,
    exit_timeout_secs=3,  # on SIGTERM, wait 3 s (not 30) for open connections and requests
)
triton = Triton(config=config)
triton.bind(
    model_name=args.model_name,
    infer_func=infer_func,
    inputs=[tensor(input_name, input_spec)],
    outputs=[tensor(output_name, output_spec)],
    config=model_config,
)
if args.info:  # the token Triton's restricted APIs want; written before the model turns ready
    with open(args.info, "w") as f:
        json.dump({"access_token": triton.get_access_token()}, f)
triton.run()  # starts tritonserver, loads the model, returns once it serves
while not stopping.wait(1.0) and triton.is_alive():
    pass
triton.stop()
# PyTriton's shared memory started multiprocessing's resource tracker (a child of this process):
# stop and reap it now, or it outlives the app (an orphan, then a zombie until init reaps it).
resource_tracker._resource_tracker._stop()  # type: ignore[attr-defined]
