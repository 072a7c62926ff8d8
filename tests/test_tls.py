"""TLS and mutual TLS on both servers, both APIs and the metrics, with certificates made at test
time (tests/certs.py): every client failure says what is wrong and what to give, and the
SSLConfig files are TF Serving's, checked against its own proto."""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
import pytest
from certs import Certs, make_certs

from graphserve.core.client import (
    GrpcClient,
    RestClient,
    grpc_error_text,
    model_status,
    predict_outputs,
    predict_request,
    status_request,
)
from graphserve.core.httpclient import TlsError
from graphserve.core.tls import ClientTls, ServerTls, TlsConfigError, split_scheme
from graphserve.serving import ModelRegistry, ModelServer, ServerOptions

FIXTURES = Path(__file__).parent / "fixtures"
ROWS = np.linspace(0.0, 1.0, 2 * 784, dtype=np.float32).reshape(2, 784)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@dataclass(frozen=True)
class Served:
    grpc: str  # HOST:PORT
    rest: str  # HOST:PORT
    socket: str  # unix:PATH


@pytest.fixture(scope="module")
def registries(mlp_export: object) -> dict[str, ModelRegistry]:
    graph = ModelRegistry()
    graph.load_graph("mlp", mlp_export.model_dir)  # type: ignore[attr-defined]
    eager = ModelRegistry()
    eager.load_eager("mlp", "examples:mlp")
    return {"graph": graph, "eager": eager}


def _serve(
    registry: ModelRegistry, tls: ServerTls | None, tmp: Path, *, asyncio: bool = False
) -> ModelServer:
    socket_path = tmp / f"grpc-{id(tls)}-{asyncio}.sock"
    options = ServerOptions(
        grpc_port=0,
        rest_port=0,
        grpc_asyncio=asyncio,
        grpc_socket_path=str(socket_path),
        metrics_path="/monitoring/prometheus/metrics",
        tls=tls,
    )
    return ModelServer(registry, options).start()


def _served(server: ModelServer) -> Served:
    return Served(
        f"127.0.0.1:{server.grpc_port}",
        f"127.0.0.1:{server.rest_port}",
        f"unix:{server.options.grpc_socket_path}",
    )


@pytest.fixture(scope="module")
def servers(
    certs: Certs, registries: dict[str, ModelRegistry], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Served]]:
    """TLS, mutual TLS, an expired and a wrongly named certificate, and plaintext; the graph
    server on both gRPC front ends, and the eager server."""
    tmp = tmp_path_factory.mktemp("tls")
    tls = ServerTls.load(certs.ssl_config(tmp / "tls.pbtxt"))
    mutual = ServerTls.load(
        certs.ssl_config(tmp / "mtls.pbtxt", custom_ca=certs.ca, client_verify=True)
    )
    expired = ServerTls.load(certs.ssl_config(tmp / "expired.pbtxt", server=certs.expired))
    wrong = ServerTls.load(certs.ssl_config(tmp / "wrong.pbtxt", server=certs.wrong_name))
    graph, eager = registries["graph"], registries["eager"]
    made = {
        "graph": _serve(graph, tls, tmp),
        "graph-asyncio": _serve(graph, tls, tmp, asyncio=True),
        "eager": _serve(eager, tls, tmp),
        "mutual": _serve(graph, mutual, tmp),
        "mutual-asyncio": _serve(graph, mutual, tmp, asyncio=True),
        "expired": _serve(graph, expired, tmp),
        "wrong-name": _serve(graph, wrong, tmp),
        "plaintext": _serve(graph, None, tmp),
    }
    try:
        yield {name: _served(server) for name, server in made.items()}
    finally:
        for server in made.values():
            server.stop(grace=0.5)


def _trusting(certs: Certs, **extra: object) -> ClientTls:
    return ClientTls(ca=certs.ca, **extra)  # type: ignore[arg-type]


def _with_client(certs: Certs) -> ClientTls:
    return ClientTls(ca=certs.ca, cert=certs.client.cert, key=certs.client.key)


def _expected() -> np.ndarray:
    from graphserve.model.examples import mlp

    return mlp.build()(ROWS).numpy()  # type: ignore[no-any-return]


def _grpc_predict(address: str, tls: ClientTls | None) -> np.ndarray:
    with GrpcClient.connect(address, tls=tls, timeout=10) as client:
        response = client.predict(predict_request("mlp", {"images": ROWS}))
    (output,) = predict_outputs(response).values()
    return output


def _grpc_failure(address: str, tls: ClientTls | None) -> str:
    with GrpcClient.connect(address, tls=tls, timeout=5) as client:
        with pytest.raises(grpc.RpcError) as caught:
            client.status(status_request("mlp"))
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        return client.error_text(caught.value)


def _rest_predict(address: str, tls: ClientTls | None) -> np.ndarray:
    with RestClient(address, tls=tls, timeout=10) as client:
        reply = client.predict("mlp", {"instances": ROWS.tolist()})
    assert reply.status == 200, reply.text
    return np.asarray(reply.json()["predictions"], dtype=np.float32)


def _rest_failure(address: str, tls: ClientTls | None) -> str:
    with RestClient(address, tls=tls, timeout=5) as client, pytest.raises(TlsError) as caught:
        client.get("/v1/models/mlp")
    return str(caught.value)


# ---------------------------------------------------------------------------------------------
# Serving over TLS


@pytest.mark.parametrize("server", ["graph", "graph-asyncio", "eager"])
def test_grpc_over_tls_answers_as_plaintext_does(
    servers: dict[str, Served], certs: Certs, server: str
) -> None:
    got = _grpc_predict(servers[server].grpc, _trusting(certs))
    np.testing.assert_allclose(got, _expected(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        got, _grpc_predict(servers["plaintext"].grpc, None), rtol=1e-6, atol=1e-7
    )


@pytest.mark.parametrize("server", ["graph", "eager"])
def test_rest_over_https_answers_as_plaintext_does(
    servers: dict[str, Served], certs: Certs, server: str
) -> None:
    got = _rest_predict(f"https://{servers[server].rest}", _trusting(certs))
    np.testing.assert_allclose(got, _expected(), rtol=1e-5, atol=1e-6)


def test_metrics_are_served_over_https_with_the_same_certificate(
    servers: dict[str, Served], certs: Certs
) -> None:
    _rest_predict(servers["graph"].rest, _trusting(certs))
    with RestClient(servers["graph"].rest, tls=_trusting(certs)) as client:
        reply = client.get("/monitoring/prometheus/metrics")
    assert reply.status == 200
    assert ":tensorflow:serving:request_count{" in reply.text or "graphserve_" in reply.text
    text = _rest_failure(servers["graph"].rest, None)
    assert "speaks TLS on this port" in text


def test_grpc_unix_socket_is_tls_too_as_in_tf_serving(
    servers: dict[str, Served], certs: Certs
) -> None:
    # the certificate names localhost; a Unix socket has no host name to check against
    tls = _trusting(certs, server_name="localhost")
    got = _grpc_predict(servers["graph"].socket, tls)
    np.testing.assert_allclose(got, _expected(), rtol=1e-5, atol=1e-6)


def test_grpcs_and_https_addresses_turn_tls_on_with_the_system_cas(
    servers: dict[str, Served],
) -> None:
    # The test CA is not the system's: the scheme alone dials TLS, and says why it fails.
    assert "not signed by a CA this client trusts" in _grpc_failure(
        f"grpcs://{servers['graph'].grpc}", None
    )
    assert "not signed by a CA this client trusts" in _rest_failure(
        f"https://{servers['graph'].rest}", None
    )


def test_model_status_polls_over_tls(servers: dict[str, Served], certs: Certs) -> None:
    (status,) = model_status(servers["graph"].grpc, "mlp", tls=_trusting(certs))
    assert status.state == "AVAILABLE"
    assert model_status(servers["graph"].grpc, "mlp") == []  # plaintext: nothing answers


# ---------------------------------------------------------------------------------------------
# Mutual TLS


@pytest.mark.parametrize("server", ["mutual", "mutual-asyncio"])
def test_mutual_tls_serves_a_client_with_a_certificate_the_ca_signed(
    servers: dict[str, Served], certs: Certs, server: str
) -> None:
    np.testing.assert_allclose(
        _grpc_predict(servers[server].grpc, _with_client(certs)), _expected(), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        _rest_predict(servers[server].rest, _with_client(certs)), _expected(), rtol=1e-5, atol=1e-6
    )


def test_mutual_tls_refuses_a_client_without_a_certificate(
    servers: dict[str, Served], certs: Certs
) -> None:
    want = "asks for a client certificate (mutual TLS): give --tls-cert and --tls-key"
    assert want in _grpc_failure(servers["mutual"].grpc, _trusting(certs))
    assert want in _rest_failure(servers["mutual"].rest, _trusting(certs))


def test_mutual_tls_refuses_a_client_signed_by_another_ca(
    servers: dict[str, Served], certs: Certs
) -> None:
    stranger = ClientTls(ca=certs.ca, cert=certs.stranger.cert, key=certs.stranger.key)
    want = "does not trust this client's certificate"
    assert want in _grpc_failure(servers["mutual"].grpc, stranger)
    assert want in _rest_failure(servers["mutual"].rest, stranger)


# ---------------------------------------------------------------------------------------------
# The failure matrix: each says what is wrong and what to give


def test_untrusted_server_certificate(servers: dict[str, Served]) -> None:
    want = "not signed by a CA this client trusts: give the CA's certificate with --tls-ca"
    assert want in _grpc_failure(servers["graph"].grpc, ClientTls())
    assert want in _rest_failure(servers["graph"].rest, ClientTls())


def test_server_certificate_for_another_name(servers: dict[str, Served], certs: Certs) -> None:
    want = "does not name the host dialed: dial a name it holds, or give that name with"
    assert want in _grpc_failure(servers["wrong-name"].grpc, _trusting(certs))
    assert want in _rest_failure(servers["wrong-name"].rest, _trusting(certs))
    # ... and the name it holds, given, is accepted on both
    named = _trusting(certs, server_name="elsewhere.example")
    assert _grpc_predict(servers["wrong-name"].grpc, named).shape == (2, 10)
    assert _rest_predict(servers["wrong-name"].rest, named).shape == (2, 10)


def test_expired_server_certificate(servers: dict[str, Served], certs: Certs) -> None:
    want = "a certificate has expired"
    assert want in _grpc_failure(servers["expired"].grpc, _trusting(certs))
    assert want in _rest_failure(servers["expired"].rest, _trusting(certs))


def test_plaintext_client_on_a_tls_port(servers: dict[str, Served]) -> None:
    want = "the server speaks TLS on this port: dial https:// or grpcs://, or give --tls-ca"
    assert want in _grpc_failure(servers["graph"].grpc, None)
    assert want in _rest_failure(servers["graph"].rest, None)
    assert want in _grpc_failure(servers["mutual"].grpc, None)


def test_tls_client_on_a_plaintext_port(servers: dict[str, Served], certs: Certs) -> None:
    want = "the server speaks plaintext on this port: dial it without TLS"
    assert want in _grpc_failure(servers["plaintext"].grpc, _trusting(certs))
    assert want in _rest_failure(servers["plaintext"].rest, _trusting(certs))


def test_a_plaintext_failure_that_is_not_tls_gets_no_tls_hint() -> None:
    with (
        GrpcClient.connect("127.0.0.1:1", timeout=2) as client,
        pytest.raises(grpc.RpcError) as caught,
    ):
        client.status(status_request("mlp"))
    text = grpc_error_text(caught.value, address="127.0.0.1:1", tls=None)
    assert text.startswith("UNAVAILABLE:")
    assert "[" not in text  # nothing answers: no TLS reason is made up


def test_client_options_that_cannot_work_are_refused_before_dialing(
    certs: Certs, tmp_path: Path
) -> None:
    with pytest.raises(TlsConfigError, match="--tls-cert is given without --tls-key"):
        ClientTls(ca=certs.ca, cert=certs.client.cert)
    with pytest.raises(TlsConfigError, match=r"--tls-ca .*: cannot read it"):
        ClientTls(ca=tmp_path / "missing.crt").ssl_context()
    with pytest.raises(TlsConfigError, match="the key is not the certificate's"):
        ClientTls(cert=certs.client.cert, key=certs.stranger.key).ssl_context()
    with pytest.raises(TlsConfigError, match="plaintext address and TLS options"):
        ClientTls.for_address("http://127.0.0.1:8501", ClientTls(ca=certs.ca))
    assert split_scheme("grpcs://[::1]:8500") == ("[::1]:8500", True)
    assert split_scheme("127.0.0.1:8500") == ("127.0.0.1:8500", None)
    with pytest.raises(ValueError, match="'ftp' is not one of"):
        split_scheme("ftp://127.0.0.1:21")


def test_client_options_travel_through_the_environment(certs: Certs) -> None:
    tls = ClientTls(ca=certs.ca, cert=certs.client.cert, key=certs.client.key, server_name="x")
    assert ClientTls.from_env(tls.to_env()) == tls
    assert ClientTls.from_env(ClientTls().to_env()) == ClientTls()
    assert ClientTls.from_env({}) is None


# ---------------------------------------------------------------------------------------------
# The SSLConfig file: TF Serving's, read with its own proto


@pytest.fixture(scope="module")
def tfserving_ssl_config(tmp_path_factory: pytest.TempPathFactory) -> type:
    """TF Serving's ssl_config.proto (tests/fixtures/tfserving), compiled here with protoc (in a
    process of its own: protoc's native code and TensorFlow's clash in one process)."""
    out = tmp_path_factory.mktemp("protoc")
    source = FIXTURES / "tfserving"
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{source}", f"--python_out={out}",
         str(source / "ssl_config.proto")],
        check=True, timeout=60,
    )  # fmt: skip
    sys.path.insert(0, str(out))
    try:
        module = importlib.import_module("ssl_config_pb2")
    finally:
        sys.path.remove(str(out))
    return module.SSLConfig  # type: ignore[no-any-return]


def test_ssl_config_files_parse_with_tf_servings_own_proto(
    certs: Certs, tmp_path: Path, tfserving_ssl_config: type
) -> None:
    from google.protobuf import text_format

    path = certs.ssl_config(tmp_path / "ssl.pbtxt", custom_ca=certs.ca, client_verify=True)
    theirs = text_format.Parse(path.read_text(), tfserving_ssl_config())
    ours = ServerTls.load(path)
    assert theirs.server_key.encode() == ours.server_key == certs.server.key.read_bytes()
    assert theirs.server_cert.encode() == ours.server_cert == certs.server.cert.read_bytes()
    assert theirs.custom_ca.encode() == ours.custom_ca == certs.ca.read_bytes()
    assert theirs.client_verify is ours.client_verify is True
    # a typo TF Serving refuses is refused here, naming the field
    typo = tmp_path / "typo.pbtxt"
    typo.write_text(path.read_text().replace("client_verify", "client_verfy"))
    with pytest.raises(text_format.ParseError):
        text_format.Parse(typo.read_text(), tfserving_ssl_config())
    with pytest.raises(TlsConfigError, match="client_verfy"):
        ServerTls.load(typo)


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing", "cannot read it"),
        ("mismatched", "the key is not the certificate's"),
        ("bad-ca", "custom_ca is not PEM text"),
        ("unloadable-ca", "custom_ca: not PEM certificates"),
        ("path", "that is a file's path: SSLConfig's fields hold the PEM text itself"),
        ("empty-key", "server_key is empty"),
    ],
)
def test_bad_ssl_configs_are_refused_naming_what_is_wrong(
    certs: Certs, tmp_path: Path, case: str, message: str
) -> None:
    path = tmp_path / f"{case}.pbtxt"
    if case != "missing":
        certs.ssl_config(path, custom_ca=certs.ca)
    text = path.read_text() if path.exists() else ""
    key_line = next((line for line in text.splitlines() if line.startswith("server_key")), "")
    ca_line = next((line for line in text.splitlines() if line.startswith("custom_ca")), "")
    if case == "mismatched":
        certs.ssl_config(path, custom_ca=certs.ca)
        stranger_key = certs.stranger.key.read_text().replace("\n", "\\n")
        path.write_text(text.replace(key_line, f'server_key: "{stranger_key}"'))
    elif case == "bad-ca":
        path.write_text(text.replace(ca_line, 'custom_ca: "not a certificate"'))
    elif case == "unloadable-ca":
        broken = "-----BEGIN CERTIFICATE-----\\nAAAA\\n-----END CERTIFICATE-----\\n"
        path.write_text(text.replace(ca_line, f'custom_ca: "{broken}"'))
    elif case == "path":
        path.write_text(text.replace(key_line, f'server_key: "{certs.server.key}"'))
    elif case == "empty-key":
        path.write_text(text.replace(key_line, ""))
    with pytest.raises(TlsConfigError, match=message):
        ServerTls.load(path)


@pytest.mark.parametrize("kind", ["graph", "eager", "null"])
def test_serve_exits_2_on_a_bad_ssl_config(
    kind: str, mlp_export: object, certs: Certs, tmp_path: Path
) -> None:
    path = certs.ssl_config(tmp_path / "ssl.pbtxt")
    path.write_text(path.read_text().replace("server_key", "server_kee"))
    what = (
        ["examples:mlp", "--model-name", "mlp"]
        if kind == "eager"
        else ["--model-base-path", str(mlp_export.model_dir), "--model-name", "mlp"]  # type: ignore[attr-defined]
    )
    done = subprocess.run(
        [sys.executable, "-m", "graphserve", "serve", kind, *what, "--grpc-port", "0",
         "--rest-port", "0", "--ssl_config_file", str(path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "server_kee" in done.stderr and "SSLConfig" in done.stderr


def test_https_over_a_socket_that_blocks_in_the_kernel_times_out(certs: Certs) -> None:
    """blocking_connector's sockets carry TLS through memory BIOs: over Python's SSLSocket,
    OpenSSL retried SO_RCVTIMEO's EAGAIN forever and a silent server was never timed out."""
    import socket
    import ssl
    import threading
    import time

    from graphserve.core.httpclient import HttpConnection, blocking_connector

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs.server.cert, certs.server.key)
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def shake_hands_then_say_nothing() -> None:
        conn, _ = listener.accept()
        accepted.append(context.wrap_socket(conn, server_side=True))

    thread = threading.Thread(target=shake_hands_then_say_nothing, daemon=True)
    thread.start()
    address = f"https://127.0.0.1:{listener.getsockname()[1]}"
    connection = HttpConnection(address, 1.0, connect=blocking_connector(), tls=_trusting(certs))
    started = time.monotonic()
    try:
        with pytest.raises(TimeoutError, match="did not answer within 1 s"):
            connection.request("GET", "/v1/models/mlp", None, {})
        assert time.monotonic() - started < 10
    finally:
        thread.join(5)
        for conn in accepted:
            conn.close()
        listener.close()
