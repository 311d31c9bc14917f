"""Follow-ups: the offline rewrite, answers with history, the CLI's conversation, and the condensing call
to a real (small, local) OpenAI-compatible HTTP server."""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from wikirag import Workspace, build
from wikirag.answers import answer
from wikirag.cli import cli
from wikirag.followup import CONDENSE_SYSTEM, Exchange, depends, recent, rewrite

from .conftest import make_wiki

PAGES = {
    "french-press.md": "# French press\n\nUse 30 g of coarse coffee for 500 g of water.\n\n"
                       "## The steep\n\nWait 4 minutes, then press the plunger slowly.\n",
    "cold-brew.md": "# Cold brew\n\nCold brew steeps for 12 hours. Steep it in the fridge; a steep at room "
                    "temperature is fine too. Steeping longer makes it bitter.\n\n"
                    "## Keeping\n\nCold brew keeps for 7 days in the fridge.\n",
    "water.md": "# Water and cleaning\n\nDescale the kettle monthly with hard water, every 3 months with soft water.\n",
    "grinders.md": "# Grinders\n\nA burr grinder gives even coffee particles. Clean it with rice-free tablets.\n",
    "espresso.md": "# Espresso\n\nPull 36 g of espresso from 18 g of coffee in 25 to 30 seconds.\n",
}


@pytest.fixture
def coffee(tmp_path: Path) -> Workspace:
    home = tmp_path / "ws"
    (home / "rags").mkdir(parents=True)
    make_wiki(home, "coffee", PAGES)
    (home / "rags" / "cafe.yaml").write_text("name: cafe\nsensitivity: public\nwikis: [coffee]\n")
    ws = Workspace(home, recheck_seconds=0)
    build(ws.wiki("coffee"))
    return ws


def _shares(common: set[str]):
    return lambda terms: {t: (0.5 if t in common else 0.01) for t in terms}


@pytest.mark.parametrize(("question", "needs"), [
    ("And how long does it steep?", True),
    ("What about Fridays?", True),
    ("How about the espresso?", True),
    ("Is it safe?", True),
    ("Who do I page?", True),        # "page" is common in these wikis: no topic of its own
    ("My tap water is very hard. How often should I descale?", False),
    ("How long does cold brew keep in the fridge?", False),
    ("Is there a burr grinder page?", False),  # "is there" points at nothing
])
def test_which_questions_need_the_turn_before(question: str, needs: bool) -> None:
    assert depends(question, _shares({"coffe", "water", "page"})) is needs


def test_a_question_of_common_words_only_needs_the_turn_before() -> None:
    common = _shares({"ratio", "grind"})
    assert depends("Which grind ratio?", common)
    assert not depends("Which grind ratio?", _shares({"grind"}))  # "ratio" rare: a topic of its own
    # longer, but every telling word is in what the earlier turn found: it goes on with that topic
    earlier = Exchange("How does the payment service capture a card?", "How does the payment service capture a card?",
                       "It captures at shipping [1].", "Payments", "Cards are captured at shipping. Refunds are "
                       "allowed for 180 days after capture.")
    assert depends("How long after capture are refunds allowed?", _shares(set()), earlier)
    assert not depends("How often should I descale the kettle?", _shares(set()), earlier)


def test_the_rewrite_carries_the_topic_and_leaves_standalone_questions_alone() -> None:
    shares = _shares({"coffe", "water"})
    first = Exchange("How much coffee goes into a French press?", "How much coffee goes into a French press?",
                     "Use 30 g of coarse coffee in the French press [1].")
    assert rewrite("And how long does it steep?", [first], shares) == \
        "How long does it steep? (French press)"
    assert rewrite("What about Fridays?", [Exchange("When is the release window?", "When is the release window?",
                                                    "Monday to Thursday [1].")], shares) == \
        "What about Fridays? (When is the release window)"  # the earlier question, asked of Fridays
    standalone = "My tap water is very hard. How often should I descale?"
    assert rewrite(standalone, [first], shares) == standalone
    assert rewrite("And how long does it steep?", [], shares) == "And how long does it steep?"  # nothing before it


def test_a_chain_of_follow_ups_keeps_its_topic() -> None:
    shares = _shares({"coffe", "water"})
    turns = [Exchange("How long does cold brew keep?", "How long does cold brew keep?", "Cold brew keeps 7 days [1].")]
    second = rewrite("And in the fridge?", turns, shares)
    assert "cold brew" in second.lower()
    turns.append(Exchange("And in the fridge?", second, "In the fridge [1]."))
    assert "cold brew" in rewrite("Does it go bitter?", turns, shares).lower()


def test_recent_keeps_the_newest_turns_within_the_token_budget() -> None:
    turns = [Exchange(f"question {i}", f"question {i}", "word " * 200 + "[1]") for i in range(20)]
    kept = recent(turns, budget=700)
    assert [t.question for t in kept] == ["question 17", "question 18", "question 19"]
    assert "[1]" not in kept[-1].answer


def test_answer_with_history_searches_the_standalone_question(coffee: Workspace) -> None:
    alone = answer(coffee, "cafe", "And how long does it steep?", clearance="public").result
    assert alone.searched == alone.question and alone.rewrite == "none"
    assert alone.citations[0].path == "cold-brew.md"  # without the conversation "it" is the wrong brew
    first = answer(coffee, "cafe", "How much coffee goes into a French press?", clearance="public").result
    follow = answer(coffee, "cafe", "And how long does it steep?", clearance="public",
                    history=[Exchange(first.question, first.searched, first.text)]).result
    assert follow.rewrite == "offline" and "French press" in follow.searched
    assert follow.question == "And how long does it steep?"
    assert follow.citations[0].path == "french-press.md" and "4 minutes" in follow.text
    assert follow.rewrite_seconds < 1 and follow.to_dict()["searched"] == follow.searched


def test_cli_ask_runs_the_questions_as_one_conversation(coffee: Workspace) -> None:
    args = ["--home", str(coffee.home), "ask", "cafe", "How much coffee goes into a French press?",
            "And how long does it steep?"]
    out = CliRunner().invoke(cli, [*args, "--json"])
    assert out.exit_code == 0, out.output
    turns = [json.loads(line) for line in out.stdout.splitlines()]
    assert [t["question"] for t in turns] == args[-2:]
    assert turns[0]["searched"] == turns[0]["question"]
    assert "French press" in turns[1]["searched"] and turns[1]["citations"][0]["path"] == "french-press.md"
    text = CliRunner().invoke(cli, args)
    assert text.exit_code == 0
    assert "searched: How long does it steep? (" in text.stdout and "French press)" in text.stdout
    assert "> And how long does it steep?" in text.stdout


class _Model(http.server.BaseHTTPRequestHandler):
    """An OpenAI-style chat server: a condensing request gets ``rewrite`` (or a 500 when it is None), an
    answer request an answer citing [1]; every request body is kept."""

    requests: list[dict] = []
    rewrite: str | None = "How long do I steep coffee in a French press?"

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        condensing = body["messages"][0]["content"] == CONDENSE_SYSTEM
        if condensing and self.rewrite is None:
            self.send_response(500)
            self.end_headers()
            return
        text = self.rewrite if condensing else "Leave it alone for 4 minutes [1]."
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for part, finish in ((text[:10], None), (text[10:], None), ("", "stop")):
            chunk = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m",
                     "choices": [{"index": 0, "delta": {"content": part} if part else {}, "finish_reason": finish}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")


@pytest.fixture
def model_server():
    _Model.requests = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Model)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()


def test_a_litellm_model_condenses_the_follow_up_and_sees_the_history(coffee: Workspace, model_server: str,
                                                                      monkeypatch) -> None:
    monkeypatch.setattr(_Model, "rewrite", "How long do I steep coffee in a French press?")
    first = Exchange("How much coffee goes into a French press?", "How much coffee goes into a French press?",
                     "Use 30 g of coarse coffee [1].")
    result = answer(coffee, "cafe", "And how long do I leave it?", clearance="public", model="openai/m",
                    api_base=model_server, history=[first]).result
    assert result.error is None, result.error
    assert result.rewrite == "model" and result.searched == "How long do I steep coffee in a French press?"
    condense, reply = _Model.requests
    assert "French press" in condense["messages"][1]["content"] and "And how long do I leave it?" in \
        condense["messages"][1]["content"]
    roles = [m["role"] for m in reply["messages"]]
    assert roles == ["system", "user", "assistant", "user"]  # the earlier turn, then passages and question
    assert reply["messages"][2]["content"] == "Use 30 g of coarse coffee."  # its [n] named other passages
    assert "(In full: How long do I steep coffee in a French press?)" in reply["messages"][3]["content"]
    assert result.citations[0].path == "french-press.md"


def test_a_failed_condensing_call_falls_back_to_the_offline_rewrite(coffee: Workspace, model_server: str,
                                                                   monkeypatch) -> None:
    monkeypatch.setattr(_Model, "rewrite", None)
    first = Exchange("How much coffee goes into a French press?", "How much coffee goes into a French press?",
                     "Use 30 g of coarse coffee in the French press [1].")
    result = answer(coffee, "cafe", "And how long does it steep?", clearance="public", model="openai/m",
                    api_base=model_server, history=[first]).result
    assert result.rewrite == "offline" and "French press" in result.searched
    assert any("could not be rewritten by the model" in w for w in result.warnings)
    assert result.error is None and "4 minutes" in result.text
