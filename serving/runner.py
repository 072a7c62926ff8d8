"""The Runner protocol: what the servers need from a loaded model version, and nothing else.

A runner runs a signature on numpy inputs. Every ability beyond that is declared here, with its
default, so wrappers (batching) forward it and callers never probe with getattr:

    kind          "graph" | "eager" | "null": what answers, shown in logs and metadata headers
    execution     what runs a request (graphserve.core.execution's words: "session", "function",
                  "eager", "restored", "tf.function", ...): the start line, the metadata's
                  `execution` field; an eager server whose source is not eager says so by it
    signatures    the served signatures by key
    path          the version directory it was loaded from (its warm-up records live there);
                  None for a model that runs from Python source
    on_caller     True when `run` runs the model on the calling thread, so warming a request
                  thread (replaying warm-up records on it) pays; False for batching, whose
                  batch threads run the model
    run_inline    `run` for a caller that is the only thread on the request's path (an event
                  loop): no hand-off to another thread at all. The Session runner runs the
                  graph's ops on the caller's thread instead of TensorFlow's inter-op pool, which
                  for a graph that runs in microseconds costs less than the hand-off; the
                  default is `run`
    run_async     `run` for a coroutine on an asyncio loop (the asyncio gRPC front end): a
                  runner that runs on the caller runs on the loop's executor, so the loop
                  never blocks on a model; batching queues the request and awaits its batch,
                  so a waiting request holds no thread
    trace_counts  how often each signature's function was traced (eager servers count
                  retracing); {} for runners that never trace
    close         release what the runner holds (a Session, batch threads); called once by the
                  manager after the version is unloaded and its last request finished

Runners subclass `Runner` explicitly to inherit the defaults.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from graphserve.serving.signature import ServedSignature

__all__ = ["Arrays", "Runner"]

Arrays = dict[str, np.ndarray]


class Runner(Protocol):
    kind: str
    execution: str = ""
    signatures: dict[str, ServedSignature]
    path: Path | None = None
    on_caller: bool = True

    def run(self, signature: str, inputs: Arrays) -> Arrays: ...

    def run_inline(self, signature: str, inputs: Arrays) -> Arrays:
        return self.run(signature, inputs)

    async def run_async(self, signature: str, inputs: Arrays) -> Arrays:
        # The request's context (its deadline) goes with it to the worker thread.
        call = functools.partial(contextvars.copy_context().run, self.run, signature, inputs)
        return await asyncio.get_running_loop().run_in_executor(None, call)

    def trace_counts(self) -> dict[str, int]:
        return {}

    def close(self) -> None:
        return None
