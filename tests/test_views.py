"""Saved merged views (wikirag/views.py): read by a new process instead of merging, used only for the exact
builds they were made from, and discarded (never served) when damaged."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from wikirag import Workspace, build, views
from wikirag.bm25 import MergedBM25
from wikirag.cache import IndexCache
from wikirag.retrieval import search

from .conftest import make_wiki

QUESTIONS = ["compost turning", "deploy keys rotation", "garden tomatoes water", "zzqx nothing"]


@pytest.fixture
def team(home: Path) -> Workspace:
    make_wiki(home, "orchard", {"apples.md": "# Apples\n\nPrune apple trees in late winter; compost the cuttings.\n",
                                "pears.md": "# Pears\n\nPears ripen off the tree: pick them hard and green.\n"})
    make_wiki(home, "kitchen", {"soup.md": "# Soup\n\nTomato soup: roast the tomatoes, then water and salt.\n"})
    (home / "rags" / "three.yaml").write_text("sensitivity: public\nwikis: [alpha, orchard, kitchen]\n")
    (home / "rags" / "two.yaml").write_text("sensitivity: public\nwikis: [orchard, kitchen]\n")
    ws = Workspace(home, recheck_seconds=0)
    for name in ("alpha", "orchard", "kitchen"):
        build(ws.wiki(name))
    return ws


def _answers(ws: Workspace, comp: str, cache: IndexCache) -> list:
    out = []
    for q in QUESTIONS:
        for fusion in ("routed", "dfs-prior", "dfs", "rrf"):
            result = search(ws, comp, q, clearance="public", k=8, fusion=fusion, cache=cache, audit_event=None)
            out.append([(p.wiki, p.path, p.start, p.end, p.score, p.contributions) for p in result.passages])
    return out


def _saved(ws: Workspace) -> list[Path]:
    views.flush()  # saved in the background by the query that merged
    folder = ws.home / views.VIEWS_DIR
    return sorted(p for p in folder.iterdir() if not p.name.startswith("tmp-")) if folder.is_dir() else []


def test_a_new_process_reads_the_saved_view_instead_of_merging(team: Workspace) -> None:
    first = IndexCache()
    merged_answers = _answers(team, "three", first)
    assert len(_saved(team)) == 1  # saved by the first query
    later = IndexCache()  # a new process: nothing loaded
    assert _answers(team, "three", later) == merged_answers
    loaded = [entry[3] for entry in later._entries.values()]
    assert len(loaded) == 3 and all("bm25" not in idx.__dict__ for idx in loaded)  # no wiki's own layer read
    # and the view read from disk holds exactly the arrays a merge makes
    mine = next(iter(later._views.values()))[0].bm25
    fresh = MergedBM25([idx.bm25 for idx in loaded])
    assert mine.vocab == fresh.vocab
    for name in ("indptr", "indices", "data", "doc_len", "offsets", "wiki_tokens"):
        assert np.array_equal(getattr(mine, name), getattr(fresh, name)), name
    assert np.array_equal(mine.global_data(), fresh.global_data())
    for a, b in zip(mine.term_runs(), fresh.term_runs()):
        assert np.array_equal(a, b)


def test_a_view_serves_only_the_builds_it_was_made_from(team: Workspace) -> None:
    _answers(team, "three", IndexCache())
    before = _saved(team)
    (team.home / "wikis" / "kitchen" / "soup.md").write_text("# Soup\n\nLeek soup: sweat the leeks in butter.\n")
    build(team.wiki("kitchen"))
    result = search(team, "three", "leeks butter", clearance="public", cache=IndexCache(), audit_event=None)
    assert result.passages[0].path == "soup.md"  # the new build's text, not the old view's postings
    after = _saved(team)
    assert len(after) == 2 and set(before) < set(after)  # a new key for the new build
    # a view whose record names other builds is not used, even under the right key
    other = next(p for p in after if p not in before)
    meta = json.loads((other / "view.json").read_text())
    meta["wikis"][0][1] = "20990101T000000-abcdef"
    (other / "view.json").write_text(json.dumps(meta))
    again = search(team, "three", "leeks butter", clearance="public", cache=IndexCache(), audit_event=None)
    assert [p.path for p in again.passages] == [p.path for p in result.passages]


@pytest.mark.parametrize("damage", ["flip", "truncate", "remove", "view.json"])
def test_a_damaged_view_is_discarded_and_merged_again(team: Workspace, damage: str) -> None:
    expected = _answers(team, "three", IndexCache())
    (folder,) = _saved(team)
    target = folder / ("view.json" if damage == "view.json" else "global.npy")
    if damage == "remove":
        target.unlink()
    elif damage == "view.json":
        target.write_text("{not json")
    else:
        data = bytearray(target.read_bytes())
        if damage == "flip":
            data[-3] ^= 0x40
        else:
            del data[len(data) // 2:]
        target.write_bytes(bytes(data))
    cache = IndexCache()
    assert _answers(team, "three", cache) == expected  # the same answers, from a fresh merge
    loaded = [entry[3] for entry in cache._entries.values()]
    assert all("bm25" in idx.__dict__ for idx in loaded)  # merged from the wikis' own layers
    (saved,) = _saved(team)  # and saved again, whole
    assert views.load(team.home / views.VIEWS_DIR, [(i.wiki, i.build_id) for i in loaded]) is not None
    assert saved == folder


@pytest.mark.parametrize("bad", [-1, "docs"])
def test_a_view_made_to_point_outside_its_passages_is_refused(team: Workspace, bad) -> None:
    """Checksums that match a crafted file do not make it served: a posting's passage id below 0 or past
    the last passage is refused when the view is read (one pass over the ids as unsigned)."""
    expected = _answers(team, "three", IndexCache())
    (folder,) = _saved(team)
    meta = json.loads((folder / "view.json").read_text())
    indices = np.load(folder / "indices.npy")
    indices[len(indices) // 2] = -1 if bad == -1 else sum(w[2] for w in meta["wikis"])
    np.save(folder / "indices.npy", indices)
    meta["checksums"]["indices.npy"] = hashlib.sha256((folder / "indices.npy").read_bytes()).hexdigest()
    (folder / "view.json").write_text(json.dumps(meta))
    wikis = [tuple(w[:2]) for w in meta["wikis"]]
    assert views.load(team.home / views.VIEWS_DIR, wikis) is None and not folder.exists()  # refused, removed
    assert _answers(team, "three", IndexCache()) == expected  # merged again instead


def test_at_most_max_views_are_kept(team: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(views, "MAX_VIEWS", 2)
    (team.home / "rags" / "pair.yaml").write_text("sensitivity: public\nwikis: [alpha, kitchen]\n")
    for comp in ("three", "two", "pair"):
        search(team, comp, "compost", clearance="public", cache=IndexCache(), audit_event=None)
    assert len(_saved(team)) == 2


def test_a_planted_symlink_is_never_followed(team: Workspace, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (team.home / ".index").mkdir(exist_ok=True)
    shutil.rmtree(team.home / views.VIEWS_DIR, ignore_errors=True)
    (team.home / views.VIEWS_DIR).symlink_to(elsewhere, target_is_directory=True)
    result = search(team, "three", "compost", clearance="public", cache=IndexCache(), audit_event=None)
    assert result.passages and list(elsewhere.iterdir()) == []  # nothing written through it
    assert views.folder_of(team.home) is None


def test_many_wikis_load_side_by_side_with_their_view(home: Path) -> None:
    # four wikis or more are loaded lazily (IndexCache.prefetch), their saved view read after them
    names = [f"w{i}" for i in range(6)]
    for i, name in enumerate(names):
        make_wiki(home, name, {f"p{j}.md": f"# Page {j}\n\nCompost heap {i} needs turning {j} times, and water.\n"
                               for j in range(i + 2)})
    (home / "rags" / "six.yaml").write_text(f"sensitivity: public\nwikis: [{', '.join(names)}]\n")
    ws = Workspace(home, recheck_seconds=0)
    for name in names:
        build(ws.wiki(name))
    expected = _answers(ws, "six", IndexCache())  # merged, and saved
    later = IndexCache()
    assert _answers(ws, "six", later) == expected
    assert later._early_views == {}  # read by the prefetch, and taken by the merged view
    assert all("bm25" not in entry[3].__dict__ for entry in later._entries.values())
    # a wiki rebuilt since: the view read early names another build, so it is not used
    (home / "wikis" / "w0" / "p0.md").write_text("# Page 0\n\nLeeks instead: sweat them slowly in butter.\n")
    build(ws.wiki("w0"))
    fresh = IndexCache()
    result = search(ws, "six", "leeks", clearance="public", cache=fresh, audit_event=None)
    assert [p.wiki for p in result.passages] == ["w0"]


@pytest.fixture
def five(home: Path) -> Workspace:
    """Five wikis in one composition: loaded lazily by a new process (IndexCache.prefetch)."""
    pages = {"orchard": "# Apples\n\nPrune apple trees in late winter; compost the cuttings.\n",
             "kitchen": "# Soup\n\nTomato soup: roast the tomatoes, then add water and salt.\n",
             "garden": "# Beds\n\nWater the tomato beds at dawn; mulch keeps them moist.\n",
             "tools": "# Spades\n\nOil the spade after use so it does not rust.\n",
             "bees": "# Hives\n\nCheck the hives for the queen every week in spring.\n"}
    for name, text in pages.items():
        make_wiki(home, name, {"page.md": text})
    (home / "rags" / "five.yaml").write_text(f"sensitivity: public\nwikis: [{', '.join(pages)}]\n")
    ws = Workspace(home, recheck_seconds=0)
    for name in pages:
        build(ws.wiki(name))
    search(ws, "five", "spade", clearance="public", cache=IndexCache(), audit_event=None)  # merged, and saved
    views.flush()
    return ws


def _read_passages(cache: IndexCache) -> set[str]:
    return {entry[3].wiki for entry in cache._entries.values() if "_passages" in entry[3].__dict__}


def test_a_new_process_reads_the_passages_of_only_the_wikis_it_returns(five: Workspace) -> None:
    later = IndexCache()
    result = search(five, "five", "tomato soup", clearance="public", cache=later, audit_event=None)
    assert {p.wiki for p in result.passages} == {"kitchen", "garden"} and not result.warnings
    assert len(later._entries) == 5 and _read_passages(later) == {"kitchen", "garden"}
    assert "Tomato soup: roast" in result.passages[0].text and result.passages[0].wiki == "kitchen"


def test_damaged_passages_found_lazily_leave_their_wiki_out_and_the_rest_answers(five: Workspace) -> None:
    expected = search(five, "five", "tomato water", clearance="public", cache=IndexCache(), audit_event=None)
    assert {p.wiki for p in expected.passages} == {"kitchen", "garden"}
    table = next((five.home / "wikis" / "kitchen" / ".index" / "builds").glob("*/passages/table.npy"))
    data = bytearray(table.read_bytes())
    data[-1] ^= 0xFF
    table.write_bytes(bytes(data))
    cache = IndexCache()
    # a query that returns none of kitchen's passages does not read them (the damage is not seen yet)
    apples = search(five, "five", "apple trees", clearance="public", cache=cache, audit_event=None)
    assert [p.wiki for p in apples.passages] == ["orchard"] and not apples.warnings
    for _ in range(2):  # found by the first query that returns them; the second is refused at once
        result = search(five, "five", "tomato water", clearance="public", cache=cache, audit_event=None)
        assert [p.wiki for p in result.passages] == ["garden"]
        assert any("index of wiki 'kitchen' is damaged" in w and "table.npy does not match its checksum" in w
                   for w in result.warnings), result.warnings
    # the next build serves again
    build(five.wiki("kitchen"), force=True)
    again = search(five, "five", "tomato water", clearance="public", cache=cache, audit_event=None)
    assert {p.wiki for p in again.passages} == {"kitchen", "garden"} and not again.warnings
