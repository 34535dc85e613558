"""Full garbage collections that walk what is new, not everything the process holds.

CPython's full (generation 2) collection walks every object the collector tracks and stops
the process while it does: with 1,000 WebSockets held, about 90 tracked objects each (the
request, its protocol, reader and writer, tasks, our deliveries), that is 70-150 ms on a shared
core, and every event in flight waits for it. What sets one off is not the connections but the
requests: whatever a request holds when a younger collection runs is promoted, and once those
promotions reach a quarter of the old generation a full collection runs, every 10-20 s under
10 requests a second (bench/RESULTS.md, "Place fan-out").

So what survives a full collection is frozen (`gc.freeze()`): the next one walks only what was
promoted since. A frozen object that dies is still freed by its reference count; only a cycle
among frozen objects is kept. To bound those, once the frozen objects are GROWTH times what
the last complete collection left, everything is thawed and collected at once, and what lives
is frozen again: a pause as long as before, but once per doubling of what the process holds,
not every few seconds of requests.

Young collections are set off less often too (YOUNG_THRESHOLD allocations, not CPython's 700):
each walks every object the requests in flight hold, whatever few of them are new, so at 700 a
process serving 50 requests at once spent about a tenth of its CPU in them. Fewer young
collections also promote fewer in-flight objects, which is what sets off full ones.
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

# Frozen objects, against what the last complete collection left, that start a complete
# collection: at most as many cycles kept as there are live objects.
GROWTH = 2
_OLDEST = 2  # the generation of full collections
# Allocations (less deallocations) of tracked objects that set off a young collection.
YOUNG_THRESHOLD = 10_000


class SurvivorFreezer:
    """Freezes the survivors of each full collection; collects everything once they grow."""

    def __init__(self, loop: asyncio.AbstractEventLoop, growth: float = GROWTH) -> None:
        self._loop = loop
        self._growth = growth
        self._baseline = 0
        self._complete_planned = False
        self.complete_collections = 0
        self._thresholds: tuple[int, ...] | None = None

    def start(self) -> None:
        """Collects and freezes what the process holds now (modules, the schema, the
        scripts), then keeps the survivors of every full collection out of the next."""
        if self._after_collection not in gc.callbacks:
            gc.callbacks.append(self._after_collection)
        if self._thresholds is None:
            self._thresholds = gc.get_threshold()
            gc.set_threshold(YOUNG_THRESHOLD, *self._thresholds[1:])
        self.collect_all()

    def stop(self) -> None:
        if self._after_collection in gc.callbacks:
            gc.callbacks.remove(self._after_collection)
        if self._thresholds is not None:
            gc.set_threshold(*self._thresholds)
            self._thresholds = None

    def collect_all(self) -> None:
        """One complete collection, frozen objects included; what lives is frozen after it."""
        self._complete_planned = True  # what its own end sees calls for no other
        gc.unfreeze()
        gc.collect()  # its end freezes the survivors (_after_collection)
        self._baseline = gc.get_freeze_count()
        self._complete_planned = False
        self.complete_collections += 1

    def _after_collection(self, phase: str, info: dict[str, Any]) -> None:
        # The collector calls this at whatever allocation set it off, in any thread: it only
        # moves the collector's lists, and leaves a complete collection to the event loop.
        if phase != "stop" or info["generation"] != _OLDEST:
            return
        gc.freeze()
        if self._complete_planned or gc.get_freeze_count() <= self._growth * self._baseline:
            return
        if self._loop.is_closed():
            return
        self._complete_planned = True
        self._loop.call_soon_threadsafe(self.collect_all)
