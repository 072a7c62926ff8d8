"""Which addresses a load test may target.

Our workplace rule: a load test only ever hits this machine unless the operator explicitly opts in
(`--allow-remote`). Pointing a load generator at someone else's server by a typo is an incident.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from graphserve.core.errors import RemoteTargetError

__all__ = ["check_loopback", "host_of", "http_base_url", "is_loopback"]

_ACCEPTED_FORMS = "HOST:PORT, [IPV6]:PORT or http(s)://HOST:PORT"


def host_of(address: str) -> str:
    """The host part of `127.0.0.1:8500`, `[::1]:8500` or `http://localhost:8501` (lower case).

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
    if parts.scheme not in ("", "http", "https") or not parts.hostname:
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
