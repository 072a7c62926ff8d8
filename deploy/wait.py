"""Wait until TF Serving (or an embedded server) reports every model AVAILABLE over gRPC.

`ModelService.GetModelStatus` through the client (graphserve.core.client), over TLS when the
deployment has an SSL config. A model is ready when each version the server reports is
AVAILABLE (an END version that unloaded cleanly, an older one replaced by a newer, does not count
against it). A version that ENDed with an error failed to load, and a TLS handshake that fails
(a CA the server's certificate is not signed by, no client certificate for client_verify) will
not pass by waiting: both fail at once instead of at the timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from graphserve.core.client import VersionStatus, model_status
from graphserve.core.errors import NotAvailableError
from graphserve.core.tls import ClientTls, diagnose_address

__all__ = ["wait_until_available"]


def _ready(statuses: list[VersionStatus]) -> bool:
    live = [s for s in statuses if s.state != "END"]
    return bool(live) and all(s.state == "AVAILABLE" for s in live)


def wait_until_available(
    address: str,
    model_names: Iterable[str],
    *,
    timeout: float,
    interval: float = 1.0,
    check: Callable[[], None] | None = None,
    tls: ClientTls | None = None,
) -> dict[str, list[VersionStatus]]:
    """Poll until every model is ready; returns the last status of each. `tls`: dial over TLS
    with these options (None: plaintext).

    `check`, called between polls, may raise to stop early (say, the container has exited).
    Raises NotAvailableError when a version failed to load, when the TLS handshake fails (why,
    and what to give), or at `timeout` seconds naming the models that are not ready and what
    the server last said about them.
    """
    names = list(model_names)
    deadline = time.monotonic() + timeout
    last: dict[str, list[VersionStatus]] = {name: [] for name in names}
    while True:
        for name in names:
            if _ready(last[name]):
                continue
            last[name] = model_status(address, name, tls=tls)
            for status in last[name]:
                if status.state == "END" and status.error_code != 0:
                    raise NotAvailableError(
                        f"model {name} version {status.version} failed to load: "
                        f"{status.error_message or f'error code {status.error_code}'}"
                    )
        pending = [name for name in names if not _ready(last[name])]
        if not pending:
            return last
        # model_status answers [] for any failure: a handshake of our own says if TLS is why
        # (None while nothing listens there yet, and when the handshake goes through)
        if tls is not None and any(not last[name] for name in pending):
            reason = diagnose_address(address, tls, grpc=True)
            if reason is not None:
                raise NotAvailableError(f"the TLS connection to {address} fails: {reason}")
        if time.monotonic() >= deadline:
            said = "; ".join(
                f"{name}: "
                + (", ".join(f"v{s.version} {s.state}" for s in last[name]) or "no answer")
                for name in pending
            )
            raise NotAvailableError(f"not AVAILABLE after {timeout:g}s at {address} ({said})")
        if check is not None:
            check()
        time.sleep(min(interval, max(deadline - time.monotonic(), 0.0)))
