"""The contract of every GraphQL document sent to RunPod's ``POST /graphql``: RunPod's own clients.

RunPod publishes no GraphQL schema (the OpenAPI spec covers REST v2 only), so the documents its own
clients send stand in for one: ``tests/data/graphql/runpod-clients.graphql`` holds them byte for
byte, each under a comment naming its origin (the runpod SDK 1.11.0's source file and function,
runpodctl's). A document is judged by the graphql-core reference parser and then field by field:
every field it selects, at its place under the operation (``query myself.clientBalance``), and
every argument it passes there must be one some client of RunPod's selects or passes at that same
place. A field no client of RunPod's sends is a guess about the schema, and a violation.

What this cannot see, said once: a field's type and whether a client's field still exists today;
the documents are what RunPod's clients send, not what RunPod serves.
"""

from __future__ import annotations

import functools
from pathlib import Path

import graphql

DOCUMENTS = Path(__file__).resolve().parent.parent / "data" / "graphql" / "runpod-clients.graphql"
SEPARATOR = "# ---"


def documents() -> list[tuple[str, str]]:
    """The fixture's documents as (origin, text): the origin is its ``# origin:`` comment."""
    out = []
    for block in DOCUMENTS.read_text(encoding="utf-8").split("\n" + SEPARATOR + "\n")[1:]:
        first, _, text = block.partition("\n")
        assert first.startswith("# origin: "), f"a document without its origin: {first!r}"
        out.append((first.removeprefix("# origin: "), text))
    return out


def _places(node, operation: str) -> dict[tuple[str, ...], set[str]]:
    """Every field a document selects, as its place (the operation type, then field names from the
    root down) -> the argument names passed there."""
    places: dict[tuple[str, ...], set[str]] = {}

    def walk(selection_set, where: tuple[str, ...]) -> None:
        for sel in selection_set.selections if selection_set else ():
            if isinstance(sel, graphql.FieldNode):
                here = (*where, sel.name.value)
                places.setdefault(here, set()).update(a.name.value for a in sel.arguments or ())
                walk(sel.selection_set, here)
            elif isinstance(sel, graphql.InlineFragmentNode):
                walk(sel.selection_set, where)

    walk(node.selection_set, (operation,))
    return places


@functools.cache
def attested() -> dict[tuple[str, ...], set[str]]:
    """The places RunPod's own clients select (union over the fixture) -> the arguments they pass."""
    out: dict[tuple[str, ...], set[str]] = {}
    for _origin, text in documents():
        for d in graphql.parse(text).definitions:
            if isinstance(d, graphql.OperationDefinitionNode):
                for place, args in _places(d, d.operation.value).items():
                    out.setdefault(place, set()).update(args)
    return out


def violations(text: str) -> list[str]:
    """What in the document ``text`` no client of RunPod's sends: one line each, [] when none."""
    try:
        doc = graphql.parse(text)
    except graphql.GraphQLError as e:
        return [f"not a GraphQL document: {e.message}"]
    known = attested()
    out = []
    for d in doc.definitions:
        if not isinstance(d, graphql.OperationDefinitionNode):
            out.append(f"a {type(d).__name__} no client of RunPod's sends")
            continue
        for place, args in _places(d, d.operation.value).items():
            name = f"{place[0]} " + ".".join(place[1:])
            if place not in known:
                out.append(f"{name}: a field no client of RunPod's selects")
            elif args - known[place]:
                out.append(f"{name}: arguments no client of RunPod's passes: {sorted(args - known[place])}")
    return out
