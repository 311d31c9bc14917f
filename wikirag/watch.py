"""Keep a workspace's indexes fresh: watch the wikis' sources and rebuild what changed (``wikirag watch``).

The ``watchfiles`` library (Rust ``notify``: inotify on Linux) reports changes; it already gathers a
burst of saves into one batch (``debounce_ms``, default 400 ms). For each batch:

* a changed ``.wiki.yaml`` is validated first: an invalid one is reported (file, line, fix) and its
  wiki is not rebuilt — the previous index keeps serving until the manifest is fixed;
* a changed composition (``rags/*.yaml``) is validated and reported; nothing is rebuilt for it (adding
  a wiki to a composition re-indexes nothing);
* every wiki with a changed markdown file (or a fixed manifest) is rebuilt incrementally, one line
  each: wiki, files changed, seconds. A build another process holds the lock of (a second watcher, a
  ``wikirag build``) is tried again on the next round, not waited for; what it builds serves either way.

When it starts, the watcher first catches up: every watched wiki whose sources changed while nobody
watched is rebuilt (an up-to-date one costs a stat per file and is not reported).

Sources that move under it:

* a wiki's source folder renamed, removed or emptied: its build fails with the reason, and the previous
  index keeps serving (its passages are then marked ``changed`` at query time, never cited with offsets);
  the watcher looks for the folder again every second and rebuilds once it is back;
* a folder or page that cannot be read (permissions, a failing mount): a read error is not a deletion —
  the previous build's passages of those pages are kept (:data:`wikirag.index.KEPT`), and a ``warning``
  line says which;
* a wiki folder renamed or removed (``wikis/NAME``): reported as gone (its index went with it); a new
  folder is validated and built, one whose manifest does not fit (a renamed folder keeps its old
  ``name:``) is reported ``invalid``.

Index folders (``.index/``), hidden files and files that are neither markdown nor YAML are ignored, so
a build's own writes never trigger another build.

In the web app (``wikirag app --watch``, :func:`start_in_thread`) one watcher runs in a thread of the app's
process, shared by every session; its :attr:`Watcher.live` feeds the portal ("updated N s ago", build
errors). An incremental build runs in that thread (an edit's rebuild takes 0.1–0.5 s, and a build in the
process is seen by the next query at once); a wiki without any index yet is built in a background process
(:mod:`wikirag.background`), so a first build of thousands of pages never holds the app's interpreter.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from . import store
from .errors import BuildError, WikiragError
from .wiki import INDEX_DIR_NAME, MANIFEST_NAME
from .workspace import Workspace

log = logging.getLogger("wikirag.watch")

DEBOUNCE_MS = 400
RETRY_SECONDS = 1.0  # a wiki whose build lock was held is tried again after this (and folders looked for)
# a wiki updated by edits (a delta beside its last full build, wikirag.delta) and then left alone this long is
# compacted: built in full in a background process, so its index is one mapped base again (WIKIRAG_COMPACT_SECONDS)
COMPACT_SECONDS = 60.0
UNWATCHED_RETRY_SECONDS = 5.0  # a wiki whose folder could not be watched is watched again after this
RESTART_SECONDS = 5.0  # start_in_thread: after a failure of watching itself, watch again after this


@dataclass(frozen=True)
class Event:
    """One line of the watcher's report: ``kind`` is ``built``, ``up to date``, ``invalid`` (a manifest
    or composition that does not validate), ``valid`` (a composition that does), ``warning`` (pages that
    cannot be read, kept from the previous build), ``gone`` (a wiki folder removed or renamed), or
    ``error`` (a build that failed: the previous index keeps serving); ``ready`` once, when the watches
    are up and the catch-up is done."""

    kind: str
    name: str
    message: str
    files: int = 0
    seconds: float = 0.0

    def line(self) -> str:
        if self.kind in ("built", "up to date"):
            return f"{self.name}: {self.kind}, {self.files} file(s) changed, {self.seconds:.2f} s"
        return f"{self.name}: {self.message}"


def _relevant(change, path: str, folders: Iterable[Path] = ()) -> bool:
    """Whether a change of ``path`` can matter to a build. Only the part of the path below the watched
    folder it is in counts: a workspace under a hidden folder (``~/.cache/…``) is watched like any other."""
    parts = Path(path).parts
    for folder in folders:
        if Path(path).is_relative_to(folder):
            parts = Path(path).relative_to(folder).parts
            break
    # index folders, and anything hidden (an editor's swap file, .git/) except a wiki's manifest
    if INDEX_DIR_NAME in parts or any(p.startswith(".") and p != MANIFEST_NAME for p in parts):
        return False
    return path.endswith((".md", ".markdown", ".yaml", ".yml")) or not Path(path).suffix


@dataclass
class Live:
    """What a watcher knows of one wiki (for the portal). Times are ``time.time()`` values."""

    checked: float | None = None  # the index was last found to match the sources (built or up to date)
    built: float | None = None  # the watcher last published a build of it
    error: str | None = None  # the last failure (build, manifest, folder gone), until a build succeeds
    warning: str | None = None  # pages that cannot be read, kept from the previous build
    unwatched: str | None = None  # why its folders cannot be watched now (looked at again every 5 s)
    building: bool = False


def _serving_note(message: str) -> str:
    return message if "previous index" in message else f"{message}; the previous index keeps serving"


class Watcher:
    """The wikis of ``workspace`` (``names``, default all) and its compositions, watched until ``stop``.

    ``full_builds_in_background``: a wiki that has no index yet is built in a background process
    (:mod:`wikirag.background`) instead of this thread (the web app sets it). :attr:`live` holds each
    wiki's :class:`Live`; :attr:`ready` is set once the watches are up and the catch-up is done.
    """

    def __init__(self, workspace: Workspace, names: Iterable[str] | None = None,
                 report: Callable[[Event], None] = lambda e: print(e.line(), flush=True),
                 debounce_ms: int = DEBOUNCE_MS, full_builds_in_background: bool = False):
        # manifests read afresh at every change (the workspace's own cache may keep one for 0.5 s)
        self.ws = Workspace(workspace.home, recheck_seconds=0)
        self.report, self.debounce_ms = report, debounce_ms
        self.names = list(names) if names else None
        self.full_builds_in_background = full_builds_in_background
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.live: dict[str, Live] = {}
        self._pending: set[str] = set()  # wikis whose build lock was held: tried again
        self._settle: set[str] = set()  # wikis whose folders changed: checked again once the new watch is up
        self._present: dict[str, tuple[bool, ...]] = {}  # per wiki: does each of its folders exist
        self._jobs: dict[str, object] = {}  # wiki -> its background.Job (full builds in the app)
        self._unwatched: dict[str, float] = {}  # wiki -> since when its folders cannot be watched
        self._listing: set[str] = set()  # the wikis folder's sub-folders
        self._valid: set[str] = set()  # wikis whose manifest loaded at least once (their going is news)
        self._compact_at: dict[str, float] = {}  # wiki -> when to compact its delta (monotonic), if left alone
        self._compacting: set[str] = set()  # wikis whose background job is a compaction (reported quietly)
        self._held: dict[str, set[str] | None] = {}  # pending wikis' changed pages, for their update
        self.compact_seconds = float(os.environ.get("WIKIRAG_COMPACT_SECONDS", COMPACT_SECONDS))

    def wiki_names(self) -> list[str]:
        return self.names if self.names is not None else self.ws.wiki_names()

    def roots(self) -> dict[str, list[Path]]:
        """Each watched wiki's folder (its manifest) and source root."""
        out = {}
        for name in self.wiki_names():
            folder = self.ws.wikis_dir / name
            paths = [folder]
            try:
                root = self.ws.wiki(name).source_spec().root
                if root != folder:
                    paths.append(root)
            except WikiragError:
                pass
            out[name] = paths
        return out

    def run(self) -> None:
        """Watch until :attr:`stop` is set (or the process is interrupted)."""
        import watchfiles

        roots, first = self.roots(), True
        self._present = self._presence(roots)
        self._listing = self._wiki_folders()
        rewatched: set[str] = set()  # wikis watched again after a failure: built once the watch is up
        while not self.stop.is_set():
            try:
                folders = self._folders(roots)
                for batch in watchfiles.watch(*folders, watch_filter=partial(_relevant, folders=folders),
                                              debounce=self.debounce_ms, step=50, stop_event=self.stop,
                                              rust_timeout=int(RETRY_SECONDS * 1000), yield_on_timeout=True):
                    if first:  # the watches are up: catch up with what changed while nobody watched
                        first = False
                        self.catch_up(roots)
                        self.ready.set()
                        self.report(Event("ready", "watching", f"{len(roots)} wiki(s) checked; each change is "
                                                               "rebuilt as it comes"))
                    for name in sorted(rewatched):
                        self.live[name].unwatched = None
                        self._build(name, quiet=True)
                    if settle := self._settle - rewatched:  # changed between their last build and this watch
                        self.catch_up({name: roots[name] for name in settle if name in roots})
                    rewatched.clear()
                    self._settle.clear()
                    rebind = self.handle({path for _, path in batch}, roots)
                    now = time.monotonic()
                    if any(now - since >= UNWATCHED_RETRY_SECONDS for since in self._unwatched.values()):
                        rewatched |= set(self._unwatched)
                        self._unwatched.clear()
                        rebind = True
                    if rebind:
                        roots = self._rebind(roots)
                        break  # a wiki added, removed, its source moved, or watched again: a new set of folders
            except OSError as exc:  # a folder that cannot be watched (permissions): its wiki only
                # the Rust watcher names the path in its message only, when it fails setting a watch up
                where = exc.filename or next(iter(re.findall(r'about \["([^"]+)"', str(exc))), None)
                name = self._owner(where, roots)
                if isinstance(exc, FileNotFoundError):  # a folder went between listing and watching it
                    roots = self._rebind(roots)
                    continue
                if name is None or name in self._unwatched:
                    raise
                self._unwatched[name] = time.monotonic()
                rewatched.discard(name)
                live = self.live.setdefault(name, Live())
                message = (f"cannot watch {where} ({exc.strerror or str(exc).partition(' (os error')[0]}): its changes are looked for "
                           f"again every {UNWATCHED_RETRY_SECONDS:g} s; the previous index keeps serving")
                if live.unwatched is None:  # said once, until it is watched again
                    live.unwatched = message
                    self.report(Event("warning", name, message))
                self._build(name, quiet=True)

    def _folders(self, roots: dict[str, list[Path]]) -> list[Path]:
        """The folders to watch: each wiki's folder and source root (not of a wiki that cannot be watched
        now), and the compositions' folder. The wikis folder itself is not watched (it would hold every
        wiki in one watch): its listing is compared every round instead (:meth:`handle`)."""
        folders = {p for name, paths in roots.items() if name not in self._unwatched for p in paths if p.is_dir()}
        if self.ws.rags_dir.is_dir():
            folders.add(self.ws.rags_dir)
        # each folder once: one inside another is watched through it
        return sorted(f for f in folders if not any(o != f and f.is_relative_to(o) for o in folders))

    def _presence(self, roots: dict[str, list[Path]]) -> dict[str, tuple[bool, ...]]:
        return {name: tuple(p.is_dir() for p in paths) for name, paths in roots.items()}

    def _wiki_folders(self) -> set[str]:
        try:
            with os.scandir(self.ws.wikis_dir) as entries:
                return {e.name for e in entries if not e.name.startswith(".") and e.is_dir()}
        except OSError:
            return set()

    def _owner(self, filename: str | None, roots: dict[str, list[Path]]) -> str | None:
        """The watched wiki whose folders hold ``filename`` (the deepest match), or None."""
        best, depth = None, -1
        for name, folders in roots.items():
            for folder in folders:
                if filename and (filename == str(folder) or filename.startswith(str(folder) + "/")) \
                        and len(folder.parts) > depth:
                    best, depth = name, len(folder.parts)
        return best

    def _rebind(self, roots: dict[str, list[Path]]) -> dict[str, list[Path]]:
        new = self.roots()
        # a change to a wiki whose folders are new, moved or back, made before the new watch is up, has no
        # event: each is checked again (a stat per file) once it is
        self._settle |= {name for name, paths in new.items() if paths != roots.get(name)}
        self._present = self._presence(new)
        self._added(set(new) - set(roots))
        for name in set(self.live) - set(new):
            del self.live[name]  # a wiki folder removed (reported as gone)
        return new

    def catch_up(self, roots: dict[str, list[Path]]) -> None:
        """Build every watched wiki whose files changed since its build (:func:`wikirag.index.unchanged`:
        a stat per file); quietly, unless it was built or failed."""
        from .index import unchanged

        for name in sorted(roots):
            try:
                if unchanged(self.ws.wiki(name)):  # no passage read: 1.7 s for 100k pages, a third of a build's check
                    self._valid.add(name)
                    self.live.setdefault(name, Live()).checked = time.time()
                    continue
            except WikiragError:
                pass  # the build says what is wrong
            self._build(name, quiet=True)

    def handle(self, paths: set[str], roots: dict[str, list[Path]]) -> bool:
        """React to one batch of changed ``paths`` (empty on a timeout, every second); True if the set of
        watched folders must change."""
        rags = str(self.ws.rags_dir.resolve()) + "/"
        touched, manifests, loud, rebind = set(self._pending), set(), set(), False
        held, self._held = self._held, {}  # pending wikis' changed pages (None: not known)
        full = {name for name in self._pending if held.get(name) is None}  # built in full: not known what changed
        changes: dict[str, set[str]] = {}  # wiki -> the changed paths under its folders
        self._pending.clear()
        for raw in paths:
            path = str(Path(raw).resolve()) if Path(raw).exists() else raw
            if path.startswith(rags) or raw.startswith(str(self.ws.rags_dir) + "/"):
                self._composition(Path(raw).stem)
                continue
            for name, folders in roots.items():
                if any(path.startswith(str(f.resolve()) + "/") or raw.startswith(str(f) + "/") for f in folders):
                    (manifests if Path(raw).name == MANIFEST_NAME else touched).add(name)
                    changes.setdefault(name, set()).add(raw)
        if self.names is None and (listing := self._wiki_folders()) != self._listing:
            self._listing, rebind = listing, True  # a wiki folder added, removed or renamed
        for name, folders in roots.items():  # a folder renamed, removed or back (no event for the root itself)
            present = tuple(p.is_dir() for p in folders)
            if present != self._present.get(name):
                self._present[name] = present
                rebind = True
                if not present[0]:
                    if name in self._valid:
                        self._gone(name, folders[0])  # (a folder that never held a valid wiki goes quietly)
                    touched.discard(name)
                    manifests.discard(name)
                else:
                    touched.add(name)
                    loud.add(name)
                    self._settle.add(name)  # back: what changes before it is watched again is seen then
        for name in sorted(manifests):
            try:
                wiki = self.ws.wiki(name)
                if [wiki.folder] + ([wiki.source_spec().root] if wiki.source_spec().root != wiki.folder else []) \
                        != roots.get(name):
                    rebind = True  # its source moved
                touched.add(name)
                loud.add(name)
            except WikiragError as exc:
                self._problem(Event("invalid", name, _serving_note(f"{exc}")))
                touched.discard(name)
        for name in sorted(touched):  # "up to date" said only where a manifest was fixed or a folder is back
            if self._present.get(name, (True,))[0]:
                known = None if name in full | loud | manifests else self._sources(name, changes.get(name, set()))
                if known is not None:
                    known += sorted(held.get(name) or ())
                self._build(name, quiet=name not in loud, changed=known)
        self._compact()
        self._finished_jobs()
        return rebind

    def _compact(self) -> None:
        """Compact each updated wiki left alone for :attr:`compact_seconds`: a full build in a background
        process (an edit meanwhile waits for it, then is built as usual)."""
        from . import background

        now = time.monotonic()
        for name, at in sorted(self._compact_at.items()):
            if now < at or name in self._jobs:
                continue
            del self._compact_at[name]
            try:
                self._jobs[name] = background.start(self.ws, name)
            except WikiragError:
                continue  # gone or invalid meanwhile: reported where it is built
            self._compacting.add(name)

    def _added(self, names: set[str]) -> None:
        """New wiki folders: validated, then built (a renamed folder keeps its old name: invalid)."""
        for name in sorted(names):
            try:
                self.ws.wiki(name)
            except WikiragError as exc:
                self._problem(Event("invalid", name, f"{exc}"))
                continue
            self._build(name)

    def _gone(self, name: str, folder: Path) -> None:
        self._problem(Event("gone", name, f"wiki folder {folder} is gone (renamed or removed): its index went "
                                          f"with it; compositions that list '{name}' fail until it is back"))

    def _problem(self, event: Event) -> None:
        """Record and report a failure; the same failure again (one change seen twice, a save that does not
        fix it) is not reported again."""
        live = self.live.setdefault(event.name, Live())
        if live.error != event.message:
            live.error = event.message
            self.report(event)

    def _composition(self, name: str) -> None:
        try:
            comp = self.ws.composition(name)
            self.report(Event("valid", name, f"composition ok ({len(comp.wikis)} wiki(s))"))
        except WikiragError as exc:
            self.report(Event("invalid", name, f"{exc}"))

    def _sources(self, name: str, raws: set[str]) -> list[str] | None:
        """``raws`` as paths relative to the wiki's source root (what :func:`wikirag.index.build` takes as
        ``changed``: an update of those pages only), or None if one is not below it."""
        try:
            root = self.ws.wiki(name).source_spec().root
        except WikiragError:
            return None
        out = []
        for raw in raws:
            for base in dict.fromkeys((str(root), str(root.resolve()))):
                if raw.startswith(base + "/"):
                    out.append(raw[len(base) + 1:].replace(os.sep, "/"))
                    break
            else:
                return None
        return out

    def _hold(self, name: str, changed: list[str] | None) -> None:
        """Build ``name`` next round, with the pages ``changed`` (None: in full)."""
        if name in self._pending:
            before = self._held.get(name)
            self._held[name] = None if before is None or changed is None else before | set(changed)
        else:
            self._pending.add(name)
            self._held[name] = None if changed is None else set(changed)

    def _build(self, name: str, quiet: bool = False, changed: list[str] | None = None) -> None:
        from .index import KEPT, build

        live = self.live.setdefault(name, Live())
        if name in self._jobs:
            self._hold(name, changed)  # its first build (or a compaction) runs in the background: next round
            return
        started = time.perf_counter()
        try:
            wiki = self.ws.wiki(name)
            self._valid.add(name)
            if self.full_builds_in_background and store.current_build_id(wiki) is None:
                from . import background

                self._jobs[name] = background.start(self.ws, name)
                live.building = True
                return
            live.building = True
            report = build(wiki, changed=changed)
            if report.update:
                self._compact_at[name] = time.monotonic() + self.compact_seconds
            elif report.state == "built":
                self._compact_at.pop(name, None)
        except BuildError as exc:
            if not self.ws.wikis_dir.joinpath(name).is_dir():
                return  # renamed or removed meanwhile: reported as gone by handle()
            if "another build" in str(exc):
                self._hold(name, changed)  # someone else is building it: look again next round
                return
            self._problem(Event("error", name, _serving_note(f"{exc}")))
            return
        except WikiragError as exc:
            self._problem(Event("error", name, _serving_note(f"{exc}")))
            return
        finally:
            live.building = False
        kept = [f"{s.path}: {s.reason[:-len(KEPT) - 2]}" for s in report.skipped if s.reason.endswith(KEPT)]
        self._done(name, report.state, report.rechunked, time.perf_counter() - started,
                   kept[0] if kept else None, len(kept), quiet)

    def _done(self, name: str, state: str, files: int, seconds: float, kept: str | None, n_kept: int,
              quiet: bool) -> None:
        live = self.live.setdefault(name, Live())
        fixed = live.error is not None  # an up-to-date build after a failure is news: the failure is over
        live.checked, live.error = time.time(), None
        if state == "built":
            live.built = live.checked
        if not (quiet and state == "up to date" and not fixed):
            self.report(Event(state, name, "", files=files, seconds=seconds))
        warning = (f"{n_kept} page(s) cannot be read now ({kept}); their passages of the previous build "
                   "keep serving") if kept else None
        if warning is not None and warning != live.warning:
            self.report(Event("warning", name, warning))
        live.warning = warning

    def _finished_jobs(self) -> None:
        for name, job in list(self._jobs.items()):
            if job.running:
                continue
            del self._jobs[name]
            self.live[name].building = False
            compaction = name in self._compacting
            self._compacting.discard(name)
            if job.state == "failed":
                self._problem(Event("error", name, _serving_note(job.error or "the build failed")))
            elif compaction:  # the same passages, written as one base: nothing a reader needs to hear
                self.live.setdefault(name, Live()).checked = time.time()
                log.info("%s: compacted in %.2f s", name, job.seconds)
            else:
                self._done(name, job.state, job.files, job.seconds, None, 0, quiet=False)


def watch(workspace: Workspace, names: Iterable[str] | None = None, **kwargs) -> None:
    """Run a :class:`Watcher` in this thread until interrupted."""
    Watcher(workspace, names, **kwargs).run()


def start_in_thread(workspace: Workspace, names: Iterable[str] | None = None, **kwargs) -> Watcher:
    """Start a :class:`Watcher` in a daemon thread of this process and return it (set its ``stop`` to end
    it). Its report goes to the ``wikirag.watch`` log unless ``report`` is given. If watching fails (the
    wikis folder removed, no more inotify watches), the failure is logged and watching starts again
    after :data:`RESTART_SECONDS`."""
    kwargs.setdefault("report", lambda e: (log.warning if e.kind in ("error", "invalid", "gone", "warning")
                                           else log.info)("%s", e.line()))
    watcher = Watcher(workspace, names, **kwargs)

    def loop() -> None:
        while not watcher.stop.is_set():
            try:
                watcher.run()
            except Exception:  # the app keeps serving; watching is tried again
                log.exception("watching %s failed; trying again in %s s", watcher.ws.home, RESTART_SECONDS)
                watcher.stop.wait(RESTART_SECONDS)

    threading.Thread(target=loop, name="wikirag-watch", daemon=True).start()
    return watcher
