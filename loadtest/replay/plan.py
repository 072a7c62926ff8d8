"""What a replay sends, to whom, and when: its spec and its schedule.

The schedule is the recording's own: each request at its arrival time after the first (the
records sorted by that time, since a log is written in the order requests finished), divided
by `speed`; or, for a file without arrival times (a warm-up file, `traffic make` without
--rate) or when asked, `rate` requests a second, evenly spaced or as a Poisson process.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from graphserve.core.errors import EXIT_USAGE, LoadTestError
from graphserve.core.tls import ClientTls
from graphserve.model.traffic import Record

__all__ = ["ON_TIME_S", "ReplayError", "ReplaySpec", "export_tolerances", "schedule"]

ON_TIME_S = 0.002  # a request sent within this of its time was sent on time


class ReplayError(LoadTestError):
    """A replay that cannot start: its traffic, its arms or its options do not fit (exit 2,
    before anything is sent)."""

    exit_code = EXIT_USAGE


@dataclass
class ReplaySpec:
    """One replay: the traffic file, the arms (NAME -> address, in order; the last is the
    baseline), the protocol, the schedule (recorded times over `speed`, or `rate`), which
    records and where they go, and the answers' tolerances."""

    traffic: Path
    arms: dict[str, str]
    protocol: str = "grpc"
    rest_format: str | None = None  # "row" | "columnar"; None: row where the inputs allow it
    speed: float = 1.0
    rate: float | None = None  # req/s in place of the recorded times
    arrivals: str = "constant"  # with rate: "constant" | "poisson"
    seed: int = 0
    model: str | None = None  # send every record to this model
    from_model: str | None = None  # keep only the records of this model
    records: tuple[int, ...] | None = None  # only these records (their numbers in the file)
    limit: int | None = None  # the first N records (of the schedule) at most
    duration_s: float | None = None  # nothing scheduled later than this is sent
    max_in_flight: int = 32
    timeout_s: float = 30.0
    tolerances: dict[str, tuple[float, float]] = field(default_factory=dict)
    tolerances_from: str = "defaults"  # where they came from, for the report
    tls: ClientTls | None = None
    allow_remote: bool = False
    metrics: dict[str, str] = field(default_factory=dict)  # arm -> Prometheus URL
    worst: int = 5  # the requests that disagree most, named and saved
    slo: tuple[str, ...] = ()


def schedule(
    records: Sequence[Record],
    *,
    speed: float = 1.0,
    rate: float | None = None,
    arrivals: str = "constant",
    seed: int = 0,
) -> tuple[list[int], list[float]]:
    """The order the records go out in (their places in `records`) and each one's time, in
    seconds after the first. ReplayError when the records carry no times and no rate is
    given, or the speed or rate is not positive."""
    if rate is not None:
        if rate <= 0:
            raise ReplayError(f"--rate {rate:g}: expected a positive number of requests a second")
        order = list(range(len(records)))
        if arrivals == "poisson":
            gaps = np.random.default_rng(seed).exponential(1.0 / rate, len(records))
            times = np.concatenate([[0.0], np.cumsum(gaps[:-1])]).tolist()
        else:
            times = [n / rate for n in order]
        return order, times
    if speed <= 0:
        raise ReplayError(f"--speed {speed:g}: expected a positive factor (2: twice as fast)")
    untimed = sum(1 for r in records if not r.arrived_ns)
    if untimed:
        raise ReplayError(
            f"{untimed} of the {len(records)} records carry no arrival time (a warm-up file, or "
            "traffic made without --rate): give --rate to send them at a rate"
        )
    order = sorted(range(len(records)), key=lambda i: records[i].arrived_ns)
    first = records[order[0]].arrived_ns
    return order, [(records[i].arrived_ns - first) / 1e9 / speed for i in order]


def export_tolerances(model_dir: Path) -> tuple[dict[str, tuple[float, float]], str]:
    """The parity tolerances the newest version under `model_dir` (BASE/NAME) was exported
    with (results.answers.manifest_tolerances: its manifest's, over the defaults), and where
    they came from. ReplayError when there is no version, or it has no manifest of
    graphserve's."""
    from graphserve.core.manifest import read_manifest
    from graphserve.core.versions import version_dirs
    from graphserve.loadtest.results.answers import manifest_tolerances

    versions = version_dirs(Path(model_dir))
    if not versions:
        raise ReplayError(f"--model-base-path {model_dir}: no version directory under it")
    newest = max(versions)
    manifest = read_manifest(versions[newest])
    if manifest is None:
        raise ReplayError(
            f"--model-base-path {model_dir}: version {newest} has no graphserve manifest, so "
            "the tolerances it was checked with are unknown (leave the option out: the "
            "defaults apply)"
        )
    tolerances, _ = manifest_tolerances(manifest)
    return tolerances, f"the export of {model_dir} version {newest}"
