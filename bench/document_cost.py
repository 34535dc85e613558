"""What one crafted document costs to parse and validate: `python -m bench.document_cost`.

Each document of the corpus is made to be as costly as it can be inside the limits on text
(32 KiB of UTF-8, 2,000 tokens), for one check of the pipeline or another: fragments that spread the
previous one twice (their expansion doubles per level), the same field over and over (the
rule that checks that fields can be merged compares them in pairs), many fragments spread
side by side, deep nesting, many variables, directives and arguments. Each is parsed and
validated as the service does the first time it meets it (the same rules; a document that
fails is kept nowhere, so each time), and the figures printed are the median of a few runs,
in ms.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

from graphql import DocumentNode, GraphQLError, parse, specified_rules

from gql_presence.graphql.document_limits import validate_document
from gql_presence.graphql.schema import build_schema
from gql_presence.policy.limits import MAX_TOKENS

SCHEMA = build_schema()._schema


def fan_out(levels: int) -> str:
    """Each fragment spreads the one before it twice: 2**levels selections, expanded."""
    fragments = ["fragment F0 on Query { __typename }"]
    fragments += [f"fragment F{i} on Query {{ ...F{i - 1} ...F{i - 1} }}" for i in range(1, levels)]
    return f"{{ ...F{levels - 1} }} " + " ".join(fragments)


def fan_out_nested(levels: int) -> str:
    """Fan-out through a field, so that depth rules and field merging follow it too."""
    fragments = ["fragment P0 on UserPresence { online }"]
    fragments += [
        f"fragment P{i} on UserPresence {{ ...P{i - 1} ...P{i - 1} }}" for i in range(1, levels)
    ]
    return f'{{ presence(userId: "a") {{ ...P{levels - 1} }} }} ' + " ".join(fragments)


def repeated_leaf(count: int) -> str:
    return "{ " + " ".join(["__typename"] * count) + " }"


def repeated_field(count: int) -> str:
    return "{ " + " ".join(['presence(userId: "a") { online }'] * count) + " }"


def conflicting_fields(count: int) -> str:
    """The same response name for fields that cannot merge: every pair is a conflict."""
    fields = [f'presence(userId: "{i}") {{ online }}' for i in range(count)]
    return "{ " + " ".join(fields) + " }"


def many_spreads_of_one(count: int) -> str:
    return (
        "{ "
        + " ".join(["...A"] * count)
        + ' } fragment A on Query { presence(userId: "a") { online } }'
    )


def many_fragments_side_by_side(count: int) -> str:
    spreads = " ".join(f"...A{i}" for i in range(count))
    fragments = " ".join(
        f'fragment A{i} on Query {{ presence(userId: "a") {{ online }} }}' for i in range(count)
    )
    return f"{{ {spreads} }} {fragments}"


def many_fragments_in_pairs(count: int) -> str:
    """Fragments that each spread all of the ones before: pairs of fragments to compare."""
    fragments = ["fragment B0 on Query { __typename }"]
    for i in range(1, count):
        spreads = " ".join(f"...B{j}" for j in range(max(0, i - 8), i))
        fragments.append(f"fragment B{i} on Query {{ {spreads} }}")
    return f"{{ ...B{count - 1} }} " + " ".join(fragments)


def deep_inline_fragments(levels: int) -> str:
    return "{ " + "... on Query { " * levels + "__typename" + " }" * levels + " }"


def many_variables(count: int) -> str:
    declared = " ".join(f"$v{i}: ID" for i in range(count))
    return f"query({declared}) {{ __typename }}"


def many_operations_one_chain(count: int) -> str:
    """Many operations that all spread one long chain of fragments using a variable."""
    operations = " ".join(f"query Q{i}($v: ID!) {{ ...C{count - 1} }}" for i in range(count))
    fragments = ["fragment C0 on Query { presence(userId: $v) { online } }"]
    fragments += [f"fragment C{i} on Query {{ ...C{i - 1} }}" for i in range(1, count)]
    return operations + " " + " ".join(fragments)


def many_directives(count: int) -> str:
    return "{ __typename " + " ".join(["@include(if: true)"] * count) + " }"


def many_arguments(count: int) -> str:
    return "{ presence(" + " ".join(['userId: "a"'] * count) + ") { online } }"


def wide_fragment() -> str:
    """Near the bound on selections, with no pair to compare: unknown fields, each an error."""
    spreads = " ".join(f'a{i}: presence(userId: "a") {{ ...W }}' for i in range(15))
    fields = " ".join(f"f{i}" for i in range(60))
    return f"{{ {spreads} }} fragment W on UserPresence {{ {fields} }}"


def introspection() -> str:
    from graphql import get_introspection_query  # noqa: PLC0415 - this document only

    return get_introspection_query()


CORPUS: dict[str, Callable[[], str]] = {
    "fan-out, 19 levels": lambda: fan_out(19),
    "fan-out, 25 levels": lambda: fan_out(25),
    "fan-out, 100 levels": lambda: fan_out(100),
    "fan-out through a field, 25 levels": lambda: fan_out_nested(25),
    "__typename x1998": lambda: repeated_leaf(MAX_TOKENS - 2),
    "one field x220, mergeable": lambda: repeated_field(220),
    "one field x220, conflicting": lambda: conflicting_fields(220),
    "one fragment spread x990": lambda: many_spreads_of_one(990),
    "fragments side by side x100": lambda: many_fragments_side_by_side(100),
    "fragments each spreading 8 before, x90": lambda: many_fragments_in_pairs(90),
    "inline fragments 190 deep": lambda: deep_inline_fragments(190),
    "variables x490": lambda: many_variables(490),
    "operations x85 over a chain of 85 fragments": lambda: many_operations_one_chain(85),
    "directives x280": lambda: many_directives(280),
    "arguments x490": lambda: many_arguments(490),
    "one field x17 (the most pairs allowed)": lambda: repeated_field(17),
    "60 unknown fields spread under 15 aliases": wide_fragment,
    "the introspection query": introspection,
}


def validate_once(text: str) -> tuple[float, float, list[GraphQLError]]:
    """Milliseconds to parse, to validate, and the errors."""
    started = time.perf_counter()
    try:
        document: DocumentNode = parse(text, max_tokens=MAX_TOKENS)
    except GraphQLError as error:
        return (time.perf_counter() - started) * 1000, 0.0, [error]
    parsed = time.perf_counter()
    errors = validate_document(SCHEMA, document, tuple(specified_rules), True)
    return (parsed - started) * 1000, (time.perf_counter() - parsed) * 1000, errors


def main() -> None:
    print(f"{'document':48} {'chars':>6} {'parse ms':>9} {'validate ms':>12}  first error")
    for name, make in CORPUS.items():
        if len(sys.argv) > 1 and not any(word in name for word in sys.argv[1:]):
            continue
        text = make()
        runs = [validate_once(text) for _ in range(3)]
        parse_ms = statistics.median(r[0] for r in runs)
        validate_ms = statistics.median(r[1] for r in runs)
        errors = runs[0][2]
        first = errors[0].message[:70] if errors else "valid"
        print(f"{name:48} {len(text):>6} {parse_ms:>9.2f} {validate_ms:>12.2f}  {first}")


if __name__ == "__main__":
    main()
