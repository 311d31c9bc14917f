"""Index builds: incremental, atomic, skipped files with reasons, stale detection, damage detection."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

from wikirag import BuildError, IndexMissing, Workspace, build, chunkfile, status, store
from wikirag.bm25 import MergedBM25
from wikirag.retrieval import search

from .conftest import copy_built_examples, make_wiki

REPO = Path(__file__).resolve().parent.parent


def _chunks_on_disk(ws: Workspace, name: str) -> list[dict]:
    wiki = ws.wiki(name)
    folder = wiki.index_dir / "builds" / store.current_build_id(wiki)
    return [asdict(c) for c in chunkfile.read(folder)]


@pytest.mark.parametrize("home_dir", [REPO / "tests" / "fixtures" / "workspace", REPO])
def test_offsets_are_exact_for_every_chunk_of_every_file(home_dir: Path, tmp_path: Path,
                                                          request: pytest.FixtureRequest) -> None:
    """The fixture wikis and the bundled examples: text == file[start:end] for every passage."""
    target = tmp_path / "copy"
    if home_dir == REPO:  # the session's build of the same copy of the examples (conftest.built_examples)
        copy_built_examples(request.getfixturevalue("built_examples"), target)
    else:
        shutil.copytree(home_dir / "wikis", target / "wikis", ignore=shutil.ignore_patterns(".index"))
    ws = Workspace(target)
    assert ws.wiki_names()
    for name in ws.wiki_names():
        wiki = ws.wiki(name)
        report = build(wiki)
        assert home_dir != REPO or report.state == "up to date"  # the copy's index: the session's build of it
        root = wiki.source_spec().root
        chunks = _chunks_on_disk(ws, name)
        assert chunks
        for c in chunks:
            file_text = (root / c["path"]).read_bytes().decode("utf-8")
            assert file_text[c["start"]:c["end"]] == c["text"]


def test_meta_files_are_skipped_and_reported(ws: Workspace) -> None:
    report = build(ws.wiki("alpha"))
    assert report.state == "built" and report.files == 2
    assert {(s.path, s.reason) for s in report.skipped} == {("index.md", "meta file"), ("_meta.md", "meta file")}
    assert {c["path"] for c in _chunks_on_disk(ws, "alpha")} == {"tomatoes.md", "compost.md"}


def test_incremental_rebuild(ws: Workspace, home: Path) -> None:
    wiki = ws.wiki("alpha")
    first = build(wiki)
    again = build(wiki)
    assert again.state == "up to date" and again.build_id == first.build_id and again.rechunked == 0
    assert len(list((wiki.index_dir / "builds").iterdir())) == 1
    os.utime(home / "wikis/alpha/compost.md")  # touched, same content: still nothing to do
    assert build(wiki).state == "up to date"

    page = home / "wikis/alpha/compost.md"
    page.write_text(page.read_text() + "\n## Worms\n\nRed wiggler worms eat half their weight a day.\n")
    third = build(wiki)
    assert third.state == "built" and third.rechunked == 1 and third.build_id != first.build_id
    result = search(ws, "open", "wiggler worms", clearance="public")
    assert result.passages[0].heading == "Compost > Worms"


def test_a_failed_build_leaves_the_old_index_serving(ws: Workspace, home: Path, monkeypatch) -> None:
    wiki = ws.wiki("alpha")
    build(wiki)
    before = search(ws, "open", "tomatoes", clearance="public").passages
    (home / "wikis/alpha/new.md").write_text("# New page\n\nA brand new page about tomatoes and peppers.\n")

    def disk_full(src, dst):  # the rename into builds/ fails like a full or read-only disk
        raise OSError(28, "No space left on device", str(dst))

    monkeypatch.setattr(store.os, "rename", disk_full)
    with pytest.raises(BuildError, match="previous index still serves"):
        build(wiki)
    monkeypatch.undo()
    assert not list(wiki.index_dir.glob("tmp-*"))
    assert [p.text for p in search(ws, "open", "tomatoes", clearance="public").passages] == [p.text for p in before]
    assert build(wiki).state == "built"


def test_a_killed_build_leaves_debris_that_the_next_build_sweeps(ws: Workspace) -> None:
    wiki = ws.wiki("alpha")
    build(wiki)
    debris = wiki.index_dir / "tmp-20260101T000000-dead00"
    (debris / "bm25").mkdir(parents=True)
    (debris / "files.json").write_text("{half a line")
    (wiki.index_dir / "CURRENT.20260101T000000-dead00").write_text("x")
    assert search(ws, "open", "compost", clearance="public").passages
    build(wiki, force=True)
    assert not debris.exists()
    assert sorted(p.name for p in wiki.index_dir.iterdir()) == ["CURRENT", "builds", "lock"]


def test_stale_index_is_reported(ws: Workspace, home: Path) -> None:
    wiki = ws.wiki("alpha")
    assert status(wiki).state == "missing"
    build(wiki)
    assert status(wiki).state == "fresh"
    (home / "wikis/alpha/tomatoes.md").write_text("# Tomatoes\n\nNow about something else entirely, long.\n")
    (home / "wikis/alpha/peppers.md").write_text("# Peppers\n\nPeppers like it even warmer than tomatoes.\n")
    (home / "wikis/alpha/compost.md").unlink()
    state = status(wiki)
    assert state.state == "stale"
    assert sorted(state.changed) == ["added peppers.md", "modified tomatoes.md", "removed compost.md"]
    result = search(ws, "open", "peppers", clearance="public")
    assert any("stale" in w for w in result.warnings)
    build(wiki)
    assert status(wiki).state == "fresh"


def test_bad_files_are_skipped_with_reasons(home: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("# Secret\n\nThis lives outside the wiki and must not be indexed.\n")
    folder = make_wiki(home, "bad", {
        "good.md": "# Good\n\nA perfectly ordinary page that should be indexed.\n",
        "latin1.md": "# Caf\xe9\n\nThis page was saved as Latin-1 by an old editor.\n".encode("latin-1"),
        "binary.md": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
        "empty.md": b"",
    })
    (folder / "escape.md").symlink_to(outside / "secret.md")
    (folder / "linked-dir").symlink_to(outside, target_is_directory=True)
    (folder / "inside.md").symlink_to(folder / "good.md")
    report = build(Workspace(home).wiki("bad"))
    reasons = {s.path: s.reason for s in report.skipped}
    assert reasons["latin1.md"].startswith("not UTF-8")
    assert reasons["binary.md"].startswith("binary")
    assert reasons["escape.md"].startswith("symlink leads outside")
    assert reasons["linked-dir"].startswith("symlinked folder")
    assert "empty" in reasons["empty.md"]
    assert report.files == 2  # good.md and the symlink that stays inside


def test_empty_wiki_is_a_clear_error_and_keeps_the_old_index(ws: Workspace, home: Path) -> None:
    make_wiki(home, "hollow", {"tiny.md": "# Hi\n"})
    with pytest.raises(BuildError, match="nothing to index"):
        build(ws.wiki("hollow"))
    build(ws.wiki("alpha"))
    for page in (home / "wikis/alpha").glob("*.md"):
        page.unlink()
    with pytest.raises(BuildError, match="nothing to index"):
        build(ws.wiki("alpha"))
    assert status(ws.wiki("alpha")).state == "stale"
    assert store.load(ws.wiki("alpha")).chunks


def test_source_elsewhere_with_glob_tags_and_exclude_is_only_read(home: Path, tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    (vault / "notes").mkdir(parents=True)
    (vault / "drafts").mkdir()
    (vault / "notes/a.md").write_text("---\ntags: [wiki/Topic]\n---\n# A\n\nPage A is tagged for the wiki in its frontmatter.\n")
    (vault / "notes/b.md").write_text("# B\n\nPage B has an inline tag #wiki/Topic/Sub in its text.\n")
    (vault / "notes/c.md").write_text("# C\n\nPage C has no tag and must be left out of the wiki.\n")
    (vault / "drafts/d.md").write_text("# D\n\nA draft page tagged #wiki/Topic but excluded by glob.\n")
    (vault / "notes/e.txt").write_text("not markdown at all, never looked at by the indexer")
    before = sorted((p.relative_to(vault), p.stat().st_mtime_ns) for p in vault.rglob("*"))
    make_wiki(home, "vault", {}, extra=f"source: {vault}/**/*.md\ninclude_tags: ['#wiki/Topic']\nexclude: ['drafts/*']\n")
    report = build(Workspace(home).wiki("vault"))
    assert report.files == 2
    assert {s.path: s.reason for s in report.skipped} == {"notes/c.md": "no matching tag (include_tags)"}
    assert sorted((p.relative_to(vault), p.stat().st_mtime_ns) for p in vault.rglob("*")) == before
    assert (home / "wikis/vault/.index/CURRENT").is_file()


def test_damaged_index_is_refused_with_the_fix(ws: Workspace) -> None:
    wiki = ws.wiki("alpha")
    build(wiki)
    chunks = wiki.index_dir / "builds" / store.current_build_id(wiki) / "passages" / "text.bin"
    data = bytearray(chunks.read_bytes())
    data[10] ^= 0xFF
    chunks.write_bytes(bytes(data))
    with pytest.raises(IndexMissing, match="damaged.*wikirag build alpha"):
        store.load(wiki)
    build(wiki)  # the next build does not trust the damaged one: it rebuilds and recovers
    assert store.load(wiki).chunks


def test_missing_index_names_the_command(ws: Workspace) -> None:
    with pytest.raises(IndexMissing, match="wikirag build alpha"):
        store.load(ws.wiki("alpha"))


def test_an_incremental_build_tokenises_only_what_changed_and_equals_a_fresh_build(
        ws: Workspace, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Token ids of unchanged files are reused from the previous build; the index that results is the one
    a fresh build makes (same passages, same BM25 scores for every query term)."""
    from wikirag import index as index_mod

    wiki = ws.wiki("alpha")
    build(wiki)
    (home / "wikis/alpha/tomatoes.md").write_text("# Tomatoes\n\nTomatoes now grow under glass with basil.\n")
    (home / "wikis/alpha/basil.md").write_text("# Basil\n\nBasil likes the warm glasshouse, next to tomatoes.\n")
    (home / "wikis/alpha/compost.md").unlink()
    tokenised: list[str] = []
    real = index_mod.tokenize
    monkeypatch.setattr(index_mod, "tokenize", lambda texts: tokenised.extend(texts) or real(texts))
    assert build(wiki).state == "built"
    assert tokenised and all("Tomatoes now grow" in t or "Basil likes" in t for t in tokenised)
    incremental = store.load(wiki)
    build(wiki, force=True)
    fresh = store.load(wiki)
    assert [asdict(c) for c in incremental.chunks] == [asdict(c) for c in fresh.chunks]
    assert set(incremental.bm25.vocab) == set(fresh.bm25.vocab)
    for term in fresh.bm25.vocab:
        a = MergedBM25([incremental.bm25]).scores([incremental.bm25.vocab[term]])
        b = MergedBM25([fresh.bm25]).scores([fresh.bm25.vocab[term]])
        assert np.array_equal(a, b), term


def test_freshness_on_the_query_path_needs_no_walk_and_ignores_what_a_build_ignores(
        ws: Workspace, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A markdown file added (or removed) makes the wiki stale at once; an editor's swap file or a picture
    next to the pages does not; a page edited in place is found through the passages it returns (a stat
    of each of their files on every query)."""
    from wikirag.cache import IndexCache

    wiki = ws.wiki("alpha")
    build(wiki)
    cache = IndexCache()
    assert cache.get(wiki)[1] == []
    (home / "wikis/alpha/.tomatoes.md.swp").write_bytes(b"\x00swap")
    (home / "wikis/alpha/photo.png").write_bytes(b"\x89PNG")
    assert IndexCache().get(wiki)[1] == []
    (home / "wikis/alpha/new.md").write_text("# New\n\nA new page about asparagus.\n")
    warnings = IndexCache().get(wiki)[1]
    assert len(warnings) == 1 and "stale" in warnings[0] and "wikirag build alpha" in warnings[0]
    (home / "wikis/alpha/new.md").unlink()
    assert IndexCache().get(wiki)[1] == []
    loaded = store.load(wiki)
    assert index_mod_files_changed(wiki, loaded) == []
    result = search(ws, "open", "tomatoes", clearance="public")
    assert result.passages and not result.warnings
    (home / "wikis/alpha/tomatoes.md").write_text("# Tomatoes\n\nEdited in place.\n")
    assert index_mod_files_changed(wiki, loaded) == ["tomatoes.md"]  # seen at once
    warnings = search(ws, "open", "tomatoes", clearance="public").warnings
    assert any("tomatoes.md changed since the build" in w for w in warnings), warnings


def index_mod_files_changed(wiki, loaded) -> list[str]:
    from wikirag.sources import files_changed

    stats = loaded.chunks.source_stats(range(len(loaded.chunks)))
    return files_changed(wiki, stats, stats)


def test_bad_pages_among_many_are_skipped_listed_by_build_and_check_and_the_rest_is_built(tmp_path: Path,
                                                                                         monkeypatch) -> None:
    """One bad record never stops the work: of 300 pages, one not UTF-8, one binary and one unreadable are
    skipped with their reasons (build, its --json, and check, which lists at most SKIPPED_SHOWN per wiki);
    the other 297 are searchable."""
    from click.testing import CliRunner

    from wikirag import checks
    from wikirag.cli import cli

    pages: dict[str, bytes | str] = {f"p{i:03d}.md": f"# Page {i}\n\nNotes on bed {i}: compost and mulch, watered weekly.\n"
                                     for i in range(297)}
    pages["latin1.md"] = "# Caf\xe9\n\nNot UTF-8 at all.\n".encode("latin-1")
    pages["binary.md"] = b"# Bin\n\x00\x01\x02"
    pages["locked.md"] = "# Locked\n\nNobody may read this file.\n"
    make_wiki(tmp_path, "many", pages)
    (tmp_path / "rags").mkdir()
    (tmp_path / "rags/many.yaml").write_text("sensitivity: public\nwikis: [many]\n")
    (tmp_path / "wikis/many/locked.md").chmod(0)
    if os.access(tmp_path / "wikis/many/locked.md", os.R_OK):  # root reads it anyway: make it a dangling link
        (tmp_path / "wikis/many/locked.md").unlink()
        (tmp_path / "wikis/many/locked.md").symlink_to(tmp_path / "wikis/many/gone.md")
    run = CliRunner().invoke
    built = run(cli, ["--home", str(tmp_path), "build", "many", "--json"])
    assert built.exit_code == 0, built.output
    report = json.loads(built.stdout)["built"][0]
    assert report["files"] == 297
    reasons = {s["path"]: s["reason"] for s in report["skipped"]}
    assert reasons["latin1.md"] == "not UTF-8 (byte 5): convert it to UTF-8"
    assert reasons["binary.md"] == "binary file (contains NUL bytes)"
    assert "locked.md" in reasons
    ws = Workspace(tmp_path)
    assert search(ws, "many", "bed 123 compost", clearance="public").passages[0].path == "p123.md"
    checked = run(cli, ["--home", str(tmp_path), "check"])
    assert checked.exit_code == 0  # notes, not problems
    assert "wiki 'many': latin1.md is skipped: not UTF-8 (byte 5): convert it to UTF-8" \
        in checked.stderr
    assert "wiki 'many': binary.md is skipped: binary file" in checked.stderr
    assert "wiki 'many': locked.md is skipped: cannot read" in checked.stderr
    monkeypatch.setattr(checks, "SKIPPED_SHOWN", 1)
    notes = checks.run(ws).notes
    assert "wiki 'many': binary.md is skipped: binary file (contains NUL bytes)" in notes
    assert "wiki 'many': 2 more page(s) skipped: 'wikirag build many --json' lists every one" in notes


def test_a_build_in_worker_processes_makes_the_same_index(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """From index.PARALLEL_FILES changed files a build chunks and tokenises in a process per core: the
    passages, the BM25 arrays and the records are those of a build in this process, fresh or incremental,
    and a page that cannot be read is still skipped with its reason."""
    from wikirag import index as index_mod

    pages = {f"topic-{i:02d}.md": f"# Topic {i}\n\n" + f"Paragraph about item {i} and its care, watering and pruning. " * (i % 5 + 1)
             for i in range(40)}
    pages["bad.md"] = b"\xff\xfe not utf-8 \xff"
    make_wiki(home, "serial", pages)
    make_wiki(home, "pooled", pages)
    ws = Workspace(home)

    def index_of(name: str) -> tuple:
        loaded = store.load(ws.wiki(name), with_bm25=True)
        layer = loaded.bm25
        return (list(loaded.chunks), layer.vocab, layer.data.tolist(), layer.indices.tolist(), layer.indptr.tolist(),
                {p: (r["sha256"], r["chunks"], r["skipped"]) for p, r in store.read_files(loaded.folder).items()})

    monkeypatch.setattr(index_mod, "PARALLEL_FILES", 10**9)
    serial = build(ws.wiki("serial"))
    monkeypatch.setattr(index_mod, "PARALLEL_FILES", 2)
    pooled = build(ws.wiki("pooled"))
    assert (pooled.chunks, pooled.rechunked) == (serial.chunks, serial.rechunked) == (serial.chunks, 41)
    assert [s.path for s in pooled.skipped] == [s.path for s in serial.skipped] == ["bad.md"]
    assert index_of("pooled") == index_of("serial")
    for name in ("serial", "pooled"):  # an incremental build: two pages changed, one added
        folder = home / "wikis" / name
        (folder / "topic-03.md").write_text("# Topic 3\n\nNow about compost heaps and their turning schedule.\n")
        (folder / "topic-07.md").write_text("# Topic 7\n\nNow about greenhouse vents opening at noon every day.\n")
        (folder / "new.md").write_text("# New\n\nA new page about rainwater barrels under the gutter.\n")
    monkeypatch.setattr(index_mod, "PARALLEL_FILES", 10**9)
    assert build(ws.wiki("serial")).rechunked == 3
    monkeypatch.setattr(index_mod, "PARALLEL_FILES", 2)
    assert build(ws.wiki("pooled")).rechunked == 3
    assert index_of("pooled") == index_of("serial")
    hits = search(ws, ws.adhoc(["pooled"], "public"), "rainwater barrels", clearance="public", audit_event=None)
    assert hits.passages[0].path == "new.md"
