"""Which variables an event's payload can depend on (graphql/event_rendering.py): those that
decide whom a subscription follows are not, so subscriptions that differ only there share
their payloads. Plain data, tested without Redis or an event loop."""

from __future__ import annotations

from graphql import FragmentDefinitionNode, OperationDefinitionNode, parse

from gql_presence.graphql.event_rendering import payload_variables


def read_by_payload(document: str) -> set[str]:
    definitions = parse(document).definitions
    [operation] = [d for d in definitions if isinstance(d, OperationDefinitionNode)]
    fragments = [d for d in definitions if isinstance(d, FragmentDefinitionNode)]
    return payload_variables(operation, fragments)


def test_the_root_fields_arguments_are_not_read_by_a_payload() -> None:
    assert (
        read_by_payload(
            "subscription($ids: [ID!], $after: String) "
            "{ presenceChanged(userIds: $ids, after: $after) { userId kind } }"
        )
        == set()
    )
    assert (
        read_by_payload(
            "subscription($place: ID!) { placeChanged(placeId: $place) { userId state } }"
        )
        == set()
    )


def test_directives_anywhere_and_fragments_are() -> None:
    assert read_by_payload(
        "subscription($ids: [ID!], $show: Boolean!) "
        "{ presenceChanged(userIds: $ids) @include(if: $show) { userId } }"
    ) == {"show"}
    assert read_by_payload(
        "subscription($ids: [ID!], $full: Boolean!, $noKind: Boolean!) "
        "{ presenceChanged(userIds: $ids) { userId sessionId @include(if: $full) ...F } } "
        "fragment F on PresenceEvent { kind @skip(if: $noKind) }"
    ) == {"full", "noKind"}


def test_a_root_field_inside_a_fragment_counts_whole() -> None:
    assert read_by_payload(
        "subscription($ids: [ID!]) { ... on Subscription { presenceChanged(userIds: $ids) "
        "{ userId } } }"
    ) == {"ids"}
