"""`inspect_saved_model`: what a SavedModel offers and holds, read from its files, never loaded.

Works on any SavedModel (ours, `tf.saved_model.save`, Keras `model.export()`, TF1
SavedModelBuilder): the MetaGraphs and their tags, the TensorFlow version that wrote it, every
signature of the `serve` MetaGraph, the op scan, the warm-up records and graphserve's manifest.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tensorflow.core.protobuf import meta_graph_pb2

from graphserve.core.manifest import MANIFEST_FILE, read_manifest
from graphserve.core.results import JsonResult, json_meta
from graphserve.core.savedmodel import (
    SavedModelError,
    find_saved_model_file,
    meta_graph,
    predicted_resident_bytes,
    read_saved_model,
)
from graphserve.core.signature import dtype_name, shape_of_tensor_info
from graphserve.core.versions import version_dirs
from graphserve.model.opscan import OpScan, scan_meta_graph

if TYPE_CHECKING:
    from rich.console import RenderableType

__all__ = [
    "MetaGraphInfo",
    "SavedModelInfo",
    "SignatureInfo",
    "TensorInfo",
    "inspect_saved_model",
    "render_text",
    "resolve_version_dir",
]


@dataclass(frozen=True)
class TensorInfo(JsonResult):
    """One input or output of a signature. `shape` has -1 for a dimension of any size and is
    None when even the rank is unknown; `tensor` is the graph tensor it maps to. Its JSON
    leaves out the name, the key it is listed under."""

    name: str = field(metadata=json_meta(skip=True))
    dtype: str
    shape: list[int] | None
    tensor: str


@dataclass(frozen=True)
class SignatureInfo(JsonResult):
    key: str = field(metadata=json_meta(skip=True))  # listed under it
    method_name: str
    inputs: dict[str, TensorInfo]
    outputs: dict[str, TensorInfo]


@dataclass(frozen=True)
class MetaGraphInfo(JsonResult):
    tags: list[str]
    signature_keys: list[str]


@dataclass
class SavedModelInfo(JsonResult):
    """The report on one SavedModel version directory.

    `versions` lists the model directory's versions when PATH was one (`path` is then the newest).
    `warmup_records` is None without a warm-up file; `warmup_error` says why one could not be
    read. `manifest` is graphserve's export manifest, None without one (`manifest_error` likewise).
    """

    path: Path
    versions: list[int] | None
    meta_graphs: list[MetaGraphInfo]
    tensorflow_version: str
    tensorflow_git_version: str
    signatures: dict[str, SignatureInfo]
    op_scan: OpScan
    warmup_records: int | None = None
    warmup_error: str | None = None
    manifest: dict[str, Any] | None = None
    manifest_error: str | None = None
    # What it is predicted to hold once loaded (core.savedmodel.predicted_resident_bytes); a
    # server with --load-on-demand measures it at load, and budgets with that after
    predicted_resident_bytes: int = 0


def resolve_version_dir(path: Path | str) -> tuple[Path, list[int] | None]:
    """(version directory, versions): `path` itself if it holds a saved_model.pb, else the newest
    numeric version under it, as TF Serving picks it, with all the versions present.

    Raises SavedModelError when `path` is neither.
    """
    path = Path(path)
    if not path.is_dir() or find_saved_model_file(path) is not None:
        return path, None  # read_saved_model says what is wrong with a non-directory
    dirs = version_dirs(path)
    versions = list(dirs)
    if not versions:
        raise SavedModelError(
            f"{path} is not a SavedModel directory: it holds no saved_model.pb and no numeric "
            "version directories"
        )
    return dirs[versions[-1]], versions


def inspect_saved_model(path: Path | str) -> SavedModelInfo:
    """Inspect the SavedModel at `path`: a version directory, or a model directory holding numeric
    versions (the newest is inspected).

    Raises SavedModelError when `path` is not a readable SavedModel or has no `serve` MetaGraph.
    A warm-up file or manifest that cannot be read is reported in the result, not raised.
    """
    version_dir, versions = resolve_version_dir(path)
    saved = read_saved_model(version_dir)
    try:
        serve = meta_graph(saved)
    except SavedModelError as exc:
        raise SavedModelError(f"{version_dir}: {exc}") from None
    warmup_records, warmup_error = _count_warmup(version_dir)
    manifest, manifest_error = _read_manifest(version_dir)
    return SavedModelInfo(
        path=version_dir,
        versions=versions,
        meta_graphs=[
            MetaGraphInfo(sorted(g.meta_info_def.tags), sorted(g.signature_def))
            for g in saved.meta_graphs
        ],
        tensorflow_version=serve.meta_info_def.tensorflow_version,
        tensorflow_git_version=serve.meta_info_def.tensorflow_git_version,
        signatures={
            key: _signature(key, serve.signature_def[key]) for key in sorted(serve.signature_def)
        },
        op_scan=scan_meta_graph(serve),
        warmup_records=warmup_records,
        warmup_error=warmup_error,
        manifest=manifest,
        manifest_error=manifest_error,
        predicted_resident_bytes=predicted_resident_bytes(version_dir),
    )


def _signature(key: str, sig: meta_graph_pb2.SignatureDef) -> SignatureInfo:
    return SignatureInfo(
        key=key,
        method_name=sig.method_name,
        inputs={name: _tensor(name, sig.inputs[name]) for name in sorted(sig.inputs)},
        outputs={name: _tensor(name, sig.outputs[name]) for name in sorted(sig.outputs)},
    )


def _tensor(name: str, info: meta_graph_pb2.TensorInfo) -> TensorInfo:
    shape = shape_of_tensor_info(info)  # no tensor_shape at all is unknown too, not a scalar
    encoding = info.WhichOneof("encoding")
    if encoding == "coo_sparse":
        sparse = info.coo_sparse
        tensor = (
            f"sparse(values={sparse.values_tensor_name}, indices={sparse.indices_tensor_name}, "
            f"dense_shape={sparse.dense_shape_tensor_name})"
        )
    elif encoding == "composite_tensor":
        tensor = "composite(" + ", ".join(c.name for c in info.composite_tensor.components) + ")"
    else:
        tensor = info.name
    return TensorInfo(
        name=name,
        dtype=dtype_name(info.dtype),
        shape=None if shape is None else [-1 if d is None else d for d in shape],
        tensor=tensor,
    )


def _count_warmup(version_dir: Path) -> tuple[int | None, str | None]:
    """(records, error): None records without a warm-up file."""
    # Imported here: reading TFRecords needs TensorFlow's runtime and the serving protos.
    import tensorflow as tf
    from google.protobuf import message

    from graphserve.model.warmup import WARMUP_FILE, read_warmup_records

    if not (version_dir / WARMUP_FILE).is_file():
        return None, None
    try:
        return sum(1 for _ in read_warmup_records(version_dir)), None
    except (tf.errors.OpError, message.DecodeError) as exc:
        detail = getattr(exc, "message", None) or str(exc)
        return None, f"{version_dir / WARMUP_FILE} cannot be read: {detail}"


def _read_manifest(version_dir: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(manifest, error): None manifest without a manifest file."""
    try:
        return read_manifest(version_dir), None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"{version_dir / MANIFEST_FILE} cannot be read: {exc}"


# Text rendering for `graphserve inspect` (kept here so the shared CLI module only parses and
# prints). Rich is imported late, like everything the CLI does not need for `--help`.

_TOP_OPS = 6  # op types shown per function in the text report


def render_text(info: SavedModelInfo) -> RenderableType:
    """A readable report of `info` for a terminal: like `saved_model_cli show --all`, plus the op
    scan, warm-up records and manifest."""
    from rich.console import Group
    from rich.text import Text

    blank = Text("")
    return Group(
        _header(info),
        *(part for sig in info.signatures.values() for part in (blank, _signature_table(sig))),
        blank,
        _ops_table(info.op_scan),
        blank,
        _flagged(info.op_scan),
        blank,
        _warmup_text(info),
        _manifest_text(info),
    )


def _header(info: SavedModelInfo) -> RenderableType:
    from rich.text import Text

    lines = [
        f"  written by TensorFlow {info.tensorflow_version} ({info.tensorflow_git_version})",
        f"  predicted resident memory once loaded: {info.predicted_resident_bytes / 1e6:.2f} MB "
        "(variables, graph, a Session; measured at load by serve --load-on-demand)",
    ]
    if info.versions is not None:
        listed = ", ".join(map(str, info.versions))
        lines.insert(0, f"  versions {listed}; showing the newest, {info.versions[-1]}")
    for graph in info.meta_graphs:
        keys = ", ".join(graph.signature_keys) or "no signatures"
        lines.append(f"  MetaGraph tags {graph.tags}: {keys}")
    return Text.assemble(("SavedModel ", "bold"), str(info.path), "\n", "\n".join(lines))


def _signature_table(sig: SignatureInfo) -> RenderableType:
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    if not sig.method_name and not sig.inputs:
        # TF2's `__saved_model_init_op`: runs once at load (tables, assets), never served.
        return Text.assemble("signature ", (sig.key, "bold"), ": an initialization op, not served")
    method = escape(sig.method_name or "(no method)")
    table = Table(title=f"signature [bold]{escape(sig.key)}[/]: {method}", title_justify="left")
    for column in ("", "name", "dtype", "shape", "tensor"):
        table.add_column(column)
    for kind, tensors in (("input", sig.inputs), ("output", sig.outputs)):
        for t in tensors.values():
            shape = "unknown rank" if t.shape is None else str(t.shape)
            table.add_row(*map(escape, (kind, t.name, t.dtype, shape, t.tensor)))
    return table


def _ops_table(scan: OpScan) -> RenderableType:
    from rich.markup import escape
    from rich.table import Table

    title = f"ops: {scan.total_ops} in {len(scan.functions)} function(s)"
    table = Table(title=title, title_justify="left")
    for column in ("function", "ops", "most frequent"):
        table.add_column(column)
    for name, counts in [*scan.functions.items(), ("all functions", scan.totals())]:
        top = ", ".join(f"{op} {n}" for op, n in list(counts.items())[:_TOP_OPS])
        more = len(counts) - _TOP_OPS
        top += f" (+{more} more)" if more > 0 else ""
        table.add_row(*map(escape, (name, str(sum(counts.values())), top)))
    return table


def _flagged(scan: OpScan) -> RenderableType:
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    linked = "".join(
        f"; {library} ops, which TF Serving links in: {', '.join(ops)}"
        for library, ops in scan.linked_by_library().items()
    )
    if scan.ok:
        return Text(f"flagged ops: none{linked}", style="green")
    title = f"flagged ops: {len(scan.flagged)}{linked}"
    table = Table(title=title, title_justify="left", style="red")
    for column in ("category", "op", "function", "node", "reason"):
        table.add_column(column, style="red")
    for f in scan.flagged:
        table.add_row(*map(escape, (f.category, f.op, f.function, f.node, f.reason)))
    return table


def _warmup_text(info: SavedModelInfo) -> RenderableType:
    from rich.text import Text

    from graphserve.model.warmup import WARMUP_FILE

    if info.warmup_error:
        return Text(f"warm-up records: {info.warmup_error}", style="red")
    if info.warmup_records is None:
        return Text(f"warm-up records: none (no {WARMUP_FILE})")
    return Text(f"warm-up records: {info.warmup_records}")


def _manifest_text(info: SavedModelInfo) -> RenderableType:
    from rich.text import Text

    if info.manifest_error:
        return Text(f"manifest: {info.manifest_error}", style="red")
    if info.manifest is None:
        return Text(f"manifest: none (no {MANIFEST_FILE})")
    lines = [f"manifest ({MANIFEST_FILE}):"]
    lines += [
        f"  {key}: {_inputs_summary(value) if key == 'inputs' else _summary(value)}"
        for key, value in info.manifest.items()
    ]
    return Text("\n".join(lines))


def _span(recorded: dict[str, Any]) -> str:
    """A recorded range in words: `in [0, 6]`, or `from a vocabulary of 8 words`."""
    vocabulary = recorded.get("vocabulary")
    if isinstance(vocabulary, dict):
        unit = "keys" if vocabulary.get("integers") else "words"
        return f"from a vocabulary of {int(vocabulary.get('size', 0)):,} {unit}"
    return f"in [{float(recorded['low']):g}, {float(recorded['high']):g}]"


def _inputs_summary(value: Any) -> str:
    """What the export called the model on: the samples file, else each generated input's
    range and why (graphserve.core.inputs), one per line."""
    if not isinstance(value, dict):
        return _summary(value)
    if value.get("samples"):
        return f"the samples in {value['samples']}"
    ranges = value.get("ranges") or {}
    described = [
        f"\n    - {name} {_span(r)}" + (f": {r['why']}" if r.get("why") else "")
        for name, r in ranges.items()
        if isinstance(r, dict) and {"low", "high"} <= r.keys()
    ]
    if not described:
        return "generated (graphserve's defaults, by each input's name and dtype)"
    return "generated" + "".join(described) + "\n    - others: graphserve's defaults"


# Verdicts worth showing even when a manifest section is too big to print whole.
_VERDICTS = ("passed", "ok", "compatible")


def _summary(value: Any) -> str:
    """A manifest entry in brief: scalars, small flat sections and lists of scalars whole (a long
    list one item per line), anything bigger as a count with its verdict if it has one."""
    if isinstance(value, dict):
        if len(value) <= 4 and not any(isinstance(v, dict | list) for v in value.values()):
            return ", ".join(f"{k}={v}" for k, v in value.items())
        verdicts = [f"{k}={value[k]}" for k in _VERDICTS if k in value]
        return ", ".join([*verdicts, f"{len(value)} entries"])
    if isinstance(value, list):
        if any(isinstance(v, dict | list) for v in value):
            return f"{len(value)} items"
        text = ", ".join(map(str, value))  # short lists inline, long ones (warnings) one per line
        return text if len(text) <= 80 else "".join(f"\n    - {v}" for v in value)
    return str(value)
