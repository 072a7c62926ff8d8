"""`graphserve loadtest replay`: a traffic file sent again, open loop, at its recorded times or a
rate, to each arm in turn; latencies, how well the schedule was kept, latency by request shape,
and every answer judged against the log and the baseline arm."""

from graphserve.loadtest.replay.plan import ReplayError, ReplaySpec, export_tolerances
from graphserve.loadtest.replay.report import ReplayReport
from graphserve.loadtest.replay.run import replay, write_report

__all__ = [
    "ReplayError",
    "ReplayReport",
    "ReplaySpec",
    "export_tolerances",
    "replay",
    "write_report",
]
