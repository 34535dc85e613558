"""Log set-up: readable text, or JSON lines when PRESENCE_LOG_FORMAT=json.

Request lines carry their fields (operation, outcome, caller, status, duration_ms) as `extra`; the
JSON formatter writes them as keys. Nothing from a request's body or headers is logged, so no
user token or secret can reach the logs.

What a client can cause (a malformed request, a connection it closed or stopped reading) is
logged once, at WARNING or below and without a stack trace, whichever library reports it;
ERROR with a stack trace is kept for faults of ours. What a client sent reaches the log only
bounded and escaped, and lines alike at WARNING or above only a few times a minute, whichever
library logs them: a refused WebSocket handshake, say, comes before any credentials, and its
Origin and Host are the client's to choose.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from json.encoder import encode_basestring
from typing import Any

from aiohttp.http_exceptions import HttpProcessingError
from strawberry.http.exceptions import WebSocketDisconnected

REQUEST_FIELDS = ("method", "path", "status", "operation", "outcome", "caller", "duration_ms")
# json.dumps(line, ensure_ascii=False), without making an encoder for every line.
_ENCODE = json.JSONEncoder(ensure_ascii=False).encode


class JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        exception = self.formatException(record.exc_info) if record.exc_info else None
        # record.__dict__ is where logging puts `extra`.
        return json_line(
            record.created,
            record.levelname,
            record.name,
            record.getMessage(),
            record.__dict__,
            exception=exception,
        )


def json_line(
    created: float,
    level: str,
    logger: str,
    message: str,
    fields: Mapping[str, Any],
    *,
    exception: str | None = None,
) -> str:
    """One line of PRESENCE_LOG_FORMAT=json: `created` in seconds since the epoch, `level`
    as logging names it, and the REQUEST_FIELDS that `fields` holds."""
    line: dict[str, Any] = {
        "time": datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds"),
        "level": level.lower(),
        "logger": logger,
        "message": message,
    }
    line.update({k: fields[k] for k in REQUEST_FIELDS if k in fields})
    if exception is not None:
        line["exception"] = exception
    return _ENCODE(line)


def request_line(created: float, logger: str, message: str, args: RequestArgs) -> str:
    """json_line(created, "INFO", logger, message, request_fields(args)): the same text, made
    from its parts, without a dictionary walked by the encoder and a datetime for each line
    (1.75 µs a line where json_line takes 5.0, bench/RESULTS.md, 2026-11-29)."""
    method, path, operation, outcome, caller, status, duration_ms = args
    return (
        f'{{"time": "{_SECONDS.iso_ms(created)}", "level": "info", "logger": {_TEXT(logger)}, '
        f'"message": {_TEXT(message)}, "method": {_TEXT(method)}, "path": {_TEXT(path)}, '
        f'"status": {int.__repr__(status)}, "operation": {_TEXT(operation)}, '
        f'"outcome": {_TEXT(outcome)}, "caller": {_TEXT(caller)}, '
        f'"duration_ms": {float.__repr__(round(duration_ms, 2))}}}'
    )


# A request's line's arguments: method, path, operation, outcome, caller, status, and its
# duration in ms.
RequestArgs = tuple[str, str, str, str, str, int, float]


def request_fields(args: RequestArgs) -> dict[str, Any]:
    """The REQUEST_FIELDS of a request's line."""
    method, path, operation, outcome, caller, status, duration_ms = args
    return {
        "method": method,
        "path": path,
        "status": status,
        "operation": operation,
        "outcome": outcome,
        "caller": caller,
        "duration_ms": round(duration_ms, 2),
    }


# A string as _ENCODE writes it.
_TEXT = encode_basestring


class _Seconds:
    """datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds"), each second's date
    and time made once: CPython's steps from a timestamp to its microseconds, rounded half
    to even, then those of the second."""

    __slots__ = ("_after", "_before", "_second")

    def __init__(self) -> None:
        self._second: int | None = None
        self._before = self._after = ""  # the second's text, before and after its fraction

    def iso_ms(self, created: float) -> str:
        fraction, whole = math.modf(created)
        micros = round(fraction * 1e6)
        if micros >= 1_000_000:
            micros -= 1_000_000
            whole += 1
        elif micros < 0:
            micros += 1_000_000
            whole -= 1
        second = int(whole)
        if second != self._second:
            shown = datetime.fromtimestamp(second, UTC).isoformat()
            self._second, self._before, self._after = second, shown[:19], shown[19:]
        return f"{self._before}.{micros // 1000:03d}{self._after}"


_SECONDS = _Seconds()


def json_stream_of(logger: logging.Logger) -> logging.StreamHandler[Any] | None:
    """The handler that an INFO record of `logger` would reach alone, when it is a plain
    StreamHandler writing JsonLines (configure_logging's, PRESENCE_LOG_FORMAT=json) and
    nothing on the way filters or changes the record; else None. A line written straight to
    its stream then is the one logging would write, without a record made for it."""
    if logger.disabled or logger.filters or not logger.isEnabledFor(logging.INFO):
        return None
    found: list[logging.Handler] = []
    current: logging.Logger | None = logger
    while current is not None:  # the handlers Logger.callHandlers would call
        found += current.handlers
        current = current.parent if current.propagate else None
    if len(found) != 1:
        return None
    handler = found[0]
    if (
        type(handler) is not logging.StreamHandler
        or type(handler.formatter) is not JsonLines
        or handler.filters
        or handler.level > logging.INFO
    ):
        return None
    return handler


# A request aiohttp could not parse (too long a line, too many headers, a bad character).
_MALFORMED = (HttpProcessingError,)
# A client that went away, or stopped reading until its connection was aborted.
_GONE = (ConnectionError, WebSocketDisconnected)
# Loggers, ours and our libraries', that report what a client did or sent: aiohttp's request
# parsing, handshakes and access log, Strawberry's WebSocket handshakes and tasks, asyncio's
# unretrieved task exceptions, the tasks our event hub spawns to close sockets, and our log of
# unexpected errors (which names the client's operation). Every other logger of LIBRARIES
# that exists when the filters are put on is fitted too.
CLIENT_FACING_LOGGERS = (
    "aiohttp.access",
    "aiohttp.internal",
    "aiohttp.server",
    "aiohttp.web",
    "aiohttp.websocket",
    "strawberry.ws",
    "strawberry.ws.task",
    "strawberry.execution",
    "asyncio",
    "gql_presence.events",
    "gql_presence.errors",
)
LIBRARIES = ("aiohttp", "strawberry", "graphql", "redis", "asyncio")
# Of any one value a line holds (a header, an operation name, an id), at most this many
# characters are logged: enough to recognise it, too few to fill the log.
MAX_LOGGED_CHARS = 200
# A line a library logged with its values already in it: all of it may be a client's.
MAX_MESSAGE_CHARS = 500
# Of lines alike (one logger, level, message template and exception type, whatever their
# values) at WARNING or above, at most this many a minute; the count of the others is logged
# with the next one after the minute.
REPEATS_LOGGED = 10
REPEAT_WINDOW_S = 60.0
# A library's templates are a few dozen: more kinds than this, and the counts start afresh.
_KINDS_KEPT = 1024


class ClientFaults(logging.Filter):
    """What clients can cause and send, as the libraries log it.

    Every value a line holds is shown bounded (MAX_LOGGED_CHARS) and escaped as repr()
    escapes a string (control characters, line breaks, bidirectional overrides), whether
    the message shows it with %s or %r; a line logged already formatted, as a whole
    (MAX_MESSAGE_CHARS). A record of a client's fault becomes one line, at WARNING for a
    malformed request and at INFO for a client that went away, naming the exception's type
    only: what the client sent (which aiohttp's messages quote) is never logged. Lines alike
    at WARNING or above are logged REPEATS_LOGGED times a minute, and the others counted."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._clock = clock
        self._kinds: dict[tuple[int, str], _Repeats] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        # A line logged already formatted may hold anything: all of a logger's are one kind.
        template = record.msg if isinstance(record.msg, str) and record.args else ""
        kind = f"{template} {type(error).__name__}" if error else template
        record.msg = _IN_OUR_WORDS.get(template, record.msg)
        _bound(record)
        if isinstance(error, _MALFORMED + _GONE):
            level = logging.WARNING if isinstance(error, _MALFORMED) else logging.INFO
            record.msg = f"{record.getMessage()} (caused by the client: {type(error).__name__})"
            record.args = None
            record.levelno = min(record.levelno, level)
            record.levelname = logging.getLevelName(record.levelno)
            record.exc_info = None
            record.exc_text = None
        if record.levelno < logging.WARNING:
            return True
        return self._counted(record, (record.levelno, kind))

    def _counted(self, record: logging.LogRecord, kind: tuple[int, str]) -> bool:
        now = self._clock()
        repeats = self._kinds.get(kind)
        if repeats is None or now - repeats.since >= REPEAT_WINDOW_S:
            if repeats is not None and repeats.left_out:
                # No % in what is added: the message may still be formatted with its args.
                record.msg = (
                    f"{record.msg} [{repeats.left_out:,} more like it were left out in the "
                    f"minute before]"
                )
            if len(self._kinds) >= _KINDS_KEPT:
                self._kinds.clear()
            self._kinds[kind] = _Repeats(since=now)
            return True
        repeats.logged += 1
        if repeats.logged < REPEATS_LOGGED:
            return True
        if repeats.logged == REPEATS_LOGGED:
            record.msg = (
                f"{record.msg} [{REPEATS_LOGGED} like it within a minute: more are left out "
                "for the rest of it, and counted]"
            )
            return True
        repeats.left_out += 1
        return False


# Library lines that name the library's own parameter where an operator sets ours.
_IN_OUR_WORDS = {
    # Strawberry's (0.341): its `allowed_origins` is PRESENCE_CORS_ORIGINS here.
    "Rejected WebSocket connection from origin %r to host %r. If pages on this origin should "
    "be able to connect, add it to `allowed_origins`.": (
        "Rejected WebSocket connection from origin %r to host %r. If pages on this origin should "
        "be able to connect, list it in PRESENCE_CORS_ORIGINS."
    ),
}


@dataclass
class _Repeats:
    since: float  # when the first of the minute was logged, on the filter's clock
    logged: int = 1
    left_out: int = 0


def _bound(record: logging.LogRecord) -> None:
    args = record.args
    if isinstance(args, Mapping):
        record.args = {name: _shown(value) for name, value in args.items()}
    elif args:
        record.args = tuple(_shown(value) for value in args)
    if not args or not isinstance(record.msg, str):  # not a library's own template
        shown, cut = _escaped(str(record.msg), MAX_MESSAGE_CHARS)
        record.msg = shown + cut


def _shown(value: object) -> object:
    # Numbers stay numbers for %d and %.1f, and say no more than their digits.
    if value is None or isinstance(value, int | float):
        return value
    return _Bounded(value)


class _Bounded:
    """A value of a log line, shown bounded and escaped by %s and %r alike."""

    __slots__ = ("_value",)

    def __init__(self, value: object) -> None:
        self._value = value

    def __str__(self) -> str:
        shown, cut = _escaped(str(self._value), MAX_LOGGED_CHARS)
        return shown + cut

    def __repr__(self) -> str:
        if not isinstance(self._value, str):
            shown, cut = _escaped(repr(self._value), MAX_LOGGED_CHARS)
            return shown + cut
        shown, cut = _escaped(self._value, MAX_LOGGED_CHARS)
        return f"'{shown}'{cut}"


def _escaped(text: str, most: int) -> tuple[str, str]:
    """The first `most` characters of `text`, each that does not print escaped as repr()
    escapes it; and, when that is not all of it, how long it was."""
    shown = text[:most]
    if not shown.isprintable():
        shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in shown)
    cut = f"… [{len(text):,} characters in all]" if len(text) > most else ""
    return shown, cut


def log_client_faults_quietly() -> None:
    """Puts ClientFaults on every logger that reports what clients do (once per process): those
    named, and every logger of LIBRARIES made by now (a filter sees only the records of its
    own logger, not of the loggers below it)."""
    made = logging.Logger.manager.loggerDict
    names = {*CLIENT_FACING_LOGGERS}
    names.update(
        name
        for name, logger in list(made.items())
        if isinstance(logger, logging.Logger) and name.split(".")[0] in LIBRARIES
    )
    for name in sorted(names):
        logger = logging.getLogger(name)
        if not any(isinstance(f, ClientFaults) for f in logger.filters):
            logger.addFilter(ClientFaults())


def configure_logging(log_format: str, level: str = "info") -> None:
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonLines())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    # Neither format shows where a line was logged from, nor its thread or process: not
    # working them out for every record (the logging HOWTO's "Optimization") takes about a
    # third off the cost of a request's line.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
