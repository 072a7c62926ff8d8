"""The commands' stderr console: progress lines and the CLI's own messages, rendered by rich.

Exit codes are the core's (graphserve.core.errors: EXIT_FAILED, EXIT_USAGE, EXIT_MISSED).
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

__all__ = ["progress", "stderr"]

# soft_wrap: messages hold paths and specs that must survive a copy-paste unbroken.
stderr = Console(stderr=True, highlight=False, soft_wrap=True)


def progress(message: str) -> None:
    """A progress line on stderr; a message starting with "warning: " stands out."""
    if message.startswith("warning: "):
        stderr.print(f"[yellow]warning:[/] {escape(message[len('warning: ') :])}")
    else:
        stderr.print(f"[dim]{escape(message)}[/]")
