"""Building a wiki's index: read the sources, chunk what changed, write the layers; and fresh/stale status.

A build reads every source file (:mod:`wikirag.sources`), reuses the passages, links and token ids of
files whose content did not change and chunks and tokenises only the rest (:mod:`wikirag.chunking`,
:mod:`wikirag.page`, :mod:`wikirag.links`), then computes the BM25 layer from the token ids
(:meth:`wikirag.bm25.BM25Layer.build_from_ids`: proportional to the passages, not to re-tokenising
them) and writes it, the link graph, the dense layer (if the wiki has one) and the passages
(:mod:`wikirag.chunkfile`) into a new build that :func:`wikirag.store.publish` makes serve atomically.
``manifest.json`` records the format version, the wikirag and bm25s versions, the tokenizer, BM25 and
chunking settings and the mtime and listing of every source folder walked (the query path's freshness
check, :func:`wikirag.sources.folders_changed`: in ``folders.json``); ``files.json`` every source file's sha256, size, mtime
and chunk count: :func:`status` compares them with the sources as they are now.

The work per file is bounded before anything is parsed: a file over ``chunking.max_file_mb`` is not
read, and a file with more than :data:`wikirag.chunking.MAX_BLOCKS` lines that may start a markdown block
(:func:`wikirag.chunking.count_blocks`, e.g. a page of a million headings) is not parsed; both are
skipped with a reason that says to split them. A build never trusts the serving build it starts from: a
tampered, foreign or higher-level one (:mod:`wikirag.store`) is rebuilt from the sources and swept.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import gc
import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from . import __version__, checked, chunkfile, store
from . import delta as delta_mod
from . import dense as dense_mod
from . import graph as graph_mod
from .bm25 import BM25_PARAMS, TOKENIZER, BM25Layer, bm25s_version, encode, saved_tokens, tokenize, words_of
from .chunking import ENCODING_NAME, MAX_BLOCKS, SECTION_RULES, chunk_markdown, count_blocks
from .dense import build_layer, passage_text
from .errors import BuildError, EmbeddingError, IndexMissing
from .graph import PageLinks
from .page import parse_page, tag_matches
from .passage import Chunk
from .sources import Skipped, decode, discover
from .store import current_build_id, read_files, read_manifest, sha256
from .wiki import Wiki

Progress = Callable[[str, int, int], None]  # (stage: "reading" or "embedding", done, total)


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
    warnings: list[str] = field(default_factory=list)  # e.g. the dense layer not uploaded to a Qdrant server
    update: bool = False  # an update: the changed pages as a delta on the serving build (wikirag.delta)


@dataclass(frozen=True)
class IndexStatus:
    """``state``: ``fresh``, ``stale`` (sources changed since the build), ``missing`` or ``incompatible``
    (the serving build cannot be used: another format, damaged, tampered with, made for another wiki, or
    indexed at a level above the wiki's level now; ``detail`` says which, and to rebuild)."""

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


def _settings(wiki: Wiki) -> dict:
    m = wiki.manifest
    return {
        "chunking": {**m.chunking.model_dump(), "encoding": ENCODING_NAME, "sections": SECTION_RULES},
        "tokenizer": TOKENIZER,
        "bm25": BM25_PARAMS,
        "source": str(wiki.source_spec().root),
        "pattern": wiki.source_spec().pattern,
        "include_tags": m.include_tags,
        "exclude": m.exclude,
        "meta_files": m.meta_files,
        # the similarity floor is a query-time setting: changing it re-embeds nothing
        "dense": m.layers.dense.model_dump(exclude={"min_similarity"}) if m.layers.dense else None,
    }


@dataclass
class _Collected:
    records: dict[str, dict]           # path -> sha256, size, mtime_ns, chunks, skipped reason
    chunks: dict[str, list[Chunk]]     # path -> its passages
    skipped: list[Skipped]
    rechunked: int = 0
    links: dict[str, PageLinks] = field(default_factory=dict)  # path -> its links (indexed pages only)
    reused: set[str] = field(default_factory=set)  # paths whose passages are the previous build's
    tokens: dict[str, list[list[str]]] = field(default_factory=dict)  # path -> its new passages' BM25 tokens


@dataclass
class _Previous:
    """What a build reuses of the serving build: nothing (``manifest`` None) if there is none or it is unusable."""

    build_id: str | None = None
    manifest: dict | None = None
    files: dict[str, dict] = field(default_factory=dict)        # path -> its record (sha256, size, …)
    chunks: dict[str, list[Chunk]] = field(default_factory=dict)  # path -> its passages
    links: dict[str, PageLinks] = field(default_factory=dict)
    ranges: dict[str, tuple[int, int]] = field(default_factory=dict)  # path -> its passages' index range
    tokens: tuple[list[str], np.ndarray, np.ndarray] | None = None  # vocabulary, token ids, lengths


def _previous(wiki: Wiki) -> _Previous:
    """The serving build's manifest, file records, passages, links and token ids."""
    build_id = current_build_id(wiki)
    if build_id is None:
        return _Previous()
    try:
        manifest = read_manifest(wiki, build_id)  # checks the pointer, the wiki's name and the level too
        folder = store.build_folder(wiki, build_id)
        store.verify(wiki, folder, manifest)  # nothing of a damaged or tampered build is carried forward
        table = chunkfile.read(folder)
        links, _ = graph_mod.load_pages(folder)
        files = read_files(folder)
        tokens = saved_tokens(folder / "bm25")
        delta = delta_mod.read(manifest, checked.plain(folder), len(table))
        if delta is not None:  # an update's build: its passages, tokens and links as they are now
            if len(tokens[2]) != len(table):
                return _Previous(build_id)
            records, gone = delta.records()
            links = {p: v for p, v in links.items() if p not in records and p not in gone} | delta.links()
            tokens = delta_mod.tokens(*tokens, delta)
            table = delta_mod.Overlay(table, delta.table, delta.removed)
    except (OSError, ValueError, TypeError, KeyError, IndexMissing):
        return _Previous(build_id)  # damaged, foreign or tampered with: rebuild everything
    if len(tokens[2]) != len(table) or int(tokens[2].sum()) != len(tokens[1]):
        return _Previous(build_id)
    return _Previous(build_id, manifest, files, table.by_path(), links, table.ranges(), tokens)


def _token_ids(chunks: list[Chunk], got: _Collected, prev: _Previous) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Every passage's token ids (and the vocabulary): reused from the previous build for the files whose
    passages it reuses, tokenised for the rest. Ids of the previous vocabulary are kept; new tokens are
    appended (:meth:`BM25Layer.build_from_ids` drops the terms no passage uses any more)."""
    if prev.tokens is not None:
        words, old_ids, old_lengths = prev.tokens
        old_starts = np.concatenate([[0], np.cumsum(old_lengths)])
    else:
        words, old_ids, old_lengths, old_starts = [], np.empty(0, np.int64), np.empty(0, np.int64), np.zeros(1, np.int64)
    vocab = {t: i for i, t in enumerate(words)}
    id_parts: list[np.ndarray] = []
    length_parts: list[np.ndarray] = []
    pending: list[list[str]] = []  # token lists of new passages, encoded together

    def flush() -> None:
        if pending:
            ids, lengths = encode(pending, vocab)
            id_parts.append(ids)
            length_parts.append(lengths)
            pending.clear()

    for path in sorted(got.chunks):
        path_chunks = got.chunks[path]
        span = prev.ranges.get(path) if prev.tokens is not None and path in got.reused else None
        if span is not None and span[1] - span[0] == len(path_chunks):
            flush()
            lo, hi = span
            id_parts.append(old_ids[old_starts[lo]:old_starts[hi]])
            length_parts.append(old_lengths[lo:hi])
        elif path in got.tokens:  # tokenised as it was chunked
            pending.extend(got.tokens[path])
        else:
            pending.extend(tokenize([passage_text(c) for c in path_chunks]))
    flush()
    ids = np.concatenate(id_parts) if id_parts else np.empty(0, np.int64)
    lengths = np.concatenate(length_parts) if length_parts else np.empty(0, np.int64)
    if len(lengths) != len(chunks):  # pragma: no cover - a bug, never an input
        raise AssertionError(f"{len(lengths)} token lists for {len(chunks)} passages")
    return words_of(vocab), ids, lengths


def _write_build(wiki: Wiki, folder: Path, chunks: list[Chunk], got: _Collected, prev: _Previous,
                 known: list[str], manifest: dict, started: float, previous: list[Path],
                 progress: Progress | None, folders: dict[str, list]) -> None:
    words, ids, lengths = _token_ids(chunks, got, prev)
    BM25Layer.build_from_ids(ids, lengths, words, folder / "bm25")
    links = {p: v for p, v in got.links.items() if got.chunks.get(p)}
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
    chunkfile.write(folder, chunks, {p: (r["size"], r["mtime_ns"]) for p, r in got.records.items()})
    store.write_files(folder, got.records)
    store.write_folders(folder, folders)
    manifest["build_seconds"] = round(time.perf_counter() - started, 3)


# from this many files to read and chunk, a build uses a process per core (below, starting the processes
# costs more than it saves): chunking and tokenising are pure Python, so threads would not run at once
PARALLEL_FILES = 2000
PARALLEL_BATCH = 64  # files sent to a worker process at a time


@dataclass(frozen=True)
class _Spec:
    """What chunking a file needs of its wiki's manifest: small and picklable, for the worker processes."""

    max_tokens: int
    min_chars: int
    include_tags: tuple[str, ...]

    @classmethod
    def of(cls, wiki: Wiki) -> _Spec:
        settings = wiki.manifest.chunking
        return cls(settings.max_tokens, settings.min_chars, tuple(wiki.manifest.include_tags))


def _read_and_chunk(spec: _Spec, path: str, abspath: Path, old_sha: str | None) -> tuple:
    """Read, hash, chunk and tokenise one file (in a worker process, or this one):
    ``("error", why)``, ``("same", sha256)`` (content as ``old_sha``: nothing chunked) or
    ``("chunked", sha256, reason skipped or None, chunks, links, each chunk's BM25 tokens)``."""
    try:
        data = abspath.read_bytes()
    except OSError as exc:
        return ("error", exc.strerror or str(exc))
    digest = sha256(data)
    if digest == old_sha:
        return ("same", digest)
    reason, chunks, links = _chunk_file(spec, path, data)
    return ("chunked", digest, reason, chunks, links, tokenize([passage_text(c) for c in chunks]))


def _spawn_safe() -> bool:
    """Whether worker processes may be spawned: each one imports the ``__main__`` module again, so a script
    that calls :func:`build` at its top level, without ``if __name__ == "__main__":``, would run again in
    every worker (multiprocessing's rule). The CLI, ``python -m``, an interactive session and a script
    with that guard are safe; any other script builds in its own process."""
    import re
    import sys

    main = sys.modules.get("__main__")
    spec, path = getattr(main, "__spec__", None), getattr(main, "__file__", None)
    if spec is not None or not path:
        return True
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return re.search(r"""^if\s+__name__\s*==\s*["']__main__["']\s*:""", text, re.MULTILINE) is not None


def _read_all(spec: _Spec, jobs: list[tuple[str, Path, str | None]]) -> Iterator[tuple]:
    """:func:`_read_and_chunk` of each job, in order: in a pool of worker processes (one per core) when
    there are :data:`PARALLEL_FILES` or more and more than one core, else here."""
    import multiprocessing
    import os
    import threading

    workers = min(os.cpu_count() or 1, 8)
    # only from a main thread of a non-daemon process (the CLI): a daemonic process may not start children,
    # and spawning from a thread of the app (Streamlit) fails; those builds run here, one file at a time
    pooled = (threading.current_thread() is threading.main_thread()
              and not multiprocessing.current_process().daemon and _spawn_safe())
    if len(jobs) < PARALLEL_FILES or workers < 2 or not pooled:
        for job in jobs:
            yield _read_and_chunk(spec, *job)
        return
    from concurrent.futures.process import BrokenProcessPool

    try:
        yield from _pool(workers).map(functools.partial(_read_and_chunk, spec), *zip(*jobs), chunksize=PARALLEL_BATCH)
    except BrokenProcessPool:
        _POOL.clear()  # a worker died (killed, out of memory): the next build starts new ones
        raise


_POOL: list = []  # the process's worker pool, started by its first large build and kept for the next ones


def _pool(workers: int):
    """The worker processes, started once per process (``wikirag build --all`` of 100 wikis spawned them
    100 times: a second each) and stopped when it exits. Spawned, not forked (see :func:`_read_all`)."""
    import atexit
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    if not _POOL:
        pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
        atexit.register(pool.shutdown, cancel_futures=True)
        _POOL.append(pool)
    return _POOL[0]


def _collect(wiki: Wiki, files: list, prev_files: dict, prev_chunks: dict[str, list[Chunk]],
             prev_links: dict[str, PageLinks], skipped: list[Skipped], progress: Progress | None) -> _Collected:
    """Read every source file; reuse the previous passages (and links) of files whose content did not
    change; read, chunk and tokenise the others (:func:`_read_all`: in parallel when there are many)."""
    out = _Collected({}, {}, list(skipped))
    limit = wiki.manifest.chunking.max_file_mb * 1024 * 1024
    jobs = []
    for src in files:
        old = prev_files.get(src.path)
        if src.size <= limit and not (old is not None and (old["size"], old["mtime_ns"]) == (src.size, src.mtime_ns)):
            jobs.append((src.path, src.abspath, old["sha256"] if old is not None else None))
    results = _read_all(_Spec.of(wiki), jobs)
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
            out.reused.add(src.path)
        else:
            got = next(results)
            if got[0] == "error":
                if old is not None:  # a read error is not a deletion
                    _keep(out, src.path, old, prev_chunks, prev_links, f"cannot read: {got[1]}")
                else:
                    out.skipped.append(Skipped(src.path, f"cannot read: {got[1]}"))
                continue
            if got[0] == "same":  # touched, not changed
                out.records[src.path] = {**old, "size": src.size, "mtime_ns": src.mtime_ns}
                out.chunks[src.path] = prev_chunks.get(src.path, [])
                out.reused.add(src.path)
            else:
                _, digest, reason, chunks, links, tokens = got
                if links is not None:
                    out.links[src.path] = links
                out.rechunked += 1
                out.records[src.path] = {"sha256": digest, "size": src.size, "mtime_ns": src.mtime_ns,
                                         "chunks": len(chunks), "skipped": reason}
                out.chunks[src.path] = chunks
                out.tokens[src.path] = tokens
        if out.chunks[src.path] and src.path not in out.links:  # reused passages: reuse the links too
            out.links[src.path] = prev_links.get(src.path) or _read_links(src.abspath)
        if out.records[src.path]["skipped"]:
            out.skipped.append(Skipped(src.path, out.records[src.path]["skipped"]))
    results.close()  # the worker processes end now
    if progress is not None:
        progress("reading", len(files), len(files))
    return out


KEPT = "its passages of the previous build are kept"  # the end of a Skipped reason: read error, index unchanged


def _keep(out: _Collected, path: str, old: dict, prev_chunks: dict[str, list[Chunk]],
          prev_links: dict[str, PageLinks], why: str) -> None:
    """Carry the previous build's passages of ``path``, which cannot be read now, into this build."""
    out.records[path], out.chunks[path] = old, prev_chunks.get(path, [])
    out.reused.add(path)
    if path in prev_links:
        out.links[path] = prev_links[path]
    out.skipped.append(Skipped(path, f"{why}: {KEPT}"))


def _keep_unreadable_folders(got: _Collected, found_skipped: list[Skipped], before: _Previous) -> None:
    """A source folder that cannot be read (permissions, a failing mount) loses nothing: the previous
    build's pages below it are kept as they were, as for a file that cannot be read."""
    for skip in found_skipped:
        if not skip.reason.startswith("cannot read folder"):
            continue
        prefix = "" if skip.path == "." else skip.path + "/"
        for path, record in before.files.items():
            if path.startswith(prefix) and path not in got.records:
                _keep(got, path, record, before.chunks, before.links,
                      f"in folder {skip.path}, which {skip.reason.replace('cannot read folder', 'cannot be read')}")


def unchanged(wiki: Wiki) -> bool:
    """True when nothing a build reads has changed since the serving build: the same settings and level, the
    same markdown files with the same sizes and mtimes. Cheap (a ``stat`` per file and the build's file
    records; no passage is read), and it trusts mtimes: a file rewritten with its old size and mtime is
    not seen. Used by the watcher's catch-up (:mod:`wikirag.watch`); a build checks the content itself."""
    build_id = current_build_id(wiki)
    if build_id is None:
        return False
    try:
        manifest = read_manifest(wiki, build_id)
        records = read_files(store.build_folder(wiki, build_id), manifest)
    except (OSError, ValueError, TypeError, KeyError, IndexMissing):
        return False
    if manifest.get("settings") != _settings(wiki) or manifest.get("sensitivity") != str(wiki.level):
        return False
    found = discover(wiki)
    if any(s.reason.startswith("cannot read") for s in found.skipped):
        return False  # let the build say what it keeps
    now = {f.path: (f.size, f.mtime_ns) for f in found.files}
    return now == {path: (r.get("size"), r.get("mtime_ns")) for path, r in records.items()}


@contextlib.contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Python's cycle collector held off while a build runs. A build keeps millions of objects alive at
    once (a passage, its token list, its records), none of them in a cycle, and the collector goes over
    all of them again and again as they grow: a fresh build of 98k pages took 24–26 s with it, 20–23 s
    without, and one of 1M passages 360 s with it, 273 s without (README "A million passages"), the same
    peak memory. Process-wide, so a query in another thread of the app creates no collected cycles until
    the build ends; re-enabled only by the build that disabled it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def build(wiki: Wiki, *, force: bool = False, progress: Progress | None = None,
          vector_sources: list[Path] = (), changed: Iterable[str] | None = None) -> BuildReport:
    """Build or update ``wiki``'s index. Unchanged files are not re-chunked; nothing changed → no write.

    ``changed``: the source paths (relative to the wiki's source root, ``/``-separated) known to be all
    that changed since the serving build — edited, added or removed pages, as the watcher sees them. Then
    the build is an update (:mod:`wikirag.delta`): only those pages are read, and what is written grows
    with them, not with the wiki; where an update does not apply (see there), the build is a full one.

    ``progress(stage, done, total)`` is called as files are read and passages embedded. The dense layer
    reuses the previous build's vectors of unchanged passages, and also those found in
    ``vector_sources`` (other builds' ``dense/`` folders, e.g. the same pages in another wiki). Raises :class:`BuildError` (the previous
    index still serves) when the wiki has nothing to index, another build of it is running, or the
    index cannot be written.
    """
    started = time.perf_counter()
    with store.build_lock(wiki), _no_cycle_collection():
        if changed is not None and not force:
            report = _update(wiki, sorted(set(changed)), started)
            if report is not None:
                return report
        before = _previous(wiki)
        prev_id, prev = before.build_id, before.manifest
        settings = _settings(wiki)
        found = discover(wiki)
        if not found.root.is_dir():
            raise BuildError(
                f"wiki '{wiki.name}': source folder {found.root} does not exist: "
                f"fix 'source:' in {wiki.manifest_path}"
            )
        reuse = prev is not None and not force and prev["settings"]["chunking"] == settings["chunking"]
        if prev is not None and (not reuse or prev["settings"]["tokenizer"] != settings["tokenizer"]):
            before.tokens = None  # tokenise everything again
        got = _collect(wiki, found.files, before.files if reuse else {}, before.chunks,
                       before.links if reuse else {}, found.skipped, progress)
        if reuse:
            _keep_unreadable_folders(got, found.skipped, before)
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
                and prev.get("sensitivity") == str(wiki.level)  # a raised level is recorded by a new build
                # a full build of an update's build compacts it (wikirag.delta), unless pages cannot be read now
                and not (prev.get("delta") and not any(s.reason.endswith(KEPT) for s in got.skipped))
                and {p: r["sha256"] for p, r in before.files.items()}
                == {p: r["sha256"] for p, r in got.records.items()}):
            return BuildReport(wiki.name, "up to date", files, len(chunks), 0, got.skipped,
                               time.perf_counter() - started, prev_id)
        manifest = {
            "format_version": store.FORMAT_VERSION,
            "wikirag_version": __version__,
            "bm25s_version": bm25s_version(),
            "wiki": wiki.name,
            "sensitivity": str(wiki.level),
            "built_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "settings": settings,
            "chunks": len(chunks),
            "indexed_files": files,
        }
        previous = [store.build_folder(wiki, prev_id) / "dense"] if prev_id and prev is not None else []
        known = [s.path for s in found.skipped if s.reason == "meta file"]
        build_id = store.publish(wiki, manifest, lambda folder: _write_build(
            wiki, folder, chunks, got, before, known, manifest, started, [*previous, *vector_sources], progress,
            found.folders))
        # the previous build stays for readers that have just read CURRENT, if it was a valid one
        store.sweep(wiki, keep={build_id} | ({prev_id} if prev_id and prev is not None else set()))
        warnings = dense_mod.upload(wiki.name, build_id, store.build_folder(wiki, build_id) / "dense",
                                    manifest.get("dense"), progress)
        return BuildReport(wiki.name, "built", files, len(chunks), got.rechunked, got.skipped,
                           time.perf_counter() - started, build_id, warnings)


def _update(wiki: Wiki, changed: list[str], started: float) -> BuildReport | None:
    """The pages ``changed`` as a delta on the serving build (:mod:`wikirag.delta`), published; None where
    an update does not apply (the caller builds in full). The caller holds the build lock."""
    import bisect
    import fnmatch
    import os
    import stat as stat_mod

    from .sources import MARKDOWN_SUFFIXES, folder_listing, glob_regex, listing_digest

    build_id = current_build_id(wiki)
    if build_id is None or wiki.manifest.layers.dense is not None:
        return None
    try:
        manifest = read_manifest(wiki, build_id)
        folder = store.build_folder(wiki, build_id)
        checksums = manifest["checksums"]
        files = checked.reader(folder, checksums)
        store.verify(wiki, folder, manifest, files=files)
        base = chunkfile.read(folder, files)
        old = delta_mod.read(manifest, files, len(base))
        records, gone = old.records() if old is not None else ({}, [])
        links = old.links() if old is not None else {}
    except (OSError, ValueError, TypeError, KeyError, IndexMissing, checked.Mismatch):
        return None
    if manifest.get("settings") != _settings(wiki) or manifest.get("sensitivity") != str(wiki.level):
        return None
    spec, root = wiki.source_spec(), wiki.source_spec().root
    wanted = glob_regex(spec.pattern) if spec.pattern is not None else None
    folders = dict(store.read_folders(folder, manifest))
    limit = wiki.manifest.chunking.max_file_mb * 1024 * 1024
    chunk_spec = _Spec.of(wiki)
    base_paths, base_ids = base.paths, base.path_ids()
    old_ranges = old.table.ranges() if old is not None else {}

    def base_rows(path: str) -> range:
        """The base's passages of ``path`` (a build's paths are sorted, as its passages are, by path)."""
        n = bisect.bisect_left(base_paths, path)
        if n < len(base_paths) and base_paths[n] == path:
            return range(int(np.searchsorted(base_ids, n, "left")), int(np.searchsorted(base_ids, n, "right")))
        return range(0)

    def previous_chunks(path: str) -> list[Chunk]:
        if path in records:
            lo, hi = old_ranges.get(path, (0, 0))
            return old.table[lo:hi]
        rows = base_rows(path)
        return [] if path in gone else base[rows.start:rows.stop]

    base_records: list[dict] = []

    def previous(path: str) -> dict | None:
        """The file record of ``path`` in the serving build (the base's records are read only when a page
        looks the same as before or a page not in the index is removed: rare)."""
        if path in records or path in gone:
            return records.get(path)
        if not base_records:
            base_records.append(json.loads(files(store.FILES)))
        return base_records[0].get(path)

    def previous_sha(path: str) -> str | None:
        return (previous(path) or {}).get("sha256")

    touched: dict[str, tuple | None] = {}  # path -> what _read_and_chunk gave, None: gone
    for rel in changed:
        parts = rel.split("/")
        if not rel or rel.startswith("/") or any(p in ("", ".", "..") or p.startswith(".") for p in parts):
            continue  # hidden, or not a path below the root: never a source
        abspath = root / rel
        try:
            st = os.lstat(abspath)
        except FileNotFoundError:
            st = None
        except OSError:
            return None  # the full build says why it cannot be read
        if not rel.lower().endswith(MARKDOWN_SUFFIXES):
            if st is not None and stat_mod.S_ISREG(st.st_mode):
                continue  # an other file: not a source
            return None  # a folder (added, removed or renamed) or something gone: walk it all
        if wanted is not None and not wanted.match(rel) or any(fnmatch.fnmatchcase(rel, x) for x in wiki.manifest.exclude):
            continue
        parent = "/".join(parts[:-1])
        if any(fnmatch.fnmatchcase(parts[-1], x) for x in wiki.manifest.meta_files) or parent not in folders:
            return None  # the graph's known pages, or a folder the base did not walk
        if st is not None and (stat_mod.S_ISLNK(st.st_mode) or stat_mod.S_ISDIR(st.st_mode) or st.st_size > limit):
            return None
        if st is None or not stat_mod.S_ISREG(st.st_mode):
            if base_rows(rel) or previous(rel) is not None:
                touched[rel] = None
        else:
            got = _read_and_chunk(chunk_spec, rel, abspath, None)
            if got[0] != "chunked":
                return None  # cannot be read: the full build keeps its passages and says so
            if got[3] == previous_chunks(rel) and got[1] == previous_sha(rel):
                continue  # the same content (saved again, or removed and put back): nothing to do
            touched[rel] = (got, st)
        try:
            parent_path = root / parent if parent else root
            folders[parent] = [os.stat(parent_path).st_mtime_ns, listing_digest(folder_listing(parent_path))]
        except OSError:
            return None
    if not touched:
        return BuildReport(wiki.name, "up to date", manifest.get("indexed_files", 0), manifest.get("chunks", 0), 0, [],
                           time.perf_counter() - started, build_id)
    # what the delta held before, for the pages it keeps
    kept_chunks: dict[str, list[Chunk]] = {}
    kept_tokens: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # path -> its token ids and lengths there
    if old is not None:
        starts = np.concatenate([[0], np.cumsum(old.lengths)])
        for path, (lo, hi) in old_ranges.items():
            if path not in touched:
                kept_chunks[path] = old.table[lo:hi]
                kept_tokens[path] = (old.ids[int(starts[lo]):int(starts[hi])], old.lengths[lo:hi])
    removed = set(old.removed.tolist()) if old is not None else set()
    had = 0  # changed pages that had passages
    for path in touched:
        rows = base_rows(path)
        if (rows and not removed.issuperset(rows)) or (path in records and records[path].get("chunks")):
            had += 1
        removed.update(rows)
    skipped = []
    new_tokens: dict[str, list[list[str]]] = {}
    for path, value in touched.items():
        links.pop(path, None)
        records.pop(path, None)
        if value is None:
            gone.append(path)
            continue
        (_, digest, reason, chunks, page_links, tokens), st = value
        records[path] = {"sha256": digest, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "chunks": len(chunks),
                         "skipped": reason}
        if path in gone:
            gone.remove(path)
        if reason:
            skipped.append(Skipped(path, reason))
        if chunks:
            kept_chunks[path] = chunks
            new_tokens[path] = tokens
            if page_links is not None:
                links[path] = page_links
    paths = sorted(kept_chunks)
    chunks = [c for p in paths for c in kept_chunks[p]]
    if len(chunks) > delta_mod.limit(len(base) - len(removed)) or len(base) - len(removed) + len(chunks) == 0:
        return None  # compaction (a full build writes a new base), or nothing left: the full build says so
    words = list(old.words) if old is not None else []
    vocab = {w: i for i, w in enumerate(words)}
    id_parts, length_parts = [], []
    for path in paths:
        ids, lengths = encode(new_tokens[path], vocab) if path in new_tokens else kept_tokens[path]
        id_parts.append(np.asarray(ids, dtype=np.int64))
        length_parts.append(np.asarray(lengths, dtype=np.int64))
    ids = np.concatenate(id_parts) if id_parts else np.empty(0, np.int64)
    lengths = np.concatenate(length_parts) if length_parts else np.empty(0, np.int64)
    removed_ids = np.array(sorted(removed), dtype=np.int64)
    sources = {p: (r["size"], r["mtime_ns"]) for p, r in records.items()}
    indexed = manifest.get("indexed_files", 0) - had + sum(1 for v in touched.values() if v and v[0][3])
    new_manifest = {k: v for k, v in manifest.items() if k not in ("checksums", "manifest_sha256", "build_seconds")}
    new_manifest.update({
        "built_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "wikirag_version": __version__,
        "chunks": len(base) - len(removed_ids) + len(chunks),
        "indexed_files": indexed,
        "delta": {"base": (manifest.get("delta") or {}).get("base", build_id), "pages": len(paths),
                  "passages": len(chunks), "removed": len(removed_ids)},
    })
    new_manifest.pop("folders", None)  # (a first build of format 8 has them there)
    linked = {n: d for n, d in checksums.items() if not n.startswith(f"{delta_mod.FOLDER}/") and n != store.FOLDERS}

    def write(tmp: Path) -> None:
        delta_mod.link_base(folder, tmp, linked, trusted)
        delta_mod.write(tmp, chunks, sources, removed_ids, words_of(vocab), ids, lengths, records, gone, links)
        store.write_folders(tmp, folders)
        new_manifest["build_seconds"] = round(time.perf_counter() - started, 3)

    # older builds go first: removing a hard link changes the ctime of the file it shares with the new
    # build, which would void the new build's stamps (wikirag.checked) and have its next reader hash it all
    trusted = delta_mod.vouched(folder, linked)
    store.sweep(wiki, keep={build_id})
    try:
        new_id = store.publish(wiki, new_manifest, write, known=linked)
    except checked.Mismatch:
        return None  # a file of the serving build changed under it: the full build starts over
    return BuildReport(wiki.name, "built", indexed, new_manifest["chunks"], sum(1 for v in touched.values() if v),
                       skipped, time.perf_counter() - started, new_id, update=True)


def _chunk_file(spec: _Spec, path: str, data: bytes) -> tuple[str | None, list[Chunk], PageLinks | None]:
    """Chunk one file's bytes; return ``(reason it is skipped or None, chunks, its links)``."""
    text, reason = decode(data)
    if text is None:
        return reason, [], None
    if count_blocks(text) > MAX_BLOCKS:  # the parse's work grows with the blocks: bound it before parsing
        return (f"too many markdown blocks (more than {MAX_BLOCKS:,} headings, paragraphs, list items or other "
                "block starts): split it into smaller pages"), [], None
    page = parse_page(text)
    if spec.include_tags and not tag_matches(page.tags, list(spec.include_tags)):
        return "no matching tag (include_tags)", [], None
    chunks = chunk_markdown(text, path, spec.max_tokens, spec.min_chars, page=page)
    if not chunks:
        return f"no passage of {spec.min_chars}+ characters (empty or too short)", [], None
    return None, chunks, graph_mod.page_links(text, page)


def _read_links(path: Path) -> PageLinks:
    """The links of a page whose passages are reused but whose links the previous build did not keep."""
    text, _ = decode(path.read_bytes())
    return graph_mod.page_links(text or "", parse_page(text or ""))


def status(wiki: Wiki) -> IndexStatus:
    """Compare the serving build with the sources now: ``fresh``, ``stale``, ``missing``, ``incompatible``."""
    build_id = current_build_id(wiki)
    if build_id is None:
        return IndexStatus("missing", f"never built: run 'wikirag build {wiki.name}'",
                           dense="missing" if wiki.manifest.layers.dense else None)
    try:
        manifest = read_manifest(wiki, build_id)  # an invalid pointer, foreign build or higher level: refused
    except IndexMissing as exc:
        return IndexStatus("incompatible", str(exc), build_id if store.BUILD_ID_RE.fullmatch(build_id) else None)
    try:
        recorded: dict[str, dict] = read_files(store.build_folder(wiki, build_id), manifest)
    except (OSError, ValueError, IndexMissing) as exc:
        return IndexStatus("incompatible", str(exc) if isinstance(exc, IndexMissing) else
                           f"the index of wiki '{wiki.name}' is damaged ({exc}): rebuild it with "
                           f"'wikirag build {wiki.name}'", build_id)
    declared, built = wiki.manifest.layers.dense, manifest.get("dense")
    dense = None if declared is None else "missing" if not built else (
        "ok" if built["model"] == declared.model else "other model")
    graph = manifest.get("graph") or {}
    base = {"build_id": build_id, "built_at": manifest.get("built_at"), "chunks": manifest.get("chunks", 0),
            "files": manifest.get("indexed_files", 0), "dense": dense,
            "level_changed": store.level_change(manifest, wiki), "links": graph.get("links", 0),
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
                if old["sha256"] is None or sha256(src.abspath.read_bytes()) != old["sha256"]:
                    changed.append(f"modified {src.path}")
            except OSError:
                changed.append(f"unreadable {src.path}")
    present = {src.path for src in found.files}
    changed += [f"removed {path}" for path in recorded if path not in present]
    if changed:
        return IndexStatus("stale", f"{len(changed)} file(s) changed since the build: "
                           f"run 'wikirag build {wiki.name}'", changed=changed, **base)
    return IndexStatus("fresh", "", **base)

