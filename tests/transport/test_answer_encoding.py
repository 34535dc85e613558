"""The service's answers are the text Strawberry's view would write: json.dumps with compact
separators, made here with one encoder kept for every answer."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gql_presence.http.view import _encode_compact

_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30,
)


@given(_JSON_VALUES)
def test_an_answer_is_the_text_strawberry_writes(value: Any) -> None:
    assert _encode_compact(value) == json.dumps(value, separators=(",", ":"))


def test_an_answer_of_a_presence_is_the_text_strawberry_writes() -> None:
    answer = {
        "data": {
            "presence": {
                "userId": "ü\u2028\"'<",
                "online": True,
                "lastSeen": "2026-11-29T10:00:00.000Z",
                "sessions": [{"sessionId": "phone", "lastSeen": None}],
            }
        },
        "errors": [{"message": "x", "path": ["presence", 0], "extensions": {"code": "X"}}],
    }
    assert _encode_compact(answer) == json.dumps(answer, separators=(",", ":"))


def test_a_value_json_cannot_write_is_refused_as_dumps_refuses_it() -> None:
    with pytest.raises(TypeError, match="is not JSON serializable"):
        _encode_compact({"data": object()})
