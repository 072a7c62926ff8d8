"""Shared CLI plumbing: a stderr console, quiet TensorFlow logs, and exit codes.

Exit codes, for every command: 0 ok, 1 the job failed (export refused, verification failed, a
server could not start, a load test arm failed), 2 usage error (typer's own).
"""

from __future__ import annotations

import json
import logging
import os

from rich.console import Console

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

# soft_wrap: messages hold paths and specs that must survive a copy-paste unbroken.
stderr = Console(stderr=True, highlight=False, soft_wrap=True)


def quiet_tensorflow() -> None:
    """Silence TensorFlow's C++ start-up chatter unless the user asked for it."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def progress(message: str) -> None:
    """A progress line on stderr; a message starting with "warning: " stands out."""
    from rich.markup import escape

    if message.startswith("warning: "):
        stderr.print(f"[yellow]warning:[/] {escape(message[len('warning: ') :])}")
    else:
        stderr.print(f"[dim]{escape(message)}[/]")


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
