"""Chat with a composition (or an ad-hoc set of wikis) at or below your clearance, as a conversation.

Each question is answered with the conversation before it (a follow-up is searched as its standalone
form, shown under the answer: :mod:`wikirag.followup`). Conversations are kept on the server per user
(:mod:`wikirag.conversations`): the sidebar lists them, opens, renames, deletes and exports them, and a
reload or a new tab resumes the current one. Every kept turn is checked against the user's clearance as
it is now on every load; each answer takes a thumbs up or down with a comment (:mod:`wikirag.feedback`).

A Streamlit page script, not a module to import (importing it runs the page): the router registers
it with st.navigation and Streamlit runs it top to bottom on every rerun (see ``wikirag.webapp``).
"""

import streamlit as st

from wikirag import catalog, feedback
from wikirag.answers import answer
from wikirag.errors import NotFound, WikiragError
from wikirag.webapp import ui

user = ui.require_user()
ws = ui.workspace()
store = ui.conversation_store()
ADHOC = "Ad hoc: pick wikis…"
SHOWN_TURNS = 20  # turns of a conversation drawn on each run; "Show N earlier turns" draws them all
# offered first: the user's last choice, else the workspace's default for their clearance (catalog.preferred)
last = ui.session_store().recall(user.name, "chat")
compositions = {c.name: c for c in catalog.preferred(catalog.visible_compositions(ws, user.clearance))}

# the conversation shown: this tab's, else the user's current one (a reload, a new tab), else a new one
current = st.session_state.get("conversation", store.current(user.name))
kept = None
if current:
    try:
        kept = store.load(ws, user.name, user.clearance, current)
    except NotFound:
        current = None
st.session_state["conversation"] = current


def _open(conv_id: str | None) -> None:
    st.session_state["conversation"] = conv_id
    if conv_id:
        store.set_current(user.name, conv_id)


def _new() -> None:
    st.session_state["conversation"] = None
    store.set_current(user.name, None)


def _rename(conv_id: str) -> None:
    title = st.session_state.get(f"rename-{conv_id}", "")
    try:
        store.rename(user.name, conv_id, title)
    except WikiragError as exc:
        st.session_state["chat-error"] = str(exc)


def _delete(conv_id: str) -> None:
    store.delete(user.name, conv_id)
    if st.session_state.get("conversation") == conv_id:
        _new()


# the sidebar's conversations and the conversation's caption are filled at the end of the run (finish), so
# that a turn answered in this run is in them (its new title, its count, the export) without running the
# page a second time: under load that second run was half of the app's work per question
with st.sidebar:
    panel = st.container()


def finish() -> None:
    """Fill the sidebar's conversations and the caption from the conversation as it is now (call before
    every st.stop and at the end of the run)."""
    now = kept
    if current and (kept is None or kept.id != current):
        try:
            now = store.load(ws, user.name, user.clearance, current)
        except NotFound:
            now = None
    if now is not None:
        caption.caption(f"Conversation: **{now.title}** · {len([t for t in now.turns if not t.hidden])} turn(s)")
    with panel:
        st.subheader("Conversations")
        st.button("New conversation", icon=":material/add:", on_click=_new, key="conv-new", width="stretch")
        for summary in store.conversations(user.name, ws, user.clearance):
            here = summary.id == current
            st.button(summary.title, key=f"conv-{summary.id}", on_click=_open, args=(summary.id,), disabled=here,
                      icon=":material/chat_bubble:" if here else None, width="stretch")
        if now is not None:
            with st.expander("This conversation"):
                st.text_input("Title", value=now.title, key=f"rename-{now.id}", on_change=_rename, args=(now.id,))
                st.download_button("Export as markdown", store.export_markdown(ws, user.name, user.clearance, now.id),
                                   file_name=f"conversation-{now.id}.md", mime="text/markdown", key="conv-export",
                                   icon=":material/download:")
                st.button("Delete", key="conv-delete", on_click=_delete, args=(now.id,), icon=":material/delete:")


if "chat-error" in st.session_state:
    st.error(st.session_state.pop("chat-error"))

st.title("Chat")
caption = st.empty()
left, right = st.columns([2, 1])
options = [*compositions, ADHOC]
wanted = kept.composition if kept is not None and kept.composition in compositions else last
choice = left.selectbox("Composition", options, index=options.index(wanted) if wanted in options else 0,
                        format_func=lambda n: n if n == ADHOC else f"{n} — {compositions[n].spec.description}")
if choice != last:
    ui.session_store().remember(user.name, "chat", choice)
model = right.text_input("Model", value=ui.default_model(),
                         help="'extractive' (offline, verbatim sentences), 'local' (bundled small LLM), "
                              "or a LiteLLM model such as openai/gpt-4o-mini")
if choice == ADHOC:
    names = [w.name for w in catalog.visible_wikis(ws, user.clearance)]
    picked = st.multiselect("Wikis", names, default=names[:1])
    if not picked:
        st.info("Pick at least one wiki.")
        finish()
        st.stop()
    target = ws.adhoc(picked, user.clearance)
    level = target.level
else:
    target, level = choice, compositions[choice].level


def _vote(conv_id: str, turn) -> None:
    """The thumbs (and comment) of one turn: kept with the turn and recorded for the gaps view."""
    value = st.session_state.get(f"thumbs-{turn.id}")
    comment = st.session_state.get(f"comment-{turn.id}", "").strip()
    if value is None:
        return
    up = value == 1
    store.set_feedback(user.name, conv_id, turn.id, "up" if up else "down", comment)
    feedback.vote(ws.home, turn.result, user=user.name, level=turn.level, up=up, comment=comment, turn=turn.id)


def show_turn(conv_id: str, turn) -> None:
    result = turn.result
    with st.chat_message("user"):
        st.markdown(result.question)
    with st.chat_message("assistant"):
        st.markdown(result.text)
        show_below(conv_id, turn)


def show_below(conv_id: str, turn) -> None:
    """What an answer's text is followed by: the question it was searched as, the citations and passages,
    the thumbs and comment."""
    result = turn.result
    if result.searched and result.searched != result.question:
        st.caption(f"Searched: {result.searched}")
    ui.show_result(result, f"turn-{turn.id}")
    with st.container(key=f"feedback-{turn.id}", horizontal=True):
        kept_vote = {"up": 1, "down": 0}.get(turn.feedback or "")
        vote = st.feedback("thumbs", key=f"thumbs-{turn.id}", default=kept_vote, on_change=_vote,
                           args=(conv_id, turn))
        if vote is not None:
            st.text_input("Comment (optional)", value=turn.comment or "", key=f"comment-{turn.id}",
                          on_change=_vote, args=(conv_id, turn), label_visibility="collapsed",
                          placeholder="What was wrong or missing? (optional, Enter to send)")


if kept is not None:
    if kept.note:
        st.info(kept.note)
    shown = [turn for turn in kept.turns if not turn.hidden]
    earlier = 0 if st.session_state.get(f"all-turns-{kept.id}") else max(0, len(shown) - SHOWN_TURNS)
    if earlier:  # every run draws every turn shown: a long conversation shows its last SHOWN_TURNS
        st.button(f"Show {earlier} earlier turn{'s' if earlier > 1 else ''}", key=f"earlier-{kept.id}",
                  icon=":material/expand_less:", on_click=st.session_state.__setitem__,
                  args=(f"all-turns-{kept.id}", True))
    for turn in shown[earlier:]:
        show_turn(kept.id, turn)

question = st.chat_input("Ask a question")
if question:
    with st.chat_message("user"):
        st.markdown(question)
    with st.chat_message("assistant"):
        try:
            with st.spinner("Searching…"):
                stream = answer(ws, target, question, clearance=user.clearance, model=model.strip() or None,
                                user=user.name, history=kept.history(at_most=level) if kept is not None else [])
        except WikiragError as exc:
            st.error(str(exc))
            finish()
            st.stop()
        st.write_stream(stream)
        result = stream.result
        try:
            if current is None:
                raise NotFound("no conversation yet")
            turn_id = store.add_turn(user.name, current, result, level)
        except NotFound:  # the first turn, or the conversation was deleted in another tab: a new one
            current = store.new(user.name, choice if choice != ADHOC else target.name)
            turn_id = store.add_turn(user.name, current, result, level)
        _open(current)
        # the kept turn's citations and feedback, here (the next run shows it from the conversation, the same);
        # the conversation as it is now also fills the sidebar and caption (finish)
        kept = store.load(ws, user.name, user.clearance, current)
        turn = next((t for t in kept.turns if t.id == turn_id), None)
        if turn is not None and not turn.hidden:
            show_below(current, turn)
finish()
