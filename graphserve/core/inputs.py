"""Inputs that fit the model, from one place.

The export's probe, its parity check and warm-up records, the eager server's load check,
`conformance` and the load test's default payload all call a model on inputs nobody typed. They
draw them here: the user's samples when given (`InputSource`), otherwise values generated per
input by `sample_inputs`, within the input's `ValueRange` (graphserve.core.signature) when one is
known:

* given by the user: `--input-range token_ids=0:30521`, or `range: [0, 30521]` in a signature file;
* told by the model (`graphserve.model.domains`): the rows of the embedding an input indexes,
  the depth of a one-hot, the [0, 255] pixels a `Rescaling(1/255)` at the input expects;
* told by the input's name: a `mask` takes 0 and 1, and so do segment and token-type ids;
* a string input the model decodes as images (`DecodeJpeg`, `DecodePng`, `DecodeImage`, ...)
  gets encoded images of that format (Pillow writes them): smooth colour fields with a little
  noise, which compress as photographs do, not as noise;
* a string input the model looks up in a table gets the table's words (phrases of them when the
  model splits its input), in turn from the first, so successive batches cover the vocabulary,
  and one value in `OUT_OF_VOCABULARY_EVERY` a word outside it, for the out-of-vocabulary path;
  an integer input looked up in one (an IntegerLookup) its keys the same way, the one outside
  past the largest;
* else integers are small and non-negative (token ids, indices, counts: what real models take),
  floats standard normal, strings words from a short vocabulary.

Pure numpy (and Pillow for images): the load test and the conformance run use it without
importing TensorFlow.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from graphserve.core.errors import ServingError, SignatureError
from graphserve.core.results import JsonResult, json_meta
from graphserve.core.signature import ImageFormat, TensorSpec, ValueRange, Vocabulary

if TYPE_CHECKING:
    from graphserve.core.contract import SignatureContract

__all__ = [
    "DEFAULT_INT_HIGH",
    "OUT_OF_VOCABULARY_EVERY",
    "VOCABULARY",
    "InputSource",
    "Samples",
    "default_range",
    "load_ranges",
    "load_samples",
    "parse_input_range",
    "range_text",
    "sample_inputs",
    "sample_shape",
]

# Unknown non-batch dimensions get this size in generated samples.
_UNKNOWN_DIM_SAMPLE = 8

# Integers with no range known are drawn from [0, DEFAULT_INT_HIGH]: token ids, class ids, indices
# and counts are non-negative, and a vocabulary or a table of 101 rows is small.
DEFAULT_INT_HIGH = 100

# One generated value in this many is a word outside the model's vocabulary (its OOV path).
OUT_OF_VOCABULARY_EVERY = 8

# Strings with no samples are phrases of these words: text models (TextVectorization, lookup
# tables over words) take them; an unknown word is what real text has too.
VOCABULARY = (
    "the", "a", "model", "graph", "serves", "fast", "slow", "tensor", "request", "answer",
    "batch", "of", "and", "to", "in", "is", "text", "token", "eager", "python",
)  # fmt: skip

_MASK = re.compile(r"mask", re.IGNORECASE)
_SEGMENT = re.compile(r"segment|type_ids|token_type", re.IGNORECASE)
_RANGE = re.compile(r"^\s*([^=\s]+)\s*=\s*([^:]+):([^:]+)\s*$")


def range_text(name: str, value: ValueRange) -> str:
    """`NAME=LOW:HIGH`, the `--input-range` form (what the manifest records)."""
    return f"{name}={value.text()}"


def parse_input_range(text: str) -> tuple[str, ValueRange]:
    """Parse `NAME=LOW:HIGH` (`--input-range token_ids=0:30521`); SignatureError if malformed."""
    match = _RANGE.match(text)
    if match is None:
        raise SignatureError(
            f"--input-range {text!r}: expected NAME=LOW:HIGH, e.g. token_ids=0:30521"
        )
    name, low, high = match.groups()
    try:
        bounds = float(low), float(high)
    except ValueError:
        raise SignatureError(
            f"--input-range {text!r}: {low.strip()!r} and {high.strip()!r} must be numbers"
        ) from None
    return name, ValueRange(*bounds, why="--input-range")


def default_range(spec: TensorSpec) -> ValueRange | None:
    """The range an input gets when neither the user nor the model tells one: by its name for
    masks and segment ids, else small non-negative integers; None for floats and strings."""
    if spec.dtype in ("string", "bool") or spec.np_dtype.kind == "f":
        return None
    if _MASK.search(spec.name):
        return ValueRange(0, 1, f"a mask, by its name {spec.name!r}")
    if _SEGMENT.search(spec.name):
        return ValueRange(0, 1, f"segment ids, by the name {spec.name!r}")
    high = min(DEFAULT_INT_HIGH, int(np.iinfo(spec.np_dtype).max))
    return ValueRange(0, high, "graphserve's default for integers")


def sample_shape(spec: TensorSpec, batch_size: int) -> tuple[int, ...]:
    """A concrete shape for `spec`: the first unknown dimension is the batch. An unknown rank
    gets a vector of `batch_size`, as tf.Example inputs (serialized examples) take one."""
    if spec.shape is None:
        return (batch_size,)
    dims = []
    for i, d in enumerate(spec.shape):
        if d is None:
            dims.append(batch_size if i == 0 else _UNKNOWN_DIM_SAMPLE)
        else:
            dims.append(d)
    return tuple(dims)


def sample_inputs(
    specs: Iterable[TensorSpec],
    batch_size: int = 4,
    seed: int = 0,
    ranges: Mapping[str, ValueRange] | None = None,
) -> dict[str, np.ndarray]:
    """Generated inputs that fit `specs`, reproducible from `seed`: each within its range in
    `ranges` (by input name), else within `default_range`; floats with no range are standard
    normal, strings phrases of `VOCABULARY`. A mask of 0s and 1s is a run of ones (at least
    one) followed by zeros, row by row, as padding masks are."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for spec in specs:
        shape = sample_shape(spec, batch_size)
        dt = spec.np_dtype
        span = (ranges or {}).get(spec.name) or default_range(spec)
        if spec.dtype == "string" and span is not None and span.image is not None:
            out[spec.name] = _images(rng, shape, span.image)
        elif spec.dtype == "string" and span is not None and span.vocabulary is not None:
            out[spec.name] = _vocabulary_words(rng, shape, span.vocabulary, seed)
        elif spec.dtype == "string":
            out[spec.name] = _phrases(rng, shape)
        elif spec.dtype == "bool":
            out[spec.name] = rng.integers(0, 2, size=shape).astype(np.bool_)
        elif dt.kind in "iu" and span is not None and span.vocabulary is not None:
            keys = _vocabulary_words(rng, shape, span.vocabulary, seed, dt)
            out[spec.name] = np.vectorize(int, otypes=[object])(keys).astype(dt)
        elif span is None:
            out[spec.name] = rng.standard_normal(size=shape).astype(dt)
        elif dt.kind in "iu":
            low, high = _int_bounds(span, dt)
            if (low, high) == (0, 1) and _MASK.search(spec.name) and len(shape) >= 2:
                out[spec.name] = _prefix_mask(rng, shape).astype(dt)
            else:
                out[spec.name] = rng.integers(low, high, size=shape, endpoint=True).astype(dt)
        else:
            out[spec.name] = rng.uniform(span.low, span.high, size=shape).astype(dt)
    return out


def _int_bounds(span: ValueRange, dtype: np.dtype) -> tuple[int, int]:
    info = np.iinfo(dtype)
    low = max(math.ceil(span.low), int(info.min))
    high = min(math.floor(span.high), int(info.max))
    if low > high:
        raise SignatureError(
            f"value range {span.text()} holds no {dtype.name} value: give integer bounds"
        )
    return low, high


def _phrases(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    count = int(np.prod(shape))
    lengths = rng.integers(1, 5, size=count)
    words = [" ".join(rng.choice(VOCABULARY, size=n)) for n in lengths]
    return np.array([w.encode() for w in words], dtype=object).reshape(shape)


def _vocabulary_words(
    rng: np.random.Generator,
    shape: tuple[int, ...],
    vocabulary: Vocabulary,
    seed: int,
    dtype: np.dtype | None = None,
) -> np.ndarray:
    """The vocabulary's words in turn, batch `seed` going on where batch `seed - 1` of the same
    size stopped (so a parity check's batches cover it), every OUT_OF_VOCABULARY_EVERY-th value
    a word it lacks; phrases of one to four of them when the model splits its input. An integer
    vocabulary's keys are given as their decimal bytes, the one it lacks past its largest key
    (of `dtype`)."""
    count = int(np.prod(shape))
    words = vocabulary.words or ("",)
    if vocabulary.integers:
        outside = [_integer_outside(words, dtype or np.dtype(np.int64))]
    else:
        outside = [w for w in VOCABULARY if w not in set(words)] or ["graphserve"]
    lengths = rng.integers(1, 5, size=count) if vocabulary.phrases else np.ones(count, int)
    turn = seed * int(lengths.sum())  # the words the earlier batches took
    values = []
    for i, n in enumerate(lengths):
        position = seed * count + i  # counted on across batches, as the words are
        if position % OUT_OF_VOCABULARY_EVERY == OUT_OF_VOCABULARY_EVERY - 1:
            values.append(" ".join([outside[position % len(outside)]] * int(n)).encode())
            continue
        if not vocabulary.phrases:  # one word each: the values so far, less the outside ones
            turn = position - position // OUT_OF_VOCABULARY_EVERY
        values.append(" ".join(words[(turn + k) % len(words)] for k in range(int(n))).encode())
        turn += int(n)
    return np.array(values, dtype=object).reshape(shape)


def _integer_outside(keys: Sequence[str], dtype: np.dtype) -> str:
    """An integer of `dtype` that is none of `keys`: one past the largest, else one below the
    smallest."""
    values = [int(k) for k in keys] or [0]
    info = np.iinfo(dtype)
    return str(max(values) + 1 if max(values) < info.max else min(values) - 1)


def _images(rng: np.random.Generator, shape: tuple[int, ...], image: ImageFormat) -> np.ndarray:
    """One encoded image per element of `shape`: a random 4x4 field of colours, smoothly
    enlarged, with noise of a few levels (a photograph's kind of content, and size once
    encoded)."""
    import io

    from PIL import Image

    count = int(np.prod(shape))
    encoded = []
    for _ in range(count):
        field = Image.fromarray(rng.integers(0, 256, size=(4, 4, 3), dtype=np.uint8))
        enlarged = field.resize((image.width, image.height), Image.Resampling.BILINEAR)
        pixels = np.asarray(enlarged, np.int16)
        noisy = np.clip(pixels + rng.integers(-6, 7, size=pixels.shape), 0, 255)
        buffer = io.BytesIO()
        Image.fromarray(noisy.astype(np.uint8)).save(buffer, format=image.format.upper())
        encoded.append(buffer.getvalue())
    return np.array(encoded, dtype=object).reshape(shape)


def _prefix_mask(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Per row (the last axis), ones for a random length of at least one, then zeros."""
    length = shape[-1]
    rows = int(np.prod(shape[:-1]))
    kept = rng.integers(1, length, size=rows, endpoint=True) if length else np.zeros(rows)
    mask = np.arange(length)[None, :] < kept[:, None]
    return mask.reshape(shape)


Samples = Mapping[str, Mapping[str, np.ndarray]]  # signature -> input -> array


@dataclass
class InputSource(JsonResult):
    """Where the inputs a model is called on come from: the user's `samples` (by signature,
    then input; from `--samples-file`, named by `label`) for the signatures they cover, else
    values generated within `ranges` (by input name; the model's or the user's).

    Its JSON, in the manifest, says which: {"samples": FILE or null, "ranges": {NAME: {low,
    high, why}}}."""

    samples: Samples | None = field(default=None, metadata=json_meta(skip=True))
    label: str | None = field(default=None, metadata=json_meta(name="samples"))
    ranges: dict[str, ValueRange] = field(default_factory=dict)

    def given(self, signature: str) -> Mapping[str, np.ndarray] | None:
        """The user's samples for `signature`, if any."""
        return (self.samples or {}).get(signature)

    def batch(
        self, signature: str, specs: Sequence[TensorSpec], batch_size: int, seed: int = 0
    ) -> dict[str, np.ndarray]:
        """`batch_size` rows for `signature`: the user's samples from row `seed * batch_size`
        on, cycling, when given and the batch is free; else generated ones."""
        user = self.given(signature)
        if user and all(s.batch_free for s in specs if s.name in user):
            rows = len(next(iter(user.values())))
            picks = (np.arange(batch_size) + seed * batch_size) % max(rows, 1)
            return {k: v[picks] for k, v in user.items()}
        return sample_inputs(specs, batch_size=batch_size, seed=seed, ranges=self.ranges)

    @classmethod
    def recorded(
        cls, manifest: Mapping[str, Any] | None, contracts: Sequence[SignatureContract]
    ) -> InputSource:
        """The source an export recorded in its manifest (its "inputs": the samples file, and
        the ranges the user gave or the model told), for `contracts`; the samples are read
        when the file is still there. An empty source for a version with no manifest."""
        recorded = (manifest or {}).get("inputs") or {}
        ranges = {
            name: ValueRange(
                float(r["low"]),
                float(r["high"]),
                str(r.get("why", "")),
                ImageFormat(**r["image"]) if r.get("image") else None,
                _vocabulary(r.get("vocabulary")),
            )
            for name, r in (recorded.get("ranges") or {}).items()
        }
        path = recorded.get("samples")
        samples = load_samples(Path(path), contracts) if path and Path(path).is_file() else None
        return cls(samples, str(path) if samples else None, ranges)

    def with_ranges(self, found: Mapping[str, ValueRange]) -> InputSource:
        """This source with the ranges in `found` added where none is set yet."""
        return InputSource(self.samples, self.label, {**found, **self.ranges})

    def describe(self, specs: Iterable[TensorSpec]) -> str:
        """How `specs` are generated, for messages: `token_ids: int32 in [0, 100] (graphserve's
        default for integers), images: float32, standard normal`."""
        parts = []
        for spec in specs:
            span = self.ranges.get(spec.name) or default_range(spec)
            if span is not None and span.image is not None:
                how = span.image.text() + (f" ({span.why})" if span.why else "")
            elif span is not None and span.vocabulary is not None:
                how = (
                    span.vocabulary.text()
                    + (f" ({span.why})" if span.why else "")
                    + f", one value in {OUT_OF_VOCABULARY_EVERY} a "
                    + ("key" if span.vocabulary.integers else "word")
                    + " outside it"
                )
            elif spec.dtype == "string":
                how = f"phrases of {len(VOCABULARY)} common words"
            elif spec.dtype == "bool":
                how = "random booleans"
            elif span is None:
                how = "standard normal"
            else:
                how = f"in [{span.low:g}, {span.high:g}]" + (f" ({span.why})" if span.why else "")
            parts.append(f"{spec.name}: {spec.dtype} {how}")
        return ", ".join(parts)

    def refused(self, specs: Sequence[TensorSpec]) -> str:
        """What to add to the error of a model that refused generated inputs: that graphserve
        generated them, how, and the flags that give the model what it expects (a range is
        only for numbers: strings and booleans are given as samples)."""
        numbers = [s.name for s in specs if s.dtype not in ("string", "bool")]
        ranges = (
            f", or a range per number input with --input-range NAME=LOW:HIGH ({', '.join(numbers)})"
            if numbers
            else ""
        )
        return (
            f". graphserve generated these inputs ({self.describe(specs)}); give inputs the model "
            "takes with --samples-file FILE (a .npz of arrays, bytes as dtype 'S', or a TF "
            'Serving predict body, binary strings as {"b64": ...})' + ranges
        )


def _vocabulary(recorded: Mapping[str, Any] | None) -> Vocabulary | None:
    """A manifest's vocabulary (ValueRange's JSON), else None."""
    if not recorded:
        return None
    words = tuple(str(w) for w in recorded["words"])
    return Vocabulary(
        words,
        int(recorded.get("size", len(words))),
        bool(recorded.get("phrases")),
        bool(recorded.get("integers")),
    )


def load_ranges(texts: Iterable[str]) -> dict[str, ValueRange]:
    """`--input-range` values by input name; SignatureError for a malformed or repeated one."""
    ranges: dict[str, ValueRange] = {}
    for text in texts:
        name, value = parse_input_range(text)
        if name in ranges:
            raise SignatureError(f"--input-range: input {name!r} is given more than once")
        ranges[name] = value
    return ranges


def load_samples(path: Path, contracts: Sequence[SignatureContract]) -> dict[str, dict]:
    """The user's samples (`--samples-file`) by signature and input, from `.npz` or a TF
    Serving predict body (`.json`).

    In `.npz`, a key `INPUT` feeds every signature with that input and `SIGNATURE/INPUT` one
    signature. A `.json` file holds one predict request body (row or columnar format, optional
    `signature_name`) or a list of them. Raises SignatureError when samples do not fit.
    """
    from graphserve.core.codec import (
        decode_json_request,
        parse_json_body,
        shape_hint,
        validate_inputs,
    )

    path = Path(path)
    if not path.is_file():
        raise SignatureError(f"samples file {path} does not exist")
    by_name = {c.name: c for c in contracts}
    raw: dict[str, dict[str, np.ndarray]] = {}
    try:
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as npz:
                for key in npz.files:
                    sig, _, input_name = key.rpartition("/")
                    for contract in contracts if not sig else [by_name.get(sig)]:
                        if contract and any(s.name == input_name for s in contract.inputs):
                            raw.setdefault(contract.name, {})[input_name] = _npz_array(
                                npz, key, path
                            )
        elif path.suffix == ".json":
            body = parse_json_body(path.read_bytes())
            for request in body if isinstance(body, list) else [body]:
                key = request.get("signature_name") or contracts[0].name
                if key not in by_name:
                    raise SignatureError(f"samples file {path}: no signature {key!r} to export")
                specs = {s.name: s for s in by_name[key].inputs}
                raw[key] = decode_json_request(request, specs)[0]
        else:
            raise SignatureError(f"samples file {path}: expected a .npz or .json file")
        samples = {}
        for key, arrays in raw.items():
            specs = {s.name: s for s in by_name[key].inputs}
            cast = {n: _as_dtype(a, specs[n].np_dtype) for n, a in arrays.items() if n in specs}
            samples[key] = validate_inputs(cast, specs)
            # The servers leave shapes to the graph; samples must fit what is exported.
            mismatch = shape_hint(samples[key], specs)
            if mismatch:
                raise SignatureError(f"samples file {path}: {mismatch}")
    except ServingError as exc:
        raise SignatureError(f"samples file {path}: {exc}") from None
    except (OSError, ValueError) as exc:
        raise SignatureError(f"samples file {path} cannot be read: {exc}") from None
    if not samples:
        raise SignatureError(
            f"samples file {path} names none of the inputs "
            + ", ".join(f"{c.name}: {[s.name for s in c.inputs]}" for c in contracts)
        )
    return samples


def _npz_array(npz: Any, key: str, path: Path) -> np.ndarray:
    """`npz[key]`, or a SignatureError that says how to save bytes: an object array (a list of
    Python bytes) is a pickle, which graphserve does not load from a file."""
    try:
        return npz[key]
    except ValueError as exc:
        if "allow_pickle" not in str(exc):
            raise
        raise SignatureError(
            f"samples file {path}: {key!r} is an object array, which .npz stores as a pickle "
            "and graphserve does not load. Save encoded bytes (images, serialized examples) as a "
            f"bytes array: {key!r} as np.array(list_of_bytes, dtype=bytes). numpy "
            "drops the trailing NUL bytes of each value, which JPEG, PNG and GIF files do not "
            "end with; for other bytes write a TF Serving predict body (.json) with "
            '{"b64": ...} for each value'
        ) from None


def _as_dtype(array: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if dtype.kind == "O":
        return np.asarray(array).astype(object)
    if array.dtype.kind == dtype.kind or array.dtype.kind in "iub":
        return np.asarray(array).astype(dtype)
    return np.asarray(array)  # leave a mismatch for validate_inputs to name
