"""The op scan: the ops of a SavedModel's serving graph, and which of them should not be served.

Counts every op type per function: the main graph (`<graph>`; TF1 SavedModels keep nearly all ops
there) and each function of `graph_def.library` (TF2 SavedModels keep nearly all ops there, the
main graph only calls them). Flags ops that touch files, the network or other processes, or that TF
Serving cannot run:

    file      reads, writes or memory-maps files on the server (ReadFile, readers, file datasets,
              summary writers, tfdbg, PrintV2 to a file, checkpoint ops outside the saver)
    process   runs Python (py_function, numpy_function); TF Serving has no Python interpreter
    network   RPCs, the tf.data service, cross-host collectives, cloud storage configuration
    library   registered by an op library this process loaded (tf.load_op_library), not by
              TensorFlow: TF Serving refuses the model unless it was built with that library
    unknown   not registered in this process: a custom op TF Serving may not have

TF Serving's model server links two op libraries besides TensorFlow's own (SUPPORTED_TENSORFLOW_OPS
in tensorflow_serving/model_servers/BUILD): TF Text and TF Decision Forests' inference ops. Their
ops are served, so not flagged; when a graph has an op TensorFlow does not define, the scan imports
each such package that is installed (registering its ops in this process, as the graph server
needs to run them) and reads the op list of each of its op libraries.

The variable save/restore machinery is not flagged: every SavedModel with variables has SaveV2 and
RestoreV2 reachable from its `saver_def` (in the main graph for TF1, in `__inference__traced_save`
and `__inference__traced_restore` library functions for TF2), and TF Serving uses it to restore the
variables. The same ops anywhere else are flagged.
"""

from __future__ import annotations

import glob
import importlib
import importlib.util
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from fnmatch import translate
from functools import cache
from pathlib import Path
from typing import ClassVar

from tensorflow.core.framework import function_pb2, node_def_pb2
from tensorflow.core.protobuf import meta_graph_pb2

from graphserve.core.results import JsonResult
from graphserve.core.savedmodel import serve_meta_graph

__all__ = [
    "CHECKPOINT_OPS",
    "GRAPH",
    "SERVER_OP_LIBRARIES",
    "FlaggedOp",
    "OpScan",
    "ServerOpLibrary",
    "describe_flagged",
    "scan_meta_graph",
    "scan_saved_model",
    "server_library_ops",
]

# The name the scan gives the main graph, next to the library functions' names.
GRAPH = "<graph>"

# Op lists: exact names or globs (`*`). Each group says why a served model should not hold it.

# Read, write or list files on the server's filesystem.
FILE_IO_OPS = ("ReadFile", "WriteFile", "MatchingFiles")
# Memory-maps a file named in the graph (for memmapped models); a path the server must have.
MEMORY_MAPPED_OPS = ("ImmutableConst",)
# TF1 queue-based input pipelines: each reader reads the files fed to its queue.
READER_OPS = (
    "TFRecordReader",
    "TFRecordReaderV2",
    "TextLineReader",
    "TextLineReaderV2",
    "WholeFileReader",
    "WholeFileReaderV2",
    "FixedLengthRecordReader",
    "FixedLengthRecordReaderV2",
    "IdentityReader",
    "IdentityReaderV2",
    "LMDBReader",
    "ReaderRead*",
)
# tf.data sources and sinks backed by files (training input pipelines, dataset snapshots).
FILE_DATASET_OPS = (
    "TFRecordDataset*",
    "TextLineDataset*",
    "FixedLengthRecordDataset*",
    "SaveDataset*",
    "LoadDataset",
    "DatasetToTFRecord",
    "ExperimentalDatasetToTFRecord",
    "MatchingFilesDataset",
    "SnapshotDataset*",
)
# TensorBoard summary writers append to event files.
SUMMARY_OPS = (
    "CreateSummaryFileWriter",
    "SummaryWriter",
    "Write*Summary",
    "ImportEvent",
    "FlushSummaryWriter",
)
# tfdbg ops dump tensors to files (or a debug server) on every call.
DEBUG_OPS = ("DebugIdentity*", "DebugNumericSummary*")
# Checkpoint reads and writes: legitimate only inside the variable save/restore machinery.
CHECKPOINT_OPS = (
    "Save",
    "SaveV2",
    "SaveSlices",
    "Restore",
    "RestoreV2",
    "RestoreSlice",
    "MergeV2Checkpoints",
)
# Call back into Python: TF Serving cannot run them, and a Python server runs arbitrary code.
PROCESS_OPS = ("PyFunc", "PyFuncStateless", "EagerPyFunc")
# Remote procedure calls to other servers (Rpc, TryRpc: TF1 contrib; the rest: TF2's
# tf.distribute.experimental.rpc).
RPC_OPS = ("Rpc", "TryRpc", "RpcCall", "RpcClient", "RpcServer*")
# The tf.data service: datasets produced or registered by remote workers.
DATA_SERVICE_OPS = ("DataServiceDataset*", "RegisterDataset*")
# Collectives exchange tensors with other workers, across hosts.
COLLECTIVE_OPS = ("CollectiveReduce*", "CollectiveGather*", "CollectiveBcast*")
# Cloud clients (tensorflow-io / contrib): configure GCS credentials, read BigQuery tables.
CLOUD_OPS = ("GcsConfigure*", "BigQuery*")


@dataclass(frozen=True)
class _Rule:
    category: str
    reason: str
    patterns: tuple[str, ...]


# Exempt inside the variable save/restore machinery (see `_saver_scope`).
_CHECKPOINT_RULE = _Rule(
    "file",
    "reads or writes checkpoint files outside the variable save/restore machinery",
    CHECKPOINT_OPS,
)

# First match wins.
_RULES = (
    _Rule("file", "reads, writes or lists files on the server", FILE_IO_OPS),
    _Rule("file", "memory-maps a file named in the graph", MEMORY_MAPPED_OPS),
    _Rule("file", "queue-based reader: reads the files fed to it", READER_OPS),
    _Rule("file", "tf.data op that reads or writes files", FILE_DATASET_OPS),
    _Rule("file", "writes TensorBoard event files", SUMMARY_OPS),
    _Rule("file", "tfdbg op: dumps tensors to files", DEBUG_OPS),
    _CHECKPOINT_RULE,
    _Rule("process", "runs Python, which TF Serving cannot do", PROCESS_OPS),
    _Rule("network", "makes remote procedure calls", RPC_OPS),
    _Rule("network", "talks to a remote tf.data service", DATA_SERVICE_OPS),
    _Rule("network", "exchanges tensors with other hosts", COLLECTIVE_OPS),
    _Rule("network", "talks to cloud services", CLOUD_OPS),
)


@dataclass(frozen=True)
class ServerOpLibrary:
    """An op library TF Serving's model server links in: its name, the Python package that
    registers its ops here, the distribution that installs it, the glob of its op libraries' files
    in the package, and globs of its op names (to name the library of an op it defines when the
    package is not installed)."""

    name: str
    package: str
    distribution: str
    files: str
    ops: tuple[str, ...]


SERVER_OP_LIBRARIES = (
    # tensorflow_text's ops have no common prefix; the newer ones are "TFText>...".
    ServerOpLibrary("TF Text", "tensorflow_text", "tensorflow-text", "**/_*.so", ("TFText>*",)),
    # TF Serving links TF-DF's inference ops only, not its training ops.
    ServerOpLibrary("TF Decision Forests", "tensorflow_decision_forests",
                    "tensorflow-decision-forests", "tensorflow/ops/inference/*.so",
                    ("SimpleML*",)),
)  # fmt: skip

_UNKNOWN_REASON = (
    "not registered in this process: a custom op that TF Serving runs only if it was built with "
    "the op's library"
)
_LIBRARY_REASON = (
    "registered by an op library loaded into this process (tf.load_op_library), not by "
    "TensorFlow: TF Serving links only TensorFlow's, TF Text's and TF Decision Forests' ops, so it "
    'refuses the model ("Op type not registered") unless it was built with this library'
)


@dataclass(frozen=True)
class FlaggedOp:
    """An op that should not be served: `node` of `function` (`<graph>` for the main graph)."""

    op: str
    category: str  # file | process | network | library | unknown
    function: str
    node: str
    reason: str


@dataclass
class OpScan(JsonResult):
    """Op counts per function (`<graph>`, then library functions by name; ops by count,
    descending), the flagged ops, and the ops of the op libraries TF Serving links in (op →
    library: `SERVER_OP_LIBRARIES`)."""

    json_keys: ClassVar = ("ok", "total_ops", "totals", ...)

    functions: dict[str, dict[str, int]]
    flagged: list[FlaggedOp] = field(default_factory=list)
    linked: dict[str, str] = field(default_factory=dict)

    @property
    def total_ops(self) -> int:
        return sum(sum(counts.values()) for counts in self.functions.values())

    @property
    def ok(self) -> bool:
        return not self.flagged

    def refused(self, allowed: Iterable[str] = ()) -> list[FlaggedOp]:
        """The flagged ops not named in `allowed` (what --allow-op accepts)."""
        accepted = set(allowed)
        return [f for f in self.flagged if f.op not in accepted]

    def linked_by_library(self) -> dict[str, list[str]]:
        """The linked ops per server op library, libraries and ops by name."""
        grouped: dict[str, list[str]] = {}
        for op, library in sorted(self.linked.items()):
            grouped.setdefault(library, []).append(op)
        return dict(sorted(grouped.items()))

    def totals(self) -> dict[str, int]:
        """Op counts over all functions, most frequent first."""
        counter: Counter[str] = Counter()
        for counts in self.functions.values():
            counter.update(counts)
        return dict(_ranked(counter))


def describe_flagged(flagged: Iterable[FlaggedOp]) -> str:
    """One line naming each flagged op, where it is and why."""
    return "; ".join(f"{f.op} ({f.category}) in {f.function}: {f.reason}" for f in flagged)


def scan_saved_model(path: Path | str) -> OpScan:
    """Scan the `serve` MetaGraph of the SavedModel at `path` (read as protobuf, not loaded).

    Raises SavedModelError when `path` is not a SavedModel or has no `serve` MetaGraph.
    """
    return scan_meta_graph(serve_meta_graph(path))


def scan_meta_graph(graph: meta_graph_pb2.MetaGraphDef) -> OpScan:
    """Count the ops of `graph` per function and flag the ones that should not be served."""
    graph_def = graph.graph_def
    library = {f.signature.name: f for f in graph_def.library.function}
    saver_nodes, saver_functions = _saver_scope(graph, library)

    functions: dict[str, dict[str, int]] = {}
    flagged: list[FlaggedOp] = []
    linked: dict[str, str] = {}
    bodies: list[tuple[str, Iterable[node_def_pb2.NodeDef]]] = [(GRAPH, graph_def.node)]
    bodies += [(name, library[name].node_def) for name in sorted(library)]
    for name, nodes in bodies:
        counts: Counter[str] = Counter()
        for node in nodes:
            counts[node.op] += 1
            if node.op in library:  # a call of a library function, scanned on its own
                continue
            in_saver = node.name in saver_nodes if name == GRAPH else name in saver_functions
            hit = _flag(node, in_saver)
            if hit is not None:
                category, reason = hit
                flagged.append(FlaggedOp(node.op, category, name, node.name, reason))
            elif (linked_by := _server_library_of(node.op)) is not None:
                linked[node.op] = linked_by
        functions[name] = dict(_ranked(counts))
    return OpScan(functions=functions, flagged=flagged, linked=dict(sorted(linked.items())))


def _flag(node: node_def_pb2.NodeDef, in_saver: bool) -> tuple[str, str] | None:
    """(category, reason) if `node` should not be served, else None."""
    if node.op == "PrintV2":
        stream = node.attr["output_stream"].s.decode() if "output_stream" in node.attr else ""
        if stream.startswith("file://"):
            return "file", f"prints to a file ({stream})"
        return None
    rule = _rule_for(node.op)
    if rule is _CHECKPOINT_RULE and in_saver:
        return None
    if rule is not None:
        return rule.category, rule.reason
    return _origin(node.op)


@cache
def _origin(op: str) -> tuple[str, str] | None:
    """(category, reason) if `op` is neither TensorFlow's nor a server op library's, else None."""
    if hasattr(_raw_ops(), op) or _server_library_of(op) is not None:
        return None
    if not _registered(op):
        named = [lib for lib in SERVER_OP_LIBRARIES if _pattern(lib.ops).match(op)]
        if named:
            lib = named[0]
            broken = _server_libraries()[1].get(lib.name)
            state = f"it failed to import ({broken})" if broken else "it is not"
            return "unknown", (
                f"an op of {lib.name}, which TF Serving links in; graphserve serves it when "
                f"{lib.distribution} is installed next to its TensorFlow, and {state}"
            )
        return "unknown", _UNKNOWN_REASON
    if op in _tensorflow_ops():
        return None
    return "library", _LIBRARY_REASON


@cache
def _server_library_of(op: str) -> str | None:
    """The server op library that defines `op`, if it is not TensorFlow's own."""
    return None if hasattr(_raw_ops(), op) else server_library_ops().get(op)


def server_library_ops() -> dict[str, str]:
    """The ops of the server op libraries installed here (op → library name), their packages
    imported: every op of theirs is then registered in this process."""
    return dict(_server_libraries()[0])


@cache
def _server_libraries() -> tuple[tuple[tuple[str, str], ...], dict[str, str]]:
    """(op → library pairs, library → why its installed package failed to import)."""
    from tensorflow.core.framework import op_def_pb2
    from tensorflow.python.client import pywrap_tf_session

    found: dict[str, str] = {}
    broken: dict[str, str] = {}
    for lib in SERVER_OP_LIBRARIES:
        if importlib.util.find_spec(lib.package) is None:
            continue
        try:
            package = importlib.import_module(lib.package)  # loads its op libraries
        except Exception as exc:  # built for another TensorFlow, say
            broken[lib.name] = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
            continue
        root = os.path.dirname(package.__file__ or "")
        for path in sorted(glob.glob(os.path.join(root, lib.files), recursive=True)):
            # Loaded already (by the import, same path): TensorFlow returns its op list again.
            try:
                handle = pywrap_tf_session.TF_LoadLibrary(path)
            except Exception:  # a Python extension, not an op library
                continue
            ops = op_def_pb2.OpList.FromString(pywrap_tf_session.TF_GetOpList(handle))
            found.update((o.name, lib.name) for o in ops.op)
    return tuple(found.items()), broken


@cache
def _raw_ops() -> object:
    import tensorflow as tf

    return tf.raw_ops


@cache
def _tensorflow_ops() -> frozenset[str]:
    """The ops TensorFlow registers by itself: tf.raw_ops lists the public ones, and a fresh
    interpreter that imports TensorFlow alone gives the rest (test, TPU and DTensor ops). Asked
    only for an op outside tf.raw_ops, which few graphs have."""
    script = (
        "from tensorflow.core.framework import op_def_pb2\n"
        "from tensorflow.python.client import pywrap_tf_session as c\n"
        "ops = op_def_pb2.OpList.FromString(c.TF_GetBuffer(c.TF_GetAllOpList()))\n"
        "print('\\n'.join(o.name for o in ops.op))\n"
    )
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True
    )
    return frozenset(run.stdout.split())


@cache
def _rule_for(op: str) -> _Rule | None:
    for rule in _RULES:
        if _pattern(rule.patterns).match(op):
            return rule
    return None


@cache
def _pattern(globs: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(translate(g) for g in globs))


@cache
def _registered(op: str) -> bool:
    # Imported here: the registry is TensorFlow's Python runtime, the rest of the scan is protobuf.
    from tensorflow.python.framework import op_def_registry

    return op_def_registry.get(op) is not None


def _saver_scope(
    graph: meta_graph_pb2.MetaGraphDef, library: dict[str, function_pb2.FunctionDef]
) -> tuple[set[str], set[str]]:
    """The variable save/restore machinery: (main-graph nodes, library functions).

    Nodes: everything the saver_def's save, restore and filename tensors depend on (inputs and
    control inputs). Functions: those these nodes call, directly or nested, and that no other
    main-graph node calls, so a serving function never counts as saver machinery.
    """
    saver = graph.saver_def
    roots = [
        _node_name(name)
        for name in (saver.save_tensor_name, saver.restore_op_name, saver.filename_tensor_name)
        if name
    ]
    nodes = {n.name: n for n in graph.graph_def.node}
    saver_nodes = _upstream(roots, nodes)
    saver_calls = _called((nodes[n] for n in saver_nodes), library)
    other_calls = _called((n for n in graph.graph_def.node if n.name not in saver_nodes), library)
    return saver_nodes, saver_calls - other_calls


def _upstream(roots: Iterable[str], nodes: dict[str, node_def_pb2.NodeDef]) -> set[str]:
    """Names of `roots` and every main-graph node they depend on."""
    seen: set[str] = set()
    stack = [r for r in roots if r in nodes]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        stack.extend(n for n in map(_node_name, nodes[name].input) if n in nodes)
    return seen


def _called(
    nodes: Iterable[node_def_pb2.NodeDef], library: dict[str, function_pb2.FunctionDef]
) -> set[str]:
    """Library functions `nodes` call, directly or through nested calls."""
    seen: set[str] = set()
    stack = [f for node in nodes for f in _callees(node, library)]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        for node in library[name].node_def:
            stack.extend(_callees(node, library))
    return seen


def _callees(
    node: node_def_pb2.NodeDef, library: dict[str, function_pb2.FunctionDef]
) -> Iterator[str]:
    """Functions `node` calls: its op if that names a function, and function-valued attrs
    (`f` of (Stateful)PartitionedCall, `body`/`cond` of While, branches of If/Case, ...)."""
    if node.op in library:
        yield node.op
    for value in node.attr.values():
        names = [value.func.name] if value.HasField("func") else [f.name for f in value.list.func]
        yield from (n for n in names if n in library)


def _node_name(tensor: str) -> str:
    """`^name`, `name:0` or `name` → `name`."""
    return tensor.lstrip("^").split(":")[0]


def _ranked(counter: Counter[str]) -> list[tuple[str, int]]:
    return sorted(counter.items(), key=lambda item: (-item[1], item[0]))
