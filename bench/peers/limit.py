"""The limit: the same SavedModel called in process in a loop, no server, no network, on the
same cores, at the batch sizes servers form. The most rows per second any server could answer
here; every served figure is also given as a fraction of it.

Two ways to call it, the better of them is the limit: the signature function as TensorFlow 2
loads it (`tf.saved_model.load(...).signatures[...]`, what a Python peer's handler calls), and
the signature's graph in a Session through a callable made once (`Session.make_callable`, the
C++ Session::Run TF Serving and graphserve's graph server use: no Python per op, no structure
flattening). At each batch size each runs back to back from one thread and from one thread per
core (TensorFlow releases the GIL while it runs, so two callers overlap one call's Python with
the other's kernels).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from graphserve.core.results import JsonResult

__all__ = ["LimitPoint", "in_process_limit", "limit_at"]


@dataclass(frozen=True)
class LimitPoint(JsonResult):
    method: str  # "function" or "session"
    batch_size: int
    threads: int
    calls_per_s: float
    rows_per_s: float


def in_process_limit(
    model_dir: Path,
    inputs: dict[str, np.ndarray],
    batch_sizes: Sequence[int],
    *,
    seconds: float = 3.0,
    warmup: int = 20,
) -> list[LimitPoint]:
    """Rows/s of the loaded `serving_default` at every batch size in `batch_sizes`, from one
    thread and from one thread per core. `inputs` holds one row per input."""
    import tensorflow as tf

    function = tf.saved_model.load(str(model_dir)).signatures["serving_default"]
    session = _session_callable(model_dir, list(inputs))
    points = []
    for batch in batch_sizes:
        rows = {name: np.repeat(a, batch, axis=0) for name, a in inputs.items()}
        feed = {name: tf.constant(a) for name, a in rows.items()}
        calls = {
            "function": lambda f=feed: function(**f),
            "session": lambda r=rows: session(*r.values()),
        }
        for method, call in calls.items():
            for _ in range(warmup):
                call()
            for threads in sorted({1, os.cpu_count() or 1}):
                rate = _calls_per_s(call, threads, seconds)
                points.append(LimitPoint(method, batch, threads, rate, rate * batch))
    return points


def _session_callable(model_dir: Path, names: list[str]) -> Callable[..., object]:
    """`serving_default` as a Session callable taking the inputs in `names`' order."""
    import tensorflow as tf

    graph = tf.Graph()
    session = tf.compat.v1.Session(graph=graph)
    level = tf.get_logger().level
    tf.get_logger().setLevel("ERROR")  # the TF1 loader's deprecation warning
    try:
        with graph.as_default():
            meta = tf.compat.v1.saved_model.load(session, ["serve"], str(model_dir))
    finally:
        tf.get_logger().setLevel(level)
    signature = meta.signature_def["serving_default"]
    feeds = [graph.get_tensor_by_name(signature.inputs[n].name) for n in names]
    fetches = [graph.get_tensor_by_name(t.name) for t in signature.outputs.values()]
    return session.make_callable(fetches, feeds)


def _calls_per_s(call: object, threads: int, seconds: float) -> float:
    counts = [0] * threads
    stop = threading.Event()
    start = threading.Barrier(threads + 1)

    def loop(i: int) -> None:
        start.wait()
        while not stop.is_set():
            call()  # type: ignore[operator]
            counts[i] += 1

    workers = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(threads)]
    for worker in workers:
        worker.start()
    start.wait()
    began = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for worker in workers:
        worker.join()
    return sum(counts) / (time.perf_counter() - began)


def limit_at(points: Sequence[LimitPoint], batch_size: float) -> float:
    """The limit's rows/s at `batch_size` (the best thread count), interpolated on a log scale
    between the measured sizes; a size outside them takes the nearest one."""
    best: dict[int, float] = {}
    for p in points:
        best[p.batch_size] = max(best.get(p.batch_size, 0.0), p.rows_per_s)
    sizes = sorted(best)
    if batch_size <= sizes[0]:
        return best[sizes[0]]
    if batch_size >= sizes[-1]:
        return best[sizes[-1]]
    upper = next(s for s in sizes if s >= batch_size)
    lower = max(s for s in sizes if s <= batch_size)
    if upper == lower:
        return best[upper]
    weight = (np.log(batch_size) - np.log(lower)) / (np.log(upper) - np.log(lower))
    return float(best[lower] + weight * (best[upper] - best[lower]))
