"""Web-app sign-in sessions that outlive a page reload: held on the server, named by an opaque token.

A password sign-in creates a session: a random token (``secrets.token_urlsafe``, 256 bits) that the
browser keeps in a cookie, and on the server the token's SHA-256 with the user's name and the session's
start and end (:data:`SESSION_HOURS` later), in ``<workspace>/.sessions/sessions.json`` (mode 0600,
written atomically, each change a read-modify-write under the file's ``flock``, :mod:`wikirag.filestore`:
several app processes over one workspace sign users in at once and lose no session). The browser holds nothing but the token: no name, clearance or password. A new page
load (a reload, a second tab, a shared link) sends the cookie and :meth:`SessionStore.user` turns it back
into the user, with the clearance and build right of the account *as it is now* (an account removed or
changed since applies at once). Signing out ends every session of that user, in every browser; an expired
session is refused and dropped.

Why not an HttpOnly cookie: Streamlit gives a page no way to set response headers, so the token is set by
a fixed script of the app (``document.cookie``, ``SameSite=Strict``, ``Secure`` over HTTPS). Page text is
never rendered as HTML or script (markdown without HTML), so no wiki content can read it, and a stolen token
is worthless after sign-out or its 8 hours. Single sign-on users keep Streamlit's own ``st.login`` session.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import tempfile
import time
from pathlib import Path

from . import filestore
from .errors import WikiragError
from .users import User, UserStore

SESSION_HOURS = 8
COOKIE = "wikirag_session"
log = logging.getLogger("wikirag.webapp")


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


class SessionStore:
    """The sessions of one workspace's app (see the module docstring)."""

    def __init__(self, home: Path, hours: float = SESSION_HOURS):
        self.path = Path(home) / ".sessions" / "sessions.json"
        self.seconds = hours * 3600

    def _read(self) -> dict[str, dict]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _write(self, data: dict[str, dict], path: Path | None = None) -> None:
        path = path or self.path
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".sessions-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(data, out)
            os.chmod(tmp, 0o600)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def start(self, user: User) -> tuple[str, float]:
        """A new session for ``user``: (the token for the browser, the time it started)."""
        token, now = secrets.token_urlsafe(32), time.time()
        try:
            with filestore.locked(self.path):
                data = {k: v for k, v in self._read().items() if isinstance(v, dict) and v.get("ends", 0) > now}
                data[_digest(token)] = {"user": user.name, "started": now, "ends": now + self.seconds}
                self._write(data)
        except OSError as exc:  # a read-only workspace: signed in for this browser session only
            log.warning("sign-in sessions cannot be kept in %s (%s): a reload signs %s out",
                        self.path.parent, exc.strerror or exc, user.name)
        return token, now

    def user(self, token: str | None, users: UserStore) -> tuple[User, float] | None:
        """The user of a live session and when it started, with the account as it is now; None for no
        token, an unknown, ended or expired one, or an account that is gone."""
        if not isinstance(token, str) or not token or len(token) > 200:
            return None
        entry = self._read().get(_digest(token))
        if not isinstance(entry, dict) or entry.get("ends", 0) <= time.time():
            return None
        try:
            account = users.load().users.get(entry.get("user"))
        except WikiragError:  # an unusable accounts file: nobody is signed in from it
            return None
        if account is None:
            return None
        return User(entry["user"], account.clearance, account.can_build), float(entry.get("started", 0))

    def end_all(self, name: str) -> int:
        """End every session of user ``name`` (sign-out ends it in every browser); how many there were."""
        with filestore.locked(self.path):
            data = self._read()
            kept = {k: v for k, v in data.items()
                    if isinstance(v, dict) and v.get("user") != name and v.get("ends", 0) > time.time()}
            if len(kept) != len(data):
                self._write(kept)
            return len(data) - len(kept)

    # what each user last chose in the app (a composition, a pair to compare), kept across sessions
    def _choices_path(self) -> Path:
        return self.path.with_name("choices.json")

    def recall(self, name: str, what: str) -> object:
        """User ``name``'s last choice of ``what`` (e.g. ``"chat"``), or None."""
        try:
            data = json.loads(self._choices_path().read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        entry = data.get(name) if isinstance(data, dict) else None
        return entry.get(what) if isinstance(entry, dict) else None

    def remember(self, name: str, what: str, value: object) -> None:
        """Keep user ``name``'s choice of ``what`` (written only when it changed)."""
        path = self._choices_path()
        try:
            with filestore.locked(path):
                try:
                    data = json.loads(path.read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    data = {}
                if not isinstance(data, dict):
                    data = {}
                if not isinstance(data.get(name), dict):
                    data[name] = {}
                if data[name].get(what) == value:
                    return
                data[name][what] = value
                self._write(data, path)
        except OSError as exc:  # a read-only workspace: the choice is not kept, nothing else fails
            log.warning("choices cannot be kept in %s (%s)", path.parent, exc.strerror or exc)
