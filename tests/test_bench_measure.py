"""tools/bench/measure.py on real processes: a process tree paused but for the one measured, the
CPU window counting the server's CPU and closing its callers, the sampler's readings."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools.bench.measure import Sampler, alone, cpu_window, resume, tree

# A parent that starts a child, both sleeping: a server with a worker.
_TREE = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; "
_TREE += "time.sleep(60)']); time.sleep(60)"


def _states(pids: list[int]) -> set[str]:
    """The processes' states once a signal sent to them has landed (it is delivered a moment
    after kill returns)."""
    time.sleep(0.2)
    return {Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] for pid in pids}


@pytest.fixture
def servers() -> Iterator[list[int]]:
    started = [subprocess.Popen([sys.executable, "-c", _TREE]) for _ in range(2)]
    deadline = time.monotonic() + 30
    while any(len(tree(p.pid)) < 2 for p in started) and time.monotonic() < deadline:
        time.sleep(0.05)
    yield [p.pid for p in started]
    for process in started:
        resume(process.pid)
        for pid in reversed(tree(process.pid)):
            subprocess.run(["kill", "-9", str(pid)], check=False)
        process.wait()


def test_only_the_measured_tree_runs_and_it_is_paused_again_after(servers: list[int]) -> None:
    measured, other = servers
    with alone(measured, servers):
        assert "T" not in _states(tree(measured))  # running or asleep
        assert _states(tree(other)) == {"T"}  # stopped, the worker too
    assert _states(tree(measured) + tree(other)) == {"T"}
    with alone(None, servers):
        assert _states(tree(measured) + tree(other)) == {"T"}


class _Caller:
    def __init__(self) -> None:
        self.closed = False
        _made.append(self)

    def __call__(self) -> None:
        time.sleep(0.001)

    def close(self) -> None:
        self.closed = True


_made: list[_Caller] = []


def test_the_cpu_window_reads_the_servers_cpu_and_closes_the_callers_it_made() -> None:
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        window = cpu_window(_Caller, busy.pid, clients=2, seconds=0.5)
    finally:
        busy.kill()
        busy.wait()
    assert window.load.requests > 50 and window.load.errors == 0
    assert window.cpu_s > 0.1 and 0.2 < (window.cores or 0) <= 1.2  # one core, spinning
    assert window.cpu_us_per_request == pytest.approx(window.cpu_s / window.load.requests * 1e6)
    assert len(_made) == 2 and all(c.closed for c in _made)


def test_the_sampler_reads_at_start_every_period_and_at_the_end() -> None:
    readings = iter(range(1000))

    def read() -> int | None:
        n = next(readings)
        return None if n == 1 else n  # nothing that time: not kept

    with Sampler(read, 0.1) as sampler:
        time.sleep(0.35)
    assert sampler.samples[0] == 0 and 1 not in sampler.samples
    assert 3 <= len(sampler.samples) <= 5 and sampler.samples == sorted(sampler.samples)
    with Sampler(lambda: time.monotonic(), 0.2, at_start=False) as later:
        began = time.monotonic()
    assert len(later.samples) == 1 and later.samples[0] >= began  # the reading at the end
