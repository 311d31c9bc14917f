"""Load a YAML file into a typed model, with errors that name the file, the line, the key and the fix.

Used for wiki manifests (``.wiki.yaml``) and compositions (``rags/*.yaml``). Models derive from
:class:`StrictModel`, which rejects unknown keys; each field's ``description`` is shown as the fix.
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

M = TypeVar("M", bound=BaseModel)


class StrictModel(BaseModel):
    """A pydantic model that forbids unknown keys and cannot be mutated after loading."""

    model_config = ConfigDict(extra="forbid", frozen=True)


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
    """Parse ``path``; return the data and a map of key path -> line. Raise ``error`` on failure."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{path}: file not found. {missing_hint}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{path}: cannot read it ({exc}). Save it as UTF-8 text.") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
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
