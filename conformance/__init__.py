"""`graphserve conformance`: TF Serving's own test cases against any server that speaks its APIs.

    cases.py       the one case model (RestCase, GrpcCase), how a case runs and is judged
                   (pass, fail, deviates: a known Deviation of graphserve's, or n/a)
    reference.py   TF Serving's table: its tests' requests and answers on half_plus_two
    generic.py     the cases that hold for any model, built from the server's own metadata
    models.py      TF Serving's half_plus_two test models and configs (`write-models`; TF)
    run.py         run_conformance(spec) -> ConformanceReport
    cli.py         the command

The tests run the same table against the graph server (TF1 and TF2 models, and with
--strict-json-numbers), the eager server (tests/test_conformance.py) and the TF Serving stand-in
container (tests/test_containers.py), whose results are graphserve's own: the report names a
server that says it is graphserve; and over TLS and mutual TLS, case for case as over plaintext
(tests/test_conformance_tls.py). Importing the package is light
(`graphserve --help` must not load TensorFlow): its names load from their modules on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "CaseResult",
    "ConformanceReport",
    "ConformanceSpec",
    "Deviation",
    "GrpcCase",
    "RestCase",
    "Target",
    "run_conformance",
]

_HOMES = {
    "CaseResult": "cases",
    "Deviation": "cases",
    "GrpcCase": "cases",
    "RestCase": "cases",
    "Target": "cases",
    "ConformanceReport": "run",
    "ConformanceSpec": "run",
    "run_conformance": "run",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
