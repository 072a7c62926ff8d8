"""The results as markdown: the goals first, then one table per suite."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from graphserve.loadtest.results.run import Environment
from tools.bench.generator import stability_text
from tools.bench.inprocess import METHODS

__all__ = ["goal_lines", "render_markdown"]

_DASH = "—"
_SERVED_ARMS = (
    ("graph/grpc", "graph gRPC"),
    ("eager/grpc", "eager gRPC"),
    ("null/grpc", "null gRPC"),
    ("graph/rest", "graph REST"),
    ("eager/rest", "eager REST"),
    ("null/rest", "null REST"),
    ("peer/rest", "Flask peer REST"),
)
_SERVED_RATIOS = ("graph/eager", "graph/floor", "REST/gRPC", "peer/graph REST")


def _ms(value: float | None, digits: int = 3) -> str:
    return _DASH if value is None else f"{value:.{digits}f}"


def _goal_value(goal: dict[str, Any]) -> str:
    """A goal's measured value: a time (µs, ms) as a number, anything else as `_x` does."""
    value, what = goal["value"], goal["what"]
    if value is not None and ("µs" in what or " ms" in what):
        return f"{value:,.3g}" if value < 1000 else f"{value:,.0f}"
    return _x(value)


def _x(value: float | None) -> str:
    """A ratio as 0.45×; a rate (a goal in requests per second) as 10,250."""
    if value is None:
        return _DASH
    return f"{value:,.0f}" if value >= 1000 else f"{value:.3g}×"


def _table(header: Sequence[str], rows: Iterable[Sequence[str]], align: str = "") -> list[str]:
    marks = [("---:" if a == "r" else "---") for a in (align or "l" * len(header))]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(marks) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return [*lines, ""]


def goal_lines(results: dict[str, Any]) -> list[str]:
    """One line per goal: key, pass/miss, measured value against the goal, and how."""
    return [
        f"{g['key']} {'pass' if g['passed'] else 'MISS'}  {_goal_value(g)} (goal {g['goal']})  "
        f"{g['what']}: {g['detail']}"
        for g in results["goals"]
    ]


def _head(title: str, results: dict[str, Any]) -> list[str]:
    """The title, where and when it ran, and the goals table."""
    env = Environment.model_validate(results["environment"])
    lines = [
        f"# {title}",
        "",
        f"{env.timestamp} on `{env.hostname}`: {env.cpus} CPUs, {env.platform}, "
        f"Python {env.python}, TensorFlow {env.versions.get('tensorflow')}; "
        + (f"the run took {results['seconds']:.0f} s. " if results.get("seconds") else "")
        + (f"{results['origin']} " if results.get("origin") else "")
        + "Times are milliseconds; p50/p99 are nearest-rank percentiles of every timed call.",
        "",
        "## Goals",
        "",
    ]
    return lines + _table(
        ["goal", "ratio", "measured", "target", "result", "from"],
        (
            [
                g["key"],
                g["what"],
                _goal_value(g),
                g["goal"],
                "pass" if g["passed"] else "**miss**",
                g["detail"],
            ]
            for g in results["goals"]
        ),
        "llrlll",
    )


def render_markdown(results: dict[str, Any]) -> str:
    lines = _head("graphserve benchmark results", results)
    lines += _in_process(results["in_process"])
    lines += _served(results)
    lines += _batching(results["served"])
    lines += _codec(results["codec"])
    lines += _json_codec(results.get("json") or {})
    lines += _cold_start(results["cold_start"])
    lines += _generator(results.get("generator") or {})
    lines += agreement_lines(results.get("agreement") or [])
    return "\n".join(lines)


def render_frontend(results: dict[str, Any]) -> str:
    """tools/bench/results/frontend.md: the goals, then the figures."""
    title = "graphserve's front end: the server's own cost per request"
    lines = _head(title, results)
    return "\n".join(lines + frontend_lines(results)) + "\n"


_PROTOCOL_NAMES = {"grpc": "gRPC", "rest": "REST"}


def frontend_lines(frontend: dict[str, Any]) -> list[str]:
    """The front end's cost (tools/bench/frontend.py): per server and protocol, the server's CPU per
    request, the model's in process, the difference; where it went; MobileNet against its
    limit. A baseline's rows follow this checkout's, from the same run."""
    servers = {f"now, {frontend['server_code']}": frontend}
    if frontend.get("baseline"):
        servers[f"baseline, {frontend['baseline']['server_code']}"] = frontend["baseline"]
    idle = "; ".join(f"{name} {s['idle_cores']:.3f} cores" for name, s in servers.items())
    lines = [
        "",
        "## The front end's cost (tools/bench/frontend.py)",
        "",
        f"`graphserve serve graph` on the {frontend['model']} (b1, no batching) in a process of "
        f"its own, {frontend['clients']} closed-loop clients in the benchmark's process, "
        f"{frontend['rounds']} windows of {frontend['window_s']:g} s per server and protocol in "
        "alternating order, every other server paused (the medians). Server CPU: its process "
        "tree's user + system time over a window (/proc) per request answered. The model: the "
        "same Session called back to back from one thread in the benchmark's process, as that "
        "protocol's front end calls it. Front end = server - model. With no request at all: "
        f"{idle}.",
        "",
    ]
    rows = []
    for name, server in servers.items():
        for key, p in server["protocols"].items():
            rows.append([
                name, _PROTOCOL_NAMES[key],
                f"{p['server_cpu_us']:.0f} ("
                + "/".join(f"{w['cpu_us_per_request']:.0f}" for w in p["windows"]) + ")",
                f"{p['model_cpu_us']:.0f} ({p['model_call']})",
                f"**{p['front_end_cpu_us']:.0f}**",
                f"{p['rps']:,.0f}",
                f"{p['p50_ms']:.2f}",
            ])  # fmt: skip
    lines += _table(
        ["server", "protocol", "server CPU µs/req (windows)", "model µs/call in process",
         "front end µs/req", "req/s", "p50 (ms)"],
        rows,
        "llrrrrr",
    )  # fmt: skip
    floor = frontend["grpcio_floor"]
    lines += [
        "",
        "grpcio's own floor: a bare `grpc.server` with as many threads, answering every Predict "
        "with the graph server's answer bytes (no parsing, no serving code), used "
        f"{floor['server_cpu_us']:.0f} µs of CPU per request ("
        + "/".join(f"{w['cpu_us_per_request']:.0f}" for w in floor["windows"])
        + f"), {floor['rps']:,.0f} req/s, in the same rounds.",
        "",
        "perf_analyzer (gRPC, 1 client): "
        + "; ".join(_perf_analyzer_text(name, s["perf_analyzer"]) for name, s in servers.items())
        + ".",
    ]
    lines += _profile_lines(servers)
    lines += _mobilenet_lines(servers)
    return lines


def _perf_analyzer_text(name: str, point: dict[str, Any]) -> str:
    if "not_measured" in point:
        return f"{name} not measured ({point['not_measured']})"
    return (
        f"{name} p50 {point['p50_ms']:.3f} ms, p99 {point['p99_ms']:.3f} ms "
        f"({stability_text(point.get('stability'))})"
    )


def _profile_lines(servers: dict[str, dict[str, Any]]) -> list[str]:
    """Where the CPU went: each profile's shares applied to the CPU measured without perf."""
    columns = [
        (f"{_PROTOCOL_NAMES[key]} ({name.split(',')[0]})" if len(servers) > 1
         else _PROTOCOL_NAMES[key], p["profile"]["shares"], p["server_cpu_us"])
        for name, server in servers.items()
        for key, p in server["protocols"].items()
        if "shares" in p["profile"]
    ]  # fmt: skip
    lines = ["", "### Where the server's CPU went", "",
             "µs per request: the share of its samples by shared object (`perf record -p` over "
             "one more window per server and protocol) of the CPU per request measured without "
             "perf above.", ""]  # fmt: skip
    if not columns:
        reasons = {
            p["profile"].get("not_measured", "")
            for server in servers.values()
            for p in server["protocols"].values()
        }
        return [*lines, f"Not measured: {'; '.join(sorted(reasons))}."]
    libraries: list[str] = []
    for _, shares, _ in columns:
        libraries += [name for name in shares if name not in libraries]
    return lines + _table(
        ["library", *(title for title, _, _ in columns)],
        (
            [library, *(f"{shares.get(library, 0.0) * cpu:.0f} ({shares.get(library, 0.0):.0%})"
                        for _, shares, cpu in columns)]
            for library in libraries
        ),
        "l" + "r" * len(columns),
    )  # fmt: skip


def _mobilenet_lines(servers: dict[str, dict[str, Any]]) -> list[str]:
    measured = {name: s["mobilenet"] for name, s in servers.items() if s.get("mobilenet")}
    if not measured:
        return []
    first = next(iter(measured.values()))
    lines = [
        "",
        "### MobileNetV2 with batching",
        "",
        "MobileNetV2 (alpha 0.35, 96 px) with batching (`make bench-peers`' measure, each "
        "server alone): the most req/s with p99 within "
        f"{first['budget_ms']:g} ms, against the SavedModel's in-process limit at the batch "
        "size the server formed, measured in the same run as that server's figures.",
        "",
    ]
    rows = []
    for name, mobilenet in measured.items():
        for key, r in mobilenet["routes"].items():
            rows.append([
                name, _PROTOCOL_NAMES[key],
                f"{r['max_rps']:,.0f} ({r['max_rps_clients']})" if r["max_rps"] else _DASH,
                f"{r['mean_batch_16']:.1f}" if r["mean_batch_16"] else _DASH,
                f"{mobilenet['limit']['rows_per_s']:,.0f}",
                _x(r["fraction_of_limit"]),
                f"{r['cpu_us_per_request_16']:,.0f}" if r["cpu_us_per_request_16"] else _DASH,
            ])  # fmt: skip
    return lines + _table(
        ["server", "route", "most req/s (clients)", "rows per batch, 16 clients",
         "limit rows/s", "× limit", "server CPU µs/req, 16 clients"],
        rows,
        "llrrrrr",
    )  # fmt: skip


def _in_process(suite: dict[str, Any]) -> list[str]:
    rows = []
    for key, entry in suite.items():
        p50 = {m: (entry["timings"].get(m) or {}).get("p50_ms") for m in METHODS}
        concrete = p50["concrete"]
        ratio = {m: (p50[m] / concrete if p50[m] and concrete else None) for m in METHODS}
        rows.append(
            [
                key,
                *(_ms(p50[m]) for m in METHODS),
                _x(ratio["eager"] and 1 / ratio["eager"]),
                _x(ratio["predict"]),
            ]
        )
    return [
        "## In-process p50 per call",
        "",
        *_table(["model", *METHODS, "concrete/eager", "predict/concrete"], rows, "lrrrrrrr"),
    ]


def _served(results: dict[str, Any]) -> list[str]:
    rows = []
    for key, entry in results["served"].items():
        lat = entry["latency"]

        def p(arm: str, q: str = "p50_ms", lat: dict[str, Any] = lat) -> float | None:
            return (lat.get(arm) or {}).get(q)

        concrete = (
            results["in_process"].get(key, {}).get("timings", {}).get("concrete", {}).get("p50_ms")
        )
        floor = concrete + p("null/grpc") if concrete and p("null/grpc") else None

        def ratio(a: float | None, b: float | None) -> str:
            return _x(a / b) if a and b else _DASH

        rows.append(
            [key]
            + [f"{_ms(p(arm))} / {_ms(p(arm, 'p99_ms'))}" for arm, _ in _SERVED_ARMS]
            + [
                ratio(p("graph/grpc"), p("eager/grpc")),
                ratio(p("graph/grpc"), floor),
                ratio(p("graph/rest"), p("graph/grpc")),
                ratio(p("peer/rest"), p("graph/rest")),
            ]
        )
    header = ["model", *(title for _, title in _SERVED_ARMS), *_SERVED_RATIOS]
    return [
        "## Served, concurrency 1: p50 / p99",
        "",
        "floor = in-process concrete p50 + bare gRPC round trip (null server) p50",
        "",
        *_table(header, rows, "l" + "r" * (len(header) - 1)),
    ]


def _batching(served: dict[str, Any]) -> list[str]:
    rows = []
    parameters: list[str] = []  # each distinct parameters file, in order
    for key, entry in served.items():
        for runner in ("graph", "eager"):
            b = entry.get(f"{runner}_batching")
            if not b:
                continue
            off, on = b["off"], b["on"]
            if b["parameters"] not in parameters:
                parameters.append(b["parameters"])
            rows.append(
                [
                    key,
                    runner,
                    str(on["clients"]),
                    f"{off['throughput']:.0f}",
                    f"{on['throughput']:.0f}",
                    _x(on["throughput"] / off["throughput"] if off["throughput"] else None),
                    _ms(off["latency"]["p99_ms"], 2),
                    _ms(on["latency"]["p99_ms"], 2),
                    str(off["errors"] + on["errors"]),
                ]
            )
    used = [" ".join(p.split()) for p in parameters]  # a file on one line
    return [
        "## Batching, closed loop over gRPC",
        "",
        *(f"batching parameters: `{text}`" for text in used),
        *([""] if used else []),
        *_table(
            [
                "model",
                "server",
                "clients",
                "off req/s",
                "on req/s",
                "on/off",
                "off p99",
                "on p99",
                "errors",
            ],
            rows,
            "llrrrrrrr",
        ),
    ]


def _codec(codec: dict[str, Any]) -> list[str]:
    rows = [
        [
            name,
            f"{c['request_bytes']:,}",
            _ms(c["decode_ms"]),
            _ms(c["encode_ms"]),
            _ms(c["total_ms"]),
        ]
        for name, c in codec.items()
    ]
    return [
        "## Codec, one 224×224×3 float32 tensor (request decode + response encode)",
        "",
        *_table(["encoding", "request bytes", "decode", "encode", "total"], rows, "lrrrr"),
    ]


def _json_codec(suite: dict[str, Any]) -> list[str]:
    rows = []
    for shape, entry in suite.items():
        before, after = entry["json_stdlib"], entry["json"]
        rows.append(
            [
                shape,
                f"{after['request_bytes']:,}",
                f"{_ms(before['decode_ms'])} / {_ms(before['encode_ms'])}",
                f"{_ms(after['decode_ms'])} / {_ms(after['encode_ms'])}",
                _x(before["total_ms"] / after["total_ms"] if after["total_ms"] else None),
            ]
        )
    if not rows:
        return []
    return [
        "## REST JSON codec, before (standard library) and after (pysimdjson in, orjson out)",
        "",
        *_table(
            ["tensor", "request bytes", "before decode / encode", "after decode / encode", "x"],
            rows,
            "lrrrr",
        ),
    ]


def _generator(suite: dict[str, Any]) -> list[str]:
    if not suite:
        return []
    rows = [
        [
            protocol,
            str(g["users"]),
            f"{g['requests_per_s']:,.0f}",
            f"{g['cpu_s'] / g['seconds']:.2f}",
            f"**{g['requests_per_core_s']:,.0f}**",
        ]
        for protocol, g in suite.items()
    ]
    return [
        "## Load generator capacity (tools/bench/generator.py)",
        "",
        "One locust process, one user class, against the null server (no model work). A load "
        "test that must drive N req/s needs about N / (req/s per core) worker cores; past that "
        "the generator, not the server, is measured.",
        "",
        *_table(["user", "users", "req/s", "cores used", "req/s per core"], rows, "lrrrr"),
        "",
    ]


AGREEMENT_HEADER = (
    "server", "protocol", "reference", "clients", "p50 ours / ref (ms)", "p50 ratio",
    "req/s ours / ref", "req/s ratio", "our CPU µs/req", "generator-bound",
    "perf_analyzer's stability, by round",
)  # fmt: skip


def render_generator(results: dict[str, Any]) -> str:
    """generator.md, from generator.json alone (`python -m tools.bench generator`)."""
    lines = agreement_lines(results["agreement"])
    lines += [
        f"One locust process against the null server: {g['requests_per_core_s']:,.0f} {p} "
        f"req/s per core ({g['requests_per_s']:,.0f} req/s on {g['cpu_s'] / g['seconds']:.2f} "
        "cores)."
        for p, g in results["generator"].items()
    ]
    return "\n".join(lines) + "\n"


def agreement_lines(entries: Sequence[dict[str, Any]]) -> list[str]:
    """Ours against the reference generators (tools/bench/generator.py), one table."""
    if not entries:
        return []
    rows, missing = [], []
    for e in entries:
        if "not_measured" in e:
            missing.append(f"{e['server']}/{e['protocol']}: {e['not_measured']}")
            continue
        for row in e["rows"]:
            cost = row["cpu_us_per_request"]
            rows.append(
                [
                    e["server"],
                    e["protocol"],
                    e["reference"],
                    str(row["clients"]),
                    f"{_ms(row['ours_p50_ms'])} / {_ms(row['reference_p50_ms'])}",
                    _x(row["p50_ratio"]),
                    f"{_rate(row['ours_rps'])} / {_rate(row['reference_rps'])}",
                    _x(row["rps_ratio"]),
                    _DASH if cost is None else f"{cost:.0f}",
                    "yes" if row["generator_bound"] else "no",
                    _rounds_stability(e["reference"], row),
                ]
            )
    rounds = max((len(e.get("rounds", [])) for e in entries), default=0)
    lines = [
        "## Our generator against the reference generators (tools/bench/generator.py)",
        "",
        "`graphserve loadtest compare` (one arm) and the field's reference generator load the "
        "same server one after the other, in alternating order; medians of "
        f"{rounds} round(s), ratios taken within a round. Ours / reference: a p50 ratio above 1 "
        "is latency our generator adds, a req/s ratio below 1 throughput it costs. CPU is our "
        "generator's own, per request (every locust process).",
        "",
        *_table(AGREEMENT_HEADER, rows, "lllrrrrrrll"),
    ]
    return lines + [f"Not measured: {m}" for m in missing] + ([""] if missing else [])


def _rounds_stability(reference: str, row: dict[str, Any]) -> str:
    """perf_analyzer's stability in each round; wrk has none (it runs for a set time)."""
    if not reference.startswith("perf_analyzer"):
        return _DASH
    rounds = row.get("reference_stability")
    if not rounds:
        return stability_text(None)
    return "; ".join(f"round {i}: {stability_text(s)}" for i, s in enumerate(rounds, 1))


def _rate(value: float | None) -> str:
    return _DASH if value is None else f"{value:,.0f}"


def _cold_start(cold: dict[str, Any]) -> list[str]:
    rows = [
        [
            model,
            c["server"],
            "yes" if c["warmup_records"] else "no",
            f"{c['ready_s']:.2f} s",
            _ms(c["first_request_ms"], 2),
            _ms(c["steady_p50_ms"]),
            _x(c["first_over_steady"]),
        ]
        for model, runs in cold.items()
        for c in runs
    ]
    return [
        "## Cold start (gRPC)",
        "",
        *_table(
            [
                "model",
                "server",
                "warm-up records",
                "ready",
                "first request",
                "steady p50",
                "first/steady",
            ],
            rows,
            "lllrrrr",
        ),
    ]
