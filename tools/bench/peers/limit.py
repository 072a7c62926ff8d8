"""The limit: the same SavedModel called in process in a loop, no server, no network, on the
same cores, at the batch sizes servers form. The most rows per second any server could answer
here; every served figure is also given as a fraction of it.

Three ways to call it, the best of them is the limit: the signature function as TensorFlow 2
loads it (`tf.saved_model.load(...).signatures[...]`, what a Python peer's handler calls); the
signature's graph in a Session through a callable made once (`Session.make_callable`, the C++
Session::Run TF Serving and graphserve's graph server use: no Python per op, no structure
flattening); and that Session with thread pools of one thread ("session-1"), so that calls on
several threads share the cores out instead of each handing its ops across all of them. At each
batch size each runs back to back from one thread and from one thread per core (TensorFlow
releases the GIL while it runs, so two callers overlap one call's Python with the other's
kernels).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
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
    method: str  # "function", "session" or "session-1" (one-thread pools)
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
    return points + _one_thread_pools(model_dir, inputs, batch_sizes, seconds, warmup)


def _one_thread_pools(
    model_dir: Path,
    inputs: dict[str, np.ndarray],
    batch_sizes: Sequence[int],
    seconds: float,
    warmup: int,
) -> list[LimitPoint]:
    """The "session-1" points, measured in a process of their own: TensorFlow sizes its pools
    once per process, at its first op."""
    with tempfile.TemporaryDirectory() as tmp:
        feed = Path(tmp) / "inputs.npz"
        np.savez(feed, **inputs)  # type: ignore[arg-type]
        done = subprocess.run(
            [sys.executable, "-m", "tools.bench.peers.limit", str(model_dir), str(feed),
             ",".join(map(str, batch_sizes)), str(seconds), str(warmup)],
            capture_output=True, text=True, check=False, cwd=Path(__file__).resolve().parents[3],
        )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"the one-thread-pool limit failed: {done.stderr[-800:]}")
    return [LimitPoint(**point) for point in json.loads(done.stdout.splitlines()[-1])]


def _main(model_dir: str, feed: str, sizes: str, seconds: str, warmup: str) -> None:
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    with np.load(feed) as loaded:
        inputs = {name: loaded[name] for name in loaded.files}
    session = _session_callable(Path(model_dir), list(inputs), pool_threads=1)
    points = []
    for batch in map(int, sizes.split(",")):
        rows = [np.repeat(a, batch, axis=0) for a in inputs.values()]
        call = functools.partial(session, *rows)
        for _ in range(int(warmup)):
            call()
        for threads in sorted({1, os.cpu_count() or 1}):
            rate = _calls_per_s(call, threads, float(seconds))
            points.append(LimitPoint("session-1", batch, threads, rate, rate * batch).to_json())
    print(json.dumps(points))


def _session_callable(
    model_dir: Path, names: list[str], pool_threads: int = 0
) -> Callable[..., object]:
    """`serving_default` as a Session callable taking the inputs in `names`' order; the
    Session's intra-op and inter-op pools of `pool_threads` (0: TensorFlow's choice)."""
    import tensorflow as tf

    graph = tf.Graph()
    config = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=pool_threads, inter_op_parallelism_threads=pool_threads
    )
    session = tf.compat.v1.Session(graph=graph, config=config)
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


if __name__ == "__main__":  # the one-thread-pool points (`_one_thread_pools`)
    _main(*sys.argv[1:6])
