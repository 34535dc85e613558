"""Script calls that are measured but not traced: a loop's polling (the webhooks' deliveries
look at the feed several times a second) would otherwise fill the traces with spans of nothing
happening. Set in a task of its own; the tasks it starts inherit it."""

from __future__ import annotations

from contextvars import ContextVar

UNTRACED: ContextVar[bool] = ContextVar("untraced_scripts", default=False)
