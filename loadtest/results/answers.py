"""Answers, read alike whatever sent them, and compared within the export's tolerance: for
`loadtest replay` (against the log and across arms) and `loadtest rollout --traffic` (the new
version against the old, request by request).

Every answer becomes arrays by name (`Answer`): a PredictResponse's outputs (gRPC), a REST
predict body's `predictions` or `outputs` (one output unnamed: REST does not name a lone
output), a classification's `scores` and `classes`, a regression's `value`, a MultiInference's
results as `TASK/scores` and so on. Two answers to one request are compared output by output with
the exporter's parity rule (graphserve.core.parity): floats element by element within
`atol * max(scale, 1) + rtol * |reference|`, `scale` the reference's largest finite |value|, with
the tolerance of the dtype (the export's own when its manifest gives one); everything else
exactly. For an output of classes (a float matrix of two or more columns, a classification's
scores) the rows whose top class changed are counted too: a difference within tolerance that
turns a decision says more than one that does not.

REST answers carry no dtype: their numbers are read as float64 and judged with the tolerance of
the other answer's dtype, float32 when both are REST (TF Serving writes REST numbers from the
tensors it has, float32 for nearly every model).

"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphserve.core.parity import DEFAULT_TOLERANCES, closeness
from graphserve.core.results import JsonResult

__all__ = [
    "DEFAULT_TOLERANCES",
    "Agreement",
    "Answer",
    "Disagreement",
    "OutputAgreement",
    "OutputDiff",
    "agreement",
    "answers_value",
    "compare",
    "grpc_answer",
    "judge",
    "manifest_tolerances",
    "rest_answer",
]

Answer = dict[str, np.ndarray]

_UNNAMED = ""  # a REST answer's lone output
_RESPONSE_MESSAGES = {
    "predict": ("predict_pb2", "PredictResponse"),
    "classify": ("classification_pb2", "ClassificationResponse"),
    "regress": ("regression_pb2", "RegressionResponse"),
    "multi_inference": ("inference_pb2", "MultiInferenceResponse"),
}


def grpc_answer(kind: str, response: Any) -> Answer:
    """The arrays of a gRPC response of `kind` (predict, classify, regress, multi_inference),
    its message or its bytes."""
    import importlib

    from graphserve.core.codec import array_from_proto

    if isinstance(response, bytes):
        module, message = _RESPONSE_MESSAGES[kind]
        apis = importlib.import_module(f"tensorflow_serving.apis.{module}")
        response = getattr(apis, message).FromString(response)
    if kind == "predict":
        return {name: array_from_proto(t, name) for name, t in response.outputs.items()}
    if kind == "classify":
        return _classifications(response.result)
    if kind == "regress":
        return {"value": np.asarray([r.value for r in response.result.regressions], np.float32)}
    answer: Answer = {}
    for index, result in enumerate(response.results):
        task = result.model_spec.signature_name or str(index)
        which = result.WhichOneof("result")
        if which == "classification_result":
            part = _classifications(result.classification_result)
        else:
            regressions = result.regression_result.regressions
            part = {"value": np.asarray([r.value for r in regressions], np.float32)}
        answer.update({f"{task}/{name}": values for name, values in part.items()})
    return answer


def _classifications(result: Any) -> Answer:
    rows = result.classifications
    width = max((len(row.classes) for row in rows), default=0)
    scores = np.full((len(rows), width), np.nan, np.float32)
    classes = np.full((len(rows), width), b"", dtype=object)
    for i, row in enumerate(rows):
        for j, item in enumerate(row.classes):
            scores[i, j], classes[i, j] = item.score, item.label.encode()
    return {"scores": scores, "classes": classes}


def rest_answer(kind: str, body: bytes) -> Answer:
    """The arrays of a REST answer of `kind` (predict, classify, regress). ValueError when the
    body is not such an answer."""
    document = json.loads(body)
    if not isinstance(document, dict):
        raise ValueError("a REST answer is a JSON object")
    if kind == "predict":
        if "predictions" in document:
            rows = document["predictions"]
            if rows and all(isinstance(row, dict) for row in rows):
                names = rows[0].keys()
                return {n: _array([row[n] for row in rows]) for n in names}
            return {_UNNAMED: _array(rows)}
        if "outputs" in document:
            outputs = document["outputs"]
            if isinstance(outputs, dict):
                return {name: _array(values) for name, values in outputs.items()}
            return {_UNNAMED: _array(outputs)}
        raise ValueError("a REST predict answer has 'predictions' or 'outputs'")
    # "results", as TF Serving's json_tensor.cc writes it (its api_rest.md once says "result")
    results = document.get("results", document.get("result"))
    if not isinstance(results, list):
        raise ValueError(f"a REST {kind} answer has a 'results' list")
    if kind == "regress":
        return {"value": np.asarray(results, np.float64)}
    width = max((len(row) for row in results), default=0)
    scores = np.full((len(results), width), np.nan, np.float64)
    classes = np.full((len(results), width), b"", dtype=object)
    for i, row in enumerate(results):
        for j, (label, score) in enumerate(row):
            scores[i, j], classes[i, j] = score, str(label).encode()
    return {"scores": scores, "classes": classes}


def _array(values: Any) -> np.ndarray:
    """A JSON tensor as numpy: numbers as float64 or int64, strings (and {"b64": ...}) as
    bytes."""
    flat = _leaves(values)
    if flat and all(isinstance(v, bool | int) and not isinstance(v, float) for v in flat):
        return np.asarray(values, np.int64)
    if flat and any(isinstance(v, str | dict) for v in flat):
        shape = np.shape(_shape_probe(values))
        out = np.empty(len(flat), dtype=object)
        out[:] = [_text(v) for v in flat]
        return out.reshape(shape)
    return np.asarray(values, np.float64)


def _leaves(values: Any) -> list[Any]:
    if isinstance(values, list):
        return [leaf for v in values for leaf in _leaves(v)]
    return [values]


def _shape_probe(values: Any) -> Any:
    if isinstance(values, list):
        return [_shape_probe(v) for v in values]
    return 0


def _text(value: Any) -> bytes:
    if isinstance(value, dict) and "b64" in value:
        return base64.b64decode(value["b64"])
    return str(value).encode()


@dataclass
class OutputDiff(JsonResult):
    """One output of one answer against the reference answer to the same request."""

    output: str
    dtype: str  # the reference's ("float32"; "string"; "unknown" for a missing output)
    max_abs_error: float
    max_rel_error: float
    allowed_abs_error: float | None  # atol * max(scale, 1); None: compared exactly
    rtol: float | None
    passed: bool
    rows: int
    top_class_changed: int | None  # rows whose largest score moved to another class
    why: str = ""  # what did not line up (an output missing, another shape)

    @property
    def excess(self) -> float:
        """How far past its allowance the output is: max |diff| / allowed (inf for an exact
        mismatch, 0 for a pass of an exact dtype)."""
        if not self.passed and self.allowed_abs_error is None:
            return float("inf")
        if self.allowed_abs_error is None:
            return 0.0
        return self.max_abs_error / max(self.allowed_abs_error, 1e-30)


def compare(
    got: Answer,
    reference: Answer,
    tolerances: Mapping[str, tuple[float, float]] = DEFAULT_TOLERANCES,
) -> list[OutputDiff]:
    """Every output of `reference` against the same output of `got` (a lone unnamed REST
    output stands for the other side's only one)."""
    got, reference = _aligned(got, reference)
    diffs = []
    for name, expected in reference.items():
        actual = got.get(name)
        if actual is None:
            diffs.append(_unmatched(name, expected, f"no output {name!r} in the answer"))
        elif actual.shape != expected.shape:
            why = f"shape {list(actual.shape)}, the reference's {list(expected.shape)}"
            diffs.append(_unmatched(name, expected, why))
        else:
            diffs.append(_compare(name, actual, expected, _dtype(expected, actual), tolerances))
    for name in sorted(set(got) - set(reference)):
        diffs.append(_unmatched(name, got[name], f"output {name!r} is not in the reference"))
    return diffs


def _aligned(got: Answer, reference: Answer) -> tuple[Answer, Answer]:
    if _UNNAMED in got and len(got) == 1 and len(reference) == 1 and _UNNAMED not in reference:
        return {next(iter(reference)): got[_UNNAMED]}, reference
    if _UNNAMED in reference and len(reference) == 1 and len(got) == 1 and _UNNAMED not in got:
        return got, {next(iter(got)): reference[_UNNAMED]}
    return got, reference


def _dtype(expected: np.ndarray, actual: np.ndarray) -> str:
    """The dtype the tolerance is read for: the reference's, or the other side's when the
    reference came over REST (float64 from JSON), float32 when both did."""
    if expected.dtype == object or actual.dtype == object:
        return "string"
    if expected.dtype.kind not in "fc":
        return str(expected.dtype)
    known = [a.dtype for a in (expected, actual) if a.dtype != np.float64]
    if known:
        return str(known[0]) if known[0].kind == "f" else "float32"
    return "float32"


def _unmatched(name: str, array: np.ndarray, why: str) -> OutputDiff:
    dtype = "string" if array.dtype == object else str(array.dtype)
    rows = int(array.shape[0]) if array.ndim else 1
    return OutputDiff(name, dtype, float("inf"), float("inf"), None, None, False, rows, None, why)


def _compare(
    name: str,
    actual: np.ndarray,
    expected: np.ndarray,
    dtype: str,
    tolerances: Mapping[str, tuple[float, float]],
) -> OutputDiff:
    rows = int(expected.shape[0]) if expected.ndim else 1
    c = closeness(actual, expected, dtype, tolerances)
    judged = c.atol is not None  # floats, within the tolerance; anything else exactly
    return OutputDiff(
        name, dtype, c.max_abs_error, c.max_abs_error if not judged else c.max_rel_error,
        c.allowed_abs_error, c.rtol, c.passed, rows,
        _top_changed(actual, expected) if judged else None,
    )  # fmt: skip


def _top_changed(got: np.ndarray, ref: np.ndarray) -> int | None:
    """Rows whose largest score is in another column, for a matrix of classes' scores."""
    if ref.ndim != 2 or ref.shape[1] < 2 or ref.dtype.kind == "c":
        return None
    top_got = np.argmax(np.nan_to_num(got, nan=-np.inf), axis=1)
    top_ref = np.argmax(np.nan_to_num(ref, nan=-np.inf), axis=1)
    return int(np.count_nonzero(top_got != top_ref))


@dataclass
class OutputAgreement(JsonResult):
    """One output over every request compared."""

    output: str
    dtype: str
    compared: int
    mismatched: int
    max_abs_error: float
    max_rel_error: float
    rows: int
    top_class_changed: int | None  # rows (None: not an output of classes)


@dataclass
class Agreement(JsonResult):
    """Answers against a reference's, request by request: the log's ("logged"), another
    arm's, or the old version's."""

    reference: str
    compared: int  # requests both answered
    mismatched: int  # of those, with an output past its tolerance (or missing, or reshaped)
    outputs: list[OutputAgreement] = field(default_factory=list)

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> Agreement:
        """The inverse of `to_json` (a report's agreements, read back)."""
        outputs = [OutputAgreement(**o) for o in document.get("outputs", ())]
        return cls(document["reference"], document["compared"], document["mismatched"], outputs)

    @property
    def top_class_changed_share(self) -> float | None:
        counted = [o for o in self.outputs if o.top_class_changed is not None]
        rows = sum(o.rows for o in counted)
        return sum(o.top_class_changed or 0 for o in counted) / rows if rows else None


def agreement(
    reference: str,
    pairs: Iterable[tuple[Answer | None, Answer | None]],
    tolerances: Mapping[str, tuple[float, float]] = DEFAULT_TOLERANCES,
) -> tuple[Agreement, list[tuple[int, OutputDiff]]]:
    """Every (answer, reference answer) pair both sides have, compared; the agreement, and the
    worst output of each pair that disagrees, by the pair's place in `pairs`."""
    outputs: dict[str, OutputAgreement] = {}
    compared = mismatched = 0
    worst: list[tuple[int, OutputDiff]] = []
    for place, (got, expected) in enumerate(pairs):
        if got is None or expected is None:
            continue
        compared += 1
        diffs = compare(got, expected, tolerances)
        for d in diffs:
            _fold(outputs, d)
        failed = [d for d in diffs if not d.passed]
        if failed:
            mismatched += 1
            worst.append((place, max(failed, key=lambda d: d.excess)))
    return Agreement(reference, compared, mismatched, list(outputs.values())), worst


def _fold(outputs: dict[str, OutputAgreement], d: OutputDiff) -> None:
    o = outputs.get(d.output)
    if o is None:
        o = outputs[d.output] = OutputAgreement(d.output, d.dtype, 0, 0, 0.0, 0.0, 0, None)
    o.compared += 1
    o.mismatched += 0 if d.passed else 1
    o.max_abs_error = max(o.max_abs_error, d.max_abs_error)
    o.max_rel_error = max(o.max_rel_error, d.max_rel_error)
    o.rows += d.rows
    if d.top_class_changed is not None:
        o.top_class_changed = (o.top_class_changed or 0) + d.top_class_changed


@dataclass
class Disagreement(JsonResult):
    """A request whose answers disagree: the worst output, and how to send it again."""

    record: int
    arm: str
    reference: str
    shape: str
    output: str
    max_abs_error: float
    allowed_abs_error: float | None
    why: str
    files: list[str] = field(default_factory=list)
    command: str = ""
    curl: str | None = None


def manifest_tolerances(
    manifest: Mapping[str, Any] | None,
) -> tuple[dict[str, tuple[float, float]], str]:
    """The tolerances an export was checked with (its manifest's `options.tolerances`, over the
    defaults), and whose they are: "the export's manifest" or "the defaults"."""
    given = ((manifest or {}).get("options") or {}).get("tolerances") or {}
    tolerances = {**DEFAULT_TOLERANCES}
    tolerances.update({dtype: (float(v[0]), float(v[1])) for dtype, v in given.items()})
    return tolerances, "the export's manifest" if given else "the defaults"


def judge(
    baseline: str,
    answers: Mapping[str, Sequence[Answer | None]],
    logged: Sequence[Answer | None],
    labels: Sequence[tuple[int, str]],
    tolerances: Mapping[str, tuple[float, float]] = DEFAULT_TOLERANCES,
    worst: int = 5,
) -> tuple[dict[str, list[Agreement]], list[Disagreement]]:
    """Each arm's answers (by request, None: none) against the log's ("logged") and, but for
    the baseline's own, the baseline arm's; each arm's agreements (those that compared
    something) and the `worst` requests that disagree most, one per record. `labels` name each
    request: its record number and shape."""
    found: dict[str, list[Agreement]] = {}
    bad: list[tuple[float, Disagreement]] = []
    for arm, mine in answers.items():
        references: list[tuple[str, Sequence[Answer | None]]] = [("logged", logged)]
        if arm != baseline and baseline in answers:
            references.append((baseline, answers[baseline]))
        found[arm] = []
        for reference, theirs in references:
            agreed, places = agreement(reference, zip(mine, theirs, strict=True), tolerances)
            if agreed.compared:
                found[arm].append(agreed)
            for place, d in places:
                record, shape = labels[place]
                bad.append((d.excess, Disagreement(
                    record=record, arm=arm, reference=reference, shape=shape, output=d.output,
                    max_abs_error=d.max_abs_error, allowed_abs_error=d.allowed_abs_error,
                    why=d.why,
                )))  # fmt: skip
    bad.sort(key=lambda pair: -pair[0])
    chosen: list[Disagreement] = []
    for _, disagreement in bad:
        if len(chosen) >= worst:
            break
        if all(d.record != disagreement.record for d in chosen):
            chosen.append(disagreement)
    return found, chosen


def answers_value(metric: str, agreements: Iterable[Agreement]) -> float | None:
    """An answers gate's value over `agreements`; None when nothing was compared (a gate that
    cannot be judged is missed, not passed)."""
    agreements = list(agreements)
    if not sum(a.compared for a in agreements):
        return None
    if metric == "answers.mismatch":
        return float(sum(a.mismatched for a in agreements))
    shares = [a.top_class_changed_share for a in agreements]
    known = [share for share in shares if share is not None]
    return max(known) if known else None
