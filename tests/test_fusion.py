"""Cross-wiki fusion: global statistics equal one big index; the wiki prior; eval metrics and command."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import bm25s
import numpy as np
import pytest
import pytrec_eval
from click.testing import CliRunner

from wikirag import Workspace, build, store
from wikirag.bm25 import MergedBM25, tokenize
from wikirag.cli import cli
from wikirag.evaluate import ndcg_at_k, recall_at_k
from wikirag import fusion
from wikirag.fusion import Candidates, dfs, dfs_prior, routed, routing_offsets, wiki_log_prior
from wikirag.retrieval import search

from .conftest import FIXTURES, copy_built_examples, make_wiki
from .lists import RankedList, candidates

QUERIES = ["tomatoes sun water", "deploy production rollback", "compost", "keys rotation deploys", "zzz"]


def _monolith(home: Path, names: list[str]) -> Workspace:
    """The same pages as one wiki, built by the product, to compare against."""
    ws = Workspace(home, recheck_seconds=0)
    others = [p.name for p in (home / "wikis").iterdir() if p.name not in names]
    make_wiki(home, "everything", {}, extra=f"source: ..\nexclude: {[f'{o}/*' for o in others + ['everything']]}\n")
    build(ws.wiki("everything"))
    for name in names:
        build(ws.wiki(name))
    return ws


@pytest.mark.parametrize("query", QUERIES)
def test_global_statistics_give_exactly_the_monolith_scores(home: Path, query: str) -> None:
    names = ["alpha", "beta", "gamma"]
    ws = _monolith(home, names)
    indexes = [store.load(ws.wiki(n)) for n in names]
    merged = MergedBM25([i.bm25 for i in indexes])
    mine = merged.scores(merged.columns(tokenize([query])[0]), "global")
    # the reference: bm25s's own scores over one index of all the passages
    mono = store.load(ws.wiki("everything"))
    folder = ws.wiki("everything").index_dir / "builds" / mono.build_id / "bm25"
    alone = bm25s.BM25.load(str(folder))
    ids = [alone.vocab_dict[t] for t in tokenize([query])[0] if t in alone.vocab_dict]
    reference = alone.get_scores(ids) if ids else np.zeros(len(mono.chunks))
    by_place = {(c.path, c.start): s for c, s in zip(mono.chunks, reference)}
    chunks = [(f"{i.wiki}/{c.path}", c.start) for i in indexes for c in i.chunks]
    assert len(chunks) == len(mono.chunks)
    np.testing.assert_allclose(mine, [by_place[place] for place in chunks], rtol=1e-5, atol=1e-6)


def test_dfs_ranks_like_the_monolith_through_search(home: Path) -> None:
    ws = _monolith(home, ["alpha", "beta"])
    (home / "rags" / "mono.yaml").write_text("sensitivity: internal\nwikis: [everything]\n")
    for query in QUERIES[:3]:
        fused = search(ws, "team", query, clearance="internal", k=5, fusion="dfs").passages
        mono = search(ws, "mono", query, clearance="internal", k=5).passages
        assert [(p.wiki + "/" + p.path, p.start) for p in fused] == [(p.path, p.start) for p in mono]
        assert [p.score for p in fused] == pytest.approx([p.score for p in mono], rel=1e-5)


def _candidates(counts: list[list[float]], sizes: list[float], scores: list[float]) -> Candidates:
    lists = [RankedList(w, np.array([0]), np.array([s])) for w, s in zip(["a", "b"], scores)]
    c = candidates(lists)
    return Candidates(**{**c.__dict__, "term_counts": np.array(counts, dtype=float),
                         "wiki_tokens": np.array(sizes, dtype=float)})


def test_wiki_prior_by_hand() -> None:
    # one query term: 50 of wiki a's 1,000 tokens, 0 of wiki b's 1,000; background 50/2,000
    c = _candidates([[50, 0]], [1000, 1000], [1.0, 1.0])
    la = math.log((50 + 2000 * 0.025) / 3000)
    lb = math.log((0 + 2000 * 0.025) / 3000)
    expected = np.array([la, lb]) - np.logaddexp(la, lb)
    np.testing.assert_allclose(wiki_log_prior(c), expected)
    fused = dfs_prior(c, 2)
    assert [f.wiki for f in fused] == ["a", "b"]
    assert fused[0].score == pytest.approx(1.0 + expected[0])
    assert fused[0].contributions[0].wiki_prior == pytest.approx(expected[0])


def test_wiki_prior_is_size_neutral() -> None:
    """A wiki twice as big with the same word distribution gets the same prior."""
    small = wiki_log_prior(_candidates([[10, 30], [5, 1]], [1000, 3000], [1, 1]))
    big = wiki_log_prior(_candidates([[20, 30], [10, 1]], [2000, 3000], [1, 1]))
    np.testing.assert_allclose(small, big, atol=0.02)


def test_routing_offsets_by_hand() -> None:
    # the same statistics as the prior by hand above; the query's best BM25 score is 2.0
    c = Candidates(**{**_candidates([[50, 0]], [1000, 1000], [1.0, 1.15]).__dict__, "top_score": 2.0})
    prior = wiki_log_prior(c)
    offsets = routing_offsets(c)
    assert offsets[0] == 0.0  # the wiki the question belongs to is not moved
    assert offsets[1] == pytest.approx(fusion.ROUTING_STRENGTH * 2.0 * (prior[1] - prior[0]))
    assert offsets[1] < -0.15  # enough here to put a's weaker hit first
    assert [f.wiki for f in dfs(c, 2)] == ["b", "a"]
    fused = routed(c, 2)
    assert [f.wiki for f in fused] == ["a", "b"]
    assert fused[1].score == pytest.approx(1.15 + offsets[1])
    assert fused[1].contributions[0].offset == pytest.approx(offsets[1])
    # the offsets follow the query's score scale: the same question with scores twice as large
    doubled = Candidates(**{**c.__dict__, "top_score": 4.0})
    np.testing.assert_allclose(routing_offsets(doubled), 2 * offsets)


def test_routing_degrades_to_dfs_when_the_wikis_are_alike() -> None:
    """A question whose terms are as frequent in every wiki: equal weights, no offsets, dfs's ranking."""
    c = Candidates(**{**_candidates([[10, 20], [3, 6]], [1000, 2000], [1.0, 1.5]).__dict__, "top_score": 1.5})
    np.testing.assert_allclose(np.exp(wiki_log_prior(c)), [0.5, 0.5])
    np.testing.assert_allclose(routing_offsets(c), [0.0, 0.0], atol=1e-12)
    assert [(f.wiki, f.score) for f in routed(c, 2)] == [(f.wiki, f.score) for f in dfs(c, 2)]


def test_routing_on_the_examples_is_the_ranking_it_reports(built_examples: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """"severities" is in a security runbook ("Severity levels … are defined in the engineering handbook's
    incident response page") and in the handbook's incident page; the question belongs to the handbook.
    The routed ranking is dfs's plus the offsets it reports; with a strength of 0.3 (0.15 ships: what
    keeps every evaluation mix at the monolith) the handbook's page comes first, on every layer."""
    ws = Workspace(copy_built_examples(built_examples, tmp_path / "ws"))
    question = "How are severities defined?"
    plain = search(ws, "security", question, clearance="confidential", k=10, fusion="dfs", layers=("bm25",))
    assert (plain.passages[0].wiki, plain.passages[0].path) == ("security-runbooks", "leaked-api-key.md")
    assert plain.routing == []  # dfs does not route
    result = search(ws, "security", question, clearance="confidential", k=10, layers=("bm25",))
    weights = {r.wiki: r for r in result.routing}
    assert weights["engineering-handbook"].weight > 0.5 > weights["security-runbooks"].weight
    assert sum(r.weight for r in result.routing) == pytest.approx(1.0)
    assert weights["engineering-handbook"].offset == 0.0 > weights["security-runbooks"].offset
    expected = sorted(((p.score + weights[p.wiki].offset, p.wiki, p.path, p.start) for p in plain.passages),
                      key=lambda x: -x[0])
    assert [(p.wiki, p.path, p.start) for p in result.passages[:3]] == [x[1:] for x in expected[:3]]
    monkeypatch.setattr(fusion, "ROUTING_STRENGTH", 0.3)
    for layers in (("bm25",), ("bm25", "dense", "graph")):
        routed_result = search(ws, "security", question, clearance="confidential", k=3, layers=layers)
        assert (routed_result.passages[0].wiki, routed_result.passages[0].path) == (
            "engineering-handbook", "operations/incident-response.md")


def test_query_explain_shows_the_routing(built: Workspace, home: Path) -> None:
    run = CliRunner().invoke
    text = run(cli, ["--home", str(home), "query", "team", "tomatoes sun water", "--explain", "--clearance",
                     "internal"]).stdout
    lines = text.splitlines()
    assert lines[0].startswith("routing (P(wiki | question)")
    assert lines[1].split()[0] == "alpha" and lines[1].split()[2] == "+0.000"  # the most likely first
    assert lines[2].split()[0] == "beta" and float(lines[2].split()[2]) < 0
    assert "score " in text and "bm25 #1" in text
    data = json.loads(run(cli, ["--home", str(home), "query", "team", "tomatoes sun water", "--explain", "--json",
                                "--clearance", "internal"]).stdout)
    assert {r["wiki"] for r in data["routing"]} == {"alpha", "beta"}
    assert sum(r["weight"] for r in data["routing"]) == pytest.approx(1.0)
    offset = {r["wiki"]: r["offset"] for r in data["routing"]}
    for p in data["passages"]:
        (c,) = p["contributions"]
        assert p["score"] == pytest.approx(c["score"] + offset[p["wiki"]])
    answered = json.loads(run(cli, ["--home", str(home), "ask", "team", "tomatoes sun water", "--json",
                                    "--clearance", "internal"]).stdout)
    assert answered["routing"] == data["routing"]  # ask --json carries the same routing
    (home / "rags" / "one.yaml").write_text("sensitivity: public\nwikis: [alpha]\n")
    alone = run(cli, ["--home", str(home), "query", "one", "tomatoes", "--explain"]).stdout
    assert alone.startswith("routing: none (one wiki)")


def test_query_json_explains_each_passage(built: Workspace, home: Path) -> None:
    result = CliRunner().invoke(cli, ["--home", str(home), "query", "team", "compost", "--json",
                                      "--clearance", "internal"])
    passages = json.loads(result.stdout)
    for p in passages:
        (c,) = p["contributions"]
        assert c["wiki"] == p["wiki"] and c["layer"] == "bm25" and c["rank"] >= 1
        assert p["score"] == pytest.approx(c["score"] + c["offset"])


# metrics ------------------------------------------------------------------------------------------

def test_metrics_by_hand() -> None:
    rels = {"a": 2, "b": 1, "c": 1}
    ranked = ["x", "a", "c", "y"]
    dcg = 2 / math.log2(3) + 1 / math.log2(4)
    idcg = 2 / math.log2(2) + 1 / math.log2(3) + 1 / math.log2(4)
    assert ndcg_at_k(ranked, rels) == pytest.approx(dcg / idcg)
    assert ndcg_at_k([], rels) == 0.0 and ndcg_at_k(ranked, {}) == 0.0
    assert recall_at_k(ranked, rels) == pytest.approx(2 / 3)
    assert recall_at_k(ranked, {"a": 0, "b": 1}) == 0.0


def test_metrics_match_pytrec_eval() -> None:
    rng = np.random.default_rng(7)
    qrels, run = {}, {}
    for q in range(20):
        docs = [f"d{i}" for i in range(40)]
        qrels[f"q{q}"] = {d: int(rng.integers(0, 3)) for d in rng.choice(docs, 8, replace=False)}
        ranked = list(rng.permutation(docs)[:30])
        run[f"q{q}"] = {d: float(30 - i) for i, d in enumerate(ranked)}
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100"})
    expected = evaluator.evaluate(run)
    for q, scores in run.items():
        ranked = sorted(scores, key=scores.get, reverse=True)
        assert ndcg_at_k(ranked, qrels[q]) == pytest.approx(expected[q]["ndcg_cut_10"], abs=1e-9)
        assert recall_at_k(ranked, qrels[q]) == pytest.approx(expected[q]["recall_100"], abs=1e-9)


# the eval command ---------------------------------------------------------------------------------

def test_eval_on_beir_folders(tmp_path: Path) -> None:
    sources = [str(FIXTURES / "beir" / name) for name in ("garden", "kitchen")]
    args = ["eval", *sources, "--cache", str(tmp_path / "cache"), "--json"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["k"] == 10
    assert report["datasets"] == {"garden": {"docs": 8, "queries": 3}, "kitchen": {"docs": 6, "queries": 2}}
    assert {"monolith", "oracle", "rrf", "dfs", "dfs-prior", "routed", "default"} <= set(report["results"])
    for method in report["results"].values():
        assert set(method) == {"per_dataset", "macro", "queries_per_s"}
        assert set(method["per_dataset"]) == {"garden", "kitchen"}
        for metrics in [method["macro"], *method["per_dataset"].values()]:
            assert set(metrics) == {"ndcg@10", "recall@100"} and 0 <= metrics["ndcg@10"] <= 1
    assert report["results"]["dfs"]["per_dataset"] == report["results"]["monolith"]["per_dataset"]
    assert report["results"]["oracle"]["macro"]["ndcg@10"] > 0.8
    # cached: a second run converts and indexes nothing
    current = tmp_path / "cache" / "workspace" / "wikis" / "garden" / ".index" / "CURRENT"
    build_id = current.read_text()
    again = CliRunner().invoke(cli, args)
    assert current.read_text() == build_id
    rerun = json.loads(again.stdout)["results"]["dfs"]
    # the same scores from the cached indexes; the speed is measured anew (any positive rate)
    assert (rerun["per_dataset"], rerun["macro"]) == (report["results"]["dfs"]["per_dataset"],
                                                      report["results"]["dfs"]["macro"])
    assert rerun["queries_per_s"] > 0


def test_eval_rebuilds_when_the_data_changes(tmp_path: Path) -> None:
    data = tmp_path / "garden"
    shutil.copytree(FIXTURES / "beir" / "garden", data)
    cache = tmp_path / "cache"
    first = json.loads(CliRunner().invoke(cli, ["eval", str(data), "--cache", str(cache), "--json",
                                                "--fusion", "dfs"]).stdout)
    with (data / "corpus.jsonl").open("a") as fh:
        fh.write(json.dumps({"_id": "g9", "title": "Watering tomatoes", "text": "Water tomatoes at the base."}) + "\n")
    second = json.loads(CliRunner().invoke(cli, ["eval", str(data), "--cache", str(cache), "--json",
                                                 "--fusion", "dfs"]).stdout)
    assert (first["datasets"]["garden"]["docs"], second["datasets"]["garden"]["docs"]) == (8, 9)


def test_eval_of_a_composition_with_own_judgments(built: Workspace, home: Path, tmp_path: Path) -> None:
    queries = tmp_path / "q.tsv"
    queries.write_text("1\thow often to water tomatoes\n2\troll back a deploy\n")
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\n1\talpha/tomatoes.md\t1\n2\tbeta/deploys.md\t1\n")
    result = CliRunner().invoke(cli, ["--home", str(home), "eval", "team", "--queries", str(queries),
                                      "--qrels", str(qrels), "--clearance", "internal", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["results"]["dfs-prior"]["per_dataset"]["team"]["ndcg@10"] == pytest.approx(1.0)
    denied = CliRunner().invoke(cli, ["--home", str(home), "eval", "team", "--queries", str(queries),
                                      "--qrels", str(qrels)])
    assert denied.exit_code == 1 and "no composition 'team' that you may use" in denied.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["eval", "nowhere"], "is not a BEIR folder"),
    (["eval", "team", "--queries", "x"], "does not exist"),
    (["eval", str(FIXTURES / "beir" / "garden"), "--fusion", "magic"], "unknown fusion 'magic'"),
    (["eval", str(FIXTURES / "beir" / "garden"), "--exclude-self", "nope"], "--exclude-self names no dataset"),
])
def test_eval_errors(args: list[str], message: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, [*args, "--cache", str(tmp_path)])
    assert result.exit_code in (1, 2) and message in result.stderr

