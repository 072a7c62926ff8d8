"""TLS, one options type per side, for every port and every client.

    ServerTls    TF Serving's `--ssl_config_file`: an `SSLConfig` text proto whose fields hold PEM
                 text (server_key, server_cert, custom_ca, client_verify), read and checked at
                 start (`ServerTls.load`); its gRPC credentials (TF Serving's, field for field),
                 and the same certificate as an ssl.SSLContext for the REST and metrics port
                 (beyond TF Serving, whose REST port has no TLS: tensorflow/serving#1503)
    ClientTls    what a client dials with: a CA to trust (else the system's), a certificate and key
                 for mutual TLS, the name to expect in the server's certificate; from the options
                 `--tls-ca --tls-cert --tls-key --tls-server-name` or an `https://` / `grpcs://`
                 address; its gRPC channel and its ssl.SSLContext; passed to load-test processes
                 through their environment (`to_env` / `from_env`)
    explain      why a TLS connection failed and what to give, from the error's text (gRPC's
                 details or Python's ssl error)

TF Serving's semantics (model_servers/server.cc, BuildServerCredentialsFromSSLConfigFile):
client_verify requires and verifies a client certificate, against custom_ca if given (gRPC's
default roots otherwise); without client_verify no client certificate is asked for, and custom_ca
is unused. TLS covers the Unix socket as well as the TCP port, as there.
"""

from __future__ import annotations

import contextlib
import os
import re
import ssl
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphserve.core.errors import TlsConfigError

if TYPE_CHECKING:
    import grpc

__all__ = [
    "TLS_ENV",
    "TLS_ON_ENV",
    "ClientTls",
    "ServerTls",
    "TlsConfigError",
    "diagnose",
    "diagnose_address",
    "explain",
    "split_scheme",
]

# The schemes an address may carry, and whether each means TLS.
_SCHEMES = {"grpc": False, "grpcs": True, "http": False, "https": True}

# ClientTls's fields in a load-test process's environment.
TLS_ENV = {
    "ca": "GRAPHSERVE_TLS_CA",
    "cert": "GRAPHSERVE_TLS_CERT",
    "key": "GRAPHSERVE_TLS_KEY",
    "server_name": "GRAPHSERVE_TLS_SERVER_NAME",
}
TLS_ON_ENV = "GRAPHSERVE_TLS"  # "1": TLS on (with the system's CAs, if nothing more is set)


def split_scheme(address: str) -> tuple[str, bool | None]:
    """`address` without its scheme, and whether the scheme asks for TLS: `grpcs://` and
    `https://` True, `grpc://` and `http://` False, none None. ValueError for another scheme."""
    scheme, sep, rest = address.partition("://")
    if not sep:
        return address, None
    tls = _SCHEMES.get(scheme.lower())
    if tls is None:
        raise ValueError(f"{address!r}: the scheme {scheme!r} is not one of {', '.join(_SCHEMES)}")
    return rest.rstrip("/"), tls


def _read_pem(path: Path, what: str) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TlsConfigError(f"{what} {path}: cannot read it ({exc.strerror})") from None
    if b"-----BEGIN " not in data:
        raise TlsConfigError(f"{what} {path}: not PEM (no -----BEGIN line)")
    return data


@contextlib.contextmanager
def _pem_files(*pems: bytes) -> Iterator[list[str]]:
    """Each PEM text as a file path ssl can load, readable by this process only and gone after:
    an anonymous memory file where Linux has them (a private key never touches a disk)."""
    paths: list[str] = []
    with contextlib.ExitStack() as stack:
        for pem in pems:
            if hasattr(os, "memfd_create"):
                fd = os.memfd_create("graphserve-tls")
                stack.callback(os.close, fd)
                os.write(fd, pem)
                paths.append(f"/proc/self/fd/{fd}")
            else:  # pragma: no cover - not Linux
                handle = stack.enter_context(tempfile.NamedTemporaryFile(suffix=".pem"))
                handle.write(pem)
                handle.flush()
                paths.append(handle.name)
        yield paths


def _load_chain(context: ssl.SSLContext, cert: bytes, key: bytes, what: str) -> None:
    with _pem_files(cert, key) as (cert_path, key_path):
        try:
            context.load_cert_chain(cert_path, key_path)
        except ssl.SSLError as exc:
            reason = exc.reason or str(exc)
            if "KEY_VALUES_MISMATCH" in str(exc):
                reason = "the key is not the certificate's (its public key does not match)"
            raise TlsConfigError(f"{what}: {reason}") from None


def _load_ca(context: ssl.SSLContext, ca: bytes, what: str) -> None:
    try:
        context.load_verify_locations(cadata=ca.decode("ascii", errors="replace"))
    except ssl.SSLError as exc:
        raise TlsConfigError(f"{what}: not PEM certificates ({exc.reason or exc})") from None


def _system_roots() -> bytes:
    """The system's CA bundle, for a server verifying clients without a custom_ca (gRPC's default
    roots, in TF Serving)."""
    paths = ssl.get_default_verify_paths()
    for candidate in (paths.cafile, paths.openssl_cafile):
        if candidate and Path(candidate).is_file():
            return Path(candidate).read_bytes()
    raise TlsConfigError(
        "client_verify is true and custom_ca is empty, so clients are verified against the "
        "system's CAs, and this system has no CA bundle: give custom_ca"
    )


# ---------------------------------------------------------------------------------------------
# The server's side


@dataclass(frozen=True)
class ServerTls:
    """TF Serving's SSLConfig: PEM texts, and whether a client certificate is required."""

    server_key: bytes
    server_cert: bytes
    custom_ca: bytes = b""
    client_verify: bool = False
    source: str = ""  # where it was read from, for messages

    @classmethod
    def load(cls, path: Path) -> ServerTls:
        """Read and check an SSLConfig text proto: TlsConfigError naming the field that is wrong
        (missing file, a field that is not PEM, a key that is not the certificate's, a CA that
        does not load)."""
        from google.protobuf import text_format

        from graphserve.core.textproto import message_class

        config_class = message_class(
            "tensorflow.serving",
            {
                "SSLConfig": {
                    "server_key": (1, "string"),
                    "server_cert": (2, "string"),
                    "custom_ca": (3, "string"),
                    "client_verify": (4, "bool"),
                }
            },
            "SSLConfig",
        )
        where = f"--ssl-config-file {path}"
        try:
            text = path.read_text()
        except OSError as exc:
            raise TlsConfigError(f"{where}: cannot read it ({exc.strerror})") from None
        try:
            config: Any = text_format.Parse(text, config_class())
        except text_format.ParseError as exc:
            raise TlsConfigError(
                f"{where}: not an SSLConfig text proto ({exc}); expected fields server_key, "
                "server_cert, custom_ca (PEM text) and client_verify"
            ) from None
        for name in ("server_key", "server_cert"):
            value: str = getattr(config, name)
            if not value.strip():
                raise TlsConfigError(f"{where}: {name} is empty; it holds the PEM text itself")
        for name in ("server_key", "server_cert", "custom_ca"):
            value = getattr(config, name)
            if value.strip() and "-----BEGIN " not in value:
                hint = (
                    " (that is a file's path: SSLConfig's fields hold the PEM text itself, as "
                    "TF Serving reads them; paste the file's contents)"
                    if "\n" not in value.strip() and Path(value.strip()).exists()
                    else ""
                )
                raise TlsConfigError(f"{where}: {name} is not PEM text{hint}")
        tls = cls(
            server_key=config.server_key.encode(),
            server_cert=config.server_cert.encode(),
            custom_ca=config.custom_ca.encode(),
            client_verify=config.client_verify,
            source=str(path),
        )
        tls.ssl_context()  # every check a handshake would make, now
        return tls

    def ssl_context(self) -> ssl.SSLContext:
        """The REST (and metrics) port's context: the same certificate, the same client rule."""
        where = f"--ssl-config-file {self.source}" if self.source else "SSLConfig"
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["http/1.1"])
        _load_chain(context, self.server_cert, self.server_key, f"{where}: server_key/server_cert")
        if self.custom_ca:
            _load_ca(context, self.custom_ca, f"{where}: custom_ca")
        if self.client_verify:
            if not self.custom_ca:
                _load_ca(context, _system_roots(), "the system's CA bundle")
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def grpc_credentials(self) -> grpc.ServerCredentials:
        """TF Serving's gRPC credentials for this config."""
        import grpc

        roots = self.custom_ca or (_system_roots() if self.client_verify else None)
        return grpc.ssl_server_credentials(
            [(self.server_key, self.server_cert)],
            root_certificates=roots,
            require_client_auth=self.client_verify,
        )


# ---------------------------------------------------------------------------------------------
# The client's side


@dataclass(frozen=True)
class ClientTls:
    """How a client dials over TLS: `ca` (PEM file) to trust instead of the system's CAs, `cert`
    and `key` (PEM files) to show a server that asks, `server_name` to expect in the server's
    certificate instead of the address's host."""

    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    server_name: str | None = None

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            given, missing = (
                ("--tls-cert", "--tls-key") if self.key is None else ("--tls-key", "--tls-cert")
            )
            raise TlsConfigError(
                f"{given} is given without {missing}: a client certificate needs both"
            )

    @classmethod
    def of(
        cls,
        ca: Path | None = None,
        cert: Path | None = None,
        key: Path | None = None,
        server_name: str | None = None,
        *,
        enabled: bool = False,
    ) -> ClientTls | None:
        """From a command's --tls-* options: None (plaintext) unless one is given or `enabled`."""
        if not (enabled or ca or cert or key or server_name):
            return None
        return cls(ca, cert, key, server_name)

    @classmethod
    def for_address(cls, address: str, tls: ClientTls | None) -> tuple[str, ClientTls | None]:
        """`address` without its scheme, and the TLS to dial it with (None: plaintext): the
        options given, or the system's CAs for `https://` / `grpcs://` alone. TlsConfigError when
        `http://` or `grpc://` contradicts the options."""
        bare, scheme_tls = split_scheme(address)
        if scheme_tls is False and tls is not None:
            raise TlsConfigError(
                f"{address} is a plaintext address and TLS options are given: drop them, or "
                "dial https:// / grpcs://"
            )
        if scheme_tls and tls is None:
            tls = cls()
        return bare, tls

    def files(self) -> tuple[bytes | None, bytes | None, bytes | None]:
        """The CA, certificate and key, read: TlsConfigError naming an unreadable one."""
        ca = _read_pem(self.ca, "--tls-ca") if self.ca else None
        cert = _read_pem(self.cert, "--tls-cert") if self.cert else None
        key = _read_pem(self.key, "--tls-key") if self.key else None
        return ca, cert, key

    def ssl_context(self) -> ssl.SSLContext:
        """An HTTPS client's context: the CA (or the system's), the client certificate if any."""
        ca, cert, key = self.files()
        if ca is None:
            context = ssl.create_default_context()
        else:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies, names checked
            _load_ca(context, ca, f"--tls-ca {self.ca}")
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["http/1.1"])
        if cert is not None and key is not None:
            _load_chain(context, cert, key, f"--tls-cert {self.cert} / --tls-key {self.key}")
        return context

    def grpc_channel(
        self, target: str, options: list[tuple[str, Any]] | None = None
    ) -> grpc.Channel:
        """A secure channel to `target` (HOST:PORT or unix:PATH)."""
        import grpc

        ca, cert, key = self.files()
        if cert is not None and key is not None:  # the pair checked as ssl would, before dialing
            _load_chain(
                ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT),
                cert,
                key,
                f"--tls-cert {self.cert} / --tls-key {self.key}",
            )
        credentials = grpc.ssl_channel_credentials(
            root_certificates=ca, private_key=key, certificate_chain=cert
        )
        options = list(options or [])
        if self.server_name:
            options.append(("grpc.ssl_target_name_override", self.server_name))
        return grpc.secure_channel(target, credentials, options=options)

    def to_env(self) -> dict[str, str]:
        """These options as environment variables, for a load-test process (`from_env`)."""
        env = {TLS_ON_ENV: "1"}
        for item in fields(self):
            value = getattr(self, item.name)
            if value is not None:
                env[TLS_ENV[item.name]] = str(value.resolve() if isinstance(value, Path) else value)
        return env

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> ClientTls | None:
        """The options `to_env` set, or None (plaintext) when it set none."""
        if environ.get(TLS_ON_ENV) != "1":
            return None
        paths = {
            k: Path(environ[v]) for k, v in TLS_ENV.items() if k != "server_name" and environ.get(v)
        }
        return cls(**paths, server_name=environ.get(TLS_ENV["server_name"]) or None)


# ---------------------------------------------------------------------------------------------
# Failures

_CERT_REQUIRED = (
    "the server asks for a client certificate (mutual TLS): give --tls-cert and --tls-key"
)
_CERT_REFUSED = (
    "the server does not trust this client's certificate: give one signed by a CA in the "
    "server's custom_ca"
)
# (pattern in the error's text, what it means and what to give); the first that matches wins.
_FAILURES: list[tuple[re.Pattern[str], str]] = [
    (
        re.compile(r"certificate has expired|CERTIFICATE_EXPIRED|certificate expired", re.I),
        "a certificate has expired (the server's, or this client's if the server says so): "
        "renew it",
    ),
    (
        re.compile(
            r"hostname mismatch|IP address mismatch|doesn't match|not in peer certificate|"
            r"does not match|Peer name|Hostname Verification",
            re.I,
        ),
        "the server's certificate does not name the host dialed: dial a name it holds, or give "
        "that name with --tls-server-name",
    ),
    (
        re.compile(
            r"CERTIFICATE_REQUIRED|certificate required|PEER_DID_NOT_RETURN_A_CERTIFICATE", re.I
        ),
        _CERT_REQUIRED,
    ),
    (
        re.compile(r"UNKNOWN_CA|unknown ca|BAD_CERTIFICATE|bad certificate", re.I),
        _CERT_REFUSED,
    ),
    (
        re.compile(
            r"self[- ]signed|unable to get local issuer|CERTIFICATE_VERIFY_FAILED|"
            r"certificate verify failed",
            re.I,
        ),
        "the server's certificate is not signed by a CA this client trusts: give the CA's "
        "certificate with --tls-ca",
    ),
    (
        re.compile(
            r"WRONG_VERSION_NUMBER|wrong version number|packet length too long|"
            r"HTTP_REQUEST|record layer failure",
            re.I,
        ),
        "the server speaks plaintext on this port: dial it without TLS (http:// or grpc://, "
        "no --tls-* options)",
    ),
]
_PLAINTEXT_ON_TLS = (
    "the server speaks TLS on this port: dial https:// or grpcs://, or give --tls-ca"
)


def explain(text: str, *, tls: bool | None = None) -> str | None:
    """What a connection failure with this text means for TLS, and what to give; None when the
    text alone does not say (see `diagnose`). `tls`: whether the client dialed with TLS (None:
    not known)."""
    for pattern, meaning in _FAILURES:
        if pattern.search(text):
            if tls is False and "plaintext" in meaning:
                continue
            return meaning
    return None


def diagnose_address(
    address: str, tls: ClientTls | None, *, grpc: bool, timeout: float = 2.0
) -> str | None:
    """`diagnose` for an address as clients hold it (HOST:PORT, [V6]:PORT, with or without a
    scheme); None for a Unix socket or an address without a port."""
    bare = split_scheme(address)[0] if "://" in address else address
    host, _, port = bare.rpartition(":")
    if not port.isdigit() or not host or bare.startswith("unix:"):
        return None
    return diagnose(host.strip("[]"), int(port), tls, grpc=grpc, timeout=timeout)


def diagnose(
    host: str, port: int, tls: ClientTls | None, *, grpc: bool, timeout: float = 2.0
) -> str | None:
    """Why dialing `host:port` with `tls` (None: plaintext) fails, found by a handshake of our
    own, for a failure whose text says nothing (gRPC's "Socket closed", a REST connection closed
    before answering): a plaintext client on a TLS port; under TLS 1.3 a server refuses a client
    certificate only after the handshake, with an alert that gRPC does not report. None when the
    handshake finds nothing wrong, or nothing answers. Only on failures: it opens a connection."""
    import socket

    try:
        sock = socket.create_connection((host, port), timeout)
    except OSError:
        return None
    if tls is None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        server_name = host
    else:
        try:
            context = tls.ssl_context()
        except TlsConfigError as exc:
            sock.close()
            return str(exc)
        server_name = tls.server_name or host
    context.set_alpn_protocols(["h2"] if grpc else ["http/1.1"])
    try:
        with context.wrap_socket(sock, server_hostname=server_name) as wrapped:
            if tls is None:
                return _PLAINTEXT_ON_TLS  # it completed a TLS handshake
            wrapped.settimeout(min(timeout, 0.5))
            try:
                data = wrapped.recv(1)  # gRPC's server speaks first (SETTINGS); HTTP's waits
            except ssl.SSLError as exc:
                return explain(str(exc), tls=True)
            except TimeoutError:
                return None
            if data:
                return None
            # Closed straight after a handshake, before a byte was asked of it: under TLS 1.3
            # a client certificate is checked only once the handshake is over, and neither
            # gRPC's server nor Python's sends the alert that would say so.
            return _CERT_REQUIRED if tls.cert is None else _CERT_REFUSED
    except ssl.SSLError as exc:
        if tls is None:  # a TLS alert: the port speaks TLS, and did not like our hello
            return _PLAINTEXT_ON_TLS if "alert" in str(exc).lower() else None
        return explain(str(exc), tls=True)
    except OSError:
        return None
    finally:
        sock.close()
