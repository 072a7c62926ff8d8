"""The model zoo end to end (issue 14 C): real kinds of models, each exported (or taken as its
own tool wrote it), served by the graph server and the eager server, called over gRPC and REST,
compared with the model run in this process, and loaded by a short locust comparison whose report
names it.

    mobilenet     Keras Applications MobileNetV2, weights=None        graphserve export
    text_lookup   StringLookup over string tokens                     graphserve export
    dict_io       dict of float32 + int64 inputs, dict outputs, BN    graphserve export
    keras_export  a small CNN written by Keras' own model.export()    taken as is
    estimator     a TF1 Estimator-style export (tf.Example parsing,   taken as is
                  Classify and Regress)

The TF1 export has no Python model to run eagerly (the eager server refuses it, clearly): its
"eager" side is `tf.saved_model.load` in this process, and numpy computes its reference.

Timings (export seconds, the served p50 of each arm over up to 50 gRPC calls) are measured and
printed as a table when the module ends, never asserted on: performance goals do not live in
tests.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

from graphserve.core import client
from graphserve.core.client import GrpcClient, RestClient
from graphserve.loadtest.generator.payloads import rest_body, save_payload
from tests import zoo_models

MODELS = ["mobilenet", "text_lookup", "dict_io", "keras_export", "estimator"]
ARMS = ("graph", "eager")
# The served p50: 50 timed calls per arm, or as many as 3 s allow but at least 10 (eager MobileNet
# takes a quarter of a second per call), after 3 not timed.
TIMED_CALLS, MIN_TIMED_CALLS, TIME_BOX_S, WARM_CALLS = 50, 10, 3.0, 3

# float32 outputs, served against in-process: absolute, and tighter than the exporter's float32
# defaults (1e-4 of the output's scale): these models' outputs are small.
ATOL, RTOL = 1e-5, 1e-4


@dataclass
class ZooModel:
    name: str
    how: str  # who wrote the version directory
    version_dir: Path
    export_s: float  # ExportResult.seconds, or the time the model's own tool took to write it
    parity_error: float  # ExportResult.parity.max_abs_error, or reloaded vs in-process for as-is
    signature: str  # the Predict signature the tests call
    inputs: dict[str, np.ndarray]  # one request batch
    expected: dict[str, np.ndarray]  # the model run in this process on `inputs`
    eager_served: bool  # the eager server serves it (no for the TF1 export)
    # Outputs another in-process path answers, where the eager server cannot: the TF1 export
    # loaded with tf.saved_model.load.
    in_process: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]] | None = None


@dataclass
class Zoo:
    base: Path
    models: dict[str, ZooModel]
    addresses: dict[str, dict[str, str]]  # arm -> {"grpc": ..., "rest": ...}
    table: dict[str, dict[str, float]] = field(default_factory=dict)  # model -> measurements


# ---------------------------------------------------------------------------------------------
# Building the zoo: every version written, loaded by both registries, then both servers started
# (as a server starts: models first), once for the module.


def _export(name: str, base: Path) -> tuple[Path, float, float]:
    from graphserve.exporter import ExportSpec, export_model

    result = export_model(ExportSpec(source=f"tests.zoo_models:{name}", name=name, base_path=base))
    return result.path, result.seconds, result.parity.max_abs_error


def _as_dict(outputs: Any, name: str) -> dict[str, np.ndarray]:
    if isinstance(outputs, dict):
        return {k: np.asarray(v) for k, v in outputs.items()}
    return {name: np.asarray(outputs)}


def _mobilenet(base: Path) -> ZooModel:
    path, seconds, parity = _export("mobilenet", base)
    images = np.random.default_rng(1).standard_normal((3, 64, 64, 3)).astype(np.float32)
    model = zoo_models.mobilenet()
    expected = _as_dict(model([images], training=False), "predictions")
    return ZooModel(
        "mobilenet", "graphserve export", path, seconds, parity, "serving_default",
        {"images": images}, expected, eager_served=True,
    )  # fmt: skip


def _text_lookup(base: Path) -> ZooModel:
    path, seconds, parity = _export("text_lookup", base)
    rows = [
        ["the", "graph", "is", "the", "model", ""],
        ["eager", "serving", "is", "slow", "", ""],
        ["unknown", "words", "map", "to", "oov", "ids"],
        ["fast", "fast", "fast", "graph", "Graph", "GRAPH"],  # lookup is case-sensitive
    ]
    tokens = np.array([[w.encode() for w in row] for row in rows], dtype=object)
    expected = _as_dict(zoo_models.text_lookup()(tf.constant(tokens), training=False), "")
    return ZooModel(
        "text_lookup", "graphserve export", path, seconds, parity, "serving_default",
        {"tokens": tokens}, {"probabilities": expected[""]}, eager_served=True,
    )  # fmt: skip


def _dict_io(base: Path) -> ZooModel:
    path, seconds, parity = _export("dict_io", base)
    inputs: dict[str, np.ndarray] = {
        "features": np.random.default_rng(2).standard_normal((5, 6)).astype(np.float32),
        "category": np.array([[3], [7], [0], [19], [250]], dtype=np.int64),  # 0, 250: unknown
    }
    expected = _as_dict(zoo_models.dict_io()(inputs, training=False), "")
    return ZooModel(
        "dict_io", "graphserve export", path, seconds, parity, "serving_default", inputs,
        expected, eager_served=True,
    )  # fmt: skip


def _keras_export(base: Path) -> ZooModel:
    path = base / "keras_export" / "1"
    started = time.perf_counter()
    zoo_models.write_keras_export(path)
    seconds = time.perf_counter() - started
    pixels = np.random.default_rng(3).standard_normal((3, 16, 16, 1)).astype(np.float32)
    expected = _as_dict(zoo_models.keras_cnn()(pixels, training=False), "output_0")
    loaded = tf.saved_model.load(str(path))  # held: its functions need its variables alive
    reloaded = loaded.serve(pixels).numpy()
    return ZooModel(
        "keras_export", "Keras model.export()", path, seconds,
        float(np.max(np.abs(reloaded - expected["output_0"]))), "serving_default",
        {"pixels": pixels}, expected, eager_served=True,
    )  # fmt: skip


ESTIMATOR_X = np.random.default_rng(4).standard_normal((4, 3)).astype(np.float32)
ESTIMATOR_BUCKETS = [1, None, 3, 2]  # None: no `bucket` feature, parsed as its default 0


def _estimator_examples() -> np.ndarray:
    pairs = zip(ESTIMATOR_X, ESTIMATOR_BUCKETS, strict=True)
    return np.array([zoo_models.estimator_example(x, b) for x, b in pairs], dtype=object)


def _estimator_expected() -> dict[str, np.ndarray]:
    buckets = np.array([b or 0 for b in ESTIMATOR_BUCKETS], dtype=np.int64)
    expected = zoo_models.estimator_reference(ESTIMATOR_X, buckets)
    class_ids = (expected["logits"] > 0).astype(np.int64)
    return {**expected, "class_ids": class_ids, "classes": class_ids.astype(str).astype(bytes)}


def _estimator(base: Path) -> ZooModel:
    path = base / "estimator" / "1"
    started = time.perf_counter()
    zoo_models.write_estimator_export(path)
    seconds = time.perf_counter() - started
    loaded = tf.saved_model.load(str(path))

    def in_process(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        predict = loaded.signatures["predict"]  # `loaded` held here, with the variables
        return {k: v.numpy() for k, v in predict(examples=tf.constant(inputs["examples"])).items()}

    inputs = {"examples": _estimator_examples()}
    expected = _estimator_expected()
    reloaded = in_process(inputs)
    parity = max(float(np.max(np.abs(reloaded[k] - expected[k]))) for k in ("logits", "logistic"))
    return ZooModel(
        "estimator", "TF1 SavedModelBuilder", path, seconds, parity, "predict", inputs, expected,
        eager_served=False, in_process=in_process,
    )  # fmt: skip


BUILDERS: dict[str, Callable[[Path], ZooModel]] = {
    "mobilenet": _mobilenet,
    "text_lookup": _text_lookup,
    "dict_io": _dict_io,
    "keras_export": _keras_export,
    "estimator": _estimator,
}


@pytest.fixture(scope="module")
def zoo(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Zoo]:
    from graphserve.serving import ModelRegistry, ModelServer, ServerOptions

    base = tmp_path_factory.mktemp("zoo")
    registries = {arm: ModelRegistry() for arm in ARMS}
    with pytest.MonkeyPatch.context() as patch:
        # Nothing in the zoo may download weights or data: Keras' one download path fails here.
        patch.setattr("keras.src.utils.file_utils.get_file", _no_downloads)
        models = {name: BUILDERS[name](base) for name in MODELS}
        for model in models.values():
            registries["graph"].load_graph(model.name, model.version_dir.parent)
        for name in ("mobilenet", "text_lookup", "dict_io"):
            registries["eager"].load_eager(name, f"tests.zoo_models:{name}")
        # Keras' own export names its one output output_0: the eager server is told so too.
        registries["eager"].load_eager(
            "keras_export", "tests.zoo_models:keras_cnn", output_names=["output_0"]
        )
    ephemeral = ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0)
    with ExitStack() as stack:
        servers = {
            arm: stack.enter_context(ModelServer(registries[arm], ephemeral)) for arm in ARMS
        }
        zoo = Zoo(
            base,
            models,
            {
                arm: {"grpc": f"127.0.0.1:{s.grpc_port}", "rest": f"127.0.0.1:{s.rest_port}"}
                for arm, s in servers.items()
            },
        )
        yield zoo
    _print_table(zoo, request.config)


def _no_downloads(*args: Any, **kwargs: Any) -> None:
    raise AssertionError(f"the zoo downloaded something: get_file{args}")


def _print_table(zoo: Zoo, config: pytest.Config) -> None:
    """The zoo table (docs/guides/export.md, "Model zoo"), on the terminal even when output is
    captured."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None:
        return
    with capture.global_and_fixture_disabled():
        _write_table(zoo, reporter.write_line)


def _write_table(zoo: Zoo, write_line: Callable[[str], None]) -> None:
    write_line("")
    write_line(
        "| model | written by | export s | parity max abs error | graph p50 ms (calls) "
        "| eager p50 ms (calls) | graph/eager |"
    )
    write_line("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for name, model in zoo.models.items():
        row = zoo.table.get(name, {})
        graph, eager = row.get("graph"), row.get("eager")
        ratio = f"{graph / eager:.2f}×" if graph and eager else "—"
        write_line(
            f"| {name} | {model.how} | {model.export_s:.2f} | {model.parity_error:.2g} "
            f"| {_p50(row, 'graph')} | {_p50(row, 'eager')} | {ratio} |"
        )


def _p50(row: dict[str, float], arm: str) -> str:
    if arm not in row:
        return "—"
    return f"{row[arm]:.2f} ({row[f'{arm}_calls']:.0f})"


# ---------------------------------------------------------------------------------------------
# Calling the servers: the official gRPC stubs, and REST in both of TF Serving's formats


def _grpc(address: str) -> GrpcClient:
    return GrpcClient.connect(address, timeout=60)


def _predict_request(model: ZooModel, inputs: dict[str, np.ndarray]) -> Any:
    return client.predict_request(model.name, inputs, signature_name=model.signature)


def _grpc_predict(address: str, model: ZooModel) -> dict[str, np.ndarray]:
    with _grpc(address) as grpc_client:
        response = grpc_client.predict(_predict_request(model, model.inputs))
    assert response.model_spec.name == model.name
    return client.predict_outputs(response)


def _signature_io(address: str, model: ZooModel) -> tuple[dict[str, int], dict[str, int]]:
    """The tested signature's inputs and outputs (name -> dtype enum) from GetModelMetadata."""
    with _grpc(address) as grpc_client:
        response = grpc_client.metadata(client.metadata_request(model.name))
    signature = client.signature_defs(response).signature_def[model.signature]
    return (
        {k: v.dtype for k, v in signature.inputs.items()},
        {k: v.dtype for k, v in signature.outputs.items()},
    )


def _post(address: str, path: str, body: bytes) -> Any:
    with RestClient(address, timeout=60) as rest:
        reply = rest.post(path, body)
    assert reply.status == 200, reply.text
    return reply.json()


def _rest_predict(address: str, model: ZooModel, columnar: bool) -> dict[str, np.ndarray]:
    """Predict over REST; outputs by name (TF Serving leaves the name out for one output)."""
    body = rest_body(model.inputs, model.signature, columnar=columnar)
    answer = _post(address, f"/v1/models/{model.name}:predict", body)
    names = list(model.expected)
    if columnar:
        outputs = answer["outputs"]
        if not isinstance(outputs, dict):
            (only,) = names
            outputs = {only: outputs}
        return {k: np.asarray(v) for k, v in outputs.items()}
    rows = answer["predictions"]
    if not isinstance(rows[0], dict):
        (only,) = names
        rows = [{only: row} for row in rows]
    return {k: np.asarray([row[k] for row in rows]) for k in rows[0]}


def _assert_outputs(got: dict[str, np.ndarray], expected: dict[str, np.ndarray], what: str) -> None:
    assert sorted(got) == sorted(expected), what
    for key, want in expected.items():
        value = got[key]
        assert value.shape == want.shape, f"{what}: {key!r} shape {value.shape} != {want.shape}"
        if want.dtype.kind == "f":
            np.testing.assert_allclose(value, want, atol=ATOL, rtol=RTOL, err_msg=f"{what}: {key}")
        elif want.dtype.kind in "OS":  # strings: bytes over gRPC, text over REST
            texts = [v.decode() if isinstance(v, bytes) else v for v in value.reshape(-1)]
            assert texts == [w.decode() for w in want.reshape(-1)], f"{what}: {key}"
        else:
            np.testing.assert_array_equal(value, want, err_msg=f"{what}: {key}")


# ---------------------------------------------------------------------------------------------
# The tests


@pytest.mark.parametrize("name", MODELS)
def test_served_answers_equal_the_model_in_process(zoo: Zoo, name: str) -> None:
    """Graph and eager server, gRPC and REST (row and columnar): each answers what the model
    answers in this process, within float32 tolerances."""
    model = zoo.models[name]
    arms = ARMS if model.eager_served else ("graph",)
    # Both describe the signature alike: the same input and output names and dtypes.
    described = {arm: _signature_io(zoo.addresses[arm]["grpc"], model) for arm in arms}
    assert described["graph"][1].keys() == model.expected.keys()
    assert all(io == described["graph"] for io in described.values()), described
    for arm in arms:
        where = zoo.addresses[arm]
        _assert_outputs(_grpc_predict(where["grpc"], model), model.expected, f"{arm} gRPC")
        for columnar in (False, True):
            got = _rest_predict(where["rest"], model, columnar)
            _assert_outputs(got, model.expected, f"{arm} REST columnar={columnar}")
    if model.in_process is not None:
        _assert_outputs(model.in_process(model.inputs), model.expected, "tf.saved_model.load")


def test_estimator_classify_and_regress_over_grpc_and_rest(zoo: Zoo) -> None:
    """The Estimator-style export's classify and regress signatures, as TF Serving serves them:
    labels ["0", "1"] with the probabilities as scores, and P(class 1) as the regression."""
    model = zoo.models["estimator"]
    expected = model.expected
    address = zoo.addresses["graph"]
    examples = [tf.train.Example.FromString(e) for e in model.inputs["examples"]]
    stub = _grpc(address["grpc"])
    for signature in ("serving_default", "classification"):
        classify = client.classify_request("estimator", examples, signature_name=signature)
        result = stub.classify(classify).result
        assert [[c.label for c in row.classes] for row in result.classifications] == [
            ["0", "1"]
        ] * len(examples)
        scores = [[c.score for c in row.classes] for row in result.classifications]
        np.testing.assert_allclose(scores, expected["probabilities"], atol=ATOL, rtol=RTOL)
    regress = client.regress_request("estimator", examples, signature_name="regression")
    regressions = [r.value for r in stub.regress(regress).result.regressions]
    np.testing.assert_allclose(regressions, expected["logistic"][:, 0], atol=ATOL, rtol=RTOL)

    rows: list[dict[str, Any]] = [
        {"x": x.tolist(), **({} if b is None else {"bucket": b})}
        for x, b in zip(ESTIMATOR_X, ESTIMATOR_BUCKETS, strict=True)
    ]
    path = "/v1/models/estimator"
    answer = _post(address["rest"], f"{path}:classify", json.dumps({"examples": rows}).encode())
    assert [[label for label, _ in row] for row in answer["results"]] == [["0", "1"]] * len(rows)
    np.testing.assert_allclose(
        [[score for _, score in row] for row in answer["results"]],
        expected["probabilities"],
        atol=ATOL,
        rtol=RTOL,
    )
    body = {"signature_name": "regression", "examples": rows}
    answer = _post(address["rest"], f"{path}:regress", json.dumps(body).encode())
    np.testing.assert_allclose(answer["results"], expected["logistic"][:, 0], atol=ATOL, rtol=RTOL)


def test_eager_server_refuses_the_tf1_export_with_a_clear_error(zoo: Zoo) -> None:
    """A TF1 export has no Python model: the eager server says why it cannot run it, with or
    without a declared input, rather than crashing on its first call."""
    from graphserve.core.signature import parse_input_spec
    from graphserve.serving import ModelRegistry
    from graphserve.serving.registry import ModelLoadError

    source = str(zoo.models["estimator"].version_dir)
    with pytest.raises(
        ModelLoadError,
        match=r"has no signature graphserve can run from Python: .*signature 'predict' .* has an "
        r"input of unknown rank",
    ):
        ModelRegistry().load_eager("estimator", source)
    with pytest.raises(ModelLoadError, match=r"'serving_default'.*cannot be called with inputs"):
        ModelRegistry().load_eager("estimator", source, [parse_input_spec("examples:string:-1")])


@pytest.mark.parametrize("name", MODELS)
def test_served_p50_graph_and_eager(zoo: Zoo, name: str) -> None:
    """gRPC Predict calls of one example on each arm (TIMED_CALLS, time-boxed): the p50 goes
    to the zoo table. Measured, printed, never asserted on."""
    model = zoo.models[name]
    single = {k: v[:1] for k, v in model.inputs.items()}
    request = _predict_request(model, single)
    for arm in ARMS if model.eager_served else ("graph",):
        stub = _grpc(zoo.addresses[arm]["grpc"])
        for _ in range(WARM_CALLS):
            response = stub.predict(request)
        assert sorted(response.outputs) == sorted(model.expected)
        latencies: list[float] = []
        deadline = time.perf_counter() + TIME_BOX_S
        while len(latencies) < TIMED_CALLS and (
            len(latencies) < MIN_TIMED_CALLS or time.perf_counter() < deadline
        ):
            started = time.perf_counter()
            stub.predict(request)
            latencies.append(time.perf_counter() - started)
        row = zoo.table.setdefault(name, {})
        row[arm] = float(np.median(latencies)) * 1000
        row[f"{arm}_calls"] = len(latencies)


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_comparison_report_names_the_model(zoo: Zoo, name: str, tmp_path: Path) -> None:
    """A short locust comparison of the arms (the graph server alone for the TF1 export),
    through loadtest's library API: its report is titled with the model and says which."""
    from graphserve.loadtest import Arm, CompareSpec, LoadSpec, compare, load_report

    model = zoo.models[name]
    payload = tmp_path / "payload.npz"
    save_payload(payload, {k: v[:1] for k, v in model.inputs.items()})
    arms = tuple(
        Arm(arm, zoo.addresses[arm]["grpc"]) for arm in (ARMS if model.eager_served else ("graph",))
    )
    short = LoadSpec(loads=(1,), warmup_s=0, window_s=0.5, min_windows=1, max_windows=1)
    spec = CompareSpec(
        arms, model_name=name, signature_name=model.signature, payload_file=payload, load=short
    )
    report = compare(spec, tmp_path / "out")
    # One arm is no comparison: its title names the arm alone, never "graph vs graph".
    arms_text = "graph vs eager" if model.eager_served else "graph"
    assert report.title == f"{name}: {arms_text}, gRPC, closed loop"
    assert report.settings.model_name == name
    saved = json.loads((tmp_path / "out" / "report.json").read_text())
    assert saved == report.to_json()
    assert load_report(tmp_path / "out" / "report.json") == report  # as the manual says
    assert (tmp_path / "out" / "report.md").read_text().startswith(f"# {name}: ")
    for arm in report.steps[0].arms.values():
        assert arm.requests > 0 and arm.failures == 0, arm


@pytest.mark.parametrize("name", MODELS)
def test_graphserve_conformance_holds_for_every_zoo_model(zoo: Zoo, name: str) -> None:
    """`graphserve conformance`'s model-independent cases, driven by the graph server's metadata
    of models others wrote (Keras Applications, Keras' own export, an Estimator-style TF1
    export), on inputs generated from the default signature; the Estimator's serialized
    tf.Examples refuse random strings, so it runs again on the test's own request (`--request`).
    (The eager server runs the same cases in tests/test_conformance.py.)"""
    from graphserve.conformance import ConformanceSpec, run_conformance
    from graphserve.core.codec import to_json_value

    model = zoo.models[name]
    where = zoo.addresses["graph"]
    generated = ConformanceSpec(where["grpc"], rest=where["rest"], model=name)
    own = {"inputs": {k: to_json_value(k, v) for k, v in model.inputs.items()}}
    given = replace(generated, signature=model.signature, request=own)
    for spec in (generated, given) if name == "estimator" else (generated,):
        report = run_conformance(spec)
        failed = [f"{r.case}: expected {r.expected}; got {r.got}" for r in report.failed]
        assert failed == [], f"{spec.signature}: {failed}"
        passed = {r.case for r in report.results if r.passed}
        refused = {r.reason for r in report.results if "refuses generated" in r.reason}
        if spec is generated and name == "estimator":
            # Generated strings are phrases, which parse as Examples with no features.
            (reason,) = refused
            assert "Feature: x (data type: float) is required but could not be found" in reason
            assert "--request FILE" in reason
        else:
            assert refused == set()
            what = "generated inputs, batch 2" if spec is generated else "the request's inputs"
            assert f"gRPC Predict ({what})" in passed
            assert f"REST POST /v1/models/{name}:predict (gzip body, equal to gRPC's answer)" in (
                passed
            )
