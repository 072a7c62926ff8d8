"""Raw HTTP/1.x requests over real sockets to a real `graphserve serve graph`
(tools/fuzz/http_raw.py).

One run per module: every hand-named shape of every family (tools/fuzz/http_raw.py's NAMED) and
GENERATED cases drawn by hypothesis from a fixed seed, 16 connections at once, against a child
process serving the exported mlp with short timeouts (idle, header and body 0.5 s). Every case
must hold the harness's invariants: documented statuses with JSON errors, never a 500, no more
answers than requests and none for a smuggled one, the connection closed in time, a right
predict after it, and no thread or descriptor left over at the end. Then each named case must
get its own answer: the statuses, error messages and endings in ANSWERS.

`make fuzz` runs thousands of cases the same way (tools/bench/results/fuzz-http.json).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
GENERATED = 300
SEED = 20261127


from tools.fuzz import http_raw as harness  # noqa: E402


@pytest.fixture(scope="module")
def server(mlp_export: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    log = tmp_path_factory.mktemp("fuzz-http") / "server.log"
    with harness.FuzzServer(mlp_export.model_dir, log) as server:
        yield server


@pytest.fixture(scope="module")
def run(server: Any) -> Any:
    cases = [*harness.NAMED.values(), *harness.generated_cases(GENERATED, SEED)]
    return harness.run_cases(server, cases, connections=16)


def test_every_case_holds_the_invariants(run: Any) -> None:
    report = []
    for outcome, problems in run.violations[:10]:
        report.append(
            f"{outcome.case.name}: {problems}\n  sent {list(outcome.case.writes)!r:.1500}"
        )
    assert not run.violations, f"{len(run.violations)} cases broke an invariant:\n" + "\n".join(
        report
    )
    assert not run.crashed
    assert len(run.outcomes) == len(harness.NAMED) + GENERATED
    assert {o.case.family for o in run.outcomes} == set(harness.FAMILIES)


def test_no_thread_or_descriptor_is_left_over(run: Any) -> None:
    """Counted in the server's /proc once every connection has timed out: as many threads and
    open descriptors as before the first case (none per connection, none leaked by one)."""
    assert run.leaked == (0, 0), f"before {run.baseline}, after {run.after} (threads, fds)"


def test_the_summary_adds_up(run: Any) -> None:
    summary = json.loads(json.dumps(run.summary()))
    families = summary["families"]
    assert list(families) == list(harness.FAMILIES)
    assert sum(f["cases"] for f in families.values()) == summary["cases"]
    answers = sum(len(o.answers) for o in run.outcomes)
    assert sum(summary["answers"].values()) == answers
    assert "500" not in summary["answers"]
    assert summary["crashes"] == 0 and summary["passed"] is True
    assert summary["threads"]["leaked"] == summary["fds"]["leaked"] == 0
    assert summary["named"] == len(harness.NAMED)


def test_generated_cases_are_the_same_for_the_same_seed() -> None:
    assert harness.generated_cases(40, 3) == harness.generated_cases(40, 3)
    assert harness.generated_cases(40, 3) != harness.generated_cases(40, 4)


# ---------------------------------------------------------------------------------------------
# Each named case's own answer

MALFORMED = "Malformed HTTP request: Invalid HTTP request received."
HEAD_CAP = "request line and headers exceed 65536 bytes"
HEAD_408 = "request headers not received within 0.5 s"
BODY_408 = "request body not received within 0.5 s"
TOO_LARGE = (
    "request body of 99999999999 bytes exceeds the limit of 67108864 bytes (--max-message-bytes)"
)
UPGRADE = (
    "Malformed HTTP request: an Upgrade request with a body is not served (this server speaks "
    "HTTP/1.1 only): send it without 'Connection: upgrade'"
)
NOT_JSON = (
    "JSON Parse error: Invalid value: request body is not valid JSON: Expecting value: line 1 "
    "column 1 (char 0)"
)
OK = (200, None)

# name -> the answers, in order, as (status, error message; None: a 200's body or a HEAD's)
ANSWERS: dict[str, list[tuple[int, str | None]]] = {
    "request-line/unknown-method": [(400, MALFORMED)],
    "request-line/lowercase-method": [(400, MALFORMED)],
    "request-line/huge-method": [(400, MALFORMED)],
    "request-line/delete": [(400, "Malformed request: DELETE /v1/models/mlp")],
    "request-line/head": [(400, None)],  # TF Serving's API has no HEAD; its answer, no body
    "request-line/options-star": [(400, "Malformed request: OPTIONS *")],
    "request-line/connect": [(400, MALFORMED)],
    "request-line/absolute-form": [OK],
    # the path is routed as sent: TF Serving does not decode model names either
    "request-line/percent-encoded": [(404, "Could not find any versions of model %6dlp")],
    "request-line/percent-nul": [(404, "Could not find any versions of model %00")],
    "request-line/raw-nul": [(400, MALFORMED)],
    "request-line/control-bytes": [(400, MALFORMED)],
    "request-line/long-target": [(431, HEAD_CAP)],
    "request-line/tab-separated": [(400, MALFORMED)],
    "version/http-0.9": [(408, HEAD_408)],  # no version: llhttp waits for one
    "version/http-1.0": [OK],
    "version/http-2.0-line": [OK],  # llhttp takes 2.0 on a request line; answered in 1.1, closed
    "version/http-2-preface": [(400, MALFORMED)],
    "version/h2c-upgrade": [OK],  # the upgrade is ignored, as RFC 9110 lets a server do
    "version/garbage": [(400, MALFORMED)],
    "version/lowercase": [(400, MALFORMED)],
    "version/http-9.9": [(400, MALFORMED)],
    "headers/head-over-64k": [(431, HEAD_CAP)],
    "headers/10000-headers": [(431, HEAD_CAP)],
    "headers/head-under-64k": [OK],
    "headers/duplicate-host": [OK],
    "headers/duplicate-content-length-same": [(400, MALFORMED)],
    "headers/duplicate-content-length-different": [(400, MALFORMED)],
    "headers/obs-fold": [(400, MALFORMED)],
    "headers/bare-lf": [(400, MALFORMED)],
    "headers/bare-cr": [(400, MALFORMED)],
    "headers/missing-colon": [(400, MALFORMED)],
    "headers/space-before-colon": [(400, MALFORMED)],
    "headers/nul-in-value": [(400, MALFORMED)],
    "headers/empty-name": [(400, MALFORMED)],
    "headers/latin-1-value": [OK],
    "framing/cl-and-te": [(400, MALFORMED)],
    "framing/te-chunked-identity": [(400, MALFORMED)],
    "framing/te-identity-chunked": [OK],  # chunked last: the body is chunked
    "framing/te-xchunked": [(400, MALFORMED)],
    "framing/te-twice": [(400, MALFORMED)],
    "framing/te-on-http-1.0": [OK],
    "framing/cl-plus": [(400, MALFORMED)],
    "framing/cl-hex": [(400, MALFORMED)],
    "framing/cl-negative": [(400, MALFORMED)],
    "framing/cl-list": [(400, MALFORMED)],
    "framing/cl-overflow": [(400, MALFORMED)],
    "framing/cl-past-the-limit": [(413, TOO_LARGE)],
    "framing/chunk-size-overflow": [(400, MALFORMED)],
    "framing/chunk-size-negative": [(400, MALFORMED)],
    "framing/chunk-size-not-hex": [(400, MALFORMED)],
    "framing/chunk-extension": [OK],
    "framing/chunk-trailers": [OK],
    "framing/chunk-lf-only": [(400, MALFORMED)],
    "framing/chunk-last-missing": [(408, BODY_408)],
    "smuggling/cl-te": [(400, MALFORMED)],
    "smuggling/te-cl": [(400, MALFORMED)],
    "smuggling/te-te": [(400, MALFORMED)],
    "smuggling/cl-cl": [(400, MALFORMED)],
    "smuggling/upgrade-with-body": [(400, UPGRADE)],
    "smuggling/upgrade-with-chunked-body": [(400, UPGRADE)],
    "smuggling/get-with-body": [OK],  # the body is read as a body, and dropped
    "smuggling/in-a-predict-body": [(400, NOT_JSON)],
    "smuggling/in-a-chunked-body": [(400, NOT_JSON)],
    "smuggling/after-a-framing-error": [(400, MALFORMED)],  # one answer, none for what follows
    "cut-body/stall": [(408, BODY_408)],
    "cut-body/close": [],
    "cut-body/reset": [],
    "cut-body/half-close": [],  # the client's FIN closes the connection: nothing to answer
    "cut-body/mid-chunk": [(408, BODY_408)],
    "cut-body/mid-head": [(408, HEAD_408)],
    "cut-body/expect-continue-no-body": [(408, BODY_408)],  # after a 100 Continue
    "pipelining/three-valid": [OK, OK, OK],
    "pipelining/split-writes": [OK, OK, OK],
    "pipelining/crlf-between": [OK, OK],
    "pipelining/valid-then-garbage": [OK, (400, MALFORMED)],
    "pipelining/valid-then-head-over-64k": [OK, (431, HEAD_CAP)],
    "pipelining/valid-then-body-past-the-limit": [OK, (413, TOO_LARGE)],
    "pipelining/valid-then-bad-chunk": [OK, (400, MALFORMED)],
    "pipelining/large-body-then-request": [OK, OK],
    "pipelining/http-1.0-then-valid": [OK],
    "pipelining/connection-close-then-valid": [OK],
    "pipelining/crlf-only": [],
    "pipelining/crlf-after-an-answer": [OK],
    "predict/valid": [OK],
    "predict/chunked": [OK],
    "predict/expect-continue": [OK],
    "predict/columnar": [OK],
}
CLIENT_CLOSES = {"cut-body/close", "cut-body/reset"}
INTERIM = {"cut-body/expect-continue-no-body", "predict/expect-continue"}  # a 100 Continue first


def test_every_named_case_has_its_expected_answer() -> None:
    assert set(ANSWERS) | {"predict/wrong-shape"} == set(harness.NAMED)


@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_named_case_is_answered_as_expected(run: Any, name: str) -> None:
    outcome = run.by_name[name]
    got = [(a.status, a.error) for a in outcome.answers]
    assert got == ANSWERS[name], f"{outcome.end} after {outcome.after_s:.2f} s"
    assert outcome.interim == (name in INTERIM)
    if name in CLIENT_CLOSES:
        assert outcome.end == "client"
    else:  # never left open: closed by the server, or reset for bytes it did not read
        assert outcome.end in ("closed", "reset"), outcome.end
    for answer in outcome.answers:
        assert answer.status != 500


def test_a_refused_request_is_answered_with_connection_close(run: Any) -> None:
    for name, answers in ANSWERS.items():
        outcome = run.by_name[name]
        for answer, (status, error) in zip(outcome.answers, answers, strict=True):
            if error in (MALFORMED, HEAD_CAP, HEAD_408, BODY_408, TOO_LARGE, UPGRADE):
                assert answer.closes, f"{name}: {status} without Connection: close"


def _predictions(body: bytes) -> np.ndarray:
    answer = json.loads(body)
    return np.asarray(answer.get("predictions", answer.get("outputs")), dtype=np.float32)


@pytest.mark.parametrize(
    "name",
    [
        "predict/valid",
        "predict/chunked",
        "predict/expect-continue",
        "predict/columnar",
        "framing/te-identity-chunked",
        "framing/chunk-extension",
        "framing/chunk-trailers",
        "framing/te-on-http-1.0",
    ],
)
def test_a_predict_however_framed_gets_the_model_values(run: Any, server: Any, name: str) -> None:
    (answer,) = run.by_name[name].answers
    np.testing.assert_allclose(_predictions(answer.body), server.expected, atol=1e-5)


def test_a_predict_the_model_refuses_names_the_input_and_its_shape(run: Any) -> None:
    (answer,) = run.by_name["predict/wrong-shape"].answers
    assert answer.status == 400 and answer.error is not None
    assert answer.error.startswith("Matrix size-incompatible: In[0]: [1,2], In[1]: [784,128]")
    assert answer.error.endswith(
        "(input 'images' is declared float32 of shape [-1, 784], got shape [1, 2])"
    )


def test_pipelined_valid_requests_are_answered_each_in_order(run: Any, server: Any) -> None:
    """A predict, the metadata and the status in one write: three answers, in that order."""
    predict, metadata, status = run.by_name["pipelining/three-valid"].answers
    np.testing.assert_allclose(_predictions(predict.body), server.expected, atol=1e-5)
    assert json.loads(metadata.body)["model_spec"]["name"] == "mlp"
    assert "signature_def" in json.loads(metadata.body)["metadata"]
    assert json.loads(status.body)["model_version_status"][0]["state"] == "AVAILABLE"
    for answer in run.by_name["pipelining/split-writes"].answers:
        np.testing.assert_allclose(_predictions(answer.body), server.expected, atol=1e-5)
    # a body past 64 KiB and a head begun in one read: the head is measured from its own start
    predict, status = run.by_name["pipelining/large-body-then-request"].answers
    np.testing.assert_allclose(_predictions(predict.body), server.expected, atol=1e-5)
    assert json.loads(status.body)["model_version_status"][0]["state"] == "AVAILABLE"


def test_a_request_refused_behind_a_valid_one_waits_for_its_answer(run: Any, server: Any) -> None:
    """The valid predict's own answer first, then the refusal, then the connection closes: the
    request after the garbage is never answered."""
    for name in [n for n in ANSWERS if n.startswith("pipelining/valid-then-")]:
        outcome = run.by_name[name]
        first, refusal = outcome.answers
        np.testing.assert_allclose(_predictions(first.body), server.expected, atol=1e-5)
        assert not first.closes and refusal.closes
        assert outcome.case.answers_at_most == 2


@pytest.mark.parametrize("name", sorted(n for n in ANSWERS if n.startswith("smuggling/")))
def test_a_smuggled_request_is_never_answered(run: Any, name: str) -> None:
    """CL+TE, TE+CL, TE.TE, two Content-Lengths and an Upgrade with a body are refused (400,
    closed); a body that holds a request is read as a body. Either way: one answer, and it is
    not the smuggled GET's (a 404 naming model `smuggled`)."""
    outcome = run.by_name[name]
    assert outcome.case.smuggled
    (answer,) = outcome.answers
    assert b"smuggled" not in answer.body


@pytest.mark.parametrize(
    ("name", "timeout"),
    [
        ("cut-body/stall", "body"),
        ("cut-body/mid-chunk", "body"),
        ("cut-body/expect-continue-no-body", "body"),
        ("framing/chunk-last-missing", "body"),
        ("cut-body/mid-head", "header"),
        ("version/http-0.9", "header"),
        ("pipelining/crlf-only", "idle"),
        ("pipelining/crlf-after-an-answer", "idle"),
    ],
)
def test_what_stops_coming_is_cut_after_its_timeout(run: Any, name: str, timeout: str) -> None:
    """A body or head that stops coming is answered 408 and closed once its timeout has passed
    (not before); a connection that sent only CR LF, before a request or after one, is closed
    after the idle timeout like any idle one (CR LF used to disarm it for good)."""
    outcome = run.by_name[name]
    seconds = harness.TIMEOUTS[timeout]
    assert seconds - 0.1 <= outcome.after_s < harness.BOUND_S, outcome.after_s
    assert outcome.end == "closed"


def test_check_finds_what_breaks_an_invariant() -> None:
    """The checks themselves, on answers a broken server would give."""
    case = harness.Case("smuggling", "made-up", (b"POST / HTTP/1.1\r\n\r\n",), most=1,
                        first=(400,), smuggled=True)  # fmt: skip
    smuggled = harness.Answer(404, b'{"error": "Could not find any versions of model smuggled"}',
                              closes=False)  # fmt: skip
    outcome = harness.Outcome(case, [harness.Answer(200, b"{}", False), smuggled], end="open")
    problems = "\n".join(harness.check(outcome))
    assert "answer 1 answers the smuggled request" in problems
    assert "2 answers to at most 1 requests" in problems
    assert "first answers [200], expected [400]" in problems
    assert "left the connection open" in problems
    crash = harness.Outcome(case, [harness.Answer(500, b"Internal Server Error", True)])
    problems = "\n".join(harness.check(crash))
    assert "status 500" in problems and "500 without a JSON error" in problems
