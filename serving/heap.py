"""The garbage collector and the allocator around loaded models: freeze what a started server
holds, free what a retired version held, and give the freed memory back to the system.

TensorFlow leaves hundreds of thousands of long-lived objects (316,000 after its import here).
Frozen (`gc.freeze`), the collector no longer walks them, so no request pays for a full
collection over all of them (300-360 ms with the GIL held on this project's machine, 0.4-0.6 s
under load). A model's objects hold reference cycles (its graph, its functions), so an unloaded
version is freed only by a collection, and a frozen one by none.

So the heap is frozen in epochs. `graphserve serve` freezes it once TensorFlow is imported and
before any model loads (`freeze`); the models stay out of the frozen heap, and a retired
version is freed by a plain collection, which walks only what was loaded since (8 ms for the
MLP's 13,700 objects). A version frozen with the heap (one loaded before a server embedded in a
program froze it at `start`) can only be freed by thawing, collecting and freezing again: the
full 0.3 s stall, once per such version. Without `release`, a server that swaps versions grows
by what each version held (0.3 MB a swap for the MLP, measured over 50 swaps under traffic).

Freed is not returned: glibc's malloc keeps what a closed Session freed for reuse, so a server
that loaded 200 MLPs and unloaded them all stayed 287 MB above where it started. `trim` asks it
to give back what is free (`malloc_trim`); with it the same server came back to within 17 MB
(`python -m tools.bench many` measures it, against jemalloc and tcmalloc, on every run).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import os
import time
from collections.abc import Callable

__all__ = ["allocated_bytes", "epoch", "freeze", "freeze_once", "release", "resident_bytes", "trim"]

log = logging.getLogger("graphserve.manager")

_epoch = 0  # how many times the heap was frozen


def epoch() -> int:
    """The heap's freeze count: an object made while it was N is frozen once it passes N."""
    return _epoch


def freeze() -> None:
    """Collect, then freeze every object alive (the next epoch)."""
    global _epoch
    gc.collect()
    gc.freeze()
    _epoch += 1


def freeze_once() -> None:
    """Freeze, unless the heap was frozen already (before the models loaded, say)."""
    if not gc.get_freeze_count():
        freeze()


def release(loaded_at: int) -> None:
    """Free what a retired version held, once the caller has dropped its last reference to it.
    `loaded_at` is the epoch the version started loading in: frozen since, it costs a walk of
    every object with the GIL held (thaw, collect, freeze); otherwise a collection of what is
    not frozen."""
    started = time.perf_counter()
    if loaded_at < _epoch and gc.get_freeze_count():
        gc.unfreeze()
        freeze()
        how = "thawed, collected and froze the heap"
    else:
        gc.collect()
        how = "collected"
    # debug: the thread outlives the request that retired the version, and a log line written
    # as a test's output capture closes is lost with a "Logging error"
    log.debug(
        "%s for what the retired version held: %.0f ms", how, (time.perf_counter() - started) * 1e3
    )


_MALLINFO2_FIELDS = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"


class _MallInfo2(ctypes.Structure):  # glibc's struct mallinfo2, all size_t
    _fields_ = [(name, ctypes.c_size_t) for name in _MALLINFO2_FIELDS.split(" ")]


def _glibc(symbol: str) -> Callable[..., object] | None:
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), symbol) if name else None  # type: ignore[no-any-return]
    except (OSError, AttributeError):  # not glibc, or older than the call
        return None


_TRIM = _glibc("malloc_trim")
_MALLINFO2 = _glibc("mallinfo2")
if _MALLINFO2 is not None:
    _MALLINFO2.restype = _MallInfo2  # type: ignore[attr-defined]


def trim() -> bool:
    """Return the allocator's free memory to the system (glibc's `malloc_trim`; ctypes lets go
    of the GIL meanwhile). False where there is no glibc."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def allocated_bytes() -> int:
    """Bytes malloc has handed out and not had back, all arenas (glibc's `mallinfo2`, a few µs);
    the resident set size where there is no glibc. What a load allocated and kept is the
    difference across it, steady to 1 % from load to load where RSS's varies by half (freed
    pages reused or not)."""
    if _MALLINFO2 is None:
        return resident_bytes()
    info = _MALLINFO2()
    return int(info.uordblks + info.hblkhd)  # type: ignore[attr-defined]


def resident_bytes() -> int:
    """This process's resident set size (Linux's /proc/self/statm), 0 where there is none."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except OSError:
        return 0
