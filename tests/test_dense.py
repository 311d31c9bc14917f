"""The dense layer: with the real offline model end to end, and the store's exact in-process search against
a brute-force reference, qdrant-client's local engine, ties, build swaps under concurrent queries and the
Qdrant server mode."""

from __future__ import annotations

import gc
import http.server
import json
import subprocess
import sys
import textwrap
import threading
import time
import weakref
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from click.testing import CliRunner

from wikirag import BuildError, Workspace, build, status
from wikirag import dense as dense_mod
from wikirag.cli import cli
from wikirag.dense import VECTORS, DenseInfo, DenseStore, store, unit_rows
from wikirag.errors import DenseMismatch
from wikirag.retrieval import search
from wikirag.store import load as load_index

from .conftest import make_wiki

CAR = ("# Automobile upkeep\n\nReplace the engine oil and the filter every ten thousand kilometres, "
       "and have the brakes inspected by a mechanic once a year.\n")
GARDEN = "# Roses\n\nPrune roses in late winter, just above an outward-facing bud, to open the plant to air.\n"
PARAPHRASE = "how often should I service my car"


@pytest.fixture
def dense_ws(home: Path) -> Workspace:
    make_wiki(home, "motoring", {"car.md": CAR, "roses.md": GARDEN}, extra="layers:\n  dense: {}\n")
    (home / "rags" / "motoring.yaml").write_text("sensitivity: public\nwikis: [motoring]\n")
    ws = Workspace(home, recheck_seconds=0)
    build(ws.wiki("motoring"))
    return ws


def test_a_paraphrase_that_bm25_misses_is_found_by_the_dense_layer(dense_ws: Workspace) -> None:
    lexical = search(dense_ws, "motoring", PARAPHRASE, clearance="public", layers=("bm25",))
    assert lexical.passages == []  # no word of the question is in the page
    hybrid = search(dense_ws, "motoring", PARAPHRASE, clearance="public")
    assert hybrid.passages[0].path == "car.md"
    assert [c.layer for c in hybrid.passages[0].contributions] == ["dense", "rerank"]
    dense_only = search(dense_ws, "motoring", PARAPHRASE, clearance="public", layers=("dense",))
    assert dense_only.passages[0].path == "car.md" and 0 < dense_only.passages[0].score <= 1


@pytest.mark.parametrize("question", ["", "   ", "zzqx", "the of and is it", "qwertyuiop asdf"])
def test_a_question_that_matches_nothing_gets_no_passage_and_a_hint(dense_ws: Workspace, home: Path,
                                                                   question: str) -> None:
    # the dense layer always has nearest neighbours: only those above the model's floor count
    for layers in (("bm25", "dense"), ("dense",)):
        result = search(dense_ws, "motoring", question, clearance="public", layers=layers)
        assert result.passages == [] and result.hint, (question, layers, result.passages)
    out = CliRunner().invoke(cli, ["--home", str(home), "query", "motoring", question])
    assert out.exit_code == 0 and "no results:" in out.output and "[1]" not in out.output


def test_the_similarity_floor_is_a_query_setting(dense_ws: Workspace, home: Path) -> None:
    manifest = home / "wikis" / "motoring" / ".wiki.yaml"
    manifest.write_text(manifest.read_text().replace("dense: {}", "dense: {min_similarity: -1}"))
    ws = Workspace(home, recheck_seconds=0)
    assert status(ws.wiki("motoring")).state == "fresh"  # nothing to re-embed for a query-time setting
    assert len(search(ws, "motoring", "zzqx", clearance="public", layers=("dense",)).passages) == 2


def test_the_second_stage_puts_the_passage_nearest_in_meaning_first(home: Path) -> None:
    # BM25 prefers the page that repeats "water"; the one that answers says it in other words
    pages = {"kettle.md": "# Kettles\n\nWater, water, water: fill the kettle with water, water the plants with the "
                          "rest of the water.\n",
             "temperature.md": "# Brewing temperature\n\nFor filter coffee, aim for 90 to 96 degrees Celsius at "
                               "the kettle; the water should be just off the boil.\n"}
    make_wiki(home, "brew", pages, extra="layers:\n  dense: {}\n")
    for name, rerank in (("on", "true"), ("off", "false")):
        (home / "rags" / f"{name}.yaml").write_text(f"sensitivity: public\nwikis: [brew]\nrerank: {rerank}\n")
    ws = Workspace(home, recheck_seconds=0)
    build(ws.wiki("brew"))
    question = "how hot should the water be for coffee"
    off = search(ws, "off", question, clearance="public")
    on = search(ws, "on", question, clearance="public")
    assert {p.path for p in on.passages} == {p.path for p in off.passages}
    assert on.passages[0].path == "temperature.md"
    layers = [c.layer for c in on.passages[0].contributions]
    assert layers[-1] == "rerank" and "rerank" not in [c.layer for p in off.passages for c in p.contributions]
    cosine = on.passages[0].contributions[-1].score
    assert cosine > max(c.score for c in on.passages[1].contributions if c.layer == "rerank")


def test_only_new_or_changed_passages_are_embedded(dense_ws: Workspace, home: Path) -> None:
    first = load_index(dense_ws.wiki("motoring")).dense
    assert (first.model, first.dim, first.embedded, first.reused) == ("minilm", 384, 2, 0)
    (home / "wikis/motoring/tyres.md").write_text("# Tyres\n\nCheck tyre pressure monthly, when the tyres are cold.\n")
    build(dense_ws.wiki("motoring"))
    second = load_index(dense_ws.wiki("motoring")).dense
    assert (second.embedded, second.reused) == (1, 2)
    hits = search(dense_ws, "motoring", "when to check tire pressure", clearance="public", layers=("dense",))
    assert hits.passages[0].path == "tyres.md"


def test_an_unreachable_embedding_endpoint_fails_the_build_and_keeps_the_old_layer(dense_ws: Workspace,
                                                                                   home: Path) -> None:
    manifest = home / "wikis/motoring/.wiki.yaml"
    manifest.write_text(manifest.read_text().replace(
        "dense: {}", "dense: {model: openai/text-embedding-3-small, api_base: 'http://127.0.0.1:9/v1'}"))
    with pytest.raises(BuildError, match="wiki 'motoring': its dense layer could not be built: .*cannot reach"):
        build(dense_ws.wiki("motoring"))
    loaded = load_index(dense_ws.wiki("motoring"))
    assert loaded.dense.model == "minilm"  # the previous build still serves, dense layer and all
    assert status(dense_ws.wiki("motoring")).state == "stale"


class _RateLimitedEmbeddings(http.server.BaseHTTPRequestHandler):
    """An OpenAI-style embeddings endpoint that answers 429 to its first request, then 3-d vectors."""

    requests: ClassVar[list[int]] = []

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.requests.append(len(body["input"]))
        if len(self.requests) == 1:
            status, reply = 429, {"error": {"message": "slow down", "type": "rate_limit_exceeded"}}
        else:
            status, reply = 200, {"object": "list", "model": "fake", "usage": {"prompt_tokens": 1, "total_tokens": 1},
                                  "data": [{"object": "embedding", "index": i, "embedding": [1.0, float(i), 0.5]}
                                           for i in range(len(body["input"]))]}
        data = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Retry-After", "0")
        self.end_headers()
        self.wfile.write(data)


def test_a_rate_limited_embedding_call_is_retried(home: Path, monkeypatch) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RateLimitedEmbeddings)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    try:
        make_wiki(home, "remote", {"a.md": "# A\n\nThe first page is about kites and how to fly them in wind.\n",
                                   "b.md": "# B\n\nThe second page is about gliders and how they ride thermals.\n"},
                  extra=f"layers: {{dense: {{model: openai/fake, api_base: 'http://127.0.0.1:{server.server_port}/v1'}}}}\n")
        build(Workspace(home).wiki("remote"))
    finally:
        server.shutdown()
    assert len(_RateLimitedEmbeddings.requests) >= 2  # refused once, then answered
    loaded = load_index(Workspace(home).wiki("remote"))
    assert (loaded.dense.model, loaded.dense.dim, loaded.dense.embedded) == ("openai/fake", 3, 2)


def test_a_query_vector_from_another_model_is_refused(dense_ws: Workspace) -> None:
    search(dense_ws, "motoring", PARAPHRASE, clearance="public")  # loads the layer into the store
    with pytest.raises(DenseMismatch, match="built with all-MiniLM-L6-v2 .*384 dimensions.*text-embedding-3-small"):
        store().search("motoring", np.ones(1536, dtype=np.float32), "text-embedding-3-small", 5)


def test_a_declared_but_missing_dense_layer_falls_back_to_bm25(home: Path) -> None:
    make_wiki(home, "plain", {"car.md": CAR})
    (home / "rags" / "plain.yaml").write_text("sensitivity: public\nwikis: [plain]\n")
    ws = Workspace(home, recheck_seconds=0)
    build(ws.wiki("plain"))
    manifest = home / "wikis/plain/.wiki.yaml"
    manifest.write_text(manifest.read_text() + "layers:\n  dense: {}\n")
    result = search(ws, "plain", "engine oil", clearance="public")
    assert result.passages[0].path == "car.md"
    assert any("declares a dense layer but its index has none" in w for w in result.warnings)
    listed = CliRunner().invoke(cli, ["--home", str(home), "list", "--json"])
    plain = next(w for w in __import__("json").loads(listed.stdout)["wikis"] if w["name"] == "plain")
    assert plain["dense"] == "missing" and plain["status"] == "stale"
    checked = CliRunner().invoke(cli, ["--home", str(home), "check"])
    assert "wiki 'plain' declares a dense layer but its index has none" in checked.stderr


def test_a_build_while_another_process_holds_the_index_open(dense_ws: Workspace, home: Path) -> None:
    reader = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from wikirag import Workspace, search
        ws = Workspace({str(home)!r}, recheck_seconds=0)
        seen = set()
        deadline = time.time() + 60
        while time.time() < deadline:
            result = search(ws, "motoring", "tyre pressure", clearance="public")
            seen.update(p.path for p in result.passages)
            if "tyres.md" in seen:
                print("saw the new build")
                break
            time.sleep(0.05)
    """)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3)  # the reader has loaded the index (files and its dense store) and is querying
    (home / "wikis/motoring/tyres.md").write_text("# Tyres\n\nCheck tyre pressure monthly, when the tyres are cold.\n")
    report = build(dense_ws.wiki("motoring"))
    assert report.state == "built"
    out, err = reader.communicate(timeout=90)
    assert reader.returncode == 0, err
    assert "saw the new build" in out


# --- the store itself, on random vectors (no model) ---------------------------------------------------

MODEL_ID = "test-model"


def _unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    vectors = rng.standard_normal((n, dim), dtype=np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _write_build(root: Path, build_id: str, vectors: np.ndarray) -> tuple[str, Path, DenseInfo]:
    """A build's ``dense/`` folder holding ``vectors`` as build_layer saves them (unit rows)."""
    folder = root / build_id / "dense"
    folder.mkdir(parents=True)
    np.save(folder / VECTORS, unit_rows(vectors))
    return build_id, folder, DenseInfo("test", MODEL_ID, vectors.shape[1], None, len(vectors), 0, 0.0)


def _reference(vectors: np.ndarray, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Brute force over every row: ``query`` (unit length) against ``vectors`` made unit, fully sorted by
    (float32 score descending, id ascending); the scores returned are float64 cosines."""
    unit = unit_rows(vectors)
    order = np.lexsort((np.arange(len(unit)), -(unit @ query)))[:k]
    v = vectors.astype(np.float64)
    norms = np.linalg.norm(v, axis=1)
    cosines = (v @ query.astype(np.float64)) / np.where(norms > 0, norms, 1.0) / np.linalg.norm(query)
    return order, cosines[order]


def test_exact_search_equals_a_brute_force_reference(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    vectors = _unit(rng, 3000, 48)
    dense = DenseStore()
    dense.ensure("w", *_write_build(tmp_path, "20260101T000000-aaaaaa", vectors))
    for query in _unit(rng, 25, 48):  # unit length, as the embedders return them
        for k in (1, 10, 100, 3000, 5000):
            ids, scores = dense.search("w", query, MODEL_ID, k)
            ref_ids, ref_scores = _reference(vectors, query, k)
            assert ids.dtype == np.int64 and scores.dtype == np.float64
            assert np.array_equal(ids, ref_ids)
            np.testing.assert_allclose(scores, ref_scores, rtol=0, atol=1e-6)
        # a query of any length is normalised: the same hits, its cosines
        longer_ids, longer_scores = dense.search("w", query * 7, MODEL_ID, 10)
        assert np.array_equal(longer_ids, ids[:10])
        np.testing.assert_allclose(longer_scores, scores[:10], rtol=0, atol=1e-6)
    assert [len(dense.search("w", vectors[0], MODEL_ID, k)[0]) for k in (0, -1)] == [0, 0]


def test_results_equal_qdrant_local_mode(tmp_path: Path) -> None:
    qdrant_client = pytest.importorskip("qdrant_client")
    rng = np.random.default_rng(11)
    vectors = _unit(rng, 2000, 32)
    dense = DenseStore()
    dense.ensure("w", *_write_build(tmp_path, "20260101T000000-aaaaaa", vectors))
    client = qdrant_client.QdrantClient(":memory:")
    client.create_collection("w", vectors_config=qdrant_client.models.VectorParams(
        size=32, distance=qdrant_client.models.Distance.COSINE))
    client.upload_collection("w", vectors=vectors, ids=range(len(vectors)))
    for query in _unit(rng, 30, 32):
        for k in (10, 50):
            points = client.query_points("w", query=query.tolist(), limit=k, with_payload=False).points
            ids, scores = dense.search("w", query, MODEL_ID, k)
            assert ids.tolist() == [p.id for p in points]  # same ids, same order
            np.testing.assert_allclose(scores, [p.score for p in points], rtol=0, atol=1e-6)


def test_equal_scores_rank_by_chunk_id_also_across_the_cut(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    vectors = _unit(rng, 500, 16) * np.float32(0.1)  # far from the query direction below...
    direction = np.zeros(16, dtype=np.float32)
    direction[0] = 1
    tied = [417, 3, 250, 99, 12, 480, 7]  # ...but these rows point exactly along it: score 1, a 7-way tie
    vectors[:, 0] = -np.abs(vectors[:, 0])
    vectors[tied] = direction
    vectors[200] = 0  # a zero row scores 0, as in Qdrant
    dense = DenseStore()
    dense.ensure("w", *_write_build(tmp_path, "20260101T000000-aaaaaa", vectors))
    for k in (1, 3, 7, 9):
        ids, scores = dense.search("w", direction * 3, MODEL_ID, k)
        assert ids[:7].tolist() == sorted(tied)[:k]  # the tie cut by k keeps the lowest ids
        assert np.all(scores[:min(k, 7)] == pytest.approx(1.0))
    ids, scores = dense.search("w", direction, MODEL_ID, 500)
    assert ids[:7].tolist() == sorted(tied) and sorted(ids.tolist()) == list(range(500))
    assert scores[ids.tolist().index(200)] == 0.0
    for _ in range(3):  # the same answer every time
        assert np.array_equal(dense.search("w", direction, MODEL_ID, 5)[0], sorted(tied)[:5])


def test_a_build_is_memory_mapped_and_an_unnormalised_file_is_normalised_once(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    vectors = _unit(rng, 300, 24)
    dense = DenseStore()
    dense.ensure("mapped", *_write_build(tmp_path, "20260101T000000-aaaaaa", vectors))
    assert isinstance(dense._ready["mapped"].vectors.base, np.memmap)  # the file itself, not a copy
    raw = vectors * rng.uniform(0.5, 4, size=(300, 1)).astype(np.float32)  # e.g. a file from an older build
    raw[10] = np.nan
    folder = tmp_path / "old" / "dense"
    folder.mkdir(parents=True)
    np.save(folder / VECTORS, raw)
    dense.ensure("old", "20250101T000000-bbbbbb", folder, DenseInfo("test", MODEL_ID, 24, None, 300, 0, 0.0))
    held = dense._ready["old"].vectors
    assert not isinstance(held.base, np.memmap) and not held.flags.writeable
    query = _unit(rng, 1, 24)[0]
    ids, scores = dense.search("old", query, MODEL_ID, 300)
    clean = raw.copy()
    clean[10] = 0  # a non-finite row is a zero row
    ref_ids, ref_scores = _reference(clean, query, 300)
    assert np.array_equal(ids, ref_ids)
    np.testing.assert_allclose(scores, ref_scores, rtol=0, atol=1e-6)


def test_unit_rows_keeps_unit_rows_exactly() -> None:
    rng = np.random.default_rng(9)
    vectors = _unit(rng, 50, 8)
    assert unit_rows(vectors) is vectors
    mixed = vectors.copy()
    mixed[4] *= 3
    mixed[6] = 0
    fixed = unit_rows(mixed)
    assert fixed is not mixed and np.array_equal(np.delete(fixed, 4, axis=0), np.delete(mixed, 4, axis=0))
    np.testing.assert_allclose(fixed[4], vectors[4], atol=1e-6)


def test_build_layer_stores_unit_rows(dense_ws: Workspace) -> None:
    folder = load_index(dense_ws.wiki("motoring")).folder / "dense"
    vectors = np.load(folder / VECTORS)
    assert vectors.dtype == np.float32 and vectors.shape == (2, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-6)


def test_a_new_build_replaces_the_previous_one(tmp_path: Path) -> None:
    rng = np.random.default_rng(13)
    first, second, other = _unit(rng, 400, 16), _unit(rng, 600, 16), _unit(rng, 100, 16)
    dense = DenseStore()
    dense.ensure("w", *_write_build(tmp_path, "20260101T000000-aaaaaa", first))
    dense.ensure("x", *_write_build(tmp_path, "20260101T000000-cccccc", other))
    old = weakref.ref(dense._ready["w"].vectors)
    dense.ensure("w", *_write_build(tmp_path, "20260102T000000-bbbbbb", second))
    assert dense._ready["w"].build_id == "20260102T000000-bbbbbb" and dense._ready["x"].vectors is not None
    query = _unit(rng, 1, 16)[0]
    assert np.array_equal(dense.search("w", query, MODEL_ID, 10)[0], _reference(second, query, 10)[0])
    assert np.array_equal(dense.search("x", query, MODEL_ID, 10)[0], _reference(other, query, 10)[0])
    # a query that still holds the first build's passages gets the first build's hits, never the second's
    assert np.array_equal(dense.search("w", query, MODEL_ID, 10, build_id="20260101T000000-aaaaaa")[0],
                          _reference(first, query, 10)[0])
    dense.ensure("w", *_write_build(tmp_path, "20260103T000000-dddddd", first))
    gc.collect()
    assert old() is None  # the build before the previous one is gone
    with pytest.raises(KeyError, match="no longer served"):
        dense.search("w", query, MODEL_ID, 10, build_id="20260101T000000-aaaaaa")


def test_searches_from_several_threads_while_new_builds_are_ensured(tmp_path: Path) -> None:
    rng = np.random.default_rng(17)
    builds = [_write_build(tmp_path, f"2026010{i}T000000-aaaaaa", _unit(rng, 2000 + 500 * i, 32))
              for i in range(1, 5)]
    queries = _unit(rng, 8, 32)
    expected = {b[0]: [_reference(np.load(b[1] / VECTORS), q, 20) for q in queries] for b in builds}
    dense = DenseStore()
    dense.ensure("w", *builds[0])
    stop, errors, seen = threading.Event(), [], set()

    def reader() -> None:
        try:
            while not stop.is_set():
                for i, q in enumerate(queries):
                    ids, scores = dense.search("w", q, MODEL_ID, 20)
                    # each answer is wholly one build's: never a mix of two
                    match = [b for b, refs in expected.items() if np.array_equal(ids, refs[i][0])]
                    assert len(match) == 1, "an answer matching no single build"
                    np.testing.assert_allclose(scores, expected[match[0]][i][1], rtol=0, atol=1e-6)
                    seen.add(match[0])
        except Exception as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    for round_ in range(12):
        time.sleep(0.02)
        dense.ensure("w", *builds[(round_ + 1) % len(builds)])
    time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors[0]
    assert len(seen) >= 2  # the readers did see builds swap under them
    assert list(dense._ready) == ["w"] and dense._ready["w"].build_id == builds[12 % len(builds)][0]


def test_a_query_from_another_model_or_dimension_is_refused(tmp_path: Path) -> None:
    rng = np.random.default_rng(19)
    dense = DenseStore()
    dense.ensure("w", *_write_build(tmp_path, "20260101T000000-aaaaaa", _unit(rng, 10, 8)))
    with pytest.raises(DenseMismatch, match="built with test-model .8 dimensions.*other-model .8 dimensions"):
        dense.search("w", np.ones(8, dtype=np.float32), "other-model", 5)
    with pytest.raises(DenseMismatch, match="built with test-model .8 dimensions.*test-model .16 dimensions"):
        dense.search("w", np.ones(16, dtype=np.float32), MODEL_ID, 5)
    with pytest.raises(ValueError, match="not finite"):
        dense.search("w", np.full(8, np.nan, dtype=np.float32), MODEL_ID, 5)


def test_an_empty_build_returns_no_hits(tmp_path: Path) -> None:
    dense = DenseStore()
    dense.ensure("w", *_write_build(tmp_path, "20260101T000000-aaaaaa", np.empty((0, 8), dtype=np.float32)))
    ids, scores = dense.search("w", np.ones(8, dtype=np.float32), MODEL_ID, 5)
    assert ids.dtype == np.int64 and len(ids) == len(scores) == 0


def test_the_embedded_store_does_not_import_qdrant_client(tmp_path: Path) -> None:
    folder = tmp_path / "dense"
    folder.mkdir()
    np.save(folder / VECTORS, np.eye(4, dtype=np.float32))
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import sys
        import numpy as np
        from wikirag.dense import DenseInfo, store
        s = store()
        s.ensure("w", "20260101T000000-aaaaaa", __import__("pathlib").Path({str(folder)!r}),
                 DenseInfo("m", "m", 4, None, 4, 0, 0.0))
        print(s.search("w", np.array([0, 0, 1, 0], dtype=np.float32), "m", 2)[0].tolist(),
              "qdrant_client" in sys.modules)
    """)], check=False, capture_output=True, text=True, env={"PATH": "", "QDRANT_URL": ""},
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[2,", "0]", "False"]


def test_with_a_server_url_queries_go_through_qdrant_client(tmp_path: Path, monkeypatch) -> None:
    qdrant_client = pytest.importorskip("qdrant_client")
    real = qdrant_client.QdrantClient
    made: list[dict] = []

    def server(**kwargs):  # stands in for a server: qdrant-client's local engine, same API
        made.append(kwargs)
        return real(":memory:")

    monkeypatch.setattr(qdrant_client, "QdrantClient", server)
    monkeypatch.setenv("QDRANT_URL", "http://qdrant.example:6333")
    monkeypatch.setenv("QDRANT_API_KEY", "secret")
    monkeypatch.setattr(dense_mod, "_STORE", None)
    served = store()
    assert made == [{"url": "http://qdrant.example:6333", "api_key": "secret", "timeout": dense_mod.SERVER_TIMEOUT,
                     "check_compatibility": False}] and served.client is not None
    rng = np.random.default_rng(23)
    builds = [_write_build(tmp_path, f"2026010{i}T000000-aaaaaa", _unit(rng, 300, 16)) for i in range(1, 4)]
    for b in builds:
        assert served.ensure("w", *b) == f"wikirag__w__{b[0]}"
    names = sorted(c.name for c in served.client.get_collections().collections)
    assert names == [f"wikirag__w__{b[0]}" for b in builds[1:]]  # on a server the newest two are kept
    query = _unit(rng, 1, 16)[0]
    ids, scores = served.search("w", query, MODEL_ID, 10)
    ref_ids, ref_scores = _reference(np.load(builds[2][1] / VECTORS), query, 10)
    assert ids.dtype == np.int64 and np.array_equal(ids, ref_ids)
    np.testing.assert_allclose(scores, ref_scores, rtol=0, atol=1e-6)
    with pytest.raises(DenseMismatch):
        served.search("w", np.ones(8, dtype=np.float32), MODEL_ID, 10)
    # the second stage's cosines of given passages come from the server's points, as the search's do
    np.testing.assert_allclose(served.similarity("w", query, ref_ids[::-1]), ref_scores[::-1], rtol=0, atol=1e-6)
    monkeypatch.setattr(dense_mod, "_STORE", None)  # the next test gets an embedded store again


def test_short_texts_are_cut_sooner_and_kept_apart_from_full_ones() -> None:
    from wikirag import embeddings

    sentence = "For filter coffee, aim for 90–96 °C at the kettle."
    long = "Water temperature matters. " + "Hotter water extracts faster and lighter roasts need it. " * 30
    full, cut = embeddings.recent([sentence, long]), embeddings.recent([sentence, long], short=True)
    assert float(full[0] @ cut[0]) > 0.9999  # a sentence under SHORT_TOKENS is embedded whole
    assert float(full[1] @ cut[1]) < 0.999  # a long text is cut at SHORT_TOKENS word pieces
    assert embeddings.recent([long])[0] @ full[1] > 0.9999  # the full vector is not replaced by the cut one


def _local_server(monkeypatch):
    """``QDRANT_URL`` set, and where the server would be, qdrant-client's local engine (the same API and
    calls): one engine for every client made, as every process talks to the same server."""
    qdrant_client = pytest.importorskip("qdrant_client")
    engine = qdrant_client.QdrantClient(":memory:")
    monkeypatch.setattr(qdrant_client, "QdrantClient", lambda **kwargs: engine)
    monkeypatch.setenv("QDRANT_URL", "http://qdrant.example:6333")
    monkeypatch.setattr(dense_mod, "_STORE", None)
    return engine


def test_a_build_uploads_its_vectors_to_the_server_and_a_short_collection_is_completed(
        home: Path, monkeypatch) -> None:
    engine = _local_server(monkeypatch)
    make_wiki(home, "motoring", {"car.md": CAR, "roses.md": GARDEN}, extra="layers:\n  dense: {}\n")
    (home / "rags" / "motoring.yaml").write_text("sensitivity: public\nwikis: [motoring]\n")
    ws = Workspace(home, recheck_seconds=0)
    steps: list[tuple[str, int, int]] = []
    report = build(ws.wiki("motoring"), progress=lambda *step: steps.append(step))
    assert report.warnings == [] and ("uploading", 2, 2) in steps
    name = f"wikirag__motoring__{report.build_id}"
    # filled by the build, before any query
    assert [c.name for c in engine.get_collections().collections] == [name]
    assert engine.count(name, exact=True).count == report.chunks == 2
    # a collection left short (another process's upload cut off) is completed by the next process before
    # it is searched, not served half full
    engine.delete(name, points_selector=[1])
    monkeypatch.setattr(dense_mod, "_STORE", None)  # the next process, on the same server
    found = search(ws, "motoring", PARAPHRASE, clearance="public")
    assert found.passages[0].path == "car.md" and not found.warnings
    assert engine.count(name, exact=True).count == 2
    monkeypatch.setattr(dense_mod, "_STORE", None)


def test_with_the_server_down_queries_answer_with_bm25_and_say_so(dense_ws: Workspace, monkeypatch) -> None:
    """A real socket that accepts connections and never answers: the first query waits for the timeout,
    warns and answers by BM25; the next do not call the server again for SERVER_RETRY seconds; a build
    is built and says its vectors are not uploaded."""
    import socket

    pytest.importorskip("qdrant_client")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    monkeypatch.setattr(dense_mod, "SERVER_TIMEOUT", 1)
    monkeypatch.setenv("QDRANT_URL", f"http://user:pw@127.0.0.1:{listener.getsockname()[1]}")
    monkeypatch.setattr(dense_mod, "_STORE", None)
    try:
        question = "how often should the engine oil be replaced"
        first = search(dense_ws, "motoring", question, clearance="public")
        assert first.passages and first.passages[0].path == "car.md"
        assert [c.layer for c in first.passages[0].contributions] == ["bm25"]
        assert len(first.warnings) == 1
        warning = first.warnings[0]
        assert warning.startswith("dense layer of motoring unavailable (the Qdrant server at http://127.0.0.1:")
        assert "searched with BM25 only" in warning and "pw" not in warning and "QDRANT_URL" in warning
        calls = len(accepted)
        assert calls >= 1
        second = search(dense_ws, "motoring", question, clearance="public")
        assert second.warnings == first.warnings and len(accepted) == calls  # not called again
        # the CLI prints the warning and still answers
        out = CliRunner().invoke(cli, ["--home", str(dense_ws.home), "query", "motoring", question])
        assert out.exit_code == 0 and "car.md" in out.stdout and "unavailable" in out.stderr
        # a build while the server is down is built, and says its vectors are not uploaded yet
        (dense_ws.home / "wikis" / "motoring" / "car.md").write_text(CAR + "\nCheck the tyre pressure monthly.\n")
        monkeypatch.setattr(dense_mod, "_STORE", None)
        report = build(dense_ws.wiki("motoring"))
        assert report.state == "built" and len(report.warnings) == 1
        assert report.warnings[0].startswith("dense layer not uploaded: the Qdrant server at")
    finally:
        listener.close()
        for conn in accepted:
            conn.close()
        monkeypatch.setattr(dense_mod, "_STORE", None)
