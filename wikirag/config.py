"""Load a YAML file into a typed model, with errors that name the file, the line, the key and the fix.

Used for every YAML file wikirag reads: wiki manifests (``.wiki.yaml``), compositions (``rags/*.yaml``),
``users.yaml`` and ``access.yaml``. Models derive from :class:`StrictModel`, which rejects unknown keys;
each field's ``description`` is shown as the fix.

These files may come from anyone who can write to a workspace, so reading one is bounded before any
work is done on it:

* a file larger than :data:`MAX_YAML_BYTES` (1 MB; real ones are a few hundred bytes) is refused
  before it is parsed, and never more than that is read;
* YAML anchors and aliases (``&name`` / ``*name``) are refused while the document is composed. They
  are how a few hundred bytes expand to billions of nodes ("billion laughs"), and no wikirag file
  needs them, so refusing them outright is simpler and safer than bounding what they expand to;
* nesting deeper than :data:`MAX_YAML_DEPTH` levels is refused (the parser recurses per level).

Each refusal is the caller's :class:`~wikirag.errors.ConfigError` subclass, naming the file and line.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from .errors import ConfigError

CACHE_ENV = "WIKIRAG_CACHE"
MAX_YAML_BYTES = 2**20
"""The largest YAML file wikirag reads (1 MB); checked before it is read."""
MAX_YAML_DEPTH = 50
"""The deepest nesting of mappings and lists allowed in a YAML file (wikirag's files use three or four)."""

M = TypeVar("M", bound=BaseModel)


class StrictModel(BaseModel):
    """A pydantic model that forbids unknown keys and cannot be mutated after loading."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing anchors, aliases and deep nesting as it composes the node tree.

    A refusal raises the caller's error class at once (it is not a ``YAMLError``, so it passes through
    PyYAML untouched), before anything is expanded or constructed.
    """

    def __init__(self, text: str, path: Path, error: type[ConfigError]) -> None:
        super().__init__(text)
        self._setup(path, error)

    def _setup(self, path: Path, error: type[ConfigError]) -> None:
        self._path = path
        self._error = error
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        """Compose the next node, unless it is an alias, carries an anchor or is nested too deep."""
        event = self.peek_event()
        where = f"{self._path}:{event.start_mark.line + 1}"
        if isinstance(event, yaml.AliasEvent) or event.anchor is not None:
            kind, sigil = ("alias", "*") if isinstance(event, yaml.AliasEvent) else ("anchor", "&")
            raise self._error(f"{where}: YAML {kind} '{sigil}{event.anchor}' is not allowed: "
                              "remove the anchor/alias (&name / *name): wikirag files do not use them")
        if self._depth >= MAX_YAML_DEPTH:
            raise self._error(f"{where}: nested more than {MAX_YAML_DEPTH} levels deep: "
                              "flatten it (wikirag files need only a few levels)")
        self._depth += 1
        try:
            return yaml.composer.Composer.compose_node(self, parent, index)  # (shared with _FastStrictLoader)
        finally:
            self._depth -= 1

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """Construct ``node``; a value Python refuses (e.g. an integer of over 4300 digits) names its line."""
        try:
            return yaml.constructor.BaseConstructor.construct_object(self, node, deep)
        except ValueError as exc:
            raise self._error(f"{self._path}:{node.start_mark.line + 1}: invalid value ({exc}): "
                              "fix the value at that line") from None


try:  # libyaml's scanner and parser (C), under the same composer and checks: five times faster
    from yaml._yaml import CParser as _CParser
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    _CParser = None

if _CParser is not None:
    class _FastStrictLoader(yaml.composer.Composer, _CParser, yaml.constructor.SafeConstructor, yaml.resolver.Resolver):
        """:class:`_StrictLoader` on libyaml's events: the composer (with its refusals), constructor and
        resolver are PyYAML's own Python ones, so the data and key lines are the same."""

        compose_node = _StrictLoader.compose_node
        construct_object = _StrictLoader.construct_object
        _setup = _StrictLoader._setup

        def __init__(self, text: str, path: Path, error: type[ConfigError]) -> None:
            _CParser.__init__(self, text)
            yaml.composer.Composer.__init__(self)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)
            self._setup(path, error)


def _parse(text: str, path: Path, error: type[ConfigError]) -> tuple[Any, yaml.Node | None]:
    """``(data, node tree)`` of ``text``; YAML errors propagate as PyYAML's own (a text libyaml refuses is
    parsed again by the pure-Python loader, whose messages the error reports quote)."""
    loaders = [_FastStrictLoader, _StrictLoader] if _CParser is not None else [_StrictLoader]
    for i, kind in enumerate(loaders):
        loader = kind(text, path, error)
        try:
            node = loader.get_single_node()
            return (loader.construct_document(node) if node is not None else None), node
        except yaml.YAMLError:
            if i == len(loaders) - 1:
                raise
        finally:
            loader.dispose()
    raise AssertionError("unreachable")  # pragma: no cover


def _read_text(path: Path, error: type[ConfigError], missing_hint: str) -> str:
    """The text of ``path``, refused before it is read if it is larger than :data:`MAX_YAML_BYTES`."""
    limit = f"the limit of {MAX_YAML_BYTES // 2**20} MB for a wikirag YAML file"
    fix = "check it is the right file and shorten it"
    try:
        size = path.stat().st_size
        if size > MAX_YAML_BYTES:
            raise error(f"{path}: too large ({size:,} bytes, over {limit}): {fix}")
        with path.open("rb") as fh:
            raw = fh.read(MAX_YAML_BYTES + 1)  # never more, even if the file grows or lies about its size
        if len(raw) > MAX_YAML_BYTES:
            raise error(f"{path}: too large (over {limit}): {fix}")
        return raw.decode("utf-8")
    except FileNotFoundError:
        raise error(f"{path}: file not found. {missing_hint}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{path}: cannot read it ({exc}). Save it as UTF-8 text.") from None


def _key_lines(node: yaml.Node, prefix: tuple = ()) -> dict[tuple, int]:
    """Map every key path in a composed YAML document to its 1-based line."""
    lines: dict[tuple, int] = {}
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            path = (*prefix, key_node.value)
            lines[path] = key_node.start_mark.line + 1
            lines.update(_key_lines(value_node, path))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            path = (*prefix, i)
            lines[path] = item.start_mark.line + 1
            lines.update(_key_lines(item, path))
    return lines


def _line_for(loc: tuple, lines: dict[tuple, int]) -> int | None:
    """The line of the longest known prefix of a pydantic error location."""
    for end in range(len(loc), 0, -1):
        # pydantic reports list items as ints and dict keys as str, like our key paths
        if loc[:end] in lines:
            return lines[loc[:end]]
    return None


def _describe(error: dict, model: type[BaseModel], where: str, lines: dict[tuple, int]) -> str:
    loc = tuple(error["loc"])
    line = _line_for(loc, lines)
    at = f"{where}:{line}" if line else where
    dotted = ".".join(str(part) for part in loc)
    fields = model.model_fields
    kind = error["type"]
    if kind == "extra_forbidden" and len(loc) == 1:
        close = difflib.get_close_matches(str(loc[0]), list(fields), n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"allowed keys: {', '.join(fields)}"
        return f"{at}: unknown key '{dotted}': remove it ({hint})"
    if kind == "extra_forbidden":
        return f"{at}: unknown key '{dotted}': remove it"
    if kind == "missing":
        field = fields.get(str(loc[0]))
        fix = f" ({field.description})" if field is not None and field.description else ""
        return f"{at}: missing required key '{dotted}': add it{fix}"
    message = error["msg"]
    message = message.removeprefix("Value error, ")
    field = fields.get(str(loc[0])) if loc else None
    fix = f" — expected: {field.description}" if field is not None and field.description else ""
    return f"{at}: key '{dotted}': {message}{fix}"


def read_yaml(path: Path, error: type[ConfigError], missing_hint: str) -> tuple[Any, dict]:
    """Parse ``path``; return the data and a map of key path -> line. Raise ``error`` on failure.

    The file is parsed once (composed, then constructed from the same node tree), with the bounds in
    the module docstring: over 1 MB, anchors/aliases and deep nesting are refused with ``error``.
    """
    text = _read_text(path, error, missing_hint)
    try:
        data, node = _parse(text, path, error)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = exc.problem or exc.context or "invalid YAML"
        raise error(f"{path}{line}: invalid YAML: {problem}. Fix the syntax at that line.") from None
    except yaml.YAMLError as exc:
        raise error(f"{path}: invalid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise error(f"{path}:1: expected a mapping of keys (like 'name: …'), found {type(data).__name__}")
    return data, _key_lines(node) if node is not None else {}


def load_text(text: str, where: str) -> Any:
    """Parse YAML ``text`` that is not a wikirag file (a page's frontmatter) with the same bounds:
    anchors, aliases and deep nesting raise :class:`ConfigError`, as invalid YAML does."""
    try:
        return _parse(text, Path(where), ConfigError)[0]
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: invalid YAML: {exc}") from None


def validate(model: type[M], data: dict, path: Path, lines: dict[tuple, int], error: type[ConfigError]) -> M:
    """Validate ``data`` against ``model``; on failure raise ``error`` listing every problem."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = [_describe(e, model, str(path), lines) for e in exc.errors()]
        raise error("\n".join(problems)) from None


def load_model(model: type[M], path: Path, error: type[ConfigError], missing_hint: str) -> M:
    """Read and validate ``path`` as ``model`` in one step."""
    data, lines = read_yaml(path, error, missing_hint)
    return validate(model, data, path, lines, error)


def cache_dir() -> Path:
    """wikirag's cache folder: ``$WIKIRAG_CACHE``, else ``$XDG_CACHE_HOME/wikirag``, else ``~/.cache/wikirag``
    (converted evaluation data, the local model server's state)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "wikirag"
