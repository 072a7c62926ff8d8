"""TF Serving's `BatchingParameters` (the `--batching_parameters_file` text proto), read, checked
and written without TensorFlow: the server's batching and `deploy`'s TF Serving flags read it
here (`load_batching_parameters`), the batching tuner writes it (`BatchingParameters.to_text`).

Raises BatchingConfigError (graphserve.core.errors) for parameters TF Serving would refuse.
"""

from __future__ import annotations

import io
import itertools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import message, text_format, wrappers_pb2

from graphserve.core.errors import BatchingConfigError
from graphserve.core.textproto import message_class

__all__ = ["PER_MODEL_BATCHING_FILE", "BatchingParameters", "load_batching_parameters"]

# TF Serving's name for a SavedModel version's own batching parameters
# (`--enable_per_model_batching_parameters`; bundle_factory_util.cc): the server reads it, the
# batching tuner writes it.
PER_MODEL_BATCHING_FILE = "batching_params.pbtxt"


def _max_parallelism() -> int:
    """TensorFlow's `port::MaxParallelism()`: the CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class BatchingParameters:
    """TF Serving's BatchingParameters with its defaults for unset fields.

    The defaults are those of `SharedBatchScheduler::Options` and `QueueOptions` in
    tensorflow/core/kernels/batching_util/shared_batch_scheduler.h, which TF Serving keeps when
    a field is absent (bundle_factory_util.h). Raises BatchingConfigError for values TF Serving
    rejects when it loads a model with them.
    """

    max_batch_size: int = 1000
    batch_timeout_micros: int = 0
    max_enqueued_batches: int = 10
    num_batch_threads: int = field(default_factory=_max_parallelism)
    thread_pool_name: str = "batch_threads"
    enable_large_batch_splitting: bool = False
    max_execution_batch_size: int | None = None  # None: max_batch_size
    allowed_batch_sizes: tuple[int, ...] = ()
    pad_variable_length_inputs: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "allowed_batch_sizes", tuple(self.allowed_batch_sizes))
        problem = self._problem()
        if problem:
            raise BatchingConfigError(problem)

    @property
    def execution_batch_size(self) -> int:
        """The most rows one run of the model gets (before padding)."""
        if self.enable_large_batch_splitting and self.max_execution_batch_size is not None:
            return self.max_execution_batch_size
        return self.max_batch_size

    @property
    def queue_limit(self) -> int:
        """Batches a queue may hold. TF Serving quietly turns 0 into 1 when not splitting,
        because old low-traffic configs rely on it."""
        return self.max_enqueued_batches or 1

    def _problem(self) -> str | None:
        if self.num_batch_threads < 1:
            return f"num_batch_threads must be positive; was {self.num_batch_threads}"
        if self.max_batch_size < 1:
            return f"max_batch_size must be positive; was {self.max_batch_size}"
        if self.batch_timeout_micros < 0:
            return f"batch_timeout_micros must be non-negative; was {self.batch_timeout_micros}"
        if self.max_enqueued_batches < 0 or (
            self.max_enqueued_batches == 0 and self.enable_large_batch_splitting
        ):
            return f"max_enqueued_batches must be positive; was {self.max_enqueued_batches}"
        execution = self.execution_batch_size
        if not 1 <= execution <= self.max_batch_size:
            return (
                "with enable_large_batch_splitting, max_execution_batch_size must be between 1 "
                f"and max_batch_size ({self.max_batch_size}); was {execution}"
            )
        return self._allowed_sizes_problem()

    def _allowed_sizes_problem(self) -> str | None:
        sizes = list(self.allowed_batch_sizes)
        if not sizes:
            return None
        if sizes[0] < 1 or any(b <= a for a, b in itertools.pairwise(sizes)):
            return (
                "allowed_batch_sizes entries must be positive and monotonically increasing; "
                f"got {sizes}"
            )
        if sizes[-1] != self.max_batch_size:
            return (
                "Last entry in allowed_batch_sizes must match max_batch_size; last entry was "
                f"{sizes[-1]}; expected {self.max_batch_size}"
            )
        return None

    def padded_size(self, rows: int) -> int:
        """The smallest allowed batch size that holds `rows` (`rows` if none is configured)."""
        return next((size for size in self.allowed_batch_sizes if size >= rows), rows)

    def to_text(self) -> str:
        """These parameters as a TF Serving `--batching_parameters_file` (text-format
        BatchingParameters, written by protobuf's text_format, one field a line): the four
        knobs every reader looks for (max_batch_size, batch_timeout_micros,
        max_enqueued_batches, num_batch_threads) always, any other field only where it differs
        from TF Serving's default. `load_batching_parameters` of the text gives back equal
        parameters."""
        lines = []
        for name, (_, kind) in _BATCHING_PARAMETERS["BatchingParameters"].items():
            value = getattr(self, name)
            if value is None or (name not in _ALWAYS_WRITTEN and value == getattr(_DEFAULTS, name)):
                continue
            one: Any = _batching_parameters_message()()  # this field alone: one line of text
            if kind.startswith("google."):
                getattr(one, name).value = value
            elif kind.startswith("repeated "):
                getattr(one, name).extend(value)
            else:
                setattr(one, name, value)
            lines.append(
                text_format.MessageToString(
                    one,
                    as_one_line=True,
                    use_short_repeated_primitives=True,
                    message_formatter=_wrapper_value,
                )
            )
        return "\n".join(lines) + "\n"


# -- the parameters file ---------------------------------------------------------------------

# session_bundle_config.proto, message BatchingParameters: (field, number, wrapper type).
# session_bundle_config.proto's BatchingParameters: same package, field names and numbers, so
# text that TF Serving parses parses here, and a typo fails alike (the wheel lacks this proto).
_BATCHING_PARAMETERS = {
    "BatchingParameters": {
        "max_batch_size": (1, "google.protobuf.Int64Value"),
        "batch_timeout_micros": (2, "google.protobuf.Int64Value"),
        "max_enqueued_batches": (3, "google.protobuf.Int64Value"),
        "num_batch_threads": (4, "google.protobuf.Int64Value"),
        "thread_pool_name": (5, "google.protobuf.StringValue"),
        "allowed_batch_sizes": (6, "repeated int64"),
        "pad_variable_length_inputs": (7, "bool"),
        "enable_large_batch_splitting": (8, "google.protobuf.BoolValue"),
        "max_execution_batch_size": (9, "google.protobuf.Int64Value"),
    }
}


def _batching_parameters_message() -> type[message.Message]:
    return message_class("tensorflow.serving", _BATCHING_PARAMETERS, "BatchingParameters")


# What `to_text` writes whatever its value: what a reader of the file looks for first.
_ALWAYS_WRITTEN = frozenset(
    ("max_batch_size", "batch_timeout_micros", "max_enqueued_batches", "num_batch_threads")
)
_DEFAULTS = BatchingParameters()


def _wrapper_value(wrapper: Any, _indent: int, _one_line: bool) -> str | None:
    """A wrapper's `value` written even when it is the default (`{ value: 0 }`, where
    text_format alone writes `{ }`); None (text_format's own) for any other message."""
    if wrapper.DESCRIPTOR.file.name != wrappers_pb2.DESCRIPTOR.name:
        return None
    out = io.StringIO()
    field = wrapper.DESCRIPTOR.fields_by_name["value"]
    text_format.PrintField(field, wrapper.value, out, as_one_line=True)
    return out.getvalue().strip()


def load_batching_parameters(path: Path) -> BatchingParameters:
    """Parse a TF Serving `--batching_parameters_file` (text-format BatchingParameters).

    Raises BatchingConfigError naming the file and the problem: unreadable, a syntax error or
    unknown field (with its line and column), or values TF Serving would reject.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise BatchingConfigError(f"cannot read batching parameters file {path}: {exc}") from None
    parsed: Any = _batching_parameters_message()()
    try:
        text_format.Parse(text, parsed)
    except text_format.ParseError as exc:
        raise BatchingConfigError(f"batching parameters file {path}: {exc}") from None
    given = {
        name: getattr(parsed, name).value
        for name, (_, kind) in _BATCHING_PARAMETERS["BatchingParameters"].items()
        if kind.startswith("google.") and parsed.HasField(name)
    }
    try:
        return BatchingParameters(
            **given,
            allowed_batch_sizes=tuple(parsed.allowed_batch_sizes),
            pad_variable_length_inputs=parsed.pad_variable_length_inputs,
        )
    except BatchingConfigError as exc:
        raise BatchingConfigError(f"batching parameters file {path}: {exc}") from None


# -- the batching runner ---------------------------------------------------------------------
