"""One question, two to four compositions side by side: answers, passages shared and unique, timings.

A Streamlit page script, not a module to import (importing it runs the page): the router registers
it with st.navigation and Streamlit runs it top to bottom on every rerun (see ``wikirag.webapp``).
"""

import streamlit as st

from wikirag import catalog
from wikirag.compare import Comparison, compare
from wikirag.errors import WikiragError
from wikirag.webapp import ui

user = ui.require_user()
ws = ui.workspace()
comps = catalog.preferred(catalog.visible_compositions(ws, user.clearance))
names = [c.name for c in comps]
store = ui.session_store()
last = store.recall(user.name, "compare")

st.title("Compare compositions")
if not names:
    st.info("No composition you may use: ask an administrator for one.")
    st.stop()
with st.form("compare"):
    if len(names) >= 2:
        # preselected: the user's last pair (or set), else the two that differ most in what they cover
        remembered = isinstance(last, list) and 2 <= len(last) <= 4 and set(last) <= set(names)
        chosen = st.multiselect("Compositions (2 to 4)", names, max_selections=4,
                                default=last if remembered else catalog.most_different(comps, names[0]))
        wikis: list[str] = []
    else:  # one composition: compare it with wikis of your choice
        chosen = names
        visible = [w.name for w in catalog.visible_wikis(ws, user.clearance)]
        outside = [w for w in visible if w not in comps[0].names]
        wikis = st.multiselect(f"Compare **{names[0]}** with these wikis (ad hoc)", visible,
                               default=(outside or visible)[:1])
    model = st.text_input("Model", value=ui.default_model())
    question = st.text_input("Question")
    go = st.form_submit_button("Compare", type="primary")

if go:
    targets = [*chosen, *([ws.adhoc(wikis, user.clearance)] if wikis else [])]
    if not 2 <= len(targets) <= 4 or not question.strip():
        st.warning("Pick two to four compositions (or a composition and some wikis) and ask a question.")
        st.stop()
    if len(names) >= 2:
        store.remember(user.name, "compare", list(chosen))
    results = {}
    columns = st.columns(len(targets))
    try:
        for (name, stream), column in zip(compare(ws, targets, question, clearance=user.clearance,
                                                            model=model.strip() or None, user=user.name),
                                          columns):
            with column:
                st.subheader(name)
                st.write_stream(stream)
                results[name] = stream.result
    except WikiragError as exc:
        st.error(str(exc))
        st.stop()
    st.session_state["comparison"] = Comparison(question, results)
    st.session_state["comparison_wikis"] = {name: tuple(t.names) if not isinstance(t, str) else
                                            tuple(ws.composition(t, user.clearance).names)
                                            for name, t in zip(results, targets)}

comparison = st.session_state.get("comparison")
if comparison is not None:
    shared = comparison.shared()
    st.divider()
    st.caption(f"“{comparison.question}” — {len(shared)} passage(s) found by more than one composition")
    listed = st.session_state.get("comparison_wikis", {})
    tops = comparison.tops(listed)
    with st.container(key="compare-why"):
        best = comparison.best(listed)
        if best:
            st.markdown(f"**Choose {best}** for this question: its answer quotes the passage nearest the question.")
        elif not any(t.answered for t in tops.values()):
            st.markdown("**No composition answers this question** from its passages.")
        for t in tops.values():
            where = (f"also in {', '.join(t.also_in)}" if t.also_in else f"only {t.composition} lists {t.passage.wiki}")
            st.markdown(f"- **{t.composition}**: top passage from **{t.passage.wiki}** ({where}) · "
                        f"{'answers' if t.answered else 'does not answer'} · similarity {t.similarity:.2f}")
    columns = st.columns(len(comparison.results))
    for (name, result), column in zip(comparison.results.items(), columns):
        with column:
            st.markdown(f"**{name}**")
            if not go:
                st.markdown(result.text)
            unique = sum(1 for n in range(len(result.passages)) if comparison.passage_key(result, n) not in shared)
            st.caption(f"{len(result.passages)} passages: {len(result.passages) - unique} shared, {unique} unique · "
                       f"retrieval {result.retrieval_seconds * 1000:.0f} ms · generation "
                       f"{result.generation_seconds:.2f} s")
            if result.routing:  # why one wiki's passages were preferred: P(wiki | question)
                st.caption("Routing: " + " · ".join(f"{r['wiki']} {r['weight']:.0%}" for r in
                                                    sorted(result.routing, key=lambda r: -r["weight"])))
            for n, p in enumerate(result.passages, start=1):
                tag = "shared" if comparison.passage_key(result, n - 1) in shared else "unique"
                with st.expander(f"[{n}] {tag} · {p.wiki}/{p.path}:{p.line}"):
                    ui.show_passage(p, n, f"cmp-{name}-{n}")
            if result.error:
                st.error(result.error)
