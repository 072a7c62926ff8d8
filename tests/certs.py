"""Certificates made at test time (trustme: a CA of its own, never the system's), for the TLS
tests: a CA, a server certificate for 127.0.0.1 / ::1 / localhost and a client certificate it
signed, a client certificate signed by another CA, a server certificate that has expired and
one issued for another name; and TF Serving's SSLConfig text proto over them."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

import trustme

LOOPBACK_NAMES = ("127.0.0.1", "::1", "localhost")


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Certs:
    ca: Path  # the CA's certificate (PEM)
    server: Pair  # for 127.0.0.1, ::1 and localhost
    client: Pair  # signed by `ca`
    stranger: Pair  # a client signed by another CA
    expired: Pair  # a server certificate for the loopback names, expired a day ago
    wrong_name: Pair  # a server certificate for elsewhere.example only
    other_ca: Path  # the other CA's certificate

    def ssl_config(
        self,
        path: Path,
        *,
        server: Pair | None = None,
        custom_ca: Path | None = None,
        client_verify: bool = False,
    ) -> Path:
        """TF Serving's SSLConfig text proto at `path`: PEM text in its string fields."""
        pair = server or self.server
        lines = [
            f"server_key: {_quoted(pair.key.read_text())}",
            f"server_cert: {_quoted(pair.cert.read_text())}",
        ]
        if custom_ca is not None:
            lines.append(f"custom_ca: {_quoted(custom_ca.read_text())}")
        if client_verify:
            lines.append("client_verify: true")
        path.write_text("\n".join(lines) + "\n")
        return path


def _quoted(text: str) -> str:
    """A text proto string: TF Serving's docs write PEM with its newlines escaped."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def make_certs(directory: Path) -> Certs:
    directory.mkdir(parents=True, exist_ok=True)
    ca, other = trustme.CA(), trustme.CA()

    def write(name: str, leaf: trustme.LeafCert) -> Pair:
        cert, key = directory / f"{name}.crt", directory / f"{name}.key"
        leaf.cert_chain_pems[0].write_to_path(str(cert))
        leaf.private_key_pem.write_to_path(str(key))
        return Pair(cert, key)

    now = datetime.datetime.now(datetime.UTC)
    ca.cert_pem.write_to_path(str(directory / "ca.crt"))
    other.cert_pem.write_to_path(str(directory / "other-ca.crt"))
    return Certs(
        ca=directory / "ca.crt",
        server=write("server", ca.issue_cert(*LOOPBACK_NAMES)),
        client=write("client", ca.issue_cert("client.graphserve.test")),
        stranger=write("stranger", other.issue_cert("client.graphserve.test")),
        expired=write(
            "expired",
            ca.issue_cert(
                *LOOPBACK_NAMES,
                not_before=now - datetime.timedelta(days=30),
                not_after=now - datetime.timedelta(days=1),
            ),
        ),
        wrong_name=write("wrong-name", ca.issue_cert("elsewhere.example")),
        other_ca=directory / "other-ca.crt",
    )
