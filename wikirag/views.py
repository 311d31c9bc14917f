"""Saved merged views: a composition's BM25 layers merged once, on disk, for every later process.

A query over several wikis scores them in one merged view (:class:`wikirag.bm25.MergedBM25`). Merging
50 wikis' layers (their vocabularies, their postings, the composition's scores and term runs) takes
longer than a new process should wait for its first answer, so the first process that merges a set of
builds saves the result in ``<workspace>/.index/views/<key>/`` and every later one maps it: arrays mapped
and checked (:mod:`wikirag.checked`), no merge. Each wiki's own BM25 files are then not read at all.

* The key is a digest of the (wiki, build id) pairs in composition order, so a view is only ever used
  for exactly the builds it was made from; a rebuild of any of its wikis makes a new key. Adding a
  wiki to a composition makes a new view on its first query: nothing is re-indexed.
* A view is derived data: ``view.json`` records its wikis, their passages and tokens, and a sha256 of
  every file; a view that does not match (damaged, half-written, made by another format) is removed
  and merged again. It is written into a temporary folder and renamed into place, so readers never
  see half of one; two processes saving the same view at once keep whichever lands first. The query
  that merged does not wait for the writing: it runs in a background thread (:func:`save_later`).
* At most :data:`MAX_VIEWS` are kept (least recently used removed); a saving that fails (read-only
  workspace, full disk) costs only the next process's merge.
* Only wikis the caller may use reach a query, and a view is read only for them; it holds nothing but
  their postings (no text), so it adds no way around clearance.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from . import checked
from .bm25 import MergedBM25

FORMAT = 1
MAX_VIEWS = 8
VIEWS_DIR = Path(".index") / "views"  # under the workspace's home
_STALE_TMP_SECONDS = 3600  # a tmp-* folder older than this is a killed process's leftover


def folder_of(home: Path) -> Path | None:
    """Where the workspace's views are, or None if something planted there makes it unsafe to use (a
    symlink: views are read and written only inside the workspace's own ``.index/``)."""
    folder = home / VIEWS_DIR
    if folder.parent.is_symlink() or folder.is_symlink():
        return None
    return folder


def key(wikis: Sequence[tuple[str, str]]) -> str:
    """The view's folder name for these (wiki, build id) pairs, in order."""
    return hashlib.sha256(json.dumps([list(w) for w in wikis]).encode("utf-8")).hexdigest()[:32]


def load(views: Path, wikis: Sequence[tuple[str, str]]) -> tuple[MergedBM25, list[int]] | None:
    """The saved view of these (wiki, build id) pairs and each wiki's passages as it recorded them (the
    caller checks them against the builds), or None if there is none (or it is damaged: then it is
    removed)."""
    folder = views / key(wikis)
    if folder.is_symlink():
        _discard(folder)
        return None
    try:
        meta = json.loads((folder / "view.json").read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        _discard(folder)
        return None
    try:
        recorded = meta.get("wikis") if isinstance(meta, dict) else None
        if (not isinstance(meta, dict) or meta.get("format") != FORMAT or not isinstance(recorded, list)
                or [w[:2] for w in recorded] != [list(w) for w in wikis] or not isinstance(meta.get("checksums"), dict)
                or set(meta["checksums"]) != set(MergedBM25.SAVED)):
            raise ValueError("not this view")
        docs = [int(w[2]) for w in recorded]
        merged = MergedBM25.load(checked.reader(folder, meta["checksums"]), docs, meta["tokens"])
    except (OSError, ValueError, KeyError, TypeError):
        _discard(folder)
        return None
    with contextlib.suppress(OSError):
        os.utime(folder)  # recently used: kept by the sweep
    return merged, docs


def discard(views: Path, wikis: Sequence[tuple[str, str]]) -> None:
    """Remove the saved view of these (wiki, build id) pairs (it does not fit the builds: made so)."""
    _discard(views / key(wikis))


def save(views: Path, wikis: Sequence[tuple[str, str, int]], merged: MergedBM25) -> bool:
    """Save ``merged``, the view of these (wiki, build id, passages); False if it could not be written."""
    final = views / key([w[:2] for w in wikis])
    tmp = views / f"tmp-{secrets.token_hex(6)}"
    try:
        views.mkdir(parents=True, exist_ok=True)
        merged.save(tmp)
        checksums = {name: checked.sha256((tmp / name).read_bytes()) for name in MergedBM25.SAVED}
        meta = {"format": FORMAT, "wikis": [list(w) for w in wikis], "tokens": merged.wiki_tokens.tolist(),
                "checksums": checksums}
        (tmp / "view.json").write_text(json.dumps(meta), encoding="utf-8")
        checked.stamp_all(tmp, checksums)  # just hashed: the processes that map it do not hash it again
        try:
            os.rename(tmp, final)
        except OSError:  # another process saved it first (or a damaged one is in the way: next load removes it)
            shutil.rmtree(tmp, ignore_errors=True)
        _sweep(views)
        return True
    except (OSError, ValueError):
        shutil.rmtree(tmp, ignore_errors=True)
        return False


_pending: list[threading.Thread] = []
_pending_lock = threading.Lock()


def save_later(views: Path, wikis: Sequence[tuple[str, str, int]], merged: MergedBM25) -> None:
    """:func:`save` in a background thread, so the query that merged does not wait for the writing (the
    process waits for it at exit; :func:`flush` waits now). ``merged``'s arrays are read-only."""
    thread = threading.Thread(target=save, args=(views, list(wikis), merged), name="wikirag-save-view")
    with _pending_lock:
        _pending[:] = [t for t in _pending if t.is_alive()]
        _pending.append(thread)
    thread.start()


def flush() -> None:
    """Wait for the views being saved in the background."""
    with _pending_lock:
        pending = list(_pending)
    for thread in pending:
        thread.join()


def _discard(folder: Path) -> None:
    if folder.is_symlink():
        with contextlib.suppress(OSError):
            folder.unlink()
    else:
        shutil.rmtree(folder, ignore_errors=True)


def _sweep(views: Path) -> None:
    """Keep the :data:`MAX_VIEWS` most recently used views; remove killed processes' leftovers."""
    now = time.time()
    kept = []
    for entry in os.scandir(views):
        try:
            mtime = entry.stat(follow_symlinks=False).st_mtime
        except OSError:
            continue
        if entry.name.startswith("tmp-"):
            if now - mtime > _STALE_TMP_SECONDS:
                shutil.rmtree(entry.path, ignore_errors=True)
        elif entry.is_dir(follow_symlinks=False):
            kept.append((mtime, entry.path))
    for _, path in sorted(kept, reverse=True)[MAX_VIEWS:]:
        shutil.rmtree(path, ignore_errors=True)
