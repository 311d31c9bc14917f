"""Chat with a composition (or an ad-hoc set of wikis) at or below your clearance.

A Streamlit page script, not a module to import (importing it runs the page): the router registers
it with st.navigation and Streamlit runs it top to bottom on every rerun (see ``wikirag.webapp``).
"""

import streamlit as st

from wikirag import catalog
from wikirag.answers import answer
from wikirag.errors import WikiragError
from wikirag.webapp import ui

user = ui.require_user()
ws = ui.workspace()
ADHOC = "Ad hoc: pick wikis…"
# offered first: the user's last choice, else the workspace's default for their clearance (catalog.preferred)
last = ui.session_store().recall(user.name, "chat")
compositions = {c.name: c for c in catalog.preferred(catalog.visible_compositions(ws, user.clearance))}

st.title("Chat")
left, right = st.columns([2, 1])
options = [*compositions, ADHOC]
choice = left.selectbox("Composition", options, index=options.index(last) if last in options else 0,
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
        st.stop()
    target = ws.adhoc(picked, user.clearance)
    key = "chat:adhoc:" + ",".join(sorted(picked))
else:
    target, key = choice, f"chat:{choice}"

history = st.session_state.setdefault(key, [])
for i, turn in enumerate(history):
    with st.chat_message("user"):
        st.markdown(turn["question"])
    with st.chat_message("assistant"):
        st.markdown(turn["result"].text)
        ui.show_result(turn["result"], f"{key}-{i}")

question = st.chat_input("Ask a question")
if question:
    with st.chat_message("user"):
        st.markdown(question)
    with st.chat_message("assistant"):
        try:
            with st.spinner("Searching…"):
                stream = answer(ws, target, question, clearance=user.clearance, model=model.strip() or None,
                                user=user.name)
        except WikiragError as exc:
            st.error(str(exc))
            st.stop()
        st.write_stream(stream)
        result = stream.result
        ui.show_result(result, f"{key}-{len(history)}")
    history.append({"question": question, "result": result})
