"""Compositions ("RAGs"): a YAML list of wikis in ``rags/<name>.yaml``, queried together.

```yaml
name: engineering          # optional; if given, equal to the file name without .yaml
description: What engineers ask about
sensitivity: internal      # the ceiling: every listed wiki must be at or below it
wikis: [engineering-handbook, wikirag-guide]
k: 5                       # optional: passages returned (default 5)
weights: {wikirag-guide: 0.5}   # optional: per-wiki weight in fusion (default 1)
fusion: routed             # optional: a fusion method name (default: the library default)
model: openai/gpt-4o-mini  # optional: the model for answers (default: $WIKIRAG_MODEL, else extractive)
api_base: http://127.0.0.1:11434   # optional: a self-hosted OpenAI-compatible server
```

This module is the spec only: the file's schema, :func:`parse` and the :class:`Composition` value.
Looking up the listed wikis and checking their levels against the composition's is the workspace's job
(:meth:`wikirag.workspace.Workspace.composition`). Adding a wiki is one line and re-indexes nothing:
each wiki keeps its own index.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import Field, field_validator, model_validator

from . import fusion
from .access import Level
from .config import StrictModel, read_yaml, validate
from .errors import CompositionError
from .wiki import LEVEL_HELP, LevelField, Wiki, check_slug

DEFAULT_K = 5
MAX_K = 200


class CompositionSpec(StrictModel):
    """The contents of ``rags/<name>.yaml``."""

    name: str | None = Field(None, description="the composition's slug, equal to the file name")
    description: str = Field("", description="one sentence on what the composition answers")
    sensitivity: LevelField = Field(description=f"the composition's ceiling, {LEVEL_HELP}")
    wikis: list[str] = Field(min_length=1, description="a list of wiki names, e.g. 'wikis: [handbook]'")
    k: int | None = Field(None, ge=1, le=MAX_K, description=f"passages to return, 1–{MAX_K}")
    weights: dict[str, float] = Field(
        default_factory=dict, description="per-wiki fusion weights > 0, e.g. 'weights: {handbook: 2}'"
    )
    fusion: str | None = Field(None, description="a fusion method: " + ", ".join(sorted(fusion.FUSIONS)))
    model: str | None = Field(None, description="the model that answers: 'extractive', 'local' or a LiteLLM "
                              "model string such as 'openai/gpt-4o-mini'")
    api_base: str | None = Field(None, description="the URL of a self-hosted OpenAI-compatible server")
    rerank: bool = Field(True, description="re-order the top hits by their cosine with the question where "
                         "wikis have a dense layer (true/false)")
    default: bool = Field(False, description="offered first in the app: of the compositions marked so that a "
                          "user may use, the one at the highest level (until the user picks another)")

    @field_validator("name")
    @classmethod
    def _slug(cls, value: str | None) -> str | None:
        return None if value is None else check_slug(value)

    @field_validator("wikis")
    @classmethod
    def _wikis(cls, value: list[str]) -> list[str]:
        for name in value:
            check_slug(name, "wiki name")
        duplicates = sorted({name for name in value if value.count(name) > 1})
        if duplicates:
            raise ValueError(f"wiki(s) listed twice: {', '.join(duplicates)}: list each wiki once")
        return value

    @field_validator("fusion")
    @classmethod
    def _fusion(cls, value: str | None) -> str | None:
        if value is not None and value not in fusion.FUSIONS:
            raise ValueError(f"unknown fusion '{value}': use one of {', '.join(sorted(fusion.FUSIONS))}")
        return value

    @model_validator(mode="after")
    def _weights(self) -> CompositionSpec:
        for name, weight in self.weights.items():
            if name not in self.wikis:
                raise ValueError(f"weights names '{name}', which is not in 'wikis': remove it or add the wiki")
            if not 0 < weight <= 1000:
                raise ValueError(f"weight of '{name}' is {weight}: use a number above 0 (1 is neutral)")
        return self


@dataclass(frozen=True)
class Composition:
    """A loaded composition: its spec and the wikis it lists (all at or below its level)."""

    name: str
    path: Path | None
    spec: CompositionSpec
    wikis: tuple[Wiki, ...]

    @property
    def level(self) -> Level:
        return self.spec.sensitivity

    @property
    def k(self) -> int:
        return self.spec.k or DEFAULT_K

    def weight(self, wiki: str) -> float:
        return self.spec.weights.get(wiki, 1.0)

    @functools.cached_property
    def names(self) -> tuple[str, ...]:
        """The wikis' names, in order (made once: a query of 50 wikis looks at them several times)."""
        return tuple(w.name for w in self.wikis)

    @functools.cached_property
    def by_name(self) -> dict[str, Wiki]:
        return dict(zip(self.names, self.wikis))

    def per_wiki(self, names: tuple[str, ...]) -> tuple[np.ndarray, tuple]:
        """For these of its wikis: their fusion weights as an array and their graph layers' settings
        (kept per tuple of names: read-only; a query of 50 wikis would otherwise look them up each time)."""
        cache = self.__dict__.setdefault("_per_wiki", {})
        got = cache.get(names)
        if got is None:
            weights = np.array([self.weight(n) for n in names], dtype=np.float64)
            weights.flags.writeable = False
            got = cache[names] = (weights, tuple(self.by_name[n].manifest.layers.graph for n in names))
        return got

    @property
    def fusion(self) -> fusion.FusionMethod:
        return fusion.get(self.spec.fusion)


def parse(path: Path) -> tuple[str, CompositionSpec, dict]:
    """Read and validate ``path`` without looking up its wikis: ``(name, spec, key lines)``."""
    hint = "Create it, or run 'wikirag list' to see the compositions there are."
    data, lines = read_yaml(path, CompositionError, hint)
    spec = validate(CompositionSpec, data, path, lines, CompositionError)
    if spec.name is not None and spec.name != path.stem:
        raise CompositionError(
            f"{path}:{lines.get(('name',), 1)}: name '{spec.name}' differs from the file name "
            f"'{path.stem}': set 'name: {path.stem}' or rename the file"
        )
    return spec.name or path.stem, spec, lines
