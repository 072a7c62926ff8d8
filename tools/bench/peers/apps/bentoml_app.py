"""BentoML peer: a SavedModel's `serving_default` served the way BentoML >= 1.2 documents it.

Docs pattern: "Services" and "Adaptive batching" guides — a `@bentoml.service` class that loads
the model in `__init__`, one `@bentoml.api(batchable=True, max_batch_size=..., max_latency_ms=...)`
method taking and returning a numpy array (REST: POST /predict {"instances": [[...]]} -> the output
array as JSON), started with `bentoml.serve(...)` ("bentoml serve" from Python) with the command
line passed as bento arguments (`bentoml.use_arguments()`), which BentoML hands to its workers.

BentoML has no queue-delay knob: `max_latency_ms` is a latency budget — its CORK dispatcher picks
the batch window itself and answers 503 to requests whose estimated latency would exceed the
budget — so --batch-timeout-ms is not mapped; the budget stays at BentoML's default (60 s).
"""

import argparse
import os
from pathlib import Path

os.environ.setdefault("BENTOML_DO_NOT_TRACK", "True")  # no usage analytics (no network here)

import bentoml
import numpy as np

ARGS = bentoml.use_arguments()  # in the workers: the arguments given to bentoml.serve below
MAX_BATCH_SIZE = int(getattr(ARGS, "max_batch_size", 0))


@bentoml.service(workers=1, logging={"access": {"enabled": False}})
class TFModel:
    def __init__(self) -> None:
        import tensorflow as tf

        self.tf = tf
        self.model = tf.saved_model.load(ARGS.model_dir)  # keep it alive: it owns the variables
        self.fn = self.model.signatures["serving_default"]
        ((self.input_name, spec),) = self.fn.structured_input_signature[1].items()
        (self.output_name,) = self.fn.structured_outputs
        self.dtype = spec.dtype

    @bentoml.api(
        batchable=MAX_BATCH_SIZE > 0,
        max_batch_size=MAX_BATCH_SIZE if MAX_BATCH_SIZE > 1 else 100,  # 100: BentoML's default
        max_latency_ms=60000,
    )
    def predict(self, instances: np.ndarray) -> np.ndarray:
        x = self.tf.constant(instances, dtype=self.dtype)
        return self.fn(**{self.input_name: x})[self.output_name].numpy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--model-name", required=True)
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--max-batch-size", type=int, default=0)
    parser.add_argument("--batch-timeout-ms", type=float, default=0)
    parser.add_argument("--info")
    ns = parser.parse_args()
    bentoml.serve(
        "bentoml_app:TFModel",
        working_dir=str(Path(__file__).resolve().parent),
        host="127.0.0.1",
        port=ns.http_port,
        args={"model_dir": str(Path(ns.model_dir).resolve()), "max_batch_size": ns.max_batch_size},
        blocking=True,  # the arbiter runs here until SIGTERM, then stops its worker
    )


if __name__ == "__main__":
    main()
