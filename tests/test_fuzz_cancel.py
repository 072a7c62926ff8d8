"""Clients that give up on their requests at random moments, against a real batching
`graphserve serve graph` (tools/fuzz/cancel.py), for a few seconds.

The script as `make fuzz` runs it, as a command, on the threaded gRPC front end (`make fuzz`
runs the default, asyncio): it must pass its own checks (exit 0), and its JSON summary must hold
the invariants the manual's figures rely on. Which figures a short run reaches is not checked,
only that they add up.

`make fuzz` runs it for longer (tools/bench/results/cancel.json).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def summary(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("fuzz-cancel") / "cancel.json"
    args = ["--duration", "3s", "--seed", "7", "--grpc-front-end", "threads", "--out", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", "tools.fuzz.cancel", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    return dict(json.loads(out.read_text()))


def test_every_answer_is_right_and_nothing_is_left_behind(summary: dict[str, Any]) -> None:
    assert summary["passed"] is True and summary["violations"] == []
    assert summary["wrong"] == summary["crashes"] == 0
    assert summary["threads"]["leaked"] == summary["fds"]["leaked"] == 0
    assert summary["threads"]["after"] == summary["threads"]["baseline"]
    assert summary["server"]["grpc_front_end"] == "threads"
    assert summary["seed"] == 7


def test_the_clients_counts_add_up(summary: dict[str, Any]) -> None:
    mine = summary["by_protocol"]
    for key in ("sent", "answered", "wrong"):
        assert summary[key] == mine["grpc"][key] + mine["rest"][key]
    assert summary["cancelled_by_client"] == mine["grpc"]["cancelled"] + mine["rest"]["cancelled"]
    given_up = summary["cancelled_by_client"] + summary["deadline_exceeded_at_client"]
    assert summary["sent"] == summary["answered"] + given_up + summary["wrong"]
    assert summary["answered"] > 0 and summary["cancelled_by_client"] > 0
    assert mine["rest"]["deadline_exceeded"] == 0  # REST clients set no deadline


def test_the_server_counted_what_the_clients_did(summary: dict[str, Any]) -> None:
    counts = summary["server_counts"]
    requests = counts["requests"]
    assert set(requests) == {"OK", "CANCELLED", "DEADLINE_EXCEEDED"}
    assert requests["OK"] >= summary["answered"]
    assert sum(requests.values()) <= summary["sent"]
    assert requests["CANCELLED"] <= summary["cancelled_by_client"]
    assert requests["DEADLINE_EXCEEDED"] <= summary["deadline_exceeded_at_client"]
    assert sum(counts["cancelled_by_stage"].values()) == requests["CANCELLED"]
    for protocol, stages in counts["cancelled_by_protocol"].items():
        by_status = counts["requests_by_protocol"][protocol]
        assert sum(stages.values()) == by_status.get("CANCELLED", 0)
        assert by_status.get("OK", 0) >= summary["by_protocol"][protocol]["answered"]


def test_what_waited_was_not_run(summary: dict[str, Any]) -> None:
    """The model ran the requests answered OK and those cancelled while running, and of the
    rest only ones whose deadline passed after their batch was taken."""
    counts = summary["server_counts"]
    requests, batch = counts["requests"], counts["batch"]
    ran_anyway = requests["OK"] + counts["cancelled_by_stage"]["running"]
    assert ran_anyway <= batch["requests"]
    assert batch["requests"] <= ran_anyway + requests["DEADLINE_EXCEEDED"] - batch["expired"]
    assert batch["cancelled"] <= counts["cancelled_by_stage"]["queue"]
    assert batch["rejected"] == 0
    not_run = summary["not_run"]
    assert not_run["freed_from_the_batch_queue"] == batch["cancelled"] + batch["expired"]
    assert not_run["total"] == (
        not_run["cancelled_waiting_for_a_thread"]
        + not_run["cancelled_before_the_model"]
        + batch["expired"]
    )
    rows = summary["rows"]
    assert rows["run"] == batch["rows"] >= rows["answered"]
    assert rows["run_unread"] == rows["run"] - rows["answered"]
