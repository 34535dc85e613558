"""Log set-up: readable text, or JSON lines when PRESENCE_LOG_FORMAT=json.

Request lines carry their fields (operation, outcome, caller, status, duration_ms) as `extra`; the
JSON formatter writes them as keys. Nothing from a request's body or headers is logged, so no
user token or secret can reach the logs.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

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


def configure_logging(log_format: str) -> None:
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonLines())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
