"""The Runner protocol: what the servers need from a loaded model version, and nothing else.

A runner runs a signature on numpy inputs. Every ability beyond that is declared here, with its
default, so wrappers (batching) forward it and callers never probe with getattr:

    kind          "graph" | "eager" | "null": what answers, shown in logs and metadata headers
    signatures    the served signatures by key
    path          the version directory it was loaded from (its warm-up records live there);
                  None for a model that runs from Python source
    on_caller     True when `run` runs the model on the calling thread, so warming a request
                  thread (replaying warm-up records on it) pays; False for batching, whose
                  batch threads run the model
    trace_counts  how often each signature's function was traced (eager servers count
                  retracing); {} for runners that never trace
    close         release what the runner holds (a Session, batch threads); called once by the
                  manager after the version is unloaded and its last request finished

Runners subclass `Runner` explicitly to inherit the defaults.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from graphserve.serving.signature import ServedSignature

__all__ = ["Arrays", "Runner"]

Arrays = dict[str, np.ndarray]


class Runner(Protocol):
    kind: str
    signatures: dict[str, ServedSignature]
    path: Path | None = None
    on_caller: bool = True

    def run(self, signature: str, inputs: Arrays) -> Arrays: ...

    def trace_counts(self) -> dict[str, int]:
        return {}

    def close(self) -> None:
        return None
