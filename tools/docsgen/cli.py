"""reference/cli.md: every command of `graphserve` and of `python -m tools.bench`, walked from
their typer apps: help, usage, arguments and options (every name, hidden ones too), defaults and
exit codes.

The exit codes come from graphserve.core.errors: EXIT_CODES for what 0, 1, 2 and 3 mean anywhere,
and each command's epilog (written by `exit_epilog`, shown by `--help`) for the codes of its own.
typer 0.29 vendors click, so the objects are typer._click's: they are read by their attributes.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from enum import Enum
from pathlib import PurePath
from typing import Any

import typer

from graphserve.core.errors import EXIT_CODES, EXIT_FAILED, EXIT_USAGE
from tools.docsgen.markdown import code, inline, paragraphs, slug, table

# The lines `exit_epilog` writes: "Exit 3: <meaning>".
_EPILOG_EXIT = re.compile(r"^Exit (\d+): (.+)$")
_ALWAYS = (0, EXIT_FAILED, EXIT_USAGE)  # every command can exit these
NONE = "—"  # an empty cell: no default


def cli_reference() -> str:
    """The CLI reference page, as Markdown."""
    from graphserve.cli import app
    from tools.bench.cli import app as bench_app

    trees = [
        list(walk(typer.main.get_command(app), "graphserve")),
        list(walk(typer.main.get_command(bench_app), "python -m tools.bench")),
    ]
    lines = [
        "# Command line",
        "",
        "Every command, option, default and exit code, generated from the code when the site is "
        "built (`tools/docsgen/cli.py` walks the typer apps), so it says what `--help` says. Every "
        "command also takes `--help`. Options whose name has underscores are the spellings of "
        "TensorFlow Serving's `tensorflow_model_server` flags, so its command lines run unchanged.",
        "",
        *_exit_code_section([cmd for tree in trees for cmd in tree]),
    ]
    for cmd in trees[0]:
        lines += cmd.markdown()
    trees[1][0].note = (
        "The benchmarks: a separate entry point for development, run from a clone (`make bench`). "
        "`tools/` is not in the wheel, so an installed graphserve has no `python -m tools.bench`."
    )
    for cmd in trees[1]:
        lines += cmd.markdown()
    return "\n".join(lines) + "\n"


class Command:
    """One command or group of a typer app, with the click context it runs in."""

    def __init__(self, command: Any, ctx: Any) -> None:
        self.command = command
        self.ctx = ctx
        self.path: str = ctx.command_path
        self.anchor = slug(self.path)
        self.subcommands: list[Command] = []
        self.note = ""  # Markdown put first in its section

    @property
    def runs(self) -> bool:
        """False for a group that only dispatches to its commands."""
        return not self.subcommands or bool(getattr(self.command, "invoke_without_command", False))

    def exit_codes(self) -> dict[int, str]:
        """Its exit codes: 0, 1 and 2 as for every command, and those its epilog names."""
        codes = {code: EXIT_CODES[code].split(":")[0] for code in _ALWAYS}
        codes.update(epilog_exit_codes(self.command.epilog or ""))
        return codes

    def markdown(self) -> list[str]:
        cmd = self.command
        lines = [f"## {self.path} {{#{self.anchor}}}", ""]
        if self.note:
            lines += ["!!! note", "", f"    {self.note}", ""]
        for state in ("hidden", "deprecated"):  # hidden: left out of its group's --help
            if getattr(cmd, state, False):
                lines += [f"*({state})*", ""]
        help_text = (cmd.help or "").split("\f")[0]
        for paragraph in paragraphs(inspect.cleandoc(help_text)):
            lines += [paragraph, ""]
        if not type(cmd).__module__.startswith("typer."):  # the project's own class: what it adds
            note = inspect.getdoc(type(cmd)) or ""
            lines += ["!!! note", "", *(f"    {p}\n" for p in paragraphs(note))]
        epilog = [p for p in (cmd.epilog or "").split("\n\n") if p and not _EPILOG_EXIT.match(p)]
        for paragraph in epilog:
            lines += [inline(paragraph), ""]
        pieces = cmd.collect_usage_pieces(self.ctx)
        lines += ["**Usage**", "", "```text", " ".join([self.path, *pieces]), "```", ""]
        rows = [_param_row(param, self.ctx) for param in cmd.params]
        if rows:
            headers = ["Name", "Type", "Default", "Description"]
            lines += ["**Arguments and options**", "", *table(headers, rows), ""]
        if self.subcommands:
            subs = [
                [f"[{code(sub.path)}](#{sub.anchor})", inline(_short_help(sub.command))]
                for sub in self.subcommands
            ]
            lines += ["**Commands**", "", *table(["Command", "Description"], subs), ""]
        if self.runs:
            codes = [[f"`{n}`", inline(text)] for n, text in self.exit_codes().items()]
            lines += [
                "**Exit codes** ([all](#exit-codes))",
                "",
                *table(["Code", "Meaning"], codes),
                "",
            ]
        else:
            alone = "prints its help" if getattr(cmd, "no_args_is_help", False) else "fails"
            lines += [
                f"**Exit codes**: those of the command it runs; `{self.path}` alone {alone} and "
                f"exits {EXIT_USAGE}.",
                "",
            ]
        return lines


def walk(command: Any, name: str, parent: Any = None) -> Iterator[Command]:
    """`command` and every command under it, depth first, in the order they were added."""
    ctx = command.context_class(command, info_name=name, parent=parent)
    node = Command(command, ctx)
    children = getattr(command, "commands", {})
    yield node
    for sub_name, sub in children.items():
        for found in walk(sub, sub_name, ctx):
            if found.ctx.parent is ctx:
                node.subcommands.append(found)
            yield found


def epilog_exit_codes(epilog: str) -> dict[int, str]:
    """The exit codes an epilog names (`exit_epilog`'s "Exit 3: meaning" paragraphs)."""
    codes = {}
    for paragraph in epilog.split("\n\n"):
        match = _EPILOG_EXIT.match(" ".join(paragraph.split()))
        if match:
            codes[int(match.group(1))] = match.group(2)
    return codes


def _exit_code_section(commands: list[Command]) -> list[str]:
    rows = [[f"`{n}`", inline(text)] for n, text in sorted(EXIT_CODES.items())]
    special = [
        (cmd, n, text)
        for cmd in commands
        for n, text in sorted(epilog_exit_codes(cmd.command.epilog or "").items())
    ]
    lines = [
        "## Exit codes {#exit-codes}",
        "",
        "What each exit code means, for every command (from `EXIT_CODES` in "
        "`graphserve/core/errors.py`):",
        "",
        *table(["Code", "Meaning"], rows),
        "",
    ]
    if special:
        lines += [
            "The commands with codes of their own, each also named under the command and in "
            "its `--help`:",
            "",
            *table(
                ["Command", "Code", "Meaning"],
                [[f"[{code(c.path)}](#{c.anchor})", f"`{n}`", inline(t)] for c, n, t in special],
            ),
            "",
        ]
    return lines


def _short_help(command: Any) -> str:
    text = command.short_help or (command.help or "").split("\f")[0]
    first = " ".join(inspect.cleandoc(text).split("\n\n")[0].split()) if text else ""
    return re.split(r"(?<=\.) (?=[A-Z`])", first)[0]  # its first sentence


def _param_row(param: Any, ctx: Any) -> list[str]:
    """[names, type, default or required, description] of an argument or option."""
    if param.param_type_name == "argument":
        names = f"{_name(getattr(param, 'display_name_raw', param.name))} (argument)"
    else:
        names = _name(param.opts[0])
        if param.secondary_opts:  # a flag's off form
            names += " / " + " / ".join(_name(opt) for opt in param.secondary_opts)
        if len(param.opts) > 1:
            names += "<br>alias " + ", ".join(code(opt) for opt in param.opts[1:])
    if getattr(param, "hidden", False):
        names += " *(hidden)*"
    help_text = inline(getattr(param, "help", None) or "")
    envvar = param.envvar
    if envvar:
        envvars = [envvar] if isinstance(envvar, str) else list(envvar)
        help_text += " Environment: " + ", ".join(code(e) for e in envvars) + "."
    return [
        names,
        _type(param, ctx),
        "**required**" if param.required else _default(param, ctx),
        help_text.strip(),
    ]


def _name(name: str) -> str:
    """`name` as code kept on one line (attr_list sets the style)."""
    return code(name) + '{style="white-space: nowrap"}'


def _type(param: Any, ctx: Any) -> str:
    if getattr(param, "is_flag", False) and not getattr(param, "count", False):
        return "flag"
    if param.metavar:
        return code(param.metavar)
    label = param.display_type(ctx).strip("<>")
    repeat = getattr(param, "multiple", False) or param.nargs == -1
    if repeat and label.startswith("list[") and label.endswith("]"):
        label = label[5:-1]
    if "|" in label:
        text = "one of " + ", ".join(code(choice) for choice in label.split("|"))
    else:
        text = code(label.removesuffix(" range"))
    bounds = _range(getattr(param, "min", None), getattr(param, "max", None))
    if bounds:
        text += f" ({_name(bounds)})"
    if repeat:
        text += ", repeatable"
    return text


def _range(low: float | None, high: float | None) -> str:
    if low is not None and high is not None:
        return f"{low}<=x<={high}"
    if low is not None:
        return f"x>={low}"
    if high is not None:
        return f"x<={high}"
    return ""


def _default(param: Any, ctx: Any) -> str:
    """The default as the user would see it: a flag's form that is in effect, values as typed."""
    if isinstance(getattr(param, "show_default", None), str):
        return inline(param.show_default)
    value = param.get_default(ctx, call=False)
    if getattr(param, "is_flag", False) and not getattr(param, "count", False):
        if param.secondary_opts:
            return code(param.opts[0] if value else param.secondary_opts[0])
        return "on" if value else "off"
    if value is None or value == [] or value == ():
        return NONE
    if callable(value):
        return "(dynamic)"
    if isinstance(value, list | tuple):
        return ", ".join(code(_value(v)) for v in value)
    return code(_value(value))


def _value(value: Any) -> str:
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, PurePath):
        return str(value)
    if value == "":
        return '""'
    return str(value)
