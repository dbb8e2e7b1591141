"""Every command's log lines, on stderr: ``tokmaint: warning: …`` for a person, or, with
``TOKMAINT_LOG_FORMAT=json``, one JSON object a line for a log pipeline (Loki, Elasticsearch,
Cloud Logging): time, level, logger, message and any ``extra`` fields of the call. Results go to
stdout either way. Lines go through ``tqdm.write`` so that progress bars stay whole.

    log = logging.getLogger("tokmaint.pipeline")
    log.warning("lineage %s: ...", name, extra={"lineage": name})

>>> record = logging.LogRecord("tokmaint.pipeline", logging.WARNING, "", 0, "lineage %s: slow", ("git",), None)
>>> record.lineage = "git"
>>> PlainFormatter().format(record)
'tokmaint: warning: lineage git: slow'
>>> json.loads(JsonFormatter().format(record))["lineage"]
'git'
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone

from tqdm import tqdm

from tokenizer_service.settings import Settings, SettingsConfigDict

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class PlainFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        level = {logging.WARNING: "warning: ", logging.ERROR: "error: ", logging.CRITICAL: "error: "}
        return f"tokmaint: {level.get(record.levelno, '')}{record.getMessage()}"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {
            "ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info:
            line["traceback"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


class _TqdmHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        try:
            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:  # noqa: BLE001 (logging's own contract: never raise from emit)
            self.handleError(record)


class LogSettings(Settings):
    """How log lines look (``TOKMAINT_LOG_FORMAT``)."""

    model_config = SettingsConfigDict(env_prefix="TOKMAINT_LOG_")

    format: str = "plain"


def configure(log_format: str | None = None) -> None:
    """Send the ``tokmaint`` loggers' INFO and above to stderr, plain or as JSON (default:
    ``TOKMAINT_LOG_FORMAT``, else plain)."""
    chosen = (log_format or LogSettings().format).lower()
    if chosen not in ("plain", "json"):
        raise ValueError(f"TOKMAINT_LOG_FORMAT must be plain or json, got {chosen!r}")
    logger = logging.getLogger("tokmaint")
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    handler = _TqdmHandler()
    handler.setFormatter(JsonFormatter() if chosen == "json" else PlainFormatter())
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
