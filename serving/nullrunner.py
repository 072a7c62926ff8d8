"""NullRunner: the serving stack with no model work, for calibrating load generators.

It serves a SavedModel's signatures as read from `saved_model.pb` (no graph is loaded) and answers
every request with zeros of each output's dtype and shape. Requests still go through the whole
front end (decode, validation against the signature, encode), so a load test against it measures
the stack and the client alone: "is locust the bottleneck?", or the bare round trip of a payload.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from graphserve.core.codec import shape_hint
from graphserve.core.errors import InvalidInput, ServingError
from graphserve.core.savedmodel import signature_defs
from graphserve.core.signature import DTYPES, TensorSpec
from graphserve.serving.runner import Runner
from graphserve.serving.signature import ServedSignature

__all__ = ["NullRunner"]

# TF2's initialization op: a SignatureDef in the file, run once at load, never served
# (tf.saved_model.load leaves it out of `.signatures`, so GraphRunner does not serve it either).
_INIT_OP_KEY = "__saved_model_init_op"


class NullRunner(Runner):
    """Serves the signatures of the SavedModel at `path` and answers with zeros.

    Raises SavedModelError (an ExportError) when `path` is not a readable SavedModel.
    """

    kind = "null"
    execution = "null"

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.signatures = {
            name: ServedSignature.from_signature_def(name, sig)
            for name, sig in signature_defs(self.path).items()
            if name != _INIT_OP_KEY
        }
        self._answers: dict[tuple[str, int], dict[str, np.ndarray]] = {}

    def run(self, signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Zeros (b"" for strings) for every output, the batch size taken from the first input.

        The arrays are cached per (signature, batch) and shared between requests: read only.
        Inputs whose shape a graph of the signature would refuse are refused (InvalidInput).
        """
        mismatch = shape_hint(inputs, self.signatures[signature].inputs)
        if mismatch:
            raise InvalidInput(f"the graph would refuse this request: {mismatch}")
        first = next(iter(inputs.values()), None)
        batch = int(first.shape[0]) if first is not None and first.ndim else 1
        key = (signature, batch)
        answer = self._answers.get(key)
        if answer is None:
            outputs = self.signatures[signature].outputs
            answer = {name: _zeros(spec, batch) for name, spec in outputs.items()}
            self._answers[key] = answer
        return dict(answer)


def _zeros(spec: TensorSpec, batch: int) -> np.ndarray:
    """Zeros of `spec`: an unknown first dimension is `batch`, any other unknown one is 1 (an
    output of unknown rank is a vector of `batch`)."""
    if spec.dtype not in DTYPES:
        raise ServingError(f"output {spec.name!r} has dtype {spec.dtype}, which has no zeros here")
    dims = (None,) if spec.shape is None else spec.shape
    shape = tuple((batch if i == 0 else 1) if d is None else d for i, d in enumerate(dims))
    if spec.dtype == "string":
        array = np.empty(shape, dtype=object)
        array.fill(b"")
    else:
        array = np.zeros(shape, dtype=DTYPES[spec.dtype])
    array.flags.writeable = False
    return array
