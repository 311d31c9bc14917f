"""Who may sign in, and at which clearance: local accounts and the access map for single sign-on.

* **Local accounts** live in a users file (``$WIKIRAG_USERS``, else ``users.yaml`` in the workspace)::

      users:
        alice: {password: "$2b$12$…", clearance: internal, can_build: true}

  Passwords are stored only as bcrypt hashes (``wikirag user add NAME --clearance L`` prompts for one).
  A wrong name and a wrong password get the same answer, so a failed sign-in does not reveal whether
  the account exists.
* **Single sign-on** (Streamlit's ``st.login``, OIDC) users get their clearance from an access file
  (``$WIKIRAG_ACCESS``, else ``access.yaml`` in the workspace)::

      emails: {carol@example.com: confidential}
      domains: {example.com: internal}
      unknown: public        # or: refuse

The bundled demo accounts (``wikirag/demo_users.yaml``, passwords published in the README) apply only
in demo mode (``WIKIRAG_DEMO=1``, which ``wikirag app --demo`` sets) and only when there is no users
file; a users file that contains a demo account's hash is refused outside demo mode. Without demo mode
and without accounts, nobody can sign in: the app says how to add an account.

Failed sign-ins are limited to 5 per user name and per browser session, and 50 per network address, in
10 minutes (:class:`LoginThrottle`); a try is counted before its password is checked, so tries sent at
once cannot get past the limit. Sign-ins expire (the app's ``SESSION_HOURS``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import yaml
from pydantic import Field, field_validator

from . import filestore
from .access import Level
from .config import StrictModel, load_model
from .errors import AccountError, AuthError, ConfigError
from .wiki import LevelField, check_slug

USERS_ENV = "WIKIRAG_USERS"
ACCESS_ENV = "WIKIRAG_ACCESS"
DEMO_ENV = "WIKIRAG_DEMO"
DEMO_USERS = Path(__file__).with_name("demo_users.yaml")
MAX_FAILURES = 5  # failed sign-ins per user name and per browser session in FAILURE_WINDOW
MAX_ADDRESS_FAILURES = 50  # per network address (many people may share one: a proxy, an office)
FAILURE_WINDOW = 600.0  # seconds
MAX_TRACKED_KEYS = 10_000  # beyond this many keys, expired ones are forgotten
MAX_PASSWORD_BYTES = 72  # bcrypt reads no more than this (bcrypt 5 raises beyond it)
MIN_COOKIE_SECRET = 32
log = logging.getLogger("wikirag.users")


def demo_mode() -> bool:
    return os.environ.get(DEMO_ENV, "").strip().lower() in ("1", "true", "yes", "on")


class LoginThrottle:
    """At most ``limit`` sign-in tries that fail per key (user name, browser session) in ``window`` seconds,
    and ``address_limit`` per network address (keys starting ``address:``; looser, as a proxy or an office
    NAT puts many people behind one address).

    Check and count are one step: :meth:`reserve` counts a try *before* the password is checked, under the
    lock, so however many tries arrive at once, at most ``limit`` of them reach the password check. A try
    that succeeds gives its reservation back (:meth:`succeeded`); one that fails keeps it, as the failure.

    With ``path`` (the workspace's ``.sessions/throttle.json``, as :meth:`UserStore.for_home` sets it), the
    tries are kept in that file, each step a read-modify-write under its ``flock``
    (:mod:`wikirag.filestore`), with wall-clock times: several app processes over one workspace share one
    count, so a proxy spreading an attacker's tries over N processes does not give N times the limit.
    """

    def __init__(self, limit: int = MAX_FAILURES, window: float = FAILURE_WINDOW,
                 address_limit: int = MAX_ADDRESS_FAILURES, clock: Callable[[], float] | None = None,
                 path: Path | None = None):
        self.limit, self.window, self.address_limit = limit, window, address_limit
        self.clock = clock or (time.time if path is not None else time.monotonic)
        self.path = path
        self._tries: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def _held(self):
        """The lock of the tries (and with a file, the tries read from it first and written back after)."""
        with self._lock, contextlib.ExitStack() as stack:
            data = None
            if self.path is not None:
                try:
                    stack.enter_context(filestore.locked(self.path))
                    data = filestore.read_json(self.path, {})
                except OSError as exc:  # a read-only workspace: this process counts alone
                    log.warning("sign-in tries cannot be shared in %s (%s): counted per process", self.path,
                                exc.strerror or exc)
                    self.path = None
            if data is not None:
                self._tries = {k: [float(t) for t in v] for k, v in data.items()
                               if isinstance(v, list)} if isinstance(data, dict) else {}
            before = repr(self._tries)
            yield
            if data is not None and repr(self._tries) != before:
                try:
                    filestore.write_json(self.path, self._tries)
                except OSError as exc:
                    log.warning("sign-in tries cannot be kept in %s (%s)", self.path, exc.strerror or exc)

    def _limit(self, key: str) -> int:
        return self.address_limit if key.startswith("address:") else self.limit

    def reserve(self, *keys: str) -> float:
        """Count one try against every key, or raise :class:`AuthError` (counting nothing) if any key has
        used up its limit. Returns the try's token, for :meth:`succeeded` or :meth:`release`."""
        now = self.clock()
        with self._held():
            if len(self._tries) > MAX_TRACKED_KEYS:  # forget keys whose tries have all expired
                self._tries = {k: v for k, v in self._tries.items() if v and now - v[-1] < self.window}
            for key in keys:
                recent = [t for t in self._tries.get(key, []) if now - t < self.window]
                self._tries[key] = recent
                if len(recent) >= self._limit(key):
                    wait = max(1, math.ceil(self.window - (now - recent[0])))
                    raise AuthError(f"too many failed sign-ins: try again in {wait} s")
            for key in keys:
                self._tries[key].append(now)
        return now

    def release(self, token: float, *keys: str) -> None:
        """Give a try's reservation back (it neither failed nor succeeded, e.g. the users file is broken)."""
        with self._held():
            for key in keys:
                with contextlib.suppress(ValueError):
                    self._tries.get(key, []).remove(token)

    def succeeded(self, token: float, user_key: str, *keys: str) -> None:
        """A try succeeded: the user name's failures are cleared; the other keys (the client's) only get
        this try back, so signing in to an account of one's own does not reset a client's failures."""
        with self._held():
            self._tries.pop(user_key, None)
            for key in keys:
                with contextlib.suppress(ValueError):
                    self._tries.get(key, []).remove(token)


@dataclass(frozen=True)
class User:
    """A signed-in user."""

    name: str
    clearance: Level
    can_build: bool = False
    via: str = "password"  # or "sso"


class Account(StrictModel):
    password: str = Field(description="a bcrypt hash (use 'wikirag user add' to set it)")
    clearance: LevelField = Field(description="public, internal, confidential or restricted")
    can_build: bool = Field(False, description="may rebuild wikis from the portal")

    @field_validator("password")
    @classmethod
    def _hashed(cls, value: str) -> str:
        if not value.startswith(("$2a$", "$2b$", "$2y$")):
            raise ValueError("must be a bcrypt hash, never a plain password: set it with 'wikirag user add'")
        return value


class UsersFile(StrictModel):
    users: dict[str, Account] = Field(default_factory=dict, description="user name: account")

    @field_validator("users")
    @classmethod
    def _names(cls, value: dict[str, Account]) -> dict[str, Account]:
        for name in value:
            check_slug(name, "user name")
        return value


class AccessFile(StrictModel):
    emails: dict[str, LevelField] = Field(default_factory=dict, description="email: clearance")
    domains: dict[str, LevelField] = Field(default_factory=dict, description="email domain: clearance")
    unknown: str = Field("public", description="clearance of other signed-in users, or 'refuse'")

    @field_validator("unknown")
    @classmethod
    def _unknown(cls, value: str) -> str:
        if value != "refuse":
            Level.parse(value)
        return value


# compared against when the user does not exist, so both failures take the same time (cost 12, as
# bcrypt.gensalt's default; precomputed so that importing this module stays instant)
_DUMMY_HASH = b"$2b$12$aEdBmTZOcrgzt/3gaq1/nuIWAx7JPEL9N2n5BofqUkM0kNldqzy0S"


def _password_bytes(password: str) -> bytes | None:
    """The password as bcrypt takes it (UTF-8), or None if bcrypt cannot take it (over 72 bytes, or a
    string that is not valid Unicode)."""
    try:
        secret = password.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return None
    return secret if len(secret) <= MAX_PASSWORD_BYTES else None


class UserStore:
    """The users file: verify passwords, add and remove accounts."""

    def __init__(self, path: Path, throttle: LoginThrottle | None = None):
        self.path = path
        self.throttle = throttle or LoginThrottle()
        self._lock = threading.Lock()

    @classmethod
    def for_home(cls, home: Path) -> UserStore:
        """``$WIKIRAG_USERS``, else ``users.yaml`` in the workspace; in demo mode with neither, the demo
        accounts."""
        chosen = os.environ.get(USERS_ENV)
        throttle = LoginThrottle(path=Path(home) / ".sessions" / "throttle.json")  # shared by the app's processes
        if chosen:
            return cls(Path(chosen), throttle)
        local = home / "users.yaml"
        return cls(DEMO_USERS if demo_mode() and not local.is_file() else local, throttle)

    @property
    def is_demo(self) -> bool:
        return self.path.resolve() == DEMO_USERS.resolve()

    def load(self) -> UsersFile:
        if not self.path.is_file():
            return UsersFile()
        users = load_model(UsersFile, self.path, ConfigError, "Create it with 'wikirag user add NAME'.")
        if not self.is_demo and not demo_mode():
            demo = {a.password for a in load_model(UsersFile, DEMO_USERS, ConfigError, "").users.values()}
            copied = sorted(name for name, account in users.users.items() if account.password in demo)
            if copied:
                raise ConfigError(f"{self.path}: account(s) {', '.join(copied)} use a demo password, which is "
                                  "published: set real passwords with 'wikirag user add', or run in demo mode")
        return users

    def authenticate(self, name: str, password: str, client: str | None = None,
                     address: str | None = None) -> User:
        """The user, if the password is right; else :class:`AuthError`, with the same message whether or not
        the account exists.

        Refused without checking the password after too many failures for this name, this client (an
        opaque key per browser session) or this network address (see :class:`LoginThrottle`): the try is
        counted before the password is checked, so concurrent tries cannot exceed the limit. A password
        longer than bcrypt's 72 bytes cannot be right: it fails (and counts) without a bcrypt call.
        """
        name = name.strip().lower()
        user_key = f"user:{name}"
        others = ([f"client:{client}"] if client else []) + ([f"address:{address}"] if address else [])
        keys = [user_key, *others]
        token = self.throttle.reserve(*keys)
        try:
            account = self.load().users.get(name)
        except BaseException:  # a broken users file is not the visitor's failed try
            self.throttle.release(token, *keys)
            raise
        secret = _password_bytes(password)
        ok = False
        if secret is not None:
            digest = account.password.encode() if account else _DUMMY_HASH
            try:
                ok = bcrypt.checkpw(secret, digest)
            except ValueError:  # e.g. a malformed hash: a failed try like any other
                ok = False
        if account is None or not ok:
            raise AuthError("wrong user name or password")  # the try stays counted, as a failure
        self.throttle.succeeded(token, user_key, *others)
        return User(name, account.clearance, account.can_build)

    def add(self, name: str, password: str, clearance: Level | str, can_build: bool = False) -> None:
        """Add or update an account (the password is hashed with bcrypt before it is written)."""
        check_slug(name, "user name")
        if len(password) < 8:
            raise AccountError("a password needs at least 8 characters: choose a longer one")
        if _password_bytes(password) is None:
            raise AccountError(f"a password can have at most {MAX_PASSWORD_BYTES} bytes in UTF-8, bcrypt's limit (a "
                               "character outside ASCII takes 2 to 4): choose a shorter one")
        digest = bcrypt.hashpw(password.encode("utf-8"), bcrypt.gensalt()).decode()
        with self._lock:
            data = self.load().model_dump(mode="json")
            data["users"][name] = {"password": digest, "clearance": str(Level.parse(clearance)),
                                   "can_build": can_build}
            self._write(data)

    def remove(self, name: str) -> bool:
        with self._lock:
            data = self.load().model_dump(mode="json")
            found = data["users"].pop(name, None) is not None
            if found:
                self._write(data)
            return found

    def _write(self, data: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.touch(mode=0o600)
        tmp.write_text(yaml.safe_dump(data, sort_keys=True), encoding="utf-8")
        os.replace(tmp, self.path)


def check_cookie_secret(secret: str | None) -> None:
    """Single sign-on signs its cookie with ``[auth] cookie_secret`` from secrets.toml: it must be a real
    secret (never a default or an example)."""
    if not secret or len(secret) < MIN_COOKIE_SECRET or secret.lower().startswith(("change", "example", "xxx")):
        raise ConfigError(f"[auth] cookie_secret in .streamlit/secrets.toml must be a random secret of at least "
                          f"{MIN_COOKIE_SECRET} characters: generate one with "
                          "python -c 'import secrets; print(secrets.token_urlsafe(32))'")


def sso_user(email: str, home: Path) -> User:
    """The clearance of a single-sign-on user, from the access file; raises AuthError if refused."""
    chosen = os.environ.get(ACCESS_ENV)
    path = Path(chosen) if chosen else home / "access.yaml"
    policy = load_model(AccessFile, path, ConfigError, "") if path.is_file() else AccessFile()
    email = email.strip().lower()
    level = policy.emails.get(email) or policy.domains.get(email.rpartition("@")[2])
    if level is None:
        if policy.unknown == "refuse":
            raise AuthError(f"{email} may not use this wikirag: ask an administrator to add you")
        level = Level.parse(policy.unknown)
    return User(email, level, via="sso")
