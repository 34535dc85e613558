"""The served process's full garbage collections walk what is new, not what it holds
(gql_presence/running/collector.py). Each test runs in a Python of its own: freezing changes
the collector of the whole process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# Run after the freezer has started, in a coroutine of the process's event loop: `held`, a
# list of 30,000 dicts, stands for what live connections hold.
PRELUDE = """
import asyncio, gc, weakref
from gql_presence.running.collector import SurvivorFreezer

class Node:
    pass

def cycle():
    node = Node()
    node.me = node
    return node

async def main():
    freezer = SurvivorFreezer(asyncio.get_running_loop())
    freezer.start()
{body}

asyncio.run(main())
"""


def run(body: str) -> None:
    script = PRELUDE.replace("{body}", textwrap.indent(textwrap.dedent(body), "    "))
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr


def test_a_full_collection_leaves_what_survived_the_last_one_out() -> None:
    run("""
        held = [[i] for i in range(30_000)]  # what live connections hold
        gc.collect()  # the first full collection after them walks them, once
        assert len(gc.get_objects()) < 5_000, len(gc.get_objects())
        gc.collect()
        assert len(gc.get_objects()) < 5_000, len(gc.get_objects())
        assert len(held) == 30_000 and held[-1] == [29_999]
        """)


def test_young_cycles_are_still_collected() -> None:
    run("""
        gc.collect()
        young = weakref.ref(cycle())
        gc.collect()
        assert young() is None
        """)


def test_frozen_cycles_are_collected_once_the_frozen_objects_have_grown() -> None:
    run("""
        held = [[i] for i in range(gc.get_freeze_count() // 2)]
        old = cycle()
        gone = weakref.ref(old)
        gc.collect()  # frozen, with what it survived with: half as much again as at start
        del old
        gc.collect()
        await asyncio.sleep(0)
        assert gone() is not None  # kept while frozen: the price of not walking it
        assert freezer.complete_collections == 1  # the one at start
        more = [[i] for i in range(gc.get_freeze_count())]
        gc.collect()  # the frozen objects are twice those at start: a complete collection next
        await asyncio.sleep(0)
        assert gone() is None
        assert freezer.complete_collections == 2
        assert len(gc.get_objects()) < 5_000 and len(held) + len(more) > 0
        """)


def test_stopped_it_leaves_full_collections_as_they_are() -> None:
    run("""
        freezer.stop()
        more = [[i] for i in range(30_000)]
        gc.collect()
        assert len(gc.get_objects()) > 30_000 and len(more) > 0
        """)


def test_young_collections_wait_for_many_more_allocations_and_stopped_as_before() -> None:
    run("""
        young = gc.get_stats()[0]["collections"]
        made = [[i] for i in range(5_000)]  # at CPython's 700, seven young collections
        assert gc.get_stats()[0]["collections"] == young
        freezer.stop()
        assert gc.get_threshold()[0] == 700
        more = [[i] for i in range(5_000)]
        assert gc.get_stats()[0]["collections"] > young and len(made) + len(more) > 0
        """)
