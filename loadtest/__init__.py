"""Load tests of TF Serving-compatible servers with locust: the A/B comparison, a version swap
under load (rollout), and one server's many models (many).

Importing this package is light: TensorFlow and locust load only when a comparison runs (and in
the locust processes, which import `loadtest/generator/sweepfile.py` or
`loadtest/generator/locustfile.py`).
"""

from graphserve.core.errors import (
    LoadTestError,
    LocustRunError,
    PayloadError,
    RemoteTargetError,
    ServerStartError,
    SloError,
)
from graphserve.loadtest.comparison.run import Arm, CompareSpec, LoadSpec, compare
from graphserve.loadtest.generator.targets import check_loopback
from graphserve.loadtest.manymodels.run import ManySpec, many
from graphserve.loadtest.results.many import ManyReport, load_many
from graphserve.loadtest.results.rollout import RolloutReport, load_rollout
from graphserve.loadtest.results.run import Report, load_report
from graphserve.loadtest.rollouts.run import RolloutSpec, rollout

__all__ = [
    "Arm",
    "CompareSpec",
    "LoadSpec",
    "LoadTestError",
    "LocustRunError",
    "ManyReport",
    "ManySpec",
    "PayloadError",
    "RemoteTargetError",
    "Report",
    "RolloutReport",
    "RolloutSpec",
    "ServerStartError",
    "SloError",
    "check_loopback",
    "compare",
    "load_many",
    "load_report",
    "load_rollout",
    "many",
    "rollout",
]
