"""wikirag's web app: a router. Sign in first; then chat, compare and the knowledge-base portal.

``wikirag app`` runs this file (``streamlit run .../wikirag/webapp/router.py``); in a checkout,
``streamlit run app.py`` does the same through :func:`main`. The pages are the package's page scripts,
registered by absolute path (see :mod:`wikirag.webapp`).
"""

from __future__ import annotations

import streamlit as st

from wikirag.webapp import page_file, ui


def main() -> None:
    """One run of the app: the sign-in page only, until a visitor signs in; then the app's pages."""
    st.set_page_config(page_title="wikirag", page_icon=":material/menu_book:", layout="wide")

    ui.warm_up()  # loads the indexes in the background while the visitor signs in
    user = ui.current_user()
    if user is None:
        page = st.navigation([st.Page(page_file("signin"), title="Sign in", icon=":material/login:")],
                             position="hidden")
    else:
        page = st.navigation([
            st.Page(page_file("chat"), title="Chat", icon=":material/chat:", default=True),
            st.Page(page_file("compare"), title="Compare", icon=":material/compare_arrows:"),
            st.Page(ui.PORTAL, title="Knowledge base", icon=":material/menu_book:"),
        ])
        ui.sidebar(user)
    page.run()


if __name__ == "__main__":  # streamlit run wikirag/webapp/router.py
    main()
