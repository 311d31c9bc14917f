"""Small server-side files that several app processes share: read, change under a lock, write atomically.

The web app keeps conversations and feedback in ``<workspace>/.sessions/`` beside the sign-in sessions.
Several ``wikirag app`` processes (ports, or machines over one shared workspace folder) may write them at
once, so every change is a read-modify-write under an exclusive ``fcntl.flock`` on a lock file beside
the data (``<file>.lock``), and every write goes to a temporary file in the same folder that is then
renamed over the old one: a reader sees the old file or the new one, never half of one, and two writers
never lose each other's change. ``flock`` holds across processes on local filesystems and on NFSv4 and
CIFS/SMB mounts (Linux maps it to the server's byte-range locks); it does not hold on NFSv3 without
``lockd`` (README "Security and reliability"). Files are mode 0600 in a 0700 folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: one process per workspace
    fcntl = None  # type: ignore[assignment]

_thread_lock = threading.Lock()  # flock is per open file; threads of one process also take this


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold the exclusive lock of data file ``path`` (threads of this process and other processes)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with _thread_lock:
        fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the flock


def read_json(path: Path, default: object) -> object:
    """The JSON in ``path``, or ``default`` when it is missing or unreadable (a damaged file is not fatal:
    the next write replaces it)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return default


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (temp file in the same folder, then rename), mode 0600."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, data: object) -> None:
    """Write ``data`` as JSON to ``path`` atomically (:func:`write_text`), mode 0600."""
    write_text(path, json.dumps(data, ensure_ascii=False))
