"""Load tests of TF Serving-compatible servers with locust, and the graph-vs-eager comparison.

Importing this package is light: TensorFlow and locust load only when a comparison runs (and in
the locust processes, which import `loadtest/locustfile.py`).
"""

from loadtest.compare import compare
from loadtest.errors import LoadTestError, LocustRunError, PayloadError, RemoteTargetError
from loadtest.report import ArmResult, ComparisonReport, RunSettings, write_report
from loadtest.targets import check_loopback

__all__ = [
    "ArmResult",
    "ComparisonReport",
    "LoadTestError",
    "LocustRunError",
    "PayloadError",
    "RemoteTargetError",
    "RunSettings",
    "check_loopback",
    "compare",
    "write_report",
]
