"""Request logging, as TF Serving defines it: a model's `logging_config` in the model config file.

    config {
      name: "mlp"
      base_path: "/models/mlp"
      logging_config {
        log_collector_config { filename_prefix: "/var/log/graphserve/mlp" }
        sampling_config { sampling_rate: 0.1 }
      }
    }

A sampled request is written, once answered, as TF Serving's `PredictionLog`: the request, the
response and `LogMetadata` (the model spec with the version that answered, the sampling config,
the SavedModel's tags, the arrival time; its nanoseconds as core.predictionlog says). A REST
request is logged as the gRPC request message it is equivalent to. The records go to TFRecord
files named from the prefix (`PREFIX-<UTC start>-<pid>-<n>.tfrecord`, readable by their owner
alone: logs hold users' data), a new file past `file_bytes`, the oldest deleted past
`total_bytes`.

Logging never fails or holds up a request: the request only puts what it already has on a
bounded queue; one writer thread builds and writes the records. A full queue (a slow disk), a
failed write (a full disk, a directory removed) drops records, counted in the metrics by model
and reason and said in the server's log (once a minute at most); the writer tries again with a
new file. TF Serving's open-source server refuses to start with a `logging_config` ("No
request-logger-creator provided", tensorflow/serving#408): this is graphserve's own.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import random
import struct
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import google_crc32c
from google.protobuf.message import Message
from tensorflow_serving.apis import prediction_log_pb2
from tensorflow_serving.config import logging_config_pb2

from graphserve.core.errors import ModelConfigError
from graphserve.core.predictionlog import set_arrival
from graphserve.serving.options import (
    DEFAULT_FILE_BYTES,
    DEFAULT_QUEUE_RECORDS,
    DEFAULT_TOTAL_BYTES,
    LogLimits,
)

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from graphserve.serving.servable import Servable

__all__ = [
    "DEFAULT_FILE_BYTES",
    "DEFAULT_QUEUE_RECORDS",
    "DEFAULT_TOTAL_BYTES",
    "LogLimits",
    "LogSettings",
    "RequestLogs",
    "log_settings",
]

log = logging.getLogger("graphserve.requestlog")

_SAY_EVERY_S = 60.0  # a drop is said in the server's log at most this often
# The writer wakes at most this often: what arrived meanwhile is written and flushed together.
# Woken per record, it cost each logged request a thread hand-off, a flush and a stat (T1 of
# `bench traffic` measured 2.08x the server's CPU per request over REST at rate 1.0).
_DRAIN_S = 0.025
_BATCH_RECORDS = 4096  # at most this many records a drain (and one stat, for a removed file)
_SUFFIX = ".tfrecord"
_FRAMING = 16  # a TFRecord's length, its CRC and the data's CRC
_MASK_DELTA = 0xA282EAD8
# The PredictionLog field each kind of request is logged in, with its request and response
# messages' fields: predict_log { request response }, ...
KINDS = ("predict", "classify", "regress", "multi_inference")


@dataclass(frozen=True)
class LogSettings:
    """One model's request logging: TF Serving's LoggingConfig, checked."""

    model: str
    prefix: Path  # the files are PREFIX-...tfrecord
    rate: float  # the share of requests logged, in [0, 1]
    config: logging_config_pb2.LoggingConfig  # as given, written into every record's metadata


def log_settings(model: str, config: logging_config_pb2.LoggingConfig | str) -> LogSettings | None:
    """`model`'s settings from its `logging_config` (the message, or its text as
    core.modelconfig keeps it); None when it has none. Raises ModelConfigError naming the model
    and the field: a prefix that is empty or whose directory cannot be written, a sampling rate
    outside [0, 1]. The prefix's directory is made (owner only) if it is missing."""
    if isinstance(config, str):
        from google.protobuf import text_format

        text, config = config, logging_config_pb2.LoggingConfig()
        text_format.Parse(text, config)
    if not config.HasField("log_collector_config") and not config.HasField("sampling_config"):
        return None
    where = f"model {model!r}: logging_config"
    prefix = config.log_collector_config.filename_prefix
    if not prefix:
        raise ModelConfigError(
            f"{where}: log_collector_config.filename_prefix is empty; expected the path the "
            "log files start with, such as /var/log/graphserve/{model}"
        )
    rate = config.sampling_config.sampling_rate
    if not 0.0 <= rate <= 1.0:
        raise ModelConfigError(
            f"{where}: sampling_config.sampling_rate {rate} is outside [0, 1]; expected the "
            "share of requests to log (1 logs every request)"
        )
    kind = config.log_collector_config.type
    if kind not in ("", "tfrecord"):
        log.warning(
            "%s: log_collector_config.type %r: graphserve writes TFRecord files whatever the "
            "type says",
            where,
            kind,
        )
    path = Path(prefix)
    directory = path.parent
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise ModelConfigError(
            f"{where}: cannot make the directory of filename_prefix {prefix!r}: {exc.strerror}"
        ) from None
    if not directory.is_dir() or not os.access(directory, os.W_OK | os.X_OK):
        raise ModelConfigError(
            f"{where}: filename_prefix {prefix!r}: {directory} is not a directory this server "
            "may write to"
        )
    return LogSettings(model, path, rate, config)


class _Counts:
    """The metrics: records written and dropped, by model and reason, and bytes written."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        from prometheus_client import Counter

        self.records = Counter(
            "graphserve_request_log_records",
            "Requests logged (outcome written), or sampled and not logged (outcome dropped, "
            "with the reason: queue_full, write_failed).",
            ("model", "outcome", "reason"),
            registry=registry,
        )
        self.bytes = Counter(
            "graphserve_request_log_bytes",
            "Bytes written to the request log files, framing included.",
            ("model",),
            registry=registry,
        )


class _File:
    """One model's open log file and the files it wrote before. Records are framed here and
    written a drain at a time, in one `write` (see `_frame`)."""

    def __init__(self, settings: LogSettings) -> None:
        self.settings = settings
        self.fd: int | None = None
        self.path: Path | None = None
        self.size = 0
        self.sequence = 0
        self.buffer = bytearray()  # framed records not yet written
        self.pending = 0  # records framed since the last flush, and their bytes
        self.pending_bytes = 0
        self.written: list[tuple[Path, int]] = []  # closed files, oldest first, and sizes

    def open(self) -> None:
        settings = self.settings
        settings.prefix.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.sequence += 1
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        path = Path(f"{settings.prefix}-{stamp}-{os.getpid()}-{self.sequence:05d}{_SUFFIX}")
        # owner only, before a byte is written
        self.fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        self.path, self.size = path, 0

    def add(self, data: bytes) -> None:
        framed = _frame(data)
        self.buffer += framed
        self.size += len(framed)
        self.pending += 1
        self.pending_bytes += len(framed)

    def flush(self) -> None:
        """Write what was added (raises OSError, the file then holds part of it at most)."""
        assert self.fd is not None
        view, done = memoryview(self.buffer), 0
        try:
            while done < len(view):
                done += os.write(self.fd, view[done:])
        finally:
            view.release()
        self.buffer.clear()

    def close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is None:
            return
        try:
            os.close(fd)
        finally:
            assert self.path is not None
            self.written.append((self.path, self.size))

    def abandon(self) -> None:
        """After a failed write: drop the file (it may be gone) and what waits for it."""
        self.buffer.clear()
        with contextlib.suppress(OSError):
            self.close()

    def cut(self, size: int) -> None:
        """Cut the file just given up back to `size`, its records known written whole, so a
        reader never meets a record a failed write cut short; a file left empty is removed."""
        if not self.written:
            return
        path, _ = self.written.pop()
        try:
            if size:
                os.truncate(path, size)
            else:
                path.unlink()
        except OSError:  # gone with its directory, or not ours to change: nothing to keep
            return
        if size:
            self.written.append((path, size))

    def trim(self, total_bytes: int) -> None:
        """Delete the oldest closed files until the model's files hold `total_bytes` at most."""
        held = self.size + sum(size for _, size in self.written)
        while self.written and held > total_bytes:
            path, size = self.written.pop(0)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            held -= size


class RequestLogs:
    """The server's request logs: each logging model's settings, one writer thread for all.

    The front ends ask `sample(model)` once a request is answered; for a sampled request they
    hand `record(...)` what they have (messages, or a function that builds them, which the
    writer calls) and go on."""

    def __init__(
        self,
        settings: Iterable[LogSettings] = (),
        limits: LogLimits | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.limits = limits or LogLimits()
        self._settings: dict[str, LogSettings] = {s.model: s for s in settings}
        self._files: dict[str, _File] = {}
        self._queue: queue.Queue[tuple[Any, ...] | None] = queue.Queue(self.limits.queue_records)
        self._counts = _Counts(registry)
        self._said: dict[str, float] = {}
        self._closed = False
        self._thread = threading.Thread(target=self._write, name="request-log", daemon=True)
        self._thread.start()

    @property
    def models(self) -> Mapping[str, LogSettings]:
        return self._settings

    def configure(self, settings: Iterable[LogSettings]) -> None:
        """New settings (a reloaded model config): a model whose prefix changed starts a new
        file, one no longer logged closes its file."""
        self._settings = {s.model: s for s in settings}  # one assignment: readers see either
        self._queue.put(("reconfigure",))

    def sample(self, model: str) -> LogSettings | None:
        """The settings to log this request of `model` with, or None (not logged)."""
        settings = self._settings.get(model)
        if settings is None or self._closed:
            return None
        rate = settings.rate
        if rate >= 1.0 or (rate > 0.0 and random.random() < rate):
            return settings
        return None

    def record(
        self,
        settings: LogSettings,
        kind: str,
        servable: Servable,
        signature_name: str,
        arrived_ns: int,
        request: Message | Callable[[], Message],
        response: Message | bytes | Callable[[], Message],
    ) -> None:
        """Queue one record; never blocks. `kind` is one of KINDS; `request` and `response`
        are the messages (a response may be its serialized bytes) or functions making them."""
        served = (servable.name, servable.version, servable.runner.kind, signature_name)
        try:
            item = ("record", settings, kind, *served, arrived_ns, request, response)
            self._queue.put_nowait(item)
        except queue.Full:
            self._dropped(servable.name, "queue_full", "the writer is behind (a slow disk?)")

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued (for up to `timeout` s), close the files, stop the writer."""
        if self._closed:
            return
        self._closed = True
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._queue.put(None, timeout=max(0.01, deadline - time.monotonic()))
                break
            except queue.Full:
                if time.monotonic() >= deadline:
                    break
        self._thread.join(max(0.0, deadline - time.monotonic()))

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every queued record is written and the files flushed (tests, shutdown);
        True if that happened within `timeout` s."""
        done = threading.Event()
        try:
            self._queue.put(("flush", done), timeout=timeout)
        except queue.Full:
            return False
        return done.wait(timeout)

    # ------------------------------------------------------------------ the writer thread

    def _write(self) -> None:
        while True:
            item = self._queue.get()
            if item is not None and item[0] == "record":
                time.sleep(_DRAIN_S)  # let what follows gather: one wake-up, one flush for all
            batch = [item]
            while item is not None and len(batch) < _BATCH_RECORDS:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                batch.append(item)
            for entry in batch:
                if entry is None:
                    self._flush_all()
                    for model, file in self._files.items():
                        try:
                            file.close()
                        except Exception as exc:
                            self._dropped(model, "write_failed", f"closing {file.path}: {exc}", 0)
                    return
                if entry[0] == "record":
                    self._write_one(*entry[1:])
                elif entry[0] == "reconfigure":
                    self._reconfigured()
            self._flush_all()
            for entry in batch:
                if entry is not None and entry[0] == "flush":
                    entry[1].set()

    def _write_one(
        self,
        settings: LogSettings,
        kind: str,
        model: str,
        version: int,
        runner_kind: str,
        signature_name: str,
        arrived_ns: int,
        request: Any,
        response: Any,
    ) -> None:
        served = (model, version, runner_kind, signature_name)
        try:
            data = _record(settings, kind, served, arrived_ns, request, response)
        except Exception as exc:
            self._dropped(model, "write_failed", f"the record could not be built: {exc}")
            return
        file = self._files.get(model)
        if file is None or file.settings.prefix != settings.prefix:
            if file is not None:
                self._flush_all()
                file.abandon()
            file = self._files[model] = _File(settings)
        try:
            if file.fd is None or file.size + len(data) + _FRAMING > self.limits.file_bytes:
                if file.fd is not None:
                    self._flush_all()
                    file.close()
                file.trim(self.limits.total_bytes - self.limits.file_bytes)  # room for it
                file.open()
        except OSError as exc:
            self._failed(model, file, f"opening a file for {file.settings.prefix} failed: {exc}", 1)
            return
        file.add(data)

    def _failed(self, model: str, file: _File, why: str, more: int = 0) -> None:
        """A file that cannot be written: given up, what it held unflushed dropped and counted
        (`more`: records that never reached it); the next record opens a new one."""
        lost, good = file.pending + more, file.size - file.pending_bytes
        file.pending = file.pending_bytes = 0
        file.abandon()
        file.cut(good)
        self._dropped(model, "write_failed", why, lost)

    def _flush_all(self) -> None:
        """Flush every open file; what a flush wrote is counted written only then."""
        for model, file in self._files.items():
            if file.fd is None or not file.pending:
                continue
            try:
                file.flush()
            except OSError as exc:
                self._failed(model, file, f"flushing {file.path} failed: {exc}")
                continue
            if file.path is not None and not file.path.exists():  # its directory removed
                self._failed(model, file, f"{file.path} was removed; a new file is started")
                continue
            self._counts.records.labels(model, "written", "").inc(file.pending)
            self._counts.bytes.labels(model).inc(file.pending_bytes)
            file.pending = file.pending_bytes = 0

    def _reconfigured(self) -> None:
        for model in list(self._files):
            settings = self._settings.get(model)
            if settings is None or settings.prefix != self._files[model].settings.prefix:
                self._flush_all()
                self._files.pop(model).abandon()

    def _dropped(self, model: str, reason: str, why: str, count: int = 1) -> None:
        if count:
            self._counts.records.labels(model, "dropped", reason).inc(count)
        now = time.monotonic()
        if now - self._said.get(reason, -_SAY_EVERY_S) >= _SAY_EVERY_S:
            self._said[reason] = now
            log.warning(
                "request log of model %r: records dropped (%s): %s; serving goes on "
                '(graphserve_request_log_records{outcome="dropped"} counts them; this is '
                "said once a minute at most)",
                model,
                reason,
                why,
            )


def _record(
    settings: LogSettings,
    kind: str,
    served: tuple[str, int, str, str],
    arrived_ns: int,
    request: Any,
    response: Any,
) -> bytes:
    """One serialized PredictionLog: `served` is the model, version, runner kind and signature
    that answered."""
    model, version, runner_kind, signature_name = served
    record = prediction_log_pb2.PredictionLog()
    metadata = record.log_metadata
    metadata.model_spec.name = model
    metadata.model_spec.version.value = version
    metadata.model_spec.signature_name = signature_name
    metadata.sampling_config.CopyFrom(settings.config.sampling_config)
    if runner_kind == "graph":
        metadata.saved_model_tags.append("serve")
    set_arrival(metadata, arrived_ns)
    entry = getattr(record, f"{kind}_log")
    request = request() if callable(request) else request
    response = response() if callable(response) else response
    entry.request.CopyFrom(request)
    if isinstance(response, bytes):
        entry.response.MergeFromString(response)
    else:
        entry.response.CopyFrom(response)
    return record.SerializeToString()


def _masked_crc(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def _frame(data: bytes) -> bytes:
    """One TFRecord, as TensorFlow's record_writer.cc frames it: the data's length (uint64,
    little-endian), its masked CRC32C, the data, the data's masked CRC32C. Framed here rather
    than by tf.io.TFRecordWriter, whose `write` released and took back the GIL once a record:
    in a server logging every request that cost the front end's threads more than building the
    records did (T1 of `bench traffic`)."""
    length = struct.pack("<Q", len(data))
    return b"".join(
        (length, struct.pack("<I", _masked_crc(length)), data, struct.pack("<I", _masked_crc(data)))
    )
