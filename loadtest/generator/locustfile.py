"""Locust users that call a TF Serving-compatible server: gRPC Predict and REST :predict.

Works on its own against any TF Serving API (ours or a real TF Serving), one user class at a time:

    locust -f loadtest/generator/locustfile.py --headless -u 1 -r 1 -t 10s \
        --host 127.0.0.1:8500 GrpcPredictUser
    locust -f loadtest/generator/locustfile.py --headless -u 1 -r 1 -t 10s \
        --host http://127.0.0.1:8501 RestPredictUser

Options added to locust's: --model-name, --signature-name, --payload-file (an .npz from
loadtest.payloads; without it the payload is built from the server's model metadata with --seed),
--batch-size, --max-requests (the run quits after that many requests) and --allow-remote (without it
only loopback targets are accepted). The payload is built and encoded once per process.

Over TLS: `--host grpcs://127.0.0.1:8500` or `--host https://127.0.0.1:8501`, trusting the
system's CAs, or the CA, client certificate and server name in GRAPHSERVE_TLS_CA,
GRAPHSERVE_TLS_CERT, GRAPHSERVE_TLS_KEY and GRAPHSERVE_TLS_SERVER_NAME with GRAPHSERVE_TLS=1
(what `graphserve loadtest` puts in its locust processes' environment: ClientTls.to_env).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import gevent
from locust import events
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from graphserve.core.client import rest_path
from graphserve.core.errors import LoadTestError
from graphserve.loadtest.generator.metadata import fetch_specs
from graphserve.loadtest.generator.payloads import (
    build_payload,
    grpc_request_bytes,
    load_payload,
    rest_body,
)
from graphserve.loadtest.generator.targets import check_loopback, target_tls
from graphserve.loadtest.generator.users import (
    LoopUser,
    RequestBudget,
    Sender,
    Traffic,
    Turn,
    predict_sender,
)

logger = logging.getLogger("graphserve.loadtest")

_RPC_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class LoadOptions:
    """Our command line options; defaults when locust runs as a library without a parser."""

    model_name: str = "mlp"
    signature_name: str = "serving_default"
    payload_file: str = ""
    batch_size: int = 1
    seed: int = 0
    max_requests: int = 0
    allow_remote: bool = False

    @classmethod
    def of(cls, environment: Environment) -> LoadOptions:
        parsed = environment.parsed_options
        if parsed is None:
            return cls()
        return cls(
            model_name=str(parsed.model_name),
            signature_name=str(parsed.signature_name),
            payload_file=str(parsed.payload_file),
            batch_size=int(parsed.batch_size),
            seed=int(parsed.seed),
            max_requests=int(parsed.max_requests),
            allow_remote=bool(parsed.allow_remote),
        )


@events.init_command_line_parser.add_listener
def _add_options(parser: Any) -> None:
    group = parser.add_argument_group("graphserve", "TF Serving Predict load (graphserve)")
    group.add_argument(
        "--model-name",
        default="mlp",
        env_var="LOCUST_MODEL_NAME",
        help="model to call (default: mlp)",
    )
    group.add_argument(
        "--signature-name",
        default="serving_default",
        env_var="LOCUST_SIGNATURE_NAME",
        help="signature to call",
    )
    group.add_argument(
        "--payload-file",
        default="",
        env_var="LOCUST_PAYLOAD_FILE",
        help=".npz of inputs; default: built from the model's metadata",
    )
    group.add_argument(
        "--batch-size",
        type=int,
        default=1,
        env_var="LOCUST_BATCH_SIZE",
        help="rows per request when the payload is built from metadata",
    )
    group.add_argument(
        "--seed",
        type=int,
        default=0,
        env_var="LOCUST_SEED",
        help="seed of the payload built from metadata",
    )
    group.add_argument(
        "--max-requests",
        type=int,
        default=0,
        env_var="LOCUST_MAX_REQUESTS",
        help="quit after this many requests (per locust process; 0: no bound)",
    )
    group.add_argument(
        "--allow-remote",
        action="store_true",
        default=False,
        help="allow targets that are not on this machine (default: loopback only)",
    )


# ---------------------------------------------------------------------------------------------
# Once per process: the encoded request for each (protocol, host), and the request budget.

_encoded: dict[tuple[str, str], bytes] = {}


def encoded_request(protocol: str, host: str, options: LoadOptions) -> bytes:
    """The request body for `protocol` at `host`, built on first use and reused after.

    Raises LoadTestError when the host is not allowed or the payload cannot be built.
    """
    key = (protocol, host)
    if key not in _encoded:
        check_loopback(host, options.allow_remote)
        if options.payload_file:
            inputs = load_payload(Path(options.payload_file))
        else:
            specs = fetch_specs(
                protocol, host, options.model_name, options.signature_name, tls=target_tls(host)
            )
            inputs = build_payload(specs, options.batch_size, options.seed)
        if protocol == "grpc":
            _encoded[key] = grpc_request_bytes(inputs, options.model_name, options.signature_name)
        else:
            _encoded[key] = rest_body(inputs, options.signature_name)
    return _encoded[key]


# Every user sends back to back, from the start, until locust stops it or the budget is spent.
traffic: Traffic[None] = Traffic()
traffic.publish(Turn(None))


@events.init.add_listener
def _on_init(environment: Environment, **_: Any) -> None:
    if isinstance(environment.runner, MasterRunner):
        return  # the master sends no requests; its workers do all of this themselves
    options = LoadOptions.of(environment)
    runner = environment.runner
    if options.max_requests and runner is not None:
        # Spawned, not called: quitting from inside a user's request would kill that user mid-call.
        traffic.budget = RequestBudget(options.max_requests, lambda: gevent.spawn(runner.quit))
        environment.events.request.add_listener(traffic.budget.complete)
    # Headless, fail before any user starts, with one clear line rather than once per user. (A
    # worker learns its host from the master, and the web UI takes one later: users build then.)
    headless = bool(getattr(environment.parsed_options, "headless", False))
    if not headless or isinstance(runner, WorkerRunner):
        return
    try:
        for user_class in environment.user_classes:
            protocol = getattr(user_class, "protocol", None)
            host = environment.host or user_class.host
            if protocol and host:
                encoded_request(protocol, host, options)
    except LoadTestError as exc:
        logger.error("%s", exc)
        raise SystemExit(exc.exit_code) from None


# ---------------------------------------------------------------------------------------------
# The users


class _PredictUser(LoopUser):
    """Sends one pre-encoded Predict to the host, back to back, from a real OS thread of its own
    (generator/senders.py says why); the call alone is timed and the answer is not parsed."""

    abstract = True
    traffic = traffic
    protocol: ClassVar[str]

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        options, host = LoadOptions.of(environment), self.host or ""
        self._sender = predict_sender(
            self.protocol,
            host,
            encoded_request(self.protocol, host, options),
            timeout_s=_RPC_TIMEOUT_S,
            rest_path=rest_path(options.model_name, "predict"),
            tls=target_tls(host),
        )

    def senders(self) -> list[Sender]:
        return [self._sender]


class GrpcPredictUser(_PredictUser):
    """Calls `PredictionService/Predict` with one pre-serialized PredictRequest over a channel of
    its own: the bytes go out as they are."""

    host = "127.0.0.1:8500"  # TF Serving's default gRPC port
    protocol = "grpc"


class RestPredictUser(_PredictUser):
    """POSTs one pre-encoded JSON body to `/v1/models/NAME:predict` over a keep-alive connection;
    anything but 200 fails."""

    host = "http://127.0.0.1:8501"  # TF Serving's default REST port
    protocol = "rest"
