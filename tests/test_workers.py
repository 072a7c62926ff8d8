"""`serve --workers N`: N processes on one pair of ports, behaving as one server.

Real servers started the way a user starts them (`python -m graphserve serve ... --workers 2`),
real gRPC stubs and HTTP: answers over both APIs from both workers, one metrics page summing them,
version swaps that every worker makes together, a worker killed with SIGKILL under traffic and
replaced, SIGTERM stopping them all, and the refusals.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from graphserve.cli import app
from graphserve.core import client
from graphserve.core.client import GrpcClient, RestClient
from graphserve.core.defaults import DEFAULT_METRICS_PATH
from graphserve.core.processes import ServerProcess
from graphserve.exporter import ExportSpec, export_model, parse_input_spec

X = np.array([[1.0, 1.0, 1.0]], dtype=np.float32)
SCORES = [[3.75, 0.0]]  # tests.factories.Affine at X
START_LINE = re.compile(r"(\d+) workers \(pids ([\d, ]+)\)")


def _export(base: Path, version: int) -> Path:
    spec = ExportSpec(
        source="tests.factories:affine",
        name="affine",
        base_path=base,
        version=version,
        inputs=[parse_input_spec("x:float32:-1,3")],
        parity_batches=1,
        warmup_samples=1,
    )
    return export_model(spec).path


def _wait_for(check: Callable[[], object], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Workers(ServerProcess):
    """A server with workers: ready once its start line names them all."""

    def is_ready(self) -> bool:
        return self.log_path.exists() and START_LINE.search(self.log_path.read_text()) is not None

    def pids(self) -> list[int]:
        found = START_LINE.search(self.log_path.read_text())
        assert found is not None
        return [int(p) for p in found.group(2).split(", ")]


def _workers(args: list[str], name: str, log: Path, count: int = 2) -> Workers:
    server = Workers.on_free_ports([*args, "--workers", str(count)], name, log)
    return server  # type: ignore[return-value]


@pytest.fixture
def affine_base(tmp_path: Path) -> Path:
    _export(tmp_path / "models", 1)
    return tmp_path / "models" / "affine"


def _metrics(server: ServerProcess) -> dict[str, list[tuple[dict[str, str], float]]]:
    with RestClient(server.rest_address or "") as rest:
        reply = rest.get(DEFAULT_METRICS_PATH)
    assert reply.status == 200
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(reply.body.decode()):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def _requests(samples: dict[str, list[tuple[dict[str, str], float]]]) -> Counter[str]:
    """OK predict requests counted on the page, by protocol."""
    counted: Counter[str] = Counter()
    for labels, value in samples.get("graphserve_requests_total", []):
        if labels["status"] == "OK":
            counted[labels["protocol"]] += int(value)
    return counted


def _connect(address: str) -> GrpcClient:
    """A client on a connection of its own: the kernel picks the worker per connection, and
    gRPC's channels in one process share their connections unless told not to."""
    channel = grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
    return GrpcClient(channel, timeout=10, owns_channel=True, address=address)


def _grpc_predict(address: str) -> tuple[int, list[list[float]]]:
    """One Predict on a connection of its own."""
    with _connect(address) as grpc_client:
        response = grpc_client.predict(client.predict_request("affine", {"x": X}))
    return response.model_spec.version.value, client.predict_outputs(response)["scores"].tolist()


def test_two_workers_answer_both_apis_and_count_as_one_server(
    affine_base: Path, tmp_path: Path
) -> None:
    server = _workers(
        ["graph", "--model-base-path", str(affine_base), "--metrics"], "affine",
        tmp_path / "server.log",
    )  # fmt: skip
    with server:
        pids = server.pids()
        assert len(set(pids)) == 2 and os.getpid() not in pids
        for _ in range(20):
            assert _grpc_predict(server.grpc_address) == (1, SCORES)
        for _ in range(20):  # a connection each
            with RestClient(server.rest_address or "") as rest:
                reply = rest.predict("affine", {"instances": X.tolist()})
            assert reply.status == 200, reply.body
            np.testing.assert_allclose(reply.json()["predictions"][0]["scores"], SCORES[0])
        with RestClient(server.rest_address or "") as rest:
            status = rest.status("affine").json()
        assert status["model_version_status"][0]["state"] == "AVAILABLE"
        samples = _metrics(server)
        # Every request counted once, whichever worker answered it and whichever serves the page.
        assert _requests(samples) == {"grpc": 20, "rest": 20}
        workers = {labels["worker"] for labels, _ in samples["process_resident_memory_bytes"]}
        assert workers == {"1", "2", "supervisor"}
        memory = {
            labels["worker"]: value for labels, value in samples["process_resident_memory_bytes"]
        }
        # The supervisor holds no model and no TensorFlow: a fraction of a worker.
        assert memory["supervisor"] < memory["1"] / 4, memory
        # Asked again on other connections, the page says the same counts.
        for _ in range(4):
            assert _requests(_metrics(server)) == {"grpc": 20, "rest": 20}


@dataclass
class Traffic:
    answers: list[tuple[float, int]] = field(default_factory=list)  # (sent at, version)
    failures: list[str] = field(default_factory=list)


@contextmanager
def _traffic(address: str, threads: int = 4) -> Iterator[Traffic]:
    """Predict for the newest version from `threads` clients, each on a new channel every 20
    requests (so both workers serve), until the block ends."""
    traffic = Traffic()
    stop = threading.Event()
    request = client.predict_request("affine", {"x": X})

    def drive() -> None:
        while not stop.is_set():
            with _connect(address) as grpc_client:
                for _ in range(20):
                    sent = time.monotonic()
                    try:
                        response = grpc_client.predict(request)
                        np.testing.assert_allclose(
                            client.predict_outputs(response)["scores"], SCORES
                        )
                        traffic.answers.append((sent, response.model_spec.version.value))
                    except grpc.RpcError as exc:
                        traffic.failures.append(f"{exc.code().name}: {exc.details()}")
                    except AssertionError as exc:
                        traffic.failures.append(repr(exc))

    drivers = [threading.Thread(target=drive) for _ in range(threads)]
    for driver in drivers:
        driver.start()
    try:
        yield traffic
    finally:
        stop.set()
        for driver in drivers:
            driver.join()


def _available(address: str) -> set[int]:
    """The versions GetModelStatus says are AVAILABLE, asked on a connection of its own."""
    with _connect(address) as grpc_client:
        statuses = client.version_statuses(grpc_client.status(client.status_request("affine")))
    return {v.version for v in statuses if v.state == "AVAILABLE"}


def test_a_new_version_is_taken_by_every_worker_before_any_reports_it(
    affine_base: Path, tmp_path: Path
) -> None:
    server = _workers(
        ["graph", "--model-base-path", str(affine_base), "--file-system-poll-wait-seconds",
         "1"], "affine", tmp_path / "server.log",
    )  # fmt: skip
    reported: dict[int, float] = {}
    with server:
        # A worker started again polls out of step with the other: each finds a new version
        # at its own moment, up to a poll apart.
        victim = server.pids()[0]
        os.kill(victim, signal.SIGKILL)
        _wait_for(lambda: f"serves in place of pid {victim}" in server.log_tail(50), "restart")
        with _traffic(server.grpc_address) as traffic:
            for version in (2, 3, 4):
                _export(affine_base.parent, version)
                # Asked on a new channel each time: any worker may answer.
                _wait_for(lambda: version in _available(server.grpc_address), f"v{version}")  # noqa: B023
                reported[version] = time.monotonic()
                _wait_for(lambda: _available(server.grpc_address) == {version}, "the old gone")  # noqa: B023
            time.sleep(0.5)
    assert traffic.failures == []
    seen = Counter(version for _, version in traffic.answers)
    assert set(seen) >= {2, 3, 4}, seen
    for version, when in reported.items():
        older = Counter(v for sent, v in traffic.answers if sent > when and v < version)
        assert not older, f"answers from {dict(older)} after version {version} was AVAILABLE"


def test_a_worker_killed_under_traffic_is_replaced_and_its_counts_kept(
    affine_base: Path, tmp_path: Path
) -> None:
    server = _workers(
        ["graph", "--model-base-path", str(affine_base), "--metrics"], "affine",
        tmp_path / "server.log",
    )  # fmt: skip
    with server:
        with _traffic(server.grpc_address, threads=2) as traffic:
            _wait_for(lambda: len(traffic.answers) > 100, "traffic")
            before = sum(_requests(_metrics(server)).values())
            victim = server.pids()[0]
            os.kill(victim, signal.SIGKILL)
            _wait_for(lambda: f"serves in place of pid {victim}" in server.log_tail(50), "restart")
            answered = len(traffic.answers)
            _wait_for(lambda: len(traffic.answers) > answered + 100, "traffic after it")
        log = server.log_path.read_text()
        assert f"(pid {victim}) exited: killed by SIGKILL; starting another in" in log
        # Only what was in flight on the killed worker failed: one request per client at most,
        # and a connection that was waiting for it.
        assert len(traffic.failures) <= 4, traffic.failures
        assert all(f.startswith("UNAVAILABLE") for f in traffic.failures), traffic.failures
        # The counts never go back: the dead worker's are carried into the sums.
        assert sum(_requests(_metrics(server)).values()) >= before
        assert server.process is not None
        alive = [p for p in server.pids() if p != victim]
        assert all(_running(p) for p in alive)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_sigterm_stops_every_worker_and_exits_zero(affine_base: Path, tmp_path: Path) -> None:
    server = _workers(
        ["graph", "--model-base-path", str(affine_base)], "affine", tmp_path / "s.log"
    )
    server.start()
    pids = server.pids()
    assert all(_running(p) for p in pids)
    started = time.monotonic()
    assert server.stop() == 0
    assert time.monotonic() - started < 15
    _wait_for(lambda: not any(_running(p) for p in pids), "the workers to exit", timeout=5)
    assert "SIGTERM: draining and stopping the workers" in server.log_path.read_text()


def test_the_eager_server_serves_with_workers_too(tmp_path: Path) -> None:
    server = _workers(
        ["eager", "tests.factories:affine", "--model-name", "affine", "--input",
         "x:float32:-1,3", "--metrics"], "affine", tmp_path / "server.log",
    )  # fmt: skip
    with server:
        for _ in range(10):
            assert _grpc_predict(server.grpc_address) == (1, SCORES)
        assert _requests(_metrics(server)) == {"grpc": 10}


def test_a_server_whose_workers_cannot_load_does_not_start(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    args = ["graph", "--model-base-path", str(tmp_path / "empty")]
    server = _workers(args, "empty", tmp_path / "s.log")
    with pytest.raises(RuntimeError, match="exited with code 1") as failed:
        server.start(timeout=120)
    message = str(failed.value)
    assert "cannot load" in message
    assert "exited before it served: exit code 1" in message


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workers", "0"], "--workers takes a count of at least 1 or 'auto', not '0'"),
        (["--workers", "two"], "--workers takes a count of at least 1 or 'auto', not 'two'"),
        (["--workers", "2", "--grpc_socket_path", "/tmp/x.sock"], "a Unix socket is bound by one"),
        (["--workers", "2", "--load-on-demand"], "--load-on-demand is not served by --workers yet"),
        (
            ["--workers", "2", "--grpc-channel-arguments", "grpc.so_reuseport=0"],
            "drop grpc.so_reuseport=0",
        ),
    ],
)
def test_worker_counts_and_options_that_cannot_work_are_refused(
    affine_base: Path, args: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # --load-on-demand sets TensorFlow's oneDNN switch where it is unset: not in this process
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1"))
    result = CliRunner().invoke(
        app, ["serve", "graph", "--model-base-path", str(affine_base), *args]
    )
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())


def test_workers_serve_tls_on_both_apis(affine_base: Path, tmp_path: Path) -> None:
    from graphserve.core.tls import ClientTls
    from tests.certs import make_certs

    certs = make_certs(tmp_path / "certs")
    config = certs.ssl_config(tmp_path / "ssl.config")
    server = _workers(
        ["graph", "--model-base-path", str(affine_base), "--ssl_config_file", str(config)],
        "affine", tmp_path / "server.log",
    )  # fmt: skip
    tls = ClientTls(ca=certs.ca)
    with server:
        assert "(TLS)" in server.log_tail(5)
        for _ in range(6):  # a connection each: both workers
            with GrpcClient.connect(server.grpc_address, tls=tls) as grpc_client:
                response = grpc_client.predict(client.predict_request("affine", {"x": X}))
            np.testing.assert_allclose(client.predict_outputs(response)["scores"], SCORES)
            with RestClient(f"https://{server.rest_address}", tls=tls) as rest:
                reply = rest.predict("affine", {"instances": X.tolist()})
            assert reply.status == 200, reply.body
            np.testing.assert_allclose(reply.json()["predictions"][0]["scores"], SCORES[0])
        request = client.predict_request("affine", {"x": X})
        with pytest.raises(grpc.RpcError) as plaintext, _connect(server.grpc_address) as plain:
            plain.predict(request)  # TLS only, in every worker
        assert plaintext.value.code() == grpc.StatusCode.UNAVAILABLE


CONFIG = """
model_config_list {{
{models}
}}
"""
MODEL = 'config {{ name: "{name}" base_path: "{path}" model_platform: "tensorflow" }}'


def _config(path: Path, models: dict[str, Path]) -> None:
    listed = "\n".join(MODEL.format(name=n, path=p) for n, p in models.items())
    path.write_text(CONFIG.format(models=listed))


def test_a_config_file_reloaded_is_applied_by_every_worker(
    affine_base: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    _export(other, 1)
    (other / "affine").rename(other / "second")
    config = tmp_path / "models.config"
    _config(config, {"affine": affine_base})
    server = _workers(
        ["graph", "--model-config-file", str(config),
         "--model-config-file-poll-wait-seconds", "0.3"], "affine", tmp_path / "server.log",
    )  # fmt: skip
    with server:
        _config(config, {"affine": affine_base, "second": other / "second"})
        request = client.predict_request("second", {"x": X})

        def served_everywhere() -> bool:
            for _ in range(8):  # a connection each: both workers must serve it
                with _connect(server.grpc_address) as grpc_client:
                    try:
                        grpc_client.predict(request)
                    except grpc.RpcError:
                        return False
            return True

        _wait_for(served_everywhere, "the second model in every worker")
        _config(config, {"second": other / "second"})

        def removed_everywhere() -> bool:
            for _ in range(8):
                with _connect(server.grpc_address) as grpc_client:
                    try:
                        grpc_client.predict(client.predict_request("affine", {"x": X}))
                    except grpc.RpcError as exc:
                        assert exc.code() == grpc.StatusCode.NOT_FOUND
                        continue
                    return False
            return True

        _wait_for(removed_everywhere, "affine removed from every worker")


def test_a_worker_count_past_max_memory_is_refused_at_start(
    affine_base: Path, tmp_path: Path
) -> None:
    args = ["graph", "--model-base-path", str(affine_base), "--max-memory", "900MB"]
    server = _workers(args, "affine", tmp_path / "s.log", count=3)
    with pytest.raises(RuntimeError, match="exited with code 2") as refused:
        server.start(timeout=120)
    said = " ".join(str(refused.value).split())
    assert re.search(r"3 workers would hold about [\d.]+ [GM]B: worker 1 holds [\d.]+ MB", said)
    assert "past --max-memory 900.00 MB; give --workers 1 or fewer" in said or (
        "one worker alone holds" in said
    ), said


def test_the_start_line_says_what_the_workers_hold(affine_base: Path, tmp_path: Path) -> None:
    args = ["graph", "--model-base-path", str(affine_base), "--max-memory", "64GiB"]
    server = _workers(args, "affine", tmp_path / "s.log")
    with server:
        line = " ".join(server.log_tail(3).split())
        held = re.search(r"2 workers \(pids [\d, ]+\) holding ([\d.]+) (GB|MB) resident", line)
        assert held is not None, line
        assert "each its own copy of the models (the supervisor" in line
        size = float(held.group(1)) * (1e9 if held.group(2) == "GB" else 1e6)
        pids = server.pids()
        from graphserve.core.processes import proc_status

        now = sum(proc_status(p)["VmRSS"] * 1024 for p in pids)
        assert 0.5 * now < size < 2 * now, (size, now)
