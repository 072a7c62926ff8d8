"""What reaches stderr without a command line: TensorFlow's C++ log level, kept quiet unless the
user set it (in this process and the servers and locust processes it starts), and the servers' log
records as text or JSON. The CLI's own console is graphserve.clikit's."""

from __future__ import annotations

import importlib
import json
import logging
import os
import re
import sys
import tempfile

__all__ = [
    "QUIET_TF_LOG_LEVEL",
    "TF_LOG_LEVEL",
    "configure_logging",
    "default_tensorflow_log_level",
    "quiet_tensorflow",
]

TF_LOG_LEVEL = "TF_CPP_MIN_LOG_LEVEL"
# 3, not 2: on every machine without a GPU TensorFlow logs "failed call to cuInit" at ERROR level,
# which reads as a failure. TensorFlow's real errors reach the user as Python exceptions anyway.
QUIET_TF_LOG_LEVEL = "3"
# What absl writes at library load, before TensorFlow applies the level: its notice, and INFO and
# WARNING lines such as "cudart_stub.cc:31] Could not find cuda drivers on your machine".
_ABSL_START_UP = re.compile(
    r"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|[IW]\d{4} \d\d:\d\d:[\d.]+ +\d+ \S+:\d+\] .*"
)
_chosen_by_us = False  # TF_CPP_MIN_LOG_LEVEL was unset and graphserve set it


def default_tensorflow_log_level() -> None:
    """Set TF_CPP_MIN_LOG_LEVEL to QUIET_TF_LOG_LEVEL unless the user set it; child processes
    (servers, locust) inherit it. Imports nothing."""
    global _chosen_by_us
    if TF_LOG_LEVEL not in os.environ:
        os.environ[TF_LOG_LEVEL] = QUIET_TF_LOG_LEVEL
        _chosen_by_us = True


def quiet_tensorflow() -> None:
    """Keep TensorFlow's C++ start-up lines off the terminal unless the user set
    TF_CPP_MIN_LOG_LEVEL; call it before anything imports TensorFlow.

    Sets the level (`default_tensorflow_log_level`), then imports TensorFlow with file
    descriptor 2 captured and writes back every captured line except absl's start-up lines,
    which the level cannot reach. With a level the user set, TensorFlow prints what it prints.
    """
    default_tensorflow_log_level()
    if _chosen_by_us and "tensorflow" not in sys.modules:
        _import_without_start_up_lines("tensorflow")


def _import_without_start_up_lines(module: str) -> None:
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no usable stderr: nothing to keep clean
        return
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            importlib.import_module(module)
        except ImportError:
            pass  # the caller's own import raises it where it is understood
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            lines = captured.read().decode("utf-8", errors="replace").splitlines(keepends=True)
            kept = [line for line in lines if not _ABSL_START_UP.fullmatch(line.rstrip("\n"))]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure_logging(fmt: str = "text", level: int = logging.INFO) -> None:
    """Server logs on stderr: readable text, or one JSON object per line for log pipelines."""
    handler = logging.StreamHandler()
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
