"""Markdown for the generated pages: text from docstrings and schemas made safe to inline, tables,
and heading ids. Python-Markdown with the site's extensions (tables, attr_list) reads the result.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_OPTION = re.compile(r"(?<![\w`-])(--[A-Za-z][\w-]*|-[A-Za-z](?![\w-]))")
_ESCAPE = str.maketrans({c: "\\" + c for c in "\\*_[]{}|"} | {"<": "&lt;", ">": "&gt;"})


def inline(text: str) -> str:
    """`text` (one paragraph of plain text, perhaps with `code` spans) as inline Markdown that
    reads as written: option names set as code, markup characters escaped, lines joined, and
    `|` escaped so it can sit in a table cell (code spans keep theirs: the tables extension does
    not split a row inside one)."""
    text = " ".join(text.split())
    out: list[str] = []
    last = 0
    for match in _CODE_SPAN.finditer(text):
        out.append(_plain(text[last : match.start()]))
        out.append(match.group(0))
        last = match.end()
    out.append(_plain(text[last:]))
    return "".join(out)


def _plain(text: str) -> str:
    parts = _OPTION.split(text)  # odd items are option names
    return "".join(f"`{p}`" if i % 2 else p.translate(_ESCAPE) for i, p in enumerate(parts))


def code(text: str) -> str:
    """`text` as one code span, whatever backticks it holds."""
    fence = "`" * (max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def paragraphs(text: str) -> list[str]:
    """A docstring or help text as Markdown paragraphs (blank lines between them kept)."""
    return [inline(p) for p in re.split(r"\n\s*\n", text.strip()) if p.strip()]


def table(headers: Iterable[str], rows: Iterable[Iterable[str]]) -> list[str]:
    """A pipe table; the cells are Markdown already (see `inline`)."""
    heads = list(headers)
    lines = ["| " + " | ".join(heads) + " |", "|" + "|".join(" --- " for _ in heads) + "|"]
    lines += ["| " + " | ".join(cell or " " for cell in row) + " |" for row in rows]
    return lines


def slug(text: str) -> str:
    """A heading id: lower case, runs of anything else than letters and digits as one `-`."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
