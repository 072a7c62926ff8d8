"""Raw HTTP/1.x requests over a real socket to a real `graphserve serve graph` serving the example
mlp on 127.0.0.1, as Triton's L0_http_fuzz does with boofuzz.

    python -m tools.fuzz.http_raw --cases N [--seed S] [--out FILE.json] [--connections C]

What is sent: every case in NAMED (a hand-named shape of each family, so that every family is
always covered), then N minus those drawn by hypothesis (`generated_cases`), on C connections at
once. The families (FAMILIES):

    request-line  methods (known, unknown, lower case, 70,000 bytes), targets (origin and
                  absolute form, `*`, percent-encoded, NUL and control bytes, past 64 KiB),
                  separators
    version       HTTP/0.9 (no version), 1.0, 1.1, 2.0, garbage, the HTTP/2 preface, h2c Upgrade
    headers       values and counts past the 64 KiB head cap, duplicates (Content-Length with the
                  same and different values), obs-fold lines, bare LF or CR, no colon, a space
                  before the colon, NUL and control bytes, random names and values
    framing       Content-Length and Transfer-Encoding values and their pairs (`chunked,
                  identity`, `xchunked`, signs, hex, lists, past the body limit); chunk sizes that
                  overflow, are negative or not hex, chunk extensions, trailers, LF-only chunks,
                  a missing last chunk
    smuggling     CL.TE, TE.CL, TE.TE, CL.CL and an Upgrade with a body, each hiding SMUGGLED (a
                  GET of model `smuggled`) in what one reading of the framing calls a body
    cut-body      a body shorter than declared (Content-Length or chunked), then the client
                  waits, closes, resets or half-closes
    pipelining    several requests in one write or split at random points, all valid, or valid
                  ones before one the server refuses (garbage, a head past 64 KiB, a body past
                  the limit, a bad chunk, HTTP/1.0, `Connection: close`); a HEAD only alone,
                  as httptools cannot be told that a HEAD's answer has no body
    predict       valid predict bodies (row and columnar, by length or chunked, `Expect:
                  100-continue`), and ones the model refuses
    mutated       any case above with bytes flipped, inserted, deleted, repeated or cut

What is checked for every case (`run_case`, `check`):

1. each answer is a well-formed HTTP/1.x answer (read with graphserve.core.httpclient), its
   status one the server documents (DOCUMENTED; never 500), its body JSON (`{"error": ...}` for
   an error); a 1xx only as `100 Continue`; no byte follows an answer that says
   `Connection: close`, and the server closes the connection within BOUND_S of the last byte
   sent (its header, body and idle timeouts and its linger), or resets it;
2. no more answers than the case holds requests (`Case.most`), the first ones with the statuses
   the case expects (`Case.first`: pipelined requests are answered in order), and no answer
   names SMUGGLED's model: a request hidden in a body is never answered as its own;
3. right after, a predict on a new connection gets 200 and the model's values (EXPECTED), and
   the server process is alive;
4. at the end, once every connection has timed out, the server has the threads and open file
   descriptors it had before the first case (/proc/PID/status and /proc/PID/fd).

The server runs as a child process (`FuzzServer`), as a user runs it: its /proc counts its own
threads and descriptors only (in process, the harness's sockets, hypothesis and TensorFlow would
blur them), and a crash in C (llhttp, uvloop) is a dead child that the harness reports rather
than a dead harness. Its timeouts are short (TIMEOUTS) so that a case that stalls costs a second,
not a minute. The summary (`Run.summary`) is JSON: cases by family, answers by status, connections
closed without an answer, crashes, leaked threads and descriptors, seconds, the seed and the
commit. `make fuzz` writes it to tools/bench/results/fuzz-http.json; tests/test_fuzz_http.py runs
NAMED and a few hundred generated cases and checks each named case's own answer.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import socket
import struct
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

from hypothesis import strategies as st

from graphserve.core.httpclient import (
    HttpConnection,
    IncompleteResponse,
    MalformedResponse,
    decode_headers,
)
from graphserve.core.processes import ServerProcess, proc_status
from graphserve.serving.http_server import LINGER_S, MAX_HEAD_BYTES

__all__ = [
    "BOUND_S",
    "DOCUMENTED",
    "FAMILIES",
    "NAMED",
    "TIMEOUTS",
    "Case",
    "ChildServer",
    "FuzzServer",
    "Outcome",
    "Run",
    "cases",
    "check",
    "generated_cases",
    "main",
    "run_case",
    "run_cases",
    "write_summary",
]

ROOT = Path(__file__).resolve().parents[2]
MODEL = "mlp"
TIMEOUTS = {"idle": 0.5, "header": 0.5, "body": 0.5}  # the server's --rest-*-timeout, seconds
# The longest a case's connection may stay open after its last byte: a timeout, then the linger
# of a refused body, and slack for a busy two-core machine.
BOUND_S = max(TIMEOUTS.values()) + LINGER_S + 3.0
DOCUMENTED = frozenset({200, 400, 404, 408, 413, 431, 503, 504})  # docs/reliability.md
FAMILIES = (
    "request-line",
    "version",
    "headers",
    "framing",
    "smuggling",
    "cut-body",
    "pipelining",
    "predict",
    "mutated",
)

STATUS = b"/v1/models/mlp"
METADATA = b"/v1/models/mlp/metadata"
PREDICT = b"/v1/models/mlp:predict"
SMUGGLED = b"GET /v1/models/smuggled HTTP/1.1\r\nHost: fuzz\r\n\r\n"
_SMUGGLED_ANSWER = re.compile(rb"model smuggled|/v1/models/smuggled|Latest\(smuggled\)")


def _predict_body(rows: int, seed: int) -> bytes:
    import numpy as np

    x = np.random.default_rng(seed).standard_normal((rows, 784)).astype(np.float32)
    return json.dumps({"instances": x.tolist()}).encode()


PROBE_BODY = _predict_body(2, seed=7)  # the predict after every case; its answer is EXPECTED


# ---------------------------------------------------------------------------------------------
# Cases

End = Literal["read", "close", "reset", "half-close"]


@dataclass(frozen=True)
class Case:
    """Bytes to send, in writes `pause_s` apart, then what the client does (`end`): read every
    answer until the server closes (`read`), close at once, reset (RST), or shut its sending side
    and read."""

    family: str
    name: str  # a NAMED key, or the generator's label
    writes: tuple[bytes, ...]
    end: End = "read"
    methods: tuple[bytes, ...] = ()  # each request's method, in order (a HEAD's answer is bodiless)
    most: int | None = None  # answers at most; None: one per "HTTP/" in the bytes, and one error
    first: tuple[int, ...] = ()  # the statuses its first answers must have, in order
    smuggled: bool = False  # hides SMUGGLED where framing read one way puts a body
    pause_s: float = 0.02

    @property
    def data(self) -> bytes:
        return b"".join(self.writes)

    @property
    def answers_at_most(self) -> int:
        return self.most if self.most is not None else self.data.count(b"HTTP/") + 1


def request(
    method: bytes = b"GET",
    target: bytes = STATUS,
    version: bytes = b"HTTP/1.1",
    headers: Sequence[bytes] = (),
    body: bytes = b"",
    *,
    length: bool = True,
) -> bytes:
    """One request's bytes: Host, `headers`, Content-Length of `body` (unless `length` is off)."""
    lines = [method + b" " + target + b" " + version, b"Host: fuzz", *headers]
    if length and (body or method == b"POST"):
        lines.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def chunked(body: bytes, size: int, last: bytes = b"0\r\n\r\n") -> bytes:
    parts = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + last


def predict(body: bytes = PROBE_BODY, headers: Sequence[bytes] = ()) -> bytes:
    return request(
        b"POST", PREDICT, headers=[b"Content-Type: application/json", *headers], body=body
    )


def post_head(*headers: bytes, version: bytes = b"HTTP/1.1") -> bytes:
    """A predict's head with `headers` and no framing of its own."""
    return request(
        b"POST", PREDICT, version, [b"Content-Type: application/json", *headers], length=False
    )


_CHUNKED = b"Transfer-Encoding: chunked"
_V = predict()
_HUGE_HEAD = request(headers=[b"X-Filler: " + b"a" * (MAX_HEAD_BYTES + 4000)])
_BAD_CHUNK = post_head(_CHUNKED) + b"zz\r\n{}\r\n0\r\n\r\n"
_TOO_LARGE = post_head(b"Content-Length: 99999999999")
_COLUMNAR = json.dumps({"inputs": json.loads(PROBE_BODY)["instances"]}).encode()


def _named() -> dict[str, Case]:
    """The hand-named shapes, FAMILY/NAME: their bytes (a tuple: several writes), the statuses
    their answers start with, and Case's options."""
    named: dict[str, Case] = {}

    def add(name: str, data: bytes | tuple[bytes, ...], *first: int, **options: Any) -> None:
        writes = data if isinstance(data, tuple) else (data,)
        named[name] = Case(name.split("/")[0], name, writes, first=first, **options)

    body, te, head, get = PROBE_BODY, _CHUNKED, post_head, request
    length = b"Content-Length: %d" % len(body)
    upgrade = b"Connection: Upgrade"
    add("request-line/unknown-method", get(b"FOO"), 400)
    add("request-line/lowercase-method", get(b"get"), 400)
    add("request-line/huge-method", get(b"A" * 70_000), most=1)
    add("request-line/delete", get(b"DELETE"), 400)
    add("request-line/head", get(b"HEAD"), 400, methods=(b"HEAD",))
    add("request-line/options-star", get(b"OPTIONS", b"*"), 400)
    add("request-line/connect", get(b"CONNECT", b"127.0.0.1:443"), 400)
    add("request-line/absolute-form", get(target=b"http://127.0.0.1" + STATUS), 200)
    add("request-line/percent-encoded", get(target=b"/v1/models/%6dlp"), 404)
    add("request-line/percent-nul", get(target=b"/v1/models/%00"), 404)
    add("request-line/raw-nul", get(target=b"/v1/\x00models"), 400)
    add("request-line/control-bytes", get(target=b"/v1/models/\x01\x7f"), 400)
    add("request-line/long-target", get(target=b"/" + b"a" * 70_000), 431)
    add("request-line/tab-separated", b"GET\t/v1/models/mlp\tHTTP/1.1\r\n\r\n", most=1)
    add("version/http-0.9", b"GET /v1/models/mlp\r\n", 408)
    add("version/http-1.0", get(version=b"HTTP/1.0"), 200)
    add("version/http-2.0-line", get(version=b"HTTP/2.0"), 200)
    add("version/http-2-preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\4\0\0\0\0\0", 400)
    h2c = [b"Connection: Upgrade, HTTP2-Settings", b"Upgrade: h2c", b"HTTP2-Settings: AAMAAABk"]
    add("version/h2c-upgrade", get(headers=h2c), 200)
    add("version/garbage", get(version=b"HTTX/1.1"), 400)
    add("version/lowercase", get(version=b"http/1.1"), 400)
    add("version/http-9.9", get(version=b"HTTP/9.9"), 400)
    add("headers/head-over-64k", _HUGE_HEAD, 431)
    add("headers/10000-headers", get(headers=[b"X-%d: v" % i for i in range(10_000)]), 431)
    add("headers/head-under-64k", get(headers=[b"X-Filler: " + b"a" * 60_000]), 200)
    add("headers/duplicate-host", get(headers=[b"Host: again"]), 200)
    add("headers/duplicate-content-length-same", predict(headers=[length]), 400)
    add("headers/duplicate-content-length-different", predict(headers=[b"Content-Length: 2"]), 400)
    add("headers/obs-fold", get(headers=[b"X-A: a", b" folded"]), 400)
    add("headers/bare-lf", get().replace(b"\r\n", b"\n"), 400)
    add("headers/bare-cr", get().replace(b"\r\n", b"\r"), most=1)
    add("headers/missing-colon", get(headers=[b"X-A a"]), 400)
    add("headers/space-before-colon", get(headers=[b"X-A : a"]), 400)
    add("headers/nul-in-value", get(headers=[b"X-A: a\0b"]), 400)
    add("headers/empty-name", get(headers=[b": a"]), 400)
    add("headers/latin-1-value", get(headers=[b"X-A: \xe9\xff"]), 200)
    add("framing/cl-and-te", head(b"Content-Length: 7", te) + chunked(b"{}", 2), 400)
    add(
        "framing/te-chunked-identity",
        head(b"Transfer-Encoding: chunked, identity") + chunked(body, 4096),
        400,
    )
    add(
        "framing/te-identity-chunked",
        head(b"Transfer-Encoding: identity, chunked") + chunked(body, 4096),
        200,
    )
    add("framing/te-xchunked", head(b"Transfer-Encoding: xchunked") + b"{}", 400)
    add("framing/te-twice", head(te, te) + chunked(b"{}", 2), 400)
    add("framing/te-on-http-1.0", head(te, version=b"HTTP/1.0") + chunked(body, 4096), 200)
    add("framing/cl-plus", head(b"Content-Length: +2") + b"{}", 400)
    add("framing/cl-hex", head(b"Content-Length: 0x2") + b"{}", 400)
    add("framing/cl-negative", head(b"Content-Length: -1") + b"{}", 400)
    add("framing/cl-list", head(b"Content-Length: 2, 2") + b"{}", 400)
    add("framing/cl-overflow", head(b"Content-Length: 99999999999999999999999"), 400)
    add("framing/cl-past-the-limit", _TOO_LARGE, 413)
    add("framing/chunk-size-overflow", head(te) + b"ffffffffffffffffffff\r\n{}\r\n0\r\n\r\n", 400)
    add("framing/chunk-size-negative", head(te) + b"-2\r\n{}\r\n0\r\n\r\n", 400)
    add("framing/chunk-size-not-hex", _BAD_CHUNK, 400)
    add("framing/chunk-extension", head(te) + b"%x;a=b\r\n%s\r\n0\r\n\r\n" % (len(body), body), 200)
    add("framing/chunk-trailers", head(te) + chunked(body, 999, b"0\r\nX-T: 1\r\n\r\n"), 200)
    add("framing/chunk-lf-only", head(te) + b"2\n{}\n0\n\n", 400)
    add("framing/chunk-last-missing", head(te) + chunked(body, 4096, last=b""), 408)
    # smuggling: one answer each, never SMUGGLED's
    hidden = {"most": 1, "smuggled": True}
    n = len(SMUGGLED)
    add(
        "smuggling/cl-te",
        head(b"Content-Length: %d" % (n + 5), te) + b"0\r\n\r\n" + SMUGGLED,
        400,
        **hidden,
    )
    add("smuggling/te-cl", head(te, b"Content-Length: 4") + chunked(SMUGGLED, 999), 400, **hidden)
    add(
        "smuggling/te-te",
        head(te, b"Transfer-Encoding: xchunked", b"Content-Length: %d" % n) + SMUGGLED,
        400,
        **hidden,
    )
    add(
        "smuggling/cl-cl",
        head(b"Content-Length: 0", b"Content-Length: %d" % n) + SMUGGLED,
        400,
        **hidden,
    )
    add(
        "smuggling/upgrade-with-body",
        (head(upgrade, b"Upgrade: websocket", b"Content-Length: %d" % n), SMUGGLED),
        400,
        **hidden,
    )
    add(
        "smuggling/upgrade-with-chunked-body",
        (head(upgrade, b"Upgrade: foo", te), chunked(SMUGGLED, 999)),
        400,
        **hidden,
    )
    add("smuggling/get-with-body", get(body=SMUGGLED), 200, **hidden)
    add("smuggling/in-a-predict-body", predict(SMUGGLED), 400, **hidden)
    add("smuggling/in-a-chunked-body", head(te) + chunked(SMUGGLED, 10), 400, **hidden)
    add("smuggling/after-a-framing-error", (head(te) + b"-2\r\n{}\r\n", SMUGGLED), 400, **hidden)
    cut = head(b"Content-Length: 100") + b'{"inst'
    add("cut-body/stall", cut, 408)
    add("cut-body/close", cut, end="close")
    add("cut-body/reset", cut, end="reset")
    add("cut-body/half-close", cut, end="half-close", most=1)
    add("cut-body/mid-chunk", head(te) + b'64\r\n{"inst', 408)
    add("cut-body/mid-head", b"POST /v1/models/mlp:predict HTTP/1.1\r\nHost: fu", 408)
    add("cut-body/expect-continue-no-body", head(length, b"Expect: 100-continue"), 408)
    three = _V * 3
    add("pipelining/three-valid", _V + get(target=METADATA) + get(), 200, 200, 200, most=3)
    add(
        "pipelining/split-writes",
        (three[:100], three[100:5000], three[5000:]),
        200,
        200,
        200,
        most=3,
    )
    add("pipelining/crlf-between", _V + b"\r\n" + _V, 200, 200, most=2)
    add("pipelining/valid-then-garbage", _V + b"GARBAGE\r\n\r\n" + _V, 200, 400, most=2)
    add("pipelining/valid-then-head-over-64k", _V + _HUGE_HEAD, 200, 431, most=2)
    add("pipelining/valid-then-body-past-the-limit", _V + _TOO_LARGE, 200, 413, most=2)
    add("pipelining/valid-then-bad-chunk", _V + _BAD_CHUNK, 200, 400, most=2)
    # one read: a body past 64 KiB, then a head begun (whose own bytes are what is measured)
    add(
        "pipelining/large-body-then-request",
        (predict(body + b" " * 40_000) + get()[:30], get()[30:]),
        200,
        200,
        most=2,
        pause_s=0.1,
    )
    add("pipelining/http-1.0-then-valid", get(version=b"HTTP/1.0") + _V, 200, most=1)
    add(
        "pipelining/connection-close-then-valid",
        get(headers=[b"Connection: close"]) + _V,
        200,
        most=1,
    )
    add("pipelining/crlf-only", b"\r\n\r\n", most=0)
    add("pipelining/crlf-after-an-answer", (_V, b"\r\n"), 200, most=1)
    add("predict/valid", _V, 200)
    add("predict/chunked", head(te) + chunked(body, 7), 200)
    add("predict/expect-continue", (head(length, b"Expect: 100-continue"), body), 200, pause_s=0.1)
    add("predict/columnar", predict(_COLUMNAR), 200)
    add("predict/wrong-shape", predict(b'{"instances": [[1.0, 2.0]]}'), 400)
    return named


NAMED = _named()


# ---------------------------------------------------------------------------------------------
# Generated cases (hypothesis)

METHODS = (
    b"GET POST HEAD PUT DELETE OPTIONS TRACE PATCH CONNECT PRI get post Get FOO M-SEARCH".split()
)
TARGETS = [
    b"",
    *(
        b"/v1/models/mlp /v1/models/mlp/metadata /v1/models/mlp:predict /v1/models/mlp/versions/1 "
        b"/v1/models/mlp:classify /v1/models / * //v1/models/mlp http://127.0.0.1/v1/models/mlp "
        b"/v1/models/mlp?x=1 /v1/models/mlp#frag /v1/models/../mlp 127.0.0.1:443 /v1/models/%6dlp "
        b"/v1/models/mlp%00 /v1/models/%zz"
    ).split(),
]
# |-separated, as some hold spaces
VERSIONS = (
    b"HTTP/1.1|HTTP/1.0|HTTP/0.9|HTTP/2.0|HTTP/2|HTTP/3.0|HTTP/1.2|HTTP/9.9|HTTP/1|HTTP/1.1.1|"
    b"http/1.1|HTTPS/1.1|HTTP/01.1|HTTP/-1.1|HTTP/1.1 |"
).split(b"|")
CONTENT_LENGTHS = (
    b"0|2|+2|-1|0x2|2, 2| 2 |2 2||a|99999999999|18446744073709551617|1e3|\x002"
).split(b"|")
TRANSFER_ENCODINGS = (
    b"chunked|identity|chunked, identity|identity, chunked|xchunked|chunked | chunked|CHUNKED|"
    b"\x0bchunked|gzip, chunked|chunked, gzip|chunked;q=1|chunk|"
).split(b"|")
CHUNK_SIZES = b"ffffffffffffffffffff|-2|zz|0x2|2 | 2|2;a=b|2;|02|+2||\x002".split(b"|")
LINE_ENDS = [b"\r\n"] * 6 + [b"\n", b"\r", b"\r\r\n", b"\n\r"]

_sizes = st.one_of(st.integers(0, 64), st.sampled_from([1000, 60_000, 65_536, 66_000, 100_000]))


def _split(draw: st.DrawFn, data: bytes) -> tuple[bytes, ...]:
    """`data` whole most of the time, else cut into writes at random points."""
    if len(data) < 2 or draw(st.integers(0, 2)):
        return (data,)
    cuts = sorted(draw(st.lists(st.integers(1, len(data) - 1), min_size=1, max_size=3)))
    return tuple(data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True) if a < b)


@st.composite
def _targets(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["known", "percent", "long", "control", "random"]))
    if kind == "percent":
        raw = draw(st.binary(min_size=1, max_size=8))
        return b"/v1/models/" + b"".join(b"%%%02x" % b for b in raw)
    if kind == "long":
        return b"/v1/models/" + b"m" * draw(_sizes)
    if kind == "control":
        target = bytearray(draw(st.sampled_from(TARGETS)))
        target.insert(draw(st.integers(0, len(target))), draw(st.integers(0, 0x1F)))
        return bytes(target)
    if kind == "random":
        return draw(st.binary(max_size=12))
    return draw(st.sampled_from(TARGETS))


@st.composite
def _request_lines(draw: st.DrawFn) -> Case:
    method = draw(
        st.one_of(
            st.sampled_from(METHODS),
            st.binary(min_size=1, max_size=8),
            _sizes.map(lambda n: b"A" * n),
        )
    )
    separator = draw(st.sampled_from([b" ", b" ", b" ", b"  ", b"\t", b""]))
    line = separator.join([method, draw(_targets()), draw(st.sampled_from(VERSIONS[:4]))])
    data = line + b"\r\nHost: fuzz\r\n\r\n"
    return Case("request-line", "generated", _split(draw, data), methods=(method,), most=1)


@st.composite
def _versions(draw: st.DrawFn) -> Case:
    version = draw(st.one_of(st.sampled_from(VERSIONS), st.binary(max_size=10)))
    post = draw(st.booleans())
    data = predict() if post else request()
    data = data.replace(b"HTTP/1.1", version, 1)
    if draw(st.integers(0, 5)) == 0:
        data = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + draw(st.binary(max_size=32))
    elif draw(st.integers(0, 5)) == 0:
        data = data.replace(b"Host: fuzz", b"Host: fuzz\r\nConnection: Upgrade\r\nUpgrade: h2c", 1)
    return Case("version", "generated", _split(draw, data), most=1)


_HEADER_KINDS = ["huge", "count", "dup", "fold", "no-colon", "space-colon", "control", "random"]


@st.composite
def _header_lines(draw: st.DrawFn) -> list[bytes]:
    kind = draw(st.sampled_from(_HEADER_KINDS))
    if kind == "huge":
        return [b"X-Big: " + b"v" * draw(_sizes)]
    if kind == "count":
        return [b"X-%d: v" % i for i in range(draw(st.integers(0, 12_000)))]
    if kind == "dup":
        name = draw(st.sampled_from([b"Host", b"Content-Type", b"Expect", b"Connection"]))
        value = draw(st.sampled_from(b"fuzz application/json 100-continue close upgrade".split()))
        return [name + b": " + value] * draw(st.integers(2, 3))
    if kind == "fold":
        return [b"X-A: a", draw(st.sampled_from([b" b", b"\tb", b" ", b"\t"]))]
    if kind == "no-colon":
        return [b"X-A " + draw(st.binary(max_size=6))]
    if kind == "space-colon":
        return [b"X-A" + draw(st.sampled_from([b" ", b"\t", b"  "])) + b": a"]
    if kind == "control":
        marked = bytearray(b"value")
        marked.insert(draw(st.integers(0, 5)), draw(st.sampled_from([0, 1, 8, 0x0B, 0x1F, 0x7F])))
        return [draw(st.sampled_from([b"X-A: ", b"X-\x00A: "])) + bytes(marked)]
    return [draw(st.binary(max_size=10)) + b": " + draw(st.binary(max_size=10))]


@st.composite
def _headers(draw: st.DrawFn) -> Case:
    lines = draw(_header_lines())
    post = draw(st.booleans())
    data = predict(headers=lines) if post else request(headers=lines)
    if draw(st.integers(0, 4)) == 0:  # another line ending, for every line or for one
        end = draw(st.sampled_from(LINE_ENDS[6:]))
        data = data.replace(b"\r\n", end, -1 if draw(st.booleans()) else 1)
    return Case("headers", "generated", _split(draw, data), most=1)


@st.composite
def _framing(draw: st.DrawFn) -> Case:
    fields = []
    if draw(st.booleans()):
        fields.append(b"Content-Length: " + draw(st.sampled_from(CONTENT_LENGTHS)))
    if draw(st.booleans()):
        fields.append(b"Transfer-Encoding: " + draw(st.sampled_from(TRANSFER_ENCODINGS)))
    if draw(st.integers(0, 3)) == 0:
        fields.append(draw(st.sampled_from(fields or [b"Content-Length: 2"])))
    fields = draw(st.permutations(fields))
    body = draw(st.sampled_from([b"{}", PROBE_BODY, b""]))
    kind = draw(st.sampled_from(["raw", "chunked", "bad-size", "extension", "trailer", "lf"]))
    if kind == "chunked":
        body = chunked(body, draw(st.integers(1, 5000)))
    elif kind == "bad-size":
        body = draw(st.sampled_from(CHUNK_SIZES)) + b"\r\n" + body + b"\r\n0\r\n\r\n"
    elif kind == "extension":
        body = b"%x;%s\r\n%s\r\n0\r\n\r\n" % (len(body), draw(st.binary(max_size=8)), body)
    elif kind == "trailer":
        body = chunked(
            body, 4096, b"0\r\n" + draw(st.sampled_from([b"X-T: 1\r\n", b"X-T\r\n", b""])) + b"\r\n"
        )
    elif kind == "lf":
        body = chunked(body, 4096).replace(b"\r\n", b"\n")
    return Case("framing", "generated", _split(draw, post_head(*fields) + body))


_AMBIGUOUS = [  # framings that two readers may read differently: a server must refuse them
    (b"Content-Length: {n}", b"Transfer-Encoding: chunked"),
    (b"Transfer-Encoding: chunked", b"Content-Length: {n}"),
    (b"Transfer-Encoding: chunked", b"Transfer-Encoding: identity", b"Content-Length: {n}"),
    (b"Transfer-Encoding: chunked, identity", b"Content-Length: {n}"),
    (b"Transfer-Encoding: xchunked", b"Content-Length: {n}"),
    (b"Transfer-Encoding:\x0bchunked", b"Content-Length: {n}"),
    (b"Transfer-Encoding : chunked", b"Content-Length: {n}"),
    (b"Content-Length: 0", b"Content-Length: {n}"),
    (b"Content-Length: {n}", b"Content-Length: {n}"),
    (b"Connection: Upgrade", b"Upgrade: websocket", b"Content-Length: {n}"),
    (b"Connection: Upgrade", b"Upgrade: h2c", b"Transfer-Encoding: chunked"),
]


_HIDDEN = [
    SMUGGLED,
    b"0\r\n\r\n" + SMUGGLED,
    chunked(SMUGGLED, 17),
    b"%x\r\n%s" % (len(SMUGGLED), SMUGGLED),
]


@st.composite
def _smuggling(draw: st.DrawFn) -> Case:
    framing = draw(st.sampled_from(_AMBIGUOUS))
    hidden = draw(st.sampled_from(_HIDDEN))
    fields = [f.replace(b"{n}", b"%d" % len(hidden)) for f in framing]
    head = post_head(*draw(st.permutations(fields)))
    writes = (head, hidden) if draw(st.booleans()) else _split(draw, head + hidden)
    return Case("smuggling", "generated", writes, most=1, smuggled=True)


@st.composite
def _cut_bodies(draw: st.DrawFn) -> Case:
    end: End = draw(st.sampled_from(["read", "close", "reset", "half-close"]))
    if draw(st.booleans()):
        data = predict()
        data = data.replace(
            b"Content-Length: %d" % len(PROBE_BODY),
            b"Content-Length: %d" % (len(PROBE_BODY) + draw(st.integers(1, 10_000))),
        )
    else:
        data = post_head(_CHUNKED) + chunked(PROBE_BODY, draw(st.integers(1, 5000)), last=b"")
    data = data[: draw(st.integers(1, len(data)))]
    return Case("cut-body", "generated", _split(draw, data), end=end, most=1)


# A pipelined request: its bytes, its method, its status, and whether the server stops after it.
# No HEAD: httptools reads a HEAD's answer as having the body its Content-Length announces, so
# the answers after it in the same read would be misread (a HEAD is fuzzed on its own).
_Piped = tuple[bytes, bytes, int, bool]
_PIPED: dict[str, _Piped] = {
    "status": (request(), b"GET", 200, False),
    "metadata": (request(target=METADATA), b"GET", 200, False),
    "predict": (_V, b"POST", 200, False),
    "predict-chunked": (post_head(_CHUNKED) + chunked(PROBE_BODY, 1000), b"POST", 200, False),
    "large-predict": (predict(_predict_body(8, seed=1)), b"POST", 200, False),
    "wrong-shape": (predict(b'{"instances": [[1.0]]}'), b"POST", 400, False),
    "not-found": (request(target=b"/v1/models/nope"), b"GET", 404, False),
    "garbage": (b"GARBAGE\r\n\r\n", b"GET", 400, True),
    "head-over-64k": (_HUGE_HEAD, b"GET", 431, True),
    "body-past-the-limit": (_TOO_LARGE, b"POST", 413, True),
    "bad-chunk": (_BAD_CHUNK, b"POST", 400, True),
    "http-1.0": (request(version=b"HTTP/1.0"), b"GET", 200, True),
    "connection-close": (request(headers=[b"Connection: close"]), b"GET", 200, True),
}


@st.composite
def _pipelines(draw: st.DrawFn) -> Case:
    names = draw(st.lists(st.sampled_from(sorted(_PIPED)), min_size=2, max_size=6))
    piped = [_PIPED[name] for name in names]
    stop = next((i for i, p in enumerate(piped) if p[3]), len(piped) - 1)
    data = b"".join(p[0] for p in piped)
    return Case(
        "pipelining",
        "+".join(names),
        _split(draw, data),
        methods=tuple(p[1] for p in piped),
        most=stop + 1,
        first=tuple(p[2] for p in piped[: stop + 1]),
    )


_REFUSED_BODIES = [
    b'{"instances": [[1.0, 2.0]]}',
    b'{"instances": []}',
    b'{"instances": [[true]]}',
    b'{"inputs": {"x": [1]}}',
]


@st.composite
def _predicts(draw: st.DrawFn) -> Case:
    rows = draw(st.integers(1, 4))
    body = _predict_body(rows, draw(st.integers(0, 2**16)))
    if draw(st.booleans()):
        body = json.dumps({"inputs": json.loads(body)["instances"]}).encode()
    status = 200
    if draw(st.integers(0, 3)) == 0:  # a shape or a value the model refuses
        body = draw(st.sampled_from(_REFUSED_BODIES))
        status = 400
    how = draw(st.sampled_from(["length", "chunked", "expect", "http-1.0"]))
    if how == "chunked":
        data = post_head(_CHUNKED) + chunked(body, draw(st.integers(1, 20_000)))
    elif how == "expect":
        data = predict(body, [b"Expect: 100-continue"])
    else:
        data = predict(body)
        if how == "http-1.0":
            data = data.replace(b"HTTP/1.1", b"HTTP/1.0", 1)
    return Case("predict", how, _split(draw, data), most=1, first=(status,))


_MUTATIONS = ["flip", "insert", "delete", "repeat", "cut", "lf", "crlf"]


@st.composite
def _mutated(draw: st.DrawFn) -> Case:
    base = draw(st.one_of(st.sampled_from(list(NAMED.values())), _unmutated))
    data = bytearray(base.data)
    for op in draw(st.lists(st.sampled_from(_MUTATIONS), min_size=1, max_size=4)):
        at = draw(st.integers(0, len(data)))
        span = draw(st.integers(1, 16))
        if op == "flip" and at < len(data):
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete":
            del data[at : at + span]
        elif op == "repeat":
            data[at:at] = data[at : at + span * 64]
        elif op == "cut":
            del data[at:]
        elif op == "lf":
            data = bytearray(bytes(data).replace(b"\r\n", b"\n", draw(st.integers(1, 4))))
        elif op == "crlf":
            data[at:at] = b"\r\n"
    name = f"{base.family} {base.name}"  # never a NAMED key
    return Case("mutated", name, _split(draw, bytes(data)), base.end, base.methods)


_unmutated = st.one_of(
    _request_lines(),
    _versions(),
    _headers(),
    _framing(),
    _smuggling(),
    _cut_bodies(),
    _pipelines(),
    _predicts(),
)
cases = st.one_of(_unmutated, _mutated())


def generated_cases(count: int, seed: int) -> list[Case]:
    """`count` cases drawn by hypothesis from `cases`, the same ones for the same seed."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as seeded

    drawn: list[Case] = []
    attempt = 0
    while len(drawn) < count:

        @settings(
            max_examples=count - len(drawn),
            database=None,
            deadline=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @seeded(seed * 1000 + attempt)
        @given(cases)
        def draw(case: Case) -> None:
            drawn.append(case)

        draw()
        attempt += 1
    return drawn[:count]


# ---------------------------------------------------------------------------------------------
# Sending a case and reading what comes back


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    closes: bool  # said `Connection: close`

    @property
    def error(self) -> str | None:
        try:
            value = json.loads(self.body)
        except ValueError:
            return None
        return value.get("error") if isinstance(value, dict) else None


@dataclass
class Outcome:
    """What came back for a case: answers (1xx counted apart), how the connection ended (closed
    by the server, reset, left open past BOUND_S, or closed by the client), when, and what broke
    an invariant."""

    case: Case
    answers: list[Answer] = field(default_factory=list)
    interim: int = 0
    end: Literal["closed", "reset", "open", "client"] = "closed"
    after_s: float = 0.0  # from the last write to the end
    problems: list[str] = field(default_factory=list)

    @property
    def statuses(self) -> list[int]:
        return [a.status for a in self.answers]


def run_case(port: int, case: Case) -> Outcome:
    """Send `case` on a new connection to 127.0.0.1:`port` and read every answer (`Case.end`)."""
    outcome = Outcome(case)
    with socket.create_connection(("127.0.0.1", port), timeout=BOUND_S) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        connection = HttpConnection.over(sock)  # before a reset makes the peer unknown
        for i, write in enumerate(case.writes):
            if i:
                time.sleep(case.pause_s)
            try:
                sock.sendall(write)
            except OSError:  # the server closed while we wrote: read what it said
                break
        last = time.monotonic()
        if case.end in ("close", "reset"):
            if case.end == "reset":
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            outcome.end = "client"
            return outcome
        if case.end == "half-close":
            with contextlib.suppress(OSError):  # already reset
                sock.shutdown(socket.SHUT_WR)
        _read_answers(sock, connection, outcome)
        outcome.after_s = time.monotonic() - last
    return outcome


def _read_answers(sock: socket.socket, connection: HttpConnection, outcome: Outcome) -> None:
    methods = outcome.case.methods
    while True:
        n = len(outcome.answers)
        head = n < len(methods) and methods[n] == b"HEAD"
        try:
            status, body = connection.send(b"", head)
        except IncompleteResponse as exc:
            if exc.answered:
                outcome.problems.append(f"an answer cut short: {exc}")
            return
        except MalformedResponse as exc:
            outcome.problems.append(f"not an HTTP/1.x answer: {exc}")
            return
        except TimeoutError:
            outcome.end = "open"
            return
        except OSError:
            outcome.end = "reset"
            return
        if status < 200:
            outcome.interim += 1
            if status != 100:
                outcome.problems.append(f"interim answer {status}")
            continue
        headers = decode_headers(connection.answer_headers)
        closes = "close" in headers.get("connection", "").lower()
        outcome.answers.append(Answer(status, body, closes))
        if closes:
            _read_to_the_close(sock, outcome)
            return


def _read_to_the_close(sock: socket.socket, outcome: Outcome) -> None:
    rest = b""
    try:
        while chunk := sock.recv(65536):
            rest += chunk
    except TimeoutError:
        outcome.end = "open"
    except OSError:
        outcome.end = "reset"
    if rest:
        outcome.problems.append(f"{len(rest)} bytes after an answer that closes: {rest[:200]!r}")


def check(outcome: Outcome) -> list[str]:
    """What in `outcome` breaks invariants 1 and 2 (the module's docstring)."""
    case, problems = outcome.case, list(outcome.problems)
    for i, answer in enumerate(outcome.answers):
        if answer.status not in DOCUMENTED:
            problems.append(f"answer {i}: status {answer.status}: {answer.body[:300]!r}")
        head = i < len(case.methods) and case.methods[i] == b"HEAD"
        if not head and answer.status >= 400 and not isinstance(answer.error, str):
            problems.append(
                f"answer {i}: {answer.status} without a JSON error: {answer.body[:300]!r}"
            )
        if case.smuggled and _SMUGGLED_ANSWER.search(answer.body):
            problems.append(f"answer {i} answers the smuggled request: {answer.body[:300]!r}")
    if len(outcome.answers) > case.answers_at_most:
        problems.append(
            f"{len(outcome.answers)} answers to at most {case.answers_at_most} requests"
        )
    got = outcome.statuses[: len(case.first)]
    if got != list(case.first[: len(got)]):
        problems.append(f"first answers {got}, expected {list(case.first)}")
    elif len(got) < len(case.first) and outcome.end in ("closed", "open"):
        problems.append(f"answers {got}, expected {list(case.first)}, then closed")
    if outcome.end == "open":
        problems.append(f"the server left the connection open {BOUND_S:g} s after the last byte")
    return problems


# ---------------------------------------------------------------------------------------------
# The server


class ChildServer:
    """A `graphserve serve` child process (`self.process`, a ServerProcess) as the fuzzers
    watch it: alive or not, its threads and descriptors from /proc. A context manager."""

    process: ServerProcess

    @property
    def pid(self) -> int:
        assert self.process.process is not None
        return self.process.process.pid

    def alive(self) -> bool:
        return self.process.process is not None and self.process.process.poll() is None

    def resources(self) -> tuple[int, int]:
        """The server's threads and open file descriptors, from /proc."""
        return proc_status(self.pid)["Threads"], len(os.listdir(f"/proc/{self.pid}/fd"))

    def settle(self, baseline: tuple[int, int], wait_s: float) -> tuple[int, int]:
        """Threads and descriptors once they are back at `baseline`, or after `wait_s`."""
        deadline = time.monotonic() + wait_s
        while True:
            now = self.resources()
            if (now[0] <= baseline[0] and now[1] <= baseline[1]) or time.monotonic() > deadline:
                return now
            time.sleep(0.1)

    def __enter__(self) -> Self:
        self.process.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.process.stop()


class FuzzServer(ChildServer):
    """`graphserve serve graph` serving the mlp exported under `model_dir` (BASE/mlp), as a child
    process on free ports of 127.0.0.1, with the short TIMEOUTS; its log to `log_path`."""

    def __init__(self, model_dir: Path, log_path: Path) -> None:
        args = [
            "graph",
            "--model-base-path",
            str(model_dir),
            "--model-name",
            MODEL,
            "--rest-idle-timeout",
            str(TIMEOUTS["idle"]),
            "--rest-header-timeout",
            str(TIMEOUTS["header"]),
            "--rest-body-timeout",
            str(TIMEOUTS["body"]),
            "--file-system-poll-wait-seconds",
            "0",
        ]
        self.process = ServerProcess.on_free_ports(args, MODEL, log_path)
        self.expected = expected_logits()

    @property
    def port(self) -> int:
        assert self.process.rest_address is not None
        return int(self.process.rest_address.rsplit(":", 1)[1])

    def probe(self) -> str | None:
        """A predict on a new connection: None when it is answered 200 with EXPECTED, else what
        went wrong."""
        import numpy as np

        connection = HttpConnection(f"127.0.0.1:{self.port}", timeout=10.0)
        try:
            reply = connection.request(
                "POST", PREDICT.decode(), PROBE_BODY, {"Content-Type": "application/json"}
            )
        except OSError as exc:
            return f"the predict after it failed: {exc!r}"
        finally:
            connection.close()
        if reply.status != 200:
            return f"the predict after it got {reply.status}: {reply.body[:300]!r}"
        got = np.asarray(reply.json()["predictions"], dtype=np.float32)
        if got.shape != self.expected.shape or not np.allclose(got, self.expected, atol=1e-5):
            return f"the predict after it answered other values: {got.tolist()}"
        return None


def expected_logits() -> Any:
    """The mlp's logits for PROBE_BODY, computed here (the example's weights are seeded)."""
    import numpy as np

    from graphserve.model.examples import mlp

    x = np.asarray(json.loads(PROBE_BODY)["instances"], dtype=np.float32)
    return np.asarray(mlp.build()(x), dtype=np.float32)


# ---------------------------------------------------------------------------------------------
# A run


@dataclass
class Run:
    outcomes: list[Outcome]
    violations: list[tuple[Outcome, list[str]]]
    crashed: bool
    baseline: tuple[int, int]  # threads, descriptors before the first case
    after: tuple[int, int]  # ... and once every connection has timed out after the last
    seconds: float
    seed: int | None = None
    connections: int = 1

    @property
    def by_name(self) -> dict[str, Outcome]:
        return {o.case.name: o for o in self.outcomes if o.case.name in NAMED}

    @property
    def leaked(self) -> tuple[int, int]:
        return max(self.after[0] - self.baseline[0], 0), max(self.after[1] - self.baseline[1], 0)

    @property
    def passed(self) -> bool:
        return not self.violations and not self.crashed and self.leaked == (0, 0)

    def summary(self) -> dict[str, Any]:
        """The JSON summary `main` writes."""
        answers: Counter[str] = Counter()
        families: dict[str, dict[str, Any]] = {}
        for outcome in self.outcomes:
            family = families.setdefault(
                outcome.case.family,
                {
                    "cases": 0,
                    "answers": Counter(),
                    "closed_without_answer": 0,
                    "resets": 0,
                    "client_closed": 0,
                },
            )
            family["cases"] += 1
            for answer in outcome.answers:
                family["answers"][str(answer.status)] += 1
                answers[str(answer.status)] += 1
            family["closed_without_answer"] += outcome.end == "closed" and not outcome.answers
            family["resets"] += outcome.end == "reset"
            family["client_closed"] += outcome.end == "client"
        for family in families.values():
            family["answers"] = dict(sorted(family["answers"].items()))
        totals = {
            key: sum(f[key] for f in families.values())
            for key in ("closed_without_answer", "resets", "client_closed")
        }
        return {
            "environment": _environment(),
            "seed": self.seed,
            "connections": self.connections,
            "server": {"timeouts_s": TIMEOUTS, "linger_s": LINGER_S, "head_cap": MAX_HEAD_BYTES},
            "cases": len(self.outcomes),
            "named": sum(o.case.name in NAMED for o in self.outcomes),
            "families": {name: families[name] for name in FAMILIES if name in families},
            "answers": dict(sorted(answers.items())),
            "interim": sum(o.interim for o in self.outcomes),
            **totals,
            "crashes": int(self.crashed),
            "threads": _resource(self.baseline[0], self.after[0]),
            "fds": _resource(self.baseline[1], self.after[1]),
            "violation_count": len(self.violations),
            "violations": [_violation(o, problems) for o, problems in self.violations[:50]],
            "seconds": round(self.seconds, 1),
            "passed": self.passed,
        }


def _resource(baseline: int, after: int) -> dict[str, int]:
    return {"baseline": baseline, "after": after, "leaked": max(after - baseline, 0)}


def _violation(outcome: Outcome, problems: list[str]) -> dict[str, Any]:
    return {
        "case": outcome.case.name,
        "family": outcome.case.family,
        "problems": problems,
        "statuses": outcome.statuses,
        "end": outcome.end,
        "writes": [repr(w[:2000]) for w in outcome.case.writes],
    }


def _environment() -> dict[str, Any]:
    from graphserve.loadtest.comparison.run import environment

    return environment().to_json()


def write_summary(name: str, summary: dict[str, Any], out: Path) -> None:
    """`summary` at `out` with its provenance, as every published result (tools.bench.published),
    under the name `out` gives it."""
    from tools.bench.published import BY_NAME, write

    write(replace(BY_NAME[name], name=out.stem), summary, out.parent)


def run_cases(
    server: FuzzServer,
    to_run: Iterable[Case],
    connections: int = 16,
    progress: Callable[[int], None] | None = None,
) -> Run:
    """Every case on its own connection, `connections` at once, each followed by a probe; then
    the server's threads and descriptors against their count before. Stops at a crash."""
    to_run = list(to_run)
    started = time.monotonic()
    if server.probe() is not None:
        raise RuntimeError(f"the server does not answer a predict: {server.probe()}")
    time.sleep(TIMEOUTS["idle"] + 0.5)  # the probe's connection closed
    baseline = server.resources()
    outcomes: list[Outcome] = []
    violations: list[tuple[Outcome, list[str]]] = []
    crashed = threading.Event()
    lock = threading.Lock()

    def one(case: Case) -> None:
        if crashed.is_set():
            return
        try:
            outcome = run_case(server.port, case)
        except OSError as exc:  # refused: the server is gone, or no port was left
            outcome = Outcome(case, problems=[f"connecting failed: {exc!r}"])
        problems = check(outcome)
        failure = server.probe()
        if failure is not None:
            problems.append(failure)
        if not server.alive():
            crashed.set()
            problems.append(f"the server died: exit {server.process.process.returncode}")  # type: ignore[union-attr]
        with lock:
            outcomes.append(outcome)
            if problems:
                violations.append((outcome, problems))
            if progress is not None:
                progress(len(outcomes))

    with ThreadPoolExecutor(connections, thread_name_prefix="fuzz") as pool:
        list(pool.map(one, to_run))
    order = {id(case): i for i, case in enumerate(to_run)}
    outcomes.sort(key=lambda o: order[id(o.case)])
    after = baseline if crashed.is_set() else server.settle(baseline, BOUND_S + 5.0)
    return Run(
        outcomes,
        violations,
        crashed.is_set(),
        baseline,
        after,
        time.monotonic() - started,
        connections=connections,
    )


# ---------------------------------------------------------------------------------------------
# The command


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, required=True, help="cases to run (NAMED included)")
    parser.add_argument("--seed", type=int, default=0, help="hypothesis' seed (default 0)")
    parser.add_argument("--out", type=Path, help="write the JSON summary here")
    parser.add_argument("--connections", type=int, default=16, help="cases at once (default 16)")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from graphserve.exporter import ExportSpec, export_model

    named = list(NAMED.values())
    to_run = named + generated_cases(max(args.cases - len(named), 0), args.seed)
    print(f"{len(to_run)} cases ({len(named)} named), seed {args.seed}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="fuzz-http-") as work:
        base = Path(work) / "models"
        export_model(ExportSpec(source=f"examples:{MODEL}", name=MODEL, base_path=base))
        log_path = Path(work) / "server.log"
        with FuzzServer(base / MODEL, log_path) as server:
            step = max(len(to_run) // 10, 1)

            def progress(done: int) -> None:
                if done % step == 0:
                    print(f"  {done}/{len(to_run)}", file=sys.stderr)

            run = run_cases(server, to_run, args.connections, progress)
            log_tail = server.process.log_tail(40)
    run.seed = args.seed
    summary = run.summary()
    if args.out is not None:
        write_summary("fuzz-http", summary, args.out)
    _report(run, summary, log_tail)
    return 0 if run.passed else 1


def _report(run: Run, summary: dict[str, Any], log_tail: str) -> None:
    print(
        f"{summary['cases']} cases in {summary['seconds']:g} s: answers {summary['answers']}, "
        f"{summary['closed_without_answer']} closed without an answer, {summary['resets']} "
        f"reset, {summary['crashes']} crashes, threads {summary['threads']}, "
        f"fds {summary['fds']}",
        file=sys.stderr,
    )
    for outcome, problems in run.violations[:20]:
        print(
            f"\nFAILED {outcome.case.name} ({outcome.case.family}, end {outcome.case.end}): "
            f"statuses {outcome.statuses}, {outcome.end}",
            file=sys.stderr,
        )
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        for write in outcome.case.writes:
            print(f"  sent {write[:2000]!r}", file=sys.stderr)
    if run.crashed or run.leaked != (0, 0):
        print(f"\nserver log:\n{log_tail}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
