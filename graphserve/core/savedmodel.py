"""Reading a SavedModel's `saved_model.pb` as protobuf, without loading the model.

TF Serving decides what a version offers from this file alone (the MetaGraph tagged `serve` and its
SignatureDefs); reading it the same way is fast, runs no model code, and works on SavedModels whose
ops this TensorFlow cannot run.

ExportError
└── SavedModelError         the path is not a readable SavedModel, or lacks the wanted MetaGraph
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from google.protobuf import message, text_format
from tensorflow.core.protobuf import meta_graph_pb2, saved_model_pb2

from graphserve.core.errors import SavedModelError

__all__ = [
    "SERVE_TAGS",
    "SavedModelError",
    "find_saved_model_file",
    "meta_graph",
    "predicted_resident_bytes",
    "read_saved_model",
    "serve_meta_graph",
    "signature_defs",
    "variables_bytes",
]

# The tag-set TF Serving loads (tensorflow::kSavedModelTagServe).
SERVE_TAGS = frozenset({"serve"})

# The names TF writes, binary first (what TF Serving and tf.saved_model.load prefer).
_PB = "saved_model.pb"
_PBTXT = "saved_model.pbtxt"


def find_saved_model_file(path: Path | str) -> Path | None:
    """`path/saved_model.pb` (or `.pbtxt`) if `path` holds one, else None."""
    for name in (_PB, _PBTXT):
        candidate = Path(path) / name
        if candidate.is_file():
            return candidate
    return None


def read_saved_model(path: Path | str) -> saved_model_pb2.SavedModel:
    """Parse `path/saved_model.pb` (or `.pbtxt`).

    Raises SavedModelError naming the path when it does not exist, is not a directory, holds no
    saved_model.pb, or the file is not a SavedModel protobuf.
    """
    path = Path(path)
    if not path.exists():
        raise SavedModelError(f"{path} does not exist: expected a SavedModel directory")
    if not path.is_dir():
        raise SavedModelError(f"{path} is not a directory: expected a SavedModel directory")
    pb = find_saved_model_file(path)
    if pb is None:
        raise SavedModelError(f"{path} is not a SavedModel directory: it holds no {_PB}")
    saved = saved_model_pb2.SavedModel()
    try:
        if pb.name == _PBTXT:
            text_format.Parse(pb.read_text(), saved)
        else:
            saved.ParseFromString(pb.read_bytes())
    except (message.DecodeError, text_format.ParseError, UnicodeDecodeError) as exc:
        raise SavedModelError(f"{pb} is not a valid SavedModel protobuf: {exc}") from None
    except OSError as exc:
        raise SavedModelError(f"{pb} cannot be read: {exc}") from None
    if not saved.meta_graphs:
        raise SavedModelError(f"{pb} holds no MetaGraph: not a usable SavedModel")
    return saved


def meta_graph(
    saved: saved_model_pb2.SavedModel, tags: Iterable[str] = SERVE_TAGS
) -> meta_graph_pb2.MetaGraphDef:
    """The first MetaGraphDef whose tags include all of `tags`.

    Raises SavedModelError listing the tag-sets present when none matches.
    """
    wanted = set(tags)
    for graph in saved.meta_graphs:
        if wanted <= set(graph.meta_info_def.tags):
            return graph
    present = ", ".join(str(sorted(g.meta_info_def.tags)) for g in saved.meta_graphs)
    raise SavedModelError(
        f"no MetaGraph tagged {sorted(wanted)}; the tag-sets present are {present or 'none'}"
    )


def serve_meta_graph(path: Path | str) -> meta_graph_pb2.MetaGraphDef:
    """The MetaGraphDef tagged `serve` of the SavedModel at `path`: what TF Serving loads.

    Raises SavedModelError naming the path, as `read_saved_model` and `meta_graph` do.
    """
    saved = read_saved_model(path)
    try:
        return meta_graph(saved)
    except SavedModelError as exc:
        raise SavedModelError(f"{path}: {exc}") from None


def signature_defs(path: Path | str) -> dict[str, meta_graph_pb2.SignatureDef]:
    """The SignatureDefs of `path`'s `serve` MetaGraph, by signature key.

    Raises SavedModelError as `serve_meta_graph` does.
    """
    return dict(serve_meta_graph(path).signature_def)


# A loaded version's memory beyond its files: a Session, its executor and kernels (about 1 MiB
# for the example MLP, measured by `python -m tools.bench many`), and the graph held as C++ and
# Python objects (about 20 bytes per byte of saved_model.pb).
_SESSION_BYTES = 1 << 20
_GRAPH_FACTOR = 20


def predicted_resident_bytes(path: Path | str) -> int:
    """What the version at `path` is predicted to hold once loaded: its variables, its graph
    times `_GRAPH_FACTOR`, and a Session's fixed cost. A prediction from the files (the server
    measures each version when it loads it, and budgets with that from then on)."""
    path = Path(path)
    graph = find_saved_model_file(path)
    graph_bytes = graph.stat().st_size if graph is not None else 0
    return variables_bytes(path) + _GRAPH_FACTOR * graph_bytes + _SESSION_BYTES


def variables_bytes(path: Path | str) -> int:
    """The size of the version's variables (its checkpoint's data files), 0 without any."""
    return sum(f.stat().st_size for f in (Path(path) / "variables").glob("variables.data-*"))
