"""The dense layer with the real offline model and Qdrant's embedded engine."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from click.testing import CliRunner

from wikirag import BuildError, Workspace, build, status
from wikirag.cli import cli
from wikirag.dense import store
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
    assert [c.layer for c in hybrid.passages[0].contributions] == ["dense"]
    dense_only = search(dense_ws, "motoring", PARAPHRASE, clearance="public", layers=("dense",))
    assert dense_only.passages[0].path == "car.md" and 0 < dense_only.passages[0].score <= 1


def test_only_new_or_changed_passages_are_embedded(dense_ws: Workspace, home: Path) -> None:
    first = load_index(dense_ws.wiki("motoring")).dense
    assert (first.model, first.dim, first.embedded, first.reused) == ("minilm", 384, 2, 0)
    (home / "wikis/motoring/tyres.md").write_text("# Tyres\n\nCheck tyre pressure monthly, when the tyres are cold.\n")
    build(dense_ws.wiki("motoring"))
    second = load_index(dense_ws.wiki("motoring")).dense
    assert (second.embedded, second.reused) == (1, 2)
    hits = search(dense_ws, "motoring", "inflating wheels", clearance="public", layers=("dense",))
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
    search(dense_ws, "motoring", PARAPHRASE, clearance="public")  # loads the layer into Qdrant
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
    time.sleep(3)  # the reader has loaded the index (files and its own Qdrant) and is querying
    (home / "wikis/motoring/tyres.md").write_text("# Tyres\n\nCheck tyre pressure monthly, when the tyres are cold.\n")
    report = build(dense_ws.wiki("motoring"))
    assert report.state == "built"
    out, err = reader.communicate(timeout=90)
    assert reader.returncode == 0, err
    assert "saw the new build" in out
