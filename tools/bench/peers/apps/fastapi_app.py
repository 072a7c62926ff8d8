"""A FastAPI app on uvicorn serving the SavedModel's `serving_default` signature: what a user
writes themselves.

Follows FastAPI's docs: pydantic request and response models ("Request Body", "Response
Model"), the model loaded in the app's `lifespan` ("Lifespan Events", its ML-model example),
a plain `def` path operation (FastAPI runs it in its threadpool, "Concurrency and async /
await"), `uvicorn.run(app, ...)` ("Run a Server Manually"). The body is TF Serving's REST
predict in row format: `{"instances": [...]}` -> `{"predictions": [...]}`. One uvicorn
worker, no access log, no batching (--max-batch-size is accepted and ignored).
"""

import argparse
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
import tensorflow as tf
import uvicorn
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

parser = argparse.ArgumentParser()
parser.add_argument("--model-dir", required=True)
parser.add_argument("--model-name", required=True)
parser.add_argument("--http-port", type=int, required=True)
parser.add_argument("--max-batch-size", type=int, default=0)  # FastAPI has no batcher
parser.add_argument("--batch-timeout-ms", type=float, default=0)
parser.add_argument("--info")  # nothing to tell the harness
args = parser.parse_args()

model = {}


@asynccontextmanager
async def lifespan(app: FastAPI):
    fn = tf.saved_model.load(args.model_dir).signatures["serving_default"]
    ((model["input"], spec),) = fn.structured_input_signature[1].items()
    (model["output"],) = fn.structured_outputs
    model["dtype"] = spec.dtype.as_numpy_dtype
    model["fn"] = fn
    yield
    model.clear()


app = FastAPI(lifespan=lifespan)


class PredictRequest(BaseModel):
    instances: list[Any]


class PredictResponse(BaseModel):
    predictions: list[Any]


@app.get("/health")
def health():
    return {"status": "ok"}


@app.post("/v1/models/{name}:predict")
def predict(name: str, request: PredictRequest) -> PredictResponse:
    if name != args.model_name:
        raise HTTPException(status_code=404, detail=f"model {name} not found")
    x = tf.constant(np.asarray(request.instances, dtype=model["dtype"]))
    y = model["fn"](**{model["input"]: x})[model["output"]]
    return PredictResponse(predictions=y.numpy().tolist())


if __name__ == "__main__":
    uvicorn.run(
        app, host="127.0.0.1", port=args.http_port, workers=1, access_log=False, log_level="warning"
    )
