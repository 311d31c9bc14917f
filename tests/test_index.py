"""Index builds: incremental, atomic, skipped files with reasons, stale detection, damage detection."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from wikirag import BuildError, IndexMissing, Workspace, build, status, store
from wikirag.retrieval import search

from .conftest import make_wiki

REPO = Path(__file__).resolve().parent.parent


def _chunks_on_disk(ws: Workspace, name: str) -> list[dict]:
    wiki = ws.wiki(name)
    folder = wiki.index_dir / "builds" / store.current_build_id(wiki)
    return [json.loads(line) for line in (folder / "chunks.jsonl").read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("home_dir", [REPO / "tests" / "fixtures" / "workspace", REPO])
def test_offsets_are_exact_for_every_chunk_of_every_file(home_dir: Path, tmp_path: Path) -> None:
    """The fixture wikis and the bundled examples: text == file[start:end] for every passage."""
    target = tmp_path / "copy"
    shutil.copytree(home_dir / "wikis", target / "wikis", ignore=shutil.ignore_patterns(".index"))
    ws = Workspace(target)
    assert ws.wiki_names()
    for name in ws.wiki_names():
        wiki = ws.wiki(name)
        build(wiki)
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
    (debris / "chunks.jsonl").write_text("{half a line")
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
    chunks = wiki.index_dir / "builds" / store.current_build_id(wiki) / "chunks.jsonl"
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
