"""TF Serving's own test cases, run against our servers, and `graphserve conformance` itself.

The case table lives in the package (graphserve/conformance/reference.py: each case a request and
the answer TF Serving's own tests expect, named by the test file it comes from) and so do the
model-independent cases built from a server's metadata (conformance/generic.py). Here every case
runs against each server, over the protocol it uses:

    tf1     the graph server on `write-models`' TF1 half_plus_two (SavedModelBuilder, reference
            variables, tf.Example parsing, an asset and its init op; zero-padded `00000123`),
            configured by the tf1.config it writes
    tf2     the graph server on its TF2 half_plus_two (tf.saved_model.save), by tf2.config
    eager   the eager server on the same model as Python code (tests/half_plus_two.py)

    strict  the graph server on the TF1 models with --strict-json-numbers: TF Serving's cases
            of a number past float32's range come out as known deviations, not failures

The TF Serving stand-in deployment runs the command in tests/test_containers.py. The manual's
conformance table (docs/guides/conformance.md) is checked against the table, its deviations and
`NOT_EXPRESSIBLE`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from typer.testing import CliRunner

from graphserve.cli import app
from graphserve.conformance.cases import STRICT_JSON_NUMBERS, Case, CaseResult, Target, call_rest
from graphserve.conformance.generic import cases_for, discover
from graphserve.conformance.models import (
    ReferenceModels,
    write_reference_models,
    write_tf2_half_plus_two,
)
from graphserve.conformance.reference import (
    GRPC_CASES,
    JSON,
    LABELS,
    NOT_EXPRESSIBLE,
    REST_CASES,
    STORAGE,
    TWO,
)
from graphserve.core import client
from graphserve.core.codec import decode_json_request, encode_json_response, signature_name_of
from graphserve.core.errors import InvalidInput, NotFound
from graphserve.core.processes import free_port
from graphserve.serving import ModelRegistry, ModelServer, ServerOptions
from graphserve.serving.config import load_model_config_file
from graphserve.serving.manager import ModelManager
from tests.tf1_models import write_tf1_half_plus_two

ALL = ("tf1", "tf2", "eager")


@pytest.fixture(scope="module")
def reference_models(tmp_path_factory: pytest.TempPathFactory) -> ReferenceModels:
    return write_reference_models(tmp_path_factory.mktemp("conformance") / "models")


@pytest.fixture(scope="module")
def registries(reference_models: ReferenceModels) -> dict[str, ModelRegistry]:
    registries = {name: ModelRegistry() for name in ALL}
    for arm, config in (("tf1", reference_models.tf1_config), ("tf2", reference_models.tf2_config)):
        ModelManager(registries[arm], load_model_config_file(config)).start()
    eager = registries["eager"]
    eager.load_eager("default", "tests.half_plus_two:build", version=123)
    for version in LABELS.values():
        eager.load_eager(TWO, "tests.half_plus_two:build", version=version)
    eager.set_labels(TWO, LABELS)
    return registries


@pytest.fixture(scope="module")
def servers(registries: dict[str, ModelRegistry]) -> Iterator[dict[str, ModelServer]]:
    options = ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0)
    servers = {name: ModelServer(registry, options) for name, registry in registries.items()}
    strict = replace(options, strict_json_numbers=True)
    servers["strict"] = ModelServer(registries["tf1"], strict)
    for server in servers.values():
        server.start()
    try:
        yield servers
    finally:
        for server in servers.values():
            server.stop()


@pytest.fixture(scope="module")
def arms(servers: dict[str, ModelServer]) -> Iterator[dict[str, Target]]:
    targets = {
        name: Target(
            client.GrpcClient.connect(f"127.0.0.1:{server.grpc_port}"),
            f"127.0.0.1:{server.rest_port}",
        )
        for name, server in servers.items()
    }
    yield targets
    for target in targets.values():
        target.grpc.close()


def _verdict(result: CaseResult) -> str:
    return f"{result.case}: expected {result.expected}; got {result.got}"


# -- TF Serving's table, from the package -------------------------------------------------------


@pytest.mark.parametrize("case", [*REST_CASES, *GRPC_CASES], ids=lambda c: f"{c.test}:{c.case}")
@pytest.mark.parametrize("arm", ALL)
def test_reference_case(arms: dict[str, Target], arm: str, case: Case) -> None:
    result = case.run(arms[arm])
    assert result.outcome == "pass", _verdict(result)


# -- the cases for any model, from each server's own metadata -----------------------------------


@pytest.mark.parametrize(("model", "labels"), [("default", ()), (TWO, tuple(LABELS))])
@pytest.mark.parametrize("arm", ALL)
def test_model_independent_cases(
    arms: dict[str, Target], arm: str, model: str, labels: tuple[str, ...]
) -> None:
    facts = discover(arms[arm], model, labels=labels)
    assert facts.versions == ((123,) if model == "default" else (123, 124))
    assert (facts.signature, list(facts.inputs), list(facts.outputs)) == (
        "serving_default", ["x"], ["y"]
    )  # fmt: skip
    results = [case.run(arms[arm]) for case in cases_for(arms[arm], facts)]
    assert [_verdict(r) for r in results if r.outcome in ("fail", "deviates")] == []
    reasons = {r.reason for r in results if r.outcome == "n/a"}
    expected = {"no integer input"}
    if model == "default":
        expected |= {"no labels named (--label NAME; TF Serving's API does not list them)"}
    assert reasons == expected
    passed = {r.case for r in results if r.outcome == "pass"}
    for label in labels:
        assert f"gRPC Predict (label {label})" in passed
        assert f"REST POST /v1/models/{model}/labels/{label}:predict" in passed
    for version in facts.versions:  # one version too: a request any server takes
        assert f"gRPC Predict (version {version})" in passed
        assert f"REST POST /v1/models/{model}/versions/{version}:predict" in passed
    path = f"REST POST /v1/models/{model}:predict"
    assert f"{path} (a number past float32's range, read as inf, equal to gRPC's answer with " \
        "inf)" in passed  # fmt: skip
    assert f"{path} (a number past double's range, 1e400)" in passed


# -- the command ------------------------------------------------------------------------------


def _addresses(server: ModelServer) -> list[str]:
    return [f"127.0.0.1:{server.grpc_port}", "--rest", f"127.0.0.1:{server.rest_port}"]


@pytest.mark.parametrize("arm", ALL)
def test_the_command_runs_the_whole_table_against_each_server(
    servers: dict[str, ModelServer], arm: str, tmp_path: Path
) -> None:
    argv = ["conformance", *_addresses(servers[arm]), "--reference", "--output", "json"]
    result = CliRunner().invoke(app, [*argv, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    table = len(REST_CASES) + len(GRPC_CASES)
    assert (report["counts"]["fail"], report["counts"]["deviates"]) == (0, 0)
    assert report["counts"]["pass"] > table  # the table, and the generic cases on two models
    assert report["models"] == ["default", TWO]
    assert list(report["counts"]) == ["pass", "fail", "deviates", "n/a"]
    assert sum(report["counts"].values()) == len(report["results"])
    sources = {r["source"] for r in report["results"]}
    assert {c.source for c in [*REST_CASES, *GRPC_CASES]} <= sources
    # a graphserve server says what it is, and the report says so: its results are graphserve's
    assert report["server"] == ("graphserve (eager)" if arm == "eager" else "graphserve (graph)")
    assert json.loads((tmp_path / "conformance.json").read_text()) == report
    title, _, said = (tmp_path / "conformance.md").read_text().splitlines()[:3]
    assert title.endswith(f"(default, two; server: {report['server']}) conforms: "
                          f"{report['counts']['pass']} passed, 0 failed, 0 deviate, "
                          f"{report['counts']['n/a']} not applicable")  # fmt: skip
    assert said.startswith(f"The server says it is {report['server']}")
    assert "graphserve's answers, not TF Serving's" in said


def test_the_command_prints_one_line_per_case_and_a_summary(
    servers: dict[str, ModelServer],
) -> None:
    result = CliRunner().invoke(app, ["conformance", *_addresses(servers["tf1"]), "--model", TWO,
                                      "--label", "stable", "--label", "canary"])  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[-1].startswith(
        f"127.0.0.1:{servers['tf1'].grpc_port} (two; server: graphserve (graph)) conforms: "
    )
    assert lines[-1].endswith(" failed, 0 deviate, 1 not applicable")
    assert lines[-2].startswith("the server says it is graphserve (graph)")
    assert "pass  gRPC Predict (label canary)  model_servers/http_rest_api_handler_test.cc" in (
        result.stdout
    )
    assert "pass  REST POST /v1/models/two/labels/stable:predict" in result.stdout


def test_a_server_that_breaks_a_case_fails_the_command_with_exit_3(
    servers: dict[str, ModelServer],
    registries: dict[str, ModelRegistry],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fault: an unknown label answers as an unknown model (404 / NOT_FOUND), where TF
    Serving answers 400 / INVALID_ARGUMENT "Unrecognized servable version label"."""
    registry = registries["tf2"]
    real_get = registry.get

    def get(name: str, version: Any = None) -> Any:
        if isinstance(version, str) and version not in LABELS:
            raise NotFound(f"no such servable: {name}@{version}")
        return real_get(name, version)

    monkeypatch.setattr(registry, "get", get)
    argv = ["conformance", *_addresses(servers["tf2"]), "--reference", "--output", "json"]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 3, result.output
    report = json.loads(result.stdout)
    failed = {(r["test"], r["case"]): r for r in report["results"] if r["outcome"] == "fail"}
    assert set(failed) == {
        (
            "PredictRequestErrors",
            "REST POST /v1/models/default/labels/nope:predict (unknown label)",
        ),
        ("PredictRequestErrors", "REST POST /v1/models/two/labels/nope:predict (unknown label)"),
        ("PredictRequestErrors", "REST POST /v1/models/two/labels/nope:predict"),
        ("PredictRequestErrors", "gRPC Predict (unknown label)"),
    }
    rest = failed[("PredictRequestErrors", "REST POST /v1/models/two/labels/nope:predict")]
    assert rest["expected"] == '400 {"error": "...Unrecognized servable version label..."}'
    assert rest["got"].startswith('404 {"error": "no such servable: two@nope')
    assert rest["source"] == "model_servers/http_rest_api_handler_test.cc"
    assert report["counts"]["deviates"] == 0
    assert (
        report["counts"]["fail"]
        == len(report["results"]) - report["counts"]["pass"] - (report["counts"]["n/a"])
    )


def test_strict_json_numbers_deviate_knowingly_and_the_command_exits_0(
    servers: dict[str, ModelServer], tmp_path: Path
) -> None:
    """--strict-json-numbers: a finite number past float32's range is refused (400) where TF
    Serving reads inf. Those cases, and only those, deviate, each showing TF Serving's answer,
    this server's and why; no case fails, so the command exits 0, and says so everywhere."""
    argv = ["conformance", *_addresses(servers["strict"]), "--reference", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, [*argv, "--output", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    deviated = [r for r in report["results"] if r["outcome"] == "deviates"]
    declared = [c for c in REST_CASES if c.deviation is not None]
    assert report["counts"]["fail"] == 0
    # the table's own two, and the model-independent case on each of the two models
    assert report["counts"]["deviates"] == len(deviated) == len(declared) + 2
    assert {(r["test"], r["case"]) for r in deviated} == {
        *((c.test, c.case) for c in declared),
        *(("FloatTensorThatExceedsMaxReturnsInf", f"REST POST /v1/models/{m}:predict (a number "
           "past float32's range, read as inf, equal to gRPC's answer with inf)")
          for m in ("default", TWO)),
    }  # fmt: skip
    for r in deviated:
        assert r["source"] == JSON
        assert r["expected"] == "200"
        assert r["got"].startswith('400 {"error": "input \'x\': values out of range for float32')
        assert "--strict-json-numbers" in r["got"]
        assert r["reason"] == STRICT_JSON_NUMBERS.why
    markdown = (tmp_path / "conformance.md").read_text().splitlines()
    assert "conforms but for known deviations: " in markdown[0]
    assert f", 0 failed, {len(deviated)} deviate, " in markdown[0]
    rows = [line.split(" | ")[0] for line in markdown if line.startswith("| ")][2:]
    assert rows[: len(deviated)] == ["| deviates"] * len(deviated)  # right after the failures
    text = CliRunner().invoke(app, argv[:-2])
    assert text.exit_code == 0, text.output
    assert "DEVIATES  REST POST /v1/models/default:predict (double's max reads as inf)" in (
        text.stdout
    )
    assert "        TF Serving:  200\n        this server: 400 " in text.stdout
    assert f"why:         {STRICT_JSON_NUMBERS.why}" in text.stdout
    assert text.stdout.splitlines()[-1].endswith(
        f"conforms but for known deviations: {report['counts']['pass']} passed, 0 failed, "
        f"{len(deviated)} deviate, {report['counts']['n/a']} not applicable"
    )


def test_an_answer_of_another_shape_fails_its_case_and_the_run_goes_on(
    arms: dict[str, Target],
) -> None:
    """A server that claims compatibility may answer with a body or message of another shape:
    the case fails saying so, it does not stop the run."""
    from graphserve.conformance.cases import GrpcCase, RestCase

    rest = RestCase("x", "Shape", "GET", "/v1/models/default", None, 200,
                    check=lambda body: body["no such key"])  # fmt: skip
    result = rest.run(arms["tf1"])
    assert (result.outcome, result.expected) == ("fail", "200")
    assert result.got.startswith("200, unreadable: KeyError: 'no such key' in 200 {")
    grpc_case = GrpcCase("x", "Shape", "GetModelStatus", lambda: client.status_request("default"),
                         check=lambda r: r.model_version_status[5])  # fmt: skip
    result = grpc_case.run(arms["tf1"])
    assert result.outcome == "fail"
    assert result.got.startswith("OK, unreadable: IndexError")


def test_request_gives_the_inputs_and_must_fit_the_signature(
    servers: dict[str, ModelServer], tmp_path: Path
) -> None:
    """`--request FILE`: a REST predict body whose inputs the cases use instead of generated
    ones; one that does not fit the signature, or is not JSON, is a usage error (exit 2)."""
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"instances": [[1.0], [5.0]]}))
    argv = ["conformance", *_addresses(servers["tf1"]), "--request", str(request), "--output",
            "json"]  # fmt: skip
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["counts"]["fail"] == 0
    passed = {r["case"] for r in report["results"] if r["outcome"] == "pass"}
    assert "gRPC Predict (the request's inputs)" in passed
    request.write_text(json.dumps({"instances": ["a", "b"]}))
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2
    assert "--request does not fit 'default''s signature 'serving_default'" in result.output
    assert "not of expected type: float" in result.output
    request.write_text("{not json")
    assert CliRunner().invoke(app, argv).exit_code == 2


def test_a_server_that_does_not_answer_exits_1() -> None:
    port = free_port()
    result = CliRunner().invoke(app, ["conformance", f"127.0.0.1:{port}", "--timeout", "0.5"])
    assert result.exit_code == 1
    assert f"no gRPC server answers at 127.0.0.1:{port} within 0.5 s" in result.output


def test_a_model_the_server_does_not_serve_exits_1(servers: dict[str, ModelServer]) -> None:
    result = CliRunner().invoke(app, ["conformance", *_addresses(servers["tf1"]), "--model", "mlp"])
    assert result.exit_code == 1
    assert "does not serve model 'mlp' (--model NAME)" in result.output
    assert "NOT_FOUND" in result.output


def test_write_models_writes_what_tf_serving_can_serve(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["conformance", "write-models", str(tmp_path / "m"), "--serve-from", "/models"]
    )
    assert result.exit_code == 0, result.output
    root = tmp_path / "m"
    assert sorted(p.name for p in (root / "two").iterdir()) == ["00000123", "00000124"]
    assert (root / "tf1" / "00000123" / "assets" / "foo.txt").is_file()
    configs = load_model_config_file(root / "tf1.config")
    assert [(c.name, str(c.base_path)) for c in configs] == [
        ("default", "/models/tf1"), (TWO, "/models/two")
    ]  # fmt: skip
    assert (configs[1].policy.kind, configs[1].labels) == ("all", LABELS)
    again = CliRunner().invoke(app, ["conformance", "write-models", str(root)])
    assert again.exit_code == 2
    assert "exists already" in again.output


# -- json_tensor_test.cc: the codec, as TF Serving's tests call its JSON functions -------------


def _specs(**dtypes: str) -> dict[str, Any]:
    from graphserve.core.signature import TensorSpec

    return {name: TensorSpec(name, dtype, None) for name, dtype in dtypes.items()}


JSON_ERRORS = [
    ("SingleUnnamedTensorErrors", {"instances": [[1, 2], [3, 4], [5, 6, 7]]},
     "Expecting tensor size"),
    ("SingleUnnamedTensorErrors", {"instances": [[1, 2], [3, 4], [[5, 6]]]}, "Expecting shape"),
    ("SingleUnnamedTensorErrors", {"instances": [1, [1]]}, "Expecting shape"),
    ("SingleUnnamedTensorErrors", {"instances": [[1, 2], ["a", "b"]]}, "not of expected type"),
    ("SingleUnnamedTensorErrors", {"instances": [[1, 2]], "inputs": [[1, 2]]},
     "Not formatted correctly"),
]  # fmt: skip

JSON_NAMED_ERRORS = [
    ({"instances": [{"int_tensor": [[1, 2], [3, 4], [5, 6]], "str_tensor": ["foo", "bar"]},
                    {"int_tensor": [[[7, 8], [9, 0], [1, 2]]], "str_tensor": ["baz", "bat"]}]},
     "Expecting shape"),
    ({"instances": [{"int_tensor": [[1, 2], [3, 4], [5, 6], [7, 8]], "str_tensor": ["foo", "bar"]},
                    {"int_tensor": [[7, 8], [9, 0], [1, 2]], "str_tensor": ["baz", "bat"]}]},
     "Expecting tensor size"),
    ({"instances": [{"int_tensor": [[1, 2], [3, 4], [5, 6]], "str_tensor": ["foo", "bar"]},
                    [1, 20, 30]]},
     "Expecting object but got list"),
]  # fmt: skip


@pytest.mark.parametrize(("test", "body", "error"), JSON_ERRORS)
def test_json_single_tensor_errors(test: str, body: dict[str, Any], error: str) -> None:
    with pytest.raises(InvalidInput, match=error):
        decode_json_request(body, _specs(default="int32"))


@pytest.mark.parametrize(("body", "error"), JSON_NAMED_ERRORS)
def test_json_multiple_named_tensor_errors(body: dict[str, Any], error: str) -> None:
    with pytest.raises(InvalidInput, match=error):
        decode_json_request(body, _specs(int_tensor="int32", str_tensor="string"))
    # the reverse mix: the first row a list, a later one an object
    with pytest.raises(InvalidInput, match="Expecting value/list but got object"):
        decode_json_request(
            {"instances": [["baz", "bar"], {"str_tensor": ["baz", "bat"]}]},
            _specs(str_tensor="string"),
        )


def test_json_signature_name_must_be_a_string() -> None:
    with pytest.raises(InvalidInput, match="must be a string value"):
        signature_name_of({"signature_name": 5, "instances": [[1, 2]]})


def _encoded(tensors: dict[str, np.ndarray], row: bool = True) -> Any:
    return json.loads(encode_json_response(tensors, row_format=row))


def test_json_from_tensors() -> None:
    """FromJsonSingleScalarTensor, ...BytesTensor, ...FloatTensorSixDigitPrecision,
    ...NonFinite, ...SingleZeroBatchTensor: the bodies TF Serving writes for these tensors."""
    ints = {"int_tensor": np.array([1, 2, 3, 4, 5], np.int32)}
    assert _encoded(ints) == {"predictions": [1, 2, 3, 4, 5]}
    assert _encoded(ints, row=False) == {"outputs": [1, 2, 3, 4, 5]}
    strings = np.array([[b"hello", b"world"], [b"tf", b"serving"]], dtype=object)
    assert _encoded({"str_tensor_bytes": strings}) == {
        "predictions": [
            [{"b64": "aGVsbG8="}, {"b64": "d29ybGQ="}],
            [{"b64": "dGY="}, {"b64": "c2VydmluZw=="}],
        ]
    }
    floats = np.array([[9000000, 999999, 0.5], [0.0003, 0.00003, 555557.5]], np.float32)
    # TF Serving's test compares the text: 9e+06, 999999.0, 0.5, 0.0003, 3e-05, 555557.5. The
    # same numbers, each written with the fewest digits that read back as the float32 (by
    # orjson, compact, which spells 3e-05 as 0.00003: the same digit).
    text = encode_json_response({"float_tensor": floats}, row_format=True).decode()
    assert text == '{"predictions":[[9000000.0,999999.0,0.5],[0.0003,0.00003,555557.5]]}'
    non_finite = np.array([[np.nan, np.inf], [3, -np.inf]], np.float32)
    text = encode_json_response({"float_tensor": non_finite}, row_format=True).decode()
    assert text == '{"predictions": [[NaN, Infinity], [3.0, -Infinity]]}'
    assert _encoded({"int_tensor": np.zeros((0, 2), np.int32)}) == {"predictions": []}


def test_json_results_key() -> None:
    """JsonFromClassificationResult / JsonFromRegressionResult: the key is "results" (TF
    Serving's api_rest.md says "result" in one place; its code and tests say "results")."""
    # covered over the wire by testClassifyREST and testRegressREST above; this pins the key
    assert {next(iter(c.expect)) for c in REST_CASES if c.path.endswith(
        (":classify", ":regress")) and c.status == 200} == {"results"}  # fmt: skip


# -- the manual's table (docs/guides/conformance.md) ----------------------------------------


def counts() -> dict[str, tuple[int, int, int]]:
    """Cases per source file: (held, of them with a known deviation, not expressible)."""
    held = Counter(c.source for c in [*REST_CASES, *GRPC_CASES])
    held[JSON] += len(JSON_ERRORS) + len(JSON_NAMED_ERRORS) + 3
    held[STORAGE] += 5  # tests/test_version_dirs.py
    deviating = Counter(c.source for c in [*REST_CASES, *GRPC_CASES] if c.deviation is not None)
    missing = Counter(s for source, _, _ in NOT_EXPRESSIBLE for s in source.split(", "))
    return {s: (held[s], deviating[s], missing[s]) for s in sorted({*held, *missing})}


def test_readme_conformance_table_matches_the_cases() -> None:
    readme = (Path(__file__).parent.parent / "docs" / "guides" / "conformance.md").read_text()
    for source, (held, deviating, missing) in counts().items():
        assert f"| `{source}` | {held} | {deviating} | {missing} |" in readme, source


# -- what the issues found, kept as tests -------------------------------------------------------


def test_examples_input_of_unknown_rank_takes_a_batch(tmp_path: Path) -> None:
    """Estimator-style exports feed serialized tf.Examples through an input of unknown rank
    (and TF 1.0 wrote it with no shape at all): Regress with two examples is a batch of two,
    never "expects string of shape [], got string of shape [2]"."""
    from tests.tf1_models import write_tf1_half_plus_three

    write_tf1_half_plus_three(tmp_path / "m" / "00000123")
    registry = ModelRegistry()
    registry.load_graph("three", tmp_path / "m")
    regress = "tensorflow/serving/regress"
    assert registry.get("three").runner.signatures[regress].inputs["inputs"].shape is None
    with ModelServer(registry, ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0)) as s:
        body = {"signature_name": regress, "examples": [{"x": 1.0}, {"x": 3.0}]}
        path = "/v1/models/three:regress"
        status, _, answer = call_rest(f"127.0.0.1:{s.rest_port}", "POST", path, body)
        assert (status, answer) == (200, {"results": [3.5, 4.5]})
        examples = [client.example(x=1.0), client.example(x=3.0)]
        request = client.regress_request("three", examples, signature_name=regress)
        with client.GrpcClient.connect(f"127.0.0.1:{s.grpc_port}") as grpc_client:
            response = grpc_client.regress(request)
        assert [r.value for r in response.result.regressions] == [3.5, 4.5]


def test_method_name_check_is_tf_servings_flag(tmp_path: Path) -> None:
    """Off by default (TF2 exports name every signature predict, and classify works on them);
    with --enable_signature_method_name_check, Classify refuses a predict-method signature with
    TF Serving's message, and still classifies with a classify-method one."""
    write_tf2_half_plus_two(tmp_path / "tf2" / "00000123")
    write_tf1_half_plus_two(tmp_path / "tf1" / "00000123")
    registry = ModelRegistry()
    registry.load_graph("tf2", tmp_path / "tf2")
    registry.load_graph("tf1", tmp_path / "tf1")
    options = ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=None, method_name_check=True)
    with (
        ModelServer(registry, options) as server,
        client.GrpcClient.connect(f"127.0.0.1:{server.grpc_port}") as stub,
    ):
        examples = [client.example(x=2.0)]
        request = client.classify_request("tf2", examples, signature_name="classify_x_to_y")
        with pytest.raises(grpc.RpcError) as info:
            stub.classify(request)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert info.value.details() == (
            "Expected classification signature method_name to be "
            "tensorflow/serving/classify. Was: tensorflow/serving/predict"
        )
        request.model_spec.name = "tf1"
        answer = stub.classify(request)
        assert answer.result.classifications[0].classes[0].score == 3.0
