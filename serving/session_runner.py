"""SessionRunner: a SavedModel run as TensorFlow Serving runs it, in a TF1 Session.

TF Serving loads a version with `LoadSavedModel` (the `serve` MetaGraph, the variables restored,
the main op or legacy init op run with the asset paths fed) and answers each request with
`Session::Run`, feeding and fetching the signature's tensors by name. This runner does the same
through `tf.compat.v1`: one Session per loaded version, and per signature a callable made once
from its feed and fetch tensor names.

That is what serves the SavedModels TF2's loader cannot: TF1 reference variables (`float_ref`
outputs of assign ops) and placeholders written by TF 1.0 (whose empty `shape` attribute meant
"unknown"). Like Session::Run, it feeds any shape and lets the graph decide (half_plus_two's x,
declared [-1, 1], takes a vector of shape [3]). And it answers faster than the signature
functions, TF2 models included (`python -m tools.bench runners`).

`serving.runners.load_runner` serves every SavedModel with this runner, GraphRunner being the
fallback for one it cannot load.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import config_pb2, meta_graph_pb2

from graphserve.core.errors import InvalidInput, Unavailable
from graphserve.serving.runner import Runner
from graphserve.serving.runners import checked_meta_graph, run_errors
from graphserve.serving.signature import ServedSignature

__all__ = ["SessionRunner"]

log = logging.getLogger("graphserve.runners")

# TF2's init op, which TF2 SavedModels record as a SignatureDef: the loader runs it, no one serves
# it (tf.saved_model.load leaves it out of `.signatures`, so GraphRunner does not serve it either).
INIT_OP_KEY = "__saved_model_init_op"

# A signature's callable is keyed by what it feeds and fetches (tensor names, in call order) and
# whether it runs the graph on the caller's thread (`run_inline`).
_CallableKey = tuple[tuple[str, ...], tuple[str, ...], bool]

# RunOptions.inter_op_thread_pool: the caller's thread runs the ops, as TensorFlow allows for a
# graph on one device ("ONLY for simple graphs, where the overhead of an additional context switch
# is comparable with the overhead of Session::Run()"; config.proto).
_CALLER_THREAD = -1


@dataclasses.dataclass(frozen=True)
class _Tensors:
    """A signature's tensor names by alias: what to feed and what to fetch."""

    inputs: dict[str, str]
    outputs: dict[str, str]


class SessionRunner(Runner):
    """Serves the SavedModel at `path` from a TF1 Session, every signature of its `serve`
    MetaGraph (TF2's `__saved_model_init_op` aside: it runs at load, as in TF Serving).

    The op scan runs first, as for GraphRunner (`allow_ops`: see graphserve.serving.runners); pass
    `meta_graph` when the caller already read and scanned it. Raises what loading raises
    (UnsafeOpsError, SavedModelError, TensorFlow's errors) with the Session closed.
    `close()` frees the Session; a closed runner serves nothing.
    """

    kind = "graph"  # the graph server, whichever way it executes
    execution = "session"

    def __init__(
        self,
        path: Path,
        allow_ops: Collection[str] = (),
        *,
        meta_graph: meta_graph_pb2.MetaGraphDef | None = None,
    ) -> None:
        self.path = Path(path)
        if meta_graph is None:
            checked_meta_graph(self.path, allow_ops)
        self._graph = tf.Graph()
        self._session = tf.compat.v1.Session(graph=self._graph, config=_session_config())
        self._lock = threading.Lock()
        self._callables: dict[_CallableKey, Callable[..., Sequence[Any]]] = {}
        self._closed = False
        try:
            loaded = tf.compat.v1.saved_model.loader.load(
                self._session, [tf.saved_model.SERVING], str(self.path)
            )
            self.signatures: dict[str, ServedSignature] = {}
            self._tensors: dict[str, _Tensors] = {}
            for name, sig in loaded.signature_def.items():
                if name != INIT_OP_KEY and self._add(name, sig):
                    # Made now, so the first request does not pay for pruning and placement.
                    for inline in (False, True):
                        self._callable(self._feeds(name, sorted(sig.inputs)), name, inline)
        except BaseException:
            self.close()
            raise

    def _add(self, name: str, sig: meta_graph_pb2.SignatureDef) -> bool:
        """Serve `sig` if every tensor of it is named (sparse and composite tensors are not)."""
        infos = {**sig.inputs, **sig.outputs}
        unnamed = sorted(alias for alias, info in infos.items() if not info.name)
        if unnamed:
            log.warning(
                "%s: not serving signature %r: tensors %s are sparse or composite, which the "
                "Session runner cannot feed or fetch by name",
                self.path,
                name,
                ", ".join(unnamed),
            )
            return False
        # As in the file, which is what metadata reports (DT_FLOAT_REF included, as TF Serving
        # does); ServedSignature reads a ref dtype as its base dtype, the dtype a fetch returns,
        # and a TensorInfo without tensor_shape (TF 1.0) as of unknown shape.
        self.signatures[name] = ServedSignature.from_signature_def(name, sig)
        self._tensors[name] = _Tensors(
            inputs={alias: info.name for alias, info in sig.inputs.items()},
            outputs={alias: info.name for alias, info in sig.outputs.items()},
        )
        return True

    def _feeds(self, signature: str, aliases: Sequence[str]) -> tuple[str, ...]:
        names = self._tensors[signature].inputs
        unknown = [a for a in aliases if a not in names]
        if unknown:
            raise InvalidInput(
                f"unknown input {unknown[0]!r}: signature {signature!r} takes "
                + (", ".join(repr(a) for a in sorted(names)) or "no inputs")
            )
        return tuple(names[a] for a in aliases)

    def _callable(
        self, feeds: tuple[str, ...], signature: str, inline: bool
    ) -> Callable[..., Sequence[Any]]:
        fetches = tuple(self._tensors[signature].outputs.values())
        key = (feeds, fetches, inline)
        found = self._callables.get(key)
        if found is not None:
            return found
        with self._lock:
            found = self._callables.get(key)
            if found is None:
                options = config_pb2.CallableOptions(feed=feeds, fetch=fetches)
                if inline:
                    options.run_options.inter_op_thread_pool = _CALLER_THREAD
                # Not `Session.make_callable` or `Session.run`: both refuse a value whose shape
                # is outside the fed tensor's static shape, before TensorFlow sees it. A callable
                # made from options hands the values to the C++ Session::Run as they are, the
                # call TF Serving makes, so the graph decides (and errors on what it cannot
                # take).
                found = self._session._make_callable_from_options(options)
                self._callables[key] = found
        return found

    def run(self, signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Feed `inputs` (by alias) and fetch every output of `signature`, the ops run on
        TensorFlow's inter-op thread pool.

        Reference-typed outputs (`float_ref`) come back as their base dtype. Raises InvalidInput
        when the graph refuses the inputs (TensorFlow's InvalidArgumentError), Unavailable once
        closed.
        """
        return self._run(signature, inputs, False)

    def run_inline(self, signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """`run`, the ops run on the calling thread, with no hand-off to a tf_Compute thread and
        back: the MLP's call took 18 µs of CPU in process, against 86 through the pool."""
        return self._run(signature, inputs, True)

    def _run(
        self, signature: str, inputs: dict[str, np.ndarray], inline: bool
    ) -> dict[str, np.ndarray]:
        if self._closed:
            raise Unavailable(f"{self.path} was unloaded: its Session is closed")
        aliases = sorted(inputs)
        feeds = self._feeds(signature, aliases)
        try:
            values = self._callable(feeds, signature, inline)(*(inputs[a] for a in aliases))
        except Exception as exc:
            raise run_errors(exc) from exc
        # A scalar output comes back as a numpy scalar: make every output an array.
        return {
            alias: np.asarray(value)
            for alias, value in zip(self._tensors[signature].outputs, values, strict=True)
        }

    def close(self) -> None:
        """Release the callables and the Session (its variables and graph); idempotent."""
        with self._lock:
            self._closed = True
            self._callables.clear()
        self._session.close()


def _session_config() -> config_pb2.ConfigProto:
    # Soft placement: a TF1 export pinned to /gpu:0 (TF Serving's half_plus_two_gpu) still
    # loads on a machine without one, as it does with tf.saved_model.load. The thread pools are
    # the process's (--tensorflow_intra_op_parallelism / --tensorflow_inter_op_parallelism set
    # them for eager TensorFlow; a Session has its own unless told): 0 is TensorFlow's default.
    return config_pb2.ConfigProto(
        allow_soft_placement=True,
        intra_op_parallelism_threads=tf.config.threading.get_intra_op_parallelism_threads(),
        inter_op_parallelism_threads=tf.config.threading.get_inter_op_parallelism_threads(),
    )
