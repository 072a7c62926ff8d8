"""reference/report-schema.md: the JSON schema of report.json (docs/report.schema.json, generated
by pydantic from graphserve.loadtest.results.run) as
a page: the top-level object, then one section per
definition, each a table of its fields.

Types are written as `list[X]`, `dict[string, X]`, `tuple[X, Y]` and `X | null`, a `$ref` as a
link to its definition's section. jsonschema2md was tried: it renders nested bullet lists with
anchors MkDocs does not make, not tables, so the page is rendered here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tools.docsgen.markdown import code, inline, paragraphs, slug, table

TOP = "top-level"  # the anchor of the top-level object's section
NONE = "—"


def schema_reference(path: Path) -> str:
    """The report schema page, as Markdown."""
    schema = json.loads(path.read_text())
    defs: dict[str, Any] = schema.get("$defs", {})
    anchors = _anchors(defs)
    match = re.search(r"/schemas/(.+)\.json$", schema.get("$id", ""))
    version = match.group(1) if match else "graphserve.loadtest/N"
    lines = [
        "# Report schema",
        "",
        "A load test (`graphserve loadtest compare`, and `graphserve demo`) writes `report.json`: "
        "the run's settings, its environment, every arm at every step, the SLO verdict. Its "
        f'`"schema"` key names the version of its shape, here `"schema": "{version}"`; a report '
        "is checked against the shape when it is written and when it is read again.",
        "",
        "This page is generated from the JSON Schema, "
        f"[`report.schema.json`](../{path.name}) (JSON Schema 2020-12, made by pydantic from "
        "the report's models): the top-level object first, then each object it refers to, in "
        "alphabetical order.",
        "",
        "How to read the tables: a *required* field is always in the file; `X | null` means its "
        "value may be `null` (a number that was not measured is `null`, not absent); a field "
        "that is not required has its default when absent. `dict[string, X]` is an object whose "
        "keys are names (arms, steps, ratios) and whose values are `X`.",
        "",
    ]
    users = _users(schema, defs)
    lines += _section(schema.get("title", "Report"), schema, TOP, anchors, [])
    for name in sorted(defs):
        lines += _section(name, defs[name], anchors[name], anchors, users.get(name, []))
    return "\n".join(lines) + "\n"


def _anchors(defs: dict[str, Any]) -> dict[str, str]:
    """A heading id for each definition: its name's slug, unique on the page."""
    taken = {TOP}
    anchors = {}
    for name in defs:
        anchor = slug(name)
        while anchor in taken:
            anchor += "-"
        taken.add(anchor)
        anchors[name] = anchor
    return anchors


def _section(
    name: str, node: dict[str, Any], anchor: str, anchors: dict[str, str], used_by: list[str]
) -> list[str]:
    title = f"{name} (the top level)" if anchor == TOP else name
    lines = [f"## {title} {{#{anchor}}}", ""]
    for paragraph in paragraphs(node.get("description", "")):
        lines += [paragraph, ""]
    if used_by:
        links = ", ".join(_link(user, anchors) for user in used_by)
        lines += [f"Used by: {links}.", ""]
    extra = node.get("additionalProperties")
    if extra is True:
        lines += ["Other keys may be present too.", ""]
    elif isinstance(extra, dict):
        lines += [f"Other keys may be present, each a {_type(extra, anchors)}.", ""]
    required = set(node.get("required", []))
    rows = [
        [
            code(field),
            _type(prop, anchors),
            "yes" if field in required else "no",
            code(json.dumps(prop["default"])) if "default" in prop else NONE,
            inline(prop.get("description", "")),
        ]
        for field, prop in node.get("properties", {}).items()
    ]
    headers = ["Field", "Type", "Required", "Default", "Description"]
    if not any(row[-1] for row in rows):  # no field described (the models have no descriptions)
        headers, rows = headers[:-1], [row[:-1] for row in rows]
    if rows:
        lines += [*table(headers, rows), ""]
    return lines


def _link(name: str, anchors: dict[str, str]) -> str:
    return f"[{code(name)}](#{anchors.get(name, TOP)})"


def _type(node: dict[str, Any], anchors: dict[str, str]) -> str:
    """The type of a schema node as Markdown, escaped for a table cell."""
    if "$ref" in node:
        return _link(node["$ref"].rsplit("/", 1)[-1], anchors)
    for key in ("anyOf", "oneOf"):
        if key in node:
            return " \\| ".join(_type(option, anchors) for option in node[key])
    if "allOf" in node and len(node["allOf"]) == 1:
        return _type(node["allOf"][0], anchors)
    if "const" in node:
        return code(json.dumps(node["const"]))
    if "enum" in node:
        return "one of " + ", ".join(code(json.dumps(value)) for value in node["enum"])
    kind = node.get("type")
    if isinstance(kind, list):
        return " \\| ".join(_type({**node, "type": k}, anchors) for k in kind)
    if kind == "array":
        if "prefixItems" in node:
            parts = ", ".join(_type(item, anchors) for item in node["prefixItems"])
            return f"tuple\\[{parts}\\]"
        items = node.get("items")
        return f"list\\[{_type(items, anchors)}\\]" if items else "list"
    if kind == "object":
        values = node.get("additionalProperties")
        if isinstance(values, dict):
            return f"dict\\[{code('string')}, {_type(values, anchors)}\\]"
        return code("object")
    if kind is None:
        return code("any")
    label = code(kind)
    return f"{label} ({code(node['format'])})" if "format" in node else label


def _users(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, list[str]]:
    """For each definition, the objects with a field of its type (the top level by its title)."""
    users: dict[str, list[str]] = {}
    title = schema.get("title", "Report")
    for owner, node in [(title, schema), *sorted(defs.items())]:
        for ref in sorted(
            set(re.findall(r'"#/\$defs/([^"]+)"', json.dumps(node.get("properties"))))
        ):
            if owner != ref and owner not in users.setdefault(ref, []):
                users[ref].append(owner)
    return users
