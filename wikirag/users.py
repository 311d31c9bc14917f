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

With neither file, the bundled demo accounts (``wikirag/demo_users.yaml``) apply: demo only.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import yaml
from pydantic import Field, field_validator

from .access import Level
from .config import StrictModel, load_model
from .errors import ConfigError, WikiragError
from .wiki import LevelField, check_slug

USERS_ENV = "WIKIRAG_USERS"
ACCESS_ENV = "WIKIRAG_ACCESS"
DEMO_USERS = Path(__file__).with_name("demo_users.yaml")


class AuthError(WikiragError):
    """Signing in failed. The message never says whether the account exists."""


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


class UserStore:
    """The users file: verify passwords, add and remove accounts."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()

    @classmethod
    def for_home(cls, home: Path) -> UserStore:
        """``$WIKIRAG_USERS``, else ``users.yaml`` in the workspace, else the bundled demo accounts."""
        chosen = os.environ.get(USERS_ENV)
        if chosen:
            return cls(Path(chosen))
        local = home / "users.yaml"
        return cls(local if local.is_file() else DEMO_USERS)

    @property
    def is_demo(self) -> bool:
        return self.path.resolve() == DEMO_USERS.resolve()

    def load(self) -> UsersFile:
        if not self.path.is_file():
            return UsersFile()
        return load_model(UsersFile, self.path, ConfigError, "Create it with 'wikirag user add NAME'.")

    def authenticate(self, name: str, password: str) -> User:
        account = self.load().users.get(name.strip().lower())
        digest = account.password.encode() if account else _DUMMY_HASH
        ok = bcrypt.checkpw(password.encode("utf-8"), digest)
        if account is None or not ok:
            raise AuthError("wrong user name or password")
        return User(name.strip().lower(), account.clearance, account.can_build)

    def add(self, name: str, password: str, clearance: Level | str, can_build: bool = False) -> None:
        """Add or update an account (the password is hashed with bcrypt before it is written)."""
        check_slug(name, "user name")
        if len(password) < 8:
            raise WikiragError("a password needs at least 8 characters")
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
