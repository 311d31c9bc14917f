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

Writing (it is on the path of every search, so it is kept cheap): each process keeps the file open in
append mode (``O_APPEND``) and writes each record as one whole line with a single ``os.write``, under a
lock, before :func:`record` returns. No buffer in the process and no background thread: a record that
:func:`record` returned from is not lost when the process then crashes or is killed, records keep their
order (per process; on a local file system appends from several processes do not interleave within a
line), and a reader sees a record as soon as the call returns. There is no ``fsync`` per record, the
trade-off chosen: a record sits in the operating system's page cache until the kernel writes it out
(seconds), so a power cut or kernel crash may lose the last few seconds of records; an fsync per
search would cost more than the search itself. (The same durability as before, when ``logging``'s
file handler wrote and flushed each line; it is just done with one system call instead of that
machinery.) A failure to write is reported on stderr and does not stop the query; failing to open the
log at a process's first record raises.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import os
import stat
import sys
import threading
from pathlib import Path

AUDIT_ENV = "WIKIRAG_AUDIT"
MAX_BYTES = 10 * 1024 * 1024
BACKUPS = 5

_lock = threading.Lock()


def path_for(home: Path) -> Path | None:
    """Where this workspace's audit log goes (None when ``WIKIRAG_AUDIT=off``)."""
    chosen = os.environ.get(AUDIT_ENV)
    if chosen and chosen.lower() == "off":
        return None
    return Path(chosen) if chosen else home / ".audit" / "audit.jsonl"


class _AuditFile:
    """One audit log file of this process: kept open for appending, one ``os.write`` per record, rotated
    at :data:`MAX_BYTES` keeping :data:`BACKUPS` old files (as ``logging``'s ``RotatingFileHandler``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.fd = -1
        self.regular = True  # only a regular file is rotated (not /dev/stdout, a pipe, …)
        self._open()  # raises at once if the log cannot be created

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
        self.regular = stat.S_ISREG(os.fstat(self.fd).st_mode)

    def _rotate(self) -> None:
        os.close(self.fd)
        self.fd = -1
        base = str(self.path)
        for i in range(BACKUPS - 1, 0, -1):
            if os.path.exists(f"{base}.{i}"):
                os.replace(f"{base}.{i}", f"{base}.{i + 1}")
        if os.path.exists(base):
            os.replace(base, f"{base}.1")
        self._open()

    def write(self, line: bytes) -> None:
        with self.lock:
            try:
                if self.fd < 0:  # a failed rotation left it closed
                    self._open()
                if self.regular:  # the size now, appends by other processes included (one fstat: cheap)
                    size = os.fstat(self.fd).st_size
                    if size and size + len(line) >= MAX_BYTES:
                        self._rotate()
                view = memoryview(line)
                while view:
                    view = view[os.write(self.fd, view):]
            except OSError as exc:
                print(f"wikirag: could not write the audit log {self.path}: {exc}", file=sys.stderr)

    def after_fork(self) -> None:
        self.lock = threading.Lock()  # another thread may have held it at the fork


_files: dict[str, _AuditFile] = {}
_OFF = object()
_by_home: dict[tuple[str | None, Path], object] = {}  # ($WIKIRAG_AUDIT, workspace) -> its file, or _OFF


def _file(home: Path) -> _AuditFile | None:
    """The open audit file of ``home`` (None when the log is off); opened at the first record."""
    key = (os.environ.get(AUDIT_ENV), home)
    found = _by_home.get(key)
    if found is None:
        path = path_for(home)
        if path is None:
            found = _OFF
        else:
            with _lock:
                found = _files.get(str(path))
                if found is None:
                    found = _files[str(path)] = _AuditFile(path)
        _by_home[key] = found
    return None if found is _OFF else found


def _after_fork() -> None:
    global _lock
    _lock = threading.Lock()
    for audit_file in _files.values():
        audit_file.after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def default_user() -> str:
    """Who runs a command-line query: ``cli:<login name>`` (as :func:`getpass.getuser` finds it: the
    environment's ``LOGNAME``, ``USER``, ``LNAME`` or ``USERNAME``, else the password database, looked up
    once per process)."""
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        user = os.environ.get(name)
        if user:
            return f"cli:{user}"
    return f"cli:{_account_name()}"


@functools.cache
def _account_name() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.getuid())[0]
    except Exception:  # noqa: BLE001 - no login name (containers)
        return "unknown"


def question_hash(question: str) -> str:
    return hashlib.sha256(question.encode("utf-8")).hexdigest()


def passage_id(p) -> str:
    return f"{p.wiki}/{p.path}#{p.start}-{p.end}"


def record(home: Path, event: str, **fields) -> None:
    """Append one event, written to the file before this returns (see the module's notes). A failure to
    write is reported on stderr; it does not stop the query."""
    audit_file = _file(home)
    if audit_file is None:
        return
    entry = {"time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds"), "event": event}
    entry.update({k: (str(v) if k == "clearance" and v is not None else v) for k, v in fields.items()})
    line = json.dumps(entry, ensure_ascii=False, sort_keys=False) + "\n"
    # a lone surrogate (a non-UTF-8 byte of a command line) is kept as its JSON escape, \udcff
    audit_file.write(line.encode("utf-8", errors="backslashreplace"))
