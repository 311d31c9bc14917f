"""A wiki's index on disk: the store. Where builds live, which one serves, publishing, loading, checks.

Layout of ``wikis/<name>/.index/``::

    CURRENT              the id of the build that serves (replaced atomically with os.replace)
    lock                 held by a running build (flock), so two builds of one wiki never overlap
    builds/<id>/         a finished build: manifest.json, chunks.jsonl, bm25/ (bm25s files),
                         graph.json (the pages' links), dense/ (vectors, if the wiki has that layer)
    tmp-<id>/            a build in progress; removed when it fails, swept by the next build if killed

:func:`publish` has a build's files written into a new ``tmp-<id>`` folder, adds to its
``manifest.json`` a sha256 of every file and of the manifest itself, fsyncs it, renames it into
``builds/`` and only then points ``CURRENT`` at it, so a build that fails or is killed at any point
leaves the previous index serving. The previous build is kept until the next one (:func:`sweep`), so a
reader that has just read ``CURRENT`` never finds its folder gone. :func:`load` checks the format
version and every checksum: a damaged or foreign index is refused, never used. What goes into a build
is :mod:`wikirag.index`'s job.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from . import graph as graph_mod
from .bm25 import BM25Layer
from .dense import DenseInfo
from .errors import BuildError, IndexMissing
from .graph import LinkGraph
from .passage import Chunk
from .wiki import Wiki

FORMAT_VERSION = 4
# bumped by every build of this process, so in-process readers notice a swap at once
build_generation = 0

try:  # POSIX; on other systems two simultaneous builds of one wiki are not prevented
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]


@dataclass(frozen=True)
class LoadedIndex:
    """A wiki's index in memory. Read-only: one instance is shared by every thread of a process."""

    wiki: str
    build_id: str
    manifest: dict
    chunks: list[Chunk]
    bm25: BM25Layer
    folder: Path
    graph: LinkGraph

    @property
    def dense(self) -> DenseInfo | None:
        """The dense layer's model and size, if this build has one."""
        return DenseInfo.from_manifest(self.manifest.get("dense"))


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def current_build_id(wiki: Wiki) -> str | None:
    """The id of the build that serves, or None if the wiki was never built."""
    try:
        return (wiki.index_dir / "CURRENT").read_text(encoding="utf-8").strip() or None
    except FileNotFoundError:
        return None


def read_manifest(wiki: Wiki, build_id: str) -> dict:
    path = wiki.index_dir / "builds" / build_id / "manifest.json"
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
    return manifest


def manifest_digest(manifest: dict) -> str:
    """The manifest's own checksum: over its canonical JSON, without this field."""
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    return sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode("utf-8"))


def read_chunks(path: Path) -> list[Chunk]:
    with path.open(encoding="utf-8") as fh:
        return [Chunk(**json.loads(line)) for line in fh]


def load(wiki: Wiki) -> LoadedIndex:
    """Load the serving build of ``wiki``; raise :class:`IndexMissing` with the fix if there is none."""
    for attempt in range(3):  # a concurrent build may swap CURRENT between our reads: read again
        build_id = current_build_id(wiki)
        if build_id is None:
            raise IndexMissing(f"wiki '{wiki.name}' has no index yet: run 'wikirag build {wiki.name}'")
        folder = wiki.index_dir / "builds" / build_id
        try:
            manifest = read_manifest(wiki, build_id)
            for name, digest in manifest["checksums"].items():
                if sha256((folder / name).read_bytes()) != digest:
                    raise IndexMissing(
                        f"the index of wiki '{wiki.name}' is damaged ({name} does not match its "
                        f"checksum): rebuild it with 'wikirag build {wiki.name}'"
                    )
            chunks = read_chunks(folder / "chunks.jsonl")
            return LoadedIndex(wiki.name, build_id, manifest, chunks, BM25Layer.load(folder / "bm25"), folder,
                               LinkGraph(*graph_mod.load_pages(folder), chunks))
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
    if builds.is_dir():
        for path in builds.iterdir():
            if path.name not in keep:
                shutil.rmtree(path, ignore_errors=True)


def publish(wiki: Wiki, manifest: dict, write: Callable[[Path], None]) -> str:
    """Make a new build serve: ``write(folder)`` writes its files into a fresh ``tmp-<id>`` folder (and
    may add to ``manifest``); then the checksums and manifest are written, everything is fsynced, the
    folder is renamed into ``builds/`` and ``CURRENT`` is pointed at it. Returns the new build's id.

    Any failure removes the temporary folder and leaves ``CURRENT`` as it was; a file-system error
    becomes a :class:`BuildError` that says why (a full disk says so, with the bytes free).
    The caller holds :func:`build_lock`.
    """
    global build_generation
    build_id = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(3)
    tmp = wiki.index_dir / f"tmp-{build_id}"
    pointer = wiki.index_dir / f"CURRENT.{build_id}"
    try:
        tmp.mkdir()
        write(tmp)
        manifest["checksums"] = {
            p.relative_to(tmp).as_posix(): sha256(p.read_bytes()) for p in sorted(tmp.rglob("*")) if p.is_file()
        }
        manifest["manifest_sha256"] = manifest_digest(manifest)
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False), encoding="utf-8")
        _fsync_tree(tmp)
        (wiki.index_dir / "builds").mkdir(exist_ok=True)
        os.rename(tmp, wiki.index_dir / "builds" / build_id)
        _fsync_dir(wiki.index_dir / "builds")
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

    The level that applies is always the manifest's, read at query time; this only reports the change.
    """
    built = manifest.get("sensitivity")
    return f"{built} → {wiki.level}" if built and built != str(wiki.level) else None
