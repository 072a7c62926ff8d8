"""Shared CLI plumbing: a stderr console, quiet TensorFlow logs, and exit codes.

Exit codes, for every command: 0 ok, 1 the job failed (export refused, verification failed, a
server could not start, a load test arm failed), 2 usage error (typer's own).
"""

from __future__ import annotations

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
