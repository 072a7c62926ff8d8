"""The one locust user loop and open-loop schedule (loadtest/generator/users.py) on their own, the
sweep's per-window records, and the plain locustfile through the loop against a real server.

Importing locust monkey-patches the importing process with gevent, so every check that imports
it runs in a fresh interpreter (`_in_child` runs one of this file's `_check_*` functions there
and returns what it returns), never in pytest's process, whose servers use real threads.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).parent.parent
LOCUSTFILE = ROOT / "loadtest" / "generator" / "locustfile.py"


def _in_child(check: Callable[[], Any]) -> Any:
    code = (
        "import json, runpy; "
        f"print(json.dumps(runpy.run_path({str(Path(__file__))!r})[{check.__name__!r}]()))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------
# The schedule


def _check_even() -> dict[str, Any]:
    from graphserve.loadtest.generator.users import Schedule

    schedule = Schedule(4.0, 100.0)
    return {"times": [schedule.take() for _ in range(5)]}


def test_even_arrivals_are_spaced_one_over_the_rate_from_the_start() -> None:
    assert _in_child(_check_even)["times"] == [100.0, 100.25, 100.5, 100.75, 101.0]


def _check_poisson() -> dict[str, Any]:
    from graphserve.loadtest.generator.users import Schedule

    def times(seed: tuple[int, ...], n: int) -> list[float]:
        schedule = Schedule(200.0, 10.0, poisson=True, seed=seed)
        return [schedule.take() for _ in range(n)]

    return {
        "a": times((7, 1, 42), 20_000),
        "again": times((7, 1, 42), 20_000),
        "b": times((7, 2, 42), 10),
    }


def test_poisson_arrivals_follow_the_seed_at_the_rate() -> None:
    drawn = _in_child(_check_poisson)
    times = np.asarray(drawn["a"])
    assert drawn["a"] == drawn["again"]  # the same seed, the same arrivals
    assert drawn["b"][1:] != drawn["a"][1:10]  # another seed (another phase), others
    assert times[0] == 10.0  # the first arrival at the start
    gaps = np.diff(times)
    expected = np.random.default_rng((7, 1, 42)).exponential(1 / 200.0, size=gaps.size)
    np.testing.assert_allclose(
        gaps, expected, rtol=0, atol=1e-12
    )  # exponential gaps of mean 1/rate
    assert gaps.mean() == pytest.approx(1 / 200.0, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)  # a Poisson process's CV


def _check_closed() -> dict[str, Any]:
    from graphserve.loadtest.generator.users import Schedule

    now = time.time()
    later = Schedule(0.0, now + 30.0)
    past = Schedule(0.0, now - 30.0)
    due = past.take()
    return {
        "later": later.take() - now,
        "past": due - now,
        "lag_ms": past.lag_ms(due - 1.0),
        "waits": later.wait(now - 1.0),
    }


def test_a_closed_loop_sends_now_or_from_its_start_and_is_never_late() -> None:
    closed = _in_child(_check_closed)
    assert closed["later"] == pytest.approx(30.0)
    assert 0.0 <= closed["past"] < 1.0
    assert closed["lag_ms"] == 0.0 and closed["waits"] is True


def _check_rerate() -> dict[str, Any]:
    import gevent

    from graphserve.loadtest.generator.senders import LoopThread
    from graphserve.loadtest.generator.users import Schedule, Traffic, Turn

    traffic: Traffic[str] = Traffic()
    first = Schedule(10.0, time.time() + 60.0)  # its first arrival a minute away
    traffic.publish(Turn("first", schedule=first))
    waited: dict[str, Any] = {}

    def step() -> bool:
        t0 = time.monotonic()
        waited["sent"] = first.wait(first.take())
        waited["s"] = time.monotonic() - t0
        return False

    loop = LoopThread(step).start()
    gevent.sleep(0.1)
    second = Schedule(20.0, 50.0)
    traffic.publish(Turn("second", schedule=second))  # a new rate (or phase): a new schedule
    joined = loop.join(5.0)
    return {
        "joined": joined,
        **waited,
        "ended": [first.ended, second.ended],
        "turn": traffic.turn.tag if traffic.turn else None,
        "times": [second.take() for _ in range(3)],
    }


def test_a_new_rate_ends_the_old_schedule_and_its_waiting_sends() -> None:
    rerated = _in_child(_check_rerate)
    assert rerated["joined"] is True
    assert rerated["sent"] is False  # the arrival a minute away was given back, not sent
    assert rerated["s"] < 1.0
    assert rerated["ended"] == [True, False]
    assert rerated["turn"] == "second"
    assert rerated["times"] == [50.0, 50.05, 50.1]


# ---------------------------------------------------------------------------------------------
# The budget


def _check_budget() -> dict[str, Any]:
    from graphserve.loadtest.generator.users import RequestBudget

    calls: list[int] = []
    budget = RequestBudget(3, on_spent=lambda: calls.append(1))
    reserved = [budget.reserve() for _ in range(4)]
    budget.release()  # one waited for an arrival its phase ended before
    again = budget.reserve()
    spent = []
    for _ in range(3):
        spent.append(budget.spent)
        budget.spend()
    spent.append(budget.spent)
    for _ in range(3):
        budget.complete()
    unbounded = RequestBudget()
    return {
        "reserved": reserved,
        "again": again,
        "spent": spent,
        "on_spent": len(calls),
        "unbounded": all(unbounded.reserve() for _ in range(1000)) and not unbounded.spent,
    }


def test_the_budget_counts_reservations_and_sends() -> None:
    budget = _in_child(_check_budget)
    assert budget["reserved"] == [True, True, True, False]
    assert budget["again"] is True  # a released reservation can be taken again
    assert budget["spent"] == [False, False, False, True]  # only sends spend it
    assert budget["on_spent"] == 1  # once, when the last answer is in
    assert budget["unbounded"] is True


# ---------------------------------------------------------------------------------------------
# The loop, in a real locust runner, with a sender that only notes its calls


def _check_loop() -> dict[str, Any]:
    import gevent
    from locust.env import Environment

    from graphserve.loadtest.generator import users

    sends: list[float] = []

    class NotingSender:
        request_type = "grpc"
        timeout_s = 1.0
        record = -1  # one body, sent every time

        def send(self) -> tuple[float, float, int, BaseException | None, bytes]:
            now = time.time()
            sends.append(now)
            return now, 0.5, 3, None, b"abc"

        def close(self) -> None:
            pass

    noted: users.Traffic[str] = users.Traffic()
    recorded: list[tuple[str, float, str, float]] = []

    class NotingUser(users.LoopUser):
        traffic = noted

        def senders(self) -> list[users.Sender]:
            return [NotingSender()]

        def record(self, turn: users.Turn[str], sent: users.Sent) -> Any:
            recorded.append((turn.tag, sent.lag_ms, sent.reply.decode(), sent.start))
            return sent.completed(turn.name, {"phase": turn.tag})

    env = Environment(user_classes=[NotingUser])
    contexts: list[str] = []
    env.events.request.add_listener(lambda context, **_: contexts.append(context["phase"]))
    noted.budget = users.RequestBudget(20)
    env.events.request.add_listener(noted.budget.complete)
    first = time.time() + 0.2
    noted.publish(users.Turn("a", name="first", schedule=users.Schedule(20.0, first)))
    runner = env.create_local_runner()
    runner.start(4, spawn_rate=100)
    gevent.sleep(0.5)  # about 6 arrivals of the first schedule
    switched = time.time()
    noted.publish(users.Turn("b", name="second", schedule=users.Schedule(100.0, switched)))
    deadline = time.monotonic() + 10
    while noted.budget.done < 20 and time.monotonic() < deadline:
        gevent.sleep(0.05)
    gevent.sleep(0.3)  # nothing more is sent: the budget is spent
    stopped = noted.stop(2.0)
    names = {name: entry.num_requests for (name, _), entry in env.stats.entries.items()}
    runner.quit()
    return {
        "first": first,
        "switched": switched,
        "sends": sends,
        "recorded": recorded,
        "contexts": contexts,
        "names": names,
        "stopped": stopped,
    }


def test_the_loop_follows_the_schedule_the_budget_and_the_hooks() -> None:
    run = _in_child(_check_loop)
    assert len(run["sends"]) == 20  # the budget, exactly, across 4 users
    assert run["stopped"] is True
    tags = [tag for tag, _, _, _ in run["recorded"]]
    assert len(tags) == 20 and set(tags) == {"a", "b"}
    assert sorted(run["contexts"]) == sorted(tags)  # locust's event got the record's context
    assert run["names"] == {"first": tags.count("a"), "second": tags.count("b")}
    assert all(reply == "abc" and lag >= 0 for _, lag, reply, _ in run["recorded"])
    # Open loop: never sooner than the schedule says; the first at 20/s, then at 100/s.
    a = sorted(start for tag, _, _, start in run["recorded"] if tag == "a")
    b = sorted(start for tag, _, _, start in run["recorded"] if tag == "b")
    assert all(t >= run["first"] + i / 20.0 - 1e-3 for i, t in enumerate(a))
    assert all(t >= run["switched"] + i / 100.0 - 1e-3 for i, t in enumerate(b))
    # The new turn ended the first schedule for every user: none of its later arrivals went out.
    assert 1 <= len(a) <= int((run["switched"] - run["first"]) * 20.0) + 1


# ---------------------------------------------------------------------------------------------
# The sweep's windows: each costs only its own requests


def _check_windows() -> dict[str, Any]:
    import importlib
    import os
    import tempfile

    from graphserve.loadtest.results.plan import PLAN_ENV, ArmTarget, Plan

    out = Path(tempfile.mkdtemp())
    (out / "request.bin").write_bytes(b"")
    arms = tuple(ArmTarget(n, "127.0.0.1:1", "127.0.0.1:1") for n in ("a", "b"))
    plan = Plan(arms, "grpc", str(out / "request.bin"), "/v1/models/m:predict", "m", "closed",
                (1.0,), str(out))  # fmt: skip
    plan.dump(out / "plan.json")
    os.environ[PLAN_ENV] = str(out / "plan.json")
    sweepfile = importlib.import_module("graphserve.loadtest.generator.sweepfile")

    class Counting:
        """numpy, counting the elements it is asked to convert or join."""

        def __init__(self) -> None:
            self.elements = 0

        def __getattr__(self, name: str) -> Any:
            return getattr(np, name)

        def asarray(self, values: Any, *args: Any, **kwargs: Any) -> Any:
            self.elements += len(values)
            return np.asarray(values, *args, **kwargs)

        def concatenate(self, arrays: Any, *args: Any, **kwargs: Any) -> Any:
            arrays = list(arrays)
            self.elements += sum(len(a) for a in arrays)
            return np.concatenate(arrays, *args, **kwargs)

    counting = Counting()
    sweepfile.np = counting
    collector = sweepfile.Collector()

    def batch(rows: list[tuple[int, int, float, float, bool, float]]) -> dict[str, Any]:
        columns = dict(zip(sweepfile._COLUMNS, map(list, zip(*rows, strict=True)), strict=True))
        return {"columns": columns, "errors": [], "cpu": {}, "done_through": 0, "spent": False}

    per_window, windows = 5_000, 200  # a million requests
    work = []
    for seq in range(1, windows + 1):
        arm = seq % 2
        rows = [(arm, seq, 0.0, float(i % 97), i % 13 != 0, 0.25) for i in range(per_window)]
        before = counting.elements
        collector.add("local", batch(rows))
        latency, ok = collector.window(arm, seq)
        work.append(counting.elements - before)
        assert latency.size == per_window and float(latency[5]) == 5.25 and not ok[0]
    # One phase's requests split over two batches, the first shared with another phase.
    late = windows + 1
    collector.add(
        "local", batch([(0, late, 0.0, 1.0, True, 0.0), (1, late + 1, 0.0, 2.0, True, 0.5)])
    )
    collector.add("local", batch([(0, late, 0.0, 3.0, False, 1.0)]))
    latency, ok = collector.window(0, late)
    return {
        "work": work,
        "requests": len(collector.columns["seq"]),
        "split": [latency.tolist(), ok.tolist()],
        "other": collector.window(1, late + 1)[0].tolist(),
        "none": collector.window(1, 999)[0].tolist(),
    }


def test_a_window_costs_its_own_requests_not_the_runs_so_far() -> None:
    windows = _in_child(_check_windows)
    work = windows["work"]
    assert windows["requests"] == 1_000_003
    # The 200th window converts as much as the first: nothing of the 995,000 requests before it.
    assert work[-1] == work[0] <= 6 * 5_000
    assert sum(work) <= 6 * 1_000_000
    assert windows["split"] == [[1.0, 4.0], [True, False]]  # latency + lag, in arrival order
    assert windows["other"] == [2.5]
    assert windows["none"] == []


# ---------------------------------------------------------------------------------------------
# The plain locustfile, through the loop, against a real server


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["grpc", "rest"])
def test_the_plain_locustfile_sends_exactly_max_requests_then_quits(
    mlp_servers: Any, protocol: str
) -> None:
    grpc = protocol == "grpc"
    host = mlp_servers.graph_grpc if grpc else f"http://{mlp_servers.graph_rest}"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "-u", "4",
         "-r", "100", "-t", "60s", "--host", host, "--model-name", "mlp", "--max-requests", "120",
         "--json", "GrpcPredictUser" if grpc else "RestPredictUser"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert time.monotonic() - started < 45  # it quit on the budget, not on -t
    (entry,) = json.loads(done.stdout)
    assert entry["name"] == "Predict" and entry["method"] == ("grpc" if grpc else "POST")
    assert entry["num_requests"] == 120 and entry["num_failures"] == 0
