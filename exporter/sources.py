"""Model sources: `examples:NAME`, `package.module:factory` and `.keras` files.

`load_source` turns what the user typed into a callable model plus the input signature the source
declares, if any. TensorFlow and Keras are imported here, late, so the CLI stays fast.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter.errors import SignatureError, SourceError
from exporter.signature import TensorSpec, check_unique, parse_input_spec

__all__ = ["ModelSource", "available_examples", "load_source", "resolve_signature"]

_EXAMPLES_PACKAGE = "exporter.examples"


@dataclass
class ModelSource:
    """A loaded model: `model` is callable on tensors; `declared` is the signature it ships."""

    text: str
    kind: str  # "example" | "factory" | "keras"
    model: Any
    declared: list[TensorSpec] | None


def available_examples() -> list[str]:
    package = importlib.import_module(_EXAMPLES_PACKAGE)
    return sorted(m.name for m in pkgutil.iter_modules(package.__path__))


def load_source(text: str) -> ModelSource:
    """Load SOURCE; raises SourceError naming what could not be found or called."""
    if text.endswith(".keras"):
        return _load_keras_file(text)
    module_name, sep, attr = text.partition(":")
    if not sep or not module_name or not attr:
        raise SourceError(
            f"source {text!r} is not understood: expected package.module:factory, a .keras file, "
            f"or examples:NAME (one of {', '.join(available_examples())})"
        )
    if module_name == "examples":
        if attr not in available_examples():
            raise SourceError(
                f"unknown example {attr!r}: available examples are "
                f"{', '.join(available_examples())}"
            )
        module = importlib.import_module(f"{_EXAMPLES_PACKAGE}.{attr}")
        return _from_factory(text, "example", module, "build")
    # Like uvicorn and gunicorn: a factory in the user's project is importable from its root.
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
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
    declared = getattr(module, "INPUT_SIGNATURE", None)
    return ModelSource(text, kind, model, _as_specs(declared, text) if declared else None)


def _load_keras_file(text: str) -> ModelSource:
    path = Path(text)
    if not path.is_file():
        raise SourceError(f"Keras file {text!r} does not exist")
    import keras

    try:
        # safe_mode refuses lambda layers and other code embedded in the file.
        model = keras.saving.load_model(path, safe_mode=True)
    except Exception as exc:
        raise SourceError(f"cannot load Keras file {text!r}: {exc}") from exc
    return ModelSource(text, "keras", model, None)


def _as_specs(declared: Sequence[Any], where: str) -> list[TensorSpec]:
    specs = []
    for item in declared:
        if isinstance(item, TensorSpec):
            specs.append(item)
        elif isinstance(item, str):
            specs.append(parse_input_spec(item))
        else:  # a tf.TensorSpec
            specs.append(_from_tf_spec(item, where))
    return specs


def _from_tf_spec(spec: Any, where: str) -> TensorSpec:
    name = getattr(spec, "name", None)
    if not name:
        raise SignatureError(f"INPUT_SIGNATURE of {where!r} has a tf.TensorSpec without a name")
    dtype = "string" if spec.dtype.name == "string" else spec.dtype.name
    return TensorSpec(name, dtype, tuple(spec.shape.as_list()))


def resolve_signature(source: ModelSource, explicit: Sequence[TensorSpec] = ()) -> list[TensorSpec]:
    """The input signature: `--input` first, then the source's declaration, then Keras inputs."""
    if explicit:
        specs = list(explicit)
    elif source.declared:
        specs = source.declared
    else:
        specs = _keras_inputs(source)
    if not specs:
        raise SignatureError(
            f"cannot tell the input signature of {source.text!r}: pass --input NAME:DTYPE:SHAPE "
            "(e.g. --input images:float32:-1,784) or define INPUT_SIGNATURE in its module"
        )
    check_unique(specs)
    return specs


def _keras_inputs(source: ModelSource) -> list[TensorSpec]:
    inputs = getattr(source.model, "inputs", None)
    if not inputs:
        return []
    specs = []
    for tensor in inputs:
        dtype = str(getattr(tensor.dtype, "name", tensor.dtype))
        name = str(tensor.name).split(":")[0]
        specs.append(TensorSpec(name, dtype, tuple(tensor.shape)))
    return specs
