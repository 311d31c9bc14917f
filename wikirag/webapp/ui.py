"""Shared pieces of the app's pages: the workspace, the signed-in user, and how results are shown.

Nothing here retrieves or decides access: that is the ``wikirag`` library's job. This module holds
the Streamlit side only: cached resources, the session's user, and rendering.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import streamlit as st

from wikirag import sessions as sessions_mod
from wikirag.errors import AuthError, ConfigError
from wikirag.users import User, UserStore, check_cookie_secret, sso_user
from wikirag.webapp import page_file
from wikirag.workspace import Workspace

if TYPE_CHECKING:
    from streamlit.navigation.page import StreamlitPage

SESSION_HOURS = sessions_mod.SESSION_HOURS  # a sign-in lasts this long, then the user signs in again
PORTAL = str(page_file("portal"))  # the knowledge-base page, as the router registers it (see wikirag.webapp)


@st.cache_resource
def workspace() -> Workspace:
    """One workspace per process (indexes load once and are shared by every session)."""
    return Workspace.locate()


@st.cache_resource
def warm_up() -> threading.Thread:
    """Once per process, in the background: load every index, merged view and embedding model, so the
    first question (typically asked a few seconds after the sign-in page appears) is already fast."""

    # import (and so compile, in a fresh checkout with no .pyc yet) what the thread runs here, in the script's
    # thread: CPython 3.11's compiler is not thread-safe against the ast.parse Streamlit runs on each page
    # ("SystemError: AST constructor recursion depth mismatch", seen once in CI)
    import wikirag.answers
    import wikirag.dense
    import wikirag.embeddings
    import wikirag.retrieval  # noqa: F401

    def load() -> None:
        time.sleep(1.0)  # let the first page render before competing with it for the interpreter
        from wikirag.retrieval import search

        ws = workspace()
        for name in ws.composition_names():
            with contextlib.suppress(Exception):  # a broken composition is reported where it is used
                comp = ws.composition(name)
                search(ws, comp, "warm up", clearance=comp.level, k=1)

    thread = threading.Thread(target=load, name="wikirag-warm-up", daemon=True)
    thread.start()
    return thread


WATCH_ENV = "WIKIRAG_WATCH"  # "1": the app watches the wikis' sources (wikirag app --watch; the Docker default)


@st.cache_resource
def live_watcher():
    """The process's one :class:`wikirag.watch.Watcher` (shared by every session) when the app was started
    with ``--watch``, else None. Its builds run in a thread of this process (a wiki without an index yet:
    in a background process), its lines go to the server's log."""
    import logging
    import os

    if os.environ.get(WATCH_ENV, "") not in ("1", "true", "yes"):
        return None
    from wikirag import watch

    logger = logging.getLogger("wikirag.watch")
    logger.setLevel(logging.INFO)
    if not logger.handlers:  # one line per rebuild on the server's stderr, as `wikirag watch` prints them
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s wikirag watch: %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
    return watch.start_in_thread(workspace(), full_builds_in_background=True)


@st.cache_resource
def user_store() -> UserStore:
    return UserStore.for_home(workspace().home)


def sso_configured() -> bool:
    """True when ``[auth]`` is set in ``.streamlit/secrets.toml`` (Streamlit's OIDC sign-in). A cookie
    secret that is missing, short or an example stops the app with the fix."""
    try:
        auth = st.secrets.get("auth") if "auth" in st.secrets else None
    except Exception:  # noqa: BLE001 - no secrets file at all
        return False
    if auth is None:
        return False
    try:
        check_cookie_secret(auth.get("cookie_secret"))
    except ConfigError as exc:
        st.error(f"Single sign-on is misconfigured: {exc}")
        st.stop()
    return True


@st.cache_resource(show_spinner=False)
def session_store() -> sessions_mod.SessionStore:
    return sessions_mod.SessionStore(workspace().home)


@st.cache_resource(show_spinner=False)
def conversation_store():
    """The users' kept conversations, beside the sessions (:mod:`wikirag.conversations`)."""
    from wikirag.conversations import ConversationStore

    return ConversationStore(workspace().home)


def current_user() -> User | None:
    """The session's user: signed in with a password (in this browser session, or in an earlier one whose
    cookie names a live server-side session: a reload, another tab, a shared link), or through single
    sign-on. Expired → None."""
    user, since = st.session_state.get("user"), st.session_state.get("signed_in_at", 0.0)
    if user is not None and time.time() - since > SESSION_HOURS * 3600:
        sign_out()
        return None
    if user is None and not st.session_state.get("signed_out"):
        token = _cookie()
        restored = session_store().user(token, user_store()) if token else None
        if restored is not None:
            sign_in(restored[0], token=token, started=restored[1])
            return restored[0]
    if user is None and sso_configured() and getattr(st.user, "is_logged_in", False):
        try:
            user = sso_user(str(st.user.get("email", "")), workspace().home)
        except AuthError as exc:
            st.error(str(exc))
            return None
        sign_in(user)
    return user


def sign_in(user: User, token: str | None = None, started: float | None = None) -> None:
    """Sign ``user`` in for this browser session; ``token`` names the server-side session (a password
    sign-in: :mod:`wikirag.sessions`) that the browser's cookie keeps across reloads."""
    st.session_state.clear()  # nothing from before the sign-in survives it
    st.session_state["user"] = user
    st.session_state["signed_in_at"] = time.time() if started is None else started
    st.session_state["session_token"] = token


def sign_out() -> None:
    """End the sign-in: every server-side session of the user (in every browser), and this one's cookie."""
    user = st.session_state.get("user")
    st.session_state.clear()
    if user is not None and user.via != "sso":
        session_store().end_all(user.name)
    st.session_state["signed_out"] = True  # the cookie this page was loaded with is no sign-in any more
    if user is not None and user.via == "sso":
        st.logout()


# the session cookie, set or cleared by a fixed script (Streamlit cannot set response headers): the token is
# url-safe base64, nothing else of the session goes into it
_COOKIE_JS = ('<script>document.cookie = "{name}={value}; Path=/; Max-Age={age}; SameSite=Strict"'
              ' + (location.protocol === "https:" ? "; Secure" : "");</script>')


def _cookie() -> str | None:
    """The session cookie this page was loaded with (None outside a browser, e.g. in AppTest)."""
    value = st.context.cookies.get(sessions_mod.COOKIE)
    return value if isinstance(value, str) else None


def session_cookie() -> None:
    """Keep the browser's cookie in step with the session: set it after a sign-in, clear it after a
    sign-out or when it names no live session (called on every run by the router)."""
    have = _cookie()
    token = st.session_state.get("session_token") if st.session_state.get("user") is not None else None
    if token and have != token and re.fullmatch(r"[A-Za-z0-9_-]+", token):
        st.html(_COOKIE_JS.format(name=sessions_mod.COOKIE, value=token, age=int(SESSION_HOURS * 3600)),
                unsafe_allow_javascript=True)
    elif not token and have:
        st.html(_COOKIE_JS.format(name=sessions_mod.COOKIE, value="", age=0), unsafe_allow_javascript=True)


def require_user() -> User:
    """The signed-in user; a page run without one shows nothing."""
    user = current_user()
    if user is None:
        st.warning("Please sign in.")
        st.stop()
    return user


def ago(seconds: float) -> str:
    """``12 s ago``, ``5 min ago``, ``3 h ago``, ``2 days ago``."""
    seconds = max(seconds, 0)
    if seconds < 90:
        return f"{seconds:.0f} s ago"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min ago"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.0f} h ago"
    return f"{seconds / 86400:.0f} days ago"


def default_model() -> str:
    import os

    from wikirag.answers import DEFAULT_MODEL, MODEL_ENV

    return os.environ.get(MODEL_ENV) or DEFAULT_MODEL


def sidebar(user: User, pages: Sequence[StreamlitPage] = ()) -> None:
    """Who is signed in, links to the app's pages (Streamlit's own navigation is hidden: see the router),
    and the sign-out button."""
    with st.sidebar:
        st.markdown(f"Signed in as **{user.name}**  \nclearance: `{user.clearance}`")
        for page in pages:
            st.page_link(page)
        st.button("Sign out", icon=":material/logout:", on_click=sign_out)


def passage_link(p, key: str) -> None:
    """A link to the passage's page in the portal, with the cited characters highlighted (none for a
    passage whose text is no longer in its file)."""
    if not p.wiki:  # a composition's own file (a question about the knowledge base): not a wiki page
        st.caption(f"From the composition file {p.path}, line {p.line}.")
        return
    if p.path == ".wiki.yaml":  # a wiki's manifest: its page in the portal
        st.page_link(PORTAL, label=f"Open wiki {p.wiki}", icon=":material/open_in_new:", query_params={"wiki": p.wiki})
        return
    if getattr(p, "state", "current") == "changed":
        st.caption("This passage changed in its file since the index was built: rebuild the wiki to cite it.")
        return
    if p.state == "moved":
        st.caption("Moved in its file since the index was built: the link opens where it is now.")
    st.page_link(PORTAL, label=f"Open {p.wiki}/{p.path}:{p.line}", icon=":material/open_in_new:",
                 query_params={"wiki": p.wiki, "path": p.path, "start": str(p.start), "end": str(p.end)})


def linked(wiki: str, path: str, text: str) -> str:
    """``text`` of a page or passage with its wikilinks and page links pointing at the pages' views in the
    portal, for the signed-in user (:func:`wikirag.catalog.linked_markdown`)."""
    from wikirag import catalog

    user = current_user()
    return catalog.linked_markdown(workspace(), wiki, path, text, user.clearance if user else "public")


def via_text(p) -> str:
    """How the graph layer reached a passage: each link followed, where it is, and where it leads."""
    steps = [f"`{hop.link.replace('`', '')}` on {hop.wiki}/{hop.path}:{hop.line} → {hop.to_wiki}/{hop.to_path}"
             for hop in p.via]  # the link as code: its markup is shown, never followed
    return "Reached through " + ", then ".join(steps)


def show_passage(p, n: int, key: str) -> None:
    from wikirag.prompt import label

    st.caption(f"[{n}] {label(p)}")
    if p.via:
        st.caption(via_text(p))
    with st.container(border=True):
        # a passage is a fragment of a page: its headings are shown small, not as page titles
        if not p.wiki or p.path.endswith((".yaml", ".yml")):  # a composition's or wiki's own description
            st.code(p.text, language="yaml", wrap_lines=True)
        else:
            st.markdown(linked(p.wiki, p.path, re.sub(r"^ {0,3}#{1,6}(?=\s)", "#####", p.text, flags=re.MULTILINE)))
    passage_link(p, key)


def show_result(result, key: str) -> None:
    """Citations (each opens its passage), the passages, errors and timings of an answer."""
    if result.error:
        st.error(f"The model failed: {result.error}. The passages it was given are below.")
    for warning in result.warnings:
        st.warning(warning)
    if result.invalid_citations:
        st.warning(f"The answer cites {result.invalid_citations}, which name no passage.")
    if result.unsupported_citations:
        st.warning(f"The answer cites {result.unsupported_citations} for statements those passages do not hold: "
                   "check them.")
    cited = {c.n for c in result.citations}
    if result.citations:
        columns = st.columns(min(len(result.citations), 5))
        for i, c in enumerate(result.citations):
            p = result.passages[c.n - 1]
            where = f"{p.wiki}/{p.path}" if p.wiki else p.path
            with columns[i % len(columns)].popover(f"[{c.n}] {where}:{p.line}", width="stretch"):
                show_passage(p, c.n, f"{key}-pop-{c.n}")
        for c in result.citations:  # a hop is shown under the citations, not only inside the passage
            if c.passage.via:
                st.caption(f"[{c.n}] {via_text(c.passage)}")
    if result.passages:
        with st.expander(f"All {len(result.passages)} passages ({len(cited)} cited)"):
            for n, p in enumerate(result.passages, start=1):
                show_passage(p, n, f"{key}-all-{n}")
    st.caption(f"retrieval {result.retrieval_seconds * 1000:.0f} ms · generation "
               f"{result.generation_seconds:.2f} s · {result.model}"
               + (f" · {result.prompt_tokens}+{result.completion_tokens} tokens" if result.prompt_tokens else ""))
