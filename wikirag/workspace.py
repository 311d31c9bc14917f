"""The workspace: a folder holding ``wikis/`` and ``rags/``.

Chosen by ``--home DIR``, else ``WIKIRAG_HOME``, else the current directory. Names given by users are
checked as slugs before any path is built from them, so ``../x``, ``/etc`` or ``a/b`` never reach the
file system.

Wiki manifests are cached and re-read when the file changes. A change made through this process
(``wikirag build NAME SOURCE …``) applies to the next query; a change made by another process (an
editor, ``git pull``) applies to every query that starts more than ``recheck_seconds`` (default 0.5 s)
after it — the same window as a query already running when the file changed. Checking each manifest
at most that often keeps a composition of many wikis as fast to query as one wiki.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from . import composition as composition_mod
from . import overlap
from . import wiki as wiki_mod
from .access import Level, require
from .composition import Composition, CompositionSpec
from .errors import AccessDenied, CompositionError, ConfigError, ManifestError, NotFound, QueryError, WikiragError
from .wiki import MANIFEST_NAME, Wiki, check_slug

HOME_ENV = "WIKIRAG_HOME"


class Workspace:
    """Wikis and compositions under one home folder. Safe to share between threads."""

    def __init__(self, home: str | Path, recheck_seconds: float = 0.5):
        self.home = Path(home).expanduser().resolve()
        self.recheck_seconds = recheck_seconds
        # name -> (manifest stat, wiki, manifest path, manifest generation, checked at)
        self._wikis: dict[str, tuple[tuple[int, int, int], Wiki, str, int, float]] = {}
        self._comp_paths: dict[str, Path] = {}
        self._specs: dict[str, tuple[tuple[int, int, int], tuple]] = {}
        self._levels: tuple[int, float, dict[str, Level], tuple] | None = None
        # (spec id, clearance) -> (spec, levels, manifest generation, resolved at, composition)
        self._resolved: dict[tuple, tuple] = {}
        self._lock = threading.Lock()

    @classmethod
    def locate(cls, home: str | Path | None = None) -> Workspace:
        """``home``, else ``$WIKIRAG_HOME``, else the current directory; it must be a folder."""
        chosen = home or os.environ.get(HOME_ENV) or os.getcwd()
        if not Path(chosen).expanduser().is_dir():
            raise NotFound(f"workspace {chosen} is not a folder: pass --home DIR or set {HOME_ENV}")
        return cls(chosen)

    @property
    def wikis_dir(self) -> Path:
        return self.home / "wikis"

    @property
    def rags_dir(self) -> Path:
        return self.home / "rags"

    def __repr__(self) -> str:
        return f"Workspace({str(self.home)!r})"

    # wikis ------------------------------------------------------------------------------------

    def wiki_names(self) -> list[str]:
        """Names of the folders under ``wikis/`` (with or without a valid manifest), sorted."""
        if not self.wikis_dir.is_dir():
            return []
        return sorted(p.name for p in self.wikis_dir.iterdir() if p.is_dir() and not p.name.startswith("."))

    def wiki_folder(self, name: str) -> Path:
        """The folder of wiki ``name``; refuses names that are not slugs (path tricks)."""
        try:
            check_slug(name, "wiki name")
        except ValueError as exc:
            raise NotFound(str(exc)) from None
        return self.wikis_dir / name

    def wiki(self, name: str) -> Wiki:
        """Load wiki ``name`` (cached; re-read when its ``.wiki.yaml`` changes, see the module doc)."""
        cached = self._wikis.get(name)
        now = time.monotonic()
        if cached is not None:  # a cached name has passed the slug check
            key, wiki, manifest_path, generation, checked_at = cached
            if generation == wiki_mod.manifest_generation and now - checked_at < self.recheck_seconds:
                return wiki
            try:
                st = os.stat(manifest_path)
                if key == (st.st_mtime_ns, st.st_size, st.st_ino):
                    self._wikis[name] = (key, wiki, manifest_path, wiki_mod.manifest_generation, now)
                    return wiki
            except OSError:
                pass
        folder = self.wiki_folder(name)
        manifest = folder / MANIFEST_NAME
        generation = wiki_mod.manifest_generation
        try:
            st = manifest.stat()
        except FileNotFoundError:
            self._wikis.pop(name, None)
            if folder.is_dir():
                return Wiki.load(folder)  # raises ManifestError: the folder has no manifest
            raise NotFound(
                f"no wiki '{name}' in {self.wikis_dir}: available: {', '.join(self.wiki_names()) or 'none'}"
            ) from None
        try:
            wiki = Wiki.load(folder)
        except WikiragError:
            self._wikis.pop(name, None)
            raise
        with self._lock:
            self._wikis[name] = ((st.st_mtime_ns, st.st_size, st.st_ino), wiki, str(manifest), generation, now)
        return wiki

    def level_of(self, name: str) -> Level:
        """A wiki's effective level: its manifest's, raised to the highest level of the wikis whose
        sources overlap its own (:mod:`wikirag.overlap`); ``restricted`` when its manifest cannot be read
        or it does not exist (fail closed). Every clearance check uses this level."""
        return self.levels().get(name, Level.RESTRICTED)

    def levels(self) -> dict[str, Level]:
        """Every wiki's effective level (cached; recomputed when a manifest changes, see the module doc)."""
        now = time.monotonic()
        cached = self._levels
        if cached is not None and cached[0] == wiki_mod.manifest_generation and now - cached[1] < self.recheck_seconds:
            return cached[2]
        roots = tuple(self.source_roots().items())
        if cached is not None and cached[3] == roots:  # the same roots, levels and excludes: the same answer
            levels = cached[2]  # (the same object, so what was resolved with it stays valid)
        else:
            levels = overlap.effective_levels(dict(roots))
        self._levels = (wiki_mod.manifest_generation, now, levels, roots)
        return levels

    def source_roots(self) -> dict[str, overlap.Source]:
        """Each wiki's source root, manifest level and excludes; a wiki whose manifest cannot be read: its
        folder, ``restricted``."""
        roots = {}
        for name in self.wiki_names():
            try:
                wiki = self.wiki(name)
                roots[name] = overlap.Source(wiki.source_spec().root, wiki.level, tuple(wiki.manifest.exclude))
            except WikiragError:
                roots[name] = overlap.Source((self.wikis_dir / name).resolve(), Level.RESTRICTED)
        return roots

    # compositions -----------------------------------------------------------------------------

    def composition_names(self) -> list[str]:
        if not self.rags_dir.is_dir():
            return []
        return sorted(p.stem for p in self.rags_dir.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())

    def composition_path(self, ref: str | Path) -> Path:
        """A composition name (``rags/<name>.yaml``) or a path to a YAML file."""
        text = str(ref)
        if _names_a_file(ref):
            path = Path(text).expanduser()
            if not path.is_file():
                raise NotFound(f"composition file {path} does not exist")
            return path
        try:
            check_slug(text, "composition name")
        except ValueError as exc:
            raise NotFound(str(exc)) from None
        for suffix in (".yaml", ".yml"):
            if (self.rags_dir / f"{text}{suffix}").is_file():
                return self.rags_dir / f"{text}{suffix}"
        raise NotFound(
            f"no composition '{text}' in {self.rags_dir}: available: "
            f"{', '.join(self.composition_names()) or 'none'} (or give a path to a YAML file)"
        )

    def composition(self, ref: str | Path | Composition, clearance: Level | str | None = None) -> Composition:
        """Load a composition by name or path, or refresh a loaded one; its wikis are looked up as their
        manifests are now and checked against its ceiling.

        With ``clearance``, a composition above it, one that does not exist and one whose file cannot be
        read (its level is unknown: fail closed) all raise the same :class:`NotFound`, whose ``reason``
        attribute keeps the real cause for the audit log; the problems of its wikis name only wikis the
        caller may see (:meth:`_resolve`). A restricted caller, or none (an operator), gets full detail.
        """
        level = None if clearance is None else Level.parse(clearance)
        try:
            name, path, spec, lines = self._spec(ref)
            if level is not None:
                require(level, spec.sensitivity, f"composition '{name}'")
        except (NotFound, AccessDenied, CompositionError) as exc:
            if level is None or (level is Level.RESTRICTED and not isinstance(exc, AccessDenied)):
                raise
            raise self._unavailable(ref, level, exc) from None
        # resolved again when a manifest, the wikis' levels or the file changed, and at most every
        # recheck_seconds: the same window as each wiki's manifest (a composition of 50 wikis would
        # otherwise look them up on every query)
        now, generation, levels = time.monotonic(), wiki_mod.manifest_generation, self.levels()
        key = (id(spec), level)
        hit = self._resolved.get(key)
        if (hit is not None and hit[0] is spec and hit[1] is levels and hit[2] == generation
                and now - hit[3] < self.recheck_seconds):
            return hit[4]
        comp = self._resolve(name, path, spec, lines, level)
        with self._lock:
            if len(self._resolved) > 256:
                self._resolved.clear()
            self._resolved[key] = (spec, levels, generation, now, comp)
        return comp

    def _spec(self, ref: str | Path | Composition) -> tuple[str, Path | None, CompositionSpec, dict]:
        """A composition's name, file, spec and key lines (parsed once per file version)."""
        if isinstance(ref, Composition):
            return ref.name, ref.path, ref.spec, {}
        path = self._comp_paths.get(str(ref)) or self.composition_path(ref)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            self._comp_paths.pop(str(ref), None)
            raise NotFound(f"composition file {path} does not exist") from None
        self._comp_paths[str(ref)] = path
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        cached = self._specs.get(str(path))
        if cached is not None and cached[0] == key:
            return cached[1]
        name, spec, lines = composition_mod.parse(path)
        with self._lock:
            self._specs[str(path)] = (key, (name, path, spec, lines))
        return name, path, spec, lines

    def _unavailable(self, ref, level: Level, cause: Exception) -> NotFound:
        """The one answer to a caller about a composition they may not use, whatever the cause."""
        if isinstance(ref, Composition) or _names_a_file(ref):
            what = f"no composition file {ref.path if isinstance(ref, Composition) else ref} that you may use"
        else:
            what = f"no composition '{ref}' that you may use"
        visible = []
        for name in self.composition_names():
            try:
                if self._spec(name)[2].sensitivity <= level:
                    visible.append(name)
            except WikiragError:
                continue
        error = NotFound(f"{what} (it does not exist, or it is above your clearance): available to you: "
                         f"{', '.join(visible) or 'none'}")
        error.reason = audit_reason(cause)  # for the audit log only, never shown to the caller
        return error

    def _resolve(self, name: str, path: Path | None, spec: CompositionSpec, lines: dict | None = None,
                 clearance: Level | None = None) -> Composition:
        """Look up the spec's wikis (their manifests as they are now) and check each is at or below the
        composition's level; every problem is reported, each with the file and line that causes it.

        For a caller below ``restricted`` (``clearance``), a wiki above their clearance, a missing one and
        one whose manifest cannot be read get the same "unknown wiki" message, listing only the wikis
        they may see: nothing above a clearance can be told from what does not exist.
        """
        problems: list[str] = []
        wikis: list[Wiki] = []
        ceiling = spec.sensitivity
        levels = self.levels()
        hide = clearance is not None and clearance < Level.RESTRICTED

        def at(i: int) -> str:
            where = str(path) if path else f"composition '{name}'"
            line = (lines or {}).get(("wikis", i))
            return f"{where}:{line}" if line else where

        def unknown(i: int, wiki_name: str) -> str:
            limit = min(ceiling, clearance) if clearance is not None else ceiling
            visible = [w for w, lvl in levels.items() if lvl <= limit]
            return f"{at(i)}: unknown wiki '{wiki_name}': available: {', '.join(visible) or 'none'}"

        for i, wiki_name in enumerate(spec.wikis):
            level = levels.get(wiki_name, Level.RESTRICTED)
            if hide and level > clearance:
                problems.append(unknown(i, wiki_name))
                continue
            try:
                wiki = self.wiki(wiki_name)
            except NotFound:
                problems.append(unknown(i, wiki_name))
                continue
            except ManifestError as exc:
                problems.append(f"{at(i)}: wiki '{wiki_name}' cannot be loaded: {exc}")
                continue
            if level > ceiling:
                raised = f" (raised from {wiki.level}: its sources overlap a {level} wiki's)" if level > wiki.level else ""
                problems.append(
                    f"{at(i)}: wiki '{wiki_name}' is {level}{raised}, above the composition's sensitivity "
                    f"{ceiling}: remove it or raise 'sensitivity' to {level}"
                )
                continue
            wikis.append(wiki)
        if problems:
            raise CompositionError("\n".join(problems))
        return Composition(name, path, spec, tuple(wikis))

    def adhoc(self, wiki_names: list[str], clearance: Level | str, *, k: int | None = None,
              fusion_name: str | None = None) -> Composition:
        """A composition made on the spot from wikis the caller may see (its level is the caller's)."""
        level = Level.parse(clearance)
        try:
            spec = CompositionSpec(sensitivity=level, wikis=wiki_names, k=k, fusion=fusion_name)
        except ValueError as exc:
            raise QueryError(f"cannot compose {wiki_names}: {exc}") from None
        return self._resolve("ad-hoc", None, spec, None, level)

    def check(self) -> list[str]:
        """Validate every manifest and composition; return every problem found (empty: all good)."""
        problems: list[str] = []
        for name in self.wiki_names():
            try:
                self.wiki(name)
            except WikiragError as exc:
                problems.append(str(exc))
        for name in self.composition_names():
            try:
                self.composition(name)
            except WikiragError as exc:
                problems.append(str(exc))
        return problems


def _names_a_file(ref: str | Path) -> bool:
    """True when a composition reference is a path to a YAML file, not a name in ``rags/``."""
    text = str(ref)
    return isinstance(ref, Path) or "/" in text or os.sep in text or text.endswith((".yaml", ".yml"))


def audit_reason(exc: Exception) -> str:
    """Why a request was refused, for the audit log: names and levels, never a file's text (a broken
    manifest's error quotes it, so a composition or manifest error is summarised)."""
    if isinstance(exc, ConfigError):
        problems = str(exc).count("\n") + 1
        return f"{type(exc).__name__}: {problems} problem(s) (details: wikirag check)"
    return getattr(exc, "reason", None) or str(exc)
