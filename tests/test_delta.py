"""Updates (issue 35, item 1): pages known to have changed become a delta beside the last full build
(:mod:`wikirag.delta`) — written in work that grows with the change — and search as a full build of the
same pages does; they are carried forward, compacted by a full build, declined where they cannot apply,
and checked like every build."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from wikirag import Workspace, build, store
from wikirag import delta as delta_mod
from wikirag.bm25 import MergedBM25
from wikirag.errors import IndexMissing
from wikirag.index import status
from wikirag.retrieval import search
from wikirag.sources import folders_changed

from .conftest import make_wiki

TOPICS = ["apples", "pears", "plums", "cherries", "quinces", "medlars", "figs", "grapes", "olives", "walnuts"]


def _pages() -> dict[str, str]:
    pages = {}
    for i, topic in enumerate(TOPICS):
        for j in range(3):
            folder = "orchard" if i % 2 else "garden"
            pages[f"{folder}/{topic}-{j}.md"] = (
                f"# {topic.title()} {j}\n\nGrowing {topic} in row {j}: water them weekly and mulch in autumn.\n\n"
                f"## Harvest\n\nPick the {topic} of row {j} when ripe; store them cool and dry, away from frost.\n")
    return pages


@pytest.fixture
def orchard(home: Path) -> Workspace:
    make_wiki(home, "orchard", _pages())
    (home / "rags" / "orchard.yaml").write_text("sensitivity: public\nwikis: [orchard]\n")
    ws = Workspace(home, recheck_seconds=0)
    assert not build(ws.wiki("orchard")).update
    return ws


def _source(ws: Workspace) -> Path:
    return ws.home / "wikis" / "orchard"


def _edit(ws: Workspace) -> list[str]:
    """An edit, an addition and a removal; the paths, as the watcher gives them."""
    src = _source(ws)
    (src / "garden/apples-0.md").write_text("# Apples 0\n\nApples of row 0 are grafted onto dwarfing rootstock "
                                            "zqxgraft, and thinned in June.\n")
    (src / "orchard/loquats-0.md").write_text("# Loquats\n\nLoquats flower in winter zqxloquat; see "
                                              "[[pears-1]] for the wall they share.\n")
    (src / "orchard/pears-0.md").unlink()
    return ["garden/apples-0.md", "orchard/loquats-0.md", "orchard/pears-0.md"]


def _fresh(ws: Workspace, tmp_path: Path) -> tuple[Workspace, store.LoadedIndex]:
    """A full build of the same sources in another workspace (mtimes kept by the copy)."""
    target = tmp_path / "fresh"
    shutil.copytree(ws.home, target, ignore=shutil.ignore_patterns(".index"))
    other = Workspace(target, recheck_seconds=0)
    build(other.wiki("orchard"))
    return other, store.load(other.wiki("orchard"))


def _scores(idx: store.LoadedIndex, term: str) -> dict[tuple[str, int], float]:
    """Each passage's BM25 score for ``term`` (keyed by path and start: passage order differs)."""
    bm25 = idx.bm25
    if term not in bm25.vocab:
        return {}
    scores = MergedBM25([bm25]).scores([bm25.vocab[term]])
    return {(idx.chunks[i].path, idx.chunks[i].start): float(scores[i]) for i in np.flatnonzero(scores)}


def test_an_update_writes_only_the_change_and_searches_as_a_full_build(orchard: Workspace, tmp_path: Path) -> None:
    wiki = orchard.wiki("orchard")
    before = store.load(wiki)
    report = build(wiki, changed=_edit(orchard))
    assert report.update and report.state == "built" and report.rechunked == 2
    idx = store.load(wiki)
    info = idx.manifest["delta"]
    assert info == {"base": before.build_id, "pages": 2, "passages": len(idx.delta.table), "removed": 4}
    # the base's files are hard links of the previous build's, not copies; only the delta is new
    for name in ("bm25/data.csc.index.npy", "passages/text.bin", "files.json"):
        assert os.stat(idx.folder / name).st_ino == os.stat(before.folder / name).st_ino, name
    assert sorted({c.path for c in idx.delta.table}) == ["garden/apples-0.md", "orchard/loquats-0.md"]
    # the same index as a full build of the same pages: passages, file records, scores of every term
    _, fresh = _fresh(orchard, tmp_path)
    assert sorted((c.path, c.start, c.end, c.heading, c.text) for c in idx.chunks) == sorted(
        (c.path, c.start, c.end, c.heading, c.text) for c in fresh.chunks)
    assert store.read_files(idx.folder, idx.manifest) == store.read_files(fresh.folder, fresh.manifest)
    assert idx.manifest["chunks"] == fresh.manifest["chunks"] and idx.manifest["indexed_files"] == fresh.manifest["indexed_files"]
    # the folders' listings as a walk finds them, and their mtimes now: the query path's freshness check is quiet
    assert {k: v[1] for k, v in idx.folders.items()} == {k: v[1] for k, v in fresh.folders.items()}
    assert folders_changed(wiki, idx.folders) == []
    terms = set(fresh.bm25.vocab)
    assert terms <= set(idx.bm25.vocab)
    for term in terms:
        got, want = _scores(idx, term), _scores(fresh, term)
        assert got.keys() == want.keys(), term
        assert np.allclose([got[k] for k in want], list(want.values()), rtol=1e-6, atol=0), term
    # searched as such: the new words found, the removed page never
    hits = search(orchard, "orchard", "zqxgraft dwarfing rootstock", clearance="public", audit_event=None)
    assert hits.passages[0].path == "garden/apples-0.md" and not hits.warnings
    hits = search(orchard, "orchard", "pears row 0", clearance="public", k=50, audit_event=None)
    assert "orchard/pears-0.md" not in {p.path for p in hits.passages}
    assert status(wiki).state == "fresh"
    assert status(wiki).chunks == fresh.manifest["chunks"]


def test_updates_carry_the_delta_forward_and_a_full_build_compacts_it(orchard: Workspace, tmp_path: Path) -> None:
    wiki = orchard.wiki("orchard")
    build(wiki, changed=_edit(orchard))
    first = store.load(wiki)
    (_source(orchard) / "orchard/figs-2.md").write_text("# Figs 2\n\nFigs of row 2 ripen in a hot zqxfig summer.\n")
    report = build(wiki, changed=["orchard/figs-2.md"])
    assert report.update and report.rechunked == 1
    second = store.load(wiki)
    assert second.manifest["delta"]["base"] == first.manifest["delta"]["base"]  # on the same full build
    assert sorted({c.path for c in second.delta.table}) == ["garden/apples-0.md", "orchard/figs-2.md",
                                                            "orchard/loquats-0.md"]
    for word, path in (("zqxgraft", "garden/apples-0.md"), ("zqxfig", "orchard/figs-2.md"),
                       ("zqxloquat", "orchard/loquats-0.md")):
        assert search(orchard, "orchard", word, clearance="public", audit_event=None).passages[0].path == path
    # the same pages told again: nothing changed, nothing written
    again = build(wiki, changed=["orchard/figs-2.md", "orchard/never-there.md"])
    assert again.state == "up to date" and again.build_id == second.build_id
    # a build not told what changed writes a new base, without a delta, of the same passages
    compacted = build(wiki)
    assert compacted.state == "built" and not compacted.update
    full = store.load(wiki)
    assert full.delta is None and "delta" not in full.manifest and not (full.folder / delta_mod.FOLDER).exists()
    assert sorted((c.path, c.start, c.text) for c in full.chunks) == sorted((c.path, c.start, c.text) for c in second.chunks)
    assert build(wiki).state == "up to date"
    _, fresh = _fresh(orchard, tmp_path)
    for term in ("zqxfig", "row", "apples"):
        assert _scores(full, term) == pytest.approx(_scores(fresh, term), rel=1e-6)


@pytest.mark.parametrize("case", ["new folder", "meta file", "past the limit", "folder removed"])
def test_an_update_that_cannot_apply_is_a_full_build(orchard: Workspace, monkeypatch: pytest.MonkeyPatch,
                                                     case: str) -> None:
    wiki = orchard.wiki("orchard")
    src = _source(orchard)
    if case == "new folder":  # a folder the base did not walk: its listing goes into the manifest
        (src / "shed").mkdir()
        (src / "shed/tools.md").write_text("# Tools\n\nSharpen the zqxtool secateurs every spring.\n")
        changed = ["shed/tools.md"]
    elif case == "meta file":  # the graph's known pages change
        (src / "_meta.md").write_text("# Meta\n\nzqxtool\n")
        changed = ["_meta.md"]
    elif case == "past the limit":
        monkeypatch.setattr(delta_mod, "MIN_PASSAGES", 0)
        monkeypatch.setattr(delta_mod, "MAX_SHARE", 0.0)
        (src / "garden/apples-0.md").write_text("# Apples\n\nzqxtool apples, and more apples.\n")
        changed = ["garden/apples-0.md"]
    else:  # one event for the folder, none for its pages
        shutil.rmtree(src / "orchard")
        changed = ["orchard"]
    report = build(wiki, changed=changed)
    assert not report.update and report.state == ("up to date" if case == "meta file" else "built")
    idx = store.load(wiki)
    assert idx.delta is None
    if case == "folder removed":
        assert not any(c.path.startswith("orchard/") for c in idx.chunks)
    elif case != "meta file":
        assert search(orchard, "orchard", "zqxtool", clearance="public", audit_event=None).passages


def test_a_dense_wiki_is_built_in_full(orchard: Workspace) -> None:
    """Its vectors (and a Qdrant collection per build) are not patched: an update declines, writing nothing."""
    from wikirag import index as index_mod

    src = _source(orchard)
    (src / ".wiki.yaml").write_text((src / ".wiki.yaml").read_text() + "layers:\n  dense: {}\n")
    (src / "garden/apples-0.md").write_text("# Apples\n\nzqxtool apples.\n")
    wiki = Workspace(orchard.home).wiki("orchard")
    assert wiki.manifest.layers.dense is not None
    build_id = store.current_build_id(wiki)
    with store.build_lock(wiki):
        assert index_mod._update(wiki, ["garden/apples-0.md"], 0.0) is None
    assert store.current_build_id(wiki) == build_id


def test_a_damaged_delta_is_refused_and_the_next_build_replaces_it(orchard: Workspace) -> None:
    wiki = orchard.wiki("orchard")
    build(wiki, changed=_edit(orchard))
    folder = store.load(wiki).folder
    text = folder / "delta/passages/text.bin"
    data = bytearray(text.read_bytes())
    data[3] ^= 0x20
    text.write_bytes(bytes(data))
    with pytest.raises(IndexMissing, match="damaged.*delta/passages/text.bin.*rebuild"):
        store.load(wiki)
    assert status(wiki).state == "fresh"  # (what status checks: the records; the load refuses the text)
    report = build(wiki, changed=["garden/apples-0.md"])  # the serving build is not trusted: built in full
    assert not report.update and store.load(wiki).delta is None


def test_the_links_of_an_update_are_resolved_against_the_pages_now(orchard: Workspace) -> None:
    wiki = orchard.wiki("orchard")
    build(wiki, changed=_edit(orchard))
    graph = store.load(wiki).graph
    links = graph.pages["orchard/loquats-0.md"].links
    assert [(x.to, x.wiki) for x in links] == [("orchard/pears-1.md", None)]
    assert "orchard/pears-0.md" not in graph.pages and "orchard/pears-0.md" not in graph.page_id


def test_build_changed_on_the_command_line(orchard: Workspace) -> None:
    from wikirag.cli import cli

    changed = _edit(orchard)
    result = CliRunner().invoke(cli, ["--home", str(orchard.home), "build", "orchard",
                                      *[f"--changed={p}" for p in changed]], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "orchard: updated (2 file(s) chunked, the rest kept)" in result.stdout
    assert store.load(orchard.wiki("orchard")).delta is not None
    bad = CliRunner().invoke(cli, ["--home", str(orchard.home), "build", "--all", "--changed=x.md"])
    assert bad.exit_code == 2 and "--changed updates one wiki" in bad.output
    # an absolute path inside the source folder is taken; one outside it, or "..", is refused
    src = _source(orchard)
    (src / "garden/figs-0.md").write_text("# Figs\n\nFigs zqxabsolute.\n")
    ok = CliRunner().invoke(cli, ["--home", str(orchard.home), "build", "orchard", f"--changed={src}/garden/figs-0.md"])
    assert ok.exit_code == 0 and "updated (1 file(s) chunked" in ok.stdout, ok.output
    for wrong in ("/etc/passwd", "../other.md"):
        bad = CliRunner().invoke(cli, ["--home", str(orchard.home), "build", "orchard", f"--changed={wrong}"])
        assert bad.exit_code == 2 and "source folder" in bad.output, bad.output


def test_updates_keep_the_stamps_so_nothing_is_hashed_again(orchard: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    """The base's files are shared by hard links: linking and removing older builds changes their ctime,
    which voids a stamp (wikirag.checked); an update stamps the new build's links after both, so neither it
    nor the next load hashes the base again (at a million passages that is a gigabyte)."""
    from wikirag import checked

    wiki = orchard.wiki("orchard")
    src = _source(orchard)
    hashed: list[str] = []
    real = checked.digest
    monkeypatch.setattr(checked, "digest", lambda fh: hashed.append(Path(fh.name).name) or real(fh))
    for n in range(3):  # the third update removes the first one's build: a link to every base file goes
        (src / f"garden/plums-{n % 3}.md").write_text(f"# Plums\n\nPlums zqxplum{n} on the south wall.\n")
        assert build(wiki, changed=[f"garden/plums-{n % 3}.md"]).update
        store.load(wiki, with_bm25=True).bm25  # noqa: B018 - loaded and checked
    assert hashed == []
    assert len(list((wiki.index_dir / "builds").iterdir())) == 2  # the serving build and the one before
