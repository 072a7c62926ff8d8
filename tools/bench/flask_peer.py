"""The peer: the server a user writes first — Flask, JSON in, `model.predict`, JSON out.

    python -m tools.bench.flask_peer SOURCE --port 8080 [--model-name NAME]

It answers TF Serving's row-format predict body at the same URL (`POST /v1/models/NAME:predict`
with `{"instances": [...]}` → `{"predictions": ...}`), so the benchmark sends it the very bytes it
sends our REST front end. Keras models run through `model.predict(x)`; a model without `predict`
(a plain `tf.Module`) is called directly, `model(x)`, as its author would. It runs on Flask's own
threaded server, loopback only. Nothing here is graphserve's serving stack: that is the point.
"""

from __future__ import annotations

import argparse
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

from graphserve.core.processes import ServerProcess, free_port

__all__ = ["PeerProcess", "build_app"]


def build_app(source: str, model_name: str) -> Any:
    """The Flask app serving `source`'s single-input serving_default signature."""
    from flask import Flask, jsonify, request

    from graphserve.core.errors import SignatureError
    from graphserve.core.inputs import sample_inputs
    from graphserve.model.sources import load_source, resolve_contracts
    from graphserve.model.trace import call_signature, predict_signature

    loaded = load_source(source)
    model, contract = loaded.model, resolve_contracts(loaded)[0]
    (spec,) = contract.inputs
    try:
        predict_signature(model, contract, sample_inputs(contract.inputs, batch_size=1))
        run, how = predict_signature, "model.predict"
    except SignatureError:
        run, how = call_signature, "model(x)"
    app = Flask("graphserve-bench-peer")

    @app.get("/health")
    def health() -> Any:
        return jsonify({"model": model_name, "runs": how})

    @app.post(f"/v1/models/{model_name}:predict")
    def predict() -> Any:
        x = np.asarray(request.get_json()["instances"], dtype=spec.np_dtype)
        outputs = run(model, contract, {spec.name: x})
        values = {k: np.asarray(v).tolist() for k, v in outputs.items()}
        return jsonify({"predictions": next(iter(values.values())) if len(values) == 1 else values})

    return app


class PeerProcess(ServerProcess):
    """`python -m tools.bench.flask_peer` as a child process; ready when GET /health answers 200."""

    def __init__(self, source: str, model_name: str, log_path: Path, port: int = 0) -> None:
        super().__init__([], "", model_name, log_path)
        self._base_args = [sys.executable, "-m", "tools.bench.flask_peer", source]
        self._base_args += ["--model-name", model_name]
        if port:
            self._listen_on(port)
        else:  # picked again if taken before the child binds it (see ServerProcess.start)
            self._picked_on = "127.0.0.1"
            self._pick_ports()

    def _pick_ports(self) -> None:
        self._listen_on(free_port())

    def _listen_on(self, port: int) -> None:
        self.args = [*self._base_args, "--port", str(port)]
        self.grpc_address = self.rest_address = f"127.0.0.1:{port}"

    @property
    def address(self) -> str:
        return str(self.rest_address)

    def is_ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.rest_address}/health", timeout=1) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench.flask_peer", description=__doc__.split("\n")[0]
    )
    parser.add_argument("source", help="model source, as for `graphserve export`")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--model-name", default="model")
    args = parser.parse_args(argv)
    app = build_app(args.source, args.model_name)
    app.run(host="127.0.0.1", port=args.port, threaded=True)


if __name__ == "__main__":
    main()
