"""Figures in the manual's prose, read from the committed result files as the site is built, so
that a page cannot state a figure other than the one its result file holds (issue 39).

Two placeholders, written in a page's markdown:

    {{ figure tools/bench/results/results.json goals.G1.value .3g }}
    {{ include tools/bench/results/peers.md "Goals" }}

- `figure FILE PATH [SPEC]`: the value at PATH in the JSON file FILE (a path from the repository's
  root), formatted with Python's format spec SPEC: `.3g`, `,.0f`, `.1%`, or `.10` for the first
  ten characters of a string (a timestamp's date). Without SPEC, a float gets three significant
  digits (`,.0f` from 1,000 up), an int its thousands separators, a boolean `pass` or `miss`.
  PATH is segments joined by dots: in a dict, a key; in a list, an index, the item whose "key" or
  "name" field is the segment, or the one item whose fields match `field=value[,field=value]`.
  The arguments are split as a shell splits them, so a key with spaces is quoted.
- `include FILE [HEADING]`: the markdown file FILE without its `# title` line, or the section
  whose heading starts with HEADING (without the heading line), up to the next heading of its
  level or higher: a generated table shown rather than typed again. What is included may not
  hold a relative link, which would point elsewhere from the including page.

A backslash before the braces writes the placeholder as it is (for a page that shows one).
Whatever does not resolve (a file, a key, a section, a null value, a spec that does not fit the
value) is an error naming the placeholder and what is missing: `render` marks the spot visibly
and returns the errors, which tools/docsgen/hooks.py logs as warnings, so the strict build fails.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["FigureError", "Rendered", "render"]

# `{{ kind args }}`: a space after the braces, so docker's `{{.Names}}` is not one
PLACEHOLDER = re.compile(r"(\\?)\{\{\s+([a-z]+)\b(.*?)\}\}", re.DOTALL)
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_RELATIVE_LINK = re.compile(r"\]\((?![a-z][a-z0-9+.-]*:|#|/)([^)\s]+)")


class FigureError(ValueError):
    """A placeholder that does not resolve against the committed files."""


@dataclass
class Rendered:
    """A page's markdown with its placeholders replaced, and one message per one that failed."""

    text: str
    errors: list[str] = field(default_factory=list)
    count: int = 0  # placeholders resolved


def render(markdown: str, root: Path) -> Rendered:
    """`markdown` with every placeholder replaced by what it names under `root` (the repository).
    An unresolved one becomes a visible `[figure missing: ...]` and an entry of `errors`."""
    result = Rendered(markdown)
    files = _Files(root)

    def replace(match: re.Match[str]) -> str:
        escaped, kind, args = match.groups()
        if escaped:
            return match.group(0)[1:]
        placeholder = " ".join(match.group(0).split())
        try:
            value = _resolve(kind, args, files)
        except FigureError as exc:
            result.errors.append(f"{placeholder}: {exc}")
            return f"**[figure missing: {exc}]**"
        result.count += 1
        return value

    result.text = PLACEHOLDER.sub(replace, markdown)
    return result


def _resolve(kind: str, args: str, files: _Files) -> str:
    try:
        words = shlex.split(args)
    except ValueError as exc:
        raise FigureError(f"cannot split its arguments: {exc}") from None
    handlers: dict[str, Callable[[list[str], _Files], str]] = {
        "figure": _figure,
        "include": _include,
    }
    if kind not in handlers:
        raise FigureError(f"unknown placeholder {kind!r}: expected one of {', '.join(handlers)}")
    return handlers[kind](words, files)


# --- figure FILE PATH [SPEC] ---------------------------------------------------------------------


def _figure(words: list[str], files: _Files) -> str:
    if len(words) not in (2, 3):
        raise FigureError("expected `figure FILE PATH [SPEC]`")
    name, path = words[0], words[1]
    value = lookup(files.json(name), path, name)
    return format_value(value, words[2] if len(words) == 3 else None)


def lookup(data: Any, path: str, name: str = "the file") -> Any:
    """The value at the dotted `path` in `data` (see the module's docstring); FigureError naming
    the segment that is missing and what was there instead."""
    where = name
    for segment in path.split("."):
        if isinstance(data, dict):
            if segment not in data:
                raise FigureError(f"no key {segment!r} in {where} (keys: {_listed(data)})")
            data = data[segment]
        elif isinstance(data, list):
            data = _item(data, segment, where)
        else:
            raise FigureError(f"{where} is {data!r}, not a dict or a list, at {segment!r}")
        where = f"{where}: {segment}"
    if data is None:
        raise FigureError(f"{where} is null (not measured in the committed run)")
    return data


def _item(items: list[Any], segment: str, where: str) -> Any:
    if segment.isdigit():
        if int(segment) >= len(items):
            raise FigureError(f"no item {segment} in {where} ({len(items)} items)")
        return items[int(segment)]
    if "=" in segment:
        pairs = [part.split("=", 1) for part in segment.split(",")]
        if any(len(pair) != 2 for pair in pairs):
            raise FigureError(f"{segment!r} in {where}: expected field=value[,field=value]")
        found = [
            item
            for item in items
            if isinstance(item, dict) and all(k in item and _equals(item[k], v) for k, v in pairs)
        ]
    else:
        found = [
            item
            for item in items
            if isinstance(item, dict) and segment in (item.get("key"), item.get("name"))
        ]
    if len(found) != 1:
        names = [i.get("key", i.get("name")) for i in items if isinstance(i, dict)]
        known = ", ".join(str(n) for n in names if n is not None) or f"{len(items)} items"
        many = "more than one item" if found else "no item"
        raise FigureError(f"{many} {segment!r} in {where} ({known})")
    return found[0]


def _equals(value: Any, wanted: str) -> bool:
    """A field's value against a path's text: numbers as numbers (`users=1` finds 1.0)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return float(wanted) == value
        except ValueError:
            return False
    return str(value) == wanted


def format_value(value: Any, spec: str | None) -> str:
    """`value` formatted with `spec`, or the default of the module's docstring."""
    if isinstance(value, dict | list):
        raise FigureError(f"the value is a {type(value).__name__}, not a figure: name a field")
    if spec is None:
        if isinstance(value, bool):
            return "pass" if value else "miss"
        if isinstance(value, int):
            return f"{value:,}"
        if isinstance(value, float):
            return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
        return str(value)
    try:
        return format(value, spec)
    except (ValueError, TypeError) as exc:
        raise FigureError(f"format spec {spec!r} does not fit {value!r}: {exc}") from None


def _listed(keys: dict[str, Any]) -> str:
    names = list(keys)
    return ", ".join(names[:12]) + (", …" if len(names) > 12 else "")


# --- include FILE [HEADING] ----------------------------------------------------------------------


def _include(words: list[str], files: _Files) -> str:
    if len(words) not in (1, 2):
        raise FigureError("expected `include FILE [HEADING]`")
    name = words[0]
    lines = files.text(name).splitlines()
    if len(words) == 1:
        if lines and lines[0].startswith("# "):
            lines = lines[1:]
        part = lines
    else:
        part = section(lines, words[1], name)
    text = "\n".join(part).strip("\n")
    link = _RELATIVE_LINK.search(text)
    if link:
        raise FigureError(
            f"what it includes from {name} links to {link.group(1)!r}, relative to that page: "
            "link to the page instead"
        )
    return text


def section(lines: list[str], heading: str, name: str = "the file") -> list[str]:
    """The lines under the one heading of `lines` that is `heading` or starts with it, up to
    the next heading of the same level or higher; FigureError listing the headings if not one."""
    headings = _headings(lines)
    exact = [h for h in headings if h[2] == heading]
    found = exact or [h for h in headings if h[2].startswith(heading)]
    if len(found) != 1:
        many = "more than one heading" if found else "no heading"
        known = "; ".join(h[2] for h in headings) or "none"
        raise FigureError(f"{many} starting {heading!r} in {name} (headings: {known})")
    start, level, _ = found[0]
    end = next((i for i, lv, _ in headings if i > start and lv <= level), len(lines))
    return lines[start + 1 : end]


def _headings(lines: list[str]) -> list[tuple[int, int, str]]:
    """(line index, level, text) of every heading outside fenced code."""
    found: list[tuple[int, int, str]] = []
    fenced = False
    for index, line in enumerate(lines):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else _HEADING.match(line)
        if match:
            found.append((index, len(match.group(1)), match.group(2)))
    return found


# --- the files -----------------------------------------------------------------------------------


class _Files:
    """The repository's files a page names, each read once per page."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self._texts: dict[str, str] = {}
        self._json: dict[str, Any] = {}

    def text(self, name: str) -> str:
        if name not in self._texts:
            path = (self.root / name).resolve()
            if not path.is_relative_to(self.root):
                raise FigureError(f"{name} is outside the repository")
            if not path.is_file():
                raise FigureError(f"no file {name}")
            self._texts[name] = path.read_text(encoding="utf-8")
        return self._texts[name]

    def json(self, name: str) -> Any:
        if name not in self._json:
            try:
                self._json[name] = json.loads(self.text(name))
            except json.JSONDecodeError as exc:
                raise FigureError(f"{name} is not JSON: {exc}") from None
        return self._json[name]
