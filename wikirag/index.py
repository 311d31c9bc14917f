"""A wiki's index on disk: incremental, atomic builds; loading; and fresh/stale status.

Layout of ``wikis/<name>/.index/``::

    CURRENT              the id of the build that serves (replaced atomically with os.replace)
    lock                 held by a running build (flock), so two builds of one wiki never overlap
    builds/<id>/         a finished build: manifest.json, chunks.jsonl, bm25/ (bm25s files),
                         graph.json (the pages' links), dense/ (vectors, if the wiki has that layer)
    tmp-<id>/            a build in progress; removed when it fails, swept by the next build if killed

A build writes a complete new folder, fsyncs it, renames it into ``builds/`` and only then points
``CURRENT`` at it, so a build that fails or is killed at any point leaves the previous index serving.
The previous build is kept until the next one, so a reader that has just read ``CURRENT`` never finds
its folder gone. ``manifest.json`` records the format version, the wikirag and bm25s versions, the
tokenizer, BM25 and chunking settings, every source file's sha256, size, mtime and chunk count, and a
sha256 of every index file, checked on load so a damaged index is refused, never used.
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
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import bm25s

from . import __version__
from . import graph as graph_mod
from .bm25 import BM25_PARAMS, TOKENIZER, BM25Layer, tokenize
from .chunking import ENCODING_NAME, Chunk, chunk_markdown, parse_page, tag_matches
from .dense import DenseInfo, build_layer, passage_text
from .embeddings import EmbeddingError
from .errors import BuildError, IndexMissing
from .graph import LinkGraph, PageLinks
from .sources import Skipped, decode, discover
from .wiki import Wiki

FORMAT_VERSION = 4
Progress = Callable[[str, int, int], None]  # (stage: "reading" or "embedding", done, total)
# bumped by every build of this process, so in-process readers notice a swap at once
build_generation = 0

try:  # POSIX; on other systems two simultaneous builds of one wiki are not prevented
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]


@dataclass(frozen=True)
class BuildReport:
    """What a build did. ``state`` is ``"built"`` or ``"up to date"`` (nothing written)."""

    wiki: str
    state: str
    files: int
    chunks: int
    rechunked: int
    skipped: list[Skipped]
    seconds: float
    build_id: str


@dataclass(frozen=True)
class IndexStatus:
    """``state``: ``fresh``, ``stale`` (sources changed since the build), ``missing`` or ``incompatible``."""

    state: str
    detail: str = ""
    build_id: str | None = None
    built_at: str | None = None
    files: int = 0
    chunks: int = 0
    changed: list[str] = field(default_factory=list)
    dense: str | None = None  # declared dense layer: "ok", "missing" or "other model"; None if not declared
    links: int = 0  # links between pages recorded by the build
    dangling: int = 0  # links in it that name no page of the wiki
    level_changed: str | None = None  # "confidential → public" when .wiki.yaml's level changed since the build


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


def _settings(wiki: Wiki) -> dict:
    m = wiki.manifest
    return {
        "chunking": {**m.chunking.model_dump(), "encoding": ENCODING_NAME},
        "tokenizer": TOKENIZER,
        "bm25": BM25_PARAMS,
        "source": str(wiki.source_spec().root),
        "pattern": wiki.source_spec().pattern,
        "include_tags": m.include_tags,
        "exclude": m.exclude,
        "meta_files": m.meta_files,
        "dense": m.layers.dense.model_dump() if m.layers.dense else None,
    }


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def current_build_id(wiki: Wiki) -> str | None:
    """The id of the build that serves, or None if the wiki was never built."""
    try:
        return (wiki.index_dir / "CURRENT").read_text(encoding="utf-8").strip() or None
    except FileNotFoundError:
        return None


def _read_manifest(wiki: Wiki, build_id: str) -> dict:
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
    if manifest.get("manifest_sha256") != _manifest_digest(manifest):
        raise IndexMissing(
            f"the index of wiki '{wiki.name}' is damaged (manifest.json does not match its checksum): "
            f"rebuild it with 'wikirag build {wiki.name}'"
        )
    return manifest


def _manifest_digest(manifest: dict) -> str:
    """The manifest's own checksum: over its canonical JSON, without this field."""
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    return _sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode("utf-8"))


def _read_chunks(path: Path) -> list[Chunk]:
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
            manifest = _read_manifest(wiki, build_id)
            for name, digest in manifest["checksums"].items():
                if _sha256((folder / name).read_bytes()) != digest:
                    raise IndexMissing(
                        f"the index of wiki '{wiki.name}' is damaged ({name} does not match its "
                        f"checksum): rebuild it with 'wikirag build {wiki.name}'"
                    )
            chunks = _read_chunks(folder / "chunks.jsonl")
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
def _build_lock(wiki: Wiki) -> Iterator[None]:
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


def _previous(wiki: Wiki) -> tuple[str | None, dict | None, dict[str, list[Chunk]], dict[str, PageLinks]]:
    """The serving build's id, manifest, chunks and links by path; nothing usable → ``(id, None, {}, {})``."""
    build_id = current_build_id(wiki)
    if build_id is None:
        return None, None, {}, {}
    try:
        manifest = _read_manifest(wiki, build_id)
        chunks = _read_chunks(wiki.index_dir / "builds" / build_id / "chunks.jsonl")
        links, _ = graph_mod.load_pages(wiki.index_dir / "builds" / build_id)
    except (OSError, ValueError, TypeError, KeyError, IndexMissing):
        return build_id, None, {}, {}  # damaged or foreign: rebuild everything
    by_path: dict[str, list[Chunk]] = {}
    for chunk in chunks:
        by_path.setdefault(chunk.path, []).append(chunk)
    return build_id, manifest, by_path, links


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


def _write_build(wiki: Wiki, folder: Path, chunks: list[Chunk], links: dict[str, PageLinks], known: list[str],
                 manifest: dict, started: float, previous: list[Path], progress: Progress | None) -> None:
    texts = [passage_text(c) for c in chunks]
    BM25Layer.build(tokenize(texts), folder / "bm25")
    manifest["graph"] = graph_mod.save(folder, graph_mod.resolve(links, known), known)
    spec = wiki.manifest.layers.dense
    if spec is not None:
        try:
            info = build_layer(folder / "dense", chunks, spec.model, spec.api_base, previous,
                               (lambda done, total: progress("embedding", done, total)) if progress else None)
        except EmbeddingError as exc:
            raise BuildError(f"wiki '{wiki.name}': its dense layer could not be built: {exc}; "
                             "the previous index still serves") from None
        manifest["dense"] = asdict(info)
    with (folder / "chunks.jsonl").open("w", encoding="utf-8") as fh:
        for c in chunks:
            fh.write(json.dumps({"path": c.path, "start": c.start, "end": c.end, "line": c.line,
                                 "heading": c.heading, "text": c.text}, ensure_ascii=False) + "\n")
    manifest["build_seconds"] = round(time.perf_counter() - started, 3)
    manifest["checksums"] = {
        p.relative_to(folder).as_posix(): _sha256(p.read_bytes())
        for p in sorted(folder.rglob("*")) if p.is_file()
    }
    manifest["manifest_sha256"] = _manifest_digest(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False), encoding="utf-8")
    _fsync_tree(folder)


def _sweep(wiki: Wiki, keep: set[str]) -> None:
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


@dataclass
class _Collected:
    records: dict[str, dict]           # path -> sha256, size, mtime_ns, chunks, skipped reason
    chunks: dict[str, list[Chunk]]     # path -> its passages
    skipped: list[Skipped]
    rechunked: int = 0
    links: dict[str, PageLinks] = field(default_factory=dict)  # path -> its links (indexed pages only)


def _collect(wiki: Wiki, files: list, prev_files: dict, prev_chunks: dict[str, list[Chunk]],
             prev_links: dict[str, PageLinks], skipped: list[Skipped], progress: Progress | None) -> _Collected:
    """Read every source file; reuse the previous passages (and links) of files whose content did not change."""
    out = _Collected({}, {}, list(skipped))
    limit = wiki.manifest.chunking.max_file_mb * 1024 * 1024
    for i, src in enumerate(files):
        if progress is not None:
            progress("reading", i, len(files))
        if src.size > limit:  # read nothing: memory stays bounded whatever lands in the folder
            reason = (f"too large ({src.size / 2**20:.1f} MB > {wiki.manifest.chunking.max_file_mb:g} MB): "
                      "split it, or raise chunking.max_file_mb")
            out.records[src.path] = {"sha256": None, "size": src.size, "mtime_ns": src.mtime_ns, "chunks": 0,
                                     "skipped": reason}
            out.chunks[src.path] = []
            out.skipped.append(Skipped(src.path, reason))
            continue
        old = prev_files.get(src.path)
        if old is not None and (old["size"], old["mtime_ns"]) == (src.size, src.mtime_ns):
            out.records[src.path], out.chunks[src.path] = old, prev_chunks.get(src.path, [])
        else:
            try:
                data = src.abspath.read_bytes()
            except OSError as exc:
                out.skipped.append(Skipped(src.path, f"cannot read: {exc.strerror or exc}"))
                continue
            digest = _sha256(data)
            if old is not None and old["sha256"] == digest:  # touched, not changed
                out.records[src.path] = {**old, "size": src.size, "mtime_ns": src.mtime_ns}
                out.chunks[src.path] = prev_chunks.get(src.path, [])
            else:
                reason, chunks, links = _chunk_file(wiki, src.path, data)
                if links is not None:
                    out.links[src.path] = links
                out.rechunked += 1
                out.records[src.path] = {"sha256": digest, "size": src.size, "mtime_ns": src.mtime_ns,
                                         "chunks": len(chunks), "skipped": reason}
                out.chunks[src.path] = chunks
        if out.chunks[src.path] and src.path not in out.links:  # reused passages: reuse the links too
            out.links[src.path] = prev_links.get(src.path) or _read_links(src.abspath)
        if out.records[src.path]["skipped"]:
            out.skipped.append(Skipped(src.path, out.records[src.path]["skipped"]))
    if progress is not None:
        progress("reading", len(files), len(files))
    return out


def _publish(wiki: Wiki, chunks: list[Chunk], got: _Collected, known: list[str], manifest: dict, started: float,
             previous: list[Path], progress: Progress | None) -> str:
    """Write a complete build into ``tmp-<id>``, move it into ``builds/`` and point CURRENT at it."""
    build_id = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(3)
    tmp = wiki.index_dir / f"tmp-{build_id}"
    pointer = wiki.index_dir / f"CURRENT.{build_id}"
    try:
        tmp.mkdir()
        _write_build(wiki, tmp, chunks, {p: v for p, v in got.links.items() if got.chunks.get(p)}, known,
                     manifest, started, previous, progress)
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
    return build_id


def build(wiki: Wiki, *, force: bool = False, progress: Progress | None = None,
          vector_sources: list[Path] = ()) -> BuildReport:
    """Build or update ``wiki``'s index. Unchanged files are not re-chunked; nothing changed → no write.

    ``progress(stage, done, total)`` is called as files are read and passages embedded. The dense layer
    reuses the previous build's vectors of unchanged passages, and also those found in
    ``vector_sources`` (other builds' ``dense/`` folders, e.g. the same pages in another wiki). Raises :class:`BuildError` (the previous
    index still serves) when the wiki has nothing to index, another build of it is running, or the
    index cannot be written.
    """
    started = time.perf_counter()
    with _build_lock(wiki):
        prev_id, prev, prev_chunks, prev_links = _previous(wiki)
        settings = _settings(wiki)
        found = discover(wiki)
        if not found.root.is_dir():
            raise BuildError(
                f"wiki '{wiki.name}': source folder {found.root} does not exist: "
                f"fix 'source:' in {wiki.manifest_path}"
            )
        reuse = prev is not None and not force and prev["settings"]["chunking"] == settings["chunking"]
        got = _collect(wiki, found.files, prev["files"] if reuse and prev else {}, prev_chunks,
                       prev_links if reuse else {}, found.skipped, progress)
        chunks = [c for path in sorted(got.chunks) for c in got.chunks[path]]
        files = sum(1 for r in got.records.values() if r["chunks"])
        if not chunks:
            reasons = "; ".join(f"{s.path}: {s.reason}" for s in got.skipped[:5])
            raise BuildError(
                f"wiki '{wiki.name}' has nothing to index: {len(found.files)} markdown file(s) under "
                f"{found.root}" + (f" ({reasons})" if reasons else "")
                + f". Add markdown pages or fix 'source:'/'include_tags:' in {wiki.manifest_path}"
            )
        if (prev is not None and prev_id is not None and not force and prev["settings"] == settings
                and {p: r["sha256"] for p, r in prev["files"].items()}
                == {p: r["sha256"] for p, r in got.records.items()}):
            return BuildReport(wiki.name, "up to date", files, len(chunks), 0, got.skipped,
                               time.perf_counter() - started, prev_id)
        manifest = {
            "format_version": FORMAT_VERSION,
            "wikirag_version": __version__,
            "bm25s_version": bm25s.__version__,
            "wiki": wiki.name,
            "sensitivity": str(wiki.level),
            "built_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "settings": settings,
            "chunks": len(chunks),
            "files": got.records,
        }
        previous = [wiki.index_dir / "builds" / prev_id / "dense"] if prev_id and prev is not None else []
        known = [s.path for s in found.skipped if s.reason == "meta file"]
        build_id = _publish(wiki, chunks, got, known, manifest, started, [*previous, *vector_sources], progress)
        global build_generation
        build_generation += 1
        _sweep(wiki, keep={build_id} | ({prev_id} if prev_id else set()))
        return BuildReport(wiki.name, "built", files, len(chunks), got.rechunked, got.skipped,
                           time.perf_counter() - started, build_id)


def _chunk_file(wiki: Wiki, path: str, data: bytes) -> tuple[str | None, list[Chunk], PageLinks | None]:
    """Chunk one file's bytes; return ``(reason it is skipped or None, chunks, its links)``."""
    text, reason = decode(data)
    if text is None:
        return reason, [], None
    page = parse_page(text)
    if wiki.manifest.include_tags and not tag_matches(page.tags, wiki.manifest.include_tags):
        return "no matching tag (include_tags)", [], None
    settings = wiki.manifest.chunking
    chunks = chunk_markdown(text, path, settings.max_tokens, settings.min_chars, page=page)
    if not chunks:
        return f"no passage of {settings.min_chars}+ characters (empty or too short)", [], None
    return None, chunks, graph_mod.page_links(text, page)


def _read_links(path: Path) -> PageLinks:
    """The links of a page whose passages are reused but whose links the previous build did not keep."""
    text, _ = decode(path.read_bytes())
    return graph_mod.page_links(text or "", parse_page(text or ""))


def level_change(manifest: dict, wiki: Wiki) -> str | None:
    """``"old → new"`` when the wiki's level in ``.wiki.yaml`` differs from the one it was indexed under.

    The level that applies is always the manifest's, read at query time; this only reports the change.
    """
    built = manifest.get("sensitivity")
    return f"{built} → {wiki.level}" if built and built != str(wiki.level) else None


def status(wiki: Wiki) -> IndexStatus:
    """Compare the serving build with the sources now: ``fresh``, ``stale``, ``missing``, ``incompatible``."""
    build_id = current_build_id(wiki)
    if build_id is None:
        return IndexStatus("missing", f"never built: run 'wikirag build {wiki.name}'",
                           dense="missing" if wiki.manifest.layers.dense else None)
    try:
        manifest = _read_manifest(wiki, build_id)
    except IndexMissing as exc:
        return IndexStatus("incompatible", str(exc), build_id)
    recorded: dict[str, dict] = manifest["files"]
    declared, built = wiki.manifest.layers.dense, manifest.get("dense")
    dense = None if declared is None else "missing" if not built else (
        "ok" if built["model"] == declared.model else "other model")
    graph = manifest.get("graph") or {}
    base = {"build_id": build_id, "built_at": manifest.get("built_at"), "chunks": manifest.get("chunks", 0),
            "files": sum(1 for r in recorded.values() if r["chunks"]), "dense": dense,
            "level_changed": level_change(manifest, wiki), "links": graph.get("links", 0),
            "dangling": graph.get("dangling", 0)}
    if manifest["settings"] != _settings(wiki):
        return IndexStatus("stale", f"settings changed since the build: run 'wikirag build {wiki.name}'", **base)
    changed: list[str] = []
    found = discover(wiki)
    for src in found.files:
        old = recorded.get(src.path)
        if old is None:
            changed.append(f"added {src.path}")
        elif (old["size"], old["mtime_ns"]) != (src.size, src.mtime_ns):
            try:
                if old["sha256"] is None or _sha256(src.abspath.read_bytes()) != old["sha256"]:
                    changed.append(f"modified {src.path}")
            except OSError:
                changed.append(f"unreadable {src.path}")
    present = {src.path for src in found.files}
    changed += [f"removed {path}" for path in recorded if path not in present]
    if changed:
        return IndexStatus("stale", f"{len(changed)} file(s) changed since the build: "
                           f"run 'wikirag build {wiki.name}'", changed=changed, **base)
    return IndexStatus("fresh", "", **base)
