"""Every load-test command over TLS and mutual TLS: `loadtest compare` (gRPC and REST, a
worker that joins with its own options), `rollout`, `many`, `tune batching`, against real
servers on loopback serving TF Serving's SSLConfig (certificates made at test time,
tests/certs.py), each run a real `python -m graphserve` process. The failures stop before any
load with the client's reason: a server that asks for a client certificate, TLS on one side only.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from certs import Certs, make_certs

from graphserve.core.batchingparams import BatchingParameters
from graphserve.core.defaults import DEFAULT_METRICS_PATH
from graphserve.core.modelconfig import ModelConfig
from graphserve.core.tls import TLS_ENV, ClientTls, ServerTls
from graphserve.loadtest.generator.targets import check_loopback, dial, scheme_tls, tls_env
from graphserve.loadtest.manymodels.copies import CopiesResult, CopiesSpec, write_copies
from graphserve.loadtest.results.many import load_many
from graphserve.loadtest.results.rollout import load_rollout
from graphserve.loadtest.tune.search import TuneResult
from graphserve.serving.config import load_model_config_file

NAME = "mlp"
_SHORT = ["--warmup", "0.5s", "--window", "0.5s", "--min-windows", "2", "--max-windows", "2"]
_MUTUAL_TLS = "the server asks for a client certificate (mutual TLS): give --tls-cert and --tls-key"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def _client(certs: Certs) -> list[str]:
    """The options of a client that trusts the test CA and has a certificate it signed."""
    return ["--tls-ca", str(certs.ca), "--tls-cert", str(certs.client.cert),
            "--tls-key", str(certs.client.key)]  # fmt: skip


def _loadtest(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """`python -m graphserve ARGS`, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "graphserve", *args],
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def _said(result: subprocess.CompletedProcess[str]) -> str:
    """What a run printed, on one line, without the box typer draws around a usage error."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.stdout + result.stderr).split())


@dataclass(frozen=True)
class Served:
    grpc: str  # 127.0.0.1:PORT
    rest: str  # 127.0.0.1:PORT
    rest_port: int


def _served(server: Any) -> Served:
    return Served(f"127.0.0.1:{server.grpc_port}", f"127.0.0.1:{server.rest_port}",
                  server.rest_port)  # fmt: skip


def _build(config: Any) -> Any:
    from graphserve.serving import build_server

    return build_server(config).start()


def _options(tls: ServerTls | None) -> Any:
    from graphserve.serving import ServerOptions

    return ServerOptions(
        host="127.0.0.1", grpc_port=0, rest_port=0, metrics_path=DEFAULT_METRICS_PATH, tls=tls
    )


@pytest.fixture(scope="module")
def servers(
    certs: Certs, mlp_export: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Served]]:
    """The graph server of the MLP over TLS, over mutual TLS, and in plaintext, metrics on."""
    from graphserve.serving import ModelRegistry, ModelServer

    tmp = tmp_path_factory.mktemp("tls-servers")
    tls = ServerTls.load(certs.ssl_config(tmp / "tls.pbtxt"))
    mutual = ServerTls.load(
        certs.ssl_config(tmp / "mtls.pbtxt", custom_ca=certs.ca, client_verify=True)
    )
    registry = ModelRegistry()
    registry.load_graph(NAME, mlp_export.model_dir)
    made = {
        name: ModelServer(registry, _options(server_tls)).start()
        for name, server_tls in (("tls", tls), ("mutual", mutual), ("plaintext", None))
    }
    try:
        yield {name: _served(server) for name, server in made.items()}
    finally:
        for server in made.values():
            server.stop(grace=0.5)


def _metrics(served: Served) -> str:
    return f"https://{served.rest}{DEFAULT_METRICS_PATH}"


# ---------------------------------------------------------------------------------------------
# Targets: the scheme says TLS, loopback only all the same


def test_tls_addresses_are_loopback_only_and_dialed_by_their_scheme(certs: Certs) -> None:
    check_loopback("grpcs://127.0.0.1:8500")
    check_loopback("https://[::1]:8501/")
    from graphserve.core.errors import RemoteTargetError

    with pytest.raises(RemoteTargetError, match="--allow-remote"):
        check_loopback("grpcs://10.1.2.3:8500")
    options = ClientTls(ca=certs.ca)
    assert dial("grpc", "127.0.0.1:8500", options) == ("grpcs://127.0.0.1:8500", options)
    assert dial("grpc", "127.0.0.1:8500", None) == ("127.0.0.1:8500", None)
    assert dial("grpc", "grpcs://127.0.0.1:8500", None) == ("grpcs://127.0.0.1:8500", ClientTls())
    assert dial("rest", "127.0.0.1:8501", options) == ("https://127.0.0.1:8501", options)
    assert dial("rest", "http://127.0.0.1:8501/", None) == ("http://127.0.0.1:8501", None)
    assert scheme_tls("https://127.0.0.1:8501/metrics", options) == options
    assert scheme_tls("http://127.0.0.1:8501/metrics", options) is None
    # a locust process's environment holds this run's options, none inherited
    inherited = {"PATH": "/bin", TLS_ENV["ca"]: "/elsewhere/ca.pem", "GRAPHSERVE_TLS": "1"}
    assert tls_env(inherited, None) == {"PATH": "/bin"}
    assert ClientTls.from_env(tls_env(inherited, options)) == ClientTls(ca=certs.ca.resolve())


# ---------------------------------------------------------------------------------------------
# compare


@pytest.mark.slow
def test_compare_over_grpc_against_tls_and_mutual_tls(
    servers: dict[str, Served], certs: Certs, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    result = _loadtest(
        "loadtest", "compare", "--model-name", NAME, "--users", "1", *_SHORT,
        "--arm", f"tls=grpcs://{servers['tls'].grpc}", "--arm", f"mutual={servers['mutual'].grpc}",
        "--metrics", f"tls={_metrics(servers['tls'])}",
        "--metrics", f"mutual={_metrics(servers['mutual'])}",
        *_client(certs), "--max-failures", "0", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, _said(result)
    report = json.loads((out / "report.json").read_text())
    for name in ("tls", "mutual"):
        arm = report["steps"][0]["arms"][name]
        assert arm["failures"] == 0 and arm["errors"] == {} and arm["requests"] > 0
        assert arm["server"]["requests"] == arm["requests"]  # scraped over HTTPS, every request
        assert report["arms"][name]["tls"] == {
            "ca": str(certs.ca.resolve()), "cert": str(certs.client.cert.resolve()),
            "server_name": None,
        }  # fmt: skip
    plan = json.loads((out / "plan.json").read_text())
    assert [a["target"] for a in plan["arms"]] == [
        f"grpcs://{servers['tls'].grpc}", f"grpcs://{servers['mutual'].grpc}",
    ]  # fmt: skip
    written = (out / "plan.json").read_text()
    assert str(certs.ca) not in written and str(certs.client.key) not in written  # no file in it


@pytest.mark.slow
def test_compare_over_rest_open_loop_with_a_worker_that_dials_with_its_own_options(
    servers: dict[str, Served], certs: Certs, tmp_path: Path
) -> None:
    from graphserve.core.processes import free_port

    port = free_port()
    worker = subprocess.Popen(
        [sys.executable, "-m", "graphserve", "loadtest", "worker", "--master-host", "127.0.0.1",
         "--master-port", str(port), *_client(certs)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    out = tmp_path / "out"
    try:
        result = _loadtest(
            "loadtest", "compare", "--protocol", "rest", "--model-name", NAME, "--rate", "100",
            "--max-in-flight", "4", *_SHORT, "--arm", f"tls=https://{servers['tls'].rest}",
            "--arm", f"mutual={servers['mutual'].rest}", *_client(certs),
            "--expect-workers", "1", "--master-bind-port", str(port), "--max-failures", "0",
            "--out", str(out),
        )  # fmt: skip
    finally:
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
    assert result.returncode == 0, _said(result)
    assert worker.returncode == 0
    report = json.loads((out / "report.json").read_text())
    assert len(report["workers"]["nodes"]) == 1  # every request came from the worker
    for name in ("tls", "mutual"):
        arm = report["steps"][0]["arms"][name]
        assert arm["failures"] == 0 and arm["requests"] > 0
        # REST arms find their metrics on their own port, over HTTPS
        assert report["arms"][name]["metrics_url"] == _metrics(servers[name])
        assert arm["server"]["requests"] == arm["requests"]


@pytest.mark.slow
def test_tls_failures_stop_compare_before_any_load_saying_why(
    servers: dict[str, Served], certs: Certs, tmp_path: Path
) -> None:
    base = ["loadtest", "compare", "--model-name", NAME, "--users", "1", *_SHORT]
    no_cert = _loadtest(
        *base, "--graph", servers["mutual"].grpc, "--tls-ca", str(certs.ca),
        "--out", str(tmp_path / "a"),
    )  # fmt: skip
    assert no_cert.returncode == 1, _said(no_cert)
    said = _said(no_cert)
    assert f"cannot reach the gRPC API of arm graph at grpcs://{servers['mutual'].grpc}" in said
    assert _MUTUAL_TLS in said and "Traceback" not in said
    assert not (tmp_path / "a").exists()  # refused before any work

    plaintext_on_tls = _loadtest(
        *base, "--protocol", "rest", "--graph", servers["tls"].rest, "--out", str(tmp_path / "b")
    )
    assert plaintext_on_tls.returncode == 1, _said(plaintext_on_tls)
    assert "the server speaks TLS on this port: dial https:// or grpcs://, or give --tls-ca" in (
        _said(plaintext_on_tls)
    )
    tls_on_plaintext = _loadtest(
        *base, "--graph", servers["plaintext"].grpc, "--tls-ca", str(certs.ca),
        "--out", str(tmp_path / "c"),
    )  # fmt: skip
    assert tls_on_plaintext.returncode == 1, _said(tls_on_plaintext)
    assert "the server speaks plaintext on this port: dial it without TLS" in (
        _said(tls_on_plaintext)
    )
    contradiction = _loadtest(
        *base, "--graph", f"grpc://{servers['tls'].grpc}", "--tls-ca", str(certs.ca)
    )
    assert contradiction.returncode == 2, _said(contradiction)
    assert "is a plaintext address and TLS options are given" in _said(contradiction)


# ---------------------------------------------------------------------------------------------
# rollout, many, tune


@pytest.fixture(scope="module")
def watched(
    certs: Certs, mlp_export: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Served, Path]]:
    """The graph server over TLS on BASE/mlp (a copy of the MLP as version 1), polling it for
    versions, with batching and each version's own batching parameters (tune's candidates)."""
    from graphserve.serving import ServeConfig

    root = tmp_path_factory.mktemp("watched")
    base = root / "models" / NAME
    base.mkdir(parents=True)
    shutil.copytree(mlp_export.version_dir, base / "1")
    tls = ServerTls.load(certs.ssl_config(root / "tls.pbtxt"))
    config = ServeConfig(
        models=(ModelConfig(NAME, base),),
        options=_options(tls),
        batching=BatchingParameters(num_batch_threads=2, max_batch_size=8),
        per_model_batching=True,
        file_system_poll_seconds=0.2,
    )
    server = _build(config)
    try:
        yield _served(server), base
    finally:
        server.stop(grace=0.5)


@pytest.mark.slow
def test_rollout_over_tls(
    watched: tuple[Served, Path], certs: Certs, mlp_export: Any, tmp_path: Path
) -> None:
    served, base = watched
    out = tmp_path / "out"
    result = _loadtest(
        "loadtest", "rollout", "--address", f"grpcs://{served.grpc}", "--tls-ca", str(certs.ca),
        "--model-base-path", str(base), "--new-version", str(mlp_export.version_dir),
        "--rate", "40", "--before", "1s", "--after", "2s", "--slo", "errors==0", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, _said(result)
    report = load_rollout(out / "rollout.json")
    assert report.swap.completed and report.errors == {}
    run = report.window("run")
    assert run is not None and run.requests > 0 and run.answered == run.requests
    assert set(run.versions) == {str(report.swap.old_version), str(report.swap.new_version)}


@pytest.mark.slow
def test_tune_batching_a_running_server_over_tls(
    watched: tuple[Served, Path], certs: Certs, tmp_path: Path
) -> None:
    served, base = watched
    out = tmp_path / "out"
    result = _loadtest(
        "tune", "batching", "--model-base-path", str(base), "--address", served.grpc,
        "--tls-ca", str(certs.ca), "--slo", "p99<10s", "--clients", "2", "--budget", "12s",
        "--trial", "1.5s", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, _said(result)
    tuned = TuneResult.model_validate_json((out / "tune.json").read_text())
    assert tuned.trials and all(t.failures == 0 for t in tuned.trials)
    assert tuned.best is not None and (out / "batching_parameters.txt").is_file()


@pytest.mark.slow
def test_rollout_and_tune_without_a_client_certificate_say_so(
    servers: dict[str, Served], certs: Certs, mlp_export: Any, tmp_path: Path
) -> None:
    mutual = servers["mutual"].grpc
    rollout = _loadtest(
        "loadtest", "rollout", "--address", mutual, "--tls-ca", str(certs.ca),
        "--model-base-path", str(mlp_export.model_dir), "--new-version",
        str(mlp_export.version_dir), "--out", str(tmp_path / "rollout"),
    )  # fmt: skip
    assert rollout.returncode == 1, _said(rollout)
    assert f"cannot reach a TF Serving gRPC API at {mutual}" in _said(rollout)
    assert _MUTUAL_TLS in _said(rollout)
    tune = _loadtest(
        "tune", "batching", "--model-base-path", str(mlp_export.model_dir), "--address",
        f"grpcs://{mutual}", "--tls-ca", str(certs.ca), "--slo", "p99<10s",
        "--out", str(tmp_path / "tune"),
    )  # fmt: skip
    assert tune.returncode == 1, _said(tune)
    assert _MUTUAL_TLS in _said(tune)
    assert sorted(p.name for p in mlp_export.model_dir.iterdir()) == [mlp_export.version_dir.name]


@pytest.fixture(scope="module")
def copies(mlp_export: Any, tmp_path_factory: pytest.TempPathFactory) -> CopiesResult:
    out = tmp_path_factory.mktemp("many-tls") / "copies"
    return write_copies(CopiesSpec(source=mlp_export.version_dir, count=3, out=out))


@pytest.fixture(scope="module")
def many_server(
    certs: Certs, copies: CopiesResult, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    """The copies' graph server over mutual TLS, metrics on."""
    from graphserve.serving import ServeConfig

    path = tmp_path_factory.mktemp("many-mtls") / "mtls.pbtxt"
    mutual = ServerTls.load(certs.ssl_config(path, custom_ca=certs.ca, client_verify=True))
    config = ServeConfig(models=load_model_config_file(copies.config), options=_options(mutual))
    server = _build(config)
    try:
        yield _served(server)
    finally:
        server.stop(grace=0.5)


@pytest.mark.slow
def test_many_over_mutual_tls(
    many_server: Served, copies: CopiesResult, certs: Certs, tmp_path: Path
) -> None:
    base = ["loadtest", "many", "--target", f"grpcs://{many_server.grpc}", "--rest-port",
            str(many_server.rest_port), "--models-from", str(copies.config)]  # fmt: skip
    out = tmp_path / "out"
    result = _loadtest(
        *base, *_client(certs), "--users", "2", "--max-requests", "40", "--duration", "30s",
        "--scrape-every", "0.5s", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, _said(result)
    report = load_many(out / "many.json")
    assert (report.totals.requests, report.totals.answered, report.totals.failures) == (40, 40, 0)
    assert report.server is not None and len(report.memory) >= 2  # scraped over HTTPS
    no_cert = _loadtest(*base, "--tls-ca", str(certs.ca), "--out", str(tmp_path / "no-cert"))
    assert no_cert.returncode == 1, _said(no_cert)
    assert _MUTUAL_TLS in _said(no_cert)


# ---------------------------------------------------------------------------------------------
# replay


@pytest.fixture(scope="module")
def recorded(mlp_export: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """20 requests of 1 to 4 rows for the mlp, at 100 req/s."""
    path = tmp_path_factory.mktemp("tls-traffic") / "mlp.tfrecord"
    made = _loadtest("traffic", "make", str(mlp_export.model_dir), "--out", str(path),
                     "--count", "20", "--batch-sizes", "1-4", "--rate", "100")  # fmt: skip
    assert made.returncode == 0, _said(made)
    return path


@pytest.mark.parametrize("protocol", ["grpc", "rest"])
@pytest.mark.parametrize("command", ["replay", "compare"])
def test_traffic_over_tls_and_mutual_tls(
    command: str,
    protocol: str,
    servers: dict[str, Served],
    certs: Certs,
    recorded: Path,
    tmp_path: Path,
) -> None:
    """The traffic file's requests, replayed or under compare's load, over TLS and mutual TLS:
    every one answered, every answer kept and compared across the arms."""
    scheme = "grpcs" if protocol == "grpc" else "https"
    port = "grpc" if protocol == "grpc" else "rest"
    if command == "replay":
        load = ["replay", str(recorded)]
    else:
        load = ["compare", "--model-name", NAME, "--users", "2", *_SHORT,
                "--traffic", str(recorded)]  # fmt: skip
    result = _loadtest(
        "loadtest", *load, "--protocol", protocol,
        "--arm", f"tls={scheme}://{getattr(servers['tls'], port)}",
        "--arm", f"mutual={getattr(servers['mutual'], port)}", *_client(certs),
        "--slo", "errors==0", "--slo", "answers.mismatch==0", "--out", str(tmp_path),
    )  # fmt: skip
    assert result.returncode == 0, _said(result)
    if command == "replay":
        report = json.loads((tmp_path / "replay.json").read_text())
        assert [(a["name"], a["requests"], a["failed"]) for a in report["arms"]] == [
            ("tls", 20, 0), ("mutual", 20, 0),
        ]  # fmt: skip
        (across,) = report["arms"][0]["answers"]
    else:
        report = json.loads((tmp_path / "report.json").read_text())
        answers = report["answers"]
        assert answers["requests"] == 20 and answers["answered"] == {"tls": 20, "mutual": 20}
        for arm in report["steps"][0]["arms"].values():
            assert arm["failures"] == 0 and arm["requests"] > 20
        (across,) = answers["agreements"]["tls"]
    # the file holds no answers: tls's are compared against mutual's
    assert across["reference"] == "mutual" and across["compared"] == 20
    assert across["mismatched"] == 0


def test_replay_without_a_client_certificate_stops_before_any_load(
    servers: dict[str, Served], certs: Certs, recorded: Path, tmp_path: Path
) -> None:
    result = _loadtest(
        "loadtest", "replay", str(recorded), "--arm", f"mutual={servers['mutual'].grpc}",
        "--tls-ca", str(certs.ca), "--out", str(tmp_path),
    )  # fmt: skip
    assert result.returncode == 1, _said(result)
    assert _MUTUAL_TLS in _said(result)
    assert not (tmp_path / "replay.json").exists()
