"""What the packages' command lines share and nothing else needs: typer and rich live here, never
in the core.

    console    the stderr console (rich) and progress lines
    tls        the four --tls-* options every command that dials a server takes, and the ClientTls
               they make (a usage error for options that cannot work)
    units      durations and sizes given as options (the core parses them; a usage error names
               the option)

Layers (pyproject.toml's import-linter contract): below the packages' cli.py files and the root
CLI, beside graphserve.model, above the core; it imports the core only. The logic behind each
option (parsing `1m30s`, ClientTls) stays in the core, where a deployment script can use it
without a command line.
"""

from __future__ import annotations

from graphserve.clikit.console import progress, stderr
from graphserve.clikit.tls import TlsCa, TlsCert, TlsKey, TlsServerName, client_tls
from graphserve.clikit.units import option_bytes, option_seconds

__all__ = [
    "TlsCa",
    "TlsCert",
    "TlsKey",
    "TlsServerName",
    "client_tls",
    "option_bytes",
    "option_seconds",
    "progress",
    "stderr",
]
