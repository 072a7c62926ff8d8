"""`python -m tools.bench tls` (`make bench-tls`): what TLS costs the graph server, measured against
plaintext in the same run.

Three `graphserve serve graph` processes on loopback serve the exported example mlp, alike but
for their SSL config (TF Serving's SSLConfig text proto, over certificates made here by trustme
from a CA of the run's own):

    plaintext   no --ssl-config-file
    tls         server_key and server_cert: TLS on gRPC (gRPC's BoringSSL), HTTPS on REST
                (Python's ssl on the REST front end's event loop)
    mtls        the same with client_verify and custom_ca: mutual TLS, the client showing a
                certificate the CA signed

This process is the client of all three (each server is a process of its own, so the client's
CPU is not the server's), with the same request bytes for every arm, over gRPC and REST:

    keep-alive    p50 at 1 client, one connection and many requests: the six callers (arm ×
                  protocol) timed in interleaved rounds (bench.timing.interleave)
    connect       p50 at 1 client with a new connection per request, the handshake included (REST:
                  a new TCP and TLS connection, no session resumption; gRPC: a new channel with a
                  subchannel of its own), interleaved likewise
    16 clients    req/s of 16 closed-loop clients and the server's CPU per request (the CPU
                  window of tools/bench/measure.py: connections made before its clocks start),
                  in short windows whose order (arm × protocol) reverses each round

Each figure of TLS and mutual TLS is also given as a ratio to plaintext's. No goals: `NO_GOALS`.
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Protocol, cast

import grpc

from graphserve.core.client import JSON_HEADERS, RPC_METHODS, GrpcClient, predict_outputs
from graphserve.core.httpclient import HttpConnection, blocking_connector
from graphserve.core.processes import ServerProcess
from graphserve.core.tls import ClientTls
from tools.bench.clients import BenchRequestError, Load, merge
from tools.bench.measure import CpuWindow, cpu_window
from tools.bench.served import Requests
from tools.bench.timing import interleave

__all__ = [
    "ARMS",
    "FIGURES",
    "KEY_TYPES",
    "NO_GOALS",
    "PROTOCOLS",
    "TlsPlan",
    "figure_lines",
    "render_tls",
    "run_tls",
    "write_tls",
]

ROOT = Path(__file__).resolve().parents[2]
MODEL = "mlp"
ARMS = ("plaintext", "tls", "mtls")
PROTOCOLS = ("grpc", "rest")
KEY_TYPES = {"ecdsa": "ECDSA P-256", "rsa": "RSA 2048"}  # trustme's two key types
_TIMEOUT_S = 60.0
NO_GOALS = (
    "No goals: the outside figures for TLS's cost (Google's, of about 1% of a front end's CPU "
    "after turning HTTPS on for Gmail) are shares of C and C++ servers' whole CPU, with session "
    "resumption and real request handlers; none bounds a Python server's cost per request for "
    "a small model on loopback, and a bound set here would be one fitted to this run."
)

Say = Callable[[str], None]


@dataclass(frozen=True)
class TlsPlan:
    """What `run_tls` measures, and how long. `model_dir`: an exported mlp's base path (BASE/mlp);
    None exports one into `work_dir`."""

    work_dir: Path
    key_type: str = "ecdsa"  # a key of KEY_TYPES: the CA's, the server's and the client's
    keepalive_s: float = 30.0  # the six keep-alive callers, interleaved
    connect_s: float = 30.0  # the six new-connection callers, interleaved
    clients: int = 16
    window_s: float = 3.0  # one closed-loop window of one arm and protocol
    rounds: int = 5  # windows per arm and protocol
    warmup_s: float = 1.0  # an untimed window per arm and protocol first
    model_dir: Path | None = None

    @classmethod
    def quick(
        cls, work_dir: Path, key_type: str = "ecdsa", model_dir: Path | None = None
    ) -> TlsPlan:
        """Seconds instead of minutes: every part runs, its numbers are not data."""
        return cls(work_dir, key_type, keepalive_s=0.3, connect_s=0.3, clients=4, window_s=0.3,
                   rounds=2, warmup_s=0.1, model_dir=model_dir)  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        skip = ("work_dir", "model_dir")
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}


# ---------------------------------------------------------------------------------------------
# Certificates and the three servers


@dataclass(frozen=True)
class Certificates:
    """PEM files: a CA, a server certificate for 127.0.0.1 and localhost, a client's."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_certificates(directory: Path, key_type: str) -> Certificates:
    """A CA of this run's own and the two certificates it signs, written to `directory`."""
    import trustme

    kind = trustme.KeyType.ECDSA if key_type == "ecdsa" else trustme.KeyType.RSA
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA(key_type=kind)
    ca.cert_pem.write_to_path(str(directory / "ca.crt"))

    def write(name: str, leaf: trustme.LeafCert) -> tuple[Path, Path]:
        cert, key = directory / f"{name}.crt", directory / f"{name}.key"
        leaf.cert_chain_pems[0].write_to_path(str(cert))
        leaf.private_key_pem.write_to_path(str(key))
        return cert, key

    server = write("server", ca.issue_cert("127.0.0.1", "localhost", key_type=kind))
    client = write("client", ca.issue_cert("client.bench.test", key_type=kind))
    return Certificates(directory / "ca.crt", *server, *client)


def ssl_config(certs: Certificates, *, client_verify: bool) -> str:
    """TF Serving's SSLConfig text proto: PEM text in its string fields."""

    def quoted(path: Path) -> str:
        text = path.read_text()
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'

    lines = [f"server_key: {quoted(certs.server_key)}", f"server_cert: {quoted(certs.server_cert)}"]
    if client_verify:
        lines += [f"custom_ca: {quoted(certs.ca)}", "client_verify: true"]
    return "\n".join(lines) + "\n"


def client_tls(arm: str, certs: Certificates) -> ClientTls | None:
    """How a client dials `arm`: plaintext, trusting the CA, or with the client certificate too."""
    if arm == "plaintext":
        return None
    if arm == "tls":
        return ClientTls(ca=certs.ca)
    return ClientTls(ca=certs.ca, cert=certs.client_cert, key=certs.client_key)


class _Server(ServerProcess):
    """`graphserve serve graph`, asked whether it is ready over its own TLS."""

    tls: ClientTls | None = None

    def is_ready(self) -> bool:
        from graphserve.core.client import model_status

        versions = model_status(self.grpc_address, self.model_name, tls=self.tls)
        return any(v.state == "AVAILABLE" for v in versions)


@contextlib.contextmanager
def tls_servers(
    model_dir: Path, certs: Certificates, work_dir: Path
) -> Iterator[dict[str, _Server]]:
    """The three arms' servers, started at once (they load in parallel), stopped at the end.
    RuntimeError naming the arm whose server did not start, with its log tail."""
    from graphserve.core.processes import serve_args

    servers: dict[str, _Server] = {}
    for arm in ARMS:
        args = [*serve_args("graph", model_dir, None), "--model-name", MODEL]
        if arm != "plaintext":
            config = work_dir / f"ssl-{arm}.pbtxt"
            config.write_text(ssl_config(certs, client_verify=arm == "mtls"))
            args += ["--ssl-config-file", str(config)]
        server = cast(_Server, _Server.on_free_ports(args, MODEL, work_dir / f"{arm}.log"))
        server.tls = client_tls(arm, certs)
        servers[arm] = server
    try:
        with ThreadPoolExecutor(len(servers)) as pool:
            started = {arm: pool.submit(s.start) for arm, s in servers.items()}
            for arm, future in started.items():
                try:
                    future.result()
                except RuntimeError as exc:
                    raise RuntimeError(f"the {arm} server did not start: {exc}") from None
        yield servers
    finally:
        for server in servers.values():
            server.stop()


# ---------------------------------------------------------------------------------------------
# Callers: one pre-encoded request, sent again and again (as tools/bench/clients.py's, with TLS)


class Caller(Protocol):
    def __call__(self) -> bytes: ...
    def close(self) -> None: ...


class GrpcCaller:
    """Predict over one channel kept open (`fresh=False`), or over a new channel per request
    with a subchannel of its own, so a new connection and handshake (`fresh=True`). Raises
    BenchRequestError when the first answer is an error or has no outputs."""

    def __init__(self, address: str, request: bytes, tls: ClientTls | None, fresh: bool) -> None:
        self.address, self.request, self.fresh = address, request, fresh
        self.client: GrpcClient | None = None
        if fresh:  # the credentials once, as a client would keep them
            ca, cert, key = tls.files() if tls else (None, None, None)
            self._credentials = grpc.ssl_channel_credentials(ca, key, cert) if tls else None
        else:
            self.client = GrpcClient.connect(address, timeout=_TIMEOUT_S, tls=tls)
            self._predict = self.client.raw("Predict")
        try:
            outputs = predict_outputs(self())
        except grpc.RpcError as exc:
            raise BenchRequestError(f"gRPC Predict to {address} failed: {exc.details()}") from None
        if not outputs:
            raise BenchRequestError(f"gRPC Predict to {address} answered without outputs")

    def __call__(self) -> bytes:
        if not self.fresh:
            return self._predict(self.request, timeout=_TIMEOUT_S)
        options = [("grpc.use_local_subchannel_pool", 1)]  # not another channel's connection
        if self._credentials is None:
            channel = grpc.insecure_channel(self.address, options)
        else:
            channel = grpc.secure_channel(self.address, self._credentials, options)
        try:
            answer: bytes = channel.unary_unary(RPC_METHODS["Predict"])(
                self.request, timeout=_TIMEOUT_S
            )
            return answer
        finally:
            channel.close()

    def close(self) -> None:
        if self.client is not None:
            self.client.close()


class RestCaller:
    """POST `body` to `path` on one kept-alive connection (`fresh=False`), or on a new one per
    request, closed after its answer (`fresh=True`). BenchRequestError on any status but 200."""

    def __init__(
        self, address: str, path: str, body: bytes, tls: ClientTls | None, fresh: bool
    ) -> None:
        self.connection = HttpConnection(
            address, _TIMEOUT_S, connect=blocking_connector(), keep_headers=False, tls=tls
        )
        self.request = self.connection.encode("POST", path, body, JSON_HEADERS)
        self.where, self.fresh = f"{address}{path}", fresh
        self()

    def __call__(self) -> bytes:
        status, answer = self.connection.send(self.request)
        if self.fresh:
            self.connection.close()
        if status != 200:
            raise BenchRequestError(f"POST {self.where} answered {status}: {answer[:300]!r}")
        return answer

    def close(self) -> None:
        self.connection.close()


def caller(protocol: str, server: _Server, requests: Requests, *, fresh: bool = False) -> Caller:
    if protocol == "grpc":
        return GrpcCaller(server.grpc_address, requests.grpc, server.tls, fresh)
    rest = str(server.rest_address)
    return RestCaller(rest, requests.rest_path, requests.rest_body, server.tls, fresh)


# ---------------------------------------------------------------------------------------------
# The measurements


def _interleaved(
    servers: Mapping[str, _Server], requests: Requests, *, fresh: bool, budget_s: float
) -> dict[str, dict[str, Any]]:
    """p50/p99 of every arm and protocol at 1 client, timed in interleaved rounds."""
    callers = {
        f"{protocol}/{arm}": caller(protocol, servers[arm], requests, fresh=fresh)
        for protocol in PROTOCOLS
        for arm in ARMS
    }
    try:
        timings = interleave(callers, budget_s=budget_s)
    finally:
        for each in callers.values():
            each.close()
    return {
        protocol: {arm: timings[f"{protocol}/{arm}"].to_json() for arm in ARMS}
        for protocol in PROTOCOLS
    }


def _under_load(
    servers: Mapping[str, _Server], requests: Requests, plan: TlsPlan, say: Say
) -> dict[str, Any]:
    """Every arm and protocol at `plan.clients` closed-loop clients, `plan.rounds` windows each,
    the order reversing each round (after an untimed window of each)."""
    order = [(protocol, arm) for protocol in PROTOCOLS for arm in ARMS]
    windows: dict[tuple[str, str], list[CpuWindow]] = {key: [] for key in order}
    rows = []

    def run(protocol: str, arm: str, seconds: float) -> CpuWindow:
        server = servers[arm]
        process = server.process
        assert process is not None
        return cpu_window(lambda: caller(protocol, server, requests), process.pid,
                          clients=plan.clients, seconds=seconds)  # fmt: skip

    for protocol, arm in order:
        run(protocol, arm, plan.warmup_s)
    for round_ in range(plan.rounds):
        say(f"{plan.clients} clients: round {round_ + 1} of {plan.rounds}")
        for protocol, arm in order:
            window = run(protocol, arm, plan.window_s)
            windows[(protocol, arm)].append(window)
            rows.append({"round": round_, "protocol": protocol, "arm": arm,
                         **_load_json(window.load, [window])})  # fmt: skip
        order.reverse()
    merged = {
        protocol: {arm: _load_json(merge([w.load for w in windows[(protocol, arm)]]),
                                   windows[(protocol, arm)]) for arm in ARMS}
        for protocol in PROTOCOLS
    }  # fmt: skip
    return {"clients": plan.clients, "arms": merged, "windows": rows}


def _load_json(load: Load, windows: list[CpuWindow]) -> dict[str, Any]:
    served = load.requests or 1
    server_cpu = sum(w.cpu_s for w in windows)
    return {
        **load.summary(),
        "server_cpu_us_per_request": server_cpu / served * 1e6,
        "server_cores": server_cpu / load.seconds if load.seconds else None,
        "client_cpu_us_per_request": sum(w.client_cpu_s for w in windows) / served * 1e6,
    }


def negotiated(server: _Server) -> str | None:
    """The REST port's TLS version and cipher, from a handshake of our own; None: plaintext."""
    if server.tls is None:
        return None
    host, _, port = str(server.rest_address).rpartition(":")
    context = server.tls.ssl_context()
    with (
        socket.create_connection((host, int(port)), _TIMEOUT_S) as sock,
        context.wrap_socket(sock, server_hostname=host) as wrapped,
    ):
        cipher = wrapped.cipher()
        return f"{wrapped.version()} {cipher[0] if cipher else '?'}"


# ---------------------------------------------------------------------------------------------
# The run


# The figures, per protocol: (key, label, (part of the results, field))
FIGURES = (
    ("keepalive_p50_ms", "keep-alive p50, 1 client (ms)", ("keepalive", "p50_ms")),
    ("connect_p50_ms", "new connection per request p50, 1 client (ms)", ("connect", "p50_ms")),
    ("rps", "req/s, {clients} clients", ("load", "rps")),
    ("server_cpu_us", "server CPU per request, {clients} clients (µs)",
     ("load", "server_cpu_us_per_request")),
)  # fmt: skip


def run_tls(plan: TlsPlan, say: Say = lambda _m: None) -> dict[str, Any]:
    """Export the mlp (unless `plan.model_dir`), start the three servers, measure; every number,
    with the figures and their ratios to plaintext. RuntimeError when a server does not start,
    BenchRequestError when one answers with errors."""
    from graphserve.loadtest.comparison.run import environment

    started, where = time.perf_counter(), environment().to_json()  # its timestamp: the start
    load_before = os.getloadavg()
    work = plan.work_dir
    work.mkdir(parents=True, exist_ok=True)
    model_dir = plan.model_dir or _export(work)
    certs = make_certificates(work / "certs", plan.key_type)
    say("starting the plaintext, TLS and mutual TLS servers")
    with tls_servers(model_dir, certs, work) as servers:
        requests = _requests(servers["plaintext"])
        say(f"keep-alive p50 at 1 client ({plan.keepalive_s:g} s)")
        keepalive = _interleaved(servers, requests, fresh=False, budget_s=plan.keepalive_s)
        say(f"a new connection per request at 1 client ({plan.connect_s:g} s)")
        connect = _interleaved(servers, requests, fresh=True, budget_s=plan.connect_s)
        load = _under_load(servers, requests, plan, say)
        tls_info = {arm: negotiated(servers[arm]) for arm in ARMS if arm != "plaintext"}
        started_servers = {arm: {"command": s.args[1:], "ready_s": s.ready_s}
                           for arm, s in servers.items()}  # fmt: skip
    results: dict[str, Any] = {
        "environment": where,
        "openssl": ssl.OPENSSL_VERSION,
        "load_average": {"start": list(load_before), "end": list(os.getloadavg())},
        "plan": plan.to_json(),
        "certificates": f"{KEY_TYPES[plan.key_type]}, a CA of the run's own (trustme)",
        "negotiated": {"rest": tls_info},
        "request_bytes": {"grpc": len(requests.grpc), "rest": len(requests.rest_body)},
        "servers": started_servers,
        "keepalive": keepalive,
        "connect": connect,
        "load": load,
        "goals": [],
        "no_goals": NO_GOALS,
    }
    results["figures"] = figures(results)
    results["seconds"] = round(time.perf_counter() - started, 1)
    return results


def _export(work: Path) -> Path:
    from graphserve.exporter.api import ExportSpec, export_model

    export_model(ExportSpec("examples:mlp", MODEL, base_path=work / "models", overwrite=True))
    return work / "models" / MODEL


def _requests(server: _Server) -> Requests:
    from graphserve.loadtest.generator.metadata import fetch_specs
    from graphserve.loadtest.generator.payloads import build_payload
    from tools.bench.served import encode_requests

    specs = fetch_specs("grpc", server.grpc_address, MODEL, "serving_default")
    return encode_requests(MODEL, build_payload(specs, batch_size=1))


def figures(results: Mapping[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per protocol and figure: each arm's value and TLS's and mutual TLS's ratio to plaintext
    (the value with TLS / the value without); for the windowed figures, the ratio's range over
    the rounds too."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for protocol in PROTOCOLS:
        out[protocol] = {}
        for key, _, (part, field) in FIGURES:
            arms = results[part]["arms"] if part == "load" else results[part]
            values = {arm: arms[protocol][arm][field] for arm in ARMS}
            entry: dict[str, Any] = dict(values)
            for arm in ARMS[1:]:
                entry[f"{arm}_ratio"] = values[arm] / values["plaintext"]
            if part == "load":
                for arm in ARMS[1:]:
                    entry[f"{arm}_ratio_rounds"] = _round_ratios(
                        results[part], protocol, arm, field
                    )
            out[protocol][key] = entry
    return out


def _round_ratios(load: Mapping[str, Any], protocol: str, arm: str, field: str) -> list[float]:
    """The lowest and highest ratio of `arm` to plaintext among the rounds' windows."""
    by_round: dict[int, dict[str, float]] = {}
    for row in load["windows"]:
        if row["protocol"] == protocol:
            by_round.setdefault(row["round"], {})[row["arm"]] = row[field]
    ratios = [r[arm] / r["plaintext"] for r in by_round.values()]
    return [min(ratios), max(ratios)]


# ---------------------------------------------------------------------------------------------
# What is printed and written


_ARM_TITLES = {"plaintext": "plaintext", "tls": "TLS", "mtls": "mutual TLS"}
_PROTOCOL_TITLES = {"grpc": "gRPC", "rest": "REST"}


def figure_lines(results: Mapping[str, Any]) -> list[str]:
    """One printed line per protocol and figure: each arm's value and the two ratios."""
    lines = []
    clients = results["load"]["clients"]
    for protocol in PROTOCOLS:
        for key, label, _ in FIGURES:
            f = results["figures"][protocol][key]
            lines.append(
                f"{_PROTOCOL_TITLES[protocol]} {label.format(clients=clients)}: "
                f"plaintext {_n(f['plaintext'])}, TLS {_n(f['tls'])} ({f['tls_ratio']:.2f}×), "
                f"mutual TLS {_n(f['mtls'])} ({f['mtls_ratio']:.2f}×)"
            )
    return lines


def _n(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _table(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """A markdown table; a column named with a trailing ">" is right-aligned."""
    lines = ["| " + " | ".join(c.rstrip(">") for c in columns) + " |"]
    lines.append("| " + " | ".join("---:" if c.endswith(">") else "---" for c in columns) + " |")
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return [*lines, ""]


def render_tls(results: Mapping[str, Any]) -> str:
    """tls.md, from tls.json alone."""
    env, start = results["environment"], results["load_average"]
    out = [
        "# What TLS costs: plaintext, TLS and mutual TLS",
        "",
        f"{env['timestamp']} on `{env['hostname']}`: {env['cpus']} CPUs, {env['platform']}, "
        f"Python {env['python']}, TensorFlow {env['versions'].get('tensorflow')}, grpcio "
        f"{env['versions'].get('grpcio')}, {results['openssl']}; load "
        f"average {_loads(start['start'])} (1, 5, 15 min) at the start, {_loads(start['end'])} "
        f"at the end; the run took {results['seconds']:.0f} s.",
        "",
        "Three `graphserve serve graph` processes on loopback serve the example mlp, alike but "
        "for their SSL config; this process is the client of all three, with the same request "
        f"bytes for each. Certificates: {results['certificates']}. {results['no_goals']}",
        "",
        *_figures_md(results),
        *_timings_md(results, "keepalive"),
        *_timings_md(results, "connect"),
        *_load_md(results),
        *_settings_md(results),
    ]
    return "\n".join(out).rstrip("\n") + "\n"


def _loads(values: list[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


def _figures_md(results: Mapping[str, Any]) -> list[str]:
    clients, rounds = results["load"]["clients"], results["plan"]["rounds"]
    rows, ranges = [], []
    for protocol in PROTOCOLS:
        for key, label, (part, _) in FIGURES:
            f, what = results["figures"][protocol][key], label.format(clients=clients)
            ratios = [f"{f[f'{arm}_ratio']:.2f}×" for arm in ARMS[1:]]
            rows.append([_PROTOCOL_TITLES[protocol], what, *(_n(f[arm]) for arm in ARMS), *ratios])
            if part == "load":
                tls, mtls = f["tls_ratio_rounds"], f["mtls_ratio_rounds"]
                ranges.append(
                    f"- {_PROTOCOL_TITLES[protocol]}, {what}: TLS {tls[0]:.2f}× to "
                    f"{tls[1]:.2f}×, mutual TLS {mtls[0]:.2f}× to {mtls[1]:.2f}×"
                )
    columns = ["protocol", "figure", "plaintext>", "TLS>", "mutual TLS>", "TLS ÷ plaintext>",
               "mutual TLS ÷ plaintext>"]  # fmt: skip
    return [
        "## Figures",
        "",
        "Each ratio is the value with TLS over the value in plaintext, measured in the same run.",
        "",
        *_table(columns, rows),
        f"The same ratios in single windows, over the {rounds} rounds of {clients} clients:",
        "",
        *ranges,
        "",
    ]


def _timings_md(results: Mapping[str, Any], part: str) -> list[str]:
    title, how = {
        "keepalive": ("Keep-alive, 1 client", "One connection, many requests"),
        "connect": (
            "A new connection per request, 1 client",
            "REST: TCP and a full TLS handshake (no session resumption); gRPC: a new channel "
            "with a subchannel of its own",
        ),
    }[part]
    rows = [
        [_PROTOCOL_TITLES[protocol], _ARM_TITLES[arm]]
        + [f"{t[k]:.3f}" for k in ("p50_ms", "p99_ms", "mean_ms")]
        + [f"{t['samples']:,}"]
        for protocol in PROTOCOLS
        for arm in ARMS
        for t in [results[part][protocol][arm]]
    ]
    return [
        f"## {title}",
        "",
        f"Milliseconds. {how}; the six callers timed in interleaved rounds.",
        "",
        *_table(["protocol", "server", "p50>", "p99>", "mean>", "samples>"], rows),
    ]


def _load_md(results: Mapping[str, Any]) -> list[str]:
    load, plan = results["load"], results["plan"]
    keys = ("rps", "p50_ms", "p99_ms", "server_cpu_us_per_request", "server_cores",
            "client_cpu_us_per_request")  # fmt: skip
    rows = [
        [_PROTOCOL_TITLES[protocol], _ARM_TITLES[arm], *(_n(a[k]) for k in keys),
         f"{a['requests']:,}", a["errors"]]
        for protocol in PROTOCOLS
        for arm in ARMS
        for a in [load["arms"][protocol][arm]]
    ]  # fmt: skip
    columns = ["protocol", "server", "req/s>", "p50 (ms)>", "p99 (ms)>",
               "server CPU per request (µs)>", "server cores>", "client CPU per request (µs)>",
               "requests>", "errors>"]  # fmt: skip
    return [
        f"## {load['clients']} clients, closed loop",
        "",
        f"{plan['rounds']} windows of {plan['window_s']:g} s per server and protocol, the order "
        "reversing each round. REST: a connection per client; gRPC: a channel per client, all "
        "sharing one connection (gRPC's subchannel pool). CPU per request: the server's "
        "process, and this client process, over the windows, per request answered.",
        "",
        *_table(columns, rows),
    ]


def _settings_md(results: Mapping[str, Any]) -> list[str]:
    sizes = results["request_bytes"]
    out = ["## Settings", "", *(f"- `{k}`: {v}" for k, v in results["plan"].items())]
    out.append(f"- request bytes: gRPC {sizes['grpc']:,}, REST {sizes['rest']:,}")
    out += [f"- REST with {_ARM_TITLES[arm]}: {what}"
            for arm, what in results["negotiated"]["rest"].items()]  # fmt: skip
    rows = [
        [_ARM_TITLES[arm], f"`{_command(s['command'])}`", _n(s["ready_s"])]
        for arm, s in results["servers"].items()
    ]
    return [*out, "", "## Servers", "", *_table(["server", "command", "ready (s)>"], rows)]


def _command(args: list[str]) -> str:
    """A server's command line, paths shortened to their names (they were temporary)."""
    return " ".join(a if "/" not in a else Path(a).name for a in args)


def write_tls(results: Mapping[str, Any], out: Path) -> list[Path]:
    """OUT/tls.json and OUT/tls.md."""
    from tools.bench.published import write

    return write("tls", dict(results), out)
