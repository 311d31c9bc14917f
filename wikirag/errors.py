"""Errors raised by the wikirag library.

The library raises; only the CLI (``cli.py``) and the app turn these into exit codes or messages.
Every message says what is wrong, where, and what to do about it.
"""

from __future__ import annotations


class WikiragError(Exception):
    """Base class of every error wikirag raises on purpose."""


class ConfigError(WikiragError):
    """A YAML file (wiki manifest or composition) is missing, malformed or invalid."""


class ManifestError(ConfigError):
    """A wiki's ``.wiki.yaml`` is missing, malformed or invalid."""


class CompositionError(ConfigError):
    """A composition (``rags/*.yaml``) is malformed, names an unknown wiki or breaks its ceiling."""


class NotFound(WikiragError):
    """A wiki or composition of that name does not exist in the workspace."""


class AccessDenied(WikiragError):
    """The caller's clearance is below the level of what they asked for."""


class BuildError(WikiragError):
    """An index build failed; the previous index (if any) is untouched and still serves."""


class IndexMissing(WikiragError):
    """A wiki has no usable index: it was never built, or was built by an incompatible version."""


class QueryError(WikiragError):
    """A query cannot run as asked (bad ``k``, unknown fusion, …)."""
