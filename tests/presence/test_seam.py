"""The seam between the store and its scripts: each call passes the KEYS and ARGV its
script's header names, by those names, in that order, with as many values as each entry
takes."""

from __future__ import annotations

import re
from typing import Any

import pytest
from redis.asyncio import Redis

from gql_presence.settings import Settings
from gql_presence.store import PresenceStore
from gql_presence.store.client import AnyRedis
from gql_presence.store.scripts import Entry, ScriptName, header_of, lua_dir
from gql_presence.store.shard import (
    OPTION_NAMES,
    OPTION_NUMBERS,
    Named,
    Shard,
    named,
    pack_options,
    unpack_options,
)
from tests.helpers import call_every_script

# A header line naming an entry: `  KEYS[3]  name`, `  ARGV[7..10]  name`, `  ARGV[4..]  name`.
HEADER_LINE = re.compile(r"^  (KEYS|ARGV)\[([^\]]+)\]\s+(\S+)", re.MULTILINE)


@pytest.mark.parametrize("name", ScriptName)
def test_every_header_numbers_its_entries_one_after_another_and_names_each_once(
    name: str,
) -> None:
    header = (lua_dir() / f"{name}.lua").read_text().split("]]", 1)[0]
    for kind in ("KEYS", "ARGV"):
        entries = [(index, entry) for k, index, entry in HEADER_LINE.findall(header) if k == kind]
        names = [entry for _, entry in entries]
        assert len(set(names)) == len(names), f"{name}.lua names a {kind} entry twice: {names}"
        assert all(re.fullmatch(r"[a-z_0-9]+", n) for n in names), names
        parsed = header_of(name).keys if kind == "KEYS" else header_of(name).args
        assert names == [e.name for e in parsed]
        expected = 1
        for index, _ in entries:
            first, dots, last = index.partition("..")
            if not first.isdigit():
                break  # KEYS[n+1..2n]: numbered by the caller's count from here on
            assert int(first) == expected, (
                f"{name}.lua: {kind}[{index}] after {kind}[..{expected - 1}]"
            )
            if dots and not last.isdigit():
                break  # as many as the caller gives: the last numbered entry
            expected = int(last or first) + 1


def _count(entries: tuple[Entry, ...], given: Named) -> int:
    """How many values the entries take, as given."""
    total = 0
    for entry, value in zip(entries, given.values(), strict=True):
        total += 1 if entry.count == 1 or isinstance(value, str | int) else len(value)
    return total


@pytest.mark.parametrize("deployment", ["one-redis", "cluster"], indirect=True)
async def test_every_script_is_called_with_the_keys_and_arguments_its_header_names(
    http_redis: AnyRedis, deployment: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[ScriptName, Named, Named, list[str], list[Any]]] = []
    call = Shard.call

    def recording_call(
        self: Shard, script: ScriptName, keys: Named, args: Named
    ) -> tuple[list[str], list[Any]]:
        flat_keys, flat_args = call(self, script, keys, args)
        calls.append((script, keys, args, flat_keys, flat_args))
        return flat_keys, flat_args

    monkeypatch.setattr(Shard, "call", recording_call)
    store = PresenceStore(http_redis, deployment)
    await store.choose_publish()
    await call_every_script(store, http_redis)
    on_cluster = bool(deployment.redis_cluster_nodes)
    called = {script for script, *_ in calls}
    # choose_publish runs on a Redis Cluster only, friend_counts with several shards only.
    uncalled = set() if on_cluster else {ScriptName.CHOOSE_PUBLISH}
    if deployment.shards == 1:
        uncalled.add(ScriptName.FRIEND_COUNTS)
    assert called == set(ScriptName) - uncalled
    for script, keys, args, flat_keys, flat_args in calls:
        header = header_of(script)
        assert list(keys) == [entry.name for entry in header.keys], script
        assert list(args) == [entry.name for entry in header.args], script
        for entries, given in ((header.keys, keys), (header.args, args)):
            for entry, value in zip(entries, given.values(), strict=True):
                if entry.count is not None and entry.count > 1:
                    assert not isinstance(value, str | int), (script, entry)
                    assert len(value) == entry.count, (script, entry)
        # What reaches Redis: numkeys is the count the header gives, and ARGV as many.
        assert len(flat_keys) == _count(header.keys, keys), script
        assert len(flat_args) == _count(header.args, args), script


def test_a_call_that_differs_from_its_scripts_header_is_refused_before_redis_is_asked() -> None:
    shard = Shard(None, Settings(), 0, None)  # type: ignore[arg-type]
    k = shard.keys
    documents = named(documents=k.persisted_documents, used=k.persisted_documents_used)
    document = named(
        sha256="0" * 64, document="{ a }", max_count=1, max_bytes=10, registered_age_ms=5
    )
    swapped = named(
        document="{ a }", sha256="0" * 64, max_count=1, max_bytes=10, registered_age_ms=5
    )
    with pytest.raises(RuntimeError, match=r"persist_document.lua's ARGV are \['sha256', "):
        shard.call(ScriptName.PERSIST_DOCUMENT, documents, swapped)
    with pytest.raises(RuntimeError, match=r"persist_document\.lua's KEYS"):
        shard.call(ScriptName.PERSIST_DOCUMENT, named(used=k.persisted_documents_used), document)
    days = named(days=["d"] * 6, scratch=k.scratch)
    with pytest.raises(RuntimeError, match="days takes 7 values"):
        shard.call(ScriptName.WEEKLY_STATS, days, named(retention_ms=1, boundaries=[0] * 8))
    assert shard.call(ScriptName.PERSIST_DOCUMENT, documents, document) == (
        [k.persisted_documents, k.persisted_documents_used],
        ["0" * 64, "{ a }", 1, 10, 5],
    )


async def test_the_shard_argument_is_unpacked_by_the_scripts_as_the_store_packs_it(
    redis: Redis,
) -> None:
    text = (lua_dir() / "includes" / "options.lua").read_text()
    unpacked = re.search(r"\n  local (.*?)=\s*struct\.unpack", text, re.S)
    assert unpacked is not None
    assert re.findall(r"\w+", unpacked[1]) == [*OPTION_NUMBERS, *OPTION_NAMES]
    shard = Shard(redis, Settings(), 2, None)  # type: ignore[arg-type]
    options = unpack_options(shard.options)
    assert options["window_ms"] == Settings().window_ms
    assert options["status_prefix"] == shard.keys.status("")
    assert pack_options(options) == shard.options
    # What Redis's Lua reads from it, name by name.
    script = (
        text
        + "local o = shard_options(ARGV[1])\nlocal out = {}\n"
        + "for i = 2, #ARGV do out[#out + 1] = tostring(o[ARGV[i]]) end\nreturn out"
    )
    names = [*OPTION_NUMBERS, *OPTION_NAMES]
    read = await redis.eval(script, 0, shard.options, *names)
    assert read == [str(options[name]) for name in names]
