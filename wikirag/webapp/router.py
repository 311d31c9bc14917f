"""wikirag's web app: a router. Sign in first; then chat, compare and the knowledge-base portal.

``wikirag app`` runs this file (``streamlit run .../wikirag/webapp/router.py``); in a checkout,
``streamlit run app.py`` does the same through :func:`main`. The pages are the package's page scripts,
registered by absolute path (see :mod:`wikirag.webapp`).

Before sign-in a visitor gets the sign-in page and nothing else, whatever the URL: the sign-in page is
registered at ``/`` and also at each of the app's page URLs (``/chat``, ``/compare``, ``/portal``,
``/signin``), so ``/portal?wiki=…`` shows the sign-in form there (and, once signed in, the same URL serves
the portal page; ``/signin`` then goes to ``/chat``; ``/`` serves the chat too). Any other URL gets the
sign-in page too, with Streamlit's generic "page not found" notice (as it would signed in). Streamlit's own page navigation is never shown
(``position="hidden"``, and ``[client] showSidebarNavigation = false`` in the settings, which also hides
the list of a checkout's ``pages/`` folder that Streamlit would otherwise send on a process's first run);
signed-in users get the page links in the sidebar (:func:`wikirag.webapp.ui.sidebar`).
"""

from __future__ import annotations

import streamlit as st

from wikirag.webapp import page_file, ui

# the pages of a signed-in user: (page script, title, icon); the first is the default (URL /)
APP_PAGES = (("chat", "Chat", ":material/chat:"), ("compare", "Compare", ":material/compare_arrows:"),
             ("portal", "Knowledge base", ":material/menu_book:"))
# where a signed-out visitor gets the sign-in form (without Streamlit's "page not found"): the app's URLs
SIGNED_OUT_URLS = (*(name for name, _, _ in APP_PAGES), "signin")


def main() -> None:
    """One run of the app: the sign-in page only, until a visitor signs in; then the app's pages."""
    st.set_page_config(page_title="wikirag", page_icon=":material/menu_book:", layout="wide")

    ui.warm_up()  # loads the indexes in the background while the visitor signs in
    ui.live_watcher()  # with --watch: the process's watcher, started once
    user = ui.current_user()
    ui.session_cookie()
    if user is None:
        signin = page_file("signin")
        # every page of the signed-out navigation is the sign-in page, titled so (the tab names no other page);
        # the default one is served at / (its url_path only reserves a name, /welcome is "page not found")
        page = st.navigation(
            [st.Page(signin, title="Sign in", icon=":material/login:", default=True, url_path="welcome")]
            + [st.Page(signin, title="Sign in", icon=":material/login:", url_path=name) for name in SIGNED_OUT_URLS],
            position="hidden")
    else:
        pages = [st.Page(page_file(name), title=title, icon=icon, url_path=name) for name, title, icon in APP_PAGES]
        # the first page is served at / by a hidden default page of the same script: Streamlit serves a
        # default page at / only, so /chat (a bookmark, the URL a visitor signed in at, a second app process
        # reached with the session cookie) would be "page not found" (its url_path only reserves a name)
        name, title, icon = APP_PAGES[0]
        home = st.Page(page_file(name), title=title, icon=icon, default=True, url_path="home", visibility="hidden")
        signed_in = st.Page(page_file("signin"), title="Sign in", url_path="signin", visibility="hidden")
        page = st.navigation([home, *pages, signed_in], position="hidden")
        if page.url_path == signed_in.url_path:  # signed in at /signin: go to the app
            st.switch_page(pages[0])
        ui.sidebar(user, pages)
    page.run()


if __name__ == "__main__":  # streamlit run wikirag/webapp/router.py
    main()
