"""What the tests of the online list's filters share."""

from __future__ import annotations

import pytest

from gql_presence.store import lists


@pytest.fixture(params=[None, 1], ids=["calls-of-many", "calls-of-one"])
def looked_at(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each script call looks at as many users as the service lets it, or at one: a walk
    then goes on over many calls, each after the user the last one stopped at."""
    if request.param is not None:
        monkeypatch.setattr(lists, "MOST_EXAMINED", request.param)
