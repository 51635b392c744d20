"""Structured logs: one JSON object per line on stderr (``ts``, ``level``, ``logger``, ``msg`` + fields).

Fields are passed with ``extra={"fields": {...}}`` so that they stay separate from the message:

>>> import io, json, logging
>>> stream = io.StringIO()
>>> log = logging.getLogger("doctest.logs"); log.propagate = False
>>> handler = logging.StreamHandler(stream); handler.setFormatter(JsonFormatter()); log.addHandler(handler)
>>> log.warning("rpc", extra={"fields": {"method": "GetTweet", "code": "NOT_FOUND"}})
>>> record = json.loads(stream.getvalue()); record["msg"], record["method"], record["code"]
('rpc', 'GetTweet', 'NOT_FOUND')
"""

from __future__ import annotations

import json
import logging
import sys
import time


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        doc.update(getattr(record, "fields", None) or {})
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


def configure_json_logging(level: str = "INFO") -> None:
    """Replace the root handlers with one JSON handler on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    logging.getLogger("cassandra").setLevel(max(logging.WARNING, logging.getLogger().level))
