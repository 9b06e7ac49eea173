"""Logging set-up: plain text for people, JSON lines for production.

fleetfix's own records are events with stable names shaped stage.object.event (the message is the
name; nothing is interpolated into it), and their data goes in the record's `fields` mapping:

    log.info("remediator.remediation.planned", extra={"fields": {"remediation": 7, "host": "h1"}})

A JSON line is {"ts", "level", "logger", "event", "pid", ...fields}. Records of other libraries
(Celery, uvicorn, SQLAlchemy) keep their text in `message` under the event `log.message`, so a log
pipeline can match on `event` alone. Python warnings become `log.message` records too, and in
JSON mode Celery's start-up banner (free text on stdout) is not printed: one stream, one format.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import sys
from typing import Any

EVENT_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+){2,}$")
"""stage.object.event: lower case, dot-separated, three parts or more."""
FOREIGN_EVENT = "log.message"
RESERVED = frozenset({"ts", "level", "logger", "event", "pid", "message", "exc"})


def is_event_name(text: str) -> bool:
    return bool(EVENT_NAME.match(text))


_CREDENTIAL = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^:/@\s]*):(?P<secret>[^@/\s]+)@")


def mask_credentials(text: str) -> str:
    """Every URL's password as `***` (postgresql://fleetfix:***@db/fleetfix, redis://:***@cache:6379/0):
    applied to everything fleetfix prints or logs, so a secret in a setting never reaches a console."""
    return _CREDENTIAL.sub(r"\g<head>:***@", text)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        doc: dict[str, Any] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": message if is_event_name(message) else FOREIGN_EVENT,
            "pid": record.process,
        }
        if doc["event"] == FOREIGN_EVENT:
            doc["message"] = message
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            # a field never overwrites the envelope: it is kept under a prefixed name instead
            doc.update({(f"field_{k}" if k in RESERVED else k): v for k, v in fields.items()})
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return mask_credentials(json.dumps(doc, default=str))


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict) and fields:
            line += " " + " ".join(f"{k}={v}" for k, v in fields.items())
        return mask_credentials(line)


def _no_celery_banner(instance: Any = None, **_: Any) -> None:
    if instance is not None:
        instance.quiet = True


def setup_logging(level: str = "INFO", fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
        from celery.signals import celeryd_after_setup

        # sent just before the worker prints its banner; weak=False: the receiver is module-level anyway
        celeryd_after_setup.connect(_no_celery_banner, weak=False)
    else:
        handler.setFormatter(TextFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.captureWarnings(True)
