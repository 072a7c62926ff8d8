"""`graphserve loadtest rollout`: a version swap under steady load, against the real graph server.

The server runs as a user runs it (`graphserve serve graph`, a child process on loopback, its
file system polled every 0.2 s) on a copy of the exported MLP. The rollouts are short and at a
low rate; the assertions are on the report's values (versions, counts, moments present and
ordered, errors by status, gates) and exit codes, never on timings.

The fault: with --push-existing the test is a bad deployer that swaps by restarting the server
(stop it, push the new version, start it again), so for seconds nothing answers; the rollout's
`errors==0` gate must fail (exit 3) and the report must count the errors by status. (Deleting
the old version first is no fault for graphserve's server: it keeps serving the version from
memory until another replaces it.)
"""

from __future__ import annotations

import json
import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from graphserve.core.errors import SloError
from graphserve.core.processes import ServerProcess, free_port
from graphserve.loadtest.cli import app
from graphserve.loadtest.results.rollout import load_rollout
from graphserve.loadtest.results.slo import Gate, parse_gate
from graphserve.loadtest.rollouts.analysis import (
    Moments,
    check_gate_windows,
    check_gates,
    first_requests,
    windows,
)
from graphserve.loadtest.rollouts.run import RolloutSpec, rollout, serving_version
from graphserve.model.warmup import WARMUP_FILE

NAME = "mlp"


# ---------------------------------------------------------------------------------------------
# The gates and the analysis, on records made here


@pytest.mark.parametrize(
    ("text", "gate"),
    [
        ("errors==0", Gate("errors==0", None, False, "errors", "==", 0.0)),
        ("during.errors <= 5", Gate("during.errors <= 5", "during", False, "errors", "<=", 5.0)),
        ("after.p99<50ms", Gate("after.p99<50ms", "after", False, "p99", "<", 50.0)),
    ],
)
def test_error_gates_parse(text: str, gate: Gate) -> None:
    assert parse_gate(text) == gate


@pytest.mark.parametrize("text", ["errors<1ms", "ratio.errors<1", "errors=0"])
def test_error_gates_reject(text: str) -> None:
    with pytest.raises(SloError, match="expected"):
        parse_gate(text)


def test_rollout_gates_name_windows_only() -> None:
    check_gate_windows([parse_gate("during.p99<5ms"), parse_gate("errors==0")])
    with pytest.raises(SloError, match="names 'graph'"):
        check_gate_windows([parse_gate("graph.p99<5ms")])
    with pytest.raises(SloError, match="no baseline"):
        check_gate_windows([parse_gate("ratio.p50<2")])


def _records() -> dict[str, np.ndarray]:
    """10 requests a second for 6 s from t0 = 100: v1 answers until 103, three NOT_FOUND at
    103.0-103.2, v2 from 103.3 (its first answer 50 ms, then 2 ms each)."""
    start = 100.0 + np.arange(60) / 10
    version = np.where(start < 103.0, 1, 2)
    code = np.zeros(60, np.int16)
    code[30:33] = 5  # NOT_FOUND
    version[30:33] = -1
    latency = np.full(60, 1.0)
    latency[33:] = 2.0
    latency[33] = 50.0
    return {
        "start": start,
        "latency_ms": latency,
        "lag_ms": np.zeros(60),
        "code": code,
        "version": version.astype(np.int64),
    }


def test_windows_first_requests_and_gates_from_records() -> None:
    records = _records()
    moments = Moments(t0=100.0, old_version=1, new_version=2, swap_start=103.0, swap_end=103.5)
    stats = {w.name: w for w in windows(records, moments, end=106.0, open_loop=True)}
    assert [stats[n].requests for n in ("run", "before", "during", "after")] == [60, 30, 5, 25]
    assert stats["during"].errors == 3
    assert stats["during"].errors_by_status == {"NOT_FOUND": 3}
    assert stats["during"].versions == {"2": 2}
    assert stats["before"].versions == {"1": 30}
    assert stats["before"].latency_ms.p99 == 1.0
    assert stats["run"].throughput_rps == pytest.approx(57 / 6)

    first = first_requests(records, 2, True, "x", first=5, steady=10)
    assert first.count == 27
    assert first.first_ms == [50.0, 2.0, 2.0, 2.0, 2.0]
    assert first.first_request_ms == 50.0
    assert first.steady_p50_ms == 2.0
    assert first.steady_requests == 10
    assert first.first_over_steady == 25.0

    gates = [parse_gate(g) for g in ("errors==0", "before.errors==0", "after.p99<1.5ms")]
    slo = check_gates(gates, list(stats.values()))
    assert slo is not None
    assert [(g.window, g.value, g.passed) for g in slo.gates] == [
        ("run", 3.0, False),
        ("before", 0.0, True),
        ("after", 2.0, False),
    ]
    assert not slo.passed


# ---------------------------------------------------------------------------------------------
# Refused before any load


def test_a_target_off_loopback_is_refused(mlp_export: Any, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["rollout", "--address", "10.1.2.3:8500", "--model-base-path", str(mlp_export.model_dir),
         "--new-version", str(mlp_export.version_dir), "--out", str(tmp_path / "out")],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "loopback" in result.output
    assert not (tmp_path / "out").exists()


def test_bad_arguments_exit_2(mlp_export: Any, tmp_path: Path) -> None:
    base = ["rollout", "--address", "127.0.0.1:1", "--model-base-path", str(mlp_export.model_dir)]
    not_a_model = CliRunner().invoke(app, [*base, "--new-version", str(tmp_path)])
    assert not_a_model.exit_code == 2
    # the message sits in an error box that wraps at 80 columns: read it without the box
    message = " ".join(re.sub(r"[│╭╮╰╯─]", " ", not_a_model.output).split())
    assert "not a SavedModel" in message
    neither = CliRunner().invoke(app, base)
    assert neither.exit_code == 2
    both = CliRunner().invoke(
        app, [*base, "--new-version", str(mlp_export.version_dir), "--rate", "5", "--users", "2"]
    )
    assert both.exit_code == 2
    bad_gate = CliRunner().invoke(
        app, [*base, "--new-version", str(mlp_export.version_dir), "--slo", "graph.p99<5ms"]
    )
    assert bad_gate.exit_code == 2, bad_gate.output


@pytest.mark.slow
def test_an_unreachable_server_exits_1(mlp_export: Any, tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    result = CliRunner().invoke(
        app,
        ["rollout", "--address", address, "--model-base-path", str(mlp_export.model_dir),
         "--new-version", str(mlp_export.version_dir), "--out", str(tmp_path / "out")],
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert f"cannot reach a TF Serving gRPC API at {address}" in result.output


# ---------------------------------------------------------------------------------------------
# Real rollouts


@pytest.fixture(scope="module")
def served(
    mlp_export: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerProcess, Path]]:
    """The graph server on BASE/mlp, which holds a copy of the exported MLP as version 1; one
    for the module (a start costs seconds), so each test rolls from the version it finds."""
    root = tmp_path_factory.mktemp("rollout")
    base = root / "models" / NAME
    base.mkdir(parents=True)
    shutil.copytree(mlp_export.version_dir, base / "1")
    args = ["graph", "--model-base-path", str(base), "--model-name", NAME,
            "--file_system_poll_wait_seconds", "0.2"]  # fmt: skip
    server = ServerProcess.on_free_ports(args, NAME, log_path=root / "server.log")
    with server:
        yield server, base


@pytest.mark.slow
def test_rollouts_with_and_without_warmup_records(
    served: tuple[ServerProcess, Path], mlp_export: Any, tmp_path: Path
) -> None:
    server, base = served
    old = serving_version(server.grpc_address, NAME)  # 1 when this test runs first
    assert (mlp_export.version_dir / WARMUP_FILE).is_file()
    out = tmp_path / "warm"
    result = CliRunner().invoke(
        app,
        ["rollout", "--address", server.grpc_address, "--model-base-path", str(base),
         "--new-version", str(mlp_export.version_dir), "--rate", "40", "--before", "2s",
         "--after", "3s", "--slo", "errors==0,p99<10s", "--slo", "during.errors<=0",
         "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output + server.log_tail()
    assert "SLO: passed" in result.output
    for name in ("rollout.md", "rollout.json", "rollout.html", "rollout.png", "raw/records.npz"):
        assert (out / name).is_file(), name
    assert (out / "rollout.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = (out / "rollout.html").read_text()
    assert "data:image/png;base64," in html and "<script" not in html
    markdown = (out / "rollout.md").read_text()
    assert "## Before, during and after" in markdown and "has warm-up records" in markdown
    # `loadtest report OUT` renders a rollout's pages again from its rollout.json
    (out / "rollout.html").unlink()
    rendered = CliRunner().invoke(app, ["report", str(out)])
    assert rendered.exit_code == 0, rendered.output
    assert (out / "rollout.md").read_text() == markdown
    assert "data:image/png;base64," in (out / "rollout.html").read_text()

    report = load_rollout(out / "rollout.json")
    swap = report.swap
    assert (swap.old_version, swap.new_version, swap.completed, swap.note) == (
        old,
        old + 1,
        True,
        "",
    )
    assert (base / str(old + 1) / "saved_model.pb").is_file()
    assert not [p for p in base.iterdir() if p.name.startswith(".tmp-")]  # renamed into place
    assert swap.time_to_available_s is not None and swap.time_to_available_s > 0
    assert swap.old_unloaded_after_s is not None and swap.old_unloaded_after_s > 0
    assert swap.pushed_s is not None and swap.pushed_s >= 2.0  # after --before
    assert swap.new_available_s is not None and swap.new_available_s >= swap.pushed_s
    assert swap.both_available_s is not None and swap.both_answered_s is not None
    states = {(c.version, c.state) for c in report.statuses}
    assert {(old, "AVAILABLE"), (old + 1, "AVAILABLE"), (old, "END")} <= states
    run = report.window("run")
    assert run is not None
    assert run.requests > 0 and run.answered == run.requests and run.errors == 0
    assert report.errors == {}
    v_old, v_new = str(old), str(old + 1)
    assert run.versions[v_old] > 0 and run.versions[v_new] > 0
    assert set(run.versions) == {v_old, v_new}
    before, after = report.window("before"), report.window("after")
    assert before is not None and after is not None
    assert set(before.versions) == {v_old} and set(after.versions) == {v_new}
    assert report.slo is not None and report.slo.passed
    assert [g.window for g in report.slo.gates] == ["run", "run", "during"]
    assert sum(s.requests for s in report.timeline) == run.requests
    warm = report.new_version
    assert warm is not None and warm.version == old + 1 and warm.has_warmup is True
    assert warm.count == run.versions[v_new]
    assert warm.first_request_ms is not None and warm.steady_p50_ms is not None
    assert len(warm.first_ms) == min(20, warm.count)

    # The same swap without warm-up records, closed loop, through the library.
    cold_dir = tmp_path / "cold"
    shutil.copytree(mlp_export.version_dir, cold_dir)
    (cold_dir / WARMUP_FILE).unlink()
    spec = RolloutSpec(
        address=server.grpc_address, model_base_path=base, new_version=cold_dir, users=2,
        before_s=1.0, after_s=2.0, slo=("errors==0",),
    )  # fmt: skip
    cold = rollout(spec, tmp_path / "cold-out")
    assert (cold.swap.old_version, cold.swap.new_version) == (old + 1, old + 2)
    assert cold.swap.completed
    assert cold.settings.mode == "closed" and cold.settings.load == 2
    assert cold.slo is not None and cold.slo.passed
    first = cold.new_version
    assert first is not None and first.has_warmup is False
    assert first.warmup_file == str(cold_dir / WARMUP_FILE)
    assert first.count > 0 and first.first_request_ms is not None
    assert first.steady_p50_ms is not None and first.first_over_steady is not None
    assert "has no warm-up records" in (tmp_path / "cold-out" / "rollout.md").read_text()


@pytest.mark.slow
def test_a_swap_that_drops_requests_fails_its_gate(
    served: tuple[ServerProcess, Path], mlp_export: Any, tmp_path: Path
) -> None:
    server, base = served
    old = serving_version(server.grpc_address, NAME)
    out = tmp_path / "out"
    deployer = threading.Thread(
        target=_bad_deployer, args=(out, server, base / str(old + 1), mlp_export.version_dir)
    )
    deployer.start()
    try:
        result = CliRunner().invoke(
            app,
            ["rollout", "--address", server.grpc_address, "--model-base-path", str(base),
             "--push-existing", "--rate", "40", "--before", "1s", "--after", "2s",
             "--timeout", "30s", "--slo", "errors==0", "--out", str(out)],
        )  # fmt: skip
    finally:
        deployer.join(timeout=60)
    assert result.exit_code == 3, result.output + server.log_tail()
    assert "SLO missed: errors==0" in result.output
    report = json.loads((out / "rollout.json").read_text())
    swap = report["swap"]
    assert (swap["old_version"], swap["new_version"], swap["completed"]) == (old, old + 1, True)
    assert swap["pushed_s"] is None  # pushed by someone else
    assert swap["swap_start_s"] <= swap["old_unloaded_s"] <= swap["new_available_s"]
    states = [(c["version"], c["state"]) for c in report["statuses"]]
    assert (None, "NO ANSWER") in states and (None, "ANSWERS") in states
    assert (old, "GONE") in states and (old + 1, "AVAILABLE") in states
    run = next(w for w in report["windows"] if w["name"] == "run")
    assert run["errors"] > 0
    assert run["errors_by_status"] == report["errors"]
    assert "UNAVAILABLE" in report["errors"]
    assert sum(report["errors"].values()) == run["errors"]
    # Most fail while nothing answers; a few as the server drains before GetModelStatus
    # stops answering, and a few after, while the clients' channels wait to reconnect.
    during = next(w for w in report["windows"] if w["name"] == "during")
    assert during["errors"] > run["errors"] / 2
    (gate,) = report["slo"]["gates"]
    assert (gate["expression"], gate["passed"]) == ("errors==0", False)
    assert gate["value"] == run["errors"]
    assert "Errors by status" in (out / "rollout.md").read_text()


def _bad_deployer(out: Path, server: ServerProcess, new: Path, version_dir: Path) -> None:
    """Waits for the rollout to ask for a push, then swaps by a restart: stops the server,
    pushes the new version (whole, by a rename) and starts the server again, same ports."""
    events = out / "events.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if events.exists() and "waiting_for_push" in events.read_text():
            break
        time.sleep(0.05)
    else:
        return
    server.stop()
    staging = new.parent.parent / f"staging-{new.name}"
    shutil.copytree(version_dir, staging)
    staging.rename(new)
    server.start()  # loads the newest version only


# ---------------------------------------------------------------------------------------------
# Under recorded traffic


@pytest.fixture(scope="module")
def mixed(mlp_export: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """30 requests of 1 to 4 rows for the mlp (`graphserve traffic make`)."""
    from graphserve.cli import app as root

    path = tmp_path_factory.mktemp("rollout-traffic") / "mixed.tfrecord"
    made = CliRunner().invoke(root, ["traffic", "make", str(mlp_export.model_dir),
                                     "--out", str(path), "--count", "30",
                                     "--batch-sizes", "1-4"])  # fmt: skip
    assert made.exit_code == 0, made.output
    return path


def _moved_bias(version_dir: Path, out: Path) -> Path:
    """A copy of the mlp whose one output bias moved by 1."""
    import tensorflow as tf

    loaded = tf.saved_model.load(str(version_dir))
    serving = loaded.signatures["serving_default"]
    bias = next(v for v in serving.variables if v.shape == (10,))
    bias.assign_add(tf.one_hot(3, 10))
    tf.saved_model.save(loaded, str(out), signatures={"serving_default": serving})
    return out


@pytest.mark.slow
def test_a_rollout_under_recorded_traffic_says_whether_the_new_version_answers_alike(
    served: tuple[ServerProcess, Path], mlp_export: Any, mixed: Path, tmp_path: Path
) -> None:
    server, base = served

    def roll(new: Path, out: Path) -> tuple[int, str]:
        result = CliRunner().invoke(app, [
            "rollout", "--address", server.grpc_address, "--model-base-path", str(base),
            "--new-version", str(new), "--rate", "60", "--before", "2s", "--after", "2s",
            "--traffic", str(mixed), "--slo", "errors==0", "--slo", "answers.mismatch==0",
            "--out", str(out),
        ])  # fmt: skip
        return result.exit_code, result.output + server.log_tail()

    # the same model again: every record answered alike by both versions
    code, output = roll(mlp_export.version_dir, tmp_path / "same")
    assert code == 0, output
    same = load_rollout(tmp_path / "same" / "rollout.json")
    assert same.answers is not None and same.answers.records == 30
    assert same.answers.new_version == same.answers.old_version + 1
    assert 0 < same.answers.compared <= 30 and same.answers.mismatched == 0
    assert same.slo is not None and [g.window for g in same.slo.gates] == ["run", "answers"]
    records = np.load(tmp_path / "same" / "raw" / "records.npz")["record"]
    assert set(records.tolist()) == set(range(30))  # in order, cycling: every record sent
    # one bias moved: every record both answered differs, the gate fails (exit 3)
    code, output = roll(
        _moved_bias(mlp_export.version_dir, tmp_path / "moved"), tmp_path / "moved-out"
    )
    assert code == 3, output
    assert "answers.mismatch==0" in output
    moved = load_rollout(tmp_path / "moved-out" / "rollout.json")
    assert moved.answers is not None and moved.answers.compared > 0
    assert moved.answers.mismatched == moved.answers.compared
    assert moved.answers.worst and moved.answers.worst[0]["output"] == "logits"
    assert 0.99 < moved.answers.outputs[0]["max_abs_error"] < 1.01
    page = (tmp_path / "moved-out" / "rollout.md").read_text()
    assert f"## Answers: v{moved.answers.new_version} against v{moved.answers.old_version}" in page


def test_rollout_traffic_that_cannot_be_sent_exits_2(
    mlp_export: Any, mixed: Path, tmp_path: Path
) -> None:
    from graphserve.cli import app as root

    with ServerProcess.on_free_ports(
        ["graph", "--model-base-path", str(mlp_export.model_dir), "--model-name", NAME],
        NAME, log_path=tmp_path / "server.log",
    ) as server:  # fmt: skip
        for args, said in (
            (["--traffic", str(tmp_path / "none.tfrecord")], "no such file"),
            (["--traffic", str(mixed), "--traffic-model", "bert"],
             "no predict request of model 'bert' (the file holds 30 predict of 'mlp' "
             "(serving_default))"),
        ):  # fmt: skip
            result = CliRunner().invoke(root, [
                "loadtest", "rollout", "--address", server.grpc_address, "--model-base-path",
                str(mlp_export.model_dir), "--new-version", str(mlp_export.version_dir),
                "--out", str(tmp_path / "out"), *args,
            ])  # fmt: skip
            assert result.exit_code == 2, result.output
            assert said in " ".join(result.output.split())
    result = CliRunner().invoke(app, [
        "rollout", "--address", "127.0.0.1:1", "--model-base-path", str(mlp_export.model_dir),
        "--new-version", str(mlp_export.version_dir), "--slo", "answers.mismatch==0",
    ])  # fmt: skip
    assert result.exit_code == 2 and "with --traffic FILE only" in result.output
