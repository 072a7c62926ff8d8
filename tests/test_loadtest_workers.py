"""Load-test workers that join from elsewhere: `graphserve loadtest worker` processes connect to
the master of `loadtest compare --expect-workers N` over TCP (loopback here, exactly as a remote
machine would), get the plan and the request over locust's messaging, and send every request's
record back. A worker killed mid-run is named in the report with the windows it missed."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import psutil
import pytest
from typer.testing import CliRunner

from graphserve.core.processes import free_port
from graphserve.loadtest.cli import app
from graphserve.loadtest.generator.workers import workers_section
from graphserve.loadtest.results.plan import ArmTarget, Plan
from graphserve.loadtest.results.run import CpuSpread, LostAt, WindowRef

_SHORT = ["--warmup", "0.5s", "--window", "1s"]


@pytest.fixture(scope="module")
def graph_server(mlp_export):  # type: ignore[no-untyped-def]
    from graphserve.serving import ModelRegistry, ModelServer, ServerOptions

    registry = ModelRegistry()
    registry.load_graph("mlp", mlp_export.model_dir)
    with ModelServer(registry, ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0)) as s:
        yield f"127.0.0.1:{s.grpc_port}"


def _worker(port: int, *extra: str) -> subprocess.Popen[bytes]:
    """`graphserve loadtest worker`, as a user on another machine would start it."""
    command = [sys.executable, "-m", "graphserve", "loadtest", "worker", "--master-host",
               "127.0.0.1", "--master-port", str(port), *extra]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _stop(workers: list[subprocess.Popen[bytes]], terminate: bool = False) -> list[int]:
    """The workers' exit codes: they end with the run by themselves, or are ended here."""
    if terminate:
        for worker in workers:
            worker.terminate()
    codes = []
    for worker in workers:
        try:
            codes.append(worker.wait(timeout=30))
        except subprocess.TimeoutExpired:
            worker.kill()
            codes.append(worker.wait())
    return codes


def _compare(address: str, port: int, out: Path, *options: str) -> Any:
    return CliRunner().invoke(
        app,
        ["compare", "--arm", f"a={address}", "--arm", f"b={address}", "--model-name", "mlp",
         "--master-bind-port", str(port), "--out", str(out), *options],
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------


def test_the_plan_travels_as_plain_data() -> None:
    plan = Plan(
        arms=(ArmTarget("graph", "127.0.0.1:1", "127.0.0.1:1", None),),
        protocol="grpc",
        body_file="/nowhere/request.bin",
        rest_path="/v1/models/m:predict",
        model_name="m",
        mode="open",
        loads=(10.0, 20.0),
        out_dir="/nowhere",
        workers=3,
        workers_timeout_s=7.0,
    )
    assert Plan.from_dict(plan.to_dict()) == plan
    assert Plan.from_dict({**plan.to_dict(), "a_later_field": 1}) == plan


def _document(lost: float | None) -> dict[str, Any]:
    def phase(seq: int, kind: str, step: int, window: int, arm: int, start: float) -> Any:
        end = start + (0.5 if kind == "idle" else 1.0)
        return dict(seq=seq, kind=kind, step=step, window=window, arm=arm, started=start, ended=end)

    phases = [
        phase(1, "warmup", 0, -1, 0, 100.0),
        phase(2, "window", 0, 0, 0, 101.0),
        phase(3, "window", 0, 0, 1, 102.0),
        phase(4, "window", 0, 1, 1, 103.0),
        phase(5, "idle", 1, -1, -1, 104.0),
    ]
    node = {"host": "far", "pid": 7, "cpus": 4, "joined": 99.5, "last_seen": 102.4}
    return {
        "phases": phases,
        "expected_workers": 2,
        "nodes": {"w1": {**node, "lost": lost}, "w2": {**node, "pid": 8, "last_seen": 104.2}},
        "cpu": {"2": {"w1": 50.0, "w2": 60.0}, "3": {"w1": 70.0, "w2": 40.0}, "4": {"w2": 80.0}},
        "machine_cpu": {"2": {"w1": 90.0, "w2": 90.0}},
    }


def test_a_lost_worker_is_named_with_the_windows_it_missed() -> None:
    section = workers_section(_document(lost=106.0), ["graph", "eager"], remote=True)
    assert section is not None
    assert section.expected == 2 and section.mode == "remote"
    lost, kept = section.nodes
    assert lost.id == "w1" and lost.joined_s == -0.5 and lost.lost_s == 2.4
    assert lost.lost_at == LostAt(step=0, arm="eager", window=0, kind="window")
    # Alive until 102.4: the window that ended at 102 was whole, the next two were not.
    assert lost.missed_windows == [
        WindowRef(step=0, arm="eager", window=0),
        WindowRef(step=0, arm="eager", window=1),
    ]
    assert lost.cpu_pct == CpuSpread(mean=50.0, max=50.0)  # the windows it ran whole
    assert kept.lost_s is None and kept.missed_windows == [] and kept.lost_at is None
    assert kept.cpu_pct == CpuSpread(mean=60.0, max=80.0)
    assert kept.machine_cpu_pct == CpuSpread(mean=90.0, max=90.0)


def test_no_workers_no_section() -> None:
    document = {"phases": [], "expected_workers": 0, "nodes": {}}
    assert workers_section(document, ["graph"], remote=False) is None


# ---------------------------------------------------------------------------------------------
# Real runs: locust master and workers over TCP on loopback


@pytest.mark.slow
def test_remote_workers_join_and_carry_the_whole_load(graph_server: str, tmp_path: Path) -> None:
    port = free_port()
    workers = [_worker(port), _worker(port)]
    try:
        result = _compare(graph_server, port, tmp_path, "--users", "4", "--expect-workers", "2",
                          "--min-windows", "2", "--max-windows", "2", *_SHORT)  # fmt: skip
    finally:
        codes = _stop(workers)
    assert result.exit_code == 0, result.output
    assert codes == [0, 0]  # the workers end with the run, by themselves
    report = json.loads((tmp_path / "report.json").read_text())
    schema = Path(__file__).parent.parent / "docs" / "report.schema.json"
    jsonschema.validate(report, json.loads(schema.read_text()))  # the published shape
    section = report["workers"]
    assert section["expected"] == 2 and section["mode"] == "remote"
    markdown = (tmp_path / "report.md").read_text()
    assert "## Load generator" in markdown and "2 of 2 locust workers (joined from" in markdown
    for node in section["nodes"]:
        assert f"| {node['host']} | {node['pid']} | {node['cpus']} |" in markdown
    assert report["settings"]["expect_workers"] == 2 and report["settings"]["workers"] == 0
    nodes = section["nodes"]
    assert len(nodes) == 2 and len({n["pid"] for n in nodes}) == 2
    assert {n["host"] for n in nodes} == {socket.gethostname()}
    for node in nodes:
        assert node["lost_s"] is None and node["missed_windows"] == []
        assert node["cpus"] == os.cpu_count() and node["cpu_pct"]["mean"] > 0
        assert 0 < node["machine_cpu_pct"]["max"] <= 100
    # Every request came from the workers: the master sends none, and both workers sent some.
    with np.load(tmp_path / "raw" / "records.npz") as records:
        assert int(records["ok"].sum()) == records["ok"].size > 0
    step = report["steps"][0]["arms"]
    assert step["a"]["measured_requests"] > 0 and step["b"]["measured_requests"] > 0
    document = json.loads((tmp_path / "raw" / "phases.json").read_text())
    windows = [p for p in document["phases"] if p["kind"] == "window"]
    assert all(len(p["workers"]) == 2 for p in windows)
    assert all(len(document["cpu"][str(p["seq"])]) == 2 for p in windows)  # both sent records


@pytest.mark.slow
def test_missing_workers_fail_naming_who_came(graph_server: str, tmp_path: Path) -> None:
    port = free_port()
    workers = [_worker(port)]
    started = time.monotonic()
    # Long enough for the one worker to start and join on a loaded 2-core CI machine (it needs
    # two interpreters' imports: at 4 s it once had not joined, and the message said "0 joined").
    try:
        result = _compare(graph_server, port, tmp_path, "--users", "2", "--expect-workers", "2",
                          "--workers-timeout", "20s", *_SHORT)  # fmt: skip
    finally:
        _stop(workers, terminate=True)
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert "waited 20 s for 2 load-test workers; 1 joined:" in text
    assert f"{socket.gethostname()} (pid " in text
    assert f"--master-port {port}" in text
    assert time.monotonic() - started < 80


@pytest.mark.slow
def test_a_worker_refuses_remote_targets_without_its_own_allow_remote(
    mlp_export, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from graphserve.loadtest.generator.payloads import save_payload

    payload = tmp_path / "payload.npz"
    save_payload(payload, {"x": np.zeros((1, 4), np.float32)})
    port = free_port()
    workers = [_worker(port)]
    try:
        # 192.0.2.1 is TEST-NET-1: nothing is sent to it, the worker refuses before any load.
        result = CliRunner().invoke(
            app,
            ["compare", "--arm", "far=192.0.2.1:8500", "--model-name", "mlp", "--allow-remote",
             "--payload-file", str(payload), "--users", "1", "--expect-workers", "1",
             "--master-bind-port", str(port), "--out", str(tmp_path / "out"), *_SHORT],
        )  # fmt: skip
    finally:
        _stop(workers, terminate=True)
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert "refused the run" in text and "192.0.2.1:8500" in text and "--allow-remote" in text


@pytest.mark.slow
@pytest.mark.parametrize(
    "load",
    [
        ("--users", "4", "--window", "1s", "--min-windows", "6", "--max-windows", "6"),
        ("--rate", "300", "--max-in-flight", "4", "--window", "2s", "--max-windows", "4"),
    ],
    ids=["closed", "open"],
)
def test_a_worker_killed_mid_run_is_named_and_the_load_holds(
    graph_server: str, tmp_path: Path, load: tuple[str, ...]
) -> None:
    port = free_port()
    remote = _worker(port)
    killed: dict[str, Any] = {}

    def kill_after_the_second_window() -> None:
        events = tmp_path / "events.jsonl"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            text = events.read_text() if events.exists() else ""
            lines = text.split("\n")[:-1]  # complete lines only: the master may be writing
            phases = [json.loads(line) for line in lines if '"event": "phase"' in line]
            windows = [phase for phase in phases if phase["kind"] == "window"]
            if len(windows) >= 2:
                # Mid-window: the master notices 3-4 s later (heartbeats), mid-window again.
                time.sleep(1.0)
                child = psutil.Process(remote.pid).children()[0]  # the locust worker process
                killed["pid"], killed["at"] = child.pid, time.time()
                os.kill(child.pid, signal.SIGKILL)  # as a machine that dies: no goodbye
                return
            time.sleep(0.1)

    killer = threading.Thread(target=kill_after_the_second_window, daemon=True)
    killer.start()
    try:
        result = _compare(graph_server, port, tmp_path, "--warmup", "0.5s", "--workers", "1",
                          "--expect-workers", "1", *load)  # fmt: skip
    finally:
        killer.join(timeout=5)
        codes = _stop([remote])
    assert result.exit_code == 0, result.output
    assert "pid" in killed and codes == [1]  # its locust process died; the command says so
    report = json.loads((tmp_path / "report.json").read_text())
    nodes = {n["pid"]: n for n in report["workers"]["nodes"]}
    assert len(nodes) == 2
    lost, kept = nodes[killed["pid"]], next(n for p, n in nodes.items() if p != killed["pid"])
    assert lost["lost_s"] is not None and lost["lost_at"]["kind"] == "window"
    missed = lost["missed_windows"]
    assert missed and missed[0] == {k: lost["lost_at"][k] for k in ("step", "arm", "window")}
    assert kept["lost_s"] is None and kept["missed_windows"] == []
    markdown = " ".join((tmp_path / "report.md").read_text().split())
    assert f"(pid {killed['pid']}) was lost" in markdown
    first = missed[0]
    assert f"Windows it missed: {first['arm']} {first['window'] + 1} (step 1)" in markdown
    document = json.loads((tmp_path / "raw" / "phases.json").read_text())
    windows = [p for p in document["phases"] if p["kind"] == "window"]
    # After the master noticed, the phases list one worker, and the one left carries all four
    # users' requests in them: the load did not shrink.
    after = [p for p in windows if p["workers"] == [kept["id"]]]
    assert after, "the loss was never noticed"
    assert all(p["running_users"] == 4 for p in after[1:])  # locust moved the lost users
    if "--rate" in load:  # and the one left sends the whole rate from the next phase on
        arms = report["steps"][0]["arms"]
        rates = {
            (name, w["index"]): w["throughput_rps"] for name in arms for w in arms[name]["windows"]
        }
        names = list(arms)
        for phase in after[1:]:
            assert rates[(names[phase["arm"]], phase["window"])] > 0.85 * 300, rates
        # In the phase the loss was noticed in, the worker left took the whole rate at once.
        noticed = document["nodes"][lost["id"]]["lost"]
        during = next(p for p in windows if p["started"] <= noticed < p["ended"])
        if during["ended"] - noticed > 0.3:
            with np.load(tmp_path / "raw" / "records.npz") as records:
                late = (records["seq"] == during["seq"]) & (records["start"] > noticed + 0.1)
                rate = int(late.sum()) / (during["ended"] - noticed - 0.1)
            assert rate > 0.85 * 300, rate
    with np.load(tmp_path / "raw" / "records.npz") as records:
        seqs = records["seq"]
        for phase in after:
            assert int((seqs == phase["seq"]).sum()) > 0
    last_seen = document["phases"][0]["started"] + lost["lost_s"]
    assert len(missed) == sum(1 for p in windows if p["ended"] > last_seen + 1e-3)
