"""The emulated RunPod's GraphQL reader (gpuops/emulators/runpod.py ``read_document``) against the
reference parser (graphql-core, a development dependency): on every document RunPod's own clients
send (tests/data/graphql), every captured SDK request (tests/data/wire) and documents that are
broken on purpose, it finds the same first root field and the same fields selected under it, or
refuses the same documents (with the parser's words for an unterminated string and an early end)."""

from __future__ import annotations

import json
from pathlib import Path

import graphql

from gpuops.emulators.runpod import read_document
from gpuops.providers.runpod.compute import BALANCE_QUERY
from tests.emulators import graphql_contract

WIRE = Path(__file__).resolve().parents[1] / "data" / "wire" / "wire_runpod.jsonl"
MADE = [
    "",
    "query { myself { id } ",
    '"abc',
    '{ myself { "x }',
    "{ myself { id ] }",
    "{ myself(a: {x: SECURE, y: [A, B]}) { alias: clientBalance ...F ... on User { q } pods(input: {x: 1}) { id } } }",
    "query q($x: String!) @dir(if: $x) { myself { id @include(if: $x) } }",
    "{ a { b } } { c }",
    'mutation { podTerminate(input: {podId: "x"}) }',
    '# a comment\n{ myself { """block "quoted" string""" } }',
]


def _reference(text: str) -> tuple[str, list[str]] | str:
    try:
        op = graphql.parse(text).definitions[0]
    except graphql.GraphQLError as e:
        return e.message
    field = op.selection_set.selections[0]
    below = field.selection_set.selections if field.selection_set else []
    return field.name.value, [s.name.value for s in below if isinstance(s, graphql.FieldNode)]


def _ours(text: str) -> tuple[str, list[str]] | str:
    try:
        return read_document(text)
    except ValueError as e:
        return f"Syntax Error: {e}"


def test_the_reader_agrees_with_the_reference_parser():
    docs = [t for _, t in graphql_contract.documents()] + [BALANCE_QUERY] + MADE
    captured = [json.loads(line)["body"] for line in WIRE.read_text().splitlines()]
    docs += [b["query"] for b in captured if isinstance(b, dict) and "query" in b]
    assert len(docs) > 30

    def same(ref, ours) -> bool:
        if isinstance(ref, str) and isinstance(ours, str):  # both refuse it
            lexical = ("Unterminated string.", "found <EOF>.", "Unexpected <EOF>.")
            return ours == ref if ref.endswith(lexical) else True
        return ref == ours

    differ = [(d[:60], _reference(d), _ours(d)) for d in docs if not same(_reference(d), _ours(d))]
    assert not differ, differ
    assert sum(isinstance(_reference(d), str) for d in docs) >= 5  # the refusals were compared too
