"""The knowledge base: the wikis and compositions you may see, their pages, index status, rebuilds.

``?wiki=NAME&path=PAGE[&start=N&end=M]`` shows one page, with characters N to M (a citation)
highlighted in the page's flow and scrolled into view (a fixed script, :data:`CITED`). A wiki above
your clearance, or a path that is not one of its pages, is refused (and logged by the library) with the
same message as a page that does not exist.

With the app watching its sources (``wikirag app --watch``), the wikis table refreshes itself every
LIVE_SECONDS: each wiki's "updated N s ago" (its index's build time) and the watcher's build errors.

"Questions we could not answer" (:mod:`wikirag.feedback`): in a wiki's view (``?wiki=NAME``, opened with
``&gaps=1``) the questions its answers refused, cited unsupported or were voted down on, newest first, with
the count per week and the cited locations as links to the page view; on the main page, the count per wiki.
Only what the user's clearance covers is listed (:func:`wikirag.feedback.gaps` decides); a question is
shown as plain text, never as markdown (it is another user's text).

"Rebuild index" starts a build in a background process (:mod:`wikirag.background`) and returns; the page
shows its progress, refreshing itself while it runs (also after leaving the page and coming back), then its
result. Queries keep being answered from the previous index meanwhile.

A Streamlit page script, not a module to import (importing it runs the page): the router registers
it with st.navigation and Streamlit runs it top to bottom on every rerun (see ``wikirag.webapp``).
"""

import datetime as dt
import time

import streamlit as st

from wikirag import background, catalog, feedback
from wikirag.errors import NotFound, WikiragError
from wikirag.webapp import ui

user = ui.require_user()
ws = ui.workspace()
params = st.query_params
REFRESH_SECONDS = 1.0  # how often the page refreshes while a background build runs
WATCH_SECONDS = 3.0  # how long the page that starts a build watches it before leaving it to the refresh
RECENT_SECONDS = 900  # a build that ended this long ago is no longer shown
LIVE_SECONDS = 2.0  # with the app watching: how often the wikis table refreshes ("updated N s ago")
GAPS_SHOWN = 50  # the newest questions a wiki's view lists (`wikirag gaps NAME` lists them all)
# the index's state in words: colour emoji rendered as blank boxes in Debian's Chromium (no emoji font), and
# a table cell cannot hold Streamlit's icons
STATE_ICON = {"fresh": "fresh", "stale": "stale: rebuild", "missing": "missing: build it",
              "incompatible": "incompatible: rebuild"}
KIND_WORDS = {"refused": "refused", "unsupported": "unsupported citation", "down": "voted down"}

# the cited characters: highlighted where they are in the page, and the page scrolled to them once they render
CITED = """<style>.st-key-cited {background: rgba(255, 164, 33, 0.16); border-left: 0.3rem solid rgb(255, 164, 33);
padding: 0.4rem 0.8rem; border-radius: 0.3rem;}</style>
<script>(function go(n) { const el = document.querySelector(".st-key-cited");
if (el) { el.scrollIntoView({block: "center"}); } else if (n < 100) { setTimeout(() => go(n + 1), 100); } })(0);</script>"""


def show_page(wiki: str, path: str) -> None:
    try:
        view = catalog.read_page(ws, wiki, path, user.clearance, user.name)
    except NotFound:
        st.error("That page does not exist, or you may not see it.")
        st.page_link(ui.PORTAL, label="Back to the knowledge base", icon=":material/arrow_back:")
        return
    st.page_link(ui.PORTAL, label=f"{view.wiki}", icon=":material/arrow_back:",
                 query_params={"wiki": view.wiki})
    st.title(view.path)
    text, body = view.text, view.body_start
    try:
        start, end = int(params.get("start", -1)), int(params.get("end", -1))
    except ValueError:
        start = end = -1
    if 0 <= start < end <= len(text):
        cut_start, cut_end = max(start, body), max(end, body)
        line = text.count("\n", 0, start) + 1
        st.markdown(ui.linked(view.wiki, view.path, text[body:cut_start]))
        with st.container(key="cited"):  # highlighted in the page's flow, and scrolled into view
            st.caption(f"Cited passage · line {line} · characters {start}–{end}")
            st.markdown(f":orange-background[{' '}]" if cut_start == cut_end
                        else ui.linked(view.wiki, view.path, text[cut_start:cut_end]))
        st.markdown(ui.linked(view.wiki, view.path, text[cut_end:]))
        st.html(CITED, unsafe_allow_javascript=True)  # a fixed script and style, nothing of the page in it
    else:
        st.markdown(ui.linked(view.wiki, view.path, text[body:]))
    show_links(view.wiki, view.path)
    if view.frontmatter:
        with st.expander("Frontmatter"):
            st.json(view.frontmatter)


def show_links(wiki: str, path: str) -> None:
    """The page's links and backlinks; a target you may not open is shown as plain text."""
    found = catalog.page_links(ws, wiki, path, user.clearance, user.name)
    if not found.indexed:
        st.caption("Build this wiki's index to see its links and backlinks.")
        return
    left, right = st.columns(2)
    for column, title, items in ((left, "Links", found.links), (right, "Backlinks", found.backlinks)):
        with column:
            st.subheader(f"{title} ({len(items)})")
            for item in items:
                anchor = f" › {item.anchor}" if item.anchor else ""
                label = (f"{item.to_wiki}/{item.to_path}{anchor} (line {item.line})" if title == "Links"
                         else f"{item.to_wiki}/{item.to_path}:{item.line}")
                if item.to_path is None:
                    st.markdown(f"`{item.text}` (line {item.line}): no page you can open")
                else:
                    st.page_link(ui.PORTAL, label=label, icon=":material/link:",
                                 query_params={"wiki": item.to_wiki, "path": item.to_path})


def show_wiki(name: str) -> None:
    try:
        pages = catalog.wiki_pages(ws, name, user.clearance, user.name)
    except NotFound:
        st.error("That wiki does not exist, or you may not see it.")
        return
    info = next(w for w in catalog.visible_wikis(ws, user.clearance) if w.name == name)
    st.page_link(ui.PORTAL, label="Knowledge base", icon=":material/arrow_back:")
    st.title(info.wiki.manifest.title)
    st.markdown(info.wiki.manifest.description)
    st.caption(f"{info.level} · tags: {', '.join(info.wiki.manifest.tags) or '–'} · "
               f"{STATE_ICON.get(info.status.state, info.status.state)}")
    show_gaps(name)
    for path in pages:
        st.page_link(ui.PORTAL, label=path, icon=":material/description:",
                     query_params={"wiki": name, "path": path})


def show_gaps(name: str) -> None:
    """The questions wiki ``name`` could not answer, for this user (feedback.gaps decides what they may see)."""
    found = feedback.gaps(ws, user.clearance, name)
    with st.container(key="gaps"):
        with st.expander(f"Questions we could not answer ({len(found)})", expanded=params.get("gaps") == "1",
                         icon=":material/help:"):
            if not found:
                st.caption("None so far: refused answers, unsupported citations and answers voted down are "
                           "listed here.")
                return
            st.caption("Per week: " + " · ".join(f"{week}: {n}" for week, n in feedback.weekly(found)))
            for i, g in enumerate(found[:GAPS_SHOWN]):
                with st.container(border=True, key=f"gap-{i}"):
                    st.caption(f"{g.when:%Y-%m-%d %H:%M} UTC · {KIND_WORDS.get(g.kind, g.kind)} · "
                               f"composition {g.composition}")
                    st.text(g.question)  # another user's text: plain, never markdown
                    if g.searched and g.searched != g.question:
                        st.text(f"Searched as: {g.searched}")
                    if g.comment:
                        st.text(f"Comment: {g.comment}")
                    for c in g.cited:
                        where = {"wiki": c.wiki, "path": c.path}
                        if c.start is not None and c.end is not None:
                            where |= {"start": str(c.start), "end": str(c.end)}
                        line = f":{c.line}" if c.line else ""
                        flag = " (unsupported)" if c.n in g.unsupported else ""
                        st.page_link(ui.PORTAL, label=f"[{c.n}] {c.wiki}/{c.path}{line}{flag}",
                                     icon=":material/open_in_new:", query_params=where)
            if len(found) > GAPS_SHOWN:
                st.caption(f"and {len(found) - GAPS_SHOWN} older: `wikirag gaps {name}` lists them all")


def show_gaps_summary(wikis: list[catalog.WikiInfo]) -> None:
    """How many questions each wiki this user may see could not answer; each opens the wiki's list."""
    counts: dict[str, int] = {}
    for g in feedback.gaps(ws, user.clearance):
        counts[g.wiki] = counts.get(g.wiki, 0) + 1
    with st.container(key="gaps-summary"):
        st.subheader("Questions we could not answer")
        shown = [w for w in wikis if counts.get(w.name)]
        if not shown:
            st.caption("None so far.")
        for w in shown:
            st.page_link(ui.PORTAL, label=f"{w.name}: {counts[w.name]}", icon=":material/help:",
                         query_params={"wiki": w.name, "gaps": "1"})


def updated(w: catalog.WikiInfo, live) -> str:
    """When the wiki's index last changed ("12 s ago"), or that it is being rebuilt."""
    if live is not None and live.building:
        return "rebuilding…"
    if not w.status.built_at:
        return "never"
    try:
        return ui.ago(time.time() - dt.datetime.fromisoformat(w.status.built_at).timestamp())
    except ValueError:
        return w.status.built_at


def show_wikis() -> list[catalog.WikiInfo]:
    """The wikis (a card each: title link, description, status) and their problems; with the app watching
    (``wikirag app --watch``), refreshed every LIVE_SECONDS with each wiki's "updated N s ago" and the
    watcher's build errors (of the wikis this user may see only)."""
    watcher = ui.live_watcher()

    @st.fragment(run_every=LIVE_SECONDS if watcher is not None else None)
    def table() -> list[catalog.WikiInfo]:
        wikis = catalog.visible_wikis(ws, user.clearance)
        if watcher is not None:
            st.caption(":material/sync: Live: the app rebuilds a wiki within seconds of an edit to its pages.")
        lives = {w.name: watcher.live.get(w.name) if watcher is not None else None for w in wikis}
        # one card per wiki, not a wide table: it wraps to any width (a 10-column table was cut off at
        # 1,400 px and unreadable on a phone), and its title is the one way to open the wiki
        for w in wikis:
            live = lives[w.name]
            with st.container(border=True, key=f"wiki-{w.name}"):
                st.page_link(ui.PORTAL, label=f"{w.wiki.manifest.title} ({w.name})",
                             icon=":material/folder_open:", query_params={"wiki": w.name})
                if w.wiki.manifest.description:
                    st.markdown(w.wiki.manifest.description)
                tags = f" · tags: {', '.join(w.wiki.manifest.tags)}" if w.wiki.manifest.tags else ""
                st.caption(f"{w.level} · {w.status.files} files · {w.status.chunks} passages · updated "
                           f"{updated(w, live)} · index {STATE_ICON.get(w.status.state, w.status.state)} · "
                           f"dense {w.status.dense or '–'}{tags}")
                if live is not None and live.error:
                    st.error(live.error)
                elif w.status.state != "fresh" and not (live is not None and live.building):
                    st.warning(f"index {w.status.state} — {w.status.detail or 'rebuild it'}")
                if live is not None and (live.warning or live.unwatched):
                    st.warning(live.warning or live.unwatched)
                if w.status.level_changed:
                    st.warning(f"level changed since the build ({w.status.level_changed}) — rebuild it")
        return wikis

    return table()


def show_overview() -> None:
    st.title("Knowledge base")
    st.subheader("Wikis")
    wikis = show_wikis()
    st.subheader("Compositions")
    for c in catalog.visible_compositions(ws, user.clearance):
        st.markdown(f"**{c.name}** · {c.level}{' · default' if c.spec.default else ''} — {c.spec.description}  \n"
                    f"wikis: {', '.join(w.name for w in c.wikis)}")
    show_gaps_summary(wikis)
    if user.can_build:
        st.subheader("Rebuild")
        names = [w.name for w in wikis]
        name = st.selectbox("Wiki", names)
        force = st.checkbox("Force: re-read and re-chunk every page (as `wikirag build --force`), not only "
                            "the changed ones")
        if st.button("Rebuild index", icon=":material/refresh:") and name:
            rebuild(name, names, force=force)
        show_builds(names)


def rebuild(name: str, visible: list[str], *, force: bool = False) -> None:
    """Start a background build of a wiki this user may see; watch it briefly, so that a build with little
    to do shows its result at once (the page stays interruptible: each update is a Streamlit call)."""
    if name not in visible:
        st.error("That wiki does not exist, or you may not see it.")
        return
    try:
        job = background.start(ws, name, force=force)
    except WikiragError as exc:
        st.error(str(exc))
        return
    slot, deadline = st.empty(), time.monotonic() + WATCH_SECONDS
    while not job.wait(0.2) and time.monotonic() < deadline:
        with slot.container():
            show_build(job)
    slot.empty()  # show_builds shows it from here on


def show_builds(names: list[str]) -> None:
    """The background builds of these wikis that run or ended lately, by whoever started them; refreshed
    every REFRESH_SECONDS while one runs, so leaving the page and coming back shows a build in progress."""
    running = any(job.running for job in recent_builds(names))

    @st.fragment(run_every=REFRESH_SECONDS if running else None)
    def panel() -> None:
        jobs = recent_builds(names)
        for job in jobs:
            show_build(job)
        if running and not any(job.running for job in jobs):
            st.rerun()  # it ended: refresh the status table above, and stop refreshing

    panel()


def recent_builds(names: list[str]) -> list[background.Job]:
    jobs = [background.job(ws, name) for name in names]
    recent = [j for j in jobs if j is not None and (j.running or time.time() - (j.ended or 0) < RECENT_SECONDS)]
    return sorted(recent, key=lambda j: j.started, reverse=True)


def show_build(job: background.Job) -> None:
    if job.running:
        stage, done, total = job.progress
        unit = {"reading": "files", "embedding": "passages"}.get(stage, "")
        with st.status(f"Building {job.wiki}… ({job.elapsed:.0f} s)", state="running", expanded=True):
            st.progress(min(done / total, 1.0) if total else 0.0,
                        text=f"{stage} {done:,}/{total:,} {unit}" if total else f"{stage}…")
    elif job.state == "failed":
        with st.status(f"{job.wiki}: build failed", state="error", expanded=True):
            st.error(job.error)
    else:
        st.status(f"{job.wiki}: {job.state} — {job.files} files, {job.chunks} chunks, {job.seconds:.1f} s "
                  f"(ended {time.strftime('%H:%M:%S', time.localtime(job.ended))})", state="complete")
        for warning in job.warnings:
            st.warning(warning)


if "wiki" in params and "path" in params:
    show_page(params["wiki"], params["path"])
elif "wiki" in params:
    show_wiki(params["wiki"])
else:
    show_overview()
