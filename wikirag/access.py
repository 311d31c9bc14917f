"""Sensitivity levels and the clearance check.

Levels are ordered ``public < internal < confidential < restricted``. A wiki and a composition each
carry a level; a caller carries a clearance. A caller may use something only when its level is at or
below their clearance. The check lives here so that every entry point applies the same rule.
"""

from __future__ import annotations

import enum
import os

from .errors import AccessDenied, LevelError


class Level(enum.IntEnum):
    """A sensitivity level. Compare with ``<``/``<=``; ``str(level)`` is its lower-case name."""

    PUBLIC = 0
    INTERNAL = 1
    CONFIDENTIAL = 2
    RESTRICTED = 3

    def __str__(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, value: str | Level) -> Level:
        """Turn ``"internal"`` (any case) into ``Level.INTERNAL``; anything else is a clear error."""
        if isinstance(value, Level):
            return value
        try:
            return cls[str(value).strip().upper()]
        except KeyError:
            raise LevelError(
                f"unknown sensitivity level {value!r}: use one of {', '.join(LEVEL_NAMES)}"
            ) from None


LEVEL_NAMES: tuple[str, ...] = tuple(str(level) for level in Level)

CLEARANCE_ENV = "WIKIRAG_CLEARANCE"


def default_clearance() -> Level:
    """The clearance from ``WIKIRAG_CLEARANCE``, else ``public`` (the safe default)."""
    return Level.parse(os.environ.get(CLEARANCE_ENV) or "public")


def require(clearance: Level | str, level: Level | str, what: str) -> None:
    """Raise :class:`AccessDenied` unless ``level <= clearance``.

    ``what`` names the thing refused, e.g. ``"composition 'security'"``; the message says which
    clearance is needed so the user knows what to ask for.
    """
    clearance, level = Level.parse(clearance), Level.parse(level)
    if level > clearance:
        raise AccessDenied(
            f"{what} is {level}; your clearance is {clearance}. "
            f"It needs clearance {level} or higher."
        )
