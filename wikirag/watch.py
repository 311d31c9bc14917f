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

Index folders (``.index/``), hidden files and files that are neither markdown nor YAML are ignored, so
a build's own writes never trigger another build. A source folder that disappears or becomes
unreadable is reported by the build that reads it ("the previous index still serves").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from .errors import BuildError, WikiragError
from .wiki import INDEX_DIR_NAME, MANIFEST_NAME
from .workspace import Workspace

DEBOUNCE_MS = 400
RETRY_SECONDS = 1.0  # a wiki whose build lock was held is tried again after this


@dataclass(frozen=True)
class Event:
    """One line of the watcher's report: ``kind`` is ``built``, ``up to date``, ``invalid`` (a manifest
    or composition that does not validate), ``valid`` (a composition that does) or ``error``."""

    kind: str
    name: str
    message: str
    files: int = 0
    seconds: float = 0.0

    def line(self) -> str:
        if self.kind in ("built", "up to date"):
            return f"{self.name}: {self.kind}, {self.files} file(s) changed, {self.seconds:.2f} s"
        return f"{self.name}: {self.message}"


def _relevant(change, path: str) -> bool:
    parts = Path(path).parts
    # index folders, and anything hidden (an editor's swap file, .git/) except a wiki's manifest
    if INDEX_DIR_NAME in parts or any(p.startswith(".") and p != MANIFEST_NAME for p in parts):
        return False
    return path.endswith((".md", ".markdown", ".yaml", ".yml")) or not Path(path).suffix


class Watcher:
    """The wikis of ``workspace`` (``names``, default all) and its compositions, watched until ``stop``."""

    def __init__(self, workspace: Workspace, names: Iterable[str] | None = None,
                 report: Callable[[Event], None] = lambda e: print(e.line(), flush=True),
                 debounce_ms: int = DEBOUNCE_MS):
        # manifests read afresh at every change (the workspace's own cache may keep one for 0.5 s)
        self.ws = Workspace(workspace.home, recheck_seconds=0)
        self.report, self.debounce_ms = report, debounce_ms
        self.names = list(names) if names else None
        self.stop = threading.Event()
        self._pending: set[str] = set()  # wikis whose build lock was held: tried again

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

        while not self.stop.is_set():
            roots = self.roots()
            folders = {p for paths in roots.values() for p in paths if p.is_dir()} | (
                {self.ws.rags_dir} if self.ws.rags_dir.is_dir() else set()) | {self.ws.wikis_dir}
            # each folder once: one inside another is watched through it
            watched = sorted(f for f in folders if not any(o != f and f.is_relative_to(o) for o in folders))
            for batch in watchfiles.watch(*watched, watch_filter=_relevant, debounce=self.debounce_ms,
                                          step=50, stop_event=self.stop, rust_timeout=int(RETRY_SECONDS * 1000),
                                          yield_on_timeout=True):
                if self.handle({path for _, path in batch}, roots):
                    break  # a wiki was added or its source moved: watch the new set of folders

    def handle(self, paths: set[str], roots: dict[str, list[Path]]) -> bool:
        """React to one batch of changed ``paths``; True if the set of watched folders must change."""
        rags = str(self.ws.rags_dir.resolve()) + "/"
        touched, manifests, rebind = set(self._pending), set(), False
        self._pending.clear()
        for raw in paths:
            path = str(Path(raw).resolve()) if Path(raw).exists() else raw
            if path.startswith(rags) or raw.startswith(str(self.ws.rags_dir) + "/"):
                self._composition(Path(raw).stem)
                continue
            for name, folders in roots.items():
                if any(path.startswith(str(f.resolve()) + "/") or raw.startswith(str(f) + "/") for f in folders):
                    (manifests if Path(raw).name == MANIFEST_NAME else touched).add(name)
            if self.names is None and Path(raw).parent == self.ws.wikis_dir:
                rebind = True  # a wiki folder added or removed
        for name in sorted(manifests):
            try:
                wiki = self.ws.wiki(name)
                if [wiki.folder] + ([wiki.source_spec().root] if wiki.source_spec().root != wiki.folder else []) \
                        != roots.get(name):
                    rebind = True  # its source moved
                touched.add(name)
            except WikiragError as exc:
                self.report(Event("invalid", name, f"{exc}; the previous index keeps serving"))
                touched.discard(name)
        for name in sorted(touched):
            self._build(name)
        return rebind

    def _composition(self, name: str) -> None:
        try:
            comp = self.ws.composition(name)
            self.report(Event("valid", name, f"composition ok ({len(comp.wikis)} wiki(s))"))
        except WikiragError as exc:
            self.report(Event("invalid", name, f"{exc}"))

    def _build(self, name: str) -> None:
        from .index import build

        started = time.perf_counter()
        try:
            report = build(self.ws.wiki(name))
        except BuildError as exc:
            if "another build" in str(exc):
                self._pending.add(name)  # someone else is building it: look again next round
                return
            self.report(Event("error", name, f"{exc}"))
            return
        except WikiragError as exc:
            self.report(Event("error", name, f"{exc}; the previous index keeps serving"))
            return
        self.report(Event(report.state, name, "", files=report.rechunked, seconds=time.perf_counter() - started))


def watch(workspace: Workspace, names: Iterable[str] | None = None, **kwargs) -> None:
    """Run a :class:`Watcher` in this thread until interrupted."""
    Watcher(workspace, names, **kwargs).run()
