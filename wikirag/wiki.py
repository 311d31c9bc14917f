"""A wiki: a folder ``wikis/<name>/`` with a ``.wiki.yaml`` manifest, markdown sources and an index.

The manifest is loaded into :class:`WikiManifest`, which rejects unknown keys and wrong types with
errors that name the file, the line and the fix. The index lives in ``wikis/<name>/.index/``; the
sources (the wiki folder itself, or ``source:`` elsewhere) are only ever read.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BeforeValidator, Field, PlainSerializer, field_validator

from .access import LEVEL_NAMES, Level
from .config import StrictModel, load_model, validate
from .errors import ManifestError, WikiragError

MANIFEST_NAME = ".wiki.yaml"
INDEX_DIR_NAME = ".index"
SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
GLOB_CHARS = re.compile(r"[*?\[]")
# bumped whenever this process writes a manifest, so cached manifests are re-read at once
manifest_generation = 0


def check_slug(name: str, what: str = "name") -> str:
    """Return ``name`` if it is a safe slug; refuse ``/``, ``..``, upper case and other path tricks."""
    if not isinstance(name, str) or not SLUG_RE.fullmatch(name) or len(name) > 100:
        raise ValueError(
            f"{what} {name!r} is not allowed: use lower-case letters, digits, '-' and '_', "
            "starting with a letter or digit (no '/', '..' or spaces)"
        )
    return name


def _parse_level(value: Any) -> Level:
    try:
        return Level.parse(value)
    except WikiragError:
        raise ValueError(f"{value!r} is not a sensitivity level") from None


LevelField = Annotated[Level, BeforeValidator(_parse_level), PlainSerializer(str, return_type=str)]
LEVEL_HELP = "one of " + ", ".join(LEVEL_NAMES)


class Chunking(StrictModel):
    """How a wiki's pages are cut into passages."""

    max_tokens: int = Field(512, ge=32, le=8192, description="passage size in cl100k_base tokens (32–8192)")
    min_chars: int = Field(40, ge=0, le=2000, description="drop passages shorter than this many characters")
    max_file_mb: float = Field(10, gt=0, le=1000, description="skip (and report) markdown files larger than this")


# The cosine a wiki's best dense hit needs by default, per embedding model, chosen by measurement
# (README, "Dense layer"): with minilm over the example wikis, 33 strings that ask nothing (empty,
# stopwords, keyboard mash, greetings, "test") had a best passage at up to 0.31, and 44 questions
# the wikis answer had their answering page at 0.42 or more. Other models' cosines have other
# scales: no floor unless the manifest sets one.
DENSE_FLOORS = {"minilm": 0.35}


class DenseSpec(StrictModel):
    """Opt-in dense layer: ``layers: {dense: {}}`` (the offline default model) or with a model."""

    model: str = Field("minilm", description="'minilm' (offline, bundled) or a LiteLLM embedding model such as "
                       "'openai/text-embedding-3-small'")
    api_base: str | None = Field(None, description="URL of a self-hosted embedding server")
    min_similarity: float | None = Field(
        None, ge=-1, le=1, description="cosine the best dense hit needs, else the wiki gives no dense hits (default: "
        "0.35 for minilm, else none): a question near nothing gets no passage, not the nearest neighbours")

    def floor(self) -> float | None:
        """The cosine the best dense hit needs (:attr:`min_similarity`, else the model's default; ``None``: none)."""
        return self.min_similarity if self.min_similarity is not None else DENSE_FLOORS.get(self.model)


class GraphSpec(StrictModel):
    """Opt-in graph layer: ``layers: {graph: {}}`` follows the wiki's own links at query time."""

    seeds: int = Field(10, ge=1, le=100, description="how many of the fused top hits seed the link walk (1–100)")
    passages: int = Field(10, ge=1, le=100, description="how many linked passages the layer adds per wiki (1–100)")
    tags: bool = Field(False, description="also connect pages that share a tag (true/false)")


class Layers(StrictModel):
    """Retrieval layers besides BM25 (which every wiki has)."""

    dense: DenseSpec | None = Field(None, description="the dense layer, e.g. 'dense: {}' or 'dense: {model: …}'")
    graph: GraphSpec | None = Field(None, description="the link-graph layer, e.g. 'graph: {}' or 'graph: {tags: true}'")


class WikiManifest(StrictModel):
    """The contents of ``wikis/<name>/.wiki.yaml``."""

    name: str = Field(description="the wiki's slug, equal to its folder name, e.g. 'name: handbook'")
    title: str = Field(description="a human title, e.g. 'title: Engineering handbook'")
    description: str = Field("", description="one or two sentences on what the wiki holds")
    tags: list[str] = Field(default_factory=list, description="a list of labels, e.g. 'tags: [eng, ops]'")
    sensitivity: LevelField = Field(description=f"the wiki's level, {LEVEL_HELP}")
    source: str | None = Field(
        None, description="a folder or glob of markdown elsewhere (relative to the wiki folder or absolute)"
    )
    include_tags: list[str] = Field(
        default_factory=list, description="keep only files with one of these tags, e.g. ['#wiki/Topic']"
    )
    exclude: list[str] = Field(
        default_factory=list, description="glob patterns of paths (relative to the source) to leave out"
    )
    meta_files: list[str] = Field(
        default_factory=lambda: ["_*", "index.md"],
        description="file-name patterns of meta pages that are not indexed",
    )
    chunking: Chunking = Field(default_factory=Chunking, description="max_tokens and min_chars")
    layers: Layers = Field(default_factory=Layers, description="optional layers, e.g. 'layers: {dense: {}}'")

    @field_validator("name")
    @classmethod
    def _slug(cls, value: str) -> str:
        return check_slug(value)


@dataclass(frozen=True)
class SourceSpec:
    """Where a wiki's markdown lives: a root folder, and a glob pattern below it (or None for all)."""

    root: Path
    pattern: str | None


@dataclass(frozen=True)
class Wiki:
    """A loaded wiki: its folder and validated manifest."""

    folder: Path
    manifest: WikiManifest

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def level(self) -> Level:
        return self.manifest.sensitivity

    @functools.cached_property
    def manifest_path(self) -> Path:
        return self.folder / MANIFEST_NAME

    @functools.cached_property
    def index_dir(self) -> Path:
        return self.folder / INDEX_DIR_NAME

    @functools.cached_property
    def current_pointer(self) -> str:
        """Path of ``.index/CURRENT`` as a string (checked on every query: kept cheap)."""
        return os.path.join(self.folder, INDEX_DIR_NAME, "CURRENT")

    @functools.cached_property
    def source_root(self) -> str:
        """The source root as a string, resolved once per loaded wiki: for the cheap freshness checks of
        the query path (builds resolve :meth:`source_spec` anew)."""
        return str(self.source_spec().root)

    @classmethod
    def load(cls, folder: Path) -> Wiki:
        """Load ``folder/.wiki.yaml``; the manifest's name must equal the folder name."""
        folder = Path(folder)
        path = folder / MANIFEST_NAME
        hint = f"Create it with 'wikirag build {folder.name} SOURCE --sensitivity LEVEL' or by hand."
        manifest = load_model(WikiManifest, path, ManifestError, hint)
        if manifest.name != folder.name:
            raise ManifestError(
                f"{path}: name '{manifest.name}' differs from its folder '{folder.name}': "
                f"set 'name: {folder.name}' or rename the folder"
            )
        return cls(folder, manifest)

    def source_spec(self) -> SourceSpec:
        """Resolve ``source:`` (default: the wiki folder) into a root folder and an optional glob."""
        raw = self.manifest.source
        if not raw:
            return SourceSpec(self.folder.resolve(), None)
        expanded = Path(os.path.expanduser(raw))
        if not expanded.is_absolute():
            expanded = self.folder / expanded
        parts = expanded.parts
        first_magic = next((i for i, part in enumerate(parts) if GLOB_CHARS.search(part)), None)
        if first_magic is None:
            return SourceSpec(Path(os.path.normpath(expanded)).resolve(), None)
        root = Path(*parts[:first_magic]) if first_magic else Path(".")
        return SourceSpec(Path(os.path.normpath(root)).resolve(), "/".join(parts[first_magic:]))


def write_manifest(folder: Path, data: dict[str, Any]) -> WikiManifest:
    """Validate ``data`` and write it as ``folder/.wiki.yaml`` (atomically). Returns the manifest.

    Raises :class:`ManifestError` naming each invalid key. YAML comments of an existing file are lost.
    """
    manifest = validate(WikiManifest, data, folder / MANIFEST_NAME, {}, ManifestError)
    folder.mkdir(parents=True, exist_ok=True)
    dumped = manifest.model_dump(mode="json", exclude_defaults=True)
    dumped = {"name": dumped.pop("name"), "title": dumped.pop("title"),
              "sensitivity": str(manifest.sensitivity), **dumped}
    tmp = folder / f"{MANIFEST_NAME}.tmp"
    tmp.write_text(yaml.safe_dump(dumped, sort_keys=False, allow_unicode=True), encoding="utf-8")
    os.replace(tmp, folder / MANIFEST_NAME)
    global manifest_generation
    manifest_generation += 1
    return manifest
