"""Signature contracts: which signatures a SavedModel gets, their inputs, and their output names.

One contract per signature key. It comes from, first to last: `--input`/`--output-names`/
`--signature` on the command line, a signature file (`--signature-file`, YAML or JSON), the source
module's `SIGNATURES` or `INPUT_SIGNATURE`, or a Keras model's inputs. The file, and `SIGNATURES`,
share one schema:

    signatures:
      serving_default:                 # the signature key clients name
        inputs:                        # name -> dtype and shape (-1 or null: any size)
          images: {dtype: uint8, shape: [-1, 28, 28, 1]}
        outputs: [logits]              # optional: names for the outputs, in order
      classify_text:
        inputs:
          token_ids: {dtype: int32, shape: [-1, 128], range: [0, 30521]}  # optional: the
                                       # values generated inputs take (graphserve.core.inputs)
      float_images:
        function: classify_float       # optional: an attribute of the model (default: the model)
        inputs:
          images: {dtype: float32, shape: [-1, 28, 28, 1]}

Pure Python and numpy: parsing a contract never imports TensorFlow.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from graphserve.core.errors import SignatureError
from graphserve.core.results import JsonResult, json_meta
from graphserve.core.signature import (
    SERVING_DEFAULT,
    TensorSpec,
    ValueRange,
    check_unique,
    parse_shape,
)

__all__ = [
    "SignatureContract",
    "batch_variants",
    "contracts_from_mapping",
    "load_signature_file",
    "merge_contracts",
]


def _by_name(specs: Sequence[TensorSpec]) -> dict[str, TensorSpec]:
    return {s.name: s for s in specs}


def _names_or_none(names: tuple[str, ...] | None) -> list[str] | None:
    return list(names) if names else None


@dataclass(frozen=True)
class SignatureContract(JsonResult):
    """One signature: its key, inputs, the model attribute it calls and its output names.
    Its JSON leaves out the key (it is listed under it) and lists the inputs by name."""

    json_keys: ClassVar = ("function", ...)

    name: str = field(metadata=json_meta(skip=True))
    inputs: tuple[TensorSpec, ...] = field(metadata=json_meta(value=_by_name))
    function: str | None = None  # None: call the model itself
    output_names: tuple[str, ...] | None = field(  # None: the model's own names
        default=None, metadata=json_meta(value=_names_or_none)
    )
    # The values generated inputs take, by input name, where the file or module says so.
    ranges: Mapping[str, ValueRange] = field(default_factory=dict, metadata=json_meta(skip=True))

    def __post_init__(self) -> None:
        if not self.name or any(c in self.name for c in "/ \t"):
            raise SignatureError(f"signature name {self.name!r} is not valid: expected a plain key")
        check_unique(self.inputs)
        if self.output_names is not None and len(set(self.output_names)) != len(self.output_names):
            raise SignatureError(f"signature {self.name!r}: output names repeat")


# -- the file schema (pydantic: its errors name the field that is wrong) --------------------


class _TensorModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    dtype: str
    shape: list[int | None] | str | None  # None or "*": unknown rank
    range: tuple[float, float] | None = None  # [LOW, HIGH] of generated values

    @field_validator("shape", mode="before")
    @classmethod
    def _shape(cls, value: Any) -> Any:
        if isinstance(value, str):
            parsed = parse_shape(value)
            return None if parsed is None else list(parsed)
        return value


class _SignatureModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    function: str | None = None
    inputs: dict[str, _TensorModel] = Field(min_length=1)
    outputs: list[str] | None = None


class _FileModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    signatures: dict[str, _SignatureModel] = Field(min_length=1)


def _tensor(name: str, model: _TensorModel) -> TensorSpec:
    if model.shape is None or isinstance(model.shape, str):  # the validator parsed strings
        return TensorSpec(name, model.dtype.lower(), None)
    shape = model.shape
    for d in shape:
        if d is not None and d < -1:
            raise SignatureError(f"input {name!r}: dimension {d} is negative (use -1 for any)")
    dims = tuple(None if d is None or d == -1 else d for d in shape)
    return TensorSpec(name, model.dtype.lower(), dims)


def contracts_from_mapping(data: Any, where: str) -> list[SignatureContract]:
    """Contracts from the schema above, as a parsed mapping; SignatureError names the bad field."""
    if isinstance(data, Mapping) and "signatures" not in data and "inputs" in data:
        data = {"signatures": {SERVING_DEFAULT: data}}  # shorthand: one signature
    try:
        parsed = _FileModel.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        raise SignatureError(f"{where}: {problems}") from None
    return [
        SignatureContract(
            name=key,
            inputs=tuple(_tensor(n, t) for n, t in sig.inputs.items()),
            function=sig.function,
            output_names=tuple(sig.outputs) if sig.outputs else None,
            ranges={
                n: ValueRange(*t.range, why=f"{where}") for n, t in sig.inputs.items() if t.range
            },
        )
        for key, sig in parsed.signatures.items()
    ]


def load_signature_file(path: Path) -> list[SignatureContract]:
    """Read a YAML (.yaml/.yml) or JSON signature file."""
    path = Path(path)
    if not path.is_file():
        raise SignatureError(f"signature file {path} does not exist")
    text = path.read_text()
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except Exception as exc:  # yaml.YAMLError, json.JSONDecodeError
        raise SignatureError(f"signature file {path} is not valid YAML/JSON: {exc}") from None
    return contracts_from_mapping(data, f"signature file {path}")


def merge_contracts(
    declared: Sequence[SignatureContract],
    *,
    inputs: Sequence[TensorSpec] = (),
    output_names: Sequence[str] = (),
    extra: Mapping[str, str] | None = None,
) -> list[SignatureContract]:
    """Apply the command line on top of `declared` (file, module or Keras contracts).

    `inputs` and `output_names` replace serving_default's; `extra` maps NAME to a model attribute
    for each `--signature NAME=fn`, taking the inputs of its declared contract if there is one,
    else serving_default's.
    """
    by_name = {c.name: c for c in declared}
    default = by_name.get(SERVING_DEFAULT)
    if inputs:
        default = (
            replace(default, inputs=tuple(inputs))
            if default
            else SignatureContract(SERVING_DEFAULT, tuple(inputs))
        )
    if output_names:
        if default is None:
            raise SignatureError("--output-names needs an input signature for serving_default")
        default = replace(default, output_names=tuple(output_names))
    if default is not None:
        by_name[SERVING_DEFAULT] = default
    for name, function in (extra or {}).items():
        base = by_name.get(name) or default
        if base is None:
            raise SignatureError(
                f"--signature {name}={function}: no inputs known; declare them in a signature file"
            )
        by_name[name] = SignatureContract(name, base.inputs, function, None, base.ranges)
    if not by_name:
        return []
    if SERVING_DEFAULT not in by_name:
        raise SignatureError(
            f"no {SERVING_DEFAULT!r} signature among {sorted(by_name)}: TF Serving clients that "
            "name no signature need one"
        )
    return [by_name[SERVING_DEFAULT], *(c for n, c in by_name.items() if n != SERVING_DEFAULT)]


def batch_variants(contract: SignatureContract, sizes: Sequence[int]) -> list[SignatureContract]:
    """`NAME_batchB` copies of `contract` with the batch dimension fixed to each of `sizes`."""
    variants = []
    for size in sizes:
        if size < 1:
            raise SignatureError(f"--batch-sizes: {size} is not a positive batch size")
        fixed = []
        for spec in contract.inputs:
            if not spec.shape or spec.shape[0] is not None:
                raise SignatureError(
                    f"--batch-sizes: input {spec.name!r} of {contract.name!r} has shape "
                    f"{spec.shape_text()}; a fixed-batch variant needs -1 as its first dimension"
                )
            fixed.append(TensorSpec(spec.name, spec.dtype, (size, *spec.shape[1:])))
        variants.append(replace(contract, name=f"{contract.name}_batch{size}", inputs=tuple(fixed)))
    return variants
