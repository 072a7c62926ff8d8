"""Server-side batching as TensorFlow Serving does it (`--enable_batching`).

`BatchingRunner` wraps any runner. Concurrent requests to one signature wait in a queue; a batch
thread merges them along dimension 0, pads the batch up to an allowed size, runs it once and hands
each request its own rows. The knobs are TF Serving's `BatchingParameters`, read from the same
text-proto file as TF Serving's `--batching_parameters_file`:

    max_batch_size { value: 32 }
    batch_timeout_micros { value: 2000 }
    max_enqueued_batches { value: 8 }
    num_batch_threads { value: 4 }
    allowed_batch_sizes: 8
    allowed_batch_sizes: 32

The behaviour follows TF Serving's SharedBatchScheduler (queueing, timeout, rejection) and its
BatchingSession (merging, padding, splitting the outputs):

- a batch runs once a batch thread is free and the batch holds max_batch_size rows, or
  batch_timeout_micros have passed since its first request;
- a request that needs a new batch while max_enqueued_batches are queued fails at once with
  Unavailable, so queueing delay stays bounded;
- a request whose deadline (graphserve.serving.deadline) passes while it waits fails with
  DeadlineExceeded when its batch comes up, and is not run;
- a request larger than max_batch_size fails with InvalidInput. With enable_large_batch_splitting
  a request may be split across batches of max_execution_batch_size rows;
- padding repeats a real row (the first row of the batch's last request), so it is always a valid
  input, and the padded rows are dropped from the outputs;
- every output must have the batch as its first dimension; any other output fails the batch with
  FailedPrecondition.

Two differences from TF Serving. Requests whose inputs differ in dtype or non-batch shape never
share a batch: they wait in separate queues instead of failing the batch they land in. And a
request whose client leaves while it waits (graphserve.serving.deadline's Cancellation: a
cancelled gRPC call, a closed REST connection) leaves the queue unrun, failing with Cancelled:
at once where the front end says when (gRPC, whose call ended by its deadline leaves then too),
when its batch comes up otherwise (REST); TF Serving runs every request it has queued. One a
batch thread has taken runs on, and its answer goes to nobody.

The threads: a request thread queues its rows and blocks on one lock until its answer is in; a
request on an asyncio loop (the asyncio gRPC front end, `run_async`) awaits it instead, holding
no thread, so the front end needs no thread per waiting request. A batch thread is woken only
when there is something for it to do, a batch opened (to time it) or one full; the Python
thread switches and GIL hand-offs of waking it on every request cost more than batching the
MLP saved (tools/bench/README.md has the profile).

The parameters are read and checked in graphserve.core.batchingparams.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from graphserve.core.batchingparams import BatchingParameters, load_batching_parameters
from graphserve.core.errors import (
    BatchingConfigError,
    Cancelled,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidInput,
    ServingError,
    Unavailable,
)
from graphserve.serving.deadline import (
    RUNNING,
    Cancellation,
    client_gone,
    current_cancellation,
    current_deadline,
)
from graphserve.serving.runner import Runner

if TYPE_CHECKING:
    from graphserve.serving.signature import ServedSignature

__all__ = [
    "BatchingConfigError",
    "BatchingParameters",
    "BatchingRunner",
    "BatchingStats",
    "load_batching_parameters",
]

Arrays = dict[str, np.ndarray]
_QueueKey = tuple[str, Hashable]  # (signature, what requests must share to share a batch)
_WAITED = "while it waited to be batched"  # ends the message of a request dropped unrun


@dataclass(frozen=True)
class BatchingStats:
    """Counters since the runner started, plus the rows waiting now."""

    batches: int = 0  # runs of the wrapped runner
    requests: int = 0  # requests (or pieces of split requests) in those runs
    rows: int = 0  # rows the requests brought
    padding_rows: int = 0  # rows added to reach an allowed batch size
    rejected: int = 0  # requests turned away because the queue was full
    failed_batches: int = 0  # runs that raised; every request in them got the error
    expired: int = 0  # requests whose deadline passed in the queue: dropped, never run
    cancelled: int = 0  # requests whose client left while they were queued: dropped, never run
    queued_rows: int = 0  # rows waiting in the queues at the time of the snapshot


_Waiter = tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]


class _Piece:
    """A request, or one piece of a request split across batches, and its answer.

    The request blocks in `answer()` (a thread) or awaits `answer_async()` (a coroutine)
    until a batch thread calls `finish()`. The hand-off is one lock, taken at creation and
    released when the answer is in: the cheapest wake-up CPython has (a
    `concurrent.futures.Future` builds a Condition, an RLock and a waiter lock per request;
    tools/bench/README.md has what each cost). A coroutine also leaves its loop and a future
    (`_waiter`), which the batch thread resolves once the batch is answered (`_wake`).
    """

    __slots__ = (
        "_done",
        "_error",
        "_outputs",
        "_waiter",
        "batch",
        "cancellation",
        "deadline",
        "finished",
        "inputs",
        "rows",
        "taken",
    )

    def __init__(
        self,
        inputs: Arrays,
        rows: int,
        deadline: float | None = None,
        cancellation: Cancellation | None = None,
    ) -> None:
        self.inputs = inputs
        self.rows = rows
        self.deadline = deadline  # the request's (graphserve.serving.deadline), monotonic time
        self.cancellation = cancellation  # ... and whether its client still waits
        self.batch: _Batch | None = None  # the batch it joined
        self.taken = False  # a batch thread took it to run: it cannot leave (set under the lock)
        self.finished = False  # `finish` has answered it
        self._outputs: Arrays | None = None
        self._error: BaseException | None = None
        self._waiter: _Waiter | None = None
        self._done = threading.Lock()
        self._done.acquire()

    def finish(
        self, outputs: Arrays | None = None, error: BaseException | None = None
    ) -> _Waiter | None:
        """Hand the answer (or the error) to the request; called once. Returns the waiter of
        a coroutine awaiting it, for the caller to `_wake` with the rest of its batch."""
        self._outputs, self._error = outputs, error
        self.finished = True
        self._done.release()
        return self._waiter  # read after the release: see answer_async

    def answer(self) -> Arrays:
        """Block until `finish`; the outputs, or raise the error."""
        self._done.acquire()
        if self._error is not None:
            raise self._error
        assert self._outputs is not None
        return self._outputs

    async def answer_async(self) -> Arrays:
        """`answer` for a coroutine: await `finish` on the running loop, holding no thread."""
        if self._done.locked():
            loop = asyncio.get_running_loop()
            finished: asyncio.Future[None] = loop.create_future()
            self._waiter = (loop, finished)
            # `finish` releases, then reads `_waiter`: if the lock is still held here, it will
            # see the waiter; if not, it finished before and there is nothing to wait for.
            if self._done.locked():
                await finished
        return self.answer()


def _wake(waiters: list[_Waiter | None]) -> None:
    """Resume the coroutines awaiting a batch's answers: one call into each loop, not one per
    request. Each call writes to the loop's pipe, and the batch thread gives up the GIL to
    write and waits to get it back from the loop: per request, that wait was most of a
    batch's time on the MLP (tools/bench/README.md)."""
    by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
    for waiter in waiters:
        if waiter is not None:
            by_loop.setdefault(waiter[0], []).append(waiter[1])
    for loop, futures in by_loop.items():
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
            loop.call_soon_threadsafe(_settle, futures)


def _settle(futures: list[asyncio.Future[None]]) -> None:
    for finished in futures:
        if not finished.done():  # a cancelled request stopped waiting
            finished.set_result(None)


@dataclass(eq=False)  # a batch is itself: found in its queue by identity
class _Batch:
    key: _QueueKey
    pieces: list[_Piece] = field(default_factory=list)
    rows: int = 0
    opened: float = 0.0  # time.monotonic() when its first piece arrived


class BatchingRunner(Runner):
    """A Runner that batches concurrent requests for the runner it wraps, as TF Serving does.

    Requests to one signature with the same input names, dtypes and non-batch shapes (with
    pad_variable_length_inputs: ranks) share a queue; `num_batch_threads` threads serve all
    queues round-robin. `run` blocks until its rows come back. Call `close()` to stop; it
    first runs what is queued, then closes the wrapped runner if it `owns` it (the loaders'
    wrappers do; a test wrapping a shared runner does not).
    """

    def __init__(
        self, runner: Runner, params: BatchingParameters | None = None, *, owns: bool = False
    ) -> None:
        self.runner = runner
        self.owns = owns
        self.params = params or BatchingParameters()
        self.kind = runner.kind
        self.execution = runner.execution
        self.path = runner.path
        self.on_caller = False  # the batch threads run the model
        self.signatures: dict[str, ServedSignature] = runner.signatures
        self._cond = threading.Condition()
        # Each deque holds non-empty batches; the last is open, the others are full.
        self._queues: OrderedDict[_QueueKey, deque[_Batch]] = OrderedDict()
        self._counts: Counter[str] = Counter()
        self._closed = False
        self._threads = [
            threading.Thread(
                target=self._work, name=f"{self.params.thread_pool_name}_{i}", daemon=True
            )
            for i in range(self.params.num_batch_threads)
        ]
        for thread in self._threads:
            thread.start()

    # -- the Runner protocol ---------------------------------------------------------------

    def trace_counts(self) -> dict[str, int]:
        return self.runner.trace_counts()

    def run(self, signature: str, inputs: Arrays) -> Arrays:
        """Queue the request, wait for its batch, return its rows of every output.

        Raises InvalidInput (no batch dimension, more than max_batch_size rows), Unavailable
        (queue full, or closed), Cancelled or DeadlineExceeded when its client left while it
        waited (graphserve.serving.deadline), and whatever the wrapped runner raised for the
        batch.
        """
        pieces = self._submit(signature, inputs)
        if pieces is None:
            return self.runner.run(signature, inputs)
        cancellation = pieces[0].cancellation
        if cancellation is not None:
            cancellation.when_cancelled(partial(self._withdraw, pieces))
        return _joined([piece.answer() for piece in pieces])

    async def run_async(self, signature: str, inputs: Arrays) -> Arrays:
        """`run` for a coroutine: the request waits for its batch on the running loop, holding
        no thread while it waits. A coroutine cancelled meanwhile (its client left) takes its
        rows out of the queue."""
        pieces = self._submit(signature, inputs)
        if pieces is None:
            return await self.runner.run_async(signature, inputs)
        try:
            return _joined([await piece.answer_async() for piece in pieces])
        except asyncio.CancelledError:
            self._withdraw(pieces)
            raise

    def _submit(self, signature: str, inputs: Arrays) -> list[_Piece] | None:
        """Queue the request's pieces; None for a request with no rows (nothing to merge or
        pad: it runs unbatched)."""
        if signature not in self.signatures:
            raise FailedPrecondition(f"unknown signature {signature!r}")
        rows = _batch_rows(inputs)
        if rows == 0:
            return None
        return self._enqueue(self._queue_key(signature, inputs), inputs, rows)

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def stats(self) -> BatchingStats:
        with self._cond:
            queued = sum(b.rows for batches in self._queues.values() for b in batches)
            return BatchingStats(**self._counts, queued_rows=queued)

    def close(self) -> None:
        """Refuse new requests, run every queued one, then stop the batch threads."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join()
        if self.owns:
            self.runner.close()

    def __enter__(self) -> BatchingRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- enqueueing (request threads) ------------------------------------------------------

    def _queue_key(self, signature: str, inputs: Arrays) -> _QueueKey:
        if self.params.pad_variable_length_inputs:
            return signature, tuple(sorted((k, v.dtype.str, v.ndim) for k, v in inputs.items()))
        return signature, tuple(sorted((k, v.dtype.str, v.shape[1:]) for k, v in inputs.items()))

    def _enqueue(self, key: _QueueKey, inputs: Arrays, rows: int) -> list[_Piece]:
        limit = self.params.execution_batch_size
        deadline, cancellation = current_deadline(), current_cancellation()
        with self._cond:
            if self._closed:
                raise Unavailable("the batching runner is closed: the model is being unloaded")
            batches = self._queues.get(key) or deque()
            self._check_capacity(batches, rows)
            pieces = []
            start = 0
            opened = 0
            for size in self._piece_sizes(batches[-1].rows if batches else 0, rows):
                piece_inputs = inputs if size == rows else _rows(inputs, start, size)
                piece = _Piece(piece_inputs, size, deadline, cancellation)
                pieces.append(piece)
                start += size
                if not batches or batches[-1].rows + size > limit:
                    batches.append(_Batch(key, opened=time.monotonic()))
                    opened += 1
                piece.batch = batches[-1]
                batches[-1].pieces.append(piece)
                batches[-1].rows += size
            self._queues[key] = batches
            # Wake a batch thread only when it has something to do: a new batch (whose timeout
            # it must start timing) or one now full. Waking them on every request, as before,
            # cost each request a thread switch and the GIL hand-offs that go with it.
            if opened or batches[0].rows >= limit:
                self._cond.notify(max(opened, 1))
        return pieces

    def _check_capacity(self, batches: deque[_Batch], rows: int) -> None:
        """TF Serving's admission rules (`ValidateBatchTaskQueueCapacity`)."""
        p = self.params
        if rows > p.max_batch_size:
            raise InvalidInput(
                f"Task size {rows} is larger than maximum input batch size {p.max_batch_size}: "
                f"send at most {p.max_batch_size} rows per request"
            )
        open_rows = batches[-1].rows if batches else 0
        enqueued = max(len(batches), 1)  # TF Serving always counts the open batch
        if p.enable_large_batch_splitting:
            limit = p.execution_batch_size
            capacity = (p.queue_limit - enqueued) * limit + (limit - open_rows)
            if rows <= capacity:
                return
            detail = f"the request has {rows} rows but only {capacity} more fit"
        elif open_rows + rows <= p.max_batch_size or enqueued < p.queue_limit:
            return
        else:
            detail = f"{enqueued} batches are enqueued"
        self._counts["rejected"] += 1
        raise Unavailable(
            f"the batch queue is full: {detail} (max_enqueued_batches is "
            f"{p.max_enqueued_batches}); retry later or raise max_enqueued_batches"
        )

    def _piece_sizes(self, open_rows: int, rows: int) -> list[int]:
        """Without splitting, the whole request. With it, fill the open batch first, then
        batches of max_execution_batch_size rows."""
        limit = self.params.execution_batch_size
        room = limit - open_rows
        if rows <= room or not self.params.enable_large_batch_splitting:
            return [rows]
        sizes = [room] if room > 0 else []
        left = rows - sum(sizes)
        while left > 0:
            sizes.append(min(limit, left))
            left -= sizes[-1]
        return sizes

    def _withdraw(self, pieces: list[_Piece]) -> None:
        """A request's client left (its gRPC call ended, its coroutine was cancelled): each of
        its pieces not yet taken by a batch thread leaves the queue unrun, failing with
        Cancelled (DeadlineExceeded if that was its deadline). Taken ones run on. Called too
        when a call ends answered: then every piece is finished and there is nothing to do."""
        if all(piece.finished for piece in pieces):
            return
        with self._cond:
            for piece in pieces:
                if not piece.taken and not piece.finished:
                    self._leave(piece)
                    # a thread wakes; a coroutine is unwinding already
                    self._drop(piece, client_gone(_WAITED, piece.deadline))

    def _leave(self, piece: _Piece) -> None:
        """Take `piece` out of its batch, and an emptied batch out of its queue (under the
        lock). Its batch may be one a batch thread has popped but not yet taken from."""
        batch = piece.batch
        assert batch is not None
        batch.pieces.remove(piece)
        batch.rows -= piece.rows
        batches = self._queues.get(batch.key)
        if not batch.pieces and batches is not None and batch in batches:
            batches.remove(batch)
            if not batches:
                del self._queues[batch.key]

    # -- batch threads ---------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            with self._cond:
                picked = self._next_batch()
                while picked is None:
                    if self._closed and not self._queues:
                        return
                    self._cond.wait(self._wait_seconds())
                    picked = self._next_batch()
            self._process(*picked)

    def _next_batch(self) -> tuple[str, _Batch] | None:
        """The front batch of the first queue, in round-robin order, that may run now."""
        key = next((k for k, batches in self._queues.items() if self._ready(batches)), None)
        if key is None:
            return None
        batches = self._queues[key]
        front = batches.popleft()
        if batches:
            self._queues.move_to_end(key)
        else:
            del self._queues[key]
        if self._queues:
            # This thread may have been the one timing the batches left: hand that to an idle
            # one (enqueueing wakes a thread only when it opens a batch).
            self._cond.notify()
        return key[0], front

    def _ready(self, batches: deque[_Batch]) -> bool:
        front = batches[0]
        return (
            len(batches) > 1
            or self._closed
            or front.rows >= self.params.execution_batch_size
            or time.monotonic() >= front.opened + self.params.batch_timeout_micros / 1e6
        )

    def _wait_seconds(self) -> float | None:
        """Until the earliest open batch times out; None (until notified) if nothing waits."""
        deadlines = [b[0].opened for b in self._queues.values()]
        if not deadlines:
            return None
        due = min(deadlines) + self.params.batch_timeout_micros / 1e6
        return max(due - time.monotonic(), 0.0)

    def _process(self, signature: str, batch: _Batch) -> None:
        with self._cond:
            pieces, waiters = self._take(batch.pieces)
            rows = sum(piece.rows for piece in pieces)
            padding = self.params.padded_size(rows) - rows
            if pieces:
                self._counts.update(
                    batches=1, requests=len(pieces), rows=rows, padding_rows=padding
                )
        _wake(waiters)
        if not pieces:
            return
        try:
            merged = self._merge(pieces, padding)
            outputs = self.runner.run(signature, merged)
            parts = _split_outputs(outputs, [p.rows for p in pieces], padding)
        except Exception as exc:
            error = (
                exc
                if isinstance(exc, ServingError)
                else ServingError(f"{type(exc).__name__}: {exc}")
            )
            with self._cond:
                self._counts["failed_batches"] += 1
            _wake([piece.finish(error=error) for piece in pieces])
            return
        _wake([piece.finish(part) for piece, part in zip(pieces, parts, strict=True)])

    def _take(self, pieces: list[_Piece]) -> tuple[list[_Piece], list[_Waiter | None]]:
        """Under the lock: the pieces whose client still waits, taken to run (their requests'
        stage is RUNNING from now on), and the waiters of the others, which fail unrun: with
        DeadlineExceeded, or Cancelled when their client left (where only asking tells: REST).
        Pieces that left already are gone from the list."""
        now = time.monotonic()
        live, waiters = [], []
        for piece in pieces:
            cancellation = piece.cancellation
            if piece.deadline is not None and now >= piece.deadline:
                error = DeadlineExceeded(f"the request's deadline passed {_WAITED}")
                waiters.append(self._drop(piece, error))
            elif cancellation is not None and cancellation.cancelled:
                waiters.append(self._drop(piece, client_gone(_WAITED, piece.deadline)))
            else:
                piece.taken = True
                if cancellation is not None:
                    cancellation.stage = RUNNING
                live.append(piece)
        return live, waiters

    def _drop(self, piece: _Piece, error: ServingError) -> _Waiter | None:
        """Under the lock: answer a piece that will not run with `error`, counted."""
        self._counts["cancelled" if isinstance(error, Cancelled) else "expired"] += 1
        return piece.finish(error=error)

    def _merge(self, pieces: list[_Piece], padding: int) -> Arrays:
        if len(pieces) == 1 and not padding:
            return pieces[0].inputs
        merged = {}
        for name in pieces[0].inputs:
            arrays = [piece.inputs[name] for piece in pieces]
            if self.params.pad_variable_length_inputs:
                arrays = _pad_to_common_shape(name, arrays)
            if padding:
                arrays.append(np.repeat(arrays[-1][:1], padding, axis=0))
            merged[name] = np.concatenate(arrays)
        return merged


def _joined(parts: list[Arrays]) -> Arrays:
    """A request's outputs from the outputs of its pieces."""
    if len(parts) == 1:
        return parts[0]
    # With pad_variable_length_inputs, pieces may come from batches padded to different
    # lengths: pad them alike (TF Serving's concat would fail the request instead).
    return {
        name: np.concatenate(_pad_to_common_shape(name, [part[name] for part in parts]))
        for name in parts[0]
    }


def _batch_rows(inputs: Arrays) -> int:
    """The request's batch size; InvalidInput unless every input shares dimension 0."""
    if not inputs:
        raise InvalidInput("batching needs at least one input tensor")
    for name, array in inputs.items():
        if array.ndim == 0:
            raise InvalidInput(
                f"input {name!r} is a scalar: with batching, every input needs the batch as "
                "its first dimension"
            )
    rows = {name: int(array.shape[0]) for name, array in inputs.items()}
    if len(set(rows.values())) > 1:
        sizes = ", ".join(f"{name!r} has {size}" for name, size in rows.items())
        raise InvalidInput(
            f"with batching, every input needs the same batch size (first dimension): {sizes}"
        )
    return next(iter(rows.values()))


def _rows(inputs: Arrays, start: int, count: int) -> Arrays:
    return {name: array[start : start + count] for name, array in inputs.items()}


def _pad_to_common_shape(name: str, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """TF Serving's pad_variable_length_inputs: pad every non-batch dimension at its end up to
    the largest among `arrays`, with each array's own first element."""
    target = np.max([array.shape for array in arrays], axis=0)
    padded = []
    for array in arrays:
        widths = [(0, 0)] + [
            (0, int(t - s)) for s, t in zip(array.shape[1:], target[1:], strict=True)
        ]
        if any(after for _, after in widths):
            if array.size == 0:
                raise InvalidInput(
                    f"tensor {name!r} is empty but shares a batch with longer ones; "
                    "it cannot be padded"
                )
            array = np.pad(array, widths, constant_values=array.flat[0])
        padded.append(array)
    return padded


def _split_outputs(outputs: Arrays, sizes: list[int], padding: int) -> list[Arrays]:
    """Each piece's rows of every output. FailedPrecondition for an output that does not have
    the batch as its first dimension: its values cannot be attributed to requests."""
    total = sum(sizes) + padding
    for name, array in outputs.items():
        if array.ndim == 0 or array.shape[0] != total:
            raise FailedPrecondition(
                f"output {name!r} has shape {list(array.shape)}, so it cannot be split between "
                f"the requests of a batch of {total} rows: with batching, every output needs "
                "the batch as its first dimension"
            )
    if len(sizes) == 1 and not padding:
        return [outputs]
    bounds = np.cumsum(sizes)[:-1]
    split = {name: np.split(array[: sum(sizes)], bounds) for name, array in outputs.items()}
    return [{name: parts[i] for name, parts in split.items()} for i in range(len(sizes))]
