"""Before any load: is TLS why a server cannot be reached?

A load test whose every connection fails the TLS handshake would run to its end and report a run
full of failed requests, none saying why. So each command asks every target once before it
starts locust (one GetModelStatus, or one GET of the model's status or of a metrics URL) and
stops with the reason and what to give, in graphserve.core.tls's words ("the server asks for a
client certificate (mutual TLS): give --tls-cert and --tls-key"). Any other failure (nothing
listening, an unknown model) is left to the run, which counts and reports it as before.
"""

from __future__ import annotations

from graphserve.core.client import GrpcClient, RestClient, status_request
from graphserve.core.errors import ServerUnreachable
from graphserve.core.httpclient import TlsError
from graphserve.core.tls import ClientTls
from graphserve.loadtest.generator.scrape import get_text

__all__ = ["check_metrics_tls", "check_tls", "grpc_tls_failure", "tls_failure"]

_TIMEOUT_S = 5.0


def grpc_tls_failure(client: GrpcClient, exc: BaseException) -> str | None:
    """`client.error_text(exc)` when TLS is why the call failed, else None."""
    return client.error_text(exc) if client.tls_reason(exc) is not None else None


def tls_failure(
    protocol: str,
    target: str,
    tls: ClientTls | None,
    model_name: str,
    timeout_s: float = _TIMEOUT_S,
) -> str | None:
    """Why dialing `target` over `protocol` ("grpc" | "rest") with `tls` fails for TLS, as the
    client says it (`GrpcClient.error_text`, TlsError); None when it answers, or fails for
    another reason."""
    if protocol == "grpc":
        import grpc

        with GrpcClient.connect(target, tls=tls, timeout=timeout_s) as client:
            try:
                client.status(status_request(model_name))
            except grpc.RpcError as exc:
                return grpc_tls_failure(client, exc)
        return None
    try:
        with RestClient(target, tls=tls, timeout=timeout_s) as client:
            client.status(model_name)
    except TlsError as exc:
        return str(exc)
    except OSError:
        return None
    return None


def check_tls(
    what: str, protocol: str, target: str, tls: ClientTls | None, model_name: str
) -> None:
    """ServerUnreachable naming `what` (e.g. "arm graph") when TLS is why `target` cannot be
    reached (see `tls_failure`)."""
    reason = tls_failure(protocol, target, tls, model_name)
    if reason is None:
        return
    if protocol == "grpc":
        raise ServerUnreachable(f"cannot reach the gRPC API of {what} at {target}: {reason}")
    raise ServerUnreachable(f"cannot reach the REST API of {what}: {reason}")  # names the URL


def check_metrics_tls(url: str, tls: ClientTls | None) -> None:
    """ServerUnreachable when TLS is why the metrics at `url` cannot be scraped (an https://
    URL with options that do not fit, or TLS on one side only)."""
    try:
        get_text(url, _TIMEOUT_S, tls)
    except TlsError as exc:
        raise ServerUnreachable(f"cannot scrape the metrics at {url}: {exc}") from None
    except (OSError, ValueError):
        return
