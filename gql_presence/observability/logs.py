"""Log set-up: readable text, or JSON lines when PRESENCE_LOG_FORMAT=json.

Request lines carry their fields (operation, outcome, caller, status, duration_ms) as `extra`; the
JSON formatter writes them as keys. Nothing from a request's body or headers is logged, so no
user token or secret can reach the logs.

What a client can cause (a malformed request, a connection it closed or stopped reading) is
logged once, at WARNING or below and without a stack trace, whichever library reports it;
ERROR with a stack trace is kept for faults of ours.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from aiohttp.http_exceptions import HttpProcessingError
from strawberry.http.exceptions import WebSocketDisconnected

REQUEST_FIELDS = ("method", "path", "status", "operation", "outcome", "caller", "duration_ms")


class JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update({k: getattr(record, k) for k in REQUEST_FIELDS if hasattr(record, k)})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


# A request aiohttp could not parse (too long a line, too many headers, a bad character).
_MALFORMED = (HttpProcessingError,)
# A client that went away, or stopped reading until its connection was aborted.
_GONE = (ConnectionError, WebSocketDisconnected)
# Loggers, ours and our libraries', that report what a client did as an error with a trace:
# aiohttp's request parsing, Strawberry's WebSocket tasks, asyncio's unretrieved task
# exceptions, and the tasks our event hub spawns to close sockets.
CLIENT_FACING_LOGGERS = (
    "aiohttp.server",
    "aiohttp.web",
    "aiohttp.websocket",
    "strawberry.ws",
    "strawberry.ws.task",
    "strawberry.execution",
    "asyncio",
    "gql_presence.events",
)


class ClientFaults(logging.Filter):
    """Turns a record of a client's fault into one line, at WARNING for a malformed request
    and at INFO for a client that went away, naming the exception's type only: what the
    client sent (which aiohttp's messages quote) is never logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, _MALFORMED + _GONE):
            level = logging.WARNING if isinstance(error, _MALFORMED) else logging.INFO
            record.msg = f"{record.getMessage()} (caused by the client: {type(error).__name__})"
            record.args = None
            record.levelno = min(record.levelno, level)
            record.levelname = logging.getLevelName(record.levelno)
            record.exc_info = None
            record.exc_text = None
        return True


def log_client_faults_quietly() -> None:
    """Puts ClientFaults on every logger that reports client faults (once per process)."""
    for name in CLIENT_FACING_LOGGERS:
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
