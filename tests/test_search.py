"""Querying compositions: fusion, clearance checks, weights, hints, exact citations."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from wikirag import CompositionError, IndexMissing, NotFound, QueryError, Workspace, audit, build, store
from wikirag.bm25 import MergedBM25
from wikirag.fusion import get, rrf
from wikirag.retrieval import search

from .conftest import make_wiki
from .lists import RankedList, candidates


def test_rrf_matches_a_hand_computed_example() -> None:
    lists = [
        RankedList("a", np.array([10, 11, 12]), np.array([9.0, 5.0, 1.0]), weight=1.0),
        RankedList("b", np.array([20, 21]), np.array([3.0, 2.0]), weight=2.0),
        RankedList("a", np.array([12, 10]), np.array([0.9, 0.8]), layer="dense", weight=1.0),
    ]
    fused = rrf(candidates(lists), k=4)
    # b/20: 2/61 = .032787; a/10: 1/61 + 1/62 = .032522; b/21: 2/62 = .032258; a/12: 1/63 + 1/61 = .032266
    assert [(f.wiki, f.id) for f in fused] == [("b", 20), ("a", 10), ("a", 12), ("b", 21)]
    assert fused[0].score == pytest.approx(2 / 61)
    assert fused[1].score == pytest.approx(1 / 61 + 1 / 62)
    assert fused[2].score == pytest.approx(1 / 63 + 1 / 61)
    assert [(c.layer, c.rank) for c in fused[2].contributions] == [("bm25", 3), ("dense", 1)]
    assert get("rrf").name == "rrf" and get(None).name == "routed"
    with pytest.raises(QueryError, match="unknown fusion 'x'"):
        get("x")


def test_passages_cite_exact_characters_of_their_source(built: Workspace, home: Path) -> None:
    result = search(built, "team", "deploy production rollback", clearance="internal", k=5)
    assert result.passages and result.passages[0].wiki == "beta"
    for p in result.passages:
        source = (home / "wikis" / p.wiki / p.path).read_bytes().decode("utf-8")
        assert source[p.start:p.end] == p.text
        assert p.contributions[0].wiki == p.wiki and p.contributions[0].rank >= 1
    assert [p.rank for p in result.passages] == list(range(1, len(result.passages) + 1))


def test_results_come_from_every_wiki_of_the_composition(built: Workspace) -> None:
    result = search(built, "team", "compost", clearance="internal", k=10)
    assert {p.wiki for p in result.passages} == {"alpha", "beta"}


@pytest.mark.parametrize("fusion", ["rrf", "dfs", "dfs-prior", "routed"])
def test_weights_apply_in_every_fusion_method(built: Workspace, home: Path, fusion: str) -> None:
    plain = search(built, "team", "compost", clearance="internal", k=3, fusion=fusion)
    top = plain.passages[0].wiki
    other = "beta" if top == "alpha" else "alpha"
    (home / "rags" / "weighted.yaml").write_text(
        f"sensitivity: internal\nwikis: [alpha, beta]\nweights: {{{other}: 5}}\n")
    weighted = search(built, "weighted", "compost", clearance="internal", k=3, fusion=fusion)
    assert weighted.passages[0].wiki == other
    if fusion == "rrf":
        assert weighted.passages[0].score == pytest.approx(5 / 61)


@pytest.mark.parametrize(
    ("clearance", "composition", "allowed"),
    [
        ("public", "open", True), ("public", "team", False), ("public", "secret", False),
        ("internal", "team", True), ("internal", "secret", False),
        ("confidential", "secret", True), ("restricted", "secret", True),
    ],
)
def test_clearance_gates_compositions(built: Workspace, clearance: str, composition: str, allowed: bool) -> None:
    if allowed:
        assert search(built, composition, "deploys keys compost", clearance=clearance).passages
        return
    # above the clearance reads exactly like a composition that does not exist
    with pytest.raises(NotFound) as above:
        search(built, composition, "deploys", clearance=clearance)
    with pytest.raises(NotFound) as missing:
        search(built, "no-such-composition", "deploys", clearance=clearance)
    assert str(above.value).replace(composition, "X") == str(missing.value).replace("no-such-composition", "X")
    assert str(above.value).startswith(f"no composition '{composition}' that you may use")
    assert "gamma" not in str(above.value) and (clearance != "public" or "team" not in str(missing.value))


def test_hand_edited_composition_cannot_reach_above_its_ceiling(built: Workspace, home: Path) -> None:
    (home / "rags" / "sneaky.yaml").write_text("sensitivity: public\nwikis: [alpha, gamma]\n")
    with pytest.raises(CompositionError) as hidden:
        search(built, "sneaky", "keys", clearance="public")
    assert "unknown wiki 'gamma': available: alpha" in str(hidden.value)  # as if gamma did not exist
    assert "confidential" not in str(hidden.value)
    with pytest.raises(CompositionError, match="wiki 'gamma' is confidential, above"):  # a caller who may see gamma
        search(built, "sneaky", "keys", clearance="confidential")


def test_each_wiki_is_checked_again_at_retrieval_time(built: Workspace, home: Path) -> None:
    """A composition loaded earlier, then a wiki's manifest raised: the query refuses it."""
    comp = built.composition("team", "internal")
    assert search(built, comp, "deploys", clearance="internal").passages
    manifest = home / "wikis" / "beta" / ".wiki.yaml"
    manifest.write_text(manifest.read_text().replace("internal", "confidential"))
    with pytest.raises(CompositionError, match="unknown wiki 'beta'"):  # above the caller: as if it did not exist
        search(built, comp, "deploys", clearance="internal")
    # and the composition file itself no longer loads for anyone
    with pytest.raises(CompositionError, match="wiki 'beta' is confidential, above"):
        search(built, "team", "deploys", clearance="restricted")


def test_a_level_edited_by_another_process_applies_within_the_recheck_interval(built: Workspace, home: Path) -> None:
    ws = Workspace(home)  # the default: manifests re-checked at most every 0.5 s
    assert search(ws, "open", "compost", clearance="public").passages
    manifest = home / "wikis" / "alpha" / ".wiki.yaml"
    manifest.write_text(manifest.read_text().replace("public", "internal"))
    time.sleep(ws.recheck_seconds + 0.1)
    with pytest.raises(CompositionError, match="unknown wiki 'alpha'"):
        search(ws, "open", "compost", clearance="public")
    with pytest.raises(CompositionError, match="wiki 'alpha' is internal, above the composition's sensitivity public"):
        search(ws, "open", "compost", clearance="internal")


def test_refusal_comes_before_wiki_lookup(built: Workspace, home: Path) -> None:
    """A public caller asking for a confidential composition learns nothing about its wikis."""
    (home / "rags" / "hidden.yaml").write_text("sensitivity: confidential\nwikis: [gamma, nonexistent]\n")
    with pytest.raises(NotFound) as err:
        search(built, "hidden", "keys", clearance="public")
    assert "gamma" not in str(err.value) and "nonexistent" not in str(err.value)


def test_stopword_query_returns_nothing_with_a_hint(built: Workspace) -> None:
    result = search(built, "open", "is it the and of a", clearance="public")
    assert result.passages == [] and "stopwords" in result.hint
    unknown = search(built, "open", "xylophone", clearance="public")
    assert unknown.passages == [] and "no passage contains" in unknown.hint


def test_unbuilt_wiki_is_a_warning_and_all_unbuilt_is_an_error(ws: Workspace) -> None:
    with pytest.raises(IndexMissing, match="wikirag build alpha"):
        search(ws, "open", "compost", clearance="public")
    build(ws.wiki("alpha"))
    result = search(ws, "team", "compost", clearance="internal")
    assert result.passages and any("wiki 'beta' has no index" in w for w in result.warnings)


def test_a_rebuild_is_picked_up_by_the_next_query(built: Workspace, home: Path) -> None:
    assert not search(built, "open", "asparagus", clearance="public").passages
    (home / "wikis/alpha/asparagus.md").write_text("# Asparagus\n\nAsparagus beds take three years to crop.\n")
    build(built.wiki("alpha"))
    assert search(built, "open", "asparagus", clearance="public").passages[0].path == "asparagus.md"


def test_bad_k_is_refused(built: Workspace) -> None:
    with pytest.raises(QueryError, match="k must be between 1 and 1000"):
        search(built, "open", "compost", clearance="public", k=0)


def _top_by_brute_force(scores: np.ndarray, offsets: np.ndarray, depth: int) -> list[tuple[int, int, int, float]]:
    """Each wiki's top ``depth`` non-zero scores by (score descending, chunk id): (wiki, chunk, rank, score)."""
    out = []
    for w in range(len(offsets) - 1):
        part = scores[offsets[w]:offsets[w + 1]]
        best = [int(d) for d in np.lexsort((np.arange(len(part)), -part)) if part[d] != 0][:depth]
        out += [(w, d, rank, float(part[d])) for rank, d in enumerate(best, start=1)]
    return out


@pytest.mark.parametrize("row_width", [MergedBM25.ROW_WIDTH, 16])
def test_each_wiki_keeps_its_own_top_with_ties_to_the_lower_chunk_id(monkeypatch, row_width: int) -> None:
    # many wikis of very different sizes, scores with many exact ties (also across the cut at `depth`)
    monkeypatch.setattr(MergedBM25, "ROW_WIDTH", row_width)
    rng = np.random.default_rng(7)
    for _ in range(300):
        sizes = rng.integers(0, int(rng.choice([8, 60, 700])), int(rng.integers(1, 40)))
        if rng.random() < 0.3:
            sizes[rng.integers(len(sizes))] = rng.integers(0, 3000)
        merged = MergedBM25.__new__(MergedBM25)  # top_per_wiki needs the wikis' offsets only
        merged.offsets = np.cumsum([0, *sizes.tolist()])
        scores = (rng.integers(0, int(rng.choice([2, 5, 1000])), int(merged.offsets[-1])) * 0.37).astype(np.float32)
        scores[rng.random(len(scores)) < rng.random()] = 0
        depth = int(rng.choice([1, 2, 10, 100]))
        hits = merged.top_per_wiki(scores, depth)
        mine = list(zip(hits.wiki.tolist(), hits.chunk.tolist(), hits.rank.tolist(), hits.score.tolist()))
        assert mine == _top_by_brute_force(scores, merged.offsets, depth)


def test_one_pass_over_all_wikis_equals_fusing_each_wikis_own_top() -> None:
    # the fast path of score fusions (dfs, dfs-prior): the top k of scale[w]·score + offset[w] over all
    # passages must be exactly the per-wiki top-k lists fused by that value: same rows, ranks and ties
    from wikirag.fusion import Candidates, top_by_passage

    rng = np.random.default_rng(11)
    for _ in range(300):
        sizes = rng.integers(0, int(rng.choice([8, 60, 700])), int(rng.integers(1, 40)))
        merged = MergedBM25.__new__(MergedBM25)
        merged.offsets = np.cumsum([0, *sizes.tolist()])
        merged.doc_wiki = np.repeat(np.arange(len(sizes)), sizes)
        scores = (rng.integers(0, int(rng.choice([2, 5, 1000])), int(merged.offsets[-1])) * 0.37).astype(np.float32)
        scores[rng.random(len(scores)) < rng.random()] = 0
        k = int(rng.choice([1, 2, 10, 100]))
        scale = rng.choice([1.0, 0.5, 2.0], len(sizes)) if rng.random() < 0.5 else np.ones(len(sizes))
        offset = -rng.random(len(sizes)) * rng.choice([0.0, 0.01, 5.0]) if rng.random() < 0.7 else np.zeros(len(sizes))
        if rng.random() < 0.2:  # wikis with the same prior: ties across wikis go by wiki order
            offset[:] = offset[0]
        per_wiki = merged.top_per_wiki(scores, k)
        c = Candidates(tuple(f"w{i}" for i in range(len(sizes))), ("bm25",), scale, per_wiki.wiki, per_wiki.wiki * 0,
                       per_wiki.chunk, per_wiki.rank, per_wiki.score.astype(np.float64))
        expected = top_by_passage(c, scale[c.wiki] * c.score + offset[c.wiki], k)
        hits = merged.top_overall(scores, k, scale, offset)
        fast = Candidates(c.wikis, c.layers, scale, hits.wiki, hits.wiki * 0, hits.chunk, hits.rank,
                          hits.score.astype(np.float64))
        got = top_by_passage(fast, scale[fast.wiki] * fast.score + offset[fast.wiki], k)
        assert [(f.wiki, f.id, f.score, f.contributions) for f in got] == [
            (f.wiki, f.id, f.score, f.contributions) for f in expected]


@pytest.mark.parametrize("fusion", ["routed", "dfs-prior", "dfs", "rrf"])
def test_a_tie_at_the_cut_keeps_the_lower_chunk_ids(home: Path, fusion: str) -> None:
    # twelve passages with the same text score the same: the top 3 are the first three chunks
    same = {f"n{i:02d}.md": "# Note\n\nCompost heaps need turning and air every week.\n" for i in range(12)}
    make_wiki(home, "copies", same)
    make_wiki(home, "more", {**same, "other.md": "# Other\n\nPeppers like warm soil.\n"})
    (home / "rags" / "copies.yaml").write_text("sensitivity: public\nwikis: [copies]\n")
    (home / "rags" / "both.yaml").write_text("sensitivity: public\nwikis: [copies, more]\n")
    ws = Workspace(home, recheck_seconds=0)
    build(ws.wiki("copies"))
    build(ws.wiki("more"))
    order = {w: [c.path for c in store.load(ws.wiki(w)).chunks if c.path != "other.md"] for w in ("copies", "more")}
    alone = search(ws, "copies", "compost turning", clearance="public", k=3, fusion=fusion, audit_event=None)
    assert [p.path for p in alone.passages] == order["copies"][:3]
    both = search(ws, "both", "compost turning", clearance="public", k=8, fusion=fusion, audit_event=None)
    for wiki in ("copies", "more"):  # each wiki's passages are its first chunks, ranked in chunk order
        mine = [p for p in both.passages if p.wiki == wiki]
        assert [p.path for p in mine] == order[wiki][:len(mine)]
        assert [c.rank for p in mine for c in p.contributions] == list(range(1, len(mine) + 1))


def _lines_if_there(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []


def test_every_search_is_in_the_audit_log_when_it_returns(built: Workspace, home: Path, monkeypatch) -> None:
    log = home / ".audit" / "audit.jsonl"
    monkeypatch.setattr(audit, "MAX_BYTES", 4000)  # rotate often: old files keep the older records
    errors: list[BaseException] = []

    def run(user: str) -> None:
        try:
            for i in range(15):
                search(built, "team", f"compost {i}", clearance="internal", user=user)
                # written before search returned: in the log, or in a backup if other threads rotated it since
                # (read newest first: a rotation while reading moves records towards the older files)
                # (a file renamed away between the listing and the read is skipped: its records moved to the next)
                seen = [json.loads(line) for f in [log] + [log.with_name(f"audit.jsonl.{n}") for n in range(1, audit.BACKUPS + 1)]
                        for line in _lines_if_there(f)]
                assert any(e["user"] == user and e["question_sha256"] == audit.question_hash(f"compost {i}")
                           for e in seen)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(f"u{t}",)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    files = [log.with_name(f"audit.jsonl.{i}") for i in range(audit.BACKUPS, 0, -1)] + [log]
    events = [json.loads(line) for f in files if f.exists() for line in f.read_text(encoding="utf-8").splitlines()]
    assert len(files) > 2 and all(f.stat().st_size < 4000 for f in files if f.exists())
    for t in range(4):  # every line whole, each thread's records in its order, none lost
        questions = [e["question_sha256"] for e in events if e.get("user") == f"u{t}"]
        expected = [audit.question_hash(f"compost {i}") for i in range(15)]
        assert questions == expected[len(expected) - len(questions):] and len(questions) >= 5


def test_unknown_terms_are_reported_but_not_an_abbreviation_of_a_known_word(ws: Workspace, home: Path) -> None:
    make_wiki(home, "repos", {"setup.md": "# Setup\n\nClone the repository and install the pinned Python version.\n"})
    (home / "rags" / "repos.yaml").write_text("name: repos\nsensitivity: public\nwikis: [repos]\n")
    build(ws.wiki("repos"))
    found = search(ws, "repos", "Which Python version does the repo pin for Kubernetes?", clearance="public")
    assert found.passages and "kubernet" in found.unknown_terms
    assert "repo" not in found.unknown_terms and "pin" not in found.unknown_terms  # "repo" reads as "repository"
