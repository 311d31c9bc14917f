"""The audit log: who searched or asked which composition and wikis, when, and which passages came back.

One JSON object per line, appended to ``$WIKIRAG_AUDIT`` (a file path, or ``off``), else
``<workspace>/.audit/audit.jsonl``; rotated at 10 MB, keeping 5 old files (``audit.jsonl.1`` …).
Passages are recorded by id (``wiki/path#start-end``), never by text, and the question by its SHA-256
only, so the log itself holds no wiki content. Events:

* ``search``: user, clearance, composition, wikis, fusion, k, question_sha256, passages, seconds;
* ``answer``: the same, plus model, cited (ids), error;
* ``refused``: user, clearance, what was asked for and why it was refused;
* ``page``: user, clearance, wiki, path (the portal showed a page), or ``page_refused``.

Several processes may append to one file; rotation is per process (a rotation by one may be missed by
another until it restarts): give each process its own file if that matters.
"""

from __future__ import annotations

import datetime as dt
import getpass
import hashlib
import json
import logging
import logging.handlers
import os
import threading
from pathlib import Path

AUDIT_ENV = "WIKIRAG_AUDIT"
MAX_BYTES = 10 * 1024 * 1024
BACKUPS = 5

_loggers: dict[str, logging.Logger] = {}
_lock = threading.Lock()


def path_for(home: Path) -> Path | None:
    """Where this workspace's audit log goes (None when ``WIKIRAG_AUDIT=off``)."""
    chosen = os.environ.get(AUDIT_ENV)
    if chosen and chosen.lower() == "off":
        return None
    return Path(chosen) if chosen else home / ".audit" / "audit.jsonl"


def _logger(path: Path) -> logging.Logger:
    key = str(path)
    with _lock:
        logger = _loggers.get(key)
        if logger is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            handler = logging.handlers.RotatingFileHandler(path, maxBytes=MAX_BYTES, backupCount=BACKUPS,
                                                           encoding="utf-8")
            handler.setFormatter(logging.Formatter("%(message)s"))
            logger = logging.getLogger(f"wikirag.audit.{len(_loggers)}")
            logger.propagate = False  # never mixed into the application's own log
            logger.setLevel(logging.INFO)
            logger.addHandler(handler)
            _loggers[key] = logger
        return logger


def default_user() -> str:
    """Who runs a command-line query: ``cli:<login name>``."""
    try:
        return f"cli:{getpass.getuser()}"
    except Exception:  # noqa: BLE001 - no login name (containers)
        return "cli:unknown"


def question_hash(question: str) -> str:
    return hashlib.sha256(question.encode("utf-8")).hexdigest()


def passage_id(p) -> str:
    return f"{p.wiki}/{p.path}#{p.start}-{p.end}"


def record(home: Path, event: str, **fields) -> None:
    """Append one event. (A failure to write is reported on stderr by ``logging``; it does not stop the
    query.)"""
    path = path_for(home)
    if path is None:
        return
    entry = {"time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds"), "event": event}
    entry.update({k: (str(v) if k == "clearance" and v is not None else v) for k, v in fields.items()})
    _logger(path).info(json.dumps(entry, ensure_ascii=False, sort_keys=False))
