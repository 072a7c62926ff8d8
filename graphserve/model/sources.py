"""Model sources: `examples:NAME`, `package.module:factory`, `.keras` files, SavedModel dirs.

`load_source` turns what the user typed into a callable model plus the signature contracts the
source declares, if any. TensorFlow and Keras are imported here, late, so the CLI stays fast.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graphserve.core.contract import SignatureContract, contracts_from_mapping, merge_contracts
from graphserve.core.errors import SignatureError, SourceError
from graphserve.core.signature import PREDICT_METHOD, SERVING_DEFAULT, TensorSpec, parse_input_spec

__all__ = [
    "ModelSource",
    "available_examples",
    "load_source",
    "own_signature",
    "resolve_contracts",
    "signature_origin",
]

_EXAMPLES_PACKAGE = "graphserve.model.examples"


@dataclass
class ModelSource:
    """A loaded model: `model` is callable on tensors; `declared` is what the source declares."""

    text: str
    kind: str  # "example" | "factory" | "keras" | "savedmodel"
    model: Any
    declared: list[SignatureContract] = field(default_factory=list)
    unsafe: bool = False  # loaded with Keras safe mode off
    declared_by: str | None = None  # where `declared` was read, in words
    refused: str | None = None  # why the callable's own signature cannot be served as it is
    imports: tuple[str, ...] = ()  # modules imported first (--import): custom objects' registry
    warnings: list[str] = field(default_factory=list)  # what loading left out, and why


def available_examples() -> list[str]:
    package = importlib.import_module(_EXAMPLES_PACKAGE)
    return sorted(m.name for m in pkgutil.iter_modules(package.__path__))


def load_source(
    text: str, *, allow_unsafe: bool = False, imports: Sequence[str] = ()
) -> ModelSource:
    """Load SOURCE; raises SourceError naming what could not be found, loaded or called.

    `allow_unsafe` turns Keras safe mode off for `.keras` files (it lets the file run code).
    `imports` are modules of the user's project imported first (`--import`): the ones that
    register a `.keras` file's custom layers (`keras.saving.register_keras_serializable`).
    """
    import_modules(imports)
    source = _load(text, allow_unsafe)
    return dataclasses.replace(source, imports=tuple(imports)) if imports else source


def import_modules(names: Sequence[str]) -> None:
    """Import each of `names` from the user's project (the working directory on sys.path, as
    for a factory); SourceError naming the module that fails."""
    if names:
        _user_path()
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:
            raise SourceError(
                f"--import {name}: cannot import it: {type(exc).__name__}: {exc}"
            ) from exc


def _user_path() -> None:
    # Like uvicorn and gunicorn: a factory in the user's project is importable from its root.
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))


def _load(text: str, allow_unsafe: bool) -> ModelSource:
    if text.endswith(".keras"):
        return _load_keras_file(text, allow_unsafe)
    if Path(text, "saved_model.pb").is_file():
        return _load_saved_model(text)
    module_name, sep, attr = text.partition(":")
    if not sep or not module_name or not attr:
        hint = " (a directory without saved_model.pb)" if Path(text).is_dir() else ""
        raise SourceError(
            f"source {text!r}{hint} is not understood: expected package.module:factory, a .keras "
            f"file, a SavedModel directory, or examples:NAME (one of "
            f"{', '.join(available_examples())})"
        )
    if module_name == "examples":
        if attr not in available_examples():
            raise SourceError(
                f"unknown example {attr!r}: available examples are "
                f"{', '.join(available_examples())}"
            )
        module = importlib.import_module(f"{_EXAMPLES_PACKAGE}.{attr}")
        return _from_factory(text, "example", module, "build")
    _user_path()
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SourceError(
            f"cannot import module {module_name!r} of source {text!r}: {exc}"
        ) from exc
    return _from_factory(text, "factory", module, attr)


def _from_factory(text: str, kind: str, module: Any, attr: str) -> ModelSource:
    factory = getattr(module, attr, None)
    if factory is None or not callable(factory):
        raise SourceError(f"module {module.__name__!r} has no callable {attr!r} (source {text!r})")
    try:
        model = factory()
    except Exception as exc:
        raise SourceError(f"factory {text!r} raised {type(exc).__name__}: {exc}") from exc
    if not callable(model):
        raise SourceError(
            f"factory {text!r} returned {type(model).__name__}, which is not callable: expected a "
            "Keras model, a tf.Module with __call__, or a function of tensors"
        )
    declared, origin = _declared(module, text)
    refused = None
    if not declared:
        try:
            declared, origin = own_signature(model)
        except SignatureError as exc:  # raised if nothing stronger (--input, a file) replaces it
            refused = str(exc)
    return ModelSource(text, kind, model, declared, declared_by=origin, refused=refused)


def own_signature(model: Any) -> tuple[list[SignatureContract], str | None]:
    """The input signature a callable carries itself, and where it was read: a `tf.function`'s
    `input_signature` (the model's, or its `__call__`'s, as in a `tf.Module`), or the
    `input_signature` a transformers TF model declares (a dict of `tf.TensorSpec`s). Empty
    when it carries none. Raises SignatureError for one graphserve cannot serve as it is
    (nested tensors, an input of unknown rank), naming the input and the fix."""
    import tensorflow as tf

    function_type = tf.types.experimental.PolymorphicFunction
    for target in (model, model.__call__):
        if isinstance(target, function_type) and target.input_signature is not None:
            name = getattr(getattr(target, "python_function", None), "__qualname__", None)
            origin = f"the input_signature of tf.function {name or type(model).__name__!r}"
            return [_signed(target, origin)], origin
    declared = getattr(model, "input_signature", None)
    if (
        isinstance(declared, Mapping)
        and declared
        and all(isinstance(spec, tf.TensorSpec) for spec in declared.values())
    ):
        origin = f"the input_signature of {type(model).__name__}"
        specs = tuple(_own_spec(spec, name, origin) for name, spec in declared.items())
        return [SignatureContract(SERVING_DEFAULT, specs)], origin
    return [], None


def _signed(function: Any, origin: str) -> SignatureContract:
    """`function`'s input_signature as one signature: its tensors positional (named by the spec,
    else by the parameter it fills), or one dict of them (named by their keys)."""
    signature = tuple(function.input_signature)
    if len(signature) == 1 and isinstance(signature[0], Mapping):
        items = list(signature[0].items())
    else:
        try:
            names = [p.name for p in inspect.signature(function.python_function).parameters
                     .values() if p.name != "self"]  # fmt: skip
        except (TypeError, ValueError):
            names = []
        items = [(getattr(spec, "name", None) or (names[i] if i < len(names) else f"input_{i}"),
                  spec) for i, spec in enumerate(signature)]  # fmt: skip
    return SignatureContract(SERVING_DEFAULT, tuple(_own_spec(s, n, origin) for n, s in items))


def _own_spec(spec: Any, name: str, origin: str) -> TensorSpec:
    import tensorflow as tf

    if isinstance(spec, tf.RaggedTensorSpec | tf.SparseTensorSpec):
        kind = "ragged" if isinstance(spec, tf.RaggedTensorSpec) else "sparse"
        shape = tuple(spec.shape.as_list()) if spec.shape.rank is not None else None
        raise SignatureError(composite_refusal(origin, name, kind, spec.dtype.name, shape))
    if not isinstance(spec, tf.TensorSpec):
        raise SignatureError(
            f"{origin} nests its tensors ({name!r} is {type(spec).__name__}): a graphserve "
            "signature is flat named tensors. Take them as separate arguments or as one dict "
            "of tf.TensorSpec, or pass --input NAME:DTYPE:SHAPE for each"
        )
    if spec.shape.rank is None:
        raise SignatureError(
            f"{origin}: input {name!r} has an unknown rank, and a graphserve signature fixes "
            f"each input's rank: pass --input {name}:{spec.dtype.name}:SHAPE (-1 for a free "
            "dimension)"
        )
    return TensorSpec(name, spec.dtype.name, tuple(spec.shape.as_list()))


def composite_refusal(
    where: str, name: str, kind: str, dtype: str, shape: Sequence[int | None] | None
) -> str:
    """Why a ragged or sparse input cannot be served, and the dense pattern that can: every input
    keeps the batch first (TF Serving's batching needs it), and graphserve generates it."""
    said = (f"{where}: input {name!r} is a {kind} tensor, and TF Serving's Predict API (REST and "
            "gRPC) carries dense tensors only, so no client could send it.")  # fmt: skip
    dims = ",".join("-1" if d is None else str(d) for d in shape) if shape else "-1,-1"
    batched = "Every input then starts with the batch, as TF Serving's batching needs"
    if kind == "ragged":
        return (
            f"{said} Take it padded, as a dense {name}:{dtype}:{dims} with a mask of its real "
            f"values {name}_mask:int64:-1,-1 (1 for a value, 0 for padding), and build it "
            f"inside: tf.RaggedTensor.from_tensor({name}, lengths=tf.reduce_sum({name}_mask, "
            f"axis=1)). {batched}, and graphserve generates padding masks for an input named "
            "like a mask"
        )
    return (
        f"{said} Take it dense, as {name}:{dtype}:{dims} (zeros where it has no value), and "
        f"build it inside: tf.sparse.from_dense({name}). {batched}"
    )


def _declared(module: Any, where: str) -> tuple[list[SignatureContract], str | None]:
    """The module's `SIGNATURES` (the signature-file schema) or `INPUT_SIGNATURE`, and which."""
    signatures = getattr(module, "SIGNATURES", None)
    if signatures:
        if not isinstance(signatures, Mapping):
            raise SignatureError(f"SIGNATURES of {where!r} must be a mapping of signature names")
        found = contracts_from_mapping({"signatures": signatures}, f"SIGNATURES of {where!r}")
        return found, f"SIGNATURES of module {module.__name__!r}"
    declared = getattr(module, "INPUT_SIGNATURE", None)
    if declared:
        contract = SignatureContract(SERVING_DEFAULT, tuple(_as_specs(declared, where)))
        return [contract], f"INPUT_SIGNATURE of module {module.__name__!r}"
    return [], None


def _load_keras_file(text: str, allow_unsafe: bool) -> ModelSource:
    path = Path(text)
    if not path.is_file():
        raise SourceError(f"Keras file {text!r} does not exist")
    import keras

    try:
        # Safe mode refuses lambda layers and other Python code embedded in the file.
        model = keras.saving.load_model(path, safe_mode=not allow_unsafe)
    except Exception as exc:
        hint = ""
        if "Could not locate" in str(exc):
            hint = (
                "; the file names a custom class that no imported module registered. Pass "
                "--import MODULE for the module of your project that defines it (with "
                "@keras.saving.register_keras_serializable())"
            )
        elif not allow_unsafe and "safe" in str(exc).lower():
            hint = (
                "; the file carries Python code that safe mode will not run. Loading it runs that "
                "code: pass --allow-unsafe only if you trust the file"
            )
        raise SourceError(f"cannot load Keras file {text!r}: {exc}{hint}") from exc
    contracts = _keras_contracts(model)
    return ModelSource(text, "keras", model, contracts, unsafe=allow_unsafe,
                       declared_by="the Keras model's inputs" if contracts else None)  # fmt: skip


def _load_saved_model(text: str) -> ModelSource:
    """An existing SavedModel: its Predict signatures are the declared contracts, to keep or
    extend. Classify and Regress signatures take serialized tf.Examples whose features only the
    model knows, so they cannot be sampled for parity; they are left out with a warning."""
    import tensorflow as tf

    from graphserve.core.savedmodel import signature_defs

    try:
        methods = {k: d.method_name for k, d in signature_defs(Path(text)).items()}
        loaded = tf.saved_model.load(text)
    except Exception as exc:
        raise SourceError(f"cannot load SavedModel {text!r}: {exc}") from exc
    contracts, warnings = [], []
    for key, function in sorted(loaded.signatures.items()):  # a stable order for messages
        if methods.get(key, PREDICT_METHOD) not in (PREDICT_METHOD, ""):
            warnings.append(
                f"signature {key!r} of {text} ({methods[key]}) is not re-exported: graphserve "
                "exports Predict signatures"
            )
            continue
        _, kwargs = function.structured_input_signature
        if any(spec.shape.rank is None for spec in kwargs.values()):
            warnings.append(
                f"signature {key!r} of {text} has an input of unknown rank and is not "
                "re-exported: graphserve signatures fix each input's rank"
            )
            continue
        inputs = tuple(
            _from_tf_spec(spec, f"signature {key!r} of {text!r}", name)
            for name, spec in sorted(kwargs.items())
        )
        contracts.append(SignatureContract(key, inputs, f"signatures.{key}"))
    return ModelSource(text, "savedmodel", loaded, contracts, warnings=warnings,
                       declared_by="the SavedModel's signatures")  # fmt: skip


def _as_specs(declared: Sequence[Any], where: str) -> list[TensorSpec]:
    specs = []
    for item in declared:
        if isinstance(item, TensorSpec):
            specs.append(item)
        elif isinstance(item, str):
            specs.append(parse_input_spec(item))
        else:  # a tf.TensorSpec
            specs.append(_from_tf_spec(item, f"INPUT_SIGNATURE of {where!r}"))
    return specs


def _from_tf_spec(spec: Any, where: str, name: str | None = None) -> TensorSpec:
    name = name or getattr(spec, "name", None)
    if not name:
        raise SignatureError(f"{where} has a tf.TensorSpec without a name")
    shape = tuple(spec.shape.as_list()) if spec.shape.rank is not None else ()
    return TensorSpec(name, spec.dtype.name, shape)


def _keras_contracts(model: Any) -> list[SignatureContract]:
    inputs = getattr(model, "inputs", None)
    if not inputs:
        return []
    specs = []
    for tensor in inputs:
        dtype = str(getattr(tensor.dtype, "name", tensor.dtype))
        name = str(tensor.name).split(":")[0]
        for kind in ("ragged", "sparse"):
            if getattr(tensor, kind, False):
                where = f"the Keras model {getattr(model, 'name', type(model).__name__)!r}"
                refusal = composite_refusal(where, name, kind, dtype, tuple(tensor.shape))
                raise SignatureError(refusal)
        specs.append(TensorSpec(name, dtype, tuple(tensor.shape)))
    return [SignatureContract(SERVING_DEFAULT, tuple(specs))]


def signature_origin(
    source: ModelSource, *, file: Path | None = None, inputs: Sequence[TensorSpec] = ()
) -> str:
    """Where the exported signatures' inputs come from, in words: the same order of strength as
    `resolve_contracts`."""
    if inputs:
        return "--input on the command line"
    if file is not None:
        return f"the signature file {str(file)!r}"
    if source.declared:
        return source.declared_by or repr(source.text)
    return "the Keras model's inputs" if _keras_contracts(source.model) else "nowhere"


def resolve_contracts(
    source: ModelSource,
    *,
    file_contracts: Sequence[SignatureContract] = (),
    inputs: Sequence[TensorSpec] = (),
    output_names: Sequence[str] = (),
    extra: Mapping[str, str] | None = None,
) -> list[SignatureContract]:
    """Every signature to export, serving_default first.

    The command line (`inputs`, `output_names`, `extra`) goes over the signature file, which
    replaces what the source declares (module SIGNATURES/INPUT_SIGNATURE, Keras inputs, or an
    existing SavedModel's signatures).
    """
    if source.refused and not file_contracts and not inputs:
        raise SignatureError(source.refused)
    declared = list(file_contracts) or source.declared or _keras_contracts(source.model)
    contracts = merge_contracts(declared, inputs=inputs, output_names=output_names, extra=extra)
    if not contracts:
        if source.kind == "savedmodel":  # --input cannot help: say why each signature was left
            raise SignatureError(
                f"the SavedModel {source.text!r} has no signature graphserve can run from "
                "Python: " + "; ".join(source.warnings or ["it has no signatures"])
            )
        raise SignatureError(
            f"cannot tell the input signature of {source.text!r}: pass --input NAME:DTYPE:SHAPE "
            "(e.g. --input images:float32:-1,784), a --signature-file, or define INPUT_SIGNATURE "
            "in its module"
        )
    return contracts
