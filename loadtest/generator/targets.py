"""Which addresses a load test may target, and how it dials them.

Our workplace rule: a load test only ever hits this machine unless the operator explicitly opts in
(`--allow-remote`). Pointing a load generator at someone else's server by a typo is an incident.
A TLS address (`grpcs://`, `https://`) is no exception: loopback unless --allow-remote.

TLS: a command resolves each address it was given with its `--tls-*` options once (`dial`):
the target it hands to locust says by its scheme whether it is TLS (gRPC `HOST:PORT` or
`grpcs://HOST:PORT`, REST `http://` or `https://`), and the options travel in the locust
processes' environment (`ClientTls.to_env`, `tls_env`). A locust process dials a target with
`target_tls(target)`: the scheme says whether, the environment with what.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from urllib.parse import urlsplit

from graphserve.core.errors import RemoteTargetError
from graphserve.core.tls import TLS_ENV, TLS_ON_ENV, ClientTls, split_scheme

__all__ = [
    "check_loopback",
    "dial",
    "host_of",
    "http_base_url",
    "is_loopback",
    "scheme_tls",
    "target_tls",
    "tls_env",
]

_ACCEPTED_FORMS = "HOST:PORT, [IPV6]:PORT, grpc(s)://HOST:PORT or http(s)://HOST:PORT"
_SCHEMES = ("", "http", "https", "grpc", "grpcs")
# Every variable ClientTls.to_env may set: a child's environment holds this run's, not ours.
_TLS_VARIABLES = frozenset({*TLS_ENV.values(), TLS_ON_ENV})


def host_of(address: str) -> str:
    """The host part of `127.0.0.1:8500`, `[::1]:8500`, `grpcs://127.0.0.1:8500` or
    `http://localhost:8501` (lower case).

    Raises RemoteTargetError when the address cannot be parsed, because an address we cannot read
    is an address we cannot vouch for.
    """
    text = address.strip()
    # urlsplit only finds the host after "//"; gRPC targets come without a scheme.
    parts = urlsplit(text if "://" in text else f"//{text}")
    try:
        _ = parts.port  # urlsplit only validates the port when it is read
    except ValueError:
        raise RemoteTargetError(
            f"target {address!r} has an invalid port: expected {_ACCEPTED_FORMS}"
        ) from None
    if parts.scheme.lower() not in _SCHEMES or not parts.hostname:
        raise RemoteTargetError(f"target {address!r} is not an address: expected {_ACCEPTED_FORMS}")
    return parts.hostname.lower()


def is_loopback(address: str) -> bool:
    """True when `address` names this machine: localhost, 127.0.0.0/8 or ::1."""
    host = host_of(address)
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        # A DNS name other than localhost may resolve anywhere.
        return False


def check_loopback(address: str, allow_remote: bool = False) -> None:
    """Raise RemoteTargetError unless `address` is on loopback (localhost, 127.0.0.0/8, ::1) or
    `allow_remote` is set; an address that cannot be parsed is refused either way."""
    if allow_remote:
        host_of(address)
        return
    if not is_loopback(address):
        raise RemoteTargetError(
            f"target {address!r} is not on this machine: load tests may only target loopback "
            "(127.0.0.0/8, localhost, ::1); pass --allow-remote if you own that server and mean it"
        )


def http_base_url(address: str) -> str:
    """`http://HOST:PORT` for a REST address given as `HOST:PORT` or as a URL; no trailing `/`."""
    text = address.strip().rstrip("/")
    return text if "://" in text else f"http://{text}"


def dial(protocol: str, address: str, tls: ClientTls | None) -> tuple[str, ClientTls | None]:
    """The target to dial `address` at over `protocol` ("grpc" | "rest") with the options `tls`,
    its scheme saying whether it is TLS (gRPC: `HOST:PORT` or `grpcs://HOST:PORT`; REST:
    `http://` or `https://HOST:PORT`), and the ClientTls to dial it with (None: plaintext).
    An address without a scheme is TLS when options are given; `grpcs://` and `https://` alone
    trust the system's CAs. TlsConfigError when `grpc://` or `http://` comes with options."""
    bare, dialed = ClientTls.for_address(address.strip(), tls)
    if protocol == "grpc":
        return (f"grpcs://{bare}" if dialed else bare), dialed
    return f"{'https' if dialed else 'http'}://{bare}", dialed


def scheme_tls(address: str, tls: ClientTls | None) -> ClientTls | None:
    """The TLS to dial an address whose scheme says whether: `grpcs://` and `https://` with the
    options `tls` (the system's CAs without), anything else plaintext. For the targets `dial`
    made, in the locust processes (`tls` from their environment), and for metrics URLs."""
    return (tls or ClientTls()) if split_scheme(address.strip())[1] else None


def target_tls(target: str, environ: Mapping[str, str] = os.environ) -> ClientTls | None:
    """In a locust process: the TLS to dial one of the plan's targets with (see `dial`), its
    scheme saying whether, and the options the command put in `environ` with what."""
    return scheme_tls(target, ClientTls.from_env(environ))


def tls_env(environ: Mapping[str, str], tls: ClientTls | None) -> dict[str, str]:
    """`environ` for a locust process of a run dialed with `tls`: its TLS options and no other
    (none inherited from this process's own environment)."""
    kept = {name: value for name, value in environ.items() if name not in _TLS_VARIABLES}
    return {**kept, **(tls.to_env() if tls is not None else {})}
