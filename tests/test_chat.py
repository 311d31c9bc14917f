"""The chat page as a conversation (streamlit.testing.AppTest over the built example wikis): a follow-up
is searched with the turn before it and says so, the conversation is kept and resumed by a new session,
renamed, exported and deleted, feedback is recorded, and questions about the knowledge base are answered."""

from __future__ import annotations

import re
from pathlib import Path

from wikirag import Workspace, feedback
from wikirag.conversations import ConversationStore

from .test_app import INTERNAL_USER, PUBLIC, _app, _app_env, _text, app_home  # noqa: F401 - fixtures


def _ask(at, question: str):
    at.chat_input[0].set_value(question).run()
    assert not at.exception, at.exception
    return at


def test_a_follow_up_is_answered_in_its_conversation_and_resumed_after_a_reload(app_home: Path) -> None:
    user = PUBLIC.__class__("chat-follow-up", PUBLIC.clearance)
    at = _app(app_home, user, "pages/chat.py")
    at.selectbox[0].select("public-help").run()
    _ask(at, "How much coffee goes into a French press?")
    _ask(at, "And how long do I leave it to steep?")
    assert [m.name for m in at.chat_message] == ["user", "assistant", "user", "assistant"]
    follow = at.chat_message[3]
    assert "4 minutes" in follow.markdown[0].value
    assert any(c.value == "Searched: How long do I leave it to steep? (French press)" for c in follow.caption)
    # the sidebar lists it under its first question; a new session (a reload, another tab) resumes it
    assert any(b.label == "How much coffee goes into a French press?" for b in at.sidebar.button)
    again = _app(app_home, user, "pages/chat.py")
    assert [m.name for m in again.chat_message] == ["user", "assistant", "user", "assistant"]
    assert "Conversation: **How much coffee goes into a French press?**" in again.caption[0].value
    # a third turn goes on from the kept conversation, not from scratch
    _ask(again, "How long does it keep?")
    assert len(again.chat_message) == 6
    kept = ConversationStore(app_home).conversations(user.name)
    assert [(k.title, k.turns) for k in kept] == [("How much coffee goes into a French press?", 3)]


def test_rename_new_and_delete(app_home: Path) -> None:
    user = PUBLIC.__class__("chat-rename", PUBLIC.clearance)
    at = _app(app_home, user, "pages/chat.py")
    _ask(at, "How long does cold brew keep?")
    conv = ConversationStore(app_home).current(user.name)
    at.sidebar.text_input(key=f"rename-{conv}").input("Cold brew notes").run()
    assert ConversationStore(app_home).conversations(user.name)[0].title == "Cold brew notes"
    assert "**Cold brew notes**" in at.caption[0].value
    at.sidebar.button(key="conv-new").click().run()
    assert not at.chat_message and not any("Conversation:" in c.value for c in at.caption)
    _ask(at, "How hot should the water be for a V60?")
    titles = [k.title for k in ConversationStore(app_home).conversations(user.name)]
    assert titles == ["How hot should the water be for a V60?", "Cold brew notes"]
    at.sidebar.button(key=f"conv-{conv}").click().run()  # open the first one again
    assert "**Cold brew notes**" in at.caption[0].value and len(at.chat_message) == 2
    at.sidebar.button(key="conv-delete").click().run()
    assert [k.title for k in ConversationStore(app_home).conversations(user.name)] == [titles[0]]
    assert not at.chat_message


def test_feedback_is_kept_with_the_turn_and_a_down_vote_is_a_gap(app_home: Path) -> None:
    user = INTERNAL_USER.__class__("chat-feedback", INTERNAL_USER.clearance)
    at = _app(app_home, user, "pages/chat.py")
    at.selectbox[0].select("engineering").run()
    _ask(at, "How fast must a SEV2 page be acknowledged?")
    store = ConversationStore(app_home)
    conv = store.current(user.name)
    turn = store.load(Workspace(app_home), user.name, user.clearance, conv).turns[0]
    at.feedback(key=f"thumbs-{turn.id}").set_value(0).run()
    at.text_input(key=f"comment-{turn.id}").input("It should say who acknowledges it").run()
    assert not at.exception
    kept = store.load(Workspace(app_home), user.name, user.clearance, conv).turns[0]
    assert (kept.feedback, kept.comment) == ("down", "It should say who acknowledges it")
    gaps = [g for g in feedback.gaps(Workspace(app_home), "internal", "engineering-handbook")
            if g.question == turn.result.question]  # the second vote (with its comment) replaced the first
    assert [(g.kind, g.comment) for g in gaps] == [("down", "It should say who acknowledges it")]
    # asked in an internal composition: not shown to a public user, even under the public wiki it searched
    assert all(g.question != turn.result.question for g in feedback.gaps(Workspace(app_home), "public"))


def test_a_question_about_the_knowledge_base_lists_only_what_the_user_may_see(app_home: Path) -> None:
    at = _app(app_home, PUBLIC.__class__("chat-about", PUBLIC.clearance), "pages/chat.py")
    _ask(at, "What is this knowledge base about?")
    text = at.chat_message[1].markdown[0].value
    assert "Coffee brewing" in text and "wikirag user guide" in text and "[1]" in text
    shown = _text(at)
    assert "engineering-handbook" not in shown and "security-runbooks" not in shown


def _citations(message) -> dict[int, str]:
    """The citations shown under an answer: their popovers' labels "[n] wiki/path:line", by n."""
    labels = [b.proto.popover.label for row in message.children.values() if row.type == "flex_container"
              for column in row.children.values() if column.type == "column"
              for b in column.children.values() if b.type == "popover"]
    return {int(n): where for n, where in (re.fullmatch(r"\[(\d+)\] (\S+)", label).groups() for label in labels)}


def test_a_citation_reached_over_a_link_says_which_link_under_the_citations(app_home: Path) -> None:
    user = INTERNAL_USER.__class__("chat-via", INTERNAL_USER.clearance)
    at = _app(app_home, user, "pages/chat.py")
    at.selectbox[0].select("systems").run()  # northwind-systems has the graph layer
    assert at.text_input[0].value == "extractive"
    _ask(at, "When does the backup of the Falcon database run?")
    message = at.chat_message[1]
    answer = message.markdown[0].value
    assert "02:30 UTC" in answer
    cited = _citations(message)
    in_answer = {int(n) for n in re.findall(r"\[(\d+)\]", answer)}
    # the captions right under the citations (not those inside a popover or the passages' expander)
    under = [c.value for c in message.children.values() if c.type == "caption" and "Reached through" in c.value]
    hops = [m.groups() for m in (re.fullmatch(r"\[(\d+)\] Reached through `([^`]+)` on (\S+):(\d+) → (\S+)", c)
                                 for c in under) if m]
    assert len(hops) == len(under), under  # each one is "[n] Reached through `link` on wiki/path:line → wiki/path"
    hop = ("northwind-systems/projects/falcon.md", "northwind-systems/services/cobalt-db.md")
    falcon = [(int(n), link, int(line)) for n, link, source, line, target in hops if (source, target) == hop]
    assert falcon, under
    n, link, line = falcon[0]
    assert link.startswith("[[cobalt-db")  # the link as written on Falcon's page, at the line it names
    page = (app_home / "wikis" / "northwind-systems" / "projects" / "falcon.md").read_text(encoding="utf-8")
    assert link in page.splitlines()[line - 1]
    assert n in in_answer and n in cited and cited[n].startswith("northwind-systems/services/cobalt-db.md:"), (n, cited)
    # a question answered directly on its page, in the same graph composition: that page is not shown as
    # reached through a link (a team page its On-call links to may be, as the question names Cobalt)
    at.sidebar.button(key="conv-new").click().run()
    _ask(at, "How many connections per client pool does Cobalt DB allow?")
    direct = at.chat_message[1]
    assert "400 connections" in direct.markdown[0].value and _citations(direct)
    shown = [c.value for c in direct.children.values() if c.type == "caption" and "Reached through" in c.value]
    assert not [c for c in shown if c.endswith("→ northwind-systems/services/cobalt-db.md")], shown


def test_a_long_conversation_shows_its_last_turns_and_the_earlier_ones_on_request(app_home: Path) -> None:
    """Every page run draws every turn shown, so a conversation of 25 turns shows its last 20 and a button
    for the 5 before them; the export still holds all 25."""
    from wikirag.answers import answer

    user = PUBLIC.__class__("chat-long", PUBLIC.clearance)
    ws, store = Workspace(app_home), ConversationStore(app_home)
    conv = store.new(user.name, "public-help")
    for i in range(25):
        result = answer(ws, "public-help", f"How long does cold brew keep? ({i})", clearance=user.clearance,
                        model="extractive").result
        store.add_turn(user.name, conv, result, "public")
    at = _app(app_home, user, "pages/chat.py")
    assert len(at.chat_message) == 40
    assert at.chat_message[0].markdown[0].value == "How long does cold brew keep? (5)"
    button = next(b for b in at.button if b.label == "Show 5 earlier turns")
    button.click().run()
    assert len(at.chat_message) == 50 and at.chat_message[0].markdown[0].value == "How long does cold brew keep? (0)"
    assert store.export_markdown(ws, user.name, user.clearance, conv).count("## How long does cold brew keep?") == 25
