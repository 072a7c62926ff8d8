"""`graphserve conformance` over TLS and mutual TLS: TF Serving's whole table, run against the
graph server with an SSL config (certificates made at test time, tests/certs.py), passes case for
case as it does over plaintext; TF Serving's own layout (TLS gRPC, plaintext REST) is dialed as
such; and a connection that fails for TLS stops the run at once with the client's reason and
what to give, never a traceback.

Three servers share one registry (write-models' TF2 half_plus_two models, by its tf2.config):
plaintext, TLS, and mutual TLS (client_verify against the test CA).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from graphserve.cli import app
from graphserve.conformance.models import write_reference_models
from graphserve.conformance.reference import GRPC_CASES, REST_CASES, TWO
from graphserve.core.tls import ServerTls
from graphserve.serving import ModelRegistry, ModelServer, ServerOptions
from graphserve.serving.config import load_model_config_file
from graphserve.serving.manager import ModelManager
from tests.certs import Certs, make_certs

runner = CliRunner()


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def servers(
    certs: Certs, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, ModelServer]]:
    tmp = tmp_path_factory.mktemp("conformance-tls")
    models = write_reference_models(tmp / "models")
    registry = ModelRegistry()
    ModelManager(registry, load_model_config_file(models.tf2_config)).start()
    tls = ServerTls.load(certs.ssl_config(tmp / "tls.pbtxt"))
    mutual = ServerTls.load(
        certs.ssl_config(tmp / "mtls.pbtxt", custom_ca=certs.ca, client_verify=True)
    )
    options = ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0)
    made = {
        "plaintext": ModelServer(registry, options),
        "tls": ModelServer(registry, replace(options, tls=tls)),
        "mutual": ModelServer(registry, replace(options, tls=mutual)),
    }
    for server in made.values():
        server.start()
    try:
        yield made
    finally:
        for server in made.values():
            server.stop(grace=0.5)


def conformance(*args: object) -> Result:
    return runner.invoke(app, ["conformance", *map(str, args)])


def grpc_of(server: ModelServer) -> str:
    return f"127.0.0.1:{server.grpc_port}"


def rest_of(server: ModelServer) -> str:
    return f"127.0.0.1:{server.rest_port}"


def outcomes(report: dict[str, Any]) -> dict[tuple[str, str, str], str]:
    """Each case's outcome, by (source, test, case)."""
    return {(r["source"], r["test"], r["case"]): r["outcome"] for r in report["results"]}


@pytest.fixture(scope="module")
def plaintext_report(servers: dict[str, ModelServer]) -> dict[str, Any]:
    plain = servers["plaintext"]
    result = conformance(grpc_of(plain), "--rest", rest_of(plain), "--reference",
                         "--output", "json")  # fmt: skip
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout))


def client_options(certs: Certs, server: str) -> list[object]:
    options: list[object] = ["--tls-ca", certs.ca]
    if server == "mutual":
        options += ["--tls-cert", certs.client.cert, "--tls-key", certs.client.key]
    return options


@pytest.mark.parametrize("server", ["tls", "mutual"])
def test_the_whole_table_passes_over_tls_case_for_case_as_over_plaintext(
    servers: dict[str, ModelServer],
    certs: Certs,
    plaintext_report: dict[str, Any],
    server: str,
) -> None:
    address, rest = f"grpcs://{grpc_of(servers[server])}", f"https://{rest_of(servers[server])}"
    result = conformance(address, "--rest", rest, "--reference", "--output", "json",
                         *client_options(certs, server))  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["address"], report["rest"]) == (address, rest)
    assert report["counts"] == plaintext_report["counts"]
    assert report["counts"]["fail"] == report["counts"]["deviates"] == 0
    assert report["counts"]["pass"] > len(REST_CASES) + len(GRPC_CASES)
    assert outcomes(report) == outcomes(plaintext_report)
    assert report["server"] == "graphserve (graph)"  # identify() dials the same channel


def test_tf_servings_layout_tls_grpc_beside_plaintext_rest(
    servers: dict[str, ModelServer], certs: Certs
) -> None:
    """TF Serving with an SSL config serves gRPC over TLS and REST without (its REST has none:
    tensorflow/serving#1503): the options dial the address without a scheme, and `http://`
    keeps REST plaintext. Here the REST port is the plaintext server's, on the same models."""
    result = conformance(grpc_of(servers["tls"]), "--rest", f"http://{rest_of(servers['plaintext'])}",
                         "--model", TWO, "--label", "stable", "--tls-ca", certs.ca,
                         "--output", "json")  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["counts"]["fail"] == 0
    passed = {r["case"] for r in report["results"] if r["outcome"] == "pass"}
    assert f"REST POST /v1/models/{TWO}/labels/stable:predict" in passed
    assert "gRPC Predict (label stable)" in passed


def _failing(servers: dict[str, ModelServer], certs: Certs, case: str) -> list[object]:
    tls, mutual, plain = servers["tls"], servers["mutual"], servers["plaintext"]
    return {
        "plaintext client, TLS server": [grpc_of(tls)],
        "the system's CAs": [f"grpcs://{grpc_of(tls)}"],
        "no client certificate": [grpc_of(mutual), "--tls-ca", certs.ca],
        "a client certificate of another CA": [
            grpc_of(mutual), "--tls-ca", certs.ca, "--tls-cert", certs.stranger.cert,
            "--tls-key", certs.stranger.key,
        ],
        "TLS client, plaintext server": [grpc_of(plain), "--tls-ca", certs.ca],
        "the certificate names another host": [
            grpc_of(tls), "--tls-ca", certs.ca, "--tls-server-name", "elsewhere.example",
        ],
        "plaintext REST client, HTTPS server": [
            grpc_of(tls), "--rest", f"http://{rest_of(tls)}", "--tls-ca", certs.ca,
        ],
    }[case]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("plaintext client, TLS server",
         "gRPC at 127.0.0.1:{tls}: the server speaks TLS on this port: dial https:// or grpcs://, "
         "or give --tls-ca"),
        ("the system's CAs",
         "the server's certificate is not signed by a CA this client trusts: give the CA's "
         "certificate with --tls-ca"),
        ("no client certificate",
         "the server asks for a client certificate (mutual TLS): give --tls-cert and --tls-key"),
        ("a client certificate of another CA",
         "the server does not trust this client's certificate: give one signed by a CA in the "
         "server's custom_ca"),
        ("TLS client, plaintext server",
         "the server speaks plaintext on this port: dial it without TLS"),
        ("the certificate names another host",
         "the server's certificate does not name the host dialed"),
        ("plaintext REST client, HTTPS server",
         "REST at http://127.0.0.1:{tls_rest}: http://127.0.0.1:{tls_rest}: the server speaks TLS "
         "on this port"),
    ],
)  # fmt: skip
def test_a_tls_failure_at_the_start_says_why_and_what_to_give(
    servers: dict[str, ModelServer], certs: Certs, case: str, message: str
) -> None:
    """Exit 1 with the client's reason, after about a second (not the whole --timeout): gRPC
    says only that it cannot connect, the reason comes from a handshake of the client's own."""
    started = time.monotonic()
    result = conformance(*_failing(servers, certs, case), "--model", "default")
    assert result.exit_code == 1, result.output
    tls = servers["tls"]
    assert message.format(tls=tls.grpc_port, tls_rest=tls.rest_port) in result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    assert time.monotonic() - started < 6  # --timeout is 10 s


def test_addresses_without_a_scheme_take_the_options_on_both_ports(
    servers: dict[str, ModelServer], certs: Certs
) -> None:
    """HOST:PORT and --rest HOST:PORT with the options: both dialed over mutual TLS."""
    mutual = servers["mutual"]
    result = conformance(grpc_of(mutual), "--rest", rest_of(mutual), "--model", "default",
                         "--output", "json", *client_options(certs, "mutual"))  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["counts"]["fail"] == 0
    assert any(r["case"].startswith("REST ") and r["outcome"] == "pass" for r in report["results"])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--tls-cert", "{client_cert}"], "--tls-cert is given without --tls-key"),
        (["--tls-ca", "{missing}"], "cannot read it"),
        (["--rest", "http://127.0.0.1:9", "--tls-ca", "{ca}"],
         "TLS options are given, and both addresses say plaintext"),
        (["--rest", "ftp://127.0.0.1:9"], "--rest: 'ftp://127.0.0.1:9': the scheme 'ftp'"),
    ],
)  # fmt: skip
def test_tls_options_that_cannot_work_exit_2(
    certs: Certs, tmp_path: Path, extra: list[str], message: str
) -> None:
    values = {"client_cert": certs.client.cert, "missing": tmp_path / "no.crt", "ca": certs.ca}
    address = "grpc://127.0.0.1:9" if "--rest" in extra else "127.0.0.1:9"
    result = conformance(address, *[a.format(**values) for a in extra], "--timeout", "0.5")
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split()), result.output
