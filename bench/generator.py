"""What one locust process can generate: requests per second per CPU core it burns, for the gRPC
and the REST user of loadtest/locustfile.py, against the null server (no model work, so the
server is never what limits). A user learns from it how many worker cores a load test needs to
drive a server at a given rate before the generator, not the server, is what gets measured.

The users run in a child process of their own (`python -m bench.generator`), as in a locust
worker: it lets them settle, then reads its own CPU clock and locust's request count at the start
and at the end of a steady stretch, and prints what it measured.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass

from graphserve.core.results import JsonResult

__all__ = ["GeneratorCapacity", "generator_capacity"]

USERS = {"grpc": "GrpcPredictUser", "rest": "RestPredictUser"}


@dataclass(frozen=True)
class GeneratorCapacity(JsonResult):
    """One locust process driving the null server with one user class."""

    protocol: str
    users: int
    seconds: float  # the steady stretch measured
    requests: int
    failures: int
    cpu_s: float  # the process's user + system CPU over that stretch
    requests_per_s: float
    requests_per_core_s: float  # requests per second of one fully used core


def generator_capacity(
    protocol: str,
    address: str,
    model_name: str,
    *,
    users: int = 16,
    seconds: float = 6.0,
    settle_s: float = 2.0,
) -> GeneratorCapacity:
    """`users` of `protocol`'s locust user against `address`, in a process of their own, measured
    over `seconds` after `settle_s`. Raises RuntimeError when the users send nothing or meet
    failures, or the process fails."""
    command = [
        sys.executable, "-m", "bench.generator", protocol, address, model_name,
        "--users", str(users), "--seconds", str(seconds), "--settle", str(settle_s),
    ]  # fmt: skip
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=settle_s + seconds + 120, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"the {protocol} generator exited with code {done.returncode}: {done.stderr[-600:]}"
        )
    result = GeneratorCapacity(**json.loads(done.stdout.strip().splitlines()[-1]))
    if result.requests <= 0 or result.failures:
        raise RuntimeError(
            f"the {protocol} generator sent {result.requests} requests, {result.failures} "
            f"failed: {done.stderr[-600:]}"
        )
    return result


def _measure(
    protocol: str, address: str, model_name: str, users: int, seconds: float, settle_s: float
) -> GeneratorCapacity:
    """In this process: start the users, let them settle, measure CPU and requests over
    `seconds`, stop them."""
    import gevent
    from locust.env import Environment

    from graphserve.loadtest import locustfile

    user_class = getattr(locustfile, USERS[protocol])
    host = address if protocol == "grpc" else f"http://{address}"
    env = Environment(user_classes=[user_class], host=host, events=locustfile.events)
    env.parsed_options = argparse.Namespace(
        model_name=model_name, signature_name="serving_default", payload_file="", batch_size=1,
        seed=0, max_requests=0, allow_remote=False, headless=True,
    )  # fmt: skip
    env.events.init.fire(environment=env, runner=None, web_ui=None)
    runner = env.create_local_runner()
    runner.start(users, spawn_rate=users)
    gevent.sleep(settle_s)
    total = env.stats.total
    cpu0, wall0 = time.process_time(), time.monotonic()
    requests0, failures0 = total.num_requests, total.num_failures
    gevent.sleep(seconds)
    cpu1, wall1 = time.process_time(), time.monotonic()
    requests, failures = total.num_requests - requests0, total.num_failures - failures0
    runner.quit()
    cpu_s, wall_s = cpu1 - cpu0, wall1 - wall0
    return GeneratorCapacity(
        protocol=protocol,
        users=users,
        seconds=wall_s,
        requests=requests,
        failures=failures,
        cpu_s=cpu_s,
        requests_per_s=requests / wall_s,
        requests_per_core_s=requests / cpu_s if cpu_s > 0 else 0.0,
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.generator", description=__doc__)
    parser.add_argument("protocol", choices=sorted(USERS))
    parser.add_argument("address", help="HOST:PORT of the server (gRPC or REST port)")
    parser.add_argument("model_name")
    parser.add_argument("--users", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--settle", type=float, default=2.0)
    args = parser.parse_args()
    result = _measure(
        args.protocol, args.address, args.model_name, args.users, args.seconds, args.settle
    )
    print(json.dumps(result.to_json()))


if __name__ == "__main__":
    main()
