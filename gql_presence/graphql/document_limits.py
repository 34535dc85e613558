"""Validation of a document, its limits first, in time linear in the document's text.

A fragment may be spread many times, and may spread others in turn, so a document of a few
hundred characters can stand for millions of selections: a check that follows spreads
anew each time costs what the expansion costs. Here each definition's own selections are
walked once, and each fragment's totals (selections, aliases, depth) are computed once and
reused wherever it is spread. A document whose expansion would exceed MAX_SELECTIONS is
refused on these totals alone; only a document within that bound is walked expanded, to
count the same-named fields that graphql-core's merge rule compares in pairs. Only a
document within every limit reaches graphql-core's validation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

from graphql import (
    ASTValidationRule,
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    GraphQLSchema,
    OperationDefinitionNode,
    SelectionSetNode,
    validate,
)
from strawberry.extensions import SchemaExtension
from strawberry.schema.validation_rules.maybe_null import MaybeNullValidationRule
from strawberry.schema.validation_rules.one_of import OneOfInputValidationRule

from gql_presence.graphql.internals import core_schema
from gql_presence.policy.limits import MAX_ALIASES, MAX_DEPTH, MAX_SAME_FIELD_PAIRS, MAX_SELECTIONS

# The rules Strawberry adds to graphql-core's for its own types (Maybe, @oneOf).
_STRAWBERRY_RULES = (MaybeNullValidationRule, OneOfInputValidationRule)


@dataclasses.dataclass
class _Own:
    """One definition's own selections, its spreads not followed."""

    selections: int = 0
    aliases: int = 0
    depth: int = 0  # the deepest selection's level below the definition's top, 0 at the top
    # Each spread: the fragment's name, and its level (None inside introspection, whose
    # fields the depth limit does not count).
    spreads: list[tuple[str, int | None]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class _Totals:
    """A definition's selections, aliases and depth with every spread expanded."""

    selections: int
    aliases: int
    depth: int


@dataclasses.dataclass(frozen=True)
class DocumentShape:
    """What a document amounts to once every fragment spread is expanded."""

    selections: int  # over every definition, as the rules of validation meet them
    aliases: int  # over every operation
    depths: dict[str, int]  # each operation's, by name ("anonymous" for the one without)
    # Pairs of fields of one response name at one place (0 unless the shape was walked).
    same_field_pairs: int
    # The most repeated (response path, count), when the expansion was walked.
    most_repeated: tuple[str, int] | None
    # Selections the measurement visited: at most the document's own selections, plus the
    # expansion when it was walked (which is then at most MAX_SELECTIONS).
    visited: int


def _own(selection_set: SelectionSetNode) -> _Own:
    own = _Own()
    stack: list[tuple[SelectionSetNode, int, bool]] = [(selection_set, 0, True)]
    while stack:
        current, level, counted = stack.pop()
        for selection in current.selections:
            own.selections += 1
            if counted:
                own.depth = max(own.depth, level)
            if isinstance(selection, FragmentSpreadNode):
                own.spreads.append((selection.name.value, level if counted else None))
                continue
            nested = selection.selection_set  # type: ignore[attr-defined]
            if isinstance(selection, FieldNode):
                own.aliases += selection.alias is not None
                if nested is not None:
                    # Introspection is bounded by the schema, not by this limit.
                    deeper = counted and not selection.name.value.startswith("__")
                    stack.append((nested, level + 1, deeper))
            elif nested is not None:  # an inline fragment: same level
                stack.append((nested, level, counted))
    return own


def _totals(own: _Own, done: dict[str, _Totals], cut: set[tuple[str, str]], name: str) -> _Totals:
    selections, aliases, depth = own.selections, own.aliases, own.depth
    for target, level in own.spreads:
        found = done.get(target)
        if found is None or (name, target) in cut:
            continue  # unknown, or closing a cycle: both refused by graphql-core's rules
        selections += found.selections
        aliases += found.aliases
        if level is not None:
            depth = max(depth, level + found.depth)
    return _Totals(selections, aliases, depth)


def _fragment_totals(owns: dict[str, _Own]) -> tuple[dict[str, _Totals], set[tuple[str, str]]]:
    """Each fragment's totals, each computed once, its spreads' totals first; and the
    spreads (from, to) left out because they close a cycle."""
    done: dict[str, _Totals] = {}
    cut: set[tuple[str, str]] = set()
    for root, root_own in owns.items():
        if root in done:
            continue
        # Depth first without recursion: a chain of fragments may be as long as the text.
        path: list[tuple[str, Iterator[tuple[str, int | None]]]] = [(root, iter(root_own.spreads))]
        on_path = {root}
        while path:
            name, spreads = path[-1]
            for target, _level in spreads:
                if target in on_path:
                    cut.add((name, target))
                elif target in owns and target not in done:
                    path.append((target, iter(owns[target].spreads)))
                    on_path.add(target)
                    break
            else:
                path.pop()
                on_path.discard(name)
                done[name] = _totals(owns[name], done, cut, name)
    return done, cut


def _same_field_pairs(
    roots: Sequence[tuple[SelectionSetNode, str | None]],
    fragments: dict[str, FragmentDefinitionNode],
    cut: set[tuple[str, str]],
) -> tuple[int, tuple[str, int] | None, int]:
    """Pairs of same-named fields at one place, fragments expanded (graphql-core's merge
    rule compares each such pair); the most repeated place; and the selections visited.
    Walks the expansion: call it only once the expansion is known to be small."""
    pairs, visited, worst = 0, 0, None
    for root, root_fragment in roots:
        # A place is its parent place and a response name; places are numbered as met.
        places: dict[tuple[int, str], int] = {}
        counts: list[int] = []
        names: list[tuple[int, str]] = []
        stack: list[tuple[SelectionSetNode, int, str | None]] = [(root, -1, root_fragment)]
        while stack:
            current, parent, inside = stack.pop()
            for selection in current.selections:
                visited += 1
                if isinstance(selection, FragmentSpreadNode):
                    target = selection.name.value
                    fragment = fragments.get(target)
                    if fragment is not None and (inside, target) not in cut:
                        stack.append((fragment.selection_set, parent, target))
                    continue
                nested = selection.selection_set  # type: ignore[attr-defined]
                if not isinstance(selection, FieldNode):
                    if nested is not None:
                        stack.append((nested, parent, inside))
                    continue
                key = (parent, (selection.alias or selection.name).value)
                place = places.setdefault(key, len(counts))
                if place == len(counts):
                    counts.append(0)
                    names.append(key)
                pairs += counts[place]  # this field pairs with each met before it here
                counts[place] += 1
                if worst is None or counts[place] > worst[1]:
                    worst = (_path(names, place), counts[place])
                if nested is not None:
                    stack.append((nested, place, inside))
    return pairs, worst, visited


def _path(names: list[tuple[int, str]], place: int) -> str:
    parts = []
    while place >= 0:
        place, name = names[place]
        parts.append(name)
    return ".".join(reversed(parts))


def measure(document: DocumentNode) -> DocumentShape:
    """The document's shape, in time linear in its text: the expansion is walked only
    when it is within MAX_SELECTIONS."""
    fragments: dict[str, FragmentDefinitionNode] = {}
    for definition in document.definitions:
        if isinstance(definition, FragmentDefinitionNode):
            fragments[definition.name.value] = definition  # the last one, as graphql-core
    owns = {name: _own(fragment.selection_set) for name, fragment in fragments.items()}
    done, cut = _fragment_totals(owns)
    visited = sum(own.selections for own in owns.values())
    selections = sum(totals.selections for totals in done.values())
    roots: list[tuple[SelectionSetNode, str | None]] = [
        (fragment.selection_set, name) for name, fragment in fragments.items()
    ]
    aliases, depths = 0, dict[str, int]()
    for definition in document.definitions:
        is_operation = isinstance(definition, OperationDefinitionNode)
        # A fragment defined twice is refused, but the rules still walk the first one.
        is_duplicate = isinstance(definition, FragmentDefinitionNode) and (
            fragments[definition.name.value] is not definition
        )
        if not (is_operation or is_duplicate):
            continue
        selection_set: SelectionSetNode = definition.selection_set  # type: ignore[attr-defined]
        own = _own(selection_set)
        totals = _totals(own, done, cut, "")
        visited += own.selections
        selections += totals.selections
        roots.append((selection_set, None))
        if isinstance(definition, OperationDefinitionNode):
            aliases += totals.aliases
            name = definition.name.value if definition.name else "anonymous"
            depths[name] = max(depths.get(name, 0), totals.depth)
    pairs, worst = 0, None
    if selections <= MAX_SELECTIONS:
        pairs, worst, walked = _same_field_pairs(roots, fragments, cut)
        visited += walked
    return DocumentShape(selections, aliases, depths, pairs, worst, visited)


def limit_errors(document: DocumentNode) -> list[GraphQLError]:
    """The document's refusals for its shape; each says what is allowed."""
    shape = measure(document)
    if shape.selections > MAX_SELECTIONS:
        return [
            GraphQLError(
                f"The document amounts to {shape.selections:,} selections once every fragment "
                f"spread is expanded; at most {MAX_SELECTIONS:,} are allowed. Spread a fragment "
                "where it is needed, not over and over."
            )
        ]
    errors = []
    if shape.same_field_pairs > MAX_SAME_FIELD_PAIRS:
        path, count = shape.most_repeated or ("", 0)
        errors.append(
            GraphQLError(
                f"The document selects the same fields at the same place too often: "
                f"{shape.same_field_pairs:,} pairs of same-named fields to compare "
                f"('{path}' is selected {count:,} times), fragments included; at most "
                f"{MAX_SAME_FIELD_PAIRS:,} pairs are allowed. Select each field once."
            )
        )
    # The wording of Strawberry's depth and alias rules, which these replace.
    errors += [
        GraphQLError(f"'{name}' exceeds maximum operation depth of {MAX_DEPTH}")
        for name, depth in shape.depths.items()
        if depth > MAX_DEPTH
    ]
    if shape.aliases > MAX_ALIASES:
        errors.append(GraphQLError(f"{shape.aliases} aliases found. Allowed: {MAX_ALIASES}"))
    return errors


def validate_document(
    schema: GraphQLSchema,
    document: DocumentNode,
    rules: tuple[type[ASTValidationRule], ...],
    hide_suggestions: bool,
) -> list[GraphQLError]:
    """The document's limits, then (only within them) graphql-core's validation. Validation
    is most of GraphQL's cost per request: a document that passes is kept, and not validated
    again (persisted.PersistedDocumentCache); one that fails is kept nowhere."""
    return limit_errors(document) or validate(
        schema, document, (*rules, *_STRAWBERRY_RULES), hide_suggestions=hide_suggestions
    )


class DocumentValidation(SchemaExtension):
    """Validates each document (see validate_document). With introspection off, errors
    suggest no names ("Did you mean ...?"), which would tell the schema to anyone."""

    def __init__(self, *, hide_suggestions: bool) -> None:
        super().__init__()
        self._hide_suggestions = hide_suggestions

    def on_validate(self) -> Iterator[None]:
        context = self.execution_context
        if context.pre_execution_errors is not None:  # a document validated before
            yield
            return
        assert context.graphql_document is not None  # parsed before validation
        context.pre_execution_errors = validate_document(
            core_schema(context.schema),  # as Strawberry's own cache uses
            context.graphql_document,
            context.validation_rules,
            self._hide_suggestions,
        )
        yield
