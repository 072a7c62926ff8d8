"""LitServe peer: a SavedModel's `serving_default` served the way LitServe's docs show it.

Docs pattern: "LitAPI" reference and the "Batching" feature page — an `ls.LitAPI` subclass with
setup() loading the model, decode_request / predict / encode_response, batch / unbatch when
batching (`ls.LitAPI(max_batch_size=..., batch_timeout=...)`, seconds), served by
`ls.LitServer(api, accelerator="cpu", workers_per_device=1).run(host=..., port=...)`.
REST: POST /predict {"input": rows} -> {"output": rows}.
"""

import argparse

import litserve as ls
import numpy as np


class SavedModelAPI(ls.LitAPI):
    def __init__(self, model_dir: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.model_dir = model_dir

    def setup(self, device):
        import tensorflow as tf

        self.tf = tf
        self.model = tf.saved_model.load(self.model_dir)  # keep it alive: it owns the variables
        self.fn = self.model.signatures["serving_default"]
        ((self.input_name, spec),) = self.fn.structured_input_signature[1].items()
        (self.output_name,) = self.fn.structured_outputs
        self.dtype = spec.dtype.as_numpy_dtype

    def decode_request(self, request):
        return np.asarray(request["input"], dtype=self.dtype)

    def batch(self, inputs, context):
        for rows, ctx in zip(inputs, context, strict=True):
            ctx["rows"] = len(rows)
        return np.concatenate(inputs)

    def predict(self, x):
        return self.fn(**{self.input_name: self.tf.constant(x)})[self.output_name].numpy()

    def unbatch(self, output, context):
        return np.split(output, np.cumsum([ctx["rows"] for ctx in context])[:-1])

    def encode_response(self, output):
        return {"output": output.tolist()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--model-name", required=True)
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--max-batch-size", type=int, default=0)
    parser.add_argument("--batch-timeout-ms", type=float, default=0)
    parser.add_argument("--info")
    args = parser.parse_args()
    batching = {}
    if args.max_batch_size > 0:
        batching = {
            "max_batch_size": args.max_batch_size,
            "batch_timeout": args.batch_timeout_ms / 1000,
        }
    api = SavedModelAPI(args.model_dir, **batching)
    server = ls.LitServer(api, accelerator="cpu", workers_per_device=1)
    server.run(
        host="127.0.0.1", port=args.http_port, log_level="warning", generate_client_file=False
    )


if __name__ == "__main__":
    main()
