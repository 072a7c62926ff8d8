"""KServe's Python model server serving the SavedModel's `serving_default` signature.

Follows KServe's "custom model" docs (python/custom_model/model.py): a `kserve.Model`
subclass whose `load()` loads the model and sets `self.ready`, whose `predict()` takes a V1
dict (`{"instances": ...}` -> `{"predictions": ...}`) or a V2 `InferRequest`
(`payload.inputs[0].as_numpy()` -> `InferResponse` of an `InferOutput`), started with
`kserve.ModelServer().start([model])`. One uvicorn worker (ModelServer's default); KServe's
model server has no batcher of its own (KServe's batcher is the agent sidecar on Kubernetes),
so --max-batch-size is accepted and ignored. Per-request log lines (access log, latency
log, gRPC method log) are off.
"""

import argparse
import copy

import kserve
import kserve.logging
import numpy as np
import tensorflow as tf
from kserve import InferOutput, InferRequest, InferResponse
from kserve.utils.numpy_codec import from_np_dtype
from kserve.utils.utils import generate_uuid


class SavedModel(kserve.Model):
    def __init__(self, name: str, model_dir: str):
        super().__init__(name)
        self.model_dir = model_dir
        self.load()

    def load(self):
        self.fn = tf.saved_model.load(self.model_dir).signatures["serving_default"]
        ((self.input_name, spec),) = self.fn.structured_input_signature[1].items()
        self.input_dtype = spec.dtype.as_numpy_dtype
        (self.output_name,) = self.fn.structured_outputs
        self.ready = True

    def predict(self, payload, headers=None):
        if isinstance(payload, InferRequest):
            x = payload.inputs[0].as_numpy()
        else:
            x = np.asarray(payload["instances"], dtype=self.input_dtype)
        outputs = self.fn(**{self.input_name: tf.constant(x, dtype=self.input_dtype)})
        y = outputs[self.output_name].numpy()
        if isinstance(payload, InferRequest):
            datatype = from_np_dtype(y.dtype)
            output = InferOutput(self.output_name, shape=list(y.shape), datatype=datatype, data=y)
            return InferResponse(generate_uuid(), model_name=self.name, infer_outputs=[output])
        return {"predictions": y.tolist()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--model-name", required=True)
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, default=0)
    parser.add_argument("--max-batch-size", type=int, default=0)  # no batcher in the model server
    parser.add_argument("--batch-timeout-ms", type=float, default=0)
    parser.add_argument("--info")  # nothing to tell the harness
    args, _ = parser.parse_known_args()

    # KServe's own log config with its loggers at WARNING: no line per request.
    log_config = copy.deepcopy(kserve.logging.KSERVE_LOG_CONFIG)
    for logger in log_config["loggers"].values():
        logger["level"] = "WARNING"
    kserve.logging.configure_logging(log_config)

    model = SavedModel(args.model_name, args.model_dir)
    server = kserve.ModelServer(
        http_port=args.http_port,
        grpc_port=args.grpc_port or 8081,
        enable_grpc=bool(args.grpc_port),
        workers=1,
        enable_latency_logging=False,
    )
    server.start([model])


if __name__ == "__main__":
    main()
