"""A wiki's index on disk: the store. Where builds live, which one serves, publishing, loading, checks.

Layout of ``wikis/<name>/.index/``::

    CURRENT              the id of the build that serves (replaced atomically with os.replace)
    lock                 held by a running build (flock), so two builds of one wiki never overlap
    builds/<id>/         a finished build: manifest.json, files.json (every source file's sha256, size,
                         mtime, passages), passages/ (:mod:`wikirag.chunkfile`), bm25/ (bm25s's files
                         plus term frequencies and token ids), graph.json (the pages' links),
                         dense/ (vectors, if the wiki has that layer); after an update, delta/ (the pages
                         changed since the last full build, :mod:`wikirag.delta`) beside hard links of
                         that build's files
    tmp-<id>/            a build in progress; removed when it fails, swept by the next build if killed

:func:`publish` has a build's files written into a new ``tmp-<id>`` folder, adds to its
``manifest.json`` a sha256 of every file and of the manifest itself, fsyncs it, renames it into
``builds/`` and only then points ``CURRENT`` at it, so a build that fails or is killed at any point
leaves the previous index serving. The previous build is kept until the next one (:func:`sweep`), so a
reader that has just read ``CURRENT`` never finds its folder gone. :func:`load` checks the format
version and every checksum: a damaged or foreign index is refused, never used. What goes into a build
is :mod:`wikirag.index`'s job.

Nothing read from ``.index/`` is trusted as a path or a level. ``CURRENT`` must hold a plain build id in
the format :func:`publish` makes (:data:`BUILD_ID_RE`, e.g. ``20260101T120000-a1b2c3``: no separator, no
``..``), and ``builds/<id>`` must really be a folder of this wiki's own ``builds/`` (not a symlink leading
elsewhere, every file in it inside it): :func:`build_folder`. A build's manifest must name this wiki
(``"wiki"``) and must not record a level (``"sensitivity"``) above the wiki's level in ``.wiki.yaml``
now (:func:`check_level`; a build recorded *below* it, after the level was raised, still serves: the
current, higher level is what queries are checked against). Anything else is refused with
:class:`IndexMissing` saying to rebuild; the next build replaces it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import json
import os
import re
import secrets
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from . import checked, chunkfile
from . import delta as delta_mod
from . import graph as graph_mod
from .access import Level
from .bm25 import LOADED, BM25Layer
from .dense import DenseInfo
from .errors import BuildError, IndexMissing, LevelError
from .graph import LinkGraph
from .wiki import Wiki

FILES = "files.json"  # a build's source-file records
FOLDERS = "folders.json"  # the source folders a build walked: path -> [mtime_ns, listing digest] (freshness)
# 5: passages/ and files.json instead of chunks.jsonl and the manifest's file list; 6: passages/stats.npy;
# 7: passages/paths.* and headings.* instead of strings.json (mapped, not parsed); 8: a build may hold a delta/,
# and the walked folders are in folders.json, not the manifest (parsed and re-serialised for its checksum at
# every load: 0.2 s with the 33k folders of a million pages; the first builds of 8 have them there, read too)
FORMAT_VERSION = 8
BUILD_ID_RE = re.compile(r"\d{8}T\d{6}-[0-9a-f]{6}")  # what :func:`new_build_id` makes; CURRENT must hold one
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # a pointer value harmless to show in a message
# bumped by every build of this process, so in-process readers notice a swap at once
build_generation = 0

try:  # POSIX; on other systems two simultaneous builds of one wiki are not prevented
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]


@dataclass(frozen=True)
class LoadedIndex:
    """A wiki's index in memory. Read-only: one instance is shared by every thread of a process.

    Its passages (:attr:`chunks`, and :attr:`delta`) are read and checked at :func:`load`, or, loaded
    ``lazy``, when first used: a query of a composition of 100 wikis whose merged view is saved needs
    the passages of only the wikis it returns (see :func:`load`)."""

    wiki: str
    build_id: str
    manifest: dict
    folder: Path
    preloaded: tuple[chunkfile.ChunkTable, delta_mod.Delta | None] | None = field(default=None, repr=False)

    @cached_property
    def _passages(self) -> tuple[chunkfile.ChunkTable, delta_mod.Delta | None]:
        if self.preloaded is not None:
            return self.preloaded
        try:
            return read_passages(self.wiki, self.folder, self.manifest,
                                 checked.reader(self.folder, self.manifest.get("checksums") or {}))
        except FileNotFoundError:  # (a build keeps its previous one: gone only after two more builds)
            raise PassagesDamaged(self.wiki, self.build_id, _damaged(self.wiki, "its passages are gone").args[0]) from None
        except IndexMissing as exc:
            raise PassagesDamaged(self.wiki, self.build_id, str(exc)) from None

    @property
    def chunks(self) -> chunkfile.ChunkTable:
        """The passages, in index order (with a delta, a :class:`wikirag.delta.Overlay`). Loaded lazily, a
        damaged passage file raises :class:`PassagesDamaged` here."""
        return self._passages[0]

    @property
    def delta(self) -> delta_mod.Delta | None:
        """The pages changed since the last full build (:mod:`wikirag.delta`), if any."""
        return self._passages[1]

    @property
    def passages(self) -> int:
        """How many passages the build has, as its manifest records (without reading them)."""
        recorded = self.manifest.get("chunks")
        return recorded if isinstance(recorded, int) and not isinstance(recorded, bool) else len(self.chunks)

    @cached_property
    def bm25(self) -> BM25Layer:
        """The build's BM25 layer (its arrays mapped, checked against their checksums, on first use: a
        composition whose merged view is saved (:mod:`wikirag.views`) never needs its wikis' own). Raises
        :class:`IndexMissing` if it is damaged."""
        files = checked.reader(self.folder, self.manifest.get("checksums") or {}, damaged=self._bm25_damaged)
        try:
            layer = BM25Layer.load(self.folder / "bm25", read=files.under("bm25/"))
        except (ValueError, KeyError, TypeError) as exc:  # checksums match, content does not: made so
            raise _damaged(self.wiki, f"its BM25 files do not fit together: {exc}") from None
        if self.delta is not None:
            layer = delta_mod.patch(layer, self.delta)
        if layer.num_docs != len(self.chunks):
            raise _damaged(self.wiki, f"{layer.num_docs} BM25 documents for {len(self.chunks)} passages")
        return layer

    def _bm25_damaged(self, why: str) -> IndexMissing:  # also for the term frequencies, read when first merged
        return _damaged(self.wiki, why)

    @cached_property
    def folders(self) -> dict[str, list]:
        """The source folders the build walked (:data:`FOLDERS`), for the freshness check; :class:`IndexMissing`
        if the file does not match its checksum."""
        try:
            return read_folders(self.folder, self.manifest)
        except ValueError as exc:
            raise _damaged(self.wiki, str(exc)) from None

    @cached_property
    def level(self) -> Level | None:
        """The level the build recorded (None if it records none it may be served under)."""
        recorded = self.manifest.get("sensitivity")
        try:
            return Level.parse(recorded) if isinstance(recorded, str) else None
        except LevelError:
            return None

    @cached_property
    def graph(self) -> LinkGraph:
        """The build's link graph (read, and checked against its checksum, on first use: only graph-layer
        queries and the portal need it). Raises :class:`IndexMissing` if it does not match."""
        name = graph_mod.GRAPH_FILE
        digest = (self.manifest.get("checksums") or {}).get(name)
        path = self.folder / name
        if digest is not None and sha256(path.read_bytes()) != digest:
            raise _damaged(self.wiki, f"{name} does not match its checksum")
        pages, known = graph_mod.load_pages(self.folder)
        if self.delta is not None:
            try:
                pages = delta_mod.graph_pages(pages, known, self.delta)
            except checked.Mismatch as exc:
                raise _damaged(self.wiki, str(exc)) from None
        return LinkGraph(pages, known, self.chunks)

    @property
    def dense(self) -> DenseInfo | None:
        """The dense layer's model and size, if this build has one."""
        return DenseInfo.from_manifest(self.manifest.get("dense"))


sha256 = checked.sha256


def new_build_id() -> str:
    """A new build's id: its UTC start time and 6 random hex digits, e.g. ``20260101T120000-a1b2c3``."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(3)


def current_build_id(wiki: Wiki) -> str | None:
    """What ``CURRENT`` holds (stripped), or None if the wiki was never built. Not checked: an empty or
    tampered pointer is returned as it is; :func:`build_folder` checks it before it is used as a path."""
    try:
        return (wiki.index_dir / "CURRENT").read_text(encoding="utf-8", errors="replace").strip()
    except FileNotFoundError:
        return None


class PassagesDamaged(IndexMissing):
    """The passages of a build loaded lazily (:func:`load`) turned out damaged when first used: the query
    that found it leaves the wiki out (:meth:`wikirag.cache.IndexCache.damaged`) and runs again."""

    def __init__(self, wiki: str, build_id: str, message: str):
        super().__init__(message)
        self.wiki, self.build_id = wiki, build_id


def _damaged(wiki: Wiki | str, why: str) -> IndexMissing:
    """The error for a damaged or tampered index of ``wiki`` (or the wiki of that name), with the fix."""
    name = wiki if isinstance(wiki, str) else wiki.name
    return IndexMissing(f"the index of wiki '{name}' is damaged ({why}): rebuild it with 'wikirag build {name}'")


def build_folder(wiki: Wiki, build_id: str) -> Path:
    """The folder of build ``build_id``, checked to be one of this wiki's own builds.

    ``build_id`` (what ``CURRENT`` holds) must match :data:`BUILD_ID_RE`, and ``builds/<id>`` must resolve
    to exactly ``<the wiki's .index>/builds/<id>``: a symlinked build (or ``builds/``) leading elsewhere is
    refused. Raises :class:`IndexMissing` ("invalid pointer … rebuild it") otherwise. The folder need not
    exist (a missing build is reported by the caller).
    """
    if not BUILD_ID_RE.fullmatch(build_id):
        # the value is never shown unless it is a plain name: it may be a path into another wiki
        shown = f"build {build_id} is missing or is not a build id" if _PLAIN_NAME.fullmatch(build_id) else (
            "it is empty" if not build_id else "it does not hold a build id")
        raise _damaged(wiki, f"invalid pointer .index/CURRENT: {shown}")
    builds = wiki.index_dir / "builds"
    folder = builds / build_id
    # the id has no separator nor dots: with neither builds/ nor builds/<id> a symlink, the folder resolves
    # to .index/builds/<id> (two lstats; comparing realpaths, as before, cost 0.2 ms a wiki for the same answer)
    if builds.is_symlink() or folder.is_symlink():
        raise _damaged(wiki, f"invalid pointer .index/CURRENT: build {build_id} is a link out of .index/builds")
    return folder


def check_level(manifest: dict, wiki: Wiki) -> None:
    """Refuse (:class:`IndexMissing`) a build whose recorded level is above the wiki's level now.

    A build indexed as ``confidential`` holds what the wiki held while it was confidential; after the
    level is lowered in ``.wiki.yaml`` it must not be served at the lower level: rebuild it. A build
    recorded below the current level (the level was raised) serves, checked against the current level.
    """
    recorded = manifest.get("sensitivity")
    try:
        built = Level.parse(recorded) if isinstance(recorded, str) else None
    except LevelError:
        built = None
    if built is None:
        raise _damaged(wiki, "its manifest records no valid level")
    if built > wiki.level:
        raise IndexMissing(
            f"the index of wiki '{wiki.name}' was indexed as {built}, above the wiki's level {wiki.level} now: "
            f"rebuild it with 'wikirag build {wiki.name}'"
        )


def read_manifest(wiki: Wiki, build_id: str) -> dict:
    """The checked manifest of build ``build_id`` of ``wiki``: its pointer, format, checksum, wiki name and
    level (:func:`build_folder`, :func:`check_level`); :class:`IndexMissing` with the fix otherwise."""
    path = build_folder(wiki, build_id) / "manifest.json"
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise IndexMissing(
            f"the index of wiki '{wiki.name}' is damaged ({path.name}: {exc}): "
            f"rebuild it with 'wikirag build {wiki.name}'"
        ) from None
    if not isinstance(manifest, dict) or manifest.get("format_version") != FORMAT_VERSION:
        version = manifest.get("wikirag_version") if isinstance(manifest, dict) else None
        raise IndexMissing(
            f"the index of wiki '{wiki.name}' was built by wikirag {version} "
            f"in another format: rebuild it with 'wikirag build {wiki.name}'"
        )
    if manifest.get("manifest_sha256") != manifest_digest(manifest):
        raise IndexMissing(
            f"the index of wiki '{wiki.name}' is damaged (manifest.json does not match its checksum): "
            f"rebuild it with 'wikirag build {wiki.name}'"
        )
    if manifest.get("wiki") != wiki.name:  # the other wiki is not named: it may be above the caller
        raise IndexMissing(
            f"the index of wiki '{wiki.name}' is damaged or foreign (its build was made for another wiki): "
            f"rebuild it with 'wikirag build {wiki.name}'"
        )
    check_level(manifest, wiki)
    return manifest


def manifest_digest(manifest: dict) -> str:
    """The manifest's own checksum: over its canonical JSON, without this field."""
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    return sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode("utf-8"))


def write_files(folder: Path, records: dict[str, dict]) -> None:
    """Write a build's source-file records (path -> sha256, size, mtime_ns, chunks, skipped)."""
    (folder / FILES).write_text(json.dumps(records, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")


def write_folders(folder: Path, folders: dict[str, list]) -> None:
    """Write the source folders a build walked (:data:`FOLDERS`)."""
    (folder / FOLDERS).write_text(json.dumps(folders, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")


def read_files(folder: Path, manifest: dict | None = None) -> dict[str, dict]:
    """A build's source-file records (with its delta's, :mod:`wikirag.delta`); with ``manifest``, checked
    against their checksums first (:class:`ValueError` if one differs)."""
    files = checked.reader(folder, (manifest.get("checksums") or {}) if manifest is not None else None,
                           damaged=ValueError)
    try:
        records = json.loads(files(FILES))
        changes = json.loads(files(f"{delta_mod.FOLDER}/files.json")) if (
            manifest.get("delta") if manifest is not None else (folder / delta_mod.FOLDER).is_dir()) else None
    except checked.Mismatch as exc:
        raise ValueError(str(exc)) from None
    if not isinstance(records, dict):
        raise ValueError(f"{FILES} holds no file records")  # noqa: TRY004 - damaged content, as the checksum
    if changes is not None:
        for path in changes["gone"]:
            records.pop(path, None)
        records.update(changes["records"])
    return records


def read_folders(folder: Path, manifest: dict) -> dict[str, list]:
    """The source folders build ``folder`` walked, checked against the manifest's checksum (:class:`ValueError`
    if it differs); a first build of format 8 has them in its manifest."""
    if "folders" in manifest:
        return manifest["folders"] or {}
    try:
        folders = json.loads(checked.reader(folder, manifest.get("checksums") or {}, damaged=ValueError)(FOLDERS))
    except checked.Mismatch as exc:
        raise ValueError(str(exc)) from None
    if not isinstance(folders, dict):
        raise ValueError(f"{FOLDERS} holds no folders")  # noqa: TRY004 - damaged content, as the checksum
    return folders


# files a query never reads: checked by the build that reuses them (tokens, file records) or when first
# read (the link graph, the walked folders), not by every load
NOT_READ_BY_QUERIES = frozenset({"bm25/tokens.npy", FILES, FOLDERS, graph_mod.GRAPH_FILE,
                                 *delta_mod.NOT_READ_BY_QUERIES})
# read through a checked reader (:mod:`wikirag.checked`) when they are used: checked then, not twice
READ_CHECKED = ("passages/", "bm25/", f"{delta_mod.FOLDER}/")


def verify(wiki: Wiki, folder: Path, manifest: dict, skip: frozenset[str] = frozenset(),
           skip_prefixes: tuple[str, ...] = (), files: checked.Files | None = None) -> None:
    """Check every file the manifest lists against its checksum (those in ``skip`` or under
    ``skip_prefixes`` only for where they lead; through ``files``, whose stamps may vouch for a file: see
    :mod:`wikirag.checked`); a name leading out of the build (``..``, absolute, a symlink on the way) or a
    file that differs makes the build damaged (:class:`IndexMissing`)."""
    checksums = manifest.get("checksums")
    if not isinstance(checksums, dict):
        raise _damaged(wiki, "manifest.json lists no checksums")
    inside: dict[str, bool] = {}  # folder of the build (relative) -> a real folder, no symlink
    for name in checksums:
        parts = name.split("/") if isinstance(name, str) else []
        if not parts or any(p in ("", ".", "..") or os.sep in p for p in parts) or not _real_inside(
                folder, parts, inside):
            raise _damaged(wiki, f"{name} leads out of its build")
        if name in skip or name.startswith(skip_prefixes):
            continue
        try:
            (files or checked.reader(folder, checksums)).check(name)
        except checked.Mismatch:
            raise _damaged(wiki, f"{name} does not match its checksum") from None


def _real_inside(folder: Path, parts: list[str], inside: dict[str, bool]) -> bool:
    """Whether ``folder/parts…`` is reached through real folders only and is not a symlink itself (one
    ``lstat`` per folder on the way, remembered in ``inside``, and one for the file)."""
    import stat as stat_mod

    for depth in range(1, len(parts)):
        rel = "/".join(parts[:depth])
        if rel not in inside:
            try:
                inside[rel] = stat_mod.S_ISDIR(os.lstat(folder / rel).st_mode)
            except OSError:
                inside[rel] = False
        if not inside[rel]:
            return False
    try:
        return not stat_mod.S_ISLNK(os.lstat(folder / "/".join(parts)).st_mode)
    except FileNotFoundError:
        return True  # missing: the reader says so
    except OSError:
        return False


def load(wiki: Wiki, with_bm25: bool = False, lazy: bool = False) -> LoadedIndex:
    """Load the serving build of ``wiki``; raise :class:`IndexMissing` with the fix if there is none.

    The passages are read and checked now; the BM25 layer when first used (:attr:`LoadedIndex.bm25`) —
    or now, side by side with the passages, ``with_bm25`` (a query of this wiki alone needs both: reading
    and checking two files at once takes the time of the larger).

    ``lazy``: the passages too are read when first used, so a damaged passage file is found then
    (:class:`PassagesDamaged`), not here. For the many wikis of one composition (:meth:`wikirag.cache.
    IndexCache.prefetch`): reading and checking one wiki's seven passage files is about 1 ms, a tenth of
    a second for 100 wikis of which a query returns passages of a few. The manifest, the level and where
    every file of the build leads are still checked here."""
    for attempt in range(3):  # a concurrent build may swap CURRENT between our reads: read again
        build_id = current_build_id(wiki)
        if build_id is None:
            raise IndexMissing(f"wiki '{wiki.name}' has no index yet: run 'wikirag build {wiki.name}'")
        folder = build_folder(wiki, build_id)
        try:
            manifest = read_manifest(wiki, build_id)
            files = checked.reader(folder, manifest["checksums"])
            verify(wiki, folder, manifest, skip=NOT_READ_BY_QUERIES, skip_prefixes=READ_CHECKED, files=files)
            if lazy:
                return LoadedIndex(wiki.name, build_id, manifest, folder)
            if with_bm25:  # both checked now, two at a time (only hashed where no stamp vouches)
                try:
                    files.check_all([f"{chunkfile.FOLDER}/text.bin"] + [f"bm25/{n}" for n in LOADED if n.endswith(".npy")])
                except checked.Mismatch as exc:
                    raise _damaged(wiki, str(exc)) from None
            passages = read_passages(wiki.name, folder, manifest, files)
            return LoadedIndex(wiki.name, build_id, manifest, folder, passages)
        except (FileNotFoundError, IndexMissing):
            if attempt < 2 and current_build_id(wiki) != build_id:
                continue
            if not folder.exists():
                raise IndexMissing(
                    f"the index of wiki '{wiki.name}' is damaged (build {build_id} is missing): "
                    f"rebuild it with 'wikirag build {wiki.name}'"
                ) from None
            raise
    raise AssertionError("unreachable")  # pragma: no cover


def read_passages(name: str, folder: Path, manifest: dict,
                  files: checked.Files) -> tuple[chunkfile.ChunkTable, delta_mod.Delta | None]:
    """A build's passages (with its delta, if any), checked by ``files``: :class:`IndexMissing` if they
    are damaged or do not fit the manifest's count."""
    try:
        chunks = chunkfile.read(folder, files)
        delta = delta_mod.read(manifest, files, len(chunks))
        if delta is not None:
            chunks = delta_mod.Overlay(chunks, delta.table, delta.removed)
    except checked.Mismatch as exc:
        raise _damaged(name, str(exc)) from None
    except (ValueError, KeyError, TypeError) as exc:  # checksums match, content does not: made so
        raise _damaged(name, f"its passages do not fit together: {exc}") from None
    recorded = manifest.get("chunks")
    if isinstance(recorded, int) and recorded != len(chunks):
        raise _damaged(name, f"{len(chunks)} passages where its manifest records {recorded}")
    return chunks, delta


@contextlib.contextmanager
def build_lock(wiki: Wiki) -> Iterator[None]:
    wiki.index_dir.mkdir(parents=True, exist_ok=True)
    with open(wiki.index_dir / "lock", "a+") as fh:
        if fcntl is not None:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise BuildError(
                    f"another build of wiki '{wiki.name}' is running: wait for it to finish"
                ) from None
        yield


def _fsync_tree(folder: Path) -> None:
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())
    _fsync_dir(folder)


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not every file system lets a folder be fsynced
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def sweep(wiki: Wiki, keep: set[str]) -> None:
    """Remove builds other than ``keep`` and leftovers of killed builds (we hold the build lock)."""
    for path in wiki.index_dir.glob("tmp-*"):
        shutil.rmtree(path, ignore_errors=True)
    for path in wiki.index_dir.glob("CURRENT.*"):
        with contextlib.suppress(OSError):
            path.unlink()
    builds = wiki.index_dir / "builds"
    if builds.is_dir() and not builds.is_symlink():
        for path in builds.iterdir():
            if path.is_symlink() or not path.is_dir():  # not a build: a planted link or file
                with contextlib.suppress(OSError):
                    path.unlink()
            elif path.name not in keep:
                shutil.rmtree(path, ignore_errors=True)


def _own_builds(wiki: Wiki) -> Path:
    """``.index/builds/`` as a real folder of this wiki: a symlink (or file) planted there is removed first,
    so a build never writes into (or sweeps) another wiki's builds. The caller holds the build lock."""
    builds = wiki.index_dir / "builds"
    if builds.is_symlink() or (builds.exists() and not builds.is_dir()):
        builds.unlink()
    builds.mkdir(exist_ok=True)
    return builds


def publish(wiki: Wiki, manifest: dict, write: Callable[[Path], None], known: dict[str, str] | None = None) -> str:
    """Make a new build serve: ``write(folder)`` writes its files into a fresh ``tmp-<id>`` folder (and
    may add to ``manifest``); then the checksums (those of ``known`` as given: files linked from a checked
    build, :func:`wikirag.delta.link_base`) and manifest are written, everything is fsynced, the
    folder is renamed into ``builds/`` and ``CURRENT`` is pointed at it. Returns the new build's id.

    Any failure removes the temporary folder and leaves ``CURRENT`` as it was; a file-system error
    becomes a :class:`BuildError` that says why (a full disk says so, with the bytes free).
    The caller holds :func:`build_lock`.
    """
    global build_generation
    build_id = new_build_id()
    tmp = wiki.index_dir / f"tmp-{build_id}"
    pointer = wiki.index_dir / f"CURRENT.{build_id}"
    try:
        tmp.mkdir()
        write(tmp)
        manifest["checksums"] = {
            name: (known or {}).get(name) or sha256(p.read_bytes())
            for p in sorted(tmp.rglob("*")) if p.is_file() and (name := p.relative_to(tmp).as_posix()) != checked.STAMP
        }
        manifest["manifest_sha256"] = manifest_digest(manifest)
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False), encoding="utf-8")
        checked.stamp_all(tmp, manifest["checksums"])  # just hashed: no reader hashes them again
        _fsync_tree(tmp)
        builds = _own_builds(wiki)
        os.rename(tmp, builds / build_id)
        _fsync_dir(builds)
        pointer.write_text(build_id + "\n", encoding="utf-8")
        with open(pointer, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(pointer, wiki.index_dir / "CURRENT")  # the moment the new build starts serving
        _fsync_dir(wiki.index_dir)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        with contextlib.suppress(OSError):
            pointer.unlink()
        if not isinstance(exc, OSError):
            raise
        try:
            free = shutil.disk_usage(wiki.index_dir).free
        except OSError:
            free = None
        reason = exc.strerror or str(exc)
        if exc.errno == errno.ENOSPC or (free is not None and free < 1024 * 1024):
            reason = f"No space left on device: {free} bytes free"
        raise BuildError(
            f"could not write the index of wiki '{wiki.name}' ({reason}: {exc.filename or wiki.index_dir}); "
            "the previous index still serves"
        ) from None
    build_generation += 1
    return build_id


def level_change(manifest: dict, wiki: Wiki) -> str | None:
    """``"old → new"`` when the wiki's level in ``.wiki.yaml`` differs from the one it was indexed under.

    The level that applies is always the one in ``.wiki.yaml``, read at query time; this only reports the
    change. A build recorded above that level is not served at all (:func:`check_level`), so a serving
    build only ever reports a raised level.
    """
    built = manifest.get("sensitivity")
    return f"{built} → {wiki.level}" if built and built != str(wiki.level) else None
