"""Every error wikirag raises on purpose.

The library raises; only the CLI (``cli.py``) and the app turn these into exit codes or messages.
Every message says what is wrong, where, and what to do about it. Nothing else in the package defines
an exception class, and nothing raises the bare base class.
"""

from __future__ import annotations


class WikiragError(Exception):
    """Base class of every error wikirag raises on purpose."""


# configuration ------------------------------------------------------------------------------------

class ConfigError(WikiragError):
    """A YAML file (wiki manifest, composition, accounts) or a setting is missing, malformed or invalid."""


class ManifestError(ConfigError):
    """A wiki's ``.wiki.yaml`` is missing, malformed or invalid."""


class CompositionError(ConfigError):
    """A composition (``rags/*.yaml``) is malformed, names an unknown wiki or breaks its ceiling."""


class LevelError(ConfigError):
    """A sensitivity level or clearance is not one of ``public internal confidential restricted``."""


class MissingDependency(WikiragError):
    """A package or data file wikirag needs is not installed; the message says what to install."""


# lookups and access -------------------------------------------------------------------------------

class NotFound(WikiragError):
    """A workspace, wiki, composition, page or account of that name does not exist (or is not a valid
    name). Above a caller's clearance, things are reported exactly like this."""


class AccessDenied(WikiragError):
    """The caller's clearance is below the level of what they asked for."""


class AuthError(WikiragError):
    """Signing in failed. The message never says whether the account exists."""


class AccountError(WikiragError):
    """An account cannot be saved as asked (e.g. a password that is too short)."""


# indexes and queries ------------------------------------------------------------------------------

class BuildError(WikiragError):
    """An index build failed; the previous index (if any) is untouched and still serves."""


class IndexMissing(WikiragError):
    """A wiki has no usable index: it was never built, or was built by an incompatible version."""


class QueryError(WikiragError):
    """A query cannot run as asked (bad ``k``, unknown fusion or layer, …)."""


class EvalError(WikiragError):
    """Evaluation input (a BEIR folder, queries or judgments) is missing or malformed."""


# models -------------------------------------------------------------------------------------------

class EmbeddingError(WikiragError):
    """Embedding failed (model missing, endpoint unreachable, …)."""


class DenseUnavailable(WikiragError):
    """The Qdrant server of the dense layer did not answer or refused the request (queries then search
    with BM25 only, and say so)."""


class DenseMismatch(WikiragError):
    """A query vector from one embedding model was used against a layer built with another."""


class ModelError(WikiragError):
    """A model call failed. The message says what happened and what to do."""


class ContextTooLong(ModelError):
    """The prompt does not fit the model's context window."""


class LocalModelError(WikiragError):
    """The bundled local model cannot be started or reached."""


class ChecksumMismatch(ValueError):
    """An index file differs from the checksum its build (or merged view) recorded. Internal: the store
    reports it as a damaged index (:class:`IndexMissing`), a view is discarded and merged again."""
