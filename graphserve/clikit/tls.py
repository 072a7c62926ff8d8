"""The TLS options of every command that dials a server, declared once: `--tls-ca`, `--tls-cert`,
`--tls-key`, `--tls-server-name` (an `https://` or `grpcs://` address turns TLS on alone). A
command takes the four as parameters annotated with these types and makes its ClientTls (the
core's options type, graphserve.core.tls) with `client_tls(...)`, which exits 2 on options that
cannot work."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from graphserve.core.tls import ClientTls, TlsConfigError

__all__ = ["TlsCa", "TlsCert", "TlsKey", "TlsServerName", "client_tls"]

_PANEL = "TLS"

TlsCa = Annotated[
    Path | None,
    typer.Option(
        "--tls-ca",
        help="Dial over TLS, trusting this CA's certificate (PEM) instead of the system's.",
        rich_help_panel=_PANEL,
        show_default=False,
    ),
]
TlsCert = Annotated[
    Path | None,
    typer.Option(
        "--tls-cert",
        help="Dial over TLS, showing this client certificate (PEM) to a server that asks "
        "(mutual TLS: SSLConfig's client_verify); with --tls-key.",
        rich_help_panel=_PANEL,
        show_default=False,
    ),
]
TlsKey = Annotated[
    Path | None,
    typer.Option(
        "--tls-key",
        help="The private key (PEM) of --tls-cert.",
        rich_help_panel=_PANEL,
        show_default=False,
    ),
]
TlsServerName = Annotated[
    str | None,
    typer.Option(
        "--tls-server-name",
        help="Dial over TLS, expecting this name in the server's certificate instead of the "
        "address's host.",
        rich_help_panel=_PANEL,
        show_default=False,
    ),
]


def client_tls(
    ca: Path | None, cert: Path | None, key: Path | None, server_name: str | None
) -> ClientTls | None:
    """The ClientTls the options ask for (None: none given, plaintext unless an address says
    https:// or grpcs://); a usage error (exit 2) naming the option that cannot work."""
    try:
        tls = ClientTls.of(ca, cert, key, server_name)
        if tls is not None:
            tls.files()  # unreadable or not PEM: said now, not at the first request
    except TlsConfigError as exc:
        raise typer.BadParameter(str(exc)) from None
    return tls
